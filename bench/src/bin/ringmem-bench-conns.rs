//! The child process behind `ringmem-bench`'s `conns` scenario (issue 44, "a server's
//! memory"): many loopback connections read by tokio_util's `FramedRead`, by ringmem's
//! `AsyncFramedReader::new` (the process's pool, `ReadPool::global()`) or by
//! `AsyncFramedReader::with_ring` (a 1 MiB ring per connection; see `../conns.rs`).
//! It has a counting global allocator of its own, which the main job must not have.
//! `ringmem-bench` builds it (feature `framed`) and runs one server per row and reader;
//! the server starts its clients as a second process of this binary. By hand:
//!
//! ```text
//! cargo run --release -p ringmem-bench -- --only conns        # the tables
//! cargo build --release -p ringmem-bench --features framed --bin ringmem-bench-conns
//! target/release/ringmem-bench-conns --server 'ringmem (new)' --row idle --conns 1000
//! target/release/ringmem-bench-conns --server FramedRead --row active --conns 1000 --active 100
//! target/release/ringmem-bench-conns --server 'ringmem (ring each)' --row keep --conns 4 --max-frames 200000
//! target/release/ringmem-bench-conns --server 'ringmem (new)' --row queue --size 4096 --keep-every 10
//! ```
//!
//! Flags: `--secs S` (streaming time, default 2; in the `queue` row the seconds measured
//! after the warm-up, default 3), `--budget-mib M` (the budget of the process's pool,
//! which `ringmem (new)` reads into and `ringmem (io_uring)` copies into; default 64),
//! `--group-mib M` (the io_uring group's bytes; default 8). `--reader` is another name for
//! `--server`. The `queue` row's own (see `../conns_queue.rs`): `--size B` (payload
//! bytes, default 4096), `--pipeline N` (frames in flight per connection, default 4),
//! `--keep-every N` (one frame in N kept, default 10; 0 keeps none), `--hold S` (seconds
//! a kept frame is held, default 2); its `--conns` defaults to 100. It says its own and
//! its clients' process ids on stderr, for a profiler. The server prints one record,
//! `row`, reader, then tab-separated `key=value` fields.

// The dependency is renamed (see Cargo.toml); the code says `tokio`.
extern crate tokio_rt as tokio;

#[path = "../conns.rs"]
mod conns;
#[path = "../conns_queue.rs"]
mod conns_queue;
#[path = "../counting.rs"]
mod counting;
#[path = "../nofile.rs"]
mod nofile;

use conns::{Reader, Row, Server};
use conns_queue::Params;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// The value after flag `name`, if given.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The number after flag `name`, or `default`.
fn num<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    flag(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| fail(&format!("{name} wants a number, not {v}")))
    })
}

fn fail(why: &str) -> ! {
    eprintln!("ringmem-bench-conns: {why}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    if args.iter().any(|a| a == "--clients") {
        let addr = flag(&args, "--addr")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| fail("--clients wants --addr IP:PORT"));
        let burst = num(&args, "--burst", 1u8) != 0;
        conns::clients(&rt, addr, num(&args, "--conns", 1), burst);
        return;
    }
    let reader = flag(&args, "--server")
        .or_else(|| flag(&args, "--reader"))
        .map(|r| Reader::by_name(r).unwrap_or_else(|| fail(&format!("no reader {r}"))))
        .unwrap_or_else(|| fail("usage: --server READER --row idle|active|keep|queue [...]"));
    let row = flag(&args, "--row")
        .and_then(Row::by_name)
        .unwrap_or_else(|| fail("--row wants idle, active, keep or queue"));
    let queue = row == Row::Queue;
    let conns = num(&args, "--conns", if queue { 100usize } else { 1000 }).max(1);
    let s = Server {
        reader,
        row,
        conns,
        active: num(&args, "--active", (conns / 10).max(1)),
        secs: num(&args, "--secs", if queue { 3.0 } else { 2.0 }),
        max_frames: num(&args, "--max-frames", 0),
        budget: num(&args, "--budget-mib", 64usize) << 20,
        group: num(&args, "--group-mib", 8usize) << 20,
        queue: Params {
            size: num(&args, "--size", 4096usize).max(8),
            pipeline: num(&args, "--pipeline", 4usize).max(1),
            keep_every: num(&args, "--keep-every", 10),
            hold: num(&args, "--hold", 2.0),
        },
    };
    if let Err(e) = conns::server(&rt, s) {
        fail(&e);
    }
    // The connections' tasks never end by themselves: no runtime shutdown to wait for.
    std::process::exit(0);
}
