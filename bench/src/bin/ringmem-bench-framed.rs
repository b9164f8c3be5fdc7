//! The child process behind `ringmem-bench`'s `framed` scenario (issue 23): tokio_util's
//! `FramedRead<_, LengthDelimitedCodec>` over `BytesMut` against ringmem's
//! `AsyncFramedReader` on loopback TCP, same sender, same receiver loop (see
//! `../framed.rs`). It has a counting global allocator of its own, which the main job
//! must not have. `ringmem-bench` builds it (feature `framed`) and runs it; by hand:
//!
//! ```text
//! cargo run --release -p ringmem-bench -- --only framed          # the tables and charts
//! cargo build --release -p ringmem-bench --features framed --bin ringmem-bench-framed
//! target/release/ringmem-bench-framed --mib 16 --reps 3          # one record per run
//! target/release/ringmem-bench-framed --rcvbuf 262144            # fixed SO_RCVBUF
//! target/release/ringmem-bench-framed --row "1 KiB" --conns 4 --reader io_uring  # one cell
//! target/release/ringmem-bench-framed --saturated                # no paced runs
//! target/release/ringmem-bench-framed --spike-readers            # the spike's receivers
//! target/release/ringmem-bench-framed --spike 1 --big 8 --small 32768
//! ```
//!
//! Runs: each cell `--reps` times with the sender at full speed, then `--reps` times
//! paced at a quarter of the slower reader's median rate, the two readers interleaved;
//! one tab-separated record per run: `cell` (or `paced`), frame sizes, connections,
//! reader, frames, seconds, heap allocations, latency p50, p99 and p99.9 in nanoseconds. Spike: `name`, `before`, `peak`, `after`
//! (MiB of resident set) and, for a ring, `ring_start` and `ring_end` (its capacity
//! at the start and at the end, MiB).

// The dependency is renamed (see Cargo.toml); the code says `tokio`.
extern crate tokio_rt as tokio;

#[path = "../counting.rs"]
mod counting;
#[path = "../framed.rs"]
mod framed;

use framed::Reader;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    if args.iter().any(|a| a == "--spike-readers") {
        for name in framed::SPIKE_READERS {
            println!("{name}");
        }
        return;
    }
    if args.iter().any(|a| a == "--spike") {
        let which = arg(&args, "--spike", 0);
        let big = arg(&args, "--big", 8);
        let small = arg(&args, "--small", 32 << 10);
        let Some(out) = framed::spike(&rt, which, big, small) else {
            eprintln!("no spike receiver {which}");
            std::process::exit(2);
        };
        println!("name {}", framed::SPIKE_READERS[which]);
        println!("before {:.2}", out.before);
        println!("peak {:.2}", out.peak);
        println!("after {:.2}", out.after);
        if let Some((start, end)) = out.ring {
            println!("ring_start {start:.2}");
            println!("ring_end {end:.2}");
        }
        return;
    }
    let reps = arg(&args, "--reps", 3).max(1);
    // One cell alone (to profile it): `--row "1 KiB"`, `--conns 4`, `--reader io_uring`
    // (a part of the reader's name).
    let text = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        Some(args.get(at + 1).expect("a value after the flag").clone())
    };
    let (row, only_conns, only_reader) =
        (text("--row"), arg(&args, "--conns", 0), text("--reader"));
    let readers: Vec<Reader> = (Reader::ALL.into_iter())
        .filter(|r| {
            only_reader
                .as_ref()
                .is_none_or(|o| r.name().contains(o.as_str()))
        })
        .filter(|&r| r != Reader::Uring || Reader::uring_works(&rt))
        .collect();
    // Wire bytes per connection and run.
    let mib = arg(&args, "--mib", 16);
    // The receiving sockets' `SO_RCVBUF` (0: the kernel's autotuning).
    let rcvbuf = Some(arg(&args, "--rcvbuf", 0) as u32).filter(|&b| b > 0);
    println!("# cell\tframes\tconns\treader\tframes received\tseconds\theap allocations\tp50 ns\tp99 ns\tp99.9 ns");
    for sizes in framed::ROWS {
        if row.as_ref().is_some_and(|r| *r != sizes.label()) {
            continue;
        }
        let frames = ((mib << 20) / sizes.average_wire()) as u64;
        let wire = sizes.wire(frames);
        for conns in framed::CONNS {
            if only_conns != 0 && conns != only_conns {
                continue;
            }
            // Saturated (`cell`), then paced (`paced`) at a quarter of the slower reader's
            // median rate of the saturated runs.
            let mut rates: [Vec<f64>; 3] = Default::default();
            let paced = !args.iter().any(|a| a == "--saturated");
            for pace in [None, Some(())].into_iter().take(1 + usize::from(paced)) {
                let pace = pace.map(|()| {
                    let median = |v: &mut Vec<f64>| {
                        v.sort_by(f64::total_cmp);
                        v[v.len() / 2]
                    };
                    // Only the readers that ran (the io_uring one may not have).
                    let ran = rates.iter_mut().filter(|v| !v.is_empty());
                    0.25 * ran.map(median).fold(f64::INFINITY, f64::min)
                });
                for rep in 0..reps {
                    // Interleaved, each repetition starting from the other reader.
                    for k in 0..readers.len() {
                        let i = (rep + k) % readers.len();
                        let reader = readers[i];
                        let load = framed::Load { pace, rcvbuf };
                        let mut r = framed::run(&rt, reader, conns, &wire, frames, load);
                        if pace.is_none() {
                            rates[i].push(r.frames as f64 / r.secs);
                        }
                        let mut q = |q| framed::quantile(&mut r.latencies, q);
                        let (p50, p99, p999) = (q(0.5), q(0.99), q(0.999));
                        println!(
                            "{}\t{}\t{conns}\t{}\t{}\t{:.9}\t{}\t{p50}\t{p99}\t{p999}",
                            if pace.is_some() { "paced" } else { "cell" },
                            sizes.label(),
                            reader.name(),
                            r.frames,
                            r.secs,
                            r.allocations,
                        );
                    }
                }
            }
        }
    }
}
