//! `BufferPool`: a codec buffer on a ring, with a heap fallback.

use core::fmt;
use core::mem::MaybeUninit;
#[cfg(real_std)]
use core::task::Poll;
#[cfg(real_std)]
use std::time::Duration;

use super::{Buffer, BufferFromSystemMemory, Slice, WritableError, MAX_MESSAGE};
use crate::buf::ExtParts;
#[cfg(real_std)]
use crate::ring::wait::{self, TaskSlot};
use crate::{ExtBuf, Ring, RingError};
#[cfg(real_std)]
use crate::{WaitError, WhenFull};

/// A codec [`Buffer`] on a [`Ring`] that the pool owns, falling back to another buffer
/// (`T`, by default the heap's [`BufferFromSystemMemory`]) when the ring cannot serve.
///
/// The current message is a growing ring buffer (an [`ExtBuf`] that the pool keeps in
/// pieces, since it owns the ring the buffer would borrow): `get_writable` grows it, in
/// place when the ring has room after it, and [`get_data_owned`](Buffer::get_data_owned)
/// hands it over as a [`Slice`] holding a ring buffer and gives the unused capacity back
/// to the ring. No copy, no heap allocation, and the slice is released by one store
/// wherever it is dropped. When the ring has no room, the message moves to `T` (its
/// bytes so far copied once) until it is handed over, so the pool never fails and
/// never waits; the `_wait` and `_async` forms of `get_writable` wait for room
/// instead when the ring is full (see `get_writable_wait`, with the `std` feature).
/// The first message of a pool starts with room for its first piece; each later one
/// starts with room for the previous message (up to an eighth of the ring), so a
/// header-then-payload frame usually needs no growth.
///
/// ```
/// use ringmem::codec::{Buffer, BufferPool};
/// let mut pool = BufferPool::new(256);
/// let mut held = Vec::new();
/// for i in 0..8u8 {
///     pool.get_writable(64).fill(i);
///     held.push(pool.get_data_owned()); // keep them all: the ring fills up
/// }
/// assert!(held[0].is_ring());
/// assert!(!held[7].is_ring()); // served by the heap fallback
/// assert!(held.iter().enumerate().all(|(i, s)| s.iter().all(|&b| b == i as u8)));
/// drop(held);
/// pool.get_writable(64);
/// assert!(pool.get_data_owned().is_ring()); // the ring serves again
/// ```
///
/// The pool is `Send` but not `Sync` (one thread decodes; the slices go anywhere):
/// ```compile_fail
/// fn sync<T: Sync>(_: &T) {}
/// sync(&ringmem::codec::BufferPool::new(4096));
/// ```
pub struct BufferPool<T: Buffer = BufferFromSystemMemory> {
    /// The ring and the message being written in it; `None` when the pool was made
    /// without one (a capacity the ring cannot have).
    ring: Option<OnRing>,
    /// The fallback; holds the current message while `in_system`.
    system_memory: T,
    /// The current message is in `system_memory`, not in the ring.
    in_system: bool,
    /// Messages that moved to (or started in) `system_memory`.
    fallbacks: u64,
    /// Where the `AsRef`/`AsMut` views start.
    start: usize,
}

/// The ring side of a pool.
struct OnRing {
    ring: Ring,
    /// The current message, an `ExtBuf` of `ring` in pieces; `None` when it is empty
    /// (a wait form sets it to an empty buffer and fills its first piece at once).
    /// Invariant: rebuilt into an `ExtBuf` of `ring` at most once per `take()`.
    cur: Option<ExtParts>,
    /// Room the next message starts with: the previous message's length.
    hint: usize,
    /// Largest `hint`: an eighth of the ring.
    max_hint: usize,
}

/// A buffer of `ring` for a message starting with `len` bytes: room for `hint` (the
/// previous message's length) if the ring has it, else for `len`.
fn start(ring: &Ring, hint: usize, len: usize) -> Option<ExtBuf<'_>> {
    ring.extendable(len.max(hint)).or_else(|| {
        if hint > len {
            ring.extendable(len)
        } else {
            None
        }
    })
}

#[cfg(real_std)]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl OnRing {
    /// [`start`], in pieces. `walk`: after a wake-up, look at the whole ring (see
    /// `Ring::unstick_if`).
    fn try_start(&self, walk: bool, len: usize) -> Option<ExtParts> {
        self.ring.unstick_if(walk);
        start(&self.ring, self.hint, len).map(ExtBuf::into_parts)
    }

    /// [`try_room`](Self::try_room), counting a wait in the ring's
    /// [`RingCounters::waits`](crate::RingCounters::waits) at its first try that fails
    /// (`failed` is the wait's own flag).
    fn try_room_counted(&mut self, walk: bool, len: usize, failed: &mut bool) -> Option<()> {
        let room = self.try_room(walk, len);
        if room.is_none() && !core::mem::replace(failed, true) {
            self.ring.count_wait();
        }
        room
    }

    /// One try of a wait for room for `len` more bytes of the current message: starts
    /// it as [`try_start`](Self::try_start) does when there is none, else grows it in
    /// the ring (in place, or moved within its block, as [`ExtBuf::reserve_wait`]
    /// does). `Some` once `cur` has the room.
    fn try_room(&mut self, walk: bool, len: usize) -> Option<()> {
        let Some(parts) = self.cur.take() else {
            self.cur = self.try_start(walk, len);
            return self.cur.as_ref().map(|_| ());
        };
        // SAFETY: `cur` holds parts of an `ExtBuf` of `self.ring` (only ever set from
        // one), taken out of `cur` so they are rebuilt once, and put back below.
        let mut ext = unsafe { ExtBuf::from_parts(&self.ring, parts) };
        ext.unstick_if(walk);
        let grown = ext.try_reserve(len).is_ok();
        self.cur = Some(ext.into_parts());
        grown.then_some(())
    }
}

// SAFETY: `cur` (raw pointers, hence not auto-`Send`) describes a region that this pool
// holds alone, as an `ExtBuf` would; it is only touched together with the pool's ring,
// which is `Send` and moves with it. `T` crosses threads only when it is `Send`.
unsafe impl<T: Buffer + Send> Send for BufferPool<T> {}

impl BufferPool<BufferFromSystemMemory> {
    /// A pool on a ring of `capacity` bytes that falls back to the heap. It never fails:
    /// when the ring cannot be made (a capacity of 0, larger than a ring can have, or
    /// refused by the allocator), every message goes to the heap;
    /// [`try_new`](Self::try_new) reports that instead.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(0); // no ring: heap only
    /// pool.get_writable(3);
    /// assert!(!pool.get_data_owned().is_ring());
    /// ```
    pub fn new(capacity: usize) -> Self {
        match Ring::try_new(capacity) {
            Ok(ring) => BufferPool::from_ring(ring, BufferFromSystemMemory::default()),
            Err(_) => BufferPool::with_system_memory(None, BufferFromSystemMemory::default()),
        }
    }

    /// A pool on a ring of `capacity` bytes that falls back to the heap, or why the ring
    /// cannot be made.
    ///
    /// ```
    /// use ringmem::codec::BufferPool;
    /// assert!(BufferPool::try_new(4096).is_ok());
    /// assert_eq!(BufferPool::try_new(0).unwrap_err(), ringmem::RingError::ZeroCapacity);
    /// ```
    pub fn try_new(capacity: usize) -> Result<Self, RingError> {
        Ok(BufferPool::from_ring(
            Ring::try_new(capacity)?,
            BufferFromSystemMemory::default(),
        ))
    }
}

impl<T: Buffer> BufferPool<T> {
    /// A pool on `ring` (any size and [`WhenFull` policy](crate::WhenFull)) that falls
    /// back to `system_memory`. A message already in `system_memory` is the pool's
    /// current message.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(1 << 16).when_full(WhenFull::Grow).build()?;
    /// let mut pool = BufferPool::from_ring(ring, BufferFromSystemMemory::new(0));
    /// pool.get_writable(100_000); // larger than the ring: it grows a block
    /// assert!(pool.get_data_owned().is_ring());
    /// # Ok::<(), ringmem::RingError>(())
    /// ```
    pub fn from_ring(ring: Ring, system_memory: T) -> Self {
        BufferPool::with_system_memory(Some(ring), system_memory)
    }

    fn with_system_memory(ring: Option<Ring>, system_memory: T) -> Self {
        BufferPool {
            ring: ring.map(|ring| OnRing {
                max_hint: ring.capacity() / 8,
                ring,
                cur: None,
                hint: 0,
            }),
            // A message already in the fallback is the pool's current message.
            in_system: !system_memory.is_empty(),
            system_memory,
            fallbacks: 0,
            start: 0,
        }
    }

    /// The pool's ring, for its [`stats`](Ring::stats); `None` when it has none.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(10);
    /// let msg = pool.get_data_owned();
    /// assert_eq!(pool.ring().unwrap().stats().live_buffers, 1);
    /// # drop(msg);
    /// ```
    pub fn ring(&self) -> Option<&Ring> {
        self.ring.as_ref().map(|r| &r.ring)
    }

    /// Messages the fallback took, because the ring had no room for them (or the pool
    /// has no ring). A piece the fallback refused is not counted.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(64);
    /// pool.get_writable(1000);
    /// assert_eq!(pool.fallbacks(), 1);
    /// ```
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Whether the pool can be dropped: always, since slices do not borrow it
    /// (`buffer_sv2`'s pool must outlive its slices).
    ///
    /// ```
    /// assert!(ringmem::codec::BufferPool::new(64).droppable());
    /// ```
    pub fn droppable(&self) -> bool {
        true
    }

    /// The current message.
    fn written(&self) -> &[u8] {
        if self.in_system {
            return self
                .system_memory
                .get_data_by_ref_(self.system_memory.len());
        }
        match self.ring.as_ref().and_then(|r| r.cur.as_ref()) {
            // SAFETY: the first `len` bytes of the region `cur` holds are initialised
            // (`from_parts` contract, kept by `try_get_writable`); `&self` keeps the pool,
            // hence the region, unchanged for the borrow.
            Some(p) => unsafe { core::slice::from_raw_parts(p.ptr.as_ptr(), p.len) },
            None => &[],
        }
    }

    /// The current message, writable.
    fn written_mut(&mut self) -> &mut [u8] {
        if self.in_system {
            let len = self.system_memory.len();
            return self.system_memory.get_data_by_ref(len);
        }
        match self.ring.as_mut().and_then(|r| r.cur.as_mut()) {
            // SAFETY: as in `written`; `&mut self` makes the access exclusive.
            Some(p) => unsafe { core::slice::from_raw_parts_mut(p.ptr.as_ptr(), p.len) },
            None => &mut [],
        }
    }

    /// `try_get_writable` when the current ring region has no room: start or grow the
    /// message in the ring, or move it to the fallback.
    #[inline(never)]
    fn get_writable_slow(&mut self, len: usize) -> Result<&mut [u8], WritableError> {
        if self.in_system {
            return self.system_memory.try_get_writable(len);
        }
        let Some(on) = self.ring.as_mut() else {
            // No ring: every message starts in the fallback, once it holds a piece.
            if len == 0 {
                return Ok(&mut []);
            }
            let bytes = self.system_memory.try_get_writable(len)?;
            self.in_system = true;
            self.fallbacks += 1;
            return Ok(bytes);
        };
        let written = on.cur.as_ref().map_or(0, |p| p.len);
        let err = WritableError {
            requested: len,
            written,
        };
        if written
            .checked_add(len)
            .is_none_or(|total| total > MAX_MESSAGE)
        {
            return Err(err);
        }
        if len == 0 {
            return Ok(&mut []);
        }
        let ext = match on.cur.take() {
            // SAFETY: `cur` holds parts of an `ExtBuf` of `on.ring` (only ever set from
            // one), taken out of `cur` so they are rebuilt once, with `len` initialised
            // bytes.
            Some(parts) => Some(unsafe { ExtBuf::from_parts(&on.ring, parts) }),
            None => start(&on.ring, on.hint, len),
        };
        let mut ext = ext;
        let fits = ext.as_mut().is_some_and(|ext| ext.try_reserve(len).is_ok());
        let mut ext = match ext {
            Some(mut ext) if fits => {
                let spare = ext.spare_uninit();
                spare[..len].fill(MaybeUninit::new(0));
                // SAFETY: `try_reserve` left at least `len` spare bytes, and the first
                // `len` of them were just zeroed.
                unsafe { ext.assume_written(len) };
                ext
            }
            ext => {
                return Self::fall_back(
                    &mut on.cur,
                    ext,
                    len,
                    err,
                    &mut self.system_memory,
                    &mut self.in_system,
                    &mut self.fallbacks,
                );
            }
        };
        let at = ext.len() - len;
        let bytes = ext.as_mut_ptr();
        on.cur = Some(ext.into_parts());
        // SAFETY: bytes `at..at + len` are initialised (zeroed above) and belong to the
        // region `cur` now holds, which stays put and unshared until the pool is next
        // used mutably, which the returned borrow of `self` rules out.
        Ok(unsafe { core::slice::from_raw_parts_mut(bytes.add(at), len) })
    }

    /// Moves the current message to the fallback (starting there if `ext` is `None` or
    /// empty) and appends `len` zeroed bytes to it there. A fallback is counted once
    /// the fallback holds the message: on failure (`err`) a message that could not be
    /// moved stays where it was, and a message that was to start there does not.
    #[cold]
    #[inline(never)]
    fn fall_back<'a>(
        cur: &mut Option<ExtParts>,
        ext: Option<ExtBuf<'_>>,
        len: usize,
        err: WritableError,
        system_memory: &'a mut T,
        in_system: &mut bool,
        fallbacks: &mut u64,
    ) -> Result<&'a mut [u8], WritableError> {
        // An empty ring buffer has nothing to move: dropping it releases its region.
        match ext.filter(|ext| !ext.is_empty()) {
            Some(ext) => {
                match system_memory.try_get_writable(ext.len()) {
                    Ok(dst) => dst.copy_from_slice(&ext),
                    Err(_) => {
                        *cur = Some(ext.into_parts());
                        return Err(err);
                    }
                }
                // The message moved, whether or not its new piece fits there.
                *in_system = true;
                *fallbacks += 1;
                system_memory.try_get_writable(len)
            }
            None => {
                let bytes = system_memory.try_get_writable(len)?;
                *in_system = true;
                *fallbacks += 1;
                Ok(bytes)
            }
        }
    }
}

/// Waiting for room instead of falling back (the `_wait` and `_async` forms).
///
/// A message waits on a [`WhenFull::Fail`] ring that has no room for its next piece now
/// but could have after releases: when it starts (its first piece), and when it is in
/// the ring and must grow past its region. A growing message keeps its bytes and grows
/// in place or moves within its block, its own region counted free (as
/// [`ExtBuf::reserve_wait`] does), so a message that fits a block fits once every other
/// region is released. Everywhere else the wait forms do what
/// [`get_writable`](Buffer::get_writable) does: a message that would not fit a block
/// moves to the fallback, a message already in the fallback stays there, and a `Heap` or
/// `Grow` ring is never full. So a decoder that writes a frame in pieces gets
/// backpressure from a full ring instead of heap memory.
#[cfg(real_std)]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl<T: Buffer> BufferPool<T> {
    /// [`get_writable`](Buffer::get_writable), parking the thread until a release (on
    /// any thread) makes room when the ring has none for the piece, instead of falling
    /// back (see above for when it waits).
    ///
    /// # Errors
    /// [`WaitError::OutOfMemory`] when neither the ring nor the fallback can hold the
    /// message (it would pass `isize::MAX` bytes, or the heap refused); the message is
    /// unchanged then.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(1024).when_full(WhenFull::Fail).build()?;
    /// let mut pool = BufferPool::from_ring(ring, BufferFromSystemMemory::new(0));
    /// pool.get_writable(900);
    /// let first = pool.get_data_owned(); // holds most of the ring
    /// let consumer = std::thread::spawn(move || drop(first));
    /// pool.get_writable_wait(512)?.fill(1); // waits for the consumer, no heap
    /// let second = pool.get_data_owned();
    /// assert!(second.is_ring() && second.as_ref() == &[1; 512][..]);
    /// assert_eq!(pool.fallbacks(), 0);
    /// consumer.join().unwrap();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_writable_wait(&mut self, len: usize) -> Result<&mut [u8], WaitError> {
        if let Some(on) = self.waiting(len) {
            let failed = &mut false;
            wait::block_until(
                on.ring.span(),
                len,
                |walk| on.try_room_counted(walk, len, failed),
                None,
            );
        }
        self.writable_or_wait_error(len)
    }

    /// [`get_writable_wait`](Self::get_writable_wait) for at most `timeout`.
    ///
    /// # Errors
    /// As [`get_writable_wait`](Self::get_writable_wait), and [`WaitError::TimedOut`]
    /// (the message is unchanged then).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
    /// use ringmem::{Ring, WaitError, WhenFull};
    /// let ring = Ring::builder().capacity(1024).when_full(WhenFull::Fail).build()?;
    /// let mut pool = BufferPool::from_ring(ring, BufferFromSystemMemory::new(0));
    /// pool.get_writable(900);
    /// let _held = pool.get_data_owned();
    /// let err = pool.get_writable_wait_timeout(512, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(err, WaitError::TimedOut);
    /// assert!(pool.is_empty());
    /// # Ok::<(), ringmem::RingError>(())
    /// ```
    pub fn get_writable_wait_timeout(
        &mut self,
        len: usize,
        timeout: Duration,
    ) -> Result<&mut [u8], WaitError> {
        if let Some(on) = self.waiting(len) {
            let failed = &mut false;
            wait::block_until(
                on.ring.span(),
                len,
                |walk| on.try_room_counted(walk, len, failed),
                Some(timeout),
            )
            .ok_or(WaitError::TimedOut)?;
        }
        self.writable_or_wait_error(len)
    }

    /// [`get_writable_wait`](Self::get_writable_wait) as a future: after yielding to its
    /// executor as [`Ring::fixed_async`](crate::Ring::fixed_async) does, woken by a
    /// release on any thread, with no runtime of its own (any executor polls it; a
    /// timeout is the executor's). The future holds the pool by `&mut`, so a task that
    /// owns its pool stays `Send` while it waits.
    ///
    /// # Errors
    /// As [`get_writable_wait`](Self::get_writable_wait).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(async {
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(1024).when_full(WhenFull::Fail).build().unwrap();
    /// let mut pool = BufferPool::from_ring(ring, BufferFromSystemMemory::new(0));
    /// pool.get_writable(900);
    /// let first = pool.get_data_owned();
    /// let consumer = tokio::spawn(async move { drop(first) });
    /// pool.get_writable_async(512).await.unwrap().fill(2); // ready once it is dropped
    /// assert!(pool.get_data_owned().is_ring());
    /// consumer.await.unwrap();
    /// # });
    /// ```
    pub async fn get_writable_async(&mut self, len: usize) -> Result<&mut [u8], WaitError> {
        if self.waiting(len).is_some() {
            let pool = &mut *self;
            let (mut slot, mut failed) = (TaskSlot::default(), false);
            // A `move` closure holds the pool itself (`&mut`, `Send` with it), never a
            // `&Ring` or `&mut OnRing`, which are not `Send`: the task stays `Send`.
            core::future::poll_fn(move |cx| match pool.ring.as_mut() {
                Some(on) => wait::poll_until(&mut slot, cx, on.ring.span(), len, |walk| {
                    on.try_room_counted(walk, len, &mut failed)
                }),
                None => Poll::Ready(()),
            })
            .await;
        }
        self.writable_or_wait_error(len)
    }

    /// The ring side, when `len` more bytes of the message wait for room if the ring
    /// has none: the message is in a `Fail` ring (or not started), its region has no
    /// room for them, and releases could make room for the whole message in a block.
    fn waiting(&mut self, len: usize) -> Option<&mut OnRing> {
        if len == 0 || self.in_system {
            return None;
        }
        let on = self.ring.as_mut()?;
        let written = match &on.cur {
            None => 0,
            Some(p) if len <= p.cap - p.len => return None,
            Some(p) => p.len,
        };
        let total = written.checked_add(len)?;
        (on.ring.when_full() == WhenFull::Fail && on.ring.could_fit(total)).then_some(on)
    }

    /// `try_get_writable`, its error told as a [`WaitError`].
    fn writable_or_wait_error(&mut self, len: usize) -> Result<&mut [u8], WaitError> {
        self.try_get_writable(len)
            .map_err(|e| WaitError::OutOfMemory {
                requested: e.requested,
            })
    }
}

impl<T: Buffer> Buffer for BufferPool<T> {
    type Slice = Slice;

    /// See [`Buffer::get_writable`].
    ///
    /// # Panics
    /// When the message would exceed `isize::MAX` bytes, or when neither the ring nor
    /// the fallback can hold it. The pool asks the fallback through its
    /// [`try_get_writable`](Buffer::try_get_writable), so a heap that refuses the memory
    /// makes this panic rather than abort, with the message left as it was.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// assert_eq!(pool.get_writable(0), &[]);
    /// assert_eq!(pool.get_writable(4), &[0; 4]);
    /// ```
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        match self.try_get_writable(len) {
            Ok(bytes) => bytes,
            Err(e) => panic!("ringmem: codec BufferPool::get_writable: {e}"),
        }
    }

    /// See [`Buffer::try_get_writable`]: an error only when neither the ring nor the
    /// fallback can hold the message, which is then unchanged.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// assert!(pool.try_get_writable(usize::MAX / 2).is_err());
    /// assert_eq!(pool.try_get_writable(3).unwrap(), &[0; 3]);
    /// ```
    #[inline]
    fn try_get_writable(&mut self, len: usize) -> Result<&mut [u8], WritableError> {
        // The fast path: the current ring region has room.
        if let Some(p) = self.ring.as_mut().and_then(|r| r.cur.as_mut()) {
            if len <= p.cap - p.len {
                let at = p.len;
                // SAFETY: `at + len <= cap`: the bytes lie in the region `cur` holds alone.
                let bytes = unsafe { p.ptr.as_ptr().add(at) };
                // SAFETY: as above; zeroing initialises them.
                unsafe { core::ptr::write_bytes(bytes, 0, len) };
                p.len += len;
                // SAFETY: initialised just above, and they belong to the region `cur`
                // holds, which stays put and unshared until the pool is next used
                // mutably, which the returned borrow of `self` rules out.
                return Ok(unsafe { core::slice::from_raw_parts_mut(bytes, len) });
            }
        }
        self.get_writable_slow(len)
    }

    #[inline]
    fn get_data_owned(&mut self) -> Slice {
        if self.in_system {
            // Taken before the flag is cleared: if the fallback (user code) panics
            // here, the message it still holds stays the pool's current one, instead
            // of lingering where the next message moved there would be appended to it.
            let taken = self.system_memory.get_data_owned();
            self.in_system = false;
            return taken.into();
        }
        match self.ring.as_mut() {
            Some(on) => match on.cur.take() {
                Some(parts) => {
                    // SAFETY: as in `try_get_writable`: parts of an `ExtBuf` of this
                    // ring, taken out of `cur`, so rebuilt once.
                    let ext = unsafe { ExtBuf::from_parts(&on.ring, parts) };
                    on.hint = ext.len().min(on.max_hint);
                    Slice::from(ext.finalize())
                }
                None => Slice::from(alloc::vec::Vec::new()),
            },
            None => Slice::from(alloc::vec::Vec::new()),
        }
    }

    fn get_data_by_ref(&mut self, len: usize) -> &mut [u8] {
        let all = self.written_mut();
        let n = len.min(all.len());
        &mut all[..n]
    }

    fn get_data_by_ref_(&self, len: usize) -> &[u8] {
        let all = self.written();
        &all[..len.min(all.len())]
    }

    #[inline]
    fn len(&self) -> usize {
        if self.in_system {
            return self.system_memory.len();
        }
        self.ring
            .as_ref()
            .and_then(|r| r.cur.as_ref())
            .map_or(0, |p| p.len)
    }

    fn danger_set_start(&mut self, index: usize) {
        self.start = index;
    }
}

impl<T: Buffer> Drop for BufferPool<T> {
    fn drop(&mut self) {
        if let Some(on) = self.ring.as_mut() {
            if let Some(parts) = on.cur.take() {
                // SAFETY: parts of an `ExtBuf` of this ring, taken out of `cur`; the
                // rebuilt buffer releases the region as it drops, before the ring does.
                drop(unsafe { ExtBuf::from_parts(&on.ring, parts) });
            }
        }
    }
}

/// The current message from the [`danger_set_start`](Buffer::danger_set_start) index.
///
/// ```
/// use ringmem::codec::{Buffer, BufferPool};
/// let mut pool = BufferPool::new(4096);
/// pool.get_writable(3).copy_from_slice(b"abc");
/// assert_eq!(pool.as_ref(), b"abc");
/// ```
impl<T: Buffer> AsRef<[u8]> for BufferPool<T> {
    fn as_ref(&self) -> &[u8] {
        self.written().get(self.start..).unwrap_or_default()
    }
}

/// The current message from the [`danger_set_start`](Buffer::danger_set_start) index,
/// writable.
///
/// ```
/// use ringmem::codec::{Buffer, BufferPool};
/// let mut pool = BufferPool::new(4096);
/// pool.get_writable(2);
/// pool.as_mut().copy_from_slice(b"ok");
/// assert_eq!(pool.get_data_owned().as_ref(), b"ok");
/// ```
impl<T: Buffer> AsMut<[u8]> for BufferPool<T> {
    fn as_mut(&mut self) -> &mut [u8] {
        let start = self.start;
        self.written_mut().get_mut(start..).unwrap_or_default()
    }
}

impl<T: Buffer> fmt::Debug for BufferPool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("ring", &self.ring())
            .field("len", &self.len())
            .field("in_system", &self.in_system)
            .field("fallbacks", &self.fallbacks)
            .finish_non_exhaustive()
    }
}
