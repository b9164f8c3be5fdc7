//! `ExtBuf`: a buffer that grows as it is written.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use super::{AllocError, FixedBufMut};
use crate::ring::{self, round_up, Claim, Header, Ring, HDR, MAX_WORDS, WORD};
use crate::WhenFull;

/// A byte buffer in ring memory that grows as it is written, like `Vec<u8>`.
///
/// It grows in place when the regions after it are free, and otherwise moves to a new
/// region of the same ring, wherever a fixed buffer of its new length would fit (the
/// space around its own region included), or follows the ring's
/// [`WhenFull`] policy. So a message that would fit as
/// [`Ring::fixed`] of its final size also fits when written piece by piece from
/// [`Ring::extendable`]`(0)` (from 64 bytes up: an extendable buffer starts with room
/// for 64). Dropped while it is the ring's latest allocation, it gives its bytes back
/// for the next one, as a message started over after a failed write. It borrows the ring, so it stays on the ring's thread, and while it lives
/// the ring keeps serving other buffers. [`finalize`](Self::finalize) turns it into a
/// `Send` [`FixedBufMut`] and gives the unused capacity back to the ring.
///
/// ```
/// use std::io::Write;
/// let ring = ringmem::Ring::new(4096);
/// let mut ext = ring.extendable(0).unwrap();
/// for _ in 0..10 {
///     ext.write_all(&[1; 64]).unwrap();
/// }
/// let other = ring.fixed(64).unwrap(); // the ring keeps serving
/// let buf = ext.finalize();
/// assert_eq!(buf.len(), 640);
/// # drop(other);
/// ```
///
/// It cannot leave the ring's thread, even borrowing a ring that lives for ever (the
/// compiler names [`BorrowsRing`] as the reason):
/// ```compile_fail
/// let ring: &'static ringmem::Ring = Box::leak(Box::new(ringmem::Ring::new(4096)));
/// let ext = ring.extendable(8).unwrap();
/// std::thread::spawn(move || drop(ext));
/// ```
pub struct ExtBuf<'r> {
    ring: &'r Ring,
    hdr: NonNull<Header>,
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    /// A growth of this buffer has looked round its whole block and failed (see
    /// [`grow_elsewhere`](Self::grow_elsewhere)).
    lapped: bool,
}

/// Why an [`ExtBuf`] is not `Send`: it borrows its ring, which is not `Sync` (one thread
/// allocates from a ring), and it grows through that borrow. Finalize it to a
/// [`FixedBufMut`] ([`ExtBuf::finalize`]) to send it to another thread or hold it
/// across an `.await` in a spawned task.
///
/// The type exists so that the compiler's error says so: sending an `ExtBuf` fails with
/// "an `ExtBuf` borrows its ring, which is not `Sync`", naming `BorrowsRing`, rather
/// than with a pointer type internal to the crate. It is never `Send`, never made, and
/// takes no memory.
///
/// ```compile_fail
/// fn is_send<T: Send>() {}
/// is_send::<ringmem::ExtBuf<'static>>();
/// ```
///
/// ```
/// fn is_send<T: Send>() {}
/// is_send::<ringmem::FixedBufMut>(); // what `ExtBuf::finalize` returns
/// let ring = ringmem::Ring::new(4096);
/// let mut ext = ring.extendable(0).unwrap();
/// ext.extend_from_slice(b"sent");
/// let buf = ext.finalize();
/// std::thread::spawn(move || assert_eq!(&buf[..], b"sent")).join().unwrap();
/// ```
pub struct BorrowsRing<'r>(PhantomData<&'r Ring>);

mod not_send {
    /// Implemented by nothing: `BorrowsRing: Send` requires it, so the compiler reports
    /// this message wherever an `ExtBuf` would have to be `Send`.
    #[diagnostic::on_unimplemented(
        message = "an `ExtBuf` borrows its ring, which is not `Sync`, so it cannot be sent to another thread",
        label = "this holds an `ExtBuf` (see `ringmem::BorrowsRing`)",
        note = "finalize it to a `FixedBufMut` (`ExtBuf::finalize`) to send it or hold it across an `.await`"
    )]
    pub trait RingIsSync {}
}

/// Never: the bound has no impls. It is spelled out so that the compiler's error says
/// why an `ExtBuf` cannot be sent.
// SAFETY: the bound never holds (`RingIsSync` has no impls), so this claims nothing; it
// is written out only so that the compiler's error carries the message above.
unsafe impl<'r> Send for BorrowsRing<'r> where BorrowsRing<'r>: not_send::RingIsSync {}

/// Never: an `ExtBuf` borrows its ring, which is not `Sync` (see [`BorrowsRing`]).
// SAFETY: never holds, as `BorrowsRing` is never `Send`. Without it `ExtBuf` would be
// `!Send` through its pointer fields and ring reference all the same; with it the
// compiler names `BorrowsRing`. `Sync`, `Unpin` and the unwind-safety traits stay the
// auto traits of the fields.
unsafe impl<'r> Send for ExtBuf<'r> where BorrowsRing<'r>: Send {}

/// An [`ExtBuf`] without its ring borrow: the region stays held (count 1) and is
/// released only by an `ExtBuf` rebuilt with [`ExtBuf::from_parts`]. Dropping the parts
/// leaks the region (it is never reused), so holders must rebuild and drop them.
pub(crate) struct ExtParts {
    hdr: NonNull<Header>,
    /// The first data byte.
    pub(crate) ptr: NonNull<u8>,
    /// Initialised bytes from `ptr`.
    pub(crate) len: usize,
    /// Usable bytes from `ptr`.
    pub(crate) cap: usize,
}

/// Smallest capacity a growing buffer moves to.
const MIN_GROW: usize = 64;

/// Below this capacity an in-place growth asks for four times the capacity, above it
/// for twice. Growing in place copies nothing, so for small buffers the cost is the
/// call (a 1 KiB message written in 64-byte pieces grows twice instead of four times:
/// about 110 instructions less per message), and `finalize` gives back what was not
/// written. A move is sized by the new length alone.
const QUADRUPLE_BELOW: usize = 4096;

impl<'r> ExtBuf<'r> {
    /// Wraps a freshly claimed region (count 1).
    #[inline]
    pub(crate) fn from_claim(ring: &'r Ring, c: Claim) -> Self {
        ExtBuf {
            ring,
            hdr: c.hdr,
            ptr: c.data,
            len: 0,
            cap: c.cap,
            lapped: false,
        }
    }

    /// Takes the buffer apart without releasing its region, for a holder that owns the
    /// ring and so cannot keep a borrow of it (the codec pool); see [`ExtParts`].
    #[inline]
    pub(crate) fn into_parts(self) -> ExtParts {
        let this = ManuallyDrop::new(self);
        ExtParts {
            hdr: this.hdr,
            ptr: this.ptr,
            len: this.len,
            cap: this.cap,
        }
    }

    /// Puts back together a buffer taken apart by [`into_parts`](Self::into_parts).
    ///
    /// # Safety
    /// - `parts` came from `into_parts` on a buffer of this very `ring`;
    /// - they are used once: no other buffer was rebuilt from the same parts;
    /// - `parts.len <= parts.cap` and the first `parts.len` bytes are initialised.
    #[inline]
    pub(crate) unsafe fn from_parts(ring: &'r Ring, parts: ExtParts) -> Self {
        debug_assert!(
            parts.len <= parts.cap,
            "ExtParts len {} > cap {}",
            parts.len,
            parts.cap
        );
        let ExtParts { hdr, ptr, len, cap } = parts;
        ExtBuf {
            ring,
            hdr,
            ptr,
            len,
            cap,
            lapped: false,
        }
    }

    /// The ring the buffer lives in.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn ring(&self) -> &'r Ring {
        self.ring
    }

    /// When `walk`, makes the next growth walk the whole block again, even right after
    /// a walk found no room (for a waiter woken by a release, which may lie anywhere).
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn unstick_if(&mut self, walk: bool) {
        self.ring.unstick_if(walk);
    }

    /// The unwritten capacity (for `bytes::BufMut`); follow it with
    /// [`assume_written`](Self::assume_written).
    #[inline]
    pub(crate) fn spare_uninit(&mut self) -> &mut [core::mem::MaybeUninit<u8>] {
        // SAFETY: bytes `len..cap` of the region belong to this handle; `MaybeUninit`
        // makes no claim about their contents.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.ptr
                    .as_ptr()
                    .add(self.len)
                    .cast::<core::mem::MaybeUninit<u8>>(),
                self.cap - self.len,
            )
        }
    }

    /// Marks `n` more bytes as written.
    ///
    /// # Safety
    /// - `n <= self.capacity() - self.len()`;
    /// - the first `n` bytes of [`spare_uninit`](Self::spare_uninit) are initialised.
    #[inline]
    pub(crate) unsafe fn assume_written(&mut self, n: usize) {
        debug_assert!(
            n <= self.cap - self.len,
            "assume_written({n}) past {}",
            self.cap - self.len
        );
        self.len += n;
    }

    /// Bytes written so far.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert_eq!(ring.extendable(0).unwrap().len(), 0);
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert!(ring.extendable(0).unwrap().is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes it can hold before it grows again.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert_eq!(ring.extendable(100).unwrap().capacity(), 104);
    /// ```
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Forgets the contents (capacity unchanged).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(8).unwrap();
    /// ext.extend_from_slice(b"abc");
    /// ext.clear();
    /// assert!(ext.is_empty());
    /// ```
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` bytes.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(8).unwrap();
    /// ext.extend_from_slice(b"abc");
    /// ext.truncate(1);
    /// assert_eq!(&ext[..], b"a");
    /// ```
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes room for `additional` more bytes, or says why it could not (the ring is
    /// full under [`Fail`](crate::WhenFull::Fail), or the size overflows).
    /// Nothing changes on failure.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(256);
    /// let mut ext = ring.extendable(0).unwrap();
    /// assert!(ext.try_reserve(100).is_ok());
    /// assert!(ext.capacity() >= 100);
    /// assert!(ext.try_reserve(10_000).is_err());
    /// ```
    #[inline]
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), AllocError> {
        if additional <= self.cap - self.len {
            return Ok(());
        }
        self.grow(additional)
    }

    /// The growing part of [`try_reserve`](Self::try_reserve), out of line. Never by
    /// doubling into space it cannot get: in place from the window (to four times the
    /// capacity below [`QUADRUPLE_BELOW`], twice above, or to all the window holds if
    /// that is enough), or over free successors; else it moves to the first place, in
    /// the order a claim walks, where the new length fits, its own region counted free
    /// (see `BlockCtl::relocate`): so a buffer that would fit as a fixed one of its new
    /// length grows. A growth that finds no room costs what a claim's failed try does:
    /// the successors, then a few headers of the walk (see `Ring`); except that on a
    /// `Fail` ring the first one of a buffer then walks the whole block, so that it
    /// fails only where no room is left to move to.
    #[inline(never)]
    fn grow(&mut self, additional: usize) -> Result<(), AllocError> {
        // The common growth first, with little to compute: the latest region of the
        // current block, grown from the window's front (54 instructions a growth where
        // the whole path took 90). `additional` at most a region's largest span, as
        // `cap` is: no overflow below.
        if additional <= MAX_WORDS * WORD {
            let min = self.len + additional;
            let factor = if self.cap < QUADRUPLE_BELOW { 4 } else { 2 };
            let want = min.max(self.cap * factor).max(MIN_GROW);
            let (lo, hi) = (HDR + round_up(min, WORD), HDR + round_up(want, WORD));
            // SAFETY: our unique handle, on the ring's thread (the buffer borrows the ring,
            // not Sync); `HDR + cap` is at most the region's span; `min > cap` (`try_reserve`
            // calls this only then), so `HDR + cap < lo <= hi`, all word multiples.
            if let Some(span) = unsafe {
                self.ring
                    .grow_latest(self.hdr, HDR + self.cap, lo, hi, false)
            } {
                self.cap = span - HDR;
                return Ok(());
            }
        }
        self.grow_elsewhere(additional)
    }

    /// [`grow`](Self::grow) when the buffer is not the window's latest region or the
    /// window is too small: over free successors, by a move within the block, or (under
    /// a policy other than `Fail`) into a new claim.
    #[inline(never)]
    fn grow_elsewhere(&mut self, additional: usize) -> Result<(), AllocError> {
        let err = AllocError {
            requested: self.len.saturating_add(additional),
        };
        let min = self.len.checked_add(additional).ok_or(err)?;
        let factor = if self.cap < QUADRUPLE_BELOW { 4 } else { 2 };
        let want = min.max(self.cap.saturating_mul(factor)).max(MIN_GROW);
        // A region of one of the ring's blocks (not a heap fallback) that could hold
        // `min` bytes: grow it there, or move it within its block.
        if let Some(len) = self.ring.block_len_of(self.hdr).filter(|&len| min <= len) {
            let (lo, hi) = (HDR + round_up(min, WORD), HDR + round_up(want, WORD));
            // Over free successors, to `want` if they allow it (so the next writes do
            // not walk them again).
            let grown = (hi > lo && hi <= len)
                // SAFETY: our unique handle, on the ring's thread (the buffer borrows
                // the ring, which is not Sync).
                .then(|| unsafe { self.ring.grow_in_place(self.hdr, hi) })
                .flatten()
                // SAFETY: as above.
                .or_else(|| unsafe { self.ring.grow_in_place(self.hdr, lo) });
            if let Some(span) = grown {
                self.cap = span - HDR;
                return Ok(());
            }
            // The first try looks where a claim's would: a few regions. A `Fail` ring
            // then looks round the whole block once in the buffer's life before the
            // growth fails: its holder would drop a half-written message and start
            // over where room lies further on (the regions a try steps over are
            // often live while a free run follows them). A loop that retries on the
            // same buffer pays the lap once; its later tries cost what a claim's do.
            // SAFETY: our unique handle, on the ring's thread; a ring region's data
            // follows its header (claimed with alignment WORD), `len <= min`; on
            // success the old region is given up (replaced below).
            let mut moved = unsafe { self.ring.relocate(self.hdr, self.len, min, false) };
            if moved.is_none() && self.ring.when_full() == WhenFull::Fail && !self.lapped {
                self.lapped = true;
                // SAFETY: as above.
                moved = unsafe { self.ring.relocate(self.hdr, self.len, min, true) };
            }
            if let Some(c) = moved {
                self.hdr = c.hdr;
                self.ptr = c.data;
                self.cap = c.cap;
                return Ok(());
            }
            if self.ring.when_full() == WhenFull::Fail {
                return Err(err);
            }
        }
        let c = self.ring.claim(min, WORD, 1).ok_or(err)?;
        // SAFETY: the new region is live and distinct from ours (ours is live too), and
        // holds at least `min >= len` bytes.
        unsafe { ptr::copy_nonoverlapping(self.ptr.as_ptr(), c.data.as_ptr(), self.len) };
        // SAFETY: we are the old region's only handle and stop using it now.
        unsafe { ring::release_unique(self.hdr, WORD) };
        self.hdr = c.hdr;
        self.ptr = c.data;
        self.cap = c.cap;
        Ok(())
    }

    /// Makes room for `additional` more bytes.
    ///
    /// # Panics
    /// When the ring cannot serve it; see [`try_reserve`](Self::try_reserve).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(0).unwrap();
    /// ext.reserve(500);
    /// assert!(ext.capacity() >= 500);
    /// ```
    pub fn reserve(&mut self, additional: usize) {
        if let Err(e) = self.try_reserve(additional) {
            panic!("ringmem: ExtBuf cannot grow: {e}");
        }
    }

    /// Appends `bytes`, growing as needed; nothing changes on failure.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(0).unwrap();
    /// ext.try_extend_from_slice(b"abc").unwrap();
    /// assert_eq!(&ext[..], b"abc");
    /// ```
    #[inline]
    pub fn try_extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), AllocError> {
        self.try_reserve(bytes.len())?;
        // SAFETY: `try_reserve` made `cap - len >= bytes.len()`; the bytes belong to
        // this handle.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(self.len), bytes.len())
        };
        self.len += bytes.len();
        Ok(())
    }

    /// Appends `bytes`, growing as needed.
    ///
    /// # Panics
    /// When the ring cannot serve the growth.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(0).unwrap();
    /// ext.extend_from_slice(b"abc");
    /// assert_eq!(ext.len(), 3);
    /// ```
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_extend_from_slice(bytes) {
            panic!("ringmem: ExtBuf cannot grow: {e}");
        }
    }

    /// Ends growth: returns a `Send` [`FixedBufMut`] holding the bytes, and gives the
    /// unused capacity back to the ring.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable(1000).unwrap();
    /// ext.extend_from_slice(b"abc");
    /// let buf = ext.finalize();
    /// assert_eq!((&buf[..], buf.capacity()), (&b"abc"[..], 8));
    /// std::thread::spawn(move || drop(buf)).join().unwrap();
    /// ```
    #[inline]
    pub fn finalize(self) -> FixedBufMut {
        let this = ManuallyDrop::new(self);
        let keep = HDR + round_up(this.len, WORD);
        // SAFETY: this handle is the region's only one, on the ring's thread (the
        // buffer borrows the ring, which is not Sync). A heap region keeps its capacity.
        let cap =
            unsafe { this.ring.shrink_in_place(this.hdr, keep) }.map_or(this.cap, |s| s - HDR);
        FixedBufMut::from_claim(
            Claim {
                hdr: this.hdr,
                data: this.ptr,
                cap,
            },
            this.len,
        )
    }
}

/// A dropped buffer that is the latest region of its block goes back to the window, so
/// a message started over after a failed write reuses the same bytes.
impl Drop for ExtBuf<'_> {
    fn drop(&mut self) {
        // SAFETY: this handle is the region's only one, on the ring's thread (the
        // buffer borrows the ring), and is going away; byte buffers are claimed with
        // WORD alignment.
        unsafe { ring::release_unique_in(self.ring, self.hdr, WORD, None) }
    }
}

impl Deref for ExtBuf<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are initialised and belong to this handle.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for ExtBuf<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, exclusively through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for ExtBuf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtBuf")
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .finish()
    }
}

/// Grows as needed; when the ring cannot grow it, writes what still fits, then fails:
/// with `ErrorKind::StorageFull` when a [`Fail`](crate::WhenFull::Fail) ring
/// is full (releases would make room: [`writer_wait`](ExtBuf::writer_wait) writes
/// through a writer that waits for them), with `ErrorKind::OutOfMemory` when the
/// global allocator refused a `Heap` or `Grow` ring's memory. Neither error carries a
/// message: one would be boxed on the heap, on the very path where memory ran out
/// (and when the heap is what refused, that allocation would abort the process
/// instead of reporting the error), and a loop that retries on a full ring would pay
/// an allocation per try.
///
/// ```
/// use std::io::Write;
/// let ring = ringmem::Ring::new(64);
/// let mut ext = ring.extendable(0).unwrap();
/// let err = ext.write_all(&[1; 100]).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
/// assert!(ext.len() < 100 && ext.iter().all(|&b| b == 1)); // what fitted stays
/// ```
#[cfg(feature = "std")]
impl std::io::Write for ExtBuf<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = if self.try_reserve(buf.len()).is_ok() {
            buf.len()
        } else {
            buf.len().min(self.cap - self.len)
        };
        if n == 0 && !buf.is_empty() {
            return Err(self.full());
        }
        // SAFETY: `n <= cap - len`; the bytes belong to this handle.
        unsafe { ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.as_ptr().add(self.len), n) };
        self.len += n;
        Ok(n)
    }

    /// All of `buf` or an error: the all-or-nothing append
    /// ([`try_extend_from_slice`](ExtBuf::try_extend_from_slice)) when the buffer can
    /// grow, so a write costs what that does; when it cannot, what still fits is
    /// written before the error, as the default `write_all` would.
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if self.try_extend_from_slice(buf).is_ok() {
            return Ok(());
        }
        self.write_rest(buf)
    }

    #[inline]
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(feature = "std")]
impl ExtBuf<'_> {
    /// The failing end of `io::Write::write_all`, out of line: writes what fits of
    /// `buf` (which the buffer could not grow for), then reports the ring full.
    #[cold]
    #[inline(never)]
    fn write_rest(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let n = buf.len().min(self.cap - self.len);
        // SAFETY: `n <= cap - len`; the bytes belong to this handle.
        unsafe { ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.as_ptr().add(self.len), n) };
        self.len += n;
        Err(self.full())
    }

    /// The error of a write the ring could not grow the buffer for (see its
    /// `io::Write`): a full ring, or a refusing heap.
    #[cold]
    fn full(&self) -> std::io::Error {
        match self.ring().when_full() {
            crate::WhenFull::Fail => std::io::ErrorKind::StorageFull.into(),
            _ => std::io::ErrorKind::OutOfMemory.into(),
        }
    }
}
