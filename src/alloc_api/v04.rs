//! allocator-api2 0.4's `Allocator` (feature `allocator-api2-04`), beside 0.2's.
//!
//! The two versions' traits have the same methods and the same contract, but are two
//! traits: a collection of 0.4 (what `cargo add allocator-api2` gives) does not accept
//! an allocator of 0.2 (what hashbrown and bumpalo use). Each impl here hands every
//! call to the type's 0.2 impl, so both versions share one allocator, one memory and
//! one set of tests.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::Allocator as Allocator02;
use allocator_api2_04::alloc::{AllocError, Allocator};

/// Implements 0.4's `Allocator` for each type by calling its 0.2 impl.
macro_rules! delegate_to_02 {
    ($($(#[$attr:meta])* $ty:ty),* $(,)?) => {$(
        $(#[$attr])*
        // SAFETY: every method is the 0.2 impl's (whose SAFETY comment covers it), and
        // the two traits state the same contract for each method, so a block that one
        // hands out may be passed back through the other.
        unsafe impl Allocator for $ty {
            #[inline]
            fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                Allocator02::allocate(self, layout).map_err(|_| AllocError)
            }

            #[inline]
            fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                Allocator02::allocate_zeroed(self, layout).map_err(|_| AllocError)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                // SAFETY: the caller keeps `deallocate`'s contract, the same in both.
                unsafe { Allocator02::deallocate(self, ptr, layout) }
            }

            #[inline]
            unsafe fn grow(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                // SAFETY: the caller keeps `grow`'s contract, the same in both.
                unsafe { Allocator02::grow(self, ptr, old, new) }.map_err(|_| AllocError)
            }

            #[inline]
            unsafe fn grow_zeroed(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                // SAFETY: the caller keeps `grow_zeroed`'s contract, the same in both.
                unsafe { Allocator02::grow_zeroed(self, ptr, old, new) }.map_err(|_| AllocError)
            }

            #[inline]
            unsafe fn shrink(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                // SAFETY: the caller keeps `shrink`'s contract, the same in both.
                unsafe { Allocator02::shrink(self, ptr, old, new) }.map_err(|_| AllocError)
            }
        }
    )*};
}

delegate_to_02!(
    crate::Ring,
    super::RingAlloc,
    #[cfg(feature = "std")]
    super::OneRingAlloc,
);
