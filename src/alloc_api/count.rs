//! When a chunk is empty: its [`Count`], a plain cell for [`RingAlloc`](super::RingAlloc)
//! (one thread) or a [`ChunkCount`] for [`OneRingAlloc`](super::OneRingAlloc), whose
//! blocks may be freed on any thread (the slab's `Word` shape). The loom models of
//! `ChunkCount` are at the end.

use crate::sync::{AcquireCount, AtomicUsize, Cell, Ordering};

/// A chunk's count-down word.
///
/// While the chunk is its owner's current one, the word holds [`LIVE`] minus the bytes
/// freed into it so far; the owner knows how many it handed out (its cursor) and so sees
/// the chunk empty when the word says every one came back. When the owner moves on (or
/// exits), it *retires* the chunk by subtracting `LIVE` less the bytes handed out: the
/// word then holds the bytes still in use, and whichever subtraction brings it to 0, the
/// retirement or the last free, releases the chunk, exactly once. `LIVE` exceeds any
/// chunk's bytes, so no free reaches 0 before the retirement.
///
/// ```text
/// owner:  new: LIVE      ...  retire(used): word -= LIVE - used   -> 0? release
/// others:        free(n): word -= n   ...                          -> 0? release
/// ```
pub(crate) trait Count {
    /// Whether other threads may count the chunk down (the operations are atomic): the
    /// owner then keeps its own frees of its current chunk in a plain cell (`Current`'s
    /// `unused`) rather than pay an atomic subtraction for each.
    const ATOMIC: bool;

    /// A current chunk with nothing freed.
    fn new() -> Self;

    /// `bytes` of the chunk's blocks are no longer used (a free, a shrink in place, or
    /// the retirement's share). `true` if the chunk is now empty and retired: the
    /// caller releases it, and nothing else will.
    fn give_back(&self, bytes: usize) -> bool;

    /// For the owner of the current chunk, which handed out `used` bytes: whether every
    /// one came back.
    fn all_back(&self, used: usize) -> bool;

    /// The owner starts the current chunk over after [`all_back`](Self::all_back) said
    /// `true`: no block is live, so no other thread touches the word.
    fn restart(&self);

    /// The owner moves on from the chunk, which handed out `used` bytes (padding not
    /// counted): [`give_back`](Self::give_back) of what was never handed out.
    #[inline]
    fn retire(&self, used: usize) -> bool {
        debug_assert!(used < LIVE, "a chunk hands out {used} bytes");
        self.give_back(LIVE - used)
    }
}

/// The bias of a current chunk: more than any chunk's bytes, less than `usize::MAX`
/// minus them.
pub(crate) const LIVE: usize = 1 << (usize::BITS - 2);

/// One thread's count (`RingAlloc` is not `Send`): a load, a subtraction and a store,
/// tested for 0 in the same instruction.
impl Count for Cell<usize> {
    const ATOMIC: bool = false;

    #[inline(always)]
    fn new() -> Self {
        Cell::new(LIVE)
    }

    #[inline(always)]
    fn give_back(&self, bytes: usize) -> bool {
        let left = self.get() - bytes;
        self.set(left);
        left == 0
    }

    #[inline(always)]
    fn all_back(&self, used: usize) -> bool {
        self.get() == LIVE - used
    }

    #[inline(always)]
    fn restart(&self) {
        self.set(LIVE);
    }
}

/// The count of a chunk whose blocks may be freed on any thread: one atomic word.
pub(crate) struct ChunkCount(AtomicUsize);

impl ChunkCount {
    /// Whether the chunk counts exactly `bytes` still in use: for a thread that holds
    /// `bytes` of its freed blocks back, whether they are all the chunk is waiting for
    /// (it is retired and every other byte came back), so that giving them back now
    /// releases it. A hint (`Relaxed`): the subtraction that follows decides.
    #[inline]
    pub(crate) fn is_only(&self, bytes: usize) -> bool {
        self.0.load(Ordering::Relaxed) == bytes
    }
}

impl Count for ChunkCount {
    const ATOMIC: bool = true;

    #[inline]
    fn new() -> Self {
        ChunkCount(AtomicUsize::new(LIVE))
    }

    /// `Release`, so that whoever releases the chunk sees every use of its blocks; the
    /// one that finds 0 then takes the `Acquire` side ([`AcquireCount`]).
    #[inline]
    fn give_back(&self, bytes: usize) -> bool {
        if self.0.fetch_sub(bytes, Ordering::Release) != bytes {
            return false;
        }
        self.0.acquire_count();
        true
    }

    /// `Acquire`: the frees' uses of the bytes (their `Release` subtractions) happen
    /// before the owner hands the bytes out again.
    #[inline]
    fn all_back(&self, used: usize) -> bool {
        self.0.load(Ordering::Acquire) == LIVE - used
    }

    /// `Relaxed`: no block is live, so no other thread touches the word.
    #[inline]
    fn restart(&self) {
        self.0.store(LIVE, Ordering::Relaxed);
    }
}

/// Every interleaving (to the preemption bound) of `OneRingAlloc`'s chunk count: the
/// owner hands out blocks, frees, restarts and retires while other threads free. Each
/// block's bytes are mirrored by a shadow cell that its user writes before the free and
/// whoever releases (or reuses) the chunk reads: without the `Release`/`Acquire`
/// pairing, loom reports the race.
///
/// ```text
/// RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p ringmem --lib
/// ```
#[cfg(all(test, loom))]
mod tests {
    use std::sync::Arc;

    use super::{ChunkCount, Count};
    use crate::sync::model::{run_model, thread};
    use crate::sync::{model_yield, CheckedCell};

    /// A chunk of `N` blocks in a model: its count, and a shadow byte per block.
    struct Chunk<const N: usize> {
        count: ChunkCount,
        blocks: [CheckedCell<u8>; N],
    }

    // SAFETY: each block's shadow is used by its holder only, and by the releaser after
    // every free (what the models check).
    unsafe impl<const N: usize> Sync for Chunk<N> {}

    impl<const N: usize> Chunk<N> {
        fn new() -> Arc<Self> {
            Arc::new(Chunk {
                count: ChunkCount::new(),
                blocks: core::array::from_fn(|_| CheckedCell::new(0)),
            })
        }

        /// The holder of block `i` uses it (writes `mark` to its shadow).
        fn use_block(&self, i: usize, mark: u8) {
            // SAFETY: block `i` is the caller's until it frees it; loom checks that.
            self.blocks[i].with_mut(|p| unsafe { *p = mark });
        }

        /// The release (or reuse): reads every block's shadow, which must hold one of
        /// `marks`. Always `true`, for the callers' `&&`.
        fn release(&self, marks: &[u8]) -> bool {
            for b in &self.blocks {
                // SAFETY: the chunk is empty: no holder uses a block any more.
                let seen = b.with_mut(|p| unsafe { *p });
                assert!(marks.contains(&seen), "block still in use");
            }
            true
        }
    }

    /// The owner hands out two blocks, frees one and retires the chunk while another
    /// thread frees the other. Exactly one of the three calls finds the chunk empty
    /// and releases it, after both blocks' last use.
    #[test]
    fn released_once_after_every_free() {
        run_model("one_ring_chunk_released_once_after_every_free", || {
            let chunk = Chunk::<2>::new();
            let other = chunk.clone();
            let far = thread::spawn(move || {
                other.use_block(1, 2);
                other.count.give_back(12) && other.release(&[1, 2])
            });
            chunk.use_block(0, 1);
            let mut released = chunk.count.give_back(8) && chunk.release(&[1, 2]);
            released |= chunk.count.retire(8 + 12) && chunk.release(&[1, 2]);
            let far_released = far.join().unwrap();
            assert!(released != far_released, "released exactly once");
        });
    }

    /// A thread that frees blocks of a chunk it does not own holds their bytes back and
    /// gives them back in one subtraction: as soon as the count says they are all it
    /// waits for (a `Relaxed` hint), else at its exit. The owner retires the chunk
    /// meanwhile. The chunk is still released exactly once, after every use.
    #[test]
    fn released_once_with_frees_held_back() {
        run_model("one_ring_chunk_released_once_with_frees_held_back", || {
            let chunk = Chunk::<2>::new();
            let other = chunk.clone();
            let far = thread::spawn(move || {
                let mut held = 0;
                for i in 0..2 {
                    other.use_block(i, 2);
                    held += 4 * (i + 1);
                    if other.count.is_only(held) {
                        return other.count.give_back(held) && other.release(&[2]);
                    }
                }
                // The thread exits: it gives back what it held.
                other.count.give_back(held) && other.release(&[2])
            });
            // The owner's own block was freed into the chunk's unused bytes: it retires
            // the chunk with the far thread's 4 + 8 bytes in use.
            let released = chunk.count.retire(12) && chunk.release(&[2]);
            let far_released = far.join().unwrap();
            assert!(released != far_released, "released exactly once");
        });
    }

    /// The owner starts the current chunk over once every block came back: its
    /// `Acquire` check orders the other thread's use of a block before the owner hands
    /// the bytes out again.
    #[test]
    fn restarts_after_a_free_elsewhere() {
        run_model("one_ring_chunk_restarts_after_a_free_elsewhere", || {
            let chunk = Chunk::<1>::new();
            let other = chunk.clone();
            let far = thread::spawn(move || {
                other.use_block(0, 2);
                assert!(!other.count.give_back(16), "current: not released");
            });
            while !chunk.count.all_back(16) {
                model_yield();
            }
            chunk.count.restart();
            // Every block came back: the bytes are the owner's again.
            chunk.use_block(0, 1);
            far.join().unwrap();
            assert!(
                chunk.count.retire(0),
                "an empty retired chunk is released at once"
            );
        });
    }
}
