//! `ringmem-bench`: ringmem against its peer crates, each scenario reproduced as
//! the peer publishes it, printed as a table in the peer's own format (time per
//! run and speed-up against `Vec`/`Box` on the system allocator).
//!
//! ```text
//! cargo run --release -p ringmem-bench                 # --quick: a few minutes, sizes scaled down
//! cargo run --release -p ringmem-bench -- --full       # the peers' published sizes
//! cargo run --release -p ringmem-bench -- --only ringal-fixed --reps 5
//! cargo run --release -p ringmem-bench -- --only framed   # issue 23: framed reading on TCP
//! cargo run --release -p ringmem-bench -- --only busy     # issue 45: beside a busy process per core
//! cargo run --release -p ringmem-bench -- --only conns    # issue 44: a server's memory per connection
//! cargo run --release -p ringmem-bench -- --only server   # issue 56: a Redis-protocol server, redis-benchmark
//! ```
//!
//! The terminal gets each table as aligned plain text within 100 columns, a sentence
//! per timed table saying who was fastest, and on stderr a progress bar with the time
//! left (hidden when stderr is not a terminal). A section during which other processes
//! took more than a quarter of the CPU time says so in its titles and verdicts, and
//! the run's last lines name it (see `load.rs`). The Markdown report, with the
//! min–max in small print and SVG charts beside it, goes to
//! `target/ringmem-report/report.md`.

mod buffer_sv2;
mod buffers;
mod busy;
mod busy_scenario;
mod charts;
mod conns_scenario;
mod ext_check;
mod framed_scenario;
mod grow_spike;
mod harness;
mod load;
mod many_threads;
mod nofile;
mod plain;
mod progress;
mod ratio;
mod resp_client;
mod resp_servers;
mod ring_alloc;
mod ring_sizes;
mod ringal_ext;
mod ringal_fixed;
mod server_memory;
mod server_scenario;
mod shared_arena;
mod verdict;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use harness::{Config, Table};

/// A scenario's entry point: its tables.
type Scenario = fn(&Config) -> Vec<Table>;

/// How many cases (rows, each run for every competitor) a scenario will run.
type Cases = fn(&Config) -> usize;

/// The scenarios in run order: id (for `--only`), entry point and case count. Frames
/// off a socket and a server's memory per connection come first, before the allocator
/// tables: they are what a server's author runs this for.
const SCENARIOS: [(&str, Scenario, Cases); 11] = [
    ("framed", framed_scenario::run, framed_scenario::case_count),
    ("conns", conns_scenario::run, conns_scenario::case_count),
    ("server", server_scenario::run, server_scenario::case_count),
    ("ringal-fixed", ringal_fixed::run, |c| {
        ringal_fixed::case_count(c, false)
    }),
    ("ringal-ext", ringal_ext::run, ringal_ext::case_count),
    ("shared-arena", shared_arena::run, shared_arena::case_count),
    ("buffer-sv2", buffer_sv2::run, buffer_sv2::case_count),
    ("ring-alloc", ring_alloc::run, ring_alloc::case_count),
    (
        "many-threads",
        |c| vec![many_threads::run(c)],
        many_threads::case_count,
    ),
    ("busy", busy_scenario::run, busy_scenario::case_count),
    ("grow-spike", grow_spike::run, grow_spike::case_count),
];

/// Turns of [`load::round_trip`] before and after each of the pipelines' sections.
const ROUND_TRIP_TURNS: u64 = 20_000;

/// The scenarios with a `Vec (mimalloc global)` column (a `ringmem-bench-mimalloc` child).
const MIMALLOC_CHILD_SCENARIOS: [&str; 4] = ["ringal-fixed", "ringal-ext", "many-threads", "busy"];

/// A scenario's child entry point for the peak-RSS tables: run row, column once.
type Child = fn(&Config, usize, usize) -> Option<harness::Sample>;

/// The scenarios that have peak-RSS tables.
const CHILDREN: [(&str, Child); 6] = [
    ("ringal-fixed", ringal_fixed::child_fixed),
    ("ringal-ext", ringal_fixed::child_ext),
    ("buffer-sv2", buffer_sv2::child),
    ("ring-alloc", ring_alloc::child),
    ("shared-arena", shared_arena::child),
    ("grow-spike", grow_spike::child),
];

/// `--rss-child SCENARIO ROW COL MODE [--warm]`: runs one case once (twice with `--warm`,
/// the first run untimed) and prints `rss <VmHWM MiB>` and `time <seconds>`.
fn rss_child(mut args: impl Iterator<Item = String>) -> ! {
    let scenario = args.next().unwrap_or_else(|| usage());
    let row: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| usage());
    let col: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| usage());
    let full = args.next().is_some_and(|m| m == "--full");
    // `--warm`: run the case once untimed first (a fresh process's first run pays for
    // its heap's first touch of the memory, which a long-running program does not).
    let warm = args.next().is_some_and(|m| m == "--warm");
    let cfg = Config {
        scale: if full { 1.0 } else { QUICK_SCALE },
        reps: 1,
        mode: if full { "--full" } else { "--quick" },
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        rss: false,
        procs: 0,
    };
    let Some(&(_, child)) = CHILDREN.iter().find(|c| c.0 == scenario) else {
        usage()
    };
    let sample = if col == usize::MAX {
        None
    } else if warm {
        child(&cfg, row, col).and_then(|_| child(&cfg, row, col))
    } else {
        child(&cfg, row, col)
    };
    let ran = col == usize::MAX || sample.is_some();
    if ran {
        println!("rss {:.2}", harness::peak_rss_mib().unwrap_or(0.0));
    }
    if let Some(s) = sample {
        // The run's time, for comparing competitors across processes (each process
        // lays out its stack and heap anew, which moves the small rows by up to 20 %).
        println!("time {:.9}", s.time.as_secs_f64());
    }
    std::process::exit(if ran { 0 } else { 1 })
}

fn usage() -> ! {
    eprintln!(
        "usage: ringmem-bench [--quick | --full] [--reps N] [--procs N] [--only SCENARIO[,SCENARIO]] [--out DIR] [--no-rss] [--no-charts]\n\
         scenarios: {}",
        SCENARIOS.map(|s| s.0).join(", ")
    );
    std::process::exit(2)
}

fn main() {
    let mut full = false;
    let mut reps = None;
    let mut only: Vec<String> = Vec::new();
    let mut out = None;
    let mut rss = true;
    let mut charts = true;
    let mut procs = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rss-child" => rss_child(args),
            busy::CHILD_FLAG => busy::child(),
            resp_client::IDLE_FLAG => resp_client::idle_child(args),
            "--no-rss" => rss = false,
            "--no-charts" => charts = false,
            "--quick" => full = false,
            "--full" => full = true,
            "--reps" => reps = args.next().and_then(|s| s.parse().ok()).or_else(|| usage()),
            "--procs" => {
                procs = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--only" => only.extend(
                args.next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(String::from),
            ),
            "--out" => out = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            "--bench" => {} // passed by `cargo bench`-style runners; ignored
            _ => usage(),
        }
    }
    for o in &only {
        if !SCENARIOS.iter().any(|s| s.0 == o) {
            usage();
        }
    }
    // The `Vec (mimalloc global)` columns run a binary of their own, which `cargo run`
    // does not build; say in the report why they are empty if it cannot be had.
    let selected = |id: &str| only.is_empty() || only.iter().any(|o| o == id);
    let child_missing = if MIMALLOC_CHILD_SCENARIOS.iter().any(|id| selected(id)) {
        buffers::prepare_mimalloc_child().err()
    } else {
        None
    };
    // The framed tables are measured by a child of their own, likewise.
    let framed_missing = if selected("framed") {
        framed_scenario::prepare().err()
    } else {
        None
    };
    // And the conns tables (the same feature, a binary of its own).
    let conns_missing = if selected("conns") {
        conns_scenario::prepare().err()
    } else {
        None
    };
    // The server scenario's servers, likewise (and redis-benchmark, without which it
    // is skipped).
    let server_missing = if selected("server") {
        server_scenario::prepare().err()
    } else {
        None
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = Config {
        scale: if full { 1.0 } else { QUICK_SCALE },
        reps: reps.unwrap_or(if full { 5 } else { 3 }).max(1),
        mode: if full { "--full" } else { "--quick" },
        cores,
        rss,
        procs,
    };
    let started = Instant::now();
    let mut header = format!(
        "# ringmem-bench {}\n\nmode `{}`: iteration counts × {}, repetitions per timing: {} (median, min–max), \
         repetitions interleaved across competitors; {} CPUs, load average at start {}; ringmem rows: {}.\n",
        env!("CARGO_PKG_VERSION"),
        cfg.mode,
        cfg.factor(),
        if procs > 0 {
            format!(
                "{} (ring-alloc, and shared-arena's allocate + drop and churn: {procs} child processes per cell instead)",
                cfg.reps
            )
        } else {
            cfg.reps.to_string()
        },
        cfg.cores,
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".into()),
        if cfg!(feature = "ringmem-rows") { "on" } else { "off (feature `ringmem-rows`)" },
    );
    if let Some(why) = child_missing {
        header.push_str(&format!(
            "\nThe `Vec (mimalloc global)` columns are empty (–): {why}.\n"
        ));
    }
    if let Some(why) = framed_missing {
        header.push_str(&format!("\nThe framed tables are empty: {why}.\n"));
    }
    if let Some(why) = conns_missing {
        header.push_str(&format!("\nThe conns tables are empty: {why}.\n"));
    }
    if let Some(why) = server_missing {
        header.push_str(&format!("\nNo server tables: {why}.\n"));
    }
    println!("{}", plain::paragraph(&header));
    let mut report = header;
    let dir = out.unwrap_or_else(|| target_dir().join("ringmem-report"));
    let mut svgs = 0;
    // Each timed table's verdict, repeated together at the end.
    let mut verdicts: Vec<String> = Vec::new();
    // Each section's load, said again at the end.
    let mut loads: Vec<(&str, load::Load)> = Vec::new();
    let total: usize = SCENARIOS
        .iter()
        .filter(|s| selected(s.0))
        .map(|s| (s.2)(&cfg))
        .sum();
    progress::start(total as u64);
    for (id, run, cases) in SCENARIOS {
        if !selected(id) {
            continue;
        }
        progress::scenario(id, cases(&cfg) as u64);
        let t = Instant::now();
        // The pipelines' rows move with the machine's cross-core latency: said beside them.
        let pipes = MIMALLOC_CHILD_SCENARIOS.contains(&id);
        let trip = || pipes.then(|| load::round_trip(ROUND_TRIP_TURNS)).flatten();
        let trip_before = trip();
        let before = load::read();
        let tables = run(&cfg);
        let under = load::under_load(before, load::read());
        let trip_note = match (trip_before, trip()) {
            (Some(a), Some(b)) => Some(format!(
                "A cache line's round trip between two threads of this process: {a:.0} ns before this \
                 section, {b:.0} ns after (the median of batches over {ROUND_TRIP_TURNS} turns). Rows whose buffers carry \
                 a word their consumer writes back (a ring's header) slow down as it grows."
            )),
            _ => None,
        };
        let mark = under.note();
        // A section that made no table (skipped) has no load to report.
        if !tables.is_empty() {
            loads.push((id, under));
        }
        let timed = tables.iter().filter(|t| !t.unit.is_figure()).count();
        let mut k = 0;
        for mut table in tables {
            // A section measured under load says so in each table's title and verdict;
            // the tables of figures, whose verdicts are notes, in a last note too.
            if let (Some(n), false) = (&trip_note, table.unit.is_figure()) {
                table.notes.push(n.clone());
            }
            if let Some(m) = &mark {
                table.title.push_str(&format!(" ({m})"));
                if table.unit.is_figure() {
                    table.notes.push(format!("This section was {m}."));
                }
            }
            let mut s = table.render();
            let mut text = table.render_plain();
            let which = verdict::subject(id, &table, timed > 1);
            let which = match &mark {
                Some(m) => format!("{which} ({m})"),
                None => which,
            };
            if let Some(v) = verdict::verdict(&which, &table) {
                let (who, what) = v.split_once(": ").unwrap_or(("", &v));
                s.push_str(&format!("\n**{who}:** {}\n", what.replace("\n  ", " ")));
                text.push_str(&format!("\n{v}\n"));
                verdicts.push(v);
            }
            progress::suspend(|| println!("{text}"));
            report.push_str(&s);
            if charts && !table.unit.is_figure() {
                k += 1;
                let name = if timed > 1 {
                    format!("{id}-{k}.svg")
                } else {
                    format!("{id}.svg")
                };
                let path = dir.join(&name);
                let written = std::fs::create_dir_all(&dir)
                    .map_err(|e| e.to_string())
                    .and_then(|_| charts::write_speedups(&table, &path));
                match written {
                    Ok(true) => {
                        svgs += 1;
                        report.push_str(&format!("\n![{}]({name})\n", table.title));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        progress::suspend(|| eprintln!("could not write {}: {e}", path.display()))
                    }
                }
            }
            report.push('\n');
        }
        progress::scenario_done(t.elapsed());
    }
    progress::finish();
    // The flags that shape the numbers, as given (not `--out`, which only moves them).
    let mut flags = vec![cfg.mode.to_string()];
    if let Some(r) = reps {
        flags.push(format!("--reps {r}"));
    }
    if !only.is_empty() {
        flags.push(format!("--only {}", only.join(",")));
    }
    if procs > 0 {
        flags.push(format!("--procs {procs}"));
    }
    if !rss {
        flags.push("--no-rss".into());
    }
    if !charts {
        flags.push("--no-charts".into());
    }
    let footer = format!(
        "\nTotal {:.0} s; peak RSS {:.0} MiB. Reproduce: `cargo run --release -p ringmem-bench -- {}`.\n",
        started.elapsed().as_secs_f64(),
        harness::peak_rss_mib().unwrap_or(0.0),
        flags.join(" ")
    );
    if verdicts.len() > 1 {
        println!("Who was fastest\n===============");
        for v in &verdicts {
            println!("{v}");
        }
    }
    let loaded = format!("\n{}\n", load::summary(&loads));
    print!("{}", plain::paragraph(&loaded));
    report.push_str(&loaded);
    println!("{}", plain::paragraph(&footer));
    report.push_str(&footer);
    if let Err(e) = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::File::create(dir.join("report.md")))
        .and_then(|mut f| f.write_all(report.as_bytes()))
    {
        eprintln!("could not write the report in {}: {e}", dir.display());
    } else {
        eprintln!(
            "report: {} ({svgs} SVG charts beside it)",
            dir.join("report.md").display()
        );
    }
}

/// Iteration scale of `--quick`: the whole run takes a few minutes on 2 cores.
const QUICK_SCALE: f64 = 1.0 / 20.0;

/// The workspace's target directory (`CARGO_TARGET_DIR`, else next to the workspace root).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    bench.parent().unwrap_or(&bench).join("target")
}
