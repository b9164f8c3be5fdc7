//! The process's first `SharedArena`, built while the heap refuses everything.
//!
//! A binary of its own with one test, so that no other test has built a `SharedArena`
//! (and so had the process's parallelism looked up) before this one runs.

mod common;

use common::faulty::{self, no_leak, refuse_nth};
use ringmem::slab::SharedArena;

#[global_allocator]
static ALLOC: faulty::Faulty = faulty::Faulty;

#[test]
fn first_shared_arena_fails_with_an_error_when_the_heap_refuses() {
    no_leak("first SharedArena, every allocation refused", || {
        for cap in [0, 1, 200] {
            refuse_nth(1, true);
            let refused_before = faulty::refused();
            let arena = SharedArena::<u64>::try_with_capacity(cap);
            faulty::disarm_refusals();
            assert!(
                arena.is_err(),
                "cap {cap}: built although the heap refused everything"
            );
            assert!(faulty::refused() > refused_before, "cap {cap}: never asked");
        }
        // The heap serves again: so does the arena, and the infallible constructor.
        let arena = SharedArena::try_with_capacity(100).expect("the heap serves again");
        let values: Vec<_> = (0..100u64).map(|i| arena.try_alloc(i).unwrap()).collect();
        assert!(values.iter().enumerate().all(|(i, v)| **v == i as u64));
        assert_eq!(arena.len(), 100);
        let other = SharedArena::new();
        assert_eq!(*other.alloc(7u8), 7);
    });
}
