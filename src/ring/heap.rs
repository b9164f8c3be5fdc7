//! Regions served by the global allocator (`WhenFull::Heap`, and a pool's frames that no
//! free run holds), with the same header as ring regions so that every buffer type
//! releases through one path.
//!
//! Layout: `A = max(align, WORD)` (a power of two that holds the header, and for a
//! region that carries a value the pointer to it too, in the word before the header);
//! the allocation is `A + data` bytes aligned to `A`, the header sits in the word just
//! before the data, and its `words` field holds the whole allocation size, so the
//! release path rebuilds the exact layout from the header and the buffer's alignment.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::block::Claim;
use super::header::{pack, span, Header, CARRY, HDR, HEAP, MAX_WORDS, WORD};
use crate::raw;
use alloc::boxed::Box;

/// What a region made by [`claim_carrying`] carries: a value dropped once the region is
/// freed, on the thread that frees it.
#[cfg(real_std)]
pub(crate) type Carried = Box<dyn Send>;

/// Bytes before the data of a heap region of alignment `align` (see the module docs).
fn prefix(align: usize, carry: bool) -> usize {
    let before = if carry { HDR + WORD } else { HDR };
    align.max(WORD).max(before.next_power_of_two())
}

fn layout(bytes: usize, align: usize, carry: bool) -> Option<(Layout, usize)> {
    let a = prefix(align, carry);
    let total = a.checked_add(bytes.checked_add(WORD - 1)? & !(WORD - 1))?;
    if total / WORD > MAX_WORDS {
        return None;
    }
    Some((Layout::from_size_align(total, a).ok()?, a))
}

/// The word before the header of a region made by [`claim_carrying`]: where the pointer
/// to what it carries is.
fn carried_slot(hdr: NonNull<Header>) -> *mut *mut Box<dyn Send> {
    // The slot lies in the allocation's prefix (`prefix` leaves a word before the
    // header), so the offset stays inside it.
    hdr.as_ptr().cast::<u8>().wrapping_sub(WORD).cast()
}

/// Allocates a heap region for `bytes` data bytes aligned to `align`, marked with
/// `init` handles.
pub(crate) fn claim(bytes: usize, align: usize, init: u64) -> Option<Claim> {
    claim_marked(bytes, align, init, false)
}

/// [`claim`], for a region that carries `value` until it is freed (by the release of
/// its last handle, on any thread), which then drops it: a value that must live exactly
/// as long as the region (what paid for it). `Err(value)` when the allocator refuses.
#[cfg(real_std)]
pub(crate) fn claim_carrying(
    bytes: usize,
    align: usize,
    init: u64,
    value: Carried,
) -> Result<Claim, Carried> {
    let Some(c) = claim_marked(bytes, align, init, true) else {
        return Err(value);
    };
    // SAFETY: the slot lies in the fresh allocation's prefix, word-aligned (`a` is a
    // multiple of WORD, as HDR is), and nothing else refers to it.
    unsafe { carried_slot(c.hdr).write(Box::into_raw(Box::new(value))) };
    Ok(c)
}

/// The bytes of the allocation (the region's span) that [`claim_carrying`] makes for
/// `bytes` data bytes aligned to `align`; `None` past the largest region.
#[cfg(real_std)]
pub(crate) fn carrying_span(bytes: usize, align: usize) -> Option<usize> {
    Some(layout(bytes, align, true)?.0.size())
}

/// [`claim`], with the header's `CARRY` bit and the prefix it needs when `carry`.
fn claim_marked(bytes: usize, align: usize, init: u64, carry: bool) -> Option<Claim> {
    let (layout, a) = layout(bytes, align, carry)?;
    let base = raw::alloc(layout)?;
    // SAFETY: `a <= layout.size()`, so `base + a` is in (or one past) the allocation,
    // and `base + a - HDR >= base` since `a >= HDR`.
    let (data, hdr) = unsafe {
        let data = base.as_ptr().add(a);
        (data, data.sub(HDR).cast::<Header>())
    };
    let mark = if carry { HEAP | CARRY } else { HEAP };
    // SAFETY: `hdr` is inside the fresh allocation, aligned to WORD (as `a` is).
    unsafe { hdr.write(Header::new(pack(layout.size(), init) | mark)) };
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
    debug_assert_eq!(h & CARRY, 0, "a carrying region is never resized");
    let (new_layout, a) = layout(bytes, align, false)?;
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

/// Frees a heap region whose last handle is gone, and then drops what it carries, if
/// anything.
///
/// # Safety
/// - `hdr` leads a heap region created by [`claim`] or [`claim_carrying`] with this
///   `align`, and `h` is its header value (at least its `CARRY` bit and `words`);
/// - no handle refers to it any more.
pub(crate) unsafe fn free(hdr: NonNull<Header>, h: u64, align: usize) {
    let carry = h & CARRY != 0;
    let a = prefix(align, carry);
    // SAFETY: a carrying region's slot holds the pointer `claim_carrying` wrote, read
    // before the allocation is freed.
    let carried = carry.then(|| unsafe { carried_slot(hdr).read() });
    // SAFETY: the header sits `a - HDR` bytes after the allocation base (see `claim`).
    let base = unsafe { NonNull::new_unchecked(hdr.as_ptr().cast::<u8>().add(HDR).sub(a)) };
    // SAFETY: the same size and alignment as in `claim`; no handle remains (contract).
    unsafe { raw::dealloc(base, Layout::from_size_align_unchecked(span(h), a)) }
    if let Some(carried) = carried {
        // SAFETY: made by `Box::into_raw` in `claim_carrying`, taken back once: the
        // region is freed once.
        drop(unsafe { Box::from_raw(carried) });
    }
}
