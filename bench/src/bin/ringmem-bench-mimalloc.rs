//! The child process behind the `Vec (mimalloc global)` columns: the same
//! producer/consumer loop as `ringmem-bench`, with mimalloc as the process-wide
//! `#[global_allocator]` (so the channel, the threads and every `Vec` use it).
//! `ringmem-bench` runs it once per repetition:
//!
//! ```text
//! ringmem-bench-mimalloc THREADS ITERATIONS SIZE MAX_BUFFERS fixed|ext [published|full|restart [RING_FACTOR]]
//! ```
//!
//! It prints `seconds waits restarts peak_rss_mib producer_cpu consumer_cpu` on one
//! line, the CPU times in seconds per message.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(dead_code)] // shared with the main binary, which uses more of it
#[path = "../buffers.rs"]
mod buffers;
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;
#[allow(dead_code)] // `harness` reports to it; this child never shows a bar
#[path = "../progress.rs"]
mod progress;
#[allow(dead_code)] // `harness` prints its ratios with it; this child prints none
#[path = "../ratio.rs"]
mod ratio;

const USAGE: &str =
    "usage: THREADS ITERATIONS SIZE MAX_BUFFERS fixed|ext [published|full|restart [RING_FACTOR]]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> usize { args.get(i).and_then(|s| s.parse().ok()).expect(USAGE) };
    let threads = num(0);
    let mut shape = buffers::Shape::published(
        num(1),
        num(2),
        num(3),
        args.get(4).is_some_and(|s| s == "ext"),
    );
    if let Some(v) = args.get(5) {
        shape.variant = buffers::Variant::from_arg(v).expect(USAGE);
    }
    if args.len() > 6 {
        shape.ring_factor = num(6);
    }
    let data = harness::random_bytes(shape.size);
    let s = if threads == 0 {
        buffers::pipeline::<buffers::SysVec>(shape, &data)
    } else {
        buffers::pipelines::<buffers::SysVec>(threads, shape, &data)
    };
    let cpu = s.cpu.unwrap_or_default();
    println!(
        "{} {} {} {:.1} {:e} {:e}",
        s.time.as_secs_f64(),
        s.waits,
        s.restarts,
        harness::peak_rss_mib().unwrap_or(0.0),
        cpu.producer,
        cpu.consumer
    );
}
