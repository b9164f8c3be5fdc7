//! The `server` scenario (issue 56): a Redis-protocol server on ringmem driven by a
//! client nobody here wrote. Three servers side by side, alternated: `ringmem-resp
//! --memory ringmem` (requests read by ringmem's `AsyncFramedReader` on the process's
//! pool), `ringmem-resp --memory framed` (the same server on tokio_util's `FramedRead`
//! over `BytesMut`) and the system's `redis-server`, the reference. `redis-benchmark`
//! drives them (rates, latency percentiles, resident memory); idle clients held by a
//! child process, a store of a million keys loaded by a pipelined client of this
//! bench's own and a burst of large values deleted again measure their memory. A fourth
//! server, `ringmem-resp --memory uring` (requests received by io_uring, issue 58),
//! joins the rate and idle rows; its table sets it beside the epoll reader's column.
//!
//! `RINGMEM_RESP_BIN=PATH` measures that `ringmem-resp` instead of building the
//! workspace's; `RINGMEM_RESP_BIN=redis-server` has redis-server stand in for both
//! ringmem-resp columns (the tables say so), to try the scenario without the server.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::harness::{mib_stats, spread, Config, Row, Stats, Table, Unit};
use crate::load;
use crate::ratio::{fmt_ratio, ratio};
use crate::resp_servers::{self, Bench, Launch, Server};
use crate::server_memory;

/// The server of each role: the first [`COMPARED`] are the shared tables' columns;
/// io_uring's has a table of its own.
pub const ROLES: [&str; 4] = [
    "ringmem",
    "FramedRead",
    "redis-server",
    "ringmem (io_uring)",
];
pub const RINGMEM: usize = 0;
pub const FRAMED: usize = 1;
pub const REDIS: usize = 2;
pub const URING: usize = 3;
/// The roles of the shared tables, and of the store and burst rows.
pub const COMPARED: usize = 3;

/// The ratio columns after the servers'.
const RATIOS: [&str; 2] = ["ringmem / FramedRead", "ringmem / redis-server"];

/// The environment variable naming the `ringmem-resp` to measure (see the module docs).
const RESP_BIN_ENV: &str = "RINGMEM_RESP_BIN";

/// redis-benchmark's tests, clients, pipeline depths and value sizes of the rows.
const TESTS: &str = "set,get,incr,lpush,lpop,mset";
const TEST_NAMES: [&str; 6] = ["SET", "GET", "INCR", "LPUSH", "LPOP", "MSET"];
pub const CLIENTS: usize = 50;
const PIPELINES: [usize; 2] = [1, 16];
const SIZES: [usize; 3] = [3, 1024, 65536];

/// The bars of issue 56 for the rate rows: ringmem's requests/s over FramedRead's, and
/// over redis-server's at `-P 16`.
const RATE_BAR: f64 = 1.0;
pub const REDIS_BAR: f64 = 0.8;

/// A test whose fastest server's run is shorter than this many seconds is not judged
/// against the bars: INCR at `-P 16` took 3 ms in the 64 KiB row, where every server's
/// rate read 1,067k or 1,600k requests/s (3,200 requests in 3 or 2 ms).
const SHORTEST_RUN: f64 = 0.05;

/// A redis-benchmark run that has not ended after this long is killed.
pub const BENCH_TIMEOUT: Duration = Duration::from_secs(120);

/// The workspace's `ringmem-resp`, built by [`prepare`]: `Err` says why it is not there.
static RESP_BUILT: OnceLock<Result<(), String>> = OnceLock::new();

/// Builds `ringmem-resp` if `cargo run` did not (unless [`RESP_BIN_ENV`] names
/// another); `Err` when redis-benchmark is missing: the scenario is skipped.
pub fn prepare() -> Result<(), String> {
    if let Some(why) = resp_servers::redis_benchmark_missing() {
        return Err(format!("{why}: the server scenario is skipped"));
    }
    if std::env::var_os(RESP_BIN_ENV).is_none() {
        let built = crate::buffers::prepare_bin(
            "ringmem-resp",
            "ringmem-resp",
            &[],
            "the server tables' ringmem columns",
        );
        let _ = RESP_BUILT.set(built);
    }
    Ok(())
}

/// The repetitions of a rate row in `cfg`.
fn reps(cfg: &Config) -> usize {
    cfg.reps
}

/// redis-benchmark's `-n` for a rate row: with `--quick` each of its six tests takes a
/// tenth of a second or so on two cores at redis-server's pace, most of them past
/// [`SHORTEST_RUN`] (MSET of 64 KiB values, 640 KiB a request, over a second; INCR
/// at `-P 16 -d 65536` a few milliseconds, not judged), and at `-P 16` the requests
/// are at least twice the 800 in flight; `--full` runs two to three times as many.
fn requests(cfg: &Config, pipeline: usize, size: usize) -> usize {
    let quick = match (pipeline, size) {
        (1, s) if s <= 1024 => 10_000,
        (1, _) => 3_000,
        (_, 3) => 160_000,
        (_, s) if s <= 1024 => 48_000,
        _ => 1_600,
    };
    match (cfg.scale >= 1.0, size) {
        (false, _) => quick,
        // MSET of 64 KiB values alone takes seconds a run.
        (true, s) if s > 1024 => quick * 2,
        (true, _) => quick * 3,
    }
}

/// The cases [`run`] runs: a server per role and repetition of each rate row, and a
/// server per role of each idle row, the store and the burst.
pub fn case_count(cfg: &Config) -> usize {
    ROLES.len() * (PIPELINES.len() * SIZES.len() * reps(cfg) + server_memory::IDLE_CLIENTS.len())
        + COMPARED * 2
}

/// How each role's server is started, or why it cannot be, and what the tables say
/// about them.
pub struct Lineup {
    pub launches: [Result<Launch, String>; 4],
    /// Notes for every table: stand-ins, a binary named by hand.
    pub notes: Vec<String>,
    /// A suffix for every title (stand-ins).
    pub title: String,
}

impl Lineup {
    fn new() -> Lineup {
        let redis = match resp_servers::redis_server_missing() {
            None => Ok(Launch::Redis),
            Some(why) => Err(why),
        };
        let mut notes = Vec::new();
        let mut title = String::new();
        let exe: Result<PathBuf, String> = match std::env::var_os(RESP_BIN_ENV) {
            Some(v) if v == "redis-server" => {
                notes.push(format!(
                    "STAND-INS: redis-server runs in the ringmem and FramedRead columns too \
                     ({RESP_BIN_ENV}=redis-server): these figures try the harness, they say \
                     nothing of ringmem."
                ));
                title.push_str(" — redis-server standing in for ringmem-resp");
                return Lineup {
                    launches: [redis.clone(), redis.clone(), redis.clone(), redis],
                    notes,
                    title,
                };
            }
            Some(v) => {
                let p = PathBuf::from(v);
                notes.push(format!("ringmem-resp: `{}` ({RESP_BIN_ENV}).", p.display()));
                Ok(p)
            }
            None => match RESP_BUILT.get() {
                Some(Err(why)) => Err(why.clone()),
                _ => crate::buffers::child_exe("ringmem-resp")
                    .map_err(|e| format!("cannot locate ringmem-resp: {e}")),
            },
        };
        let resp = |memory| exe.clone().map(|exe| Launch::Resp { exe, memory });
        Lineup {
            launches: [resp("ringmem"), resp("framed"), redis, resp("uring")],
            notes,
            title,
        }
    }

    /// The server of `role` started, or why it is not.
    pub fn start(&self, role: usize) -> Result<Server, String> {
        Server::start(self.launches[role].as_ref().map_err(Clone::clone)?)
    }
}

/// The order of the first `n` roles in repetition `rep`: rotated by one each time.
pub fn order(rep: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (rep + k) % n)
}

/// Runs of each role's server (in [`ROLES`] order), each a figure or why it has none;
/// none for a role the rows do not run.
pub type Runs<T> = [Vec<Result<T, String>>; 4];

/// The cells of each role (in [`ROLES`] order).
pub type Cells = [Option<Stats>; 4];

/// `a`'s median over `b`'s, where both were measured.
fn over(a: Option<Stats>, b: Option<Stats>) -> Option<Stats> {
    ratio(a?.median, b?.median).map(mib_stats)
}

/// A figures row: the three compared servers' cells, then ringmem's median over
/// FramedRead's and over redis-server's.
pub fn row(params: Vec<String>, cells: Cells) -> Row {
    let mut all = cells[..COMPARED].to_vec();
    all.extend([
        over(cells[RINGMEM], cells[FRAMED]),
        over(cells[RINGMEM], cells[REDIS]),
    ]);
    Row { params, cells: all }
}

/// A row of counts (keys, clients), in which ringmem's ratios would say nothing.
pub fn counts(params: Vec<String>, cells: Cells) -> Row {
    let mut all = cells[..COMPARED].to_vec();
    all.extend([None, None]);
    Row { params, cells: all }
}

/// A figures table with the compared servers' columns and ringmem's ratios after them.
pub fn figures_table(title: String, params: &[&str]) -> Table {
    let columns: Vec<String> = ROLES[..COMPARED]
        .iter()
        .chain(&RATIOS)
        .map(|c| c.to_string())
        .collect();
    let mut t = Table::new(title, params, &columns, Unit::Figure);
    t.ratio_columns = (COMPARED..columns.len()).collect();
    t
}

/// Notes saying why a compared role has no figures (each reason once).
pub fn failures<T>(runs: &Runs<T>) -> Vec<String> {
    role_failures(runs, 0..COMPARED)
}

/// Notes saying why one of `roles` has no figures (each reason once).
fn role_failures<T>(runs: &Runs<T>, roles: std::ops::Range<usize>) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    for (k, runs) in runs.iter().enumerate().filter(|(k, _)| roles.contains(k)) {
        for e in runs.iter().filter_map(|r| r.as_ref().err()) {
            let n = format!("{}: not measured: {e}.", ROLES[k]);
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }
    notes
}

/// A bar that asks for at least a figure (`at least as fast`): `met` when every row is
/// at or past it by the median, `tied` when some are short of it only within their
/// runs' spread ([`judge`]'s `tied`), `NOT met` when one is short beyond it; then what
/// it rests on.
fn at_least(met: Option<bool>, tied: bool, what: &str, detail: &str) -> String {
    match met {
        Some(true) if tied => format!("{what}: tied, not met (a tie within the spread: {detail})"),
        _ => bar(met, what, detail),
    }
}

/// A bar's verdict: `met` or `NOT met`, then what it rests on.
pub fn bar(met: Option<bool>, what: &str, detail: &str) -> String {
    match met {
        Some(true) => format!("{what}: met ({detail})"),
        Some(false) => format!("{what}: NOT met ({detail})"),
        None => format!("{what}: not judged ({detail})"),
    }
}

// ------------------------------------------------------------------------------------
// The rate rows.

/// One redis-benchmark run against one server.
#[derive(Debug)]
struct RateRun {
    lines: Vec<resp_servers::BenchLine>,
    rss: Option<f64>,
    hwm: Option<f64>,
    /// The server's CPU time over the run, per request, microseconds.
    cpu_us: Option<f64>,
}

/// The runs of one rate row: per role, per repetition.
type RateRuns = Runs<RateRun>;

fn rate_run(lineup: &Lineup, role: usize, bench: &Bench) -> Result<RateRun, String> {
    let server = lineup.start(role)?;
    let cpu_before = server.cpu_secs();
    let lines = bench
        .run(server.port, BENCH_TIMEOUT)
        .map_err(|e| match server.last_line() {
            Some(l) => format!("{e} (the server's last line: {l})"),
            None => e,
        })?;
    let requests = (bench.requests * lines.len()) as f64;
    let cpu_us = server
        .cpu_secs()
        .zip(cpu_before)
        .map(|(after, before)| (after - before) / requests * 1e6);
    Ok(RateRun {
        lines,
        rss: server.rss_mib(),
        hwm: server.hwm_mib(),
        cpu_us,
    })
}

/// The runs of the row `-P pipeline -d size`, the roles alternated.
fn rate_runs(cfg: &Config, lineup: &Lineup, pipeline: usize, size: usize) -> RateRuns {
    let bench = Bench {
        tests: TESTS,
        clients: CLIENTS,
        requests: requests(cfg, pipeline, size),
        pipeline,
        size,
    };
    let mut runs: RateRuns = Default::default();
    // A server that hung a run (redis-benchmark killed) is not run again in this row:
    // each further run would wait as long.
    let mut hung: [Option<String>; 4] = Default::default();
    for rep in 0..reps(cfg) {
        for role in order(rep, ROLES.len()) {
            crate::progress::case(&format!(
                "server: -P {pipeline} -d {size}, {}, run {} of {}",
                ROLES[role],
                rep + 1,
                reps(cfg)
            ));
            let run = match &hung[role] {
                Some(e) => Err(e.clone()),
                None => rate_run(lineup, role, &bench),
            };
            if let Err(e) = &run {
                if e.contains("did not end within") {
                    hung[role] = Some(e.clone());
                }
            }
            runs[role].push(run);
        }
    }
    runs
}

/// `f` of every run of each role that has it, as median and spread.
pub fn cells<T>(runs: &Runs<T>, f: impl Fn(&T) -> Option<f64>) -> Cells {
    std::array::from_fn(|k| {
        let xs: Vec<f64> = runs[k].iter().filter_map(|r| f(r.as_ref().ok()?)).collect();
        spread(&xs)
    })
}

/// `f` of test `test` of a run.
fn test_figure(
    test: &str,
    f: impl Fn(&resp_servers::BenchLine) -> Option<f64>,
) -> impl Fn(&RateRun) -> Option<f64> {
    let test = test.to_string();
    move |r: &RateRun| f(r.lines.iter().find(|l| l.test == test)?)
}

/// `3 B`, `1 KiB`, `64 KiB`.
pub fn size_label(size: usize) -> String {
    if size >= 1024 && size % 1024 == 0 {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// How ringmem's cells compare with `other`'s in `rows` (label, ringmem, other), where
/// higher is better when `higher`: `(met, detail, tied)`; met when none is worse beyond
/// the spread (their min–max ranges apart) by more than `bar` allows, tied when some
/// are worse by the median only.
fn judge(rows: &[(String, Stats, Stats)], higher: bool, bar: f64) -> (Option<bool>, String, bool) {
    if rows.is_empty() {
        return (None, "no row has both figures".into(), false);
    }
    let (mut better, mut within, mut worse) = (0, Vec::new(), Vec::new());
    for (label, us, them) in rows {
        let x = ratio(us.median, them.median);
        let (lo, hi) = if higher {
            (us.max < them.min * bar, us.median >= them.median * bar)
        } else {
            (us.min > them.max * bar, us.median <= them.median * bar)
        };
        if lo {
            worse.push(format!("{label} {}", fmt_ratio(x)));
        } else if hi {
            better += 1;
        } else {
            within.push(format!("{label} {}", fmt_ratio(x)));
        }
    }
    let n = rows.len();
    let mut detail = format!("{better} of {n} rows at or past it by the median");
    if !within.is_empty() {
        detail.push_str(&format!(
            ", {} short of it by the median but within the spread of the runs: {}",
            within.len(),
            within.join(", ")
        ));
    }
    if !worse.is_empty() {
        detail.push_str(&format!(
            ", {} short of it beyond the spread: {}",
            worse.len(),
            worse.join(", ")
        ));
    }
    (Some(worse.is_empty()), detail, !within.is_empty())
}

/// The fastest server's median run of a test of the row `-P pipeline -d size`,
/// seconds (infinite where no server has a figure); a run shorter than
/// [`SHORTEST_RUN`] is not judged.
fn fastest_run(cfg: &Config, pipeline: usize, size: usize, rps_k: &Cells) -> f64 {
    let fastest = (rps_k.iter().flatten().map(|s| s.median)).fold(0.0, f64::max);
    requests(cfg, pipeline, size) as f64 / (fastest * 1e3)
}

/// The failures of the rows of each size, each said once: with the sizes it struck
/// (`-d 3, 1024: ...`), or with none if it struck every size.
fn size_failures(rows: &[(usize, RateRuns)]) -> Vec<String> {
    let mut seen: Vec<(String, Vec<usize>)> = Vec::new();
    for (size, runs) in rows {
        for n in failures(runs) {
            match seen.iter_mut().find(|s| s.0 == n) {
                Some(s) => s.1.push(*size),
                None => seen.push((n, vec![*size])),
            }
        }
    }
    seen.into_iter()
        .map(|(n, sizes)| {
            if sizes.len() == rows.len() {
                n
            } else {
                let d: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
                format!("-d {}: {n}", d.join(", "))
            }
        })
        .collect()
}

/// The two tables of a pipeline depth: rates and memory, latencies.
fn rate_tables(
    pipeline: usize,
    rows: &[(usize, RateRuns)],
    cfg: &Config,
    lineup: &Lineup,
) -> [Table; 2] {
    let mut rates = figures_table(
        format!(
            "server: redis-benchmark -P {pipeline}, {CLIENTS} clients{}",
            lineup.title
        ),
        &["-d", "figure"],
    );
    let mut lat_columns: Vec<String> = ["p50", "p99"]
        .iter()
        .flat_map(|p| {
            ROLES[..COMPARED]
                .iter()
                .map(move |r| format!("{r} {p} (ms)"))
        })
        .collect();
    lat_columns.push(format!("p99 {}", RATIOS[0]));
    let mut lat = Table::new(
        format!(
            "server: redis-benchmark -P {pipeline}, {CLIENTS} clients, latency{}",
            lineup.title
        ),
        &["-d", "test"],
        &lat_columns,
        Unit::Figure,
    );
    lat.ratio_columns = vec![lat_columns.len() - 1];
    let (mut vs_framed, mut vs_redis, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    let mut too_short = Vec::new();
    for (size, runs) in rows {
        let d = size_label(*size);
        for test in TEST_NAMES {
            let c = cells(runs, test_figure(test, |l| Some(l.rps / 1e3)));
            let label = format!("{test} {d}");
            let secs = fastest_run(cfg, pipeline, *size, &c);
            let judged = secs >= SHORTEST_RUN;
            if !judged {
                too_short.push(format!("{label} ({:.0} ms)", secs * 1e3));
            } else if let (Some(a), Some(b), Some(r)) = (c[RINGMEM], c[FRAMED], c[REDIS]) {
                vs_framed.push((label.clone(), a, b));
                vs_redis.push((label.clone(), a, r));
            } else if let (Some(a), Some(b)) = (c[RINGMEM], c[FRAMED]) {
                vs_framed.push((label.clone(), a, b));
            }
            rates
                .rows
                .push(row(vec![d.clone(), format!("{test} (k req/s)")], c));
            let p50 = cells(runs, test_figure(test, |l| l.p50_ms));
            let p99 = cells(runs, test_figure(test, |l| l.p99_ms));
            if let (Some(a), Some(b), true) = (p99[RINGMEM], p99[FRAMED], judged) {
                p99s.push((label, a, b));
            }
            let p99_over = p99[RINGMEM]
                .zip(p99[FRAMED])
                .and_then(|(a, b)| ratio(a.median, b.median))
                .map(mib_stats);
            lat.rows.push(Row {
                params: vec![d.clone(), test.into()],
                cells: p50[..COMPARED]
                    .iter()
                    .chain(&p99[..COMPARED])
                    .copied()
                    .chain([p99_over])
                    .collect(),
            });
        }
        rates.rows.push(row(
            vec![d.clone(), "server CPU (µs/req)".into()],
            cells(runs, |r| r.cpu_us),
        ));
        rates.rows.push(row(
            vec![d.clone(), "RSS after the run (MiB)".into()],
            cells(runs, |r| r.rss),
        ));
        rates.rows.push(row(
            vec![d, "peak RSS (MiB)".into()],
            cells(runs, |r| r.hwm),
        ));
    }
    let runs_of = |size: usize| format!("{} ({})", requests(cfg, pipeline, size), size_label(size));
    let how = format!(
        "`redis-benchmark -h 127.0.0.1 -p PORT -t {TESTS} -c {CLIENTS} -P {pipeline} -d SIZE \
         -n N --csv`, N by size: {}. A fresh server per run; {} runs per server, the servers \
         alternated (each repetition starts from the next one); a cell is the median of its \
         runs. Servers: ringmem = `ringmem-resp --port 0 --memory ringmem`, FramedRead = \
         `ringmem-resp --port 0 --memory framed`, redis-server = `redis-server --port P --save \
         '' --appendonly no` (its own allocator, jemalloc in Debian's build). RSS: `VmRSS` of \
         the server's `/proc/PID/status` once redis-benchmark has ended; peak: `VmHWM`. \
         Server CPU: the time its threads ran during the run (`se.sum_exec_runtime` of \
         `/proc/PID/task/*/sched`) over the requests of the six tests: a figure the \
         machine's other load moves less than the rates, lower is better.",
        rows.iter()
            .map(|(s, _)| runs_of(*s))
            .collect::<Vec<_>>()
            .join(", "),
        reps(cfg),
    );
    rates.notes.push(how);
    rates.notes.extend(lineup.notes.iter().cloned());
    lat.notes.push(
        "p50 and p99 of each test from redis-benchmark's CSV (`p50_latency_ms`, \
         `p99_latency_ms`), medians of the runs of the rate table above."
            .into(),
    );
    lat.notes.extend(lineup.notes.iter().cloned());
    for n in size_failures(rows) {
        rates.notes.push(n.clone());
        lat.notes.push(n);
    }
    if !too_short.is_empty() {
        let short = format!(
            "Not judged against the bars: a run of the test shorter than {} ms, which \
             redis-benchmark's millisecond clock and the clients' start decide: {}.",
            SHORTEST_RUN * 1e3,
            too_short.join(", ")
        );
        rates.notes.push(short.clone());
        lat.notes.push(short);
    }
    let (met, detail, tied) = judge(&vs_framed, true, RATE_BAR);
    let mut bars = vec![at_least(
        met,
        tied,
        "ringmem at least as fast as FramedRead in requests/s in every row",
        &detail,
    )];
    if pipeline > 1 {
        let (met, detail, tied) = judge(&vs_redis, true, REDIS_BAR);
        bars.push(at_least(
            met,
            tied,
            &format!("ringmem at least {REDIS_BAR}× redis-server's requests/s in every row"),
            &detail,
        ));
    }
    rates
        .notes
        .push(format!("**Bars (issue 56):** {}.", bars.join("; ")));
    // No worse beyond the spread: a tie meets it.
    let (met, detail, _) = judge(&p99s, false, 1.0);
    lat.notes.push(format!(
        "**Bar (issue 56):** {}.",
        bar(
            met,
            "ringmem's p99 no worse than FramedRead's beyond the spread",
            &detail
        )
    ));
    [rates, lat]
}

// ------------------------------------------------------------------------------------
// The io_uring table (issue 58): the same server, requests received by io_uring.

/// The io_uring table's columns: its server, the epoll reader's, their ratio.
const URING_COLUMNS: [&str; 3] = ["ringmem (io_uring)", "ringmem (epoll)", "io_uring / epoll"];

/// A row of the io_uring table.
fn uring_row(params: Vec<String>, c: Cells) -> Row {
    let cells = vec![c[URING], c[RINGMEM], over(c[URING], c[RINGMEM])];
    Row { params, cells }
}

/// The io_uring table, its rows to come ([`uring_rates`], [`uring_idle`]).
fn uring_table(lineup: &Lineup) -> Table {
    let mut t = Table::new(
        format!(
            "server: requests received by io_uring, against the epoll reader{}",
            lineup.title
        ),
        &["rows", "figure"],
        &URING_COLUMNS.map(String::from),
        Unit::Figure,
    );
    t.ratio_columns = vec![2];
    t.notes.push(
        "ringmem (io_uring) = `ringmem-resp --port 0 --memory uring`: the ringmem server with \
         requests received by io_uring into a provided-buffer group of the pool's budget \
         (`ringmem::uring`), run in the rate and idle rows above, alternated with the other \
         servers; ringmem (epoll) is those tables' ringmem column. Cells: medians of the \
         same runs."
            .into(),
    );
    t
}

/// A pipeline depth's rate rows in the io_uring table; the ratios of the tests run long
/// enough to judge go to `ratios`.
fn uring_rates(
    t: &mut Table,
    cfg: &Config,
    pipeline: usize,
    rows: &[(usize, RateRuns)],
    ratios: &mut Vec<f64>,
) {
    for (size, runs) in rows {
        let what = format!("-P {pipeline}, {}", size_label(*size));
        for test in TEST_NAMES {
            let c = cells(runs, test_figure(test, |l| Some(l.rps / 1e3)));
            let judged = fastest_run(cfg, pipeline, *size, &c) >= SHORTEST_RUN;
            if let (Some(x), true) = (over(c[URING], c[RINGMEM]), judged) {
                ratios.push(x.median);
            }
            t.rows.push(uring_row(
                vec![what.clone(), format!("{test} (k req/s)")],
                c,
            ));
        }
        let cpu = cells(runs, |r| r.cpu_us);
        t.rows.push(uring_row(
            vec![what.clone(), "server CPU (µs/req)".into()],
            cpu,
        ));
        t.rows.push(uring_row(
            vec![what, "peak RSS (MiB)".into()],
            cells(runs, |r| r.hwm),
        ));
        uring_failures(t, runs);
    }
}

/// Notes in the io_uring table saying why its server has no figures (each once).
fn uring_failures<T>(t: &mut Table, runs: &Runs<T>) {
    for n in role_failures(runs, URING..URING + 1) {
        if !t.notes.contains(&n) {
            t.notes.push(n);
        }
    }
}

/// The idle rows in the io_uring table: rates, memory per client, peak.
fn uring_idle(t: &mut Table, idle: &[(usize, Runs<server_memory::IdleRun>)]) {
    for (count, runs) in idle {
        for (what, c) in server_memory::idle_figures(runs) {
            if what.contains("req/s") || what.contains("per client") || what.starts_with("peak") {
                t.rows
                    .push(uring_row(vec![format!("{count} idle"), what], c));
            }
        }
        uring_failures(t, runs);
    }
}

/// The summary of the rate rows' ratios of each pipeline depth.
fn uring_summary(ratios: &[(usize, Vec<f64>)]) -> String {
    let parts: Vec<String> = ratios
        .iter()
        .filter_map(|(pipeline, xs)| {
            let s = spread(xs)?;
            Some(format!(
                "-P {pipeline} {}–{} (median {}, {} tests)",
                fmt_ratio(Some(s.min)),
                fmt_ratio(Some(s.max)),
                fmt_ratio(Some(s.median)),
                xs.len()
            ))
        })
        .collect();
    if parts.is_empty() {
        return "io_uring / epoll in requests/s: no test has both figures.".into();
    }
    format!(
        "io_uring / epoll in requests/s, over the tests long enough to judge: {}.",
        parts.join("; ")
    )
}

/// This process's descriptor limit, raised once to its hard limit.
pub fn nofile_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(crate::nofile::raise_nofile)
}

// ------------------------------------------------------------------------------------

/// Runs `f` once per role, alternated as the rate rows are (one repetition).
fn per_role<T>(what: &str, n: usize, mut f: impl FnMut(usize) -> Result<T, String>) -> Runs<T> {
    let mut runs: Runs<T> = Default::default();
    for role in order(0, n) {
        crate::progress::case(&format!("server: {what}, {}", ROLES[role]));
        runs[role].push(f(role));
    }
    runs
}

/// The load over a part of the scenario, as a sentence for its tables.
fn measured<T>(f: impl FnOnce() -> T) -> (T, String) {
    let before = load::read();
    let out = f();
    let load = load::under_load(before, load::read());
    (out, format!("This table's runs were {}.", load.phrase()))
}

/// The scenario's tables; nothing when redis-benchmark is missing (the header said so).
pub fn run(cfg: &Config) -> Vec<Table> {
    if resp_servers::redis_benchmark_missing().is_some() {
        return Vec::new();
    }
    nofile_limit();
    let lineup = Lineup::new();
    let mut tables = Vec::new();
    let mut uring = uring_table(&lineup);
    let mut ratios = Vec::new();
    for pipeline in PIPELINES {
        let (rows, load) = measured(|| {
            SIZES
                .iter()
                .map(|&size| (size, rate_runs(cfg, &lineup, pipeline, size)))
                .collect::<Vec<_>>()
        });
        let mut xs = Vec::new();
        uring_rates(&mut uring, cfg, pipeline, &rows, &mut xs);
        ratios.push((pipeline, xs));
        for mut t in rate_tables(pipeline, &rows, cfg, &lineup) {
            let verdict = t.notes.pop();
            t.notes.push(load.clone());
            t.notes.extend(verdict);
            tables.push(t);
        }
    }
    let (idle, load) = measured(|| {
        server_memory::IDLE_CLIENTS
            .iter()
            .map(|&n| {
                let what = format!("{n} idle clients");
                (
                    n,
                    per_role(&what, ROLES.len(), |role| {
                        server_memory::idle_run(cfg, &lineup, role, n)
                    }),
                )
            })
            .collect::<Vec<_>>()
    });
    let mut idle_t = server_memory::idle_table(cfg, &lineup, &idle, &load);
    let hard = nofile_limit();
    if hard < (server_memory::IDLE_CLIENTS[1] + 200) as u64 {
        idle_t.notes.insert(
            0,
            format!(
                "The descriptor limit here is {hard} (`ulimit -n`, hard): {} idle clients \
                 cannot be reached; raise it (`ulimit -n 20000` as root) to measure that row.",
                server_memory::IDLE_CLIENTS[1]
            ),
        );
    }
    tables.push(idle_t);
    uring_idle(&mut uring, &idle);
    uring.notes.push(uring_summary(&ratios));
    tables.push(uring);
    let (store, load) = measured(|| {
        per_role("1M-key store", COMPARED, |role| {
            server_memory::store_run(&lineup, role)
        })
    });
    tables.push(server_memory::store_table(&lineup, &store, &load));
    let (burst, load) = measured(|| {
        per_role("burst", COMPARED, |role| {
            server_memory::burst_run(&lineup, role)
        })
    });
    tables.push(server_memory::burst_table(&lineup, &burst, &load));
    tables
}

/// What the server tables' tests share: redis-server in every role (no binary is
/// started), and `--quick` with `reps` repetitions.
#[cfg(test)]
pub mod fixtures {
    use super::Lineup;
    use crate::harness::Config;
    use crate::resp_servers::Launch;

    pub fn lineup() -> Lineup {
        Lineup {
            launches: [
                Ok(Launch::Redis),
                Ok(Launch::Redis),
                Ok(Launch::Redis),
                Ok(Launch::Redis),
            ],
            notes: Vec::new(),
            title: String::new(),
        }
    }

    pub fn quick(reps: usize) -> Config {
        Config {
            scale: 1.0 / 20.0,
            reps,
            mode: "--quick",
            cores: 2,
            rss: false,
            procs: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{lineup, quick};
    use super::*;

    fn st(median: f64, min: f64, max: f64) -> Stats {
        Stats {
            median,
            min,
            max,
            waits: 0,
            restarts: 0,
            cpu: None,
        }
    }

    #[test]
    fn the_roles_take_turns_first() {
        assert_eq!(order(0, 3).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(order(1, 3).collect::<Vec<_>>(), [1, 2, 0]);
        assert_eq!(order(5, 3).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(order(5, 4).collect::<Vec<_>>(), [1, 2, 3, 0]);
    }

    #[test]
    fn a_row_gives_ringmems_ratios_to_both_others() {
        let cells = [
            Some(st(8.0, 8.0, 8.0)),
            Some(st(10.0, 9.0, 11.0)),
            Some(st(4.0, 4.0, 4.0)),
            Some(st(6.0, 5.0, 7.0)),
        ];
        let r = row(vec!["x".into()], cells);
        assert_eq!(r.cells.len(), 5);
        assert_eq!(r.cells[3].unwrap().median, 0.8);
        assert_eq!(r.cells[4].unwrap().median, 2.0);
        let r = row(
            vec!["x".into()],
            [Some(st(8.0, 8.0, 8.0)), None, None, None],
        );
        assert!(r.cells[3].is_none() && r.cells[4].is_none());
        // The io_uring table: its server, the epoll reader's, and the first over the second.
        let r = uring_row(vec!["x".into()], cells);
        assert_eq!(r.cells[0].unwrap().median, 6.0);
        assert_eq!(r.cells[1].unwrap().median, 8.0);
        assert_eq!(r.cells[2].unwrap().median, 0.75);
    }

    #[test]
    fn a_failure_of_every_size_is_said_once() {
        let fail =
            || -> RateRuns { [vec![Err("gone".into())], Vec::new(), Vec::new(), Vec::new()] };
        let rows = vec![(3, fail()), (1024, fail()), (65536, RateRuns::default())];
        assert_eq!(
            size_failures(&rows),
            ["-d 3, 1024: ringmem: not measured: gone."]
        );
        let rows = vec![(3, fail()), (1024, fail())];
        assert_eq!(size_failures(&rows), ["ringmem: not measured: gone."]);
    }

    #[test]
    fn the_rate_tables_fit_a_terminal_side_by_side() {
        let line = |test: &str, rps: f64| resp_servers::BenchLine {
            test: test.into(),
            rps,
            p50_ms: Some(0.671),
            p99_ms: Some(12.345),
        };
        let run = || RateRun {
            lines: TEST_NAMES.iter().map(|t| line(t, 123_456.7)).collect(),
            rss: Some(123.4),
            hwm: Some(150.0),
            cpu_us: Some(12.34),
        };
        let rows: Vec<(usize, RateRuns)> = SIZES
            .iter()
            .map(|&s| {
                (
                    s,
                    [
                        vec![Ok(run())],
                        vec![Ok(run())],
                        vec![Ok(run())],
                        vec![Ok(run())],
                    ],
                )
            })
            .collect();
        let mut uring = uring_table(&lineup());
        let mut ratios = Vec::new();
        uring_rates(&mut uring, &quick(1), 16, &rows, &mut ratios);
        // The tests long enough to judge: not the 64 KiB row's (1,600 requests at 123k/s).
        assert_eq!(ratios, [1.0; 12]);
        uring.notes.push(uring_summary(&[(16, ratios)]));
        assert!(uring.notes[1].contains("-P 16 1.00×–1.00× (median 1.00×, 12 tests)"));
        let [rates, lat] = rate_tables(16, &rows, &quick(1), &lineup());
        for t in [rates, lat, uring] {
            let text = t.render_plain();
            assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
            // One block of columns: a single rule line under the headings.
            let rules = text.lines().filter(|l| l.starts_with("------")).count();
            assert_eq!(rules, 1, "{text}");
            assert!(text.contains("1.00×"), "{text}");
        }
    }

    #[test]
    fn a_bar_is_missed_only_beyond_the_spread() {
        let rows = vec![
            (
                "SET 3 B".to_string(),
                st(100.0, 95.0, 105.0),
                st(90.0, 85.0, 92.0),
            ),
            (
                "GET 3 B".to_string(),
                st(88.0, 80.0, 96.0),
                st(90.0, 85.0, 92.0),
            ),
        ];
        let (met, detail, tied) = judge(&rows, true, 1.0);
        assert_eq!((met, tied), (Some(true), true), "{detail}");
        let said = at_least(met, tied, "at least as fast", &detail);
        assert!(
            said.starts_with("at least as fast: tied, not met"),
            "{said}"
        );
        assert!(
            detail.contains(
                "1 of 2 rows at or past it by the median, 1 short of it by the median but within"
            ),
            "{detail}"
        );
        let rows = vec![(
            "LPUSH 64 KiB".to_string(),
            st(50.0, 45.0, 55.0),
            st(90.0, 85.0, 92.0),
        )];
        let (met, detail, _) = judge(&rows, true, 1.0);
        assert_eq!(met, Some(false));
        assert!(detail.contains("LPUSH 64 KiB 0.56×"), "{detail}");
        // Against redis-server at 0.8×: 75 of 90 is 0.83×, met.
        let rows = vec![(
            "SET 3 B".to_string(),
            st(75.0, 75.0, 75.0),
            st(90.0, 90.0, 90.0),
        )];
        assert_eq!(judge(&rows, true, REDIS_BAR).0, Some(true));
        // Latency, lower is better: a p99 above the other's whole range misses.
        let rows = vec![("SET 3 B".to_string(), st(3.0, 2.8, 3.2), st(1.0, 0.9, 1.1))];
        assert_eq!(judge(&rows, false, 1.0).0, Some(false));
        assert_eq!(judge(&[], false, 1.0).0, None);
    }

    #[test]
    fn the_sizes_and_counts_stay_as_the_issue_asks() {
        let quick = quick(3);
        assert_eq!(size_label(65536), "64 KiB");
        assert_eq!(size_label(3), "3 B");
        // At -P 16, more requests than the 800 in flight.
        for size in SIZES {
            assert!(requests(&quick, 16, size) >= 2 * CLIENTS * 16, "{size}");
        }
        assert_eq!(case_count(&quick), 4 * (2 * 3 * 3 + 2) + 3 * 2);
    }
}
