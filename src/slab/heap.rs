//! The allocating side of a pool: the pages it owns, the page it allocates from, and the
//! free bits of that page it has taken for itself.
//!
//! One `Heap` is used by one thread at a time (`Pool` and `Arena` own one; each shard of
//! a `SharedArena` owns one behind its lock). Handles never touch the heap: they release
//! into their page's word, and the heap takes those bits back when it runs out.
//!
//! Allocation is `local & (local - 1)` on the fast path. When `local` is empty the heap
//! takes the released bits of its current page, then walks its other pages round-robin.
//! Growth is decided by a lap count: once the walk has visited as many pages as the heap
//! has and found fewer free slots than pages visited, the pool is nearly full and it
//! grows by half its size. So every page visit is paid for by a slot found or by a share
//! of the new pages, and allocation is O(1) amortised while the pages stay nearly full
//! only while the pool really is.

use alloc::vec::Vec;
use core::ptr::NonNull;

use super::page::{Page, Slot, Word, ALL_FREE, SLOTS};
use super::AllocError;

/// Where a heap gets the pages it grows by.
pub(crate) trait PageSource<T, W: Word> {
    /// Adds between one and `count` (`>= 1`) new pages to `out` (which has room for
    /// `count`), each entirely free with every slot bit in its word, and owned by no one
    /// else from now on. On an error the pages already pushed stay in `out`.
    fn pages(&self, count: usize, out: &mut Vec<NonNull<Page<T, W>>>) -> Result<(), AllocError>;
}

/// Fresh pages from the system allocator.
pub(crate) struct System;

impl<T, W: Word> PageSource<T, W> for System {
    fn pages(&self, count: usize, out: &mut Vec<NonNull<Page<T, W>>>) -> Result<(), AllocError> {
        for _ in 0..count {
            out.push(Page::alloc(ALL_FREE)?);
        }
        Ok(())
    }
}

/// Invariants:
/// - `current` is `Some(pages[cursor])`, or `None` with `local == 0`;
/// - `local` is a subset of `ALL_FREE`, disjoint from `current`'s free word; its bits are
///   slots of `current` that no handle owns;
/// - every page in `pages` is live and listed once; pages not in `pages` are orphaned.
///
/// `repr(C)`: the fields an allocation reads (`local`, `current`) come first, on the
/// cache line of the `SharedArena` shard lock in front of them.
#[repr(C)]
pub(crate) struct Heap<T, W: Word> {
    local: u64,
    current: Option<NonNull<Page<T, W>>>,
    cursor: usize,
    pages: Vec<NonNull<Page<T, W>>>,
    /// Pages visited by the walk in this lap, and free slots it found.
    visits: usize,
    found: usize,
}

impl<T, W: Word> Heap<T, W> {
    /// An empty heap; it allocates nothing until the first slot is asked for.
    pub(crate) const fn new() -> Self {
        Heap {
            local: 0,
            current: None,
            cursor: 0,
            pages: Vec::new(),
            visits: 0,
            found: 0,
        }
    }

    /// A heap with room for at least `cap` values.
    pub(crate) fn with_capacity(cap: usize) -> Result<Self, AllocError> {
        let mut heap = Self::new();
        heap.grow(cap.div_ceil(SLOTS), &System)?;
        Ok(heap)
    }

    /// Takes a free slot. The slot's value is uninitialised; the caller owns the slot
    /// until it releases it through [`Page::release`].
    #[inline(always)]
    pub(crate) fn take(&mut self) -> Result<NonNull<Slot<T, W>>, AllocError> {
        self.take_from(&System)
    }

    /// [`take`](Self::take), growing from `source` if every page is in use.
    #[inline(always)]
    pub(crate) fn take_from<S: PageSource<T, W>>(
        &mut self,
        source: &S,
    ) -> Result<NonNull<Slot<T, W>>, AllocError> {
        match self.take_cached() {
            Some(slot) => Ok(slot),
            None => self.take_slow(source),
        }
    }

    /// The fast path of [`take`](Self::take): a slot from the cached bits, or `None` if
    /// there are none (then nothing changed). An `Option` of a pointer fits a register,
    /// so callers can branch on it before building a `Result`.
    #[inline(always)]
    pub(crate) fn take_cached(&mut self) -> Option<NonNull<Slot<T, W>>> {
        let bits = self.local;
        if bits == 0 {
            return None;
        }
        self.local = bits & (bits - 1);
        debug_assert!(
            self.current.is_some(),
            "free bits {bits:#x} cached without a page"
        );
        // SAFETY: `local != 0` implies `current` is `Some` (struct invariant).
        let page = unsafe { self.current.unwrap_unchecked() };
        // SAFETY: `current` is live and `trailing_zeros` of a non-zero subset of
        // `ALL_FREE` is below `SLOTS`.
        Some(unsafe { Page::slot(page, bits.trailing_zeros() as usize) })
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn take_slow<S: PageSource<T, W>>(
        &mut self,
        source: &S,
    ) -> Result<NonNull<Slot<T, W>>, AllocError> {
        self.refill(source)?;
        let bits = self.local;
        debug_assert!(bits != 0 && self.current.is_some());
        self.local = bits & (bits - 1);
        // SAFETY: `refill` made `current` a live page and `local` a non-empty subset of
        // `ALL_FREE`, so `trailing_zeros` is below `SLOTS`.
        Ok(unsafe {
            Page::slot(
                self.current.unwrap_unchecked(),
                bits.trailing_zeros() as usize,
            )
        })
    }

    /// Every cached free bit of one page at once (at least one), for a thread's
    /// magazine: `(page, bits)`, which the caller then holds. Refills first if there
    /// are none, growing from `source` if every page is in use.
    #[cfg_attr(not(feature = "std"), allow(dead_code))] // magazines need std
    pub(crate) fn take_all_from<S: PageSource<T, W>>(
        &mut self,
        source: &S,
    ) -> Result<(NonNull<Page<T, W>>, u64), AllocError> {
        if self.local == 0 {
            self.refill(source)?;
        }
        debug_assert!(self.local != 0 && self.current.is_some());
        // SAFETY: `local != 0` implies `current` is `Some` (struct invariant).
        let page = unsafe { self.current.unwrap_unchecked() };
        // The bits leave the heap: `local` becomes empty, which the invariant allows.
        Ok((page, core::mem::take(&mut self.local)))
    }

    /// The page the heap allocates from, if any.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn current(&self) -> Option<NonNull<Page<T, W>>> {
        self.current
    }

    /// Whether `page` is one of the heap's.
    #[cfg(feature = "std")]
    pub(crate) fn lists(&self, page: NonNull<Page<T, W>>) -> bool {
        self.pages.contains(&page)
    }

    /// Adds `bits` to the cached free bits of the current page.
    ///
    /// # Safety
    /// - there is a current page and `bits` are free slots of it (a subset of
    ///   `ALL_FREE`) that the caller holds and gives up.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) unsafe fn add_local(&mut self, bits: u64) {
        debug_assert!(
            self.current.is_some() && bits & !ALL_FREE == 0 && self.local & bits == 0,
            "bits {bits:#x} added to cached {:#x}",
            self.local
        );
        self.local |= bits;
    }

    /// Takes the lowest cached free bit of the current page out of the heap (0 if there
    /// is none): the caller now holds that slot.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn take_lowest(&mut self) -> u64 {
        let bit = self.local & self.local.wrapping_neg();
        self.local ^= bit;
        bit
    }

    /// Makes `local` non-empty: from the current page's releases, the other pages', or
    /// new pages.
    fn refill<S: PageSource<T, W>>(&mut self, source: &S) -> Result<(), AllocError> {
        if let Some(page) = self.current {
            // SAFETY: listed pages are live.
            let bits = unsafe { Page::word(page) }.take_acquire();
            if bits != 0 {
                self.local = bits;
                return Ok(());
            }
        }
        let n = self.pages.len();
        // Every other page once; every page if none is current (after `shrink`).
        let others = n - usize::from(self.current.is_some() && n > 0);
        for _ in 0..others {
            self.cursor = (self.cursor + 1) % n;
            let page = self.pages[self.cursor];
            // SAFETY: listed pages are live.
            let bits = unsafe { Page::word(page) }.take_acquire();
            self.visits += 1;
            self.found += bits.count_ones() as usize;
            self.current = Some(page);
            self.local = bits;
            let lap_done = self.visits >= n;
            let poor = self.found < self.visits;
            if lap_done {
                self.visits = 0;
                self.found = 0;
            }
            if bits != 0 {
                if lap_done && poor {
                    // Keep what we found, but the pool is nearly full: grow now so the
                    // next walks find fresh pages. Opportunistic: if the system has no
                    // memory, the slots just found still serve this allocation.
                    self.grow_keep_current(n.div_ceil(2), source).ok();
                }
                return Ok(());
            }
            if lap_done && poor {
                break;
            }
        }
        // Nothing free anywhere we looked: new pages.
        self.grow(n.div_ceil(2).max(1), source)
    }

    /// Adds up to `count` pages (at least one if `count > 0`; fewer only when the source
    /// has fewer at hand) and makes the first of them current.
    pub(crate) fn grow<S: PageSource<T, W>>(
        &mut self,
        count: usize,
        source: &S,
    ) -> Result<(), AllocError> {
        if count == 0 {
            return Ok(());
        }
        let first = self.pages.len();
        self.grow_keep_current(count, source)?;
        // The new pages were made with every bit in their word; take the first one's.
        let page = self.pages[first];
        // SAFETY: just made (or claimed) and listed. No handle has a slot in it yet, so
        // no other thread writes its word: a plain take, no `swap`.
        self.local = unsafe { Page::word(page) }.take_unshared();
        self.current = Some(page);
        self.cursor = first;
        Ok(())
    }

    /// Adds up to `count` pages (all free, bits in their words; at least one if
    /// `count > 0`), leaving `current` alone.
    fn grow_keep_current<S: PageSource<T, W>>(
        &mut self,
        count: usize,
        source: &S,
    ) -> Result<(), AllocError> {
        self.pages.try_reserve(count).map_err(|_| AllocError {
            requested: count.saturating_mul(core::mem::size_of::<usize>()),
        })?;
        if count == 0 {
            return Ok(());
        }
        let before = self.pages.len();
        let got = source.pages(count, &mut self.pages);
        debug_assert!(
            got.is_err() || (before + 1..=before + count).contains(&self.pages.len()),
            "page source pushed {} pages, {count} asked",
            self.pages.len() - before
        );
        got
    }

    /// Pages owned.
    pub(crate) fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Free slots: the bits released into the pages plus the ones cached here. A
    /// snapshot: other threads may release more meanwhile.
    pub(crate) fn free_slots(&self) -> usize {
        let released: usize = self
            .pages
            .iter()
            // SAFETY: listed pages are live.
            .map(|p| (unsafe { Page::word(*p) }.read() & ALL_FREE).count_ones() as usize)
            .sum();
        released + self.local.count_ones() as usize
    }

    /// Frees every page with no slot in use; returns how many went.
    pub(crate) fn shrink(&mut self) -> usize {
        self.shrink_keeping(None)
    }

    /// [`shrink`](Self::shrink), but never frees `keep` (a page other threads may
    /// still take slots from without this heap's lock: `SharedArena`'s seed page).
    pub(crate) fn shrink_keeping(&mut self, keep: Option<NonNull<Page<T, W>>>) -> usize {
        if let Some(page) = self.current.take() {
            // SAFETY: listed pages are live; the cached bits go back where handles put
            // theirs, so the page word alone tells whether the page is unused.
            unsafe { Page::word(page) }.or_release(self.local);
            self.local = 0;
        }
        let before = self.pages.len();
        self.pages.retain(|&page| {
            // SAFETY: listed pages are live. Acquire: pairs with the releases, so the
            // values' drops happen before the page is freed.
            let all_free =
                Some(page) != keep && unsafe { Page::word(page) }.read_acquire() == ALL_FREE;
            if all_free {
                // SAFETY: no slot is in use, so no handle can touch the page, and only
                // this heap could allocate from it; it is unlisted right here.
                unsafe { Page::dealloc(page) };
            }
            !all_free
        });
        self.shrink_list();
        self.cursor = 0;
        self.visits = 0;
        self.found = 0;
        before - self.pages.len()
    }

    /// Fits the page list's buffer to its length, if the system allocator agrees.
    ///
    /// Not `Vec::shrink_to_fit`: a smaller buffer is a new allocation, and when the
    /// allocator refuses it that calls `handle_alloc_error` (an abort) from
    /// `shrink_to_fit`, which promises no such thing. A list too long for its pages
    /// costs a few words, so on a refusal the old buffer stays.
    fn shrink_list(&mut self) {
        if self.pages.capacity() == self.pages.len() {
            return;
        }
        let mut fitted = Vec::new();
        if fitted.try_reserve_exact(self.pages.len()).is_ok() {
            fitted.extend_from_slice(&self.pages);
            self.pages = fitted;
        }
    }
}

impl<T, W: Word> Drop for Heap<T, W> {
    fn drop(&mut self) {
        for &page in &self.pages {
            let cached = if Some(page) == self.current {
                self.local
            } else {
                0
            };
            // SAFETY: listed pages are live, `cached` is exactly our bits for the page,
            // and the heap forgets every page here.
            unsafe { Page::orphan(page, cached) };
        }
    }
}
