//! The `framed` scenario (issue 23): tokio_util's `FramedRead<_, LengthDelimitedCodec>`
//! over `BytesMut` against ringmem's `AsyncFramedReader`, on loopback TCP. The
//! measuring is done by the `ringmem-bench-framed` child (`framed.rs`, feature
//! `framed`): it needs tokio, and a counting global allocator that this process must
//! not have. This side runs it, reads its records and makes the tables: frames per
//! second with heap allocations per frame, latency per frame, and the resident set
//! after a spike of 16 MiB frames (each receiver in a child process of its own).

use std::fmt::Write as _;
use std::process::Command;

use crate::buffers::{child_exe, prepare_child};
use crate::harness::{mib_stats, Config, Row, Stats, Table, Unit};
use crate::ratio::{fmt_ratio, ratio};

/// The child binary.
const CHILD: &str = "ringmem-bench-framed";

/// The child's reader names, in column order (the baseline first).
const READERS: [&str; 3] = [
    "tokio_util FramedRead (BytesMut)",
    "ringmem AsyncFramedReader",
    "ringmem UringFramedReader (io_uring)",
];

/// The latency quantiles of the records, in their order.
const QUANTILES: [&str; 3] = ["p50", "p99", "p99.9"];

/// Frames of 16 MiB in the spike.
const SPIKE_FRAMES: usize = 8;

/// Builds the child if `cargo run` did not (see [`prepare_child`]); `Err` says why the
/// framed tables will be empty.
pub fn prepare() -> Result<(), String> {
    prepare_child(CHILD, &["framed"], "the framed tables")
}

/// Runs the child with `args`: its stdout, or why it gave none.
fn child(args: &[String]) -> Result<String, String> {
    let exe = child_exe(CHILD).map_err(|e| format!("cannot locate {CHILD}: {e}"))?;
    let out = Command::new(&exe)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!(
            "{CHILD} {} failed ({}): {last}",
            args.join(" "),
            out.status
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{CHILD} printed no text: {e}"))
}

/// Median, min and max of `v` (not empty), with `count` as its count column.
fn stats(v: &mut [f64], count: u64) -> Stats {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Stats {
        median,
        min: v[0],
        max: v[n - 1],
        waits: count,
        restarts: 0,
        cpu: None,
    }
}

/// One reader's runs of one cell.
#[derive(Default)]
struct Runs {
    /// Seconds per frame.
    per_frame: Vec<f64>,
    /// Heap allocations per 1,000 frames.
    allocs: Vec<f64>,
    /// Seconds, per quantile, at full load (`cell` records) and paced (`paced`).
    latency: [[Vec<f64>; 3]; 2],
}

/// A run's quantile above this many milliseconds is counted in the latency table: at
/// `¼` load, where a reader keeps up, such a tail is a stall of the run (the machine's
/// or the reader's), and the count says how many runs had one.
const STALL_MS: u32 = 1;

/// The loads of the latency table, in the records' order: the sender as fast as the
/// receiver takes frames, and paced at a quarter of the slower reader's rate.
const LOADS: [(&str, &str); 2] = [("cell\t", "full"), ("paced\t", "¼")];

/// A cell: frame sizes, connections, and the runs of each reader.
struct Cell {
    sizes: String,
    conns: String,
    runs: [Runs; 3],
}

/// Reads the child's `cell` records, grouped by cell in their order.
fn parse_cells(out: &str) -> Result<Vec<Cell>, String> {
    let mut cells: Vec<Cell> = Vec::new();
    for line in out.lines() {
        let Some(load) = LOADS.iter().position(|(tag, _)| line.starts_with(tag)) else {
            continue;
        };
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || format!("{CHILD} printed a record this bench cannot read: {line}");
        let [_, sizes, conns, reader, frames, secs, allocs, p50, p99, p999] = f[..] else {
            return Err(bad());
        };
        let reader = READERS.iter().position(|r| *r == reader).ok_or_else(bad)?;
        let num = |s: &str| s.parse::<f64>().map_err(|_| bad());
        let frames = num(frames)?;
        if frames <= 0.0 {
            return Err(bad());
        }
        if !cells
            .last()
            .is_some_and(|c| c.sizes == sizes && c.conns == conns)
        {
            cells.push(Cell {
                sizes: sizes.into(),
                conns: conns.into(),
                runs: Default::default(),
            });
        }
        let runs = &mut cells.last_mut().expect("pushed above").runs[reader];
        if load == 0 {
            runs.per_frame.push(num(secs)? / frames);
            runs.allocs.push(num(allocs)? * 1000.0 / frames);
        }
        for (q, v) in [p50, p99, p999].into_iter().enumerate() {
            runs.latency[load][q].push(num(v)? * 1e-9);
        }
    }
    Ok(cells)
}

/// Frames per second with allocations per frame, and latency per frame.
fn throughput_tables(cfg: &Config, mib: usize, cells: &mut [Cell]) -> [Table; 2] {
    let columns: Vec<String> = READERS.iter().map(|r| r.to_string()).collect();
    let mut rate = Table::new(
        "framed reading on loopback TCP: frames per second",
        &["frames", "conns"],
        &columns,
        Unit::Mops,
    );
    rate.wait_label = "heap allocations per 1,000 frames".into();
    rate.wait_columns = vec![0, 1, 2];
    let mut latency = Table::new(
        "framed reading on loopback TCP: latency per frame (sender's stamp to reader's yield)",
        &["frames", "conns", "load", "quantile"],
        &columns,
        Unit::Auto,
    );
    latency.wait_label = format!("runs above {STALL_MS} ms");
    latency.wait_columns = vec![0, 1, 2];
    for cell in cells.iter_mut() {
        let params = vec![cell.sizes.clone(), cell.conns.clone()];
        let cells = cell
            .runs
            .iter_mut()
            .map(|r| {
                if r.per_frame.is_empty() {
                    return None;
                }
                let allocs = stats(&mut r.allocs, 0).median.round() as u64;
                Some(stats(&mut r.per_frame, allocs))
            })
            .collect();
        rate.rows.push(Row { params, cells });
        for (load, (_, load_name)) in LOADS.iter().enumerate() {
            for (q, name) in QUANTILES.iter().enumerate() {
                let cells = cell
                    .runs
                    .iter_mut()
                    .map(|r| {
                        let v = &mut r.latency[load][q];
                        let stalled = v.iter().filter(|&&t| t > STALL_MS as f64 * 1e-3).count();
                        (!v.is_empty()).then(|| stats(v, stalled as u64))
                    })
                    .collect();
                latency.rows.push(Row {
                    params: vec![
                        cell.sizes.clone(),
                        cell.conns.clone(),
                        load_name.to_string(),
                        name.to_string(),
                    ],
                    cells,
                });
            }
        }
    }
    rate.notes = vec![
        format!(
            "The readers run in the `{CHILD}` child process (built with the bench's `framed` feature). Per connection, a tokio \
             task sends {mib} MiB of length-delimited frames (4-byte big-endian headers) over loopback TCP in 64 KiB writes, \
             and a task receives them with the column's reader in its default configuration: `FramedRead::new(conn, \
             LengthDelimitedCodec::new())`; `AsyncFramedReader::new(conn, LengthDelimited::new())` (it reads into the \
             process's pool, `ReadPool::global()`: 64 MiB shared by every reader; 64 KiB reads); \
             `UringGroup::new(16 MiB).framed(&conn, LengthDelimited::new())` (io_uring multishot receives into 32 provided \
             buffers of 64 KiB shared out over 4 instances (two per worker), consumed incrementally; a group per run; left out where the kernel refuses io_uring). The \
             runtime has 2 worker threads. `mixed`: 70 % 64 B, 25 % 1 KiB, 5 % 16 KiB frames."
        ),
        format!(
            "Frames per second: all connections' frames over the time from the first write to the last frame received; \
             median of {} runs (min–max), the readers interleaved. Heap allocations: counted by the child's global \
             allocator over the whole process in the same window (the runtime's spawns and the connections count for both \
             readers), per 1,000 frames, median of the runs.",
            cfg.reps
        ),
    ];
    latency.notes = vec![
        "Latency: before each 64 KiB write, the sender puts the time (nanoseconds since one `Instant` of the child) into \
         the first 8 payload bytes of every frame that starts in it; the receiver subtracts that from the time the reader \
         yields the frame.".into(),
        "Load `full`: the runs of the frames-per-second table, where the sender never waits for the receiver. Most of \
         their latency is the frame's wait behind earlier frames in the socket buffers, and the kernel sizes those: it \
         grows a connection's receive buffer for a reader that takes more per read, so a faster reader can see a longer \
         queue. Load `¼`: the same frames, offered at a quarter of the slower reader's median frames per second of the \
         `full` runs (split evenly between the connections; the sender sleeps a millisecond at a time until the bytes \
         are due), so both readers keep up and the latency is mostly the reader's own."
            .into(),
        format!(
            "Quantiles over all frames of a run (up to 1,048,576 per connection); median of the {} runs' quantiles (min–max), \
             the readers interleaved; `runs above {STALL_MS} ms`: how many of those runs' quantiles were longer. At `¼` \
             load a tail that long is a stall, and stalls come and go with the machine's other work: compare their counts, \
             not only the medians.",
            cfg.reps
        ),
    ];
    [rate, latency]
}

/// A value `key <number>` from a child's output.
fn value(out: &str, key: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))?
        .trim()
        .parse()
        .ok()
}

/// The spike: each receiver in a child process of its own.
fn spike_table(cfg: &Config) -> Result<Table, String> {
    let small = if cfg.scale >= 1.0 {
        128 << 10
    } else {
        32 << 10
    };
    let names: Vec<String> = child(&["--spike-readers".into()])?
        .lines()
        .map(String::from)
        .collect();
    let outs: Vec<Result<String, String>> = (0..names.len())
        .map(|k| {
            crate::progress::case(&format!("spike: {}", names[k]));
            child(&[
                "--spike".into(),
                k.to_string(),
                "--big".into(),
                SPIKE_FRAMES.to_string(),
                "--small".into(),
                small.to_string(),
            ])
        })
        .collect();
    let mut t = Table::new(
        format!("framed reading: {SPIKE_FRAMES} frames of 16 MiB, then {small} frames of 1 KiB"),
        &["MiB"],
        &names,
        Unit::Mib,
    );
    for (label, key) in [
        ("resident set before the spike (`VmRSS`)", "before"),
        ("peak resident set (`VmHWM`)", "peak"),
        ("resident set after the small frames (`VmRSS`)", "after"),
        (
            "ring capacity at the start (`Ring::capacity`)",
            "ring_start",
        ),
        ("ring capacity at the end", "ring_end"),
    ] {
        let cells = outs
            .iter()
            .map(|o| value(o.as_deref().ok()?, key).map(mib_stats))
            .collect();
        t.rows.push(Row {
            params: vec![label.into()],
            cells,
        });
    }
    t.notes = vec![
        format!(
            "Each column is a child process (`{CHILD} --spike K`) with one loopback connection: the sender writes \
             {SPIKE_FRAMES} frames of 16 MiB, then {small} frames of 1 KiB, from one reused 64 KiB buffer; the receiver \
             drops each frame as soon as it has it. The resident set after the small frames is read with the reader still \
             alive; the process's own baseline (runtime, binary) is the first row. Both readers accept 16 MiB frames \
             (`max_frame_length(16 MiB)`; the default is 8 MiB)."
        ),
        "ringmem: `Ring::builder().capacity(1 MiB).when_full(WhenFull::Grow)` (the size of the ring \
         `AsyncFramedReader::new` made per reader before it read into the process's pool; a frame larger than a block \
         gets a block of its own size), `spare_blocks` at its default (1); `then trim()`: the same, with `Ring::trim()` \
         called after the small frames; fixed: `Ring::new(20 MiB)`, room for one 16 MiB frame and its reads."
            .into(),
    ];
    for (k, o) in outs.iter().enumerate() {
        if let Err(e) = o {
            t.notes.push(format!("{}: not measured: {e}", names[k]));
        }
    }
    t.notes.push(spike_verdict(&names, &outs));
    Ok(t)
}

/// The spike in words: per column, where its resident set ended. A ring meets issue 23's
/// bar when what it holds over the baseline after the small frames is within 1.5× of
/// the capacity it was built with; the `BytesMut` reader either kept its peak or gave
/// most of it back.
fn spike_verdict(names: &[String], outs: &[Result<String, String>]) -> String {
    let mut s = String::from("**After the spike:** ");
    let mut parts = Vec::new();
    for (name, out) in names.iter().zip(outs) {
        let Ok(out) = out else { continue };
        let (Some(before), Some(peak), Some(after)) = (
            value(out, "before"),
            value(out, "peak"),
            value(out, "after"),
        ) else {
            continue;
        };
        let part = match value(out, "ring_start") {
            Some(ring) => {
                let kept = after - before;
                let within = kept <= 1.5 * ring;
                format!(
                    "{name} {} ({kept:.1} MiB over the baseline after the small frames, {} its {ring:.0} MiB ring; peak {peak:.1} MiB)",
                    if within {
                        "within 1.5× of its ring"
                    } else {
                        "not within 1.5× of its ring"
                    },
                    ratio(kept, ring).map_or_else(|| fmt_ratio(None), |x| format!("{x:.1}×"))
                )
            }
            None => format!(
                "{name} {} ({after:.1} MiB after the small frames, peak {peak:.1} MiB)",
                if after - before > 0.5 * (peak - before) {
                    "kept its peak"
                } else {
                    "gave most of its peak back"
                }
            ),
        };
        parts.push(part);
    }
    if parts.is_empty() {
        s.push_str("nothing was measured.");
    } else {
        let _ = write!(s, "{}.", parts.join("; "));
    }
    s
}

/// The cases [`run`] runs: the measuring child, then with peak RSS one child per
/// spike reader (the child names them; a different count only moves the bar's end).
pub fn case_count(cfg: &Config) -> usize {
    1 + if cfg.rss { SPIKE_READERS } else { 0 }
}

/// The spike readers `ringmem-bench-framed --spike-readers` names.
const SPIKE_READERS: usize = 4;

/// The scenario's tables; a child that cannot run leaves a table saying why.
pub fn run(cfg: &Config) -> Vec<Table> {
    // Wire bytes per connection and run: a few seconds in all in `--quick`.
    let mib = if cfg.scale >= 1.0 { 64 } else { 32 };
    crate::progress::case("framed: frames per second and latency");
    let mut tables = Vec::new();
    let measured = child(&[
        "--mib".into(),
        mib.to_string(),
        "--reps".into(),
        cfg.reps.to_string(),
    ])
    .and_then(|out| parse_cells(&out));
    match measured {
        Ok(mut cells) => tables.extend(throughput_tables(cfg, mib, &mut cells)),
        Err(e) => tables.push(failed("framed reading on loopback TCP", e)),
    }
    if cfg.rss {
        match spike_table(cfg) {
            Ok(t) => tables.push(t),
            Err(e) => tables.push(failed("framed reading: a spike of 16 MiB frames", e)),
        }
    }
    tables
}

/// A table with no rows and a note saying why.
fn failed(title: &str, why: String) -> Table {
    let mut t = Table::new(title, &["frames"], &[], Unit::Mib);
    t.notes = vec![format!("Not measured: {why}.")];
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        sizes: &str,
        conns: u32,
        reader: usize,
        frames: u32,
        secs: f64,
        allocs: u32,
    ) -> String {
        format!(
            "cell\t{sizes}\t{conns}\t{}\t{frames}\t{secs}\t{allocs}\t1000\t2000\t3000\n",
            READERS[reader]
        )
    }

    #[test]
    fn records_group_by_cell_per_reader() {
        let out = format!(
            "# header\n{}{}{}{}",
            record("64 B", 1, 0, 1000, 0.5, 2000),
            record("64 B", 1, 1, 1000, 0.25, 0),
            record("64 B", 1, 1, 1000, 0.5, 4),
            record("64 B", 4, 0, 4000, 1.0, 0),
        );
        let cells = parse_cells(&out).unwrap();
        assert_eq!(cells.len(), 2);
        assert_eq!((&cells[0].sizes[..], &cells[0].conns[..]), ("64 B", "1"));
        assert_eq!(cells[0].runs[0].per_frame, [0.5 / 1000.0]);
        assert_eq!(cells[0].runs[0].allocs, [2000.0]);
        assert_eq!(cells[0].runs[1].per_frame.len(), 2);
        assert_eq!(cells[0].runs[1].latency[0][2], [3000e-9, 3000e-9]);
        assert!(cells[0].runs[1].latency[1][2].is_empty());
        assert!(cells[1].runs[1].per_frame.is_empty());
    }

    #[test]
    fn paced_records_add_latency_not_throughput() {
        let paced = record("64 B", 1, 1, 1000, 9.0, 7).replacen("cell", "paced", 1);
        let out = format!("{}{paced}", record("64 B", 1, 1, 1000, 0.5, 0));
        let cells = parse_cells(&out).unwrap();
        assert_eq!(cells.len(), 1);
        let runs = &cells[0].runs[1];
        assert_eq!((runs.per_frame.len(), runs.allocs.len()), (1, 1));
        assert_eq!(runs.latency[0][0], runs.latency[1][0]);
        assert_eq!((runs.latency[0][0].len(), runs.latency[1][2].len()), (1, 1));
    }

    #[test]
    fn the_latency_table_counts_the_runs_above_a_millisecond() {
        // p99.9 of 3 µs, 3 µs and 2 ms for ringmem at ¼ load; tokio_util's runs at 3 µs.
        let paced = |reader, p999: u32| {
            record("64 B", 1, reader, 1000, 1.0, 0)
                .replacen("cell", "paced", 1)
                .replace("\t3000\n", &format!("\t{p999}\n"))
        };
        let mut out = record("64 B", 1, 0, 1000, 1.0, 0) + &record("64 B", 1, 1, 1000, 1.0, 0);
        for p999 in [3000, 3000, 2_000_000] {
            out += &paced(0, 3000);
            out += &paced(1, p999);
        }
        let cfg = Config {
            scale: 0.25,
            reps: 3,
            mode: "quick",
            cores: 2,
            rss: false,
            procs: 0,
        };
        let [_, latency] = throughput_tables(&cfg, 32, &mut parse_cells(&out).unwrap());
        let row = |load: &str, q: &str| {
            let row = latency
                .rows
                .iter()
                .find(|r| r.params[2] == load && r.params[3] == q);
            // The io_uring reader's column has no runs here.
            (row.unwrap().cells.iter())
                .map(|c| c.as_ref().map(|c| c.waits))
                .collect::<Vec<_>>()
        };
        assert_eq!(row("¼", "p99.9"), [Some(0), Some(1), None]);
        assert_eq!(row("¼", "p50"), [Some(0), Some(0), None]);
        assert_eq!(row("full", "p99.9"), [Some(0), Some(0), None]);
        assert!(latency.render().contains("runs above 1 ms"));
    }

    #[test]
    fn a_record_it_cannot_read_is_an_error() {
        assert!(parse_cells("cell\t64 B\t1\tsome other reader\t1\t1\t0\t1\t1\t1").is_err());
        assert!(parse_cells(&record("64 B", 1, 0, 0, 1.0, 0)).is_err());
        assert!(parse_cells("cell\t64 B\t1").is_err());
    }

    #[test]
    fn the_verdict_holds_a_ring_to_one_and_a_half_times_its_size() {
        let names = ["BytesMut".to_string(), "ring".to_string()];
        let spike = |after: f64| {
            vec![
                Ok(format!("before 3\npeak 19\nafter {after}\n")),
                Ok(format!("before 3\npeak 36\nafter {after}\nring_start 1\n")),
            ]
        };
        let back = spike_verdict(&names, &spike(4.0));
        assert!(
            back.contains("BytesMut gave most of its peak back"),
            "{back}"
        );
        assert!(back.contains("ring within 1.5× of its ring"), "{back}");
        let kept = spike_verdict(&names, &spike(19.0));
        assert!(kept.contains("BytesMut kept its peak"), "{kept}");
        assert!(kept.contains("ring not within 1.5× of its ring"), "{kept}");
    }
}
