//! `Arena<T>`: the pool one thread allocates from at a time; handles drop anywhere.

use crate::sync::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use super::heap::{Heap, System};
#[cfg(feature = "std")]
use super::magazine;
use super::page::{Slot, SLOTS};
use super::{AllocError, ArenaBox, PoolStats};
use crate::sync::AtomicU64;

/// A pool that one thread allocates from at a time, whose values may be dropped on any
/// thread.
///
/// Allocation is a few plain instructions. Dropping an [`ArenaBox`] or the last
/// [`ArenaArc`](super::ArenaArc) on the thread that allocates from the arena is a plain
/// `or` into that thread's magazine when the slot lies in the page the arena is filling
/// (the arena takes those slots back from there), and one atomic read-modify-write on
/// the slot's page otherwise. A thread that allocated from the arena keeps up to 63 of
/// that page's slots in its magazine, counted as used by the arena's other threads,
/// until it allocates from another arena, asks this one for `stats`, `len` or
/// `shrink_to_fit`, drops it, or exits. The arena can be
/// moved to another thread (it is `Send` when `T` is) but not shared (`!Sync`); use a
/// [`SharedArena`](super::SharedArena) to allocate from several threads at once.
/// Handles may outlive the arena.
///
/// ```
/// use ringmem::slab::Arena;
///
/// let arena = Arena::new();
/// let foo = arena.alloc(1);
/// let bar = std::thread::spawn(move || {
///     let bar = arena.alloc(100);
///     drop(arena); // the values stay valid
///     bar
/// });
/// assert_eq!(*bar.join().unwrap() + *foo, 101);
/// ```
///
/// Not `Sync`:
///
/// ```compile_fail
/// fn sync<S: Sync>(_: S) {}
/// sync(ringmem::slab::Arena::<u8>::new());
/// ```
///
/// and `Send` only when `T` is:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// send(ringmem::slab::Arena::<std::rc::Rc<u8>>::new());
/// ```
pub struct Arena<T> {
    /// Only ever borrowed inside one method call, never across user code.
    heap: UnsafeCell<Heap<T, AtomicU64>>,
    /// The arena makes `T`s; `!Sync` comes from the `UnsafeCell`.
    _values: PhantomData<T>,
}

// SAFETY: the heap is only reached through `&self` methods and `Arena` is `!Sync`, so
// wherever the arena moves, one thread at a time uses it; the pages it shares with
// handles are only touched through atomic operations on their words. `T: Send` keeps a
// container of `!Send` values from crossing threads, as `Vec<T>` does.
unsafe impl<T: Send> Send for Arena<T> {}

impl<T> Arena<T> {
    /// An empty pool. It allocates its first page with its first value.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::<String>::new();
    /// assert_eq!(pool.capacity(), 0);
    /// ```
    pub const fn new() -> Self {
        Arena {
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
    /// let pool = ringmem::slab::Arena::<u32>::with_capacity(2048);
    /// assert_eq!(<(usize, usize)>::from(pool.stats()), (0, 2079));
    /// ```
    pub fn with_capacity(cap: usize) -> Self {
        super::or_oom(Self::try_with_capacity(cap))
    }

    /// [`with_capacity`](Self::with_capacity), returning [`AllocError`] instead.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::<u32>::try_with_capacity(100).unwrap();
    /// assert_eq!(pool.capacity(), 126);
    /// ```
    pub fn try_with_capacity(cap: usize) -> Result<Self, AllocError> {
        Ok(Arena {
            heap: UnsafeCell::new(Heap::with_capacity(cap)?),
            _values: PhantomData,
        })
    }

    /// Runs `f` on the heap.
    #[inline(always)]
    fn heap<R>(&self, f: impl FnOnce(&mut Heap<T, AtomicU64>) -> R) -> R {
        // SAFETY: `Arena` is `!Sync`, and no method lends the heap across a call into
        // user code (the closures given here never run any), so this is the only
        // reference to it.
        f(unsafe { &mut *self.heap.get() })
    }

    #[inline(always)]
    fn slot(&self) -> Result<NonNull<Slot<T, AtomicU64>>, AllocError> {
        match self.heap(Heap::take_cached) {
            Some(slot) => Ok(slot),
            None => self.refill(),
        }
    }

    /// The heap's cached bits ran out. With magazines: first the slots of the current
    /// page that this thread released into its magazine (no atomic instruction); else
    /// the heap refills from its pages' words, or new pages, and this thread's magazine
    /// adopts the page it then fills, with one of its free bits as the pin.
    #[cold]
    #[inline(never)]
    fn refill(&self) -> Result<NonNull<Slot<T, AtomicU64>>, AllocError> {
        #[cfg(feature = "std")]
        {
            self.heap(|h| {
                if let Some(page) = h.current() {
                    let bits = magazine::take_released(page.cast());
                    if bits != 0 {
                        // SAFETY: free slots of the current page, which the magazine
                        // just gave up to us.
                        unsafe { h.add_local(bits) };
                        if let Some(slot) = h.take_cached() {
                            return Ok(slot);
                        }
                    }
                }
                let slot = h.take_slow(&System)?;
                if let Some(page) = h.current() {
                    if !magazine::holds(page.cast()) {
                        let pin = h.take_lowest();
                        // SAFETY: `page` is this arena's live current page and `pin` a
                        // free bit of it that the heap just gave up to us.
                        if pin != 0 && !unsafe { magazine::adopt(page, pin) } {
                            // SAFETY: not taken: the bit is still ours, of the current page.
                            unsafe { h.add_local(pin) };
                        }
                    }
                }
                Ok(slot)
            })
        }
        #[cfg(not(feature = "std"))]
        self.heap(|h| h.take_slow(&System))
    }

    /// Gives back this thread's magazine's slots of this arena, so that a count, a
    /// shrink or the arena's drop sees them as free.
    #[inline]
    fn flush_magazine(&self) {
        #[cfg(feature = "std")]
        self.heap(|h| magazine::flush_arena(|page| h.lists(page.cast())));
    }

    /// [`slot`](Self::slot) or the out-of-memory handler; branches on the cached bits
    /// before any `Result` is built, so the fast path carries no error to test.
    #[inline(always)]
    fn slot_or_oom(&self) -> NonNull<Slot<T, AtomicU64>> {
        match self.heap(Heap::take_cached) {
            Some(slot) => slot,
            None => super::or_oom(self.refill()),
        }
    }

    /// Used and free slots (`shared_arena`'s `stats` tuple, as a struct). Walks every
    /// page. Slots that another thread holds in its magazine (it allocated from the
    /// arena before the arena moved) count as used; the calling thread's are given back
    /// first.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::new();
    /// let item = pool.alloc(1);
    /// let stats = pool.stats();
    /// assert_eq!((stats.used, stats.free), (1, 62));
    /// # drop(item);
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.flush_magazine();
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
    /// let pool = ringmem::slab::Arena::new();
    /// let _v: Vec<_> = (0..5).map(|i| pool.alloc(i)).collect();
    /// assert_eq!(pool.len(), 5);
    /// ```
    pub fn len(&self) -> usize {
        self.stats().used
    }

    /// Whether no value is alive in the pool.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::<u8>::new();
    /// assert!(pool.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values the pool can hold without a new page.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::new();
    /// let _one = pool.alloc(1);
    /// assert_eq!(pool.capacity(), 63);
    /// ```
    pub fn capacity(&self) -> usize {
        self.heap(|h| h.pages() * SLOTS)
    }

    /// Returns every page with no live value to the system; `true` if any went.
    ///
    /// ```
    /// let pool = ringmem::slab::Arena::with_capacity(2048);
    /// let _values: Vec<_> = (0..80).map(|i| pool.alloc(i)).collect();
    /// assert!(pool.shrink_to_fit());
    /// assert_eq!(pool.stats().free, 46); // the 2 pages holding values stay
    /// ```
    pub fn shrink_to_fit(&self) -> bool {
        self.flush_magazine();
        self.heap(|h| h.shrink()) > 0
    }
}

box_api!(Arena, ArenaBox);
shared_api!(
    Arena,
    ArenaRc,
    alloc_rc,
    try_alloc_rc,
    alloc_rc_with,
    try_alloc_rc_with
);
shared_api!(
    Arena,
    ArenaArc,
    alloc_arc,
    try_alloc_arc,
    alloc_arc_with,
    try_alloc_arc_with
);

impl<T> Drop for Arena<T> {
    /// Gives back this thread's magazine's slots of the arena; then the heap lets go of
    /// its pages, each freed now if nothing in it is in use, else by its last release.
    fn drop(&mut self) {
        self.flush_magazine();
    }
}

impl<T> Default for Arena<T> {
    /// [`Arena::new`].
    ///
    /// ```
    /// let pool: ringmem::slab::Arena<u8> = Default::default();
    /// assert!(pool.is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Arena<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PoolStats { used, free } = self.stats();
        f.debug_struct("Arena")
            .field("used", &used)
            .field("free", &free)
            .finish()
    }
}
