//! The framed-reader comparison on loopback TCP (issue 23): tokio_util's
//! `FramedRead<_, LengthDelimitedCodec>` over `BytesMut` against ringmem's
//! `AsyncFramedReader`, same sender, same receiver loop (see `../framed.rs`).
//!
//! ```text
//! cargo run --release -p ringmem-bench --features framed --bin ringmem-bench-framed
//! cargo run --release -p ringmem-bench --features framed --bin ringmem-bench-framed -- --reps 5 --mib 64
//! ```
//!
//! Each cell runs `--reps` times (3), the two readers interleaved; frames per second is
//! the median, the gaps are pooled over the runs, allocations per frame the median.

// The dependency is renamed (see Cargo.toml); the code says `tokio`.
extern crate tokio_rt as tokio;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::Ordering;

#[path = "../framed.rs"]
mod framed;

use framed::{Reader, Sizes, ALLOCATIONS};

/// The system allocator, counting allocations (not frees) process-wide.
struct Counting;

// SAFETY: every call is forwarded unchanged to `System`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps = arg(&args, "--reps", 3).max(1);
    // Wire bytes per connection and run.
    let mib = arg(&args, "--mib", 16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .unwrap();
    println!("| frames | conns | reader | frames/s | gap p50 | gap p99 | gap p99.9 | allocations/frame |");
    println!("|---|---|---|---|---|---|---|---|");
    for sizes in [
        Sizes::Fixed(64),
        Sizes::Fixed(1024),
        Sizes::Fixed(16 << 10),
        Sizes::Mixed,
    ] {
        // Average wire bytes per frame, header included.
        let avg = match sizes {
            Sizes::Fixed(n) => n + 4,
            Sizes::Mixed => (70 * 68 + 25 * 1028 + 5 * ((16 << 10) + 4)) / 100,
        };
        let frames = ((mib << 20) / avg) as u64;
        let wire = sizes.wire(frames);
        for conns in [1, 4] {
            let mut runs: Vec<(Reader, Vec<framed::Run>)> = vec![
                (Reader::TokioUtil, Vec::new()),
                (Reader::Ringmem, Vec::new()),
            ];
            for _ in 0..reps {
                for (reader, out) in &mut runs {
                    out.push(framed::run(&rt, *reader, conns, &wire, frames));
                }
            }
            for (reader, out) in &mut runs {
                let mut rates: Vec<f64> = out.iter().map(|r| r.frames as f64 / r.secs).collect();
                rates.sort_by(f64::total_cmp);
                let mut allocs: Vec<f64> = out
                    .iter()
                    .map(|r| r.allocations as f64 / r.frames as f64)
                    .collect();
                allocs.sort_by(f64::total_cmp);
                let mut gaps: Vec<u32> = out.iter_mut().flat_map(|r| r.gaps.drain(..)).collect();
                let q = |g: &mut Vec<u32>, q| framed::time(framed::quantile(g, q));
                println!(
                    "| {} | {conns} | {} | {:.0} | {} | {} | {} | {:.3} |",
                    sizes.label(),
                    match reader {
                        Reader::TokioUtil => "tokio_util FramedRead (BytesMut)",
                        Reader::Ringmem => "ringmem AsyncFramedReader",
                    },
                    rates[rates.len() / 2],
                    q(&mut gaps, 0.5),
                    q(&mut gaps, 0.99),
                    q(&mut gaps, 0.999),
                    allocs[allocs.len() / 2],
                );
            }
        }
    }
}
