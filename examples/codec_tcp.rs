//! A length-prefixed frame decoder over a real TCP connection (loopback only), decoding
//! into ring memory through the codec pool, with its own load generator.
//!
//! Frames look like Stratum V2's: a 6-byte header (extension type `u16`, message type
//! `u8`, payload length `u24`, little-endian) then the payload. The decoder asks its
//! [`Buffer`] for the header bytes, reads them, asks for the payload bytes, reads them,
//! and takes the frame out with `get_data_owned`; a consumer task (on another runtime
//! thread) keeps the last few frames, checks them and drops them. The same generic
//! decoder runs on the ring `BufferPool` and on the heap `BufferFromSystemMemory`, and
//! prints frames per second for each. Every run is bounded by a frame count and a time
//! limit, so the example stops by itself.
//!
//! ```text
//! cargo run --release --example codec_tcp            # 300 000 frames per run
//! cargo run --release --example codec_tcp -- 50000   # fewer
//! ```

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Bytes of a frame header.
const HEADER: usize = 6;
/// Largest payload the generator sends.
const MAX_PAYLOAD: usize = 16 * 1024;
/// No run lasts longer than this (the generator stops sending).
const TIME_LIMIT: Duration = Duration::from_secs(3);
/// Frames the consumer keeps alive at once (as if still processing them).
const IN_FLIGHT: usize = 64;
/// Capacity of the ring the pool decodes into.
const RING_BYTES: usize = 1 << 20;

/// The payload length of frame `i`: mostly small, now and then large.
fn payload_len(i: u64) -> usize {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    x ^= x >> 29;
    let x = x as usize;
    if i % 64 == 63 {
        MAX_PAYLOAD - x % 1024
    } else {
        x % 512
    }
}

/// Sends up to `frames` frames; returns how many it sent and the sum of their payload bytes.
async fn generate(addr: SocketAddr, frames: u64) -> io::Result<(u64, u64)> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut out = BufWriter::with_capacity(64 * 1024, stream);
    let deadline = Instant::now() + TIME_LIMIT;
    let payload: Vec<u8> = (0..MAX_PAYLOAD).map(|j| (j * 7) as u8).collect();
    let (mut sent, mut sum) = (0u64, 0u64);
    for i in 0..frames {
        if i % 1024 == 0 && Instant::now() >= deadline {
            break;
        }
        let len = payload_len(i);
        let l = (len as u32).to_le_bytes();
        out.write_all(&[0, 0, (i % 256) as u8, l[0], l[1], l[2]])
            .await?;
        out.write_all(&payload[..len]).await?;
        sum += payload[..len].iter().map(|&b| u64::from(b)).sum::<u64>();
        sent += 1;
    }
    out.flush().await?;
    out.shutdown().await?;
    Ok((sent, sum))
}

/// Decodes frames from `stream` into `buf` until the peer closes, sending each to `tx`.
async fn decode<B: Buffer>(
    stream: TcpStream,
    buf: &mut B,
    tx: mpsc::Sender<B::Slice>,
) -> io::Result<u64> {
    let mut input = BufReader::with_capacity(64 * 1024, stream);
    let mut frames = 0;
    loop {
        match input.read_exact(buf.get_writable(HEADER)).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(frames),
            Err(e) => return Err(e),
        }
        let h = buf.get_data_by_ref_(HEADER);
        let len = u32::from_le_bytes([h[3], h[4], h[5], 0]) as usize;
        input.read_exact(buf.get_writable(len)).await?;
        let frame = buf.get_data_owned();
        frames += 1;
        if tx.send(frame).await.is_err() {
            return Err(io::Error::other("the consumer stopped"));
        }
    }
}

/// Checks and drops frames, keeping the last [`IN_FLIGHT`] alive; returns how many it
/// saw and the sum of their payload bytes.
async fn consume<S: AsRef<[u8]>>(mut rx: mpsc::Receiver<S>) -> (u64, u64) {
    let mut window = std::collections::VecDeque::with_capacity(IN_FLIGHT);
    let (mut frames, mut sum) = (0u64, 0u64);
    while let Some(frame) = rx.recv().await {
        let bytes = frame.as_ref();
        let len = u32::from_le_bytes([bytes[3], bytes[4], bytes[5], 0]) as usize;
        assert_eq!(
            bytes.len(),
            HEADER + len,
            "frame {frames} has the wrong length"
        );
        sum += bytes[HEADER..].iter().map(|&b| u64::from(b)).sum::<u64>();
        frames += 1;
        if window.len() == IN_FLIGHT {
            window.pop_front();
        }
        window.push_back(frame);
    }
    (frames, sum)
}

/// One run: a connection on loopback, the generator, the decoder into `buf`, the consumer.
async fn run<B>(name: &str, buf: &mut B, frames: u64) -> io::Result<()>
where
    B: Buffer,
    B::Slice: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let generator = tokio::spawn(generate(listener.local_addr()?, frames));
    let (stream, _) = listener.accept().await?;
    stream.set_nodelay(true)?;
    let (tx, rx) = mpsc::channel(256);
    let consumer = tokio::spawn(consume(rx));
    let start = Instant::now();
    let decoded = decode(stream, buf, tx).await?;
    let (seen, sum) = consumer.await.expect("the consumer panicked");
    let secs = start.elapsed().as_secs_f64();
    let (sent, sent_sum) = generator.await.expect("the generator panicked")?;
    assert_eq!(
        (decoded, seen, sum),
        (sent, sent, sent_sum),
        "{name}: frames were lost or damaged"
    );
    println!(
        "{name:<40} {sent:>8} frames in {secs:>6.3} s: {:>10.0} frames/s",
        sent as f64 / secs
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> io::Result<()> {
    let frames: u64 = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| io::Error::other("usage: codec_tcp [frames]"))?,
        None => 300_000,
    };
    println!(
        "frames of 6 + 0..16384 bytes over 127.0.0.1, at most {frames} per run and {TIME_LIMIT:?}"
    );
    for round in 1..=2 {
        println!("round {round}");
        let mut pool = BufferPool::new(RING_BYTES);
        run("ring BufferPool (1 MiB ring)", &mut pool, frames).await?;
        println!(
            "{:<40} messages that fell back to the heap: {}",
            "",
            pool.fallbacks()
        );
        let mut heap = BufferFromSystemMemory::new(0);
        run("heap BufferFromSystemMemory", &mut heap, frames).await?;
    }
    Ok(())
}
