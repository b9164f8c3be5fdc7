//! Starting a server for a test, and the small helpers the tests share.
//!
//! By default a test runs the `ringmem-resp` binary of this package (or the one
//! `RESP_TEST_BIN` names) with `--port 0`, once per memory mode, and reads the port
//! from its `listening on 127.0.0.1:N` line. With `RESP_TEST_SERVER=redis` in the
//! environment it runs the system's `redis-server` instead, once: that is how anyone
//! can check that a test tests Redis's behaviour and not only ours.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long anything a test waits for may take before the test fails: generous,
/// because the tests run in a debug build on busy machines.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Which server a test talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ringmem-resp --memory ringmem`.
    Ringmem,
    /// `ringmem-resp --memory framed`.
    Framed,
    /// The system's `redis-server`, the reference.
    Redis,
}

impl Kind {
    fn memory_flag(self) -> &'static str {
        match self {
            Kind::Ringmem => "ringmem",
            Kind::Framed => "framed",
            Kind::Redis => unreachable!("redis-server has no --memory"),
        }
    }
}

/// Whether the tests run against `redis-server` (`RESP_TEST_SERVER=redis`).
pub fn against_redis() -> bool {
    match std::env::var("RESP_TEST_SERVER") {
        Ok(v) if v == "redis" => true,
        Ok(v) if v.is_empty() || v == "ringmem-resp" => false,
        Ok(v) => panic!("RESP_TEST_SERVER={v:?}: expected `redis` or nothing"),
        Err(_) => false,
    }
}

/// The servers a test that concerns both memory modes runs against: ringmem's and
/// framed's, or only `redis-server` under `RESP_TEST_SERVER=redis`.
pub fn servers() -> Vec<Server> {
    if against_redis() {
        vec![Server::start(Kind::Redis)]
    } else {
        vec![Server::start(Kind::Ringmem), Server::start(Kind::Framed)]
    }
}

/// The ringmem-mode server, or `redis-server` under `RESP_TEST_SERVER=redis`.
pub fn ringmem_server() -> Server {
    Server::start(if against_redis() {
        Kind::Redis
    } else {
        Kind::Ringmem
    })
}

/// A running server, killed when dropped. On a failing test its stderr is printed.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    kind: Kind,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// What ringmem-resp wrote to stdout after its `listening on` line.
    more_stdout: Arc<Mutex<Vec<u8>>>,
    /// The threads that empty the server's stderr (and, for redis-server, stdout).
    drains: Vec<thread::JoinHandle<()>>,
}

impl Server {
    /// Starts a server of `kind` and waits until it accepts connections.
    pub fn start(kind: Kind) -> Server {
        Server::start_with(kind, &[])
    }

    /// Starts a server of `kind` with more ringmem-resp options (`--budget-mib 4`);
    /// redis-server gets none of them.
    pub fn start_with(kind: Kind, options: &[&str]) -> Server {
        match kind {
            Kind::Redis => start_redis(),
            _ => start_ringmem_resp(kind, options),
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A name for assertion messages: `ringmem`, `framed` or `redis-server`.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::Ringmem => "ringmem",
            Kind::Framed => "framed",
            Kind::Redis => "redis-server",
        }
    }

    /// A `redis` crate client with timeouts, so that a server that never answers
    /// fails the test instead of hanging it.
    pub fn client(&self) -> redis::Connection {
        let url = format!("redis://{}/", self.addr);
        let client = redis::Client::open(url).expect("a redis URL");
        let con = client
            .get_connection_with_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("{}: connecting: {e}", self.name()));
        con.set_read_timeout(Some(PATIENCE)).unwrap();
        con.set_write_timeout(Some(PATIENCE)).unwrap();
        con
    }

    /// The `redis` crate's client, for async tests.
    pub fn async_client(&self) -> redis::Client {
        redis::Client::open(format!("redis://{}/", self.addr)).expect("a redis URL")
    }

    /// A raw TCP connection with generous read and write timeouts.
    pub fn raw(&self) -> TcpStream {
        let stream = TcpStream::connect_timeout(&self.addr, PATIENCE)
            .unwrap_or_else(|e| panic!("{}: connecting: {e}", self.name()));
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_write_timeout(Some(PATIENCE)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// A PING, a SET and a GET of a key of its own on a fresh connection: the proof
    /// that the server serves other clients.
    pub fn assert_serves(&self, context: &str) {
        static ROUND: AtomicUsize = AtomicUsize::new(0);
        let n = ROUND.fetch_add(1, Ordering::Relaxed);
        let key = format!("round-trip:{}:{n}", std::process::id());
        let value = format!("value {n} {context}");
        let mut con = self.client();
        let pong: String = redis::cmd("PING")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{}: PING {context}: {e}", self.name()));
        assert_eq!(pong, "PONG", "{}: {context}", self.name());
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{}: SET {context}: {e}", self.name()));
        let got: String = redis::cmd("GET")
            .arg(&key)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{}: GET {context}: {e}", self.name()));
        assert_eq!(got, value, "{}: {context}", self.name());
    }

    /// The `INFO` reply as `(name, value)` pairs.
    pub fn info(&self) -> Vec<(String, String)> {
        let mut con = self.client();
        let text: String = redis::cmd("INFO").query(&mut con).unwrap();
        parse_info(&text)
    }

    /// One numeric `INFO` field.
    pub fn info_number(&self, field: &str) -> u64 {
        let info = self.info();
        let (_, value) = info
            .iter()
            .find(|(name, _)| name == field)
            .unwrap_or_else(|| panic!("{}: INFO has no {field:?}", self.name()));
        value
            .parse()
            .unwrap_or_else(|e| panic!("{}: INFO {field}:{value:?}: {e}", self.name()))
    }
}

impl Server {
    /// Kills the server and returns what ringmem-resp wrote to stdout after its
    /// `listening on` line, which the contract says is nothing.
    pub fn stop(mut self) -> Vec<u8> {
        self.kill();
        let more = self.more_stdout.lock().unwrap();
        more.clone()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The pipes are closed now: the drains end, and all the output is there.
        for drain in self.drains.drain(..) {
            let _ = drain.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            let stderr = self.stderr.lock().unwrap();
            if !stderr.is_empty() {
                eprintln!(
                    "--- {} stderr ---\n{}",
                    self.name(),
                    String::from_utf8_lossy(&stderr)
                );
            }
        }
    }
}

/// `INFO`'s `name:value` lines, sections and comments left out.
pub fn parse_info(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect()
}

/// Collects a child's pipe on a thread, so that the child never blocks on it.
fn drain(
    mut pipe: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<u8>>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

fn ringmem_resp_bin() -> String {
    std::env::var("RESP_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ringmem-resp").into())
}

fn start_ringmem_resp(kind: Kind, options: &[&str]) -> Server {
    let bin = ringmem_resp_bin();
    let mut child = Command::new(&bin)
        .args(["--port", "0", "--memory", kind.memory_flag()])
        .args(options)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let stderr_drain = drain(child.stderr.take().unwrap(), stderr.clone());

    // The first line of stdout says where it listens; read it on a thread so that
    // a server that never prints it fails the test after PATIENCE.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let more_stdout = Arc::new(Mutex::new(Vec::new()));
    let more = more_stdout.clone();
    let stdout_drain = thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let read = stdout.read_line(&mut line).map(|_| line);
        let _ = tx.send(read);
        // Nothing else should come (see `Server::stop`); never let it block the server.
        let mut rest = Vec::new();
        let _ = stdout.read_to_end(&mut rest);
        more.lock().unwrap().extend_from_slice(&rest);
    });
    let mut server = Server {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        kind,
        stderr,
        more_stdout,
        drains: vec![stderr_drain, stdout_drain],
    };
    let line = match rx.recv_timeout(PATIENCE) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => panic!("{bin}: reading stdout: {e}"),
        Err(_) => panic!("{bin}: no `listening on` line within {PATIENCE:?}"),
    };
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.trim_end().parse::<SocketAddr>().ok())
        .unwrap_or_else(|| panic!("{bin}: expected `listening on 127.0.0.1:N`, got {line:?}"));
    assert_eq!(addr.ip().to_string(), "127.0.0.1", "{line:?}");
    assert_ne!(addr.port(), 0, "{line:?}");
    server.addr = addr;
    server
}

/// The next free-looking port of this helper's range, 17000-17999: bound once to see
/// that it is free, then handed to redis-server (which may still lose a race for it;
/// `start_redis` then tries the next one).
fn next_redis_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..1000 {
        // Start at a point that depends on the process, so that two test binaries
        // run one after the other do not reuse the ports still in TIME_WAIT.
        let offset = (std::process::id() % 1000) as u16;
        let port = 17000 + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % 1000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // The range is full: let the OS choose.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn start_redis() -> Server {
    for _attempt in 0..10 {
        let port = next_redis_port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--loglevel", "warning", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting redis-server (RESP_TEST_SERVER=redis): {e}"));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let drains = vec![
            drain(child.stdout.take().unwrap(), stderr.clone()),
            drain(child.stderr.take().unwrap(), stderr.clone()),
        ];
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            kind: Kind::Redis,
            stderr,
            more_stdout: Arc::default(),
            drains,
        };
        if server.wait_for_pong() {
            return server;
        }
    }
    panic!("redis-server did not start on any of 10 ports");
}

impl Server {
    /// Waits until the server answers an inline PING; false if it exited first.
    fn wait_for_pong(&mut self) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(mut stream) = TcpStream::connect(self.addr) {
                stream.set_read_timeout(Some(PATIENCE)).unwrap();
                let mut reply = [0u8; 7];
                if stream.write_all(b"PING\r\n").is_ok()
                    && stream.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    let _ = stream.shutdown(Shutdown::Both);
                    return true;
                }
            }
            // A server that exited (its port was taken) will never answer.
            if self.exited() {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on {} did not answer PING", self.addr);
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

/// Reads from `stream` until the peer closes it or `PATIENCE` passes: the bytes read,
/// and whether the connection was closed (an end of file or a reset, which is how a
/// peer that closes with unread input ends the connection).
pub fn read_until_closed(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return (got, false)
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
}

/// Reads exactly `expected.len()` bytes and compares them with `expected`.
pub fn expect_reply(stream: &mut TcpStream, expected: &[u8], context: &str) {
    let mut got = vec![0u8; expected.len()];
    stream.read_exact(&mut got).unwrap_or_else(|e| {
        panic!(
            "{context}: reading {:?}: {e}",
            String::from_utf8_lossy(expected)
        )
    });
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected),
        "{context}"
    );
}

/// A server error as the server wrote it, without the leading `-`:
/// `ERR wrong number of arguments for 'get' command`.
pub fn error_text(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => panic!("not a server error: {error:?}"),
    }
}
