//! Chunks: 4 KiB ring regions that small allocations share, filled in order with no
//! header per allocation, and [`Current`], the one chunk allocator of both front ends,
//! generic over its chunks' [`Count`]: [`RingAlloc`](super::RingAlloc) keeps its
//! `Current` in the handles' shared state and counts in a plain cell (one thread);
//! [`OneRingAlloc`](super::OneRingAlloc) keeps one per thread in a thread-local and
//! counts in a [`ChunkCount`](super::count::ChunkCount), as its blocks may be freed on
//! any thread.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use allocator_api2::alloc::AllocError;

use super::count::Count;
use super::{Counts, Source};
use crate::ring::{prefetch, round_up, HDR, MAX_ALIGN, WORD};
use crate::sync::Cell;
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

/// Whether `layout` is served from a chunk (when the allocator uses chunks), except for
/// the kept blocks of `kept.rs`: regions that a shrink to a small layout could not move
/// into a chunk. Any layout that fits a small block is small too: a small block is
/// handed out with its size rounded up to a [`GRAIN`], and every size that fits it
/// rounds to the same length.
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
/// it is below [`SMALL_MAX`]), counted in `counts` then.
pub(crate) fn claim(
    ring: Option<&Ring>,
    to_heap: bool,
    counts: Counts<'_>,
) -> Result<*mut u8, AllocError> {
    let tiled = match ring {
        Some(ring) if !to_heap => ring.claim_at_head_aligned(CHUNK_LAYOUT.size(), CHUNK, 1),
        _ => None,
    };
    let chunk = match tiled {
        Some(c) => c.data.as_ptr(),
        None => Source {
            ring,
            threshold: if to_heap { 0 } else { usize::MAX },
            counts,
        }
        .allocate(CHUNK_LAYOUT)?
        .as_ptr()
        .cast::<u8>(),
    };
    debug_assert_eq!(chunk as usize % CHUNK, 0);
    // Its blocks find it from their address (`chunk_of`).
    crate::ring::expose(chunk);
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

/// What a chunk knows about itself, in its first bytes: when it is empty. A chunk hands
/// out its bytes in order from after this head, each block its size rounded up to a
/// [`GRAIN`] at its alignment.
#[repr(C)]
pub(crate) struct Head<C> {
    /// See [`Count`].
    pub(crate) count: C,
}

/// A chunk that is retired and empty: nothing refers to it any more, and its region
/// (from [`claim`]) is its holder's to release, once. Made only in this module, by the
/// call that found the chunk empty.
#[must_use]
pub(crate) struct Emptied(NonNull<u8>);

impl Emptied {
    /// The chunk's region, an allocation of this module with [`CHUNK_LAYOUT`].
    pub(crate) fn region(self) -> NonNull<u8> {
        self.0
    }
}

/// The cursor of a chunked allocator with no current chunk: not null, and no block
/// ends there (a block's end is past its non-null start); with `end` 0 every small
/// request misses and takes the slow path.
const NO_CHUNK: *mut u8 = NonNull::<u8>::dangling().as_ptr();

/// A chunked allocator's current chunk, which it fills in order. Freeing the latest
/// block moves the cursor back and growing it moves it on; with an atomic count,
/// another block of this chunk freed by its owner joins `unused`, a plain cell (no
/// atomic instruction); any other block is the front end's to count down.
///
/// Invariants: `end` is 0 exactly when `chunk` is null, and then `cursor` is
/// [`NO_CHUNK`], or null for good when the allocator does not use chunks (so a free
/// tells the two apart from the cursor it loads anyway). Otherwise `chunk` is live,
/// current (its count not retired) and hands out its bytes from `chunk + HEAD` to
/// `cursor`, of which `unused` are in no block and not subtracted from the count:
/// padding skipped to align a block, and (for an atomic count) blocks freed out of
/// order by the owner. A null `chunk` matches no block's chunk: no allocation
/// lies in the first `CHUNK` bytes of the address space.
pub(crate) struct Current<C> {
    cursor: Cell<*mut u8>,
    end: Cell<usize>,
    chunk: Cell<*mut Head<C>>,
    unused: Cell<usize>,
}

impl<C: Count> Current<C> {
    /// Bytes at the start of a chunk before its first block (a word multiple).
    const HEAD: usize = core::mem::size_of::<Head<C>>();

    /// No current chunk yet; `chunked`: whether small allocations use chunks at all.
    pub(crate) const fn new(chunked: bool) -> Self {
        Current {
            cursor: Cell::new(if chunked { NO_CHUNK } else { ptr::null_mut() }),
            end: Cell::new(0),
            chunk: Cell::new(ptr::null_mut()),
            unused: Cell::new(0),
        }
    }

    /// Whether small allocations use chunks (see the invariants).
    #[inline(always)]
    pub(crate) fn chunked(&self) -> bool {
        !self.cursor.get().is_null()
    }

    /// Bytes of the current chunk `chunk` handed out to blocks and not freed into
    /// `unused` (padding not counted).
    #[inline(always)]
    fn used(&self, chunk: *mut Head<C>) -> usize {
        self.cursor.get() as usize - (chunk as usize + Self::HEAD) - self.unused.get()
    }

    /// A small block for `layout` at the cursor, its size rounded up to a [`GRAIN`]
    /// (the cursor stays aligned to it, which serves alignments up to a grain with no
    /// padding; a word-aligned layout may skip a grain first, counted as unused at
    /// once). `None` when it does not fit (or there is no chunk).
    #[inline(always)]
    pub(crate) fn bump(&self, layout: Layout) -> Option<NonNull<[u8]>> {
        let (p, len, pad) = bump(self.cursor.get(), self.end.get(), layout)?;
        if pad != 0 {
            self.unused.set(self.unused.get() + pad);
        }
        self.cursor.set(p.wrapping_add(len));
        // SAFETY: `end` is not 0, so `p` is inside the current chunk: not null.
        let p = unsafe { NonNull::new_unchecked(p) };
        Some(NonNull::slice_from_raw_parts(p, len))
    }

    /// The first step of a small allocation that missed: starts the current chunk over
    /// if every block came back (`true`: the next [`bump`](Self::bump) succeeds for any
    /// small layout). `false` when there is no chunk or a block is live.
    #[inline]
    pub(crate) fn restart(&self) -> bool {
        let chunk = self.chunk.get();
        // SAFETY: the current chunk is live (invariant).
        if chunk.is_null() || !unsafe { (*chunk).count.all_back(self.used(chunk)) } {
            return false;
        }
        // SAFETY: as above; no block is live, so nothing else touches the count.
        unsafe { (*chunk).count.restart() };
        self.cursor.set(chunk.cast::<u8>().wrapping_add(Self::HEAD));
        self.unused.set(0);
        true
    }

    /// Makes `chunk`, a fresh region of [`CHUNK_LAYOUT`] from [`claim`], current; the
    /// caller retired the previous one.
    pub(crate) fn start(&self, chunk: *mut u8) {
        debug_assert!(self.chunk.get().is_null(), "the previous chunk is retired");
        let head = chunk.cast::<Head<C>>();
        // SAFETY: a fresh block of `CHUNK - HDR` bytes, aligned to `CHUNK`: room for
        // the head, and no one else's.
        unsafe { ptr::addr_of_mut!((*head).count).write(C::new()) };
        self.chunk.set(head);
        self.cursor.set(chunk.wrapping_add(Self::HEAD));
        self.end.set(chunk as usize + CHUNK_LAYOUT.size());
        self.unused.set(0);
    }

    /// Retires the current chunk, if any, and forgets it: the free that empties it
    /// releases it. Forgotten at once, before anything can fail: a retired chunk left
    /// current would keep handing out blocks that its count no longer covers. Returns
    /// the chunk if nothing in it is in use: the caller releases it.
    pub(crate) fn retire(&self) -> Option<Emptied> {
        let chunk = self.chunk.get();
        if chunk.is_null() {
            return None;
        }
        let used = self.used(chunk);
        self.chunk.set(ptr::null_mut());
        self.cursor.set(NO_CHUNK);
        self.end.set(0);
        self.unused.set(0);
        // SAFETY: the current chunk is live until retired, here, once.
        if unsafe { (*chunk).count.retire(used) } {
            return NonNull::new(chunk.cast()).map(Emptied);
        }
        None
    }

    /// Retires the current chunk if every block came back, and returns it for the
    /// caller to release (`flush`).
    pub(crate) fn flush(&self) -> Option<Emptied> {
        let chunk = self.chunk.get();
        // SAFETY: the current chunk is live (invariant).
        if chunk.is_null() || !unsafe { (*chunk).count.all_back(self.used(chunk)) } {
            return None;
        }
        self.retire()
    }

    /// Whether the small block at `p` lies in the current chunk. A chunk spans one
    /// `CHUNK`-aligned stretch, and a live block's chunk is not released, so no later
    /// chunk can sit at its address.
    #[inline(always)]
    fn holds(&self, p: *mut u8) -> bool {
        p as usize & !(CHUNK - 1) == self.chunk.get() as usize
    }

    /// Frees `len` bytes at `p`, the end of a small block (the whole block, or the tail
    /// a shrink gives up), if the count need not see them: the latest block's go back
    /// to the cursor, others of the current chunk join `unused` when the count is
    /// atomic. `false`: the caller counts them down (a plain count takes a free of the
    /// current chunk as cheaply as `unused`, and one test fewer finds other chunks).
    ///
    /// Only the latest block of the current chunk ends at the cursor (every size that
    /// fits a block rounds to its length): other chunks lie elsewhere, and no chunk's
    /// blocks end where another's begin.
    #[inline(always)]
    pub(crate) fn free(&self, p: *mut u8, len: usize) -> bool {
        let cur = self.cursor.get();
        if p as usize + len == cur as usize {
            // `cur - len` is `p`; computed from the cursor, the new cursor does not
            // wait for wherever `p` came from.
            self.cursor.set(cur.wrapping_sub(len));
        } else if C::ATOMIC && self.holds(p) {
            self.unused.set(self.unused.get() + len);
        } else {
            return false;
        }
        true
    }

    /// A small block resized to a small size in place: the latest block of the current
    /// chunk grows or shrinks at the cursor, any other shrinks where it is (the tail's
    /// bytes freed as by [`free`](Self::free)). With the block, the bytes of its tail
    /// that `free` left for the caller to count down (0: none). `None` when
    /// neither applies (or without chunks); nothing changed then.
    ///
    /// # Safety
    /// - The `Allocator::grow` (`shrink`) contract for a block of this allocator; both
    ///   layouts are small.
    #[inline(always)]
    pub(crate) unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Option<(NonNull<[u8]>, usize)> {
        let p = ptr.as_ptr();
        // Blocks are handed out at a grain multiple, which every fitting size rounds to.
        let (had, want) = (round_up(old.size(), GRAIN), round_up(new.size(), GRAIN));
        // No overflow: both at most `SMALL_MAX`, `p` inside a block. Without chunks the
        // cursor is null: never the latest.
        let latest = p as usize + had == self.cursor.get() as usize;
        let fits = if latest {
            p as usize + want <= self.end.get()
        } else {
            want <= had && self.chunked()
        };
        if !fits || p as usize & (new.align() - 1) != 0 {
            return None;
        }
        let mut elsewhere = 0;
        if latest {
            self.cursor.set(p.wrapping_add(want));
        } else if want < had && !self.free(p.wrapping_add(want), had - want) {
            elsewhere = had - want;
        }
        if zeroed {
            // SAFETY: the block holds `want >= new.size()` bytes from `ptr`, ours;
            // `grow_zeroed` has `new.size() >= old.size()`.
            unsafe { ptr::write_bytes(p.add(old.size()), 0, want - old.size()) };
        }
        Some((NonNull::slice_from_raw_parts(ptr, want), elsewhere))
    }
}

/// Subtracts `bytes` from `chunk`'s count; returns the chunk if that emptied it after
/// its retirement (a current chunk never reaches 0), for the caller to release.
///
/// # Safety
/// - `chunk` is live and `bytes` of its blocks (handed out, and not yet counted as
///   freed) are the caller's to give up.
#[inline(always)]
pub(crate) unsafe fn count_down<C: Count>(chunk: *mut Head<C>, bytes: usize) -> Option<Emptied> {
    // SAFETY: the chunk is live (contract).
    if unsafe { (*chunk).count.give_back(bytes) } {
        return NonNull::new(chunk.cast()).map(Emptied);
    }
    None
}
