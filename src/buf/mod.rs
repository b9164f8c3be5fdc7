//! The buffer handles on the ring, and the `Ring` methods that make them.

mod cmp;
mod debug;
mod ext;
mod fixed;
mod fixed_mut;
mod from;
mod typed;
#[cfg(feature = "std")]
mod wait;
#[cfg(feature = "std")]
mod writer;

use core::fmt;
use core::mem;

pub(crate) use ext::ExtParts;
pub use ext::{BorrowsRing, ExtBuf};
pub use fixed::FixedBuf;
pub use fixed_mut::FixedBufMut;
pub use typed::TypedBuf;
// Used by `tls` and the framed readers.
#[cfg(real_std)]
pub(crate) use wait::hopeless;
#[cfg(feature = "std")]
pub(crate) use wait::{hopeless_aligned, need as wait_need, typed_bytes, typed_need};
#[cfg(feature = "std")]
pub use wait::{ExtWait, Reserve, Wait, WaitError};
#[cfg(feature = "std")]
pub use writer::WaitWriter;

use crate::ring::{Ring, HDR, MAX_ALIGN, WORD};

/// The capacity an extendable buffer starts with at least (see [`Ring::extendable`]).
const EXT_START: usize = 64;

/// A write did not fit in a fixed-capacity buffer.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// let err = buf.try_extend_from_slice(&[0; 9]).unwrap_err();
/// assert_eq!((err.requested, err.available), (9, 8));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityError {
    /// Bytes the write needed.
    pub requested: usize,
    /// Bytes that were free.
    pub available: usize,
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes do not fit in the {} bytes left",
            self.requested, self.available
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CapacityError {}

/// Memory could not be had: the crate's one error for a refused allocation, returned by
/// the `try_` methods. A growing buffer gets it when its ring cannot serve the new
/// capacity; a [pool](crate::slab) when the system allocator refuses a new page
/// (`ringmem::slab::AllocError` is this type).
///
/// ```
/// let ring = ringmem::Ring::new(64);
/// let mut ext = ring.extendable(0).unwrap();
/// assert_eq!(ext.try_reserve(1000).unwrap_err().requested, 1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocError {
    /// The total capacity that was needed, in bytes.
    pub requested: usize,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot allocate {} bytes", self.requested)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}

impl Ring {
    /// A writable buffer of at least `n` bytes (rounded up to a multiple of 8), or
    /// `None` when `n` is 0 or the ring cannot serve it under its policy.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(1024);
    /// let buf = ring.fixed(100).unwrap();
    /// assert_eq!(buf.capacity(), 104);
    /// assert!(ring.fixed(0).is_none());
    /// assert!(ring.fixed(usize::MAX).is_none());
    /// assert!(ring.fixed(4096).is_none()); // larger than the ring
    /// ```
    #[inline]
    pub fn fixed(&self, n: usize) -> Option<FixedBufMut> {
        if n == 0 {
            return None;
        }
        let c = self.claim(n, WORD, 1)?;
        Some(FixedBufMut::from_claim(c, 0))
    }

    /// A growable buffer with room for `n` bytes to start with (0 is fine), or `None`
    /// when the ring cannot serve it. It starts with room for at least 64 bytes (when
    /// the ring's blocks hold that much), so that a first small write does not move it,
    /// and a ring without room for 64 bytes says so at once rather than at that write.
    ///
    /// ```
    /// use std::io::Write;
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(0).unwrap();
    /// assert_eq!(ext.capacity(), 64);
    /// ext.write_all(&[7; 300]).unwrap();
    /// assert_eq!(ext.len(), 300);
    /// ```
    #[inline]
    pub fn extendable(&self, n: usize) -> Option<ExtBuf<'_>> {
        let n = if n < EXT_START && HDR + EXT_START <= self.block_len() {
            EXT_START
        } else {
            n
        };
        let c = self.claim(n, WORD, 1)?;
        Some(ExtBuf::from_claim(self, c))
    }

    /// A fixed-capacity vector of at least `n` values of `T`, aligned for `T`; `None`
    /// when `n` is 0, `n * size_of::<T>()` overflows, `T`'s alignment exceeds 4096, or
    /// the ring cannot serve it. Zero-sized `T` needs no ring memory.
    ///
    /// ```
    /// #[repr(align(64))]
    /// struct Line(#[allow(dead_code)] [u8; 64]);
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<Line>(2).unwrap();
    /// v.push(Line([1; 64])).ok().unwrap();
    /// assert_eq!(v.as_ptr() as usize % 64, 0);
    /// assert!(ring.typed::<u64>(usize::MAX / 4).is_none());
    /// assert_eq!(ring.typed::<()>(1000).unwrap().capacity(), 1000);
    /// ```
    #[doc(alias = "generic")] // ringal's name
    #[inline]
    pub fn typed<T>(&self, n: usize) -> Option<TypedBuf<T>> {
        if n == 0 || mem::align_of::<T>() > MAX_ALIGN {
            return None;
        }
        if mem::size_of::<T>() == 0 {
            return Some(TypedBuf::from_claim(None, n));
        }
        let bytes = n.checked_mul(mem::size_of::<T>())?;
        let c = self.claim(bytes, mem::align_of::<T>().max(WORD), 1)?;
        Some(TypedBuf::from_claim(Some(c), n))
    }
}
