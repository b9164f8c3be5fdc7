//! Kept blocks: ring (or heap) regions that serve a small layout because a shrink could
//! not move them into a chunk.
//!
//! A shrink needs no memory, and collections end the process when one fails
//! (`Vec::shrink_to_fit` calls `handle_alloc_error`). But a small layout is freed
//! through a chunk, found by rounding its address down (`chunk.rs`), so a region that
//! shrinks to a small layout moves into a chunk; and on a full ring there may be no
//! chunk to claim. Then the region keeps the block where it is, trimmed to [`KEPT`]
//! bytes, and joins a list of kept blocks that the chunked allocators consult before
//! treating a small block as a chunk's: on the paths that would count down a chunk
//! (a free that is not the current chunk's latest block, a shrink's tail) and on the
//! rare paths that move a small block.
//!
//! Each list is intrusive and needs no memory of its own, so keeping a block cannot
//! fail: each kept block holds the address of the next one in the word at offset
//! [`LINK`], past every byte a small layout may use. A kept block resized to another
//! small layout stays where it is, as all of them fit before the link.
//!
//! The kept blocks of an allocator are spread over stripes, each a list, by a hash of
//! the block's address ([`stripe`]), with a bit per stripe that says whether its list
//! holds any block. A look-up reads its stripe's bit, and walks that one list only when
//! the bit is set: so it costs one load while no block is kept, and with a few dozen
//! kept blocks most look-ups still find their stripe empty, and the rest walk a list
//! of one or two. `RingAlloc` keeps its stripes in a [`KeptTable`] (one thread, no
//! lock); `OneRingAlloc`, whose kept blocks any thread may free, puts a lock on each
//! stripe and keeps the bits in atomic words (`global.rs`): no look-up takes a
//! process-wide lock, and one that finds its stripe empty takes none.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::chunk::{is_small, SMALL_MAX};
use crate::ring::WORD;
use crate::sync::Cell;

/// Offset of a kept block's link word: past the largest small layout.
const LINK: usize = SMALL_MAX;

/// Bytes a kept block's region holds at least: a small layout's and the link.
pub(crate) const KEPT: usize = LINK + WORD;

/// Whether a shrink from `old` to `new` may keep the block in its region when no chunk
/// takes it: the region is freed with `new`'s alignment class (up to a word: its header
/// is the word before the data), and holds room for the link (any layout above
/// [`SMALL_MAX`] bytes rounds up to at least [`KEPT`], as regions hold word multiples).
#[inline]
pub(crate) fn can_keep(old: Layout, new: Layout) -> bool {
    is_small(new) && !is_small(old) && old.align() <= WORD && old.size() > SMALL_MAX
}

/// The layout to trim a kept block's region to (`Source::shrink`), from `old`, for
/// which [`can_keep`] holds: [`KEPT`] bytes, or `old`'s size if smaller (it rounds up to
/// [`KEPT`] anyway).
#[inline]
pub(crate) fn trimmed(old: Layout) -> Layout {
    // Cannot fail: the size is at most `old`'s, with its alignment.
    Layout::from_size_align(old.size().min(KEPT), old.align()).unwrap_or(old)
}

/// Lists the block a shrink to the small layout `new` left in its region, `block`
/// (trimmed to [`trimmed`] by the ring's shrink), and hands it out for `new`.
///
/// # Safety
/// - `block` is a live region of the caller's, word-aligned, with its alignment class up
///   to a word and more than [`SMALL_MAX`] bytes (so at least [`KEPT`]: regions hold
///   word multiples), that it gives up for `new` (which is small); `kept` is the list
///   that its allocator's look-ups of `block`'s address walk (its stripe's), and the
///   caller sets that stripe's bit.
#[inline(never)]
pub(crate) unsafe fn keep(block: NonNull<[u8]>, kept: &Kept, new: Layout) -> NonNull<[u8]> {
    debug_assert!(
        block.len() > SMALL_MAX && is_small(new),
        "kept block of {} bytes for {new:?}",
        block.len()
    );
    let p = block.cast::<u8>();
    // Its link word is found from the address alone (`Kept::link`).
    crate::ring::expose(p.as_ptr());
    // SAFETY: a region of at least `KEPT` bytes, word-aligned, not listed (it was the
    // caller's, held with a layout that is not small); the caller uses `new.size()`
    // bytes of it, fewer than `LINK` (contract).
    unsafe { kept.push(p) };
    NonNull::slice_from_raw_parts(p, new.size())
}

/// A kept block resized to the small layout `new` where it is (every small layout fits
/// before the link); for `grow_zeroed` (`zeroed`), the bytes past `old`'s are zeroed.
///
/// # Safety
/// - `ptr` is a kept block (listed in its allocator's [`Kept`]), held by the caller
///   with `old`, a small layout, and `new` is small.
#[inline]
pub(crate) unsafe fn resize_in_place(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> NonNull<[u8]> {
    debug_assert!(
        is_small(old) && is_small(new) && ptr.as_ptr() as usize % WORD == 0,
        "kept block {ptr:p} resized from {old:?} to {new:?}"
    );
    let block = NonNull::slice_from_raw_parts(ptr, new.size());
    if zeroed && new.size() > old.size() {
        // SAFETY: a kept block holds `LINK >= new.size()` bytes for its holder, the
        // caller (contract).
        unsafe { super::zero_tail(block, old.size()) };
    }
    block
}

/// One list of kept blocks: a stripe of one allocator's (a [`KeptTable`]'s, or one of
/// `OneRingAlloc`'s, behind its lock), linked through each block's word at [`LINK`].
///
/// Invariants: `head` is 0 or the address of a live kept block; each listed block's
/// link word holds the next one's address, 0 at the end; every listed block is a region
/// (word-aligned data, alignment class up to a word) of at least [`KEPT`] bytes, exposed
/// when it was handed out, whose holder uses only its first [`LINK`] bytes.
pub(crate) struct Kept {
    head: Cell<usize>,
}

impl Kept {
    /// No kept block.
    pub(crate) const fn new() -> Self {
        Kept { head: Cell::new(0) }
    }

    /// Whether no block is listed.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.get() == 0
    }

    /// The link word of the kept block at `addr`, rebuilt from the address with
    /// exposed provenance (as `chunk_of` does): the pointer a holder passes may have
    /// been narrowed to its bytes, and the link lies past them.
    #[inline]
    fn link(addr: usize) -> *mut usize {
        (addr + LINK) as *mut usize
    }

    /// Adds the block at `p` to the list.
    ///
    /// # Safety
    /// - `p` is a live region of at least [`KEPT`] bytes, word-aligned, exposed, not
    ///   listed, and its holder uses only its first [`LINK`] bytes until it is removed.
    pub(crate) unsafe fn push(&self, p: NonNull<u8>) {
        let addr = p.as_ptr() as usize;
        debug_assert!(addr % WORD == 0, "kept block {p:p} is not word-aligned");
        // SAFETY: the link word lies inside the block, word-aligned, and is the list's
        // (contract).
        unsafe { Self::link(addr).write(self.head.get()) };
        self.head.set(addr);
    }

    /// Whether the block at `p` is listed.
    #[inline]
    pub(crate) fn contains(&self, p: NonNull<u8>) -> bool {
        !self.is_empty() && self.find(p.as_ptr() as usize, false)
    }

    /// Takes the block at `p` off the list; `false` if it is not listed.
    #[inline]
    pub(crate) fn remove(&self, p: NonNull<u8>) -> bool {
        !self.is_empty() && self.find(p.as_ptr() as usize, true)
    }

    /// The walk of [`contains`](Self::contains) and [`remove`](Self::remove), out of
    /// line: blocks are kept only when a ring was full, and the caller looked at its
    /// stripe's bit first.
    #[cold]
    #[inline(never)]
    fn find(&self, addr: usize, remove: bool) -> bool {
        let mut prev: Option<*mut usize> = None;
        let mut at = self.head.get();
        while at != 0 {
            // SAFETY: a listed block is live and its link word is the list's
            // (invariants).
            let next = unsafe { Self::link(at).read() };
            if at == addr {
                if remove {
                    match prev {
                        None => self.head.set(next),
                        // SAFETY: the previous block's link word, as above.
                        Some(link) => unsafe { link.write(next) },
                    }
                }
                return true;
            }
            prev = Some(Self::link(at));
            at = next;
        }
        false
    }
}

/// The stripe, of `1 << bits` (`bits` from 1 to `usize::BITS - 1`), of the kept block
/// at `addr`: Fibonacci hashing, whose product's top bits depend on every bit of the
/// address, so that blocks a few hundred bytes apart (kept blocks hold at least
/// [`KEPT`] bytes) and the consecutive small blocks of a chunk spread over the stripes.
#[inline(always)]
pub(crate) fn stripe(addr: usize, bits: u32) -> usize {
    /// 2^64 divided by the golden ratio, cut to the word: odd, so multiplying by it
    /// permutes the words.
    const FIB: usize = (0x9E37_79B9_7F4A_7C15_u64 >> (64 - usize::BITS)) as usize;
    debug_assert!(bits > 0 && bits < usize::BITS, "{bits} stripe bits");
    addr.wrapping_mul(FIB) >> (usize::BITS - bits)
}

/// Bits of [`stripe`] for a [`KeptTable`]: 64 stripes, one bit each in one word.
const TABLE_BITS: u32 = 6;

/// The kept blocks of one allocator used on one thread (`RingAlloc`'s handles):
/// [`Kept`] lists striped by the blocks' addresses ([`stripe`]).
///
/// Invariants: bit `i` of `filled` is set exactly when `lists[i]` is not empty, and
/// every block listed in `lists[i]` has its address in stripe `i`.
pub(crate) struct KeptTable {
    filled: Cell<u64>,
    lists: [Kept; 1 << TABLE_BITS],
}

impl KeptTable {
    /// No kept block.
    pub(crate) const fn new() -> Self {
        KeptTable {
            filled: Cell::new(0),
            lists: [const { Kept::new() }; 1 << TABLE_BITS],
        }
    }

    /// The stripe of the block at `p`, and its bit in `filled`.
    #[inline(always)]
    fn stripe_of(p: NonNull<u8>) -> (usize, u64) {
        let i = stripe(p.as_ptr() as usize, TABLE_BITS);
        (i, 1 << i)
    }

    /// [`keep`], into the stripe of `block`.
    ///
    /// # Safety
    /// As for [`keep`], with this table as the list.
    pub(crate) unsafe fn keep(&self, block: NonNull<[u8]>, new: Layout) -> NonNull<[u8]> {
        let (i, bit) = Self::stripe_of(block.cast());
        // SAFETY: forwarded from this function's contract; the list of the block's own
        // stripe.
        let block = unsafe { keep(block, &self.lists[i], new) };
        self.filled.set(self.filled.get() | bit);
        block
    }

    /// Whether the block at `p` is kept: one load while its stripe is empty.
    #[inline(always)]
    pub(crate) fn contains(&self, p: NonNull<u8>) -> bool {
        let (i, bit) = Self::stripe_of(p);
        self.filled.get() & bit != 0 && self.lists[i].contains(p)
    }

    /// Takes the block at `p` off its list; `false` if it is not kept.
    #[inline(always)]
    pub(crate) fn remove(&self, p: NonNull<u8>) -> bool {
        let (i, bit) = Self::stripe_of(p);
        self.filled.get() & bit != 0 && self.remove_listed(i, bit, p)
    }

    /// The rest of [`remove`](Self::remove), for a stripe that lists some block.
    #[cold]
    #[inline(never)]
    fn remove_listed(&self, i: usize, bit: u64, p: NonNull<u8>) -> bool {
        let found = self.lists[i].remove(p);
        if self.lists[i].is_empty() {
            self.filled.set(self.filled.get() & !bit);
        }
        found
    }
}
