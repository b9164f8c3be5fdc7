//! What the chunked allocators send to the heap: [`AllocStats`], kept in [`HeapCounts`].
//!
//! Everything is counted on the heap path only, which already pays for a call into the
//! global allocator. The one cost elsewhere is on `RingAlloc`'s release of a region:
//! its size is compared with [`HeapCounts::floor`], the smallest size a counted heap
//! region has, which is `usize::MAX` (nothing to look at) while none is live.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::ring::{self, RingStats};
use crate::sync::Cell;

/// Counters of a [`RingAlloc`](crate::RingAlloc) or an
/// [`OneRingAlloc`](crate::OneRingAlloc): its ring's [`RingStats`], and what it sent to
/// the global allocator because a request was larger than its
/// [`heap_threshold`](crate::RingAlloc::heap_threshold).
///
/// Large collections live there: with the default threshold (256 KiB), a `Vec` or a
/// hashbrown table past a few thousand entries is a heap allocation, not ring memory.
///
/// ```
/// use allocator_api2::vec::Vec;
/// let alloc = ringmem::RingAlloc::new();
/// let small: Vec<u64, _> = Vec::with_capacity_in(100, alloc.clone());
/// let large: Vec<u64, _> = Vec::with_capacity_in(100_000, alloc.clone()); // 800 KB
/// let stats = alloc.stats();
/// assert_eq!(stats.heap_allocs, 1);
/// assert_eq!(stats.heap_bytes, 800_000);
/// assert_eq!(stats.heap_live, Some(1));
/// assert!(stats.heap_live_bytes.unwrap() >= 800_000);
/// assert_eq!(stats.ring.heap_fallbacks, 1); // the ring counts it too
/// drop(large);
/// assert_eq!(alloc.stats().heap_live, Some(0));
/// # drop(small);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocStats {
    /// The ring's own counters ([`Ring::stats`](crate::Ring::stats)). Its
    /// `heap_fallbacks` counts the requests below as well as those that the ring's
    /// [`WhenFull::Heap`](crate::WhenFull::Heap) policy sent to the heap.
    pub ring: RingStats,
    /// Heap allocations made so far because a request was larger than the heap
    /// threshold (or, for small layouts, because the threshold is below 256 bytes and
    /// their 4 KiB chunks come from the heap). A heap allocation resized by `realloc`
    /// is not counted again.
    pub heap_allocs: u64,
    /// Bytes those requests asked for, added up.
    pub heap_bytes: u64,
    /// Of those heap allocations, the ones not yet freed. `None` where it is not kept:
    /// for [`OneRingAlloc`](crate::OneRingAlloc) (whose blocks may be freed on any
    /// thread), and for a `RingAlloc` whose ring has the
    /// [`WhenFull::Heap`](crate::WhenFull::Heap) policy (its own fallbacks are heap
    /// allocations too, which a release cannot tell apart).
    pub heap_live: Option<usize>,
    /// Bytes the global allocator holds for the `heap_live` allocations (their current
    /// sizes, with a header word and alignment padding each). `None` as `heap_live`.
    pub heap_live_bytes: Option<usize>,
}

/// Where a [`Source`](super::Source) counts what it sends to the heap for its size,
/// besides its ring's `heap_fallbacks`.
#[derive(Clone, Copy)]
pub(crate) enum Counts<'r> {
    /// Nowhere else (`&Ring`).
    Ring,
    /// In a `RingAlloc`'s shared counters, live ones included.
    Shared(&'r HeapCounts),
    /// In this thread's `OneRingAlloc` counters, looked up on the heap path only.
    #[cfg(feature = "std")]
    Thread,
}

impl Counts<'_> {
    /// Counts a heap region just allocated for `layout` at `block`.
    ///
    /// # Safety
    /// As for [`HeapCounts::sent`].
    #[inline]
    pub(crate) unsafe fn sent(self, block: NonNull<u8>, layout: Layout) {
        match self {
            Counts::Ring => {}
            // SAFETY: forwarded from this function's contract.
            Counts::Shared(counts) => unsafe { counts.sent(block, layout) },
            #[cfg(feature = "std")]
            // SAFETY: forwarded from this function's contract.
            Counts::Thread => unsafe { super::global::count_sent(block, layout) },
        }
    }
}

/// The heap counters behind [`AllocStats`] (one thread's: plain cells).
///
/// Invariants, when `live` is kept: `live` and `live_bytes` are the count and the
/// heap bytes of the heap regions counted by [`sent`](Self::sent) and not yet seen
/// freed; each of them was allocated, and is now sized, for a layout of at least
/// `floor` bytes, so a release of a smaller layout cannot be one of them. `floor` is
/// `usize::MAX` while `live` is 0.
pub(crate) struct HeapCounts {
    allocs: Cell<u64>,
    bytes: Cell<u64>,
    live: Cell<usize>,
    live_bytes: Cell<usize>,
    floor: Cell<usize>,
    /// Whether `live` and `live_bytes` are kept (see [`AllocStats::heap_live`]).
    keep_live: bool,
}

impl HeapCounts {
    /// Zero counters; `keep_live` says whether releases are watched.
    pub(crate) const fn new(keep_live: bool) -> Self {
        HeapCounts {
            allocs: Cell::new(0),
            bytes: Cell::new(0),
            live: Cell::new(0),
            live_bytes: Cell::new(0),
            floor: Cell::new(usize::MAX),
            keep_live,
        }
    }

    /// The counters, with the ring's.
    pub(crate) fn stats(&self, ring: RingStats) -> AllocStats {
        let keep = |v: usize| self.keep_live.then_some(v);
        AllocStats {
            ring,
            heap_allocs: self.allocs.get(),
            heap_bytes: self.bytes.get(),
            heap_live: keep(self.live.get()),
            heap_live_bytes: keep(self.live_bytes.get()),
        }
    }

    /// Whether a block of `layout`'s size may be a counted heap region: the check on
    /// a release and a resize, one comparison.
    #[inline(always)]
    pub(crate) fn may_hold(&self, layout: Layout) -> bool {
        layout.size() >= self.floor.get()
    }

    /// Counts a heap region just allocated for `layout` at `block` because of the
    /// threshold.
    ///
    /// # Safety
    /// - `block` was just handed out by `ring::claim_in` for `layout`, and is live.
    #[cold]
    pub(crate) unsafe fn sent(&self, block: NonNull<u8>, layout: Layout) {
        self.allocs.set(self.allocs.get() + 1);
        self.bytes.set(self.bytes.get() + layout.size() as u64);
        if self.keep_live {
            // SAFETY: a live allocation of this module for `layout` (contract).
            let bytes = unsafe { ring::heap_bytes_of(block, layout.align()) };
            debug_assert!(bytes.is_some(), "{block:p} ({layout:?}) is not on the heap");
            self.live.set(self.live.get() + 1);
            self.live_bytes
                .set(self.live_bytes.get() + bytes.unwrap_or(0));
            self.floor.set(self.floor.get().min(layout.size()));
        }
    }

    /// The heap bytes of the allocation at `ptr` if it is a heap region (`None` for a
    /// ring region), for [`resized`](Self::resized) and [`freed`](Self::freed).
    ///
    /// # Safety
    /// - `ptr` is a live, non-zero-size allocation of this module for `layout` (or a
    ///   layout that fits it), whose only handle the caller holds.
    #[cold]
    pub(crate) unsafe fn heap_bytes(&self, ptr: NonNull<u8>, layout: Layout) -> Option<usize> {
        // SAFETY: forwarded from this function's contract.
        unsafe { ring::heap_bytes_of(ptr, layout.align()) }
    }

    /// A counted heap region of `old` heap bytes was resized (by `realloc`) for `new`,
    /// to the region at `block`.
    ///
    /// # Safety
    /// - `block` is the live result of that resize.
    #[cold]
    pub(crate) unsafe fn resized(&self, old: usize, block: NonNull<u8>, new: Layout) {
        // SAFETY: a live allocation of this module for `new` (contract).
        let bytes = unsafe { ring::heap_bytes_of(block, new.align()) }.unwrap_or(old);
        self.live_bytes.set(self.live_bytes.get() - old + bytes);
        self.floor.set(self.floor.get().min(new.size()));
    }

    /// A counted heap region of `bytes` heap bytes is about to be freed.
    #[cold]
    pub(crate) fn freed(&self, bytes: usize) {
        let live = self.live.get() - 1;
        self.live.set(live);
        self.live_bytes.set(self.live_bytes.get() - bytes);
        if live == 0 {
            self.floor.set(usize::MAX);
        }
    }
}
