//! When a chunk is empty: its [`Count`], a plain cell for [`RingAlloc`](super::RingAlloc)
//! (one thread) or a [`ChunkCount`] for [`OneRingAlloc`](super::OneRingAlloc), whose
//! blocks may be freed on any thread (the slab's `Word` shape).

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
