//! A ring per thread, for allocating without passing a [`Ring`] around.
//!
//! The first call on a thread creates its ring from the configuration set with
//! [`configure`] on that thread (default: 1 MiB, [`WhenFull::Heap`], so calls only fail
//! on bad input). Calls nest freely: the ring is borrowed shared, never through a
//! `RefCell`. Buffers may outlive the thread; its ring's memory goes with the last of
//! them.
//!
//! ```
//! use std::io::Write;
//! let mut a = ringmem::tls::fixed(64).unwrap();
//! a.write_all(b"from the thread's ring").unwrap();
//! let b = ringmem::tls::extendable(0, |mut ext| {
//!     let inner = ringmem::tls::fixed(8).unwrap(); // nesting is fine
//!     ext.extend_from_slice(&inner[..]);
//!     ext.extend_from_slice(b"grown");
//!     ext.finalize()
//! })
//! .unwrap();
//! assert_eq!(&b[..], b"grown");
//! ```

use std::cell::OnceCell;

use crate::sync::Cell;
use crate::{ExtBuf, FixedBufMut, Ring, RingBuilder, RingError, TypedBuf, WhenFull};

/// Capacity of a thread's ring when [`configure`] was not called.
pub const DEFAULT_CAPACITY: usize = 1 << 20;

thread_local! {
    static CONFIG: Cell<Option<RingBuilder>> = const { Cell::new(None) };
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
    /// ([`RingError::OutOfMemory`]): `configure` builds one to check it.
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

/// Sets how this thread's ring is built; only before its first use on this thread.
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
    if RING.with(|r| r.get().is_some()) {
        return Err(ConfigError::AlreadyCreated);
    }
    // Validate now rather than at first use.
    builder.build().map_err(ConfigError::Invalid)?;
    CONFIG.with(|c| c.set(Some(builder)));
    Ok(())
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
                let builder = CONFIG.with(|c| c.get()).unwrap_or_else(|| {
                    Ring::builder()
                        .capacity(DEFAULT_CAPACITY)
                        .when_full(WhenFull::Heap)
                });
                let ring = builder.build().ok()?;
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
#[cfg_attr(not(feature = "allocator-api2"), allow(dead_code))] // used by `OneRingAlloc`
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
/// as it borrows the ring); `f` usually ends with [`ExtBuf::finalize`]. If `f` panics,
/// the buffer is released as the panic unwinds, and the panic propagates.
///
/// ```
/// let buf = ringmem::tls::extendable(0, |mut ext| {
///     ext.extend_from_slice(b"abc");
///     ext.finalize()
/// })
/// .unwrap();
/// assert_eq!(&buf[..], b"abc");
/// ```
pub fn extendable<R>(n: usize, f: impl FnOnce(ExtBuf<'_>) -> R) -> Option<R> {
    with_ring(|r| r.extendable(n).map(f)).flatten()
}
