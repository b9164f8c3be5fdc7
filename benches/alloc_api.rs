//! ring-alloc's allocator benchmarks (its `benches/bench.rs`), run against ringmem's
//! allocators and `Global`:
//!
//! - `warm-up/<A>/alloc 4 bytes x 65535`: 65,535 `allocate(Layout::new::<u32>())`, all
//!   live at once (timed); then freed (not timed, as in `bench/`);
//! - `allocation/<A>/alloc`: one `allocate` + `deallocate` of a `u32`;
//! - `vec/<A>/push x n`: an allocator-api2 `Vec` built by pushing `n` `usize`s, dropped;
//! - `vec/<A>/reserve_exact(1) x n`: `reserve_exact(i)` for `i in 0..n` on an empty
//!   `Vec<u32>` (ring-alloc's loop: the capacity grows by one element per call),
//!   dropped; for `n` in 10, 146, 2,134, 17,453;
//!
//! and cases of ringmem's own:
//!
//! - `bytes/<A>/...`: a 1 KiB message written into a fresh `Vec<u8, A>`, dropped: by
//!   allocator-api2's `io::Write` (a push a byte on stable Rust), by
//!   `ExtendBytes::extend_bytes` and through `ExtendBytes::byte_writer` (one copy);
//!
//! and a queue drained in order, as a pipeline does:
//!
//! - `free in order/<A>/...`: 65,535 `u32`s allocated (not timed), then freed in the
//!   order they were made (timed), on the same thread or, for the allocators whose
//!   blocks may cross threads, on a worker thread that receives the pointers;
//! - `kept lookup/OneRingAlloc/...`: the same queue freed on a worker thread while 0, 1
//!   or 64 *kept blocks* exist (regions that a shrink to a small size left in place on
//!   a full ring): every such free of a block that is not its chunk's latest asks
//!   whether the block is a kept one. In order, and across chunks (each free in
//!   another 4 KiB chunk than the one before: sorted by the offset in the chunk).
//!
//! ```text
//! cargo bench -p ringmem-micro --bench alloc_api                   # everything
//! cargo bench -p ringmem-micro --bench alloc_api -- 'vec/.*17453'  # a filter
//! ```
//!
//! The peers themselves (ring-alloc, bumpalo, blink-alloc) run in `bench/`; compare
//! ratios against `Global` across the two.

use std::hint::black_box;
use std::io::Write;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use allocator_api2::alloc::{Allocator, Global, Layout};
use allocator_api2::vec::Vec;
use criterion::{criterion_group, criterion_main, Criterion};
use ringmem::{ExtendBytes, FixedBufMut, OneRingAlloc, Ring, RingAlloc, WhenFull};

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

/// The pointers of [`WARM_UP`] `u32`s freshly allocated by `a`.
fn queue<A: Allocator>(a: &A) -> std::vec::Vec<NonNull<u8>> {
    let l = Layout::new::<u32>();
    (0..WARM_UP)
        .map(|_| a.allocate(l).unwrap().cast::<u8>())
        .collect()
}

/// Frees `ptrs` in order with `a`; the time it took.
///
/// # Safety
/// Every pointer came from `a` (or an allocator whose blocks `a` frees) for a `u32`
/// and is freed only here.
unsafe fn drain<A: Allocator>(a: &A, ptrs: std::vec::Vec<NonNull<u8>>) -> Duration {
    let l = Layout::new::<u32>();
    let start = Instant::now();
    for p in ptrs {
        // SAFETY: the caller's contract.
        unsafe { a.deallocate(black_box(p), l) };
    }
    start.elapsed()
}

/// `free in order/<A>/same thread`.
fn free_in_order<A: Allocator>(c: &mut Criterion, name: &str, a: &A) {
    let mut g = c.benchmark_group(format!("free in order/{name}"));
    g.bench_function(format!("free 4 bytes x {WARM_UP}, same thread"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                // SAFETY: fresh `u32` blocks of `a`, freed once.
                .map(|_| unsafe { drain(a, queue(a)) })
                .sum()
        })
    });
    g.finish();
}

/// `free in order/<A>/other thread`: a worker frees each batch and sends back the time.
fn free_in_order_elsewhere<A: Allocator + Copy + Send + 'static>(
    c: &mut Criterion,
    name: &str,
    a: A,
) {
    free_elsewhere(
        c,
        &format!("free in order/{name}"),
        &format!("free 4 bytes x {WARM_UP}, other thread"),
        a,
        |_| {},
    );
}

/// A worker thread frees batches of `a`'s blocks, in the order of [`queue`] after
/// `order`, and sends back the time each took (criterion's `group`/`function`).
fn free_elsewhere<A: Allocator + Copy + Send + 'static>(
    c: &mut Criterion,
    group: &str,
    function: &str,
    a: A,
    order: fn(&mut [NonNull<u8>]),
) {
    /// The pointers of one batch, sent to the worker.
    struct Batch(std::vec::Vec<NonNull<u8>>);
    // SAFETY: the blocks are `A`'s, which may be freed on any thread (`A: Send`, and
    // the allocators given here say so); the worker is their only user.
    unsafe impl Send for Batch {}
    let (to_worker, batches) = std::sync::mpsc::channel::<Batch>();
    let (to_bench, times) = std::sync::mpsc::channel::<Duration>();
    let worker = std::thread::spawn(move || {
        for batch in batches {
            // SAFETY: fresh `u32` blocks of `a`, freed once, here.
            to_bench.send(unsafe { drain(&a, batch.0) }).unwrap();
        }
    });
    let mut g = c.benchmark_group(group);
    g.bench_function(function, |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let mut batch = queue(&a);
                    order(&mut batch);
                    to_worker.send(Batch(batch)).unwrap();
                    times.recv().unwrap()
                })
                .sum()
        })
    });
    g.finish();
    drop(to_worker);
    worker.join().unwrap();
}

/// `n` blocks of `OneRingAlloc` kept in their regions: each a 900-byte vector shrunk
/// to 100 bytes on a thread whose full ring (of `Fail` policy) has no chunk to give
/// (as `tests/alloc_full.rs` makes them). They stay kept until dropped, on any thread.
fn kept_blocks(n: usize) -> std::vec::Vec<Vec<u8, OneRingAlloc>> {
    std::thread::spawn(move || {
        let ring = Ring::builder()
            .capacity(n * 1024 + 32 * 1024)
            .when_full(WhenFull::Fail);
        ringmem::tls::configure(ring).unwrap();
        let mut kept: std::vec::Vec<_> = (0..n)
            .map(|_| {
                let mut v = Vec::with_capacity_in(900, OneRingAlloc);
                v.resize(900, 7u8);
                v
            })
            .collect();
        // The ring full, then the current chunk: a shrink finds no chunk to move to.
        let mut fill: std::vec::Vec<FixedBufMut> = std::vec::Vec::new();
        ringmem::tls::with_ring(|ring| {
            for size in [8192, 1024, 128, 16, 1] {
                while let Some(b) = ring.fixed(size) {
                    fill.push(b);
                }
            }
        });
        let mut small = std::vec::Vec::new();
        while let Ok(b) = allocator_api2::boxed::Box::try_new_in(0u32, OneRingAlloc) {
            small.push(b);
        }
        for v in &mut kept {
            let at = v.as_ptr();
            v.truncate(100);
            v.shrink_to_fit();
            assert_eq!(v.as_ptr(), at, "a shrink on a full ring keeps the block");
        }
        kept
    })
    .join()
    .unwrap()
}

/// `kept lookup/OneRingAlloc/...`: frees on another thread with `n` blocks kept.
fn kept_lookup(c: &mut Criterion) {
    /// Each block in another chunk than the one before (chunks are 4 KiB-aligned).
    fn across_chunks(ptrs: &mut [NonNull<u8>]) {
        ptrs.sort_unstable_by_key(|p| (p.as_ptr() as usize % 4096, p.as_ptr() as usize));
    }
    for n in [0, 1, 64] {
        let kept = kept_blocks(n);
        free_elsewhere(
            c,
            "kept lookup/ringmem::OneRingAlloc",
            &format!("free 4 bytes x {WARM_UP} in order, other thread, {n} kept"),
            OneRingAlloc,
            |_| {},
        );
        free_elsewhere(
            c,
            "kept lookup/ringmem::OneRingAlloc",
            &format!("free 4 bytes x {WARM_UP} across chunks, other thread, {n} kept"),
            OneRingAlloc,
            across_chunks,
        );
        drop(kept);
    }
}

/// A message of [`MESSAGE`] bytes written into a fresh `Vec<u8, A>` and dropped, by
/// allocator-api2's own `io::Write` and by `ExtendBytes`.
fn bytes<A: Allocator>(c: &mut Criterion, name: &str, a: &A) {
    let data = [7u8; MESSAGE];
    let mut g = c.benchmark_group(format!("bytes/{name}"));
    g.bench_function(format!("write_all {MESSAGE} (allocator-api2)"), |b| {
        b.iter(|| {
            let mut v = Vec::with_capacity_in(MESSAGE, a);
            v.write_all(black_box(&data)).unwrap();
            black_box(v);
        })
    });
    g.bench_function(format!("extend_bytes {MESSAGE}"), |b| {
        b.iter(|| {
            let mut v = Vec::with_capacity_in(MESSAGE, a);
            v.extend_bytes(black_box(&data));
            black_box(v);
        })
    });
    g.bench_function(format!("byte_writer write_all {MESSAGE}"), |b| {
        b.iter(|| {
            let mut v = Vec::with_capacity_in(MESSAGE, a);
            v.byte_writer().write_all(black_box(&data)).unwrap();
            black_box(v);
        })
    });
    g.finish();
}

/// Bytes of the `bytes` group's messages.
const MESSAGE: usize = 1024;

fn benches(c: &mut Criterion) {
    bytes(c, "Global", &Global);
    bytes(c, "ringmem::Ring (&Ring)", &Ring::new(1 << 20));

    cases(c, "Global", &Global);
    cases(c, "ringmem::RingAlloc", &RingAlloc::new());
    cases(c, "ringmem::OneRingAlloc", &OneRingAlloc);
    let ring = Ring::builder()
        .capacity(RingAlloc::DEFAULT_CAPACITY)
        .when_full(WhenFull::Grow);
    cases(c, "ringmem::Ring (&Ring)", &ring.build().unwrap());

    free_in_order(c, "Global", &Global);
    free_in_order(c, "ringmem::RingAlloc", &RingAlloc::new());
    free_in_order(c, "ringmem::OneRingAlloc", &OneRingAlloc);
    free_in_order(c, "ringmem::Ring (&Ring)", &ring.build().unwrap());
    free_in_order_elsewhere(c, "Global", Global);
    free_in_order_elsewhere(c, "ringmem::OneRingAlloc", OneRingAlloc);
    kept_lookup(c);
}

criterion_group! {
    name = alloc_api;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(alloc_api);
