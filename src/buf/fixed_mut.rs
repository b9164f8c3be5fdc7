//! `FixedBufMut`: a writable buffer of fixed capacity.

use core::fmt;
use core::mem::{ManuallyDrop, MaybeUninit};
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use super::{CapacityError, FixedBuf};
#[cfg(real_std)]
use crate::ring::HDR;
use crate::ring::{self, round_up, Claim, Header, WORD};

/// A writable buffer of fixed capacity in ring memory, like a `Vec<u8>` that never
/// reallocates. `Send` and `Sync`; dropping it on any thread releases its region with
/// one `Release` store.
///
/// ```
/// use std::io::Write;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(16).unwrap();
/// buf.write_all(b"abc").unwrap();
/// assert_eq!(&buf[..], b"abc");
/// assert_eq!((buf.len(), buf.capacity()), (3, 16));
/// ```
///
/// Like `Vec<u8>`, it compares, orders and hashes as the bytes written so far, with byte
/// slices, arrays, `Vec<u8>` and [`FixedBuf`] on either side of `==`; `Debug` prints the
/// bytes as `b"..."`:
///
/// ```
/// use std::collections::HashSet;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(16).unwrap();
/// buf.try_extend_from_slice(b"key").unwrap();
/// assert!(buf == b"key" && b"key" == buf && buf == vec![b'k', b'e', b'y']);
/// assert!(buf < b"kez"[..]);
/// assert_eq!(format!("{buf:?}"), r#"b"key""#);
///
/// let set = HashSet::from([buf]);
/// assert!(set.contains(&b"key"[..]));
/// ```
pub struct FixedBufMut {
    hdr: NonNull<Header>,
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: the handle owns its region's bytes exclusively (as `Vec<u8>` owns its buffer),
// and its release is an atomic store that is valid from any thread.
unsafe impl Send for FixedBufMut {}
// SAFETY: `&FixedBufMut` only reads the bytes.
unsafe impl Sync for FixedBufMut {}

impl FixedBufMut {
    /// Wraps a freshly claimed region (count 1) with `len` initialised bytes.
    #[inline]
    pub(crate) fn from_claim(c: Claim, len: usize) -> Self {
        debug_assert!(len <= c.cap);
        FixedBufMut {
            hdr: c.hdr,
            ptr: c.data,
            len,
            cap: c.cap,
        }
    }

    /// An empty buffer of `n` bytes (at least one) in a heap allocation of its own;
    /// `None` when the allocator refuses.
    #[cfg(real_std)]
    pub(crate) fn on_heap(n: usize) -> Option<Self> {
        let c = ring::heap_claim(n.max(1), WORD, 1)?;
        Some(FixedBufMut::from_claim(c, 0))
    }

    /// An empty buffer of `n` bytes (at least one) in a heap allocation of its own that
    /// carries `value` until the region is freed (by the release of its last handle, a
    /// frozen one's too, on any thread), which then drops it. `Err(value)` when the
    /// allocator refuses.
    #[cfg(real_std)]
    pub(crate) fn on_heap_carrying(n: usize, value: ring::Carried) -> Result<Self, ring::Carried> {
        let c = ring::heap_claim_carrying(n.max(1), WORD, 1, value)?;
        Ok(FixedBufMut::from_claim(c, 0))
    }

    /// The bytes a buffer made by [`on_heap_carrying`](Self::on_heap_carrying) with
    /// room for `n` takes from the heap, all told; `None` when no region can be that
    /// large.
    #[cfg(real_std)]
    pub(crate) fn heap_carrying_span(n: usize) -> Option<usize> {
        ring::carrying_span(n.max(1), WORD)
    }

    /// Gives the whole pages of the buffer's first `upto` bytes of capacity (at most
    /// all of it) back to the system (see `sync::discard_pages`): for a region held for
    /// its room alone, never written or read, whose pages an earlier region touched.
    /// Its bytes read as zeros or as they were; the length is cleared. Returns the
    /// bytes of those pages that were resident (0 where none go back).
    pub(crate) fn discard_pages(&mut self, upto: usize) -> usize {
        use crate::sync::{discard_pages, resident_bytes, PAGE};
        self.len = 0;
        let start = self.ptr.as_ptr() as usize;
        let first = round_up(start, PAGE);
        let end = (start + self.cap.min(upto)) / PAGE * PAGE;
        if end <= first {
            return 0;
        }
        // SAFETY: `first - start < PAGE <= end - start <= cap`: inside the region.
        let pages = unsafe { self.ptr.as_ptr().add(first - start) };
        let resident = resident_bytes(pages, end - first);
        // SAFETY: whole pages inside this handle's region (its only handle), whose
        // bytes nothing reads before writing them again: the length is 0.
        if resident != 0 && unsafe { discard_pages(pages, end - first) } {
            resident
        } else {
            0
        }
    }

    /// Bytes written so far.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert_eq!(ring.fixed(8).unwrap().len(), 0);
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert!(ring.fixed(8).unwrap().is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer can hold: the request rounded up to a multiple of 8.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert_eq!(ring.fixed(13).unwrap().capacity(), 16);
    /// ```
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes that can still be written: `capacity() - len()`.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// buf.try_extend_from_slice(b"abc").unwrap();
    /// assert_eq!(buf.spare(), 5);
    /// ```
    #[inline]
    pub fn spare(&self) -> usize {
        self.cap - self.len
    }

    /// Forgets the contents (capacity unchanged).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// buf.try_extend_from_slice(b"abc").unwrap();
    /// buf.clear();
    /// assert!(buf.is_empty());
    /// ```
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` bytes; does nothing if `len >= self.len()`.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// buf.try_extend_from_slice(b"abcdef").unwrap();
    /// buf.truncate(2);
    /// assert_eq!(&buf[..], b"ab");
    /// ```
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `bytes`, or says how much room there was.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// assert!(buf.try_extend_from_slice(b"12345678").is_ok());
    /// let err = buf.try_extend_from_slice(b"9").unwrap_err();
    /// assert_eq!((err.requested, err.available), (1, 0));
    /// ```
    #[inline]
    pub fn try_extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), CapacityError> {
        if bytes.len() > self.spare() {
            return Err(CapacityError {
                requested: bytes.len(),
                available: self.spare(),
            });
        }
        // SAFETY: `bytes.len() <= spare` was checked above, and the region's bytes from
        // `len` to `cap` belong to this handle until it is released in `Drop`.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(self.len), bytes.len())
        };
        self.len += bytes.len();
        Ok(())
    }

    /// The unwritten capacity, for filling in place (e.g. by a socket `read`); follow
    /// it with [`advance`](Self::advance).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// let spare = buf.spare_mut();
    /// spare[0].write(b'x');
    /// spare[1].write(b'y');
    /// // SAFETY: the first two spare bytes were just initialised.
    /// unsafe { buf.advance(2) };
    /// assert_eq!(&buf[..], b"xy");
    /// ```
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: bytes `len..cap` of the region belong to this handle; `MaybeUninit`
        // makes no claim about their contents.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.ptr.as_ptr().add(self.len).cast::<MaybeUninit<u8>>(),
                self.cap - self.len,
            )
        }
    }

    /// Marks `n` more bytes as written.
    ///
    /// # Safety
    /// - `n <= self.spare()`;
    /// - the first `n` bytes of [`spare_mut`](Self::spare_mut) have been initialised.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(4).unwrap();
    /// for b in buf.spare_mut() { b.write(7); }
    /// // SAFETY: all spare bytes were initialised above.
    /// unsafe { buf.advance(4) };
    /// assert_eq!(&buf[..], &[7, 7, 7, 7]);
    /// ```
    #[inline]
    pub unsafe fn advance(&mut self, n: usize) {
        debug_assert!(
            n <= self.spare(),
            "advance({n}) past the spare {}",
            self.spare()
        );
        self.len += n;
    }

    /// Whether the region is a slot of a page of slots (see `ring/slots.rs`): its
    /// capacity never changes.
    #[cfg(real_std)]
    #[inline]
    pub(crate) fn is_slot(&self) -> bool {
        ring::is_slot(self.hdr)
    }

    /// Gives the unused capacity back to `ring` (the framed reader's regions, sized for
    /// a read, keep only what the read brought). A region that is not one of `ring`'s
    /// blocks (a heap fallback, another ring's) keeps its capacity.
    #[cfg(real_std)]
    pub(crate) fn shrink_in(&mut self, ring: &crate::Ring) {
        if self.is_slot() {
            return; // a slot's span is its page's
        }
        let keep = HDR + round_up(self.len, WORD);
        // SAFETY: `&Ring` is on the ring's own thread (it is not `Sync`), and this
        // handle is the region's only one.
        if let Some(span) = unsafe { ring.shrink_in_place(self.hdr, keep) } {
            self.cap = span - HDR;
            debug_assert!(self.len <= self.cap, "{} > {}", self.len, self.cap);
        }
    }

    /// Cuts the unused capacity off into a buffer of its own in `ring`, if it holds at
    /// least `least` bytes (else `None`, nothing changed): a framed reader freezes the
    /// frames a read brought and reads on into the rest, without a claim.
    #[cfg(real_std)]
    pub(crate) fn split_spare_in(
        &mut self,
        least: usize,
        ring: &crate::Ring,
    ) -> Option<FixedBufMut> {
        if self.is_slot() {
            return None;
        }
        let keep = HDR + round_up(self.len, WORD);
        debug_assert_eq!(self.ptr.as_ptr() as usize - self.hdr.as_ptr() as usize, HDR);
        // SAFETY: as in `shrink_in`.
        let c = unsafe { ring.split_in_place(self.hdr, keep, least) }?;
        self.cap = keep - HDR;
        debug_assert!(self.len <= self.cap, "{} > {}", self.len, self.cap);
        Some(FixedBufMut::from_claim(c, 0))
    }

    /// The region's header, the data's start and the capacity, with this handle's
    /// count of the region, which the caller now holds. For an empty buffer: its bytes
    /// are the caller's to write.
    #[cfg_attr(not(real_std), allow(dead_code))]
    pub(crate) fn into_raw(self) -> (NonNull<Header>, NonNull<u8>, usize) {
        debug_assert_eq!(self.len, 0, "{self:?}");
        let this = ManuallyDrop::new(self);
        (this.hdr, this.ptr, this.cap)
    }

    /// Releases the buffer on `ring`'s own thread: back into its block's window when it
    /// is the latest region (see `ring::release_unique_in`), so a region claimed and
    /// not written leaves the window as the claim found it.
    #[cfg(real_std)]
    pub(crate) fn release_in(self, ring: &crate::Ring) {
        let this = ManuallyDrop::new(self);
        // SAFETY: `&Ring` is on the ring's own thread (it is not `Sync`); this handle is
        // the region's only one, given up here; byte buffers are claimed with WORD
        // alignment.
        unsafe { ring::release_unique_in(ring, this.hdr, WORD, None) }
    }

    /// Grows the capacity to `cap` bytes, or to as many as the ring's window holds past
    /// the region if that is less: when the region is `ring`'s latest, from the window's
    /// front and the free regions after it (swept as a claim sweeps them). Any other
    /// region keeps its capacity. A framed reader claims what its frame needs (one walk
    /// finds it between regions kept alive) and then takes the rest of that free run, up
    /// to a read region, without another walk.
    #[cfg(real_std)]
    pub(crate) fn grow_in(&mut self, cap: usize, ring: &crate::Ring) {
        if cap <= self.cap || self.is_slot() {
            return;
        }
        // The region's span: its capacity runs to the region's end (a claim's does).
        let pad = (self.ptr.as_ptr() as usize).wrapping_sub(self.hdr.as_ptr() as usize);
        let span = pad.wrapping_add(self.cap);
        // No overflow: a ring region's span is at most a block's length, and `cap` a
        // request the ring could serve (else `grow_latest` says `None` first).
        let want = pad.wrapping_add(round_up(cap, WORD));
        // All of `want` if the window holds it once swept over the free regions after it;
        // else as much as it holds, if that is more than the region has.
        // `grow_latest`'s contract: `&Ring` is on the ring's own thread (it is not
        // `Sync`); this handle is the region's only one; for a region of the ring's
        // current block (the only kind it grows) `span` is its span; and `span <= min <=
        // want` (`min` is `want` or `span + WORD`) are multiples of `WORD`.
        let grow = |min, sweep| {
            // SAFETY: the contract above holds (byte buffers' capacities and headers are
            // multiples of `WORD`).
            unsafe { ring.grow_latest(self.hdr, span, min, want, sweep) }
        };
        if let Some(new) = grow(want, true).or_else(|| grow(span + WORD, false)) {
            self.cap = new - pad;
        }
    }

    /// [`shrink_in`](Self::shrink_in), keeping room for `cap` bytes (at least the
    /// length): a framed reader that waits for the rest of a frame keeps a bounded
    /// spare to read it into. A capacity already at most `cap` is left as it is.
    #[cfg(all(real_std, feature = "tokio"))]
    pub(crate) fn shrink_to_in(&mut self, cap: usize, ring: &crate::Ring) {
        let cap = cap.max(self.len);
        if cap >= self.cap || self.is_slot() {
            return;
        }
        // `keep` is at most the region's span: `HDR + round_up(self.cap, WORD)` is.
        let keep = HDR + round_up(cap, WORD);
        // SAFETY: as in `shrink_in`.
        if let Some(span) = unsafe { ring.shrink_in_place(self.hdr, keep) } {
            self.cap = self.cap.min(span - HDR);
            debug_assert!(self.len <= self.cap, "{} > {}", self.len, self.cap);
        }
    }

    /// Makes the buffer read-only and shareable: a [`FixedBuf`] that clones by a count
    /// in the region header. Allocates nothing.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// buf.try_extend_from_slice(b"hi").unwrap();
    /// let frozen = buf.freeze();
    /// let copy = frozen.clone();
    /// assert_eq!(&copy[..], b"hi");
    /// ```
    #[inline]
    pub fn freeze(self) -> FixedBuf {
        let this = ManuallyDrop::new(self);
        // A unique region has count 1, which is also a shared region with one handle.
        FixedBuf::from_raw(this.hdr, this.ptr, this.len)
    }
}

impl Drop for FixedBufMut {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this handle is the region's only one and is going away; byte buffers
        // are claimed with WORD alignment.
        unsafe { ring::release_unique(self.hdr, WORD) }
    }
}

impl Deref for FixedBufMut {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are initialised and owned by this handle.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for FixedBufMut {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for FixedBufMut {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for FixedBufMut {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// The written bytes as a byte-string literal, as `bytes::BytesMut` prints them:
/// escaped, and past the first 64 bytes (or the precision, `{:.1000?}`) cut with `...`
/// and the length. [`len`](Self::len) and [`capacity`](Self::capacity) say the rest.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut b = ring.fixed(256).unwrap();
/// b.try_extend_from_slice(b"\x16\x03\x01 hello\n").unwrap();
/// assert_eq!(format!("{b:?}"), r#"b"\x16\x03\x01 hello\n""#);
/// b.try_extend_from_slice(&[b'.'; 100]).unwrap();
/// assert!(format!("{b:?}").ends_with(r#"..."... (110 bytes)"#));
/// ```
impl fmt::Debug for FixedBufMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::debug::bytes(self, f)
    }
}

/// Writes as much as fits; `Ok(0)` once full (so `write_all` reports `WriteZero`).
#[cfg(feature = "std")]
impl std::io::Write for FixedBufMut {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.spare());
        // SAFETY: `n <= spare`, and the spare bytes belong to this handle.
        unsafe { ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.as_ptr().add(self.len), n) };
        self.len += n;
        Ok(n)
    }

    #[inline]
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, real_std))]
mod tests {
    use crate::{Ring, WhenFull};

    /// `grow_in` grows the ring's latest region over the window and the free regions
    /// after it, and leaves any other region as it is.
    #[test]
    fn grow_in_takes_the_window_only() {
        let ring = Ring::new(64 << 10);
        let mut first = ring.fixed(64).unwrap();
        let mut latest = ring.fixed(64).unwrap();
        first.grow_in(1000, &ring);
        assert_eq!(first.capacity(), 64, "not the latest");
        latest.grow_in(1000, &ring);
        assert_eq!(latest.capacity(), 1000);
        latest.grow_in(10, &ring);
        assert_eq!(latest.capacity(), 1000, "never shrinks");
        // A heap region keeps its capacity.
        let heap = Ring::builder().when_full(WhenFull::Heap).build().unwrap();
        let mut big = heap.fixed(100_000).unwrap(); // past the ring: the heap
        let cap = big.capacity();
        big.grow_in(200_000, &heap);
        assert_eq!(big.capacity(), cap, "a heap region");
    }

    /// `split_spare_in` cuts the unused capacity off into a buffer of its own: two live
    /// regions that tile what the one did, each released on its own; a rest shorter
    /// than asked, or another ring's region, stays as it is.
    #[test]
    fn split_spare_in_makes_two_regions_of_one() {
        let ring = Ring::new(4096);
        let mut buf = ring.fixed(1000).unwrap();
        buf.try_extend_from_slice(&[1; 10]).unwrap();
        assert!(
            buf.split_spare_in(1000, &ring).is_none(),
            "the rest is shorter"
        );
        assert_eq!(buf.capacity(), 1000);
        let mut rest = buf.split_spare_in(100, &ring).unwrap();
        // The buffer keeps its bytes, rounded to a word; the rest loses a header.
        assert_eq!((buf.capacity(), rest.capacity()), (16, 1000 - 16 - 8));
        assert_eq!(rest.as_ptr() as usize, buf.as_ptr() as usize + 16 + 8);
        rest.try_extend_from_slice(&[2; 976]).unwrap();
        assert_eq!(ring.stats().live_buffers, 2);
        let frozen = buf.freeze();
        assert_eq!(&frozen[..], &[1; 10]);
        drop(rest);
        assert_eq!(ring.stats().live_buffers, 1);
        drop(frozen);
        let stats = ring.stats();
        assert_eq!((stats.live_buffers, stats.bytes_in_use), (0, 0));
        // The regions tiled the block: it serves all it can again.
        assert!(ring.fixed(ring.largest_fit()).is_some());
        let other = Ring::new(4096);
        let mut buf = ring.fixed(1000).unwrap();
        assert!(
            buf.split_spare_in(8, &other).is_none(),
            "not the ring's region"
        );
    }
}
