//! A thread's magazine of free slots: the free bits of one page, held by this thread
//! alone and handed out with no atomic instruction and no lock.
//!
//! - A [`SharedArena`](super::SharedArena) refills it with a page's free bits taken in
//!   one go (from a shard under its lock, or out of the arena's seed page's word with
//!   one swap; once per up to 63 allocations) and allocates from it.
//! - An [`Arena`](super::Arena) allocates from its own copy of its page's bits; it
//!   *adopts* that page here with one of those bits (the pin), and takes back, when its
//!   copy runs out, the slots this thread released meanwhile.
//! - Either way, a handle dropped on this thread whose slot lies in the magazine's page
//!   puts its bit here with a plain `or` ([`keep`]) instead of a locked instruction on
//!   the page word: a thread that allocates and drops in a loop touches no atomic.
//!
//! The bits in a magazine belong to no heap and to no handle: to everyone else they are
//! slots in use. So the page stays alive while any are cached, also after its arena is
//! dropped, and they go back into the page word (`Page::give_back`, the same `AcqRel`
//! read-modify-write that an orphaning pool uses) when the thread
//! - allocates from another arena (a magazine holds one arena's bits at a time),
//! - asks its arena for statistics or to shrink, or drops it,
//! - exits (the thread-local's destructor).
//!
//! A magazine is only ever touched by its own thread; what crosses threads is the page
//! word, through the protocol the handles already use. Built with `std` (it is a
//! thread-local), in the loom models too.

use core::cell::Cell;
use core::ptr::{self, NonNull};

use super::page::{Page, Slot};
use crate::sync::{AtomicU64, Ordering};

/// A process-wide identity for a new arena: never reused, so a magazine that outlives
/// its arena can never be taken for another's (whose `T` may differ).
pub(crate) fn new_arena_id() -> u64 {
    crate::sync::global! {
        static NEXT: AtomicU64 = AtomicU64::new(1);
    }
    // Relaxed: only uniqueness matters, which the RMW gives.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Gives `bits` back to a type-erased page (see [`Cached::give_back`]).
type GiveBack = unsafe fn(NonNull<()>, u64);

/// One page's cached free bits, and which arena they belong to.
///
/// Invariants:
/// - `page` null (empty): `arena == 0` and `pin`, `bits`, `released` are 0.
/// - `page` not null: it is a live page of the `SharedArena` with identity `arena` (or,
///   with `arena == ARENA`, of an `Arena`), of element type `T` where `give_back` is
///   `give_back_to::<T>`; `pin` is one free bit of it, and `bits` and `released` are
///   free bits of it, the three disjoint subsets of `ALL_FREE`, and no one else (page
///   word, heap, handle, other magazine) holds them.
///
/// The pin keeps the page alive while the magazine names it, so a slot whose page is at
/// the address `page` is a slot of this page; it is handed out last, as the magazine
/// lets go of the page ([`Magazine::next_bits`]). `bits` are handed out by `take`;
/// `released` collects the slots this thread releases (see [`keep`]). They are separate
/// words so that an allocate-and-drop loop does not chain every allocation's store to
/// the next release's load through one word.
struct Magazine {
    arena: Cell<u64>,
    /// A raw pointer, null when empty: a release compares it with one instruction.
    page: Cell<*mut ()>,
    bits: Cell<u64>,
    released: Cell<u64>,
    pin: Cell<u64>,
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
    /// `bits` ran out: the slots this thread released since, else the pin (the magazine
    /// then lets go of the page: the slot is worth more than the releases it would
    /// catch), else `None`. The caller now holds the bits returned.
    #[cold]
    fn next_bits(&self) -> Option<u64> {
        let released = self.released.replace(0);
        if released != 0 {
            return Some(released);
        }
        let pin = self.pin.replace(0);
        if pin == 0 {
            return None;
        }
        self.arena.set(0);
        self.page.set(ptr::null_mut());
        Some(pin)
    }

    /// Puts `new` in (empty if `new.bits == 0`; else its lowest bit becomes the pin and
    /// the rest are handed out next) and returns everything that was there. Nothing
    /// runs between taking the old contents out and putting the new in, so even if
    /// giving the old ones back re-enters an arena on this thread (a global allocator
    /// built on one), the magazine is always consistent and no bits go twice or nowhere.
    fn replace(&self, arena: u64, new: Cached) -> Cached {
        let pin = new.bits & new.bits.wrapping_neg();
        let held = new.bits != 0;
        self.arena.set(if held { arena } else { 0 });
        let bits =
            self.pin.replace(pin) | self.bits.replace(new.bits ^ pin) | self.released.replace(0);
        Cached {
            page: NonNull::new(self.page.replace(match (held, new.page) {
                (true, Some(page)) => page.as_ptr(),
                _ => ptr::null_mut(),
            })),
            bits,
            give_back: self.give_back.replace(new.give_back),
        }
    }
}

/// Gives the thread's magazine back when the thread exits. A thread-local of its own:
/// the magazine has no destructor, so reaching it costs no check of a thread-local's
/// state; whatever puts bits in first makes sure this one is armed (see [`armed`]).
struct GiveBackAtExit;

impl Drop for GiveBackAtExit {
    fn drop(&mut self) {
        MAGAZINE.with(|m| m.replace(0, Cached::EMPTY)).give_back();
    }
}

/// Whether bits put in the magazine now will be given back at thread exit: arms
/// [`GiveBackAtExit`] on first use; `false` once the thread's destructors have begun to
/// run it (then nothing may be cached any more).
#[inline]
fn armed() -> bool {
    GIVE_BACK_AT_EXIT.try_with(|_| ()).is_ok()
}

crate::sync::thread_local! {
    static GIVE_BACK_AT_EXIT: GiveBackAtExit = const { GiveBackAtExit };
    static MAGAZINE: Magazine = const {
        Magazine {
            arena: Cell::new(0),
            page: Cell::new(ptr::null_mut()),
            bits: Cell::new(0),
            released: Cell::new(0),
            pin: Cell::new(0),
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

/// A slot from this thread's magazine if it holds bits of arena `arena`; `None` if not.
/// The allocation fast path.
///
/// # Safety
/// - `arena` is the identity of a live `SharedArena<T>` (its pages are `Page<T, _>`).
#[inline(always)]
pub(crate) unsafe fn take<T>(arena: u64) -> Option<NonNull<Slot<T, AtomicU64>>> {
    MAGAZINE.with(|m| {
        if m.arena.get() != arena {
            return None;
        }
        // SAFETY: of arena `arena` (checked above; ids are never 0), so not empty: `page`
        // is set (struct invariant). Read before `next_bits` may let go of it.
        let page = unsafe { NonNull::new_unchecked(m.page.get()) };
        let mut bits = m.bits.get();
        if bits == 0 {
            bits = m.next_bits()?;
        }
        m.bits.set(bits & (bits - 1));
        // SAFETY: the page is live and of `T` (invariant, and the caller's arena is this
        // one); the lowest bit of a non-empty subset of `ALL_FREE` is below `SLOTS`, and
        // the slot is now ours alone.
        Some(unsafe { Page::slot(page.cast(), bits.trailing_zeros() as usize) })
    })
}

/// Puts the bit of a slot this thread just released into the magazine, if the magazine
/// holds the slot's page: `true` if it took it (the caller is done), `false` if the
/// caller must release it into the page word.
///
/// The magazine's pin keeps its page alive, so a live slot's page at the same address
/// is that page (same arena, same `T`).
///
/// # Safety
/// - `bit` is the bit of a slot of the live `Page<_, AtomicU64>` at `page` whose value
///   was dropped (or never made), and the caller gives the slot up.
#[inline(always)]
pub(crate) unsafe fn keep(page: NonNull<()>, bit: u64) -> bool {
    MAGAZINE.with(|m| {
        if m.page.get() != page.as_ptr() {
            return false;
        }
        let released = m.released.get();
        debug_assert!(
            (released | m.bits.get() | m.pin.get()) & bit == 0,
            "slot bit {bit:#x} released twice"
        );
        // The slot joins the magazine's free bits of its page (invariant: `arena`
        // and `give_back` are this page's).
        m.released.set(released | bit);
        true
    })
}

/// The `arena` of a page an [`Arena`](super::Arena) adopted. Arenas need no identity of
/// their own: their pages are told apart by address (a magazine's page is live, so no
/// other page has its address). `SharedArena` ids count up from 1 and never get here.
const ARENA: u64 = u64::MAX;

/// For an [`Arena`](super::Arena) whose copy of `page`'s free bits ran out: the slots
/// of `page` this thread released into its magazine (see [`keep`]), if the magazine
/// holds that page. The pin stays, so that releases keep coming here, unless it is all
/// there is: then the magazine lets go of the page and the pin is returned, so that a
/// pin never makes an arena take another page. The caller now holds the bits returned
/// (0 if none).
#[inline]
pub(crate) fn take_released(page: NonNull<()>) -> u64 {
    MAGAZINE.with(|m| {
        if m.page.get() != page.as_ptr() {
            return 0;
        }
        // An arena's page is adopted with its pin alone: `take` is `SharedArena`'s.
        debug_assert!(m.arena.get() == ARENA && m.bits.get() == 0);
        m.next_bits().unwrap_or(0)
    })
}

/// Whether this thread's magazine holds `page`.
#[inline]
pub(crate) fn holds(page: NonNull<()>) -> bool {
    MAGAZINE.with(|m| m.page.get() == page.as_ptr())
}

/// An [`Arena`](super::Arena) adopts `page`, its current page: the magazine takes the
/// free bit `pin` of it (and gives back what it held before), so that this thread's
/// releases of the page's slots come here. `false` if the thread is being torn down;
/// then the caller keeps `pin`.
///
/// # Safety
/// - `page` is a live `Page<T, AtomicU64>` of an `Arena`; `pin` is one free bit of it
///   that the caller holds and gives up (on `true`).
pub(crate) unsafe fn adopt<T>(page: NonNull<Page<T, AtomicU64>>, pin: u64) -> bool {
    debug_assert!(
        pin != 0 && pin & (pin - 1) == 0,
        "a pin is one bit: {pin:#x}"
    );
    let new = Cached {
        page: Some(page.cast()),
        bits: pin,
        give_back: Some(give_back_to::<T> as GiveBack),
    };
    if !armed() {
        return false;
    }
    MAGAZINE.with(|m| m.replace(ARENA, new)).give_back();
    true
}

/// Gives back this thread's cached bits if they are of a page an
/// [`Arena`](super::Arena) adopted and `ours` says it is one of the caller's: before the
/// arena counts its free slots, shrinks, or is dropped.
pub(crate) fn flush_arena(ours: impl FnOnce(NonNull<()>) -> bool) {
    flush_if(|arena, page| arena == ARENA && ours(page));
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
    MAGAZINE.with(|m| m.missed.replace(arena) == arena)
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
    if armed() {
        MAGAZINE.with(|m| m.replace(arena, new)).give_back();
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
    flush_if(|held, _| held == arena);
}

/// Gives back this thread's cached bits if `mine(arena, page)` says they are the
/// caller's (never asked of an empty magazine).
fn flush_if(mine: impl FnOnce(u64, NonNull<()>) -> bool) {
    MAGAZINE
        .with(|m| match NonNull::new(m.page.get()) {
            Some(page) if mine(m.arena.get(), page) => m.replace(0, Cached::EMPTY),
            _ => Cached::EMPTY,
        })
        .give_back();
}
