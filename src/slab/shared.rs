//! `SharedArena<T>`: many threads allocate at once.
//!
//! The arena is a few shards, each a heap behind a one-word try-lock, padded to its own
//! cache lines. A thread starts at the shard its identity hashes to (see
//! `thread_hint`), takes the lock with one atomic swap, allocates as a plain `Arena`
//! would, and unlocks with a `Release` store. If its shard is busy it tries the others;
//! there is no global lock. Pages belong to one shard, but handles release into the page
//! word, so they never take a lock.
//!
//! With `std`, a thread does not lock a shard per value: from its second allocation in a
//! row from one arena, it takes every free bit the shard has cached for one page (up to
//! 63 slots) into its own magazine (`magazine.rs`) and allocates from there with no lock
//! and no atomic instruction, like a `Pool`; the values it drops itself go back there,
//! with no atomic instruction either. The shard's lock is taken once per magazine-full.
//! An arena's first allocation on a thread (after the thread allocated from another
//! arena) takes one slot under the lock, so a short-lived arena, or two
//! arenas used in turn, do not make threads swap magazines at every allocation. Without
//! `std` (no thread-locals) every allocation takes the lock.
//!
//! The first page `with_capacity` makes is the arena's *seed page*: its free bits stay
//! in its word, and an allocation that finds no slot in its thread's magazine takes one
//! from there with a compare-and-swap before it tries a shard's lock (at a thread's
//! second miss in a row it takes them all into its magazine). So a fresh arena's first
//! allocation touches the arena and the page, not a shard's cache line as well, and its
//! locked instruction is on the line the value goes to. `shrink_to_fit` keeps the seed
//! page: another thread may be taking a slot from it without any lock.
//!
//! The pages `with_capacity` makes are not dealt out to all the shards up front (a
//! thread would find its own shard with a quarter of them and grow while the others sit
//! idle): the building thread's shard takes its share, the rest wait in a [`Reserve`],
//! and a shard that must grow claims them from there, with one compare-and-swap, before
//! it asks the system for more.

use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use super::heap::{Heap, PageSource, System};
#[cfg(feature = "std")]
use super::magazine;
use super::page::{Page, Slot, SLOTS};
use super::{AllocError, ArenaBox, PoolStats};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, CheckedCell, Ordering};

/// A pool that many threads allocate from at once; its values may be dropped on any
/// thread.
///
/// It makes [`ArenaBox`]es, [`ArenaArc`](super::ArenaArc)s and
/// [`ArenaRc`](super::ArenaRc)s, which may outlive it. It is `Send` and `Sync` when `T`
/// is `Send`.
///
/// A thread that keeps allocating from the arena takes free slots a page at a time (up
/// to 63) into a thread-local magazine and allocates from it without a lock or an
/// atomic instruction; releasing is one atomic instruction on any thread, or none on a
/// thread whose magazine holds the value's page (the slot joins the magazine). A thread
/// gives its cached slots back when it allocates from another arena, calls
/// [`stats`](Self::stats), [`len`](Self::len) or [`shrink_to_fit`](Self::shrink_to_fit)
/// on this one, drops it, or exits. Until then they count as used, and their page stays
/// allocated even after the arena is dropped: at most one page per thread.
///
/// ```
/// use ringmem::slab::SharedArena;
/// use std::sync::Arc;
///
/// let arena = Arc::new(SharedArena::new());
/// let threads: Vec<_> = (0..4u64)
///     .map(|t| {
///         let arena = Arc::clone(&arena);
///         std::thread::spawn(move || (0..100).map(|i| arena.alloc(t * 100 + i)).collect::<Vec<_>>())
///     })
///     .collect();
/// let values: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
/// assert_eq!(arena.len(), 400);
/// drop(arena); // the values stay valid
/// assert_eq!(values.iter().map(|v| **v).sum::<u64>(), (0..400).sum());
/// ```
///
/// `Send` and `Sync` only when `T` is `Send`:
///
/// ```compile_fail
/// fn sync<S: Sync>(_: S) {}
/// sync(ringmem::slab::SharedArena::<std::rc::Rc<u8>>::new());
/// ```
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// send(ringmem::slab::SharedArena::<std::rc::Rc<u8>>::new());
/// ```
pub struct SharedArena<T> {
    /// A power of two of shards. A `Vec` rather than a boxed slice: `into_boxed_slice`
    /// reallocates when the capacity exceeds the length (`try_reserve_exact` allows
    /// that), and that reallocation aborts if the allocator refuses it.
    shards: Vec<Shard<T>>,
    /// This arena's identity in the threads' magazines (`magazine.rs`).
    #[cfg(feature = "std")]
    id: u64,
    /// The pages made by `with_capacity` that no shard has claimed yet.
    reserve: Reserve<T>,
    /// The first page `with_capacity` made: any thread takes free slots from its word
    /// with a compare-and-swap, without a shard lock (see `seed_slot`).
    ///
    /// Invariant: the page is live as long as the arena: it is listed in a shard's
    /// heap, and `shrink_to_fit` never frees it.
    seed_page: Option<NonNull<Page<T, AtomicU64>>>,
    _values: PhantomData<T>,
}

/// Pages made up front, handed to whichever shard needs them first.
///
/// Invariants: `pages[..next]` have been claimed (each by exactly one shard heap, or freed
/// by `shrink_to_fit`) and are no business of the reserve any more; `pages[next..]` are
/// live, entirely free (every slot bit in their word), and owned by the reserve alone.
/// `next` only grows, up to `pages.len()`.
///
/// `pages` is a `Vec` for the reason `SharedArena::shards` is: after a failed page
/// allocation it is shorter than its buffer, and boxing it would reallocate, aborting
/// if refused.
struct Reserve<T> {
    pages: Vec<NonNull<Page<T, AtomicU64>>>,
    next: AtomicUsize,
}

impl<T> Reserve<T> {
    /// Claims up to `count` pages; the returned ones are the caller's alone.
    #[inline]
    fn claim(&self, count: usize) -> &[NonNull<Page<T, AtomicU64>>] {
        let len = self.pages.len();
        // Relaxed: the counter only splits the pages into disjoint claims (one RMW per
        // claim, so each index goes once); the pages themselves were written before the
        // arena was shared, and whatever shared it published them.
        let mut start = self.next.load(Ordering::Relaxed);
        loop {
            if start >= len {
                return &[];
            }
            let end = start + count.min(len - start);
            // Relaxed, as above: synchronises with nothing.
            match self
                .next
                .compare_exchange(start, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return &self.pages[start..end],
                Err(now) => start = now,
            }
        }
    }

    /// Pages not claimed yet (a snapshot).
    fn unclaimed(&self) -> usize {
        // Relaxed: a statistic.
        self.pages.len() - self.next.load(Ordering::Relaxed).min(self.pages.len())
    }
}

impl<T> PageSource<T, AtomicU64> for Reserve<T> {
    fn pages(
        &self,
        count: usize,
        out: &mut Vec<NonNull<Page<T, AtomicU64>>>,
    ) -> Result<(), AllocError> {
        let claimed = self.claim(count);
        if claimed.is_empty() {
            return System.pages(count, out);
        }
        // The claimed pages are entirely free and ours alone (struct invariant). Only
        // these: capacity made up front is used up before the system is asked for more.
        out.extend_from_slice(claimed);
        Ok(())
    }
}

impl<T> Drop for Reserve<T> {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, so every claim happened before (whatever gave us the
        // exclusive access synchronised with the claimers).
        let next = self.next.load(Ordering::Relaxed).min(self.pages.len());
        for &page in &self.pages[next..] {
            // SAFETY: unclaimed pages are live, entirely free and known to no one else
            // (struct invariant), and the reserve forgets them here.
            unsafe { Page::dealloc(page) };
        }
    }
}

// SAFETY: each shard's heap is only reached under its lock (`Shard::lock`), so it is used
// by one thread at a time; the pages it shares with handles are only touched through
// atomic operations on their words. `T: Send`: values made on one thread are dropped by
// handles that may be sent, and a `!Send` `T` has no business in a shared container.
unsafe impl<T: Send> Send for SharedArena<T> {}
// SAFETY: as above: `&SharedArena` only allocates, under the shard locks or with atomic
// RMWs on the seed page's word.
unsafe impl<T: Send> Sync for SharedArena<T> {}

/// A heap behind a try-lock, 128 bytes from the next shard's.
///
/// `repr(C)`: the lock first, then the heap's hot fields (`Heap` is `repr(C)` too), so
/// locking and taking a cached slot touch one cache line, two at most. (Left to itself,
/// rustc put the 64-byte heap first and the lock after it.)
///
/// Padded to [`SHARD_BYTES`], so no cache line holds two shards' hot fields, but not
/// over-aligned: an array of `align(128)` shards goes through glibc's `memalign`, whose
/// leftover fragments scatter the allocations made after it, and in a program that
/// makes many small arenas the hardware prefetcher then loses track of them.
///
/// Invariant: `heap` is only accessed by the thread that set `locked` from `false` to
/// `true`, until it stores `false` again.
#[repr(C)]
struct Shard<T> {
    locked: AtomicBool,
    heap: CheckedCell<Heap<T, AtomicU64>>,
    _pad: [u8; SHARD_PAD],
}

/// The bytes a shard takes in the array.
const SHARD_BYTES: usize = 128;
/// What a shard needs after its lock and heap to take [`SHARD_BYTES`]. `Heap`'s size does
/// not depend on `T` (pointers, a `Vec` and counters), so `()` stands in for it.
const SHARD_PAD: usize = SHARD_BYTES.saturating_sub(
    core::mem::size_of::<Heap<(), AtomicU64>>() + core::mem::align_of::<Heap<(), AtomicU64>>(),
);

/// Proof that this thread holds a shard's lock; unlocks on drop.
struct Locked<'a, T> {
    shard: &'a Shard<T>,
}

impl<T> Shard<T> {
    /// Takes the lock if it looks free: a plain load first, so a busy shard costs no
    /// RMW (Relaxed: only a hint; the swap decides).
    #[inline(always)]
    fn try_lock(&self) -> Option<Locked<'_, T>> {
        if self.locked.load(Ordering::Relaxed) {
            return None;
        }
        self.try_swap()
    }

    /// Takes the lock if it is free. Unlike the plain load of `try_lock`, the swap
    /// always reads the latest value, so loops built on it make progress (in loom too).
    #[inline(always)]
    fn try_swap(&self) -> Option<Locked<'_, T>> {
        // Acquire: pairs with the `Release` unlock, so the previous holder's heap
        // writes are visible.
        if self.locked.swap(true, Ordering::Acquire) {
            return None;
        }
        Some(Locked { shard: self })
    }

    /// Waits for the lock: only for the slow paths (`stats`, `shrink_to_fit`).
    fn lock(&self) -> Locked<'_, T> {
        let mut spins = 0u32;
        loop {
            if let Some(locked) = self.try_swap() {
                return locked;
            }
            spin(&mut spins);
        }
    }
}

impl<T> Locked<'_, T> {
    /// Runs `f` on the shard's heap; `f` must not run user code.
    #[inline(always)]
    fn heap<R>(&self, f: impl FnOnce(&mut Heap<T, AtomicU64>) -> R) -> R {
        self.shard.heap.with_mut(|heap| {
            // SAFETY: we hold the shard's lock, so this is the only reference to the
            // heap (struct invariant of `Shard`).
            f(unsafe { &mut *heap })
        })
    }
}

impl<T> Drop for Locked<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: pairs with the `Acquire` swap of the next holder.
        #[cfg(not(loom))]
        self.shard.locked.store(false, Ordering::Release);
        // loom keeps only a partial modification order between a plain store and other
        // threads' RMWs: it lets a later swap read a failed locker's `true` written
        // before this store (impossible in C11: an RMW reads the value immediately
        // before it), and then reports a lock that is never released. An RMW unlock has
        // the same `Release` synchronisation and loom orders it totally.
        #[cfg(loom)]
        self.shard.locked.swap(false, Ordering::Release);
    }
}

/// Waits a little: a CPU hint, a scheduler yield after a while, a loom yield in models.
fn spin(spins: &mut u32) {
    *spins += 1;
    crate::sync::model_yield();
    #[cfg(real_std)]
    if *spins > 64 {
        std::thread::yield_now();
        return;
    }
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Which shard a thread starts at: a hash of an address that is fixed for the thread and
/// distinct between live threads, so threads spread over the shards and each keeps its
/// own. Only a hint: any shard is correct.
///
/// With `std`, the address of a thread-local (a `const` one: no lazy initialisation,
/// one instruction to find). Without `std`, the stack address: thread stacks are
/// separate mappings, but a thread whose stack depth crosses a 64 KiB boundary changes
/// shard (harmless, only slower). Under loom, the same for every thread: a model must
/// run the same way each time loom replays it, and addresses differ between its runs.
#[inline(always)]
fn thread_hint() -> usize {
    #[cfg(all(feature = "std", not(loom)))]
    let addr = {
        crate::sync::thread_local! {
            static ANCHOR: u8 = const { 0 };
        }
        ANCHOR.with(|anchor| core::ptr::addr_of!(*anchor) as usize as u64)
    };
    #[cfg(all(not(feature = "std"), not(loom)))]
    let addr = {
        let marker = 0u8;
        (core::ptr::addr_of!(marker) as usize as u64) >> 16
    };
    #[cfg(loom)]
    let addr = 0u64;
    // The top 6 bits of a multiplicative hash: enough for the at most 64 shards.
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize
}

/// How many shards a new arena gets: twice the parallelism, as a power of two.
///
/// `available_parallelism` reads cgroup files (several system calls, microseconds), so
/// it is asked once per process. It also allocates, and an allocation it cannot have
/// aborts the process (`handle_alloc_error`): so only the constructors that abort on a
/// refused allocation anyway (`new`, `with_capacity`) may ask it (`may_ask`). A fallible
/// constructor takes the answer if one was cached, else [`UNASKED_SHARDS`]: the count
/// only spreads threads over locks, and any power of two is correct.
fn shard_count(may_ask: bool) -> usize {
    #[cfg(any(loom, miri))]
    let n: usize = {
        let _ = may_ask;
        2
    };
    #[cfg(all(real_std, not(miri)))]
    let n = {
        static PARALLELISM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        match PARALLELISM.get() {
            Some(&n) => n,
            None if may_ask => *PARALLELISM
                .get_or_init(|| std::thread::available_parallelism().map_or(4, |n| n.get() * 2)),
            None => UNASKED_SHARDS,
        }
    };
    #[cfg(all(not(feature = "std"), not(any(loom, miri))))]
    let n: usize = {
        let _ = may_ask;
        UNASKED_SHARDS
    };
    n.next_power_of_two().clamp(2, 64)
}

/// The shard count when the parallelism is unknown: without `std`, or for an arena that
/// a fallible constructor builds before any infallible one has looked the parallelism
/// up (see [`shard_count`]).
#[cfg(not(any(loom, miri)))]
const UNASKED_SHARDS: usize = 8;

impl<T> SharedArena<T> {
    /// An empty arena. Each shard allocates its first page with its first value.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::<String>::new();
    /// assert_eq!(arena.capacity(), 0);
    /// ```
    pub fn new() -> Self {
        super::or_oom(Self::with_shards(0, shard_count(true)))
    }

    /// An arena with room for at least `cap` values (rounded up to whole pages of 63).
    /// The calling thread's shard gets its share of the pages at once; the others go to
    /// whichever shards need them first.
    ///
    /// # Panics
    ///
    /// Calls [`handle_alloc_error`](alloc::alloc::handle_alloc_error) if the pages
    /// cannot be allocated.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::<u32>::with_capacity(2048);
    /// assert_eq!(arena.stats().free, 2079);
    /// ```
    pub fn with_capacity(cap: usize) -> Self {
        super::or_oom(Self::with_shards(cap, shard_count(true)))
    }

    /// [`with_capacity`](Self::with_capacity), returning [`AllocError`] instead. It
    /// never calls the out-of-memory handler: if no arena was built with `new` or
    /// `with_capacity` before, it does not look the machine's parallelism up (that
    /// allocates infallibly) and makes a fixed number of shards.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::<u32>::try_with_capacity(100).unwrap();
    /// assert_eq!(arena.capacity(), 126);
    /// ```
    pub fn try_with_capacity(cap: usize) -> Result<Self, AllocError> {
        Self::with_shards(cap, shard_count(false))
    }

    /// An arena of `n` shards (a power of two) with room for at least `cap` values.
    /// Every allocation here is fallible.
    fn with_shards(cap: usize, n: usize) -> Result<Self, AllocError> {
        debug_assert!(n.is_power_of_two(), "{n} shards");
        let count = cap.div_ceil(SLOTS);
        let mut reserve = Reserve {
            pages: Vec::new(),
            next: AtomicUsize::new(0),
        };
        reserve
            .pages
            .try_reserve_exact(count)
            .map_err(|_| AllocError {
                requested: count.saturating_mul(core::mem::size_of::<usize>()),
            })?;
        // Made straight into the reserve, so the pages made so far are freed (by its
        // `Drop`) if one fails.
        System.pages(count, &mut reserve.pages)?;
        // The thread that builds an arena is usually among the first to allocate from
        // it: its shard takes its fair share now, so its first allocation finds a page
        // ready. The rest waits in the reserve for whichever shards need it.
        let home = thread_hint() & (n - 1);
        let mut shards = Vec::new();
        shards.try_reserve_exact(n).map_err(|_| AllocError {
            requested: n.saturating_mul(core::mem::size_of::<Shard<T>>()),
        })?;
        let mut seed_page = None;
        for i in 0..n {
            let mut heap = Heap::new();
            if i == home && count > 0 {
                // Pages claimed here belong to the heap at once, so an error leaves
                // every page with exactly one owner (the heap or the reserve).
                heap.grow(count.div_ceil(n), &reserve)?;
                // The first page's bits go back from the heap's cache to the page word,
                // where any thread can take them (the page stays listed in the heap).
                // `grow` left them cached, so no new page is made.
                let (page, bits) = heap.take_all_from(&reserve)?;
                // SAFETY: just made, listed in `heap`. No handle has a slot in it and no
                // other thread can reach it yet: a plain (Relaxed) store.
                unsafe { Page::word(page) }.store(bits, Ordering::Relaxed);
                seed_page = Some(page);
            }
            shards.push(Shard {
                locked: AtomicBool::new(false),
                heap: CheckedCell::new(heap),
                _pad: [0; SHARD_PAD],
            });
        }
        Ok(SharedArena {
            shards,
            #[cfg(feature = "std")]
            id: magazine::new_arena_id(),
            reserve,
            seed_page,
            _values: PhantomData,
        })
    }

    /// A free slot, ours alone, or [`AllocError`] if a new page is needed and cannot be
    /// had.
    #[inline(always)]
    fn slot(&self) -> Result<NonNull<Slot<T, AtomicU64>>, AllocError> {
        match self.slot_fast() {
            Some(slot) => Ok(slot),
            None => self.slot_miss(),
        }
    }

    /// [`slot`](Self::slot) or the out-of-memory handler.
    #[inline(always)]
    fn slot_or_oom(&self) -> NonNull<Slot<T, AtomicU64>> {
        match self.slot_fast() {
            Some(slot) => slot,
            None => super::or_oom(self.slot_miss()),
        }
    }

    /// The inlined path, kept small so that `alloc` inlines into the caller's loop: a
    /// slot from this thread's magazine, with no lock and no atomic instruction; or,
    /// without magazines, from the home shard's cached bits under its lock.
    #[inline(always)]
    fn slot_fast(&self) -> Option<NonNull<Slot<T, AtomicU64>>> {
        // SAFETY: `self.id` is this live arena's, whose pages hold `T`s.
        #[cfg(feature = "std")]
        return unsafe { magazine::take::<T>(self.id) };
        #[cfg(not(feature = "std"))]
        return self.home_slot();
    }

    /// The magazine holds none of this arena's slots. At the arena's second miss in a
    /// row on this thread (see `magazine::second_miss`), refill it with every cached bit
    /// of one page from a shard and keep one slot; at a first miss, take one slot from
    /// the home shard. Without magazines: one slot from whichever shard is free. Either
    /// way the shard refills its cached bits from its pages, or new ones, if it must.
    ///
    /// Not `#[cold]`: a fresh arena's first allocation comes here.
    #[inline(never)]
    fn slot_miss(&self) -> Result<NonNull<Slot<T, AtomicU64>>, AllocError> {
        #[cfg(feature = "std")]
        {
            if magazine::second_miss(self.id) {
                let (page, bits) = match self.take_seed() {
                    Some(seed) => seed,
                    None => self.with_heap(|h| h.take_all_from(&self.reserve))?,
                };
                // SAFETY: a live page of this arena (`self.id`), and bits taken out of
                // its word (the seed page's) or given up to us by its heap.
                return Ok(unsafe { magazine::refill(self.id, page, bits) });
            }
        }
        if let Some(slot) = self.seed_slot() {
            return Ok(slot);
        }
        #[cfg(feature = "std")]
        if let Some(slot) = self.home_slot() {
            return Ok(slot);
        }
        self.with_heap(|h| h.take_from(&self.reserve))
    }

    /// One free slot of the seed page, if its word has any: one compare-and-swap on
    /// the page word, which the slot's value is next to, and no shard lock. (A lock,
    /// or a compare-and-swap on the arena, is a locked instruction on a second cache
    /// line: it waits for the line and for the value stores before it, which in a
    /// program that makes many arenas are cache misses too.)
    #[inline]
    fn seed_slot(&self) -> Option<NonNull<Slot<T, AtomicU64>>> {
        let page = self.seed_page?;
        // SAFETY: the seed page lives as long as the arena (struct invariant).
        let word: &AtomicU64 = unsafe { Page::word(page) };
        // Relaxed: only a guess for the compare-and-swap, which decides.
        let mut bits = word.load(Ordering::Relaxed);
        loop {
            // No `ORPHAN` bit while the arena lives: the word holds free slots only.
            if bits == 0 {
                return None;
            }
            // Acquire on success: pairs with the `Release` of the release that freed
            // the slot, so its old value's drop happens before we reuse it, as when a
            // heap takes the word. Relaxed on failure: the value read is only a guess.
            match word.compare_exchange_weak(
                bits,
                bits & (bits - 1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => bits = now,
            }
        }
        // SAFETY: the page is live (above); the lowest bit of a non-empty set of free
        // slot bits is below `SLOTS`, and taking it out of the word made it ours alone.
        Some(unsafe { Page::slot(page, bits.trailing_zeros() as usize) })
    }

    /// Every free slot bit of the seed page's word, with the page, now the caller's;
    /// `None` if it has none. A load first, so an empty word costs no RMW. (Only
    /// magazines take a page's bits in one go.)
    #[cfg(feature = "std")]
    #[inline]
    fn take_seed(&self) -> Option<(NonNull<Page<T, AtomicU64>>, u64)> {
        let page = self.seed_page?;
        // SAFETY: the seed page lives as long as the arena (struct invariant).
        let word: &AtomicU64 = unsafe { Page::word(page) };
        // Relaxed: a guess; the swap decides.
        if word.load(Ordering::Relaxed) == 0 {
            return None;
        }
        // Acquire: as in `seed_slot`.
        let bits = word.swap(0, Ordering::Acquire);
        (bits != 0).then_some((page, bits))
    }

    /// A slot from the home shard's cached bits, if its lock is free and it has some.
    #[inline(always)]
    fn home_slot(&self) -> Option<NonNull<Slot<T, AtomicU64>>> {
        let home = thread_hint() & (self.shards.len() - 1);
        debug_assert!(self.shards.len().is_power_of_two());
        // SAFETY: `shards.len()` is a power of two (struct invariant, made so by
        // `shard_count`), so masking with `len - 1` gives an index below it.
        let shard = unsafe { self.shards.get_unchecked(home) };
        // Branches on an `Option` in a register; no `Result` is built here.
        shard.try_lock()?.heap(Heap::take_cached)
    }

    /// Gives back this thread's cached slots of this arena, so that a count or a
    /// shrink sees them as free.
    #[inline]
    fn flush_magazine(&self) {
        #[cfg(feature = "std")]
        magazine::flush(self.id);
    }

    /// Runs `f` on a shard's heap under its lock: the home shard's if it is free, else
    /// the first free one, else waits.
    #[inline(never)]
    fn with_heap<R>(&self, mut f: impl FnMut(&mut Heap<T, AtomicU64>) -> R) -> R {
        let mask = self.shards.len() - 1;
        let home = thread_hint() & mask;
        for i in 0..self.shards.len() {
            if let Some(locked) = self.shards[(home + i) & mask].try_lock() {
                return locked.heap(f);
            }
        }
        let mut spins = 0;
        loop {
            spin(&mut spins);
            for i in 0..self.shards.len() {
                if let Some(locked) = self.shards[(home + i) & mask].try_swap() {
                    return locked.heap(&mut f);
                }
            }
        }
    }

    /// Runs `f` on every shard's heap in turn, under its lock.
    fn each_heap(&self, mut f: impl FnMut(&mut Heap<T, AtomicU64>)) {
        for shard in self.shards.iter() {
            shard.lock().heap(&mut f);
        }
    }

    /// Used and free slots (`shared_arena`'s `stats` tuple, as a struct): a snapshot, since other
    /// threads may allocate and release meanwhile. Visits every page. Slots that other
    /// threads hold in their magazines for their next allocations (at most 63 per
    /// thread) count as used; the calling thread's are given back first.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::new();
    /// let item = arena.alloc(1);
    /// let stats = arena.stats();
    /// assert_eq!((stats.used, stats.free), (1, 62));
    /// # drop(item);
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.flush_magazine();
        let (mut pages, mut free) = (0, 0);
        self.each_heap(|h| {
            pages += h.pages();
            free += h.free_slots();
        });
        let reserved = self.reserve.unclaimed() * SLOTS;
        PoolStats {
            used: pages * SLOTS - free,
            free: free + reserved,
        }
    }

    /// Values alive in the arena (a snapshot). Visits every page.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::new();
    /// let _v: Vec<_> = (0..5).map(|i| arena.alloc(i)).collect();
    /// assert_eq!(arena.len(), 5);
    /// ```
    pub fn len(&self) -> usize {
        self.stats().used
    }

    /// Whether no value is alive in the arena (a snapshot).
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::<u8>::new();
    /// assert!(arena.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values the arena can hold without a new page.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::new();
    /// let _one = arena.alloc(1);
    /// assert_eq!(arena.capacity(), 63);
    /// ```
    pub fn capacity(&self) -> usize {
        let mut pages = self.reserve.unclaimed();
        self.each_heap(|h| pages += h.pages());
        pages * SLOTS
    }

    /// Returns every page with no live value to the system; `true` if any went. Takes
    /// each shard's lock in turn, so allocations on other threads wait a moment.
    ///
    /// An arena made with a capacity keeps its first page (63 slots): other threads
    /// take slots from it without a lock, so it cannot be freed while the arena lives.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::with_capacity(2048);
    /// let values: Vec<_> = (0..10).map(|i| arena.alloc(i)).collect();
    /// assert!(arena.shrink_to_fit());
    /// assert_eq!(arena.stats().used, 10);
    /// assert!(arena.capacity() < 2048);
    /// drop(values);
    /// arena.shrink_to_fit();
    /// assert_eq!(arena.capacity(), 63); // the first page
    /// ```
    pub fn shrink_to_fit(&self) -> bool {
        self.flush_magazine();
        let unclaimed = self.reserve.claim(usize::MAX);
        for &page in unclaimed {
            // SAFETY: a claimed reserve page is entirely free and ours alone; nobody
            // lists it, so freeing it is its end.
            unsafe { Page::dealloc(page) };
        }
        let mut freed = unclaimed.len();
        self.each_heap(|h| freed += h.shrink_keeping(self.seed_page));
        freed > 0
    }
}

box_api!(SharedArena, ArenaBox);
shared_api!(
    SharedArena,
    ArenaRc,
    alloc_rc,
    try_alloc_rc,
    alloc_rc_with,
    try_alloc_rc_with
);
shared_api!(
    SharedArena,
    ArenaArc,
    alloc_arc,
    try_alloc_arc,
    alloc_arc_with,
    try_alloc_arc_with
);

impl<T> Drop for SharedArena<T> {
    fn drop(&mut self) {
        // This thread's cached slots go back before the heaps orphan their pages, so a
        // page whose values are all gone is freed right here. Other threads' cached
        // slots keep their page (one at most per thread) until they give them back.
        self.flush_magazine();
    }
}

impl<T> Default for SharedArena<T> {
    /// [`SharedArena::new`].
    ///
    /// ```
    /// let arena: ringmem::slab::SharedArena<u8> = Default::default();
    /// assert!(arena.is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for SharedArena<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PoolStats { used, free } = self.stats();
        f.debug_struct("SharedArena")
            .field("shards", &self.shards.len())
            .field("used", &used)
            .field("free", &free)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shards_are_padded_apart_and_lock_first() {
        assert_eq!(core::mem::size_of::<Shard<u8>>(), SHARD_BYTES);
        assert_eq!(core::mem::size_of::<Shard<[u64; 9]>>(), SHARD_BYTES);
        assert_eq!(core::mem::align_of::<Shard<u8>>(), 8);
        let shard = core::mem::MaybeUninit::<Shard<u8>>::uninit();
        let base = shard.as_ptr();
        // SAFETY: a projection to a field of the (uninitialised) value; nothing is read.
        let lock = unsafe { core::ptr::addr_of!((*base).locked) };
        assert_eq!(lock as usize, base as usize, "the lock is not first");
    }
}
