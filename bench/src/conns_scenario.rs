//! The `conns` scenario (issue 44, "a server's memory"): what a server pays per
//! connection with tokio_util's `FramedRead<_, LengthDelimitedCodec>`, with ringmem's
//! `AsyncFramedReader::new` (the process's pool, `ReadPool::global()`, for all) and
//! with `AsyncFramedReader::with_ring` (a 1 MiB ring per connection, what `new` did
//! before), on loopback TCP. The measuring is done by the `ringmem-bench-conns` child
//! (`conns.rs`, feature `framed`): one server process per row and reader, which starts
//! its clients as a process of their own. This side runs it, reads its records and
//! makes the tables: idle connections after a burst, active connections among idle
//! ones, frames kept, and an echo server that queues some of its frames for a while.

use std::process::Command;
use std::time::Duration;

use crate::buffers::{child_exe, prepare_child};
use crate::harness::{mib_stats, spread, Config, Row, Table, Unit};
use crate::ratio::{fmt_ratio, ratio};
use crate::resp_servers::output_within;

/// The child binary.
const CHILD: &str = "ringmem-bench-conns";

/// The child's reader names, in column order (the baseline first).
const READERS: [&str; 4] = [
    "FramedRead",
    "ringmem (new)",
    "ringmem (ring each)",
    "ringmem (io_uring)",
];

/// The server that holds its connections with no reader, in the idle row: the floor
/// the readers' memory is measured over (not a column).
const FLOOR: &str = "no reader";

/// The name of reader `k`: a column's, or [`FLOOR`] past them.
fn name(k: usize) -> &'static str {
    READERS.get(k).copied().unwrap_or(FLOOR)
}

/// The column of `ringmem (new)`, the reader of the process's pool.
const NEW: usize = 1;

/// The idle row's connection counts.
const IDLE_CONNS: [usize; 2] = [1_000, 10_000];

/// Connections of the active rows, of which a tenth stream: the idle row's counts, at
/// which the floor of their memory is measured.
const ACTIVE_CONNS: [usize; 2] = IDLE_CONNS;

/// The io_uring reader's group, MiB (the child's `--group-mib`): what a tenth of
/// 1,000 or 10,000 connections streaming needs (8 MiB read no faster, and kept 6 MiB
/// more resident).
const GROUP_MIB: usize = 2;

/// Connections of the keep row, all streaming, and the most frames each sends.
const KEEP_CONNS: usize = 4;
const KEEP_FRAMES: u64 = 200_000;

/// Connections of the queue row, frames each keeps in flight, seconds a kept frame is
/// held, and seconds measured after the warm-up.
const QUEUE_CONNS: usize = 100;
const QUEUE_PIPELINE: usize = 4;
const QUEUE_HOLD: f64 = 2.0;
const QUEUE_SECS: f64 = 3.0;

/// The queue row's readers, in column order: FramedRead and ringmem (new). Ring each
/// is left out to keep the main job short (the child runs it by hand).
const QUEUE_READERS: [usize; 2] = [0, NEW];

/// One case of the queue row.
#[derive(Clone, Copy, Debug)]
struct QueueCase {
    /// Payload bytes of every frame.
    size: usize,
    /// One frame in this many is kept.
    keep_every: u64,
    /// Runs of each reader, alternated (FramedRead, ringmem, FramedRead, ...).
    reps: usize,
    /// The budget of the process's pool, MiB.
    budget_mib: usize,
}

/// The queue row's cases: 4 KiB frames, one in 10 kept, on a pool that holds what
/// FramedRead's server keeps (twice per reader: the figure the row is for) and on the
/// process's pool of [`POOL_MIB`], which does not; one in 100; with `--full`, 1 KiB
/// frames too, on the larger pool, and 16 KiB frames on one of [`KEEPING_16K_MIB`].
fn queue_cases(cfg: &Config) -> Vec<QueueCase> {
    let case = |size, keep_every, reps, budget_mib| QueueCase {
        size,
        keep_every,
        reps,
        budget_mib,
    };
    let mut cases = vec![
        case(4096, 10, 2, KEEPING_MIB),
        case(4096, 10, 1, POOL_MIB),
        case(4096, 100, 1, POOL_MIB),
    ];
    if cfg.scale >= 1.0 {
        cases.extend([
            case(1024, 10, 1, KEEPING_MIB),
            case(16 << 10, 10, 1, KEEPING_16K_MIB),
        ]);
    }
    cases
}

/// The pool's budget, MiB, of the queue cases that keep 1 frame in 10: what
/// FramedRead's server keeps there (some 52,000 frames of 4 KiB, 210 MB, held 2 s)
/// fits with room to spare.
const KEEPING_MIB: usize = 512;

/// The same for 16 KiB frames: FramedRead's server keeps some 34,000 of them (0.55 GB),
/// more than [`KEEPING_MIB`].
const KEEPING_16K_MIB: usize = 1024;

/// The budget of the process's pool, MiB (the child's `--budget-mib`), which
/// `ringmem (new)` reads into.
const POOL_MIB: usize = 64;

/// A child that has not ended after this long is killed (a stall is reported by the
/// child itself within its own 5 s; this is for one that hangs anyway).
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

/// Builds the child if `cargo run` did not (see [`prepare_child`]); `Err` says why the
/// conns tables will be empty.
pub fn prepare() -> Result<(), String> {
    prepare_child(CHILD, &["framed"], "the conns tables")
}

/// The cases [`run`] runs: a server per reader for each idle and active count and the
/// keep row, and a server per run of the queue row.
pub fn case_count(cfg: &Config) -> usize {
    let queue: usize = queue_cases(cfg).iter().map(|c| c.reps).sum();
    (READERS.len() + 1) * IDLE_CONNS.len()
        + READERS.len() * (ACTIVE_CONNS.len() + 1)
        + QUEUE_READERS.len() * queue
}

/// One record of the child: its row, its reader (a column) and its `key=value` fields.
#[derive(Debug)]
struct Record {
    row: String,
    reader: usize,
    fields: Vec<(String, f64)>,
}

impl Record {
    /// Field `key`, if the record has it.
    fn get(&self, key: &str) -> Option<f64> {
        self.fields.iter().find(|f| f.0 == key).map(|f| f.1)
    }
}

/// The records in the child's output (lines of another kind are skipped).
fn parse_records(out: &str) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for line in out.lines() {
        let mut f = line.split('\t');
        let row = f.next().unwrap_or("");
        if !["idle", "active", "keep", "queue"].contains(&row) {
            continue;
        }
        let bad = || format!("{CHILD} printed a record this bench cannot read: {line}");
        let reader = f.next().ok_or_else(bad)?;
        let reader = (0..=READERS.len())
            .find(|&k| name(k) == reader)
            .ok_or_else(bad)?;
        let fields = f
            .map(|kv| {
                let (k, v) = kv.split_once('=').ok_or_else(bad)?;
                Ok((k.to_string(), v.parse::<f64>().map_err(|_| bad())?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        records.push(Record {
            row: row.into(),
            reader,
            fields,
        });
    }
    Ok(records)
}

/// Runs the child with `args` (killed after [`CHILD_TIMEOUT`]): its stdout, or why it
/// gave none. Its output is read while it runs (`output_within`), so a long one never
/// blocks it.
fn child(args: &[String]) -> Result<String, String> {
    let exe = child_exe(CHILD).map_err(|e| format!("cannot locate {CHILD}: {e}"))?;
    let mut cmd = Command::new(&exe);
    cmd.args(args);
    output_within(cmd, CHILD_TIMEOUT).map_err(|e| format!("{CHILD} {}: {e}", args.join(" ")))
}

/// One server run: the record for `reader` in `row`, or why there is none. `case`
/// follows the connections in the progress line (`, 4 KiB, keep 1 in 10`).
fn server(
    reader: usize,
    row: &str,
    conns: usize,
    case: &str,
    extra: &[String],
) -> Result<Record, String> {
    crate::progress::case(&format!(
        "conns: {row}, {conns} connections{case}, {}",
        name(reader)
    ));
    let mut args: Vec<String> = vec![
        "--server".into(),
        name(reader).into(),
        "--row".into(),
        row.into(),
        "--conns".into(),
        conns.to_string(),
    ];
    if !extra.iter().any(|a| a == "--budget-mib") {
        args.extend(["--budget-mib".into(), POOL_MIB.to_string()]);
    }
    args.extend(["--group-mib".into(), GROUP_MIB.to_string()]);
    args.extend_from_slice(extra);
    let out = child(&args)?;
    parse_records(&out)?
        .into_iter()
        .find(|r| r.row == row && r.reader == reader)
        .ok_or_else(|| format!("{CHILD} printed no {row} record for {}", name(reader)))
}

/// One run per reader of a row: each reader's record or why it has none.
type Runs = Vec<Result<Record, String>>;

/// A row of figures, one per reader, from `f` of its record (`None`: not measured).
fn figures(label: impl Into<String>, runs: &Runs, f: impl Fn(&Record) -> Option<f64>) -> Row {
    figures_with(vec![label.into()], runs, f)
}

fn figures_with(params: Vec<String>, runs: &Runs, f: impl Fn(&Record) -> Option<f64>) -> Row {
    Row {
        params,
        cells: runs
            .iter()
            .map(|r| r.as_ref().ok().and_then(&f).map(mib_stats))
            .collect(),
    }
}

/// The ratio of each ringmem column's `f` to FramedRead's, as `ringmem (new) 0.80×
/// FramedRead's, ringmem (ring each) 4.10×`; `–` for a figure not measured. Where two
/// figures make no ratio (FramedRead's 0, below 0 or next to nothing after its
/// baseline was subtracted: see [`ratio`]) it says `n/a`, followed by the figures
/// themselves: `ringmem (new) n/a, ringmem (ring each) n/a (figures: FramedRead 0,
/// ringmem (new) 6.55, ringmem (ring each) 1024)`.
fn ratios(runs: &Runs, f: impl Fn(&Record) -> Option<f64>) -> String {
    let fig: Vec<Option<f64>> = runs.iter().map(|r| r.as_ref().ok().and_then(&f)).collect();
    // Per ringmem column: `None` not measured, `Some(None)` no ratio.
    let each: Vec<Option<Option<f64>>> = (1..runs.len())
        .map(|k| Some(ratio(fig[k]?, fig[0]?)))
        .collect();
    // The first ratio printed says what it is of.
    let first = each.iter().position(|r| matches!(r, Some(Some(_))));
    let mut s = each
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let x = r.map_or("–".into(), fmt_ratio);
            let of = if Some(i) == first {
                " FramedRead's"
            } else {
                ""
            };
            format!("{} {x}{of}", READERS[i + 1])
        })
        .collect::<Vec<_>>()
        .join(", ");
    if each.contains(&Some(None)) {
        let figures: Vec<String> = (0..runs.len())
            .map(|k| {
                let x = fig[k].map_or("–".into(), |x| format!("{x:.3}"));
                let x = x.trim_end_matches('0').trim_end_matches('.');
                format!("{} {x}", READERS[k])
            })
            .collect();
        s.push_str(&format!(" (figures: {})", figures.join(", ")));
    }
    s
}

/// Notes saying why a reader has no figures.
fn failures(runs: &Runs) -> Vec<String> {
    runs.iter()
        .enumerate()
        .filter_map(|(k, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{}: not measured: {e}.", READERS[k]))
        })
        .collect()
}

/// KiB per connection of `key` over `base_key` (the no-reader server's connections
/// are all held: none reads a burst).
fn per_conn(r: &Record, key: &str, base_key: &str) -> Option<f64> {
    let reached = r.get("reached").or(r.get("held")).filter(|&n| n > 0.0)?;
    Some((r.get(key)? - r.get(base_key)?) / reached)
}

/// [`per_conn`] of `r` less that of the no-reader server's `floor`: what the reader
/// adds to a connection.
fn over_floor(r: &Record, floor: Option<&Record>, key: &str, base_key: &str) -> Option<f64> {
    Some(per_conn(r, key, base_key)? - per_conn(floor?, key, base_key)?)
}

/// MiB of the resident set over the baseline.
fn mib_over(r: &Record) -> Option<f64> {
    Some((r.get("rss_kib")? - r.get("base_rss_kib")?) / 1024.0)
}

/// Heap bytes per connection (the child's counting allocator: bytes asked for and not
/// yet freed, less those at the baseline).
fn heap_per_conn(r: &Record) -> Option<f64> {
    Some(per_conn(r, "heap_kib", "base_heap_kib")? * 1024.0)
}

/// KiB per connection of the whole process's address space (`VmSize`, no baseline
/// subtracted).
fn whole_vm(r: &Record) -> Option<f64> {
    let reached = r.get("reached").filter(|&n| n > 0.0)?;
    Some(r.get("vm_kib")? / reached)
}

/// The idle table: per connection count, a server per reader; `floors`, the
/// no-reader server's run at each count (where it ran).
fn idle_table(idle: &[(usize, Runs)], floors: &[Result<Record, String>]) -> Table {
    let columns: Vec<String> = READERS.iter().map(|r| r.to_string()).collect();
    let mut t = Table::new(
        "conns: idle connections after a burst (1 KiB + 16 KiB frame each)",
        &["conns", "figure"],
        &columns,
        Unit::Figure,
    );
    let mut verdict = String::from("**Idle:** ");
    let mut parts = Vec::new();
    for (i, (conns, runs)) in idle.iter().enumerate() {
        let floor = floors.get(i).and_then(|f| f.as_ref().ok());
        let reached: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.as_ref().ok()?.get("reached"))
            .collect();
        let fewest = reached.iter().copied().fold(f64::INFINITY, f64::min);
        let label = if fewest < *conns as f64 {
            format!("{conns} (fewest reached: {fewest:.0})")
        } else {
            conns.to_string()
        };
        let row = |what: &str, f: &dyn Fn(&Record) -> Option<f64>| {
            figures_with(vec![label.clone(), what.into()], runs, f)
        };
        t.rows.push(row("resident set per connection (KiB)", &|r| {
            per_conn(r, "rss_kib", "base_rss_kib")
        }));
        t.rows
            .push(row("heap per connection (bytes)", &heap_per_conn));
        t.rows.push(row(
            "resident set per connection over no reader's (KiB)",
            &|r| over_floor(r, floor, "rss_kib", "base_rss_kib"),
        ));
        t.rows
            .push(row("heap per connection over no reader's (bytes)", &|r| {
                Some(over_floor(r, floor, "heap_kib", "base_heap_kib")? * 1024.0)
            }));
        t.rows.push(row("address space per connection (KiB)", &|r| {
            per_conn(r, "vm_kib", "base_vm_kib")
        }));
        t.rows.push(row(
            "address space per connection, whole process (KiB)",
            &whole_vm,
        ));
        t.rows
            .push(row("resident set over the baseline (MiB)", &mib_over));
        t.rows.push(row("baseline resident set (MiB)", &|r| {
            Some(r.get("base_rss_kib")? / 1024.0)
        }));
        t.rows.push(row("baseline address space (MiB)", &|r| {
            Some(r.get("base_vm_kib")? / 1024.0)
        }));
        t.rows.push(row("connections that read their burst", &|r| {
            r.get("reached")
        }));
        for (k, r) in runs.iter().enumerate() {
            let Ok(r) = r else { continue };
            if r.get("reached") < Some(*conns as f64) {
                t.notes.push(format!(
                    "{}: {} of {conns} connections read their burst (descriptor limit {}; \
                     the clients connected {}): the figures are per connection reached.",
                    READERS[k],
                    r.get("reached").unwrap_or(0.0),
                    r.get("nofile").unwrap_or(0.0),
                    r.get("connected").unwrap_or(0.0),
                ));
            }
        }
        t.notes.extend(failures(runs));
        match floors.get(i) {
            Some(Ok(f)) => t.notes.push(format!(
                "{FLOOR}, {conns} connections: {:.2} KiB resident and {:.0} bytes of heap \
                 per connection.",
                per_conn(f, "rss_kib", "base_rss_kib").unwrap_or(f64::NAN),
                heap_per_conn(f).unwrap_or(f64::NAN),
            )),
            Some(Err(e)) => t.notes.push(format!("{FLOOR}: not measured: {e}.")),
            None => {}
        }
        parts.push(format!(
            "at {conns} connections, resident set per connection: {}; over no reader's: \
             {}; address space per connection (KiB): {}; whole-process address space per \
             connection: {}",
            ratios(runs, |r| per_conn(r, "rss_kib", "base_rss_kib")),
            ratios(runs, |r| over_floor(r, floor, "rss_kib", "base_rss_kib")),
            ratios(runs, |r| per_conn(r, "vm_kib", "base_vm_kib")),
            ratios(runs, whole_vm),
        ));
    }
    verdict.push_str(&parts.join("; "));
    verdict.push('.');
    t.notes.insert(
        0,
        format!(
            "Each column is a server process of its own (`{CHILD} --server READER --row idle`; a tokio \
             multi-thread runtime, 2 workers), its clients a second process. Every client connects \
             over loopback TCP and sends one 1 KiB and one 16 KiB length-delimited frame (4-byte \
             big-endian length), then stays open and idle; the server reads every connection in a \
             task of its own, drops the frames and goes on waiting for more. Readers: \
             FramedRead: `FramedRead::new(conn, LengthDelimitedCodec::new())`; ringmem (new): \
             `AsyncFramedReader::new(conn, LengthDelimited::new())`, which reads into the \
             process's pool, `ReadPool::global()`, shared by all connections (set to \
             `ReadPool::new({POOL_MIB} MiB)` by `ReadPool::set_global` before the first \
             reader); ringmem (ring each): `AsyncFramedReader::with_ring(conn, \
             LengthDelimited::new(), Ring::new(1 MiB))`, a ring of its own per connection (what \
             `new` did before it read into the pool); ringmem (io_uring): \
             `UringGroup::new({GROUP_MIB} MiB).framed(&conn, LengthDelimited::new())`, one \
             group for all of 4 io_uring instances (two per worker), their file tables holding \
             the sockets (multishot receives into 32 provided buffers of 64 KiB at a time, shared \
             out over the instances; frames two receives carry copied \
             into the process's pool, as `new`'s; the task keeps the `TcpStream`, as a server \
             that writes replies does; not measured where the kernel refuses io_uring)."
        ),
    );
    t.notes.insert(
        1,
        "Figures: `VmRSS` and `VmSize` of `/proc/self/status` 2.5 s after the last burst \
         was read (the connections idle a while; a pool gives its free pages back a \
         second or two after claims stop), less the same read just before the clients \
         connected (the runtime running, the process's pool not yet made: its budget \
         counts as the connections' address space), divided by the connections. The kernel's socket buffers are in neither. \
         glibc reserves its heaps 64 MiB at a time, before the baseline, so heap growth \
         inside a reserved heap adds no address space (FramedRead's can come out 0): the \
         whole-process row is `VmSize` divided by the connections, no baseline subtracted, \
         for a ratio that counts those heaps too. Heap: the bytes the server's allocations \
         asked for and has not freed (its global allocator counts them), less those just \
         after the pool and the group were made. No reader: a server of its own whose \
         connections' tasks are the readers' (the same `handle`), each holding its \
         `TcpStream` and a stream that never yields, so never reads (its bursts stay in \
         the sockets): what a connection costs a tokio server before any reader, the floor \
         of the rows over no reader's, which are what the reader adds."
            .into(),
    );
    t.notes.push(verdict);
    t
}

/// The active table: a tenth of the connections streaming among idle ones, per
/// connection count; `floors`, the no-reader server's idle run at each count.
fn active_table(active: &[(usize, Runs)], floors: &[Result<Record, String>], secs: f64) -> Table {
    let columns: Vec<String> = READERS.iter().map(|r| r.to_string()).collect();
    let mut t = Table::new(
        "conns: a tenth of the connections active (1 KiB frames)",
        &["conns", "figure"],
        &columns,
        Unit::Figure,
    );
    let fps = |r: &Record| Some(r.get("frames")? / r.get("secs").filter(|&s| s > 0.0)?);
    let streaming = |r: &Record| {
        Some(r.get("frames_streaming")? / r.get("streaming_secs").filter(|&s| s > 0.0)?)
    };
    let per_k =
        |r: &Record| Some(r.get("allocs")? * 1000.0 / r.get("frames").filter(|&f| f > 0.0)?);
    let mib =
        |key: &'static str| move |r: &Record| Some((r.get(key)? - r.get("base_rss_kib")?) / 1024.0);
    let mut verdicts = Vec::new();
    for (i, (conns, runs)) in active.iter().enumerate() {
        let floor = floors.get(i).and_then(|f| f.as_ref().ok());
        // The memory for receiving: the peak resident set over that of the same
        // connections held by no reader.
        let receiving = |r: &Record| {
            let f = floor?;
            Some((r.get("hwm_kib")? - r.get("base_rss_kib")?) / 1024.0 - mib_over(f)?)
        };
        let label = format!("{conns} ({} active)", conns / 10);
        let row = |what: &str, f: &dyn Fn(&Record) -> Option<f64>| {
            figures_with(vec![label.clone(), what.into()], runs, f)
        };
        t.rows.push(row(
            "frames per second, while the clients write",
            &streaming,
        ));
        t.rows
            .push(row("frames per second, to the last frame read", &fps));
        t.rows.push(row("MB per second (payload)", &|r| {
            Some(r.get("bytes")? / r.get("secs").filter(|&s| s > 0.0)? / 1e6)
        }));
        for (what, key) in [
            ("latency p50 (ms)", "p50_ns"),
            ("latency p99 (ms)", "p99_ns"),
            ("latency p99.9 (ms)", "p999_ns"),
        ] {
            t.rows.push(row(what, &|r| Some(r.get(key)? * 1e-6)));
        }
        t.rows.push(row(
            "resident set over the baseline, at its peak (MiB)",
            &mib("hwm_kib"),
        ));
        t.rows.push(row(
            "resident set over the baseline, streams done (MiB)",
            &mib("rss_kib"),
        ));
        t.rows.push(row(
            "peak resident set over no reader's: receiving (MiB)",
            &receiving,
        ));
        t.rows.push(row(
            "heap per connection, streams done (bytes)",
            &heap_per_conn,
        ));
        t.rows
            .push(row("server heap allocations per 1,000 frames", &per_k));
        t.rows.push(row("frames received", &|r| r.get("frames")));
        t.notes.extend(failures(runs));
        for (k, r) in runs.iter().enumerate() {
            if let Ok(r) = r {
                if r.get("stalled") == Some(1.0) {
                    t.notes.push(format!(
                        "{}, {conns} connections: STALLED: no frame for 5 s before all the \
                         clients' frames were read.",
                        READERS[k]
                    ));
                }
            }
        }
        verdicts.push(format!(
            "at {conns} connections, frames per second while the clients write: {}, to \
             the last frame: {}; p99.9 latency: {}; peak resident set: {}; over no \
             reader's (receiving): {}; heap allocations per frame: {}",
            ratios(runs, streaming),
            ratios(runs, fps),
            ratios(runs, |r| r.get("p999_ns")),
            ratios(runs, mib("hwm_kib")),
            ratios(runs, receiving),
            ratios(runs, per_k),
        ));
    }
    t.notes.insert(
        0,
        format!(
            "A server process per column, clients in another, as in the idle table: the \
             connections send their burst, then a tenth of them stream 1 KiB frames for {secs} s \
             as fast as the server takes them (writes of 16 frames), while the others stay \
             idle. The io_uring reader's group is {GROUP_MIB} MiB (it holds what receiving \
             holds: the kernel's buffers of 64 KiB, 32 at most over its instances, and bytes \
             received and not yet read); \
             frames two receives carry are copied into the process's pool, as `new` reads \
             into it ({POOL_MIB} MiB budget)."
        ),
    );
    t.notes.insert(
        1,
        "Frames per second: the stamped frames read while the clients write (their \
         seconds), and all of them over the time from the server's go to the last one read \
         (what the sockets held when the clients stopped is read after, a tail that moves \
         from run to run). Latency: the client writes the wall clock (`SystemTime`, \
         nanoseconds; both processes read the same `CLOCK_REALTIME`) into the first 8 payload \
         bytes of every frame of a write just before the write, the server subtracts it from \
         the wall clock when the reader yields the frame; quantiles within 1.6 %. At full load \
         most of it is the frame's wait behind earlier frames in the socket buffers and in the \
         client's blocked write, not the reader's own time. Resident set: `VmHWM` (the peak) \
         and `VmRSS` once the streams are read, less the baseline read before the clients \
         connected; the kernel's socket buffers are in neither. Receiving: the peak less \
         the idle table's no-reader server's resident set over its baseline, at the same \
         connections (the same tasks, holding the sockets, reading nothing). Heap: as in \
         the idle table. Allocations: the server process's global allocator, counted over \
         the same window, per 1,000 frames."
            .into(),
    );
    t.notes
        .push(format!("**Active among idle:** {}.", verdicts.join("; ")));
    t
}

/// RSS growth over the baseline of a keep run, bytes.
fn held_rss(r: &Record) -> Option<f64> {
    Some((r.get("rss_kib")? - r.get("base_rss_kib")?) * 1024.0)
}

/// The process pool's bytes in use at the end of a keep run (`ringmem (new)` only).
fn held_pool(r: &Record) -> Option<f64> {
    r.get("pool_in_use").filter(|&b| b >= 0.0)
}

/// The keep table: frames kept, what they hold.
fn keep_table(runs: &Runs, secs: f64) -> Table {
    let columns: Vec<String> = READERS.iter().map(|r| r.to_string()).collect();
    let mut t = Table::new(
        format!("conns: {KEEP_CONNS} connections of 100-byte frames, 1 in 1,000 kept"),
        &["figure"],
        &columns,
        Unit::Figure,
    );
    let kept = |r: &Record| r.get("kept_bytes").filter(|&b| b > 0.0);
    t.rows.push(figures("frames sent", runs, |r| {
        r.get("sent").filter(|&s| s >= 0.0)
    }));
    t.rows
        .push(figures("frames received", runs, |r| r.get("received")));
    t.rows.push(figures("frames kept", runs, |r| r.get("kept")));
    t.rows.push(figures("kept bytes (KiB)", runs, |r| {
        Some(r.get("kept_bytes")? / 1024.0)
    }));
    t.rows
        .push(figures("pool bytes in use at the end (KiB)", runs, |r| {
            Some(held_pool(r)? / 1024.0)
        }));
    t.rows
        .push(figures("resident set over the baseline (KiB)", runs, |r| {
            Some(held_rss(r)? / 1024.0)
        }));
    t.rows
        .push(figures("pool bytes in use / kept bytes", runs, |r| {
            Some(held_pool(r)? / kept(r)?)
        }));
    t.rows.push(figures(
        "resident set over the baseline / kept bytes",
        runs,
        |r| Some(held_rss(r)? / kept(r)?),
    ));
    t.rows.push(figures(
        "STALLED (no frame for 5 s): 1, else 0",
        runs,
        |r| r.get("stalled"),
    ));
    t.notes = vec![format!(
        "A server process per column, clients in another. {KEEP_CONNS} connections stream \
         100-byte frames for up to {secs} s or {KEEP_FRAMES} frames each; the server's task per \
         connection sends every frame over a bounded `tokio::sync::mpsc` channel (1,024) to one \
         worker task, which keeps every 1,000th frame in a `Vec` to the end of the run and drops \
         the others. Memory held: 200 ms after the last frame, the process pool's \
         `ReadPool::global().stats().bytes_in_use` (ringmem (new) only) and `VmRSS` less its \
         value before the clients connected; each over the kept frames' payload bytes. A run in \
         which no frame arrives for 5 s before the clients' last is read is STALLED: its \
         figures are where it stopped (frames sent: `–` when the clients' count never came)."
    )];
    t.notes.extend(failures(runs));
    let mut stalled = Vec::new();
    for (k, r) in runs.iter().enumerate() {
        if let Ok(r) = r {
            if r.get("stalled") == Some(1.0) {
                stalled.push(format!(
                    "{} STALLED after {} of {} frames",
                    READERS[k],
                    r.get("received").unwrap_or(0.0),
                    r.get("sent")
                        .filter(|&s| s >= 0.0)
                        .map_or("?".into(), |s| s.to_string()),
                ));
            }
        }
    }
    let mut verdict = format!(
        "**Keep 1 in 1,000:** resident set held per kept byte: {}",
        ratios(runs, |r| Some(held_rss(r)? / kept(r)?)),
    );
    if let Some(Ok(pool)) = runs.get(NEW) {
        if let (Some(p), Some(k)) = (held_pool(pool), kept(pool)) {
            // Frames that outlive their read are copied out, so the ratio can be near 1:
            // a decimal there, none for the hundreds a pool of regions would hold.
            let x = match ratio(p, k) {
                Some(x) if x < 10.0 => format!("{x:.1}×"),
                Some(x) => format!("{x:.0}×"),
                None => fmt_ratio(None),
            };
            verdict.push_str(&format!("; the pool holds {x} the kept bytes"));
        }
    }
    if stalled.is_empty() {
        verdict.push_str("; no reader stalled.");
    } else {
        verdict.push_str(&format!("; {}.", stalled.join(", ")));
    }
    t.notes.push(verdict);
    t
}

/// A queue case's runs: per reader of [`QUEUE_READERS`], each run's record or why it
/// has none, in the order they ran.
type QueueRuns = Vec<Vec<Result<Record, String>>>;

/// `f` of every run of each reader that has it.
fn queue_figures(runs: &QueueRuns, f: &dyn Fn(&Record) -> Option<f64>) -> Vec<Vec<f64>> {
    runs.iter()
        .map(|r| r.iter().filter_map(|r| f(r.as_ref().ok()?)).collect())
        .collect()
}

/// The resident set over the baseline per frame held in the queue, KiB.
fn rss_per_held(r: &Record) -> Option<f64> {
    Some((r.get("rss_kib")? - r.get("base_rss_kib")?) / r.get("kept").filter(|&k| k > 0.0)?)
}

/// ringmem (new)'s median `f` over FramedRead's, as `0.42×`, followed by each pair of
/// runs' ratio when there are several pairs: `0.42× (pairs of runs: 0.40×, 0.44×)`;
/// `–` for a figure not measured.
fn queue_ratio(runs: &QueueRuns, f: &dyn Fn(&Record) -> Option<f64>) -> String {
    let fig = queue_figures(runs, f);
    let (Some(b), Some(x)) = (spread(&fig[0]), spread(&fig[1])) else {
        return "–".into();
    };
    let mut s = fmt_ratio(ratio(x.median, b.median));
    let pairs: Vec<String> = runs[0]
        .iter()
        .zip(&runs[1])
        .filter_map(|(b, x)| {
            let (x, b) = (f(x.as_ref().ok()?)?, f(b.as_ref().ok()?)?);
            Some(fmt_ratio(ratio(x, b)))
        })
        .collect();
    if pairs.len() > 1 {
        s.push_str(&format!(" (pairs of runs: {})", pairs.join(", ")));
    }
    s
}

/// A frame size as the table says it: `4 KiB`, or bytes.
fn size_label(size: usize) -> String {
    if size % 1024 == 0 {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// The queue table: an echo server keeping 1 frame in `keep_every` for a while.
fn queue_table(cases: &[(QueueCase, QueueRuns)]) -> Table {
    let columns: Vec<String> = QUEUE_READERS.iter().map(|&k| READERS[k].into()).collect();
    let mut t = Table::new(
        format!(
            "conns: echo server, {QUEUE_CONNS} connections × {QUEUE_PIPELINE} frames in flight, \
             kept frames held {QUEUE_HOLD} s"
        ),
        &["frames", "figure"],
        &columns,
        Unit::Figure,
    );
    let fps = |r: &Record| r.get("fps");
    let rss = |r: &Record| Some(r.get("rss_kib")? / 1024.0);
    let mut parts = Vec::new();
    let mut trouble = Vec::new();
    for (case, runs) in cases {
        let label = queue_label(case);
        let mut row = |what: &str, f: &dyn Fn(&Record) -> Option<f64>| {
            t.rows.push(Row {
                params: vec![label.clone(), what.into()],
                cells: queue_figures(runs, f).iter().map(|v| spread(v)).collect(),
            })
        };
        row("frames echoed per second", &fps);
        row("resident set (MiB)", &rss);
        row("frames held in the queue", &|r| r.get("kept"));
        row(
            "resident set over the baseline per frame held (KiB)",
            &rss_per_held,
        );
        row("pool bytes in use (MiB)", &|r| {
            Some(held_pool(r)? / f64::from(1 << 20))
        });
        // Counted since the server started, warm-up included.
        let counted = |key: &'static str| move |r: &Record| r.get(key).filter(|&n| n >= 0.0);
        row("pool: waits for room", &counted("pool_waits"));
        row("pool: frames from the heap", &counted("pool_heap"));
        row("connections STALLED (no echo for 5 s)", &|r| {
            r.get("stalled")
        });
        parts.push(format!(
            "{label}, ringmem (new) over FramedRead: frames per second {}, resident \
             set {}, resident set per frame held {}",
            queue_ratio(runs, &fps),
            queue_ratio(runs, &rss),
            queue_ratio(runs, &rss_per_held),
        ));
        for (col, reader_runs) in runs.iter().enumerate() {
            let name = READERS[QUEUE_READERS[col]];
            for (k, r) in reader_runs.iter().enumerate() {
                let run = format!("{label}, {name}, run {}", k + 1);
                match r {
                    Err(e) => t.notes.push(format!("{run}: not measured: {e}.")),
                    Ok(r) => {
                        for (key, what) in [
                            ("stalled", "STALLED (no echo for 5 s)"),
                            ("bad_conns", "got an echo of the wrong length or number"),
                        ] {
                            let n = r.get(key).unwrap_or(0.0);
                            if n != 0.0 {
                                trouble.push(format!("{run}: {n} connections {what}"));
                            }
                        }
                    }
                }
            }
        }
    }
    t.notes.insert(
        0,
        format!(
            "A server process per run (`{CHILD} --server READER --row queue`), its clients \
             another, as in the tables above. Each of {QUEUE_CONNS} client connections keeps \
             {QUEUE_PIPELINE} length-delimited frames in flight: it sends {QUEUE_PIPELINE}, then \
             one more per echo. The server reads each connection in a task of its own with the \
             reader under test and writes every frame back on the connection's write half (the \
             frames already decoded in one write), then sends every Nth frame of the whole \
             server (keep 1 in N), the frame itself, to one queue task, which holds it \
             {QUEUE_HOLD} s and drops it. After a warm-up of {} s (the queue full), the server \
             counts its echoes for {QUEUE_SECS} s, then reads `VmRSS`, the frames in the queue \
             and `ReadPool::global().stats().bytes_in_use` (ringmem (new) only). The readers' \
             runs alternate (FramedRead, ringmem (new), FramedRead, ...); a cell is the median \
             of its runs. Ring each is left out of this table to keep the main job short: \
             `--server 'ringmem (ring each)'` runs it by hand. The process's pool has a \
             budget of {POOL_MIB} MiB ({KEEPING_MIB} MiB where the row says so: room for what \
             FramedRead's server keeps), which bounds what ringmem (new) holds: where the frames \
             FramedRead's server holds would not fit in it, ringmem (new)'s readers wait for \
             room, or take frames that no gap between those held fits from the heap, paid for \
             with the gaps (its pool bytes in use near the budget; the pool's counts of both \
             are rows, counted from the server's start), and its rate is what the budget \
             allows for frames held {QUEUE_HOLD} s; FramedRead's memory has no bound.",
            QUEUE_HOLD + 0.5
        ),
    );
    let mut verdict = format!("**Queue:** {}", parts.join("; "));
    if trouble.is_empty() {
        verdict.push_str("; no connection stalled.");
    } else {
        verdict.push_str(&format!("; {}.", trouble.join("; ")));
    }
    t.notes.push(verdict);
    t
}

/// A queue case's name: its frames, what it keeps, and its pool's budget where that is
/// not [`POOL_MIB`].
fn queue_label(case: &QueueCase) -> String {
    let pool = if case.budget_mib == POOL_MIB {
        String::new()
    } else {
        format!(", {} MiB pool", case.budget_mib)
    };
    format!(
        "{}, keep 1 in {}{pool}",
        size_label(case.size),
        case.keep_every
    )
}

/// The runs of a queue case: each reader in turn, `case.reps` times.
fn queue_runs(case: QueueCase) -> QueueRuns {
    let extra: Vec<String> = [
        ("--size", case.size.to_string()),
        ("--keep-every", case.keep_every.to_string()),
        ("--hold", QUEUE_HOLD.to_string()),
        ("--pipeline", QUEUE_PIPELINE.to_string()),
        ("--secs", QUEUE_SECS.to_string()),
        ("--budget-mib", case.budget_mib.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    let label = format!(", {}", queue_label(&case));
    let mut runs: QueueRuns = QUEUE_READERS.iter().map(|_| Vec::new()).collect();
    for _ in 0..case.reps {
        for (col, &k) in QUEUE_READERS.iter().enumerate() {
            runs[col].push(server(k, "queue", QUEUE_CONNS, &label, &extra));
        }
    }
    runs
}

/// The scenario's tables; a child that cannot run leaves a note saying why.
pub fn run(cfg: &Config) -> Vec<Table> {
    // One run per cell whatever `--reps` says: memory figures of a server do not
    // spread as times do, and each run is a process pair of its own.
    let secs: f64 = if cfg.scale >= 1.0 { 4.0 } else { 2.0 };
    let per_reader = |row: &str, conns: usize, extra: &[String]| -> Runs {
        (0..READERS.len())
            .map(|k| server(k, row, conns, "", extra))
            .collect()
    };
    let idle: Vec<(usize, Runs)> = IDLE_CONNS
        .iter()
        .map(|&n| (n, per_reader("idle", n, &[])))
        .collect();
    let floors: Vec<Result<Record, String>> = IDLE_CONNS
        .iter()
        .map(|&n| server(READERS.len(), "idle", n, "", &[]))
        .collect();
    let active_runs: Vec<(usize, Runs)> = ACTIVE_CONNS
        .iter()
        .map(|&conns| {
            let extra = ["--active".into(), (conns / 10).to_string()];
            let extra = [&extra[..], &["--secs".into(), secs.to_string()]].concat();
            (conns, per_reader("active", conns, &extra))
        })
        .collect();
    let keep_runs = per_reader(
        "keep",
        KEEP_CONNS,
        &[
            "--active".into(),
            KEEP_CONNS.to_string(),
            "--secs".into(),
            secs.to_string(),
            "--max-frames".into(),
            KEEP_FRAMES.to_string(),
        ],
    );
    let queue: Vec<(QueueCase, QueueRuns)> = queue_cases(cfg)
        .into_iter()
        .map(|c| (c, queue_runs(c)))
        .collect();
    vec![
        idle_table(&idle, &floors),
        active_table(&active_runs, &floors, secs),
        keep_table(&keep_runs, secs),
        queue_table(&queue),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str = "idle\tringmem (ring each)\tconns=1000\tnofile=20000\tconnected=1000\t\
                        reached=1000\tbase_rss_kib=3000\tbase_vm_kib=200000\trss_kib=8000\t\
                        vm_kib=266000\tstalled=0";

    #[test]
    fn records_read_their_row_reader_and_fields() {
        let out = format!("# a header\n{IDLE}\nsome other line\n");
        let r = parse_records(&out).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((&r[0].row[..], r[0].reader), ("idle", 2));
        assert_eq!(r[0].get("reached"), Some(1000.0));
        assert_eq!(r[0].get("missing"), None);
        assert_eq!(per_conn(&r[0], "rss_kib", "base_rss_kib"), Some(5.0));
        assert_eq!(per_conn(&r[0], "vm_kib", "base_vm_kib"), Some(66.0));
    }

    #[test]
    fn a_record_it_cannot_read_is_an_error() {
        assert!(parse_records("idle\tsome other reader\tconns=1").is_err());
        assert!(parse_records("idle\tFramedRead\tconns").is_err());
        assert!(parse_records("keep\tFramedRead\tconns=many").is_err());
        assert!(parse_records("active").is_err());
    }

    #[test]
    fn the_floor_is_subtracted_per_connection() {
        let floor = "idle\tno reader\tconns=1000\tconnected=1000\theld=1000\t\
                     base_rss_kib=3000\trss_kib=4000\tbase_heap_kib=0\theap_kib=500";
        let floor = parse_records(floor).unwrap().pop().unwrap();
        assert_eq!(floor.reader, READERS.len());
        let reader = IDLE.replace("stalled=0", "base_heap_kib=0\theap_kib=1500");
        let t = idle_table(&[(1000, runs(&[&reader]))], &[Ok(floor)]);
        let cell = |what: &str| {
            let row = t.rows.iter().find(|r| r.params[1] == what).expect(what);
            row.cells[0].unwrap().median
        };
        // (8000 - 3000) / 1000 less (4000 - 3000) / 1000 KiB; 1 KiB of heap less 0.5.
        assert_eq!(
            cell("resident set per connection over no reader's (KiB)"),
            4.0
        );
        assert_eq!(cell("heap per connection over no reader's (bytes)"), 1024.0);
        assert!(t
            .notes
            .iter()
            .any(|n| n.contains("no reader, 1000 connections: 1.00 KiB")));
    }

    fn runs(records: &[&str]) -> Runs {
        records
            .iter()
            .map(|l| Ok(parse_records(l).unwrap().pop().unwrap()))
            .collect()
    }

    #[test]
    fn the_idle_verdict_gives_ratios_against_framed_read() {
        let lines: Vec<String> = READERS
            .iter()
            .zip([10000, 8000, 36000])
            .map(|(r, rss)| {
                IDLE.replace("ringmem (ring each)", r)
                    .replace("\trss_kib=8000", &format!("\trss_kib={rss}"))
            })
            .collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let t = idle_table(&[(1000, runs(&refs))], &[]);
        let verdict = t.notes.last().unwrap();
        // (8000 - 3000) / (10000 - 3000), (36000 - 3000) / (10000 - 3000).
        assert!(
            verdict.contains("ringmem (new) 0.71× FramedRead's, ringmem (ring each) 4.71×"),
            "{verdict}"
        );
        assert_eq!(t.rows[0].cells[1].unwrap().median, 5.0);
        assert!(t.render_plain().contains("resident set per connection"));
    }

    /// The idle table of one run per reader whose `vm_kib` are `vms` (FramedRead,
    /// ringmem (new), ringmem (ring each)).
    fn idle_with_vm(vms: [u64; 3]) -> Table {
        let lines: Vec<String> = (READERS.iter().zip(vms))
            .map(|(r, vm)| {
                IDLE.replace("ringmem (ring each)", r)
                    .replace("\tvm_kib=266000", &format!("\tvm_kib={vm}"))
            })
            .collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        idle_table(&[(1000, runs(&refs))], &[])
    }

    #[test]
    fn a_figure_of_zero_for_framed_read_gives_the_figures() {
        let t = idle_with_vm([200000, 265536, 1224000]);
        let verdict = t.notes.last().unwrap();
        assert!(
            verdict.contains(
                "(KiB): ringmem (new) n/a, ringmem (ring each) n/a (figures: FramedRead 0, \
                 ringmem (new) 65.536, ringmem (ring each) 1024);"
            ),
            "{verdict}"
        );
        // 265536 / 200000, 1224000 / 200000: the whole process's, with no baseline.
        assert!(
            verdict.contains(
                "whole-process address space per connection: ringmem (new) 1.33× \
                 FramedRead's, ringmem (ring each) 6.12×."
            ),
            "{verdict}"
        );
        let whole = (t.rows.iter())
            .find(|r| r.params[1] == "address space per connection, whole process (KiB)")
            .expect("the whole-process row");
        assert_eq!(whole.cells[0].unwrap().median, 200.0);
    }

    #[test]
    fn a_figure_near_zero_or_below_for_framed_read_gives_no_ratio() {
        // Address space per connection after the baseline: FramedRead's just below 0
        // (the "-1170.43×"), then just above it (a quotient in the thousands).
        for framed_vm in [199_944, 200_006] {
            let t = idle_with_vm([framed_vm, 265536, 1224000]);
            let verdict = t.notes.last().unwrap();
            assert!(
                verdict.contains("(KiB): ringmem (new) n/a, ringmem (ring each) n/a (figures:"),
                "{verdict}"
            );
            for x in verdict.split_whitespace().filter(|w| w.contains('×')) {
                assert!(
                    !x.starts_with('-') && !x.contains("inf"),
                    "{x} in {verdict}"
                );
            }
        }
    }

    #[test]
    fn fewer_connections_reached_are_said_in_the_table() {
        let short = IDLE.replace("reached=1000", "reached=900");
        let t = idle_table(&[(1000, runs(&[&short, IDLE, IDLE]))], &[]);
        assert_eq!(t.rows[0].params[0], "1000 (fewest reached: 900)");
        assert!(t.notes.iter().any(|n| n.contains("900 of 1000")));
    }

    #[test]
    fn the_queue_verdict_gives_medians_pairs_and_stalls() {
        let queue = |r: &str, fps: u32, rss: u32, stalled: u8| {
            let line = format!(
                "queue\t{r}\tconns=100\tfps={fps}\tkept=1000\tpool_in_use=-1\t\
                 base_rss_kib=4000\trss_kib={rss}\tstalled={stalled}\tbad_conns=0"
            );
            parse_records(&line).map(|mut r| r.pop().unwrap())
        };
        let runs: QueueRuns = vec![
            vec![
                queue(READERS[0], 1000, 14240, 0),
                queue(READERS[0], 3000, 14240, 0),
            ],
            vec![
                queue(READERS[1], 500, 9120, 0),
                queue(READERS[1], 900, 9120, 3),
            ],
        ];
        let case = QueueCase {
            size: 4096,
            keep_every: 10,
            reps: 2,
            budget_mib: POOL_MIB,
        };
        let t = queue_table(&[(case, runs)]);
        let verdict = t.notes.last().unwrap();
        // Medians 700 / 2000; pairs 500 / 1000 and 900 / 3000.
        assert!(
            verdict.contains(
                "4 KiB, keep 1 in 10, ringmem (new) over FramedRead: frames per second 0.35× \
                 (pairs of runs: 0.50×, 0.30×), resident set 0.64×"
            ),
            "{verdict}"
        );
        // (9120 - 4000) / 1000 over (14240 - 4000) / 1000.
        assert!(verdict.contains("per frame held 0.50×"), "{verdict}");
        assert!(
            verdict.contains("ringmem (new), run 2: 3 connections STALLED"),
            "{verdict}"
        );
        assert_eq!(t.rows[0].params[0], "4 KiB, keep 1 in 10");
        assert_eq!(t.rows[0].cells[0].unwrap().median, 2000.0);
        // The pool row: no figure for FramedRead (-1 is "not a pool").
        assert!(t.rows[4].cells.iter().all(Option::is_none));
    }

    #[test]
    fn a_stalled_keep_run_is_reported() {
        let keep = |r: &str, stalled: u8, pool: i64| {
            format!(
                "keep\t{r}\tconns=4\tactive=4\tsent=-1\tstalled={stalled}\treceived=5000\t\
                 kept=5\tkept_bytes=500\tpool_in_use={pool}\tbase_rss_kib=3000\trss_kib=3100"
            )
        };
        let lines = [
            keep(READERS[0], 0, -1),
            keep(READERS[1], 0, 50_000),
            keep(READERS[2], 1, -1),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let t = keep_table(&runs(&refs), 2.0);
        let verdict = t.notes.last().unwrap();
        assert!(
            verdict.contains("ringmem (ring each) STALLED after 5000 of ? frames"),
            "{verdict}"
        );
        assert!(
            verdict.contains("the pool holds 100× the kept bytes"),
            "{verdict}"
        );
        let sent = &t.rows[0];
        assert!(sent.cells.iter().all(Option::is_none));
        // 590 / 500: a ratio near 1 keeps its decimal.
        let near = lines.map(|l| l.replace("pool_in_use=50000", "pool_in_use=590"));
        let refs: Vec<&str> = near.iter().map(String::as_str).collect();
        let t = keep_table(&runs(&refs), 2.0);
        let verdict = t.notes.last().unwrap();
        assert!(
            verdict.contains("the pool holds 1.2× the kept bytes"),
            "{verdict}"
        );
    }
}
