//! Waiting for room: the protocol between a producer that found its ring full and the
//! releases that make room.
//!
//! A release already loads one word after its header store (`orphan::after_release`);
//! a waiter sets a bit in that word, so a release pays nothing more while nobody waits.
//! With the bit set, a release compares its header's address with the spans of the
//! rings that producers wait on (a small table, [`ARMED`], of global words: the
//! released region's block may be gone by then), and only a release into one of them
//! takes the lock, wakes that ring's waiters (`wake`) and disarms its entry. A producer
//! waiting on a full ring sleeps while the other rings of the process release.
//!
//! The lost wake-up to rule out is the store-load pattern: the waiter arms its entry,
//! sets the bit and then tries its ring again; a release stores its header and then
//! loads the word and the table. Both may read the old values unless something orders
//! each store before its load: the waiter pays [`barrier::heavy`] (`membarrier` on
//! Linux x86-64) after both of its stores and the release [`barrier::light`] (a
//! compiler fence there) before its loads, the pair that also closes the orphans'
//! window (`sync.rs`). An entry is disarmed only by the release that wakes all its
//! waiters (each arms it again before it tries), or when its last waiter leaves. The
//! loom models in `tests/loom.rs` check it, and fail without the light side.
//!
//! Waiters on the same ring share an entry. When more rings are waited on at once than
//! the table has entries, the last entry widens to every address: its waiters are
//! woken by any release, as every waiter was before the table.
//!
//! A waiter that tries again must walk its whole ring (`Ring::unstick_if`): a plain
//! claim may look only at the oldest region for a while after a full lap.

use std::task::{Context, Poll, Waker};
use std::time::Instant;
use std::vec::Vec;

use super::header::Header;
use super::orphan;
use crate::sync::{barrier, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// Tries before a waiter registers: a release on another core is often this close.
/// One under loom, which models every try.
///
/// A process confined to one CPU (`sync::one_cpu`) gets no release while it spins, so
/// there the tries pause eight times between each and yield every eighth: the loop
/// users hand-roll around a ring that returns `None`. Against 64 back-to-back tries
/// before the first yield, that took 0.46–0.89× the time in ringal's 64 B and 1 KiB
/// rows, fixed and extendable (`taskset -c 0 cargo run --release -p ringmem-bench --
/// --only ringal-fixed,ringal-ext`); yielding before every try was slower still in the
/// fixed rows.
const SPINS: u32 = if cfg!(loom) { 1 } else { 64 };

/// Then tries with a yield of the time slice before each, before a waiter registers
/// and sleeps: a consumer that drains a batch at a time usually makes room within tens
/// of microseconds, sooner than a sleep and its wake-up (a futex call on each side and
/// the waiter's `membarrier`). Without them, ringal's 64 B × 64 row took 4–5× as long
/// as with a hand-rolled spin (the bench's `ringmem (wait)` column). The 64 yields take
/// about 24 µs on an idle core of the bench's machine; on a busy core each lets another
/// thread run. A waiting future yields to its executor as many times (`poll_until`).
/// None under loom.
const YIELDS: u32 = if cfg!(loom) { 0 } else { 64 };

/// Rings that can be waited on at once with an entry of their own. Two under loom,
/// whose models wait on at most two rings, so that they check distinct entries.
const ENTRIES: usize = if cfg!(loom) { 2 } else { 8 };

/// The addresses of a ring's region headers, `start..end`: a release whose header lies
/// there may make room in that ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// No address: the span of an entry that is not armed.
    pub(crate) const NONE: Span = Span {
        start: usize::MAX,
        end: 0,
    };

    /// Every address: the span of an entry shared by waiters on different rings.
    pub(crate) const ALL: Span = Span {
        start: 0,
        end: usize::MAX,
    };

    /// The bytes `start..start + len`.
    pub(crate) fn new(start: *const u8, len: usize) -> Span {
        let start = start as usize;
        Span {
            start,
            end: start.saturating_add(len),
        }
    }

    /// The smallest span that covers both.
    pub(crate) fn hull(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    fn covers(self, other: Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    fn holds(self, addr: usize) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// One ring (or, widened, several) that producers wait on.
#[derive(Clone, Copy)]
struct Entry {
    span: Span,
    /// Blocked threads and registered tasks in this entry; free at 0.
    users: usize,
    /// Bumped by every release that wakes this entry's waiters: a blocked waiter that
    /// saw it change while it was trying its ring tries again instead of sleeping.
    epoch: u64,
    /// Published in [`ARMED`]. The release that wakes the entry's waiters disarms it
    /// (so the other releases of a batch do not all take the lock while they get
    /// going), and each of them arms it again before it tries.
    armed: bool,
}

const FREE: Entry = Entry {
    span: Span::NONE,
    users: 0,
    epoch: 0,
    armed: false,
};

/// Who waits, under one lock.
struct Waiters {
    entries: [Entry; ENTRIES],
    /// Threads blocked in [`block_until`], in any entry.
    blocked: usize,
    /// Tasks waiting in [`poll_until`]: the id their future keeps, their entry.
    tasks: Vec<(u64, usize, Waker)>,
    next_id: u64,
}

const NOBODY: Waiters = Waiters {
    entries: [FREE; ENTRIES],
    blocked: 0,
    tasks: Vec::new(),
    next_id: 0,
};

crate::sync::global! {
    static WAITERS: Mutex<Waiters> = Mutex::new(NOBODY);
}

crate::sync::global! {
    /// Blocked threads sleep here.
    static WOKEN: Condvar = Condvar::new();
}

/// The armed entries' spans as their start and length (0 when disarmed), and after
/// them their hull (the smallest span that covers them all), which releases read
/// without the lock once the bit is set. Written under the waiters' lock only.
///
/// A start and a length rather than two ends: a release that reads one word of a
/// span and the other of the entry's previous span (harmless: see `publish`) gets the
/// same answer wherever the allocator put the two rings, when they are as long, as in
/// the loom models, and loom needs the same outcome for the same schedule.
#[repr(align(64))]
struct Armed {
    starts: [AtomicUsize; ENTRIES + 1],
    lens: [AtomicUsize; ENTRIES + 1],
}

/// The hull's index in [`Armed`].
const HULL: usize = ENTRIES;

impl Armed {
    #[cfg(not(loom))]
    const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)] // copied into each entry once
        const ZERO: AtomicUsize = AtomicUsize::new(0);
        Armed {
            starts: [ZERO; ENTRIES + 1],
            lens: [ZERO; ENTRIES + 1],
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Armed {
            starts: core::array::from_fn(|_| AtomicUsize::new(0)),
            lens: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    /// Publishes entry `i` as `w` has it, then the hull. Relaxed: a waiter's barrier
    /// orders them before the waiter's try, as the bit (see the module docs): a
    /// release after the barrier reads the entry as published or later, and later
    /// values come from the wake-up that disarmed it. Every hull published while an
    /// entry is armed covers it, so a release that reads the start of one hull and the
    /// length of another still finds the entry inside.
    fn publish(&self, w: &Waiters, i: usize) {
        let e = &w.entries[i];
        self.store(i, if e.armed { e.span } else { Span::NONE });
        let hull = (w.entries.iter())
            .filter(|e| e.armed)
            .fold(Span::NONE, |h, e| h.hull(e.span));
        // (The mutant leaves the hull as it was: a release then skips the new entry.)
        if !cfg!(ringmem_mutant_stale_hull) {
            self.store(HULL, hull);
        }
    }

    fn store(&self, i: usize, span: Span) {
        self.starts[i].store(span.start, Ordering::Relaxed);
        self.lens[i].store(span.end.saturating_sub(span.start), Ordering::Relaxed);
    }

    /// Whether `addr` lies in the span published at `i`.
    #[inline(always)]
    fn holds(&self, i: usize, addr: usize) -> bool {
        // Relaxed: as the word that led the release here, ordered after its header
        // store by its barrier (see the module docs).
        let start = self.starts[i].load(Ordering::Relaxed);
        addr.wrapping_sub(start) < self.lens[i].load(Ordering::Relaxed)
    }
}

crate::sync::global! {
    static ARMED: Armed = Armed::new();
}

fn lock() -> MutexGuard<'static, Waiters> {
    // The state stays consistent at every unlock: a panic elsewhere cannot break it.
    WAITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Joins an entry for `span`: one whose span covers it, else a free one, else the
/// last, widened to every address. Returns its index.
fn join(w: &mut Waiters, span: Span) -> usize {
    let i = (w.entries.iter())
        .position(|e| e.users != 0 && e.span.covers(span))
        .or_else(|| w.entries.iter().position(|e| e.users == 0))
        .unwrap_or(ENTRIES - 1);
    let e = &mut w.entries[i];
    e.span = match e.users {
        0 => span,
        _ if e.span.covers(span) => e.span,
        _ => Span::ALL,
    };
    e.users += 1;
    if e.armed {
        ARMED.publish(w, i); // widened: its waiters keep their wake-ups
    }
    i
}

/// Leaves entry `i`; the last waiter out disarms it.
fn leave(w: &mut Waiters, i: usize) {
    let e = &mut w.entries[i];
    e.users -= 1;
    if e.users == 0 {
        disarm(w, i);
    }
}

/// Arms entry `i` and sets the bit: from the caller's barrier on, a release into the
/// entry's span wakes its waiters.
fn arm(w: &mut Waiters, i: usize) {
    let e = &mut w.entries[i];
    e.armed = true;
    ARMED.publish(w, i);
    orphan::set_waiting(true);
}

/// Disarms entry `i`, and clears the bit once no entry is armed.
fn disarm(w: &mut Waiters, i: usize) {
    let e = &mut w.entries[i];
    if e.armed {
        e.armed = false;
        ARMED.publish(w, i);
        if !w.entries.iter().any(|e| e.armed) {
            orphan::set_waiting(false);
        }
    }
}

/// Called by a release that found the bit set: wakes the waiters of the ring it
/// released into, if any wait on it. Out of line, so that the release path stays as
/// it was while nobody waits.
#[cold]
#[inline(never)]
pub(crate) fn wake_if_wanted(hdr: *const Header) {
    if wanted(hdr) {
        wake(hdr);
    }
}

/// Whether a release of the region whose header is at `hdr` may make room for a
/// waiter. Global loads only: the region's block may be freed by now.
#[inline(always)]
fn wanted(hdr: *const Header) -> bool {
    let a = hdr as usize;
    // The hull first: a release into a ring that nobody waits on usually stops there.
    // Not under plain loom: with two rings armed, a hull read while another is
    // published can hold an address or not depending on where the allocator put the
    // rings, and loom needs the same outcome for the same schedule. The models with
    // one waited ring run it (`--cfg ringmem_loom_hull`). Its argument is the
    // entries': every hull published while an entry is armed covers it
    // (`Armed::publish`), and it is published with them, before the waiter's barrier.
    if (!cfg!(loom) || cfg!(ringmem_loom_hull)) && !ARMED.holds(HULL, a) {
        return false;
    }
    (0..ENTRIES).any(|i| ARMED.holds(i, a))
}

/// Called by a release into a span that [`wanted`] found armed: wakes the waiters of
/// every armed entry whose span holds `hdr`, and disarms those entries.
fn wake(hdr: *const Header) {
    let a = hdr as usize;
    let (tasks, blocked) = {
        let mut w = lock();
        let woken: [bool; ENTRIES] = core::array::from_fn(|i| {
            let e = &mut w.entries[i];
            let hit = e.armed && e.span.holds(a);
            if hit {
                e.epoch = e.epoch.wrapping_add(1);
                disarm(&mut w, i);
            }
            hit
        });
        if !woken.contains(&true) {
            return; // read before the entry was disarmed
        }
        let (tasks, kept): (Vec<_>, Vec<_>) = core::mem::take(&mut w.tasks)
            .into_iter()
            .partition(|t| woken[t.1]);
        w.tasks = kept;
        for t in &tasks {
            leave(&mut w, t.1); // already disarmed: only counts it out
        }
        (tasks, w.blocked)
    };
    if blocked != 0 {
        WOKEN.notify_all();
    }
    for (_, _, waker) in tasks {
        waker.wake();
    }
}

/// Runs `try_claim` until it returns `Some`, parking between tries until a release
/// into `span` (the ring's, [`Ring::span`](super::Ring::span)) wakes this thread;
/// `None` when `deadline` passes first. `try_claim(true)` must walk the whole ring: it
/// runs after a wake-up.
pub(crate) fn block_until<T>(
    span: Span,
    mut try_claim: impl FnMut(bool) -> Option<T>,
    deadline: Option<Instant>,
) -> Option<T> {
    let one_cpu = crate::sync::one_cpu();
    for i in 0..SPINS {
        if let Some(t) = try_claim(false) {
            return Some(t);
        }
        if !one_cpu {
            core::hint::spin_loop();
        } else if i % 8 == 7 {
            std::thread::yield_now();
        } else {
            for _ in 0..8 {
                core::hint::spin_loop();
            }
        }
    }
    for _ in 0..YIELDS {
        std::thread::yield_now();
        if let Some(t) = try_claim(false) {
            return Some(t);
        }
    }
    let mut w = lock();
    w.blocked += 1;
    let i = join(&mut w, span);
    let out = 'out: loop {
        // Armed again on every try: the release that woke this thread disarmed it.
        // (The mutant arms after the try: a release in between wakes nobody.)
        if !cfg!(ringmem_mutant_late_arm) {
            arm(&mut w, i);
        }
        let epoch = w.entries[i].epoch;
        drop(w);
        barrier::heavy();
        #[cfg(all(test, not(loom)))]
        TRIES.fetch_add(1, Ordering::Relaxed);
        let got = try_claim(true);
        w = lock();
        if got.is_some() {
            break got;
        }
        if cfg!(ringmem_mutant_late_arm) {
            arm(&mut w, i);
        }
        // Sleeps until a release into this entry's span (another entry's wakes this
        // thread too: it sleeps again).
        while w.entries[i].epoch == epoch {
            w = match deadline {
                None => WOKEN.wait(w).unwrap_or_else(|e| e.into_inner()),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => {
                        WOKEN
                            .wait_timeout(w, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    _ => break 'out None,
                },
            };
        }
    };
    w.blocked -= 1;
    leave(&mut w, i);
    out
}

/// Tries of blocked waiters after they registered, in this process (unit tests only).
#[cfg(all(test, not(loom)))]
pub(crate) static TRIES: AtomicUsize = AtomicUsize::new(0);

/// A task's place among the waiters (its future keeps it), removed on drop, and the
/// polls it has yielded in the wait under way (see [`poll_until`]).
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    id: Option<u64>,
    yields: u32,
}

impl TaskSlot {
    fn leave(&mut self) {
        self.yields = 0;
        if let Some(id) = self.id.take() {
            let gone = take_task(&mut lock(), id);
            // Dropped unlocked: a waker's drop is the executor's code, and what it
            // drops may release ring memory, whose release takes this lock.
            drop(gone);
        }
    }
}

/// Removes the task `id` from the waiters (and its entry), handing its waker back to
/// be dropped once the lock is released.
fn take_task(w: &mut Waiters, id: u64) -> Option<Waker> {
    let at = w.tasks.iter().position(|t| t.0 == id)?;
    let (_, i, waker) = w.tasks.swap_remove(at);
    leave(w, i);
    Some(waker)
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        self.leave();
    }
}

/// One poll of a waiting future: `try_claim` now; else, for the first [`YIELDS`] polls
/// of a wait, wakes the task itself and returns `Pending` (a yield to the executor,
/// which runs its other tasks and polls this one again: what a blocked thread does
/// before it sleeps); after them, registers the task's waker for a release into `span`
/// (the ring's, replacing what it registered before) and tries once more.
///
/// `try_claim(walk)`: `walk` asks for a walk of the whole ring, as in [`block_until`]
/// (after a registration, and in a poll that a release may have woken).
///
/// Without the yields, every wait paid a registration and the waiter's barrier, and a
/// release the wake-up: on a 2-worker tokio runtime, a producer task whose ring was full
/// once per batch of its consumer took 2.3× as long as one that yielded by hand.
pub(crate) fn poll_until<T>(
    slot: &mut TaskSlot,
    cx: &mut Context<'_>,
    span: Span,
    mut try_claim: impl FnMut(bool) -> Option<T>,
) -> Poll<T> {
    if let Some(t) = try_claim(slot.id.is_some()) {
        slot.leave();
        return Poll::Ready(t);
    }
    if slot.id.is_none() && slot.yields < YIELDS {
        slot.yields += 1;
        cx.waker().wake_by_ref();
        return Poll::Pending;
    }
    let waker = cx.waker().clone();
    let old = {
        let mut w = lock();
        let old = slot.id.and_then(|id| take_task(&mut w, id));
        let id = w.next_id;
        w.next_id += 1;
        let i = join(&mut w, span);
        w.tasks.push((id, i, waker));
        slot.id = Some(id);
        arm(&mut w, i);
        old
    };
    drop(old); // unlocked, as in `TaskSlot::leave`
    barrier::heavy();
    if let Some(t) = try_claim(true) {
        slot.leave();
        return Poll::Ready(t);
    }
    Poll::Pending
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_waiting_task_yields_before_it_registers() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut slot = TaskSlot::default();
        // No ring's header lies in this array: no release wakes the task.
        let nowhere = [0u64; 8];
        let span = Span::new(nowhere.as_ptr().cast(), 64);
        let mut walks = Vec::new();
        let mut never = |walk| {
            walks.push(walk);
            None::<()>
        };
        for i in 0..YIELDS {
            assert!(poll_until(&mut slot, &mut cx, span, &mut never).is_pending());
            assert_eq!(slot.id, None, "registered at poll {i}, before its yields");
            assert_eq!(
                count.0.load(Ordering::Relaxed),
                i as usize + 1,
                "poll {i} did not wake its own task"
            );
        }
        assert!(poll_until(&mut slot, &mut cx, span, &mut never).is_pending());
        assert!(slot.id.is_some(), "not registered after {YIELDS} yields");
        assert_eq!(count.0.load(Ordering::Relaxed), YIELDS as usize);
        // A poll once registered (as after a release's wake-up) walks the ring at once.
        assert!(poll_until(&mut slot, &mut cx, span, &mut never).is_pending());
        let yields = YIELDS as usize;
        assert!(
            !walks[..=yields].contains(&true),
            "a yield walked the whole ring"
        );
        assert_eq!(walks[yields + 1..], [true, true, true]);
        // Ready ends the wait: the next one yields again.
        assert!(poll_until(&mut slot, &mut cx, span, |_| Some(())).is_ready());
        assert_eq!((slot.id, slot.yields), (None, 0));
        assert!(poll_until(&mut slot, &mut cx, span, |_| None::<()>).is_pending());
        assert_eq!((slot.id, slot.yields), (None, 1));
    }
}
