//! The child process behind the `Vec (mimalloc global)` columns: the same
//! producer/consumer loop as `ringmem-bench`, with mimalloc as the process-wide
//! `#[global_allocator]` (so the channel, the threads and every `Vec` use it).
//! `ringmem-bench` runs it once per repetition:
//!
//! ```text
//! ringmem-bench-mimalloc THREADS ITERATIONS SIZE MAX_BUFFERS fixed|ext
//! ```
//!
//! It prints `seconds waits peak_rss_mib` on one line.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(dead_code)] // shared with the main binary, which uses more of it
#[path = "../buffers.rs"]
mod buffers;
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> usize {
        args.get(i)
            .and_then(|s| s.parse().ok())
            .expect("usage: THREADS ITERATIONS SIZE MAX_BUFFERS fixed|ext")
    };
    let threads = num(0);
    let shape = buffers::Shape {
        iterations: num(1),
        size: num(2),
        max_buffers: num(3),
        extendable: args.get(4).is_some_and(|s| s == "ext"),
    };
    let data = harness::random_bytes(shape.size);
    let s = if threads == 0 {
        buffers::pipeline::<buffers::SysVec>(shape, &data)
    } else {
        buffers::pipelines::<buffers::SysVec>(threads, shape, &data)
    };
    println!(
        "{} {} {:.1}",
        s.time.as_secs_f64(),
        s.waits,
        harness::peak_rss_mib().unwrap_or(0.0)
    );
}
