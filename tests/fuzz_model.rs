//! The fuzz target's differential driver (`fuzz/driver.rs`, included here by `#[path]`
//! so it is written once) run by proptest in the normal `cargo test`: random operation
//! sequences on rings of every `WhenFull` policy and a sweep of capacities, against a
//! plain model. See the driver for what is checked.

#[path = "../fuzz/driver.rs"]
mod driver;

mod common;

/// The driver's allocator, so that programs can make the heap refuse.
#[global_allocator]
static ALLOC: driver::Refusing = driver::Refusing;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::scaled(512) as u32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    #[cfg_attr(miri, ignore = "proptest's case generation is too slow under Miri; `fixed_programs` runs the driver there")]
    fn random_programs_agree_with_the_model(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        driver::run(&data);
    }
}

/// A few fixed programs (every policy, every operation), also under Miri.
#[test]
fn fixed_programs() {
    let mut programs: Vec<Vec<u8>> = Vec::new();
    for policy in 0..3u8 {
        // Under Miri the empty ring and one that holds a few buffers: the two others
        // took Miri half of this test's minute.
        let caps: &[u8] = if cfg!(miri) { &[0, 40] } else { &[0, 2, 9, 40] };
        for &cap in caps {
            let mut p = vec![policy, cap];
            for op in 0..20u8 {
                // Each operation with a spread of argument bytes; a ring drop midway.
                p.extend_from_slice(&[op, 37u8.wrapping_mul(op), 200, 3, 17, op ^ 0x5a, 1]);
                if op == 10 {
                    p.extend_from_slice(&[17, (policy + 1) % 3, cap / 2]);
                }
            }
            p.extend_from_slice(&[16, 0, 0]);
            programs.push(p);
        }
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..common::scaled(400) {
        let len = (x % 300) as usize;
        programs.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect(),
        );
    }
    for p in &programs {
        driver::run(p);
    }
}
