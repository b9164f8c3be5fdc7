//! Every interleaving (to the preemption bound) of the ring's cross-thread protocols:
//! release vs reuse of a region (also of a ring behind a lock, a `ReadPool` shard), the
//! frozen count, dropping the ring while buffers live, `ExtBuf` growth over a
//! neighbour another thread releases, and waiting for room: one,
//! two and three waited rings (more waiters than the waiters' table has entries, two
//! under loom), blocked threads and tasks, and room made on the ring's own thread
//! without a release store. The models of crate
//! internals (`OneRingAlloc`'s chunk count) sit next to their code, run by `--lib`.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib --test loom -- --nocapture
//! ```
//!
//! Blocks come from loom's tracked allocator under `cfg(loom)` (`src/raw.rs`), so a
//! leaked or twice-freed block fails a model. Loom does not see the data bytes of a
//! region, so each model mirrors "the region's bytes" in a loom `UnsafeCell` (a
//! *shadow*): the thread that holds a buffer writes or reads the shadow while it holds
//! it, and the ring's thread writes it again when it reuses the region. Unless the
//! release happens-before the reuse (a `Release` store or decrement, paired with the
//! walk's `Acquire` load), loom reports the two accesses as a race. The real bytes are
//! checked too: reuse must observe what the other thread wrote.
//!
//! Known bugs ("mutants") and the membarrier fallback are switched on at run time in
//! the one loom build, by the environment variable `RINGMEM_LOOM` (`src/sync.rs`,
//! `switch`), e.g. `RINGMEM_LOOM=mutant_late_arm cargo test --release --test loom
//! waiter_woken_by_its_own_ring_only`. The mutant `mutant_relaxed_release` weakens the
//! unique release to `Relaxed`; `release_then_reuse_unique` and
//! `ring_behind_a_lock_claimed_on_two_threads` then fail; `mutant_relaxed_take_back`
//! weakens the load with which a claim looks whether the region claimed last was
//! released, and `release_then_take_back` fails. The mutant
//! `mutant_no_barrier` drops the release's side of the store-load barrier
//! (`src/sync.rs`); a waiter then misses its wake-up (`waiter_woken_by_a_release_elsewhere`
//! deadlocks) and a dropped ring's block leaks (`drop_ring_while_buffers_live_elsewhere`).
//! With `refuse_membarrier` (a kernel that refuses `membarrier`) every model runs on the
//! fallback, the fence a release pays when the orphans' word says so; with the mutant as
//! well, the same two models fail. The mutant `mutant_late_arm` publishes a waiter's ring
//! in the waiters' table after its try instead of before its barrier; a release in
//! between wakes nobody (`waiter_woken_by_its_own_ring_only` deadlocks). The release's
//! hull prefilter (`src/ring/wait.rs`) runs in every model; the models with two and
//! three waited rings order their rings by address (`full_rings_in_address_order`), so
//! that a read of the hull holds an address or not in the same schedules whatever
//! addresses the allocator picks. The mutant `mutant_stale_hull` never publishes the
//! hull, and `waiter_woken_by_a_release_elsewhere` deadlocks; the mutant
//! `mutant_start_len` publishes each span as a start and a length (as before issue 47),
//! and `two_waiters_one_releasing_thread` deadlocks. No model runs
//! ring activity after its releases: every block must be freed by the releases alone.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use ringmem::{FixedBufMut, Ring};

/// Runs one model with the preemption bound from `LOOM_MAX_PREEMPTIONS` (2 unless set)
/// and prints how many interleavings it explored.
fn run_model(name: &str, f: impl Fn() + Send + Sync + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, StdOrdering::Relaxed);
        f();
    });
    println!(
        "loom model {name}: {} interleavings (preemption bound {:?})",
        runs.load(StdOrdering::Relaxed),
        builder.preemption_bound
    );
}

/// A loom-visible stand-in for a region's bytes.
struct Shadow(UnsafeCell<u64>);

impl Shadow {
    fn new() -> Arc<Self> {
        Arc::new(Shadow(UnsafeCell::new(0)))
    }

    /// A write to the region's bytes; loom checks it against every other access.
    fn write(&self, v: u64) {
        // SAFETY: loom checks the access for a race; the value is a plain u64.
        self.0.with_mut(|p| unsafe { *p = v })
    }

    /// A read of the region's bytes.
    fn read(&self) -> u64 {
        // SAFETY: as in `write`.
        self.0.with(|p| unsafe { *p })
    }
}

/// Bytes of the buffers the models use: two never fit in a ring of [`RING`] bytes
/// (whatever a loom header takes), so a successful claim after the first is a reuse.
const LEN: usize = 32;
const RING: usize = 64;

fn pattern(id: u8) -> [u8; LEN] {
    core::array::from_fn(|i| id.wrapping_mul(31).wrapping_add(i as u8))
}

/// Claims the model ring's one region again (if released) and checks that the reuse
/// observes what the last holder wrote, then writes it as the new owner.
fn reuse(ring: &Ring, first: usize, shadow: &Shadow, id: u8) -> bool {
    let Some(again) = ring.fixed(LEN) else {
        return false;
    };
    assert_eq!(
        again.as_ptr() as usize,
        first,
        "a reused region is the released one"
    );
    observe(again, shadow, id);
    true
}

/// Checks that `again`, a reused region, observes what its last holder `id` wrote (the
/// shadow, then the bytes), then writes it as the new owner.
fn observe(mut again: FixedBufMut, shadow: &Shadow, id: u8) {
    // Shadow first: if the release does not happen-before this claim, loom reports it.
    assert_eq!(
        shadow.read(),
        u64::from(id),
        "reuse must observe the holder's last write"
    );
    shadow.write(0);
    // SAFETY: the holder initialised all LEN bytes before its release, which (as the
    // shadow just checked) happens-before this claim.
    unsafe { again.advance(LEN) };
    assert_eq!(
        &again[..],
        &pattern(id)[..],
        "reuse must observe the holder's bytes"
    );
    again.fill(0);
}

/// A thread that writes `buf` (pattern and shadow, as holder `id`) and drops it.
fn dropped_elsewhere(buf: FixedBufMut, shadow: &Arc<Shadow>, id: u8) -> thread::JoinHandle<()> {
    let s = shadow.clone();
    thread::spawn(move || {
        let mut buf = buf;
        buf.try_extend_from_slice(&pattern(id)).unwrap();
        s.write(u64::from(id));
        drop(buf);
    })
}

fn written(ring: &Ring, id: u8) -> FixedBufMut {
    let mut b = ring.fixed(LEN).expect("the ring has room");
    b.try_extend_from_slice(&pattern(id)).unwrap();
    b
}

#[test]
fn release_then_reuse_unique() {
    run_model("release_then_reuse_unique", || {
        let ring = Ring::new(RING);
        let shadow = Shadow::new();
        let buf = ring.fixed(LEN).unwrap();
        let first = buf.as_ptr() as usize;
        assert!(ring.fixed(LEN).is_none(), "two buffers never fit");
        // Written on B, dropped on B: one Release store.
        let t = dropped_elsewhere(buf, &shadow, 7);
        // Loom's DPOR keeps one last access per atomic: B's own Relaxed load of the
        // header hides this thread's load from B's store, so without a yield here loom
        // would never run B's release before our claim. The yield lets it.
        thread::yield_now();
        let early = reuse(&ring, first, &shadow, 7);
        t.join().unwrap();
        if !early {
            assert!(reuse(&ring, first, &shadow, 7), "released after the join");
        }
        assert_eq!(ring.stats().live_buffers, 0);
    });
}

/// A region released on another thread while the ring's thread claims the next: the
/// claim's window takes it back when it finds it released (`BlockCtl::bump`), which
/// must see what its holder wrote; else the claim goes on past it. The model's static
/// counts the schedules that took it back, so that the model fails if none did.
#[test]
fn release_then_take_back() {
    static TAKEN_BACK: StdAtomicUsize = StdAtomicUsize::new(0);
    run_model("release_then_take_back", || {
        let ring = Ring::new(4 * RING);
        let shadow = Shadow::new();
        let buf = ring.fixed(LEN).unwrap();
        let first = buf.as_ptr() as usize;
        let t = dropped_elsewhere(buf, &shadow, 7);
        // As in `release_then_reuse_unique`: lets loom run the release first.
        thread::yield_now();
        let next = ring.fixed(LEN).expect("the ring has room");
        if next.as_ptr() as usize == first {
            TAKEN_BACK.fetch_add(1, StdOrdering::Relaxed);
            observe(next, &shadow, 7);
        } else {
            drop(next);
        }
        t.join().unwrap();
        assert_eq!(ring.stats().live_buffers, 0);
    });
    assert!(
        TAKEN_BACK.load(StdOrdering::Relaxed) > 0,
        "never taken back"
    );
}

/// A `ReadPool` shard (`src/io/pool.rs`): a ring behind a lock, claimed from by
/// whichever thread holds the lock. A region claimed under the lock on one thread,
/// written and released on a second (no lock: one `Release` store), is reused under
/// the lock by a third, which sees the writes. The lock hands the ring's state from
/// claim to claim; the release store and the reusing claim's `Acquire` load order the
/// bytes. (The pool itself is behind `std`, which loom builds leave out: this is its
/// protocol, with loom's lock.)
#[test]
fn ring_behind_a_lock_claimed_on_two_threads() {
    run_model("ring_behind_a_lock_claimed_on_two_threads", || {
        let shard = Arc::new(loom::sync::Mutex::new(Ring::new(RING)));
        let shadow = Shadow::new();
        let claimer = {
            let shard = shard.clone();
            thread::spawn(move || shard.lock().unwrap().fixed(LEN).expect("room"))
        };
        let buf = claimer.join().unwrap();
        let first = buf.as_ptr() as usize;
        let releaser = {
            let shadow = shadow.clone();
            thread::spawn(move || {
                let mut buf = buf;
                buf.try_extend_from_slice(&pattern(9)).unwrap();
                shadow.write(9);
                drop(buf);
            })
        };
        let reuser = {
            let (shard, shadow) = (shard.clone(), shadow.clone());
            thread::spawn(move || {
                // As in `release_then_reuse_unique`: lets loom run the release first.
                thread::yield_now();
                let ring = shard.lock().unwrap();
                reuse(&ring, first, &shadow, 9)
            })
        };
        releaser.join().unwrap();
        let early = reuser.join().unwrap();
        let ring = shard.lock().unwrap();
        if !early {
            assert!(reuse(&ring, first, &shadow, 9), "released after the join");
        }
        assert_eq!(ring.stats().live_buffers, 0);
    });
}

#[test]
fn frozen_count_on_several_threads() {
    run_model("frozen_count_on_several_threads", || {
        let ring = Ring::new(RING);
        let shadow = Shadow::new();
        shadow.write(9);
        let frozen = written(&ring, 9).freeze();
        let first = frozen.as_ptr() as usize;
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let mine = frozen.clone();
                let s = shadow.clone();
                thread::spawn(move || {
                    // One thread clones again (a count from a count), both read.
                    let extra = (i == 0).then(|| mine.slice(1..));
                    assert_eq!(&mine[..], &pattern(9)[..]);
                    assert_eq!(s.read(), 9);
                    drop(extra);
                    drop(mine);
                })
            })
            .collect();
        drop(frozen);
        thread::yield_now();
        // The last decrement, on whichever thread, makes the region reusable.
        let early = reuse(&ring, first, &shadow, 9);
        for t in threads {
            t.join().unwrap();
        }
        if !early {
            assert!(
                reuse(&ring, first, &shadow, 9),
                "every count is gone after the joins"
            );
        }
        assert_eq!(ring.stats().live_buffers, 0);
    });
}

#[test]
fn drop_ring_while_buffers_live_elsewhere() {
    run_model("drop_ring_while_buffers_live_elsewhere", || {
        let ring = Ring::new(RING);
        let unique = ring.fixed(8).unwrap();
        let frozen = written(&ring, 3).freeze();
        let other = frozen.clone();
        let b = thread::spawn(move || {
            let mut unique = unique;
            unique.try_extend_from_slice(&[1; 8]).unwrap();
            assert_eq!(&frozen[..], &pattern(3)[..]);
            drop(unique);
            drop(frozen);
        });
        let c = thread::spawn(move || {
            assert_eq!(&other[..], &pattern(3)[..]);
            drop(other);
        });
        // The block is freed by the ring (if all are released) or by the last
        // release's sweep, with no later activity needed: the store-load window that
        // `orphan.rs` documents is closed by the barrier pair. Never while a handle can
        // touch it (ASan, Miri and valgrind check the bytes; loom checks the protocol),
        // and exactly once: loom's allocator fails the model on a leak or a double free.
        drop(ring);
        b.join().unwrap();
        c.join().unwrap();
    });
}

/// Two dropped rings' blocks, each parked behind one live buffer, released on two
/// threads at once: each release may look the blocker table up, sweep, or find a sweep
/// running and ask it to look again. Both blocks are freed exactly once, by the
/// releases' sweeps alone (no ring activity follows): loom's allocator fails the model
/// on a leak or a double free.
#[test]
fn parked_orphan_released_while_others_release() {
    run_model("parked_orphan_released_while_others_release", || {
        let ring = Ring::new(RING);
        let pinned = ring.fixed(8).unwrap();
        drop(ring); // its block waits for `pinned`, parked by the drop's sweep
        let other = Ring::new(RING);
        let unrelated = other.fixed(8).unwrap();
        drop(other);
        let t = thread::spawn(move || drop(pinned));
        let u = thread::spawn(move || drop(unrelated));
        t.join().unwrap();
        u.join().unwrap();
    });
}

/// A producer finds its ring full and waits while another thread releases the region
/// that fills it: the release must wake it (a lost wake-up leaves it blocked for good,
/// which loom reports as a deadlock). The mutant without the release side's barrier
/// (the loom switch `mutant_no_barrier`) fails here.
#[test]
fn waiter_woken_by_a_release_elsewhere() {
    run_model("waiter_woken_by_a_release_elsewhere", || {
        let ring = Ring::new(RING);
        let full = ring.fixed(RING - 8).unwrap();
        assert!(ring.fixed(RING - 8).is_none());
        let t = thread::spawn(move || drop(full));
        let again = ring.fixed_wait(RING - 8).unwrap();
        t.join().unwrap();
        drop(again);
    });
}

/// A producer waits on a full ring while another thread releases a buffer of another
/// ring, then the one that fills the waited ring: the first release does not wake it
/// (its address is not in the waiters' table), the second must. The mutant that arms
/// the waiter's entry after its try (the loom switch `mutant_late_arm`) fails here.
#[test]
fn waiter_woken_by_its_own_ring_only() {
    run_model("waiter_woken_by_its_own_ring_only", || {
        let ring = Ring::new(RING);
        let other = Ring::new(RING);
        let full = ring.fixed(RING - 8).unwrap();
        let elsewhere = other.fixed(8).unwrap();
        let t = thread::spawn(move || {
            drop(elsewhere);
            drop(full);
        });
        let again = ring.fixed_wait(RING - 8).unwrap();
        t.join().unwrap();
        drop(again);
    });
}

/// A producer waits on a full ring while another ring is dropped with a buffer still
/// alive elsewhere, and both buffers are released on other threads: the waiter is
/// woken, and the dropped ring's block is freed by a release alone.
#[test]
fn waiter_and_dropped_ring_race() {
    run_model("waiter_and_dropped_ring_race", || {
        let ring = Ring::new(RING);
        let full = ring.fixed(RING - 8).unwrap();
        let gone = Ring::new(RING);
        let orphan = gone.fixed(8).unwrap();
        let t = thread::spawn(move || drop(full));
        let u = thread::spawn(move || {
            drop(gone);
            drop(orphan);
        });
        let again = ring.fixed_wait(RING - 8).unwrap();
        t.join().unwrap();
        u.join().unwrap();
        drop(again);
    });
}

#[test]
fn ext_grows_over_a_neighbour_released_elsewhere() {
    run_model("ext_grows_over_a_neighbour_released_elsewhere", || {
        let ring = Ring::new(4 * RING);
        let shadow = Shadow::new();
        let mut ext = ring.extendable(8).unwrap();
        ext.extend_from_slice(&[5; 8]);
        let neighbour = written(&ring, 4);
        let (n_start, n_end) = (
            neighbour.as_ptr() as usize,
            neighbour.as_ptr() as usize + LEN,
        );
        let s = shadow.clone();
        let t = thread::spawn(move || {
            let neighbour = neighbour;
            s.write(4);
            drop(neighbour);
        });
        thread::yield_now(); // see `release_then_reuse_unique`
                             // Growth reads the neighbour's header: absorbed if released, stepped over if not.
        ext.extend_from_slice(&[6; 2 * LEN]);
        let (start, end) = (
            ext.as_ptr() as usize,
            ext.as_ptr() as usize + ext.capacity(),
        );
        if start < n_end && n_start < end {
            // The grown buffer covers the neighbour's bytes: its release came first.
            assert_eq!(
                shadow.read(),
                4,
                "growth must observe the neighbour's last write"
            );
            shadow.write(0);
        }
        assert!(ext[..8].iter().all(|&x| x == 5) && ext[8..].iter().all(|&x| x == 6));
        let done = ext.finalize();
        t.join().unwrap();
        drop(done);
        assert_eq!(ring.stats().live_buffers, 0);
    });
}

/// `N` rings, each full with the one buffer returned beside it, ordered by address.
///
/// The release's prefilter compares addresses with the hull of the waited rings'
/// spans, so with two rings or more waited on, whether a torn or stale read of it holds
/// an address depends on where the rings lie relative to each other. Loom needs the same
/// outcome for the same schedule, whatever addresses the allocator picks in each
/// execution: ordering the rings by address gives each role in a model the same
/// relative place every time (only the order of the spans matters to the prefilter).
fn full_rings_in_address_order<const N: usize>() -> [(Ring, FixedBufMut); N] {
    let mut rings: [(Ring, FixedBufMut); N] = core::array::from_fn(|_| {
        let ring = Ring::new(RING);
        let full = ring.fixed(RING - 8).unwrap();
        (ring, full)
    });
    rings.sort_by_key(|(_, full)| full.as_ptr() as usize);
    rings
}

/// Two producers wait on two full rings while one thread releases both rings' buffers,
/// the lower ring's first: a woken waiter is disarmed, and the producer still without
/// room arms again before it tries, so the second release wakes it. The lower ring's
/// waiter, woken, takes its room and leaves, so the hull of the waited spans narrows to
/// the higher ring's while the second release may be reading it: a release that reads
/// the start of the wide hull and the end of the narrow one must still find the higher
/// ring inside (a start and a length, read that way, miss it: a lost wake-up, which
/// loom reports as a deadlock).
#[test]
fn two_waiters_one_releasing_thread() {
    run_model("two_waiters_one_releasing_thread", || {
        let [(a, full_a), (b, full_b)] = full_rings_in_address_order::<2>();
        let t = thread::spawn(move || drop(b.fixed_wait(RING - 8).unwrap()));
        let u = thread::spawn(move || {
            drop(full_a);
            drop(full_b);
        });
        drop(a.fixed_wait(RING - 8).unwrap());
        t.join().unwrap();
        u.join().unwrap();
    });
}

/// Three producers wait on three full rings, more than the waiters' table has entries
/// under loom (two): two of them share an entry, whose published span is the hull of
/// theirs, and each release must wake its own ring's producer only, whatever ring lies
/// in the middle. The lowest ring's producer is a blocked thread, woken by a release on
/// another thread; the two others are tasks of the main thread, polled by hand, which
/// releases into them (on their ring's own thread) while the first two race.
#[test]
fn three_waited_rings_share_two_entries() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    run_model("three_waited_rings_share_two_entries", || {
        let [(a, full_a), (mut b, full_b), (mut c, full_c)] = full_rings_in_address_order::<3>();
        let t = thread::spawn(move || drop(a.fixed_wait(RING - 8).unwrap()));
        let u = thread::spawn(move || drop(full_a));
        let flags: [_; 2] = core::array::from_fn(|_| {
            std::sync::Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)))
        });
        let wakers = flags.clone().map(Waker::from);
        let mut cxs = [0, 1].map(|i| Context::from_waker(&wakers[i]));
        let mut waits = [
            Box::pin(b.fixed_async(RING - 8)),
            Box::pin(c.fixed_async(RING - 8)),
        ];
        for (wait, cx) in waits.iter_mut().zip(&mut cxs) {
            assert!(wait.as_mut().poll(cx).is_pending(), "the ring is full");
        }
        let woken = || flags.each_ref().map(|f| f.0.load(StdOrdering::Relaxed));
        drop(full_c);
        assert_eq!(woken(), [false, true], "only the highest ring's task");
        drop(full_b);
        assert_eq!(woken(), [true, true], "the middle ring's task too");
        for (wait, cx) in waits.iter_mut().zip(&mut cxs) {
            let Poll::Ready(got) = wait.as_mut().poll(cx) else {
                panic!("woken, yet no room");
            };
            drop(got.unwrap());
        }
        t.join().unwrap();
        u.join().unwrap();
    });
}

/// A waker that records its wake-up (a task of a hand-made executor).
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, StdOrdering::Relaxed);
    }
}

/// A task waits in `extendable_async` on a ring that the same thread's latest
/// `ExtBuf` fills; dropping that buffer moves the ring's head back with no release
/// store, and must wake the task as a release would. Meanwhile another thread waits on
/// a second ring, which this thread then releases into: the two wake-ups share the
/// table and its lock.
#[test]
fn room_made_on_the_rings_own_thread_wakes_its_task() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    run_model("room_made_on_the_rings_own_thread_wakes_its_task", || {
        let [(ring, full), (other, other_full)] = full_rings_in_address_order::<2>();
        drop(full); // on this thread, the ring's own: the head moves back
        let latest = ring.extendable(RING - 8).unwrap(); // full again, the latest region
        let t = thread::spawn(move || drop(other.fixed_wait(RING - 8).unwrap()));
        let flag = std::sync::Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = Box::pin(ring.extendable_async(8));
        assert!(wait.as_mut().poll(&mut cx).is_pending(), "the ring is full");
        drop(other_full);
        assert!(!flag.0.load(StdOrdering::Relaxed), "woken by another ring");
        drop(latest); // rewinds: no release store
        assert!(
            flag.0.load(StdOrdering::Relaxed),
            "room made on the ring's own thread wakes its task"
        );
        let Poll::Ready(got) = wait.as_mut().poll(&mut cx) else {
            panic!("woken, yet no room");
        };
        drop(got.unwrap());
        t.join().unwrap();
    });
}
