//! The memory tables of the `server` scenario (issue 56; see `server_scenario.rs`):
//! idle clients beside 50 active ones, a store of a million keys, and a burst of large
//! values deleted again, each in a fresh server per column.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::{thousands, Config, Table};
use crate::ratio::{fmt_ratio, ratio};
use crate::resp_client::{self, command, expect_ok, Reply};
use crate::resp_servers::{self, Bench};
use crate::server_scenario::{
    bar, cells, counts, failures, figures_table, nofile_limit, row, size_label, Cells, Lineup,
    Runs, BENCH_TIMEOUT, CLIENTS, COMPARED, FRAMED, RINGMEM, ROLES,
};

/// The idle rows: connected clients, and the active ones' tests.
pub const IDLE_CLIENTS: [usize; 2] = [1_000, 10_000];
const IDLE_TESTS: &str = "get,set";

/// The store: keys (`key:%08d`) and bytes per value.
const STORE_KEYS: usize = 1_000_000;
const STORE_VALUE: usize = 100;

/// The burst: values of [`BURST_SIZE`] (256 MiB in all), then the wait for the memory
/// to go back (ringmem returns a pool's free pages on a sweeper's tick).
const BURST_VALUES: usize = 4096;
const BURST_SIZE: usize = 64 << 10;
const BURST_WAIT: Duration = Duration::from_secs(3);
/// Keys per `DEL` of the burst.
const DEL_BATCH: usize = 256;

/// The bars of issue 56: ringmem's RSS over FramedRead's with the most idle clients
/// and with the store; ringmem's RSS after the burst over before it.
const IDLE_BAR: f64 = 0.5;
const STORE_BAR: f64 = 1.5;
const BURST_BAR: f64 = 2.0;

/// The idle clients' child must have connected within this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// redis-benchmark's `-n` for the idle rows.
fn idle_requests(cfg: &Config) -> usize {
    if cfg.scale >= 1.0 {
        20_000
    } else {
        10_000
    }
}

/// One idle run: a server, `count` idle clients, 50 active.
#[derive(Debug)]
pub struct IdleRun {
    connected: f64,
    limit: f64,
    child_error: Option<String>,
    lines: Vec<resp_servers::BenchLine>,
    rss_start: Option<f64>,
    rss_idle: Option<f64>,
    rss_after: Option<f64>,
    hwm: Option<f64>,
}

/// Runs the idle row of `count` clients against `role`'s server: a fresh server, the
/// idle clients' child, then redis-benchmark's active clients beside them.
pub fn idle_run(
    cfg: &Config,
    lineup: &Lineup,
    role: usize,
    count: usize,
) -> Result<IdleRun, String> {
    let server = lineup.start(role)?;
    let rss_start = server.rss_mib();
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let mut child = Command::new(exe)
        .args([
            resp_client::IDLE_FLAG,
            &server.port.to_string(),
            &count.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the idle clients: {e}"))?;
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let mut run = IdleRun {
        connected: 0.0,
        limit: 0.0,
        child_error: None,
        lines: Vec::new(),
        rss_start,
        rss_idle: None,
        rss_after: None,
        hwm: None,
    };
    let result = (|| {
        let first = rx
            .recv_timeout(IDLE_TIMEOUT)
            .map_err(|_| "the idle clients' child printed nothing".to_string())?;
        let mut f = first.split_whitespace();
        let mut num = |key: &str| -> Option<f64> {
            (f.next()? == key).then_some(())?;
            f.next()?.parse().ok()
        };
        run.connected = num("connected").ok_or("the idle clients' child: no count")?;
        run.limit = num("limit").unwrap_or(0.0);
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            run.child_error = l.strip_prefix("error ").map(String::from);
        }
        // The server settles after its last accept.
        std::thread::sleep(Duration::from_millis(500));
        run.rss_idle = server.rss_mib();
        let bench = Bench {
            tests: IDLE_TESTS,
            clients: CLIENTS,
            requests: idle_requests(cfg),
            pipeline: 1,
            size: 3,
        };
        run.lines = bench.run(server.port, BENCH_TIMEOUT)?;
        run.rss_after = server.rss_mib();
        run.hwm = server.hwm_mib();
        Ok::<(), String>(())
    })();
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    result.map(|()| run)
}

/// The figures of an idle row, each with its cells.
pub fn idle_figures(runs: &Runs<IdleRun>) -> Vec<(String, Cells)> {
    let mut rows: Vec<(String, Cells)> = ["SET", "GET"]
        .into_iter()
        .map(|test| {
            let rps = cells(runs, |r| {
                Some(r.lines.iter().find(|l| l.test == test)?.rps / 1e3)
            });
            (format!("{test} (k req/s)"), rps)
        })
        .collect();
    let per_client =
        |r: &IdleRun| Some((r.rss_after? - r.rss_start?) * 1024.0 / r.connected.max(1.0));
    rows.extend([
        ("RSS at start (MiB)".into(), cells(runs, |r| r.rss_start)),
        (
            "RSS, clients idle (MiB)".into(),
            cells(runs, |r| r.rss_idle),
        ),
        (
            "RSS after the load (MiB)".into(),
            cells(runs, |r| r.rss_after),
        ),
        ("RSS per client (KiB)".into(), cells(runs, per_client)),
        ("peak RSS (MiB)".into(), cells(runs, |r| r.hwm)),
    ]);
    rows
}

/// The idle table: each count of idle clients, a server per role.
pub fn idle_table(
    cfg: &Config,
    lineup: &Lineup,
    runs: &[(usize, Runs<IdleRun>)],
    load: &str,
) -> Table {
    let mut t = figures_table(
        format!(
            "server: idle clients with {CLIENTS} active (redis-benchmark -t {IDLE_TESTS} -P 1){}",
            lineup.title
        ),
        &["clients", "figure"],
    );
    let mut verdict = None;
    for (count, runs) in runs {
        let reached = cells(runs, |r| Some(r.connected));
        let fewest = reached
            .iter()
            .flatten()
            .map(|s| s.min)
            .fold(f64::INFINITY, f64::min);
        let label = if fewest < *count as f64 {
            format!("{count} (fewest reached: {fewest:.0})")
        } else {
            count.to_string()
        };
        for (what, c) in idle_figures(runs) {
            t.rows.push(row(vec![label.clone(), what], c));
        }
        t.rows.push(counts(
            vec![label.clone(), "idle clients connected".into()],
            reached,
        ));
        for (k, runs) in runs.iter().enumerate().take(COMPARED) {
            for r in runs.iter().flatten() {
                if r.connected < *count as f64 {
                    t.notes.push(format!(
                        "{}: {} of {count} idle clients connected (descriptor limit of the \
                         clients' process {}{}).",
                        ROLES[k],
                        r.connected,
                        r.limit,
                        r.child_error
                            .as_ref()
                            .map_or(String::new(), |e| format!("; {e}"))
                    ));
                }
            }
        }
        t.notes.extend(failures(runs));
        if *count == IDLE_CLIENTS[IDLE_CLIENTS.len() - 1] {
            let c = cells(runs, |r| r.rss_after);
            verdict = Some(match (c[RINGMEM], c[FRAMED]) {
                (Some(a), Some(b)) => {
                    let x = ratio(a.median, b.median);
                    bar(
                        x.map(|x| x <= IDLE_BAR),
                        &format!(
                            "with {} clients, ringmem's RSS at most {IDLE_BAR}× FramedRead's",
                            thousands(*count)
                        ),
                        &format!(
                            "{:.1} MiB against {:.1} MiB: {}",
                            a.median,
                            b.median,
                            fmt_ratio(x)
                        ),
                    )
                }
                _ => bar(
                    None,
                    "ringmem's RSS at most half FramedRead's",
                    "a server was not measured",
                ),
            });
        }
    }
    t.notes.insert(
        0,
        format!(
            "A fresh server per cell (one run each). A child process (`ringmem-bench {} PORT \
             COUNT`, its descriptor limit raised to its hard limit) opens the idle clients, \
             {} at a time, each sending an inline `PING` and reading its `PONG`, then holds \
             them open; then `redis-benchmark -t {IDLE_TESTS} -c {CLIENTS} -P 1 -d 3 -n {}` \
             runs beside them. RSS: the server's `VmRSS` before the clients, with them idle \
             (0.5 s after the last connected), and after redis-benchmark (the idle clients \
             still connected); per client: after the load less at start, over the idle clients \
             connected; peak: `VmHWM`. The servers inherit this process's descriptor \
             limit, raised to its hard limit ({}); redis-server runs with `--maxclients \
             10100`.",
            resp_client::IDLE_FLAG,
            resp_client::IDLE_BATCH,
            idle_requests(cfg),
            nofile_limit(),
        ),
    );
    t.notes.extend(lineup.notes.iter().cloned());
    t.notes.push(load.to_string());
    if let Some(v) = verdict {
        t.notes.push(format!("**Bar (issue 56):** {v}."));
    }
    t
}

/// The store of [`STORE_KEYS`] keys in one server.
#[derive(Debug)]
pub struct StoreRun {
    secs: f64,
    rss_start: Option<f64>,
    rss: Option<f64>,
    hwm: Option<f64>,
    keys: Option<f64>,
    reader_waits: Option<f64>,
    pool_bytes: Option<f64>,
    pool_budget: Option<f64>,
}

/// `STORE_VALUE` bytes of a value, the same for every key.
fn store_value() -> Vec<u8> {
    (0..STORE_VALUE)
        .map(|i| b'a' + (i * 7 % 26) as u8)
        .collect()
}

/// Loads the store into a fresh server of `role` and reads its memory and `INFO`.
pub fn store_run(lineup: &Lineup, role: usize) -> Result<StoreRun, String> {
    let server = lineup.start(role)?;
    let rss_start = server.rss_mib();
    let value = store_value();
    let took = resp_client::pipeline(
        server.port,
        STORE_KEYS,
        move |i, buf| {
            let key = format!("key:{i:08}");
            command(buf, &[b"SET", key.as_bytes(), &value]);
        },
        expect_ok,
    )?;
    // A moment for the server's last replies and frees.
    std::thread::sleep(Duration::from_millis(500));
    let info = resp_client::info(server.port)?;
    Ok(StoreRun {
        secs: took.as_secs_f64(),
        rss_start,
        rss: server.rss_mib(),
        hwm: server.hwm_mib(),
        keys: resp_client::info_keys(&info),
        reader_waits: resp_client::info_field(&info, "reader_waits"),
        pool_bytes: resp_client::info_field(&info, "pool_bytes_in_use"),
        // Not in the contract's INFO fields: shown where the server gives it.
        pool_budget: resp_client::info_field(&info, "pool_budget"),
    })
}

/// The store table: a server per role.
pub fn store_table(lineup: &Lineup, runs: &Runs<StoreRun>, load: &str) -> Table {
    let mut t = figures_table(
        format!(
            "server: a store of {} keys of {STORE_VALUE} B values{}",
            thousands(STORE_KEYS),
            lineup.title
        ),
        &["figure"],
    );
    let bytes = (STORE_KEYS * STORE_VALUE) as f64;
    let mib = f64::from(1 << 20);
    let mut push = |what: &str, c: Cells| t.rows.push(row(vec![what.into()], c));
    push(
        "load (k SET/s)",
        cells(runs, |r| Some(STORE_KEYS as f64 / r.secs / 1e3)),
    );
    push("RSS at start (MiB)", cells(runs, |r| r.rss_start));
    push("RSS with the store (MiB)", cells(runs, |r| r.rss));
    push(
        "RSS / value byte",
        cells(runs, |r| Some(r.rss? * mib / bytes)),
    );
    push(
        "RSS growth / value byte",
        cells(runs, |r| Some((r.rss? - r.rss_start?) * mib / bytes)),
    );
    push("peak RSS (MiB)", cells(runs, |r| r.hwm));
    for (what, c) in [
        ("keys stored (INFO)", cells(runs, |r| r.keys)),
        ("reader_waits (INFO)", cells(runs, |r| r.reader_waits)),
        (
            "pool in use (MiB, INFO)",
            cells(runs, |r| Some(r.pool_bytes? / mib)),
        ),
        (
            "pool budget (MiB, INFO)",
            cells(runs, |r| Some(r.pool_budget? / mib)),
        ),
    ] {
        t.rows.push(counts(vec![what.into()], c));
    }
    t.notes.push(format!(
        "A fresh server per column (one run each), loaded by this bench's own client: one \
         connection, {} `SET key:%08d VALUE` pipelined (a thread writes them in 64 KiB \
         writes while the replies are read; redis-benchmark's `-r` draws keys at random, so \
         it would store fewer), every reply checked to be `+OK`. Then, 0.5 s later, \
         `INFO` (`keys`, or redis-server's `db0:keys`; ringmem-resp's `reader_waits` and \
         `pool_bytes_in_use`) and the server's `VmRSS`. Per stored value byte: over the \
         {} MB of values; ratios below 1 favour ringmem.",
        thousands(STORE_KEYS),
        bytes / 1e6
    ));
    t.notes.extend(failures(runs));
    t.notes.extend(lineup.notes.iter().cloned());
    t.notes.push(load.to_string());
    let rss = cells(runs, |r| r.rss);
    let size = match (rss[RINGMEM], rss[FRAMED]) {
        (Some(a), Some(b)) => {
            let x = ratio(a.median, b.median);
            bar(
                x.map(|x| x <= STORE_BAR),
                &format!("ringmem's RSS within {STORE_BAR}× FramedRead's"),
                &format!(
                    "{:.0} MiB against {:.0} MiB: {}",
                    a.median,
                    b.median,
                    fmt_ratio(x)
                ),
            )
        }
        _ => bar(
            None,
            "ringmem's RSS within 1.5× FramedRead's",
            "a server was not measured",
        ),
    };
    let waits = match runs[RINGMEM].first() {
        Some(Ok(r)) => match r.reader_waits {
            Some(w) => bar(
                Some(w == 0.0),
                "no reader waited (reader_waits 0)",
                &format!("reader_waits {w}"),
            ),
            None => bar(
                None,
                "no reader waited",
                "the server's INFO has no reader_waits",
            ),
        },
        _ => bar(None, "no reader waited", "ringmem was not measured"),
    };
    t.notes
        .push(format!("**Bars (issue 56):** {size}; {waits}."));
    t
}

/// The burst in one server.
#[derive(Debug)]
pub struct BurstRun {
    before: Option<f64>,
    full: Option<f64>,
    after: Option<f64>,
    hwm: Option<f64>,
    keys_after: Option<f64>,
    pool_after: Option<f64>,
}

/// The burst in a fresh server of `role`: memory before, with it, and after its `DEL`s.
pub fn burst_run(lineup: &Lineup, role: usize) -> Result<BurstRun, String> {
    let server = lineup.start(role)?;
    let before = server.rss_mib();
    let value: Vec<u8> = (0..BURST_SIZE).map(|i| (i % 251) as u8).collect();
    resp_client::pipeline(
        server.port,
        BURST_VALUES,
        move |i, buf| {
            let key = format!("burst:{i:04}");
            command(buf, &[b"SET", key.as_bytes(), &value]);
        },
        expect_ok,
    )?;
    let full = server.rss_mib();
    let batches = BURST_VALUES.div_ceil(DEL_BATCH);
    resp_client::pipeline(
        server.port,
        batches,
        |b, buf| {
            let keys: Vec<String> = (b * DEL_BATCH..((b + 1) * DEL_BATCH).min(BURST_VALUES))
                .map(|i| format!("burst:{i:04}"))
                .collect();
            let mut args: Vec<&[u8]> = vec![b"DEL"];
            args.extend(keys.iter().map(|k| k.as_bytes()));
            command(buf, &args);
        },
        |b, reply| match reply {
            Reply::Int(n) if n as usize == DEL_BATCH.min(BURST_VALUES - b * DEL_BATCH) => Ok(()),
            other => Err(format!("DEL {b}: {other:?}")),
        },
    )?;
    std::thread::sleep(BURST_WAIT);
    let info = resp_client::info(server.port)?;
    Ok(BurstRun {
        before,
        full,
        after: server.rss_mib(),
        hwm: server.hwm_mib(),
        keys_after: resp_client::info_keys(&info),
        pool_after: resp_client::info_field(&info, "pool_bytes_in_use"),
    })
}

/// The burst table: a server per role.
pub fn burst_table(lineup: &Lineup, runs: &Runs<BurstRun>, load: &str) -> Table {
    let mut t = figures_table(
        format!(
            "server: a burst of {} values of {} ({} MiB) SET, then DELeted{}",
            thousands(BURST_VALUES),
            size_label(BURST_SIZE),
            (BURST_VALUES * BURST_SIZE) >> 20,
            lineup.title
        ),
        &["figure"],
    );
    let mut push = |what: &str, c: Cells| t.rows.push(row(vec![what.into()], c));
    push("RSS before (MiB)", cells(runs, |r| r.before));
    push("RSS, burst stored (MiB)", cells(runs, |r| r.full));
    push(
        &format!("RSS {} s after DEL (MiB)", BURST_WAIT.as_secs()),
        cells(runs, |r| r.after),
    );
    push(
        "after / before",
        cells(runs, |r| ratio(r.after?, r.before?)),
    );
    push("peak RSS (MiB)", cells(runs, |r| r.hwm));
    for (what, c) in [
        ("keys after (INFO)", cells(runs, |r| r.keys_after)),
        (
            "pool in use after (MiB)",
            cells(runs, |r| Some(r.pool_after? / f64::from(1 << 20))),
        ),
    ] {
        t.rows.push(counts(vec![what.into()], c));
    }
    t.notes.push(format!(
        "A fresh server per column (one run each): `VmRSS` once it answers, then {} `SET \
         burst:%04d VALUE` of {} pipelined on one connection, `VmRSS`, `DEL` of {DEL_BATCH} \
         keys at a time until none is left, {} s of waiting (ringmem gives a pool's free \
         pages back on its sweeper's tick), `INFO` and `VmRSS` again.",
        thousands(BURST_VALUES),
        size_label(BURST_SIZE),
        BURST_WAIT.as_secs()
    ));
    t.notes.extend(failures(runs));
    t.notes.extend(lineup.notes.iter().cloned());
    t.notes.push(load.to_string());
    let v = match runs[RINGMEM].first() {
        Some(Ok(BurstRun {
            before: Some(b),
            after: Some(a),
            ..
        })) => {
            let x = ratio(*a, *b);
            bar(
                x.map(|x| x <= BURST_BAR),
                &format!("ringmem's RSS back within {BURST_BAR}× of before the burst"),
                &format!("{b:.1} MiB before, {a:.1} MiB after: {}", fmt_ratio(x)),
            )
        }
        _ => bar(
            None,
            "ringmem's RSS back within 2× of before",
            "ringmem was not measured",
        ),
    };
    t.notes.push(format!("**Bar (issue 56):** {v}."));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_scenario::fixtures::{lineup, quick};

    fn idle(connected: f64, rss: f64) -> Result<IdleRun, String> {
        Ok(IdleRun {
            connected,
            limit: 20_000.0,
            child_error: None,
            lines: Vec::new(),
            rss_start: Some(3.0),
            rss_idle: Some(rss),
            rss_after: Some(rss),
            hwm: Some(rss),
        })
    }

    #[test]
    fn the_idle_bar_is_ringmems_rss_against_half_framed_reads() {
        let runs = |ours: f64| {
            [
                vec![idle(1e4, ours)],
                vec![idle(1e4, 58.6)],
                vec![idle(1e4, 105.0)],
                Vec::new(),
            ]
        };
        let t = idle_table(&quick(1), &lineup(), &[(10_000, runs(29.0))], "quiet");
        let v = t.notes.last().unwrap();
        assert!(
            v.contains("with 10,000 clients, ringmem's RSS at most 0.5× FramedRead's: met (29.0 MiB against 58.6 MiB: 0.49×)"),
            "{v}"
        );
        let t = idle_table(&quick(1), &lineup(), &[(10_000, runs(32.7))], "quiet");
        assert!(t.notes.last().unwrap().contains(": NOT met (32.7 MiB"));
        // (32.7 - 3) MiB over 10,000 clients.
        let per_client = t
            .rows
            .iter()
            .find(|r| r.params[1] == "RSS per client (KiB)");
        assert!((per_client.unwrap().cells[RINGMEM].unwrap().median - 3.04).abs() < 0.01);
    }

    #[test]
    fn idle_clients_short_of_the_count_are_said() {
        let runs = [
            vec![idle(2994.0, 20.0)],
            vec![idle(1e4, 58.6)],
            vec![Err("gone".into())],
            Vec::new(),
        ];
        let t = idle_table(&quick(1), &lineup(), &[(10_000, runs)], "quiet");
        assert_eq!(t.rows[0].params[0], "10000 (fewest reached: 2994)");
        assert!(t
            .notes
            .iter()
            .any(|n| n.contains("ringmem: 2994 of 10000 idle clients")));
        assert!(t
            .notes
            .iter()
            .any(|n| n == "redis-server: not measured: gone."));
    }

    fn store(rss: f64, waits: Option<f64>) -> Result<StoreRun, String> {
        Ok(StoreRun {
            secs: 2.0,
            rss_start: Some(3.0),
            rss: Some(rss),
            hwm: Some(rss),
            keys: Some(1e6),
            reader_waits: waits,
            pool_bytes: Some(0.0),
            pool_budget: None,
        })
    }

    #[test]
    fn the_store_bars_are_its_rss_and_its_waits() {
        let runs = [
            vec![store(288.0, Some(0.0))],
            vec![store(316.0, Some(0.0))],
            vec![store(195.0, None)],
            Vec::new(),
        ];
        let v = store_table(&lineup(), &runs, "quiet").notes.pop().unwrap();
        assert!(
            v.contains("within 1.5× FramedRead's: met (288 MiB against 316 MiB: 0.91×)"),
            "{v}"
        );
        assert!(v.contains("no reader waited (reader_waits 0): met"), "{v}");
        let runs = [
            vec![store(500.0, Some(3.0))],
            vec![store(316.0, Some(0.0))],
            vec![store(195.0, None)],
            Vec::new(),
        ];
        let v = store_table(&lineup(), &runs, "quiet").notes.pop().unwrap();
        assert!(
            v.contains(": NOT met (500 MiB against 316 MiB: 1.58×)"),
            "{v}"
        );
        assert!(
            v.contains("(reader_waits 0): NOT met (reader_waits 3)"),
            "{v}"
        );
    }

    #[test]
    fn the_burst_bar_is_ringmems_rss_after_against_before() {
        let burst = |after: f64| {
            Ok(BurstRun {
                before: Some(3.3),
                full: Some(269.0),
                after: Some(after),
                hwm: Some(269.0),
                keys_after: Some(0.0),
                pool_after: Some(0.0),
            })
        };
        let runs = [
            vec![burst(4.5)],
            vec![burst(6.5)],
            vec![burst(104.0)],
            Vec::new(),
        ];
        let v = burst_table(&lineup(), &runs, "quiet").notes.pop().unwrap();
        assert!(
            v.contains("within 2× of before the burst: met (3.3 MiB before, 4.5 MiB after: 1.36×)"),
            "{v}"
        );
        let runs = [
            vec![burst(7.0)],
            vec![burst(6.5)],
            vec![burst(104.0)],
            Vec::new(),
        ];
        let v = burst_table(&lineup(), &runs, "quiet").notes.pop().unwrap();
        assert!(
            v.contains(": NOT met (3.3 MiB before, 7.0 MiB after: 2.12×)"),
            "{v}"
        );
    }
}
