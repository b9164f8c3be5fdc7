//! A short pass of `redis-benchmark`, the standard load generator for the Redis
//! protocol, against the ringmem-mode server (or `redis-server` under
//! `RESP_TEST_SERVER=redis`): every test it runs reports a positive rate, and the
//! server still answers afterwards.

mod common;

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{ringmem_server, PATIENCE};

/// The tests the pass runs and the row names redis-benchmark gives them in `--csv`.
const TESTS: &str = "set,get,incr,lpush,lpop,mset";
const ROWS: [&str; 6] = ["SET", "GET", "INCR", "LPUSH", "LPOP", "MSET (10 keys)"];

#[test]
fn a_short_redis_benchmark_pass_reports_a_positive_rate_for_every_test() {
    if Command::new("redis-benchmark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        println!("SKIPPED: redis-benchmark not installed");
        return;
    }
    let server = ringmem_server();
    let mut child = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-t", TESTS, "-n", "2000", "-P", "16", "-c", "10", "--csv"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting redis-benchmark");
    // redis-benchmark waits for ever for replies that never come: give it a bound.
    let deadline = Instant::now() + PATIENCE * 2;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}: redis-benchmark did not finish within {:?}",
                server.name(),
                PATIENCE * 2
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    // redis-benchmark 7 stops with a failure status at the first error reply.
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}: redis-benchmark failed: {}\n{stdout}\n{stderr}",
        server.name(),
        output.status
    );

    // `"test","rps","avg_latency_ms",...` and one row per test: `"SET","333333.34",...`.
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().unwrap_or_default();
    assert!(
        header.starts_with("\"test\",\"rps\""),
        "{}: header {header:?}",
        server.name()
    );
    let rows: Vec<(String, f64)> = lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches('"')).collect();
            let rps = fields
                .get(1)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("{}: row {line:?}", server.name()));
            (fields[0].to_owned(), rps)
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ROWS, "{}: {stdout}", server.name());
    for (name, rps) in &rows {
        assert!(
            *rps > 0.0,
            "{}: {name} at {rps} requests/s\n{stdout}",
            server.name()
        );
    }
    server.assert_serves("after redis-benchmark");
    // Rows for the test output, to read with --nocapture.
    println!("{}: {stdout}", server.name());
}
