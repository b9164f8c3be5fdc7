//! A server's memory (issue 44), as the `ringmem-bench-conns` child measures it: many
//! loopback TCP connections read by one of three framed readers (tokio_util's
//! `FramedRead`; ringmem's `AsyncFramedReader::new`, which reads into the process's
//! pool, `ReadPool::global()`; `AsyncFramedReader::with_ring` on a 1 MiB ring per
//! connection), the server in a process of its own (its memory figures are the
//! reader's), the clients in another.
//!
//! - `idle`: every client sends a 1 KiB and a 16 KiB frame, then stays open and idle;
//!   the server's resident set and address space over its baseline, per connection,
//!   once they have idled 2.5 s.
//! - `active`: after that burst, a tenth of the connections stream 1 KiB frames as
//!   fast as they can; their frames per second, each frame's latency (the client
//!   stamps the wall clock, `SystemTime`, into the payload when it hands the frame to
//!   the socket, the server subtracts it from the wall clock when the reader yields
//!   the frame: both processes read the same `CLOCK_REALTIME`), and the server's heap
//!   allocations per frame.
//! - `keep`: a few connections stream 100-byte frames; every frame goes over a bounded
//!   channel to one worker that keeps every 1,000th one to the end; what the kept
//!   frames cost in memory, and whether a reader stalls (no frame for 5 s).
//! - `queue`: an echo server whose connections all keep a few frames in flight; one
//!   frame in `keep_every` is held a while in a queue (`conns_queue.rs`); the frames
//!   echoed per second and the server's resident set with the queue full.
//!
//! The server prints one record per run: `kind`, reader, then `key=value` fields.

use std::future::poll_fn;
use std::io::{self, BufRead, BufReader, Write as _};
use std::ops::Deref;
use std::pin::Pin;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, LengthDelimited, ReadPool};
use ringmem::{FixedBuf, Ring};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

use crate::conns_queue::{self, Params, Queue};
use crate::nofile::raise_nofile;

/// Heap allocations made in the process so far, and the bytes live (the binary's
/// allocator counts them).
pub use crate::counting::{ALLOCATIONS, LIVE};

/// Bytes of the length header on the wire (both readers' default: 4, big-endian).
pub const HEADER: usize = 4;

/// Bytes of the wall-clock stamp at the start of a streamed frame's payload.
const STAMP: usize = 8;

/// The burst of every connection: a 1 KiB frame, then a 16 KiB frame (payloads of
/// zeros: a zero stamp marks them as not timed).
const BURST: [usize; 2] = [1024, 16 << 10];

/// How long the `idle` row's connections idle before the resident set is read: what
/// they cost idle, past the instant after their burst (a `ReadPool` gives its free
/// pages back a second or two after claims stop; `FramedRead`'s buffers stay as they
/// are).
const IDLE_FOR: Duration = Duration::from_millis(2500);

/// No frame for this long: the run is stalled.
pub const STALL: Duration = Duration::from_secs(5);

/// Connections one client connects at a time.
const CONNECTING: usize = 256;

/// The readers, in column order (the baseline first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `FramedRead<TcpStream, LengthDelimitedCodec>`.
    FramedRead,
    /// `AsyncFramedReader::new`: the process's pool, `ReadPool::global()`, for all
    /// connections.
    New,
    /// `AsyncFramedReader::with_ring` on a 1 MiB `Ring` of its own per connection (what
    /// `new` did before it read into the process's pool).
    RingEach,
    /// `UringGroup::framed`: io_uring multishot receives into one group's provided
    /// buffers (a ring of [`Server::group`] bytes) for all connections; the copies of
    /// frames two receives carry in the process's pool, as `new`'s. The task keeps the
    /// `TcpStream` (a server writes its replies on it).
    Uring,
    /// No reader: the same task holds the connection and a stream that never reads it,
    /// the floor the readers' memory is measured over (the `idle` row only).
    Floor,
}

/// The io_uring reader's group: one per server process.
static URING: std::sync::OnceLock<ringmem::uring::UringGroup> = std::sync::OnceLock::new();

impl Reader {
    /// All readers, in column order.
    pub const ALL: [Reader; 5] = [
        Reader::FramedRead,
        Reader::New,
        Reader::RingEach,
        Reader::Uring,
        Reader::Floor,
    ];

    /// The column name, also the name on the command line and in the records.
    pub fn name(self) -> &'static str {
        match self {
            Reader::FramedRead => "FramedRead",
            Reader::New => "ringmem (new)",
            Reader::RingEach => "ringmem (ring each)",
            Reader::Uring => "ringmem (io_uring)",
            Reader::Floor => "no reader",
        }
    }

    /// The reader named `name`.
    pub fn by_name(name: &str) -> Option<Reader> {
        Reader::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmSize`); 0 if unreadable.
pub fn status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds of the wall clock (`CLOCK_REALTIME`), the one clock the client and the
/// server processes share.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Latencies in buckets of about 1.6 % (64 per power of two), filled by any task
/// without a lock or an allocation.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Histogram {
    /// Sub-buckets per power of two.
    const SUB: u64 = 64;

    fn new() -> Self {
        Histogram {
            buckets: (0..64 * Self::SUB).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn index(v: u64) -> usize {
        if v < Self::SUB {
            return v as usize;
        }
        let e = 63 - u64::from(v.leading_zeros());
        let m = (v >> (e - 6)) & (Self::SUB - 1);
        ((e - 5) * Self::SUB + m) as usize
    }

    fn lower(i: usize) -> u64 {
        let i = i as u64;
        if i < Self::SUB {
            return i;
        }
        let (e, m) = (i / Self::SUB + 5, i % Self::SUB);
        (Self::SUB + m) << (e - 6)
    }

    fn record(&self, v: u64) {
        // A count only: nothing else is published through it.
        self.buckets[Self::index(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `q` quantile (the lower end of its bucket), 0 for no values.
    pub fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let target = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Self::lower(i);
            }
        }
        0
    }
}

/// What the server's tasks count (all `Relaxed`: read by the main thread as figures,
/// nothing is published through them).
struct Counts {
    /// Connections that have read their whole burst.
    bursts: AtomicU64,
    /// Stamped frames read, and their payload bytes.
    frames: AtomicU64,
    bytes: AtomicU64,
    /// The wall clock when the latest stamped frame was read.
    last_ns: AtomicU64,
    /// Stamped frames' latencies.
    latency: Histogram,
    /// Frames the keeping worker got, kept, and the kept frames' payload bytes.
    received: AtomicU64,
    kept: AtomicU64,
    kept_bytes: AtomicU64,
}

/// A frame of either kind, for the keeping worker or the queue.
pub enum Frame {
    Bytes(#[allow(dead_code)] BytesMut),
    Ring(#[allow(dead_code)] FixedBuf),
}

impl From<BytesMut> for Frame {
    fn from(b: BytesMut) -> Self {
        Frame::Bytes(b)
    }
}

impl From<FixedBuf> for Frame {
    fn from(b: FixedBuf) -> Self {
        Frame::Ring(b)
    }
}

/// The stream's next item.
pub async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

/// What a server does with one connection's frames, whatever reader yields them.
pub trait Serve {
    /// Spawns the connection's task, which takes its `frames`.
    fn spawn<S, B>(self, frames: S)
    where
        S: Stream<Item = io::Result<B>> + Unpin + Send + 'static,
        B: Deref<Target = [u8]> + Into<Frame> + Send + 'static;
}

/// The io_uring reader of `conn`, made before the connection is split.
type UringReader = ringmem::uring::UringFramedReader<LengthDelimited>;

/// Reads `io` with `reader` and hands its frames to `serve`: the one place that makes
/// the readers (the io_uring reader is `uring`, made on `io`'s socket).
fn read_with<R>(reader: Reader, io: R, uring: Option<UringReader>, serve: impl Serve)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    match reader {
        Reader::FramedRead => serve.spawn(FramedRead::new(io, LengthDelimitedCodec::new())),
        Reader::New => serve.spawn(AsyncFramedReader::new(io, LengthDelimited::new())),
        Reader::RingEach => {
            let ring = Ring::new(1 << 20);
            serve.spawn(AsyncFramedReader::with_ring(
                io,
                LengthDelimited::new(),
                ring,
            ))
        }
        Reader::Uring => {
            let frames = uring.expect("the io_uring reader");
            serve.spawn(Holding { frames, _io: io })
        }
        Reader::Floor => serve.spawn(Holding {
            frames: Never,
            _io: io,
        }),
    }
}

/// A stream of frames that never yields one.
struct Never;

impl Stream for Never {
    type Item = io::Result<FixedBuf>;

    fn poll_next(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Pending
    }
}

/// A stream of frames that holds the connection they are received from.
struct Holding<S, R> {
    frames: S,
    _io: R,
}

impl<S: Stream + Unpin, R: Unpin> Stream for Holding<S, R> {
    type Item = S::Item;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        Pin::new(&mut self.frames).poll_next(cx)
    }
}

/// The task of the `idle`, `active` and `keep` rows: [`handle`].
struct Handle {
    counts: Arc<Counts>,
    keep: Option<mpsc::Sender<Frame>>,
}

impl Serve for Handle {
    fn spawn<S, B>(self, mut frames: S)
    where
        S: Stream<Item = io::Result<B>> + Unpin + Send + 'static,
        B: Deref<Target = [u8]> + Into<Frame> + Send + 'static,
    {
        // The stream once in the task's future: an `async fn` taking it as an
        // argument would hold it twice (the argument, and the local it moves into).
        tokio::spawn(async move { handle(&mut frames, self.counts, self.keep).await });
    }
}

/// Reads every frame of one connection: counts its burst, times stamped frames, and
/// hands each frame to the keeping worker if there is one (else drops it).
async fn handle<S, B>(s: &mut S, counts: Arc<Counts>, keep: Option<mpsc::Sender<Frame>>)
where
    S: Stream<Item = io::Result<B>> + Unpin,
    B: Deref<Target = [u8]> + Into<Frame>,
{
    let mut n = 0usize;
    while let Some(Ok(f)) = next(s).await {
        n += 1;
        if n == BURST.len() {
            counts.bursts.fetch_add(1, Ordering::Relaxed);
        }
        let stamp = f
            .get(..STAMP)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if stamp != 0 {
            let now = wall_ns();
            counts.latency.record(now.saturating_sub(stamp));
            counts.frames.fetch_add(1, Ordering::Relaxed);
            counts.bytes.fetch_add(f.len() as u64, Ordering::Relaxed);
            counts.last_ns.fetch_max(now, Ordering::Relaxed);
        }
        if let Some(tx) = &keep {
            if tx.send(f.into()).await.is_err() {
                break;
            }
        }
    }
}

/// The worker of the `keep` row: keeps every 1,000th frame until the process ends.
async fn keeper(mut rx: mpsc::Receiver<Frame>, counts: Arc<Counts>) {
    let mut kept = Vec::new();
    let mut n = 0u64;
    while let Some(f) = rx.recv().await {
        n += 1;
        counts.received.store(n, Ordering::Relaxed);
        if n % 1000 == 0 {
            let len = match &f {
                Frame::Bytes(b) => b.len(),
                Frame::Ring(b) => b.len(),
            };
            kept.push(f);
            counts.kept.store(kept.len() as u64, Ordering::Relaxed);
            counts.kept_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
    }
    std::future::pending::<()>().await;
}

/// Which row a server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Idle,
    Active,
    Keep,
    Queue,
}

impl Row {
    /// The row named `s` (`idle`, `active`, `keep`, `queue`).
    pub fn by_name(s: &str) -> Option<Row> {
        match s {
            "idle" => Some(Row::Idle),
            "active" => Some(Row::Active),
            "keep" => Some(Row::Keep),
            "queue" => Some(Row::Queue),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Row::Idle => "idle",
            Row::Active => "active",
            Row::Keep => "keep",
            Row::Queue => "queue",
        }
    }
}

/// A server run's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Server {
    pub reader: Reader,
    pub row: Row,
    /// Connections asked for.
    pub conns: usize,
    /// Connections that stream (`active`, `keep`).
    pub active: usize,
    /// Seconds they stream (`active`, `keep`), or seconds measured after the warm-up
    /// (`queue`).
    pub secs: f64,
    /// Most frames a streaming connection sends (`keep`).
    pub max_frames: u64,
    /// The budget in bytes of the process's pool (`ReadPool::set_global`), which
    /// `ringmem (new)` reads into and `ringmem (io_uring)` copies into.
    pub budget: usize,
    /// The bytes of `ringmem (io_uring)`'s group.
    pub group: usize,
    /// The `queue` row's frames, pipelining and keeping.
    pub queue: Params,
}

/// The client process and its lines.
struct Clients {
    child: Child,
    stdin: ChildStdin,
    lines: std_mpsc::Receiver<String>,
}

/// A thread that forwards the lines of the clients' stdout, once it has it. Started
/// before the server's baseline is read: its stack, and the malloc arena glibc gives a
/// thread that allocates, are then in the baseline, not in what the connections cost.
struct LineThread {
    stdout: std_mpsc::Sender<ChildStdout>,
    lines: std_mpsc::Receiver<String>,
}

impl LineThread {
    fn start() -> LineThread {
        let (give, take) = std_mpsc::channel::<ChildStdout>();
        let (tx, lines) = std_mpsc::channel();
        let (ready, warm) = std_mpsc::channel();
        std::thread::spawn(move || {
            let _ = ready.send(std::hint::black_box(String::from("warm")));
            let Ok(stdout) = take.recv() else { return };
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let _ = warm.recv();
        LineThread {
            stdout: give,
            lines,
        }
    }
}

impl Clients {
    fn spawn(
        lines: LineThread,
        addr: std::net::SocketAddr,
        conns: usize,
        burst: bool,
    ) -> io::Result<Clients> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--clients", "--addr", &addr.to_string()])
            .args(["--conns", &conns.to_string()])
            .args(["--burst", if burst { "1" } else { "0" }])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let _ = lines.stdout.send(child.stdout.take().expect("piped"));
        Ok(Clients {
            child,
            stdin,
            lines: lines.lines,
        })
    }

    /// The number after `word` in the clients' next line of that word.
    fn expect(&self, word: &str, within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        loop {
            let l = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .ok()?;
            if let Some(n) = l.strip_prefix(word).and_then(|r| r.trim().parse().ok()) {
                return Some(n);
            }
        }
    }

    fn say(&mut self, line: &str) {
        let _ = writeln!(self.stdin, "{line}");
        let _ = self.stdin.flush();
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.say("quit");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `count()` reaches the number the clients say after `done` (or, with
/// no `done` to wait for, `target`), or until it has not moved for [`STALL`]: the
/// clients' count (if they gave one) and whether the run stalled.
fn wait_for(
    clients: &Clients,
    done: bool,
    mut target: Option<u64>,
    count: impl Fn() -> u64,
) -> (Option<u64>, bool) {
    let mut last = count();
    let mut moved = Instant::now();
    let mut sent = None;
    loop {
        if done && sent.is_none() {
            if let Ok(l) = clients.lines.try_recv() {
                sent = l.strip_prefix("done").and_then(|r| r.trim().parse().ok());
                target = sent;
            }
        }
        let c = count();
        if c != last {
            (last, moved) = (c, Instant::now());
        }
        if target.is_some_and(|t| c >= t) {
            return (sent, false);
        }
        if moved.elapsed() > STALL {
            return (sent, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Has the runtime's workers allocate, as the connections' tasks will: many small
/// tasks, each allocating across a yield, so that both workers run some.
fn warm(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let tasks: Vec<_> = (0..256)
            .map(|i| {
                tokio::spawn(async move {
                    let v = vec![i as u8; 256];
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    std::hint::black_box(v);
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
}

/// Runs a server: accepts the clients' connections, reads them with `s.reader`, and
/// prints the row's record.
pub fn server(rt: &tokio::runtime::Runtime, s: Server) -> Result<(), String> {
    if s.reader == Reader::Floor && s.row != Row::Idle {
        return Err("no reader: the idle row only (it reads nothing)".into());
    }
    let nofile = raise_nofile();
    // The server holds its connections (the io_uring reader none of its own) and the
    // listener, a few descriptors of its own.
    let conns = (s.conns).min((nofile as usize).saturating_sub(64).max(1));
    let counts = Arc::new(Counts {
        bursts: AtomicU64::new(0),
        frames: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        last_ns: AtomicU64::new(0),
        latency: Histogram::new(),
        received: AtomicU64::new(0),
        kept: AtomicU64::new(0),
        kept_bytes: AtomicU64::new(0),
    });
    let listener = rt
        .block_on(async {
            let socket = TcpSocket::new_v4()?;
            socket.bind("127.0.0.1:0".parse().expect("an address"))?;
            socket.listen(4096)
        })
        .map_err(|e| format!("cannot listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // The baseline: the runtime's workers have allocated (glibc gives each thread that
    // does an arena of address space of its own), the process's pool is not made yet
    // (its budget is part of what serving these connections costs).
    warm(rt);
    let line_thread = LineThread::start();
    let (base_rss, base_vm) = (status_kib("VmRSS"), status_kib("VmSize"));
    // Nothing in this process has used the global pool yet: setting it must succeed.
    let pool = if matches!(s.reader, Reader::New | Reader::Uring) {
        ReadPool::set_global(ReadPool::new(s.budget))
            .map_err(|_| "the process's pool was made before the baseline".to_string())?;
        Some(ReadPool::global())
    } else {
        None
    };
    if s.reader == Reader::Uring {
        let _rt = rt.enter();
        let group = ringmem::uring::UringGroup::new(s.group)
            .map_err(|e| format!("no io_uring group: {e}"))?;
        URING
            .set(group)
            .map_err(|_| "a second io_uring group".to_string())?;
    }
    // The heap's baseline, past the pool's and the group's memory (their pages are in
    // the resident set): the heap that follows is the connections' state.
    let base_heap = LIVE.load(Ordering::Relaxed);
    let keep = (s.row == Row::Keep).then(|| {
        let (tx, rx) = mpsc::channel(1024);
        rt.spawn(keeper(rx, counts.clone()));
        tx
    });
    let queue = (s.row == Row::Queue).then(|| Queue::start(rt, s.queue));
    let reader = s.reader;
    let accept = {
        let (counts, keep, queue) = (counts.clone(), keep.clone(), queue.clone());
        async move {
            let mut said = false;
            loop {
                let conn = match listener.accept().await {
                    Ok((c, _)) => c,
                    Err(e) => {
                        if !said {
                            eprintln!("accept: {e}");
                            said = true;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = conn.set_nodelay(true);
                let uring = (reader == Reader::Uring).then(|| {
                    let group = URING
                        .get()
                        .expect("the group is made before the first accept");
                    group
                        .framed(&conn, LengthDelimited::new())
                        .expect("a reader")
                });
                if let Some(q) = &queue {
                    // The reader takes the read half; the echoes go out on the other.
                    let (rd, wr) = conn.into_split();
                    read_with(reader, rd, uring, q.echo(wr));
                } else {
                    let (counts, keep) = (counts.clone(), keep.clone());
                    read_with(reader, conn, uring, Handle { counts, keep });
                }
            }
        }
    };
    rt.spawn(accept);
    let burst = matches!(s.row, Row::Idle | Row::Active);
    let mut clients = Clients::spawn(line_thread, addr, conns, burst)
        .map_err(|e| format!("cannot start the clients: {e}"))?;
    let connected = clients
        .expect("ready", Duration::from_secs(60))
        .ok_or("the clients never said they were ready")?;
    let mut rec = format!("{}\t{}", s.row.name(), reader.name());

    let mut field = |k: &str, v: f64| {
        use std::fmt::Write as _;
        let _ = write!(rec, "\t{k}={v}");
    };
    field("conns", s.conns as f64);
    field("nofile", nofile as f64);
    field("connected", connected as f64);
    let mut bursts_stalled = false;
    if reader == Reader::Floor {
        // Its bursts stay in the sockets: every connection is there once connected.
        field("held", connected as f64);
    } else if burst {
        let (_, stalled) = wait_for(&clients, false, Some(connected), || {
            counts.bursts.load(Ordering::Relaxed)
        });
        bursts_stalled = stalled;
        field("reached", counts.bursts.load(Ordering::Relaxed) as f64);
    }
    match s.row {
        Row::Idle => {
            std::thread::sleep(IDLE_FOR);
            field("base_rss_kib", base_rss as f64);
            field("base_vm_kib", base_vm as f64);
            field("rss_kib", status_kib("VmRSS") as f64);
            field("vm_kib", status_kib("VmSize") as f64);
            field("base_heap_kib", base_heap as f64 / 1024.0);
            field("heap_kib", LIVE.load(Ordering::Relaxed) as f64 / 1024.0);
            field("stalled", f64::from(u8::from(bursts_stalled)));
        }
        Row::Queue => {
            let q = queue.as_deref().expect("the queue row's queue");
            let p = s.queue;
            eprintln!(
                "queue: server pid {}, clients pid {}",
                std::process::id(),
                clients.child.id()
            );
            // The clients stream through the warm-up, the measured seconds and a little
            // more, so the measured window ends before the first connection stops.
            let streaming = p.warm_up() + s.secs + 0.5;
            clients.say(&format!("echo {} {} {streaming}", p.size, p.pipeline));
            std::thread::sleep(Duration::from_secs_f64(p.warm_up()));
            let (echoed0, t0) = (q.echoed(), Instant::now());
            std::thread::sleep(Duration::from_secs_f64(s.secs));
            let (echoed1, t1) = (q.echoed(), Instant::now());
            // The memory with the queue as full as it gets, before the clients stop.
            let (rss, heap) = (status_kib("VmRSS"), LIVE.load(Ordering::Relaxed));
            // The sweeper's count (at most a second or two old), before `stats`
            // counts again.
            let counted = pool.map_or(-1.0, |p| p.counters().bytes_in_use as f64);
            let (held, in_use) = (
                q.held(),
                pool.map_or(-1.0, |p| p.stats().bytes_in_use as f64),
            );
            let within = Duration::from_secs_f64(streaming) + 2 * STALL;
            let stalled = clients.expect("stalled", within);
            let bad = clients.expect("bad", STALL);
            let done = clients.expect("done", STALL);
            field("size", p.size as f64);
            field("pipeline", p.pipeline as f64);
            field("keep_every", p.keep_every as f64);
            field("hold", p.hold);
            field("warm_up", p.warm_up());
            field("secs", (t1 - t0).as_secs_f64());
            field("echoed", (echoed1 - echoed0) as f64);
            field("fps", (echoed1 - echoed0) as f64 / (t1 - t0).as_secs_f64());
            field("read", q.read() as f64);
            field("kept", held as f64);
            field("kept_max", q.held_max() as f64);
            field("pool_in_use", in_use);
            field("pool_counted", counted);
            // Since the server started: its readers' waits for room, and the frames no
            // gap held, served from the heap.
            let counters = pool.map(|p| p.counters());
            field("pool_waits", counters.map_or(-1.0, |c| c.waits as f64));
            field(
                "pool_heap",
                counters.map_or(-1.0, |c| c.heap_fallbacks as f64),
            );
            field(
                "pool_given_back",
                counters.map_or(-1.0, |c| c.bytes_given_back as f64),
            );
            field("base_rss_kib", base_rss as f64);
            field("rss_kib", rss as f64);
            field("hwm_kib", status_kib("VmHWM") as f64);
            field("base_heap_kib", base_heap as f64 / 1024.0);
            field("heap_kib", heap as f64 / 1024.0);
            field("client_echoed", done.map_or(-1.0, |n| n as f64));
            field("bad_conns", bad.map_or(-1.0, |n| n as f64));
            // The clients' count of stalled connections; all of them if they never said.
            field("stalled", stalled.map_or(connected as f64, |n| n as f64));
        }
        Row::Active | Row::Keep => {
            let (size, count): (usize, &dyn Fn() -> u64) = if s.row == Row::Active {
                (1024, &|| counts.frames.load(Ordering::Relaxed))
            } else {
                (100, &|| counts.received.load(Ordering::Relaxed))
            };
            let allocs0 = ALLOCATIONS.load(Ordering::Relaxed);
            let go = wall_ns();
            clients.say(&format!(
                "stream {} {size} {} {}",
                s.active, s.secs, s.max_frames
            ));
            // The frames read while the clients write (what is in the sockets then is
            // drained after): the rate apart from the drain's tail.
            let streaming = (s.row == Row::Active).then(|| {
                let (counts, secs) = (counts.clone(), s.secs);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs_f64(secs));
                    counts.frames.load(Ordering::Relaxed)
                })
            });
            let (sent, stalled) = wait_for(&clients, true, None, count);
            let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs0;
            field("active", s.active as f64);
            field("sent", sent.map_or(-1.0, |n| n as f64));
            field("stalled", f64::from(u8::from(stalled)));
            if s.row == Row::Active {
                let frames = counts.frames.load(Ordering::Relaxed);
                let last = counts.last_ns.load(Ordering::Relaxed);
                field("frames", frames as f64);
                if let Some(Ok(n)) = streaming.map(std::thread::JoinHandle::join) {
                    field("frames_streaming", n as f64);
                    field("streaming_secs", s.secs);
                }
                field("bytes", counts.bytes.load(Ordering::Relaxed) as f64);
                field("secs", last.saturating_sub(go) as f64 * 1e-9);
                field("allocs", allocs as f64);
                for (k, q) in [("p50_ns", 0.5), ("p99_ns", 0.99), ("p999_ns", 0.999)] {
                    field(k, counts.latency.quantile(q) as f64);
                }
                // What the io_uring group's receives did: how often they ran out of
                // buffers, were paused by their caps and started again.
                if let Some(st) = URING.get().map(ringmem::uring::UringGroup::stats) {
                    field("uring_completions", st.completions as f64);
                    field("uring_out_of_buffers", st.out_of_buffers as f64);
                    field("uring_restarts", st.restarts as f64);
                    field("uring_pauses", st.pauses as f64);
                    field("uring_moved", st.bytes_moved as f64);
                }
                // The memory once the streams have stopped, and at its peak.
                field("base_rss_kib", base_rss as f64);
                field("rss_kib", status_kib("VmRSS") as f64);
                field("hwm_kib", status_kib("VmHWM") as f64);
                field("base_heap_kib", base_heap as f64 / 1024.0);
                field("heap_kib", LIVE.load(Ordering::Relaxed) as f64 / 1024.0);
            } else {
                std::thread::sleep(Duration::from_millis(200));
                field("received", counts.received.load(Ordering::Relaxed) as f64);
                field("kept", counts.kept.load(Ordering::Relaxed) as f64);
                field(
                    "kept_bytes",
                    counts.kept_bytes.load(Ordering::Relaxed) as f64,
                );
                let in_use = pool.map_or(-1.0, |p| p.stats().bytes_in_use as f64);
                field("pool_in_use", in_use);
                field("base_rss_kib", base_rss as f64);
                field("rss_kib", status_kib("VmRSS") as f64);
            }
        }
    }
    println!("{rec}");
    let _ = io::stdout().flush();
    drop(clients);
    Ok(())
}

/// Connects `conns` connections to `addr`, `CONNECTING` at a time, each sending the
/// burst if `burst`; stops at the first that fails (its error on stderr).
async fn connect_all(addr: std::net::SocketAddr, conns: usize, burst: bool) -> Vec<TcpStream> {
    let mut wire = Vec::new();
    for n in BURST {
        wire.extend_from_slice(&(n as u32).to_be_bytes());
        wire.resize(wire.len() + n, 0);
    }
    let wire = Arc::new(wire);
    let mut streams = Vec::with_capacity(conns);
    while streams.len() < conns {
        let batch: Vec<_> = (streams.len()..conns.min(streams.len() + CONNECTING))
            .map(|_| {
                let wire = wire.clone();
                tokio::spawn(async move {
                    let mut s = TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    if burst {
                        s.write_all(&wire).await?;
                    }
                    io::Result::Ok(s)
                })
            })
            .collect();
        let mut failed = false;
        for t in batch {
            match t.await.expect("a connecting task") {
                Ok(s) => streams.push(s),
                Err(e) => {
                    if !failed {
                        eprintln!("connect: {e}");
                    }
                    failed = true;
                }
            }
        }
        if failed {
            break;
        }
    }
    streams
}

/// Streams `size`-byte frames on `s` until `deadline` or `max` frames, in writes of
/// about 16 KiB, stamping every frame of a write with the wall clock just before it;
/// returns the stream and the frames of the writes that completed.
async fn stream(mut s: TcpStream, size: usize, deadline: Instant, max: u64) -> (TcpStream, u64) {
    let per_write = ((16 << 10) / (size + HEADER)).max(1);
    let mut wire = Vec::with_capacity(per_write * (size + HEADER));
    for _ in 0..per_write {
        wire.extend_from_slice(&(size as u32).to_be_bytes());
        wire.resize(wire.len() + size, 0x5a);
    }
    let mut sent = 0u64;
    let deadline = tokio::time::Instant::from_std(deadline);
    while Instant::now() < deadline.into_std() && sent < max {
        let now = wall_ns().to_le_bytes();
        for f in 0..per_write {
            let at = f * (size + HEADER) + HEADER;
            wire[at..at + STAMP].copy_from_slice(&now);
        }
        match tokio::time::timeout_at(deadline, s.write_all(&wire)).await {
            Ok(Ok(())) => sent += per_write as u64,
            _ => break,
        }
    }
    (s, sent)
}

/// The client process: connects, says `ready N`, then obeys its stdin: `stream ACTIVE
/// SIZE SECS MAX` (answered by `done FRAMES`), `echo SIZE PIPELINE SECS` (the `queue`
/// row on every connection: answered by `stalled CONNS`, `bad CONNS`, `done ECHOES`)
/// and `quit`.
pub fn clients(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    conns: usize,
    burst: bool,
) {
    raise_nofile();
    let mut streams = rt.block_on(connect_all(addr, conns, burst));
    println!("ready {}", streams.len());
    let _ = io::stdout().flush();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[..] {
            ["stream", active, size, secs, max] => {
                let active: usize = active.parse().unwrap_or(0).min(streams.len());
                let size: usize = size.parse().unwrap_or(1024).max(STAMP);
                let secs: f64 = secs.parse().unwrap_or(2.0);
                let max: u64 = max.parse().ok().filter(|&m| m > 0).unwrap_or(u64::MAX);
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let going: Vec<TcpStream> = streams.drain(..active).collect();
                let back = rt.block_on(async {
                    let tasks: Vec<_> = going
                        .into_iter()
                        .map(|s| tokio::spawn(stream(s, size, deadline, max)))
                        .collect();
                    let mut back = Vec::new();
                    for t in tasks {
                        back.push(t.await.expect("a streaming task"));
                    }
                    back
                });
                let frames: u64 = back.iter().map(|b| b.1).sum();
                streams.splice(0..0, back.into_iter().map(|b| b.0));
                println!("done {frames}");
                let _ = io::stdout().flush();
            }
            ["echo", size, pipeline, secs] => {
                let p = Params {
                    size: size.parse().unwrap_or(4096),
                    pipeline: pipeline.parse().unwrap_or(4).max(1),
                    keep_every: 0,
                    hold: 0.0,
                };
                let secs: f64 = secs.parse().unwrap_or(2.0);
                let going: Vec<TcpStream> = std::mem::take(&mut streams);
                let seen = rt.block_on(async {
                    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(secs);
                    let tasks: Vec<_> = going
                        .into_iter()
                        .map(|s| tokio::spawn(conns_queue::client(s, p, deadline)))
                        .collect();
                    let mut seen = Vec::new();
                    for t in tasks {
                        let (s, what) = t.await.expect("an echoing task");
                        streams.push(s);
                        seen.push(what);
                    }
                    seen
                });
                let count =
                    |f: fn(&conns_queue::Seen) -> bool| seen.iter().filter(|s| f(s)).count();
                println!("stalled {}", count(|s| s.stalled));
                println!("bad {}", count(|s| s.bad));
                println!("done {}", seen.iter().map(|s| s.echoed).sum::<u64>());
                let _ = io::stdout().flush();
            }
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_hold_their_values_within_two_percent() {
        for v in [0, 1, 63, 64, 65, 1000, 123_456, 9_999_999_999] {
            let lo = Histogram::lower(Histogram::index(v));
            assert!(lo <= v && v - lo <= v / 60, "{v} in a bucket from {lo}");
        }
        let h = Histogram::new();
        for v in 1..=1000 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5);
        assert!((490_000..=500_000).contains(&p50), "{p50}");
    }
}
