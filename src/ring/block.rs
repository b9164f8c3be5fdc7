//! One block of ring memory: a control word area followed by the regions.
//!
//! ```text
//! base (aligned to MAX_ALIGN)
//! | BlockCtl (128 B) | hdr | data ... | hdr | data ... | hdr | ... |   <- regions tile [CTL, CTL+len)
//! ```
//!
//! Invariants (checked by `debug_assert!`s, and by the ring's unit test
//! `walk_keeps_regions_tiled`):
//! - the regions tile the region area exactly: walking `span`s from offset 0 lands on
//!   `len` — whenever the window is closed (below), which every method that reads
//!   other regions' headers makes sure of first;
//! - `head` is always the offset of a region header, or `len` while the window ends
//!   at the block end;
//! - only the owning thread writes a header's length, and only while the region is free
//!   or held by an `ExtBuf` of that thread;
//! - the window never reaches past `edge`, the end of the memory handed out so far; a
//!   claim past it first tries the block start, so pages stay untouched until the live
//!   buffers need them (resident memory only: nothing relies on it for soundness).
//!
//! # The window
//!
//! `[head, limit)` is free space of the owning thread whose header is not written: the
//! allocation fast path ([`BlockCtl::bump`]) carves regions off its front with one
//! header store and no header load, and releasing the latest region on the owning
//! thread ([`BlockCtl::rewind`]) gives it back to the window with no store at all.
//! A claim that the window does not hold extends it over the free regions that follow
//! it ([`BlockCtl::extend`]; read with `Acquire`, so their releases happen before any
//! reuse, as in the walk): as far as they go, reading ahead ([`READ_AHEAD`]), or, for
//! a while after the block ran full, only as far as the claim needs (see
//! [`LAZY_CLAIMS`]); only then does it walk.
//! A walk that finds room extends the window after it the same way. A growing
//! `ExtBuf` extends it only as far as its next size; the allocator adapters' growth
//! sweeps as a claim does ([`BlockCtl::grow_latest`]).
//! A claim first takes back the region claimed last, if it ends at the window and was
//! released since, on whatever thread ([`BlockCtl::bump`], an `Acquire` load of its
//! header): a buffer dropped before the next is claimed gives it its bytes, still in
//! the cache, as a heap hands back the block freed last.
//! [`BlockCtl::close`] writes the window's one header back before anything walks the
//! headers. No other thread ever reads a free region's header, so nobody can see the
//! window's unwritten header: other threads only store into headers of live regions.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::header::{count, pack, round_up, span, Header, HDR, WORD};
use crate::raw;
use crate::sync::{Cell, Ordering, PAGE};

/// The largest alignment the ring serves; the block base is aligned to it, so every
/// alignment computation is an offset computation (no address arithmetic).
pub(crate) const MAX_ALIGN: usize = 4096;

/// The control area at the start of every block.
#[repr(C, align(64))]
pub(crate) struct BlockCtl {
    /// Bytes in the region area (a multiple of [`WORD`]).
    len: usize,
    /// Offset of the header where the next walk starts (owner thread only); the start
    /// of the window.
    head: Cell<usize>,
    /// The end of the window (`head <= limit <= len`; `limit == head`: closed).
    limit: Cell<usize>,
    /// The edge of the memory handed out so far: no region at or past it has been
    /// live yet (owner thread only; see [`BlockCtl::extend_edge`]). The window never
    /// reaches past it, so its pages stay untouched until a claim needs them.
    edge: Cell<usize>,
    /// While a ring owns the block: the header where the walk's scan resumes after a try
    /// that found no room ([`NO_SCAN`]: none; see [`BlockCtl::walk`]). Once the block is
    /// retired: the orphan sweep's progress, every region before it known free.
    pub(crate) cursor: Cell<usize>,
    /// Where [`claim_lowest`](Self::claim_lowest)'s walk starts: a header offset (or
    /// `len`), no free run before it holding [`floor_bytes`](Self::floor_bytes) when a
    /// walk last passed (owner thread only).
    /// Back to 0 when its header may be one no more: merged or grown over, taken into
    /// the window ([`forget_scan_in`], [`leave_window_unscanned`]). Set only while the
    /// window is closed, never inside it.
    ///
    /// [`forget_scan_in`]: Self::forget_scan_in
    /// [`leave_window_unscanned`]: Self::leave_window_unscanned
    floor: Cell<usize>,
    /// The next walk goes round the whole block (see [`BlockCtl::unstick`]).
    full: Cell<bool>,
    /// Tries left that look at the head region only before the next scan's steps (see
    /// [`SCAN_EVERY`]).
    quiet: Cell<u8>,
    /// Claims left that extend the window only as far as they need, after a lap found
    /// no room (see [`BlockCtl::claim_extended`]).
    lazy: Cell<u16>,
    /// Every block of a `Grow` ring while the ring has blocks it would give back once
    /// drained: a claim that misses the window goes to the ring, which walks from its
    /// first block, so that allocation moves back there, the others can drain, and each
    /// lap of the first block checks whether they have (see `Ring::release_drained`).
    pub(crate) defer: Cell<bool>,
    /// A try that finds no room scans on at once, never only the head region (see
    /// [`BlockCtl::scan_eagerly`]).
    eager: Cell<bool>,
    /// Claims take the lowest room (see [`BlockCtl::pack_low`]).
    low: Cell<bool>,
    /// How far past the edge claims may have touched the block's pages, in 256ths of
    /// its length, rounded up (255: all of it): where
    /// [`take_free_runs`](Self::take_free_runs) moved the edge back below regions
    /// still live, whose pages it gives back once they are released. An upper bound
    /// (a page given back that was never touched costs a system call's range, no
    /// more), in a byte of the cache line's padding (owner thread only).
    touched: Cell<u8>,
    /// The first byte of the region area, with the provenance of the whole allocation:
    /// headers and data are reached from it, not from `&self` (whose borrow covers only
    /// the control area under Stacked Borrows).
    regions: NonNull<u8>,
    // The second cache line: fields no hot path reads but `last`, which only the owner
    // thread touches.
    /// Link in the orphan stack (see `orphan.rs`).
    pub(crate) next: Cell<*mut BlockCtl>,
    /// The region claimed last, from the window's front or by a walk, while the headers
    /// have not been walked or the window closed since ([`NO_LAST`] otherwise): a header
    /// offset, its region ending at `head` unless it was given back to the window or
    /// grew or shrank in place (owner thread only). The next [`bump`](Self::bump) takes
    /// it back into the window if it was released by then.
    last: Cell<usize>,
    /// [`claim_lowest`](Self::claim_lowest)s left that start at the floor before one
    /// walks from the block start again.
    floor_claims: Cell<u8>,
    /// The bytes of the claim that set the floor: no free run before it held them.
    floor_bytes: Cell<usize>,
}

/// Regions a walk looks at, at most, before it gives up for this try: past the head
/// region, which every try looks at, the walk goes on where the last try stopped, round
/// the block (see [`BlockCtl::walk`]). So a try that finds no room costs the same few
/// header loads whatever the number of live regions, a producer retrying on a full ring
/// reads each header of the others once a lap rather than once a try, and a region
/// released out of order (or the free space past a pinned buffer) is still found, by
/// the try whose scan reaches it.
const STEPS: usize = 4;

/// While tries find no room, one in this many goes on with the scan; the others look at
/// the head region only. A producer that retries on a full ring, mostly waiting for the
/// buffers to come back in the order they went, then reads about one header and a half
/// a try: the line the next release writes, and rarely the others. (Scanning at every
/// try, ringal's fixed 64 B × 64 row ...)
const SCAN_EVERY: u8 = 8;

/// [`STEPS`] for a block that scans eagerly ([`BlockCtl::scan_eagerly`]): a pool's copy
/// ring, where a kept frame's neighbours are often still in flight, and a try that
/// fails sends the claim to a walk of the whole ring. In a model of it (1 copy in 10
/// kept, 64 in flight), 12 % of tries failed with 4 steps, 0.1 % with 16.
const EAGER_STEPS: usize = 16;

/// [`BlockCtl::cursor`] while no scan is under way.
const NO_SCAN: usize = usize::MAX;

/// [`BlockCtl::last`] while it names no region.
const NO_LAST: usize = usize::MAX;

/// The ordering of the load with which [`BlockCtl::bump`] looks whether the region
/// claimed last was released. Always `Acquire`; the loom model
/// `release_then_take_back` (`tests/loom.rs`) proves that the known-bug mutant
/// `mutant_relaxed_take_back` (a loom switch, see `sync::switch`) fails.
#[inline(always)]
fn take_back() -> Ordering {
    crate::sync::switch::weakened("mutant_relaxed_take_back", Ordering::Acquire)
}

/// After a lap finds no room, this many following claims that miss the window extend
/// it only as far as they need: a full block fills again from regions its consumer has
/// just released, whose headers another core wrote a moment ago. Reading all of them at
/// once stalls the producer while the consumer drains its queue and goes to sleep
/// (in ringal's 64 B × 64 row, ring of 2 × 64 × 64 B, the producer found the ring full
/// some 30× as often as ringal's, its consumer slept on an empty channel, and the row
/// took 1.6–2.4× as long as with one header per claim). With room to spare, the regions
/// after the window were released long before, and one sweep over them is faster (the
/// same row with an 8× ring took 1.5× as long with one header per claim).
const LAZY_CLAIMS: u16 = 256;

/// How far ahead of the header it reads a sweep of the window ([`BlockCtl::sweep`])
/// asks for every cache line: as far as it has come, at most this many bytes. Each
/// header's offset comes from the one before, so a sweep over headers another core has
/// just written is a chain of misses with nothing to overlap them; read ahead, they are
/// in flight together. In ringal's rows (built-in wait, medians in ms), where a line
/// takes ~330 ns to cross to the other core and back, the extendable 1 KiB × 64 and ×
/// 1,024 rows took 123 and 127 without, 91 and 86 with (ringal 112-123), the fixed
/// 64 B and 1 KiB × 64 rows the same; where it takes ~70 ns, the fixed 64 B × 64 row
/// took 57 without, 40 with, and the fixed 1 KiB × 64 row 55 without, 63 with (ringal
/// 74; 67 reading 2 KiB ahead). A sweep over regions its own thread released gains
/// nothing and pays ~23 instructions a message (1 KiB extendable messages, one thread:
/// 514 to 537).
const READ_AHEAD: usize = 512;

/// A sweep also asks for the headers one to this many regions past the one it reads,
/// guessing that those regions span as much as it does: buffers of one size (a fixed
/// buffer's capacity, a frame of fixed length) leave their headers a stride apart,
/// beyond [`READ_AHEAD`] once it passes 512 bytes, and the guess keeps that many of
/// their misses in flight.
/// In ringal's 1 KiB rows with full-size messages (built-in wait, an Intel Xeon VM whose
/// line takes ~200 ns to cross to the other core and back; medians of 15 fresh
/// processes in ms, two code layouts) the extendable × 64 and × 1,024 rows went from
/// 27.1-28.9 and 28.3-30.0 to 25.5-25.8 and 25.6-27.6, the fixed ones from 15.2-15.3
/// and 16.6 to 14.0-14.4 and 14.3-14.7 (the control level); the fixed 1 KiB × 1,024
/// row with random lengths (its buffers have the full capacity) from 92-96 to 72-74.
/// Eight ahead did no better. A message costs ~5 instructions more (1 KiB extendable
/// messages, one thread: 549 to 554).
const STRIDES: usize = 4;

#[cfg(all(test, real_std))]
std::thread_local! {
    /// Headers [`BlockCtl::first_fit`] looked at on this thread (tests count walks).
    pub(crate) static FIRST_FIT_STEPS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Bytes of a cache line: the step of a read-ahead.
const LINE: usize = 64;

/// The edge of the memory handed out moves by at least this many bytes (a sixteenth of
/// a smaller block), or a quarter of the memory handed out so far, whichever is more
/// (see [`BlockCtl::extend_edge`]).
const EDGE_STEP: usize = 64 * 1024;

/// Live regions a claim that reaches the edge steps over, from the block start, looking
/// for room in the memory handed out before it moves the edge (see
/// [`BlockCtl::claim_at_start`]). A read region of the framed readers' pool went past
/// the edge on every lap while a few kept frames lay near the start (conns scenario,
/// keep row: 13 MiB resident in one run of five, 5-9 in two, for 78 KiB kept); stepping
/// over up to 64 of them, 1.4-1.7 MiB in five. A server that keeps 1 frame in 100 for
/// 2 s (conns scenario, queue row: some 2,000 frames of 4 KiB over four read rings) had
/// more than 64 before the first gap of every lap, so every lap moved the edge, up to
/// the block's end: 40-56 MiB resident, against `FramedRead`'s 23-25; over up to 1,024,
/// 21-22 MiB. The cost: at most that many header loads once a lap of the memory handed
/// out.
const START_LIVE: usize = 1024;

/// [`BlockCtl::claim_lowest`]s in a row that walk from the floor, not the block start
/// (see [`BlockCtl::floor`]), after a walk from the start that looked at
/// [`FLOOR_STEPS`] regions or more: room released below the floor is found at most this
/// many claims later, and a long walk costs a claim a sixteenth of itself.
#[cfg(real_std)]
const FLOOR_CLAIMS: u8 = 16;

/// Regions a walk of [`BlockCtl::claim_lowest`] from the block start looks at from
/// which the next claims start at the floor. After a shorter walk they start at the
/// block start, and take room released below the floor at once: a server keeping one
/// 16 KiB frame in ten (conns scenario) had 18.0 KiB resident a kept frame (median of 6
/// runs, 17.0-19.7) when every walk counted, 17.2 (17.1-18.0) so, as without a floor
/// (17.4, 17.1-18.7).
#[cfg(real_std)]
const FLOOR_STEPS: usize = 64;

/// Bytes of a free run of a block that packs low (see [`BlockCtl::pack_low`]) from
/// which its pages go back wherever it lies, not only past the memory the block keeps
/// ([`BlockCtl::take_free_runs`]): about the largest page of slots (`slots.rs`).
/// Claims take the lowest room first, so a run this long amid what is live (pages let
/// go together) is reached last; a claim that reaches it faults its pages in again (in
/// the conns scenario's 16 KiB keep row, 33-57 MiB went back in a run of 5.5 s: some
/// 2,000 pages a second).
const LOW_RUN: usize = 256 << 10;

/// Bytes of the control area; the region area starts here.
const CTL: usize = core::mem::size_of::<BlockCtl>();

// Two cache lines (loom's cells are larger): what the claims and releases read in the
// first.
#[cfg(not(loom))]
const _: () = assert!(CTL == 128 && core::mem::offset_of!(BlockCtl, next) == 64);

/// A header the walk looked at without finding room there.
struct Miss {
    /// Bytes to the next header it looks at.
    have: usize,
    /// The region is live (not free and too short).
    live: bool,
}

/// What a successful claim hands to a buffer handle.
#[derive(Clone, Copy)]
pub(crate) struct Claim {
    /// The region header.
    pub(crate) hdr: NonNull<Header>,
    /// The first data byte, aligned as requested.
    pub(crate) data: NonNull<u8>,
    /// Usable data bytes from `data` to the end of the region.
    pub(crate) cap: usize,
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
                limit: Cell::new(0),
                edge: Cell::new(0),
                cursor: Cell::new(NO_SCAN),
                floor: Cell::new(0),
                full: Cell::new(false),
                quiet: Cell::new(0),
                lazy: Cell::new(0),
                defer: Cell::new(false),
                eager: Cell::new(false),
                low: Cell::new(false),
                touched: Cell::new(0),
                regions,
                next: Cell::new(core::ptr::null_mut()),
                last: Cell::new(NO_LAST),
                floor_claims: Cell::new(0),
                floor_bytes: Cell::new(0),
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

    /// The [`floor`](Self::floor).
    #[cfg(all(test, real_std))]
    pub(crate) fn floor(&self) -> usize {
        self.floor.get()
    }

    /// The window, `(head, limit)`.
    #[cfg(all(test, real_std))]
    pub(crate) fn window(&self) -> (usize, usize) {
        (self.head.get(), self.limit.get())
    }

    /// Bytes in the region area.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The addresses of the region area, where every header of this block lies.
    #[cfg(feature = "std")]
    pub(crate) fn span(&self) -> super::wait::Span {
        super::wait::Span::new(self.regions.as_ptr(), self.len)
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
    #[inline]
    pub(crate) fn contains(&self, hdr: NonNull<Header>) -> bool {
        let base = self as *const Self as usize + CTL;
        (hdr.as_ptr() as usize).wrapping_sub(base) < self.len
    }

    /// Bytes a region at `off` needs for `bytes` data bytes aligned to `align`, and the
    /// offset of the data from the header.
    #[inline]
    pub(crate) fn need(off: usize, bytes: usize, align: usize) -> (usize, usize) {
        if align <= WORD {
            (HDR + round_up(bytes, WORD), HDR)
        } else {
            // The block base is MAX_ALIGN-aligned, so aligning offsets aligns addresses.
            let hdr_at = CTL + off;
            let pad = round_up(hdr_at + HDR, align) - hdr_at;
            (pad + round_up(bytes, WORD), pad)
        }
    }

    /// The allocation fast path: the first `need` bytes of the window (`need` a multiple
    /// of [`WORD`], at least [`HDR`]) become a region with `init` handles and the data
    /// right after its header. `None` (nothing changed) if the window is smaller (it
    /// may have taken the region claimed last back, see [`take_back_last`]).
    ///
    /// [`take_back_last`]: Self::take_back_last
    #[inline(always)]
    pub(crate) fn bump(&self, need: usize, init: u64) -> Option<Claim> {
        self.take_back_last(need);
        self.carve(need, init)
    }

    /// Takes the region claimed last back into the window (as [`rewind`](Self::rewind)
    /// does for a release on this thread) if it was released since, is still the
    /// window's neighbour (see [`last`](Self::last)) and spans `need` bytes or more: the
    /// claim then takes its place, and the window after it is as it was.
    #[inline(always)]
    fn take_back_last(&self, need: usize) {
        let last = self.last.get();
        if last != NO_LAST {
            // Acquire: pairs with the Release of whichever thread released the region,
            // so its last writes happen before the window hands the bytes out again.
            // SAFETY: `last` is a header offset while the headers have not been walked
            // or the window closed since it was claimed (see `last`).
            let h = unsafe { self.hdr(last) }.load(take_back());
            if count(h) == 0 && span(h) >= need {
                // A buffer claimed and dropped before the next is claimed: the next
                // reuses its bytes, still in the cache, wherever it was dropped.
                self.rewind_to(last, span(h));
            }
        }
    }

    /// [`bump`](Self::bump) after [`take_back_last`](Self::take_back_last).
    #[inline(always)]
    fn carve(&self, need: usize, init: u64) -> Option<Claim> {
        let head = self.head.get();
        // No underflow: `head <= limit` (struct invariant).
        if self.limit.get() - head < need {
            return None;
        }
        // `head < limit <= len`: the header lies inside the window, which this thread
        // owns; whatever bytes were there are free space.
        let hdr_ptr = self.hdr_ptr(head);
        // SAFETY: inside the window (above), word-aligned; a plain write: no other
        // thread reads a free region, and the handle reaches other threads through a
        // synchronising channel that carries this write with it.
        unsafe { hdr_ptr.write(Header::new(pack(need, init))) };
        self.head.set(head + need);
        self.last.set(head);
        Some(Claim {
            // SAFETY: derived from the block pointer, which is non-null.
            hdr: unsafe { NonNull::new_unchecked(hdr_ptr) },
            // SAFETY: `HDR < need`: the data starts inside the new region.
            data: unsafe { NonNull::new_unchecked(hdr_ptr.cast::<u8>().add(HDR)) },
            cap: need - HDR,
        })
    }

    /// [`bump`](Self::bump) for data aligned to `align`, when the window's front already
    /// puts the data there (as it does for regions of `align`-multiple spans laid one
    /// after another); `None` (nothing changed) otherwise.
    #[inline]
    pub(crate) fn bump_aligned(&self, need: usize, align: usize, init: u64) -> Option<Claim> {
        self.take_back_last(need);
        let data = self.regions.as_ptr() as usize + self.head.get() + HDR;
        // `align` is a power of two, as every alignment the ring is asked for.
        if data & (align - 1) != 0 {
            return None;
        }
        self.carve(need, init)
    }

    /// Writes the window's header (one free region over `[head, limit)`) and empties the
    /// window, so the headers tile the block again; a `head` left at the block end goes
    /// back to 0. Owning thread only; called before anything reads other regions'
    /// headers.
    #[inline]
    pub(crate) fn close(&self) {
        let (head, limit) = (self.head.get(), self.limit.get());
        if limit != head {
            // SAFETY: `head < limit <= len`: inside the window, word-aligned.
            unsafe { self.hdr_ptr(head).write(Header::new(pack(limit - head, 0))) };
        }
        let head = if head == self.len { 0 } else { head };
        self.head.set(head);
        self.limit.set(head);
        self.last.set(NO_LAST);
    }

    /// Moves the head of a closed window (which stays closed) to the header at `off`.
    #[inline]
    fn set_head(&self, off: usize) {
        debug_assert!(off < self.len, "head {off} outside the block");
        self.head.set(off);
        self.limit.set(off);
        self.last.set(NO_LAST);
    }

    /// Extends the window over the free regions right after it, one header at a time,
    /// until it holds `need` bytes from its head, or a live region or the edge ends it.
    #[inline]
    fn extend(&self, need: usize) {
        self.extend_over(need, false);
    }

    /// Extends the window over the free regions right after it as far as they go,
    /// reading ahead (see [`READ_AHEAD`] and [`STRIDES`]).
    #[inline]
    fn sweep(&self) {
        self.extend_over(usize::MAX, true);
    }

    /// [`extend`](Self::extend), and with `read_ahead` asking for the lines ahead of
    /// each header it reads. Always inlined, so that `extend` has no trace of it.
    #[inline(always)]
    fn extend_over(&self, need: usize, read_ahead: bool) {
        let (head, edge) = (self.head.get(), self.edge.get());
        let mut end = self.limit.get();
        // The lines asked for so far end at `ahead`; the sweep started at `start`.
        let (start, mut ahead) = (end, end);
        // No underflow: `head <= limit` (struct invariant), and `end` only grows.
        while end - head < need && end < edge {
            // Acquire: pairs with the Release of whichever thread released the region,
            // so its last writes happen before the window hands the bytes out again.
            // SAFETY: `end` is a header offset (a region boundary; moves by spans).
            let h = unsafe { self.hdr(end) }.load(Ordering::Acquire);
            if count(h) != 0 {
                break;
            }
            let next = end + span(h);
            if next > edge {
                // The free region reaches past the edge: split it there, so the window
                // ends at the edge and the headers still tile the block once it closes.
                // SAFETY: `end < edge < next`: inside a free region, which this thread
                // owns; `edge` is word-aligned (see `extend_edge`).
                unsafe { self.hdr_ptr(edge).write(Header::new(pack(next - edge, 0))) };
                end = edge;
                break;
            }
            if read_ahead {
                // As far past `next` as the sweep has come (no underflow: `next >
                // end >= start`), at most `READ_AHEAD`, and to the edge (give or take
                // three lines: four a step, as the loop's own instructions cost more
                // than the reads).
                let to = (next + (next - start).min(READ_AHEAD)).min(edge);
                ahead = ahead.max(next);
                while ahead < to {
                    let p = self.regions.as_ptr().wrapping_add(ahead);
                    for line in 0..4 {
                        prefetch(p.wrapping_add(line * LINE));
                    }
                    ahead += 4 * LINE;
                }
                // And the header `STRIDES` regions on, if they span as much as this one
                // (all of them on the first step). A guess past the edge or the block
                // is harmless: see `prefetch`; `wrapping_*`, so no overflow either.
                let (span, base) = (next - end, self.regions.as_ptr().wrapping_add(next));
                if end == start {
                    for j in 1..STRIDES {
                        prefetch(base.wrapping_add(span.wrapping_mul(j)));
                    }
                }
                prefetch(base.wrapping_add(span.wrapping_mul(STRIDES)));
            }
            end = next;
        }
        // The window's inside is not tiled by headers: the scan may have been at one it
        // took in.
        self.forget_scan_in(start, end);
        self.limit.set(end);
    }

    /// Moves the edge of the memory handed out (see [`BlockCtl::edge`]) to at least `to`
    /// (a multiple of [`WORD`], at most the block length): by a quarter of the memory
    /// handed out so far, at least [`EDGE_STEP`] (or a sixteenth of a smaller block), so
    /// a block that fills up takes few steps to do so.
    fn extend_edge(&self, to: usize) {
        let edge = self.edge.get();
        if to > edge {
            let step = round_up((edge / 4).max(EDGE_STEP.min(self.len / 16)), WORD);
            self.edge.set(to.max(edge + step).min(self.len));
        }
    }

    /// Whether the region at the block start is free.
    #[inline]
    fn start_is_free(&self) -> bool {
        // SAFETY: offset 0 always leads a region.
        // Relaxed: a hint; whoever reuses the region loads its header again with Acquire.
        count(unsafe { self.hdr(0) }.load(Ordering::Relaxed)) == 0
    }

    /// Lets the window reach the whole block: for the blocks a `Grow` ring adds for a
    /// spike, which fill up and are given back once drained. (Their edge steps would
    /// each send a claim to the ring's walk over every block, see `defer`.)
    #[inline]
    pub(crate) fn without_edge(&self) {
        self.edge.set(self.len);
    }

    /// Makes every try that finds no room go on with the scan ([`STEPS`] more
    /// regions), not look at the head region alone for the next [`SCAN_EVERY`] tries:
    /// for a block whose oldest regions are not the next to be released (a pool's copy
    /// ring, where a kept frame stays for seconds among frames dropped at once). There,
    /// seven tries in eight that met a kept frame failed, each then walking the whole
    /// block from the head (a pool's claim, `Ring::unstick_if`) to find the room just
    /// past it.
    #[cfg(real_std)]
    pub(crate) fn scan_eagerly(&self) {
        self.eager.set(true);
    }

    /// Says that the block's claims take its lowest room ([`claim_lowest`]), so that
    /// what is live packs at its start: [`take_free_runs`](Self::take_free_runs) keeps
    /// the memory handed out down to an eighth more than the live bytes, not twice
    /// them, and gives back the pages of free runs of [`LOW_RUN`] bytes or more
    /// wherever they lie (a pool's copy ring, where twice what a server kept was most
    /// of the ring, and pages of slots let go together leave runs amid those kept).
    ///
    /// [`claim_lowest`]: Self::claim_lowest
    #[cfg(real_std)]
    pub(crate) fn pack_low(&self) {
        self.low.set(true);
    }

    /// The tries that look at the head region alone after one found no room.
    #[inline]
    fn quiet_tries(&self) -> u8 {
        if self.eager.get() {
            0
        } else {
            SCAN_EVERY - 1
        }
    }

    /// A claim below the edge, in the first free regions from the block start that hold
    /// it, stepping over at most [`START_LIVE`] live regions: the walk's choice over a
    /// region past the edge, so memory released behind the head is reused before pages
    /// that were never touched (the block's resident memory stays near its live set,
    /// not its length), also when buffers kept alive (a cache's entries, frames an
    /// application holds) lie near the start. Runs once a lap of the memory handed
    /// out, when a claim reaches its edge.
    #[cold]
    fn claim_at_start(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        self.first_fit(bytes, align, init, 0, self.edge.get(), START_LIVE)
            .0
    }

    /// A claim of `bytes` (aligned to a word, at most the block's length) in the first
    /// free run from the block start that holds it, stepping over every live region
    /// before it: the lowest room. For regions kept long (a pool's pages of slots,
    /// `slots.rs`, and copies of frames), which so pack at the block's start whatever
    /// order they go in, leaving the pages past them untouched; the window, closed
    /// first, moves to the region's end.
    ///
    /// A claim at least as large as the last starts at the [`floor`](Self::floor),
    /// below which the last walk found no room for that one, and from the block start
    /// when it finds no room past it, or once in [`FLOOR_CLAIMS`]: a pool's copy ring
    /// whose kept frames leave short gaps was walked over all of them by every read
    /// region claimed there (a Redis-protocol server, `LPUSH` of 16 KiB values, 16
    /// pipelined: 4,300 instructions a request in the walk, of 37,600). Room released
    /// below the floor waits for a walk from the start.
    #[cfg(real_std)]
    pub(crate) fn claim_lowest(&self, bytes: usize, init: u64) -> Option<Claim> {
        self.close();
        let left = self.floor_claims.get();
        let at_floor = left > 0 && bytes >= self.floor_bytes.get();
        let from = if at_floor { self.floor.get() } else { 0 };
        let (mut claim, mut floor, mut steps) =
            self.first_fit(bytes, WORD, init, from, self.len, usize::MAX);
        let left = if at_floor && claim.is_some() {
            left - 1
        } else {
            if at_floor {
                // No room past the floor: room released below it, maybe.
                (claim, floor, steps) = self.first_fit(bytes, WORD, init, 0, self.len, usize::MAX);
            }
            // After a short walk the next claim starts at the block start too, packing
            // tighter.
            if steps >= FLOOR_STEPS {
                FLOOR_CLAIMS
            } else {
                0
            }
        };
        self.floor_claims.set(left);
        self.floor.set(floor);
        self.floor_bytes.set(bytes);
        claim
    }

    /// The first free run from `from` (the block start or the [`floor`](Self::floor)),
    /// below `end`, that holds `bytes` aligned to `align`, stepping over at most
    /// `max_live` live regions; free regions merged on the way. The window is closed. A
    /// merge that takes the head's header in, in a run too short, makes that run's
    /// header the head. With the claim, where the walk stopped (the claim's offset: no
    /// free run before it holds `bytes`, a [`floor`](Self::floor) for claims as large),
    /// and how many regions it looked at.
    fn first_fit(
        &self,
        bytes: usize,
        align: usize,
        init: u64,
        from: usize,
        end: usize,
        max_live: usize,
    ) -> (Option<Claim>, usize, usize) {
        let head = self.head.get();
        let (mut off, mut live, mut steps) = (from, 0, 0);
        while off < end {
            steps += 1;
            // Acquire: as in `walk`.
            // SAFETY: `from` leads a region (the block start, or the floor: a header
            // offset, see `floor`), and each step moves by a region's span (the window
            // is closed, as for every walk: the headers tile the block).
            let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
            #[cfg(all(test, real_std))]
            FIRST_FIT_STEPS.with(|steps| steps.set(steps.get() + 1));
            if count(h) != 0 {
                live += 1;
                if live > max_live {
                    break;
                }
                off += span(h);
                continue;
            }
            let (need, pad) = Self::need(off, bytes, align);
            let mut have = span(h);
            if have < need {
                have = self.merge(off, have, need);
            }
            if have >= need {
                // A run that reaches past the edge may hold the caller's region (free,
                // holding `need`) merged over: it serves here, below the caller's, and
                // the edge moves as it would have.
                self.extend_edge(off + need);
                let claim = self.take(off, have, need, pad, init);
                return (Some(claim), off, steps);
            }
            if (off + 1..off + have).contains(&head) {
                self.set_head(off);
            }
            off += have;
        }
        (None, off, steps)
    }

    /// After the window's front did not hold the request (`Ring::claim`): the window
    /// extended over the free regions that follow it (see [`extend`](Self::extend)),
    /// only as far as `bytes` (aligned to `align`, at most [`MAX_ALIGN`]) needs while
    /// `lazy` counts down, else as far as they go. `None` (the window may
    /// be longer): call [`claim_slow`](Self::claim_slow). Apart from it, so that the
    /// common miss, one header past the window, costs a small call.
    #[inline(never)]
    pub(crate) fn claim_extended(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        if self.defer.get() {
            return None; // the ring walks its blocks from the first (see `defer`)
        }
        if self.cursor.get() != NO_SCAN {
            // A try found no room since the last claim: the head is live, and the
            // walk's try looks at it again.
            return None;
        }
        let need = HDR + round_up(bytes, WORD);
        // As far as the claim needs while the block has run full lately (see `lazy`);
        // else as far as it goes, as a walk does.
        let lazy = self.lazy.get();
        if lazy != 0 {
            self.extend(need);
        } else {
            self.sweep();
        }
        if self.limit.get() - self.head.get() < need {
            return None;
        }
        self.lazy.set(lazy.saturating_sub(1));
        if align <= WORD {
            self.bump(need, init)
        } else {
            self.bump_aligned(need, align, init)
        }
    }

    /// The walk, after [`claim_extended`](Self::claim_extended): closes the window and
    /// looks for a region for `bytes` (aligned to `align`, at most [`MAX_ALIGN`]; `bytes`
    /// at most the block's length) from the head on.
    #[inline(never)]
    pub(crate) fn claim_slow(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        if self.defer.get() {
            return None; // the ring walks its blocks from the first (see `defer`)
        }
        self.walk_and_open(bytes, align, init)
    }

    /// [`walk`](Self::walk) with the window closed first, and extended after a success
    /// as far as the free regions go, unless the block ran full lately (see
    /// [`LAZY_CLAIMS`]).
    fn walk_and_open(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        self.close();
        let c = self.walk(bytes, align, init)?;
        if self.lazy.get() == 0 {
            self.sweep();
        }
        Some(c)
    }

    /// Finds a free region for `bytes` (aligned to `align`), walking forward from the
    /// head and stepping over live regions; marks it with `init` handles. The window is
    /// closed.
    ///
    /// A try looks at the head region (the oldest: the next to be released when buffers
    /// go in the order they came), then at most [`STEPS`] regions from where the last try
    /// stopped ([`cursor`](Self::cursor)), or from the head; when the scan comes round to
    /// the head, the next try starts it over. After [`unstick`](Self::unstick), one try
    /// goes round the whole block. `None`: no room at the regions looked at; the head
    /// stays where it was, or moves to the first header past it after a whole lap.
    fn walk(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        self.scan(|off, wrapped| self.step(off, wrapped, bytes, align, init))
    }

    /// The walk's course, for [`walk`](Self::walk) and [`relocate`](Self::relocate):
    /// `at(off, wrapped)` looks at the header `off` (`wrapped`: the walk has passed the
    /// block end) and returns what it found, or the bytes to the next header. At most
    /// [`STEPS`] headers past the head's (a lap after [`unstick`](Self::unstick)), from
    /// where the last scan stopped; see `walk`.
    #[inline(always)]
    fn scan<T>(&self, mut at: impl FnMut(usize, bool) -> Result<T, Miss>) -> Option<T> {
        let len = self.len;
        let mut start = self.head.get();
        let full = self.full.get();
        self.full.set(false);
        if !full && self.cursor.get() != NO_SCAN {
            match at(start, false) {
                Ok(found) => return Some(found),
                // A free head too short (at the block end, say) leaves it to the scan.
                Err(miss) if miss.live && self.quiet.get() != 0 => {
                    self.quiet.set(self.quiet.get() - 1);
                    return None;
                }
                Err(_) => {}
            }
        }
        // Read after the head's try: a merge there may have ended the scan.
        let resume = if full { NO_SCAN } else { self.cursor.get() };
        let (mut off, mut wrapped) = match resume {
            NO_SCAN => (start, false),
            // The scan went forward from the head: below it, it has wrapped.
            at => (at, at < start),
        };
        let mut steps = if full {
            usize::MAX
        } else if self.eager.get() {
            EAGER_STEPS
        } else {
            STEPS
        };
        // A scan resumed mid-lap that comes round to the head starts over there once,
        // with the steps it has left: regions it passed while they were live may have
        // been released since (a ring that is all free again serves any request that
        // fits it, at the first try).
        let mut restart = resume != NO_SCAN && resume != start;
        loop {
            match at(off, wrapped) {
                Ok(found) => return Some(found),
                Err(miss) => off += miss.have,
            }
            if off == len && !wrapped {
                off = 0;
                wrapped = true;
            }
            if wrapped && off >= start {
                if !restart {
                    break;
                }
                // At the head's header, or past it (a merge from below took it in): the
                // first header at or past it, the new head.
                start = if off >= len { 0 } else { off };
                self.set_head(start);
                (off, wrapped, restart) = (start, false, false);
            }
            steps -= 1;
            if steps == 0 {
                // `off` is a header offset: the walk moves by spans. (The head's stays
                // one too: a merge that takes it in starts below it, after a wrap, and
                // ends at or past it, which ends the lap above.)
                self.cursor.set(off);
                self.quiet.set(self.quiet_tries());
                self.lazy.set(LAZY_CLAIMS);
                return None;
            }
        }
        // A lap found no room. (A merge may have taken the head's header in; `off` is
        // the first header at or past it.) The next try's scan starts over there.
        let head = if off >= len { 0 } else { off };
        self.set_head(head);
        self.cursor.set(head);
        self.quiet.set(self.quiet_tries());
        self.lazy.set(LAZY_CLAIMS);
        None
    }

    /// The walk's step at the header `off`: the claim, if its region is free and, with
    /// the free regions after it, holds `bytes` (aligned to `align`); else the bytes to
    /// the next header. `wrapped`: the walk has passed the block end. In line up to the
    /// header's load: a try on a full ring mostly meets live regions.
    #[inline(always)]
    fn step(
        &self,
        off: usize,
        wrapped: bool,
        bytes: usize,
        align: usize,
        init: u64,
    ) -> Result<Claim, Miss> {
        // Acquire: pairs with the Release store/fetch_sub of whichever thread released
        // the region, so its last writes happen before our reuse.
        // SAFETY: `off` is a header offset (see `walk`).
        let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
        debug_assert!(
            span(h) >= HDR && off + span(h) <= self.len,
            "corrupt header {h:#x} at {off}"
        );
        if count(h) != 0 {
            return Err(Miss {
                have: span(h),
                live: true,
            });
        }
        self.fit_free(off, span(h), wrapped, bytes, align, init)
    }

    /// [`step`](Self::step) at a free region of `have` bytes.
    #[inline(never)]
    fn fit_free(
        &self,
        off: usize,
        mut have: usize,
        wrapped: bool,
        bytes: usize,
        align: usize,
        init: u64,
    ) -> Result<Claim, Miss> {
        let (need, pad) = Self::need(off, bytes, align);
        if have < need {
            have = self.merge(off, have, need);
        }
        if have < need {
            return Err(Miss { have, live: false });
        }
        if off + need > self.edge.get() {
            if !wrapped && off != 0 {
                if let Some(c) = self.claim_at_start(bytes, align, init) {
                    return Ok(c);
                }
            }
            self.extend_edge(off + need);
        }
        Ok(self.take(off, have, need, pad, init))
    }

    /// Makes the next claim walk the whole block (for a producer woken by a release,
    /// which may lie anywhere, and a growth's last try before it fails).
    #[inline]
    pub(crate) fn unstick(&self) {
        self.full.set(true);
    }

    /// Ends the walk's scan if it stopped at a header in `from..to`, which are headers no
    /// more (merged over, or inside the window), and moves the [`floor`](Self::floor)
    /// back to the block start if it is one of them.
    #[inline]
    fn forget_scan_in(&self, from: usize, to: usize) {
        if (from..to).contains(&self.cursor.get()) {
            self.cursor.set(NO_SCAN);
        }
        if (from..to).contains(&self.floor.get()) {
            self.floor.set(0);
        }
    }

    /// Ends the walk's scan if it stopped at `off`, the header of a region that now
    /// starts the window: the window's inside is not tiled by headers (a region grown
    /// from its front, or a claim or `close` over it, would leave the scan at a header
    /// no more). The scan never points into the window otherwise: it is set only while
    /// the window is closed, and a window that opens over headers forgets it (see
    /// `extend_over`).
    ///
    /// And forgets the [`floor`](Self::floor) if it lies at or past `off`: a region that
    /// ends at the window's start may grow over the window's front (`grow_latest`).
    #[inline(always)]
    fn leave_window_unscanned(&self, off: usize) {
        if self.cursor.get() == off {
            self.cursor.set(NO_SCAN);
        }
        if self.floor.get() >= off {
            self.floor.set(0);
        }
    }

    /// Points the walk's scan at `hdr`, a region of this block its owner thread is about
    /// to release, if tries have found no room since the last claim: the next try looks
    /// there (after the head) instead of waiting for its scan to come round. So a buffer
    /// dropped on the ring's own thread (an `ExtBuf` started over, a `Vec` freed) makes
    /// room for the next request at once, as it did when each try walked the block.
    #[inline]
    pub(crate) fn scan_from(&self, hdr: NonNull<Header>) {
        if self.cursor.get() != NO_SCAN && self.contains(hdr) {
            // A region's header is a header offset, whatever happens to the region.
            self.cursor.set(self.offset_of(hdr));
            self.quiet.set(0);
        }
    }

    /// A claim (the window's front, else a walk round the whole block, not the few
    /// regions of a try: for the `Grow` policy, which must not add a block while this
    /// one has space).
    #[cold]
    pub(crate) fn claim_walk(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        if align <= WORD {
            if let Some(c) = self.bump(HDR + round_up(bytes, WORD), init) {
                return Some(c);
            }
        }
        self.full.set(true);
        self.walk_and_open(bytes, align, init)
    }

    /// Releases the region led by `hdr` into the window when it lies in this block and,
    /// `span` bytes long, ends where the window starts, i.e. it was the latest
    /// allocation: the head moves back and the next claim reuses the same, cache-hot
    /// bytes, last in, first out. Returns whether it did. `false`: nothing changed.
    ///
    /// No `Release` store is needed: every use of the bytes happened before the caller
    /// gave up its handle here, on the owning thread, which is the thread that reuses
    /// them.
    ///
    /// # Safety
    /// - the caller, on the owning thread, holds the unique handle of the region led by
    ///   `hdr` and gives it up (uses neither it nor the region again) if this returns
    ///   `true`;
    /// - `span` is at most the region's span. (The window starts at a region boundary,
    ///   so if the region ends there, no shorter `span` can make it look so.)
    #[inline]
    pub(crate) unsafe fn rewind(&self, hdr: NonNull<Header>, span: usize) -> bool {
        let off = (hdr.as_ptr() as usize).wrapping_sub(self as *const Self as usize + CTL);
        self.rewind_to(off, span)
    }

    /// [`rewind`](Self::rewind) of the free region at `off`, of `span` bytes, if it
    /// ends at the window's start; `off` may also be no offset of this block (the
    /// region then is not one of the window's neighbours).
    #[inline(always)]
    fn rewind_to(&self, off: usize, span: usize) -> bool {
        if !self.ends_at_head(off, span) {
            return false; // another block's (or ring's, or the heap's) region, or not the latest
        }
        self.head.set(off);
        self.leave_window_unscanned(off);
        true
    }

    /// [`rewind`](Self::rewind), and also when the region ends at the block end while
    /// the window is closed at the block start (as a failed walk leaves it): the window
    /// then opens over it, so a message started over after a failed write reuses the
    /// same bytes. Returns whether it did; `false`: nothing changed.
    ///
    /// # Safety
    /// As for [`rewind`](Self::rewind), with `span` the region's own span.
    #[inline]
    pub(crate) unsafe fn give_back(&self, hdr: NonNull<Header>, span: usize) -> bool {
        // SAFETY: forwarded from this function's contract.
        if unsafe { self.rewind(hdr, span) } {
            return true;
        }
        let off = self.offset_of(hdr);
        if off + span == self.len && self.head.get() == 0 && self.limit.get() == 0 {
            // `[off, len)` is ours, and the region headers before it tile `[0, off)`.
            self.head.set(off);
            self.limit.set(self.len);
            self.last.set(NO_LAST);
            self.leave_window_unscanned(off);
            return true;
        }
        false
    }

    /// Whether the region at offset `off` (computed with wrapping from any region's
    /// header address, of this block or not) and `span` bytes long ends where the window
    /// starts. `true` only for a region of this block (then `off < head`): any other
    /// region is a range of memory disjoint from this block's, and ending at the
    /// window's address, which lies past the block's start, would overlap it. So no
    /// separate `off < len` test: one load and comparison fewer on the `Vec` growth and
    /// release paths.
    #[inline(always)]
    fn ends_at_head(&self, off: usize, span: usize) -> bool {
        off.wrapping_add(span) == self.head.get()
    }

    /// Merges the free regions that follow the free region at `off` (of `have` bytes)
    /// until it holds `need` bytes or meets a live region or the block end. Returns the
    /// merged length.
    #[cold]
    fn merge(&self, off: usize, have: usize, need: usize) -> usize {
        let mut end = off + have;
        while end - off < need && end < self.len {
            // SAFETY: `end` is the boundary after a region, hence a header offset.
            // Acquire: as in `walk`, the next region may just have been released.
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
            // The headers merged over are headers no more: the scan may have been at one.
            self.forget_scan_in(off + 1, end);
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
        self.set_head(if next == self.len { 0 } else { next });
        // The window, closed, starts where the region ends (or at the block start, where
        // `bump` never finds it its neighbour).
        self.last.set(off);
        // Room was found: the next try that finds none starts its scan at the new head.
        self.cursor.set(NO_SCAN);
        let hdr_ptr = self.hdr_ptr(off);
        Claim {
            // SAFETY: derived from the block pointer, which is non-null.
            hdr: unsafe { NonNull::new_unchecked(hdr_ptr) },
            // SAFETY: `off + pad` lies inside the region (pad < need <= used).
            data: unsafe { NonNull::new_unchecked(hdr_ptr.cast::<u8>().add(pad)) },
            cap: used - pad,
        }
    }

    /// Grows the latest region, led by `hdr` and `span` bytes long, from the front of
    /// the window, without loading its header: to `want` bytes, or to all the window
    /// holds if that is less but at least `min`. The `Vec` that is the last allocation
    /// made, pushed past its capacity; an `ExtBuf` written past its capacity. When the
    /// window is too short it is extended as far as the free regions go with `sweep`,
    /// else only as far as `want`. Returns the new span, or `None` (nothing changed):
    /// not the latest region, or the window is too small.
    ///
    /// # Safety
    /// - the caller, on the owning thread, holds the unique handle of the region led by
    ///   `hdr`;
    /// - `span` is at most the region's span (see [`rewind`](Self::rewind)); `min` and
    ///   `want` are multiples of [`WORD`] with `span <= min <= want`.
    #[inline]
    pub(crate) unsafe fn grow_latest(
        &self,
        hdr: NonNull<Header>,
        span: usize,
        min: usize,
        want: usize,
        sweep: bool,
    ) -> Option<usize> {
        let off = (hdr.as_ptr() as usize).wrapping_sub(self as *const Self as usize + CTL);
        // See `ends_at_head`: past it, `off < head <= limit`, so `limit - off` does
        // not overflow, and `off + new` is at most `limit`.
        if !self.ends_at_head(off, span) {
            return None;
        }
        if self.limit.get() - off < min {
            // Without `sweep`, only as far as `want` (no underflow: `want >= min >
            // limit - off >= span`): an `ExtBuf` reads the headers it grows over a few
            // at a time, between its writes. Sweeping every free region at once, as a
            // claim does, chases headers the releasing core has just written, one cache
            // miss after the other: where a cache line takes ~330 ns to cross to the
            // other core and back, ringal's extendable 1 KiB x 64 row took 129 ms that
            // way, 118 this way (ringal 115; where it takes ~70 ns, 63 either way). The
            // allocator adapters sweep: a `Vec` grown by `reserve_exact(1)` asks for
            // exactly what it needs each time, and took 9-17 % longer without.
            if sweep {
                self.sweep();
            } else {
                self.extend(want - span);
            }
            if self.limit.get() - off < min {
                return None;
            }
        }
        let new = want.min(self.limit.get() - off);
        // SAFETY: `hdr` leads our live region (contract), which ends at the window:
        // `[off, off + new)` is the region and the window's front, both ours. The
        // count stays 1 (a unique handle), so the region stays locked while it grows.
        unsafe { self.hdr(off) }.store(pack(new, 1), Ordering::Relaxed);
        self.head.set(off + new);
        Some(new)
    }

    /// Grows the live region led by `hdr` (owned by a handle of this thread) in place so
    /// that it spans at least `want` bytes, by absorbing free successors. Returns the new
    /// span, or `None` (nothing changed) when the successors do not suffice.
    pub(crate) fn grow_in_place(&self, hdr: NonNull<Header>, want: usize) -> Option<usize> {
        let off = self.offset_of(hdr);
        // SAFETY: `hdr` leads a live region of this block.
        let h = unsafe { self.hdr(off) }.load(Ordering::Relaxed);
        let have = span(h);
        if off + have == self.head.get() && self.limit.get() - off >= want {
            // The latest region, and the window after it holds the rest: take it from
            // the window's front.
            // SAFETY: `hdr` is ours; the count (a unique handle) stays.
            unsafe { self.hdr(off) }.store(pack(want.max(have), count(h)), Ordering::Relaxed);
            self.head.set(off + want.max(have));
            return Some(want.max(have));
        }
        self.close();
        if off != 0 && off + want > self.edge.get() && self.start_is_free() {
            return None; // the caller moves it to the start instead (see `relocate`)
        }
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
        // The headers grown over are headers no more (see `merge`).
        self.forget_scan_in(off + 1, end);
        self.extend_edge(off + new_span);
        let head = self.head.get();
        if head > off && head < off + new_span {
            self.set_head(if off + new_span == self.len {
                0
            } else {
                off + new_span
            });
        }
        Some(new_span)
    }

    /// Moves the live region led by `hdr` (held by a unique handle of this thread, its
    /// data right after the header) to the first place, walking as a claim does (the
    /// same try: see [`walk`](Self::walk)), where `bytes` data bytes fit, counting the
    /// region's own span as free: so it finds every place a claim's try would, and also
    /// the free space around the region itself (which a claim made while the region is
    /// held cannot use). The first `len` data bytes move with it. Returns the new region
    /// (one handle), or `None` with nothing changed but the window closed (and the
    /// walk's scan moved on).
    ///
    /// # Safety
    /// - the caller holds the unique handle of the region led by `hdr`, on the owning
    ///   thread, and on success uses neither it nor the old data again;
    /// - the region was claimed with alignment at most [`WORD`] (data at `hdr + HDR`),
    ///   and `len` is at most its data bytes and at most `bytes`.
    pub(crate) unsafe fn relocate(
        &self,
        hdr: NonNull<Header>,
        len: usize,
        bytes: usize,
    ) -> Option<Claim> {
        debug_assert!(len <= bytes, "moving {len} bytes into {bytes}");
        let need = HDR + round_up(bytes, WORD);
        if need > self.len {
            return None;
        }
        self.close();
        let ours = self.offset_of(hdr);
        // SAFETY: `hdr` leads our live region (contract).
        // Relaxed: only this thread changes the header of a uniquely held region.
        let ours_span = span(unsafe { self.hdr(ours) }.load(Ordering::Relaxed));
        let run = |off: usize| self.run_at(off, ours, need);
        let found = self.scan(|off, wrapped| {
            let (free, have) = run(off);
            if free < need {
                let live = free == 0;
                return Err(Miss { have, live });
            }
            // As in `walk`: the block start before pages never touched.
            if off != 0 && !wrapped && off + need > self.edge.get() {
                let (at_start, _) = run(0);
                if at_start >= need {
                    return Ok((0, at_start));
                }
            }
            Ok((off, free))
        });
        let (at, have) = found?;
        let used = if have - need >= HDR { need } else { have };
        let dst = self.hdr_ptr(at).cast::<u8>();
        let src = hdr.as_ptr().cast::<u8>();
        let covers_ours = at <= ours && ours < at + have;
        // SAFETY: both ranges lie in this block: ours holds `len` data bytes after its
        // header (contract), and the new region `need > HDR + len` bytes. They overlap
        // only when the run holds our region (`ptr::copy` is a memmove).
        unsafe { core::ptr::copy(src.add(HDR), dst.add(HDR), len) };
        if used != have {
            // SAFETY: `at + need` lies inside the free run, past the moved bytes, on a
            // word boundary; it becomes a free region's header.
            unsafe {
                self.hdr_ptr(at + need)
                    .write(Header::new(pack(have - need, 0)))
            };
        }
        if !covers_ours {
            // SAFETY: our region, which nobody else touches, is given up here.
            // Relaxed: the bytes are reused by this thread only.
            unsafe { self.hdr(ours) }.store(pack(ours_span, 0), Ordering::Relaxed);
        }
        // SAFETY: `at` leads the free run we just took (our old region, if inside it, is
        // given up by this store). Relaxed: as in `take`.
        unsafe { self.hdr_ptr(at).write(Header::new(pack(used, 1))) };
        self.extend_edge(at + used);
        let next = at + used;
        self.set_head(if next == self.len { 0 } else { next });
        // The run taken may have covered headers (see `merge`).
        self.cursor.set(NO_SCAN);
        self.forget_scan_in(at + 1, at + have);
        Some(Claim {
            // SAFETY: derived from the block pointer, which is non-null.
            hdr: unsafe { NonNull::new_unchecked(dst.cast()) },
            // SAFETY: `HDR < used`: the data starts inside the new region.
            data: unsafe { NonNull::new_unchecked(dst.add(HDR)) },
            cap: used - HDR,
        })
    }

    /// [`relocate`](Self::relocate)'s look at the header `off`: the run of free regions
    /// from it, the region at `ours` counted free, up to `need` bytes: (its bytes, or 0
    /// when `off` leads a live region; the bytes to the next header the walk looks at).
    /// No header is merged, as a merge over our region would free it before the move.
    #[inline(always)]
    fn run_at(&self, off: usize, ours: usize, need: usize) -> (usize, usize) {
        // Acquire: pairs with the release of whichever thread released the region, so
        // its last writes happen before our reuse (as in `walk`).
        // SAFETY: `off` is a header offset (the walk moves from header to header by
        // their spans, and a run ends at a region boundary).
        let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
        if count(h) != 0 && off != ours {
            return (0, span(h));
        }
        let mut have = span(h);
        while have < need && off + have < self.len {
            let end = off + have;
            // SAFETY: the boundary after a region is a header offset.
            // Acquire: as above.
            let n = unsafe { self.hdr(end) }.load(Ordering::Acquire);
            if count(n) != 0 && end != ours {
                break;
            }
            have += span(n);
        }
        (have, span(h).max(have))
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
        if off + have == self.head.get() {
            // The latest region: its tail joins the window.
            // SAFETY: `hdr` is ours (see above).
            unsafe { self.hdr(off) }.store(pack(keep, count(h)), Ordering::Relaxed);
            self.head.set(off + keep);
            return;
        }
        self.close();
        // SAFETY: `off + keep` is inside our own region, on a word boundary.
        unsafe {
            self.hdr_ptr(off + keep)
                .write(Header::new(pack(have - keep, 0)))
        };
        // SAFETY: `hdr` is ours (see above).
        unsafe { self.hdr(off) }.store(pack(keep, count(h)), Ordering::Relaxed);
        if self.head.get() == off + have || (self.head.get() == 0 && off + have == self.len) {
            self.set_head(off + keep);
        }
    }

    /// Splits the live region led by `hdr` after `keep` bytes (a multiple of [`WORD`],
    /// at least the header): the rest becomes a region of its own with one handle,
    /// returned as a claim of it (data right after its header). `None` (nothing changed)
    /// when the rest would have fewer than `least` data bytes (or none). The window and
    /// the walk's scan are untouched: the two regions tile what the one did, both live.
    #[cfg(real_std)]
    pub(crate) fn split(&self, hdr: NonNull<Header>, keep: usize, least: usize) -> Option<Claim> {
        debug_assert!(keep % WORD == 0 && keep >= HDR, "bad split at {keep}");
        let off = self.offset_of(hdr);
        // SAFETY: `hdr` leads a live region of this block, held by this thread.
        let h = unsafe { self.hdr(off) }.load(Ordering::Relaxed);
        let have = span(h);
        if have < keep + HDR + least.max(WORD) {
            return None;
        }
        let tail = self.hdr_ptr(off + keep);
        // A plain write: the new region reaches other threads as the handle made below,
        // through a synchronising channel that carries this write with it (as a claim's).
        // SAFETY: `off + keep` is inside our own region (`keep + HDR <= have`), on a word
        // boundary; its bytes are ours, and become the new region's header.
        unsafe { tail.write(Header::new(pack(have - keep, 1))) };
        // SAFETY: `hdr` is ours (see above).
        unsafe { self.hdr(off) }.store(pack(keep, count(h)), Ordering::Relaxed);
        Some(Claim {
            // SAFETY: derived from the block pointer, which is non-null.
            hdr: unsafe { NonNull::new_unchecked(tail) },
            // SAFETY: `HDR < have - keep`: the data starts inside the new region.
            data: unsafe { NonNull::new_unchecked(tail.cast::<u8>().add(HDR)) },
            cap: have - keep - HDR,
        })
    }

    /// The regions from offset `from` (a header offset) to the block end, as (offset,
    /// header word) pairs, each header read with Acquire: it pairs with the region's
    /// release, so once a region reads free, no handle touches it any more. The window
    /// must be closed (its inside is not tiled by headers).
    fn regions_from(&self, from: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut off = from;
        core::iter::from_fn(move || {
            (off < self.len).then(|| {
                // SAFETY: `off` is a header offset: `from` is, and the walk moves by
                // spans.
                let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
                let at = off;
                off += span(h);
                (at, h)
            })
        })
    }

    /// Walks the regions from `cursor`, returning `true` when all of them are free.
    /// Otherwise records the first live region in `cursor` so the next scan resumes
    /// there (each free region is visited once over all scans).
    pub(crate) fn scan_free(&self) -> bool {
        debug_assert_eq!(self.head.get(), self.limit.get(), "sweeping an open window");
        match self
            .regions_from(self.cursor.get())
            .find(|&(_, h)| count(h) != 0)
        {
            Some((off, _)) => {
                self.cursor.set(off);
                false
            }
            None => true,
        }
    }

    /// Counts live regions and their bytes, and the bytes of the longest run of free
    /// regions, headers included (for `Ring::stats`).
    pub(crate) fn usage(&self) -> (usize, usize, usize) {
        self.close();
        let (mut live, mut bytes, mut run, mut longest) = (0, 0, 0, 0);
        for (_, h) in self.regions_from(0) {
            if count(h) == 0 {
                run += span(h);
                longest = longest.max(run);
            } else {
                (live, bytes, run) = (live + 1, bytes + span(h), 0);
            }
        }
        (live, bytes, longest)
    }

    /// Takes the free memory past what the block needs now, for its pages to go back to
    /// the system, and keeps claims below it: the edge of the memory handed out moves
    /// back to twice the bytes live (an eighth more in a block that packs low, see
    /// [`pack_low`](Self::pack_low); at least an edge step), and every run of free
    /// regions past it that holds a whole page a claim touched (below the old edge)
    /// becomes one region, held (count 1) and handed to `take` with the bytes of it
    /// that claims touched (whose handle gives their pages back with
    /// `FixedBufMut::discard_pages`, then releases the region as any handle does, on
    /// any thread). So a pool gives the pages back after its lock is let go, and claims
    /// meanwhile step over the runs as over any live region. A walk of every header;
    /// owner thread.
    ///
    /// Claims then lap the memory below the new edge and move it on only when that has
    /// no room (as they do after the block is made), so the pages given back stay so
    /// while what is live fits below it. Live regions past it (frames kept from before)
    /// stay where they are; once released, a later call gives their pages back too.
    ///
    /// `lapped`: the block's claims lap all of it ([`without_edge`](Self::without_edge)):
    /// the pages of every free run are given back, and the edge stays at the end. In a
    /// block that packs low ([`pack_low`](Self::pack_low)), those of every free run of
    /// [`LOW_RUN`] bytes or more too.
    ///
    /// Returns the live regions and their bytes, as [`usage`](Self::usage) counts them
    /// before any run is taken (its walk counts them: no walk of its own).
    pub(crate) fn take_free_runs(
        &self,
        lapped: bool,
        take: &mut impl FnMut(Claim, usize),
    ) -> (usize, usize) {
        self.close();
        // The pages claims touched: below the edge, and below where it was before an
        // earlier call moved it back past regions then live (released since, or not).
        let edge = self.edge.get().max(self.touched_bytes());
        let (mut live, mut bytes) = (0, 0);
        let keep = if lapped {
            0
        } else {
            for (_, h) in self.regions_from(0).filter(|&(_, h)| count(h) != 0) {
                (live, bytes) = (live + 1, bytes + span(h));
            }
            let slack = if self.low.get() { bytes / 8 } else { bytes };
            let keep = round_up(bytes.saturating_add(slack), WORD)
                .max(EDGE_STEP.min(self.len / 16))
                .min(self.len);
            if keep >= edge {
                if !self.low.get() {
                    return (live, bytes);
                }
            } else {
                self.edge.set(keep);
            }
            keep
        };
        // Past the last live region, every free run's touched pages go back below.
        let mut live_end = 0;
        // In a block that packs low, a long run goes back wherever it lies: claims
        // fill the lowest room first, so one above it stays free a while.
        let keep_of = |start: usize, end: usize| {
            if self.low.get() && end - start >= LOW_RUN {
                start
            } else {
                keep
            }
        };
        // Claims start over from the block start, a region boundary whatever is merged
        // below: the head may lie inside a run about to become one region (a header
        // no more, whose old span may reach into the pages given back).
        self.set_head(0);
        let mut run = None;
        let mut off = 0;
        while off < self.len {
            // SAFETY: `off` is a header offset (the window is closed; moves by spans).
            // Acquire: as in `regions_from`.
            let h = unsafe { self.hdr(off) }.load(Ordering::Acquire);
            if count(h) == 0 {
                run = run.or(Some(off));
            } else {
                if lapped {
                    (live, bytes) = (live + 1, bytes + span(h));
                }
                if let Some(start) = run.take() {
                    self.take_run(start, off, keep_of(start, off), edge, take);
                }
                live_end = off + span(h);
            }
            off += span(h);
        }
        if let Some(start) = run {
            self.take_run(start, self.len, keep_of(start, self.len), edge, take);
        }
        // A region live past the new edge keeps its pages until a later call, which
        // gives them back once it is released.
        self.set_touched(live_end.min(edge));
        (live, bytes)
    }

    /// [`touched`](Self::touched) in bytes: at least what claims may have touched past
    /// the edge, at most the block's length.
    fn touched_bytes(&self) -> usize {
        match self.touched.get() {
            0 => 0,
            255 => self.len,
            t => (self.len / 256 + 1)
                .saturating_mul(usize::from(t))
                .min(self.len),
        }
    }

    /// Records that claims may have touched the block's pages below `bytes`: rounded
    /// up, so that [`touched_bytes`](Self::touched_bytes) is at least `bytes`.
    fn set_touched(&self, bytes: usize) {
        let unit = self.len / 256 + 1;
        self.touched.set(bytes.div_ceil(unit).min(255) as u8);
    }

    /// The free regions `start..end` (a run, which this thread owns): the part past
    /// `keep` made one region, held and handed to `take` with the bytes of its data
    /// below `edge` (those claims touched) if they hold a whole page, else left free.
    fn take_run(
        &self,
        start: usize,
        end: usize,
        keep: usize,
        edge: usize,
        take: &mut impl FnMut(Claim, usize),
    ) {
        if end <= keep {
            return;
        }
        let from = start.max(keep);
        if from > start {
            // SAFETY: `start < keep < end`: both headers inside the free run, word-aligned
            // (`keep` is rounded to a word); a plain write, as in `bump`.
            unsafe {
                self.hdr_ptr(start)
                    .write(Header::new(pack(from - start, 0)))
            };
        }
        self.forget_scan_in(start + 1, end);
        let base = self.regions.as_ptr() as usize;
        let lo = round_up(base + from + HDR, PAGE);
        let hi = ((base + end) & !(PAGE - 1)).min(round_up(base + edge + HDR, PAGE));
        // Held (count 1) when its pages go back, else free: a plain write, as in `take`'s
        // split (the handle reaches other threads through a synchronising channel).
        let held = u64::from(hi > lo);
        // SAFETY: `from` is `start` (a free region's header) or `keep` (written above),
        // inside the run this thread owns; `end - from` is the rest of the run.
        unsafe {
            self.hdr_ptr(from)
                .write(Header::new(pack(end - from, held)))
        };
        if held == 1 {
            let hdr = self.hdr_ptr(from);
            let run = Claim {
                // SAFETY: derived from the block pointer, which is non-null.
                hdr: unsafe { NonNull::new_unchecked(hdr) },
                // SAFETY: the data starts after the header, inside the region.
                data: unsafe { NonNull::new_unchecked(hdr.cast::<u8>().add(HDR)) },
                cap: end - from - HDR,
            };
            take(run, hi - (base + from + HDR));
        }
    }

    /// Whether no region of this block is live: [`usage`](Self::usage) that stops at
    /// the first live region (a long-lived buffer near the start costs one load).
    pub(crate) fn drained(&self) -> bool {
        self.close();
        self.regions_from(0).all(|(_, h)| count(h) == 0)
    }
}

/// Asks the processor to bring the cache line holding `p` closer, ahead of a read or
/// write. A hint: nothing is read or written, and `p` need not point into any
/// allocation.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse", not(miri)))]
    #[allow(unused_unsafe)] // `_mm_prefetch` is a safe function from Rust 1.87 on
    // SAFETY: a prefetch never faults and has no effect the program can observe,
    // whatever the address; SSE, its target feature, is enabled (the `cfg` above).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse", not(miri))))]
    let _ = p;
}
