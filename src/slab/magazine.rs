//! A thread's magazine of free slots for [`SharedArena`](super::SharedArena): the free
//! bits of one page, taken in one go (from a shard under its lock, or out of the arena's
//! seed page's word with one swap; once per up to 63 allocations) and then handed out
//! by this thread alone, with no atomic instruction and no lock.
//!
//! The bits in a magazine belong to no heap and to no handle: to everyone else they are
//! slots in use. So the page stays alive while they are cached, also after its arena is
//! dropped, and they go back into the page word (`Page::give_back`, the same `AcqRel`
//! read-modify-write that an orphaning pool uses) when the thread
//! - allocates from another arena (a magazine holds one arena's bits at a time),
//! - asks its arena for statistics or to shrink, or drops it,
//! - exits (the thread-local's destructor).
//!
//! A magazine is only ever touched by its own thread; what crosses threads is the page
//! word, through the protocol the handles already use. Built with `std` and without
//! loom (loom models the shard path, which is what runs without a magazine).

use core::cell::Cell;
use core::ptr::NonNull;

use super::page::{Page, Slot};
use crate::sync::{AtomicU64, Ordering};

/// A process-wide identity for a new arena: never reused, so a magazine that outlives
/// its arena can never be taken for another's (whose `T` may differ).
pub(crate) fn new_arena_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only uniqueness matters, which the RMW gives.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Gives `bits` back to a type-erased page (see [`Cached::give_back`]).
type GiveBack = unsafe fn(NonNull<()>, u64);

/// One page's cached free bits, and which arena they belong to.
///
/// Invariants: `arena == 0` or `bits == 0` means empty (nothing to give back); else
/// `bits` is a non-empty subset of `ALL_FREE` of the live page `page` of the arena with
/// identity `arena`, of element type `T` where `give_back` is `give_back_to::<T>`, and
/// no one else (page word, heap, handle, other magazine) holds those bits.
struct Magazine {
    arena: Cell<u64>,
    page: Cell<Option<NonNull<()>>>,
    bits: Cell<u64>,
    give_back: Cell<Option<GiveBack>>,
    /// The arena whose allocation last found the magazine empty or another arena's
    /// (see [`second_miss`]).
    missed: Cell<u64>,
}

/// What a magazine held, taken out of it: the caller now holds the bits.
struct Cached {
    page: Option<NonNull<()>>,
    bits: u64,
    give_back: Option<GiveBack>,
}

impl Cached {
    const EMPTY: Cached = Cached {
        page: None,
        bits: 0,
        give_back: None,
    };

    /// Returns the bits to their page.
    fn give_back(self) {
        if let (Some(page), Some(give_back), true) = (self.page, self.give_back, self.bits != 0) {
            // SAFETY: taken out of a magazine (invariant): `bits` are ours alone, of the
            // live page `page` whose element type `give_back` was made for.
            unsafe { give_back(page, self.bits) };
        }
    }
}

impl Magazine {
    /// Puts `new` in (empty if `new.bits == 0`) and returns what was there. Nothing
    /// runs between taking the old contents out and putting the new in, so even if
    /// giving the old ones back re-enters an arena on this thread (a global allocator
    /// built on one), the magazine is always consistent and no bits go twice or nowhere.
    fn replace(&self, arena: u64, new: Cached) -> Cached {
        // `arena == 0` only ever with `bits == 0` (set together here; `take` only
        // clears bits), so the old contents need no look at the old arena.
        self.arena.set(if new.bits == 0 { 0 } else { arena });
        Cached {
            page: self.page.replace(new.page),
            bits: self.bits.replace(new.bits),
            give_back: self.give_back.replace(new.give_back),
        }
    }
}

impl Drop for Magazine {
    fn drop(&mut self) {
        self.replace(0, Cached::EMPTY).give_back();
    }
}

std::thread_local! {
    static MAGAZINE: Magazine = const {
        Magazine {
            arena: Cell::new(0),
            page: Cell::new(None),
            bits: Cell::new(0),
            give_back: Cell::new(None),
            missed: Cell::new(0),
        }
    };
}

/// [`GiveBack`] for pages of `T`.
///
/// # Safety
/// - `page` is a live `Page<T, AtomicU64>` and `bits` are free bits of it that the
///   caller holds and gives up.
unsafe fn give_back_to<T>(page: NonNull<()>, bits: u64) {
    // SAFETY: forwarded from the caller.
    unsafe { Page::<T, AtomicU64>::give_back(page.cast(), bits) }
}

/// A slot from this thread's magazine if it holds bits of arena `arena`; `None` if not
/// (or while the thread is being torn down). The allocation fast path.
///
/// # Safety
/// - `arena` is the identity of a live `SharedArena<T>` (its pages are `Page<T, _>`).
#[inline(always)]
pub(crate) unsafe fn take<T>(arena: u64) -> Option<NonNull<Slot<T, AtomicU64>>> {
    MAGAZINE
        .try_with(|m| {
            let bits = m.bits.get();
            if m.arena.get() != arena || bits == 0 {
                return None;
            }
            m.bits.set(bits & (bits - 1));
            // SAFETY: non-empty and of arena `arena` (checked above), so `page` is set
            // (struct invariant).
            let page = unsafe { m.page.get().unwrap_unchecked() };
            // SAFETY: the page is live and of `T` (invariant, and the caller's arena is
            // this one); the lowest bit of a non-empty subset of `ALL_FREE` is below
            // `SLOTS`, and the slot is now ours alone.
            Some(unsafe { Page::slot(page.cast(), bits.trailing_zeros() as usize) })
        })
        .ok()
        .flatten()
}

/// Called when an allocation from arena `arena` finds no slot in the magazine: whether
/// to refill it now (`true`: this arena missed twice in a row), or to take just one slot
/// under the shard lock and leave the magazine as it is.
///
/// Refilling costs a lock, and giving back the bits of the arena the magazine holds: an
/// atomic instruction on that arena's page. An arena that allocates once, or two arenas
/// allocated from in turn, would pay that at every allocation; they keep the one lock
/// per allocation they had without magazines, and an arena that keeps allocating
/// switches at its second allocation.
#[inline]
pub(crate) fn second_miss(arena: u64) -> bool {
    MAGAZINE
        .try_with(|m| m.missed.replace(arena) == arena)
        .unwrap_or(false)
}

/// Takes the lowest of `bits` (free bits of `page`, of arena `arena`) and caches the
/// rest in this thread's magazine, giving back whatever it held before. While the
/// thread is being torn down the rest goes straight back to the page.
///
/// # Safety
/// - `page` is a live `Page<T, AtomicU64>` of the arena `arena`; `bits` is a non-empty
///   subset of `ALL_FREE` that the caller holds (taken from the arena's heap, or out of
///   its seed page's word) and gives up.
pub(crate) unsafe fn refill<T>(
    arena: u64,
    page: NonNull<Page<T, AtomicU64>>,
    bits: u64,
) -> NonNull<Slot<T, AtomicU64>> {
    debug_assert!(bits != 0, "refilling a magazine with no bits");
    let rest = bits & (bits - 1);
    let new = Cached {
        page: Some(page.cast()),
        bits: rest,
        give_back: Some(give_back_to::<T> as GiveBack),
    };
    let old = MAGAZINE.try_with(|m| m.replace(arena, new));
    if let Ok(old) = old {
        old.give_back();
    } else if rest != 0 {
        // SAFETY: the caller's bits of a live page; the one taken below keeps the page
        // alive through this call.
        unsafe { Page::give_back(page, rest) };
    }
    // SAFETY: the page is live (caller) and the lowest bit of a non-empty subset of
    // `ALL_FREE` is below `SLOTS`; the caller gave the bit up to us.
    unsafe { Page::slot(page, bits.trailing_zeros() as usize) }
}

/// Gives back this thread's cached bits if they are arena `arena`'s: before the arena
/// counts its free slots, shrinks, or is dropped.
pub(crate) fn flush(arena: u64) {
    let old = MAGAZINE.try_with(|m| {
        if m.arena.get() == arena {
            m.replace(0, Cached::EMPTY)
        } else {
            Cached::EMPTY
        }
    });
    if let Ok(old) = old {
        old.give_back();
    }
}
