//! allocator-api2 `Allocator` over the ring: `&Ring`, [`RingAlloc`] and [`OneRingAlloc`].
//!
//! Every allocation of `&Ring` is a ring region (or, above a size threshold, a heap
//! region with the same one-word header, marked `HEAP`), held by one handle: the
//! collection. So `deallocate` is the ring's ordinary unique release, one `Release`
//! store, valid on any thread, and it needs no allocator state at all.
//!
//! [`RingAlloc`] and [`OneRingAlloc`] serve small layouts (1 to 256 bytes, alignment up
//! to a word) from *chunks* instead: 4 KiB ring regions filled in order, with no header
//! per allocation, by one chunk allocator generic over its chunks' count (`chunk.rs`,
//! `count.rs`). `RingAlloc` (one thread, like its ring) keeps it in the handles' shared
//! state and counts in a plain word (`local.rs`); `OneRingAlloc` keeps one per thread in
//! a thread-local and counts down one atomic word per chunk, so its small blocks may be
//! freed on any thread; a thread adds up its frees of one chunk's blocks and subtracts
//! them in one step (`global.rs`). Everything else goes the way described here.
//!
//! # The fast path
//!
//! On the ring's own thread, allocations with alignment up to a word come from the
//! front of the current block's window (see `ring/block.rs`): one header store, no
//! header load. Freeing the latest allocation gives it back to the window, and growing
//! it takes more of the window, both without loading its header: the region's span
//! follows from the layout (`HDR + round_up(size, WORD)`), and although a layout may
//! be smaller than the region (allocator-api2's *fit*), only the region's own span can
//! end exactly where the window starts, so a shorter one just misses the fast path.
//!
//! `deallocate(ptr, layout)` gets only the data pointer: the ring's region API finds
//! the header from it (`ring::header_of`, see "Finding the header" in
//! `ring/region.rs`), and a small block's chunk head is the address rounded down
//! (`chunk.rs`). Both are reached from the address alone, with *exposed* provenance:
//! every region and chunk is exposed when it is handed out (`ring::expose`) and
//! rebuilt from the address. Not through the caller's pointer: a collection may narrow
//! that one to the value (allocator-api2's `Box` does), and under Miri's Stacked
//! Borrows the header, outside the value, is then out of its reach.
//!
//! # Growing and shrinking
//!
//! `grow`, `grow_zeroed` and `shrink` keep the data where it is whenever they can:
//!
//! - a ring region of the calling thread's ring, growing to at most the heap threshold:
//!   from the window if it is the latest allocation (the usual case for a `Vec` being
//!   filled), else over the free regions after it (the ring's region API,
//!   `ring/region.rs`, does both, and the rest of this list);
//! - a ring region, shrinking: the tail goes back to the ring;
//! - a heap region: the global allocator's `realloc`;
//! - a ring region of *another* thread's ring (an [`OneRingAlloc`] collection that
//!   moved): shrinking keeps the region as it is (only the owning thread may rewrite
//!   region lengths), growing moves it.
//!
//! Otherwise (the successors are live, the alignment changes, or the new size passes
//! the threshold) they allocate, copy and release the old region. An error leaves the
//! old block as it was.
//!
//! A shrink needs no memory, and collections end the process when one fails
//! (`Vec::shrink_to_fit` calls `handle_alloc_error`), so a shrink that keeps its
//! alignment does not fail. The chunked allocators move a region that shrinks to a
//! small layout into a chunk, where small layouts are freed; when no chunk can be had
//! (a full ring), the region keeps the block and joins the *kept* blocks (lists
//! striped by address) that their small frees consult (`kept.rs`).

// `ExtendBytes`: bytes into allocator-api2's `Vec<u8, A>` in one copy.
mod bytes;
mod chunk;
// `ChunkCount`: `OneRingAlloc`'s, and its loom models' (`count.rs`).
#[cfg_attr(not(feature = "std"), allow(dead_code))]
mod count;
// On the thread-local ring (`tls`).
#[cfg(feature = "std")]
mod global;
mod kept;
mod local;
mod stats;
#[cfg(feature = "allocator-api2-04")]
mod v04;

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use allocator_api2::alloc::{AllocError, Allocator};

#[cfg(feature = "std")]
pub use bytes::ByteWriter;
pub use bytes::ExtendBytes;
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub use global::OneRingAlloc;
pub use local::RingAlloc;
pub use stats::AllocStats;
use stats::{Counts, HeapCounts};

use crate::ring::{self, round_up, Ring, HDR, MAX_ALIGN, WORD};

/// Requests larger than this many bytes go to the global allocator by default.
pub(crate) const DEFAULT_HEAP_THRESHOLD: usize = 256 * 1024;

/// Whether two layouts release the same way: the same alignment class for the header
/// lookup (≤ 8, or equal) and for a heap region's layout.
#[inline]
fn same_class(a: Layout, b: Layout) -> bool {
    a.align().max(WORD) == b.align().max(WORD)
}

/// A well-aligned, non-null pointer for zero-size layouts; never dereferenced.
#[inline]
fn dangling(align: usize) -> NonNull<[u8]> {
    // No provenance: a zero-size block is never read or written.
    let p = ptr::null_mut::<u8>().wrapping_add(align);
    // SAFETY: `align` is a power of two, at least 1, so `p` is not null.
    NonNull::slice_from_raw_parts(unsafe { NonNull::new_unchecked(p) }, 0)
}

/// A fresh block from an `allocate`, zeroed (`allocate_zeroed`): ring memory is reused,
/// so it is zeroed here.
#[inline]
fn zeroed(block: Result<NonNull<[u8]>, AllocError>) -> Result<NonNull<[u8]>, AllocError> {
    let block = block?;
    // SAFETY: the block is fresh and `block.len()` bytes long, all writable.
    unsafe { zero_tail(block, 0) };
    Ok(block)
}

/// Zeroes the bytes of `block` from offset `from` on (`grow_zeroed`).
///
/// # Safety
/// - `block` is writable for its length, and `from <= block.len()`.
#[inline]
unsafe fn zero_tail(block: NonNull<[u8]>, from: usize) {
    // SAFETY: `[from, len)` lies inside the block, which is writable (contract).
    unsafe { ptr::write_bytes(block.as_ptr().cast::<u8>().add(from), 0, block.len() - from) };
}

/// A resize that cannot stay in place, for the chunked allocators: a block for `new`
/// from `allocate`, the first `min(old, new)` bytes copied over (the rest zeroed for
/// `grow_zeroed`), and the old block given to `deallocate`.
///
/// # Safety
/// - The `Allocator::grow` (`shrink`) contract for `ptr`, `old` and `new`, with
///   `allocate` and `deallocate` the allocator's own.
#[inline(always)]
unsafe fn move_block(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
    allocate: impl FnOnce(Layout) -> Result<NonNull<[u8]>, AllocError>,
    deallocate: impl FnOnce(NonNull<u8>, Layout),
) -> Result<NonNull<[u8]>, AllocError> {
    let block = allocate(new)?;
    let keep = old.size().min(new.size());
    // SAFETY: both blocks are live and distinct; each holds at least `keep` bytes, and
    // the new one `new.size() >= keep`.
    unsafe {
        ptr::copy_nonoverlapping(ptr.as_ptr(), block.as_ptr().cast::<u8>(), keep);
        if zeroed {
            zero_tail(block, keep);
        }
    }
    // The old block is ours and no longer used (contract).
    deallocate(ptr, old);
    Ok(block)
}

/// Releases an allocation; a no-op for zero-size layouts.
///
/// # Safety
/// - `ptr` was handed out by this module for `layout` (or a layout that fits it) and
///   is not used afterwards.
#[inline]
pub(crate) unsafe fn deallocate(ptr: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return;
    }
    // SAFETY: a live allocation of this alignment class (contract).
    let hdr = unsafe { ring::header_of(ptr, layout.align()) };
    // SAFETY: allocator regions are held by exactly one handle, the caller's, which
    // gives it up here; heap regions were claimed with this alignment class.
    unsafe { ring::release_unique(hdr, layout.align()) }
}

/// Where allocations come from: a ring (if the thread has one) and the threshold above
/// which requests go to the global allocator.
#[derive(Clone, Copy)]
pub(crate) struct Source<'r> {
    /// The ring to claim from and to grow in; `None` sends everything to the heap.
    pub(crate) ring: Option<&'r Ring>,
    /// Requests above this many bytes go to the global allocator.
    pub(crate) threshold: usize,
    /// Where the requests sent to the heap for their size are counted, besides the
    /// ring's `heap_fallbacks`.
    pub(crate) counts: Counts<'r>,
}

impl<'r> Source<'r> {
    /// Every request from the global allocator (a thread whose ring is gone).
    #[cfg(feature = "std")]
    pub(crate) const HEAP: Source<'static> = Source {
        ring: None,
        threshold: 0,
        counts: Counts::Thread,
    };

    /// A ring with a threshold.
    #[inline]
    pub(crate) fn new(ring: &'r Ring, threshold: usize) -> Self {
        Source {
            ring: Some(ring),
            threshold,
            counts: Counts::Ring,
        }
    }

    /// The same source, counting what it sends to the heap in `counts` too.
    #[inline]
    pub(crate) fn counted(self, counts: Counts<'r>) -> Self {
        Source { counts, ..self }
    }

    /// `Allocator::allocate`.
    #[inline]
    pub(crate) fn allocate(self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let (size, align) = (layout.size(), layout.align());
        if size == 0 {
            return Ok(dangling(align));
        }
        if align > MAX_ALIGN {
            return Err(AllocError);
        }
        if size > self.threshold || self.ring.is_none() {
            return self.allocate_heap(layout);
        }
        ring::claim_in(self.ring, size, align, self.threshold).ok_or(AllocError)
    }

    /// A heap region for a request above the threshold (or with no ring), counted: out
    /// of line, so that the ring path pays only the comparison it made anyway.
    #[cold]
    #[inline(never)]
    fn allocate_heap(self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = ring::claim_in(None, layout.size(), layout.align(), 0).ok_or(AllocError)?;
        if let Some(ring) = self.ring {
            ring.count_heap_fallback(layout.size());
        }
        // SAFETY: just handed out for `layout`, and live.
        unsafe { self.counts.sent(block.cast(), layout) };
        Ok(block)
    }

    /// Notes that the allocation at `ptr` for `layout` is about to be released, for the
    /// counts of live heap memory; one comparison unless it may be a counted heap
    /// region.
    ///
    /// # Safety
    /// - `ptr` is a live allocation of this module for `layout` (or a layout that fits
    ///   it), whose only handle the caller holds.
    #[inline(always)]
    unsafe fn before_release(self, ptr: NonNull<u8>, layout: Layout) {
        if let Counts::Shared(counts) = self.counts {
            if layout.size() != 0 && counts.may_hold(layout) {
                // SAFETY: forwarded from this function's contract; not zero-size.
                if let Some(bytes) = unsafe { counts.heap_bytes(ptr, layout) } {
                    counts.freed(bytes);
                }
            }
        }
    }

    /// [`deallocate`] (any thread's region), with [`before_release`](Self::before_release).
    ///
    /// # Safety
    /// As for [`deallocate`].
    #[inline]
    unsafe fn release(self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            self.before_release(ptr, layout);
            deallocate(ptr, layout);
        }
    }

    /// `ring::resize_in` for the allocation at `ptr` (`old`) to `new`'s size, keeping
    /// the counts of live heap memory when it is a counted heap region.
    ///
    /// # Safety
    /// As for `ring::resize_in`, with `ptr` allocated for `old` (or a layout that fits
    /// it) and `new.size() > 0`.
    #[inline(always)]
    unsafe fn resize_in(self, ptr: NonNull<u8>, old: Layout, new: Layout) -> Option<NonNull<[u8]>> {
        let (ring, align, size) = (self.ring, old.align(), new.size());
        let counted = match self.counts {
            Counts::Shared(counts) if counts.may_hold(old) => {
                // SAFETY: forwarded from this function's contract; `old` is not
                // zero-size (the callers' checks).
                unsafe { counts.heap_bytes(ptr, old) }.map(|bytes| (counts, bytes))
            }
            _ => None,
        };
        // SAFETY: forwarded from this function's contract.
        let block = unsafe { ring::resize_in(ring, ptr, align, size, self.threshold) }?;
        if let Some((counts, bytes)) = counted {
            // SAFETY: the live result of the resize.
            unsafe { counts.resized(bytes, block.cast(), new) };
        }
        Some(block)
    }

    /// `Allocator::deallocate` on the ring's own thread: the release, or the region
    /// given back to the window when it was the latest allocation.
    ///
    /// # Safety
    /// As for [`deallocate`]; `self.ring` is the calling thread's.
    #[inline]
    pub(crate) unsafe fn deallocate(self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { self.before_release(ptr, layout) };
        // SAFETY: a live allocation of this alignment class (contract).
        let hdr = unsafe { ring::header_of(ptr, layout.align()) };
        let Some(ring) = self.ring else {
            // SAFETY: as in `deallocate`.
            return unsafe { ring::release_unique(hdr, layout.align()) };
        };
        // The span of a region whose data follows its header (alignment up to a word)
        // follows from the layout without loading the header: the size fits the
        // region, so it spans at least this much, and exactly this much if it ends at
        // the window (a smaller layout that fits it just misses the give-back).
        // No overflow: a `Layout`'s size is at most `isize::MAX`.
        let span = (layout.align() <= WORD).then(|| HDR + round_up(layout.size(), WORD));
        // SAFETY: as in `deallocate`; `ring` is this thread's (contract), and `span` at
        // most the region's (above).
        unsafe { ring::release_unique_in(ring, hdr, layout.align(), span) }
    }

    /// `Allocator::allocate_zeroed`.
    #[inline]
    pub(crate) fn allocate_zeroed(self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        zeroed(self.allocate(layout))
    }

    /// `Allocator::grow` (`zeroed = false`) and `Allocator::grow_zeroed`.
    ///
    /// # Safety
    /// The `Allocator::grow` contract: `ptr` is a live allocation of this module for
    /// `old` (or a layout that fits it), and `new.size() >= old.size()`.
    #[inline(always)]
    pub(crate) unsafe fn grow(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's contract, forwarded.
        match unsafe { self.grow_latest(ptr, old, new, zeroed) } {
            Some(block) => Ok(block),
            // SAFETY: the caller's contract, forwarded; nothing changed above.
            None => unsafe { self.grow_slow(ptr, old, new, zeroed) },
        }
    }

    /// The fast path of [`grow`](Self::grow): the latest allocation grows from the
    /// window's front. `None` when that does not apply; nothing changed then, and
    /// [`grow_slow`](Self::grow_slow) does the rest.
    ///
    /// # Safety
    /// As for [`grow`](Self::grow).
    #[inline(always)]
    pub(crate) unsafe fn grow_latest(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Option<NonNull<[u8]>> {
        debug_assert!(new.size() >= old.size(), "grow from {old:?} to {new:?}");
        if let Some(ring) = self.ring {
            if old.size() != 0
                && old.align() <= WORD
                && new.align() <= WORD
                && new.size() <= self.threshold
            {
                // The latest allocation, with the window after it: grow from the
                // window's front. Spans follow from the layouts, as in `deallocate`.
                // SAFETY: alignment up to a word: the header is the word before the
                // data (module docs), of an allocation the caller holds (contract).
                let hdr = unsafe { ring::header_of(ptr, WORD) };
                // No overflow: `Layout` sizes are at most `isize::MAX`.
                let (span, want) = (
                    HDR + round_up(old.size(), WORD),
                    HDR + round_up(new.size(), WORD),
                );
                // SAFETY: the caller's unique handle, on the ring's thread (contract);
                // `span` is at most the region's (the old size fits the allocation)
                // and `want >= span`.
                if let Some(want) = unsafe { ring.grow_latest(hdr, span, want, want, true) } {
                    let block = NonNull::slice_from_raw_parts(ptr, want - HDR);
                    if zeroed {
                        // SAFETY: the region now holds `want - HDR >= new.size()` bytes
                        // after `ptr`, all ours.
                        unsafe { zero_tail(block, old.size()) };
                    }
                    return Some(block);
                }
            }
        }
        None
    }

    /// The rest of [`grow`](Self::grow), out of line so that the fast path above stays
    /// a few instructions in the caller: in place by the walk, or by `realloc`, or by
    /// moving.
    ///
    /// # Safety
    /// As for [`grow`](Self::grow).
    #[inline(never)]
    pub(crate) unsafe fn grow_slow(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() != 0 && same_class(old, new) && new.align() <= MAX_ALIGN {
            // SAFETY: a live allocation made with `old`'s alignment class, ours, on the
            // ring's thread (contract); the size is not zero (`new >= old > 0`).
            if let Some(block) = unsafe { self.resize_in(ptr, old, new) } {
                if zeroed {
                    // SAFETY: the block holds `block.len() >= old.size()` bytes, ours.
                    unsafe { zero_tail(block, old.size()) };
                }
                return Ok(block);
            }
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.grow_by_moving(ptr, old, new, zeroed) }
    }

    /// The rest of `grow`: from a zero size, or by allocate-copy-release.
    ///
    /// # Safety
    /// As for [`grow`](Self::grow).
    #[inline(never)]
    unsafe fn grow_by_moving(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 {
            return if zeroed {
                self.allocate_zeroed(new)
            } else {
                self.allocate(new)
            };
        }
        if new.align() > MAX_ALIGN {
            return Err(AllocError);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.move_block(ptr, old, new, zeroed) }
    }

    /// [`move_block`] with this source's allocation and the plain release.
    ///
    /// # Safety
    /// As for [`move_block`].
    #[inline]
    unsafe fn move_block(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from this function's contract; the old block is given up
        // to the release, once.
        unsafe {
            move_block(
                ptr,
                old,
                new,
                zeroed,
                |l| self.allocate(l),
                |p, l| self.release(p, l),
            )
        }
    }

    /// `Allocator::shrink`.
    ///
    /// # Safety
    /// The `Allocator::shrink` contract: `ptr` is a live allocation of this module for
    /// `old` (or a layout that fits it), and `new.size() <= old.size()`.
    #[inline]
    pub(crate) unsafe fn shrink(
        self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        debug_assert!(new.size() <= old.size(), "shrink from {old:?} to {new:?}");
        if new.size() == 0 {
            // SAFETY: the allocation is ours and no longer used (contract).
            unsafe { self.release(ptr, old) };
            return Ok(dangling(new.align()));
        }
        if new.align() > MAX_ALIGN {
            return Err(AllocError);
        }
        if same_class(old, new) {
            // SAFETY: a live, non-zero-size allocation of `old`'s class, ours, on the
            // ring's thread (contract); `new.size() > 0`.
            return Ok(match unsafe { self.resize_in(ptr, old, new) } {
                Some(block) => block,
                // Another thread's ring region (or a refused `realloc`): it stays as it
                // is, and still fits `new`.
                None => NonNull::slice_from_raw_parts(ptr, new.size()),
            });
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.move_block(ptr, old, new, false) }
    }
}

/// Allocates from the ring; requests above [`RingAlloc::DEFAULT_HEAP_THRESHOLD`] bytes
/// (256 KiB, fixed for `&Ring`: [`RingAlloc`] sets its own) go to the global allocator
/// and count in the ring's [`heap_fallbacks`](crate::RingStats::heap_fallbacks), and
/// otherwise the ring's [`WhenFull`](crate::WhenFull) policy applies when it is full
/// (so [`WhenFull::Fail`](crate::WhenFull::Fail) makes a collection's growth fail).
/// Alignments up to [`RingAlloc::MAX_ALIGN`] are served; larger ones get
/// [`AllocError`]. Implemented on `Ring` itself, so `&Ring` is an allocator through
/// allocator-api2's blanket impl for references.
///
/// [`AllocError`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/struct.AllocError.html
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// let ring = ringmem::Ring::new(64 * 1024);
/// let mut v: Vec<u32, &ringmem::Ring> = Vec::new_in(&ring);
/// v.extend(0..1000); // grows in place: the rest of the block is free
/// let b = Box::new_in([7u8; 3], &ring);
/// assert_eq!(v[999], 999);
/// assert_eq!(ring.stats().live_buffers, 2);
/// assert_eq!(ring.stats().heap_fallbacks, 0);
/// let large: Vec<u8, &ringmem::Ring> = Vec::with_capacity_in(1 << 20, &ring);
/// assert_eq!(ring.stats().heap_fallbacks, 1); // above the threshold: on the heap
/// # drop((b, large));
/// ```
///
/// With the `nightly` feature the same impl is `core::alloc::Allocator` (allocator-api2
/// then re-exports the standard trait), so `std`'s `Vec<T, &Ring>` works too.
// SAFETY: blocks handed out stay valid until deallocated, also after the ring moves or
// drops (a dropped ring's blocks live until their last region is released); each is a
// distinct region of at least the requested size and alignment; `grow`/`shrink` keep
// or copy the contents as the trait requires.
unsafe impl Allocator for Ring {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        Source::new(self, DEFAULT_HEAP_THRESHOLD).allocate(layout)
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        Source::new(self, DEFAULT_HEAP_THRESHOLD).allocate_zeroed(layout)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the `Allocator::deallocate` contract; `&Ring` is not `Send`, so this
        // is the ring's thread.
        unsafe { Source::new(self, DEFAULT_HEAP_THRESHOLD).deallocate(ptr, layout) }
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow` contract.
        unsafe { Source::new(self, DEFAULT_HEAP_THRESHOLD).grow(ptr, old, new, false) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow_zeroed` contract.
        unsafe { Source::new(self, DEFAULT_HEAP_THRESHOLD).grow(ptr, old, new, true) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::shrink` contract.
        unsafe { Source::new(self, DEFAULT_HEAP_THRESHOLD).shrink(ptr, old, new) }
    }
}
