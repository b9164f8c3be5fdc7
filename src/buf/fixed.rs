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
///
/// It compares, orders and hashes as the `[u8]` it holds, with byte slices, arrays and
/// `Vec<u8>` on either side of `==`, so frames can key a map looked up by `&[u8]`;
/// `Debug` prints the bytes as `b"..."`:
///
/// ```
/// use std::collections::HashMap;
/// let ring = ringmem::Ring::new(4096);
/// let mut b = ring.fixed(8).unwrap();
/// b.try_extend_from_slice(b"GET /\r\n").unwrap();
/// let frame = b.freeze();
/// assert!(frame == b"GET /\r\n" && b"GET /\r\n"[..] == frame);
/// assert!(frame < b"PUT"[..] && frame > Vec::from("DELETE"));
/// assert_eq!(format!("{frame:?}"), r#"b"GET /\r\n""#);
///
/// let mut routes = HashMap::new();
/// routes.insert(frame, 1);
/// assert_eq!(routes.get(&b"GET /\r\n"[..]), Some(&1));
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

    /// Bytes of the region this handle views, its header included (all of them,
    /// whatever part is in view).
    #[cfg(real_std)]
    #[inline]
    pub(crate) fn region_span(&self) -> usize {
        ring::region_span(self.hdr)
    }

    /// Whether the region is a slot of a page of slots (see `ring/slots.rs`).
    #[cfg(real_std)]
    #[inline]
    pub(crate) fn is_slot(&self) -> bool {
        ring::is_slot(self.hdr)
    }

    /// Drops this handle; `true` if it was the region's last (no other handle of it,
    /// a slice or a clone, is alive on any thread).
    #[cfg(real_std)]
    #[inline]
    pub(crate) fn release_was_last(self) -> bool {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: as in `drop`: this handle's count goes away, and the handle with it
        // (`ManuallyDrop`: no second release).
        unsafe { ring::release_shared(this.hdr, WORD) }
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

    /// Splits off the first `at` bytes as a new handle; `self` keeps the rest. Shares
    /// the region (no copy, no allocation), as `bytes::Bytes::split_to` does.
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
    /// assert_eq!(head, b"head");
    /// assert_eq!(body, b"body");
    /// ```
    #[must_use = "to drop the front, use `bytes::Buf::advance` or drop the result"]
    pub fn split_to(&mut self, at: usize) -> FixedBuf {
        assert!(
            at <= self.len,
            "split_to({at}) is out of bounds of a buffer of {}",
            self.len
        );
        let mut head = self.clone();
        head.len = at;
        self.skip(at);
        head
    }

    /// Splits off the bytes from `at` on as a new handle; `self` keeps the first `at`.
    /// Shares the region (no copy, no allocation), as `bytes::Bytes::split_off` does.
    ///
    /// # Panics
    /// When `at > self.len()`.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut b = ring.fixed(8).unwrap();
    /// b.try_extend_from_slice(b"headbody").unwrap();
    /// let mut head = b.freeze();
    /// let body = head.split_off(4);
    /// assert_eq!(head, b"head");
    /// assert_eq!(body, b"body");
    /// ```
    #[must_use = "to drop the tail, use `truncate`"]
    pub fn split_off(&mut self, at: usize) -> FixedBuf {
        assert!(
            at <= self.len,
            "split_off({at}) is out of bounds of a buffer of {}",
            self.len
        );
        let mut tail = self.clone();
        tail.skip(at);
        self.len = at;
        tail
    }

    /// Keeps the first `len` bytes in view; does nothing if `len >= self.len()` (as
    /// `bytes::Bytes::truncate`). The region is released with the last handle, so the
    /// bytes cut from view stay held until then.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut b = ring.fixed(8).unwrap();
    /// b.try_extend_from_slice(b"abcdef").unwrap();
    /// let mut f = b.freeze();
    /// f.truncate(2);
    /// assert_eq!(f, b"ab");
    /// f.truncate(10);
    /// assert_eq!(f, b"ab");
    /// ```
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// A handle to `len` bytes from `off` past this handle's first byte, sharing its
    /// region (a count more): the io_uring path's view of bytes the kernel completed
    /// into a provided buffer that this handle holds.
    ///
    /// # Safety
    /// The bytes lie inside the region, are initialised, and nothing writes them while
    /// any handle views them.
    #[cfg(uring)]
    pub(crate) unsafe fn view_ahead(&self, off: usize, len: usize) -> FixedBuf {
        let mut view = self.clone();
        // SAFETY: inside the region, as the caller promises.
        view.ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(off)) };
        view.len = len;
        view
    }

    /// Takes `next` into this view when its bytes follow this view's in the same
    /// region (two completions of one receive, back to back in one buffer); else gives
    /// it back.
    #[cfg(uring)]
    pub(crate) fn try_join(&mut self, next: FixedBuf) -> Result<(), FixedBuf> {
        if next.hdr != self.hdr || next.ptr.as_ptr() != self.ptr.as_ptr().wrapping_add(self.len) {
            return Err(next);
        }
        self.len += next.len;
        Ok(()) // `next`'s count goes with it
    }

    /// The first byte's address, with the provenance the region was claimed with (a
    /// writer's): the io_uring path publishes it to the kernel.
    #[cfg(uring)]
    pub(crate) fn raw_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Drops the first `n` bytes from view without touching the count (`split_to`,
    /// `bytes::Buf::advance`, and the framed reader's cursor over a region it has
    /// yielded frames from).
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        assert!(
            n <= self.len,
            "cannot advance {n} bytes past a view of {}",
            self.len
        );
        // SAFETY: `n <= len`, so the pointer stays inside this view (or one past it).
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
        unsafe { ring::release_shared(self.hdr, WORD) };
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

/// The bytes as a byte-string literal, as `bytes::Bytes` prints them: escaped, and
/// past the first 64 bytes (or the precision, `{:.1000?}`) cut with `...` and the
/// length.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut b = ring.fixed(256).unwrap();
/// b.try_extend_from_slice(b"GET / \"x\"\r\n\0\xff").unwrap();
/// assert_eq!(format!("{:?}", b.freeze()), r#"b"GET / \"x\"\r\n\0\xff""#);
///
/// let mut b = ring.fixed(256).unwrap();
/// b.try_extend_from_slice(&[b'a'; 200]).unwrap();
/// let long = b.freeze();
/// assert_eq!(format!("{long:?}"), format!("b\"{}\"... (200 bytes)", "a".repeat(64)));
/// assert_eq!(format!("{long:.3?}"), r#"b"aaa"... (200 bytes)"#);
/// ```
impl fmt::Debug for FixedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::debug::bytes(self, f)
    }
}
