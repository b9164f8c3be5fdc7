//! Pages: 63 same-size slots and one free bitfield, and the one audited place that
//! allocates and frees them.
//!
//! ```text
//! Page<T, W>  (repr(C), one allocation)
//! +-----------+---------------------------+---------------------------+-----
//! | free: W   | slots[0]                  | slots[1]                  | ... slots[62]
//! | bit i: 1  | value: MaybeUninit<T>     | value                     |
//! | = slot i  | meta:  W  (idx | count)   | meta                      |
//! | released  |                           |                           |
//! | bit 63:   |                           |                           |
//! | ORPHAN    |                           |                           |
//! +-----------+---------------------------+---------------------------+-----
//! ```
//!
//! A handle points at its slot (the value sits at offset 0, so `Deref` is a plain load).
//! The slot's `meta` word holds the slot's index (written once, when the page is made)
//! and, for `ArenaRc`/`ArenaArc`, a reference count above it. From the index the handle
//! finds its page and the bit to set when it releases the slot.
//!
//! `W` is the page's word: `Cell<u64>` for [`Pool`](super::Pool) pages (one thread, no
//! atomic instructions), `AtomicU64` for [`Arena`](super::Arena) and
//! [`SharedArena`](super::SharedArena) pages (handles may be released on any thread).

use core::alloc::Layout;
use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr::{self, addr_of, addr_of_mut, NonNull};

// Pages come from the crate's one door to the allocator (under loom, loom's tracking
// allocator, which fails a model that leaks a page or frees one twice).
use crate::raw;

use crate::sync::{AcquireCount, AtomicU64, Cell, Ordering, UnsafeCell};

use super::AllocError;

/// Slots per page: bit 63 of the free word is the `ORPHAN` flag, bits 0..63 the slots.
pub(crate) const SLOTS: usize = 63;
/// Every slot bit set: the page is entirely free.
pub(crate) const ALL_FREE: u64 = (1 << SLOTS) - 1;
/// Set in the free word, once, by the pool's `Drop`: whoever completes `ALL_FREE | ORPHAN`
/// frees the page.
pub(crate) const ORPHAN: u64 = 1 << SLOTS;
/// `meta` bits that hold the slot index.
pub(crate) const IDX_MASK: u64 = 0x3f;
/// One reference in `meta` (the count sits above the index).
pub(crate) const COUNT_ONE: u64 = 1 << 6;
/// Counts at or above this are refused (`clone` panics): far beyond any real program.
pub(crate) const MAX_COUNT: u64 = 1 << 56;

/// The word a page's bitfield and its slots' `meta` are made of.
///
/// The two implementations differ only in how the operations are carried out: plain
/// loads and stores for [`Cell<u64>`] (the single-thread `Pool`), atomic instructions
/// with the orderings named here for [`AtomicU64`].
pub(crate) trait Word {
    /// Whether the operations are atomic (the page may be released from any thread).
    const ATOMIC: bool;
    /// A new word holding `v`.
    fn new(v: u64) -> Self;
    /// Reads the word; synchronises with nothing (statistics, `meta` of an owned slot).
    fn read(&self) -> u64;
    /// Reads the word; `Acquire`: pairs with the `Release` of [`Word::or_release`].
    fn read_acquire(&self) -> u64;
    /// Writes the word; synchronises with nothing (`meta` of a slot this thread owns).
    fn write(&self, v: u64);
    /// Sets `bits`, which must all be clear in the word, and returns the old word;
    /// `Release`: publishes everything the releasing thread did to the slot (its
    /// value's drop) to the thread that reuses it.
    ///
    /// Because the bits are clear, setting them is adding them: the atomic word does
    /// that with one `lock xadd` on x86, where a `fetch_or` whose result is used is a
    /// load and a compare-and-swap loop (an extra instruction and, on a line another
    /// core holds, an extra cache-line transfer).
    fn or_release(&self, bits: u64) -> u64;
    /// Sets `bits`, which must all be clear in the word, returns the old word; `AcqRel`:
    /// the pool's last word on a page.
    fn or_acq_rel(&self, bits: u64) -> u64;
    /// Takes every bit out of the word (leaves 0); `Acquire`: pairs with the `Release`
    /// of every [`Word::or_release`] that set the bits taken.
    fn take_acquire(&self) -> u64;
    /// Takes every bit out of the word of a page no other thread can reach yet (just made,
    /// or just claimed from a reserve: no handle has a slot in it); synchronises with
    /// nothing, so no locked instruction.
    fn take_unshared(&self) -> u64 {
        let bits = self.read();
        self.write(0);
        bits
    }
    /// Adds `v`, returns the old word; `Relaxed`, like `Arc::clone`: a new reference is
    /// made from an existing one, which already keeps the slot alive.
    fn add_relaxed(&self, v: u64) -> u64;
    /// Subtracts `v`, returns the old word; `Release`, like `Arc`'s drop: the last
    /// owner's [`Word::acquire`] then sees every other owner's use of the value.
    fn sub_release(&self, v: u64) -> u64;
    /// After this thread's `Release` read-modify-write found the last owner: the
    /// `Acquire` side (`sync::AcquireCount`; nothing for a plain cell).
    fn acquire(&self);
}

impl Word for Cell<u64> {
    const ATOMIC: bool = false;
    #[inline(always)]
    fn new(v: u64) -> Self {
        Cell::new(v)
    }
    #[inline(always)]
    fn read(&self) -> u64 {
        self.get()
    }
    #[inline(always)]
    fn read_acquire(&self) -> u64 {
        self.get()
    }
    #[inline(always)]
    fn write(&self, v: u64) {
        self.set(v)
    }
    #[inline(always)]
    fn or_release(&self, bits: u64) -> u64 {
        let old = self.get();
        self.set(old | bits);
        old
    }
    #[inline(always)]
    fn or_acq_rel(&self, bits: u64) -> u64 {
        self.or_release(bits)
    }
    #[inline(always)]
    fn take_acquire(&self) -> u64 {
        self.replace(0)
    }
    #[inline(always)]
    fn add_relaxed(&self, v: u64) -> u64 {
        let old = self.get();
        self.set(old.wrapping_add(v));
        old
    }
    #[inline(always)]
    fn sub_release(&self, v: u64) -> u64 {
        let old = self.get();
        self.set(old.wrapping_sub(v));
        old
    }
    #[inline(always)]
    fn acquire(&self) {}
}

impl Word for AtomicU64 {
    const ATOMIC: bool = true;
    #[inline(always)]
    fn new(v: u64) -> Self {
        AtomicU64::new(v)
    }
    #[inline(always)]
    fn read(&self) -> u64 {
        // Synchronises with nothing: callers only read statistics, the immutable index,
        // or a word no other thread can reach (`take_unshared`).
        self.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn read_acquire(&self) -> u64 {
        // Synchronises with the `Release` RMWs of `or_release` (slot releases).
        self.load(Ordering::Acquire)
    }
    #[inline(always)]
    fn write(&self, v: u64) {
        // Synchronises with nothing: the caller owns the slot this word belongs to, or
        // the whole page (`take_unshared`).
        self.store(v, Ordering::Relaxed)
    }
    #[inline(always)]
    fn or_release(&self, bits: u64) -> u64 {
        // Synchronises with `take_acquire` (the allocator reusing the slot) and with the
        // `acquire` of whoever frees an orphaned page. An add, as `bits` are clear
        // (contract; every bit is set once per allocation): the same as an `or`.
        self.fetch_add(bits, Ordering::Release)
    }
    #[inline(always)]
    fn or_acq_rel(&self, bits: u64) -> u64 {
        // Acquire: sees every release before it (the page may be freed right after);
        // Release: the last releaser, if not us, sees our use of the page. An add, as
        // `bits` are clear (contract).
        self.fetch_add(bits, Ordering::AcqRel)
    }
    #[inline(always)]
    fn take_acquire(&self) -> u64 {
        // A plain load first: scanning a page with nothing released costs no RMW and
        // does not steal the cache line from releasing threads.
        if self.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Synchronises with the `Release` of every `or_release` whose bits we take.
        self.swap(0, Ordering::Acquire)
    }
    #[inline(always)]
    fn add_relaxed(&self, v: u64) -> u64 {
        // Relaxed, as `Arc::clone`: the caller's reference keeps the slot alive.
        self.fetch_add(v, Ordering::Relaxed)
    }
    #[inline(always)]
    fn sub_release(&self, v: u64) -> u64 {
        // Synchronises with the `acquire` of the owner that drops the last reference.
        self.fetch_sub(v, Ordering::Release)
    }
    #[inline(always)]
    fn acquire(&self) {
        self.acquire_count();
    }
}

/// One slot: the value first (so a handle's pointer is the value's pointer), then `meta`.
///
/// Invariants:
/// - `meta & IDX_MASK` is this slot's index in its page, from page creation on.
/// - `meta >> 6` is 0 unless an `ArenaRc`/`ArenaArc` owns the slot; then it is the
///   number of such handles.
/// - `value` is initialised exactly while a handle owns the slot (its bit is clear in
///   both the page word and the allocator's cached bits, and the handle exists).
#[repr(C)]
pub(crate) struct Slot<T, W> {
    pub(crate) value: UnsafeCell<MaybeUninit<T>>,
    pub(crate) meta: W,
}

impl<T, W> Slot<T, W> {
    /// The value's address: offset 0 (`repr(C)`, and `UnsafeCell`/`MaybeUninit` are
    /// `repr(transparent)`), with the page's provenance.
    #[inline(always)]
    pub(crate) fn value_ptr(slot: NonNull<Self>) -> *mut T {
        slot.as_ptr().cast::<T>()
    }

    /// The slot's `meta` word.
    ///
    /// # Safety
    /// - `slot` lies in a live page, and the returned reference is not used after the
    ///   page may have been freed (after the slot's release).
    #[inline(always)]
    pub(crate) unsafe fn meta<'a>(slot: NonNull<Self>) -> &'a W {
        // SAFETY: the page is live (caller) and `alloc` initialised every `meta`; `W`
        // is a cell or an atomic, so shared references to it may coexist.
        unsafe { &*addr_of!((*slot.as_ptr()).meta) }
    }
}

/// A page of [`SLOTS`] slots and the free word.
///
/// Invariants of `free`:
/// - bit `i < 63` set: slot `i` was released and not yet taken back by the allocator;
///   a slot's bit is set by exactly one release per allocation (checked by
///   `debug_assert!`), and the sets of bits in `free` and in the allocator's cached
///   word are disjoint;
/// - bit 63 (`ORPHAN`) set: the pool is gone and merged its cached bits in; whoever
///   moves the word to `u64::MAX` (all slots free, orphaned) frees the page, and that
///   happens exactly once because every bit is set exactly once.
#[repr(C)]
pub(crate) struct Page<T, W> {
    pub(crate) free: W,
    slots: [Slot<T, W>; SLOTS],
}

impl<T, W: Word> Page<T, W> {
    /// Offset of `slots` in the page (`repr(C)`: the free word rounded up to the slot's
    /// alignment).
    const SLOTS_OFFSET: usize = {
        let align = align_of::<Slot<T, W>>();
        (size_of::<W>() + align - 1) & !(align - 1)
    };

    /// Allocates a page whose free word holds `free` and whose slots' `meta` hold their
    /// indices. This and [`Page::dealloc`] are the only places pages are made and freed.
    pub(crate) fn alloc(free: u64) -> Result<NonNull<Self>, AllocError> {
        let layout = Layout::new::<Self>();
        // Never zero-sized: the page holds at least the free word (8 bytes, or a loom
        // handle), so `raw::alloc`'s `None` is always the allocator's refusal.
        let page = raw::alloc(layout)
            .ok_or(AllocError {
                requested: layout.size(),
            })?
            .cast::<Self>();
        let p = page.as_ptr();
        // SAFETY: `p` is valid for writes of `Self` (just allocated with its layout);
        // `addr_of_mut!` projects to the fields without making references to
        // uninitialised memory.
        unsafe {
            ptr::write(addr_of_mut!((*p).free), W::new(free));
            let first = addr_of_mut!((*p).slots).cast::<Slot<T, W>>();
            for i in 0..SLOTS {
                ptr::write(addr_of_mut!((*first.add(i)).meta), W::new(i as u64));
            }
        }
        debug_assert_eq!(
            // SAFETY: projection only, `p` is a live allocation.
            unsafe { addr_of!((*p).slots) } as usize - p as usize,
            Self::SLOTS_OFFSET,
            "page {p:p}: slots are not where `slot_page` looks for them"
        );
        Ok(page)
    }

    /// Frees a page.
    ///
    /// # Safety
    /// - `page` came from [`Page::alloc`] and is not freed yet;
    /// - no slot holds a live value and nobody will touch the page again (all slot bits
    ///   are free, and the allocator no longer lists it).
    pub(crate) unsafe fn dealloc(page: NonNull<Self>) {
        let p = page.as_ptr();
        debug_assert!(
            // SAFETY: the caller guarantees `p` is a live page.
            unsafe { (*p).free.read() } & ALL_FREE == ALL_FREE,
            "page {p:p} freed with live slots: {:#066b}",
            // SAFETY: as above.
            unsafe { (*p).free.read() }
        );
        // SAFETY: every word of the page was initialised by `alloc`; the values are
        // `MaybeUninit`, so only the words are dropped. The caller guarantees the page is
        // live and unused.
        unsafe { ptr::drop_in_place(p) };
        // SAFETY: the page came from `raw::alloc` with this same layout (`Page::alloc`),
        // is not freed yet, and nobody touches it again (the caller's contract).
        unsafe { raw::dealloc(page.cast::<u8>(), Layout::new::<Self>()) };
    }

    /// The free word of `page`, without making a reference to the rest of the page
    /// (whose values other threads may be using).
    ///
    /// # Safety
    /// - `page` is live for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn word<'a>(page: NonNull<Self>) -> &'a W {
        // SAFETY: the page is live (caller) and its word initialised by `alloc`; the
        // word is a cell or an atomic, so shared references to it may coexist.
        unsafe { &*addr_of!((*page.as_ptr()).free) }
    }

    /// The slot `idx` of `page`.
    ///
    /// # Safety
    /// - `page` is a live page and `idx < SLOTS`.
    #[inline(always)]
    pub(crate) unsafe fn slot(page: NonNull<Self>, idx: usize) -> NonNull<Slot<T, W>> {
        debug_assert!(idx < SLOTS, "slot index {idx} out of page {page:p}");
        // SAFETY: `page` is live (caller), so the projection and the offset by
        // `idx < SLOTS` stay inside its allocation, which is not null.
        unsafe {
            let first = addr_of_mut!((*page.as_ptr()).slots).cast::<Slot<T, W>>();
            NonNull::new_unchecked(first.add(idx))
        }
    }

    /// The page of `slot` and the slot's index.
    ///
    /// # Safety
    /// - `slot` was returned by [`Page::slot`] for a page that is still live.
    #[inline(always)]
    pub(crate) unsafe fn of(slot: NonNull<Slot<T, W>>) -> (NonNull<Self>, usize) {
        let s = slot.as_ptr();
        // SAFETY: `slot` lies in a live page (caller), whose `meta` words were
        // initialised by `alloc`.
        let idx = (unsafe { (*s).meta.read() } & IDX_MASK) as usize;
        debug_assert!(idx < SLOTS, "slot {s:p}: corrupt meta index {idx}");
        let back = Self::SLOTS_OFFSET + idx * size_of::<Slot<T, W>>();
        // SAFETY: `slot` was derived from its page's pointer by `Page::slot` at exactly
        // this offset, so stepping back stays inside the same allocation and lands on
        // its start.
        let page = unsafe { NonNull::new_unchecked(s.cast::<u8>().sub(back).cast::<Self>()) };
        (page, idx)
    }

    /// Marks slot `idx` of `page` free with one `Release` RMW on the page word. If the
    /// pool is gone and this was the last slot in use, frees the page. (A handle's drop
    /// first offers the slot to its thread's magazine: `handles::release`.)
    ///
    /// # Safety
    /// - `page` is live and `idx < SLOTS`;
    /// - the slot's value is dropped or was never initialised, and no handle will use
    ///   it again (each allocation is released exactly once).
    #[inline(always)]
    pub(crate) unsafe fn release(page: NonNull<Self>, idx: usize) {
        debug_assert!(idx < SLOTS, "slot index {idx} out of page {page:p}");
        let bit = 1u64 << idx;
        // SAFETY: the page is live: this slot is still in use, and an orphaned page is
        // only freed once every slot has been released.
        let old = unsafe { Self::word(page) }.or_release(bit);
        debug_assert!(old & bit == 0, "slot {idx} of page {page:p} released twice");
        if old | bit == u64::MAX {
            Self::free_orphan(page);
        }
    }

    /// Frees an orphaned page whose last slot was just released.
    #[cold]
    fn free_orphan(page: NonNull<Self>) {
        // Pairs with the `Release` of the other releases and the pool's `or_acq_rel`:
        // every use of every slot happens before the page goes.
        // SAFETY: the page is live until the `dealloc` below.
        unsafe { Self::word(page) }.acquire();
        // SAFETY: this thread completed `ALL_FREE | ORPHAN`: no slot is in use, the pool
        // no longer lists the page, and no other thread can see that state again.
        unsafe { Self::dealloc(page) };
    }

    /// The pool lets go of `page`, handing back the `cached` free bits it held for it.
    /// Frees the page now if nothing is in use, else the last release will.
    ///
    /// # Safety
    /// - `page` is live, listed by the calling allocator, which forgets it now;
    /// - `cached` holds exactly the allocator's free bits for this page.
    pub(crate) unsafe fn orphan(page: NonNull<Self>, cached: u64) {
        // SAFETY: forwarded; the allocator forgets the page, so its `ORPHAN` bit is
        // set exactly once, here.
        unsafe { Self::give_back(page, cached | ORPHAN) }
    }

    /// Puts `bits` (free slots taken out of the word and never handed out, plus
    /// `ORPHAN` when the pool lets go) back into the page word: one `AcqRel` RMW, like
    /// a release. Frees the page if that completes `ALL_FREE | ORPHAN`.
    ///
    /// # Safety
    /// - `page` is live and the caller holds `bits`: they are clear in the word and in
    ///   every allocator's cached bits, and the caller gives them up.
    pub(crate) unsafe fn give_back(page: NonNull<Self>, bits: u64) {
        // SAFETY: the page is live (caller).
        let old = unsafe { Self::word(page) }.or_acq_rel(bits);
        debug_assert!(
            old & bits == 0,
            "page {page:p}: bits {bits:#x} given back twice (orphaned twice, or cached \
             bits overlap)"
        );
        if old | bits == u64::MAX {
            // SAFETY: all slots are free and the allocator has let go of the page:
            // nothing can reach it any more.
            unsafe { Self::dealloc(page) };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[repr(align(128))]
    struct Big(#[allow(dead_code)] u8);

    fn round_trip<T, W: Word>() {
        let page = Page::<T, W>::alloc(ALL_FREE).unwrap();
        for i in 0..SLOTS {
            // SAFETY: live page, `i < SLOTS`.
            let slot = unsafe { Page::slot(page, i) };
            assert_eq!(slot.as_ptr() as usize % align_of::<T>(), 0);
            // SAFETY: `slot` comes from `Page::slot` of a live page.
            let (back, idx) = unsafe { Page::of(slot) };
            assert_eq!((back, idx), (page, i));
        }
        // SAFETY: fresh page, nothing in use.
        unsafe { Page::dealloc(page) };
    }

    #[test]
    fn slot_to_page_round_trips() {
        round_trip::<u8, Cell<u64>>();
        round_trip::<(), Cell<u64>>();
        round_trip::<Big, AtomicU64>();
        round_trip::<[u64; 5], AtomicU64>();
    }
}
