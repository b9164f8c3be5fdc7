//! `FixedBuf`: a frozen, shareable buffer.

use core::fmt;
use core::ops::{Bound, Deref, RangeBounds};
use core::ptr::NonNull;

use crate::ring::{self, Header, WORD};

/// A read-only buffer in ring memory, cloned by a count kept in its region header:
/// `Clone + Send + Sync`, and neither freezing nor cloning allocates. The region is
/// released when the last clone (or slice) drops, on whatever thread that is.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(5).unwrap();
/// buf.try_extend_from_slice(b"hello").unwrap();
/// let frozen = buf.freeze();
/// let tail = frozen.slice(1..);
/// std::thread::spawn(move || assert_eq!(&tail[..], b"ello")).join().unwrap();
/// assert_eq!(&frozen[..], b"hello");
/// ```
pub struct FixedBuf {
    hdr: NonNull<Header>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the bytes are immutable while any handle exists, and the count is atomic.
unsafe impl Send for FixedBuf {}
// SAFETY: as above; `&FixedBuf` only reads.
unsafe impl Sync for FixedBuf {}

impl FixedBuf {
    /// Wraps a region that this new handle holds one count of.
    #[inline]
    pub(crate) fn from_raw(hdr: NonNull<Header>, ptr: NonNull<u8>, len: usize) -> Self {
        FixedBuf { hdr, ptr, len }
    }

    /// Bytes in view.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut b = ring.fixed(4).unwrap();
    /// b.try_extend_from_slice(b"ab").unwrap();
    /// assert_eq!(b.freeze().len(), 2);
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert!(ring.fixed(4).unwrap().freeze().is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A handle to `range` of these bytes, sharing the region (no copy, no allocation).
    ///
    /// # Panics
    /// When the range is out of bounds or decreasing, as slicing `[u8]` does.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut b = ring.fixed(8).unwrap();
    /// b.try_extend_from_slice(b"abcdef").unwrap();
    /// let f = b.freeze();
    /// assert_eq!(&f.slice(2..4)[..], b"cd");
    /// assert_eq!(&f.slice(..=1)[..], b"ab");
    /// ```
    pub fn slice(&self, range: impl RangeBounds<usize>) -> FixedBuf {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.checked_add(1).expect("range start overflows"),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1).expect("range end overflows"),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        assert!(start <= end, "slice start {start} is after its end {end}");
        assert!(
            end <= self.len,
            "slice end {end} is out of bounds of a buffer of {}",
            self.len
        );
        let mut s = self.clone();
        // SAFETY: `start <= end <= len`, so the pointer stays inside this view.
        s.ptr = unsafe { NonNull::new_unchecked(s.ptr.as_ptr().add(start)) };
        s.len = end - start;
        s
    }

    /// Splits off the first `at` bytes as a new handle; `self` keeps the rest.
    ///
    /// # Panics
    /// When `at > self.len()`.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut b = ring.fixed(8).unwrap();
    /// b.try_extend_from_slice(b"headbody").unwrap();
    /// let mut body = b.freeze();
    /// let head = body.split_to(4);
    /// assert_eq!((&head[..], &body[..]), (&b"head"[..], &b"body"[..]));
    /// ```
    pub fn split_to(&mut self, at: usize) -> FixedBuf {
        let head = self.slice(..at);
        // SAFETY: `at <= len` (checked by `slice`).
        self.ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(at)) };
        self.len -= at;
        head
    }
}

impl FixedBuf {
    /// Drops the first `n` bytes from view without touching the count (the framed
    /// reader's cursor over a region it has yielded frames from).
    #[cfg(real_std)]
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        assert!(n <= self.len, "skip({n}) past a view of {}", self.len);
        // SAFETY: `n <= len`, so the pointer stays inside this view.
        self.ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(n)) };
        self.len -= n;
    }
}

impl Clone for FixedBuf {
    #[inline]
    fn clone(&self) -> Self {
        // SAFETY: `self` holds a count, so the region is alive.
        unsafe { ring::retain_shared(self.hdr) };
        FixedBuf {
            hdr: self.hdr,
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl Drop for FixedBuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this handle's count goes away with it; byte buffers use WORD alignment.
        unsafe { ring::release_shared(self.hdr, WORD) }
    }
}

impl Deref for FixedBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the view lies inside the region, initialised, and immutable while
        // any handle exists.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for FixedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for FixedBuf {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl Eq for FixedBuf {}

impl PartialEq<[u8]> for FixedBuf {
    fn eq(&self, other: &[u8]) -> bool {
        self[..] == *other
    }
}

impl fmt::Debug for FixedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedBuf").field("len", &self.len).finish()
    }
}
