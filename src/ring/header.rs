//! The one-word region header and its encoding.
//!
//! Every region of a block starts with a [`Header`]: a single `u64` that holds
//!
//! | bits    | field  | meaning                                                     |
//! |---------|--------|-------------------------------------------------------------|
//! | 0..31   | count  | 0 = free, 1 = owned by one handle, n = n frozen handles     |
//! | 31      | carry  | a heap region that drops a value it carries when freed      |
//! | 32..63  | words  | the region's length in 8-byte words, header included        |
//! | 63      | heap   | the region is its own heap allocation (`WhenFull::Heap`)    |
//!
//! The `words` field is written only by the thread that owns the ring, and only while
//! that thread owns the region (free, or held by a growing `ExtBuf`). Other threads only
//! ever change `count`: a `Release` store of `count = 0` for a uniquely owned region, a
//! `fetch_sub` for a shared one. The allocating thread reads headers with `Acquire`.

use crate::sync::{AtomicU64, Ordering};

/// Granularity of regions: every region starts and ends on an 8-byte boundary.
pub(crate) const WORD: usize = 8;
/// Mask of the reference count.
pub(crate) const COUNT_MASK: u64 = (1 << 31) - 1;
/// Marks a heap region that carries a value, dropped when the region is freed (see
/// `heap::claim_carrying`); never set on a ring region.
pub(crate) const CARRY: u64 = 1 << 31;
const WORDS_SHIFT: u32 = 32;
const WORDS_MASK: u64 = (1 << 31) - 1;
/// Marks a region that is its own heap allocation.
pub(crate) const HEAP: u64 = 1 << 63;
/// The largest region, in words.
pub(crate) const MAX_WORDS: usize = WORDS_MASK as usize;
/// Frozen handles of one region beyond this count make the clone panic (as `Arc`
/// aborts), having taken its increment back: half the count's range, so that the
/// increments of clones on every thread at once never reach [`CARRY`].
pub(crate) const MAX_REFS: u64 = (1 << 30) - 1;

/// The header that leads every region.
#[repr(transparent)]
pub(crate) struct Header(pub(crate) AtomicU64);

/// Bytes taken by a header (one word in normal builds; loom's atomics are larger).
pub(crate) const HDR: usize = round_up(core::mem::size_of::<Header>(), WORD);

impl Header {
    /// A fresh header value, to be `ptr::write`n at a region boundary.
    #[inline]
    pub(crate) fn new(value: u64) -> Header {
        Header(AtomicU64::new(value))
    }

    /// Reads the header.
    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }

    /// Overwrites the header.
    #[inline]
    pub(crate) fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
}

/// Packs a region length (in bytes, a multiple of [`WORD`]) and a count.
#[inline]
pub(crate) const fn pack(bytes: usize, count: u64) -> u64 {
    debug_assert!(bytes % WORD == 0 && bytes / WORD <= MAX_WORDS);
    (((bytes / WORD) as u64) << WORDS_SHIFT) | count
}

/// The region length in bytes, header included.
#[inline]
pub(crate) const fn span(h: u64) -> usize {
    (((h >> WORDS_SHIFT) & WORDS_MASK) as usize) * WORD
}

/// The number of handles holding the region (0 = free).
#[inline]
pub(crate) const fn count(h: u64) -> u64 {
    h & COUNT_MASK
}

/// `n` rounded up to a multiple of `align` (a power of two); the caller rules out
/// overflow.
#[inline]
pub(crate) const fn round_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_roundtrip() {
        for bytes in [8usize, 16, 4096, MAX_WORDS * WORD] {
            for count in [0u64, 1, 2, MAX_REFS] {
                let h = pack(bytes, count);
                assert_eq!(span(h), bytes);
                assert_eq!(super::count(h), count);
                assert_eq!(h & (HEAP | CARRY), 0);
                assert_eq!(span(h | HEAP | CARRY), bytes);
                assert_eq!(super::count(h | HEAP | CARRY), count);
            }
        }
    }
}
