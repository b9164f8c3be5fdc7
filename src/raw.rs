//! The one audited door to the global allocator.
//!
//! Every raw allocation and deallocation in the crate goes through these two functions,
//! so zero sizes, alignment and `dealloc` layouts are checked in one place.

use core::alloc::Layout;
use core::ptr::NonNull;

/// Allocates `layout`, or returns `None` when the allocator refuses.
///
/// Zero-sized layouts are never passed to the global allocator: they are a bug in the
/// caller, caught here by a debug assertion and answered with `None` in release builds.
#[inline]
pub(crate) fn alloc(layout: Layout) -> Option<NonNull<u8>> {
    debug_assert!(layout.size() != 0, "raw::alloc called with a zero-sized layout");
    if layout.size() == 0 {
        return None;
    }
    // SAFETY: the layout has a non-zero size, checked just above.
    NonNull::new(unsafe { alloc::alloc::alloc(layout) })
}

/// Returns memory obtained from [`alloc`] to the global allocator.
///
/// # Safety
/// - `ptr` was returned by [`alloc`] with exactly this `layout`;
/// - it has not been deallocated since, and nothing will touch it afterwards.
#[inline]
pub(crate) unsafe fn dealloc(ptr: NonNull<u8>, layout: Layout) {
    // SAFETY: forwarded from this function's contract.
    unsafe { alloc::alloc::dealloc(ptr.as_ptr(), layout) }
}
