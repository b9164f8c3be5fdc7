//! Waiting for room on a full ring: the `_wait`, `_wait_timeout` and `_async` forms of
//! the allocating calls (the protocol is `ring/wait.rs`).

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::time::Duration;

use super::{ExtBuf, FixedBufMut, TypedBuf};
use crate::ring::wait::{self, TaskSlot};
use crate::{Ring, WhenFull};

/// Why a waiting allocation gave up.
///
/// ```
/// use ringmem::{Ring, WaitError};
/// let ring = Ring::new(1024);
/// assert!(matches!(ring.fixed_wait(4096), Err(WaitError::NeverFits { .. })));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// No release could ever make room: the request is empty, or larger than a block of
    /// this [`WhenFull::Fail`] ring holds.
    NeverFits {
        /// Bytes asked for.
        requested: usize,
        /// Bytes of one block of the ring, headers included.
        block: usize,
    },
    /// The time given ran out first.
    TimedOut,
    /// A [`WhenFull::Heap`] or [`WhenFull::Grow`] ring (which never waits) could not
    /// serve the request: the global allocator refused the fallback or the new block.
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::NeverFits { requested, block } => write!(
                f,
                "a buffer of {requested} bytes never fits a ring of {block}-byte blocks"
            ),
            WaitError::TimedOut => f.write_str("no room was made in the time given"),
            WaitError::OutOfMemory { requested } => write!(
                f,
                "the global allocator refused a buffer of {requested} bytes"
            ),
        }
    }
}

impl std::error::Error for WaitError {}

/// What a wait for `bytes` (word-aligned data) comes to at once, before any waiting:
/// `Some(Err)` when no release can help.
#[cfg(real_std)]
pub(crate) fn hopeless(ring: &Ring, bytes: Option<usize>) -> Option<WaitError> {
    hopeless_aligned(ring, bytes, 1)
}

/// What a waiter for `bytes` aligned to `align` asks for, to compare with other
/// waiters of its ring (`wait::block_until`): the bytes with their worst padding.
pub(crate) fn need(bytes: Option<usize>, align: usize) -> usize {
    bytes.map_or(usize::MAX, |b| b.saturating_add(align - 1))
}

/// [`hopeless`] for data aligned to `align`: the padding an empty block needs before
/// such data counts, and an alignment the ring never serves never fits.
pub(crate) fn hopeless_aligned(
    ring: &Ring,
    bytes: Option<usize>,
    align: usize,
) -> Option<WaitError> {
    let requested = bytes.unwrap_or(usize::MAX);
    match ring.when_full() {
        WhenFull::Fail if !bytes.is_some_and(|b| ring.could_fit_aligned(b, align)) => {
            Some(WaitError::NeverFits {
                requested,
                block: ring.block_len(),
            })
        }
        WhenFull::Fail => None,
        // These policies never report a full ring; `None` from them is the heap's.
        _ => Some(WaitError::OutOfMemory { requested }),
    }
}

/// Waits (blocking) for `claim` to succeed on `ring`, or says why not. The first try
/// is inlined into the caller, so a ring with room costs what the plain call does; the
/// deadline is taken only when that try fails. Always inlined: with `#[inline]` alone
/// `extendable_wait` stayed a call in the bench's producer loop, and ringal's
/// extendable 64 B × 64 row took 81-89 ms (medians of 11-13 fresh processes), 65-75
/// inlined, as long as the plain call with a hand-rolled spin (66-79); the 1 KiB × 64
/// row 168-189 with the call, 149-169 inlined (level in one of three comparisons).
#[inline(always)]
fn block<'r, T>(
    ring: &'r Ring,
    (bytes, align): (Option<usize>, usize),
    timeout: Option<Duration>,
    claim: impl Fn(&'r Ring) -> Option<T>,
) -> Result<T, WaitError> {
    match claim(ring) {
        Some(t) => Ok(t),
        None => block_slow(ring, (bytes, align), timeout, |walk| {
            ring.unstick_if(walk);
            claim(ring)
        }),
    }
}

/// After a first try failed: waits for `try_claim` to succeed on `ring` (see
/// `wait::block_until`: `walk` asks for a walk of the whole block), unless no release
/// can make room for `bytes` aligned to `align`.
#[cold]
#[inline(never)]
fn block_slow<T>(
    ring: &Ring,
    (bytes, align): (Option<usize>, usize),
    timeout: Option<Duration>,
    try_claim: impl FnMut(bool) -> Option<T>,
) -> Result<T, WaitError> {
    if let Some(e) = hopeless_aligned(ring, bytes, align) {
        return Err(e);
    }
    let need = need(bytes, align);
    ring.count_wait();
    wait::block_until(ring.span(), need, try_claim, timeout).ok_or(WaitError::TimedOut)
}

/// `wait::poll_until` on `ring`'s span, counting a wait it starts in `ring`'s
/// [`RingCounters::waits`](crate::RingCounters::waits).
fn poll_counted<T>(
    ring: &Ring,
    slot: &mut TaskSlot,
    cx: &mut Context<'_>,
    need: usize,
    try_claim: impl FnMut(bool) -> Option<T>,
) -> Poll<T> {
    let starting = slot.starting();
    let poll = wait::poll_until(slot, cx, ring.span(), need, try_claim);
    if starting && poll.is_pending() {
        ring.count_wait();
    }
    poll
}

/// [`ExtBuf::try_reserve`], waiting for room (see [`ExtBuf::reserve_wait`]); always
/// inlined, as [`block`] is.
#[inline(always)]
fn reserve_blocking(
    ext: &mut ExtBuf<'_>,
    additional: usize,
    timeout: Option<Duration>,
) -> Result<(), WaitError> {
    if ext.try_reserve(additional).is_ok() {
        return Ok(());
    }
    let ring = ext.ring();
    // The grown buffer moves within its block if it must, its own region counted free:
    // once every other region is released, a length that fits a block fits.
    let bytes = ext.len().checked_add(additional);
    block_slow(ring, (bytes, 1), timeout, |walk| {
        ext.unstick_if(walk);
        ext.try_reserve(additional).ok()
    })
}

impl<'r> ExtBuf<'r> {
    /// [`try_reserve`](ExtBuf::try_reserve), waiting for room when the ring is full, as
    /// [`Ring::fixed_wait`] does: the buffer keeps what it holds, and grows in place or
    /// moves within its block once releases make room. For a writer that holds a
    /// partial message rather than dropping it and starting over. The room comes from
    /// other buffers' releases: where their consumer waits for this message first, use
    /// [`reserve_wait_timeout`](ExtBuf::reserve_wait_timeout).
    ///
    /// # Errors
    /// [`WaitError::NeverFits`] at once when `len() + additional` bytes would not fit a
    /// block of this ring; [`WaitError::OutOfMemory`] at once from a `Heap` or `Grow`
    /// ring (which never waits) when the global allocator refuses. The buffer is
    /// unchanged after an error.
    ///
    /// ```
    /// use std::io::Write;
    /// let ring = ringmem::Ring::new(4096);
    /// let mut msg = ring.extendable(0).unwrap();
    /// msg.write_all(b"header:").unwrap();
    /// let held: Vec<_> = std::iter::from_fn(|| ring.fixed(64)).collect(); // the rest
    /// std::thread::scope(|s| {
    ///     s.spawn(move || drop(held)); // a consumer releases on another thread
    ///     msg.reserve_wait(1000).unwrap(); // holds "header:" while it waits
    /// });
    /// msg.write_all(&[7; 1000]).unwrap();
    /// assert_eq!(&msg[..7], b"header:");
    /// ```
    #[inline]
    pub fn reserve_wait(&mut self, additional: usize) -> Result<(), WaitError> {
        reserve_blocking(self, additional, None)
    }

    /// [`reserve_wait`](ExtBuf::reserve_wait) for at most `timeout`.
    ///
    /// # Errors
    /// As [`reserve_wait`](ExtBuf::reserve_wait), and [`WaitError::TimedOut`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(1024);
    /// let mut msg = ring.extendable(0).unwrap();
    /// msg.extend_from_slice(b"abc");
    /// let _rest: Vec<_> = std::iter::from_fn(|| ring.fixed(8)).collect();
    /// let err = msg.reserve_wait_timeout(100, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(err, ringmem::WaitError::TimedOut);
    /// assert_eq!(&msg[..], b"abc");
    /// ```
    #[inline]
    pub fn reserve_wait_timeout(
        &mut self,
        additional: usize,
        timeout: Duration,
    ) -> Result<(), WaitError> {
        reserve_blocking(self, additional, Some(timeout))
    }

    /// [`reserve_wait`](ExtBuf::reserve_wait) as a future, for a task that must not
    /// block its thread (on a current-thread runtime the consumer may be a task of
    /// the same thread): it yields to its executor, then is woken by a release into
    /// the ring on any thread, or by room a task of its thread makes (another
    /// `ExtBuf` dropped or finalized). The future is not `Send` (see [`Reserve`]).
    ///
    /// # Errors
    /// As [`reserve_wait`](ExtBuf::reserve_wait); a timeout is the executor's
    /// (`tokio::time::timeout`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let ring = ringmem::Ring::new(4096);
    /// let mut msg = ring.extendable(0).unwrap();
    /// msg.extend_from_slice(b"header:");
    /// let held: Vec<_> = std::iter::from_fn(|| ring.fixed(64)).collect(); // the rest
    /// let consumer = std::thread::spawn(move || drop(held));
    /// msg.reserve_async(1000).await.unwrap(); // holds "header:" while it waits
    /// msg.extend_from_slice(&[7; 1000]);
    /// assert_eq!(&msg[..7], b"header:");
    /// consumer.join().unwrap();
    /// # });
    /// ```
    pub fn reserve_async<'a>(&'a mut self, additional: usize) -> Reserve<'a, 'r> {
        Reserve {
            ext: self,
            additional,
            slot: TaskSlot::default(),
        }
    }
}

impl Ring {
    /// [`fixed`](Ring::fixed), waiting for room when the ring is full: the thread spins
    /// briefly, then tries again between yields of its time slice (up to 64, some
    /// 25 µs on an idle core), then parks until a release into this ring (on any
    /// thread) makes room. Releases into other rings leave it parked. A process
    /// confined to one CPU yields every eighth try from the start instead of spinning.
    ///
    /// # Errors
    /// [`WaitError::NeverFits`] at once when `n` is 0 or larger than a block of this
    /// ring; [`WaitError::OutOfMemory`] at once from a `Heap` or `Grow` ring (which
    /// never waits) when the global allocator refuses.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let held: Vec<_> = (0..32).map(|_| ring.fixed(120).unwrap()).collect();
    /// assert!(ring.fixed(120).is_none()); // full
    /// let consumer = std::thread::spawn(move || drop(held));
    /// let buf = ring.fixed_wait(120).unwrap(); // parks until the consumer drops
    /// assert_eq!(buf.capacity(), 120);
    /// consumer.join().unwrap();
    /// ```
    #[inline]
    pub fn fixed_wait(&self, n: usize) -> Result<FixedBufMut, WaitError> {
        block(self, (Some(n), 1), None, |r| r.fixed(n))
    }

    /// [`fixed_wait`](Ring::fixed_wait) for at most `timeout`. The time counts once the
    /// brief spin is over (64 tries, about 7 µs on an idle machine), so that while the
    /// ring has room or gets it during the spin the call costs what `fixed_wait` does,
    /// with no clock read; the same holds for every `_wait_timeout` form.
    ///
    /// # Errors
    /// As [`fixed_wait`](Ring::fixed_wait), and [`WaitError::TimedOut`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(1024);
    /// let _all = ring.fixed(1016).unwrap(); // the whole ring
    /// let err = ring.fixed_wait_timeout(8, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(err, ringmem::WaitError::TimedOut);
    /// ```
    #[inline]
    pub fn fixed_wait_timeout(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<FixedBufMut, WaitError> {
        block(self, (Some(n), 1), Some(timeout), |r| r.fixed(n))
    }

    /// [`extendable`](Ring::extendable), waiting for room for its first `n` bytes (`n`
    /// may be 0) when the ring is full.
    ///
    /// # Errors
    /// As [`fixed_wait`](Ring::fixed_wait), except that `n == 0` waits for any room.
    ///
    /// ```
    /// use std::io::Write;
    /// let ring = ringmem::Ring::new(4096);
    /// let mut ext = ring.extendable_wait(0).unwrap();
    /// ext.write_all(b"grows as it is written").unwrap();
    /// # drop(ext);
    /// ```
    #[inline]
    pub fn extendable_wait(&self, n: usize) -> Result<ExtBuf<'_>, WaitError> {
        block(self, (Some(n.max(1)), 1), None, |r| r.extendable(n))
    }

    /// [`extendable_wait`](Ring::extendable_wait) for at most `timeout`.
    ///
    /// # Errors
    /// As [`extendable_wait`](Ring::extendable_wait), and [`WaitError::TimedOut`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(1024);
    /// let _all = ring.fixed(1016).unwrap(); // the whole ring
    /// assert!(ring.extendable_wait_timeout(0, Duration::from_millis(5)).is_err());
    /// ```
    #[inline]
    pub fn extendable_wait_timeout(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<ExtBuf<'_>, WaitError> {
        block(self, (Some(n.max(1)), 1), Some(timeout), |r| {
            r.extendable(n)
        })
    }

    /// [`typed`](Ring::typed), waiting for room when the ring is full.
    ///
    /// # Errors
    /// As [`fixed_wait`](Ring::fixed_wait) for `n * size_of::<T>()` bytes (an overflow
    /// never fits).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed_wait::<u64>(16).unwrap();
    /// v.push(7).unwrap();
    /// assert_eq!(v[0], 7);
    /// ```
    #[inline]
    pub fn typed_wait<T>(&self, n: usize) -> Result<TypedBuf<T>, WaitError> {
        block(self, typed_need::<T>(n), None, |r| r.typed::<T>(n))
    }

    /// [`typed_wait`](Ring::typed_wait) for at most `timeout`.
    ///
    /// # Errors
    /// As [`typed_wait`](Ring::typed_wait), and [`WaitError::TimedOut`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(1024);
    /// let _all = ring.fixed(1016).unwrap(); // the whole ring
    /// assert!(ring.typed_wait_timeout::<u32>(4, Duration::from_millis(5)).is_err());
    /// ```
    #[inline]
    pub fn typed_wait_timeout<T>(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<TypedBuf<T>, WaitError> {
        block(self, typed_need::<T>(n), Some(timeout), |r| r.typed::<T>(n))
    }

    /// [`fixed`](Ring::fixed) as a future that waits for room when the ring is full:
    /// it yields to its executor (wakes itself and returns `Pending`) up to 64 times,
    /// then is woken by a release into this ring on any thread, with no runtime of its
    /// own (any executor polls it). It takes the ring by `&mut` so that a task that
    /// owns its ring stays `Send` while it waits (a `&Ring` is not).
    ///
    /// # Errors
    /// As [`fixed_wait`](Ring::fixed_wait); a timeout is the executor's
    /// (`tokio::time::timeout`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(async {
    /// let mut ring = ringmem::Ring::new(4096);
    /// let held: Vec<_> = (0..32).map(|_| ring.fixed(120).unwrap()).collect();
    /// let consumer = tokio::spawn(async move { drop(held) });
    /// let buf = ring.fixed_async(120).await.unwrap(); // ready once the consumer drops
    /// assert_eq!(buf.capacity(), 120);
    /// consumer.await.unwrap();
    /// # });
    /// ```
    pub fn fixed_async(&mut self, n: usize) -> Wait<'_, FixedBufMut> {
        Wait::new(self, n, (Some(n), 1), |r, n| r.fixed(n))
    }

    /// [`typed`](Ring::typed) as a future that waits for room (see
    /// [`fixed_async`](Ring::fixed_async)).
    ///
    /// # Errors
    /// As [`typed_wait`](Ring::typed_wait).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let mut ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed_async::<u32>(8).await.unwrap();
    /// v.push(1).unwrap();
    /// # });
    /// ```
    pub fn typed_async<T>(&mut self, n: usize) -> Wait<'_, TypedBuf<T>> {
        Wait::new(self, n, typed_need::<T>(n), |r, n| r.typed::<T>(n))
    }

    /// [`extendable`](Ring::extendable) as a future that waits for room for its first
    /// `n` bytes (`n` may be 0), as [`fixed_async`](Ring::fixed_async) does. The buffer
    /// it gives borrows the ring (as [`extendable`](Ring::extendable)'s does), so the
    /// future takes `&self` and a task that holds either is not `Send`: it runs on a
    /// local executor (tokio's current-thread runtime or `LocalSet`), where the
    /// consumer may be a task of the same thread. Grow the buffer with
    /// [`ExtBuf::reserve_async`].
    ///
    /// # Errors
    /// As [`extendable_wait`](Ring::extendable_wait).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::io::Write;
    /// let ring = ringmem::Ring::new(4096);
    /// let held: Vec<_> = std::iter::from_fn(|| ring.fixed(120)).collect(); // all of it
    /// let consumer = async move {
    ///     tokio::task::yield_now().await;
    ///     drop(held); // the same thread's task makes room
    /// };
    /// let (msg, ()) = tokio::join!(ring.extendable_async(0), consumer);
    /// let mut msg = msg.unwrap();
    /// msg.write_all(b"grows as it is written").unwrap();
    /// assert_eq!(msg.finalize().len(), 22);
    /// # });
    /// ```
    pub fn extendable_async(&self, n: usize) -> ExtWait<'_> {
        ExtWait {
            ring: self,
            n,
            slot: TaskSlot::default(),
        }
    }
}

/// A future's poll of `claim` on `ring`: ready when it succeeds or no release can make
/// room for `bytes` aligned to `align`, else waiting as `wait::poll_until` does (the poll of [`Wait`] and
/// [`ExtWait`], as [`block`] is the blocking forms').
fn poll_claim<'r, T>(
    ring: &'r Ring,
    (bytes, align): (Option<usize>, usize),
    slot: &mut TaskSlot,
    cx: &mut Context<'_>,
    claim: impl Fn(&'r Ring) -> Option<T>,
) -> Poll<Result<T, WaitError>> {
    if let Some(t) = claim(ring) {
        return Poll::Ready(Ok(t));
    }
    if let Some(e) = hopeless_aligned(ring, bytes, align) {
        return Poll::Ready(Err(e));
    }
    poll_counted(ring, slot, cx, need(bytes, align), |walk| {
        ring.unstick_if(walk);
        claim(ring)
    })
    .map(Ok)
}

/// The bytes of `n` values of `T` (`None` on overflow; a zero-sized `T` takes one, so
/// that it never counts as empty).
pub(crate) fn typed_bytes<T>(n: usize) -> Option<usize> {
    n.checked_mul(mem::size_of::<T>().max(1))
}

/// What `n` values of `T` need: [`typed_bytes`], and `T`'s alignment.
pub(crate) fn typed_need<T>(n: usize) -> (Option<usize>, usize) {
    (typed_bytes::<T>(n), mem::align_of::<T>())
}

/// The future of [`Ring::fixed_async`] and [`Ring::typed_async`]: ready with the
/// buffer once the ring has room, or with why it never will.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut ring = ringmem::Ring::new(1024);
/// let wait: ringmem::Wait<'_, ringmem::FixedBufMut> = ring.fixed_async(0);
/// assert!(wait.await.is_err()); // an empty request never fits
/// # });
/// ```
#[must_use = "a future does nothing until polled"]
pub struct Wait<'r, T> {
    ring: &'r mut Ring,
    /// The allocating call and its argument.
    claim: fn(&Ring, usize) -> Option<T>,
    n: usize,
    /// The bytes asked for and their alignment, to tell a request no release can
    /// serve.
    need: (Option<usize>, usize),
    slot: TaskSlot,
}

impl<'r, T> Wait<'r, T> {
    fn new(
        ring: &'r mut Ring,
        n: usize,
        need: (Option<usize>, usize),
        claim: fn(&Ring, usize) -> Option<T>,
    ) -> Self {
        Wait {
            ring,
            claim,
            n,
            need,
            slot: TaskSlot::default(),
        }
    }
}

impl<T> Future for Wait<'_, T> {
    type Output = Result<T, WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (claim, n) = (this.claim, this.n);
        poll_claim(this.ring, this.need, &mut this.slot, cx, |r| claim(r, n))
    }
}

/// The future of [`Ring::extendable_async`]: ready with the buffer once the ring has
/// room, or with why it never will. It borrows the ring (not `Sync`): a task that holds
/// it is not `Send`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ring = ringmem::Ring::new(1024);
/// let wait: ringmem::ExtWait<'_> = ring.extendable_async(2048);
/// assert!(wait.await.is_err()); // never fits a 1 KiB ring
/// # });
/// ```
#[must_use = "a future does nothing until polled"]
pub struct ExtWait<'r> {
    ring: &'r Ring,
    /// The bytes the buffer starts with room for.
    n: usize,
    slot: TaskSlot,
}

impl<'r> Future for ExtWait<'r> {
    type Output = Result<ExtBuf<'r>, WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let n = this.n;
        poll_claim(this.ring, (Some(n.max(1)), 1), &mut this.slot, cx, |r| {
            r.extendable(n)
        })
    }
}

impl fmt::Debug for ExtWait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtWait")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

/// The future of [`ExtBuf::reserve_async`]: ready once the buffer has room for the
/// bytes asked for, or with why it never will. It borrows the buffer, which borrows
/// its ring (not `Sync`): a task that holds it is not `Send`, so it runs on a local
/// executor (tokio's current-thread runtime or `LocalSet`).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ring = ringmem::Ring::new(1024);
/// let mut msg = ring.extendable(0).unwrap();
/// let reserve: ringmem::Reserve<'_, '_> = msg.reserve_async(1024);
/// assert!(reserve.await.is_err()); // never fits a 1 KiB ring beside its header
/// # });
/// ```
#[must_use = "a future does nothing until polled"]
pub struct Reserve<'a, 'r> {
    ext: &'a mut ExtBuf<'r>,
    additional: usize,
    slot: TaskSlot,
}

impl Future for Reserve<'_, '_> {
    type Output = Result<(), WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (ext, additional) = (&mut *this.ext, this.additional);
        if ext.try_reserve(additional).is_ok() {
            return Poll::Ready(Ok(()));
        }
        let ring = ext.ring();
        let bytes = ext.len().checked_add(additional);
        if let Some(e) = hopeless_aligned(ring, bytes, 1) {
            return Poll::Ready(Err(e));
        }
        poll_counted(ring, &mut this.slot, cx, need(bytes, 1), |walk| {
            ext.unstick_if(walk);
            ext.try_reserve(additional).ok()
        })
        .map(Ok)
    }
}

impl fmt::Debug for Reserve<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserve")
            .field("additional", &self.additional)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Wait<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait")
            .field("bytes", &self.need.0)
            .finish_non_exhaustive()
    }
}
