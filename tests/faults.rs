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
            while let Some(f) = a.ring().fixed(1000) {
                if a.ring().stats().blocks > 1 {
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
