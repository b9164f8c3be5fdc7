//! Typed object pools: many values of one type, allocated and freed for a few
//! instructions, from pages of 63 slots.
//!
//! # The mental model
//!
//! A pool owns pages. A page holds 63 slots for values of one type `T` and a 64-bit word
//! whose bit `i` says "slot `i` is free". Allocating takes the lowest free bit
//! (`trailing_zeros`, one instruction) from a copy of that word the pool keeps for the
//! page it is filling. Dropping a handle drops the value and sets its bit in the page
//! word: a plain `or` for a [`Pool`], one `Release` read-modify-write (`fetch_add` of
//! the clear bit: one `lock xadd` on x86) for an [`Arena`] or [`SharedArena`], so any
//! thread may drop it; but a thread that allocates from the page keeps it in a
//! thread-local *magazine*, and the values it drops itself go there with a plain `or`.
//! When the pool's copy runs out it takes
//! the page word's bits back (`Acquire`), then looks at its other pages, and grows by
//! half its size only when they are nearly full.
//!
//! The pool can be dropped while handles live: each page goes when its last handle
//! does (the pool sets an `ORPHAN` bit in each page word; whoever completes "every slot
//! free and orphaned", with one read-modify-write, frees the page).
//!
//! A [`SharedArena`] keeps that copy per thread: a thread that keeps allocating from it
//! takes a page's free bits into its magazine, so its allocations need no lock. An
//! [`Arena`] keeps its copy itself, pins its page in its thread's magazine with one free
//! slot, and takes the slots released there back when its copy runs out. Slots in
//! another thread's magazine count as used, and keep their page (at most one per
//! thread) until that thread gives them back: when it allocates from another arena,
//! asks this one for `stats`, `len` or `shrink_to_fit`, drops it, or exits.
//!
//! | pool | allocate from | handles | `Send` / `Sync` |
//! |---|---|---|---|
//! | [`Pool<T>`] | one thread, no atomics | [`PoolBox<T>`], [`ArenaRc<T>`] | neither |
//! | [`Arena<T>`] | one thread at a time | [`ArenaBox<T>`], [`ArenaRc<T>`], [`ArenaArc<T>`] | `Send` if `T: Send` |
//! | [`SharedArena<T>`] | many threads at once (a per-thread magazine of up to 63 slots, refilled under per-shard locks; no global lock) | [`ArenaBox<T>`], [`ArenaRc<T>`], [`ArenaArc<T>`] | both if `T: Send` |
//!
//! ```
//! use ringmem::slab::Arena;
//!
//! let arena = Arena::with_capacity(100);
//! let values: Vec<_> = (0..100u64).map(|i| arena.alloc(i)).collect();
//! let stats = arena.stats();
//! assert_eq!((stats.used, stats.free), (100, 26)); // 2 pages of 63 slots
//!
//! drop(values);                  // every slot is free again...
//! let again = arena.alloc(7);    // ...and reused: no new page
//! assert_eq!((arena.len(), arena.capacity()), (1, 126));
//! # drop(again);
//! ```
//!
//! # Naming
//!
//! The names are `shared_arena`'s, so migrating is a change of `use` line:
//!
//! | `shared_arena` | `ringmem::slab` | note |
//! |---|---|---|
//! | `Pool`, `Arena`, `SharedArena` | same | `new()` allocates nothing until the first value |
//! | `PoolBox`, `ArenaBox`, `ArenaRc`, `ArenaArc` | same | `ArenaArc<T>` is `Send`/`Sync` only for `T: Send + Sync`; pools are `Send` only for `T: Send` |
//! | `alloc`, `alloc_with`, `alloc_rc`, `alloc_rc_with`, `alloc_arc`, `alloc_arc_with` | same | `_with` takes `FnOnce` (any `Fn` works) |
//! | `stats()` → `(used, free)` | `stats()` → [`PoolStats`] | `let (used, free) = pool.stats().into();` |
//! | `shrink_to_fit()` | same, → `bool` on every pool | `true` if a page went; `Pool::shrink_to_fit` takes `&self`; `SharedArena::shrink_to_fit` frees pages at once, and keeps the first page of `with_capacity` |
//! | — | `try_alloc`, `try_alloc_with`, `try_alloc_rc`, `try_alloc_rc_with`, `try_alloc_arc`, `try_alloc_arc_with` | `try_` = returns `Result<_, AllocError>` |
//! | — | `len()`, `capacity()` | counted in values, like `Vec` |
//!
//! Grammar (the crate's, see its [naming table](crate#naming-grammar)): `try_` returns a
//! `Result` instead of calling [`handle_alloc_error`](alloc::alloc::handle_alloc_error);
//! `_with` takes an initialiser that writes the value in place; `_rc` / `_arc` make
//! shared handles. The error is the crate's one [`AllocError`].
//!
//! # Safety and correctness
//!
//! - Each slot's value is dropped exactly once, by the last handle; its slot goes back
//!   even if the value's `Drop` panics (the panic goes on). A panicking `_with`
//!   initialiser gives its slot back and drops nothing.
//! - The `try_` methods never call the out-of-memory handler: every allocation on their
//!   paths is fallible, and a refused one leaves the pool as it was (values kept, pages
//!   freed or still listed). `shrink_to_fit` does not abort either.
//! - Zero-sized and over-aligned types work (each slot is aligned for `T`).
//! - Verified by `tests/slab.rs` (per flavour, a model-based proptest against `Vec`,
//!   a multi-thread stress test), `tests/slab_faults.rs` (panicking drops and
//!   initialisers, and the heap refusing each allocation of every `try_` method in
//!   turn), `tests/loom_slab.rs` (every interleaving of release, reuse and
//!   drop-the-pool-while-live), and Miri.

mod handles;
mod heap;
mod page;

#[macro_use]
mod api;

mod arena;
#[cfg(feature = "std")]
mod magazine;
mod pool;
mod shared;

use core::alloc::Layout;

/// What the `try_` methods return when the system allocator refuses a new page: the
/// crate's one allocation error, [`ringmem::AllocError`](crate::AllocError), with the
/// bytes asked for in `requested`.
#[doc(no_inline)]
pub use crate::AllocError;
pub use arena::Arena;
pub use handles::{ArenaArc, ArenaBox, ArenaRc, PoolBox};
pub use pool::Pool;
pub use shared::SharedArena;

/// Number of slots in a page: what `capacity()` grows by at least.
///
/// ```
/// let pool = ringmem::slab::Pool::<u8>::with_capacity(1);
/// assert_eq!(pool.capacity(), ringmem::slab::PAGE_SLOTS);
/// ```
pub const PAGE_SLOTS: usize = page::SLOTS;

/// Used and free slots of a pool; see [`Pool::stats`], [`Arena::stats`] and
/// [`SharedArena::stats`]. `shared_arena`'s `stats()` returns the same two numbers as a
/// `(used, free)` tuple, which `into()` gives back.
///
/// ```
/// let pool = ringmem::slab::Pool::new();
/// let one = pool.alloc(1u8);
/// let stats = pool.stats();
/// assert_eq!((stats.used, stats.free), (1, 62));
/// let (used, free): (usize, usize) = pool.stats().into();
/// assert_eq!(used + free, pool.capacity());
/// # drop(one);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Slots holding a live value (what `len()` returns), and slots other threads keep
    /// in their magazines.
    pub used: usize,
    /// Slots ready for a new value, without a new page.
    pub free: usize,
}

impl From<PoolStats> for (usize, usize) {
    /// `(used, free)`, the shape of `shared_arena`'s `stats()`.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::<u8>::with_capacity(1);
    /// assert_eq!(<(usize, usize)>::from(pool.stats()), (0, 63));
    /// ```
    fn from(s: PoolStats) -> Self {
        (s.used, s.free)
    }
}

/// The value of `r`, or the standard out-of-memory handler.
#[inline(always)]
fn or_oom<S>(r: Result<S, AllocError>) -> S {
    match r {
        Ok(s) => s,
        Err(e) => oom(e),
    }
}

/// The standard out-of-memory handler, told the size that was refused (the alignment
/// is not kept in [`AllocError`]); out of line, so the allocating paths stay small.
#[cold]
#[inline(never)]
fn oom(e: AllocError) -> ! {
    alloc::alloc::handle_alloc_error(
        Layout::from_size_align(e.requested, 1).unwrap_or(Layout::new::<u8>()),
    )
}
