//! `RingAlloc`: a cheap-to-clone, single-thread handle to one shared ring.

use core::alloc::Layout;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::mem::ManuallyDrop;
use core::ptr::{self, NonNull};

use allocator_api2::alloc::{AllocError, Allocator};

use super::chunk::{self, is_small, Current, Emptied, Head, CHUNK, CHUNK_LAYOUT, GRAIN, SMALL_MAX};
use super::kept::{self, KeptTable};
use super::{AllocStats, Counts, HeapCounts, Source, DEFAULT_HEAP_THRESHOLD};
use crate::raw;
use crate::ring::{round_up, MAX_ALIGN};
use crate::sync::Cell;
use crate::{Ring, RingError, WhenFull};

/// A ring allocator handle for collections: `Vec<T, RingAlloc>`, `Box<T, RingAlloc>`,
/// hashbrown's `HashMap<K, V, S, RingAlloc>` (allocator-api2). Clones share one
/// [`Ring`]; it goes when the last clone and allocation are. Neither `Send` nor `Sync`
/// (see [`OneRingAlloc`](crate::OneRingAlloc) for collections that cross threads).
///
/// - Alignments up to [`RingAlloc::MAX_ALIGN`] (4096); larger ones, and sizes neither
///   the ring nor the heap can serve, get [`AllocError`]. Zero sizes touch nothing.
/// - Above [`heap_threshold`](Self::heap_threshold) (256 KiB by default) requests go to
///   the global allocator, counted by [`stats`](Self::stats): a `Vec<u64>` past 32,768
///   elements lives on the heap.
/// - Small layouts (1 to 256 bytes, alignment up to 8) share 4 KiB chunks without a
///   header each (on rings of 32 KiB blocks or more); a live one pins its chunk. Any
///   other allocation is a ring region, pinning its own bytes.
/// - `grow`/`shrink` stay in place when the next regions are free (a growing `Vec` is
///   not copied). A shrink that keeps the alignment never fails; a failed grow leaves
///   the block as it was.
///
/// [`AllocError`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/struct.AllocError.html
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// let alloc = ringmem::RingAlloc::new();
/// let mut v = Vec::new_in(alloc.clone());
/// v.push(Box::new_in(42u32, alloc));
/// assert_eq!(*v[0], 42);
/// ```
///
/// **From ring-alloc 0.2** a `use` line migrates: `RingAlloc` (`new`, `Default`,
/// `Clone`, `PartialEq`, `Hash`, inherent `allocate`/`deallocate`, `flush`) and
/// `OneRingAlloc` are the same. Not offered: `new_in` (blocks come from the global
/// allocator; [`RingAlloc::with_capacity`] and `From<Ring>` size them), and
/// `clean_local`/`clean_global`, not needed (free space is reused in place, a dropped
/// ring's blocks go after their last allocation).
///
/// Not `Send`:
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// send(ringmem::RingAlloc::new());
/// ```
pub struct RingAlloc {
    /// Counted by [`Shared::handles`]; freed with the last handle. Not an `Rc`, whose
    /// allocation cannot fail softly: [`RingAlloc::try_with_capacity`] reports it.
    shared: NonNull<Shared>,
}

/// What the clones of a `RingAlloc` share.
struct Shared {
    /// The `RingAlloc` handles to this value (at least 1 while any exists).
    handles: Cell<usize>,
    /// Dropped (or recycled) in `Shared`'s `Drop`, nowhere else.
    ring: ManuallyDrop<Ring>,
    /// Requests above this many bytes go to the global allocator.
    threshold: Cell<usize>,
    /// Made by `RingAlloc::new`: on drop, the ring may become this thread's spare.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    recyclable: bool,
    /// Where small allocations come from; not chunked when the ring's blocks are too
    /// short (see [`CHUNKED_MIN_BLOCK`]): then every allocation is a ring region.
    chunks: Current<Cell<usize>>,
    /// Regions that serve small layouts: shrinks that found no chunk to move to
    /// (`kept.rs`), striped by address. Empty unless the ring was full.
    kept: KeptTable,
    /// What went to the heap for its size ([`RingAlloc::stats`]).
    heap: HeapCounts,
}

/// Chunks are used when the ring's blocks hold at least this many bytes (eight chunks),
/// so that a chunk pinned by one live allocation is a small part of a block.
const CHUNKED_MIN_BLOCK: usize = 8 * CHUNK;

#[cfg(feature = "std")]
crate::sync::thread_local! {
    /// One default ring per thread, kept from the last dropped `RingAlloc::new()` so
    /// that the next one reuses its (cache- and page-warm) block instead of asking the
    /// global allocator for a fresh megabyte. Bounded: one block per thread.
    static SPARE: core::cell::Cell<Option<Ring>> = const { core::cell::Cell::new(None) };
}

impl Shared {
    fn source(&self) -> Source<'_> {
        Source::new(&self.ring, self.threshold.get()).counted(Counts::Shared(&self.heap))
    }

    /// Gives a chunk's region back to the ring, if there is one to release.
    #[inline(never)]
    fn release_chunk(&self, chunk: Option<Emptied>) {
        if let Some(chunk) = chunk {
            // SAFETY: a retired, empty chunk (`Emptied`): a region of this module with
            // `CHUNK_LAYOUT` that nothing refers to any more, released once, here, on
            // the ring's thread.
            unsafe { self.source().deallocate(chunk.region(), CHUNK_LAYOUT) };
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The current chunk is released if empty, else retired: the deallocation that
        // empties it (through another handle on this ring, see `RingAlloc::new`'s
        // spare ring) releases it.
        self.release_chunk(self.chunks.retire());
        // SAFETY: `ring` is taken exactly once, here, and not used afterwards.
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        #[cfg(feature = "std")]
        if self.recyclable && ring.capacity() == RingAlloc::DEFAULT_CAPACITY {
            // Allocations still in the ring keep working: the ring stays alive, and
            // they release by their header store as always.
            let ring = core::cell::Cell::new(Some(ring));
            let _ = SPARE.try_with(|s| s.set(ring.take()));
            drop(ring.take()); // the thread is exiting: drop it normally
            return;
        }
        drop(ring);
    }
}

impl RingAlloc {
    /// The largest `Layout` alignment served (the ring's block alignment).
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let ok = Layout::from_size_align(8, ringmem::RingAlloc::MAX_ALIGN).unwrap();
    /// let too_big = Layout::from_size_align(8, 2 * ringmem::RingAlloc::MAX_ALIGN).unwrap();
    /// let p = a.allocate(ok).unwrap();
    /// assert!(a.allocate(too_big).is_err());
    /// # // SAFETY: `p` came from `a.allocate(ok)` and is freed once.
    /// # unsafe { a.deallocate(p.cast(), ok) };
    /// ```
    pub const MAX_ALIGN: usize = MAX_ALIGN;

    /// Bytes of the ring made by [`RingAlloc::new`] (1 MiB).
    ///
    /// ```
    /// let a = ringmem::RingAlloc::new();
    /// assert_eq!(a.ring().capacity(), ringmem::RingAlloc::DEFAULT_CAPACITY);
    /// ```
    pub const DEFAULT_CAPACITY: usize = 1 << 20;

    /// Requests above this many bytes (256 KiB) go to the global allocator unless
    /// [`set_heap_threshold`](Self::set_heap_threshold) says otherwise; `&Ring` and
    /// [`OneRingAlloc`](crate::OneRingAlloc) use it too.
    ///
    /// ```
    /// let a = ringmem::RingAlloc::new();
    /// assert_eq!(a.heap_threshold(), ringmem::RingAlloc::DEFAULT_HEAP_THRESHOLD);
    /// ```
    pub const DEFAULT_HEAP_THRESHOLD: usize = DEFAULT_HEAP_THRESHOLD;

    /// A handle to a new ring of [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) bytes that
    /// adds blocks when full ([`WhenFull::Grow`]), so allocations fail only when the
    /// global allocator does.
    ///
    /// With `std`, each thread keeps one spare default ring: when the last handle of a
    /// `RingAlloc::new()` ring drops (and the ring has not grown past one block), the
    /// ring is kept, and the next `RingAlloc::new()` on that thread reuses it, warm,
    /// instead of asking the global allocator for a fresh megabyte. Allocations still
    /// in it keep working as before.
    ///
    /// # Panics
    /// When the global allocator refuses the first block (and ends in
    /// [`handle_alloc_error`](alloc::alloc::handle_alloc_error) when it refuses the few
    /// bytes the handles share). [`RingAlloc::try_with_capacity`] reports both.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// use ringmem::ExtendBytes;
    /// let mut v = Vec::new_in(ringmem::RingAlloc::new());
    /// v.extend_bytes(b"hello");
    /// assert_eq!(&v[..], b"hello");
    /// ```
    pub fn new() -> Self {
        #[cfg(feature = "std")]
        if let Some(ring) = SPARE.try_with(|s| s.take()).ok().flatten() {
            return Self::from_ring(ring, true).unwrap_or_else(|_| Self::no_memory());
        }
        let ring = Ring::builder()
            .capacity(Self::DEFAULT_CAPACITY)
            .when_full(WhenFull::Grow)
            .build()
            .unwrap_or_else(|e| panic!("ringmem: cannot create a RingAlloc: {e}"));
        Self::from_ring(ring, true).unwrap_or_else(|_| Self::no_memory())
    }

    /// The end of an infallible constructor whose handle could not be allocated.
    #[cold]
    fn no_memory() -> ! {
        alloc::alloc::handle_alloc_error(Layout::new::<Shared>())
    }

    /// A handle to `ring`; `Err(ring)` when the global allocator refuses the few bytes
    /// the handles share.
    // The ring given back whole, as the caller passed it (moved once, on a cold path).
    #[allow(clippy::result_large_err)]
    fn from_ring(ring: Ring, recyclable: bool) -> Result<Self, Ring> {
        let Some(p) = raw::alloc(Layout::new::<Shared>()) else {
            return Err(ring);
        };
        let shared = p.cast::<Shared>();
        let when_full = ring.when_full();
        // SAFETY: a fresh allocation with `Shared`'s layout.
        unsafe {
            shared.as_ptr().write(Shared {
                handles: Cell::new(1),
                chunks: Current::new(ring.block_len() >= CHUNKED_MIN_BLOCK),
                ring: ManuallyDrop::new(ring),
                threshold: Cell::new(DEFAULT_HEAP_THRESHOLD),
                recyclable,
                kept: KeptTable::new(),
                // A `WhenFull::Heap` ring's own fallbacks are heap regions too, which a
                // release cannot tell from the counted ones.
                heap: HeapCounts::new(when_full != WhenFull::Heap),
            })
        };
        Ok(RingAlloc { shared })
    }

    /// What the handles share.
    #[inline(always)]
    fn shared(&self) -> &Shared {
        // SAFETY: alive while any handle is (`Drop`), and only read through shared
        // references (its mutable state is in cells).
        unsafe { self.shared.as_ref() }
    }

    /// A handle to a new ring of `bytes` bytes per block (headers included) that adds
    /// blocks when full ([`WhenFull::Grow`]).
    ///
    /// # Panics
    /// When `bytes` is 0 or larger than a block can address, or the global allocator
    /// refuses it; [`try_with_capacity`](Self::try_with_capacity) returns those as errors.
    ///
    /// ```
    /// let a = ringmem::RingAlloc::with_capacity(4096);
    /// assert_eq!(a.ring().capacity(), 4096);
    /// ```
    pub fn with_capacity(bytes: usize) -> Self {
        match Self::try_with_capacity(bytes) {
            Ok(a) => a,
            Err(e) => panic!("ringmem: cannot create a RingAlloc of {bytes} bytes: {e}"),
        }
    }

    /// A handle to a new ring of `bytes` bytes per block, or why it cannot be made
    /// (including [`RingError::OutOfMemory`] when the global allocator refuses the block
    /// or the handles' shared state: nothing here aborts).
    ///
    /// ```
    /// use ringmem::{RingAlloc, RingError};
    /// assert!(RingAlloc::try_with_capacity(4096).is_ok());
    /// assert_eq!(RingAlloc::try_with_capacity(0).unwrap_err(), RingError::ZeroCapacity);
    /// ```
    pub fn try_with_capacity(bytes: usize) -> Result<Self, RingError> {
        let ring = Ring::builder()
            .capacity(bytes)
            .when_full(WhenFull::Grow)
            .build()?;
        Self::from_ring(ring, false).map_err(|_| RingError::OutOfMemory {
            requested: core::mem::size_of::<Shared>(),
        })
    }

    /// The shared ring (for [`Ring::stats`], or to make buffers from it). Small
    /// allocations count there by their chunk: one live buffer per chunk.
    ///
    /// ```
    /// use allocator_api2::{boxed::Box, vec::Vec};
    /// let a = ringmem::RingAlloc::new();
    /// let b = Box::new_in(1u64, a.clone()); // small: in a chunk
    /// let c = Box::new_in(2u64, a.clone()); // the same chunk
    /// let v: Vec<u8, _> = Vec::with_capacity_in(1000, a.clone()); // a region of its own
    /// assert_eq!(a.ring().stats().live_buffers, 2);
    /// drop((b, c, v));
    /// a.flush(); // the empty chunk
    /// assert_eq!(a.ring().stats().live_buffers, 0);
    /// ```
    #[inline]
    pub fn ring(&self) -> &Ring {
        &self.shared().ring
    }

    /// Requests above this many bytes go to the global allocator (shared by all clones).
    ///
    /// ```
    /// assert_eq!(ringmem::RingAlloc::new().heap_threshold(), 256 * 1024);
    /// ```
    #[inline]
    pub fn heap_threshold(&self) -> usize {
        self.shared().threshold.get()
    }

    /// Sends requests above `bytes` bytes to the global allocator, for this handle and
    /// all its clones; 0 sends everything to the heap. Existing allocations are not
    /// moved; a ring allocation that grows past the threshold moves to the heap.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// let a = ringmem::RingAlloc::new();
    /// a.set_heap_threshold(64);
    /// let v: Vec<u8, _> = Vec::with_capacity_in(1000, a.clone());
    /// assert_eq!(a.ring().stats().live_buffers, 0); // it is on the heap
    /// assert_eq!(a.stats().heap_allocs, 1);
    /// # drop(v);
    /// ```
    ///
    /// `usize::MAX` turns the heap path off: every request is the ring's, under its
    /// [`WhenFull`] policy. A ring made by [`RingAlloc::new`] or
    /// [`with_capacity`](Self::with_capacity) ([`WhenFull::Grow`]) then adds a block for
    /// a request larger than its free space; one that fails when full
    /// ([`WhenFull::Fail`]) refuses it with [`AllocError`], which a collection's
    /// `try_reserve` returns as an error (its infallible methods would end the
    /// process instead):
    ///
    /// [`AllocError`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/struct.AllocError.html
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// use ringmem::{Ring, RingAlloc, WhenFull};
    /// let ring = Ring::builder().capacity(64 * 1024).when_full(WhenFull::Fail).build()?;
    /// let a = RingAlloc::from(ring);
    /// a.set_heap_threshold(usize::MAX);
    /// let mut v: Vec<u8, _> = Vec::new_in(a.clone());
    /// assert!(v.try_reserve(32 * 1024).is_ok()); // fits in the ring
    /// assert!(v.try_reserve(1 << 20).is_err()); // does not, and the heap is off
    /// assert_eq!(a.stats().heap_allocs, 0);
    /// # Ok::<(), ringmem::RingError>(())
    /// ```
    #[inline]
    pub fn set_heap_threshold(&self, bytes: usize) {
        self.shared().threshold.set(bytes);
    }

    /// The ring's [`RingStats`](crate::RingStats), and what this allocator (with all
    /// its clones) sent to the global allocator because a request was larger than the
    /// [`heap_threshold`](Self::heap_threshold): how many allocations and bytes so far,
    /// and how many are live now. See [`AllocStats`] for each field.
    ///
    /// The ring's walk over its headers is the cost (as for [`Ring::stats`]); the heap
    /// counts are kept on the heap path only.
    ///
    /// ```
    /// use hashbrown::HashMap;
    /// let alloc = ringmem::RingAlloc::new();
    /// let mut map = HashMap::new_in(alloc.clone());
    /// map.extend((0..10_000u64).map(|i| (i, [0u8; 32])));
    /// // A table of 10,000 records of 40 bytes is larger than the heap threshold.
    /// let stats = alloc.stats();
    /// assert!(stats.heap_allocs >= 1);
    /// assert_eq!(stats.heap_live, Some(1));
    /// assert!(stats.heap_live_bytes.unwrap() > alloc.heap_threshold());
    /// drop(map);
    /// assert_eq!(alloc.stats().heap_live_bytes, Some(0));
    /// ```
    pub fn stats(&self) -> AllocStats {
        let s = self.shared();
        s.heap.stats(s.ring.stats())
    }

    #[inline]
    fn source(&self) -> Source<'_> {
        self.shared().source()
    }

    /// Releases the chunk that small allocations currently come from, if it holds none,
    /// so that [`Ring::stats`] counts only live allocations (as ring-alloc's `flush`
    /// frees its unused chunks). Small allocations otherwise keep their chunk when it
    /// empties, to refill it without going back to the ring.
    ///
    /// ```
    /// use allocator_api2::boxed::Box;
    /// let a = ringmem::RingAlloc::new();
    /// drop(Box::new_in(1u64, a.clone()));
    /// assert_eq!(a.ring().stats().live_buffers, 1); // the empty chunk, kept
    /// a.flush();
    /// assert_eq!(a.ring().stats().live_buffers, 0);
    /// ```
    pub fn flush(&self) {
        let s = self.shared();
        s.release_chunk(s.chunks.flush());
    }

    /// A small allocation from the current chunk ([`Current::bump`]).
    #[inline(always)]
    fn allocate_small(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match self.shared().chunks.bump(layout) {
            Some(block) => Ok(block),
            None => self.allocate_small_slow(layout),
        }
    }

    /// A small allocation when the current chunk is full (or there is none): the chunk
    /// starts over if it is empty, else a new one becomes current and the old one is
    /// released by the deallocation that empties it. Without chunks, a ring region.
    #[cold]
    #[inline(never)]
    fn allocate_small_slow(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let s = self.shared();
        if !s.chunks.chunked() {
            return self.source().allocate(layout);
        }
        if !s.chunks.restart() {
            // Retired and forgotten before the claim, which may fail.
            s.release_chunk(s.chunks.retire());
            let to_heap = s.threshold.get() < SMALL_MAX;
            s.chunks.start(chunk::claim(
                Some(&s.ring),
                to_heap,
                Counts::Shared(&s.heap),
            )?);
        }
        // An empty chunk holds any small layout: this call does not come back here.
        self.allocate_small(layout)
    }

    /// Releases a small allocation. The latest one gives its bytes back to the cursor;
    /// any other subtracts them from its chunk's count, and an emptied chunk is released
    /// if it is no longer current (the current one starts over when it is next full and
    /// found empty). Without chunks, the ring's release.
    ///
    /// # Safety
    /// - `ptr` was handed out by this handle or a clone for `layout` (or a layout that
    ///   fits it), `layout` is small, and `ptr` is not used afterwards.
    #[inline(always)]
    unsafe fn deallocate_small(&self, ptr: NonNull<u8>, layout: Layout) {
        let s = self.shared();
        let len = round_up(layout.size(), GRAIN);
        if s.chunks.free(ptr.as_ptr(), len) {
            return;
        }
        if !s.chunks.chunked() || s.kept.remove(ptr) {
            // Without chunks every block is a ring (or heap) region, and so is a kept one
            // (its alignment class is a small layout's).
            // SAFETY: forwarded from this function's contract, for the region above;
            // `RingAlloc` is not `Send`, so this is the ring's thread.
            return unsafe { self.source().deallocate(ptr, layout) };
        }
        // SAFETY: forwarded from this function's contract; not kept, so in a chunk.
        unsafe { self.give_back(ptr.as_ptr(), len) };
    }

    /// Subtracts `bytes` from the chunk holding `p`, and releases it if that emptied it
    /// (only a retired chunk can reach 0).
    ///
    /// # Safety
    /// - `p` lies in a live chunk of this handle's ring, and `bytes` of its blocks
    ///   (handed out, and not yet counted as freed) are no longer used.
    #[inline(always)]
    unsafe fn give_back(&self, p: *mut u8, bytes: usize) {
        // SAFETY: forwarded from this function's contract; the chunk's head is touched
        // on this thread only (`RingAlloc` is not `Send`).
        let emptied = unsafe { chunk::count_down(chunk::chunk_of::<Head<Cell<usize>>>(p), bytes) };
        if emptied.is_some() {
            self.shared().release_chunk(emptied);
        }
    }

    /// `allocate` on either path.
    #[inline(always)]
    fn allocate_any(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if is_small(layout) {
            self.allocate_small(layout)
        } else {
            self.source().allocate(layout)
        }
    }

    /// `deallocate` on either path.
    ///
    /// # Safety
    /// The `Allocator::deallocate` contract.
    #[inline(always)]
    unsafe fn deallocate_any(&self, ptr: NonNull<u8>, layout: Layout) {
        if is_small(layout) {
            // SAFETY: forwarded from this function's contract; the layout is small.
            unsafe { self.deallocate_small(ptr, layout) }
        } else {
            // SAFETY: forwarded from this function's contract; `RingAlloc` is not
            // `Send`, so this is the ring's thread.
            unsafe { self.source().deallocate(ptr, layout) }
        }
    }

    /// `grow`, `grow_zeroed` and `shrink`: a small allocation that stays small keeps its
    /// place when it is the latest (growing) or always (shrinking); one that changes
    /// path moves; the rest is the ring's.
    ///
    /// # Safety
    /// The `Allocator::grow` (`shrink`) contract.
    #[inline(always)]
    unsafe fn resize_any(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
        shrink: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if !shrink && old.size() > SMALL_MAX {
            // A grow does not shrink: both layouts are ring regions, known from one
            // comparison instead of two, on the path every growing `Vec` takes.
            // SAFETY: forwarded from this function's contract; neither layout is small.
            return unsafe { self.resize_region(ptr, old, new, zeroed, shrink) };
        }
        match (is_small(old), is_small(new)) {
            (true, true) => {
                // SAFETY: forwarded from this function's contract.
                if let Some(block) = unsafe { self.resize_small(ptr, old, new, zeroed) } {
                    return Ok(block);
                }
            }
            // SAFETY: forwarded from this function's contract; both are ring regions.
            (false, false) => return unsafe { self.resize_region(ptr, old, new, zeroed, shrink) },
            _ => {}
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { self.resize_slow(ptr, old, new, zeroed, shrink) }
    }

    /// A small block resized to a small size in place ([`Current::resize`]).
    ///
    /// # Safety
    /// The `Allocator::grow` (`shrink`) contract; both layouts are small.
    #[inline(always)]
    unsafe fn resize_small(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Option<NonNull<[u8]>> {
        let s = self.shared();
        // SAFETY: forwarded from this function's contract.
        let (block, elsewhere) = unsafe { s.chunks.resize(ptr, old, new, zeroed) }?;
        // A kept block's tail stays in its region.
        if elsewhere != 0 && !s.kept.contains(ptr) {
            // SAFETY: the tail of a live block of a chunk (`resize` is `None` without
            // chunks, and the block is not kept), given up by the caller.
            unsafe { self.give_back(ptr.as_ptr(), elsewhere) };
        }
        Some(block)
    }

    /// The ring's `grow` or `shrink`, for a block that is a ring (or heap) region.
    ///
    /// # Safety
    /// The `Allocator::grow` (`shrink`) contract; `ptr` is not in a chunk.
    #[inline(always)]
    unsafe fn resize_region(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
        shrink: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            if shrink {
                self.source().shrink(ptr, old, new)
            } else {
                self.source().grow(ptr, old, new, zeroed)
            }
        }
    }

    /// The rest of a resize: the ring's without chunks, else allocate-copy-free.
    ///
    /// # Safety
    /// The `Allocator::grow` (`shrink`) contract.
    #[inline(never)]
    unsafe fn resize_slow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
        shrink: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let s = self.shared();
        if !s.chunks.chunked() {
            // SAFETY: forwarded from this function's contract; every block is a ring
            // (or heap) region.
            return unsafe { self.resize_region(ptr, old, new, zeroed, shrink) };
        }
        if is_small(old) && is_small(new) && s.kept.contains(ptr) {
            // SAFETY: forwarded from this function's contract; the block is kept.
            return Ok(unsafe { kept::resize_in_place(ptr, old, new, zeroed) });
        }
        // SAFETY: forwarded from this function's contract; the closures are this
        // handle's own allocation and release, and the old block is given up there.
        let moved = unsafe {
            super::move_block(
                ptr,
                old,
                new,
                zeroed,
                |l| self.allocate_any(l),
                |p, l| self.deallocate_any(p, l),
            )
        };
        match moved {
            // A shrink needs no memory: a region that found no chunk keeps the block.
            // SAFETY: forwarded from this function's contract; the move changed nothing.
            Err(_) if shrink && kept::can_keep(old, new) => unsafe { self.keep(ptr, old, new) },
            moved => moved,
        }
    }

    /// A shrink of a region to a small layout that found no chunk: the region keeps the
    /// block, trimmed, and it joins the kept blocks (`kept.rs`).
    ///
    /// # Safety
    /// The `Allocator::shrink` contract, with [`kept::can_keep`] for `old` and `new`.
    #[cold]
    #[inline(never)]
    unsafe fn keep(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from this function's contract: a region (the layout is not
        // small), shrunk with its own alignment class, which keeps it in place or
        // moves it by `realloc`.
        let block = unsafe { self.source().shrink(ptr, old, kept::trimmed(old)) }?;
        // SAFETY: the region, ours, word-aligned (its class is up to a word) and
        // holding more than `SMALL_MAX` bytes (`can_keep`), given up for `new`.
        Ok(unsafe { self.shared().kept.keep(block, new) })
    }

    /// Allocates a block for `layout` (as [`Allocator::allocate`], callable without
    /// importing the trait, as in ring-alloc).
    ///
    /// [`Allocator::allocate`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/trait.Allocator.html#tymethod.allocate
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let layout = Layout::new::<[u64; 4]>();
    /// let p = a.allocate(layout).unwrap();
    /// assert!(p.len() >= 32);
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { a.deallocate(p.cast(), layout) };
    /// ```
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.allocate_any(layout)
    }

    /// Releases a block (as [`Allocator::deallocate`]); a no-op for zero-size layouts.
    ///
    /// [`Allocator::deallocate`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/trait.Allocator.html#tymethod.deallocate
    ///
    /// # Safety
    /// - `ptr` was allocated by this allocator (or a clone) for `layout`, or for a
    ///   layout that `layout` fits (allocator-api2's *fit*), and is not used afterwards.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let p = a.allocate(Layout::new::<u32>()).unwrap();
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { a.deallocate(p.cast(), Layout::new::<u32>()) };
    /// ```
    #[inline]
    pub unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.deallocate_any(ptr, layout) }
    }
}

impl Drop for RingAlloc {
    fn drop(&mut self) {
        let handles = &self.shared().handles;
        let left = handles.get() - 1;
        handles.set(left);
        if left == 0 {
            // SAFETY: the last handle: nothing refers to `Shared` any more; it was
            // allocated by `from_ring` with its layout and is dropped once, here.
            unsafe {
                ptr::drop_in_place(self.shared.as_ptr());
                raw::dealloc(self.shared.cast(), Layout::new::<Shared>());
            }
        }
    }
}

impl Default for RingAlloc {
    /// [`RingAlloc::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl From<Ring> for RingAlloc {
    /// Shares an existing ring, with its capacity and [`WhenFull`] policy.
    ///
    /// The handles share a few bytes from the global allocator; when it refuses them,
    /// this ends in [`handle_alloc_error`](alloc::alloc::handle_alloc_error), as
    /// `Rc::new` would. [`RingAlloc::try_with_capacity`] reports that as an error.
    ///
    /// ```
    /// use ringmem::{Ring, RingAlloc, WhenFull};
    /// let ring = Ring::builder().capacity(4096).when_full(WhenFull::Heap).build().unwrap();
    /// let a = RingAlloc::from(ring);
    /// assert_eq!(a.ring().when_full(), WhenFull::Heap);
    /// ```
    fn from(ring: Ring) -> Self {
        Self::from_ring(ring, false).unwrap_or_else(|_| Self::no_memory())
    }
}

impl Clone for RingAlloc {
    /// Another handle to the same ring.
    #[inline]
    fn clone(&self) -> Self {
        let handles = &self.shared().handles;
        handles.set(handles.get() + 1);
        RingAlloc {
            shared: self.shared,
        }
    }
}

impl PartialEq for RingAlloc {
    /// Whether both handles share one ring.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.shared == other.shared
    }
}

impl Eq for RingAlloc {}

impl Hash for RingAlloc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shared.hash(state);
    }
}

impl fmt::Debug for RingAlloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingAlloc")
            .field("ring", &self.shared().ring)
            .field("heap_threshold", &self.shared().threshold.get())
            .finish()
    }
}

// SAFETY: as for `Ring` (see its impl): blocks stay valid until deallocated, whichever
// clone or thread releases them, and whether or not the ring is still alive; clones
// share the ring, so any clone may release or resize another's allocations.
unsafe impl Allocator for RingAlloc {
    // Always inlined: with `#[inline]` the compiler kept it out of line in a `Vec`'s
    // first allocation, where the call costs as much as the fast path itself (a cursor
    // compare and move; the slow path stays out of line).
    #[inline(always)]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.allocate_any(layout)
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        super::zeroed(self.allocate_any(layout))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the `Allocator::deallocate` contract.
        unsafe { self.deallocate_any(ptr, layout) }
    }

    #[inline(always)]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow` contract.
        unsafe { self.resize_any(ptr, old, new, false, false) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow_zeroed` contract.
        unsafe { self.resize_any(ptr, old, new, true, false) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::shrink` contract.
        unsafe { self.resize_any(ptr, old, new, false, true) }
    }
}
