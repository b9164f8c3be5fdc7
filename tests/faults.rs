//! Failure paths: allocations refused by the ring or by the global allocator.
//!
//! This binary installs `common::faulty::Faulty` as its global allocator, so a test can
//! refuse the heap's `n`th allocation from now (or those above a size) and count what
//! is left live once everything is dropped.

mod common;

use allocator_api2::boxed::Box;
use common::faulty::{self, no_leak, refuse_above, refuse_nth};
use ringmem::{Ring, RingAlloc, WhenFull};

#[global_allocator]
static ALLOC: faulty::Faulty = faulty::Faulty;

type Small = Box<[u8; 256], RingAlloc>;

/// Fifteen 256-byte boxes fill one chunk (4 KiB less its head) but for a few bytes,
/// so the next small box needs a new chunk.
fn fill_one_chunk(a: &RingAlloc) -> Vec<Small> {
    (0..15u8)
        .map(|i| Box::try_new_in([i; 256], a.clone()).expect("room for the first chunk"))
        .collect()
}

/// After a small allocation failed for want of a new chunk, the chunk that was current
/// must not serve again: its count was closed when it was retired, so its frees would
/// release it under the new block. Checks that a 16-byte box made after the failure
/// keeps its bytes while everything else is freed and the memory reused.
fn check_box_survives(a: &RingAlloc, boxes: Vec<Small>, refill: impl FnOnce()) {
    let late = Box::try_new_in([0x55u8; 16], a.clone());
    drop(boxes);
    refill();
    if let Ok(late) = late {
        assert_eq!(*late, [0x55u8; 16], "a live box was overwritten");
    }
    a.flush();
}

#[test]
fn ring_alloc_after_a_refused_chunk_on_a_full_ring() {
    no_leak("ring chunk, Fail", || {
        let ring = Ring::builder()
            .capacity(32 * 1024)
            .when_full(WhenFull::Fail)
            .build()
            .unwrap();
        let a = RingAlloc::from(ring);
        let boxes = fill_one_chunk(&a);
        let mut fillers = Vec::new();
        while let Some(f) = a.ring().fixed(64) {
            fillers.push(f);
        }
        assert!(
            Box::try_new_in([0u8; 256], a.clone()).is_err(),
            "the ring is full: no chunk for the sixteenth box"
        );
        // Room for one chunk again, so a later small box may succeed honestly.
        fillers.truncate(fillers.len().saturating_sub(80));
        check_box_survives(&a, boxes, || {
            drop(fillers);
            let mut over = Vec::new();
            while let Some(mut f) = a.ring().fixed(8000) {
                f.try_extend_from_slice(&[0xAA; 8000]).unwrap();
                over.push(f);
            }
            assert!(!over.is_empty());
        });
    });
}

#[test]
fn ring_alloc_after_the_heap_refused_a_block() {
    // Run on a thread of its own: `RingAlloc::new` keeps a spare ring per thread.
    no_leak("RingAlloc::new, Grow", || {
        faulty::spawn(|| {
            let a = RingAlloc::new();
            let boxes = fill_one_chunk(&a);
            let mut fillers = Vec::new();
            // Fill the first block, then refuse the second.
            refuse_above(64 * 1024);
            // A second block shows in the capacity, which sums the blocks: `stats`
            // would walk every filler at each step (minutes under Miri).
            let one_block = a.ring().capacity();
            while let Some(f) = a.ring().fixed(1000) {
                if a.ring().capacity() > one_block {
                    drop(f);
                    break;
                }
                fillers.push(f);
            }
            let before = faulty::refused();
            assert!(Box::try_new_in([0u8; 256], a.clone()).is_err());
            assert!(faulty::refused() > before, "the heap was asked and refused");
            faulty::disarm_refusals();
            fillers.truncate(fillers.len() - 20);
            check_box_survives(&a, boxes, || {
                drop(fillers);
                let mut over = Vec::new();
                for _ in 0..200 {
                    let mut f = a.ring().fixed(4000).unwrap();
                    f.try_extend_from_slice(&[0xAA; 4000]).unwrap();
                    over.push(f);
                }
            });
        })
        .join()
        .unwrap();
    });
}

#[test]
fn ring_alloc_after_the_heap_refused_a_heap_chunk() {
    no_leak("chunks on the heap", || {
        let a = RingAlloc::from(
            Ring::builder()
                .capacity(64 * 1024)
                .when_full(WhenFull::Grow)
                .build()
                .unwrap(),
        );
        a.set_heap_threshold(0);
        let boxes = fill_one_chunk(&a);
        refuse_nth(1, false);
        assert!(Box::try_new_in([0u8; 256], a.clone()).is_err());
        check_box_survives(&a, boxes, || {
            // Heap memory of a chunk's size, where the old chunk may have gone.
            let reuse: Vec<Vec<u8>> = (0..8).map(|_| vec![0xAAu8; 4088]).collect();
            drop(reuse);
        });
    });
}

/// Runs `op` once to count the allocations it makes, then once per allocation with
/// that one refused (and once with it and every later one refused), handing `check`
/// the outcome of each refused run.
fn sweep<T>(mut op: impl FnMut() -> T, mut check: impl FnMut(T, u64, bool)) -> u64 {
    let start = faulty::served();
    drop(op());
    let points = faulty::served() - start;
    for k in 1..=points {
        for and_after in [false, true] {
            refuse_nth(k, and_after);
            let out = op();
            faulty::disarm_refusals();
            check(out, k, and_after);
        }
    }
    points
}

const POLICIES: [WhenFull; 3] = [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow];

#[test]
fn ring_construction_reports_every_refusal() {
    no_leak("Ring::builder().build()", || {
        for policy in POLICIES {
            let build = || Ring::builder().capacity(4096).when_full(policy).build();
            let points = sweep(build, |r, k, _| {
                assert!(
                    matches!(r, Err(ringmem::RingError::OutOfMemory { .. })),
                    "{policy:?}: refusal {k} gave {r:?}"
                );
            });
            assert_eq!(points, 2, "the block and the list of blocks");
        }
    });
}

#[test]
fn ring_alloc_construction_reports_every_refusal() {
    no_leak("RingAlloc::try_with_capacity", || {
        let points = sweep(
            || RingAlloc::try_with_capacity(64 * 1024),
            |r, k, _| {
                assert!(
                    matches!(r, Err(ringmem::RingError::OutOfMemory { .. })),
                    "refusal {k}: {:?}",
                    r.map(|_| ())
                );
            },
        );
        assert_eq!(
            points, 3,
            "the block, the list of blocks and the handles' state"
        );
    });
}

#[test]
fn a_refused_block_leaves_a_growing_ring_as_it_was() {
    no_leak("WhenFull::Grow, new block", || {
        // A ring of four full blocks (the list of blocks has room for four), each
        // holding a buffer with known bytes.
        let setup = || {
            let ring = Ring::builder()
                .capacity(4096)
                .when_full(WhenFull::Grow)
                .build()
                .unwrap();
            let held: Vec<_> = (0..4u64)
                .map(|id| {
                    let mut b = ring.fixed(3000).unwrap();
                    let bytes: Vec<u8> = common::pattern(id, 3000).collect();
                    b.try_extend_from_slice(&bytes).unwrap();
                    b
                })
                .collect();
            assert_eq!(ring.stats().blocks, 4);
            (ring, held)
        };
        let (ring, held) = setup();
        let start = faulty::served();
        drop(ring.fixed(3000).expect("a second block"));
        // The list's growth and the block.
        let points = faulty::served() - start;
        assert_eq!(points, 2);
        drop((ring, held));
        for k in 1..=points {
            for and_after in [false, true] {
                let (ring, held) = setup();
                refuse_nth(k, and_after);
                let b = ring.fixed(3000);
                faulty::disarm_refusals();
                assert!(b.is_none(), "refusal {k}: no block, no buffer");
                assert_eq!(ring.stats().blocks, 4);
                for (id, b) in held.iter().enumerate() {
                    assert!(common::holds(id as u64, b), "buffer {id} kept its bytes");
                }
                assert!(ring.fixed(3000).is_some(), "the next request grows");
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// The allocator-api2 adapters under refusals: `RingAlloc`, `OneRingAlloc` and `&Ring`
// behind `Box` and `Vec`, and hashbrown's `HashMap`, through their fallible calls
// (`try_new_in`, `try_reserve`). Bookkeeping lives on the stack, so that only the
// adapters' own allocations are counted and refused.

use allocator_api2::alloc::Allocator;
use allocator_api2::vec::Vec as AVec;

/// The sizes the scenario reserves, in `u64`s: small (chunk) blocks, ring regions,
/// blocks that grow in place and by moving, and some past the heap threshold. An
/// eighth under Miri, with the threshold to match.
const SIZES: [usize; 12] = [1, 3, 30, 31, 200, 700, 40, 1500, 9, 600, 64, 2000];

/// The heap threshold of the collection scenarios, in bytes.
const THRESHOLD: usize = if cfg!(miri) { 512 } else { 4096 };

fn scaled_size(n: usize) -> usize {
    if cfg!(miri) {
        n / 8 + 1
    } else {
        n
    }
}

/// What the scenario leaves live: vectors with known contents, a box, a map.
type Kept<A> = (
    [Option<AVec<u64, A>>; SIZES.len()],
    Option<Box<[u64; 5], A>>,
    Option<hashbrown::HashMap<u64, u64, hashbrown::DefaultHashBuilder, A>>,
);

/// Reserves and fills vectors of every size (growing each in two steps), a box and a
/// map, stopping at the first refusal. Returns what was made and the first error.
fn collections<A: Allocator + Clone>(a: &A) -> (Kept<A>, Result<(), &'static str>) {
    let mut kept: Kept<A> = (Default::default(), None, None);
    let r = (|| {
        for (i, &n) in SIZES.iter().enumerate() {
            let n = scaled_size(n);
            let mut v = AVec::new_in(a.clone());
            v.try_reserve(n / 2 + 1).map_err(|_| "reserve")?;
            v.extend((0..n / 2 + 1).map(|x| x as u64 * 7 + i as u64));
            let v = kept.0[i].insert(v);
            v.try_reserve(n).map_err(|_| "grow")?;
            let len = v.len();
            v.extend((len..len + n).map(|x| x as u64 * 7 + i as u64));
        }
        kept.1 = Some(Box::try_new_in([9u64; 5], a.clone()).map_err(|_| "box")?);
        let mut m = hashbrown::HashMap::with_hasher_in(Default::default(), a.clone());
        m.try_reserve(50).map_err(|_| "map")?;
        m.extend((0..50u64).map(|k| (k, k * k)));
        kept.2 = Some(m);
        // Free every other vector and grow the rest again: reuse after frees.
        for (i, v) in kept.0.iter_mut().enumerate() {
            if i % 2 == 0 {
                *v = None;
            } else if let Some(v) = v {
                v.try_reserve(v.len() * 2).map_err(|_| "regrow")?;
                let len = v.len();
                v.extend((len..len * 2).map(|x| x as u64 * 7 + i as u64));
            }
        }
        Ok(())
    })();
    (kept, r)
}

/// Every vector, box and map made holds what was written.
fn check_kept<A: Allocator>(kept: &Kept<A>) {
    for (i, v) in kept.0.iter().enumerate() {
        if let Some(v) = v {
            assert!(
                v.iter()
                    .enumerate()
                    .all(|(x, &y)| y == x as u64 * 7 + i as u64),
                "vector {i} lost its contents"
            );
        }
    }
    if let Some(b) = &kept.1 {
        assert_eq!(**b, [9u64; 5]);
    }
    if let Some(m) = &kept.2 {
        assert!(m.iter().all(|(k, v)| *v == k * k) && m.len() == 50);
    }
}

/// Runs the collections scenario on allocators made by `make`, once to count its
/// allocations and then refusing each in turn; returns the number of injection points.
fn sweep_collections<A: Allocator + Clone>(what: &str, make: impl Fn() -> A) -> u64 {
    let run = |refusal: Option<(u64, bool)>| {
        let a = make();
        let start = faulty::served();
        if let Some((k, after)) = refusal {
            refuse_nth(k, after);
        }
        let (kept, r) = collections(&a);
        faulty::disarm_refusals();
        check_kept(&kept);
        if refusal.is_none() {
            assert_eq!(
                r,
                Ok(()),
                "{what}: the scenario succeeds when nothing is refused"
            );
        }
        drop(kept);
        faulty::served() - start
    };
    let points = run(None);
    for k in 1..=points {
        for after in [false, true] {
            run(Some((k, after)));
        }
    }
    points
}

#[test]
fn ring_alloc_collections_under_refusals() {
    let points = no_leak("RingAlloc collections", || {
        // Blocks added by Grow, regions past the threshold on the heap.
        let grow = sweep_collections("RingAlloc, Grow", || {
            let a = RingAlloc::try_with_capacity(32 * 1024).unwrap();
            a.set_heap_threshold(THRESHOLD);
            a
        });
        // Everything on the heap, small blocks in heap chunks.
        let heap = sweep_collections("RingAlloc, heap", || {
            let a = RingAlloc::try_with_capacity(32 * 1024).unwrap();
            a.set_heap_threshold(0);
            a
        });
        // A ring that falls back to the heap when full.
        let fallback = sweep_collections("RingAlloc, WhenFull::Heap", || {
            RingAlloc::from(
                Ring::builder()
                    .capacity(32 * 1024)
                    .when_full(WhenFull::Heap)
                    .build()
                    .unwrap(),
            )
        });
        assert!(grow > 0 && heap > 0 && fallback > 0);
        (grow, heap, fallback)
    });
    // Printed outside the check: the test harness keeps what a test prints.
    println!("RingAlloc injection points (Grow, heap, Heap policy): {points:?}");
}

#[test]
fn ring_ref_collections_under_refusals() {
    let points = no_leak("&Ring collections", || {
        let grow = Ring::builder()
            .capacity(16 * 1024)
            .when_full(WhenFull::Grow)
            .build()
            .unwrap();
        let fallback = Ring::builder()
            .capacity(16 * 1024)
            .when_full(WhenFull::Heap)
            .build()
            .unwrap();
        // The blocks Grow adds stay with the ring: count from a fresh ring each time.
        let g = sweep_collections("&Ring, Grow", || &grow);
        let h = sweep_collections("&Ring, Heap", || &fallback);
        assert!(h > 0);
        (g, h)
    });
    println!("&Ring injection points (Grow, Heap): {points:?}");
}

#[test]
fn one_ring_alloc_collections_under_refusals() {
    let points = no_leak("OneRingAlloc collections", || {
        // On a thread of its own: the thread's ring goes when it exits.
        faulty::spawn(|| {
            ringmem::OneRingAlloc.set_heap_threshold(THRESHOLD);
            sweep_collections("OneRingAlloc", || ringmem::OneRingAlloc)
        })
        .join()
        .unwrap()
    });
    assert!(points > 0);
    println!("OneRingAlloc injection points: {points}");
}

// ---------------------------------------------------------------------------------
// Shrinks need no memory (issue 47): `Vec::shrink_to_fit` ends the process when the
// allocator's `shrink` fails, so with the heap refusing everything a shrink must still
// succeed (a region that cannot move into a chunk keeps the block), while the fallible
// calls that need memory return `Err` and leave the old block as it was.

/// Takes the room a `WhenFull::Heap` ring has left, so that its next request falls
/// back to the heap.
fn fill_heap_ring(ring: &Ring) -> Vec<ringmem::FixedBufMut> {
    let mut held = Vec::new();
    for n in [8192, 1024, 128, 16, 1] {
        loop {
            let before = ring.stats().heap_fallbacks;
            let b = ring.fixed(n).expect("the heap is not refusing yet");
            if ring.stats().heap_fallbacks != before {
                break;
            }
            held.push(b);
        }
    }
    held
}

/// Vectors, a boxed slice and a map made while the heap serves, then truncated and
/// shrunk (and grown, fallibly) while it refuses every allocation.
fn shrinks_while_the_heap_refuses<A: Allocator + Clone>(what: &str, a: &A) {
    let mut bytes: AVec<u8, A> = AVec::with_capacity_in(900, a.clone());
    bytes.extend((0..900).map(|i| i as u8));
    let mut words: AVec<u64, A> = AVec::with_capacity_in(300, a.clone());
    words.extend(0..300u64);
    let mut boxed: AVec<u8, A> = AVec::with_capacity_in(900, a.clone());
    boxed.extend((0..600).map(|i| i as u8));
    let mut map: hashbrown::HashMap<u64, u64, hashbrown::DefaultHashBuilder, A> =
        hashbrown::HashMap::with_hasher_in(Default::default(), a.clone());
    map.extend((0..50u64).map(|k| (k, k * k)));

    refuse_nth(1, true);
    // The current chunk's room, if any: the next small block needs a chunk.
    let mut small = Vec::new();
    while let Ok(b) = Box::try_new_in([0x5Au8; 4], a.clone()) {
        small.push(b);
    }
    bytes.truncate(100);
    bytes.shrink_to_fit();
    assert!(
        bytes.iter().enumerate().all(|(i, &b)| b == i as u8),
        "{what}: bytes"
    );
    assert!(
        bytes.try_reserve(1000).is_err(),
        "{what}: grow out of a kept block"
    );
    bytes.truncate(20);
    bytes.shrink_to_fit();
    words.truncate(5);
    words.shrink_to_fit();
    assert_eq!(&words[..], &[0, 1, 2, 3, 4], "{what}: words");
    words.clear();
    words.shrink_to_fit();
    boxed.truncate(100);
    let boxed = boxed.into_boxed_slice();
    assert!(
        boxed.iter().enumerate().all(|(i, &b)| b == i as u8),
        "{what}: boxed"
    );
    assert!(map.try_reserve(1000).is_err(), "{what}: map reserve");
    map.clear();
    map.shrink_to(0);
    faulty::disarm_refusals();

    assert!(
        bytes.iter().enumerate().all(|(i, &b)| b == i as u8),
        "{what}: bytes"
    );
    assert!(
        small.iter().all(|b| **b == [0x5A; 4]),
        "{what}: small boxes"
    );
    drop((bytes, words, boxed, map, small));
}

#[test]
fn shrinks_succeed_while_the_heap_refuses() {
    no_leak("shrinks, RingAlloc on the heap", || {
        // Everything on the heap, small blocks in heap chunks.
        let a = RingAlloc::try_with_capacity(64 * 1024).unwrap();
        a.set_heap_threshold(0);
        shrinks_while_the_heap_refuses("RingAlloc, heap", &a);
        a.flush();
    });
    no_leak("shrinks, RingAlloc, WhenFull::Heap", || {
        // Ring regions on a full ring whose chunks would come from the heap.
        let ring = Ring::builder()
            .capacity(32 * 1024)
            .when_full(WhenFull::Heap)
            .build()
            .unwrap();
        let a = RingAlloc::from(ring);
        let fillers = fill_heap_ring(a.ring());
        shrinks_while_the_heap_refuses("RingAlloc, WhenFull::Heap", &a);
        drop(fillers);
        a.flush();
        assert_eq!(a.ring().stats().live_buffers, 0);
    });
    no_leak("shrinks, &Ring, WhenFull::Heap", || {
        // Heap regions (the ring is full): `realloc` refused.
        let ring = Ring::builder()
            .capacity(16 * 1024)
            .when_full(WhenFull::Heap)
            .build()
            .unwrap();
        let fillers = fill_heap_ring(&ring);
        shrinks_while_the_heap_refuses("&Ring, WhenFull::Heap", &&ring);
        drop(fillers);
        assert_eq!(ring.stats().live_buffers, 0);
    });
    no_leak("shrinks, OneRingAlloc on the heap", || {
        // On a thread of its own: the thread's ring goes when it exits.
        faulty::spawn(|| {
            ringmem::OneRingAlloc.set_heap_threshold(0);
            shrinks_while_the_heap_refuses("OneRingAlloc, heap", &ringmem::OneRingAlloc);
            ringmem::OneRingAlloc.flush();
        })
        .join()
        .unwrap();
    });
}
