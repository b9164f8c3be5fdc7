//! The one audited door to the global allocator.
//!
//! Every raw allocation and deallocation in the crate goes through these two functions,
//! so zero sizes, alignment and `dealloc` layouts are checked in one place. `clippy.toml`
//! enforces it: it disallows the allocator's functions everywhere but here.
#![allow(clippy::disallowed_methods)] // the one place allowed to call the allocator

use core::alloc::Layout;
use core::ptr::NonNull;

/// The global allocator; under `cfg(loom)`, loom's tracking wrapper around it, so a
/// model fails when a block is leaked or freed twice.
#[cfg(not(loom))]
mod sys {
    #[cfg(feature = "allocator-api2")]
    pub(super) use alloc::alloc::realloc;
    pub(super) use alloc::alloc::{alloc, dealloc};
}

#[cfg(loom)]
mod sys {
    pub(super) use crate::sync::heap::{alloc, dealloc};

    /// `realloc` through loom's tracked `alloc` and `dealloc` (loom has none).
    #[cfg(feature = "allocator-api2")]
    ///
    /// # Safety
    /// As `alloc::alloc::realloc`.
    pub(super) unsafe fn realloc(
        ptr: *mut u8,
        layout: core::alloc::Layout,
        new_size: usize,
    ) -> *mut u8 {
        // SAFETY: the caller guarantees a valid layout for `new_size` and alignment.
        let new_layout =
            unsafe { core::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: non-zero size (the caller's contract).
        let new = unsafe { alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct; `min` of the sizes fits both.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Allocates `layout`, or returns `None` when the allocator refuses.
///
/// Zero-sized layouts are never passed to the global allocator: they are a bug in the
/// caller, caught here by a debug assertion and answered with `None` in release builds.
#[inline]
pub(crate) fn alloc(layout: Layout) -> Option<NonNull<u8>> {
    debug_assert!(
        layout.size() != 0,
        "raw::alloc called with a zero-sized layout"
    );
    if layout.size() == 0 {
        return None;
    }
    // SAFETY: the layout has a non-zero size, checked just above.
    NonNull::new(unsafe { sys::alloc(layout) })
}

/// Resizes memory obtained from [`alloc()`] (or this function) to `new_size` bytes with
/// the same alignment, keeping the first `min(old, new)` bytes; `None` when the
/// allocator refuses, in which case the old memory is untouched and still owned.
///
/// # Safety
/// - `ptr` was returned by [`alloc()`] or [`realloc`] with exactly this `layout`, and
///   has not been deallocated since;
/// - `new_size` is non-zero and `Layout::from_size_align(new_size, layout.align())`
///   is valid;
/// - on success nothing touches `ptr` afterwards (the memory may have moved).
#[cfg(feature = "allocator-api2")] // only `alloc_api` resizes in place
#[inline]
pub(crate) unsafe fn realloc(
    ptr: NonNull<u8>,
    layout: Layout,
    new_size: usize,
) -> Option<NonNull<u8>> {
    debug_assert!(new_size != 0, "raw::realloc called with a zero new size");
    // SAFETY: forwarded from this function's contract.
    NonNull::new(unsafe { sys::realloc(ptr.as_ptr(), layout, new_size) })
}

/// Returns memory obtained from [`alloc()`] to the global allocator.
///
/// # Safety
/// - `ptr` was returned by [`alloc()`] with exactly this `layout`;
/// - it has not been deallocated since, and nothing will touch it afterwards.
#[inline]
pub(crate) unsafe fn dealloc(ptr: NonNull<u8>, layout: Layout) {
    // SAFETY: forwarded from this function's contract.
    unsafe { sys::dealloc(ptr.as_ptr(), layout) }
}
