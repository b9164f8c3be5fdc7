//! `ReadPool`: ring memory shared by many framed readers under one budget, and
//! `Memory`, what a reader reads into (a ring of its own, or a pool).
//!
//! A pool is a few shards, each one or two rings behind a lock (read regions in one,
//! copies of frames kept in the other: see `Rings`) and a spare region, and nothing
//! more: a reader takes a shard's lock to claim a region (once per read region, and
//! once per batch of frames' copies) and to give back the unused rest of one it froze
//! or keeps while idle (on the shard the region is in, found by its address: the rest
//! becomes the shard's spare, the next claim's region), and never holds a lock while
//! it reads from its socket or waits for room. Frames are released as on any
//! ring, by one atomic store into their region's header on whichever thread drops them,
//! without a lock. A `Ring` is `Send` and not `Sync`: the lock hands it from thread to
//! thread as a ring moved between threads is handed over, with the synchronisation of
//! the lock, so every claim sees what the claims before it did, and room given back
//! under the lock wakes waiters as room made on a ring's own thread does
//! (`orphan::after_room`: a waiter arms before it tries, and tries under the lock).
//! Those wake-ups, and those of releases under the lock, run once the lock is let go
//! (`Locked`, through `wait::hold_wakes`): a waker is the executor's code, and one that
//! touches the pool (its stats, a claim; an executor that polls the woken task inline)
//! would otherwise take the lock its thread holds.
//!
//! Shards keep the threads that poll readers off each other's locks and cache lines:
//! each thread claims from the shard it last claimed from, and moves to the next when
//! that one's lock is held or it has no room (see `ReadPool::claim`). The budget is the
//! rings' sum; a region is at most a copy ring.
//!
//! A reader waiting for room on a pool waits as one on its own ring does, through the
//! waiters' table (`ring/wait.rs`), with the hull of the rings' spans (a `Fail` ring
//! has one block: its span never changes, so it is read once; a release into any ring
//! may make room, and one elsewhere inside the hull wakes it for nothing), each try
//! taking a shard's lock to claim and letting it go at once.

use core::cell::{Cell, RefCell};
use core::fmt;
use core::ops::Deref;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, TryLockError, Weak};

use crate::buf::hopeless;
use crate::ring::wait::{block_until, hold_wakes, HeldWakes, Span};
// The sweeper's tick: the walk over every header and the page faults of pages given
// back that claims touch again are paid once a second at most (for a 16 MiB shard,
// some 4,000 pages).
use crate::ring::slots::{Slots, SLOT_MAX};
use crate::ring::GIVE_BACK_EVERY;
use crate::ring::{HDR, WORD};
use crate::sync::{Mutex, MutexGuard, RunFlag};
use crate::{FixedBuf, FixedBufMut, Ring, RingCounters, RingError, RingStats, WaitError, WhenFull};

/// Memory for many framed readers under one byte budget, whatever thread polls them: a
/// cheap handle (`Clone` shares it), `Send` and `Sync`. [`ReadPool::global`] is the
/// process's pool, which [`FramedReader::new`](super::FramedReader::new) reads into;
/// [`FramedReader::with_pool`](super::FramedReader::with_pool) (and the async reader's,
/// feature `tokio`) names another.
///
/// - **Cost.** The budget is address space; its pages are touched as far as live
///   buffers reach, and go back a second or two after claims stop touching them
///   ([`give_back_pages`](Self::give_back_pages)). A reader holds one read region (80
///   KiB by default) between polls at most, an idle async one none. A kept frame costs
///   its own bytes: a slot of its length (a run of 8-256 KiB), or a copy (a quarter more).
/// - **When full.** Readers wait for a release, not fail, only when what is held leaves
///   too few bytes for the next frame: one no gap between frames kept fits comes from
///   the heap, paid for by holding as many bytes of the gaps, within the budget
///   ([`RingCounters::heap_fallbacks`]). A frame larger than a shard's copy ring is
///   [`FrameError::LargerThanRing`](super::FrameError::LargerThanRing).
/// - **Locks.** One per shard ([`with_shards`](Self::with_shards)), taken per read
///   region and batch of copies, never while reading or waiting; frames go back lock-free.
///
/// ```
/// use ringmem::io::{FramedReader, LengthDelimited, ReadPool};
/// let pool = ReadPool::new(1 << 20);
/// let wires: Vec<&[u8]> = vec![b"\0\0\0\x02hi", b"\0\0\0\x03you"];
/// let frames: Vec<_> = std::thread::scope(|s| {
///     let readers: Vec<_> = (wires.iter())
///         .map(|&wire| {
///             let pool = pool.clone();
///             s.spawn(move || {
///                 let mut r = FramedReader::with_pool(wire, LengthDelimited::new(), &pool);
///                 r.next_frame().unwrap().unwrap()
///             })
///         })
///         .collect();
///     readers.into_iter().map(|r| r.join().unwrap()).collect()
/// });
/// assert_eq!((&frames[0][..], &frames[1][..]), (&b"hi"[..], &b"you"[..]));
/// assert_eq!(pool.stats().live_buffers, 2); // the frames' regions, in one budget
/// drop(frames);
/// assert_eq!(pool.stats().live_buffers, 0);
/// ```
#[derive(Clone)]
pub struct ReadPool {
    shared: Arc<Shared>,
}

/// What the handles share.
struct Shared {
    /// The budget, split: shards of one size, their rings `Fail` rings of one block each.
    shards: Box<[Shard]>,
    /// The hull of the rings' spans, fixed: a waiter's.
    span: Span,
    /// The bytes of all the rings.
    budget: usize,
    /// The larger ring's block length (see `Rings::largest`), fixed.
    block_len: usize,
    /// The most bytes one region can have (`Ring::largest_fit` of the larger ring), fixed.
    fit: usize,
    /// Whether the pool is on the sweeper's list (see [`sweep`]).
    sweeping: RunFlag,
    /// The process that put it there (see [`ReadPool::after_fork`]).
    listed_by: AtomicU32,
    /// [`RingCounters`]' waits and bytes given back, for the whole pool.
    waits: AtomicU64,
    given_back: AtomicU64,
    /// First tries left that skip the heap's count of the rings' free bytes (see
    /// [`ReadPool::claim_paid_first`]).
    paid_skips: AtomicU32,
    /// What the frames served from the heap hold (see [`ReadPool::claim_paid`]).
    heap: Arc<HeapShare>,
}

/// The frames of a pool served from the heap, and the regions of its rings held to pay
/// for them (see [`ReadPool::claim_paid`]): what [`ReadPool::stats`] counts in their
/// stead, and [`RingCounters::heap_fallbacks`].
#[derive(Default)]
struct HeapShare {
    /// Frames served from the heap so far, and the bytes they asked for.
    served: AtomicU64,
    served_bytes: AtomicU64,
    /// What the rings' walk counts beyond the frames served from the heap that are
    /// alive: their ballast's regions less the frames, and its bytes (headers
    /// included) less theirs. Never negative: a frame's ballast is at least one region
    /// of at least its bytes.
    over_regions: AtomicUsize,
    over_bytes: AtomicUsize,
}

/// What a region served from the heap carries until it is freed (see
/// [`ReadPool::claim_paid`]): the ring regions that pay for it, given back when it is.
struct Paid {
    /// Free runs of the pool's rings, held for their room alone (never written).
    ballast: Vec<FixedBufMut>,
    /// Its share of [`HeapShare::over_bytes`].
    over_bytes: usize,
    share: Arc<HeapShare>,
}

impl Drop for Paid {
    fn drop(&mut self) {
        // Relaxed: counts, which order nothing (the ballast's releases below make room
        // with their own ordering).
        let share = &self.share;
        (share.over_regions).fetch_sub(self.ballast.len() - 1, Ordering::Relaxed);
        share
            .over_bytes
            .fetch_sub(self.over_bytes, Ordering::Relaxed);
        // The ballast goes back to its rings (a release each, which wakes waiters)
        // once the heap region is freed (`heap::free` drops this after it).
    }
}

impl Shared {
    /// Counts `bytes` given back in [`RingCounters::bytes_given_back`].
    fn count_given_back(&self, bytes: usize) {
        if bytes != 0 {
            // Relaxed: a count, which orders nothing.
            self.given_back.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }
}

/// The sweeper: one thread for every pool of the process, which gives the free pages of
/// their rings back to the system. Once a tick ([`GIVE_BACK_EVERY`]) it looks at each
/// pool that claims have come to ([`SWEPT`]): the free pages of every shard whose lock
/// is free go back, a read ring's only when no claim came to its shard for a tick
/// (within a lap, claims would touch them again, a fault each); a shard no claim came
/// to since the last tick gives everything back, and again whenever frames were
/// released since. Each tick counts what is live (the pool's counters). A pool with no
/// claim since the last tick and nothing live leaves the list, until its next claim puts
/// it back; with no pool left the thread ends, until a claim starts it again. So a
/// spike's pages go back a tick or two after claims run below it, and those of a server
/// whose connections all went idle, or that drains what it kept after the last frame
/// came, which no claim is left to give back, too; an idle process that holds no frame
/// has no such thread, and a process of many pools one.
///
/// Neither stop loses a claim ([`RunFlag`]'s protocol, twice): a claim counts under its
/// shard's lock and asks the pool's flag there, and a pool put on the list asks the
/// thread's flag under the list's lock; the sweeper lowers a flag, then looks at the
/// claim counts (the list) under their locks.
///
/// The wake-ups its releases owe run executors' wakers on this thread: one that panics
/// ends that pool's tick, which the next tick does again (the thread goes on, so the
/// pools keep their pages going back; a tick leaves nothing half done where a waker
/// runs, see [`Shard::give_back_pages`]).
fn sweep() {
    loop {
        std::thread::sleep(GIVE_BACK_EVERY);
        // Taken out, so that claims putting pools on the list wait for no tick.
        let mut pools = core::mem::take(&mut *swept());
        pools.retain_mut(|p| {
            let Some(shared) = p.pool.upgrade() else {
                return false;
            };
            let tick = || {
                shared.sweep_tick(&mut p.seen)
                    || shared.sweeping.stop(|| shared.claimed_since(&p.seen))
            };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(tick)).unwrap_or(true)
        });
        let mut list = swept();
        list.append(&mut pools);
        let empty = list.is_empty();
        drop(list);
        if empty && !SWEEPER.stop(|| !swept().is_empty()) {
            return;
        }
    }
}

/// A pool the sweeper looks after (see [`sweep`]).
struct Swept {
    pool: Weak<Shared>,
    /// Its shards' claim counts at the last tick.
    seen: Vec<u64>,
}

/// The pools the sweeper looks after.
static SWEPT: Mutex<Vec<Swept>> = Mutex::new(Vec::new());

/// Whether the sweeper's thread runs.
static SWEEPER: RunFlag = RunFlag::new();

/// [`SWEPT`], locked (a panic under it left a list of pools, whole: go on).
fn swept() -> MutexGuard<'static, Vec<Swept>> {
    SWEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`swept`], unless its lock stays held through a few hundred tries (see
/// `ReadPool::start_sweeper`).
fn try_swept() -> Option<MutexGuard<'static, Vec<Swept>>> {
    for _ in 0..256 {
        match SWEPT.try_lock() {
            Ok(list) => return Some(list),
            Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    None
}

/// The process whose sweeper thread [`SWEEPER`] tells of (0: none yet).
static SWEEPER_PID: AtomicU32 = AtomicU32::new(0);

/// A claim in this many on a shard asks whether the process forked since its pool was
/// put on the sweeper's list (see `ReadPool::after_fork`): a system call, once in a
/// while.
const FORK_CHECK: u64 = 4096;

/// The sweeper's stack: it walks headers, gives pages back, and runs the wake-ups its
/// releases owe (executors' wakers).
const SWEEPER_STACK: usize = 256 << 10;

impl Shared {
    /// A tick of the sweeper (see [`sweep`]): gives back the free pages of every shard
    /// whose lock is free, its read ring's where no claim came since the last tick
    /// (`seen`, each shard's claim count then, which it updates), and counts what is
    /// live ([`Shard::counted`]). A shard no claim came to is counted first, and gives
    /// pages back only if frames went since it last did. Whether claims came or
    /// anything is live (the pool stays on the list).
    fn sweep_tick(&self, seen: &mut Vec<u64>) -> bool {
        seen.resize(self.shards.len(), u64::MAX);
        let (mut keep, mut given, mut runs) = (false, 0, Runs::new());
        for (shard, seen) in self.shards.iter().zip(seen.iter_mut()) {
            let Some(rings) = try_lock(shard) else {
                keep = true;
                continue;
            };
            let quiet = rings.claims.get() == *seen;
            *seen = rings.claims.get();
            if quiet {
                let stats = rings.stats();
                shard.record(stats.live_buffers, stats.bytes_in_use);
                keep |= stats.live_buffers != 0;
                if stats.bytes_in_use >= rings.given_at.get() {
                    continue; // nothing went since its pages did
                }
                rings.given_at.set(stats.bytes_in_use);
            } else {
                keep = true;
                rings.given_at.set(usize::MAX);
            }
            given += shard.give_back_pages(rings, quiet, &mut runs);
        }
        self.count_given_back(given);
        keep
    }

    /// Whether a claim came to any shard since its count was `seen`.
    fn claimed_since(&self, seen: &[u64]) -> bool {
        (self.shards.iter().zip(seen)).any(|(shard, &seen)| lock(shard).claims.get() != seen)
    }
}

/// One part of a pool: its rings, behind one lock.
struct Shard {
    rings: Mutex<Rings>,
    /// The spans of its read ring and of its copy ring (`Span::NONE` without one),
    /// fixed (one block each for life).
    spans: [Span; 2],
    /// Its live regions and their bytes as last counted (by the sweeper, or
    /// [`ReadPool::stats`]), the runs held while their pages go back left out:
    /// [`ReadPool::counters`]' count.
    counted: [AtomicUsize; 2],
}

impl Shard {
    /// Gives the free pages of this shard's `rings` (locked) back, in the three steps
    /// of [`Rings::take_free_pages`]: the lock is let go while the pages go back. The
    /// pages of free slots go back under it, a bounded share ([`DISCARD_MOST`]).
    /// `runs`: an empty list to reuse. Returns the bytes given back.
    ///
    /// The wake-ups its releases owe run at the end, once the runs are let go: a waker
    /// that panics leaves the runs' count right (see [`sweep`]).
    fn give_back_pages(&self, rings: Locked<'_>, quiet: bool, runs: &mut Runs) -> usize {
        let _wakes = hold_wakes();
        let (live, bytes) = rings.take_free_pages(quiet, runs);
        self.record(live, bytes);
        let discarded = rings.slots.borrow_mut().discard_free(DISCARD_MOST);
        drop(rings);
        let given = give_back(runs);
        lock(self).let_go(runs);
        given + discarded
    }

    /// Records `live` regions of `bytes` as the shard's [`counted`](Self::counted).
    fn record(&self, live: usize, bytes: usize) {
        // Relaxed: counts, which order nothing.
        self.counted[0].store(live, Ordering::Relaxed);
        self.counted[1].store(bytes, Ordering::Relaxed);
    }
}

/// A shard's memory: read regions in one ring, the copies of frames kept (see
/// `FramedReader`, "Frames kept past their read") in another, when the shard is large
/// enough to split ([`COPIES_FROM`]). Apart, the two kinds of region do not fragment
/// each other: the copies an application keeps gather in the copy ring, most of the
/// shard ([`reads_of`]), and read regions, released in about the order they were
/// claimed, lap the small read ring whole (`Ring::lap_whole`: its pages stay resident
/// while claims come, and go back once they stop). Mixed, kept copies a few dozen KiB
/// apart left no gap for a read region, and each lap touched new pages (32 MiB
/// resident for 78 KiB kept, in the conns scenario's keep row); kept frames left in the
/// read ring, read one to a region, cut it into gaps that every claim walked (see
/// `core::POOL_COPY_MAX`).
///
/// Copies of up to 16 KiB go to slots (`ring/slots.rs`): pages of the copy ring, each
/// cut into slots of one size class, which a release hands back to its page and the
/// next claim of that size reuses, in place. A copy's claim so looks at one word, never
/// at the frames kept; a copy with a region of its own cost a walk over them whenever
/// the copy ring's window had run into one. Every claim of the copy ring (a page, a
/// longer copy, a read region the read ring had no room for) takes its lowest free run
/// that holds it ([`claim_low`](Self::claim_low)), so what it holds stays packed at its
/// start rather than spread over it by a window's laps, and its free pages go back down
/// to an eighth over what is live (`Ring::pack_low`). A server keeping one 16 KiB
/// frame in ten (conns scenario) held 0.58-0.66 GB resident so, for 0.5-0.56 GB kept
/// (`FramedRead`: 0.50-0.59), against 0.9-1.06 GB with the window. The walk for a page
/// (one in 16 copies of 4 or 16 KiB steps over the live pages below the first gap)
/// took 0.1-0.8 % of that server's time.
struct Rings {
    /// A region of either ring that a reader read into and did not fill, or claimed and
    /// did not read into (see [`Rings::park`]): the next read region, without a walk.
    /// First, so that it is released before the rings are dropped.
    spare: Cell<Option<FixedBufMut>>,
    /// The copy ring's pages of slots, which copies of short frames take (see
    /// [`copy_slot`](Self::copy_slot)). Before the rings too.
    slots: RefCell<Slots>,
    /// Claims tried here so far: the sweeper looks at it once a tick (see [`sweep`]).
    claims: Cell<u64>,
    /// Bytes of the regions claimed from the read ring since the sweeper's last tick
    /// (see [`claim_reads`](Self::claim_reads)), which sets it back to 0.
    read_bytes: Cell<usize>,
    /// First tries left that skip the copy ring's walk for a read region (see
    /// [`claim_low_first`](Self::claim_low_first)).
    low_skips: Cell<u32>,
    /// The bytes live when the sweeper last gave pages back with no claim coming
    /// (`usize::MAX`: claims came since): it gives back again once fewer are.
    given_at: Cell<usize>,
    /// The free runs held while their pages go back (see
    /// [`take_free_pages`](Self::take_free_pages)), as regions and bytes (headers
    /// included): live to a walk, not to [`ReadPool::stats`].
    held: Cell<(usize, usize)>,
    /// Read regions, and copies while the copy ring has no room.
    reads: Ring,
    /// Copies of short frames.
    copies: Option<Ring>,
}

impl Rings {
    /// The rings, the copy ring first (none in a shard too small to split).
    fn rings(&self) -> impl Iterator<Item = &Ring> {
        self.copies.iter().chain([&self.reads])
    }

    /// A region `claim` takes from the read ring, counted in
    /// [`read_bytes`](Self::read_bytes).
    fn claim_reads(&self, claim: impl FnOnce(&Ring) -> Option<FixedBufMut>) -> Option<FixedBufMut> {
        let region = claim(&self.reads)?;
        (self.read_bytes).set(self.read_bytes.get() + region.capacity());
        Some(region)
    }

    /// A region for the copy of a frame of `n` bytes: a slot of the copy ring's pages
    /// (`ring/slots.rs`) for one of up to 16 KiB, taken without looking at a live
    /// one; else, or when the copy ring has no room for a page, a region of its own,
    /// the copy ring's lowest (see [`claim_low`](Self::claim_low)), else the read
    /// ring's (a plain claim). `walked`, as `claim_copy`'s: set by a walk of either ring
    /// that found no room, after which the batch's copies take plain claims only.
    fn copy_slot(&self, n: usize, walked: &mut bool) -> Option<FixedBufMut> {
        if let Some(copies) = &self.copies {
            if n <= SLOT_MAX {
                let mut slots = self.slots.borrow_mut();
                let slot = slots.claim(n, |len| copies.claim_lowest(len));
                if slot.is_some() {
                    return slot;
                }
            }
            if !*walked {
                let copy = copies.claim_lowest(n.max(1));
                if copy.is_some() {
                    return copy;
                }
                *walked = true; // the copy ring has no room: no more walks for this batch
            }
        }
        self.claim_reads(|r| claim_copy(r, n, walked))
    }

    /// A region for a frame of `n` bytes read alone (see `Step::Alloc`): a slot of
    /// exactly its length in the copy ring's pages (`Slots::claim_exact`).
    fn alone_slot(&self, n: usize) -> Option<FixedBufMut> {
        let copies = self.copies.as_ref()?;
        (self.slots.borrow_mut()).claim_exact(n, |len| copies.claim_lowest(len))
    }

    /// A region of the copy ring of up to `n` bytes and at least a read's worth (as
    /// [`claim_fair`]), else of `least`: its lowest free run that holds it
    /// (`Ring::claim_lowest`), grown over the rest of the run up to `n`. Every claim
    /// of the copy ring takes its lowest room, so that what it holds (pages of slots,
    /// the copies and read regions too long for them or the read ring) packs at its
    /// start and its pages past them stay untouched; a claim at its window would lap
    /// it, spreading read regions over all of it (a server keeping one 16 KiB frame in
    /// ten, conns scenario: 1 GB resident for 0.5 GB kept, against 0.58-0.66 GB so).
    /// The walk steps over the live regions below the room, most of them pages.
    fn claim_low(&self, n: usize, least: usize) -> Option<FixedBufMut> {
        let copies = self.copies.as_ref()?;
        let fair = least.max(FAIR_READ).min(n);
        let mut region = (copies.claim_lowest(fair))
            .or_else(|| (least < fair).then(|| copies.claim_lowest(least)).flatten())?;
        region.grow_in(n, copies);
        Some(region)
    }

    /// [`claim_low`](Self::claim_low) for a reader's first try, which skips it for the
    /// next [`FULL_SKIPS`] first tries once it found no room: a copy ring full of kept
    /// frames (a pool at its budget) is walked over all of them by every try, and finds
    /// no room in the next either while they stay held. A waiting reader's tries walk
    /// as before, so a release that makes room is never missed for good.
    fn claim_low_first(&self, n: usize, least: usize) -> Option<FixedBufMut> {
        let skips = self.low_skips.get();
        if skips > 0 {
            self.low_skips.set(skips - 1);
            return None;
        }
        let region = self.claim_low(n, least);
        if region.is_none() {
            self.low_skips.set(FULL_SKIPS);
        }
        region
    }

    /// The pages of slots whose slots are all free back to the copy ring (the current
    /// one of each size too, when `quiet`): the live slots, and the pages kept.
    fn trim_slots(&self, quiet: bool) -> (usize, usize) {
        self.slots.borrow_mut().trim(quiet)
    }

    /// The spare region (see [`park`](Self::park)), if it holds `least` bytes.
    fn take_spare(&self, least: usize) -> Option<FixedBufMut> {
        let spare = self.spare.take()?;
        if spare.capacity() >= least {
            return Some(spare);
        }
        self.spare.set(Some(spare));
        None
    }

    /// Keeps `region`, empty, as the shard's spare: the next read region of whichever
    /// reader claims from the shard first, taken without looking at a header.
    ///
    /// Readers claim and give back regions far more often than a ring's window can
    /// follow: a reader woken with bytes claims a region of a read's size, reads what
    /// came (a frame, often), freezes that and gives the rest back, then claims again
    /// for a read that finds nothing, and gives that region back whole. Given back
    /// into the ring, each rest is a free run behind the window (claims of other
    /// readers have moved it on), found again only by a walk of the headers, which
    /// frames kept alive make long: in a server keeping a frame in ten, 2.6 tries of
    /// a ring and a walk for one claim in ten. Parked here, the rest is the next
    /// claim's. The longer of two is kept; the other goes back to its ring.
    fn park(&self, region: FixedBufMut) {
        let keep = match self.spare.take() {
            Some(old) if old.capacity() >= region.capacity() => old,
            _ => region,
        };
        self.spare.set(Some(keep));
    }

    /// Gives the spare region (see [`park`](Self::park)) back to its ring: before the
    /// rings are walked to count what is live or free, so that they count it free.
    fn return_spare(&self) {
        if let Some(spare) = self.spare.take() {
            let addr = spare.as_ptr() as usize;
            let ring = (self.copies.as_ref())
                .filter(|c| c.span().holds(addr))
                .unwrap_or(&self.reads);
            spare.release_in(ring);
        }
    }

    /// The first of giving the rings' free pages back, under the shard's lock: the free
    /// runs whose pages go back, held, into `runs` (empty; see `Ring::take_free_pages`).
    /// [`give_back`] gives their pages back once the lock is let go, so that claims
    /// wait for no system call (a spike's 70 MiB took 18-40 ms), and
    /// [`let_go`](Self::let_go), under the lock again, frees the runs. The read ring of a
    /// split shard, which claims lap whole, only when `quiet` (no claim came for a
    /// while) or when claims took less than a [`READS_CALM`]th of it since the last
    /// call ([`read_bytes`](Self::read_bytes)): while reads go on, they would touch its
    /// pages again within a lap, a fault each.
    ///
    /// Returns the live regions and their bytes, as [`stats`](Self::stats) counts them,
    /// from the walks that take the runs (a read ring not walked for its pages walked
    /// for them alone: a small ring).
    fn take_free_pages(&self, quiet: bool, runs: &mut Runs) -> (usize, usize) {
        debug_assert!(runs.is_empty());
        self.return_spare();
        // Runs held by a give-back on call under way: live to the walks.
        let held = self.held.get();
        let (slots, pages) = self.trim_slots(quiet);
        let mut push = |run, touched| runs.push((run, touched));
        let (live, bytes) = match &self.copies {
            None => self.reads.take_free_pages(false, &mut push),
            Some(copies) => {
                let calm = self.read_bytes.replace(0) < self.reads.block_len() / READS_CALM;
                let (l, b) = if quiet || calm {
                    self.reads.take_free_pages(true, &mut push)
                } else {
                    let s = self.reads.stats();
                    (s.live_buffers, s.bytes_in_use)
                };
                let (cl, cb) = copies.take_free_pages(false, &mut push);
                (l + cl, b + cb)
            }
        };
        self.hold(runs, true);
        // The walks counted a page of slots as one live region.
        (live - held.0 - pages + slots, bytes - held.1)
    }

    /// What the rings hold (see [`ReadPool::stats`]), the runs held while their pages
    /// go back counted free.
    fn stats(&self) -> RingStats {
        self.return_spare();
        // As the spare: a page of slots none of which is live is free to the walks.
        let (slots, pages) = self.trim_slots(true);
        let mut sum = RingStats::default();
        for s in self.rings().map(Ring::stats) {
            add_stats(&mut sum, &s);
        }
        // The walks above counted them live.
        let (held, held_bytes) = self.held.get();
        sum.live_buffers -= held + pages;
        sum.live_buffers += slots;
        sum.bytes_in_use -= held_bytes;
        sum
    }

    /// Counts `runs` in (or, `held` false, out of) [`held`](Self::held): a give-back
    /// on call may run beside the sweeper's.
    fn hold(&self, runs: &Runs, held: bool) {
        let bytes: usize = runs.iter().map(|(run, _)| HDR + run.capacity()).sum();
        let (n, b) = self.held.get();
        self.held.set(if held {
            (n + runs.len(), b + bytes)
        } else {
            (n - runs.len(), b - bytes)
        });
    }

    /// Frees the runs [`take_free_pages`](Self::take_free_pages) held (a release each,
    /// which wakes waiters), once their pages went back: under the lock, so that
    /// [`ReadPool::stats`] sees them held and leaves them out, or free.
    fn let_go(&self, runs: &mut Runs) {
        self.hold(runs, false);
        runs.clear();
    }

    /// All three steps under the lock.
    #[cfg(test)]
    fn give_back_pages(&self, quiet: bool) -> usize {
        let mut runs = Vec::new();
        self.take_free_pages(quiet, &mut runs);
        let given = give_back(&mut runs);
        self.let_go(&mut runs);
        given
    }

    /// The larger ring: the one every region fits (see [`reads_of`]).
    fn largest(&self) -> &Ring {
        self.copies.as_ref().unwrap_or(&self.reads)
    }
}

/// Adds the counts of `s` (rings' or shards') to `sum`; the largest free run is the
/// larger of the two.
fn add_stats(sum: &mut RingStats, s: &RingStats) {
    sum.live_buffers += s.live_buffers;
    sum.bytes_in_use += s.bytes_in_use;
    sum.capacity += s.capacity;
    sum.blocks += s.blocks;
    sum.largest_free = sum.largest_free.max(s.largest_free);
}

/// Free runs of a pool's rings held while their pages go back, each with the bytes of it
/// that claims touched (see [`Rings::take_free_pages`]).
type Runs = Vec<(FixedBufMut, usize)>;

/// The second step of giving a shard's free pages back ([`Rings::take_free_pages`]),
/// with its lock let go: the pages of `runs` go back to the system. Returns their
/// bytes.
fn give_back(runs: &mut Runs) -> usize {
    (runs.iter_mut())
        .map(|(run, touched)| run.discard_pages(*touched))
        .sum()
}

/// The most bytes of free slots whose pages a shard gives back at once, under its lock
/// (`Slots::discard_free`): 5 MiB took 0.5-0.75 ms (a server keeping one 16 KiB frame
/// in ten); the rest goes at the next tick.
const DISCARD_MOST: usize = 16 << 20;

/// The least shard split into a read ring and a copy ring (see [`Rings`]); a smaller
/// one is a read ring alone.
const COPIES_FROM: usize = 1 << 20;

/// The bytes of a split shard's read ring: a quarter of the shard, up to
/// [`READS_LEAST`]; the copy ring has the rest. The read ring holds the regions being
/// read and those whose frames are on their way (copied out, when the application
/// keeps frames: see `Core::retire`), which go back about in the order they came; the
/// copy ring holds what is kept, most of a server's bytes, and the read regions the
/// read ring has no room for (frames too long for it, readers of many connections
/// reading at once), at its lowest room.
fn reads_of(shard: usize) -> usize {
    (shard / 4).min(READS_LEAST)
}

/// A read ring gives its free pages back at a sweeper's tick when claims took less than
/// a this-many-th of it since the last tick, though claims came to its shard: at most
/// as many of its pages are touched again within the tick, a fault each (32 a second
/// for a 1 MiB ring), and the rest stays given back. Readers of frames read alone
/// (`Rings::alone_slot`) claim slots only, which kept a read ring they do not touch
/// resident whole (conns scenario, 16 KiB frames kept one in ten: 1 MiB a shard, 4 MiB
/// all told).
const READS_CALM: usize = 8;

/// See [`reads_of`]: room for a dozen read regions (80 KiB by default) in flight, and
/// frames kept from readers that trust their consumer among them; the copy ring takes
/// the reads beyond. Claims lap the read ring whole, keeping all of it resident while
/// they come. A 512 MiB pool's four shards had an eighth each, 16 MiB (64 MiB resident
/// for reads), which 2 MiB served as well: a server keeping one 4 KiB frame in 100
/// held 73-91 MB resident against 97-117 (`FramedRead`'s: 69-83). 1 MiB serves as well
/// again (conns scenario, three rounds, 2 MiB against 1 MiB): 16 KiB frames kept one in
/// ten 16.9-17.7 against 16.7-16.8 KiB resident per frame kept (`FramedRead`'s
/// 16.5-18.1), at 141-167k against 160k frames a second; 4 KiB one in ten 461-478k
/// against 443-462k, one in 100 on 64 MiB 487-500k against 491-507k at 5.8-5.9 against
/// 5.3-5.4 KiB; 1,000 connections streaming 1 KiB frames (two rounds) 11.8-13.5M
/// against 12.7-13.7M frames in 4 s.
const READS_LEAST: usize = 1 << 20;

/// A reader's first tries (before it waits) that skip a walk after one that found no
/// room: of a shard's copy ring for a read region (`Rings::claim_low_first`), and the
/// heap's count of every ring's free bytes (`ReadPool::claim_paid_first`). At the
/// budget each walk is O(what is kept) and the next finds no room either while frames
/// stay held; the waiting try after a reader registers walks (as one a release wakes
/// does), so room made meanwhile is not missed for good. A pool at its budget (conns
/// scenario, 4 KiB frames kept one in ten on 64 MiB): `first_fit` took 40 % of the
/// server's time without the skips, 3 % with them.
const FULL_SKIPS: u32 = 16;

/// The process's pool.
static GLOBAL: OnceLock<ReadPool> = OnceLock::new();

/// Bytes of a shard at least, when [`ReadPool::new`] splits a budget: twice the default
/// largest frame (`LengthDelimited`'s 8 MiB), so that a frame the default decoder
/// accepts fits a shard's copy ring (seven eighths of it), where read regions too long
/// for the read ring go. A pool of less than twice this has one shard.
const MIN_SHARD: usize = 16 << 20;

/// Shards at most.
const MAX_SHARDS: usize = 64;

/// The shards of a pool of `budget` bytes: twice the parallelism (so two threads seldom
/// start at one shard), as far as each keeps [`MIN_SHARD`] bytes (the process's pool of
/// 64 MiB: four at most).
fn shard_count(budget: usize) -> usize {
    // `available_parallelism` reads cgroup files: asked once per process.
    static PARALLELISM: OnceLock<usize> = OnceLock::new();
    let threads =
        *PARALLELISM.get_or_init(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
    shards_for(budget, threads)
}

/// [`shard_count`] on a machine of `threads` hardware threads.
fn shards_for(budget: usize, threads: usize) -> usize {
    (2 * threads).min(MAX_SHARDS).min(budget / MIN_SHARD).max(1)
}

std::thread_local! {
    /// The shard this thread claims read regions from first: the last one it claimed
    /// from (at first, the next of a process-wide count, so threads start spread out).
    static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The copies this thread claimed on pools (see [`COPY_STAY`]), from its first
    /// [`HOME`]'s turn.
    static COPY_TURN: Cell<usize> = const { Cell::new(0) };
}

/// Claims of copies (batches, or single copies) a thread makes from one shard first
/// before it goes on to the next ([`copy_home`]): copies go round the shards, so that
/// every shard gets its share of them all the time, and reuses the pages its kept
/// frames leave. A thread whose copies went where its read regions did (a shard whose
/// read ring had room at hand) moved from shard to shard with them, and each shard it
/// left held the pages of its frames as they went, until the sweeper's next tick (conns
/// scenario, 16 KiB frames kept one in ten, four shards, three rounds: 17.6-18.7 KiB
/// resident per frame kept, against 16.9-17.2 going round every 1,024 claims, and
/// `FramedRead`'s 16.4-16.8; 17.0-17.4 going round every 64). Going round at every
/// claim cost 1 KiB frames 11-21 % of their rate (each shard's pages cold).
const COPY_STAY: usize = 1024;

/// [`HOME`], assigned on a thread's first call.
fn home() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    HOME.with(|h| {
        if h.get() == usize::MAX {
            // Relaxed: a count that only spreads threads out.
            let first = NEXT.fetch_add(1, Ordering::Relaxed);
            h.set(first);
            COPY_TURN.with(|t| t.set(first.wrapping_mul(COPY_STAY)));
        }
        h.get()
    })
}

/// The shard (of `n`) this thread claims its next copies from first: its first
/// [`HOME`], then the next one every [`COPY_STAY`] claims.
fn copy_home(n: usize) -> usize {
    home();
    COPY_TURN.with(|t| {
        let turn = t.get();
        t.set(turn.wrapping_add(1));
        turn / COPY_STAY % n
    })
}

impl ReadPool {
    /// The budget of the process's pool ([`global`](Self::global)) unless set: 64 MiB
    /// of address space, its pages touched as readers need them.
    ///
    /// ```
    /// assert_eq!(ringmem::io::ReadPool::GLOBAL_BUDGET, 64 << 20);
    /// ```
    pub const GLOBAL_BUDGET: usize = 64 << 20;

    /// A pool of `budget` bytes (headers included; a pool of 32 MiB or more is split into
    /// shards, and a shard of 1 MiB or more into two rings, each rounded up to a multiple
    /// of 8 bytes: see [`with_shards`](Self::with_shards)).
    ///
    /// # Panics
    /// When `budget` is 0, larger than a ring's block can address (16 GiB a shard), or
    /// the global allocator refuses it; [`ReadPool::try_new`] returns those as errors.
    ///
    /// ```
    /// let pool = ringmem::io::ReadPool::new(64 << 20);
    /// assert_eq!(pool.budget(), 64 << 20);
    /// ```
    pub fn new(budget: usize) -> ReadPool {
        match ReadPool::try_new(budget) {
            Ok(pool) => pool,
            Err(e) => panic!("ringmem: cannot create a read pool of {budget} bytes: {e}"),
        }
    }

    /// A pool of `budget` bytes, or why it cannot be made.
    ///
    /// # Errors
    /// As [`Ring::try_new`].
    ///
    /// ```
    /// use ringmem::{io::ReadPool, RingError};
    /// assert!(ReadPool::try_new(1 << 20).is_ok());
    /// assert_eq!(ReadPool::try_new(0).unwrap_err(), RingError::ZeroCapacity);
    /// ```
    pub fn try_new(budget: usize) -> Result<ReadPool, RingError> {
        ReadPool::with_shards(budget, shard_count(budget))
    }

    /// A pool of `budget` bytes in `shards` shards of equal length (at least one), each
    /// behind its own lock; a shard of 1 MiB or more is a read ring of a quarter of it,
    /// up to 1 MiB, and a ring of the rest for the copies of frames kept
    /// and for regions too long for the read ring.
    ///
    /// Each thread that claims from a pool starts at a shard of its own and keeps it for
    /// read regions, so threads polling many readers seldom take each other's locks and
    /// cache lines; it moves to another shard when its own is busy or has no room. Its
    /// copies of kept frames go round the shards, 1,024 claims to each, so that every
    /// shard reuses the pages its kept frames leave. A region (a
    /// read, a frame) is at most a shard's copy ring: a frame larger than that is
    /// [`FrameError::LargerThanRing`](super::FrameError::LargerThanRing), a budget's
    /// share that no one reader can take. [`new`](Self::new) makes twice the
    /// parallelism, with at least 16 MiB a shard (a frame of the default decoder's 8 MiB
    /// limit fits its copy ring of 14 MiB).
    ///
    /// # Errors
    /// As [`Ring::try_new`], for a ring of a shard of `budget / shards` bytes.
    ///
    /// ```
    /// let pool = ringmem::io::ReadPool::with_shards(4 << 20, 4).unwrap();
    /// assert_eq!((pool.budget(), pool.shards()), (4 << 20, 4));
    /// ```
    pub fn with_shards(budget: usize, shards: usize) -> Result<ReadPool, RingError> {
        let count = shards.max(1);
        let shard = budget / count;
        let reads = if shard >= COPIES_FROM {
            reads_of(shard)
        } else {
            shard
        };
        let ring = |capacity| {
            Ring::builder()
                .capacity(capacity)
                .when_full(WhenFull::Fail)
                .build()
        };
        let shards = (0..count)
            .map(|_| {
                let copies = (reads < shard).then(|| ring(shard - reads)).transpose()?;
                let reads = ring(reads)?;
                if let Some(copies) = &copies {
                    reads.lap_whole();
                    copies.scan_eagerly();
                    copies.pack_low();
                }
                let spans = [reads.span(), copies.as_ref().map_or(Span::NONE, Ring::span)];
                Ok(Shard {
                    rings: Mutex::new(Rings {
                        spare: Cell::new(None),
                        slots: RefCell::default(),
                        claims: Cell::new(0),
                        read_bytes: Cell::new(0),
                        low_skips: Cell::new(0),
                        given_at: Cell::new(usize::MAX),
                        held: Cell::new((0, 0)),
                        reads,
                        copies,
                    }),
                    spans,
                    counted: Default::default(),
                })
            })
            .collect::<Result<Box<[Shard]>, RingError>>()?;
        let (block_len, fit, budget) = {
            let first = lock(&shards[0]);
            let copies = first.copies.as_ref().map_or(0, Ring::block_len);
            let largest = first.largest();
            (
                largest.block_len(),
                largest.largest_fit(),
                (first.reads.block_len() + copies) * count,
            )
        };
        let span = (shards.iter().flat_map(|s| s.spans)).fold(Span::NONE, Span::hull);
        Ok(ReadPool {
            shared: Arc::new(Shared {
                span,
                budget,
                block_len,
                fit,
                shards,
                sweeping: RunFlag::new(),
                listed_by: AtomicU32::new(0),
                waits: AtomicU64::new(0),
                given_back: AtomicU64::new(0),
                paid_skips: AtomicU32::new(0),
                heap: Arc::default(),
            }),
        })
    }

    /// The process's pool, which [`FramedReader::new`](super::FramedReader::new) and
    /// `AsyncFramedReader::new` read into: made on first use, of
    /// [`GLOBAL_BUDGET`](Self::GLOBAL_BUDGET) bytes, unless [`set_global`](Self::set_global) gave it first. Its address space
    /// is reserved when it is made; its pages are touched as readers need them.
    ///
    /// ```
    /// use ringmem::io::ReadPool;
    /// let pool = ReadPool::global();
    /// assert_eq!(pool.budget(), ReadPool::global().budget()); // one pool
    /// ```
    pub fn global() -> &'static ReadPool {
        GLOBAL.get_or_init(|| ReadPool::new(ReadPool::GLOBAL_BUDGET))
    }

    /// Makes `pool` the process's pool ([`global`](Self::global)), if none was made
    /// yet: a server sets its budget once, before its first reader. Gives `pool` back
    /// if the process's pool exists already.
    ///
    /// # Errors
    /// `Err(pool)` when [`global`](Self::global) has made or been given one.
    ///
    /// ```
    /// use ringmem::io::ReadPool;
    /// // In this doc test's process no reader has been made yet:
    /// ReadPool::set_global(ReadPool::new(256 << 20)).unwrap();
    /// assert_eq!(ReadPool::global().budget(), 256 << 20);
    /// assert!(ReadPool::set_global(ReadPool::new(1 << 20)).is_err());
    /// ```
    pub fn set_global(pool: ReadPool) -> Result<(), ReadPool> {
        GLOBAL.set(pool)
    }

    /// The budget: the bytes of the pool's rings, headers included.
    ///
    /// ```
    /// assert_eq!(ringmem::io::ReadPool::new(100).budget(), 104);
    /// ```
    pub fn budget(&self) -> usize {
        self.shared.budget
    }

    /// How many shards the budget is split into (see [`with_shards`](Self::with_shards)).
    ///
    /// ```
    /// assert_eq!(ringmem::io::ReadPool::new(1 << 20).shards(), 1);
    /// ```
    pub fn shards(&self) -> usize {
        self.shared.shards.len()
    }

    /// The pool's [`RingStats`], summed over its rings: the regions that readers are
    /// reading into and the frames (or frozen regions) still held, a kept copy counted
    /// once, and the bytes they take (those served from the heap too, in the stead of
    /// the gaps that pay for them; copies' pages whole); `largest_free` is the largest
    /// of any ring's (the longest region a reader could claim now). It walks the region
    /// headers under each ring's lock, one shard after another, and gives the pages of
    /// copies none of whose slots is live back to their rings: for tuning and tests,
    /// not a hot loop.
    ///
    /// ```
    /// let pool = ringmem::io::ReadPool::new(1 << 20);
    /// let stats = pool.stats();
    /// assert_eq!((stats.live_buffers, stats.bytes_in_use), (0, 0));
    /// assert_eq!(stats.capacity, 1 << 20);
    /// ```
    pub fn stats(&self) -> RingStats {
        let mut sum = RingStats::default();
        for shard in self.shared.shards.iter() {
            let s = lock(shard).stats();
            shard.record(s.live_buffers, s.bytes_in_use);
            add_stats(&mut sum, &s);
        }
        // The frames served from the heap, in the stead of the ring regions that pay
        // for them (Relaxed: counts, which order nothing).
        let heap = &self.shared.heap;
        let over = |n: &AtomicUsize| n.load(Ordering::Relaxed);
        sum.live_buffers = sum.live_buffers.saturating_sub(over(&heap.over_regions));
        sum.bytes_in_use = sum.bytes_in_use.saturating_sub(over(&heap.over_bytes));
        sum.heap_fallbacks = heap.served.load(Ordering::Relaxed);
        sum
    }

    /// Gives back to the system the pages of free memory past what each ring of the
    /// pool needs now ([`Ring::give_back_pages`]), and returns their bytes. A thread
    /// does it by itself (one for every pool of the process, named `ringmem-sweep`)
    /// once a second while claims come or frames are held (for every shard whose lock
    /// is free), then ends until the next claim: after a spike of frames held, once
    /// every reader is idle, or as frames kept are released, the resident memory
    /// follows the frames held again. A call walks every region header under each
    /// shard's lock in turn.
    ///
    /// ```
    /// let pool = ringmem::io::ReadPool::new(1 << 20);
    /// let given = pool.give_back_pages(); // nothing was touched yet
    /// assert_eq!(given, 0);
    /// ```
    pub fn give_back_pages(&self) -> usize {
        let mut runs = Runs::new();
        let given = (self.shared.shards.iter())
            .map(|shard| shard.give_back_pages(lock(shard), true, &mut runs))
            .sum();
        self.shared.count_given_back(given);
        given
    }

    /// What the pool has counted so far ([`RingCounters`]): its readers' waits for room,
    /// the frames served from the heap (paid for with gaps of its rings: see
    /// [`ReadPool`], "When full") and their bytes, and the bytes of pages given back.
    /// And what is live, as the sweeper thread last counted it (once a second while
    /// claims come or anything is live, see [`RingCounters::live_buffers`]). Atomic
    /// loads, no lock and no walk: cheap enough for a server to export every second,
    /// unlike [`stats`](Self::stats), which walks every shard under its lock.
    ///
    /// ```
    /// use ringmem::io::{FramedReader, LengthDelimited, ReadPool};
    /// let pool = ReadPool::new(1 << 20);
    /// let mut r = FramedReader::with_pool(&b"\0\0\0\x02hi"[..], LengthDelimited::new(), &pool);
    /// let _frame = r.next_frame().unwrap().unwrap();
    /// let counters = pool.counters();
    /// assert_eq!((counters.waits, counters.heap_fallbacks), (0, 0));
    /// ```
    pub fn counters(&self) -> RingCounters {
        // Relaxed: counts, which order nothing.
        let load = |n: &AtomicUsize| n.load(Ordering::Relaxed);
        let counted = |i: usize| -> usize {
            (self.shared.shards.iter())
                .map(|s| load(&s.counted[i]))
                .sum()
        };
        let heap = &self.shared.heap;
        RingCounters {
            waits: self.shared.waits.load(Ordering::Relaxed),
            heap_fallbacks: heap.served.load(Ordering::Relaxed),
            heap_bytes: heap.served_bytes.load(Ordering::Relaxed),
            bytes_given_back: self.shared.given_back.load(Ordering::Relaxed),
            // As `stats` counts them: the frames served from the heap in the stead of
            // their ballast.
            live_buffers: counted(0).saturating_sub(load(&heap.over_regions)),
            bytes_in_use: counted(1).saturating_sub(load(&heap.over_bytes)),
        }
    }

    /// What `f` claims from a shard for a read region: the thread's own shard if its
    /// lock is free, then the others whose locks are free, then those whose locks were
    /// held, waiting for each. The shard that serves becomes the thread's own.
    ///
    /// A shard `f` found no room in is not tried again: on a full pool `f` walks each
    /// ring, and a claim that fails goes on to wait, armed before its next try, so room
    /// made meanwhile wakes it (see `wait::block_until`).
    ///
    /// Each shard tried counts a claim, and a claim that finds the pool's sweeper
    /// stopped starts it (see [`sweep`]).
    fn claim<T>(&self, f: impl FnMut(&Rings) -> Option<T>) -> Option<T> {
        self.claim_from(None, f)
    }

    /// [`claim`](Self::claim) for copies: from the shard whose turn it is
    /// ([`copy_home`]), which the thread's own shard for read regions does not follow.
    fn claim_in_turn<T>(&self, f: impl FnMut(&Rings) -> Option<T>) -> Option<T> {
        self.claim_from(Some(copy_home(self.shared.shards.len())), f)
    }

    /// [`claim`](Self::claim) from shard `first` if given, else from the thread's own.
    fn claim_from<T>(
        &self,
        first: Option<usize>,
        mut f: impl FnMut(&Rings) -> Option<T>,
    ) -> Option<T> {
        // Whether the sweeper was found stopped, under a shard's lock; whether to ask
        // if the process forked since the pool was listed.
        let (mut stopped, mut ask) = (false, false);
        let claimed = self.claim_in_shards(first, |rings| {
            let claims = rings.claims.get() + 1;
            rings.claims.set(claims);
            stopped |= self.shared.sweeping.stopped();
            ask |= claims % FORK_CHECK == 0;
            f(rings)
        });
        if stopped {
            self.start_sweeper();
        } else if ask {
            self.after_fork();
        }
        claimed
    }

    /// In a process forked from the one that put the pool on the sweeper's list (or
    /// after a claim that found the list's lock held): puts it on again, and starts the
    /// sweeper there. A child has none of its parent's threads, and inherits the flags
    /// that said the sweeper ran and had the pool: its pools would never give a page
    /// back. A claim in [`FORK_CHECK`] asks.
    #[cold]
    fn after_fork(&self) {
        // Relaxed: the process id, set once per process by the listing claim.
        if self.shared.listed_by.load(Ordering::Relaxed) != std::process::id() {
            self.shared.sweeping.forget();
            self.start_sweeper();
        }
    }

    /// Puts the pool on the sweeper's list, and starts its thread unless it runs (see
    /// [`sweep`]). A thread the system refuses is asked for again by the next pool's
    /// first claim (pages meanwhile go back on
    /// [`give_back_pages`](Self::give_back_pages) only). Under Miri, which gives no page
    /// back, there is none.
    #[cold]
    ///
    /// The list's lock is tried, not waited for: in a process forked while the
    /// sweeper held it, nothing would ever let it go. A claim that does not get it
    /// leaves the pool unlisted, and the next claim that asks whether the process
    /// forked ([`FORK_CHECK`]) tries again.
    fn start_sweeper(&self) {
        if !self.shared.sweeping.start() || cfg!(miri) {
            return;
        }
        let pid = std::process::id();
        // Relaxed: set and read by the claims of this process alone.
        self.shared.listed_by.store(pid, Ordering::Relaxed);
        // The first claim of a forked process to come here lowers the flag of the
        // parent's thread, which does not run in it (one claim: the swap).
        let parent = SWEEPER_PID.load(Ordering::Relaxed);
        if parent != pid
            && SWEEPER_PID
                .compare_exchange(parent, pid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            && parent != 0
        {
            SWEEPER.forget();
        }
        let Some(mut list) = try_swept() else {
            // Listed by no process: the claim that next asks (see `after_fork`) tries
            // again, and the claims between do not.
            self.shared.listed_by.store(0, Ordering::Relaxed);
            return;
        };
        if SWEEPER.stopped() {
            // Pools dropped while no thread ran (one refused), and a forked process's
            // pools listed by its parent: the thread lets them go as it ticks.
            list.retain(|p| p.pool.strong_count() != 0);
        }
        let me = Arc::downgrade(&self.shared);
        list.retain(|p| !p.pool.ptr_eq(&me));
        list.push(Swept {
            pool: me,
            seen: Vec::new(),
        });
        let start = SWEEPER.stopped();
        drop(list);
        if start && SWEEPER.start() {
            let thread = std::thread::Builder::new()
                .name("ringmem-sweep".into())
                .stack_size(SWEEPER_STACK)
                .spawn(sweep);
            if thread.is_err() {
                SWEEPER.stop(|| false);
            }
        }
    }

    /// [`claim_from`](Self::claim_from)'s search of the shards, from `first` if given
    /// (which the thread's own shard then does not follow).
    fn claim_in_shards<T>(
        &self,
        first: Option<usize>,
        mut f: impl FnMut(&Rings) -> Option<T>,
    ) -> Option<T> {
        let shards = &self.shared.shards;
        let n = shards.len();
        if n == 1 {
            return f(&lock(&shards[0]));
        }
        let settle = |k| {
            if first.is_none() {
                HOME.with(|h| h.set(k));
            }
        };
        let first = first.unwrap_or_else(home) % n;
        let order = || (0..n).map(move |i| (first + i) % n);
        // The shards tried under `try_lock`, by bit (past the 64th: tried again).
        let mut tried = 0u64;
        let bit = |k: usize| 1u64.checked_shl(k as u32).unwrap_or(0);
        for k in order() {
            let Some(ring) = try_lock(&shards[k]) else {
                continue;
            };
            tried |= bit(k);
            if let Some(t) = f(&ring) {
                drop(ring);
                settle(k);
                return Some(t);
            }
        }
        for k in order().filter(|&k| tried & bit(k) == 0) {
            if let Some(t) = f(&lock(&shards[k])) {
                settle(k);
                return Some(t);
            }
        }
        None
    }

    /// Runs `f` on the ring that holds the byte at `addr` (a region's), under its
    /// shard's lock; `None` for a region of none of them (one served from the heap: see
    /// [`claim_paid`](Self::claim_paid)).
    fn with_ring_of<T>(&self, addr: usize, f: impl FnOnce(&Ring) -> T) -> Option<T> {
        self.with_rings_of(addr, |_, ring| f(ring))
    }

    /// [`with_ring_of`](Self::with_ring_of), `f` also given the shard's rings.
    fn with_rings_of<T>(&self, addr: usize, f: impl FnOnce(&Rings, &Ring) -> T) -> Option<T> {
        let shards = &self.shared.shards;
        let (shard, copies) =
            (shards.iter()).find_map(|s| Some((s, s.spans.iter().position(|r| r.holds(addr))?)))?;
        let rings = lock(shard);
        Some(match (copies, &rings.copies) {
            (1, Some(ring)) => f(&rings, ring),
            _ => f(&rings, &rings.reads),
        })
    }

    /// A region of `least` bytes for a frame that no free run of the pool's rings holds,
    /// while their free runs together hold that many bytes: from the heap, paid for with
    /// regions of the rings' free runs of at least as many bytes (the ballast: never
    /// written, their pages given back to the system), which the heap region holds and
    /// gives back when it is freed, on whatever thread drops its last handle. The bytes
    /// the pool's frames and reads hold, in its rings or on the heap, thus never pass
    /// the budget, and a reader waits only when they reach it, never because the frames
    /// kept leave no gap its next frame fits in. `None` when the rings' free runs hold
    /// fewer bytes: a walk of every ring counts them first, and then no ballast is
    /// taken. Some of them may go unused: a free run of one word (a header alone) holds
    /// no region.
    /// [`claim_paid`](Self::claim_paid) for a reader's first try, which skips it for the
    /// next [`FULL_SKIPS`] first tries once the rings' free bytes fell short of a
    /// region: the pool is at its budget, and each try would walk every ring to count
    /// them again. A waiting reader's tries pay as before.
    fn claim_paid_first(&self, least: usize) -> Option<FixedBufMut> {
        // Relaxed: a hint, which orders nothing; a skip lost to a race costs one count.
        let skips = &self.shared.paid_skips;
        let left = skips.load(Ordering::Relaxed);
        if left > 0 {
            skips.store(left - 1, Ordering::Relaxed);
            return None;
        }
        self.claim_paid(least)
    }

    fn claim_paid(&self, least: usize) -> Option<FixedBufMut> {
        let shared = &*self.shared;
        let need = FixedBufMut::heap_carrying_span(least)?;
        let free: usize = (shared.shards.iter())
            .map(|shard| {
                let rings = lock(shard);
                rings.return_spare();
                rings.rings().map(free_bytes).sum::<usize>()
            })
            .sum();
        if free < need {
            // Relaxed: as in `claim_paid_first`.
            shared.paid_skips.store(FULL_SKIPS, Ordering::Relaxed);
            return None;
        }
        let mut ballast = Vec::new();
        let mut paid = 0;
        for shard in shared.shards.iter() {
            if paid >= need {
                break;
            }
            let rings = lock(shard);
            for r in rings.rings() {
                while paid < need {
                    let Some(mut piece) = claim_or_least(r, need - paid, WORD, true) else {
                        break;
                    };
                    paid += HDR + piece.capacity();
                    piece.discard_pages(usize::MAX);
                    ballast.push(piece);
                }
            }
        }
        if paid < need {
            // Claims on other threads took the room since it was counted.
            return None;
        }
        let share = &shared.heap;
        // Relaxed: counts, which order nothing.
        share.served.fetch_add(1, Ordering::Relaxed);
        share
            .served_bytes
            .fetch_add(least as u64, Ordering::Relaxed);
        let over_bytes = paid - need;
        (share.over_regions).fetch_add(ballast.len() - 1, Ordering::Relaxed);
        share.over_bytes.fetch_add(over_bytes, Ordering::Relaxed);
        let paid = Paid {
            ballast,
            over_bytes,
            share: share.clone(),
        };
        // The allocator refusing: the ballast goes back (`Paid`'s drop).
        FixedBufMut::on_heap_carrying(least, Box::new(paid)).ok()
    }

    /// Runs `f` on the first shard's read ring, under its lock: for tests of a pool of
    /// one.
    #[cfg(test)]
    fn with<T>(&self, f: impl FnOnce(&Ring) -> T) -> T {
        f(&lock(&self.shared.shards[0]).reads)
    }
}

/// A shard's rings, locked: the wake-ups that releases and room given back under the
/// lock owe run once it is let go (see the module docs).
struct Locked<'a> {
    /// Dropped first (fields drop in order): the lock is let go before the wake-ups.
    rings: MutexGuard<'a, Rings>,
    _wakes: HeldWakes,
}

impl Deref for Locked<'_> {
    type Target = Rings;

    fn deref(&self) -> &Rings {
        &self.rings
    }
}

/// `shard`'s rings, locked.
fn lock(shard: &Shard) -> Locked<'_> {
    // A panic under the lock came from the ring's own code, which leaves its headers
    // tiled at every point it can panic (allocation failures are `None`): go on.
    let rings = shard.rings.lock().unwrap_or_else(|e| e.into_inner());
    Locked {
        rings,
        _wakes: hold_wakes(),
    }
}

/// `shard`'s rings, locked, if no other thread holds the lock.
fn try_lock(shard: &Shard) -> Option<Locked<'_>> {
    let rings = match shard.rings.try_lock() {
        Ok(rings) => rings,
        // As in `lock`.
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    Some(Locked {
        rings,
        _wakes: hold_wakes(),
    })
}

impl fmt::Debug for ReadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadPool")
            .field("budget", &self.budget())
            .finish_non_exhaustive()
    }
}

/// What a framed reader reads into: a ring of its own, or a pool's, behind its lock.
/// The ring is boxed: a reader is in its task's future, often twice over, on every
/// connection, and most read into a pool (16 bytes here, not a ring's 136).
pub(crate) enum Memory {
    Own(Box<Ring>),
    Pool(ReadPool),
}

impl Memory {
    /// A region of `n` bytes if the ring has room now: the first try of a claim.
    ///
    /// Without room for `n`, a region of [`FAIR_READ`] bytes (or `least`) and as much
    /// more of its free run as `n` asks (see [`claim_or_least`]). On a pool, every
    /// shard's read ring is tried plainly ([`claim_fair`]) first, then every copy ring's
    /// lowest room ([`Rings::claim_low`]), and only then a read ring is walked: a plain
    /// claim looks at one region (the oldest) and a few more (invariant 9), and on a
    /// reader's own ring releases come roughly in the order of the claims, but on a
    /// pool the oldest region is often another reader's partial frame, and the room may
    /// be anywhere. At most two walks per ring (a read's worth, then the least region)
    /// for a claim that would otherwise wait; the tries of a wait stay cheap.
    pub(crate) fn first_try(&self, n: usize, least: usize) -> Option<FixedBufMut> {
        match self {
            // The read region's own try first: on a reader's own ring releases come
            // roughly in the order of the claims, and `n` is mostly there.
            Memory::Own(ring) => ring
                .fixed(n)
                .or_else(|| claim_or_least(ring, n, least, false)),
            // Every shard's plain try before any walk, each taking what a window that has
            // run into frames kept alive still holds: a shard is walked only when no
            // shard has a read's worth at hand.
            // Then every copy ring's lowest room, before a walk of a read ring: a region
            // there costs a walk over the pages below it anyway, and it goes back soon.
            // The walks only while the last ones found room (see `FULL_SKIPS`).
            Memory::Pool(pool) => pool
                .claim(|r| {
                    (r.take_spare(least))
                        .or_else(|| r.claim_reads(|reads| claim_fair(reads, n, least)))
                })
                .or_else(|| pool.claim(|r| r.claim_low_first(n, least)))
                .or_else(|| {
                    pool.claim(|r| r.claim_reads(|reads| claim_or_least(reads, n, least, true)))
                })
                .or_else(|| pool.claim_paid_first(least)),
        }
    }

    /// [`first_try`](Self::first_try) for a region of `like` bytes at least, then, if
    /// there is no room for one and `least` is less, for `least`; first, for `alone`
    /// bytes if not 0, a region for one frame ([`claim_alone`](Self::claim_alone)). See
    /// `Step::Alloc`.
    pub(crate) fn first_try_like(
        &self,
        n: usize,
        like: usize,
        least: usize,
        alone: usize,
    ) -> Option<FixedBufMut> {
        if alone > 0 {
            if let Some(slot) = self.claim_alone(alone) {
                return Some(slot);
            }
        }
        let region = self.first_try(n, like);
        if region.is_some() || like <= least {
            return region;
        }
        if let Memory::Own(ring) = self {
            // A walk round the ring before a region the frame would outgrow, for a frame
            // whose part (half of it, as likely as not) costs a copy longer than a read
            // (`TOP_UP_MIN`); a pool's first try walks already.
            if like / 2 >= super::core::TOP_UP_MIN {
                if let Some(region) = claim_or_least(ring, n, like, true) {
                    return Some(region);
                }
            }
        }
        self.first_try(n, least)
    }

    /// A try of a waiting claim: `walk` after a wake-up (see `wait::block_until`); of
    /// less than `n` bytes, down to `least`, if `n` do not fit.
    pub(crate) fn try_claim(&self, n: usize, least: usize, walk: bool) -> Option<FixedBufMut> {
        match self {
            Memory::Own(ring) => claim_or_least(ring, n, least, walk),
            // The copy ring (a walk: see `Rings::claim_low`) and the heap, paid for, only
            // by a try that walks: the others stay cheap (a poll without a wake-up).
            Memory::Pool(pool) => pool
                .claim(|r| {
                    (r.take_spare(least))
                        .or_else(|| r.claim_reads(|reads| claim_or_least(reads, n, least, walk)))
                        .or_else(|| walk.then(|| r.claim_low(n, least)).flatten())
                })
                .or_else(|| walk.then(|| pool.claim_paid(least)).flatten()),
        }
    }

    /// What a claim of `least` bytes comes to at once, before any waiting: `Some` when
    /// no release can make room (see `hopeless`).
    pub(crate) fn hopeless(&self, least: usize) -> Option<WaitError> {
        match self {
            Memory::Own(ring) => hopeless(ring, Some(least)),
            // The shards are alike, and a `Fail` ring's answer is its size's.
            Memory::Pool(pool) => hopeless(lock(&pool.shared.shards[0]).largest(), Some(least)),
        }
    }

    /// A region of `n` bytes (or less, down to `least`), blocking the thread until
    /// there is room.
    pub(crate) fn fixed_wait(&self, n: usize, least: usize) -> Result<FixedBufMut, WaitError> {
        // The caller checked that a release can make room (`hopeless`). A `Grow` or
        // `Heap` ring serves every try; a `Fail` ring's span never changes.
        let mut failed = false;
        block_until(
            self.span(),
            least,
            |walk| {
                let region = self.try_claim(n, least, walk);
                if region.is_none() && !core::mem::replace(&mut failed, true) {
                    self.count_wait();
                }
                region
            },
            None,
        )
        .ok_or(WaitError::TimedOut)
    }

    /// Counts a wait for room in [`RingCounters::waits`] (the ring's, or the pool's).
    pub(crate) fn count_wait(&self) {
        match self {
            Memory::Own(ring) => ring.count_wait(),
            // Relaxed: a count, which orders nothing.
            Memory::Pool(pool) => _ = pool.shared.waits.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A region of `n` bytes if one is free now, for a frame's copy: a plain claim, and
    /// a walk of the ring if it fails (a read region just claimed in a gap may end at
    /// a live region: the window is then closed, and the room for the copy elsewhere;
    /// the walk opens the window where it finds it, and the copies after it are plain
    /// claims again). Never a wait: the frame's view serves instead.
    #[inline]
    pub(crate) fn claim_now(&self, n: usize) -> Option<FixedBufMut> {
        match self {
            Memory::Own(ring) => claim_copy(ring, n, &mut false),
            Memory::Pool(pool) => pool.claim_in_turn(|r| r.copy_slot(n, &mut false)),
        }
    }

    /// A region for a frame of `n` bytes read alone (see `Step::Alloc`), if one is at
    /// hand: on a pool, a slot of its length ([`Rings::alone_slot`]); `None` on a ring
    /// of the reader's own.
    pub(crate) fn claim_alone(&self, n: usize) -> Option<FixedBufMut> {
        match self {
            Memory::Own(_) => None,
            Memory::Pool(pool) => pool.claim_in_turn(|r| r.alone_slot(n)),
        }
    }

    /// Regions for the copies `planned` asks for, one entry of `out` per entry of
    /// `planned` (`None` for a `None`, and for a copy without room), claimed at once:
    /// on a pool, from one shard under one lock (the first whose lock is free and that
    /// has room for the first copy). A plain claim each, and one walk of the ring at the
    /// first that fails; the rest then go without.
    pub(crate) fn claim_copies(
        &self,
        planned: impl Iterator<Item = Option<usize>> + Clone,
        out: &mut VecDeque<Option<FixedBufMut>>,
    ) {
        let wanted = planned.clone().any(|n| n.is_some());
        // `copy`: a copy's claim (see `Rings::copy_slot`), given whether a ring was walked.
        let mut claim = |copy: &mut dyn FnMut(usize, &mut bool) -> Option<FixedBufMut>| {
            let start = out.len();
            let mut walked = false;
            for n in planned.clone() {
                out.push_back(n.and_then(|n| copy(n, &mut walked)));
            }
            if (out.range(start..)).any(Option::is_some) {
                Some(())
            } else {
                out.truncate(start);
                None
            }
        };
        let served = match self {
            _ if !wanted => None,
            Memory::Own(ring) => claim(&mut |n, w| claim_copy(ring, n, w)),
            Memory::Pool(pool) => pool.claim_in_turn(|r| claim(&mut |n, w| r.copy_slot(n, w))),
        };
        if served.is_none() {
            out.extend(planned.map(|_| None));
        }
    }

    /// The addresses a release that makes room for this reader lies in.
    pub(crate) fn span(&self) -> Span {
        match self {
            Memory::Own(ring) => ring.span(),
            Memory::Pool(pool) => pool.shared.span,
        }
    }

    /// Bytes per block (a region's bytes are at most this).
    pub(crate) fn block_len(&self) -> usize {
        match self {
            Memory::Own(ring) => ring.block_len(),
            Memory::Pool(pool) => pool.shared.block_len,
        }
    }

    /// The most bytes one region can have (`usize::MAX` for a ring that makes larger
    /// blocks on demand).
    pub(crate) fn fit(&self) -> usize {
        match self {
            Memory::Own(ring) if ring.when_full() == WhenFull::Fail => ring.largest_fit(),
            Memory::Own(_) => usize::MAX,
            Memory::Pool(pool) => pool.shared.fit,
        }
    }

    /// Gives `buf`'s unused capacity back to the ring (see `FixedBufMut::shrink_in`).
    pub(crate) fn shrink(&self, buf: &mut FixedBufMut) {
        match self {
            Memory::Own(ring) => buf.shrink_in(ring),
            // A region served from the heap keeps its capacity.
            Memory::Pool(pool) => {
                _ = pool.with_ring_of(buf.as_ptr() as usize, |r| buf.shrink_in(r));
            }
        }
    }

    /// Freezes `buf`, a region a reader read into: on a pool, its unused capacity (if a
    /// read's worth) becomes the shard's spare region (see [`Rings::park`]); else it is
    /// given back to the ring, as [`shrink`](Self::shrink) does.
    pub(crate) fn freeze_read(&self, mut buf: FixedBufMut) -> FixedBuf {
        match self {
            Memory::Own(ring) => buf.shrink_in(ring),
            // A slot keeps its capacity: no lock.
            Memory::Pool(_) if buf.is_slot() => {}
            Memory::Pool(pool) => {
                _ = pool.with_rings_of(buf.as_ptr() as usize, |rings, r| {
                    match buf.split_spare_in(FAIR_READ, r) {
                        Some(rest) => rings.park(rest),
                        None => buf.shrink_in(r),
                    }
                });
            }
        }
        buf.freeze()
    }

    /// Gives back `buf`, a region a reader holds no bytes of: on a pool, as the shard's
    /// spare region (see [`Rings::park`]); on a ring of the reader's own, released.
    #[cfg(feature = "tokio")]
    pub(crate) fn give_back(&self, mut buf: FixedBufMut) {
        buf.clear();
        match self {
            Memory::Own(_) => drop(buf),
            // A slot is no read region.
            Memory::Pool(_) if buf.is_slot() => drop(buf),
            // A region served from the heap is released as it goes (with the closure).
            Memory::Pool(pool) => {
                _ = pool.with_rings_of(buf.as_ptr() as usize, move |rings, _| rings.park(buf));
            }
        }
    }

    /// Gives `buf`'s capacity beyond `cap` bytes back to the ring.
    #[cfg(feature = "tokio")]
    pub(crate) fn shrink_to(&self, buf: &mut FixedBufMut, cap: usize) {
        match self {
            Memory::Own(ring) => buf.shrink_to_in(cap, ring),
            // As in `shrink`.
            Memory::Pool(pool) => {
                _ = pool.with_ring_of(buf.as_ptr() as usize, |r| buf.shrink_to_in(cap, r));
            }
        }
    }

    /// The reader's own ring; `None` on a pool.
    pub(crate) fn own(&self) -> Option<&Ring> {
        match self {
            Memory::Own(ring) => Some(ring),
            Memory::Pool(_) => None,
        }
    }

    /// The pool; `None` for a ring of the reader's own.
    pub(crate) fn pool(&self) -> Option<&ReadPool> {
        match self {
            Memory::Own(_) => None,
            Memory::Pool(pool) => Some(pool),
        }
    }
}

/// Bytes of the region a reader takes when the ring has no room for a whole read region
/// (unless its frame needs more): a read's worth, large enough that reading into it
/// costs little more per byte than a bulk read does.
const FAIR_READ: usize = 4 << 10;

/// A region of up to `n` bytes and at least a read's worth ([`FAIR_READ`], or `least`
/// where that is more, or `n` where that is less): the first free run a claim finds
/// that holds a read's worth, taken as far as it goes up to `n` (see
/// `FixedBufMut::grow_in`). The plain try of a first try on a pool: a window that has
/// run into frames kept alive still serves what it holds, without a walk.
fn claim_fair(r: &Ring, n: usize, least: usize) -> Option<FixedBufMut> {
    claim_up_to(r, least.max(FAIR_READ).min(n), n)
}

/// A region of at least `bytes` bytes, grown over the rest of its free run up to `n`.
fn claim_up_to(r: &Ring, bytes: usize, n: usize) -> Option<FixedBufMut> {
    let mut region = r.fixed(bytes)?;
    region.grow_in(n, r);
    Some(region)
}

/// [`claim_fair`], then a region of `least` bytes grown the same way; with `walk`, each
/// try a walk of the whole ring (see `Ring::unstick_if`).
///
/// A try for all of `n` first would cost a walk over every region the ring holds
/// whenever frames the application keeps leave no run that long, which is every claim
/// then; the first run that holds a read's worth is found a few regions on. Where kept
/// frames leave only short gaps, reads get shorter, and the reader waits only when no
/// gap holds what its next frame needs (`least`).
fn claim_or_least(r: &Ring, n: usize, least: usize, walk: bool) -> Option<FixedBufMut> {
    r.unstick_if(walk);
    if let Some(region) = claim_fair(r, n, least) {
        return Some(region);
    }
    if least >= FAIR_READ.min(n) {
        return None;
    }
    r.unstick_if(walk);
    claim_up_to(r, least, n)
}

/// A region for a copy of `n` bytes (an empty frame's too: `fixed(0)` is `None`): a
/// plain claim, then a walk of the ring unless `walked` says one failed already (then
/// it is set).
fn claim_copy(r: &Ring, n: usize, walked: &mut bool) -> Option<FixedBufMut> {
    let n = n.max(1);
    r.fixed(n).or_else(|| {
        if core::mem::replace(walked, true) {
            return None;
        }
        claim_or_least(r, n, n, true)
    })
}

/// Bytes of `r`'s free runs, their headers included (a walk of its headers).
fn free_bytes(r: &Ring) -> usize {
    let stats = r.stats();
    stats.capacity - stats.bytes_in_use
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::Own(ring) => ring.fmt(f),
            Memory::Pool(pool) => pool.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rest of a region a reader read into is the next read's region, and a region
    /// given back unread is too: parked as the shard's spare, taken by the next claim
    /// that it holds, without a walk; counted free.
    #[test]
    #[cfg(feature = "tokio")] // `give_back`: an async reader's, going idle
    fn a_read_regions_rest_serves_the_next_read() {
        use crate::ring::HDR;
        let pool = ReadPool::new(1 << 20);
        let mem = Memory::Pool(pool.clone());
        let mut region = mem.first_try(64 << 10, 64).unwrap();
        let cap = region.capacity();
        region.try_extend_from_slice(&[7; 100]).unwrap();
        let frames = mem.freeze_read(region);
        assert_eq!(&frames[..], &[7; 100]);
        assert_eq!(frames.region_span(), HDR + 104);
        let next = mem.first_try(64 << 10, 64).unwrap();
        let after = frames.as_ptr() as usize + 104 + HDR;
        assert_eq!(next.as_ptr() as usize, after, "the rest, after the frames");
        assert_eq!(next.capacity(), cap - 104 - HDR);
        mem.give_back(next);
        // The stats count the spare free (given back to the ring first).
        assert_eq!(pool.stats().live_buffers, 1);
        let next = mem.first_try(64 << 10, 64).unwrap();
        assert_eq!(next.as_ptr() as usize, after);
        // A claim the spare does not hold takes a region of the rings.
        let spare_cap = next.capacity();
        mem.give_back(next);
        let larger = mem.first_try(spare_cap + 8, spare_cap + 8).unwrap();
        assert_ne!(larger.as_ptr() as usize, after);
        assert_eq!(
            mem.first_try(64 << 10, 64).unwrap().as_ptr() as usize,
            after
        );
        drop((frames, larger));
        assert_eq!(pool.stats().live_buffers, 0);
    }

    /// A read ring (of a shard split in two) that claims lap whole gives its free pages
    /// back when claims have left it alone a while, or took less than a
    /// [`READS_CALM`]th of it since the last time, or when asked, counting those that
    /// were resident; its copy ring as any ring does.
    #[test]
    fn a_read_ring_gives_its_pages_back_once_quiet_or_calm() {
        let (pool, mem, reads) = lapped_without_sweeper(8 << 20);
        let back = |quiet| lock(&pool.shared.shards[0]).give_back_pages(quiet);
        assert_eq!(back(false), 0, "a read ring in use keeps its pages");
        let given = back(true);
        assert!(
            !GIVES_BACK || given >= reads / 2,
            "{given} bytes given back"
        );
        // Only those resident count.
        assert_eq!(back(true), 0);
        let mut r = mem.first_try(64 << 10, 64 << 10).unwrap();
        r.try_extend_from_slice(&vec![1; r.capacity()]).unwrap();
        assert!(r.capacity() < reads / READS_CALM);
        drop(r);
        let calm = back(false);
        assert!(!GIVES_BACK || calm >= 60 << 10, "{calm} bytes given back");
        lap_the_read_ring(&mem);
        assert_eq!(back(false), 0, "a lap since");
    }

    /// A pool's pages go back after its shard's lock is let go: its free runs are held
    /// meanwhile (a claim steps over them as over any live region; the pool's stats
    /// count them free), and free again after.
    #[test]
    fn free_runs_are_held_while_their_pages_go_back() {
        let (pool, mem, reads) = lapped_without_sweeper(4 << 20);
        let shard = &pool.shared.shards[0];
        let mut runs = Vec::new();
        lock(shard).take_free_pages(true, &mut runs);
        let held: usize = runs.iter().map(|(run, _)| run.capacity()).sum();
        assert!(
            held >= reads / 2,
            "{held} bytes held of a {reads}-byte read ring"
        );
        assert_eq!(lock(shard).reads.stats().live_buffers, runs.len());
        let stats = pool.stats();
        assert_eq!((stats.live_buffers, stats.bytes_in_use), (0, 0));
        let claimed = mem.first_try(64 << 10, 64 << 10).unwrap();
        let at = claimed.as_ptr() as usize;
        for (run, _) in &runs {
            let run = run.as_ptr() as usize..run.as_ptr() as usize + run.capacity();
            assert!(!run.contains(&at), "a claim took a held run");
        }
        drop(claimed);
        let given = give_back(&mut runs);
        assert!(
            !GIVES_BACK || given >= reads / 2,
            "{given} bytes given back"
        );
        lock(shard).let_go(&mut runs);
        assert_eq!(lock(shard).reads.stats().live_buffers, 0, "free again");
        assert_eq!(pool.stats().live_buffers, 0);
    }

    /// Whether pages given back are counted: on the targets `discard_pages` serves.
    const GIVES_BACK: bool = cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri)));

    /// A pool of one shard of `budget` bytes whose read ring was lapped (see
    /// [`lap_the_read_ring`]), off the sweeper's list (its test gives back itself);
    /// the ring's bytes.
    fn lapped_without_sweeper(budget: usize) -> (ReadPool, Memory, usize) {
        let pool = ReadPool::with_shards(budget, 1).unwrap();
        assert!(pool.shared.sweeping.start());
        let mem = Memory::Pool(pool.clone());
        let reads = lap_the_read_ring(&mem);
        (pool, mem, reads)
    }

    /// Claims, writes and drops regions of `mem`'s first read ring for two laps of it,
    /// touching its pages; returns its bytes. Each region is dropped once the next is
    /// claimed (a region dropped before would be taken back: no lap).
    fn lap_the_read_ring(mem: &Memory) -> usize {
        let pool = mem.pool().unwrap();
        let reads = lock(&pool.shared.shards[0]).reads.block_len();
        let (mut claimed, mut before) = (0, None);
        while claimed < 2 * reads {
            let mut r = mem.first_try(64 << 10, 64 << 10).unwrap();
            claimed += r.capacity();
            r.try_extend_from_slice(&vec![1; r.capacity()]).unwrap();
            before = Some(r);
        }
        drop(before);
        reads
    }

    /// Whether `done` comes true within 30 s (the sweeper ticks once a second), looked
    /// at every 20 ms.
    fn comes_true(mut done: impl FnMut() -> bool) -> bool {
        use std::time::{Duration, Instant};
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// The sweeper gives a read ring's pages back once claims stop, though no claim is
    /// left to do it (a server whose connections all went idle), and then lets the pool
    /// go; the next claim puts it back on the sweeper's list.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri gives no page back: no sweeper
    fn the_sweeper_gives_pages_back_once_claims_stop() {
        let pool = ReadPool::with_shards(8 << 20, 1).unwrap();
        let mem = Memory::Pool(pool.clone());
        let reads = lap_the_read_ring(&mem);
        let sweeping = || !pool.shared.sweeping.stopped();
        assert!(sweeping(), "a claim puts the pool on the sweeper's list");
        assert!(
            comes_true(|| !sweeping()),
            "the sweeper lets the pool go once claims stop"
        );
        let given = pool.counters().bytes_given_back as usize;
        assert!(
            !GIVES_BACK || given >= reads / 2,
            "{given} bytes given back"
        );
        assert_eq!(pool.give_back_pages(), 0, "the sweeper gave them all back");
        drop(mem.first_try(64, 64).unwrap());
        assert!(sweeping(), "a claim puts it back");
    }

    /// The sweeper counts what is live (the pool's counters), and gives back the pages
    /// of frames released after the last claim: it keeps the pool on its list while
    /// anything is live, and lets it go once nothing is.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri gives no page back: no sweeper
    fn the_sweeper_counts_and_gives_back_what_goes_after_claims_stop() {
        let pool = ReadPool::with_shards(8 << 20, 1).unwrap();
        let mem = Memory::Pool(pool.clone());
        // Kept frames, their pages touched: 64 regions of 16 KiB.
        let kept: Vec<_> = (0..64)
            .map(|_| {
                let mut r = mem.first_try(16 << 10, 16 << 10).unwrap();
                r.try_extend_from_slice(&vec![1; r.capacity()]).unwrap();
                r.freeze()
            })
            .collect();
        let bytes: usize = kept.iter().map(FixedBuf::region_span).sum();
        assert!(
            comes_true(|| {
                let c = pool.counters();
                (c.live_buffers, c.bytes_in_use) == (64, bytes)
            }),
            "the sweeper counts the frames kept"
        );
        // Two ticks and more, one at least with no claim: the frames keep it listed.
        std::thread::sleep(GIVE_BACK_EVERY * 5 / 2);
        assert!(
            !pool.shared.sweeping.stopped(),
            "frames are live: kept on the list"
        );
        let before = pool.counters().bytes_given_back;
        // No claim from here on: the frames go, and their pages with them.
        drop(kept);
        assert!(
            comes_true(|| pool.shared.sweeping.stopped()),
            "the sweeper lets the pool go once nothing is live"
        );
        let c = pool.counters();
        assert_eq!((c.live_buffers, c.bytes_in_use), (0, 0));
        let given = (c.bytes_given_back - before) as usize;
        assert!(
            !GIVES_BACK || given >= bytes / 2,
            "{given} of {bytes} bytes given back"
        );
        assert_eq!(pool.stats().bytes_in_use, 0);
    }

    /// A waker that panics when the sweeper's release wakes it ends that tick, not the
    /// sweeper: the thread goes on counting and giving pages back.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri gives no page back: no sweeper
    #[cfg(feature = "tokio")]
    fn a_panicking_waker_leaves_the_sweeper_running() {
        use crate::ring::wait::{poll_until, TaskSlot};
        use std::sync::atomic::AtomicBool;
        use std::task::{Context, Wake, Waker};

        /// Panics once armed, on the thread that wakes it; counts its wakes before.
        struct Panics(AtomicBool, AtomicUsize);
        impl Wake for Panics {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                // Relaxed: set on the test's thread before the wake it arms.
                if self.0.load(Ordering::Relaxed) {
                    panic!("a waker that panics (expected)");
                }
                self.1.fetch_add(1, Ordering::Relaxed);
            }
        }

        // It shares the waiters' table with the other waiting tests.
        let _one = crate::ring::orphan::one_test();
        let pool = ReadPool::new(64 << 10);
        let mem = Memory::Pool(pool.clone());
        let fit = pool.shared.fit;
        let region = mem.first_try(fit, fit).expect("an empty pool");
        let waker = Arc::new(Panics(AtomicBool::new(false), AtomicUsize::new(0)));
        let task = Waker::from(waker.clone());
        let mut cx = Context::from_waker(&task);
        let mut slot = TaskSlot::default();
        // Polled until it registers: its first polls yield (they wake it at once).
        loop {
            let yields = waker.1.load(Ordering::Relaxed);
            let pending = poll_until(&mut slot, &mut cx, mem.span(), 4 << 10, |walk| {
                mem.try_claim(4 << 10, 4 << 10, walk)
            });
            assert!(pending.is_pending(), "the pool is full");
            if waker.1.load(Ordering::Relaxed) == yields {
                break;
            }
        }
        waker.0.store(true, Ordering::Relaxed);
        // The shard's spare: the sweeper's next tick releases it, and wakes the task.
        mem.give_back(region);
        let spare_kept = || {
            let rings = lock(&pool.shared.shards[0]);
            let spare = rings.spare.take();
            let kept = spare.is_some();
            rings.spare.set(spare);
            kept
        };
        assert!(
            comes_true(|| !spare_kept()),
            "the sweeper never took the spare"
        );
        drop(slot);
        // The sweeper still counts: a frame kept now shows in the counters. (The
        // first tries after the waiter's may skip the walk that finds the room, and a
        // tick holds the free runs whose pages it gives back: tried until one serves.)
        let mut kept = None;
        assert!(
            comes_true(|| {
                kept = kept.take().or_else(|| mem.first_try(4 << 10, 4 << 10));
                kept.is_some()
            }),
            "no room after the spare went back"
        );
        assert!(
            comes_true(|| pool.counters().live_buffers == 1),
            "the sweeper stopped"
        );
        drop(kept);
    }

    /// A process forked after its parent's pool went on the sweeper's list has a
    /// sweeper of its own: its claims put the pool on the list again, and what it keeps
    /// is counted.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri gives no page back: no sweeper
    #[cfg(target_os = "linux")]
    fn a_forked_process_has_a_sweeper_of_its_own() {
        extern "C" {
            fn fork() -> i32;
            fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
            fn _exit(code: i32) -> !;
        }
        let pool = ReadPool::with_shards(8 << 20, 1).unwrap();
        let mem = Memory::Pool(pool.clone());
        drop(mem.first_try(64, 64).unwrap());
        assert!(!pool.shared.sweeping.stopped(), "listed, in the parent");
        // SAFETY: the child claims, spawns the sweeper, sleeps and ends with `_exit`,
        // touching no lock another thread of the parent may have held.
        let child = unsafe { fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let kept = mem.first_try(4 << 10, 4 << 10);
            for _ in 0..2 * FORK_CHECK {
                drop(mem.first_try(64, 64));
            }
            let counted = comes_true(|| pool.counters().live_buffers == 1);
            drop(kept);
            // SAFETY: ends the child without the parent's exit handlers (its test
            // harness's), as a forked child must.
            unsafe { _exit(i32::from(!counted)) }
        }
        let mut status = -1;
        // SAFETY: `child` is this process's child; `status` is a valid `int` to write.
        assert_eq!(unsafe { waitpid(child, &mut status, 0) }, child);
        assert_eq!(status, 0, "no sweeper counted what the child kept");
    }

    /// A copy ring's try that finds the oldest region live (a kept frame) goes on
    /// with its scan at once, where a ring's try looks at the oldest region alone for
    /// seven tries (a producer waiting for its consumer to release in order): with one
    /// region in four kept a while and the others released on another thread once the
    /// next is claimed (frames in flight), it fails far less often.
    #[test]
    fn a_copy_rings_try_steps_over_kept_frames() {
        let (to_drop, dropping) = std::sync::mpsc::channel::<(FixedBufMut, _)>();
        let releaser = std::thread::spawn(move || {
            for (region, done) in dropping {
                drop(region);
                let done: std::sync::mpsc::Sender<()> = done;
                done.send(()).unwrap();
            }
        });
        let release = |region| {
            let (done, wait) = std::sync::mpsc::channel();
            to_drop.send((region, done)).unwrap();
            wait.recv().unwrap();
        };
        let failed = |eager: bool| {
            let ring = Ring::new(64 << 10);
            if eager {
                ring.scan_eagerly();
            }
            let (mut kept, mut failed, mut in_flight) = (VecDeque::new(), 0, None);
            for i in 0..(if cfg!(miri) { 200 } else { 4000 }) {
                match ring.fixed(1000) {
                    Some(region) if i % 4 == 0 => kept.push_back(region),
                    Some(region) => {
                        if let Some(before) = in_flight.replace(region) {
                            release(before);
                        }
                    }
                    None => failed += 1,
                }
                if kept.len() > 16 {
                    release(kept.pop_front().unwrap());
                }
            }
            kept.into_iter().chain(in_flight).for_each(release);
            failed
        };
        let (plain, eager) = (failed(false), failed(true));
        drop(to_drop);
        releaser.join().unwrap();
        assert!(
            eager * 10 < plain,
            "tries failed: {eager} scanning eagerly, {plain} not"
        );
    }

    /// One sweeper thread serves every pool of the process: a claim on each of 32
    /// pools starts no thread of its own.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri gives no page back: no sweeper
    #[cfg(target_os = "linux")]
    fn pools_share_one_sweeper_thread() {
        let pools: Vec<_> = (0..32).map(|_| ReadPool::new(64 << 10)).collect();
        for pool in &pools {
            drop(Memory::Pool(pool.clone()).first_try(64, 64).unwrap());
            assert!(
                !pool.shared.sweeping.stopped(),
                "a claim puts it on the list"
            );
        }
        let sweepers = (std::fs::read_dir("/proc/self/task").unwrap())
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "ringmem-sweep")
            .count();
        // One; two while one that has just ended leaves.
        assert!((1..=2).contains(&sweepers), "{sweepers} sweeper threads");
    }

    /// A stream of this many frames of 1,000 bytes (length-delimited), one a read.
    struct OneAtATime(usize);

    impl std::io::Read for OneAtATime {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 || buf.len() < 1004 {
                return Ok(0);
            }
            self.0 -= 1;
            buf[..4].copy_from_slice(&1000u32.to_be_bytes());
            buf[4..1004].fill(self.0 as u8);
            Ok(1004)
        }
    }

    /// A reader whose frames are kept copies them to the copy ring, also those read one
    /// to a region (which the frame fills): so that what is kept never cuts the read
    /// ring into gaps. Probes (see `Core::retire`) stay where they were read.
    #[test]
    fn kept_frames_read_alone_go_to_the_copy_ring() {
        use crate::io::{FramedReader, LengthDelimited};
        let pool = ReadPool::with_shards(4 << 20, 1).unwrap();
        let mut r = FramedReader::with_pool(OneAtATime(200), LengthDelimited::new(), &pool);
        let frames: Vec<_> = core::iter::from_fn(|| r.next_frame().unwrap()).collect();
        assert_eq!(frames.len(), 200);
        let copies = pool.shared.shards[0].spans[1];
        let copied = (frames.iter())
            .filter(|f| copies.holds(f.as_ptr() as usize))
            .count();
        assert!(copied >= 180, "{copied} of 200 frames copied");
    }

    /// A stream of `frames` frames of `len` bytes (length-delimited; frame `i` filled
    /// with `i as u8`), in reads of at most `chunk` bytes.
    #[derive(Clone)]
    struct Chunked {
        wire: Vec<u8>,
        at: usize,
        chunk: usize,
    }

    impl Chunked {
        fn new(frames: usize, len: usize, chunk: usize) -> Chunked {
            let mut wire = Vec::with_capacity(frames * (len + 4));
            for i in 0..frames {
                wire.extend_from_slice(&(len as u32).to_be_bytes());
                // A memset (`vec!` of bytes), not a store a byte: quick under Miri.
                wire.extend_from_slice(&vec![i as u8; len]);
            }
            Chunked { wire, at: 0, chunk }
        }

        /// Takes frames from `next` to the end (every frame checked against the wire),
        /// keeping one in ten; asserts that at least `most` in `of` of those kept were
        /// read alone into a slot of their length, their length word included.
        fn keep(&self, mut next: impl FnMut() -> Option<FixedBuf>, (most, of): (usize, usize)) {
            let (mut kept, mut at, mut n) = (Vec::new(), 0, 0);
            while let Some(frame) = next() {
                let len = u32::from_be_bytes(self.wire[at..at + 4].try_into().unwrap());
                at += 4;
                assert_eq!(frame[..], self.wire[at..][..len as usize], "frame {n}");
                n += 1;
                if n % 10 == 0 {
                    kept.push((frame, at));
                }
                at += len as usize;
            }
            assert_eq!(at, self.wire.len());
            let mut alone = 0;
            for (f, at) in &kept {
                assert_eq!(f[..], self.wire[*at..][..f.len()], "kept");
                alone += usize::from(f.is_slot() && f.region_span() == HDR + f.len() + WORD);
            }
            assert!(
                alone * of >= kept.len() * most,
                "{alone} of {} frames alone",
                kept.len()
            );
        }
    }

    impl std::io::Read for Chunked {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.chunk).min(self.wire.len() - self.at);
            buf[..n].copy_from_slice(&self.wire[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Frames of 8 KiB, or 16 KiB natively (a copy of the frame alone would take a slot
    /// of 16,384 bytes; read alone, it takes 16,392: its length word, rounded up).
    const ALONE_LEN: usize = if cfg!(miri) { 8 << 10 } else { 16 << 10 };

    /// A run of like frames of 8 KiB or more whose consumer keeps some is read one frame
    /// to a slot of its length (see `Core::alone`): each frame holds its own bytes
    /// without a copy, also when its bytes come in several reads.
    #[test]
    fn kept_like_frames_are_read_alone_into_slots_of_their_length() {
        use crate::io::{FramedReader, LengthDelimited};
        let frames = if cfg!(miri) { 100 } else { 400 };
        let pool = ReadPool::with_shards(16 << 20, 1).unwrap();
        for chunk in [usize::MAX, 5000] {
            let wire = Chunked::new(frames, ALONE_LEN, chunk);
            let mut r = FramedReader::with_pool(wire.clone(), LengthDelimited::new(), &pool);
            wire.keep(|| r.next_frame().unwrap(), (4, 5));
        }
    }

    /// The probes of such a run (see `Core::retire`) are read alone too, each frame its
    /// probe's only one: past the run-up every frame holds a slot, and none a read
    /// region (a probe's 4 KiB, and the region its frame was carried into).
    #[test]
    fn probes_of_kept_like_frames_are_read_alone() {
        use crate::io::{FramedReader, LengthDelimited};
        let frames = if cfg!(miri) { 100 } else { 400 };
        let pool = ReadPool::with_shards(16 << 20, 1).unwrap();
        let wire = Chunked::new(frames, ALONE_LEN, usize::MAX);
        let mut r = FramedReader::with_pool(wire, LengthDelimited::new(), &pool);
        let (mut kept, mut n) = (Vec::new(), 0);
        while let Some(frame) = r.next_frame().unwrap() {
            n += 1;
            assert!(n <= 40 || frame.is_slot(), "frame {n} read with others");
            if n % 10 == 0 {
                kept.push(frame);
            }
        }
        assert_eq!(n, frames);
    }

    /// As above, for an async reader whose socket runs dry mid-frame at every other
    /// poll: a part of a frame under `TOP_UP_MIN` moves to the heap and its slot goes
    /// back whole (`Memory::give_back`), a longer one stays in its slot, which is never
    /// cut (`Memory::shrink_to`).
    #[cfg(feature = "tokio")]
    #[test]
    fn an_idle_reader_leaves_its_slot_whole() {
        use crate::io::{AsyncFramedReader, LengthDelimited};
        use core::pin::Pin;
        use core::task::{Context, Poll};
        use futures_core::Stream;
        use tokio::io::{AsyncRead, ReadBuf};

        /// `Chunked`, `Pending` at every other poll (the test polls again: no wake-up).
        struct Dry(Chunked, bool);
        impl AsyncRead for Dry {
            fn poll_read(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                self.1 = !self.1;
                if self.1 {
                    return Poll::Pending;
                }
                let n = std::io::Read::read(&mut self.0, buf.initialize_unfilled())?;
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
        }

        let frames = if cfg!(miri) { 100 } else { 200 };
        let pool = ReadPool::with_shards(16 << 20, 1).unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for chunk in [3000, 6000] {
            let wire = Chunked::new(frames, ALONE_LEN, chunk);
            let dry = Dry(wire.clone(), false);
            let mut r = AsyncFramedReader::with_pool(dry, LengthDelimited::new(), &pool);
            let next = || loop {
                if let Poll::Ready(frame) = Pin::new(&mut r).poll_next(&mut cx) {
                    return frame.map(Result::unwrap);
                }
            };
            wire.keep(next, (3, 5));
        }
    }

    /// A reader whose consumer keeps one frame in ten reads few probes (see
    /// `Core::retire`): nine probes in ten are found free, and the gap between probes
    /// must not fall back to its least for them, or kept frames stay slices of the read
    /// regions they were read into (each such region, held as long as the frame is, a
    /// gap in the read ring): with the gap halved by each, 289 of the 400 here did.
    #[test]
    fn a_consumer_keeping_one_frame_in_ten_gets_copies() {
        use crate::io::{FramedReader, LengthDelimited};
        let frames = if cfg!(miri) { 500 } else { 4000 };
        let pool = ReadPool::with_shards(4 << 20, 1).unwrap();
        let mut r = FramedReader::with_pool(OneAtATime(frames), LengthDelimited::new(), &pool);
        let mut kept = Vec::new();
        let mut seen = 0;
        while let Some(frame) = r.next_frame().unwrap() {
            seen += 1;
            if seen % 10 == 0 {
                kept.push(frame);
            }
        }
        assert_eq!(kept.len(), frames / 10);
        let copies = pool.shared.shards[0].spans[1];
        let views = (kept.iter())
            .filter(|f| !copies.holds(f.as_ptr() as usize))
            .count();
        assert!(
            views * 20 < kept.len(),
            "{views} of {} kept frames are slices",
            kept.len()
        );
    }

    /// The first try of a claim on a pool walks it: room left by a release behind the
    /// oldest live region serves, where a plain claim looks at the oldest region only.
    #[test]
    fn a_first_try_on_a_pool_walks_it() {
        let pool = ReadPool::new(64 << 10);
        let mem = Memory::Pool(pool.clone());
        let mut held: Vec<_> = (0..10)
            .map(|_| pool.with(|r| r.fixed(6000)).unwrap())
            .collect();
        held.remove(7); // room well behind the oldest region
                        // The premise: a plain claim looks at the oldest region and a few more.
        let plain = pool.with(|r| r.fixed(6000));
        assert!(
            plain.is_none(),
            "a plain claim finds it now: rework this test"
        );
        let got = mem.first_try(6000, 6000).expect("the walk missed it");
        assert_eq!(got.capacity(), 6000);
    }

    /// A read region claimed on a ring whose frames are kept here and there (no run
    /// holds the region asked for) is a read's worth found in a gap, grown over the rest
    /// of the gap: it ends where a kept region starts.
    #[test]
    fn a_claim_between_kept_frames_takes_the_rest_of_its_gap() {
        use crate::ring::HDR;
        let pool = ReadPool::new(256 << 10); // one shard: a read ring alone
        let mem = Memory::Pool(pool.clone());
        // The ring full: regions of 6,000 bytes, then short ones to its end.
        let mut held: Vec<_> = core::iter::from_fn(|| pool.with(|r| r.fixed(6000))).collect();
        let short: Vec<_> = core::iter::from_fn(|| pool.with(|r| r.fixed(8))).collect();
        // One long region in four kept: gaps of three, 18,024 bytes with their headers.
        let mut i = 0;
        held.retain(|_| {
            i += 1;
            i % 4 == 1
        });
        for _ in 0..3 {
            let got = (mem.first_try(64 << 10, 64)).expect("room between the kept regions");
            assert!(got.capacity() > FAIR_READ, "{}", got.capacity());
            let end = got.as_ptr() as usize + got.capacity();
            assert!(
                held.iter().any(|k| k.as_ptr() as usize - HDR == end),
                "a region of {} bytes that ends short of a kept one",
                got.capacity()
            );
        }
        drop((held, short));
    }

    /// A first try takes another shard's room at hand before it walks its own shard.
    #[test]
    fn a_first_try_takes_another_shards_room_before_walking() {
        let pool = ReadPool::with_shards(1 << 20, 2).unwrap();
        let mem = Memory::Pool(pool.clone());
        HOME.with(|h| h.set(0));
        // Shard 0 full, with room behind its oldest region that only a walk finds.
        let mut held: Vec<_> = core::iter::from_fn(|| pool.with(|r| r.fixed(6000))).collect();
        held.remove(held.len() / 2);
        assert!(pool.with(|r| r.fixed(6000)).is_none(), "the premise");
        let got = mem.first_try(6000, 6000).expect("room in shard 1");
        let addr = got.as_ptr() as usize;
        assert!(pool.shared.shards[1].spans[0].holds(addr), "from shard 1");
    }

    /// Copies go round the shards, [`COPY_STAY`] claims to a shard, and the thread's
    /// own shard for read regions stays where it was.
    #[test]
    fn copies_go_round_the_shards() {
        let pool = ReadPool::with_shards(4 << 20, 2).unwrap();
        let mem = Memory::Pool(pool.clone());
        HOME.with(|h| h.set(0));
        COPY_TURN.with(|t| t.set(0));
        let shard_of = |buf: &FixedBufMut| {
            (0..2).find(|&k| pool.shared.shards[k].spans[1].holds(buf.as_ptr() as usize))
        };
        let shards: Vec<_> = (0..2 * COPY_STAY)
            .map(|_| shard_of(&mem.claim_now(64).unwrap()))
            .collect();
        assert!(shards[..COPY_STAY].iter().all(|&k| k == Some(0)));
        assert!(shards[COPY_STAY..].iter().all(|&k| k == Some(1)));
        assert_eq!(home(), 0);
    }

    /// A claim that no shard serves asks each shard once: on a full pool every ask
    /// walks the shard's rings.
    #[test]
    fn a_failing_claim_asks_each_shard_once() {
        let pool = ReadPool::with_shards(4 << 20, 4).unwrap();
        let mut asked = [0; 4];
        let got = pool.claim(|r| {
            let i = (pool.shared.shards.iter())
                .position(|s| s.spans[0] == r.reads.span())
                .unwrap();
            asked[i] += 1;
            None::<()>
        });
        assert!(got.is_none());
        assert_eq!(asked, [1; 4]);
    }

    /// A waker may touch the pool it waits on: room given back under a shard's lock (a
    /// read region trimmed to what its read brought) wakes the waiting task once the
    /// lock is let go, and its waker reads the pool's stats and claims from it (under
    /// the lock, both waited for the lock their own thread held).
    #[test]
    fn a_waker_may_touch_the_pool_that_woke_it() {
        use crate::ring::wait::{poll_until, TaskSlot};
        use std::sync::Mutex;
        use std::task::{Context, Wake, Waker};
        use std::time::Duration;

        /// A task's waker that reads its pool's stats and claims from it, as it wakes.
        struct TouchesThePool {
            pool: ReadPool,
            wakes: AtomicUsize,
            /// At the latest wake-up: the pool's live buffers, and whether a claim
            /// from it served.
            seen: Mutex<Option<(usize, bool)>>,
        }

        impl Wake for TouchesThePool {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                let live = self.pool.stats().live_buffers;
                let claimed = Memory::Pool(self.pool.clone()).claim_now(8).is_some();
                *self.seen.lock().unwrap() = Some((live, claimed));
                // Relaxed: read on this thread.
                self.wakes.fetch_add(1, Ordering::Relaxed);
            }
        }

        // It shares the waiters' table with the other waiting tests.
        let _one = crate::ring::orphan::one_test();
        let (tx, rx) = std::sync::mpsc::channel();
        // On a thread of its own: without the fix it never returns.
        std::thread::spawn(move || {
            let pool = ReadPool::new(64 << 10);
            let mem = Memory::Pool(pool.clone());
            // The whole pool, in one read region that a read has filled a little of.
            let fit = pool.shared.fit;
            let mut region = mem.first_try(fit, fit).expect("an empty pool");
            region.try_extend_from_slice(b"a frame").unwrap();
            let touch = Arc::new(TouchesThePool {
                pool: pool.clone(),
                wakes: AtomicUsize::new(0),
                seen: Mutex::new(None),
            });
            let waker = Waker::from(touch.clone());
            let mut cx = Context::from_waker(&waker);
            let mut slot = TaskSlot::default();
            let mut poll = |cx: &mut Context<'_>| {
                poll_until(&mut slot, cx, mem.span(), 4 << 10, |walk| {
                    mem.try_claim(4 << 10, 4 << 10, walk)
                })
            };
            // Polled until it registers: its first polls yield (they wake it at once).
            loop {
                let yields = touch.wakes.load(Ordering::Relaxed);
                assert!(poll(&mut cx).is_pending(), "the pool is full");
                if touch.wakes.load(Ordering::Relaxed) == yields {
                    break;
                }
            }
            let registered = touch.wakes.load(Ordering::Relaxed);
            // Under the shard's lock: the room given back wakes the task.
            mem.shrink(&mut region);
            assert_eq!(touch.wakes.load(Ordering::Relaxed), registered + 1);
            let seen = touch.seen.lock().unwrap().take();
            let got = poll(&mut cx).is_ready();
            tx.send((seen, got)).unwrap();
        });
        let timeout = Duration::from_secs(20);
        let (seen, got) = rx.recv_timeout(timeout).unwrap_or_else(|e| {
            panic!("the wake-up under the shard's lock never returned ({e}): its waker waits for the lock its own thread holds")
        });
        // The region, trimmed; and the claim's region, released at once.
        assert_eq!(seen, Some((1, true)), "what the waker saw");
        assert!(got, "woken, yet no room");
    }

    /// A frame that no gap between the regions held fits comes from the heap while the
    /// gaps together hold its bytes, paid for with them: the pool's bytes stay within
    /// its budget, its stats count the frame and not what pays for it, and the frame's
    /// release gives the gaps back and wakes a reader waiting for room.
    #[test]
    fn a_frame_from_the_heap_pays_with_the_gaps() {
        let pool = ReadPool::new(256 << 10); // one shard: a read ring alone
        let mem = Memory::Pool(pool.clone());
        let in_ring =
            |buf: &FixedBufMut| pool.shared.shards[0].spans[0].holds(buf.as_ptr() as usize);
        // The ring full, one region in two kept: gaps of 6,008 bytes.
        let mut held: Vec<_> = core::iter::from_fn(|| pool.with(|r| r.fixed(6000))).collect();
        let short: Vec<_> = core::iter::from_fn(|| pool.with(|r| r.fixed(8))).collect();
        let mut i = 0;
        held.retain(|_| {
            i += 1;
            i % 2 == 1
        });
        let before = pool.stats();
        let frame = mem
            .first_try(20_000, 20_000)
            .expect("the gaps hold 20,000 bytes");
        assert!(!in_ring(&frame) && frame.capacity() >= 20_000);
        let stats = pool.stats();
        assert_eq!(stats.live_buffers, before.live_buffers + 1, "{stats:?}");
        let span = FixedBufMut::heap_carrying_span(20_000).unwrap();
        assert_eq!(stats.bytes_in_use, before.bytes_in_use + span, "{stats:?}");
        assert_eq!(pool.counters().heap_fallbacks, 1);
        assert_eq!(pool.counters().heap_bytes, 20_000);
        // What the ring holds, ballast included, is within the budget.
        let ring = pool.with(Ring::stats);
        assert!(ring.bytes_in_use >= stats.bytes_in_use && ring.bytes_in_use <= pool.budget());
        // The rest of the gaps held: a reader waits.
        let rest: Vec<_> = core::iter::from_fn(|| mem.try_claim(6000, 8, true)).collect();
        assert!(pool.stats().bytes_in_use <= pool.budget());
        let waiter = {
            let mem = Memory::Pool(pool.clone());
            std::thread::spawn(move || mem.fixed_wait(6000, 6000).map(|r| r.capacity()))
        };
        while pool.counters().waits == 0 {
            assert!(!waiter.is_finished(), "a region past the budget");
            std::thread::yield_now();
        }
        drop(frame);
        assert!(
            waiter.join().unwrap().unwrap() >= 6000,
            "no room after the release"
        );
        drop((held, short, rest));
        let stats = pool.stats();
        assert_eq!(
            (stats.live_buffers, stats.bytes_in_use),
            (0, 0),
            "{stats:?}"
        );
    }

    /// At the budget, a reader's first try skips the walks that just found no room (a
    /// copy ring's, the heap's count of free bytes) for the next `FULL_SKIPS` first
    /// tries, and may so miss room a release made; a waiting try walks, and finds it.
    #[test]
    fn a_first_try_at_the_budget_skips_its_walks_and_a_wait_does_not() {
        let pool = ReadPool::new(2 << 20); // one shard, split
        let mem = Memory::Pool(pool.clone());
        let mut held: Vec<_> = core::iter::from_fn(|| mem.try_claim(6000, 6000, true)).collect();
        assert!(mem.first_try(6000, 6000).is_none(), "the pool is full");
        let copies = pool.shared.shards[0].spans[1];
        let at = (held.iter())
            .position(|r| copies.holds(r.as_ptr() as usize))
            .expect("regions in the copy ring");
        drop(held.swap_remove(at));
        assert!(
            mem.first_try(6000, 6000).is_none(),
            "a first try walked the copy ring again"
        );
        let found = mem
            .try_claim(6000, 6000, true)
            .expect("the waiting try's walk");
        assert!(copies.holds(found.as_ptr() as usize));
        // Once the skips are spent, a first try walks again.
        drop(found);
        let found = (0..=FULL_SKIPS).find_map(|_| mem.first_try(6000, 6000));
        assert!(found.is_some(), "the first tries never walked again");
        drop(held);
    }

    /// A split budget keeps shards of 16 MiB or more whatever the parallelism, so the
    /// default decoder's largest frame (8 MiB) fits the process's pool on any machine.
    #[test]
    fn shards_hold_the_default_largest_frame() {
        for threads in [1, 2, 8, 64, 1024] {
            for budget in [1 << 20, 31 << 20, ReadPool::GLOBAL_BUDGET, 1 << 30] {
                let n = shards_for(budget, threads);
                assert!(n >= 1 && n <= 2 * threads && n <= MAX_SHARDS, "{n}");
                assert!(n == 1 || budget / n >= 16 << 20, "{budget} in {n}");
            }
        }
        assert_eq!(shards_for(ReadPool::GLOBAL_BUDGET, 64), 4);
    }

    /// A shard of 1 MiB or more keeps copies apart from read regions: copies kept while
    /// many read regions come and go are all in the copy ring, and leave the read ring
    /// empty; each kind goes to the other ring when its own has no room.
    #[test]
    fn read_regions_in_the_copy_ring_take_its_lowest_room() {
        let pool = ReadPool::new(1 << 20);
        let mem = Memory::Pool(pool.clone());
        let copies = pool.shared.shards[0].spans[1];
        let in_copies = |buf: &FixedBufMut| copies.holds(buf.as_ptr() as usize);
        // The read ring full, and a kept copy at the copy ring's start.
        let kept = mem.claim_now(SLOT_MAX + 1).unwrap();
        assert!(in_copies(&kept));
        let mut reads = Vec::new();
        let first = loop {
            let read = mem.first_try(8 << 10, 64).expect("no room");
            if in_copies(&read) {
                break read;
            }
            reads.push(read);
        };
        assert!(first.as_ptr() > kept.as_ptr());
        let at = first.as_ptr();
        // Read regions come and go there: each takes the lowest room, the one the last
        // left, rather than the next at a window going round the copy ring.
        drop(first);
        for round in 0..20 {
            let read = mem.first_try(8 << 10, 64).expect("no room");
            assert_eq!(read.as_ptr(), at, "round {round}");
        }
        drop((kept, reads));
        assert_eq!(pool.stats().live_buffers, 0);
    }

    #[test]
    fn copies_and_read_regions_keep_to_their_rings() {
        let pool = ReadPool::new(1 << 20);
        let mem = Memory::Pool(pool.clone());
        let in_ring = |buf: &FixedBufMut, which: usize| {
            pool.shared.shards[0].spans[which].holds(buf.as_ptr() as usize)
        };
        let mut kept = Vec::new();
        for lap in 0..10 {
            let read = mem.first_try(64 << 10, 64).unwrap();
            assert!(in_ring(&read, 0), "lap {lap}: a read region elsewhere");
            let copies: Vec<_> = (0..250).map(|_| mem.claim_now(100).unwrap()).collect();
            assert!(copies.iter().all(|c| in_ring(c, 1)), "lap {lap}");
            kept.extend(copies.into_iter().step_by(50));
        }
        let reads = pool.with(|r| r.stats()).live_buffers;
        assert_eq!((reads, pool.stats().live_buffers), (0, kept.len()));
        drop(kept);
        // Claims until one lands in `ring`: those before it, and it.
        let until_in = |ring: usize, mut claim: Box<dyn FnMut() -> Option<FixedBufMut> + '_>| {
            let mut held = Vec::new();
            loop {
                let buf = claim().expect("no room in either ring");
                if in_ring(&buf, ring) {
                    return (held, buf);
                }
                held.push(buf);
            }
        };
        // The copy ring full: copies go to the read ring.
        let (copies, spill) = until_in(0, Box::new(|| mem.claim_now(4 << 10)));
        // The copy ring is three quarters of the budget (see `reads_of`).
        assert!(
            copies.len() * (4 << 10) > pool.budget() / 2,
            "{}",
            copies.len()
        );
        drop(copies);
        // And the read ring full: read regions go to the copy ring.
        let (reads, read) = until_in(1, Box::new(|| mem.first_try(64 << 10, 64)));
        let read_bytes: usize = reads.iter().map(FixedBufMut::capacity).sum();
        assert!(read_bytes > pool.budget() / 5, "{read_bytes}");
        drop((spill, reads, read));
        assert_eq!(pool.stats().live_buffers, 0);
    }

    /// Without room for a read region, a claim takes the first run that holds a read's
    /// worth ([`FAIR_READ`]), and without one the least region that serves, each as far
    /// as its run goes, on a pool as on a reader's own ring; it waits only when not even
    /// the least fits.
    #[test]
    fn a_claim_on_a_full_ring_takes_the_least_region() {
        let pool = ReadPool::new(64 << 10);
        let own = Memory::Own(Box::new(Ring::new(64 << 10)));
        for mem in [Memory::Pool(pool.clone()), own] {
            let held = mem.claim_now(50 << 10).unwrap();
            // What is left: under 14 KiB, one run (taken as far as the memory handed out
            // so far reaches: see `BlockCtl::edge`).
            let fair = mem.first_try(20 << 10, 100).expect("no fair region");
            let run = fair.capacity();
            assert!(run > FAIR_READ && run < 14 << 10, "{run}");
            drop(fair);
            // Less than a read's worth left.
            let rest = mem.claim_now(run - (2 << 10)).unwrap();
            let least = mem.first_try(20 << 10, 100).expect("no least region");
            assert!(
                least.capacity() >= 104 && least.capacity() < FAIR_READ,
                "{} after {run}",
                least.capacity()
            );
            drop(least);
            assert!(mem.try_claim(20 << 10, 20 << 10, true).is_none());
            assert!(mem.try_claim(20 << 10, 100, true).is_some());
            drop((held, rest));
        }
    }
}
