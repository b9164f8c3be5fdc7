//! allocator-api2 `Allocator` over the ring: `&Ring`, `RingAlloc`, `OneRingAlloc`.
#![cfg(feature = "allocator-api2")]

mod common;

use std::alloc::{GlobalAlloc, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use allocator_api2::alloc::{Allocator, Global, Layout};
use allocator_api2::boxed::Box;
use allocator_api2::vec::Vec;
use proptest::prelude::*;
use ringmem::{OneRingAlloc, Ring, RingAlloc, WhenFull};

/// Iteration counts, shrunk under Miri.
const N: usize = if cfg!(miri) { 64 } else { 20_000 };
/// Alignments swept: 1, 2, 4, ..., 4096.
const ALIGNS: [usize; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

// ---------------------------------------------------------------------------------
// A global allocator that counts live ring blocks of a few distinctive sizes, so the
// tests can see when a block is freed (and that it is not freed while in use).

/// Region bytes of the rings whose blocks the tracker counts.
const TRACKED: [usize; 3] = [123_456, 98_760, 87_656];
/// Bytes of a block's control area (the block layout is `CTL + len`, align 4096).
const CTL: usize = 128;
static LIVE: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

struct Tracker;

fn tracked(layout: std::alloc::Layout) -> Option<usize> {
    if layout.align() != 4096 {
        return None;
    }
    TRACKED.iter().position(|&len| layout.size() == CTL + len)
}

// SAFETY: forwards to `System`, only counting.
unsafe impl GlobalAlloc for Tracker {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc(layout) };
        if let (Some(i), false) = (tracked(layout), p.is_null()) {
            LIVE[i].fetch_add(1, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if let Some(i) = tracked(layout) {
            LIVE[i].fetch_sub(1, Ordering::SeqCst);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        debug_assert!(tracked(layout).is_none());
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Tracker = Tracker;

/// Live regions of this thread's ring (`ringmem::tls`, `OneRingAlloc`'s): its chunks
/// and other blocks.
fn thread_ring_live() -> usize {
    ringmem::tls::with_ring(|r| r.stats().live_buffers).unwrap()
}

/// Live blocks of tracked ring `i`, after giving the orphan sweep a chance: a sweep of
/// another test may hold the orphan stack for a moment, and ring activity sweeps.
fn live_blocks(i: usize, expect: usize) -> usize {
    for _ in 0..1000 {
        if LIVE[i].load(Ordering::SeqCst) == expect {
            return expect;
        }
        drop(Ring::new(64)); // creating and dropping a ring sweeps orphans
        std::thread::yield_now();
    }
    LIVE[i].load(Ordering::SeqCst)
}

// ---------------------------------------------------------------------------------
// Helpers

fn fill(p: NonNull<[u8]>, len: usize, seed: u8) {
    let table = common::counting(seed);
    for at in (0..len).step_by(table.len()) {
        let n = (len - at).min(table.len());
        // SAFETY: the block holds at least `len` bytes (callers pass its requested
        // size), and the table is not in it.
        unsafe {
            core::ptr::copy_nonoverlapping(table.as_ptr(), p.cast::<u8>().as_ptr().add(at), n)
        };
    }
}

fn check(p: NonNull<[u8]>, len: usize, seed: u8) {
    let table = common::counting(seed);
    // SAFETY: as in `fill`, and the bytes were written by `fill`.
    let bytes = unsafe { core::slice::from_raw_parts(p.cast::<u8>().as_ptr(), len) };
    for (k, chunk) in bytes.chunks(table.len()).enumerate() {
        assert!(
            *chunk == table[..chunk.len()],
            "bytes {} to {} of {:p}",
            k * table.len(),
            k * table.len() + chunk.len(),
            p.cast::<u8>()
        );
    }
}

fn addr(p: NonNull<[u8]>) -> usize {
    p.cast::<u8>().as_ptr() as usize
}

// ---------------------------------------------------------------------------------
// Collections

#[test]
fn vec_and_box_on_ring_ref() {
    let ring = Ring::new(256 * 1024);
    {
        let mut v: Vec<u64, &Ring> = Vec::new_in(&ring);
        for i in 0..N.min(5000) as u64 {
            v.push(i * 3);
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
        let b = Box::new_in([1u16, 2, 3], &ring);
        assert_eq!(*b, [1, 2, 3]);
        assert_eq!(ring.stats().live_buffers, 2);
    }
    assert_eq!(ring.stats().live_buffers, 0);
}

/// allocator-api2's `Box` gives `deallocate` a pointer narrowed to the value, while the
/// allocators find the header before it (regions) or the head at the start of the
/// chunk (small blocks): they reach those from the address, with exposed provenance,
/// so under Miri's Stacked Borrows (which forbids reaching them through the narrowed
/// pointer) these frees are clean too. Small, large, over-aligned and grown-out-of-place
/// boxes on each allocator, freed newest first and oldest first.
#[test]
fn boxes_narrowed_to_their_value_are_freed_cleanly() {
    #[repr(align(64))]
    struct Wide([u8; 64]);
    fn boxes<A: Allocator + Clone>(a: A) {
        for newest_first in [true, false] {
            let small = Box::new_in(7u32, a.clone());
            let pair = Box::new_in([3u64; 2], a.clone());
            let large = Box::new_in([5u8; 1000], a.clone());
            let wide = Box::new_in(Wide([9; 64]), a.clone());
            let mut v: Vec<u8, A> = Vec::new_in(a.clone());
            v.extend(0..=255u8); // leaves a chunk (256 bytes) for a region
            v.push(1);
            let moved = v.into_boxed_slice();
            assert_eq!((*small, pair[1], large[999], wide.0[63]), (7, 3, 5, 9));
            assert_eq!((moved[0], moved[255], moved.len()), (0, 255, 257));
            if newest_first {
                drop((moved, wide, large, pair, small));
            } else {
                drop(small);
                drop(pair);
                drop(large);
                drop(wide);
                drop(moved);
            }
        }
    }
    let ring = Ring::new(1 << 16);
    boxes(&ring);
    boxes(RingAlloc::new());
    boxes(OneRingAlloc);
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn vec_of_boxes_on_ring_alloc() {
    fn build(n: usize) -> Vec<Box<String, RingAlloc>, RingAlloc> {
        let a = RingAlloc::with_capacity(16 * 1024);
        let mut v = Vec::new_in(a.clone());
        for i in 0..n {
            v.push(Box::new_in(i.to_string(), a.clone()));
        }
        v
    }
    let n = N.min(3000);
    let v = build(n);
    assert!(v.iter().enumerate().all(|(i, s)| **s == i.to_string()));
    let a = v.allocator().clone();
    assert_eq!(a.ring().stats().live_buffers, n + 1);
    drop(v);
    assert_eq!(a.ring().stats().live_buffers, 0);
}

#[test]
fn hashmap_on_ring_alloc_and_one_ring() {
    let n = N.min(2000);
    let a = RingAlloc::with_capacity(8 * 1024);
    let mut m = hashbrown::HashMap::new_in(a.clone());
    let mut g = hashbrown::HashMap::new_in(OneRingAlloc);
    for i in 0..n {
        m.insert(i, i * 2);
        g.insert(i.to_string(), i);
    }
    for i in (0..n).step_by(2) {
        assert_eq!(m.remove(&i), Some(i * 2));
        assert_eq!(g.remove(&i.to_string()), Some(i));
    }
    assert!((1..n)
        .step_by(2)
        .all(|i| m[&i] == i * 2 && g[&i.to_string()] == i));
    m.shrink_to_fit();
    drop(m);
    assert_eq!(a.ring().stats().live_buffers, 0);
    let g = std::thread::spawn(move || {
        assert_eq!(g.len(), n / 2);
        g
    })
    .join()
    .unwrap();
    drop(g);
}

#[test]
fn vec_grows_and_shrinks_in_place() {
    let ring = Ring::new(256 * 1024);
    let mut v: Vec<u32, &Ring> = Vec::with_capacity_in(1, &ring);
    let start = v.as_ptr();
    for i in 0..N.min(10_000) as u32 {
        v.reserve_exact(1);
        v.push(i);
        assert_eq!(v.as_ptr(), start, "the latest allocation grows in place");
    }
    let before = ring.stats().bytes_in_use;
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v.as_ptr(), start, "shrinking keeps the data in place");
    assert!(ring.stats().bytes_in_use < before);
    assert_eq!(&v[..], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // The trimmed tail serves the next allocation right after the vector.
    let next = Box::new_in(7u32, &ring);
    assert!((&*next as *const u32 as usize) > start as usize);
    assert!((&*next as *const u32 as usize) < start as usize + 128);
}

#[test]
fn freeing_the_latest_allocation_hands_its_bytes_out_again() {
    let ring = Ring::new(4096);
    let a = &&ring;
    let l = Layout::from_size_align(20, 4).unwrap();
    let p = a.allocate(l).unwrap();
    let q = a.allocate(l).unwrap();
    // Last in, first out: each free of the latest allocation moves the head back.
    // SAFETY: both live with `l`, freed once each.
    unsafe {
        a.deallocate(q.cast(), l);
        a.deallocate(p.cast(), l);
    }
    let r = a.allocate(l).unwrap();
    assert_eq!(addr(r), addr(p), "the freed bytes come back first");
    // A layout anywhere between the size asked and the capacity handed out fits.
    let fit = Layout::from_size_align(r.len(), 4).unwrap();
    // SAFETY: `r` is live and `fit` fits it.
    unsafe { a.deallocate(r.cast(), fit) };
    let t = a.allocate(l).unwrap();
    assert_eq!(addr(t), addr(p));
    // Not the latest: an ordinary release, and the next allocation goes after the
    // live one; the released bytes come back after the walk wraps.
    let s = a.allocate(l).unwrap();
    // SAFETY: `t` is live with `l`, freed once.
    unsafe { a.deallocate(t.cast(), l) };
    assert!(addr(a.allocate(l).unwrap()) > addr(s));
    assert_eq!(ring.stats().live_buffers, 2);
}

#[test]
fn the_window_ends_at_the_block_end_and_wraps() {
    // 64 bytes of region area: two allocations of 24 + 8 bytes of header fill it.
    let ring = Ring::new(64);
    let a = &&ring;
    let l = Layout::from_size_align(24, 8).unwrap();
    let p = a.allocate(l).unwrap();
    let q = a.allocate(l).unwrap();
    // The latest allocation ends at the block end: freeing it rewinds there.
    // SAFETY: live with `l`, freed once.
    unsafe { a.deallocate(q.cast(), l) };
    let q2 = a.allocate(l).unwrap();
    assert_eq!(addr(q2), addr(q));
    assert!(a.allocate(l).is_err(), "the block is full");
    // Free both, oldest first: the next allocation wraps to the block start.
    // SAFETY: live with `l`, freed once each.
    unsafe {
        a.deallocate(p.cast(), l);
        a.deallocate(q2.cast(), l);
    }
    let r = a.allocate(l).unwrap();
    assert_eq!(addr(r), addr(p), "wrapped to the start");
    let big = Layout::from_size_align(48, 8).unwrap();
    assert!(a.allocate(big).is_err(), "24 + 8 bytes left after `r`");
    // SAFETY: live with `l`, freed once.
    unsafe { a.deallocate(r.cast(), l) };
    // Everything free again: the whole area merges into one region.
    let all = Layout::from_size_align(56, 8).unwrap();
    let w = a.allocate(all).unwrap();
    assert_eq!(addr(w), addr(p));
    // SAFETY: live with `all`, freed once.
    unsafe { a.deallocate(w.cast(), all) };
    assert_eq!(ring.stats().bytes_in_use, 0);
}

#[test]
fn growth_blocked_by_a_live_neighbour_moves() {
    let ring = Ring::new(64 * 1024);
    let mut v: Vec<u8, &Ring> = Vec::with_capacity_in(16, &ring);
    v.extend_from_slice(b"0123456789abcdef");
    let pin = Box::new_in(1u64, &ring); // right after the vector
    let old = v.as_ptr();
    v.reserve_exact(100);
    assert_ne!(v.as_ptr(), old, "a live successor forces a move");
    assert_eq!(&v[..], b"0123456789abcdef");
    assert_eq!(ring.stats().live_buffers, 2);
    drop(pin);
}

// ---------------------------------------------------------------------------------
// Alignment, zero sizes, bad input

fn alignment_sweep<A: Allocator>(a: &A) {
    for (k, &align) in ALIGNS.iter().enumerate() {
        // Under Miri, which spent minutes here, four sizes of the seven: below a word,
        // past one, the alignment and a multiple of it (every alignment still).
        let sizes = [1, 7, 8, 9, 100, align, 3 * align];
        let sizes = if cfg!(miri) {
            &[sizes[0], sizes[3], sizes[5], sizes[6]][..]
        } else {
            &sizes[..]
        };
        for (j, &size) in sizes.iter().enumerate() {
            let layout = Layout::from_size_align(size, align).unwrap();
            let seed = (k * 16 + j) as u8;
            // A small allocation first moves the ring's head, so the padding between
            // header and data varies across the sweep.
            let skew = a
                .allocate(Layout::from_size_align(8 * (j + 1), 8).unwrap())
                .unwrap();
            let p = a.allocate(layout).unwrap();
            assert_eq!(addr(p) % align, 0, "align {align} size {size}");
            assert!(p.len() >= size);
            fill(p, size, seed);
            // SAFETY: allocated above with its layout.
            unsafe {
                a.deallocate(
                    skew.cast(),
                    Layout::from_size_align(8 * (j + 1), 8).unwrap(),
                )
            };
            // Grow, then shrink, with the same alignment: the contents stay.
            let bigger = Layout::from_size_align(size * 2 + 24, align).unwrap();
            // SAFETY: `p` is live with `layout`; `bigger` is larger, same alignment.
            let q = unsafe { a.grow(p.cast(), layout, bigger) }.unwrap();
            assert_eq!(addr(q) % align, 0);
            check(q, size, seed);
            fill(q, bigger.size(), seed);
            // SAFETY: `q` is live with `bigger`; `layout` is smaller.
            let r = unsafe { a.shrink(q.cast(), bigger, layout) }.unwrap();
            assert_eq!(addr(r) % align, 0);
            check(r, size, seed);
            // SAFETY: `r` is live with `layout`.
            unsafe { a.deallocate(r.cast(), layout) };
        }
    }
    // Many live at once, of every alignment, freed in a scrambled order.
    let mut live = std::vec::Vec::new();
    for i in 0..ALIGNS.len() * 4 {
        let layout = Layout::from_size_align(1 + i * 5, ALIGNS[(i * 7) % ALIGNS.len()]).unwrap();
        let p = a.allocate(layout).unwrap();
        assert_eq!(addr(p) % layout.align(), 0);
        fill(p, layout.size(), i as u8);
        live.push((p, layout, i as u8));
    }
    while !live.is_empty() {
        let (p, layout, seed) = live.swap_remove((live.len() * 5) % live.len().max(1) / 3);
        check(p, layout.size(), seed);
        // SAFETY: allocated above with `layout`, freed once.
        unsafe { a.deallocate(p.cast(), layout) };
    }
}

#[test]
fn small_allocations_share_chunks_released_as_they_empty() {
    let a = RingAlloc::new();
    let n = N.min(5000);
    let boxes: std::vec::Vec<Box<u64, RingAlloc>> =
        (0..n as u64).map(|i| Box::new_in(i, a.clone())).collect();
    // 8 bytes each, no header: about 510 to a 4 KiB chunk.
    let chunks = a.ring().stats().live_buffers;
    assert!(
        chunks >= n / 510 && chunks <= n / 500 + 1,
        "{chunks} chunks for {n}"
    );
    let mut spans: std::vec::Vec<usize> =
        boxes.iter().map(|b| &**b as *const u64 as usize).collect();
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[1] - w[0] >= 8), "overlap");
    // Free every other one, then the rest from the front: each chunk goes when its
    // last box does, the current one stays until `flush`.
    let (even, odd): (std::vec::Vec<_>, std::vec::Vec<_>) =
        boxes.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    drop(even);
    assert_eq!(a.ring().stats().live_buffers, chunks);
    for (i, b) in odd {
        assert_eq!(*b, i as u64);
    }
    assert_eq!(a.ring().stats().live_buffers, 1);
    a.flush();
    assert_eq!(a.ring().stats().live_buffers, 0);
}

#[test]
fn u32_blocks_take_4_bytes() {
    let a = RingAlloc::new();
    let l = Layout::new::<u32>();
    let n = N.min(4096);
    let ps: std::vec::Vec<_> = (0..n).map(|_| a.allocate(l).unwrap()).collect();
    // 4 bytes each, not a word: about 1,020 to a 4 KiB chunk.
    let chunks = a.ring().stats().live_buffers;
    assert!(chunks <= n / 1000 + 1, "{chunks} chunks for {n} u32s");
    assert!(ps.iter().all(|p| p.len() == 4 && addr(*p) % 4 == 0));
    assert!(ps
        .windows(2)
        .all(|w| addr(w[1]) - addr(w[0]) == 4 || addr(w[1]) % 4096 < 64));
    for p in ps.into_iter().rev() {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { a.deallocate(p.cast(), l) };
    }
    a.flush();
    assert_eq!(a.ring().stats().live_buffers, 0);
}

/// Once `flush` has let go of the current chunk (or before the first), small blocks
/// still live in older chunks are freed into those chunks, and the last one releases
/// its chunk; and a ring too short for chunks frees its small blocks as ring regions.
#[test]
fn small_blocks_outliving_a_flush_free_into_their_chunk() {
    let a = RingAlloc::with_capacity(64 * 1024);
    let l = Layout::new::<u64>();
    let first = a.allocate(l).unwrap();
    // Fill the first chunk and part of a second, then give the second one back.
    let rest: std::vec::Vec<_> = (0..600).map(|_| a.allocate(l).unwrap()).collect();
    assert_eq!(a.ring().stats().live_buffers, 2);
    let (in_first, in_second): (std::vec::Vec<_>, std::vec::Vec<_>) = rest
        .into_iter()
        .partition(|p| addr(*p) / 4096 == addr(first) / 4096);
    assert!(!in_second.is_empty());
    for p in in_second.into_iter().rev() {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { a.deallocate(p.cast(), l) };
    }
    a.flush(); // the empty second chunk goes; no chunk is current now
    assert_eq!(a.ring().stats().live_buffers, 1);
    for p in in_first.into_iter().chain([first]) {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { a.deallocate(p.cast(), l) };
    }
    assert_eq!(a.ring().stats().live_buffers, 0);
    // A new chunk after all that.
    let p = a.allocate(l).unwrap();
    assert_eq!(a.ring().stats().live_buffers, 1);
    // SAFETY: allocated just above with `l`.
    unsafe { a.deallocate(p.cast(), l) };

    // Without chunks (blocks under eight chunks): each small block is a region.
    let a = RingAlloc::with_capacity(8 * 1024);
    let ps: std::vec::Vec<_> = (0..3).map(|_| a.allocate(l).unwrap()).collect();
    assert_eq!(a.ring().stats().live_buffers, 3);
    for p in ps {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { a.deallocate(p.cast(), l) };
    }
    assert_eq!(a.ring().stats().live_buffers, 0);
}

/// Small blocks of every alignment up to a word, mixed so that many need padding, are
/// resized and freed in a scrambled order: each stays aligned, keeps its bytes and
/// overlaps no other, and once all are gone every chunk has been released (the
/// padding was counted, or a chunk would stay pinned).
#[test]
fn mixed_small_alignments_release_every_chunk() {
    let a = RingAlloc::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut live: std::vec::Vec<(NonNull<[u8]>, Layout, u8)> = std::vec::Vec::new();
    for step in 0..N.min(20_000) {
        let r = next();
        match r % 4 {
            0 | 1 => {
                let align = 1 << ((r >> 8) % 4); // 1, 2, 4, 8
                let size = ((r >> 16) % 40) as usize + 1;
                let l = Layout::from_size_align(size, align).unwrap();
                let p = a.allocate(l).unwrap();
                assert_eq!(
                    addr(p) % align,
                    0,
                    "step {step}: {l:?} at {:p}",
                    p.cast::<u8>()
                );
                assert_eq!(p.len(), size.next_multiple_of(4));
                fill(p, size, step as u8);
                live.push((p, l, step as u8));
            }
            2 if !live.is_empty() => {
                let (p, l, seed) = live.swap_remove((r >> 8) as usize % live.len());
                check(p, l.size(), seed);
                // SAFETY: allocated by `a` with `l`, freed once.
                unsafe { a.deallocate(p.cast(), l) };
            }
            3 if !live.is_empty() => {
                let i = (r >> 8) as usize % live.len();
                let (p, l, seed) = live[i];
                let size = ((r >> 16) % 48) as usize + 1;
                let new = Layout::from_size_align(size, l.align()).unwrap();
                // SAFETY: `p` is live, allocated by `a` with `l`; replaced below.
                let q = unsafe {
                    if size >= l.size() {
                        a.grow(p.cast(), l, new).unwrap()
                    } else {
                        a.shrink(p.cast(), l, new).unwrap()
                    }
                };
                check(q, size.min(l.size()), seed);
                fill(q, size, seed);
                live[i] = (q, new, seed);
            }
            _ => {}
        }
    }
    let mut spans: std::vec::Vec<(usize, usize)> =
        live.iter().map(|(p, l, _)| (addr(*p), l.size())).collect();
    spans.sort_unstable();
    assert!(
        spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
        "overlap"
    );
    for (p, l, seed) in live.drain(..) {
        check(p, l.size(), seed);
        // SAFETY: allocated by `a` with `l`, freed once.
        unsafe { a.deallocate(p.cast(), l) };
    }
    a.flush();
    assert_eq!(
        a.ring().stats().live_buffers,
        0,
        "a chunk was never released"
    );
}

#[test]
fn a_live_small_allocation_pins_its_chunk_not_the_ring() {
    let a = RingAlloc::new();
    let pinned = Box::new_in(*b"pinned", a.clone());
    for i in 0..N.min(200_000) {
        // Out of order: the older of two goes first, so no allocation is the latest
        // when it is freed.
        let x = Box::new_in([i as u8; 24], a.clone());
        let y = Box::new_in(i as u32, a.clone());
        drop(x);
        assert_eq!(*y, i as u32);
    }
    assert_eq!(&*pinned, b"pinned");
    assert_eq!(
        a.ring().capacity(),
        RingAlloc::DEFAULT_CAPACITY,
        "the ring never grew"
    );
    assert!(a.ring().stats().live_buffers <= 2);
}

#[test]
fn a_vec_grows_in_place_in_its_chunk_then_moves_out() {
    let a = RingAlloc::new();
    let mut v: Vec<u8, RingAlloc> = Vec::with_capacity_in(8, a.clone());
    let start = v.as_ptr();
    for i in 0..=255u8 {
        v.reserve_exact(1);
        v.push(i);
    }
    assert_eq!(
        v.as_ptr(),
        start,
        "the latest block of the chunk grows at the cursor"
    );
    v.push(0); // 257 bytes: a ring region of its own
    assert_ne!(v.as_ptr(), start);
    assert!(v[..256].iter().enumerate().all(|(i, &b)| b == i as u8));
    // The chunk is empty again: the next small block starts where the vector did.
    let b = Box::new_in(7u8, a.clone());
    assert_eq!(&*b as *const u8, start);
}

#[test]
fn alignments_1_to_4096_ring_ref() {
    let ring = Ring::builder()
        .capacity(256 * 1024)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    alignment_sweep(&&ring);
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn alignments_1_to_4096_ring_alloc_and_heap() {
    let a = RingAlloc::with_capacity(32 * 1024);
    alignment_sweep(&a);
    a.flush(); // the empty chunk of small allocations
    assert_eq!(a.ring().stats().live_buffers, 0);
    a.set_heap_threshold(0); // every request a heap region (chunks too)
    alignment_sweep(&a);
    a.set_heap_threshold(64); // small ones in the ring, then moved to the heap
    alignment_sweep(&a);
    a.flush();
    assert_eq!(a.ring().stats().live_buffers, 0);
}

#[test]
fn alignments_1_to_4096_one_ring() {
    alignment_sweep(&OneRingAlloc);
}

#[test]
fn alignments_above_max_are_refused() {
    let ring = Ring::new(64 * 1024);
    let a = RingAlloc::new();
    for align in [8192, 1 << 20] {
        let l = Layout::from_size_align(8, align).unwrap();
        assert!(ring.allocate(l).is_err());
        assert!(a.allocate(l).is_err());
        assert!(OneRingAlloc.allocate(l).is_err());
        // Growing into such an alignment fails and leaves the block as it was.
        let small = Layout::from_size_align(8, 8).unwrap();
        let p = a.allocate(small).unwrap();
        fill(p, 8, 9);
        // SAFETY: `p` is live with `small`; `l` is not smaller.
        assert!(unsafe { a.grow(p.cast(), small, l) }.is_err());
        check(p, 8, 9);
        // SAFETY: still live with `small`.
        unsafe { a.deallocate(p.cast(), small) };
    }
    a.flush();
    assert_eq!(a.ring().stats().live_buffers, 0);
}

#[test]
fn zero_size_layouts_do_not_touch_the_ring() {
    let ring = Ring::new(4096);
    let a = RingAlloc::with_capacity(4096);
    for &align in &ALIGNS {
        let l = Layout::from_size_align(0, align).unwrap();
        for p in [ring.allocate(l), a.allocate(l), OneRingAlloc.allocate(l)] {
            let p = p.unwrap();
            assert_eq!((p.len(), addr(p) % align), (0, 0));
            assert_ne!(addr(p), 0);
            // SAFETY: a zero-size block; deallocating it is a no-op.
            unsafe { ring.deallocate(p.cast(), l) };
        }
        // Grow from zero allocates; shrink to zero releases.
        let big = Layout::from_size_align(24, align).unwrap();
        let z = a.allocate(l).unwrap();
        // SAFETY: `z` is a zero-size block of `l`.
        let g = unsafe { a.grow_zeroed(z.cast(), l, big) }.unwrap();
        assert_eq!(addr(g) % align, 0);
        check(g, 0, 0);
        // SAFETY: the block holds 24 zeroed bytes.
        assert!(unsafe { g.as_ref() }[..24].iter().all(|&b| b == 0));
        // SAFETY: `g` is live with `big`.
        let s = unsafe { a.shrink(g.cast(), big, l) }.unwrap();
        assert_eq!((s.len(), addr(s) % align), (0, 0));
    }
    assert_eq!(ring.stats().live_buffers, 0);
    assert_eq!(a.ring().stats().live_buffers, 0);
    let mut units: Vec<(), RingAlloc> = Vec::new_in(a.clone());
    units.extend(std::iter::repeat_n((), 1000));
    let b = Box::new_in((), a.clone());
    assert_eq!(a.ring().stats().live_buffers, 0);
    drop((units, b));
}

#[test]
fn bad_sizes_fail_without_ub() {
    let ring = Ring::new(4096); // WhenFull::Fail
    let huge = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    assert!(ring.allocate(huge).is_err());
    assert!(RingAlloc::new().allocate(huge).is_err());
    assert!(OneRingAlloc.allocate(huge).is_err());
    let big = Layout::from_size_align(10_000, 8).unwrap();
    assert!(ring.allocate(big).is_err(), "a full Fail ring refuses");
    let mut v: Vec<u8, &Ring> = Vec::new_in(&ring);
    assert!(v.try_reserve(8192).is_err());
    v.try_reserve(1000).unwrap();
    assert_eq!(ring.stats().live_buffers, 1);
}

#[test]
fn zeroed_memory_is_zero_on_a_dirty_ring() {
    let a = RingAlloc::with_capacity(4096);
    a.set_heap_threshold(usize::MAX);
    for _ in 0..3 {
        let l = Layout::from_size_align(2048, 8).unwrap();
        let p = a.allocate(l).unwrap();
        fill(p, 2048, 0xA5);
        // SAFETY: allocated above with `l`.
        unsafe { a.deallocate(p.cast(), l) };
        let z = a
            .allocate_zeroed(Layout::from_size_align(1000, 64).unwrap())
            .unwrap();
        // SAFETY: a live block of `z.len()` bytes.
        assert!(unsafe { z.as_ref() }.iter().all(|&b| b == 0));
        let l1 = Layout::from_size_align(1000, 64).unwrap();
        fill(z, 10, 1);
        let l2 = Layout::from_size_align(1900, 64).unwrap();
        // SAFETY: `z` is live with `l1`.
        let g = unsafe { a.grow_zeroed(z.cast(), l1, l2) }.unwrap();
        check(g, 10, 1);
        // SAFETY: a live block of `g.len()` bytes.
        assert!(unsafe { g.as_ref() }[1000..].iter().all(|&b| b == 0));
        // SAFETY: `g` is live with `l2`.
        unsafe { a.deallocate(g.cast(), l2) };
    }
}

#[test]
fn heap_threshold_sends_large_requests_to_the_heap() {
    let a = RingAlloc::with_capacity(64 * 1024);
    a.set_heap_threshold(1024);
    let mut v: Vec<u8, RingAlloc> = Vec::new_in(a.clone());
    for i in 0..3000 {
        v.push(i as u8);
        a.flush(); // the chunk of small allocations, once the vector has left it
        let on_ring = a.ring().stats().live_buffers;
        assert_eq!(
            on_ring,
            usize::from(v.capacity() <= 1024),
            "capacity {}",
            v.capacity()
        );
    }
    assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
    v.truncate(2000);
    v.shrink_to_fit(); // a heap region shrinks by realloc and stays on the heap
    assert_eq!(a.ring().stats().live_buffers, 0);
    v.truncate(100);
    v.shrink_to_fit(); // a small block: it moves into a chunk of the ring
    assert_eq!(a.ring().stats().live_buffers, 1);
    assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
    drop(v);
    a.flush();
    assert_eq!(a.ring().stats().live_buffers, 0);
}

// ---------------------------------------------------------------------------------
// Threads and lifetimes

#[test]
fn one_ring_allocations_are_freed_on_other_threads() {
    let (tx, rx) =
        crossbeam_channel::bounded::<(Vec<u64, OneRingAlloc>, Box<[u8; 24], OneRingAlloc>)>(16);
    let n = N.min(2000);
    let consumer = std::thread::spawn(move || {
        let mut sum = 0u64;
        for (mut v, b) in rx {
            sum += v.iter().sum::<u64>() + u64::from(b[0]);
            v.push(1); // grows on this thread: moved into this thread's ring
            v.truncate(1);
            v.shrink_to_fit(); // another thread's region (or ours): stays valid
            sum += v[0];
        }
        sum
    });
    let mut expect = 0;
    for i in 0..n as u64 {
        let mut v = Vec::with_capacity_in(4, OneRingAlloc);
        v.extend([i, i + 1, i + 2, i + 3]);
        expect += 4 * i + 6 + (i % 256) + i;
        tx.send((v, Box::new_in([i as u8; 24], OneRingAlloc)))
            .unwrap();
    }
    drop(tx);
    assert_eq!(consumer.join().unwrap(), expect);
}

#[test]
fn thread_exit_with_live_allocations_frees_the_block_after_the_last() {
    const T: usize = 0;
    let before = LIVE[T].load(Ordering::SeqCst);
    assert_eq!(before, 0);
    let (v, b) = std::thread::spawn(|| {
        ringmem::tls::configure(Ring::builder().capacity(TRACKED[T])).unwrap();
        let mut v = Vec::new_in(OneRingAlloc);
        v.extend(0..1000u32);
        let b = Box::new_in(*b"outlives its thread", OneRingAlloc);
        let scratch = Box::new_in([0u8; 64], OneRingAlloc);
        drop(scratch);
        assert_eq!(LIVE[T].load(Ordering::SeqCst), 1, "the thread's ring block");
        (v, b)
    })
    .join()
    .unwrap();
    // The thread and its ring are gone; the block still holds `v` and `b`.
    assert_eq!(live_blocks(T, 1), 1, "not freed under live data");
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
    drop(v);
    assert_eq!(live_blocks(T, 1), 1, "one allocation still lives");
    assert_eq!(&*b, b"outlives its thread");
    drop(b);
    assert_eq!(
        live_blocks(T, 0),
        0,
        "freed after the last allocation, not leaked"
    );
}

/// Small blocks allocated while a thread is torn down, from thread-local destructors
/// that run before and after the one that retires the thread's chunk (their order is
/// unspecified, so several are registered on both sides of the first chunk), live on
/// and are freed on the main thread.
#[test]
fn one_ring_small_blocks_made_during_thread_teardown() {
    type Out = crossbeam_channel::Sender<Box<[u64; 2], OneRingAlloc>>;
    struct AllocOnExit(std::cell::RefCell<Option<(Out, u64)>>);
    impl Drop for AllocOnExit {
        fn drop(&mut self) {
            if let Some((tx, id)) = self.0.borrow_mut().take() {
                for i in 0..3 {
                    let scratch = Box::new_in([i; 7], OneRingAlloc);
                    let keep = Box::new_in([id, i], OneRingAlloc);
                    drop(scratch);
                    let _ = tx.send(keep);
                }
            }
        }
    }
    std::thread_local! {
        static EARLY: AllocOnExit = const { AllocOnExit(std::cell::RefCell::new(None)) };
        static LATE: AllocOnExit = const { AllocOnExit(std::cell::RefCell::new(None)) };
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    let threads: std::vec::Vec<_> = (0..4u64)
        .map(|id| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                EARLY.with(|e| *e.0.borrow_mut() = Some((tx.clone(), 2 * id)));
                let first = Box::new_in(id, OneRingAlloc); // arms the chunk's retirement
                LATE.with(|l| *l.0.borrow_mut() = Some((tx, 2 * id + 1)));
                assert_eq!(*first, id);
            })
        })
        .collect();
    drop(tx);
    for t in threads {
        t.join().unwrap();
    }
    let mut got: std::vec::Vec<[u64; 2]> = rx.iter().map(|b| *b).collect();
    got.sort_unstable();
    let want: std::vec::Vec<[u64; 2]> =
        (0..8).flat_map(|id| (0..3).map(move |i| [id, i])).collect();
    assert_eq!(got, want);
}

/// `OneRingAlloc::flush` releases the thread's empty chunk; a chunk whose last block is
/// freed on another thread after its retirement is released there.
#[test]
fn one_ring_chunks_are_released_when_empty() {
    std::thread::spawn(|| {
        let boxes: std::vec::Vec<_> = (0..2000u32).map(|i| Box::new_in(i, OneRingAlloc)).collect();
        // 4 bytes each: two 4 KiB chunks.
        assert_eq!(thread_ring_live(), 2);
        let far = std::thread::spawn(move || {
            assert!(boxes.iter().enumerate().all(|(i, b)| **b == i as u32));
            drop(boxes); // the first chunk (retired) is released on this thread
        });
        far.join().unwrap();
        assert_eq!(thread_ring_live(), 1, "the current chunk stays");
        OneRingAlloc.flush();
        assert_eq!(thread_ring_live(), 0);
    })
    .join()
    .unwrap();
}

/// Blocks freed out of order on their own thread are counted without an atomic while
/// their chunk is current, and still count when it is retired: the chunk goes exactly
/// when its last block does, whichever thread frees it.
#[test]
fn one_ring_own_thread_frees_count_towards_release() {
    std::thread::spawn(|| {
        // 1,000 × 4 bytes in the first chunk (`ONE_RING_CHUNK_U32S` fit).
        let boxes: std::vec::Vec<_> = (0..1000u32).map(|i| Box::new_in(i, OneRingAlloc)).collect();
        assert_eq!(thread_ring_live(), 1);
        let mut odd = std::vec::Vec::new();
        for (i, b) in boxes.into_iter().enumerate() {
            if i % 2 == 1 {
                odd.push(b);
            } // the even ones are freed here, out of order
        }
        // 18 more fill the first chunk; the rest open a second, retiring the first.
        let more: std::vec::Vec<_> = (0..1000u32).map(|i| Box::new_in(i, OneRingAlloc)).collect();
        assert_eq!(thread_ring_live(), 2);
        std::thread::spawn(move || {
            assert!(odd.iter().enumerate().all(|(i, b)| **b == 2 * i as u32 + 1));
        })
        .join()
        .unwrap();
        assert_eq!(
            thread_ring_live(),
            2,
            "18 blocks of `more` still live in the first chunk"
        );
        assert!(more.iter().enumerate().all(|(i, b)| **b == i as u32));
        drop(more); // in order: the first chunk goes with its last block
        assert_eq!(thread_ring_live(), 1, "the current chunk stays");
        OneRingAlloc.flush();
        assert_eq!(
            thread_ring_live(),
            0,
            "every block of the current chunk came back"
        );
    })
    .join()
    .unwrap();
}

/// `u32` boxes in one `OneRingAlloc` chunk: 4 KiB less the region header and the chunk's
/// count, one word each, in blocks of 4 bytes.
const ONE_RING_CHUNK_U32S: usize = (4096 - 8 - 8) / 4;

/// Frees of one chunk's blocks on a thread that is not its owner's current chunk are
/// added up on that thread and subtracted in one step. The chunk still goes with its
/// last block when the freeing thread holds all the rest; otherwise when each thread
/// holding some of its bytes frees a block of another chunk, flushes or exits.
#[test]
fn one_ring_frees_held_back_are_given_back() {
    type Job = std::boxed::Box<dyn FnOnce() + Send>;
    std::thread::spawn(|| {
        // 4 bytes each: chunks 0, 1 and 2 full and retired, 3 current.
        const C: usize = ONE_RING_CHUNK_U32S;
        let mut all: std::vec::Vec<_> = (0..(3 * C + 40) as u32)
            .map(|i| Box::new_in(i, OneRingAlloc))
            .collect();
        assert_eq!(thread_ring_live(), 4);
        let current = all.split_off(3 * C);
        let mut second = all.split_off(2 * C);
        let mut first = all.split_off(C);
        let whole = all;
        let last_of_first = first.pop().unwrap();
        let first_of_second = second.remove(0);

        let (jobs, inbox) = std::sync::mpsc::channel::<Job>();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            for job in inbox {
                job();
                done.send(()).unwrap();
            }
        });
        let on_worker = |job: Job| {
            jobs.send(job).unwrap();
            finished.recv().unwrap();
        };

        on_worker(std::boxed::Box::new(move || drop(whole)));
        assert_eq!(
            thread_ring_live(),
            3,
            "the worker held every byte of chunk 0: released at once"
        );

        on_worker(std::boxed::Box::new(move || drop(first)));
        drop(last_of_first); // held back here: the worker holds the rest of chunk 1
        assert_eq!(
            thread_ring_live(),
            3,
            "chunk 1's bytes are held back on two threads"
        );

        // A free in chunk 2 makes the worker give chunk 1's bytes back.
        on_worker(std::boxed::Box::new(move || drop(first_of_second)));
        assert_eq!(
            thread_ring_live(),
            3,
            "this thread still holds 4 bytes of chunk 1"
        );
        OneRingAlloc.flush();
        assert_eq!(
            thread_ring_live(),
            2,
            "chunk 1 goes with the last bytes held back"
        );

        drop(second); // held here: the worker holds 4 bytes of chunk 2
        assert_eq!(thread_ring_live(), 2);
        drop(jobs);
        worker.join().unwrap(); // its exit gives back what it held
        assert_eq!(
            thread_ring_live(),
            2,
            "this thread still holds the rest of chunk 2"
        );
        OneRingAlloc.flush();
        assert_eq!(thread_ring_live(), 1);

        assert!(current
            .iter()
            .enumerate()
            .all(|(i, b)| **b == (3 * C + i) as u32));
        drop(current);
        OneRingAlloc.flush();
        assert_eq!(thread_ring_live(), 0);
    })
    .join()
    .unwrap();
}

/// The delay that frees held back may cause, at its worst: a chunk of a ring whose thread
/// has exited, its blocks freed alternately by two threads that then go idle. The ring
/// block stays (not leaked) until both threads give their bytes back, here by `flush`
/// and by exiting, and is freed then.
#[test]
fn one_ring_held_back_frees_keep_an_orphaned_block_until_given_back() {
    const T: usize = 2;
    assert_eq!(LIVE[T].load(Ordering::SeqCst), 0);
    let boxes = std::thread::spawn(|| {
        ringmem::tls::configure(Ring::builder().capacity(TRACKED[T])).unwrap();
        // `ONE_RING_CHUNK_U32S` fill a chunk: a retired one and the current one, retired
        // at exit.
        (0..1500u32)
            .map(|i| Box::new_in(i, OneRingAlloc))
            .collect::<std::vec::Vec<_>>()
    })
    .join()
    .unwrap();
    assert_eq!(
        live_blocks(T, 1),
        1,
        "the exited thread's block holds the boxes"
    );
    let (odd, even): (std::vec::Vec<_>, std::vec::Vec<_>) =
        boxes.into_iter().partition(|b| **b % 2 == 1);

    let (exit, exit_rx) = std::sync::mpsc::channel::<()>();
    let (freed, freed_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        assert!(odd.iter().all(|b| **b % 2 == 1));
        drop(odd); // holds back the second chunk's odd boxes
        freed.send(()).unwrap();
        exit_rx.recv().unwrap();
    });
    freed_rx.recv().unwrap();
    assert!(even.iter().all(|b| **b % 2 == 0));
    drop(even); // the first chunk goes with its last box; the second's are held here
    assert_eq!(
        live_blocks(T, 1),
        1,
        "the second chunk's bytes are held on two threads"
    );
    OneRingAlloc.flush();
    assert_eq!(live_blocks(T, 1), 1, "the worker still holds some");
    exit.send(()).unwrap();
    worker.join().unwrap();
    assert_eq!(
        live_blocks(T, 0),
        0,
        "given back at the worker's exit: block freed"
    );
}

#[test]
fn ring_handles_dropped_while_a_vec_lives_on() {
    const T: usize = 1;
    let a = RingAlloc::from(Ring::new(TRACKED[T]));
    let mut v: Vec<u64, RingAlloc> = Vec::new_in(a.clone());
    v.extend(0..100);
    drop(a); // the vector's clone keeps the ring
    assert_eq!(live_blocks(T, 1), 1);
    v.extend(100..N.min(5000) as u64);
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    let mut w = Vec::new_in(v.allocator().clone());
    w.push(1u8);
    drop(v);
    assert_eq!(live_blocks(T, 1), 1);
    drop(w); // the last handle: ring and block go
    assert_eq!(live_blocks(T, 0), 0);
}

#[test]
fn one_ring_alloc_is_a_send_sync_copy_zst() {
    fn send_sync_copy<T: Send + Sync + Copy + Default>() {}
    send_sync_copy::<OneRingAlloc>();
    assert_eq!(std::mem::size_of::<OneRingAlloc>(), 0);
    let v: Vec<u8, OneRingAlloc> = Vec::new_in(OneRingAlloc);
    assert_eq!(std::mem::size_of_val(&v), 3 * std::mem::size_of::<usize>());
}

#[test]
fn ring_alloc_new_recycles_the_threads_spare_ring() {
    std::thread::spawn(|| {
        let a = RingAlloc::new();
        let l = Layout::from_size_align(100, 8).unwrap();
        let live = a.allocate(l).unwrap(); // outlives its RingAlloc
        fill(live, 100, 3);
        let first = addr(live);
        drop(a);
        let b = RingAlloc::new(); // the same ring, warm
        assert_eq!(b.ring().stats().live_buffers, 1);
        let mut v: Vec<u8, RingAlloc> = Vec::new_in(b.clone());
        v.extend(0..=255u8);
        let start = v.as_ptr() as usize;
        assert!(
            start.abs_diff(first) < RingAlloc::DEFAULT_CAPACITY,
            "same block"
        );
        assert!(start >= first + 100 || start + 256 <= first, "no overlap");
        check(live, 100, 3);
        // SAFETY: allocated above with `l`; the ring is alive in `b`.
        unsafe { b.deallocate(live.cast(), l) };
        // `a`'s chunk held only `live`: it went with it.
        assert_eq!(b.ring().stats().live_buffers, 1);
        drop(v);
        b.flush();
        assert_eq!(b.ring().stats().live_buffers, 0);
    })
    .join()
    .unwrap();
}

#[test]
fn box_owning_its_ring() {
    // `Ring` itself is an allocator: a box may own the ring it lives in.
    let b = Box::new_in(5u32, Ring::new(4096));
    assert_eq!(Box::allocator(&b).stats().live_buffers, 1);
    assert_eq!(*b, 5);
}

#[test]
fn global_is_a_drop_in_peer() {
    // The helpers run against `Global` too, to validate the sweep itself.
    alignment_sweep(&Global);
}

// ---------------------------------------------------------------------------------
// Model-based: random allocate / grow / grow_zeroed / shrink / free sequences

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: usize,
        align_pow: u32,
    },
    Grow {
        idx: usize,
        extra: usize,
        zeroed: bool,
        /// Where the old layout's size lies between the size asked and the capacity
        /// handed out (percent): any size in between "fits" the block.
        fit_pct: usize,
    },
    Shrink {
        idx: usize,
        keep_pct: usize,
    },
    Free {
        idx: usize,
        fit_pct: usize,
    },
    /// Frees the latest allocation (last in, first out: the ring's rewind path).
    FreeLast {
        fit_pct: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..600, 0u32..13).prop_map(|(size, align_pow)| Op::Alloc { size, align_pow }),
        3 => (any::<usize>(), 0usize..900, any::<bool>(), 0usize..=100)
            .prop_map(|(idx, extra, zeroed, fit_pct)| Op::Grow { idx, extra, zeroed, fit_pct }),
        1 => (any::<usize>(), 0usize..=100).prop_map(|(idx, keep_pct)| Op::Shrink { idx, keep_pct }),
        2 => (any::<usize>(), 0usize..=100).prop_map(|(idx, fit_pct)| Op::Free { idx, fit_pct }),
        2 => (0usize..=100).prop_map(|fit_pct| Op::FreeLast { fit_pct }),
    ]
}

/// One live block of the model: where, with which layout, and its seed.
struct Live {
    /// Bytes handed out (at least the layout's size).
    cap: usize,
    p: NonNull<[u8]>,
    layout: Layout,
    seed: u8,
    /// Bytes from `zeroed_from` to the layout's size must be zero (grow_zeroed).
    zeroed_from: usize,
}

/// A layout that fits the live block `l`: its alignment, and a size between the one
/// asked for and the capacity handed out (`pct` percent of the way).
fn fitting(l: &Live, pct: usize) -> Layout {
    let size = l.layout.size() + (l.cap - l.layout.size()) * pct / 100;
    Layout::from_size_align(size, l.layout.align()).unwrap()
}

fn run_model<A: Allocator>(a: &A, ops: &[Op]) {
    let mut live: std::vec::Vec<Live> = std::vec::Vec::new();
    let mut next_seed = 0u8;
    for op in ops {
        match *op {
            Op::Alloc { size, align_pow } => {
                let layout = Layout::from_size_align(size, 1 << align_pow).unwrap();
                let p = a.allocate(layout).unwrap();
                assert_eq!(addr(p) % layout.align(), 0);
                next_seed = next_seed.wrapping_add(37);
                fill(p, size, next_seed);
                live.push(Live {
                    cap: p.len(),
                    p,
                    layout,
                    seed: next_seed,
                    zeroed_from: size,
                });
            }
            Op::Grow {
                idx,
                extra,
                zeroed,
                fit_pct,
            } if !live.is_empty() => {
                let n = live.len();
                let l = &mut live[idx % n];
                let old = fitting(l, fit_pct);
                let new =
                    Layout::from_size_align(l.layout.size() + extra, l.layout.align()).unwrap();
                let new = if new.size() < old.size() { old } else { new };
                // SAFETY: `l.p` is live and `old` fits it; `new` is not smaller.
                let q = unsafe {
                    if zeroed {
                        a.grow_zeroed(l.p.cast(), old, new)
                    } else {
                        a.grow(l.p.cast(), old, new)
                    }
                }
                .unwrap();
                assert_eq!(addr(q) % new.align(), 0);
                check(q, l.zeroed_from.min(l.layout.size()), l.seed);
                if zeroed {
                    // SAFETY: `q` holds `new.size()` bytes.
                    let bytes = unsafe { &q.as_ref()[old.size()..new.size()] };
                    assert!(bytes.iter().all(|&b| b == 0), "grow_zeroed left garbage");
                }
                // Refill so that the whole block carries the pattern again.
                fill(q, new.size(), l.seed);
                l.cap = q.len();
                l.p = q;
                l.layout = new;
                l.zeroed_from = new.size();
            }
            Op::Shrink { idx, keep_pct } if !live.is_empty() => {
                let n = live.len();
                let l = &mut live[idx % n];
                let new =
                    Layout::from_size_align(l.layout.size() * keep_pct / 100, l.layout.align())
                        .unwrap();
                // SAFETY: `l.p` is live with `l.layout`; `new` is not larger.
                let q = unsafe { a.shrink(l.p.cast(), l.layout, new) }.unwrap();
                assert_eq!(addr(q) % new.align(), 0);
                check(q, new.size(), l.seed);
                l.cap = q.len();
                l.p = q;
                l.layout = new;
                l.zeroed_from = new.size();
            }
            Op::Free { idx, fit_pct } if !live.is_empty() => {
                let l = live.remove(idx % live.len());
                check(l.p, l.layout.size(), l.seed);
                // SAFETY: live, and the layout fits it; freed once.
                unsafe { a.deallocate(l.p.cast(), fitting(&l, fit_pct)) };
            }
            Op::FreeLast { fit_pct } if !live.is_empty() => {
                let l = live.pop().unwrap();
                check(l.p, l.layout.size(), l.seed);
                // SAFETY: live, and the layout fits it; freed once.
                unsafe { a.deallocate(l.p.cast(), fitting(&l, fit_pct)) };
            }
            _ => {}
        }
        // No two live blocks overlap, and every block holds what was written.
        let mut spans: std::vec::Vec<(usize, usize)> = live
            .iter()
            .filter(|l| l.layout.size() > 0)
            .map(|l| (addr(l.p), addr(l.p) + l.layout.size()))
            .collect();
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlapping blocks: {spans:?}"
        );
        for l in &live {
            check(l.p, l.layout.size(), l.seed);
        }
    }
    for l in live {
        // SAFETY: live with `l.layout`, freed once.
        unsafe { a.deallocate(l.p.cast(), l.layout) };
    }
}

/// The model against a `RingAlloc` of `bytes`-byte blocks with a heap threshold; the
/// ring holds nothing afterwards (its empty chunk flushed).
fn model_ring_alloc_with(bytes: usize, threshold: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let a = RingAlloc::with_capacity(bytes);
    a.set_heap_threshold(threshold);
    run_model(&a, ops);
    a.flush();
    let stats = a.ring().stats();
    prop_assert_eq!((stats.live_buffers, stats.bytes_in_use), (0, 0));
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 128 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn model_ring_alloc(
        ops in prop::collection::vec(op(), 1..if cfg!(miri) { 24 } else { 200 }),
        cap in 1usize..64,
        threshold in prop_oneof![Just(usize::MAX), 0usize..4096],
    ) {
        model_ring_alloc_with(cap * 512, threshold, &ops)?;
    }

    /// Rings large enough for chunks: small blocks share them, and move in and out of
    /// them as they grow and shrink.
    #[test]
    fn model_ring_alloc_chunked(
        ops in prop::collection::vec(op(), 1..if cfg!(miri) { 24 } else { 200 }),
        cap in 64usize..256,
        threshold in prop_oneof![Just(usize::MAX), 0usize..8192],
    ) {
        model_ring_alloc_with(cap * 512, threshold, &ops)?;
    }

    #[test]
    fn model_ring_ref_heap_policy(
        ops in prop::collection::vec(op(), 1..if cfg!(miri) { 24 } else { 200 }),
        cap in 1usize..32,
    ) {
        let ring = Ring::builder().capacity(cap * 1024).when_full(WhenFull::Heap).build().unwrap();
        run_model(&&ring, &ops);
        let stats = ring.stats();
        prop_assert_eq!((stats.live_buffers, stats.bytes_in_use), (0, 0));
    }

    #[test]
    fn model_one_ring(ops in prop::collection::vec(op(), 1..if cfg!(miri) { 24 } else { 200 })) {
        run_model(&OneRingAlloc, &ops);
    }
}

/// A case the model found: the walk's scan stopped at the header of a small region,
/// which was then freed as the latest allocation (the window opened over it) and grown
/// over by the region before it; the next claim resumed the scan at what was a header
/// no more.
#[test]
fn a_scan_stopped_at_a_region_given_back_to_the_window_is_forgotten() {
    let ops = [
        Op::Alloc {
            size: 264,
            align_pow: 10,
        },
        Op::Grow {
            idx: 0,
            extra: 489,
            zeroed: false,
            fit_pct: 0,
        },
        Op::Alloc {
            size: 49,
            align_pow: 0,
        },
        Op::Alloc {
            size: 178,
            align_pow: 0,
        },
        Op::Alloc {
            size: 1,
            align_pow: 0,
        },
        Op::Free {
            idx: 1740077796241829737,
            fit_pct: 0,
        },
        Op::Grow {
            idx: 7919987465018396205,
            extra: 72,
            zeroed: false,
            fit_pct: 0,
        },
        Op::Free {
            idx: 5051879239241210204,
            fit_pct: 0,
        },
        Op::Free {
            idx: 1252721620591296780,
            fit_pct: 0,
        },
        Op::Grow {
            idx: 13,
            extra: 16,
            zeroed: true,
            fit_pct: 60,
        },
        Op::Grow {
            idx: 8685951923635421662,
            extra: 879,
            zeroed: false,
            fit_pct: 29,
        },
    ];
    let ring = Ring::builder()
        .capacity(3 * 1024)
        .when_full(WhenFull::Heap)
        .build()
        .unwrap();
    run_model(&&ring, &ops);
}
