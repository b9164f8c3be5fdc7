//! What the ring's allocators send to the heap, and where it shows: `RingAlloc::stats`,
//! `OneRingAlloc::stats`, and the ring's `heap_fallbacks` for `&Ring`.
#![cfg(feature = "allocator-api2")]

mod common;

use allocator_api2::boxed::Box;
use allocator_api2::vec::Vec;
use hashbrown::HashMap;
use ringmem::{Ring, RingAlloc, WhenFull};

/// Records of the hashbrown test: 10,000 of them make a table larger than the heap
/// threshold (256 KiB), as a new user's first map did.
const RECORDS: u64 = if cfg!(miri) { 2_000 } else { 10_000 };

#[test]
fn a_large_hash_map_shows_its_heap_allocations() {
    let alloc = RingAlloc::new();
    if cfg!(miri) {
        alloc.set_heap_threshold(16 * 1024); // the same story with a smaller table
    }
    let mut map = HashMap::new_in(alloc.clone());
    for i in 0..RECORDS {
        map.insert(i, [i as u8; 32]);
    }
    let stats = alloc.stats();
    // The table doubles past the threshold at least once: each larger table is a new
    // heap allocation, and the old one is freed.
    assert!(stats.heap_allocs >= 1, "{stats:?}");
    assert_eq!(stats.heap_live, Some(1), "{stats:?}");
    let live = stats.heap_live_bytes.unwrap();
    assert!(live > alloc.heap_threshold(), "{stats:?}");
    assert!(stats.heap_bytes >= live as u64 - 4096, "{stats:?}");
    assert_eq!(stats.ring.heap_fallbacks, stats.heap_allocs, "{stats:?}");
    assert_eq!(alloc.ring().stats().heap_fallbacks, stats.heap_allocs);
    assert!((0..RECORDS).all(|i| map[&i] == [i as u8; 32]));

    drop(map);
    let after = alloc.stats();
    assert_eq!(after.heap_live, Some(0));
    assert_eq!(after.heap_live_bytes, Some(0));
    assert_eq!(after.heap_allocs, stats.heap_allocs, "cumulative");
}

#[test]
fn a_small_vec_sends_nothing_to_the_heap() {
    let alloc = RingAlloc::new();
    let mut v = Vec::new_in(alloc.clone());
    v.extend(0..1000u64);
    let b = Box::new_in(7u32, alloc.clone());
    let stats = alloc.stats();
    assert_eq!(stats.heap_allocs, 0);
    assert_eq!(stats.heap_bytes, 0);
    assert_eq!(stats.heap_live, Some(0));
    assert_eq!(stats.heap_live_bytes, Some(0));
    assert_eq!(stats.ring.heap_fallbacks, 0);
    assert!(stats.ring.live_buffers >= 2);
    drop((v, b));
}

#[test]
fn with_the_threshold_off_a_request_too_large_for_the_ring_fails() {
    let ring = Ring::builder()
        .capacity(64 * 1024)
        .when_full(WhenFull::Fail)
        .build()
        .unwrap();
    let alloc = RingAlloc::from(ring);
    alloc.set_heap_threshold(usize::MAX);
    assert_eq!(alloc.heap_threshold(), usize::MAX);

    let mut v: Vec<u8, _> = Vec::new_in(alloc.clone());
    assert!(v.try_reserve(32 * 1024).is_ok());
    v.extend_from_slice(&[1; 1000]);
    assert!(v.try_reserve(1 << 20).is_err(), "the heap path is off");
    assert_eq!(&v[..], &[1; 1000][..], "a failed grow keeps the block");
    let mut fresh: Vec<u8, _> = Vec::new_in(alloc.clone());
    assert!(fresh.try_reserve_exact(1 << 20).is_err());
    let mut map: HashMap<u64, u64, _, _> = HashMap::new_in(alloc.clone());
    assert!(map.try_reserve(100_000).is_err());

    let stats = alloc.stats();
    assert_eq!(stats.heap_allocs, 0, "{stats:?}");
    assert_eq!(stats.heap_live, Some(0));
    assert_eq!(stats.ring.heap_fallbacks, 0);

    // The default threshold again: the same request goes to the heap.
    alloc.set_heap_threshold(RingAlloc::DEFAULT_HEAP_THRESHOLD);
    assert!(fresh.try_reserve_exact(1 << 20).is_ok());
    assert_eq!(alloc.stats().heap_allocs, 1);
    assert_eq!(alloc.stats().heap_live, Some(1));
    drop((v, fresh));
    assert_eq!(alloc.stats().heap_live, Some(0));
}

#[test]
fn with_the_threshold_off_a_growing_ring_adds_a_block() {
    let alloc = RingAlloc::new();
    alloc.set_heap_threshold(usize::MAX);
    let v: Vec<u8, _> = Vec::with_capacity_in(4 << 20, alloc.clone());
    let stats = alloc.stats();
    assert_eq!(stats.heap_allocs, 0);
    assert_eq!(stats.ring.blocks, 2, "{stats:?}");
    drop(v);
}

#[test]
fn ring_ref_counts_its_heap_path_in_heap_fallbacks() {
    let ring = Ring::new(1 << 20);
    let mut v: Vec<u8, &Ring> = Vec::new_in(&ring);
    // Up to the threshold, growing by doubling as pushes would, 256 bytes at a time.
    let bytes = common::counting(0);
    while v.len() < RingAlloc::DEFAULT_HEAP_THRESHOLD {
        extend(&mut v, bytes);
    }
    assert_eq!(
        ring.stats().heap_fallbacks,
        0,
        "at the threshold: the ring's"
    );
    v.push(0); // the doubled capacity is above the threshold: it moves to the heap
    assert_eq!(ring.stats().heap_fallbacks, 1);
    let moved = v.capacity() as u64;
    assert_eq!(ring.counters().heap_bytes, moved);
    v.reserve(4 << 20); // `realloc` of the heap region: not a new fallback
    assert_eq!(ring.stats().heap_fallbacks, 1);
    let other: Vec<u64, &Ring> = Vec::with_capacity_in(100_000, &ring);
    assert_eq!(ring.stats().heap_fallbacks, 2);
    assert_eq!(
        ring.counters().heap_bytes,
        moved + 800_000,
        "the requests' bytes"
    );
    assert_eq!(ring.stats().live_buffers, 0, "both on the heap");
    assert_eq!(v[1000], (1000 % 256) as u8);
    drop((v, other));
}

#[test]
fn live_heap_bytes_follow_resizes_and_moves() {
    let alloc = RingAlloc::new();
    let live = || alloc.stats().heap_live_bytes.unwrap();
    let mut v: Vec<u8, _> = Vec::with_capacity_in(512 * 1024, alloc.clone());
    let first = live();
    assert!(first >= 512 * 1024);
    v.reserve_exact(2 << 20); // realloc
    assert!(live() >= 2 << 20);
    assert_eq!(alloc.stats().heap_allocs, 1);
    extend(&mut v, &[5; 300 * 1024]);
    v.shrink_to_fit(); // realloc, smaller
    assert!(live() >= 300 * 1024 && live() < 2 << 20, "{}", live());
    v.truncate(100);
    v.shrink_to_fit(); // a small layout: moves into a chunk
    assert_eq!(alloc.stats().heap_live, Some(0));
    assert_eq!(live(), 0);
    assert_eq!(&v[..], &[5; 100][..]);

    // A ring allocation that grows past a lowered threshold moves to the heap.
    let mut w: Vec<u8, _> = Vec::with_capacity_in(1000, alloc.clone());
    alloc.set_heap_threshold(1500);
    w.reserve_exact(2000);
    assert_eq!(alloc.stats().heap_allocs, 2);
    assert_eq!(alloc.stats().heap_live, Some(1));
    // Raised again: it stays on the heap, and is still counted when it goes.
    alloc.set_heap_threshold(usize::MAX);
    drop(w);
    assert_eq!(alloc.stats().heap_live, Some(0));
    drop(v);
}

#[test]
fn small_layouts_below_a_tiny_threshold_take_heap_chunks() {
    let alloc = RingAlloc::new();
    alloc.set_heap_threshold(100);
    let b = Box::new_in(1u64, alloc.clone());
    let stats = alloc.stats();
    assert_eq!(stats.heap_allocs, 1, "one chunk: {stats:?}");
    assert_eq!(stats.heap_live, Some(1));
    assert_eq!(stats.ring.live_buffers, 0);
    drop(b);
    alloc.flush(); // the empty chunk
    assert_eq!(alloc.stats().heap_live, Some(0));
    assert_eq!(alloc.stats().heap_live_bytes, Some(0));
}

#[test]
fn a_heap_policy_ring_keeps_no_live_counts() {
    let ring = Ring::builder()
        .capacity(64 * 1024)
        .when_full(WhenFull::Heap)
        .build()
        .unwrap();
    let alloc = RingAlloc::from(ring);
    let big: Vec<u8, _> = Vec::with_capacity_in(1 << 20, alloc.clone());
    let full: Vec<u8, _> = Vec::with_capacity_in(100 * 1024, alloc.clone()); // the policy's
    let stats = alloc.stats();
    assert_eq!(stats.heap_allocs, 1, "{stats:?}");
    assert_eq!(stats.ring.heap_fallbacks, 2, "{stats:?}");
    assert_eq!(stats.heap_live, None);
    assert_eq!(stats.heap_live_bytes, None);
    drop((big, full));
}

/// Collections of sizes on both sides of a moving threshold, resized and dropped in a
/// scrambled order: the live counts end at zero (and never go below it, which would
/// panic in a debug build).
#[test]
fn live_counts_return_to_zero_whatever_the_order() {
    let alloc = RingAlloc::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let rounds = if cfg!(miri) { 20 } else { 400 };
    let mut live: std::vec::Vec<Vec<u8, RingAlloc>> = std::vec::Vec::new();
    let mut peak = 0;
    for _ in 0..rounds {
        match next(6) {
            0 => alloc.set_heap_threshold([0, 200, 4096, 64 * 1024, usize::MAX][next(5)]),
            1 | 2 => {
                let size = [8, 300, 5000, 100_000, 300_000][next(5)];
                let mut v = Vec::with_capacity_in(size, alloc.clone());
                v.push(1);
                live.push(v);
            }
            3 if !live.is_empty() => {
                let i = next(live.len());
                live[i].reserve_exact([10, 1000, 400_000][next(3)]);
            }
            4 if !live.is_empty() => {
                let i = next(live.len());
                live[i].shrink_to([1, 250, 4000][next(3)]);
            }
            _ if !live.is_empty() => drop(live.swap_remove(next(live.len()))),
            _ => {}
        }
        let stats = alloc.stats();
        assert!(stats.heap_live.unwrap() <= live.len() + 1, "{stats:?}"); // + a chunk
        peak = peak.max(stats.heap_live.unwrap());
    }
    assert!(peak > 1, "the sequence reached the heap path");
    drop(live);
    alloc.flush();
    assert_eq!(alloc.stats().heap_live, Some(0));
    assert_eq!(alloc.stats().heap_live_bytes, Some(0));
}

#[cfg(feature = "std")]
#[test]
fn one_ring_alloc_counts_per_thread() {
    use ringmem::OneRingAlloc;
    std::thread::spawn(|| {
        let before = OneRingAlloc.stats();
        assert_eq!(before.heap_allocs, 0);
        let v: Vec<u8, _> = Vec::with_capacity_in(1 << 20, OneRingAlloc);
        let small: Vec<u8, _> = Vec::with_capacity_in(1000, OneRingAlloc);
        let stats = OneRingAlloc.stats();
        assert_eq!(stats.heap_allocs, 1, "{stats:?}");
        assert_eq!(stats.heap_bytes, 1 << 20);
        assert_eq!(stats.heap_live, None, "blocks may be freed on any thread");
        assert_eq!(stats.ring.heap_fallbacks, 1);
        // Another thread's counters are its own.
        let there = std::thread::spawn(|| OneRingAlloc.stats().heap_allocs)
            .join()
            .unwrap();
        assert_eq!(there, 0);
        drop((v, small));
    })
    .join()
    .unwrap();
}

/// `v.extend_from_slice(bytes)` as one copy: allocator-api2's writes a byte at a time,
/// which costs Miri a step per byte (minutes for these tests' hundreds of KiB).
fn extend<A: allocator_api2::alloc::Allocator>(v: &mut Vec<u8, A>, bytes: &[u8]) {
    v.reserve(bytes.len());
    let len = v.len();
    // SAFETY: `reserve` left room for `bytes.len()` more bytes past `len`; the copy
    // initialises them before `set_len` covers them, and `bytes` is not in `v`.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().add(len), bytes.len());
        v.set_len(len + bytes.len());
    }
}
