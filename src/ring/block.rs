//! One block of ring memory: a control word area followed by the regions.
//!
//! ```text
//! base (aligned to MAX_ALIGN)
//! | BlockCtl (64 B) | hdr | data ... | hdr | data ... | hdr | ... |   <- regions tile [CTL, CTL+len)
//! ```
//!
//! Invariants (checked by `debug_assert!`s and by `Block::check` in tests):
//! - the regions tile the region area exactly: walking `span`s from offset 0 lands on
//!   `len`;
//! - `head` is always the offset of a region header (or 0);
//! - only the owning thread writes a header's length, and only while the region is free
//!   or held by an `ExtBuf` of that thread.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::header::{count, pack, round_up, span, Header, HDR, WORD};
use crate::raw;
use crate::sync::{Cell, Ordering};

/// The largest alignment the ring serves; the block base is aligned to it, so every
/// alignment computation is an offset computation (no address arithmetic).
pub(crate) const MAX_ALIGN: usize = 4096;

/// The control area at the start of every block.
#[repr(C, align(64))]
pub(crate) struct BlockCtl {
    /// Bytes in the region area (a multiple of [`WORD`]).
    len: usize,
    /// Offset of the header where the next walk starts (owner thread only).
    head: Cell<usize>,
    /// Orphan sweep progress: every region before this offset is known free.
    pub(crate) cursor: Cell<usize>,
    /// Link in the orphan stack (see `orphan.rs`).
    pub(crate) next: Cell<*mut BlockCtl>,
    /// Retries left that look at the head region only, after a lap found no room.
    stuck: Cell<u32>,
    /// The first byte of the region area, with the provenance of the whole allocation:
    /// headers and data are reached from it, not from `&self` (whose borrow covers only
    /// the control area under Stacked Borrows).
    regions: NonNull<u8>,
}

/// After a lap of the walk finds no room, this many following claims look only at the
/// head region (the oldest, so usually the next to be released) before walking again.
/// A producer waiting on a full ring then costs one header load per retry instead of a
/// lap, and does not pull every header's cache line away from the releasing threads.
/// A pinned buffer at the head delays the next full walk by at most this many claims.
const RETRIES_AT_HEAD: u32 = 16;

/// Bytes of the control area; the region area starts here.
const CTL: usize = core::mem::size_of::<BlockCtl>();

/// What a successful claim hands to a buffer handle.
#[derive(Clone, Copy)]
pub(crate) struct Claim {
    /// The region header.
    pub(crate) hdr: NonNull<Header>,
    /// The first data byte, aligned as requested.
    pub(crate) data: NonNull<u8>,
    /// Usable data bytes from `data` to the end of the region.
    pub(crate) cap: usize,
    /// The block the region lives in (`None` for a heap region).
    pub(crate) block: Option<NonNull<BlockCtl>>,
}

impl BlockCtl {
    /// Allocates a block with `len` bytes of region area (a multiple of [`WORD`], at
    /// least one header), laid out as one free region.
    pub(crate) fn create(len: usize) -> Option<NonNull<BlockCtl>> {
        debug_assert!(len % WORD == 0 && len >= HDR, "bad block length {len}");
        let layout = Self::layout(len)?;
        let raw = raw::alloc(layout)?;
        let base = raw.cast::<BlockCtl>();
        // SAFETY: `CTL + len` is the allocation's size, so `raw + CTL` is inside it (or
        // one past its end, never dereferenced as such).
        let regions = unsafe { NonNull::new_unchecked(raw.as_ptr().add(CTL)) };
        // SAFETY: `base` is a fresh allocation of `layout`, large and aligned enough
        // for a `BlockCtl` followed by `len` bytes.
        unsafe {
            base.as_ptr().write(BlockCtl {
                len,
                head: Cell::new(0),
                cursor: Cell::new(0),
                next: Cell::new(core::ptr::null_mut()),
                stuck: Cell::new(0),
                regions,
            });
            base.as_ref().hdr_ptr(0).write(Header::new(pack(len, 0)));
        }
        Some(base)
    }

    /// Frees a block.
    ///
    /// # Safety
    /// - `ctl` came from [`BlockCtl::create`] and is not freed yet;
    /// - every region is free and no handle, ring or orphan list refers to it.
    pub(crate) unsafe fn destroy(ctl: NonNull<BlockCtl>) {
        // SAFETY: the block is alive (contract), so its control area is readable.
        let len = unsafe { ctl.as_ref().len };
        let layout = Self::layout(len).expect("layout was valid at creation");
        // SAFETY: allocated in `create` with this very layout; nothing refers to it.
        unsafe { raw::dealloc(ctl.cast(), layout) }
    }

    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(CTL.checked_add(len)?, MAX_ALIGN).ok()
    }

    /// Bytes in the region area.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Pointer to the header at region offset `off`.
    #[inline]
    fn hdr_ptr(&self, off: usize) -> *mut Header {
        debug_assert!(off < self.len && off % WORD == 0, "bad header offset {off}");
        // SAFETY: `off < len`, so the result stays inside the region area.
        unsafe { self.regions.as_ptr().add(off).cast() }
    }

    /// The header at region offset `off`.
    ///
    /// # Safety
    /// `off` is the offset of a region header (an initialised `Header`).
    #[inline]
    pub(crate) unsafe fn hdr(&self, off: usize) -> &Header {
        // SAFETY: the caller guarantees a header was written there; headers are only
        // accessed atomically or by the owning thread.
        unsafe { &*self.hdr_ptr(off) }
    }

    /// The region offset of `hdr`, a header inside this block.
    #[inline]
    pub(crate) fn offset_of(&self, hdr: NonNull<Header>) -> usize {
        let base = self as *const Self as usize + CTL;
        let off = hdr.as_ptr() as usize - base;
        debug_assert!(off < self.len, "header {hdr:p} is not in block {self:p}");
        off
    }

    /// Whether `hdr` points into this block's region area (so its region belongs to
    /// this block). A pure address comparison: `hdr` need not point to a live header.
    #[cfg_attr(not(feature = "allocator-api2"), allow(dead_code))] // used by `alloc_api`
    #[inline]
    pub(crate) fn contains(&self, hdr: NonNull<Header>) -> bool {
        let base = self as *const Self as usize + CTL;
        (hdr.as_ptr() as usize).wrapping_sub(base) < self.len
    }

    /// Bytes a region at `off` needs for `bytes` data bytes aligned to `align`, and the
    /// offset of the data from the header.
    #[inline]
    fn need(off: usize, bytes: usize, align: usize) -> (usize, usize) {
        if align <= WORD {
            (HDR + round_up(bytes, WORD), HDR)
        } else {
            // The block base is MAX_ALIGN-aligned, so aligning offsets aligns addresses.
            let hdr_at = CTL + off;
            let pad = round_up(hdr_at + HDR, align) - hdr_at;
            (pad + round_up(bytes, WORD), pad)
        }
    }

    /// Finds a free region for `bytes` (aligned to `align`), walking forward from the
    /// head and stepping over live regions; marks it with `init` handles.
    ///
    /// The caller guarantees `bytes <= len` and `align <= MAX_ALIGN`.
    #[inline]
    pub(crate) fn claim(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        let len = self.len;
        let start = self.head.get();
        let stuck = self.stuck.get();
        if stuck != 0 {
            // SAFETY: `head` is always a header offset.
            // Acquire: as below.
            let h = unsafe { self.hdr(start) }.load(Ordering::Acquire);
            if count(h) != 0 {
                self.stuck.set(stuck - 1);
                return None;
            }
            self.stuck.set(0);
        }
        let mut off = start;
        let mut wrapped = false;
        loop {
            // Acquire: pairs with the Release store/fetch_sub of whichever thread
            // released the region, so its last writes happen before our reuse.
            // SAFETY: `off` is a header offset: `head` always is, and the walk moves
            // from header to header by their spans.
            let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
            let mut have = span(h);
            debug_assert!(
                have >= HDR && off + have <= len,
                "corrupt header {h:#x} at {off}"
            );
            if count(h) == 0 {
                let (need, pad) = Self::need(off, bytes, align);
                if have < need {
                    have = self.merge(off, have, need);
                }
                if have >= need {
                    return Some(self.take(off, have, need, pad, init));
                }
            }
            off += have;
            if off == len {
                if wrapped {
                    break;
                }
                off = 0;
                wrapped = true;
            }
            if wrapped && off >= start {
                break;
            }
        }
        self.head.set(if off >= len { 0 } else { off });
        self.stuck.set(RETRIES_AT_HEAD);
        None
    }

    /// The allocation fast path for alignments up to [`WORD`]: takes the region at the
    /// head when it is free and holds `bytes` data bytes; no walk, no merge (`None`:
    /// call [`claim`](Self::claim)). The caller guarantees `bytes <= len`.
    #[cfg_attr(not(feature = "allocator-api2"), allow(dead_code))] // used by `alloc_api`
    #[inline(always)]
    pub(crate) fn claim_at_head(&self, bytes: usize, init: u64) -> Option<Claim> {
        let off = self.head.get();
        // SAFETY: `head` is always a header offset.
        // Acquire: as in `claim`, pairs with the release of the region.
        let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
        let need = HDR + round_up(bytes, WORD);
        if count(h) == 0 && span(h) >= need {
            Some(self.take(off, span(h), need, HDR, init))
        } else {
            None
        }
    }

    /// [`claim`](Self::claim) with a full walk even right after a lap found no room
    /// (for the `Grow` policy, which must not add a block while this one has space).
    #[cold]
    pub(crate) fn claim_walk(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        self.stuck.set(0);
        self.claim(bytes, align, init)
    }

    /// Moves the head back to the region led by `hdr` (of `span` bytes) when it lies in
    /// this block and ends where the head is, i.e. it was the latest allocation. The
    /// caller, on the owning thread, releases the region right after (nothing runs in
    /// between), so the next claim reuses the same, cache-hot bytes: last in, first out.
    #[cfg_attr(not(feature = "allocator-api2"), allow(dead_code))] // used by `alloc_api`
    #[inline]
    pub(crate) fn rewind(&self, hdr: NonNull<Header>, span: usize) {
        let off = (hdr.as_ptr() as usize).wrapping_sub(self as *const Self as usize + CTL);
        if off >= self.len {
            return; // another block's (or ring's) region
        }
        let end = off + span;
        let head = self.head.get();
        if head == end || (head == 0 && end == self.len) {
            self.head.set(off);
        }
    }

    /// Merges the free regions that follow the free region at `off` (of `have` bytes)
    /// until it holds `need` bytes or meets a live region or the block end. Returns the
    /// merged length.
    #[cold]
    fn merge(&self, off: usize, have: usize, need: usize) -> usize {
        let mut end = off + have;
        while end - off < need && end < self.len {
            // SAFETY: `end` is the boundary after a region, hence a header offset.
            // Acquire: as in `claim`, the next region may just have been released.
            let h = unsafe { self.hdr(end) }.load(Ordering::Acquire);
            if count(h) != 0 {
                break;
            }
            end += span(h);
        }
        if end - off != have {
            // SAFETY: `off` is a free region header; a free region belongs to the owning
            // thread alone, so no other thread reads or writes it concurrently.
            unsafe { self.hdr(off) }.store(pack(end - off, 0), Ordering::Relaxed);
        }
        end - off
    }

    /// Takes the first `need` bytes of the free region at `off` (of `have` bytes),
    /// splitting off the rest as a free region.
    #[inline]
    fn take(&self, off: usize, have: usize, need: usize, pad: usize, init: u64) -> Claim {
        let used = if have - need >= HDR {
            // SAFETY: `off + need` lies inside the free region we own, on a word
            // boundary; it becomes a new header.
            unsafe {
                self.hdr_ptr(off + need)
                    .write(Header::new(pack(have - need, 0)))
            };
            need
        } else {
            have
        };
        // SAFETY: `off` is a free region header that this thread owns.
        // Relaxed: the handle reaches other threads through some synchronising channel,
        // which carries this store with it.
        let hdr = unsafe { self.hdr(off) };
        hdr.store(pack(used, init), Ordering::Relaxed);
        let next = off + used;
        self.head.set(if next == self.len { 0 } else { next });
        let hdr_ptr = self.hdr_ptr(off);
        Claim {
            // SAFETY: derived from the block pointer, which is non-null.
            hdr: unsafe { NonNull::new_unchecked(hdr_ptr) },
            // SAFETY: `off + pad` lies inside the region (pad < need <= used).
            data: unsafe { NonNull::new_unchecked(hdr_ptr.cast::<u8>().add(pad)) },
            cap: used - pad,
            block: Some(NonNull::from(self)),
        }
    }

    /// Grows the live region led by `hdr` (owned by a handle of this thread) in place so
    /// that it spans at least `want` bytes, by absorbing free successors. Returns the new
    /// span, or `None` (nothing changed) when the successors do not suffice.
    pub(crate) fn grow_in_place(&self, hdr: NonNull<Header>, want: usize) -> Option<usize> {
        let off = self.offset_of(hdr);
        // SAFETY: `hdr` leads a live region of this block.
        let h = unsafe { self.hdr(off) }.load(Ordering::Relaxed);
        let have = span(h);
        let mut end = off + have;
        while end - off < want {
            if end >= self.len {
                return None;
            }
            // SAFETY: `end` is the boundary after a region, hence a header offset.
            // Acquire: pairs with the release of that region by another thread.
            let n = unsafe { self.hdr(end) }.load(Ordering::Acquire);
            if count(n) != 0 {
                return None;
            }
            end += span(n);
        }
        let new_span = if end - off - want >= HDR {
            // SAFETY: inside the absorbed free space, on a word boundary.
            unsafe {
                self.hdr_ptr(off + want)
                    .write(Header::new(pack(end - off - want, 0)))
            };
            want
        } else {
            end - off
        };
        // SAFETY: `hdr` is ours; the count (1, a unique handle) stays, so the region
        // stays locked while it grows (ringal loses that lock here).
        unsafe { self.hdr(off) }.store(pack(new_span, count(h)), Ordering::Relaxed);
        let head = self.head.get();
        if head > off && head < off + new_span {
            self.head.set(if off + new_span == self.len {
                0
            } else {
                off + new_span
            });
        }
        Some(new_span)
    }

    /// Shrinks the live region led by `hdr` to `keep` bytes (a multiple of [`WORD`], at
    /// least the header), returning the tail to the ring as a free region.
    pub(crate) fn trim(&self, hdr: NonNull<Header>, keep: usize) {
        let off = self.offset_of(hdr);
        // SAFETY: `hdr` leads a live region of this block, held by this thread.
        let h = unsafe { self.hdr(off) }.load(Ordering::Relaxed);
        let have = span(h);
        if have - keep < HDR {
            return;
        }
        // SAFETY: `off + keep` is inside our own region, on a word boundary.
        unsafe {
            self.hdr_ptr(off + keep)
                .write(Header::new(pack(have - keep, 0)))
        };
        // SAFETY: `hdr` is ours (see above).
        unsafe { self.hdr(off) }.store(pack(keep, count(h)), Ordering::Relaxed);
        if self.head.get() == off + have || (self.head.get() == 0 && off + have == self.len) {
            self.head.set(off + keep);
        }
    }

    /// Walks the regions from `cursor`, returning `true` when all of them are free.
    /// Otherwise records the first live region in `cursor` so the next scan resumes
    /// there (each free region is visited once over all scans).
    pub(crate) fn scan_free(&self) -> bool {
        let mut off = self.cursor.get();
        while off < self.len {
            // SAFETY: `cursor` is a header offset and the walk moves by spans.
            // Acquire: pairs with each region's release, so once every region reads
            // free, no handle touches the block any more.
            let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
            if count(h) != 0 {
                self.cursor.set(off);
                return false;
            }
            off += span(h);
        }
        true
    }

    /// Counts live regions and their bytes (for `Ring::stats`).
    pub(crate) fn usage(&self) -> (usize, usize) {
        let (mut live, mut bytes, mut off) = (0, 0, 0);
        while off < self.len {
            // SAFETY: header walk from offset 0, as in `scan_free`.
            let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
            if count(h) != 0 {
                live += 1;
                bytes += span(h);
            }
            off += span(h);
        }
        (live, bytes)
    }
}
