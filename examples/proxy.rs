//! A frame proxy on loopback TCP: frames read from one connection by one task are
//! handed to another task, on another runtime thread, that writes them to a second
//! connection. The frames are [`FixedBuf`] slices of the reading side's ring, so
//! they cross threads without a copy, go out in vectored writes (`AsyncFramedWriter`)
//! and go back to the ring where the writing task drops them; the reader waits for
//! those releases when its ring is full.
//!
//! ```text
//! source --TCP--> [reader task] --channel--> [writer task] --TCP--> sink
//! ```
//!
//! Prints frames per second; stops by itself.
//!
//! ```text
//! cargo run --release --features tokio --example proxy            # 200 000 frames
//! cargo run --release --features tokio --example proxy -- 20000   # fewer
//! ```

use std::io;
use std::time::Instant;

use futures_util::StreamExt;
use ringmem::io::{AsyncFramedReader, AsyncFramedWriter, FramedWriter, LengthDelimited};
use ringmem::{FixedBuf, Ring};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The payload of frame `i`: sizes from 16 bytes to 4 KiB, bytes derived from `i`.
fn payload(i: u64) -> Vec<u8> {
    let len = 16 + (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize;
    (0..len).map(|j| (i as usize ^ j) as u8).collect()
}

/// A connected pair on loopback: (accepted, connecting).
async fn pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let connect = TcpStream::connect(listener.local_addr()?);
    let (accepted, connected) = tokio::join!(listener.accept(), connect);
    Ok((accepted?.0, connected?))
}

/// Writes frames from the channel to `out`, each behind its length header: the frames
/// waiting in the channel go out together, in one vectored write and without a copy.
async fn forward(mut rx: mpsc::Receiver<FixedBuf>, out: TcpStream) -> io::Result<u64> {
    let mut out = AsyncFramedWriter::new(out, LengthDelimited::new());
    let mut n = 0;
    while let Some(frame) = rx.recv().await {
        out.feed(frame)?;
        n += 1;
        while out.queued_bytes() < out.high_water() {
            let Ok(frame) = rx.try_recv() else { break };
            out.feed(frame)?;
            n += 1;
        }
        // Each frame drops in the writer once written, on this task's thread: its
        // region goes back to the reader's ring, and a reader waiting for room wakes.
        out.flush().await?;
    }
    out.shutdown().await?;
    Ok(n)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> io::Result<()> {
    let frames: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse().expect("a frame count"),
        None => 200_000,
    };
    let (proxy_in, source) = pair().await?;
    let (sink, proxy_out) = pair().await?;
    let start = Instant::now();

    // The source: a plain blocking writer on its own thread.
    let source = source.into_std()?;
    source.set_nonblocking(false)?;
    let sending = std::thread::spawn(move || -> io::Result<()> {
        let mut w = FramedWriter::new(io::BufWriter::new(source), LengthDelimited::new());
        for i in 0..frames {
            w.write_frame(&payload(i))?;
        }
        w.flush()
    });

    // The proxy: a reader task on a 1 MiB ring, a writer task, a channel between.
    let (tx, rx) = mpsc::channel(1024);
    let reading = tokio::spawn(async move {
        let mut r =
            AsyncFramedReader::with_ring(proxy_in, LengthDelimited::new(), Ring::new(1 << 20));
        while let Some(frame) = r.next().await {
            if tx.send(frame?).await.is_err() {
                break;
            }
        }
        io::Result::Ok(())
    });
    let writing = tokio::spawn(forward(rx, proxy_out));

    // The sink checks every frame.
    let mut got = 0;
    let mut sink = AsyncFramedReader::new(sink, LengthDelimited::new());
    while let Some(frame) = sink.next().await {
        assert_eq!(&frame?[..], &payload(got)[..], "frame {got}");
        got += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    sending.join().expect("the source panicked")?;
    reading.await.expect("the reader panicked")?;
    let forwarded = writing.await.expect("the writer panicked")?;
    assert_eq!((forwarded, got), (frames, frames), "frames lost");
    println!(
        "proxy: {frames} frames forwarded in {secs:.3} s: {:.0} frames/s",
        frames as f64 / secs
    );
    Ok(())
}
