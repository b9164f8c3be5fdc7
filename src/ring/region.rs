//! The region API: what a holder of ring memory does with its region, in one place.
//! The buffers (`buf/`), the allocator adapters (`alloc_api/`) and the codec pool
//! (through `ExtBuf`) go through these, never through a block's window protocol
//! (`block.rs`) or a header's bits (`header.rs`).
//!
//! A region is led by its one-word header and lies either in one of a ring's blocks or
//! on the heap (`heap.rs`: [`WhenFull::Heap`](super::WhenFull::Heap) fallbacks and the
//! adapters' large requests), with the same header, so every holder releases it the
//! same way. The steps, by who may take them:
//!
//! | step            | on the ring's thread (`&Ring`, not `Sync`)                     | on any thread |
//! |-----------------|----------------------------------------------------------------|---------------|
//! | claim           | [`Ring::claim`] (the policy); [`Ring::claim_at_head`], [`Ring::claim_at_head_aligned`] (the window's front only); `claim_in` (the ring or the heap, by a size threshold, handed out by address) | |
//! | resize in place | [`Ring::grow_latest`] (the latest region, from the window), [`Ring::grow_in_place`] (over free successors), [`Ring::shrink_in_place`], [`Ring::relocate`] (within its block); `resize_in` (either, or `realloc` for a heap region, by address) | |
//! | release         | [`release_unique_in`] (the latest region goes back to its block's window) | [`release_unique`], [`retain_shared`], [`release_shared`] |
//! | which block     | [`Ring::block_len_of`] (`None`: a heap region, or another ring's) | `header_of` (from the data address) |
//!
//! "Is it the latest region" (it ends where the current block's window starts) is the
//! test that [`Ring::grow_latest`] and [`release_unique_in`] make, without loading the
//! header when the caller knows the region's span. "Is it a heap region" is the
//! header's `HEAP` bit, which the releases and `resize_in` read. `claim_in` and
//! `resize_in` exist for the allocator adapters only (with `allocator-api2`): a buffer
//! has no size threshold, and one that outgrows a heap region moves back to the ring
//! when it has room.
//!
//! # Finding the header
//!
//! An allocator's `deallocate(ptr, layout)` gets only the data pointer, so the
//! adapters' regions are handed out by address ([`claim_in`], [`resize_in`]) and found
//! again by [`header_of`]. The word just before the data always tells where the header
//! is:
//!
//! - alignment ≤ 8: the ring places the data right after the header, so the header
//!   *is* the word at `ptr - 8` (no load needed to find it);
//! - alignment > 8: the ring may put padding between header and data. When it does
//!   (`pad > 8`), `hand_out` writes `pad` into the word at `ptr - 8`, inside the
//!   padding. `pad` is a multiple of 8, so that word is even, while a header of a
//!   region held by one handle has count 1 in its low bits and is odd. Reading that
//!   one word tells "this is the header" (odd) from "the header is `pad` bytes back"
//!   (even).
//!
//! The tag costs one store per over-aligned allocation that got padding and one load
//! on its release (the header load that the release does anyway, when there is no
//! padding); it works for every alignment up to [`MAX_ALIGN`] and for heap regions,
//! whose header always sits right before the data. The header is reached from the
//! address alone, with *exposed* provenance ([`expose`]): a collection may narrow the
//! pointer it gives back to the value (allocator-api2's `Box` does), and under Miri's
//! Stacked Borrows the header, outside the value, is then out of its reach.

use core::ptr::NonNull;

use super::block::{BlockCtl, Claim, MAX_ALIGN};
use super::header::{count, round_up, span, Header, CARRY, COUNT_MASK, HDR, HEAP, MAX_REFS, WORD};
use super::{heap, orphan, slots, Ring};
use crate::sync::{AcquireCount, Ordering};

impl Ring {
    /// Claims a region for `bytes` data bytes aligned to `align` (a power of two),
    /// marked with `init` handles, per the ring's policy: the front of the current
    /// block's window when it holds the region, else the window extended over the free
    /// regions after it, else the walk, else the [`WhenFull`](super::WhenFull) policy.
    #[inline]
    pub(crate) fn claim(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        debug_assert!(align.is_power_of_two());
        if bytes <= self.block_len && align <= MAX_ALIGN {
            let head = if align <= WORD {
                self.claim_at_head(bytes, init)
            } else {
                self.claim_at_head_aligned(bytes, align, init)
            };
            if head.is_some() {
                return head;
            }
            // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
            let cur = unsafe { self.cur.get().as_ref() };
            if let Some(c) = cur.claim_extended(bytes, align, init) {
                return Some(c);
            }
            #[cfg(real_std)]
            if self.when_full == super::WhenFull::Grow {
                self.give_back_if_due();
            }
            if let Some(c) = cur.claim_slow(bytes, align, init) {
                return Some(c);
            }
        }
        self.claim_full(bytes, align, init)
    }

    /// The fast path of [`claim`](Self::claim) for alignments up to [`WORD`]: the front
    /// of the current block's window, if it holds `bytes` (at most `isize::MAX`, as a
    /// `Layout`'s size); `None` means "call `claim`".
    #[inline(always)]
    pub(crate) fn claim_at_head(&self, bytes: usize, init: u64) -> Option<Claim> {
        debug_assert!(bytes <= isize::MAX as usize, "{bytes} bytes");
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
        // No overflow: `bytes <= isize::MAX`, so rounding up and adding a word fit.
        unsafe { self.cur.get().as_ref() }.bump(HDR + round_up(bytes, WORD), init)
    }

    /// [`claim_at_head`](Self::claim_at_head) for data aligned to `align`: only when
    /// the window's front already puts the data there; `None` means "call `claim`".
    #[inline]
    pub(crate) fn claim_at_head_aligned(
        &self,
        bytes: usize,
        align: usize,
        init: u64,
    ) -> Option<Claim> {
        debug_assert!(bytes <= isize::MAX as usize, "{bytes} bytes");
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
        // No overflow: `bytes <= isize::MAX`, so rounding up and adding a word fit.
        unsafe { self.cur.get().as_ref() }.bump_aligned(HDR + round_up(bytes, WORD), align, init)
    }

    /// The block of this ring whose region area holds `hdr`, if any (`None` for a
    /// heap region or a region of another ring). Checks the current block first.
    #[inline]
    fn block_of(&self, hdr: NonNull<Header>) -> Option<&BlockCtl> {
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
        let cur = unsafe { self.cur.get().as_ref() };
        if cur.contains(hdr) {
            return Some(cur);
        }
        self.block_of_slow(hdr)
    }

    #[cold]
    fn block_of_slow(&self, hdr: NonNull<Header>) -> Option<&BlockCtl> {
        self.blocks()
            .iter()
            .map(|b| {
                // SAFETY: the ring's blocks stay alive while the ring does.
                unsafe { b.as_ref() }
            })
            .find(|b| b.contains(hdr))
    }

    /// The region bytes of the block of this ring that holds the region led by `hdr`
    /// (the most a region of it can span); `None` for a heap region or a region of
    /// another ring, which this ring cannot resize.
    #[inline]
    pub(crate) fn block_len_of(&self, hdr: NonNull<Header>) -> Option<usize> {
        self.block_of(hdr).map(BlockCtl::len)
    }

    /// Grows the latest region of the current block, led by `hdr` and `span` bytes
    /// long, from the front of the window, without loading its header: to `want`
    /// bytes, or to all the window holds if that is less but at least `min`; `sweep`:
    /// see [`BlockCtl::grow_latest`]. Returns the new span; `None` (nothing changed):
    /// not the latest region, or the window is too small.
    ///
    /// # Safety
    /// As for [`BlockCtl::grow_latest`]: the caller, on this ring's thread, holds the
    /// unique handle of the region led by `hdr`; `span` is at most its span, and `min`
    /// and `want` are multiples of [`WORD`] with `span <= min <= want`.
    #[inline(always)]
    pub(crate) unsafe fn grow_latest(
        &self,
        hdr: NonNull<Header>,
        span: usize,
        min: usize,
        want: usize,
        sweep: bool,
    ) -> Option<usize> {
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is; the rest
        // is the caller's contract.
        unsafe {
            self.cur
                .get()
                .as_ref()
                .grow_latest(hdr, span, min, want, sweep)
        }
    }

    /// Grows the region led by `hdr`, in one of this ring's blocks, in place to span at
    /// least `want` bytes (a multiple of [`WORD`]): from the window if it is the latest,
    /// else over the free regions after it. Returns the new span; `None` (nothing
    /// changed) when the successors do not hold it, or the region is not this ring's.
    ///
    /// # Safety
    /// The caller, on this ring's thread, holds the unique handle of the region led by
    /// `hdr`.
    #[inline]
    pub(crate) unsafe fn grow_in_place(&self, hdr: NonNull<Header>, want: usize) -> Option<usize> {
        let block = self.block_of(hdr)?;
        if want > block.len() {
            return None;
        }
        block.grow_in_place(hdr, want)
    }

    /// Shrinks the region led by `hdr`, in one of this ring's blocks, to span `keep`
    /// bytes (a multiple of [`WORD`], at least the header and the data in use), giving
    /// the tail back to the ring if it holds a header. Returns the region's span
    /// afterwards; `None` (nothing changed) for a region that is not this ring's.
    ///
    /// # Safety
    /// The caller, on this ring's thread, holds the unique handle of the region led by
    /// `hdr`.
    #[inline]
    pub(crate) unsafe fn shrink_in_place(
        &self,
        hdr: NonNull<Header>,
        keep: usize,
    ) -> Option<usize> {
        self.block_of(hdr)?.trim(hdr, keep);
        // The tail given back is room a producer may wait for.
        orphan::after_room(hdr);
        Some(region_span(hdr))
    }

    /// Splits the region led by `hdr`, in one of this ring's blocks, after `keep` bytes
    /// (a multiple of [`WORD`], at least the header and the data in use): the rest,
    /// if it holds `least` data bytes, becomes a region of its own with one handle (see
    /// [`BlockCtl::split`]). `None` (nothing changed): too short, or not this ring's.
    ///
    /// # Safety
    /// As for [`shrink_in_place`](Self::shrink_in_place).
    #[cfg(real_std)]
    #[inline]
    pub(crate) unsafe fn split_in_place(
        &self,
        hdr: NonNull<Header>,
        keep: usize,
        least: usize,
    ) -> Option<Claim> {
        self.block_of(hdr)?.split(hdr, keep, least)
    }

    /// Moves the region led by `hdr` (data right after its header, `len` bytes of it in
    /// use) to the first place of its block, in the order a claim walks, where `bytes`
    /// data bytes fit, its own region counted free (see [`BlockCtl::relocate`]).
    /// Returns the new region (one handle); `None` (nothing changed) when no place
    /// fits, or the region is not this ring's. With `lap`, it looks round the whole
    /// block, not only at the few regions of a claim's try.
    ///
    /// # Safety
    /// As for [`BlockCtl::relocate`]: the caller, on this ring's thread, holds the
    /// unique handle of the region, claimed with alignment at most [`WORD`], and on
    /// success uses neither it nor the old data again; `len <= bytes`.
    #[inline]
    pub(crate) unsafe fn relocate(
        &self,
        hdr: NonNull<Header>,
        len: usize,
        bytes: usize,
        lap: bool,
    ) -> Option<Claim> {
        let block = self.block_of(hdr)?;
        if lap {
            block.unstick();
        }
        // SAFETY: forwarded from this function's contract.
        let moved = unsafe { block.relocate(hdr, len, bytes) }?;
        // The place it left is room a producer may wait for.
        orphan::after_room(moved.hdr);
        Some(moved)
    }
}

/// The ordering of the unique release. Always `Release`; the loom models prove that the
/// known-bug mutant `mutant_relaxed_release` (a loom switch, see `sync::switch`) fails.
#[inline(always)]
fn release() -> Ordering {
    crate::sync::switch::weakened("mutant_relaxed_release", Ordering::Release)
}

/// Releases a region held by exactly one handle, on any thread.
///
/// # Safety
/// - `hdr` leads a region (ring or heap) whose only handle is the caller's, which
///   touches neither the region nor `hdr` afterwards;
/// - `align` is the alignment the region was claimed with.
#[inline]
pub(crate) unsafe fn release_unique(hdr: NonNull<Header>, align: usize) {
    // SAFETY: the region is alive until the store below (contract).
    let header = unsafe { hdr.as_ref() };
    // Relaxed: only this handle's thread changes the header of a uniquely held region.
    let h = header.load(Ordering::Relaxed);
    debug_assert_eq!(
        count(h),
        1,
        "unique release of a region with header {h:#x} at {hdr:p}"
    );
    if h & (HEAP | CARRY) == 0 {
        // Release: publishes every access to the region's bytes before the allocating
        // thread's Acquire load (`BlockCtl::extend`, or the walk) reuses them. One plain store.
        header.store(h & !COUNT_MASK, release());
        orphan::after_release(hdr);
    } else if h & HEAP == 0 {
        // SAFETY: a slot (`CARRY` on a ring header) with no handle left (contract).
        unsafe { slots::release(hdr) };
    } else {
        // SAFETY: a heap region with no handle left (contract).
        unsafe { heap::free(hdr, h, align) };
    }
}

/// [`release_unique`] on the ring's own thread, which also gives the region back to
/// its block's window when it was the latest allocation (see `BlockCtl::rewind`), so
/// an allocate-free loop, a `Vec` built and dropped over and over, or a message started
/// over reuses the same bytes instead of cycling through the block.
///
/// `span`: the region's span when the caller knows it without loading the header (an
/// adapter's allocation with alignment up to a word: `HDR + round_up(size, WORD)`, at
/// most the region's span); then only the current block's latest region goes back, and
/// with no header load. `None`: the header tells the span and the block, and a region
/// that ends its block while a failed walk left the window closed at the block start
/// goes back too (`BlockCtl::give_back`).
///
/// # Safety
/// As for [`release_unique`]; the caller is on `ring`'s thread (it holds `&Ring`), and a
/// `span` is at most the region's span.
#[inline(always)]
pub(crate) unsafe fn release_unique_in(
    ring: &Ring,
    hdr: NonNull<Header>,
    align: usize,
    span_known: Option<usize>,
) {
    let given_back = match span_known {
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is; the
        // caller's unique handle, given up here on the ring's thread, and `span` at
        // most the region's (contract).
        Some(span) => unsafe { ring.cur.get().as_ref().rewind(hdr, span) },
        // SAFETY: as above, with the region's own span.
        None => unsafe { rewind_loaded(ring, hdr) },
    };
    if given_back {
        // Room without a release store: its producers are woken all the same.
        orphan::after_room(hdr);
    } else {
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
        unsafe { ring.cur.get().as_ref() }.scan_from(hdr);
        // SAFETY: forwarded from this function's contract; nothing changed above but
        // the walk's scan position.
        unsafe { release_unique(hdr, align) }
    }
}

/// `BlockCtl::give_back` on the block of `ring` that holds the region led by `hdr`,
/// with the span its header tells; `false` for a heap region or another ring's.
///
/// # Safety
/// As for [`release_unique_in`].
#[inline]
unsafe fn rewind_loaded(ring: &Ring, hdr: NonNull<Header>) -> bool {
    // SAFETY: the region is alive until the caller's release (contract).
    // Relaxed: only this handle's thread changes the header of a uniquely held region.
    let h = unsafe { hdr.as_ref() }.load(Ordering::Relaxed);
    if h & (HEAP | CARRY) != 0 {
        return false; // a heap region, or a slot (which ends no block's window)
    }
    // The current block's latest region first: no block lookup on the usual path.
    // SAFETY: `cur` is one of the ring's blocks, alive while the ring is; the caller's
    // unique handle, given up on the ring's thread if this returns `true` (contract);
    // `span(h)` is the region's own span.
    if unsafe { ring.cur.get().as_ref().rewind(hdr, span(h)) } {
        return true;
    }
    // SAFETY: as above.
    unsafe { give_back_elsewhere(ring, hdr, span(h)) }
}

/// The rest of [`rewind_loaded`], out of line: the block that holds the region, and
/// the window closed at its start.
///
/// # Safety
/// As for [`release_unique_in`]; `span` is the region's own span.
#[cold]
#[inline(never)]
unsafe fn give_back_elsewhere(ring: &Ring, hdr: NonNull<Header>, span: usize) -> bool {
    // SAFETY: forwarded from this function's contract.
    ring.block_of(hdr)
        .is_some_and(|b| unsafe { b.give_back(hdr, span) })
}

/// Adds a handle to a shared (frozen) region.
///
/// # Safety
/// `hdr` leads a region held by at least one handle that the caller holds.
#[inline]
pub(crate) unsafe fn retain_shared(hdr: NonNull<Header>) {
    // SAFETY: the caller's handle keeps the region alive.
    let header = unsafe { hdr.as_ref() };
    // Relaxed: a new handle is made from an existing one, which already synchronises
    // with the region's owner (as `Arc::clone`).
    let prev = header.0.fetch_add(1, Ordering::Relaxed);
    if count(prev) >= MAX_REFS {
        header.0.fetch_sub(1, Ordering::Relaxed);
        panic!("ringmem: more than {MAX_REFS} handles to one frozen buffer");
    }
}

/// Drops one handle of a shared (frozen) region; `true` if it was the last.
///
/// # Safety
/// - `hdr` leads a region with at least one handle, the caller's, which touches neither
///   the region nor `hdr` afterwards;
/// - `align` is the alignment the region was claimed with.
#[inline]
pub(crate) unsafe fn release_shared(hdr: NonNull<Header>, align: usize) -> bool {
    // SAFETY: the region is alive until our decrement (contract).
    let header = unsafe { hdr.as_ref() };
    // Release: every handle's reads happen before the region is reused; the decrements
    // form a release sequence that the allocator's Acquire load (or the load below)
    // synchronises with.
    let prev = header.0.fetch_sub(1, Ordering::Release);
    if count(prev) == 1 {
        if prev & (HEAP | CARRY) == 0 {
            orphan::after_release(hdr);
        } else if prev & HEAP == 0 {
            // Pairs with the other handles' Release decrements, as in `Arc`.
            header.0.acquire_count();
            // SAFETY: the last handle of a slot (`CARRY` on a ring header) is gone.
            unsafe { slots::release(hdr) };
        } else {
            // Pairs with the other handles' Release decrements, as in `Arc`.
            header.0.acquire_count();
            // SAFETY: the last handle of a heap region is gone.
            unsafe { heap::free(hdr, prev & !COUNT_MASK, align) };
        }
    }
    count(prev) == 1
}

/// The span of the region led by `hdr` (held by the caller).
#[inline]
pub(crate) fn region_span(hdr: NonNull<Header>) -> usize {
    // SAFETY: callers hold a handle to the region, so the header is alive.
    span(unsafe { hdr.as_ref() }.load(Ordering::Relaxed))
}

/// Whether the region led by `hdr` (held by the caller) is a slot of a page of slots
/// (`slots.rs`): it is never resized or split.
#[cfg(real_std)]
#[inline]
pub(crate) fn is_slot(hdr: NonNull<Header>) -> bool {
    // SAFETY: as in `region_span`.
    unsafe { hdr.as_ref() }.load(Ordering::Relaxed) & (HEAP | CARRY) == CARRY
}

/// A region for `size` data bytes aligned to `align` (at most [`MAX_ALIGN`]), held by
/// one handle, for the allocator adapters, handed out by address (`hand_out`): from
/// `ring` while `size` is at most `threshold` (the window's front inlined, the walk and
/// the ring's policy out of line), else from the heap.
#[cfg(feature = "allocator-api2")]
#[inline(always)]
pub(crate) fn claim_in(
    ring: Option<&Ring>,
    size: usize,
    align: usize,
    threshold: usize,
) -> Option<NonNull<[u8]>> {
    let c = 'claim: {
        if let Some(ring) = ring {
            if size <= threshold {
                if align <= WORD {
                    if let Some(c) = ring.claim_at_head(size, 1) {
                        break 'claim c;
                    }
                }
                break 'claim claim_walk(ring, size, align)?;
            }
        }
        claim_heap(size, align)?
    };
    Some(hand_out(c, align))
}

// The tag scheme reads the header as the word before the data.
const _: () = assert!(HDR == WORD);

/// Exposes the provenance of `p`, a region's header or a chunk, so that a pointer
/// rebuilt from an address inside it ([`header_of`], the adapters' `chunk_of`) may
/// reach it. A cast, no instruction: exposing is an effect in the language's abstract
/// machine (what Miri checks), not in the generated code.
#[cfg(feature = "allocator-api2")]
#[inline(always)]
pub(crate) fn expose<T>(p: *mut T) {
    let _ = p as usize;
}

/// Turns a fresh claim of alignment `align` into the block handed to an adapter's
/// caller, writing the pad tag where the header is not the word before the data (see
/// "Finding the header" above).
#[cfg(feature = "allocator-api2")]
#[inline]
fn hand_out(c: Claim, align: usize) -> NonNull<[u8]> {
    expose(c.hdr.as_ptr());
    if align > WORD {
        let pad = c.data.as_ptr() as usize - c.hdr.as_ptr() as usize;
        if pad > HDR {
            debug_assert!(
                pad % WORD == 0 && pad <= align,
                "pad {pad} for align {align}"
            );
            // SAFETY: `pad > HDR`, so the word before the data lies in the region's
            // padding, after its header; it is word-aligned (the data is aligned to
            // `align > WORD`) and belongs to the caller's new region.
            unsafe {
                c.data
                    .as_ptr()
                    .sub(WORD)
                    .cast::<Header>()
                    .write(Header::new(pad as u64))
            };
        }
    }
    NonNull::slice_from_raw_parts(c.data, c.cap)
}

/// The header of the region whose data an adapter handed out at `ptr` (see "Finding
/// the header" above).
///
/// # Safety
/// - `ptr` is the data pointer of a live, non-zero-size allocation handed out by
///   [`claim_in`] or [`resize_in`] with alignment `align` (or one of its class: at most
///   [`WORD`], or equal), whose only handle the caller holds.
#[cfg(feature = "allocator-api2")]
#[inline]
pub(crate) unsafe fn header_of(ptr: NonNull<u8>, align: usize) -> NonNull<Header> {
    // Exposed provenance (above): the region was exposed when it was handed out.
    // SAFETY: every allocation has its header or pad tag in the word before the data,
    // inside its region (contract), so the address is not null.
    let word = unsafe { NonNull::new_unchecked((ptr.as_ptr() as usize - WORD) as *mut Header) };
    if align <= WORD {
        return word;
    }
    // SAFETY: as above: the word was written by the claim or by `hand_out`.
    // Relaxed: written by the allocating thread before the allocation reached this one,
    // through whatever synchronisation moved it here.
    let w = unsafe { word.as_ref() }.load(Ordering::Relaxed);
    if w & 1 != 0 {
        word
    } else {
        debug_assert!(
            w as usize > HDR && w as usize <= align && w as usize % WORD == 0,
            "bad pad tag {w:#x} before {ptr:p} (align {align})"
        );
        // SAFETY: the tag is the distance from the header to the data, both inside the
        // region (exposed, as above).
        unsafe { NonNull::new_unchecked((ptr.as_ptr() as usize - w as usize) as *mut Header) }
    }
}

/// The ring's walk and full path, out of line so the fast path stays small.
#[cfg(feature = "allocator-api2")]
#[inline(never)]
fn claim_walk(ring: &Ring, size: usize, align: usize) -> Option<Claim> {
    ring.claim(size, align, 1)
}

/// A heap region, out of line.
#[cfg(feature = "allocator-api2")]
#[cold]
#[inline(never)]
fn claim_heap(size: usize, align: usize) -> Option<Claim> {
    heap::claim(size, align, 1)
}

/// Resizes the adapter's allocation at `ptr` (claimed with `align`) so that it holds
/// `size` data bytes (not 0) with no copy of the caller's, and hands it out again (a
/// heap region may move): a heap region by `realloc`; a region of `ring` (the calling
/// thread's) in place, shrinking, or growing over the window or free successors while
/// `size` is at most `grow_limit`. `None` (nothing changed) when neither applies:
/// another ring's region, live successors, or a refused `realloc`.
///
/// # Safety
/// - as for [`header_of`], on `ring`'s thread;
/// - on success only the returned block is used.
#[cfg(feature = "allocator-api2")]
#[inline]
pub(crate) unsafe fn resize_in(
    ring: Option<&Ring>,
    ptr: NonNull<u8>,
    align: usize,
    size: usize,
    grow_limit: usize,
) -> Option<NonNull<[u8]>> {
    // SAFETY: forwarded from this function's contract.
    let hdr = unsafe { header_of(ptr, align) };
    // SAFETY: the caller's handle keeps the header alive.
    // Relaxed: the HEAP bit never changes while a handle exists.
    if unsafe { hdr.as_ref() }.load(Ordering::Relaxed) & HEAP != 0 {
        // SAFETY: a heap region of the caller's, made with `align` (contract).
        let c = unsafe { resize_heap(hdr, align, size) }?;
        return Some(hand_out(c, align));
    }
    // Only the ring's own thread rewrites region lengths, and only in its blocks.
    let (ring, len) = ring.and_then(|r| Some((r, r.block_len_of(hdr)?)))?;
    let pad = ptr.as_ptr() as usize - hdr.as_ptr() as usize;
    if size > len {
        return None;
    }
    // No overflow: `size` and `pad` are bounded by the block's length.
    let want = pad + round_up(size, WORD);
    let span = if want > region_span(hdr) {
        if size > grow_limit {
            return None;
        }
        // SAFETY: the caller's unique handle, on the ring's thread (contract).
        unsafe { ring.grow_in_place(hdr, want) }?
    } else {
        // SAFETY: as above.
        unsafe { ring.shrink_in_place(hdr, want) }?
    };
    Some(NonNull::slice_from_raw_parts(ptr, span - pad))
}

/// `realloc` for a heap region, out of line.
///
/// # Safety
/// As for `heap::resize`.
#[cfg(feature = "allocator-api2")]
#[cold]
#[inline(never)]
unsafe fn resize_heap(hdr: NonNull<Header>, align: usize, size: usize) -> Option<Claim> {
    // SAFETY: forwarded from this function's contract.
    unsafe { heap::resize(hdr, align, size) }
}
