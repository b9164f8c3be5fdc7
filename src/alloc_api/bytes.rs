//! Bytes appended to allocator-api2's `Vec<u8, A>` with one copy.
//!
//! allocator-api2's `Vec::extend_from_slice`, and the `io::Write` it implements with
//! it, extend from an iterator of cloned bytes: `std` specialises that into a copy, but
//! a crate on stable Rust cannot, so every byte is pushed on its own. [`ExtendBytes`]
//! reserves once and copies once, as `std`'s `Vec` does.

use crate::AllocError;

mod sealed {
    /// Only the vectors below implement [`ExtendBytes`](super::ExtendBytes).
    pub trait Sealed {}
}

/// Appends bytes to an allocator-api2 `Vec<u8, A>` (0.2, and 0.4 with the feature
/// `allocator-api2-04`) with one copy, as `std`'s `Vec` does.
///
/// allocator-api2's own `extend_from_slice`, and its `io::Write`, push the bytes one by
/// one on stable Rust, some fifty times slower for a kilobyte (the `bytes` group of
/// `cargo bench -p ringmem-micro --bench alloc_api`). These reserve the room once and
/// copy into it; nothing else differs. [`byte_writer`](Self::byte_writer) is an
/// `io::Write` that appends this way, and says when the allocator has no room (a ring
/// that fails when full) with an error instead of ending the process.
///
/// ```
/// use ringmem::allocator_api2::vec::Vec;
/// use ringmem::{ExtendBytes, Ring};
///
/// let ring = Ring::new(1 << 16);
/// let mut v = Vec::new_in(&ring);
/// v.extend_bytes(b"on the ");
/// v.try_extend_bytes(b"ring").unwrap();
/// assert_eq!(&v[..], b"on the ring");
/// ```
pub trait ExtendBytes: sealed::Sealed {
    /// Appends `bytes`; panics or ends the process where `reserve` would (capacity
    /// overflow, the allocator out of room).
    ///
    /// ```
    /// use ringmem::{allocator_api2::vec::Vec, ExtendBytes, RingAlloc};
    /// let mut v = Vec::new_in(RingAlloc::with_capacity(4096));
    /// v.extend_bytes(&[7; 1000]);
    /// assert_eq!(v.len(), 1000);
    /// ```
    fn extend_bytes(&mut self, bytes: &[u8]);

    /// Appends `bytes`, or returns [`AllocError`] (the capacity that was needed) and
    /// leaves the vector as it was when its allocator has no room for them.
    ///
    /// ```
    /// use ringmem::{allocator_api2::vec::Vec, ExtendBytes, Ring, WhenFull};
    /// let ring = Ring::builder().capacity(4096).when_full(WhenFull::Fail).build().unwrap();
    /// let mut v = Vec::new_in(&ring);
    /// v.try_extend_bytes(b"header").unwrap();
    /// assert_eq!(v.try_extend_bytes(&[0; 8192]).unwrap_err().requested, 8198);
    /// assert_eq!(&v[..], b"header");
    /// ```
    fn try_extend_bytes(&mut self, bytes: &[u8]) -> Result<(), AllocError>;

    /// An `io::Write` that appends with [`try_extend_bytes`](Self::try_extend_bytes).
    ///
    /// ```
    /// use std::io::Write;
    /// use ringmem::{allocator_api2::vec::Vec, ExtendBytes, Ring};
    /// let ring = Ring::new(1 << 16);
    /// let mut v = Vec::new_in(&ring);
    /// write!(v.byte_writer(), "{} frames", 3).unwrap();
    /// assert_eq!(&v[..], b"3 frames");
    /// ```
    #[cfg(feature = "std")]
    fn byte_writer(&mut self) -> ByteWriter<'_, Self> {
        ByteWriter { vec: self }
    }
}

/// An `io::Write` that appends to an allocator-api2 `Vec<u8, A>` with one copy a write
/// ([`ExtendBytes::byte_writer`]). A write the allocator has no room for fails with
/// [`io::ErrorKind::OutOfMemory`](std::io::ErrorKind::OutOfMemory), its error an
/// [`AllocError`], and appends nothing.
///
/// ```
/// use std::io::{ErrorKind, Write};
/// use ringmem::{allocator_api2::vec::Vec, ExtendBytes, Ring, WhenFull};
/// let ring = Ring::builder().capacity(4096).when_full(WhenFull::Fail).build().unwrap();
/// let mut v = Vec::new_in(&ring);
/// let mut w = v.byte_writer();
/// w.write_all(b"fits").unwrap();
/// assert_eq!(w.write_all(&[0; 8192]).unwrap_err().kind(), ErrorKind::OutOfMemory);
/// assert_eq!(&v[..], b"fits");
/// ```
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
#[derive(Debug)]
pub struct ByteWriter<'a, V: ?Sized> {
    vec: &'a mut V,
}

#[cfg(feature = "std")]
impl<V: ExtendBytes + ?Sized> std::io::Write for ByteWriter<'_, V> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        (self.vec.try_extend_bytes(buf))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))
    }

    #[inline]
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Implements [`ExtendBytes`] for `Vec<u8, A>` of one allocator-api2 version.
macro_rules! extend_bytes_for {
    ($($vec:ident)::+, $($alloc:ident)::+) => {
        impl<A: $($alloc)::+> sealed::Sealed for $($vec)::+<u8, A> {}

        impl<A: $($alloc)::+> ExtendBytes for $($vec)::+<u8, A> {
            #[inline]
            fn extend_bytes(&mut self, bytes: &[u8]) {
                self.reserve(bytes.len());
                // Only a copy left: the room is there.
                let copied = self.try_extend_bytes(bytes);
                debug_assert!(copied.is_ok(), "room for {} bytes reserved", bytes.len());
            }

            #[inline]
            fn try_extend_bytes(&mut self, bytes: &[u8]) -> Result<(), AllocError> {
                let (len, n) = (self.len(), bytes.len());
                self.try_reserve(n).map_err(|_| AllocError {
                    requested: len.saturating_add(n),
                })?;
                // SAFETY: `try_reserve` left room for `n` more bytes past `len` in the
                // vector's buffer, which `bytes` cannot overlap (the vector is borrowed
                // mutably); the copy initialises them before `set_len` counts them.
                unsafe {
                    core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.as_mut_ptr().add(len), n);
                    self.set_len(len + n);
                }
                Ok(())
            }
        }
    };
}

extend_bytes_for!(allocator_api2::vec::Vec, allocator_api2::alloc::Allocator);
#[cfg(feature = "allocator-api2-04")]
extend_bytes_for!(
    allocator_api2_04::vec::Vec,
    allocator_api2_04::alloc::Allocator
);
