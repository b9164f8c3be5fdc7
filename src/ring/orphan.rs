//! Blocks whose ring was dropped while buffers still lived in them.
//!
//! Releasing a uniquely owned buffer is one `Release` store, with no read-modify-write
//! that could tell the releasing thread it was the last user of a dropped ring's block.
//! So a dropped ring does not wait and does not leak: it frees each block whose regions
//! are all free, and pushes the others on a global lock-free *inbox*. A sweep takes the
//! inbox, frees the blocks that are all free and *parks* the rest: each parked block
//! records its *blocker*, the first live region its scan stopped at (scans resume
//! there, so a long-lived buffer costs one header read per sweep, not a walk), and the
//! blocker's header address goes into a small hashed table.
//!
//! Every release loads one word (`Relaxed`, on a line that is only read): zero while
//! there is no orphan at all. Otherwise a release sweeps when the inbox is not empty,
//! or when its own header is a parked block's blocker (or shares a table slot with one):
//! only the releases that can let a scan go further pay for a sweep. One buffer kept
//! after its ring was dropped (a thread-local ring's buffer that outlives its thread)
//! then costs the other releases in the process a table lookup, not a sweep each.
//!
//! Sweeps also run on ring activity: `Ring::new`, `Ring`'s drop, and a `Grow` ring
//! about to add a block (not a claim that finds no room: a parked block costs the
//! claims nothing, as it costs the releases nothing but a lookup). One sweep runs at a time; a release that finds one running leaves a request
//! that the running sweep serves before it stops.
//!
//! No later activity is needed for a block to be freed. The window to close is the
//! store-load pattern (Dekker's) between a release, which stores its header and then
//! loads the word and the table, and a sweep that publishes a blocker and then reads its
//! header again: without a barrier on both sides, both may read the old values. The
//! release side pays [`barrier::light`] (a compiler fence on Linux x86-64) and the
//! sweep [`barrier::heavy`] (`membarrier`), only when what it publishes changed: a
//! release either sees the blocker published, or the sweep sees it released. The same
//! barrier closes the window of a producer that waits for room (`wait.rs`).

use core::ptr::{self, NonNull};

use super::block::BlockCtl;
use super::header::Header;
use crate::sync::{barrier, fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Slots of the blocker table: a power of two. Smaller under loom, which models each.
const SLOTS: usize = if cfg!(loom) { 2 } else { 64 };

/// A table slot that two blockers hash to: every release that hashes there sweeps.
const SHARED_SLOT: *mut Header = NonNull::<Header>::dangling().as_ptr();

/// Bit 0 of [`ORPHANS`]: some block is parked.
const PARKED: usize = 1;

/// Bit 1 of [`ORPHANS`]: a producer waits for room (`wait.rs`).
const WAITING: usize = 2;

/// Bit 2 of [`ORPHANS`]: the kernel refused `membarrier`, so every release fences
/// ([`barrier::ready`]). Set before the first ring is built, and never cleared.
const FENCED: usize = 4;

/// The flag bits that say nothing about orphans.
const HINTS: usize = WAITING | FENCED;

/// The flag bits of [`ORPHANS`]; the rest is the inbox's top block.
const FLAGS: usize = PARKED | HINTS;

/// The inbox's top block (blocks are 64-byte aligned, so the low bits are free), with
/// the [`FLAGS`] in them. Zero: no orphan and no waiter anywhere, and
/// releases do nothing more.
///
/// Aligned to a cache line so that `word`, which every release loads, shares its line
/// with nothing a program writes often (a condition variable or a counter of the
/// program's own could land next to it otherwise).
#[repr(align(64))]
struct Orphans {
    word: AtomicPtr<BlockCtl>,
    /// The parked blocks, linked through `next`; only the sweep that holds `sweeping`
    /// reads or writes it.
    parked: AtomicPtr<BlockCtl>,
    /// Header addresses of the parked blocks' blockers, by [`slot`]; null or
    /// [`SHARED_SLOT`] otherwise. Written under `sweeping`, read by any release.
    blockers: [AtomicPtr<Header>; SLOTS],
    /// Held by the one sweep that runs.
    sweeping: AtomicBool,
    /// Sweeps asked for so far: the running sweep looks again while it changes.
    asked: AtomicUsize,
}

impl Orphans {
    #[cfg(not(loom))]
    const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)] // copied into each slot once
        const EMPTY: AtomicPtr<Header> = AtomicPtr::new(ptr::null_mut());
        Orphans {
            word: AtomicPtr::new(ptr::null_mut()),
            parked: AtomicPtr::new(ptr::null_mut()),
            blockers: [EMPTY; SLOTS],
            sweeping: AtomicBool::new(false),
            asked: AtomicUsize::new(0),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Orphans {
            word: AtomicPtr::new(ptr::null_mut()),
            parked: AtomicPtr::new(ptr::null_mut()),
            blockers: core::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            sweeping: AtomicBool::new(false),
            asked: AtomicUsize::new(0),
        }
    }
}

crate::sync::global! {
    static ORPHANS: Orphans = Orphans::new();
}

/// The table slot of a blocker's header address (headers are word-aligned).
#[inline(always)]
fn slot(hdr: *const Header) -> usize {
    (hdr as usize >> 3) & (SLOTS - 1)
}

/// Called by a ring that gives up `ctl`: frees it now if every region is free, or
/// leaves it to a sweep.
///
/// # Safety
/// - `ctl` is a live block that no ring will use again;
/// - only buffer handles may still refer to it.
pub(crate) unsafe fn retire(ctl: NonNull<BlockCtl>) {
    // SAFETY: the block is alive and now ours alone (contract).
    let block = unsafe { ctl.as_ref() };
    block.cursor.set(0);
    if block.scan_free() {
        // SAFETY: every region reads free with Acquire, so no handle touches it again;
        // no ring or list refers to it.
        unsafe { BlockCtl::destroy(ctl) };
        return;
    }
    // Not touched after this: a sweep on another thread may take and free it at once.
    // The dropping ring sweeps next (`on_activity`).
    push_inbox(ctl.as_ptr());
}

/// Whether the region `block`'s scan stopped at has been released since.
fn block_unblocked(block: &BlockCtl) -> bool {
    // SAFETY: the block is alive (on the inbox or parked, freed only by a sweep that
    // holds it); `cursor` is a header offset.
    let h = unsafe { block.hdr(block.cursor.get()) };
    // Relaxed: only a hint that a sweep is due; the sweep's scan reads with Acquire.
    super::header::count(h.load(Ordering::Relaxed)) == 0
}

/// Called after every release into a ring block, with the region's header: sweeps
/// when the release may let an orphaned block be freed, wakes the producers that wait.
#[inline]
pub(crate) fn after_release(hdr: NonNull<Header>) {
    // The header store before the load below: the light side of the window.
    barrier::light();
    // Relaxed: only a hint; the sweep synchronises through the headers (Acquire scans)
    // and its own flags, a waiter through its own barrier and lock.
    let w = ORPHANS.word.load(Ordering::Relaxed) as usize;
    if w != 0 {
        after_release_slow(w, hdr.as_ptr());
    }
}

/// Called after room is made on the ring's own thread without a release store (a
/// rewound head, a buffer giving back capacity), with a header of the block that holds
/// the room: wakes the producers that wait on that ring, as a release does. No barrier:
/// the waiters that this room can serve registered on this thread, or handed the ring
/// over with synchronisation, so program order already puts their bit before this load.
#[inline]
pub(crate) fn after_room(hdr: NonNull<Header>) {
    // Relaxed: see above.
    #[cfg(feature = "std")]
    if ORPHANS.word.load(Ordering::Relaxed) as usize & WAITING != 0 {
        super::wait::wake_if_wanted(hdr.as_ptr());
    }
    #[cfg(not(feature = "std"))]
    let _ = hdr;
}

/// [`after_release`] when some block is orphaned, some producer waits, or releases
/// must fence.
#[inline(always)]
fn after_release_slow(mut w: usize, hdr: *mut Header) {
    if w & FENCED != 0 {
        // No `membarrier`: this release pays the full fence, then looks again.
        barrier::refused_light();
        // Relaxed: as in `after_release`.
        w = ORPHANS.word.load(Ordering::Relaxed) as usize;
    }
    #[cfg(feature = "std")]
    if w & WAITING != 0 {
        super::wait::wake_if_wanted(hdr);
    }
    if may_unblock(w, hdr) {
        sweep();
    }
}

/// Called before a ring is built: when the kernel refuses `membarrier`, every release
/// from now on fences (the flag is set before the ring exists, so before any of its
/// buffers is released).
pub(crate) fn on_build() {
    if !barrier::ready() {
        // Relaxed: the ring (and every buffer of it) is handed to other threads by
        // something that synchronises, which carries this store along.
        update(Ordering::Relaxed, |w| with_flags(w, flags(w) | FENCED));
    }
}

/// Sets or clears the bit that makes releases look for waiters. Under the waiters'
/// lock.
#[cfg(feature = "std")]
pub(crate) fn set_waiting(on: bool) {
    // SeqCst: the waiter's side of the store-load pattern, before its barrier.
    let flag = if on { WAITING } else { 0 };
    update(Ordering::SeqCst, |w| {
        with_flags(w, flags(w) & !WAITING | flag)
    });
}

/// Whether a release of `hdr`, with the word reading `w`, may let a block go: when
/// blocks wait in the inbox (not yet parked, any release may free one), or when `hdr`
/// is a parked block's blocker (or shares its slot). In line: with one buffer pinned
/// for good, this is what every other release pays.
#[inline(always)]
fn may_unblock(w: usize, hdr: *mut Header) -> bool {
    if w & !FLAGS != 0 {
        return true;
    }
    if w & PARKED == 0 {
        return false;
    }
    // Relaxed: as the word above.
    let b = ORPHANS.blockers[slot(hdr)].load(Ordering::Relaxed);
    b == hdr || b == SHARED_SLOT
}

/// Ring activity: sweeps if any block is orphaned, whatever its blocker.
#[inline]
pub(crate) fn on_activity() {
    // Relaxed: as in `after_release`.
    if ORPHANS.word.load(Ordering::Relaxed) as usize & !HINTS != 0 {
        sweep();
    }
}

/// Frees every orphaned block whose regions have all been released, or, when a sweep
/// is running on another thread, asks it to look again before it stops.
#[cold]
#[inline(never)]
pub(crate) fn sweep() {
    loop {
        // A request, then the lock. SeqCst with a fence after each store: the request
        // and the lock form a Dekker pair with the running sweep's unlock and its last
        // look at `asked`, so one of the two sides sees the other. (Requests are counted
        // rather than flagged: loom cannot check a flag that the sweep clears by a swap
        // before its fence, and reports a lost request that the memory model forbids.)
        ORPHANS.asked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if ORPHANS
            .sweeping
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return; // the running sweep will see the request
        }
        let mut seen;
        loop {
            // Acquire: a requester's release (before its request) happens before the
            // scan that follows the load that sees the request.
            seen = ORPHANS.asked.load(Ordering::Acquire);
            // SAFETY: this thread holds `sweeping`.
            let again = unsafe { sweep_locked() };
            if !again && ORPHANS.asked.load(Ordering::Relaxed) == seen {
                break;
            }
        }
        ORPHANS.sweeping.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if ORPHANS.asked.load(Ordering::SeqCst) == seen {
            return;
        }
    }
}

/// One sweep: takes the inbox, frees the free blocks among it and the parked ones,
/// parks the rest and republishes their blockers. `true` when a blocker was released
/// meanwhile, so another sweep is due.
///
/// # Safety
/// - The caller holds `sweeping`.
unsafe fn sweep_locked() -> bool {
    #[cfg(all(test, not(loom)))]
    SWEEPS.fetch_add(1, Ordering::Relaxed);
    // Acquire: pairs with the Release of `push_inbox`, making the blocks' control areas
    // and headers (as the rings left them) visible. Bit 0 stays as it was.
    let inbox = untagged(update(Ordering::Acquire, |w| {
        with_flags(ptr::null_mut(), flags(w))
    }));
    // Relaxed: only the holder of `sweeping` touches the parked list.
    let mut lists = [inbox, ORPHANS.parked.load(Ordering::Relaxed)];
    let mut table = [ptr::null_mut::<Header>(); SLOTS];
    let mut parked: *mut BlockCtl = ptr::null_mut();
    for list in &mut lists {
        while let Some(ctl) = NonNull::new(*list) {
            // SAFETY: blocks on the inbox or parked are alive until a sweep frees
            // them; this sweep holds both lists, so no one else touches their control
            // areas.
            let block = unsafe { ctl.as_ref() };
            *list = block.next.get();
            if block.scan_free() {
                // SAFETY: all regions released (Acquire scan); on no list any more.
                unsafe { BlockCtl::destroy(ctl) };
                continue;
            }
            // SAFETY: `cursor` is the blocker's header offset, set by the scan.
            let blocker = unsafe { block.hdr(block.cursor.get()) } as *const Header as *mut Header;
            let s = &mut table[slot(blocker)];
            *s = if s.is_null() { blocker } else { SHARED_SLOT };
            block.next.set(parked);
            parked = ctl.as_ptr();
        }
    }
    ORPHANS.parked.store(parked, Ordering::Relaxed);
    // Every parked block's blocker is in its slot (or the slot is shared) once written:
    // slots are overwritten, never cleared first, so no parked blocker goes missing.
    let mut changed = false;
    for (s, b) in ORPHANS.blockers.iter().zip(table) {
        // Relaxed: releases read it as a hint; the barrier below orders it before the
        // second look at the blockers. Only the sweep that holds `sweeping` writes it.
        if s.load(Ordering::Relaxed) != b {
            s.store(b, Ordering::Relaxed);
            changed = true;
        }
    }
    if parked.is_null() {
        // Relaxed: nothing to publish; a release that still sees the bit sweeps once.
        update(Ordering::Relaxed, |w| with_flags(w, flags(w) & !PARKED));
        return false;
    }
    let before = update(Ordering::Relaxed, |w| with_flags(w, flags(w) | PARKED));
    if changed || flags(before) & PARKED == 0 {
        // The heavy side of the window (see the module docs): the table and the bit are
        // published before each blocker is read again; a blocker released meanwhile
        // either saw them (and asked for a sweep) or is seen here. A table published
        // before, unchanged, had its barrier then: a release since has seen it.
        barrier::heavy();
    }
    let mut p = parked;
    while let Some(ctl) = NonNull::new(p) {
        // SAFETY: parked by this sweep, which still holds `sweeping`.
        let block = unsafe { ctl.as_ref() };
        p = block.next.get();
        if block_unblocked(block) {
            return true;
        }
    }
    false
}

/// Pushes `ctl` on the inbox, keeping the flag bits.
fn push_inbox(ctl: *mut BlockCtl) {
    debug_assert_eq!(ctl as usize & FLAGS, 0, "blocks are 64-byte aligned");
    // Release: publishes the block's control area to the sweep that takes it (its
    // Acquire update).
    update(Ordering::Release, |w| {
        // SAFETY: `ctl` is an orphaned block owned by this thread until it is pushed.
        unsafe { (*ctl).next.set(untagged(w)) };
        with_flags(ctl, flags(w))
    });
}

/// The flag bits of a word.
#[inline(always)]
fn flags(w: *mut BlockCtl) -> usize {
    w as usize & FLAGS
}

/// The inbox's top block in a word, with its provenance (the flags taken off by
/// pointer arithmetic, not through an integer: the word is a pointer, so strict
/// provenance holds).
#[inline(always)]
fn untagged(w: *mut BlockCtl) -> *mut BlockCtl {
    w.cast::<u8>().wrapping_sub(flags(w)).cast()
}

/// The word for the top block of `w` with `flags` set.
#[inline(always)]
fn with_flags(w: *mut BlockCtl, flags: usize) -> *mut BlockCtl {
    untagged(w).cast::<u8>().wrapping_add(flags).cast()
}

/// Replaces the word by `f` of it, atomically; returns the word it replaced. `order`
/// applies on success (a failed attempt retries with a fresh word).
fn update(order: Ordering, mut f: impl FnMut(*mut BlockCtl) -> *mut BlockCtl) -> *mut BlockCtl {
    let mut old = ORPHANS.word.load(Ordering::Relaxed);
    loop {
        match ORPHANS
            .word
            .compare_exchange_weak(old, f(old), order, Ordering::Relaxed)
        {
            Ok(w) => return w,
            Err(now) => old = now,
        }
    }
}

/// Sweeps run so far in this process (unit tests only).
#[cfg(all(test, not(loom)))]
pub(crate) static SWEEPS: crate::sync::AtomicUsize = crate::sync::AtomicUsize::new(0);

/// Whether releases fence (the kernel refused `membarrier`).
#[cfg(all(test, not(loom)))]
pub(crate) fn fenced() -> bool {
    ORPHANS.word.load(Ordering::Acquire) as usize & FENCED != 0
}

/// Whether any orphaned block waits for its buffers.
#[cfg(all(test, not(loom)))]
pub(crate) fn pending() -> bool {
    ORPHANS.word.load(Ordering::Acquire) as usize & !HINTS != 0
}

/// Held by each unit test that looks at the orphan state, which is the process's, or
/// that makes other tests' releases sweep: the orphan tests count sweeps and wait for
/// the state to clear, and a producer that waits for room is woken by every release in
/// the process and sweeps on each try while a block is parked. (Other tests build and
/// drop rings meanwhile, which sweeps too: the orphan tests allow for it.)
#[cfg(all(test, not(loom)))]
pub(crate) fn one_test() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}
