//! The framed-reader comparison (issue 23): the same sender and receiver on loopback
//! TCP, the receiver reading length-delimited frames with tokio_util's
//! `FramedRead<_, LengthDelimitedCodec>` (over a `BytesMut`) or with ringmem's
//! `AsyncFramedReader` (over its ring). Frames of 64 B, 1 KiB, 16 KiB and a mix, over
//! 1 and 4 connections; frames per second, the gap between consecutive frames at the
//! receiver (p50/p99/p99.9), and heap allocations per frame (the binary's counting
//! global allocator).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, LengthDelimited};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

/// Heap allocations made in the process so far (the binary's allocator counts them).
pub static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Frame sizes of a row.
#[derive(Clone, Copy, Debug)]
pub enum Sizes {
    Fixed(usize),
    /// 70 % 64 B, 25 % 1 KiB, 5 % 16 KiB, in a fixed pseudo-random order.
    Mixed,
}

impl Sizes {
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

    /// The wire bytes of `frames` frames, 4-byte big-endian length headers.
    pub fn wire(self, frames: u64) -> Vec<u8> {
        let mut w = Vec::new();
        for i in 0..frames {
            let n = self.size(i);
            w.extend_from_slice(&(n as u32).to_be_bytes());
            w.extend((0..n).map(|j| (i as usize + j) as u8));
        }
        w
    }
}

/// Which reader the receiver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    TokioUtil,
    Ringmem,
}

/// One run's result.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub frames: u64,
    pub secs: f64,
    pub allocations: u64,
    /// Gaps between consecutive frames at the receivers, nanoseconds, all connections.
    pub gaps: Vec<u32>,
}

async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

/// Receives every frame of `conn`, recording the gaps into `gaps` (preallocated).
async fn receive(conn: TcpStream, reader: Reader, gaps: &mut Vec<u32>) -> io::Result<u64> {
    let mut n = 0u64;
    let mut sum = 0u64;
    let mut last = Instant::now();
    let mut note = |len: usize, first: u8| {
        let now = Instant::now();
        if gaps.len() < gaps.capacity() {
            gaps.push(now.duration_since(last).as_nanos().min(u32::MAX as u128) as u32);
        }
        last = now;
        sum += len as u64 + u64::from(first);
        n += 1;
    };
    match reader {
        Reader::TokioUtil => {
            let mut r = FramedRead::new(conn, LengthDelimitedCodec::new());
            while let Some(f) = next(&mut r).await {
                let f = f?;
                note(f.len(), f.first().copied().unwrap_or(0));
            }
        }
        Reader::Ringmem => {
            let mut r = AsyncFramedReader::new(conn, LengthDelimited::new());
            while let Some(f) = next(&mut r).await {
                let f = f?;
                note(f.len(), f.first().copied().unwrap_or(0));
            }
        }
    }
    std::hint::black_box(sum);
    Ok(n)
}

/// One run: `conns` connections, each sending `wire` (of `frames` frames) once.
pub fn run(
    rt: &tokio::runtime::Runtime,
    reader: Reader,
    conns: usize,
    wire: &[u8],
    frames: u64,
) -> Run {
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut receivers = Vec::new();
        let mut senders = Vec::new();
        for _ in 0..conns {
            let connect = TcpStream::connect(addr);
            let (accepted, connected) = tokio::join!(listener.accept(), connect);
            receivers.push(connected.unwrap());
            senders.push(accepted.unwrap().0);
        }
        let wire: std::sync::Arc<[u8]> = wire.into();
        let gaps_per = (frames as usize).min(1 << 20);
        let mut gap_bufs: Vec<Vec<u32>> =
            (0..conns).map(|_| Vec::with_capacity(gaps_per)).collect();
        let start = Instant::now();
        let allocs0 = ALLOCATIONS.load(Ordering::Relaxed);
        for mut s in senders {
            let wire = wire.clone();
            tokio::spawn(async move {
                for chunk in wire.chunks(64 << 10) {
                    s.write_all(chunk).await.unwrap();
                }
                s.shutdown().await.unwrap();
            });
        }
        let tasks: Vec<_> = receivers
            .into_iter()
            .zip(gap_bufs.drain(..))
            .map(|(c, mut gaps)| {
                tokio::spawn(async move {
                    let n = receive(c, reader, &mut gaps).await.unwrap();
                    (n, gaps)
                })
            })
            .collect();
        let mut out = Run::default();
        for t in tasks {
            let (n, gaps) = t.await.unwrap();
            assert_eq!(n, frames, "frames lost");
            out.frames += n;
            gap_bufs.push(gaps);
        }
        out.secs = start.elapsed().as_secs_f64();
        out.allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocs0;
        // The runtime's own allocations (spawns, connections) count against both readers.
        out.gaps = gap_bufs.concat();
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

/// Formats nanoseconds as ns or µs.
pub fn time(ns: u32) -> String {
    let d = Duration::from_nanos(u64::from(ns));
    if d < Duration::from_micros(10) {
        format!("{ns} ns")
    } else {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    }
}
