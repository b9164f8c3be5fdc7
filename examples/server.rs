//! A server that keeps frames, the case ringmem's framed reader is for: many
//! connections read on the process's [`ReadPool`](ringmem::io::ReadPool), one frame in
//! ten kept in a store shared by every connection (the last 4,096 kept), every frame
//! answered (a kept one with a static reply, the others echoed), and the same server
//! on tokio_util's `FramedRead`/`FramedWrite` beside it as the baseline.
//!
//! Each server runs in a process of its own (this program started again), with its
//! clients in it; the table gives frames per second and the peak resident memory
//! (Linux's `VmHWM`) of each, and their ratio.
//!
//! ```text
//! cargo run --release --features tokio,bytes --example server              # 100 connections, 2,000 frames each
//! cargo run --release --features tokio,bytes --example server -- 20 500    # connections, frames each
//! ```

use std::io;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_sink::Sink;
use futures_util::{FutureExt, StreamExt};
use ringmem::io::{AsyncFramedReader, AsyncFramedWriter, LengthDelimited};
use ringmem::FixedBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

/// Bytes of every frame a client sends.
const SIZE: usize = 4096;
/// One frame in this many is kept in the store.
const KEEP: u64 = 10;
/// Frames the store holds: the last this many kept.
const KEPT_FRAMES: usize = 4096;
/// The reply to a kept frame.
const KEPT: &[u8] = b"+KEPT";

/// The store: the last `KEPT_FRAMES` frames kept, shared by every connection (a cache
/// of recent messages); a frame pushed in drops the oldest.
struct Store<T>(std::sync::Mutex<std::collections::VecDeque<T>>);

impl<T> Store<T> {
    fn new() -> Arc<Self> {
        Arc::new(Store(std::sync::Mutex::new(
            std::collections::VecDeque::with_capacity(KEPT_FRAMES),
        )))
    }

    fn keep(&self, frame: T) {
        let mut kept = self.0.lock().unwrap();
        let oldest = if kept.len() == KEPT_FRAMES {
            kept.pop_front()
        } else {
            None
        };
        kept.push_back(frame);
        drop(kept);
        drop(oldest); // outside the lock
    }
}

/// One connection on ringmem: frames read into the process's pool, replies (the frame
/// itself, or a static one) queued in the writer and written together once no frame
/// is ready.
async fn serve_ringmem(conn: TcpStream, store: Arc<Store<FixedBuf>>) -> io::Result<()> {
    let (rd, wr) = conn.into_split();
    let mut frames = AsyncFramedReader::new(rd, LengthDelimited::new());
    let mut replies = AsyncFramedWriter::new(wr, LengthDelimited::new());
    let mut n = 0u64;
    while let Some(mut frame) = frames.next_frame().await? {
        loop {
            n += 1;
            if n % KEEP == 0 {
                store.keep(frame);
                frame = FixedBuf::from_static(KEPT);
            }
            // Queued; the queue is written out once it holds 64 KiB.
            replies.send(frame).await?;
            // The frames read with this one, without waiting for more.
            match frames.next_frame().now_or_never() {
                Some(next) => match next? {
                    Some(next) => frame = next,
                    None => break,
                },
                None => break,
            }
        }
        replies.flush().await?;
    }
    replies.shutdown().await
}

/// The same connection on tokio_util: `FramedRead` and `FramedWrite` with a
/// `LengthDelimitedCodec`, frames as `Bytes`.
async fn serve_framed(conn: TcpStream, store: Arc<Store<Bytes>>) -> io::Result<()> {
    let (rd, wr) = conn.into_split();
    let mut frames = FramedRead::new(rd, LengthDelimitedCodec::new());
    let mut replies = FramedWrite::new(wr, LengthDelimitedCodec::new());
    let mut n = 0u64;
    while let Some(frame) = frames.next().await {
        let mut frame = frame?.freeze();
        loop {
            n += 1;
            if n % KEEP == 0 {
                store.keep(frame);
                frame = Bytes::from_static(KEPT);
            }
            // `poll_ready` writes the buffer out once it holds 8 KiB.
            std::future::poll_fn(|cx| {
                Sink::<Bytes>::poll_ready(std::pin::Pin::new(&mut replies), cx)
            })
            .await?;
            std::pin::Pin::new(&mut replies).start_send(frame)?;
            match frames.next().now_or_never() {
                Some(Some(next)) => frame = next?.freeze(),
                Some(None) | None => break,
            }
        }
        std::future::poll_fn(|cx| Sink::<Bytes>::poll_flush(std::pin::Pin::new(&mut replies), cx))
            .await?;
    }
    replies.get_mut().shutdown().await
}

/// A client: sends `frames` frames of `SIZE` bytes and reads every reply, checking it.
async fn client(addr: std::net::SocketAddr, frames: u64) -> io::Result<()> {
    let conn = TcpStream::connect(addr).await?;
    let (rd, mut wr) = conn.into_split();
    let sender = tokio::spawn(async move {
        let mut wire = Vec::with_capacity(16 * (SIZE + 4));
        for i in 0..frames {
            wire.extend_from_slice(&(SIZE as u32).to_be_bytes());
            wire.extend((0..SIZE).map(|j| (i as usize ^ j) as u8));
            if wire.len() >= 16 * SIZE || i + 1 == frames {
                wr.write_all(&wire).await?;
                wire.clear();
            }
        }
        wr.shutdown().await
    });
    // Replies read plainly (a buffered reader and a `Vec`), so that the clients cost
    // the same whichever server they talk to.
    let mut replies = tokio::io::BufReader::with_capacity(64 << 10, rd);
    let mut reply = Vec::with_capacity(SIZE);
    for i in 0..frames {
        let len = replies.read_u32().await? as usize;
        reply.resize(len.min(SIZE + 1), 0);
        replies.read_exact(&mut reply).await?;
        let good = if (i + 1) % KEEP == 0 {
            reply == KEPT
        } else {
            reply.len() == SIZE
                && reply
                    .iter()
                    .enumerate()
                    .all(|(j, &b)| b == (i as usize ^ j) as u8)
        };
        if !good {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("reply {i} is wrong"),
            ));
        }
    }
    sender.await.map_err(io::Error::other)?
}

/// Runs one server (`ringmem` or `framed`) and its clients in this process; prints
/// `fps hwm_kib`.
fn serve(which: &str, conns: u64, frames: u64) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ringmem_store = Store::<FixedBuf>::new();
        let framed_store = Store::<Bytes>::new();
        let framed = which == "framed";
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                conn.set_nodelay(true).ok();
                match framed {
                    true => drop(tokio::spawn(serve_framed(conn, framed_store.clone()))),
                    false => drop(tokio::spawn(serve_ringmem(conn, ringmem_store.clone()))),
                }
            }
        });
        let start = Instant::now();
        let clients: Vec<_> = (0..conns)
            .map(|_| tokio::spawn(client(addr, frames)))
            .collect();
        for c in clients {
            c.await.map_err(io::Error::other)??;
        }
        let fps = (conns * frames) as f64 / start.elapsed().as_secs_f64();
        println!("{fps:.0} {}", status_kib("VmHWM").unwrap_or(0));
        Ok(())
    })
}

/// A `/proc/self/status` field in KiB (Linux).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve") {
        return serve(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
    }
    let conns: u64 = args
        .get(1)
        .map_or(100, |n| n.parse().expect("a connection count"));
    let frames: u64 = args
        .get(2)
        .map_or(2000, |n| n.parse().expect("a frame count"));
    println!("{conns} connections x {frames} frames of {SIZE} B; 1 in {KEEP} kept, the last {KEPT_FRAMES}");
    let mut results = Vec::new();
    for which in ["ringmem", "framed"] {
        let out = Command::new(std::env::current_exe()?)
            .args(["--serve", which, &conns.to_string(), &frames.to_string()])
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut it = line
            .split_whitespace()
            .map(|v| v.parse::<f64>().unwrap_or(0.0));
        results.push((it.next().unwrap_or(0.0), it.next().unwrap_or(0.0) / 1024.0));
    }
    let [(rf, rm), (ff, fm)] = [results[0], results[1]];
    println!("{:<24}{:>14}{:>18}", "server", "frames/s", "peak RSS (MiB)");
    println!("{:<24}{:>14.0}{:>18.1}", "ringmem (ReadPool)", rf, rm);
    println!("{:<24}{:>14.0}{:>18.1}", "tokio_util FramedRead", ff, fm);
    if ff > 0.0 && fm > 0.0 {
        println!(
            "ringmem: {:.2}x the frames/s in {:.2}x the memory",
            rf / ff,
            rm / fm
        );
    }
    Ok(())
}
