//! Chunks: 4 KiB ring regions that small allocations share, filled in order with no
//! header per allocation. [`RingAlloc`](super::RingAlloc) counts a chunk's freed bytes
//! in a plain word (one thread); [`OneRingAlloc`](super::OneRingAlloc), whose blocks
//! may be freed on any thread, in a `ChunkCount` (`count.rs`).

use core::alloc::Layout;

use allocator_api2::alloc::AllocError;

use super::Source;
use crate::ring::{round_up, HDR, MAX_ALIGN, WORD};
use crate::Ring;

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
/// bytes (with a word per block, a run of `u32`s would touch twice the memory and
/// change chunks twice as often).
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

/// A new chunk's region (uninitialised, `CHUNK_LAYOUT`, released like any allocation of
/// this module): from `ring`, at the window's front when it can tile the block (then
/// without a walk), or from the heap when there is no ring or `to_heap` (small
/// allocations follow the heap threshold as a group: their chunks go to the heap when
/// it is below [`SMALL_MAX`]).
pub(crate) fn claim(ring: Option<&Ring>, to_heap: bool) -> Result<*mut u8, AllocError> {
    let tiled = match ring {
        Some(ring) if !to_heap => ring.claim_at_head_aligned(CHUNK_LAYOUT.size(), CHUNK, 1),
        _ => None,
    };
    let chunk = match tiled {
        Some(c) => c.data.as_ptr(),
        None => Source {
            ring,
            threshold: if to_heap { 0 } else { usize::MAX },
        }
        .allocate(CHUNK_LAYOUT)?
        .as_ptr()
        .cast::<u8>(),
    };
    debug_assert_eq!(chunk as usize % CHUNK, 0);
    // Its blocks find it from their address (`chunk_of`).
    super::expose(chunk);
    // Where the next chunk goes when chunks tile the block: its region header (the word
    // just past this chunk's region) and its head. The next chunk change writes both
    // lines, and they are cold by then unless fetched now (a run of small allocations
    // changes chunks every thousand or so, and each change would wait for both).
    let next = chunk.wrapping_add(CHUNK);
    prefetch(next.wrapping_sub(HDR));
    prefetch(next);
    Ok(chunk)
}

/// The head of the chunk holding the small allocation at `p`, rebuilt from the address
/// with exposed provenance (`claim` exposed the chunk), not derived from `p`: a
/// collection may have narrowed `p` to its block (allocator-api2's `Box` does), and the
/// head lies outside it. Only address arithmetic: the head is live, and may be used,
/// while `p` is a live small allocation of a chunk.
#[inline(always)]
pub(crate) fn chunk_of<H>(p: *mut u8) -> *mut H {
    (p as usize & !(CHUNK - 1)) as *mut H
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
