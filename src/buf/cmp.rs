//! Equality, ordering and hashing of the byte buffers, exactly as `[u8]`'s: a frame
//! compares with a literal or a `Vec<u8>` from either side (as `bytes::Bytes` does),
//! sorts as its bytes, and is a map key looked up by `&[u8]` (`Borrow<[u8]>` is sound
//! because `Eq`, `Ord` and `Hash` all agree with the borrowed slice's).

use alloc::string::String;
use alloc::vec::Vec;
use core::borrow::{Borrow, BorrowMut};
use core::cmp::Ordering;
use core::hash::{Hash, Hasher};

use super::{FixedBuf, FixedBufMut};

/// `$t == $other`, `$other == $t` and the same for `PartialOrd`, by their bytes.
macro_rules! both_ways {
    ($t:ty; [$($g:tt)*] $other:ty) => {
        impl<$($g)*> PartialEq<$other> for $t {
            #[inline]
            fn eq(&self, other: &$other) -> bool {
                self[..] == other[..]
            }
        }

        impl<$($g)*> PartialOrd<$other> for $t {
            #[inline]
            fn partial_cmp(&self, other: &$other) -> Option<Ordering> {
                self[..].partial_cmp(&other[..])
            }
        }

        reverse!($t; [$($g)*] $other);
    };
}

/// `$other == $t` and `$other < $t`, by their bytes (the other way round comes from the
/// blanket `&T` impl below).
macro_rules! reverse {
    ($t:ty; [$($g:tt)*] $other:ty) => {
        impl<$($g)*> PartialEq<$t> for $other {
            #[inline]
            fn eq(&self, other: &$t) -> bool {
                self[..] == other[..]
            }
        }

        impl<$($g)*> PartialOrd<$t> for $other {
            #[inline]
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                self[..].partial_cmp(&other[..])
            }
        }
    };
}

/// Every comparison of a byte buffer type, and `Hash` and `Borrow<[u8]>`.
macro_rules! as_bytes {
    ($t:ty) => {
        impl PartialEq for $t {
            #[inline]
            fn eq(&self, other: &Self) -> bool {
                self[..] == other[..]
            }
        }

        impl Eq for $t {}

        impl PartialOrd for $t {
            #[inline]
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $t {
            #[inline]
            fn cmp(&self, other: &Self) -> Ordering {
                self[..].cmp(&other[..])
            }
        }

        /// Hashes as the `[u8]` it holds, so that lookups by `&[u8]` find it.
        impl Hash for $t {
            #[inline]
            fn hash<H: Hasher>(&self, state: &mut H) {
                self[..].hash(state);
            }
        }

        /// The bytes, for map and set lookups by `&[u8]`.
        impl Borrow<[u8]> for $t {
            #[inline]
            fn borrow(&self) -> &[u8] {
                self
            }
        }

        both_ways!($t; [] [u8]);
        both_ways!($t; [] Vec<u8>);
        both_ways!($t; [const N: usize] [u8; N]);
        reverse!($t; ['a] &'a [u8]);
        reverse!($t; ['a, const N: usize] &'a [u8; N]);

        /// Compares with anything the buffer compares with, behind a reference
        /// (`&[u8]`, `&[u8; N]`, `&Vec<u8>`), as `bytes::Bytes` does.
        impl<T: ?Sized> PartialEq<&T> for $t
        where
            $t: PartialEq<T>,
        {
            #[inline]
            fn eq(&self, other: &&T) -> bool {
                *self == **other
            }
        }

        /// Orders against anything the buffer orders against, behind a reference.
        impl<T: ?Sized> PartialOrd<&T> for $t
        where
            $t: PartialOrd<T>,
        {
            #[inline]
            fn partial_cmp(&self, other: &&T) -> Option<Ordering> {
                self.partial_cmp(*other)
            }
        }
    };
}

/// `$t == $other` and `$other == $t`, and the orderings, for a text type (`str`,
/// `String`): by its UTF-8 bytes, as `bytes::Bytes` compares.
macro_rules! as_text {
    ($t:ty; [$($g:tt)*] $other:ty) => {
        impl<$($g)*> PartialEq<$other> for $t {
            #[inline]
            fn eq(&self, other: &$other) -> bool {
                self[..] == *other.as_bytes()
            }
        }

        impl<$($g)*> PartialOrd<$other> for $t {
            #[inline]
            fn partial_cmp(&self, other: &$other) -> Option<Ordering> {
                self[..].partial_cmp(other.as_bytes())
            }
        }

        text_reverse!($t; [$($g)*] $other);
    };
}

/// `$other == $t` and `$other < $t` for a text type (the other way round comes from
/// the blanket `&T` impl for `&str`).
macro_rules! text_reverse {
    ($t:ty; [$($g:tt)*] $other:ty) => {
        impl<$($g)*> PartialEq<$t> for $other {
            #[inline]
            fn eq(&self, other: &$t) -> bool {
                *self.as_bytes() == other[..]
            }
        }

        impl<$($g)*> PartialOrd<$t> for $other {
            #[inline]
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                self.as_bytes().partial_cmp(&other[..])
            }
        }
    };
}

as_bytes!(FixedBuf);
as_bytes!(FixedBufMut);
both_ways!(FixedBuf; [] FixedBufMut);
as_text!(FixedBuf; [] str);
as_text!(FixedBufMut; [] str);
as_text!(FixedBuf; [] String);
as_text!(FixedBufMut; [] String);
text_reverse!(FixedBuf; ['a] &'a str);
text_reverse!(FixedBufMut; ['a] &'a str);

/// The bytes, mutable, as `Vec<u8>` lends them.
impl BorrowMut<[u8]> for FixedBufMut {
    #[inline]
    fn borrow_mut(&mut self) -> &mut [u8] {
        self
    }
}
