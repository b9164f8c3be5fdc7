//! The server scenario's processes: the three servers it compares (`ringmem-resp
//! --memory ringmem`, `ringmem-resp --memory framed`, the system's `redis-server`),
//! each started on a free loopback port and killed when dropped, their resident
//! memory, and `redis-benchmark` runs with their CSV read.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read as _};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Lines of a server's output kept, to say why it stopped.
const LOG_LINES: usize = 20;

/// `redis-server`'s client limit: the idle row's 10,000 clients, redis-benchmark's 50
/// and a few more (its default, 10,000, would refuse the last of them).
const REDIS_MAXCLIENTS: usize = 10_100;

/// How a server is started.
#[derive(Clone, Debug)]
pub enum Launch {
    /// `ringmem-resp --port 0 --memory MEMORY`, which prints `listening on
    /// 127.0.0.1:N` once it accepts.
    Resp {
        /// The executable.
        exe: PathBuf,
        /// `ringmem` or `framed`.
        memory: &'static str,
    },
    /// `redis-server --port P --save '' --appendonly no`, P a free port; ready once it
    /// answers `PING`.
    Redis,
}

/// A running server, killed (and waited for) when dropped.
pub struct Server {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    log: Log,
}

/// The last lines a server wrote, on either stream.
type Log = Arc<Mutex<VecDeque<String>>>;

/// Reads `from` to its end on a thread of its own, keeping its last lines in `log`;
/// the first line that starts with `listening on 127.0.0.1:` gives its port to `port`.
fn drain(from: impl std::io::Read + Send + 'static, log: Log, port: Option<mpsc::Sender<u16>>) {
    std::thread::spawn(move || {
        let mut port = port;
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let Some(p) = line
                .strip_prefix("listening on 127.0.0.1:")
                .and_then(|p| p.trim().parse().ok())
            {
                if let Some(tx) = port.take() {
                    let _ = tx.send(p);
                }
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
}

/// A free loopback port: bound, read and closed (another process may take it before
/// the server binds it, which the server's start then reports).
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl Server {
    /// Starts a server as `launch` says and waits until it serves. redis-server gets
    /// three tries: the free port it is given may be taken by another process before it
    /// binds it.
    pub fn start(launch: &Launch) -> Result<Server, String> {
        let tries = match launch {
            Launch::Resp { .. } => 1,
            Launch::Redis => 3,
        };
        let mut result = Server::start_once(launch);
        for _ in 1..tries {
            match &result {
                Err(e) if e.contains("exited") => result = Server::start_once(launch),
                _ => break,
            }
        }
        result
    }

    fn start_once(launch: &Launch) -> Result<Server, String> {
        let (mut cmd, port) = match launch {
            Launch::Resp { exe, memory } => {
                let mut c = Command::new(exe);
                c.args(["--port", "0", "--memory", memory]);
                (c, None)
            }
            Launch::Redis => {
                let port = free_port()?;
                let mut c = Command::new("redis-server");
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .args(["--maxclients", &REDIS_MAXCLIENTS.to_string()]);
                (c, Some(port))
            }
        };
        let name = match launch {
            Launch::Resp { memory, .. } => format!("ringmem-resp --memory {memory}"),
            Launch::Redis => "redis-server".into(),
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let log: Log = Arc::default();
        let (tx, rx) = mpsc::channel();
        let tx = port.is_none().then_some(tx);
        if let Some(out) = child.stdout.take() {
            drain(out, log.clone(), tx);
        }
        if let Some(err) = child.stderr.take() {
            drain(err, log.clone(), None);
        }
        let mut server = Server {
            child,
            port: port.unwrap_or(0),
            log,
        };
        let started = Instant::now();
        if port.is_none() {
            match rx.recv_timeout(START_TIMEOUT) {
                Ok(p) => server.port = p,
                Err(_) => return Err(server.failed(&name, "printed no `listening on` line")),
            }
        }
        // Ready once it answers (redis-server prints no line to wait for).
        while !crate::resp_client::ping(server.port) {
            if started.elapsed() > START_TIMEOUT || server.exited() {
                return Err(server.failed(&name, "did not answer PING"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Why the server is no use: its exit status if it ended, what it did not do
    /// otherwise, and its last line of output.
    fn failed(&mut self, name: &str, what: &str) -> String {
        // Its output threads get a moment to take its last words.
        std::thread::sleep(Duration::from_millis(100));
        let how = match self.child.try_wait() {
            Ok(Some(status)) => format!("{name} exited ({status})"),
            _ => format!("{name} {what} within {} s", START_TIMEOUT.as_secs()),
        };
        match self.last_line() {
            Some(l) => format!("{how}: {l}"),
            None => how,
        }
    }

    /// The server's last line of output that is not blank.
    pub fn last_line(&self) -> Option<String> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().rev().find(|l| !l.trim().is_empty()).cloned()
    }

    /// A line of the server's `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
    pub fn status_kib(&self, key: &str) -> Option<f64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Its resident set now, MiB.
    pub fn rss_mib(&self) -> Option<f64> {
        Some(self.status_kib("VmRSS")? / 1024.0)
    }

    /// Its peak resident set, MiB.
    pub fn hwm_mib(&self) -> Option<f64> {
        Some(self.status_kib("VmHWM")? / 1024.0)
    }

    /// The CPU time its threads have run so far, seconds: the sum of each thread's
    /// `se.sum_exec_runtime` (`/proc/PID/task/TID/sched`, nanoseconds counted by the
    /// scheduler), or `utime + stime` of `/proc/PID/stat` (10 ms ticks) where the kernel
    /// has no `sched` files. A thread that has ended is not counted.
    pub fn cpu_secs(&self) -> Option<f64> {
        let pid = self.child.id();
        // One source for every reading of a run: a thread ending between two reads
        // leaves its file missing, which must not switch a reading to the ticks.
        if !std::path::Path::new(&format!("/proc/{pid}/sched")).exists() {
            return stat_secs(pid);
        }
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let runtime = |sched: String| {
            sched.lines().find_map(|l| {
                let v = l.strip_prefix("se.sum_exec_runtime")?;
                v.trim_start_matches([' ', ':']).trim().parse::<f64>().ok()
            })
        };
        let ms: f64 = (tasks.flatten())
            .filter_map(|t| std::fs::read_to_string(t.path().join("sched")).ok())
            .filter_map(runtime)
            .sum();
        Some(ms / 1e3)
    }
}

/// `utime + stime` of `/proc/PID/stat`, seconds (at the usual 100 ticks a second).
fn stat_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: state is the 3rd field of
    // the line, utime the 14th and stime the 15th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why `redis-benchmark` cannot be run, if it cannot.
pub fn redis_benchmark_missing() -> Option<String> {
    missing("redis-benchmark", "redis-tools")
}

/// Why `redis-server` cannot be run, if it cannot.
pub fn redis_server_missing() -> Option<String> {
    missing("redis-server", "redis-server")
}

fn missing(tool: &str, package: &str) -> Option<String> {
    match Command::new(tool).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`{tool} --version` failed ({})", o.status)),
        Err(_) => Some(format!(
            "{tool} is not installed (Debian: `apt-get install {package}`)"
        )),
    }
}

/// A run of a program that is killed after `timeout`: its stdout, or why it gave none.
pub fn output_within(mut cmd: Command, timeout: Duration) -> Result<String, String> {
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = read(child.stdout.take().map(|o| Box::new(o) as _));
    let err = read(child.stderr.take().map(|e| Box::new(e) as _));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not end within {} s: killed",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for {what}: {e}")),
        }
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if !status.success() {
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!("{what} failed ({status}): {}", last.unwrap_or("")));
    }
    Ok(out)
}

/// One test of a redis-benchmark run, from its `--csv` output.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchLine {
    /// The test's name up to its first space (`MSET (10 keys)` is `MSET`).
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// Median latency, ms (redis-benchmark 7 and later).
    pub p50_ms: Option<f64>,
    /// 99th percentile latency, ms (likewise).
    pub p99_ms: Option<f64>,
}

/// The tests in redis-benchmark's `--csv` output: a header naming the columns
/// (`"test","rps","avg_latency_ms",...,"p50_latency_ms",...,"p99_latency_ms",...` in
/// redis-benchmark 7), then a line per test. Older versions print no header and only
/// `"test","rps"`: their latencies are `None`.
pub fn parse_csv(out: &str) -> Result<Vec<BenchLine>, String> {
    let fields = |l: &str| -> Vec<String> {
        l.split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut columns: Vec<String> = vec!["test".into(), "rps".into()];
    let mut lines = Vec::new();
    for l in out.lines().filter(|l| l.starts_with('"')) {
        let f = fields(l);
        if f.first().is_some_and(|t| t == "test") {
            columns = f;
            continue;
        }
        let col = |name: &str| -> Option<f64> {
            let k = columns.iter().position(|c| c == name)?;
            f.get(k)?.parse().ok()
        };
        let rps = col("rps").ok_or_else(|| format!("a CSV line with no rate: {l}"))?;
        let test = f[0].split(' ').next().unwrap_or("").to_string();
        lines.push(BenchLine {
            test,
            rps,
            p50_ms: col("p50_latency_ms"),
            p99_ms: col("p99_latency_ms"),
        });
    }
    if lines.is_empty() {
        return Err(format!(
            "redis-benchmark printed no test: {}",
            out.lines().last().unwrap_or("")
        ));
    }
    Ok(lines)
}

/// A redis-benchmark run's shape.
#[derive(Clone, Debug)]
pub struct Bench<'a> {
    /// `-t`.
    pub tests: &'a str,
    /// `-c`.
    pub clients: usize,
    /// `-n`.
    pub requests: usize,
    /// `-P`.
    pub pipeline: usize,
    /// `-d`.
    pub size: usize,
}

impl Bench<'_> {
    /// The command line, for the tables' notes.
    pub fn args(&self, port: u16) -> Vec<String> {
        [
            ("-p", port.to_string()),
            ("-t", self.tests.to_string()),
            ("-c", self.clients.to_string()),
            ("-n", self.requests.to_string()),
            ("-P", self.pipeline.to_string()),
            ("-d", self.size.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .chain(["--csv".to_string()])
        .collect()
    }

    /// Runs redis-benchmark against the server at `port` (killed after `timeout`).
    pub fn run(&self, port: u16, timeout: Duration) -> Result<Vec<BenchLine>, String> {
        let mut cmd = Command::new("redis-benchmark");
        cmd.args(["-h", "127.0.0.1"]).args(self.args(port));
        parse_csv(&output_within(cmd, timeout)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csv_of_redis_benchmark_7_gives_rates_and_percentiles() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\
                   \"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET\",\"476190.47\",\"1.403\",\"0.272\",\"0.863\",\"4.727\",\"6.911\",\"7.055\"\n\
                   \"MSET (10 keys)\",\"303030.31\",\"2.407\",\"0.376\",\"2.095\",\"4.543\",\"7.815\",\"7.967\"\n";
        let lines = parse_csv(out).unwrap();
        assert_eq!(
            lines[0],
            BenchLine {
                test: "SET".into(),
                rps: 476190.47,
                p50_ms: Some(0.863),
                p99_ms: Some(6.911)
            }
        );
        assert_eq!(lines[1].test, "MSET");
        assert_eq!(lines[1].p99_ms, Some(7.815));
    }

    #[test]
    fn an_older_csv_gives_rates_only() {
        let lines = parse_csv("\"SET\",\"1000.00\"\n\"GET\",\"2000.00\"\n").unwrap();
        assert_eq!(lines[1].rps, 2000.0);
        assert_eq!(lines[1].p50_ms, None);
        assert!(parse_csv("Could not connect to Redis at 127.0.0.1:1\n").is_err());
    }
}
