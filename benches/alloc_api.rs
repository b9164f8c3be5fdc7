//! ring-alloc's allocator benchmarks (its `benches/bench.rs`), run against ringmem's
//! allocators and `Global`:
//!
//! - `warm-up/<A>/alloc 4 bytes x 65535`: 65,535 `allocate(Layout::new::<u32>())`, all
//!   live at once (timed); then freed (not timed, as in `bench/`);
//! - `allocation/<A>/alloc`: one `allocate` + `deallocate` of a `u32`;
//! - `vec/<A>/push x n`: an allocator-api2 `Vec` built by pushing `n` `usize`s, dropped;
//! - `vec/<A>/reserve_exact(1) x n`: `reserve_exact(i)` for `i in 0..n` on an empty
//!   `Vec<u32>` (ring-alloc's loop: the capacity grows by one element per call),
//!   dropped; for `n` in 10, 146, 2,134, 17,453.
//!
//! ```text
//! cargo bench --bench alloc_api                      # everything
//! cargo bench --bench alloc_api -- 'vec/.*17453'     # a filter
//! ```
//!
//! The peers themselves (ring-alloc, bumpalo, blink-alloc) run in `bench/`; compare
//! ratios against `Global` across the two.

use std::hint::black_box;
use std::time::{Duration, Instant};

use allocator_api2::alloc::{Allocator, Global, Layout};
use allocator_api2::vec::Vec;
use criterion::{criterion_group, criterion_main, Criterion};
use ringmem::{OneRingAlloc, Ring, RingAlloc, WhenFull};

/// ring-alloc's vector sizes.
const VEC_SIZES: [usize; 4] = [10, 146, 2134, 17_453];
/// ring-alloc's warm-up count.
const WARM_UP: usize = 65_535;

/// One allocator under test, with the name criterion shows. Every case runs the same
/// code through `&A`, as ring-alloc's bench does.
fn cases<A: Allocator>(c: &mut Criterion, name: &str, a: &A) {
    let l = Layout::new::<u32>();

    let mut g = c.benchmark_group(format!("warm-up/{name}"));
    let mut ptrs = std::vec::Vec::with_capacity(WARM_UP);
    g.bench_function(format!("alloc 4 bytes x {WARM_UP}"), |b| {
        b.iter_custom(|iters| {
            let mut time = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for _ in 0..WARM_UP {
                    ptrs.push(black_box(a.allocate(l).unwrap()).cast::<u8>());
                }
                time += start.elapsed();
                for p in ptrs.drain(..) {
                    // SAFETY: allocated just above with `l`, freed once.
                    unsafe { a.deallocate(p, l) };
                }
            }
            time
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("allocation/{name}"));
    g.bench_function("alloc", |b| {
        b.iter(|| {
            let p = black_box(a.allocate(l).unwrap());
            // SAFETY: allocated just above with `l`.
            unsafe { a.deallocate(p.cast(), l) };
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("vec/{name}"));
    for n in VEC_SIZES {
        g.bench_function(format!("push x {n}"), |b| {
            b.iter(|| {
                let mut v = Vec::new_in(a);
                for i in 0..n {
                    v.push(i);
                }
                black_box(&v);
            })
        });
        g.bench_function(format!("reserve_exact(1) x {n}"), |b| {
            b.iter(|| {
                let mut v = Vec::<u32, _>::new_in(a);
                for i in 0..n {
                    v.reserve_exact(i);
                }
                black_box(&v);
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    cases(c, "Global", &Global);
    cases(c, "ringmem::RingAlloc", &RingAlloc::new());
    cases(c, "ringmem::OneRingAlloc", &OneRingAlloc);
    let ring = Ring::builder()
        .capacity(RingAlloc::DEFAULT_CAPACITY)
        .when_full(WhenFull::Grow);
    cases(c, "ringmem::Ring (&Ring)", &ring.build().unwrap());
}

criterion_group! {
    name = alloc_api;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(alloc_api);
