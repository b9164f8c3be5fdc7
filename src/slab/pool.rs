//! `Pool<T>`: the single-thread pool, without atomic instructions.

use crate::sync::{Cell, UnsafeCell};
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use super::heap::{Heap, System};
use super::page::{Slot, SLOTS};
use super::{AllocError, PoolBox, PoolStats};

/// A pool for one thread: allocation and release are a few plain instructions.
///
/// It makes [`PoolBox`]es and [`ArenaRc`](super::ArenaRc)s, which stay on its thread
/// like the pool itself. Both may outlive the pool: a page goes when its last value
/// does.
///
/// ```
/// use ringmem::slab::Pool;
///
/// let pool = Pool::with_capacity(10);
/// let a = pool.alloc(1u64);
/// let b = pool.alloc_rc(2u64);
/// assert_eq!(*a + *b, 3);
/// assert_eq!(<(usize, usize)>::from(pool.stats()), (2, 61));
/// drop(pool);
/// assert_eq!(*a + *b, 3); // still valid
/// ```
///
/// It is neither `Send` nor `Sync`:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// send(ringmem::slab::Pool::<u8>::new());
/// ```
///
/// ```compile_fail
/// fn sync<S: Sync>(_: S) {}
/// sync(ringmem::slab::Pool::<u8>::new());
/// ```
pub struct Pool<T> {
    /// Only ever borrowed inside one method call, never across user code.
    heap: UnsafeCell<Heap<T, Cell<u64>>>,
    /// The pool makes `T`s; `!Send`/`!Sync` come from the heap's raw pointers.
    _values: PhantomData<T>,
}

impl<T> Pool<T> {
    /// An empty pool. It allocates its first page with its first value.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::<String>::new();
    /// assert_eq!(pool.capacity(), 0);
    /// ```
    pub const fn new() -> Self {
        Pool {
            heap: UnsafeCell::new(Heap::new()),
            _values: PhantomData,
        }
    }

    /// A pool with room for at least `cap` values (rounded up to whole pages of 63).
    ///
    /// # Panics
    ///
    /// Calls [`handle_alloc_error`](alloc::alloc::handle_alloc_error) if the pages
    /// cannot be allocated.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::<u32>::with_capacity(2048);
    /// assert_eq!(<(usize, usize)>::from(pool.stats()), (0, 2079));
    /// ```
    pub fn with_capacity(cap: usize) -> Self {
        super::or_oom(Self::try_with_capacity(cap))
    }

    /// [`with_capacity`](Self::with_capacity), returning [`AllocError`] instead.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::<u32>::try_with_capacity(100).unwrap();
    /// assert_eq!(pool.capacity(), 126);
    /// ```
    pub fn try_with_capacity(cap: usize) -> Result<Self, AllocError> {
        Ok(Pool {
            heap: UnsafeCell::new(Heap::with_capacity(cap)?),
            _values: PhantomData,
        })
    }

    /// Runs `f` on the heap.
    #[inline(always)]
    fn heap<R>(&self, f: impl FnOnce(&mut Heap<T, Cell<u64>>) -> R) -> R {
        // SAFETY: `Pool` is `!Sync`, and no method lends the heap across a call into
        // user code (the closures given here never run any), so this is the only
        // reference to it.
        f(unsafe { &mut *self.heap.get() })
    }

    #[inline(always)]
    fn slot(&self) -> Result<NonNull<Slot<T, Cell<u64>>>, AllocError> {
        self.heap(|h| h.take())
    }

    /// [`slot`](Self::slot) or the out-of-memory handler; branches on the cached bits
    /// before any `Result` is built, so the fast path carries no error to test.
    #[inline(always)]
    fn slot_or_oom(&self) -> NonNull<Slot<T, Cell<u64>>> {
        match self.heap(Heap::take_cached) {
            Some(slot) => slot,
            None => super::or_oom(self.heap(|h| h.take_slow(&System))),
        }
    }

    /// Used and free slots (`shared_arena`'s `stats` tuple, as a struct). Walks every
    /// page.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let item = pool.alloc(1);
    /// let stats = pool.stats();
    /// assert_eq!((stats.used, stats.free), (1, 62));
    /// # drop(item);
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.heap(|h| {
            let free = h.free_slots();
            PoolStats {
                used: h.pages() * SLOTS - free,
                free,
            }
        })
    }

    /// Values alive in the pool. Walks every page.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let _v: Vec<_> = (0..5).map(|i| pool.alloc(i)).collect();
    /// assert_eq!(pool.len(), 5);
    /// ```
    pub fn len(&self) -> usize {
        self.stats().used
    }

    /// Whether no value is alive in the pool.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::<u8>::new();
    /// assert!(pool.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values the pool can hold without a new page.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let _one = pool.alloc(1);
    /// assert_eq!(pool.capacity(), 63);
    /// ```
    pub fn capacity(&self) -> usize {
        self.heap(|h| h.pages() * SLOTS)
    }

    /// Returns every page with no live value to the system; `true` if any went.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::with_capacity(2048);
    /// let _values: Vec<_> = (0..80).map(|i| pool.alloc(i)).collect();
    /// assert!(pool.shrink_to_fit());
    /// assert_eq!(pool.stats().free, 46); // the 2 pages holding values stay
    /// assert!(!pool.shrink_to_fit()); // nothing left to give back
    /// ```
    pub fn shrink_to_fit(&self) -> bool {
        self.heap(|h| h.shrink()) > 0
    }
}

box_api!(Pool, PoolBox);
shared_api!(
    Pool,
    ArenaRc,
    alloc_rc,
    try_alloc_rc,
    alloc_rc_with,
    try_alloc_rc_with
);

impl<T> Default for Pool<T> {
    /// [`Pool::new`].
    ///
    /// ```
    /// let pool: ringmem::slab::Pool<u8> = Default::default();
    /// assert!(pool.is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Pool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PoolStats { used, free } = self.stats();
        f.debug_struct("Pool")
            .field("used", &used)
            .field("free", &free)
            .finish()
    }
}
