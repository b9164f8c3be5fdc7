//! Every interleaving (to the preemption bound) of the ring's cross-thread protocols:
//! release vs reuse of a region, the frozen count, dropping the ring while buffers live,
//! and `ExtBuf` growth over a neighbour another thread releases.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom -- --nocapture
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
//! The known-bug mutant `RUSTFLAGS="--cfg loom --cfg ringmem_mutant_relaxed_release"`
//! weakens the unique release to `Relaxed`; `release_then_reuse_unique` then fails.
//! The mutant `--cfg ringmem_mutant_no_barrier` drops the release's side of the
//! store-load barrier (`src/sync.rs`); a waiter then misses its wake-up
//! (`waiter_woken_by_a_release_elsewhere` deadlocks) and a dropped ring's block leaks
//! (`drop_ring_while_buffers_live_elsewhere`). No model runs ring activity after its
//! releases: every block must be freed by the releases alone.
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
    let Some(mut again) = ring.fixed(LEN) else {
        return false;
    };
    assert_eq!(
        again.as_ptr() as usize,
        first,
        "a reused region is the released one"
    );
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
    true
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
        let s = shadow.clone();
        let t = thread::spawn(move || {
            let mut buf = buf;
            // Written on B, dropped on B: one Release store.
            buf.try_extend_from_slice(&pattern(7)).unwrap();
            s.write(7);
            drop(buf);
        });
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
/// (`--cfg ringmem_mutant_no_barrier`) fails here.
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

/// A `OneRingAlloc` chunk of two blocks in a model: its count, and a shadow byte per
/// block that the block's user writes before freeing it and whoever releases the chunk
/// reads.
#[cfg(feature = "allocator-api2")]
struct TwoBlockChunk {
    count: ringmem::ChunkCount,
    blocks: [UnsafeCell<u8>; 2],
}

// SAFETY: each block's shadow is used by its holder only, and by the releaser after
// every free (what the models check).
#[cfg(feature = "allocator-api2")]
unsafe impl Sync for TwoBlockChunk {}

#[cfg(feature = "allocator-api2")]
impl TwoBlockChunk {
    fn new() -> Arc<Self> {
        Arc::new(TwoBlockChunk {
            count: ringmem::ChunkCount::new(),
            blocks: [UnsafeCell::new(0), UnsafeCell::new(0)],
        })
    }

    /// The release: reads every block's shadow, which must hold one of `users`' marks.
    fn release(&self, users: &[u8]) -> bool {
        for b in &self.blocks {
            // SAFETY: the chunk is empty: no holder uses a block any more.
            b.with(|p| unsafe { assert!(users.contains(&*p), "block still in use") });
        }
        true
    }
}

/// `OneRingAlloc`'s chunk count: the owner hands out two blocks, frees one and retires
/// the chunk while another thread frees the other. Exactly one of the three calls
/// finds the chunk empty and releases it, and the release happens after both blocks'
/// last use (the shadow of each block is written by its user before its free and read
/// by whoever releases; without the `Release`/`Acquire` pairing loom reports the race).
#[cfg(feature = "allocator-api2")]
#[test]
fn one_ring_chunk_released_once_after_every_free() {
    run_model("one_ring_chunk_released_once_after_every_free", || {
        let chunk = TwoBlockChunk::new();
        let release = |c: &TwoBlockChunk| c.release(&[1, 2]);
        let other = chunk.clone();
        let far = thread::spawn(move || {
            // SAFETY: block 1 is this thread's until it frees it.
            other.blocks[1].with_mut(|p| unsafe { *p = 2 });
            other.count.give_back(12) && release(&other)
        });
        // SAFETY: block 0 is the owner's until it frees it.
        chunk.blocks[0].with_mut(|p| unsafe { *p = 1 });
        let mut released = chunk.count.give_back(8) && release(&chunk);
        released |= chunk.count.retire(8 + 12) && release(&chunk);
        let far_released = far.join().unwrap();
        assert!(released != far_released, "released exactly once");
    });
}

/// A thread that frees blocks of a chunk it does not own holds their bytes back and
/// gives them back in one subtraction: as soon as the count says they are all it waits
/// for (a `Relaxed` hint), else at its exit. The owner retires the chunk meanwhile. The
/// chunk is still released exactly once, after every use of every block.
#[cfg(feature = "allocator-api2")]
#[test]
fn one_ring_chunk_released_once_with_frees_held_back() {
    run_model("one_ring_chunk_released_once_with_frees_held_back", || {
        let chunk = TwoBlockChunk::new();
        let release = |c: &TwoBlockChunk| c.release(&[2]);
        let other = chunk.clone();
        let far = thread::spawn(move || {
            let mut held = 0;
            for (i, b) in other.blocks.iter().enumerate() {
                // SAFETY: the blocks are this thread's until it frees them.
                b.with_mut(|p| unsafe { *p = 2 });
                held += 4 * (i + 1);
                if other.count.is_only(held) {
                    return other.count.give_back(held) && release(&other);
                }
            }
            // The thread exits: it gives back what it held.
            other.count.give_back(held) && release(&other)
        });
        // The owner's own block was freed into the chunk's unused bytes: it retires the
        // chunk with the far thread's 4 + 8 bytes in use.
        let released = chunk.count.retire(12) && release(&chunk);
        let far_released = far.join().unwrap();
        assert!(released != far_released, "released exactly once");
    });
}

/// The owner of the current chunk starts it over once every block came back: its
/// `Acquire` check orders the other thread's use of a block before the owner hands the
/// bytes out again.
#[cfg(feature = "allocator-api2")]
#[test]
fn one_ring_chunk_restarts_after_a_free_elsewhere() {
    use ringmem::ChunkCount;
    run_model("one_ring_chunk_restarts_after_a_free_elsewhere", || {
        struct Chunk {
            count: ChunkCount,
            block: UnsafeCell<u8>,
        }
        // SAFETY: the block's shadow is used by its holder, then by the owner once the
        // count says it came back (what the model checks).
        unsafe impl Sync for Chunk {}
        let chunk = Arc::new(Chunk {
            count: ChunkCount::new(),
            block: UnsafeCell::new(0),
        });
        let other = chunk.clone();
        let far = thread::spawn(move || {
            // SAFETY: the block is this thread's until it frees it.
            other.block.with_mut(|p| unsafe { *p = 2 });
            assert!(!other.count.give_back(16), "current: not released");
        });
        loop {
            if chunk.count.all_back(16) {
                chunk.count.restart();
                // SAFETY: every block came back: the bytes are the owner's again.
                chunk.block.with_mut(|p| unsafe { *p = 1 });
                break;
            }
            thread::yield_now();
        }
        far.join().unwrap();
        assert!(
            chunk.count.retire(0),
            "an empty retired chunk is released at once"
        );
    });
}

/// Two producers wait on two full rings while one thread releases both rings' buffers:
/// the release that wakes the waiters clears their flag, and the producer still without
/// room sets it again before it tries, so the second release wakes it.
#[test]
fn two_waiters_one_releasing_thread() {
    run_model("two_waiters_one_releasing_thread", || {
        let a = Ring::new(RING);
        let b = Ring::new(RING);
        let full_a = a.fixed(RING - 8).unwrap();
        let full_b = b.fixed(RING - 8).unwrap();
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
