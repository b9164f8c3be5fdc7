//! Regions served by the global allocator (`WhenFull::Heap`), with the same header
//! as ring regions so that every buffer type releases through one path.
//!
//! Layout: `A = max(align, WORD)`; the allocation is `A + data` bytes aligned to `A`,
//! the header sits in the word just before the data, and its `words` field holds the
//! whole allocation size, so the release path rebuilds the exact layout from the
//! header and the buffer's alignment.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::block::Claim;
use super::header::{pack, span, Header, HDR, HEAP, MAX_WORDS, WORD};
use crate::raw;

fn layout(bytes: usize, align: usize) -> Option<(Layout, usize)> {
    let a = align.max(WORD).max(HDR.next_power_of_two());
    let total = a.checked_add(bytes.checked_add(WORD - 1)? & !(WORD - 1))?;
    if total / WORD > MAX_WORDS {
        return None;
    }
    Some((Layout::from_size_align(total, a).ok()?, a))
}

/// Allocates a heap region for `bytes` data bytes aligned to `align`, marked with
/// `init` handles.
pub(crate) fn claim(bytes: usize, align: usize, init: u64) -> Option<Claim> {
    let (layout, a) = layout(bytes, align)?;
    let base = raw::alloc(layout)?;
    // SAFETY: `a <= layout.size()`, so `base + a` is in (or one past) the allocation,
    // and `base + a - HDR >= base` since `a >= HDR`.
    let (data, hdr) = unsafe {
        let data = base.as_ptr().add(a);
        (data, data.sub(HDR).cast::<Header>())
    };
    // SAFETY: `hdr` is inside the fresh allocation, aligned to WORD (as `a` is).
    unsafe { hdr.write(Header::new(pack(layout.size(), init) | HEAP)) };
    Some(Claim {
        // SAFETY: derived from a non-null allocation.
        hdr: unsafe { NonNull::new_unchecked(hdr) },
        // SAFETY: as above.
        data: unsafe { NonNull::new_unchecked(data) },
        cap: layout.size() - a,
    })
}

/// Resizes a heap region held by exactly one handle so that it holds `bytes` data
/// bytes, with the global allocator's `realloc` (which may move it). The first
/// `min(old, bytes)` data bytes are kept. `None` leaves the region as it was. Only the
/// allocator adapters resize heap regions (a buffer that outgrows a heap region moves
/// back to the ring when it has room).
///
/// # Safety
/// - `hdr` leads a live heap region created by [`claim`] (or this function) with this
///   `align`, and the caller holds its only handle;
/// - on success the caller uses only the returned claim, never the old pointers.
#[cfg(feature = "allocator-api2")]
pub(crate) unsafe fn resize(hdr: NonNull<Header>, align: usize, bytes: usize) -> Option<Claim> {
    use super::header::count;
    use crate::sync::Ordering;
    // SAFETY: the caller's handle keeps the region, hence its header, alive.
    // Relaxed: only the holder of a unique handle changes this header.
    let h = unsafe { hdr.as_ref() }.load(Ordering::Relaxed);
    debug_assert!(
        h & HEAP != 0 && count(h) == 1,
        "heap resize of header {h:#x} at {hdr:p}"
    );
    let (new_layout, a) = layout(bytes, align)?;
    // SAFETY: the header sits `a - HDR` bytes after the allocation base (see `claim`).
    let base = unsafe { NonNull::new_unchecked(hdr.as_ptr().cast::<u8>().add(HDR).sub(a)) };
    // SAFETY: the size and alignment the region was allocated with (see `free`).
    let old = unsafe { Layout::from_size_align_unchecked(span(h), a) };
    // SAFETY: `base` came from `raw::alloc`/`raw::realloc` with `old`; `new_layout` is a
    // valid layout of the same alignment; the old pointers are not used on success.
    let base = unsafe { raw::realloc(base, old, new_layout.size()) }?;
    // SAFETY: `a < new_layout.size()`, so data and header lie inside the allocation,
    // the header word-aligned (as `a` is).
    let (data, hdr) = unsafe {
        let data = base.as_ptr().add(a);
        (data, data.sub(HDR).cast::<Header>())
    };
    // SAFETY: as above; the region is still held by the caller's handle alone.
    unsafe { hdr.write(Header::new(pack(new_layout.size(), count(h)) | HEAP)) };
    Some(Claim {
        // SAFETY: derived from a non-null allocation.
        hdr: unsafe { NonNull::new_unchecked(hdr) },
        // SAFETY: as above.
        data: unsafe { NonNull::new_unchecked(data) },
        cap: new_layout.size() - a,
    })
}

/// Frees a heap region whose last handle is gone.
///
/// # Safety
/// - `hdr` leads a heap region created by [`claim`] with this `align`, and `h` is its
///   header value;
/// - no handle refers to it any more.
pub(crate) unsafe fn free(hdr: NonNull<Header>, h: u64, align: usize) {
    let a = align.max(WORD).max(HDR.next_power_of_two());
    // SAFETY: the header sits `a - HDR` bytes after the allocation base (see `claim`).
    let base = unsafe { NonNull::new_unchecked(hdr.as_ptr().cast::<u8>().add(HDR).sub(a)) };
    // SAFETY: the same size and alignment as in `claim`; no handle remains (contract).
    unsafe { raw::dealloc(base, Layout::from_size_align_unchecked(span(h), a)) }
}
