//! Slots: regions of a ring cut into same-size slots, for buffers that are claimed in
//! any order and released in any order (a pool's copies of kept frames), without a
//! walk over the live ones.
//!
//! ```text
//! page = one ring region (count 1, held by the `Slots` that cut it)
//! | PageCtl: free word, region | slot 0: back | hdr | data ... | slot 1 ... | slot n-1 |
//! ```
//!
//! A slot is a region in all but its place: its header (a count of handles, its span,
//! and [`CARRY`] on a ring header, which marks a slot) leads its data, so `FixedBufMut`
//! and `FixedBuf` hold it as any region and release it the same way; the word before the
//! header, `back`, tells the release where its page's control is and which slot it is.
//! A release whose count reaches zero sets the slot's bit in its page's free word, one
//! `Release` RMW ([`release`]); the claimer (one thread at a time: a pool shard's lock)
//! takes a page's bits with one swap when the bits it holds run out, and visits its
//! pages in turn. So a claim looks at one word, not at the live slots, whatever is
//! kept; a page whose slots are all free goes back to its ring ([`Slots::trim`]).
//!
//! The free word (as the object pools' pages: `slab/page.rs`):
//! - bit `i < n` set: slot `i` was released and not taken back by the claimer; a slot's
//!   bit is set once per claim, and the word's bits and the claimer's are disjoint;
//! - bits `n..63` are never set while the claimer holds the page;
//! - bit 63 ([`ORPHAN`]): the claimer let go of the page with slots still live (its
//!   `Slots` dropped) and gave back its bits and bits `n..63`; whoever moves the word to
//!   `u64::MAX` releases the page's region, once.

// The claiming side serves a pool's copies (`io/pool.rs`, with `std`); the release
// is every region's (`region.rs`).
#![cfg_attr(not(real_std), allow(dead_code))]

use alloc::vec::Vec;
use core::mem::size_of;
use core::ptr::NonNull;

use super::header::{pack, round_up, Header, CARRY, HDR, WORD};
use super::region::release_unique;
use super::Claim;
use crate::sync::{AtomicU64, Ordering};
use crate::FixedBufMut;

/// A page's control, at the start of its region's data.
#[repr(C)]
struct PageCtl {
    /// See the module's invariants.
    free: AtomicU64,
    /// The page's region, released when no slot of it is live.
    region: NonNull<Header>,
}

/// Set in a page's free word when its claimer lets go of it (see the module's doc).
const ORPHAN: u64 = 1 << 63;

/// Bytes before a page's first slot.
const CTL: usize = round_up(size_of::<PageCtl>(), WORD);

/// Bytes of a slot besides its data: the `back` word and the header.
const SLOT_EXTRA: usize = WORD + HDR;

/// Size classes: 1 to 8 words of data, then four a doubling up to 2,048 words (16 KiB):
/// a slot wastes at most a quarter of its data.
pub(crate) const CLASSES: usize = 40;

/// The most data bytes a slot holds.
pub(crate) const SLOT_MAX: usize = class_words(CLASSES - 1) * WORD;

/// Bytes of the slots of a page, about: each page has as many slots as this holds, and
/// between 16 and 63.
const PAGE_BYTES: usize = 64 << 10;

/// Claims of a class that only try its current page after a page could not be had.
const COOL_CLAIMS: u32 = 64;

/// A class keeps pages whose slots are all free, at a trim that is not `all`, only
/// while fewer than a this-many-th of its live slots would be free without them (see
/// [`Slots::trim`]). As many free as live kept a shard's empty pages of 16 KiB slots
/// resident between ticks, up to 65 (17 MiB) in a server keeping one frame in ten
/// (conns scenario); let go, with the long free runs of the copy ring given back
/// (`BlockCtl::pack_low`), the server's memory per frame kept went from 18.3-19.0 KiB
/// to 17.6-18.3 (`FramedRead`: 16.4-16.7), at the same rate.
const SPARE_SHARE: usize = 16;

/// The class of `bytes` data bytes (at least one), if a slot holds them.
#[inline]
pub(crate) fn class_of(bytes: usize) -> Option<usize> {
    let w = bytes.max(1).div_ceil(WORD);
    if w <= 8 {
        return Some(w - 1);
    }
    // w - 1 >= 8: its highest bit `b >= 3`, and the two bits below it pick one of four.
    let b = (usize::BITS - 1 - (w - 1).leading_zeros()) as usize;
    let class = 8 + (b - 3) * 4 + ((w - 1) >> (b - 2)) - 4;
    (class < CLASSES).then_some(class)
}

/// The data words of a slot of `class`.
const fn class_words(class: usize) -> usize {
    if class < 8 {
        return class + 1;
    }
    let k = class - 8;
    (5 + k % 4) << (k / 4 + 1)
}

/// Bytes of a slot of `class`.
fn class_slot(class: usize) -> usize {
    SLOT_EXTRA + class_words(class) * WORD
}

/// The bits of a page's slots (`n` of them).
fn usable(n: usize) -> u64 {
    (1 << n) - 1
}

/// A class's pages, and what its claimer holds.
struct Class {
    /// Bytes of a slot (its `back` word and header included), and slots a page.
    slot: usize,
    count: usize,
    pages: Vec<NonNull<PageCtl>>,
    /// Of each page (as `pages`), the free slots whose pages went back to the system
    /// ([`Slots::discard_free`]) and that no claim took since.
    discarded: Vec<u64>,
    /// The page claims take from.
    at: usize,
    /// Free bits of `pages[at]` taken from its word, not handed out yet.
    local: u64,
    /// Pages visited in the lap under way, and free slots they had.
    visits: usize,
    found: usize,
    /// Claims left that try the current page only (see [`COOL_CLAIMS`]).
    cool: u32,
}

impl Class {
    /// A class of slots of `slot` bytes, no page yet.
    fn new(slot: usize) -> Class {
        Class {
            slot,
            count: (PAGE_BYTES / slot).clamp(16, 63),
            pages: Vec::new(),
            discarded: Vec::new(),
            at: 0,
            local: 0,
            visits: 0,
            found: 0,
            cool: 0,
        }
    }
}

/// Classes of one exact size at most (see [`Slots::claim_exact`]).
const EXACT: usize = 4;

/// The claimer of a ring's slots: pages of each class. One thread at a time uses it.
#[derive(Default)]
pub(crate) struct Slots {
    classes: Vec<Class>,
    /// Classes of the exact sizes asked of [`Slots::claim_exact`], at most [`EXACT`].
    exact: Vec<Class>,
}

// SAFETY: the pages are regions of a ring the owner of `Slots` claims from (a pool
// shard's rings, behind the same lock); their words are atomic, and the rest of a page
// is written by the claimer only before a slot is handed out.
unsafe impl Send for Slots {}

impl Slots {
    /// A slot of `n` data bytes (at most [`SLOT_MAX`]) of `class_of(n)`: from the pages
    /// of its class, visited in turn, and from a new page that `region(bytes)` claims
    /// when a lap of them found fewer free slots than pages (`None` when it cannot).
    pub(crate) fn claim(
        &mut self,
        n: usize,
        region: impl FnMut(usize) -> Option<FixedBufMut>,
    ) -> Option<FixedBufMut> {
        let class = class_of(n)?;
        if self.classes.is_empty() {
            self.classes = (0..CLASSES).map(|k| Class::new(class_slot(k))).collect();
        }
        claim_in(&mut self.classes[class], region)
    }

    /// A slot of exactly `n` data bytes (rounded up to a word; any size a page holds 16
    /// of), for a buffer that one size class would hold with up to a quarter more: the
    /// framed reader's regions of one frame each (`io/core.rs`). Of up to [`EXACT`]
    /// sizes at a time: `None` for another while each has a page live.
    pub(crate) fn claim_exact(
        &mut self,
        n: usize,
        region: impl FnMut(usize) -> Option<FixedBufMut>,
    ) -> Option<FixedBufMut> {
        let slot = SLOT_EXTRA + round_up(n.max(1), WORD);
        let at = match self.exact.iter().position(|c| c.slot == slot) {
            Some(at) => at,
            None if self.exact.len() < EXACT => {
                self.exact.push(Class::new(slot));
                self.exact.len() - 1
            }
            None => {
                let at = self.exact.iter().position(|c| c.pages.is_empty())?;
                self.exact[at] = Class::new(slot);
                at
            }
        };
        claim_in(&mut self.exact[at], region)
    }
}

/// A slot of class `c`: from its pages, visited in turn, and from a new page that
/// `region(bytes)` claims when a lap of them found fewer free slots than pages.
fn claim_in(
    c: &mut Class,
    mut region: impl FnMut(usize) -> Option<FixedBufMut>,
) -> Option<FixedBufMut> {
    let (slot, count) = (c.slot, c.count);
    loop {
        if c.local != 0 {
            let idx = c.local.trailing_zeros() as usize;
            c.local &= c.local - 1;
            c.discarded[c.at] &= !(1 << idx);
            // SAFETY: `pages[at]` is a live page of this class, and slot `idx` was
            // free: its bit came from the page's word or from the page being new.
            return Some(unsafe { hand_out(c.pages[c.at], idx, slot) });
        }
        if let Some(&page) = c.pages.get(c.at) {
            // Acquire: pairs with the releases' `Release` RMWs, so every use of a
            // slot happens before its reuse.
            // SAFETY: the claimer's pages are live while it lists them.
            let bits = unsafe { page.as_ref() }.free.swap(0, take());
            debug_assert_eq!(bits & !usable(count), 0, "page {page:p}: {bits:#x}");
            c.local = bits;
            if bits != 0 {
                c.visits += 1;
                c.found += bits.count_ones() as usize;
                continue;
            }
            if c.cool != 0 {
                c.cool -= 1;
                return None;
            }
            c.visits += 1;
            c.at = (c.at + 1) % c.pages.len();
            if c.visits < c.pages.len() {
                continue;
            }
            // A lap: as many free slots as pages visited is room enough.
            let full = c.found < c.visits;
            (c.visits, c.found) = (0, 0);
            if !full {
                continue;
            }
        }
        // A new page, its slots all free: the next turn hands out its first.
        let Some(page) = region(CTL + slot * count).map(new_page) else {
            c.cool = COOL_CLAIMS;
            return None;
        };
        c.pages.push(page);
        c.discarded.push(0);
        c.at = c.pages.len() - 1;
        c.local = usable(count);
        (c.visits, c.found) = (0, 0);
    }
}

impl Slots {
    /// Every class, of a size class or exact.
    fn all_classes(&mut self) -> impl Iterator<Item = &mut Class> {
        self.classes.iter_mut().chain(self.exact.iter_mut())
    }

    /// Releases the regions of pages whose slots are all free, as long as the pages
    /// of their class keep a [`SPARE_SHARE`]th of its live slots free (all of them
    /// when `all`, the current page of each class too): pages come back to the ring as
    /// what is kept falls, not while claims reuse their slots. Returns the slots live
    /// and the pages kept.
    pub(crate) fn trim(&mut self, all: bool) -> (usize, usize) {
        let (mut live, mut kept) = (0, 0);
        for c in self.all_classes() {
            let count = c.count;
            let free_of = |c: &Class, j: usize| {
                // SAFETY: a listed page is live.
                let word = unsafe { c.pages[j].as_ref() }.free.load(Ordering::Relaxed);
                let local = if j == c.at { c.local } else { 0 };
                (word | local).count_ones() as usize
            };
            let free: usize = (0..c.pages.len()).map(|j| free_of(c, j)).sum();
            let (class_live, mut spare) = (c.pages.len() * count - free, free);
            let mut j = 0;
            while j < c.pages.len() {
                // A page may have emptied since `spare` was counted (a release on
                // another thread): `spare` may be short of its slots.
                let empty = || free_of(c, j) == count;
                let keeps =
                    || (spare.checked_sub(count)).is_some_and(|s| s >= class_live / SPARE_SHARE);
                if !(empty() && (all || (j != c.at && keeps()))) {
                    j += 1;
                    continue;
                }
                spare = spare.saturating_sub(count);
                let page = c.pages.swap_remove(j);
                c.discarded.swap_remove(j);
                if j == c.at {
                    c.local = 0;
                }
                if c.at == c.pages.len() {
                    // `at` was the last page, moved to `j`, or removed.
                    c.at = if j < c.pages.len() { j } else { 0 };
                }
                // SAFETY: a page is live while listed (it was, above).
                let ctl = unsafe { page.as_ref() };
                // Acquire: the releases' uses of the slots happen before the region's
                // reuse. Every slot is free: nothing reaches the page but this claimer.
                ctl.free.load(Ordering::Acquire);
                let region = ctl.region;
                // SAFETY: the page's region is held by the page (count 1), and no slot of
                // it is live: this is its last handle, given up here.
                unsafe { release_unique(region, WORD) };
            }
            (c.visits, c.found) = (0, 0);
            (live, kept) = (live + class_live, kept + c.pages.len());
        }
        (live, kept)
    }
}

impl Slots {
    /// Gives the pages of free slots back to the system (`madvise`), those of slots of
    /// two pages or more: each slot's pages once, until a claim takes it again. A run
    /// of free slots side by side goes back as one range: a free slot's `back` word and
    /// header are written again when it is handed out, so none of its bytes is live.
    /// Stops once ranges of `most` bytes went. Returns the bytes given back that were
    /// resident.
    ///
    /// Pages of slots whose slots are all free go back to the ring ([`trim`]), and with
    /// its free runs to the system; a page with a slot live stayed resident whole. A
    /// store that deletes most of its values in no order leaves many such pages.
    ///
    /// Under the claimer's lock (its `&mut`): a free slot stays free meanwhile, and
    /// releases on other threads only set the bits of other (live) slots.
    ///
    /// [`trim`]: Self::trim
    pub(crate) fn discard_free(&mut self, most: usize) -> usize {
        use crate::sync::{discard_pages, resident_bytes, PAGE};
        let (mut given, mut left) = (0, most);
        for c in self.all_classes() {
            let (slot, count) = (c.slot, c.count);
            if slot < 2 * PAGE || left == 0 {
                continue;
            }
            for j in 0..c.pages.len() {
                // SAFETY: a listed page is live.
                let ctl = unsafe { c.pages[j].as_ref() };
                // Acquire: the releases' uses of the slots happen before their pages
                // read as zeros.
                let word = ctl.free.load(Ordering::Acquire);
                let free = (word | if j == c.at { c.local } else { 0 }) & usable(count);
                if free & !c.discarded[j] == 0 {
                    continue;
                }
                let page = c.pages[j].cast::<u8>().as_ptr();
                let base = page as usize + CTL;
                let mut rest = free;
                while rest != 0 && left != 0 {
                    let first = rest.trailing_zeros() as usize;
                    let len = (rest >> first).trailing_ones() as usize;
                    let bits = (u64::MAX >> (64 - len)) << first;
                    rest &= !bits;
                    if bits & !c.discarded[j] == 0 {
                        continue;
                    }
                    c.discarded[j] |= bits;
                    let start = (base + first * slot).next_multiple_of(PAGE);
                    let end = (base + (first + len) * slot) / PAGE * PAGE;
                    if end <= start {
                        continue;
                    }
                    left = left.saturating_sub(end - start);
                    // Inside the page's region: `end - page <= CTL + slot * count`.
                    let pages = page.wrapping_add(start - page as usize);
                    let resident = resident_bytes(pages, end - start);
                    // SAFETY: whole pages inside free slots of a live page (this
                    // claimer's, which hands none of them out meanwhile): no live byte
                    // is in them, and a slot handed out writes its header first.
                    if resident != 0 && unsafe { discard_pages(pages, end - start) } {
                        given += resident;
                    }
                }
            }
        }
        given
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for c in self.all_classes() {
            let count = c.count;
            for (j, &page) in c.pages.iter().enumerate() {
                // The bits of slots it never had, and `ORPHAN`.
                let mut bits = ORPHAN | (usable(63) & !usable(count));
                if j == c.at {
                    bits |= c.local;
                }
                // SAFETY: a listed page is live; the claimer forgets it now, giving back
                // the bits it held, once.
                unsafe { give_back(page, bits) };
            }
        }
    }
}

/// The ordering of the claimer's take of a page's word. Always `Acquire`; the loom
/// model below proves that the known-bug mutant `mutant_relaxed_take` (a loom switch,
/// see `sync::switch`) fails.
#[inline(always)]
fn take() -> Ordering {
    crate::sync::switch::weakened("mutant_relaxed_take", Ordering::Acquire)
}

/// A new page over `region`, every slot free (held by the claimer).
fn new_page(region: FixedBufMut) -> NonNull<PageCtl> {
    let (hdr, data, _) = region.into_raw();
    let ctl = data.cast::<PageCtl>();
    debug_assert_eq!(data.as_ptr() as usize % WORD, 0);
    // SAFETY: the region's data is the caller's to write, word-aligned, and holds the
    // control (the claim asked for `CTL` bytes before the slots).
    unsafe {
        ctl.as_ptr().write(PageCtl {
            free: AtomicU64::new(0),
            region: hdr,
        })
    };
    ctl
}

/// Slot `idx` of `page`, `slot` bytes each, as a buffer of one handle.
///
/// # Safety
/// `page` is live and of slots of `slot` bytes, and slot `idx` is free and the caller's.
unsafe fn hand_out(page: NonNull<PageCtl>, idx: usize, slot: usize) -> FixedBufMut {
    let off = CTL + idx * slot;
    // SAFETY: slot `idx` lies inside the page's region (a claim of `CTL + slot * count`
    // bytes), and is the caller's to write: its `back` word and header.
    unsafe {
        let base = page.cast::<u8>().as_ptr().add(off);
        base.cast::<u64>().write(((off as u64) << 6) | idx as u64);
        let hdr = base.add(WORD).cast::<Header>();
        hdr.write(Header::new(pack(slot - WORD, 1) | CARRY));
        FixedBufMut::from_claim(
            Claim {
                hdr: NonNull::new_unchecked(hdr),
                data: NonNull::new_unchecked(base.add(SLOT_EXTRA)),
                cap: slot - SLOT_EXTRA,
            },
            0,
        )
    }
}

/// Releases the slot led by `hdr` into its page's free word; releases the page's region
/// too if its claimer let go of it and this was its last live slot.
///
/// # Safety
/// `hdr` leads a slot ([`CARRY`] on a ring header) whose last handle is gone (its
/// count is zero, or this was its one handle), and nothing touches the slot again.
pub(crate) unsafe fn release(hdr: NonNull<Header>) {
    // SAFETY: the slot is alive until its bit is set below; `back` precedes its header
    // and was written when it was handed out (before any handle existed).
    let back = unsafe { hdr.cast::<u64>().as_ptr().sub(1).read() };
    let idx = (back & 63) as usize;
    // SAFETY: `back` holds the slot's offset from its page's control, in the same region.
    let page = unsafe {
        hdr.cast::<u8>()
            .sub(WORD + (back >> 6) as usize)
            .cast::<PageCtl>()
    };
    // SAFETY: the page is live while this slot is, and the slot is given up here.
    unsafe { give_back(page, 1 << idx) };
}

/// Puts `bits` into `page`'s free word: one `AcqRel` RMW (`Release` for the uses of a
/// slot before it, `Acquire` for those of the others when it completes the word). The
/// page's region is released if this moves the word to `u64::MAX`.
///
/// # Safety
/// `page` is live and the caller holds `bits` (clear in the word and in the claimer's),
/// and gives them up.
unsafe fn give_back(page: NonNull<PageCtl>, bits: u64) {
    // SAFETY: the page is live (caller).
    let ctl = unsafe { page.as_ref() };
    let old = ctl.free.fetch_or(bits, Ordering::AcqRel);
    debug_assert_eq!(
        old & bits,
        0,
        "page {page:p}: bits {bits:#x} given back twice"
    );
    if old | bits == u64::MAX {
        let region = ctl.region;
        // SAFETY: the claimer let go of the page and no slot of it is live: nothing
        // reaches it but this thread, and the page's count of its region goes here.
        unsafe { release_unique(region, WORD) };
    }
}

#[cfg(all(test, real_std))]
mod tests {
    use super::*;
    use crate::Ring;

    #[test]
    fn classes_hold_their_sizes_and_waste_little() {
        let mut last = 0;
        for class in 0..CLASSES {
            let w = class_words(class);
            assert!(w > last, "class {class}");
            last = w;
        }
        // Every size natively; under Miri, every 61st.
        for bytes in (1..=SLOT_MAX).step_by(if cfg!(miri) { 61 } else { 1 }) {
            let class = class_of(bytes).unwrap();
            let have = class_words(class) * WORD;
            assert!(have >= bytes, "{bytes} in class {class}");
            assert!(
                class == 0 || class_words(class - 1) * WORD < bytes,
                "{bytes}"
            );
            assert!(have <= (bytes + WORD) * 5 / 4 + WORD, "{bytes}: {have}");
        }
        assert_eq!((SLOT_MAX, class_of(SLOT_MAX + 1)), (16 << 10, None));
    }

    #[test]
    fn slots_come_back_to_their_page_and_pages_to_the_ring() {
        let ring = Ring::new(1 << 20);
        let mut slots = Slots::default();
        let mut claim = |n| slots.claim(n, |len| ring.fixed(len)).unwrap();
        let a: Vec<_> = (0..100).map(|_| claim(1000)).collect();
        // 63 slots of 1,040 bytes a page.
        assert_eq!(ring.stats().live_buffers, 2);
        let frozen: Vec<_> = a.into_iter().map(FixedBufMut::freeze).collect();
        let clones = frozen.clone();
        drop(frozen);
        // 26 left on the second page, then a lap that finds none.
        let b: Vec<_> = (0..30).map(|_| claim(1000)).collect();
        assert_eq!(ring.stats().live_buffers, 3, "the clones hold every slot");
        drop((clones, b));
        assert_eq!(slots.trim(false), (0, 1));
        assert_eq!(ring.stats().live_buffers, 1);
        assert_eq!(slots.trim(true), (0, 0));
        assert_eq!(ring.stats().live_buffers, 0);
    }

    #[test]
    fn a_trim_keeps_a_sixteenth_of_the_live_slots_free() {
        let ring = Ring::new(1 << 20);
        let mut slots = Slots::default();
        // Ten pages of 63 slots of 1,040 bytes; the first two kept.
        let mut all: Vec<_> = (0..630)
            .map(|_| slots.claim(1000, |len| ring.fixed(len)))
            .collect();
        all.truncate(126);
        // Of the eight empty pages, the current one alone stays: its 63 free slots are
        // more than a sixteenth of the 126 live.
        assert_eq!(slots.trim(false), (126, 3));
        assert_eq!(ring.stats().live_buffers, 3);
        drop(all);
        assert_eq!(slots.trim(true), (0, 0));
    }

    #[test]
    fn slots_reuse_what_comes_back_before_a_new_page() {
        let ring = Ring::new(1 << 20);
        let mut slots = Slots::default();
        let mut kept = Vec::new();
        for i in 0..if cfg!(miri) { 1_000 } else { 10_000 } {
            let mut b = slots.claim(4000, |len| ring.claim_lowest(len)).unwrap();
            b.try_extend_from_slice(&[i as u8; 4000]).unwrap();
            if i % 10 == 0 {
                kept.push(b.freeze());
            }
            if kept.len() > 50 {
                kept.remove(0);
            }
        }
        // 51 kept and a few in flight: 16 slots a page.
        let live = ring.stats().live_buffers;
        assert!(live <= 8, "{live} pages");
        assert!(kept.iter().all(|f| f[..] == [f[0]; 4000][..]));
    }

    #[test]
    fn free_slots_give_their_pages_back_once_until_claimed_again() {
        let ring = Ring::new(4 << 20);
        let mut slots = Slots::default();
        // Two pages of 16 slots of 16 KiB, written (resident); one slot of each kept.
        let mut all: Vec<_> = (0..32)
            .map(|_| {
                let mut b = slots.claim(16 << 10, |len| ring.fixed(len)).unwrap();
                b.try_extend_from_slice(&[7; 16 << 10]).unwrap();
                b
            })
            .collect();
        let kept = (all.swap_remove(16), all.swap_remove(0));
        drop(all);
        let given = slots.discard_free(usize::MAX);
        if cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri))) {
            // 15 free slots side by side on each page: some 60 pages of 4 KiB.
            assert!((2 * 14 * (16 << 10)..=2 * 15 * (16 << 10) + 8192).contains(&given));
        } else {
            assert_eq!(given, 0);
        }
        assert_eq!(
            slots.discard_free(usize::MAX),
            0,
            "each slot's pages go once"
        );
        assert_eq!(slots.trim(false).0, 2, "the kept slots stay live");
        // A slot claimed again is written again, and goes back again once free.
        let mut b = slots.claim(16 << 10, |len| ring.fixed(len)).unwrap();
        b.try_extend_from_slice(&[9; 16 << 10]).unwrap();
        assert!(b.iter().all(|&x| x == 9) && kept.0.iter().all(|&x| x == 7));
        drop(b);
        let again = slots.discard_free(usize::MAX);
        assert!(cfg!(miri) || again >= 3 * 4096, "{again}");
        assert!(kept.1.iter().all(|&x| x == 7));
    }

    #[test]
    fn exact_slots_hold_their_length_in_a_few_sizes_at_a_time() {
        let ring = Ring::new(8 << 20);
        let mut slots = Slots::default();
        let exact = |slots: &mut Slots, n| slots.claim_exact(n, |len| ring.claim_lowest(len));
        // A frame of 16,384 bytes and its 4-byte length: a size class would take 20 KiB.
        let a: Vec<_> = (0..17).map(|_| exact(&mut slots, 16388).unwrap()).collect();
        assert!(a.iter().all(|b| b.capacity() == 16392 && b.is_slot()));
        assert_eq!(ring.stats().live_buffers, 2, "16 slots a page");
        let more: Vec<_> = [100, 5000, 9000]
            .map(|n| exact(&mut slots, n).unwrap())
            .into();
        assert_eq!(
            more.iter().map(|b| b.capacity()).collect::<Vec<_>>(),
            [104, 5000, 9000]
        );
        assert!(
            exact(&mut slots, 7).is_none(),
            "a fifth size while four have pages live"
        );
        drop(more);
        assert_eq!(slots.trim(true), (17, 2));
        let seven = exact(&mut slots, 7).unwrap();
        assert_eq!(seven.capacity(), 8, "a size whose pages all went gives way");
        drop((a, seven));
        assert_eq!(slots.trim(true), (0, 0));
        assert_eq!(ring.stats().live_buffers, 0);
    }

    /// A slot's span is its page's to say: the framed reader's resizing of the regions
    /// it reads into leaves a slot as it is.
    #[test]
    fn a_slot_is_never_resized() {
        let ring = Ring::new(1 << 20);
        let mut slots = Slots::default();
        let mut b = slots.claim_exact(16388, |len| ring.fixed(len)).unwrap();
        b.try_extend_from_slice(&[1; 6000]).unwrap();
        b.shrink_in(&ring);
        #[cfg(feature = "tokio")]
        b.shrink_to_in(8000, &ring);
        assert!(b.split_spare_in(64, &ring).is_none());
        b.grow_in(1 << 19, &ring);
        assert_eq!((b.capacity(), b.len()), (16392, 6000));
        b.try_extend_from_slice(&[2; 10392]).unwrap();
        let all = ring.fixed(1 << 19);
        assert!(
            all.is_some() && ring.fixed(1 << 18).is_none(),
            "the window as it was"
        );
    }

    #[test]
    fn a_page_outlives_its_claimer_while_a_slot_does() {
        let ring = Ring::new(1 << 20);
        let mut slots = Slots::default();
        let a = slots.claim(10, |len| ring.fixed(len)).unwrap().freeze();
        let b = slots.claim(10, |len| ring.fixed(len)).unwrap();
        drop(slots);
        assert_eq!(ring.stats().live_buffers, 1);
        let t = std::thread::spawn(move || drop(a));
        drop(b);
        t.join().unwrap();
        assert_eq!(ring.stats().live_buffers, 0);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::Ring;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// A slot's bytes as loom sees them (it does not see ring memory).
    struct Shadow(UnsafeCell<u64>);

    /// A slot released on another thread races the claimer's take of its page's word
    /// (whose `Acquire` orders the release's reads before the reuse's writes), and the
    /// claimer letting go of the page (its `Slots` dropped) races the releases of the
    /// slots still live: the page's region is released once, by whoever comes last (a
    /// leaked region keeps the ring's block, which loom reports; a second release fails
    /// the count's assertion).
    #[test]
    fn a_slot_released_elsewhere_is_reused_after_its_reads() {
        loom::model(|| {
            let ring = Ring::new(8192);
            let mut slots = Slots::default();
            let claim = |slots: &mut Slots| slots.claim(8, |len| ring.fixed(len));
            let shadow = Arc::new(Shadow(UnsafeCell::new(0)));
            let mut b = claim(&mut slots).unwrap();
            let b_at = b.as_ptr() as usize;
            b.try_extend_from_slice(&[7; 8]).unwrap();
            // SAFETY: loom checks the access.
            shadow.0.with_mut(|p| unsafe { *p = 7 });
            let b = b.freeze();
            // The rest of the page, so that the next claim takes the page's word.
            let count = Class::new(class_slot(class_of(8).unwrap())).count;
            let rest: Vec<_> = (1..count).map(|_| claim(&mut slots).unwrap()).collect();
            let s = shadow.clone();
            let t = loom::thread::spawn(move || {
                // SAFETY: loom checks the access.
                assert_eq!(s.0.with(|p| unsafe { *p }), 7);
                drop(b);
            });
            loom::thread::yield_now();
            let c = claim(&mut slots);
            if c.as_ref().is_some_and(|c| c.as_ptr() as usize == b_at) {
                // SAFETY: loom checks the access: after the other thread's read.
                shadow.0.with_mut(|p| unsafe { *p = 8 });
            }
            drop((slots, rest));
            drop(c);
            t.join().unwrap();
            assert_eq!(ring.stats().live_buffers, 0);
        });
    }
}
