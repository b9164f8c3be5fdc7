//! `OneRingAlloc`: a zero-sized allocator over each thread's own ring.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use super::{Source, DEFAULT_HEAP_THRESHOLD};
use crate::sync::Cell;
use crate::tls;

std::thread_local! {
    /// This thread's heap threshold for `OneRingAlloc`.
    static THRESHOLD: Cell<usize> = const { Cell::new(DEFAULT_HEAP_THRESHOLD) };
}

/// This thread's heap threshold (the default while the thread is being torn down).
#[inline(always)]
fn threshold() -> usize {
    THRESHOLD
        .try_with(Cell::get)
        .unwrap_or(DEFAULT_HEAP_THRESHOLD)
}

/// Runs `f` with this thread's ring if it already exists and the thread is not being
/// torn down; `None` otherwise. The inlined part of [`with_source`].
#[inline(always)]
fn with_existing_source<R>(f: impl FnOnce(Source<'_>) -> R) -> Option<R> {
    let threshold = threshold();
    tls::with_existing_ring(|ring| f(Source::new(ring, threshold)))
}

/// Runs `f` with this thread's ring, or with the heap alone while the thread is being
/// torn down (its ring is gone) or its ring cannot be made. `f` only captures the
/// request (`Copy`), so the slow path can run it again.
#[inline(always)]
fn with_source<R, F: FnOnce(Source<'_>) -> R + Copy>(f: F) -> R {
    match with_existing_source(f) {
        Some(r) => r,
        None => with_new_source(threshold(), f),
    }
}

/// The first request on a thread (which creates its ring), or one during teardown.
#[cold]
#[inline(never)]
fn with_new_source<R, F: FnOnce(Source<'_>) -> R + Copy>(threshold: usize, f: F) -> R {
    match tls::with_ring(|ring| f(Source::new(ring, threshold))) {
        Some(r) => r,
        None => f(Source::HEAP),
    }
}

/// `grow`/`grow_zeroed`: the fast path (the latest allocation of this thread's ring
/// grows from the window's front) inlined, with one look-up of the ring; everything
/// else out of line, so that the caller's loop does not save and restore registers for
/// paths it rarely takes.
///
/// # Safety
/// The `Allocator::grow` contract, for an allocation of `OneRingAlloc`.
#[inline(always)]
unsafe fn grow(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: the caller's contract, forwarded; the source is this thread's own ring.
    let fast = with_existing_source(|s| unsafe { s.grow_latest(ptr, old, new, zeroed) });
    match fast {
        Some(Some(block)) => Ok(block),
        // SAFETY: the caller's contract, forwarded; nothing changed above.
        _ => unsafe { grow_rest(ptr, old, new, zeroed) },
    }
}

/// The rest of [`grow`]: in place by the walk, by `realloc`, or by moving.
///
/// # Safety
/// As for [`grow`].
#[inline(never)]
unsafe fn grow_rest(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: the caller's contract, forwarded.
    with_source(|s| unsafe { s.grow_slow(ptr, old, new, zeroed) })
}

/// Releases an allocation made on any thread; when it lies in this thread's ring, the
/// ring may also move its head back to it (`ring::release_unique_in`).
///
/// # Safety
/// As for `super::deallocate`.
#[inline]
unsafe fn release(ptr: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return;
    }
    // SAFETY: forwarded; the ring passed is this thread's own.
    let done = tls::with_existing_ring(|ring| unsafe {
        Source::new(ring, DEFAULT_HEAP_THRESHOLD).deallocate(ptr, layout)
    });
    if done.is_none() {
        // SAFETY: forwarded from this function's contract.
        unsafe { super::deallocate(ptr, layout) }
    }
}

/// A zero-sized allocator backed by a ring per thread: `Copy`, `Send + Sync`, so
/// `Vec<T, OneRingAlloc>` and `Box<T, OneRingAlloc>` cost no space for the allocator
/// and may cross threads.
///
/// Each thread allocates from its own ring, the one [`ringmem::tls`](crate::tls) uses
/// (1 MiB, [`WhenFull::Heap`](crate::WhenFull::Heap) unless
/// [`tls::configure`] says otherwise). Allocations may be freed
/// on any thread: a release is the region header's `Release` store. When a thread
/// exits, its ring is dropped; blocks that still hold allocations are freed by the
/// orphan sweep after the last of them is released, never before and never leaked.
/// While a thread is being torn down (its ring already gone), allocations come from
/// the global allocator.
///
/// `grow`/`shrink` work in place for allocations in the calling thread's ring; an
/// allocation made on another thread is moved when it grows (only the ring's own
/// thread may change its regions' lengths) and kept as it is when it shrinks.
/// Requests above [`heap_threshold`](Self::heap_threshold) bytes (default
/// [`RingAlloc::DEFAULT_HEAP_THRESHOLD`](crate::RingAlloc::DEFAULT_HEAP_THRESHOLD),
/// 256 KiB, per thread) go to the global allocator. Alignments up to
/// [`RingAlloc::MAX_ALIGN`](crate::RingAlloc::MAX_ALIGN) are served.
///
/// The name is ring-alloc's: see the migration table on [`RingAlloc`](crate::RingAlloc).
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// use ringmem::OneRingAlloc;
///
/// fn build() -> Vec<Box<u32, OneRingAlloc>, OneRingAlloc> {
///     let b = Box::new_in(42, OneRingAlloc);
///     let mut v = Vec::new_in(OneRingAlloc);
///     v.push(b);
///     v
/// }
/// // Made on a thread that exits, used and freed on this one.
/// let v = std::thread::spawn(build).join().unwrap();
/// assert_eq!(*v[0], 42);
/// assert_eq!(core::mem::size_of_val(&v[0]), core::mem::size_of::<usize>());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OneRingAlloc;

impl OneRingAlloc {
    /// This thread's threshold: requests above this many bytes go to the global
    /// allocator.
    ///
    /// ```
    /// use ringmem::{OneRingAlloc, RingAlloc};
    /// assert_eq!(OneRingAlloc.heap_threshold(), RingAlloc::DEFAULT_HEAP_THRESHOLD);
    /// ```
    #[inline]
    pub fn heap_threshold(&self) -> usize {
        threshold()
    }

    /// Sets this thread's threshold (other threads keep theirs); see
    /// [`RingAlloc::set_heap_threshold`](crate::RingAlloc::set_heap_threshold).
    ///
    /// ```
    /// use ringmem::OneRingAlloc;
    /// std::thread::spawn(|| {
    ///     OneRingAlloc.set_heap_threshold(1024);
    ///     assert_eq!(OneRingAlloc.heap_threshold(), 1024);
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    #[inline]
    pub fn set_heap_threshold(&self, bytes: usize) {
        let _ = THRESHOLD.try_with(|t| t.set(bytes));
    }

    /// Allocates a block for `layout` from this thread's ring (as
    /// [`Allocator::allocate`], callable without importing the trait, as in ring-alloc).
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use ringmem::OneRingAlloc;
    /// let layout = Layout::new::<[u8; 100]>();
    /// let p = OneRingAlloc.allocate(layout).unwrap();
    /// let addr = p.cast::<u8>().as_ptr() as usize;
    /// // Freed on another thread: one atomic store.
    /// std::thread::spawn(move || {
    ///     let p = core::ptr::NonNull::new(addr as *mut u8).unwrap();
    ///     // SAFETY: allocated above with this layout, not used elsewhere.
    ///     unsafe { OneRingAlloc.deallocate(p, layout) };
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        with_source(|s| s.allocate(layout))
    }

    /// Releases a block (as [`Allocator::deallocate`]), on any thread; a no-op for
    /// zero-size layouts.
    ///
    /// # Safety
    /// - `ptr` was allocated by `OneRingAlloc` (on any thread) for `layout`, or for a
    ///   layout that `layout` fits, and is not used afterwards.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use ringmem::OneRingAlloc;
    /// let p = OneRingAlloc.allocate(Layout::new::<u32>()).unwrap();
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { OneRingAlloc.deallocate(p.cast(), Layout::new::<u32>()) };
    /// ```
    #[inline]
    pub unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from this function's contract.
        unsafe { release(ptr, layout) }
    }
}

// SAFETY: blocks stay valid until deallocated: a thread's ring outlives neither the
// thread nor its allocations' validity (a dropped ring's blocks are freed by the orphan
// sweep only after their last region is released). Release is one atomic store, valid
// on any thread; in-place resizing happens only in the calling thread's own ring
// (`Ring::block_of`), so no two threads rewrite one block's region lengths.
unsafe impl Allocator for OneRingAlloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        with_source(|s| s.allocate(layout))
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        with_source(|s| s.allocate_zeroed(layout))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the `Allocator::deallocate` contract.
        unsafe { release(ptr, layout) }
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow` contract.
        unsafe { grow(ptr, old, new, false) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow_zeroed` contract.
        unsafe { grow(ptr, old, new, true) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::shrink` contract.
        with_source(|s| unsafe { s.shrink(ptr, old, new) })
    }
}
