//! The framed-reader comparison (issue 23), as the `ringmem-bench-framed` child runs it:
//! the same sender and receiver on loopback TCP, the receiver reading length-delimited
//! frames with tokio_util's `FramedRead<_, LengthDelimitedCodec>` (over a `BytesMut`)
//! or with ringmem's `AsyncFramedReader` (`new`: over the process's pool,
//! `ReadPool::global()`; the spike's receivers: over a ring of their own), or with
//! ringmem's `UringFramedReader` (io_uring provided buffers, a group per run).
//!
//! - [`run`]: frames of 64 B, 1 KiB, 16 KiB and a mix, over 1 and 4 connections;
//!   frames per second, heap allocations per frame (the child's counting global
//!   allocator), and each frame's latency: the sender stamps every frame's first 8
//!   payload bytes with the time it hands the frame to the socket, the receiver takes
//!   the difference when the reader yields it. A run's sender goes as fast as the
//!   receiver takes frames, or is paced at a given rate.
//! - [`spike`]: one connection, a burst of 16 MiB frames, then small frames; the
//!   process's resident set before, at its peak and after the small frames.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, LengthDelimited};
use ringmem::uring::UringGroup;
use ringmem::{Ring, WhenFull};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

/// Heap allocations made in the process so far (the binary's allocator counts them).
pub use crate::counting::ALLOCATIONS;

/// Bytes the sender hands to the socket per `write_all`.
const CHUNK: usize = 64 << 10;

/// Bytes of the length header on the wire (tokio_util's default: 4, big-endian).
const HEADER: usize = 4;

/// Bytes of the timestamp at the start of every payload (the smallest frame holds it).
const STAMP: usize = 8;

/// Nanoseconds since the process's first call: the clock the sender stamps frames
/// with and the receiver reads them by (one `Instant`, so both sides agree).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Frame sizes of a row.
#[derive(Clone, Copy, Debug)]
pub enum Sizes {
    /// Every frame's payload this many bytes.
    Fixed(usize),
    /// 70 % 64 B, 25 % 1 KiB, 5 % 16 KiB, in a fixed pseudo-random order.
    Mixed,
}

/// The rows, in table order.
pub const ROWS: [Sizes; 4] = [
    Sizes::Fixed(64),
    Sizes::Fixed(1024),
    Sizes::Fixed(16 << 10),
    Sizes::Mixed,
];

/// The connection counts of each row.
pub const CONNS: [usize; 2] = [1, 4];

impl Sizes {
    /// The row's name in the tables.
    pub fn label(self) -> String {
        match self {
            Sizes::Fixed(n) if n >= 1024 => format!("{} KiB", n / 1024),
            Sizes::Fixed(n) => format!("{n} B"),
            Sizes::Mixed => "mixed".into(),
        }
    }

    fn size(self, i: u64) -> usize {
        match self {
            Sizes::Fixed(n) => n,
            Sizes::Mixed => match (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % 100 {
                0..=69 => 64,
                70..=94 => 1024,
                _ => 16 << 10,
            },
        }
    }

    /// Average wire bytes per frame, header included.
    pub fn average_wire(self) -> usize {
        match self {
            Sizes::Fixed(n) => n + HEADER,
            Sizes::Mixed => {
                (70 * (64 + HEADER) + 25 * (1024 + HEADER) + 5 * ((16 << 10) + HEADER)) / 100
            }
        }
    }

    /// The wire bytes of `frames` frames (4-byte big-endian length headers), and where
    /// each frame's payload starts (its stamp goes there).
    pub fn wire(self, frames: u64) -> Wire {
        let mut bytes = Vec::new();
        let mut payloads = Vec::with_capacity(frames as usize);
        for i in 0..frames {
            let n = self.size(i);
            assert!(n >= STAMP, "a payload holds the sender's timestamp");
            bytes.extend_from_slice(&(n as u32).to_be_bytes());
            payloads.push(bytes.len());
            bytes.extend((0..n).map(|j| (i as usize + j) as u8));
        }
        Wire {
            bytes,
            payloads: payloads.into(),
        }
    }
}

/// A connection's bytes to send, and where its payloads start.
pub struct Wire {
    bytes: Vec<u8>,
    payloads: Arc<[usize]>,
}

/// Which reader the receiver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `FramedRead<_, LengthDelimitedCodec>`.
    TokioUtil,
    /// `AsyncFramedReader::new(_, LengthDelimited::new())`: reads into the process's
    /// pool, `ReadPool::global()` (64 MiB shared by every reader), 64 KiB at a time.
    Ringmem,
    /// `UringGroup::framed(&conn, LengthDelimited::new())`: io_uring multishot
    /// receives into the provided buffers of a group of [`URING_GROUP`] bytes.
    Uring,
}

/// Bytes of the io_uring reader's group.
pub const URING_GROUP: usize = 16 << 20;

impl Reader {
    /// The readers, in column order.
    pub const ALL: [Reader; 3] = [Reader::TokioUtil, Reader::Ringmem, Reader::Uring];

    /// Whether the kernel lets this process use io_uring (else the io_uring reader's
    /// runs are left out, and the reason printed).
    pub fn uring_works(rt: &tokio::runtime::Runtime) -> bool {
        match rt.block_on(async { UringGroup::new(1 << 20).map(drop) }) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("no io_uring reader: {e}");
                false
            }
        }
    }

    /// The reader's column name.
    pub fn name(self) -> &'static str {
        match self {
            Reader::TokioUtil => "tokio_util FramedRead (BytesMut)",
            Reader::Ringmem => "ringmem AsyncFramedReader",
            Reader::Uring => "ringmem UringFramedReader (io_uring)",
        }
    }
}

/// One run's result.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Frames received, all connections.
    pub frames: u64,
    /// From the first byte sent to the last frame received.
    pub secs: f64,
    /// Heap allocations in the process meanwhile.
    pub allocations: u64,
    /// Each frame's latency in nanoseconds (up to a cap per connection), all connections.
    pub latencies: Vec<u32>,
}

async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

/// Sends `wire` in writes of at most `CHUNK` bytes. Before each write, every frame
/// whose stamp begins in it gets the current time: the moment it is handed to the
/// socket. With a `pace` (bytes per second), a write never runs ahead of
/// `pace × time since the first write`: the sender sleeps (a millisecond at a time, the
/// timer's resolution) until the bytes are due, so the load is offered at that rate
/// whatever the receiver does.
async fn send(mut s: TcpStream, mut wire: Vec<u8>, payloads: Arc<[usize]>, pace: Option<f64>) {
    let start = Instant::now();
    let mut next_frame = 0;
    let mut at = 0;
    while at < wire.len() {
        let mut end = (at + CHUNK).min(wire.len());
        if let Some(rate) = pace {
            let due = (start.elapsed().as_secs_f64() * rate) as usize;
            if due <= at {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            end = end.min(due);
        }
        let now = now_ns().to_le_bytes();
        // A stamp cut by the chunk's end is written whole now: its frame's first bytes
        // leave in this write.
        while let Some(&p) = payloads.get(next_frame).filter(|&&p| p < end) {
            wire[p..p + STAMP].copy_from_slice(&now);
            next_frame += 1;
        }
        s.write_all(&wire[at..end]).await.unwrap();
        at = end;
    }
    s.shutdown().await.unwrap();
}

/// Receives every frame of `conn`, recording each one's latency into `latencies`
/// (preallocated: nothing is allocated per frame here).
async fn receive(
    conn: TcpStream,
    reader: Reader,
    group: Option<UringGroup>,
    latencies: &mut Vec<u32>,
) -> io::Result<u64> {
    let mut n = 0u64;
    let mut sum = 0u64;
    let mut note = |frame: &[u8]| {
        let stamp = u64::from_le_bytes(frame[..STAMP].try_into().expect("8 bytes"));
        if latencies.len() < latencies.capacity() {
            let ns = now_ns().saturating_sub(stamp);
            latencies.push(ns.min(u64::from(u32::MAX)) as u32);
        }
        // Touch the frame's last byte too, as a consumer of the payload would.
        sum += frame.len() as u64 + u64::from(frame[frame.len() - 1]);
        n += 1;
    };
    match reader {
        Reader::TokioUtil => {
            let mut r = FramedRead::new(conn, LengthDelimitedCodec::new());
            while let Some(f) = next(&mut r).await {
                note(&f?);
            }
        }
        Reader::Ringmem => {
            let mut r = AsyncFramedReader::new(conn, LengthDelimited::new());
            while let Some(f) = next(&mut r).await {
                note(&f?);
            }
        }
        Reader::Uring => {
            let group = group.expect("a group for the io_uring reader");
            let mut r = group.framed(&conn, LengthDelimited::new())?;
            while let Some(f) = next(&mut r).await {
                note(&f?);
            }
        }
    }
    std::hint::black_box(sum);
    Ok(n)
}

/// Two connected loopback sockets per connection: (sending ends, receiving ends). With
/// `rcvbuf`, each receiving end's `SO_RCVBUF` is set to it before it connects (which
/// turns off the kernel's receive-buffer autotuning for it).
async fn connect(conns: usize, rcvbuf: Option<u32>) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..conns {
        let socket = TcpSocket::new_v4().unwrap();
        if let Some(bytes) = rcvbuf {
            socket.set_recv_buffer_size(bytes).unwrap();
        }
        let (accepted, connected) = tokio::join!(listener.accept(), socket.connect(addr));
        receivers.push(connected.unwrap());
        senders.push(accepted.unwrap().0);
    }
    (senders, receivers)
}

/// How a run's connections are driven.
#[derive(Clone, Copy, Debug, Default)]
pub struct Load {
    /// Frames per second in all (split evenly between the connections); `None`: as
    /// fast as the receiver takes them.
    pub pace: Option<f64>,
    /// The receiving sockets' `SO_RCVBUF`; `None`: the kernel's autotuning.
    pub rcvbuf: Option<u32>,
}

/// One run: `conns` connections, each sending `wire` (of `frames` frames) once, driven
/// as `load` says.
pub fn run(
    rt: &tokio::runtime::Runtime,
    reader: Reader,
    conns: usize,
    wire: &Wire,
    frames: u64,
    load: Load,
) -> Run {
    rt.block_on(async {
        let (senders, receivers) = connect(conns, load.rcvbuf).await;
        let group = (reader == Reader::Uring)
            .then(|| UringGroup::new(URING_GROUP).expect("io_uring works here (uring_works)"));
        // Each sender stamps its own copy; the copies and the latency records are made
        // before the clock and the allocation count start.
        let copies: Vec<Vec<u8>> = (0..conns).map(|_| wire.bytes.clone()).collect();
        let per_conn = (frames as usize).min(1 << 20);
        let mut records: Vec<Vec<u32>> = (0..conns).map(|_| Vec::with_capacity(per_conn)).collect();
        let start = Instant::now();
        let allocs0 = ALLOCATIONS.load(Ordering::Relaxed);
        // Frames per second in all, as wire bytes per second per connection.
        let bytes_per_frame = wire.bytes.len() as f64 / frames as f64;
        let pace = load.pace.map(|fps| fps * bytes_per_frame / conns as f64);
        for (s, copy) in senders.into_iter().zip(copies) {
            tokio::spawn(send(s, copy, wire.payloads.clone(), pace));
        }
        let tasks: Vec<_> = receivers
            .into_iter()
            .zip(records.drain(..))
            .map(|(c, mut lat)| {
                let group = group.clone();
                tokio::spawn(async move {
                    let n = receive(c, reader, group, &mut lat).await.unwrap();
                    (n, lat)
                })
            })
            .collect();
        let mut out = Run::default();
        for t in tasks {
            let (n, lat) = t.await.unwrap();
            assert_eq!(n, frames, "frames lost");
            out.frames += n;
            records.push(lat);
        }
        out.secs = start.elapsed().as_secs_f64();
        // The runtime's own allocations (spawns, connections) count against both readers.
        out.allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocs0;
        out.latencies = records.concat();
        out
    })
}

/// The `q` quantile of `v` (sorted here), in nanoseconds.
pub fn quantile(v: &mut [u32], q: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Payload bytes of a spike frame.
pub const SPIKE_FRAME: usize = 16 << 20;

/// Payload bytes of a small frame after the spike.
const SMALL_FRAME: usize = 1024;

/// The ring of the `Grow` columns: the size of the ring `AsyncFramedReader::new` made
/// per reader before it read into the process's pool.
pub const GROW_RING: usize = 1 << 20;

/// The fixed ring: room for one spike frame, its header and a read region beside it.
pub const FIXED_RING: usize = SPIKE_FRAME + (4 << 20);

/// The receivers of the spike, in column order.
pub const SPIKE_READERS: [&str; 4] = [
    "tokio_util FramedRead (BytesMut)",
    "ringmem, Grow ring of 1 MiB",
    "ringmem, Grow ring of 1 MiB, then trim()",
    "ringmem, fixed ring of 20 MiB",
];

/// What a spike run saw, in MiB of resident set.
#[derive(Debug)]
pub struct SpikeOut {
    /// `VmRSS` with the connection made, before any byte is sent.
    pub before: f64,
    /// `VmHWM` at the end.
    pub peak: f64,
    /// `VmRSS` after the small frames, the reader still alive.
    pub after: f64,
    /// The ring's capacity at the start and at the end (its blocks), for the ringmem
    /// readers.
    pub ring: Option<(f64, f64)>,
}

/// Bytes in MiB.
fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// A line of `/proc/self/status` in MiB (`VmRSS`, `VmHWM`).
fn status_mib(key: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Sends `big` frames of [`SPIKE_FRAME`] bytes, then `small` frames of 1 KiB, from one
/// reused chunk (the sender's memory is small and the same for every receiver).
async fn send_spike(mut s: TcpStream, big: usize, small: usize) {
    let chunk = vec![0x5au8; CHUNK];
    for _ in 0..big {
        s.write_all(&(SPIKE_FRAME as u32).to_be_bytes())
            .await
            .unwrap();
        for _ in 0..SPIKE_FRAME / CHUNK {
            s.write_all(&chunk).await.unwrap();
        }
    }
    let mut frame = (SMALL_FRAME as u32).to_be_bytes().to_vec();
    frame.resize(HEADER + SMALL_FRAME, 0x5a);
    let batch = frame.repeat(CHUNK / frame.len());
    let per_batch = CHUNK / frame.len();
    let mut left = small;
    while left > 0 {
        let n = left.min(per_batch);
        s.write_all(&batch[..n * frame.len()]).await.unwrap();
        left -= n;
    }
    s.shutdown().await.unwrap();
}

/// Reads every frame of a stream and drops it at once; returns the count.
async fn drain<S, B>(r: &mut S) -> u64
where
    S: Stream<Item = io::Result<B>> + Unpin,
    B: std::ops::Deref<Target = [u8]>,
{
    let mut n = 0;
    while let Some(f) = next(r).await {
        std::hint::black_box(f.unwrap().len());
        n += 1;
    }
    n
}

/// The spike for receiver `which` (an index into [`SPIKE_READERS`]): `big` frames of
/// 16 MiB, then `small` frames of 1 KiB, on one connection; `None` for no such receiver.
/// The `trim()` receiver calls `Ring::trim` once the small frames are in, before the
/// resident set is read: what a user who knows the spike is over can do.
pub fn spike(
    rt: &tokio::runtime::Runtime,
    which: usize,
    big: usize,
    small: usize,
) -> Option<SpikeOut> {
    let name = *SPIKE_READERS.get(which)?;
    Some(rt.block_on(async {
        let (mut senders, mut receivers) = connect(1, None).await;
        let conn = receivers.pop().expect("one connection");
        let before = status_mib("VmRSS");
        let sender = tokio::spawn(send_spike(senders.pop().expect("one"), big, small));
        // Each branch reads the resident set with its reader still alive (its buffer
        // or its ring is what is measured).
        let trim = which == 2;
        let (frames, after, ring) = if which == 0 {
            let codec = LengthDelimitedCodec::builder()
                .max_frame_length(SPIKE_FRAME)
                .new_codec();
            let mut r = FramedRead::new(conn, codec);
            let n = drain(&mut r).await;
            (n, status_mib("VmRSS"), None)
        } else {
            let ring = match which {
                1 | 2 => Ring::builder()
                    .capacity(GROW_RING)
                    .when_full(WhenFull::Grow)
                    .build(),
                _ => Ring::builder().capacity(FIXED_RING).build(),
            }
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let start = mib(ring.capacity());
            let decoder = LengthDelimited::new().max_frame_length(SPIKE_FRAME);
            let mut r = AsyncFramedReader::with_ring(conn, decoder, ring);
            let n = drain(&mut r).await;
            // A reader made `with_ring` reads into that ring, never a pool.
            let ring = r.ring().expect("a reader made with_ring has a ring");
            if trim {
                ring.trim();
            }
            let after = status_mib("VmRSS");
            (n, after, Some((start, mib(ring.capacity()))))
        };
        sender.await.unwrap();
        assert_eq!(frames, (big + small) as u64, "{name}: frames lost");
        SpikeOut {
            before,
            peak: status_mib("VmHWM"),
            after,
            ring,
        }
    }))
}
