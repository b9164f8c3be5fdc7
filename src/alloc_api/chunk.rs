//! Chunks: 4 KiB ring regions that small allocations share, filled in order with no
//! header per allocation. [`RingAlloc`](super::RingAlloc) counts a chunk's freed bytes
//! in a plain word (one thread); [`OneRingAlloc`](super::OneRingAlloc), whose blocks
//! may be freed on any thread, in a [`ChunkCount`].

use core::alloc::Layout;

use crate::ring::{round_up, HDR, MAX_ALIGN, WORD};
use crate::sync::{AtomicUsize, Ordering};

/// Chunks are ring regions of this alignment, laid out so that consecutive chunks tile
/// a block: the data of a chunk starts at a multiple of `CHUNK` and its region (header
/// included) spans exactly `CHUNK` bytes, so the next chunk's header ends where the next
/// multiple starts. A small allocation finds its chunk by rounding its address down.
pub(crate) const CHUNK: usize = MAX_ALIGN;

/// A chunk's region as an allocation of this module (released the same way).
pub(crate) const CHUNK_LAYOUT: Layout = match Layout::from_size_align(CHUNK - HDR, CHUNK) {
    Ok(l) => l,
    Err(_) => panic!("chunk layout"),
};

/// Small allocations: 1 to this many bytes, with an alignment of at most a word.
pub(crate) const SMALL_MAX: usize = 256;

/// Small blocks are handed out in multiples of this many bytes, so a chunk's cursor stays
/// aligned to it and only word-aligned layouts may need padding. Four: a `u32` takes 4
/// bytes (with a word per block, ring-alloc's warm-up of 65,535 `u32`s touched twice
/// the memory and changed chunks twice as often: 74.7 µs against 72.2 µs for
/// `RingAlloc`, median of 9 processes).
pub(crate) const GRAIN: usize = 4;

/// Whether `layout` is served from a chunk (when the allocator uses chunks). Any layout
/// that fits a small block is small too: a small block is handed out with its size
/// rounded up to a [`GRAIN`], and every size that fits it rounds to the same length.
#[inline(always)]
pub(crate) fn is_small(layout: Layout) -> bool {
    layout.size().wrapping_sub(1) < SMALL_MAX && layout.align() <= WORD
}

/// A small block for `layout` at a chunk's cursor `cur` (null with `end` 0 when there
/// is no chunk): `(block, length, padding)`, the length rounded up to a [`GRAIN`] and
/// the padding skipped to align it (0 for alignments up to a grain, known at compile
/// time for a constant layout), or `None` if it does not fit before `end`. The caller
/// moves its cursor to `block + length` and counts the padding as never used.
#[inline(always)]
pub(crate) fn bump(cur: *mut u8, end: usize, layout: Layout) -> Option<(*mut u8, usize, usize)> {
    let len = round_up(layout.size(), GRAIN);
    let pad = if layout.align() <= GRAIN {
        0
    } else {
        (cur as usize).wrapping_neg() & (layout.align() - 1)
    };
    // No overflow: the cursor is inside a live chunk (or null), `pad` below a word and
    // `len` at most `SMALL_MAX`.
    if cur as usize + pad + len > end {
        return None;
    }
    Some((cur.wrapping_add(pad), len, pad))
}

/// The head of the chunk holding the small allocation at `p`: the first word of the
/// chunk, written once when the chunk was made, is the head's own pointer (with the
/// chunk's provenance).
///
/// # Safety
/// - `p` is a live small allocation of a chunk whose head `H` starts with that word.
#[inline(always)]
pub(crate) unsafe fn chunk_of<H>(p: *mut u8) -> *mut H {
    let head = p.wrapping_sub(p as usize % CHUNK).cast::<*mut H>();
    // SAFETY: the chunk is live while it holds `p` (contract), and its first word was
    // written when it was made, before `p` was handed out.
    unsafe { *head }
}

/// Asks the processor to bring the cache line holding `p` closer, ahead of a write. A
/// hint: nothing is read or written, and `p` need not point into any allocation.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse", not(miri)))]
    #[allow(unused_unsafe)] // `_mm_prefetch` is a safe function from Rust 1.87 on
    // SAFETY: a prefetch never faults and has no effect the program can observe,
    // whatever the address; SSE, its target feature, is enabled (the `cfg` above).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse", not(miri))))]
    let _ = p;
}

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
