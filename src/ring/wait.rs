//! Waiting for room: the protocol between a producer that found its ring full and the
//! releases that make room.
//!
//! A release already loads one word after its header store (`orphan::after_release`);
//! a waiter sets a bit in that word, so a release pays nothing more while nobody waits.
//! With the bit set, a release compares its header's address with spans published in
//! a small table of global words, [`ARMED`] (the released region's block may be gone
//! by then): a few entries and their hull. Only a release whose address lies in an
//! entry takes the waiters' lock. Under the lock every waiter is a record with its own
//! ring's span (`Waiter`), and the armed waiters of a ring stand in a line, oldest
//! first (`Line`). A release wakes the oldest armed waiter of each line whose span holds
//! its header (the validate step, as `parking_lot_core` does it), by its own handle: a
//! blocked thread is unparked ([`park`]), a task's waker is woken. Nobody else wakes: a
//! producer on an idle ring sleeps however often other rings release or other waiters
//! are woken.
//!
//! A release makes room for one buffer, so it wakes one waiter, which then holds the
//! ring's *turn*: when it has claimed (the release may have made room for more than
//! its buffer), or leaves without a try (a dropped future, a timeout), it wakes the
//! oldest armed waiter of its line; when its try after the wake-up finds no room, it
//! wakes the oldest one that asks for fewer bytes than it does (`need`), if any, and
//! arms again. A turn thus goes on while waiters claim, and stops at the first that
//! finds no room for what it and every older waiter asks: the room that is left serves
//! none of them until the next release, which wakes the next. Arming, leaving and
//! waking are O(1) in the waiters (a line is a list linked through the records' slots).
//!
//! The table is only a prefilter: entry `i` publishes the hull of the spans of the
//! armed waiters assigned to it, the last word the hull of all entries, each span as
//! its two ends. Waiters on the same ring share an entry; when more rings are waited on
//! than there are entries, a waiter joins the entry whose hull grows least, and the
//! hull shrinks again as its waiters are woken or leave (it is recomputed from the
//! records at every change), so no entry covers every address for good. A release
//! into a ring inside a shared hull that nobody waits on takes the lock and wakes
//! nobody.
//!
//! The lost wake-up to rule out is the store-load pattern: the waiter arms (publishes
//! its span, sets the bit) and then tries its ring again; a release stores its header
//! and then loads the word and the table. The waiter pays [`barrier::heavy`]
//! (`membarrier` on Linux x86-64) after its stores and the release [`barrier::light`]
//! (a compiler fence there) before its loads, the pair that also closes the orphans'
//! window (`sync.rs`): either the waiter's try sees the release, or the release reads
//! each word of the table as the waiter published it or later. Every value an entry or
//! the hull holds from then until the waiter is woken (by this release or another)
//! covers the waiter's span, so a release that reads the start of one of them and the
//! end of another still finds its address inside: that is why the ends are published,
//! not a start and a length. A woken waiter is disarmed, and arms again before its next
//! try; a blocked one sleeps until its own flag says it was woken, set under the lock,
//! so an unpark before its park is never lost. The loom models in `tests/loom.rs`
//! check it with one, two and three waited rings, more waiters than entries, and room
//! made on the ring's own thread; they fail without the light side. The models below
//! (`models`) check the turn with more waiters than rings: they fail when a waiter that
//! claimed keeps it, or when one that found no room keeps it from a smaller one.
//!
//! Room made on the ring's own thread without a release store (a rewound head, a buffer
//! giving back capacity: `orphan::after_room`) wakes that ring's waiters through the
//! same path; program order is all the ordering it needs, as its waiters are tasks
//! that registered on this thread or handed the ring over with synchronisation.
//!
//! A waiter that tries again must walk its whole ring (`Ring::unstick_if`): a plain
//! claim may look only at the oldest region for a while after a full lap.
//!
//! No waker runs under the waiters' own lock, nor under a lock that a waker may take:
//! a thread that holds one (a `ReadPool` shard's, which `ReadPool::stats` and every
//! claim on the pool take) says so with [`hold_wakes`], and until it lets go, the
//! wake-ups it owes wait in a list of its own; they run once its last such lock is let
//! go. A waker, or an executor that polls the woken task inline, may then touch the
//! same pool.

use core::marker::PhantomData;
use std::collections::BTreeMap;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::header::Header;
use super::orphan;
use crate::sync::{barrier, park, switch, AtomicUsize, Cell, Mutex, MutexGuard, Ordering, RefCell};

/// Tries before a waiter registers: a release on another core is often this close.
/// One under loom, which models every try.
///
/// The tries pause eight times between each and yield every eighth: the loop users
/// hand-roll around a ring that returns `None`. Tried back to back (one pause between),
/// they read the head region's header eight times as often while the consumer is about
/// to write it, and the built-in wait lost to the hand-rolled loop: in ringal's rows
/// (`--only ringal-fixed,ringal-ext --reps 3`, two runs each, medians in ms, wait /
/// hand-rolled) fixed 64 B × 64 121.6 / 112.0 and 124.1 / 110.2, fixed 1 KiB × 64
/// 120.6 / 102.7 and 116.7 / 99.5, extendable 64 B × 64 111.6 / 82.4; at this pace
/// 109.8 / 112.9, 108.4 / 109.9, 102.6 / 103.8, 97.8 / 95.6 and 87.6 / 88.8. On one
/// CPU, where no release comes while a waiter spins, the same pace took 0.46–0.89× the
/// time of back-to-back tries.
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

/// The most time the yields take before the waiter sleeps anyway: on a busy machine a
/// yield gives the core to another process for up to a time slice (milliseconds), and
/// 64 of them kept a producer from its room for a long time while its consumer, short
/// of CPU itself, had long released it. Sleeping instead takes the producer off the
/// run queue until the release wakes it. On an idle core the 64 yields take about
/// 25 µs, within it.
const YIELDING: Duration = Duration::from_micros(100);

/// Entries of the published table. Two under loom, whose models wait on up to three
/// rings, so that they check both distinct entries and a shared one.
const ENTRIES: usize = if cfg!(loom) { 2 } else { 8 };

/// The addresses of a ring's region headers, `start..end`: a release whose header lies
/// there may make room in that ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// No address: the span of an entry with no armed waiter.
    pub(crate) const NONE: Span = Span {
        start: usize::MAX,
        end: 0,
    };

    /// Every address: for a waiter that cannot tell its ring's span (a thread-local
    /// ring being torn down).
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

    pub(crate) fn holds(self, addr: usize) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Bytes covered (0 for [`Span::NONE`]).
    fn len(self) -> usize {
        self.end.saturating_sub(self.start)
    }
}

/// How a waiter is woken.
enum Wake {
    /// A blocked thread, parked until its `woken` flag is set.
    Thread(park::Thread),
    /// A task waiting in [`poll_until`]; its record goes when it is woken.
    Task(Waker),
}

impl Wake {
    /// Wakes the waiter: the executor's code, for a task. Never under a lock of ours.
    fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(waker) => waker.wake(),
        }
    }
}

/// No waiter: the end of a ring's line.
const NIL: u32 = u32::MAX;

/// One producer waiting for room in one ring.
struct Waiter {
    /// Its ring's line, an index into [`Waiters::rings`].
    ring: usize,
    /// The bytes it asks for: a waiter that fails hands its turn only to one that asks
    /// for fewer.
    need: usize,
    /// In its ring's line, from its arming (before its barrier and try) until the
    /// release that wakes it: published.
    armed: bool,
    /// Set by the release that woke it: a blocked thread sleeps until it is.
    woken: bool,
    /// Its neighbours in its ring's line while armed, older and younger ([`NIL`]: none).
    prev: u32,
    next: u32,
    wake: Wake,
}

/// A slot of [`Waiters::slots`]: a waiter's record, and how many records the slot has
/// held before (so that an id taken out of use is never mistaken for a newer one).
struct Slot {
    turn: u32,
    waiter: Option<Waiter>,
}

/// The waiters of one ring (one span): the armed ones in a line, oldest first.
struct Line {
    span: Span,
    /// The entry of [`ARMED`] that publishes its span while one of them is armed.
    entry: usize,
    /// Waiters that joined and have not left (armed or not). None: the line is free.
    joined: usize,
    /// The armed waiters, oldest first ([`NIL`]: none).
    head: u32,
    tail: u32,
    /// How many armed waiters ask for each need.
    needs: BTreeMap<usize, usize>,
}

/// Who waits, under one lock, and what [`ARMED`] holds (written under the same lock).
/// Every operation on a waiter is O(1) in the number of waiters (a line's needs, a
/// logarithm of how many distinct needs wait), and O(rings) in the rings waited on.
struct Waiters {
    slots: Vec<Slot>,
    /// Slots without a record.
    free: Vec<u32>,
    /// One line per ring waited on, kept for reuse once empty.
    rings: Vec<Line>,
    /// The spans stored in [`ARMED`], the hull last.
    published: [Span; ENTRIES + 1],
    /// Whether the orphans' word has the waiting bit set.
    waiting: bool,
}

const NOBODY: Waiters = Waiters {
    slots: Vec::new(),
    free: Vec::new(),
    rings: Vec::new(),
    published: [Span::NONE; ENTRIES + 1],
    waiting: false,
};

crate::sync::global! {
    static WAITERS: Mutex<Waiters> = Mutex::new(NOBODY);
}

/// A waiter's id: its slot, and the slot's turn in its upper half.
fn id_of(slot: u32, turn: u32) -> u64 {
    u64::from(turn) << 32 | u64::from(slot)
}

impl Waiters {
    /// Adds a waiter on `span` asking for `need` bytes, not armed yet, to the line of
    /// that span. A new line joins an entry whose lines' hull covers its span, else an
    /// entry nobody uses, else the one whose hull grows least. Returns its id.
    fn join(&mut self, span: Span, need: usize, wake: Wake) -> u64 {
        let ring = match self
            .rings
            .iter()
            .position(|l| l.joined != 0 && l.span == span)
        {
            Some(r) => r,
            None => self.new_line(span),
        };
        self.rings[ring].joined += 1;
        let waiter = Waiter {
            ring,
            need,
            armed: false,
            woken: false,
            prev: NIL,
            next: NIL,
            wake,
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    turn: 0,
                    waiter: None,
                });
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 waiters")
            }
        };
        let s = &mut self.slots[slot as usize];
        s.waiter = Some(waiter);
        id_of(slot, s.turn)
    }

    /// A line for `span`, in the entry chosen as [`join`](Self::join) says.
    fn new_line(&mut self, span: Span) -> usize {
        let mut hulls = [Span::NONE; ENTRIES];
        for l in self.rings.iter().filter(|l| l.joined != 0) {
            hulls[l.entry] = hulls[l.entry].hull(l.span);
        }
        let entry = (hulls.iter().position(|h| h.covers(span)))
            .or_else(|| hulls.iter().position(|h| *h == Span::NONE))
            .unwrap_or_else(|| {
                (0..ENTRIES)
                    .min_by_key(|&i| hulls[i].hull(span).len())
                    .unwrap_or(0)
            });
        let line = Line {
            span,
            entry,
            joined: 0,
            head: NIL,
            tail: NIL,
            needs: BTreeMap::new(),
        };
        match self.rings.iter().position(|l| l.joined == 0) {
            Some(r) => {
                self.rings[r] = line;
                r
            }
            None => {
                self.rings.push(line);
                self.rings.len() - 1
            }
        }
    }

    fn find(&mut self, id: u64) -> Option<&mut Waiter> {
        let s = self.slots.get_mut(id as u32 as usize)?;
        let waiter = s.waiter.as_mut()?;
        (id_of(id as u32, s.turn) == id).then_some(waiter)
    }

    /// Whether waiter `id` is still in the table, armed.
    fn armed(&mut self, id: u64) -> bool {
        self.find(id).is_some_and(|w| w.armed)
    }

    /// If task `id` still waits, armed (no release has woken it, which takes its record
    /// out, since it registered and tried), makes `waker` the one to wake and hands
    /// back the one it replaces; else hands `waker` back. Either is dropped after the
    /// lock (see [`leave`](Self::leave)).
    fn rewake(&mut self, id: u64, waker: Waker) -> Result<Waker, Waker> {
        match self.find(id) {
            Some(Waiter {
                armed: true,
                wake: Wake::Task(registered),
                ..
            }) => Ok(core::mem::replace(registered, waker)),
            _ => Err(waker),
        }
    }

    /// Arms waiter `id` at the end of its ring's line and publishes it: from the
    /// caller's barrier on, a release into its span may wake it.
    fn arm(&mut self, id: u64) {
        let Some(w) = self.find(id) else { return };
        w.woken = false;
        if w.armed {
            return;
        }
        w.armed = true;
        let (ring, need) = (w.ring, w.need);
        let slot = id as u32;
        let line = &mut self.rings[ring];
        *line.needs.entry(need).or_insert(0) += 1;
        let tail = core::mem::replace(&mut line.tail, slot);
        if tail == NIL {
            line.head = slot;
        } else {
            self.waiter(tail).next = slot;
        }
        let w = self.waiter(slot);
        (w.prev, w.next) = (tail, NIL);
        self.publish();
    }

    /// The record in `slot`, which the caller knows holds one.
    fn waiter(&mut self, slot: u32) -> &mut Waiter {
        (self.slots[slot as usize].waiter.as_mut()).expect("a waiter in the line")
    }

    /// Takes the armed waiter in `slot` out of its ring's line; publishes nothing.
    fn unlink(&mut self, slot: u32) {
        let w = self.waiter(slot);
        w.armed = false;
        let (ring, need, prev, next) = (w.ring, w.need, w.prev, w.next);
        match prev {
            NIL => self.rings[ring].head = next,
            p => self.waiter(p).next = next,
        }
        match next {
            NIL => self.rings[ring].tail = prev,
            n => self.waiter(n).prev = prev,
        }
        let needs = &mut self.rings[ring].needs;
        if let Some(n) = needs.get_mut(&need) {
            *n -= 1;
            if *n == 0 {
                needs.remove(&need);
            }
        }
    }

    /// Removes the record in `slot` (not armed), freeing the slot for another turn.
    fn remove(&mut self, slot: u32) -> Waiter {
        let s = &mut self.slots[slot as usize];
        let w = s.waiter.take().expect("a waiter in its slot");
        s.turn = s.turn.wrapping_add(1);
        self.free.push(slot);
        self.rings[w.ring].joined -= 1;
        w
    }

    /// Removes waiter `id`, handing its wake back to be dropped once the lock is
    /// released (a waker's drop is the executor's code, and what it drops may release
    /// ring memory, whose release may take this lock), and whether a release had woken
    /// it since it last armed.
    fn leave(&mut self, id: u64) -> Option<(Wake, bool)> {
        let w = self.find(id)?;
        let (armed, woken) = (w.armed, w.woken);
        let slot = id as u32;
        if armed {
            self.unlink(slot);
        }
        let w = self.remove(slot);
        if armed {
            self.publish();
        }
        Some((w.wake, woken))
    }

    /// Wakes the oldest armed waiter of `ring`'s line (that asks for fewer than `below`
    /// bytes, if given): disarms it, sets its flag, takes a woken task out, and pushes how to wake
    /// it on `woken` (for after the lock). Publishes nothing. Whether it woke one.
    fn wake_first(&mut self, ring: usize, below: Option<usize>, woken: &mut Vec<Wake>) -> bool {
        let line = &self.rings[ring];
        let fits = |need: usize| below.is_none_or(|b| need < b);
        if line.needs.keys().next().is_none_or(|&least| !fits(least)) {
            return false;
        }
        let mut at = line.head;
        while at != NIL && !fits(self.waiter(at).need) {
            at = self.waiter(at).next;
        }
        if at == NIL {
            return false;
        }
        self.unlink(at);
        let w = self.waiter(at);
        w.woken = true;
        match &w.wake {
            Wake::Thread(t) => woken.push(Wake::Thread(t.clone())),
            Wake::Task(_) => woken.push(self.remove(at).wake),
        }
        true
    }

    /// Wakes, for each ring waited on whose span holds `addr`, the oldest armed waiter
    /// (see [`wake_first`](Self::wake_first)): a release makes room for one buffer, and
    /// the waiter it wakes hands the turn on ([`pass`](Self::pass)). Returns how many
    /// it pushed on `woken`.
    fn wake_at(&mut self, addr: usize, woken: &mut Vec<Wake>) -> usize {
        let mut pushed = 0;
        for r in 0..self.rings.len() {
            let line = &self.rings[r];
            if line.head != NIL && line.span.holds(addr) && self.wake_first(r, None, woken) {
                pushed += 1;
            }
        }
        if pushed != 0 {
            self.publish();
        }
        pushed
    }

    /// Hands a turn on in the line of `span`: to its oldest armed waiter, or with
    /// `below`, to the oldest that asks for fewer bytes than that (a waiter that found
    /// no room for `below` bytes leaves the turn to one that may fit). Returns how many
    /// it pushed on `woken` (0 or 1).
    fn pass(&mut self, span: Span, below: Option<usize>, woken: &mut Vec<Wake>) -> usize {
        let Some(r) = (self.rings.iter()).position(|l| l.joined != 0 && l.span == span) else {
            return 0;
        };
        if !self.wake_first(r, below, woken) {
            return 0;
        }
        self.publish();
        1
    }

    /// Stores in [`ARMED`] what the armed waiters make of it, where it changed, and
    /// sets or clears the orphans' waiting bit. Relaxed stores: the waiter's barrier
    /// orders them before its try, as the bit (see the module docs).
    fn publish(&mut self) {
        let mut hulls = [Span::NONE; ENTRIES];
        for l in self.rings.iter().filter(|l| l.head != NIL) {
            hulls[l.entry] = hulls[l.entry].hull(l.span);
        }
        let hull = hulls.iter().fold(Span::NONE, |h, &e| h.hull(e));
        for (i, &span) in hulls.iter().enumerate() {
            if self.published[i] != span {
                self.published[i] = span;
                ARMED.store(i, span);
            }
        }
        // (The mutant leaves the hull as it was: a release then skips the new entry.)
        if self.published[HULL] != hull && !switch::on("mutant_stale_hull") {
            self.published[HULL] = hull;
            ARMED.store(HULL, hull);
        }
        let waiting = self.rings.iter().any(|l| l.head != NIL);
        if waiting != self.waiting {
            self.waiting = waiting;
            orphan::set_waiting(waiting);
        }
    }
}

/// The armed entries' spans as their two ends ([`Span::NONE`] when none is armed), and
/// after them their hull, which releases read without the lock once the bit is set.
/// Written under the waiters' lock only ([`Waiters::publish`]).
#[repr(align(64))]
struct Armed {
    starts: [AtomicUsize; ENTRIES + 1],
    ends: [AtomicUsize; ENTRIES + 1],
}

/// The hull's index in [`Armed`].
const HULL: usize = ENTRIES;

impl Armed {
    #[cfg(not(loom))]
    const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)] // copied into each entry once
        const NO_START: AtomicUsize = AtomicUsize::new(usize::MAX);
        #[allow(clippy::declare_interior_mutable_const)] // copied into each entry once
        const NO_END: AtomicUsize = AtomicUsize::new(0);
        Armed {
            starts: [NO_START; ENTRIES + 1],
            ends: [NO_END; ENTRIES + 1],
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Armed {
            starts: core::array::from_fn(|_| AtomicUsize::new(usize::MAX)),
            ends: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    fn store(&self, i: usize, span: Span) {
        // (The mutant publishes a start and a length: a release that reads the start
        // of a wide hull and the length of a narrower one misses the higher ring.)
        let end = if switch::on("mutant_start_len") {
            span.len()
        } else {
            span.end
        };
        // Relaxed: see `Waiters::publish`.
        self.starts[i].store(span.start, Ordering::Relaxed);
        self.ends[i].store(end, Ordering::Relaxed);
    }

    /// Whether `addr` lies in the span published at `i`.
    #[inline(always)]
    fn holds(&self, i: usize, addr: usize) -> bool {
        // Relaxed: as the word that led the release here, ordered after its header
        // store by its barrier (see the module docs).
        let start = self.starts[i].load(Ordering::Relaxed);
        let end = self.ends[i].load(Ordering::Relaxed);
        if switch::on("mutant_start_len") {
            return addr.wrapping_sub(start) < end;
        }
        start <= addr && addr < end
    }
}

crate::sync::global! {
    static ARMED: Armed = Armed::new();
}

fn lock() -> MutexGuard<'static, Waiters> {
    // The state stays consistent at every unlock: a panic elsewhere cannot break it.
    WAITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the waiters under their lock, then the wake-ups it pushed, after the
/// lock: at once, or when this thread lets go of the locks a waker may take that it
/// holds (see [`hold_wakes`]). The list is the thread's own, which keeps its capacity:
/// no heap allocation per wake once warm. Returns what `f` returns (how many it woke).
fn waking(f: impl FnOnce(&mut Waiters, &mut Vec<Wake>) -> usize) -> usize {
    let mut f = Some(f);
    let pushed = DEFERRED.try_with(|d| {
        let f = f.take().expect("run once");
        f(&mut lock(), &mut d.borrow_mut())
    });
    let n = match pushed {
        Ok(n) => {
            // Outside its thread-locals' lifetime a thread holds no such lock.
            if n != 0 {
                let held = HOLDING.try_with(Cell::get).unwrap_or(0);
                if held < HELD {
                    wake_held();
                } else {
                    // Owed: the last guard runs them (see `HeldWakes`).
                    HOLDING.with(|h| h.set(held | OWED));
                }
            }
            n
        }
        // The thread's list is gone (its thread-locals are being destroyed).
        Err(_) => {
            let mut woken = Vec::new();
            let f = f.take().expect("run once");
            let n = f(&mut lock(), &mut woken);
            woken.into_iter().for_each(Wake::wake);
            n
        }
    };
    #[cfg(all(test, not(loom)))]
    WAKES.fetch_add(n, Ordering::Relaxed);
    n
}

/// Called by a release that found the bit set, or by room made on the ring's own
/// thread: wakes the oldest waiter of each ring waited on that it released into. Out
/// of line, so that the release path stays as it was while nobody waits.
#[cold]
#[inline(never)]
pub(crate) fn wake_if_wanted(hdr: *const Header) {
    let addr = hdr as usize;
    if !wanted(addr) {
        return;
    }
    waking(|w, woken| w.wake_at(addr, woken));
}

/// Hands a turn on among the waiters of `span` (see [`Waiters::pass`]): after a claim
/// (`below` is `None`) or a try that found no room for `below` bytes.
fn pass(span: Span, below: Option<usize>) {
    waking(|w, woken| w.pass(span, below, woken));
}

crate::sync::thread_local! {
    /// How many locks that a waker may take this thread holds ([`hold_wakes`]), in
    /// [`HELD`]s, plus [`OWED`] while [`DEFERRED`] may hold wake-ups: a guard let go
    /// with none owed looks at one thread-local, not two.
    static HOLDING: Cell<usize> = const { Cell::new(0) };
    /// The wake-ups this thread owes while [`HOLDING`] is not zero, in the order they
    /// came. It keeps its capacity: no heap allocation once warm.
    static DEFERRED: RefCell<Vec<Wake>> = const { RefCell::new(Vec::new()) };
}

/// Says that this thread holds a lock that a waker may take, until the guard is
/// dropped: the wake-ups its releases and the room it gives back owe wait until then,
/// and run when the last such guard of the thread goes. Take it with the lock and drop
/// it after the lock is let go (a `ReadPool` shard's lock, in `io/pool.rs`).
// The pool, its one user, is left out of loom builds; the model below checks it.
#[cfg_attr(loom, allow(dead_code))]
#[must_use = "wake-ups are held back only while the guard lives"]
pub(crate) fn hold_wakes() -> HeldWakes {
    HOLDING.with(|n| n.set(n.get() + HELD));
    HeldWakes {
        _thread: PhantomData,
    }
}

/// One lock held, in [`HOLDING`].
const HELD: usize = 2;
/// Wake-ups held back, in [`HOLDING`].
const OWED: usize = 1;

/// See [`hold_wakes`]. Not `Send`: it counts on its thread's [`HOLDING`].
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct HeldWakes {
    _thread: PhantomData<*const ()>,
}

impl Drop for HeldWakes {
    fn drop(&mut self) {
        let left = HOLDING.with(|n| {
            let left = n.get() - HELD;
            n.set(left);
            left
        });
        if left == OWED {
            wake_held();
            // Not after a waker that panicked: the rest stay owed, for the next guard.
            HOLDING.with(|n| {
                if n.get() == OWED {
                    n.set(0);
                }
            });
        }
    }
}

/// Runs the wake-ups this thread held back. One at a time, the list not borrowed while
/// one runs: a waker may take the lock again and hold back more, which its own guard
/// then wakes (nested, through this function); a waker that panics leaves the rest
/// for this thread's next guard.
fn wake_held() {
    while let Some(w) = DEFERRED
        .try_with(|d| pop_first(&mut d.borrow_mut()))
        .ok()
        .flatten()
    {
        w.wake();
    }
}

/// The first of `woken`, the rest moved up (the list is a few entries at most).
fn pop_first(woken: &mut Vec<Wake>) -> Option<Wake> {
    (!woken.is_empty()).then(|| woken.remove(0))
}

/// Whether a release of the region whose header is at `addr` may make room for a
/// waiter: global loads only, as the region's block may be freed by now. The hull
/// first: a release into a ring that nobody waits on usually stops there.
#[inline(always)]
fn wanted(addr: usize) -> bool {
    ARMED.holds(HULL, addr) && (0..ENTRIES).any(|i| ARMED.holds(i, addr))
}

/// Runs `try_claim` until it returns `Some`, parking between tries until a release
/// into `span` (the ring's, [`Ring::span`](super::Ring::span)) wakes this thread;
/// `None` when `timeout` (if any) runs out first. `try_claim(true)` must walk the whole
/// ring: it runs after a wake-up. `need`: the bytes it asks for (see [`Waiters::pass`]).
///
/// A release wakes one waiter of its ring, which holds the turn: once it has claimed,
/// or left, it hands the turn to the oldest armed waiter; when a try after the wake-up
/// finds no room, to the oldest one asking for fewer bytes.
///
/// The time counts from the end of the [`SPINS`] tries (a median 7 µs after the call for
/// `fixed_wait_timeout(8, Duration::ZERO)` on a full ring, release build, the bench's
/// idle 2-core VM; more on a busy machine, where each of their 8 yields may last a time
/// slice): a wait with a timeout then costs what one without does while it spins, with
/// no clock read (a producer on a full ring mostly gets its room there).
// Under loom there are no yields (`YIELDS` is 0), and clippy takes the loop over
// none of them for a mistake.
#[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
pub(crate) fn block_until<T>(
    span: Span,
    need: usize,
    mut try_claim: impl FnMut(bool) -> Option<T>,
    timeout: Option<Duration>,
) -> Option<T> {
    for i in 0..SPINS {
        if let Some(t) = try_claim(false) {
            return Some(t);
        }
        if i % 8 == 7 {
            std::thread::yield_now();
        } else {
            for _ in 0..8 {
                core::hint::spin_loop();
            }
        }
    }
    let yields_from = Instant::now();
    // `None`: no deadline (none given, or too far to be told).
    let deadline = timeout.and_then(|t| yields_from.checked_add(t));
    for _ in 0..YIELDS {
        std::thread::yield_now();
        if let Some(t) = try_claim(false) {
            return Some(t);
        }
        let now = Instant::now();
        // A yield may give the core away for a time slice on a busy machine.
        if deadline.is_some_and(|d| now >= d) {
            return None;
        }
        if now.duration_since(yields_from) > YIELDING {
            break; // the machine is busy: sleep, and leave the core to the others
        }
    }
    let mut w = lock();
    let id = w.join(span, need, Wake::Thread(park::current()));
    // Whether a release woke this thread and it has not handed the turn on yet.
    let mut turn = false;
    let out = 'out: loop {
        // Armed again on every try: the release that woke this thread disarmed it.
        // (The mutant arms after the try: a release in between wakes nobody.)
        if !switch::on("mutant_late_arm") {
            w.arm(id);
        }
        drop(w);
        barrier::heavy();
        #[cfg(all(test, not(loom)))]
        TRIES.fetch_add(1, Ordering::Relaxed);
        let got = try_claim(true);
        w = lock();
        if got.is_some() {
            break got;
        }
        if switch::on("mutant_late_arm") {
            w.arm(id);
        }
        if w.find(id).is_some_and(|me| me.woken) {
            turn = true;
            continue; // woken since it armed: its try may have come before the room
        }
        if turn && !switch::on("mutant_no_handoff") {
            // Its try after the wake-up found no room for its need: one asking for
            // less may fit. (The mutant keeps the turn: such a waiter sleeps on.)
            turn = false;
            drop(w);
            pass(span, Some(need));
            w = lock();
        }
        // Sleeps until a release into its own span sets its flag (an unpark that came
        // first leaves its token: the park returns at once).
        while !w.find(id).is_some_and(|me| me.woken) {
            drop(w);
            match deadline {
                None => park::park(),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => park::park_timeout(left),
                    _ => {
                        w = lock();
                        break 'out None;
                    }
                },
            }
            #[cfg(all(test, not(loom)))]
            PARKED_WAKES.with(|n| n.set(n.get() + 1));
            w = lock();
        }
        turn = true;
    };
    let me = w.leave(id);
    drop(w);
    // Woken, it hands the turn on as it goes: the room may serve another waiter too.
    // (The mutant does not: a release that made room for two wakes one.)
    let woken = me.as_ref().is_some_and(|&(_, woken)| woken);
    if (turn || woken) && !switch::on("mutant_no_pass_on") {
        pass(span, None);
    }
    drop(me);
    out
}

/// Tries of blocked waiters after they registered, in this process (unit tests only).
#[cfg(all(test, not(loom)))]
pub(crate) static TRIES: AtomicUsize = AtomicUsize::new(0);

/// Waiters woken by releases (or room made on the ring's thread), in this process
/// (unit tests only).
#[cfg(all(test, not(loom)))]
pub(crate) static WAKES: AtomicUsize = AtomicUsize::new(0);

#[cfg(all(test, not(loom)))]
std::thread_local! {
    /// Returns of this thread from its parking in [`block_until`], woken or not (unit
    /// tests only).
    pub(crate) static PARKED_WAKES: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// A task's place among the waiters (its future keeps it), removed on drop, and the
/// polls it has yielded in the wait under way (see [`poll_until`]).
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    id: Option<u64>,
    yields: u32,
    /// The span it registered for, while it does.
    span: Option<Span>,
    /// Woken by a release, and the turn not handed on yet (see [`block_until`]).
    turn: bool,
}

impl TaskSlot {
    /// Whether no wait is under way: a [`poll_until`] that returns `Pending` now starts
    /// one (which its caller counts in `RingCounters::waits`).
    pub(crate) fn starting(&self) -> bool {
        self.id.is_none() && self.yields == 0
    }

    /// Ends the wait: leaves the table, and hands the turn on if a release woke the
    /// task since (its record is gone then) or before its last registration.
    fn leave(&mut self) {
        self.yields = 0;
        let turn = core::mem::take(&mut self.turn);
        if let Some(id) = self.id.take() {
            let gone = lock().leave(id);
            // Woken: the release took its record out, or set its flag.
            let woken = gone.as_ref().is_none_or(|&(_, woken)| woken);
            // Dropped unlocked: see `Waiters::leave`.
            drop(gone);
            if let Some(span) = self.span.take() {
                if (turn || woken) && !switch::on("mutant_no_pass_on") {
                    pass(span, None);
                }
            }
        }
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        // A slot that never registered has nothing to leave (the turn is only handed
        // on by a registered one, see `leave`): most are, a reader's per read region.
        if self.id.is_some() {
            self.leave();
        }
    }
}

/// One poll of a waiting future: `try_claim` now; else, for the first [`YIELDS`] polls
/// of a wait, wakes the task itself and returns `Pending` (a yield to the executor,
/// which runs its other tasks and polls this one again: what a blocked thread does
/// before it sleeps); after them, registers the task's waker for a release into `span`
/// (the ring's, replacing what it registered before) and tries once more. `need` and
/// the turn a woken task holds: as in [`block_until`].
///
/// `try_claim(walk)`: `walk` asks for a walk of the whole ring, as in [`block_until`]
/// (after a registration, and in a poll that a release may have woken).
///
/// Without the yields, every wait paid a registration and the waiter's barrier, and a
/// release the wake-up: on a 2-worker tokio runtime, a producer task whose ring was full
/// once per batch of its consumer took 2.3× as long as one that yielded by hand.
// As on `block_until`.
#[cfg_attr(loom, allow(clippy::absurd_extreme_comparisons))]
pub(crate) fn poll_until<T>(
    slot: &mut TaskSlot,
    cx: &mut Context<'_>,
    span: Span,
    need: usize,
    mut try_claim: impl FnMut(bool) -> Option<T>,
) -> Poll<T> {
    // Registered, tried, and not woken since: no room was made in its span (every
    // release and every room made on a ring's thread inside it would have woken it),
    // so a poll that no wake-up caused (a `select!` sibling's) neither walks nor joins
    // again; it only leaves this poll's waker to be woken (the future may have moved
    // to another task). Cloned and dropped outside the lock: executor code.
    if let Some(id) = slot.id {
        let waker = cx.waker().clone();
        let rewoken = lock().rewake(id, waker);
        let waits = rewoken.is_ok();
        drop(rewoken);
        if waits {
            return Poll::Pending;
        }
        slot.turn = true; // a release woke it: its record is gone
    }
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
    let (id, old) = {
        let mut w = lock();
        let old = slot.id.and_then(|id| w.leave(id));
        let id = w.join(span, need, Wake::Task(waker));
        w.arm(id);
        (id, old)
    };
    (slot.id, slot.span) = (Some(id), Some(span));
    drop(old); // unlocked, as in `TaskSlot::leave`
    barrier::heavy();
    if let Some(t) = try_claim(true) {
        slot.leave();
        return Poll::Ready(t);
    }
    // Its try found no room for its need: one asking for less may fit. Unless a
    // release woke it again meanwhile, which polls it again. (The mutant keeps the
    // turn.)
    if slot.turn && !switch::on("mutant_no_handoff") {
        let mut armed = false;
        waking(|w, woken| {
            armed = w.armed(id);
            if armed {
                w.pass(span, Some(need), woken)
            } else {
                0
            }
        });
        slot.turn = !armed;
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
        // Its registration shares the table with the other waiting tests' (which
        // check what the table publishes).
        let _one = crate::ring::orphan::one_test();
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
            assert!(poll_until(&mut slot, &mut cx, span, 8, &mut never).is_pending());
            assert_eq!(slot.id, None, "registered at poll {i}, before its yields");
            assert_eq!(
                count.0.load(Ordering::Relaxed),
                i as usize + 1,
                "poll {i} did not wake its own task"
            );
        }
        assert!(poll_until(&mut slot, &mut cx, span, 8, &mut never).is_pending());
        assert!(slot.id.is_some(), "not registered after {YIELDS} yields");
        assert_eq!(count.0.load(Ordering::Relaxed), YIELDS as usize);
        // A poll after a release's wake-up walks the ring at once.
        wake_if_wanted(nowhere[3..].as_ptr().cast());
        assert!(poll_until(&mut slot, &mut cx, span, 8, &mut never).is_pending());
        let yields = YIELDS as usize;
        assert!(
            !walks[..=yields].contains(&true),
            "a yield walked the whole ring"
        );
        assert_eq!(walks[yields + 1..], [true, true, true]);
        // Ready ends the wait: the next one yields again.
        wake_if_wanted(nowhere[3..].as_ptr().cast());
        assert!(poll_until(&mut slot, &mut cx, span, 8, |_| Some(())).is_ready());
        assert_eq!((slot.id, slot.yields), (None, 0));
        assert!(poll_until(&mut slot, &mut cx, span, 8, |_| None::<()>).is_pending());
        assert_eq!((slot.id, slot.yields), (None, 1));
    }

    /// A task registered for a release into `span`, with the waker that counts its
    /// wake-ups.
    fn registered(span: Span) -> (TaskSlot, Arc<Count>) {
        registered_for(span, 8)
    }

    /// [`registered`], asking for `need` bytes.
    fn registered_for(span: Span, need: usize) -> (TaskSlot, Arc<Count>) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut slot = TaskSlot::default();
        while slot.id.is_none() {
            assert!(poll_until(&mut slot, &mut cx, span, need, |_| None::<()>).is_pending());
        }
        count.0.store(0, Ordering::Relaxed); // its own yields
        (slot, count)
    }

    /// A registered task polled again before a release wakes it (a `select!`
    /// sibling's wake-up) neither tries nor joins again; once woken, its poll walks; the
    /// latest poll's waker is the one woken.
    #[test]
    fn a_poll_no_wake_up_caused_neither_walks_nor_joins() {
        let _one = crate::ring::orphan::one_test();
        let block = [0u64; 16];
        let span = Span::new(block.as_ptr().cast(), 128);
        let (mut slot, count) = registered(span);
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let id = slot.id;
        let mut tries = Vec::new();
        for _ in 0..3 {
            let poll = poll_until(&mut slot, &mut cx, span, 8, |walk| {
                tries.push(walk);
                None::<()>
            });
            assert!(poll.is_pending());
        }
        assert_eq!(tries, [], "a poll no wake-up caused tried");
        assert_eq!(slot.id, id, "a poll no wake-up caused joined again");
        wake_if_wanted(block[3..].as_ptr().cast());
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "the release woke the task"
        );
        let poll = poll_until(&mut slot, &mut cx, span, 8, |walk| {
            tries.push(walk);
            walk.then_some(())
        });
        assert!(poll.is_ready(), "the woken poll walked: {tries:?}");
        // Polled with another waker (the future moved to another task): that one is
        // woken, in the same registration.
        let (mut slot, first) = registered(span);
        let other_count = Arc::new(Count(AtomicUsize::new(0)));
        let other = Waker::from(other_count.clone());
        let mut cx = Context::from_waker(&other);
        let before = slot.id;
        assert!(poll_until(&mut slot, &mut cx, span, 8, |_| None::<()>).is_pending());
        assert_eq!(slot.id, before, "a new waker joined again");
        wake_if_wanted(block[3..].as_ptr().cast());
        assert_eq!(
            (
                first.0.load(Ordering::Relaxed),
                other_count.0.load(Ordering::Relaxed)
            ),
            (0, 1),
            "the latest poll's waker is the one woken"
        );
    }

    /// The wake-ups each task of `tasks` has had.
    fn wakes(tasks: &[(TaskSlot, Arc<Count>)]) -> Vec<usize> {
        (tasks.iter())
            .map(|(_, c)| c.0.load(Ordering::Relaxed))
            .collect()
    }

    /// Polls a woken task once, with `try_claim`.
    fn poll_woken<T>(
        task: &mut (TaskSlot, Arc<Count>),
        span: Span,
        need: usize,
        try_claim: impl FnMut(bool) -> Option<T>,
    ) -> Poll<T> {
        let waker = Waker::from(task.1.clone());
        let mut cx = Context::from_waker(&waker);
        poll_until(&mut task.0, &mut cx, span, need, try_claim)
    }

    /// A release wakes one waiter of its ring, the oldest; the woken task hands the turn
    /// on when it claims or when its future is dropped, to the next oldest, and the
    /// table is left empty.
    #[test]
    fn a_release_wakes_the_oldest_and_a_claim_hands_the_turn_on() {
        let _one = crate::ring::orphan::one_test();
        let block = [0u64; 16];
        let span = Span::new(block.as_ptr().cast(), 128);
        let addr = block[3..].as_ptr().cast::<Header>();
        let mut tasks: Vec<_> = (0..4).map(|_| registered(span)).collect();
        wake_if_wanted(addr);
        assert_eq!(wakes(&tasks), [1, 0, 0, 0], "a release woke more than one");
        assert!(poll_woken(&mut tasks[0], span, 8, |walk| walk.then_some(())).is_ready());
        assert_eq!(wakes(&tasks), [1, 1, 0, 0], "a claim kept the turn");
        // Dropped woken, before its poll: the turn goes on.
        let second = tasks.remove(1);
        drop(second);
        assert_eq!(wakes(&tasks), [1, 1, 0], "a dropped future kept the turn");
        // Woken, it finds no room: asking for as much as the others, it keeps the turn
        // from them (they would not fit either) and waits again, last in line.
        assert!(poll_woken(&mut tasks[1], span, 8, |_| None::<()>).is_pending());
        assert_eq!(
            wakes(&tasks),
            [1, 1, 0],
            "a try without room handed the turn on"
        );
        wake_if_wanted(addr);
        assert_eq!(
            wakes(&tasks),
            [1, 1, 1],
            "the next release skipped the oldest"
        );
        drop(tasks);
        assert!(
            !wanted(addr as usize),
            "waiters left the table, still published"
        );
    }

    /// A woken waiter that finds no room for its need hands the turn to the oldest
    /// that asks for fewer bytes, which may fit where it did not; not to one asking as
    /// much.
    #[test]
    fn a_waiter_without_room_hands_the_turn_to_one_asking_less() {
        let _one = crate::ring::orphan::one_test();
        let block = [0u64; 16];
        let span = Span::new(block.as_ptr().cast(), 128);
        let addr = block[3..].as_ptr().cast::<Header>();
        let mut tasks = vec![
            registered_for(span, 64),
            registered_for(span, 64),
            registered_for(span, 16),
        ];
        wake_if_wanted(addr);
        assert_eq!(wakes(&tasks), [1, 0, 0]);
        assert!(poll_woken(&mut tasks[0], span, 64, |_| None::<()>).is_pending());
        assert_eq!(
            wakes(&tasks),
            [1, 0, 1],
            "the turn went to one asking as much"
        );
        assert!(poll_woken(&mut tasks[2], span, 16, |_| Some(())).is_ready());
        assert_eq!(wakes(&tasks), [1, 1, 1], "a claim kept the turn");
    }

    /// More rings are waited on than the table has entries: each release wakes only
    /// the waiter whose own span holds its header (the others stay registered, and a
    /// second release into their ring still wakes them), and once waiters leave, the
    /// published spans narrow to those who stay: no entry keeps covering every address.
    #[test]
    fn more_waited_rings_than_entries_wake_only_their_own() {
        let _one = crate::ring::orphan::one_test();
        const RINGS: usize = ENTRIES + 3;
        // Stand-ins for the rings' blocks: no ring's header lies in them.
        let blocks: Vec<Vec<u64>> = (0..RINGS).map(|_| vec![0u64; 16]).collect();
        let spans: Vec<Span> = (blocks.iter())
            .map(|b| Span::new(b.as_ptr().cast(), 128))
            .collect();
        let addr = |k: usize| blocks[k][3..].as_ptr().cast::<Header>();
        let tasks: Vec<_> = spans.iter().map(|&s| registered(s)).collect();
        let woken = |tasks: &[(TaskSlot, Arc<Count>)]| -> Vec<usize> {
            (tasks.iter())
                .map(|(_, c)| c.0.load(Ordering::Relaxed))
                .collect()
        };
        for k in 0..RINGS {
            wake_if_wanted(addr(k));
            let mut want = vec![0; RINGS];
            want[..=k].fill(1);
            assert_eq!(woken(&tasks), want, "a release into ring {k}");
        }
        // Woken tasks left the table; registered again, they are woken again. (Their
        // futures go first: one dropped with its turn hands it to its ring's next.)
        drop(tasks);
        let mut tasks: Vec<_> = spans.iter().map(|&s| registered(s)).collect();
        wake_if_wanted(addr(RINGS - 1));
        let mut want = vec![0; RINGS];
        want[RINGS - 1] = 1;
        assert_eq!(woken(&tasks), want, "a second release into the last ring");
        // All but the first leave: only its span stays published.
        let first = tasks.remove(0);
        drop(tasks);
        for k in 1..RINGS {
            assert!(!wanted(addr(k) as usize), "ring {k} left, still published");
        }
        assert!(
            wanted(addr(0) as usize),
            "the first ring is still waited on"
        );
        drop(first);
        assert!(!wanted(addr(0) as usize), "nobody waits");
    }

    /// A thread parked on an idle ring is never woken while another ring's producer is
    /// woken over and over (each of those woke every blocked thread of the process when
    /// they shared one condition variable), and the release into its own ring wakes it.
    #[test]
    fn a_thread_parked_on_an_idle_ring_sleeps_while_others_are_woken() {
        let _one = crate::ring::orphan::one_test();
        let rounds = if cfg!(miri) { 5 } else { 200 };
        let armed_on = |span: Span| lock().rings.iter().any(|l| l.span == span && l.head != NIL);
        let idle = super::super::Ring::new(1024);
        let idle_span = idle.span();
        let pinned = idle.fixed(1000).unwrap();
        let sleeper = std::thread::spawn(move || {
            let got = idle.fixed_wait(1000).is_ok();
            (got, PARKED_WAKES.with(|n| n.get()))
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let busy = super::super::Ring::new(1024);
        let busy_span = busy.span();
        let producer = std::thread::spawn(move || {
            let mut held = busy.fixed(1000).unwrap();
            for _ in 0..rounds {
                tx.send(held).unwrap();
                held = busy.fixed_wait(1000).unwrap();
            }
        });
        while !armed_on(idle_span) {
            std::thread::yield_now();
        }
        let wakes = WAKES.load(Ordering::Relaxed);
        for buf in rx.iter() {
            // Released once its producer is armed: the release wakes it, unless the
            // producer's own try after arming finds the room first and it leaves the
            // table before the release looks for it (under Miri, one round of five
            // counted no wake-up, which this race explains).
            while !armed_on(busy_span) {
                std::thread::yield_now();
            }
            drop(buf);
        }
        producer.join().unwrap();
        // Wake-ups went by while the sleeper slept: the test saw what it is about.
        let woken = WAKES.load(Ordering::Relaxed) - wakes;
        assert!(
            woken > 0,
            "the busy ring's producer was never woken in {rounds} rounds"
        );
        drop(pinned);
        let (got, parked_wakes) = sleeper.join().unwrap();
        assert!(got, "the release into its ring woke it");
        // Its own wake-up, and a spurious return from `park` or two at most.
        assert!(
            parked_wakes <= 3,
            "parked on an idle ring, woken {parked_wakes} times"
        );
    }
}

/// The waiting protocol under loom, with rings behind a lock (as a pool's shards are;
/// the pool itself is left out of loom builds), so that several threads wait on one
/// ring: more waiters than rings. A lost wake-up leaves a waiter parked for good, which
/// loom reports as a deadlock.
#[cfg(all(test, loom))]
mod models {
    use super::*;
    use crate::sync::model::{run_model, thread};
    use crate::sync::AtomicBool;
    use crate::Ring;
    use std::sync::Arc;

    /// Bytes of the ring: one region fills it, and once it is released, each waiter's
    /// region of a word fits.
    const RING: usize = 64;

    /// A task's waker that takes the lock of the ring it waits on, as it wakes.
    struct TakesTheLock {
        shard: Arc<Mutex<Ring>>,
        woken: AtomicBool,
    }

    impl std::task::Wake for TakesTheLock {
        fn wake(self: Arc<Self>) {
            drop(self.shard.lock().unwrap());
            // Relaxed: read on this thread.
            self.woken.store(true, Ordering::Relaxed);
        }
    }

    /// A claim of `n` bytes under the lock, as a pool's waiting reader makes it.
    fn try_claim(shard: &Mutex<Ring>, n: usize, walk: bool) -> Option<crate::FixedBufMut> {
        let ring = shard.lock().unwrap();
        ring.unstick_if(walk);
        ring.fixed(n)
    }

    /// A thread that waits for `n` bytes of the ring behind `shard` and returns them
    /// (a release of its own would wake another waiter).
    fn waiter(shard: &Arc<Mutex<Ring>>, n: usize) -> thread::JoinHandle<crate::FixedBufMut> {
        let (shard, span) = (shard.clone(), shard.lock().unwrap().span());
        thread::spawn(move || {
            let got = block_until(span, n, |walk| try_claim(&shard, n, walk), None);
            got.expect("no deadline")
        })
    }

    /// Two threads wait on one full ring; one release makes room for both. It wakes
    /// one of them, whose claim hands the turn to the other. The mutant
    /// `mutant_no_pass_on` (the turn kept by a waiter that claimed) deadlocks here.
    #[test]
    fn a_release_with_room_for_two_wakes_both_in_turn() {
        run_model("a_release_with_room_for_two_wakes_both_in_turn", || {
            let ring = Ring::new(RING);
            let full = ring.fixed(RING - 8).unwrap();
            let shard = Arc::new(Mutex::new(ring));
            let waiters = [waiter(&shard, 8), waiter(&shard, 8)];
            drop(full);
            let got = waiters.map(|t| t.join().unwrap());
            drop(got);
        });
    }

    /// Two threads wait on one full ring, for 24 bytes and for 8. The first release
    /// makes room for 8 only, and the ring's thread waits for that claim before it
    /// releases the rest: whichever the release wakes, the 8-byte waiter gets its room
    /// (woken by the release, or handed the turn by the 24-byte waiter that found none).
    /// The mutant `mutant_no_handoff` deadlocks here.
    #[test]
    fn a_waiter_without_room_hands_the_turn_to_a_smaller_one() {
        run_model(
            "a_waiter_without_room_hands_the_turn_to_a_smaller_one",
            || {
                let ring = Ring::new(RING);
                let small = ring.fixed(8).unwrap();
                let rest = ring.fixed(RING - 16 - 8).unwrap();
                let shard = Arc::new(Mutex::new(ring));
                let big = waiter(&shard, 24);
                let little = waiter(&shard, 8);
                drop(small);
                let got = little.join().unwrap();
                drop(rest);
                drop(big.join().unwrap());
                drop(got);
            },
        );
    }

    /// A task on this thread whose waker takes the lock (as one that reads a pool's
    /// stats does) and a blocked thread wait on a full ring. The region that fills it
    /// is released under the lock, with the wake-ups held back as a pool's shard guard
    /// holds them: the task is woken only once the lock is let go (woken under it, its
    /// waker would wait for the lock its own thread holds, which loom reports as a
    /// deadlock), and the one woken hands the turn to the other, so both get room.
    #[test]
    fn wakes_held_under_a_lock_run_after_it() {
        run_model("wakes_held_under_a_lock_run_after_it", || {
            let ring = Ring::new(RING);
            let full = ring.fixed(RING - 8).unwrap();
            let span = ring.span();
            let shard = Arc::new(Mutex::new(ring));
            let t = waiter(&shard, 8);
            let task = Arc::new(TakesTheLock {
                shard: shard.clone(),
                woken: AtomicBool::new(false),
            });
            let waker = Waker::from(task.clone());
            let mut cx = Context::from_waker(&waker);
            let mut slot = TaskSlot::default();
            let mut poll = |cx: &mut Context<'_>| {
                poll_until(&mut slot, cx, span, 8, |walk| try_claim(&shard, 8, walk))
            };
            assert!(poll(&mut cx).is_pending(), "the ring is full");
            let held = hold_wakes();
            let ring = shard.lock().unwrap();
            drop(full);
            // Relaxed: written on this thread.
            assert!(!task.woken.load(Ordering::Relaxed), "woken under the lock");
            drop(ring);
            drop(held);
            // Woken now, or handed the turn by the thread once it has claimed.
            // Relaxed: written on this thread, or by the thread's wake (a lock later).
            while !task.woken.load(Ordering::Relaxed) {
                thread::yield_now();
            }
            let Poll::Ready(got) = poll(&mut cx) else {
                panic!("woken, yet no room");
            };
            drop(got);
            drop(t.join().unwrap());
        });
    }
}
