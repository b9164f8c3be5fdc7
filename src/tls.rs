//! A ring per thread, for allocating without passing a [`Ring`] around.
//!
//! The first call on a thread creates its ring (1 MiB, [`WhenFull::Heap`], so calls
//! only fail on bad input), unless [`configure`] built it first with another
//! configuration. Calls nest freely: the ring is borrowed shared, never through a
//! `RefCell`. Buffers may outlive the thread; its ring's memory goes with the last of
//! them.
//!
//! The functions are [`Ring`]'s, with its [naming grammar](crate#naming-grammar):
//! [`fixed`], [`typed`], [`extendable_with`] (the growable buffer borrows the ring, so
//! it lives in a closure), and their `_wait` / `_wait_timeout` forms, which park the
//! thread until a release makes room when the ring is configured with
//! [`WhenFull::Fail`] (under the default `Heap` policy the ring is never full: they
//! return at once). [`fixed_async`] and [`typed_async`] are futures that wait the same
//! way; each poll uses the ring of the thread that polls it. A growable buffer has no
//! `_async` form here: it borrows one thread's ring, and a task may be polled on
//! another thread after each `.await` (use a [`Ring`] of the task's own and
//! [`Ring::extendable_async`]).
//!
//! ```
//! use std::io::Write;
//! let mut a = ringmem::tls::fixed(64).unwrap();
//! a.write_all(b"from the thread's ring").unwrap();
//! let b = ringmem::tls::extendable_with(0, |mut ext| {
//!     let inner = ringmem::tls::fixed(8).unwrap(); // nesting is fine
//!     ext.extend_from_slice(&inner[..]);
//!     ext.extend_from_slice(b"grown");
//!     ext.finalize()
//! })
//! .unwrap();
//! assert_eq!(&b[..], b"grown");
//! ```

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::cell::OnceCell;
use std::time::Duration;

use crate::buf::{hopeless_aligned, typed_bytes, typed_need, wait_need};
use crate::ring::wait::{self, TaskSlot};
use crate::{ExtBuf, FixedBufMut, Ring, RingBuilder, RingError, TypedBuf, WaitError, WhenFull};

/// Capacity of a thread's ring when [`configure`] was not called.
pub const DEFAULT_CAPACITY: usize = 1 << 20;

crate::sync::thread_local! {
    static RING: OnceCell<Ring> = const { OnceCell::new() };
}

/// Why [`configure`] did not apply.
///
/// ```
/// let _ = ringmem::tls::fixed(8); // this thread's ring now exists
/// let err = ringmem::tls::configure(ringmem::Ring::builder()).unwrap_err();
/// assert_eq!(err, ringmem::tls::ConfigError::AlreadyCreated);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// This thread's ring was already created by an earlier call.
    AlreadyCreated,
    /// The configuration is invalid, or the ring it describes could not be allocated
    /// ([`RingError::OutOfMemory`]); the thread's ring is then built with the default
    /// configuration at its first use.
    Invalid(RingError),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::AlreadyCreated => f.write_str("this thread's ring already exists"),
            ConfigError::Invalid(e) => write!(f, "invalid ring configuration: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Builds this thread's ring from `builder`; only before its first use on this thread.
/// The ring built is the one the thread then uses (it is not built twice).
///
/// ```
/// use ringmem::{Ring, WhenFull};
/// std::thread::spawn(|| {
///     ringmem::tls::configure(Ring::builder().capacity(4096).when_full(WhenFull::Fail))
///         .unwrap();
///     assert!(ringmem::tls::fixed(8192).is_none());
/// })
/// .join()
/// .unwrap();
/// ```
pub fn configure(builder: RingBuilder) -> Result<(), ConfigError> {
    RING.with(|cell| {
        if cell.get().is_some() {
            return Err(ConfigError::AlreadyCreated);
        }
        let ring = builder.build().map_err(ConfigError::Invalid)?;
        // Building the ring runs no user code, so the cell is still empty.
        cell.set(ring).map_err(|_| ConfigError::AlreadyCreated)
    })
}

/// Runs `f` with this thread's ring; `None` while the thread is being torn down or if
/// the ring cannot be created (a later call tries again). A panic in `f` propagates and
/// leaves the ring as usable as before.
///
/// ```
/// let cap = ringmem::tls::with_ring(|ring| ring.capacity()).unwrap();
/// assert!(cap > 0);
/// ```
pub fn with_ring<R>(f: impl FnOnce(&Ring) -> R) -> Option<R> {
    RING.try_with(|cell| {
        let ring = match cell.get() {
            Some(ring) => ring,
            None => {
                let ring = Ring::builder()
                    .capacity(DEFAULT_CAPACITY)
                    .when_full(WhenFull::Heap)
                    .build()
                    .ok()?;
                // Creating the ring runs no user code, so the cell is still empty.
                cell.get_or_init(|| ring)
            }
        };
        Some(f(ring))
    })
    .ok()
    .flatten()
}

/// Runs `f` with this thread's ring if it already exists and the thread is not being
/// torn down: the inlined fast path for callers that fall back to [`with_ring`].
#[cfg(feature = "allocator-api2")] // only `OneRingAlloc` uses it
#[inline]
pub(crate) fn with_existing_ring<R>(f: impl FnOnce(&Ring) -> R) -> Option<R> {
    RING.try_with(|cell| cell.get().map(f)).ok().flatten()
}

/// A fixed buffer from this thread's ring; see [`Ring::fixed`].
///
/// ```
/// let buf = ringmem::tls::fixed(32).unwrap();
/// std::thread::spawn(move || drop(buf)).join().unwrap();
/// ```
pub fn fixed(n: usize) -> Option<FixedBufMut> {
    with_ring(|r| r.fixed(n)).flatten()
}

/// A typed buffer from this thread's ring; see [`Ring::typed`].
///
/// ```
/// let mut v = ringmem::tls::typed::<u32>(4).unwrap();
/// v.push(1).unwrap();
/// assert_eq!(&v[..], &[1]);
/// ```
pub fn typed<T>(n: usize) -> Option<TypedBuf<T>> {
    with_ring(|r| r.typed(n)).flatten()
}

/// Runs `f` on a growable buffer from this thread's ring (it cannot leave the closure,
/// as it borrows the ring); `f` usually ends with [`ExtBuf::finalize`]. `None` when the
/// ring cannot serve it (see [`Ring::extendable`]); `f` is not called then. If `f`
/// panics, the buffer is released as the panic unwinds, and the panic propagates.
///
/// ```
/// let buf = ringmem::tls::extendable_with(0, |mut ext| {
///     ext.extend_from_slice(b"abc");
///     ext.finalize()
/// })
/// .unwrap();
/// assert_eq!(&buf[..], b"abc");
/// ```
#[doc(alias = "extendable")]
pub fn extendable_with<R>(n: usize, f: impl FnOnce(ExtBuf<'_>) -> R) -> Option<R> {
    with_ring(|r| r.extendable(n).map(f)).flatten()
}

/// Runs `wait` on this thread's ring; when there is no ring to wait on (the thread is
/// being torn down, or its ring cannot be allocated), the allocator's refusal of the
/// `bytes` asked for.
fn wait_on<T>(
    bytes: Option<usize>,
    wait: impl FnOnce(&Ring) -> Result<T, WaitError>,
) -> Result<T, WaitError> {
    with_ring(wait).unwrap_or(Err(WaitError::OutOfMemory {
        requested: bytes.unwrap_or(usize::MAX),
    }))
}

/// [`fixed`], waiting for room when this thread's ring is full: see
/// [`Ring::fixed_wait`]. Only a ring configured with [`WhenFull::Fail`] is ever full;
/// the default one serves from the heap instead, and this returns at once.
///
/// # Errors
/// As [`Ring::fixed_wait`]; [`WaitError::OutOfMemory`] also when the thread's ring
/// cannot be created.
///
/// ```
/// use ringmem::{Ring, WhenFull};
/// std::thread::spawn(|| {
///     ringmem::tls::configure(Ring::builder().capacity(1024).when_full(WhenFull::Fail))
///         .unwrap();
///     let all = ringmem::tls::fixed(1016).unwrap(); // the whole ring
///     let consumer = std::thread::spawn(move || drop(all));
///     let buf = ringmem::tls::fixed_wait(512).unwrap(); // parks until the release
///     assert_eq!(buf.capacity(), 512);
///     consumer.join().unwrap();
/// })
/// .join()
/// .unwrap();
/// ```
pub fn fixed_wait(n: usize) -> Result<FixedBufMut, WaitError> {
    wait_on(Some(n), |r| r.fixed_wait(n))
}

/// [`fixed_wait`] for at most `timeout`.
///
/// # Errors
/// As [`fixed_wait`], and [`WaitError::TimedOut`].
///
/// ```
/// use std::time::Duration;
/// use ringmem::{Ring, WaitError, WhenFull};
/// std::thread::spawn(|| {
///     ringmem::tls::configure(Ring::builder().capacity(1024).when_full(WhenFull::Fail))
///         .unwrap();
///     let _all = ringmem::tls::fixed(1016).unwrap();
///     let err = ringmem::tls::fixed_wait_timeout(8, Duration::from_millis(5)).unwrap_err();
///     assert_eq!(err, WaitError::TimedOut);
/// })
/// .join()
/// .unwrap();
/// ```
pub fn fixed_wait_timeout(n: usize, timeout: Duration) -> Result<FixedBufMut, WaitError> {
    wait_on(Some(n), |r| r.fixed_wait_timeout(n, timeout))
}

/// [`typed`], waiting for room when this thread's ring is full: see
/// [`Ring::typed_wait`] and [`fixed_wait`].
///
/// # Errors
/// As [`Ring::typed_wait`]; [`WaitError::OutOfMemory`] also when the thread's ring
/// cannot be created.
///
/// ```
/// let mut v = ringmem::tls::typed_wait::<u64>(4).unwrap();
/// v.push(7).unwrap();
/// assert_eq!(v[0], 7);
/// ```
pub fn typed_wait<T>(n: usize) -> Result<TypedBuf<T>, WaitError> {
    wait_on(typed_bytes::<T>(n), |r| r.typed_wait(n))
}

/// [`typed_wait`] for at most `timeout`.
///
/// # Errors
/// As [`typed_wait`], and [`WaitError::TimedOut`].
///
/// ```
/// use std::time::Duration;
/// let v = ringmem::tls::typed_wait_timeout::<u32>(4, Duration::from_millis(5)).unwrap();
/// assert_eq!(v.capacity(), 4);
/// ```
pub fn typed_wait_timeout<T>(n: usize, timeout: Duration) -> Result<TypedBuf<T>, WaitError> {
    wait_on(typed_bytes::<T>(n), |r| r.typed_wait_timeout(n, timeout))
}

/// [`extendable_with`], waiting for room for the buffer's first `n` bytes when this
/// thread's ring is full (see [`Ring::extendable_wait`]); then runs `f` on it. Only
/// the start waits: growing inside `f` does not.
///
/// # Errors
/// As [`Ring::extendable_wait`] (`f` is not called then); [`WaitError::OutOfMemory`]
/// also when the thread's ring cannot be created.
///
/// ```
/// let buf = ringmem::tls::extendable_wait_with(0, |mut ext| {
///     ext.extend_from_slice(b"abc");
///     ext.finalize()
/// })
/// .unwrap();
/// assert_eq!(&buf[..], b"abc");
/// ```
pub fn extendable_wait_with<R>(n: usize, f: impl FnOnce(ExtBuf<'_>) -> R) -> Result<R, WaitError> {
    wait_on(Some(n), |r| r.extendable_wait(n).map(f))
}

/// [`extendable_wait_with`] for at most `timeout`.
///
/// # Errors
/// As [`extendable_wait_with`], and [`WaitError::TimedOut`].
///
/// ```
/// use std::time::Duration;
/// let len = ringmem::tls::extendable_wait_timeout_with(16, Duration::from_millis(5), |ext| {
///     ext.capacity()
/// })
/// .unwrap();
/// assert!(len >= 16);
/// ```
pub fn extendable_wait_timeout_with<R>(
    n: usize,
    timeout: Duration,
    f: impl FnOnce(ExtBuf<'_>) -> R,
) -> Result<R, WaitError> {
    wait_on(Some(n), |r| r.extendable_wait_timeout(n, timeout).map(f))
}

/// [`fixed`] as a future that waits for room when the ring is full: woken by a release
/// on any thread, with no runtime of its own (see [`Ring::fixed_async`]). Each poll
/// tries the ring of the thread that polls it, so on a multi-threaded executor the
/// buffer comes from whichever worker's ring has room when the task is woken. The
/// future holds no borrow: it is `Send` and `'static`.
///
/// # Errors
/// As [`fixed_wait`]; a timeout is the executor's (`tokio::time::timeout`).
///
/// ```
/// use ringmem::{Ring, WhenFull};
/// std::thread::spawn(|| {
///     ringmem::tls::configure(Ring::builder().capacity(1024).when_full(WhenFull::Fail))
///         .unwrap();
///     let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
///     rt.block_on(async {
///         let all = ringmem::tls::fixed(1016).unwrap(); // the whole ring
///         let consumer = std::thread::spawn(move || drop(all));
///         let buf = ringmem::tls::fixed_async(512).await.unwrap(); // after the release
///         assert_eq!(buf.capacity(), 512);
///         consumer.join().unwrap();
///     });
/// })
/// .join()
/// .unwrap();
/// ```
pub fn fixed_async(n: usize) -> TlsWait<FixedBufMut> {
    TlsWait::new(n, (Some(n), 1), |r, n| r.fixed(n))
}

/// [`typed`] as a future that waits for room (see [`fixed_async`]).
///
/// # Errors
/// As [`typed_wait`].
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut v = ringmem::tls::typed_async::<u32>(8).await.unwrap();
/// v.push(1).unwrap();
/// # });
/// ```
pub fn typed_async<T>(n: usize) -> TlsWait<TypedBuf<T>> {
    TlsWait::new(n, typed_need::<T>(n), |r, n| r.typed::<T>(n))
}

/// The future of [`fixed_async`] and [`typed_async`]: ready with a buffer from the
/// polling thread's ring once it has room, or with why it never will.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let wait: ringmem::tls::TlsWait<ringmem::FixedBufMut> = ringmem::tls::fixed_async(0);
/// assert!(wait.await.is_err()); // an empty request never fits
/// # });
/// ```
#[must_use = "a future does nothing until polled"]
pub struct TlsWait<T> {
    /// The allocating call and its argument.
    claim: fn(&Ring, usize) -> Option<T>,
    n: usize,
    /// The bytes asked for and their alignment, to tell a request no release can
    /// serve.
    need: (Option<usize>, usize),
    slot: TaskSlot,
}

impl<T> TlsWait<T> {
    fn new(n: usize, need: (Option<usize>, usize), claim: fn(&Ring, usize) -> Option<T>) -> Self {
        TlsWait {
            claim,
            n,
            need,
            slot: TaskSlot::default(),
        }
    }
}

impl<T> Future for TlsWait<T> {
    type Output = Result<T, WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (claim, n, (bytes, align)) = (this.claim, this.n, this.need);
        let now = with_ring(|ring| match claim(ring, n) {
            Some(t) => Some(Ok(t)),
            None => hopeless_aligned(ring, bytes, align).map(Err),
        });
        match now {
            // No ring to wait on: as the `_wait` forms say.
            None => {
                return Poll::Ready(Err(WaitError::OutOfMemory {
                    requested: bytes.unwrap_or(usize::MAX),
                }))
            }
            Some(Some(done)) => return Poll::Ready(done),
            Some(None) => {}
        }
        // This thread's ring: the task may be polled on another thread next time.
        let span = with_ring(Ring::span).unwrap_or(wait::Span::ALL);
        let starting = this.slot.starting();
        let poll = wait::poll_until(&mut this.slot, cx, span, wait_need(bytes, align), |walk| {
            with_ring(|ring| {
                ring.unstick_if(walk);
                claim(ring, n)
            })
            .flatten()
        });
        if starting && poll.is_pending() {
            with_ring(Ring::count_wait);
        }
        poll.map(Ok)
    }
}

impl<T> fmt::Debug for TlsWait<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsWait")
            .field("bytes", &self.need.0)
            .finish_non_exhaustive()
    }
}
