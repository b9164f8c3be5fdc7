//! `ChunkCount`: when a chunk of `OneRingAlloc`, whose blocks may be freed on any
//! thread, is empty. On its own so that the loom build, which leaves the rest of
//! `alloc_api` out, can model it (`tests/loom.rs`).

use crate::sync::{AtomicUsize, Ordering};

/// When a chunk whose blocks may be freed on any thread is empty: one atomic word.
///
/// While the chunk is its thread's current one, the word holds [`ChunkCount::LIVE`]
/// minus the bytes freed so far; the thread knows how many it handed out (its cursor)
/// and so sees the chunk empty when the word says every one came back. When the thread
/// moves on (or exits), it *retires* the chunk by subtracting `LIVE` less the bytes
/// handed out: the word then holds the bytes still in use, and whichever subtraction
/// brings it to 0, the retirement or the last free on any thread, releases the chunk,
/// exactly once. `LIVE` exceeds any chunk's bytes, so no free reaches 0 before the
/// retirement.
///
/// ```text
/// owner:  new: LIVE      ...  retire(used): word -= LIVE - used   -> 0? release
/// others:        free(n): word -= n   ...                          -> 0? release
/// ```
#[doc(hidden)] // public only for the loom model (`tests/loom.rs`)
pub struct ChunkCount(AtomicUsize);

impl ChunkCount {
    /// The bias of a current chunk: more than any chunk's bytes, less than `usize::MAX`
    /// minus them.
    pub const LIVE: usize = 1 << (usize::BITS - 2);

    /// A current chunk with nothing freed.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        ChunkCount(AtomicUsize::new(Self::LIVE))
    }

    /// `bytes` of the chunk's blocks are no longer used (a free, a shrink in place, or
    /// the retirement's share). `true` if the chunk is now empty and retired: the
    /// caller releases it, and nothing else will.
    ///
    /// Synchronisation: `Release`, so that whoever releases the chunk sees every use of
    /// its blocks; the one that finds 0 then loads `Acquire` (not a fence, which
    /// ThreadSanitizer does not model; `Arc` makes the same substitution under TSan).
    #[inline]
    pub fn give_back(&self, bytes: usize) -> bool {
        if self.0.fetch_sub(bytes, Ordering::Release) != bytes {
            return false;
        }
        self.0.load(Ordering::Acquire);
        true
    }

    /// Whether the chunk counts exactly `bytes` still in use: for a thread that holds
    /// `bytes` of its freed blocks back, whether they are all the chunk is waiting for
    /// (it is retired and every other byte came back), so that giving them back now
    /// releases it. A hint (`Relaxed`): the subtraction that follows decides.
    #[inline]
    pub fn is_only(&self, bytes: usize) -> bool {
        self.0.load(Ordering::Relaxed) == bytes
    }

    /// The owner moves on from the chunk, which handed out `used` bytes (padding not
    /// counted): [`give_back`](Self::give_back) of what was never handed out.
    #[inline]
    pub fn retire(&self, used: usize) -> bool {
        debug_assert!(used < Self::LIVE);
        self.give_back(Self::LIVE - used)
    }

    /// For the owner of the current chunk, which handed out `used` bytes: whether every
    /// one came back. `Acquire`: the frees' uses of the bytes happen before the owner
    /// hands them out again.
    #[inline]
    pub fn all_back(&self, used: usize) -> bool {
        self.0.load(Ordering::Acquire) == Self::LIVE - used
    }

    /// The owner starts the current chunk over after [`all_back`](Self::all_back) said
    /// `true`: no block is live, so no other thread touches the word.
    #[inline]
    pub fn restart(&self) {
        self.0.store(Self::LIVE, Ordering::Relaxed);
    }
}
