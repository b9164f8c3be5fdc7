//! A length-delimited echo server and its client on loopback TCP, in one program.
//!
//! The server reads frames with [`FramedReader`] straight into its ring and writes each
//! one back with [`FramedWriter`] (header and frame in one vectored write, the frame
//! never copied into a staging buffer). The client sends frames of mixed sizes from one
//! thread and reads the echoes, checking every byte, on another. Prints frames per
//! second; stops by itself.
//!
//! ```text
//! cargo run --release --example echo            # 200 000 frames
//! cargo run --release --example echo -- 20000   # fewer
//! ```

use std::io::{self, BufWriter};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Instant;

use ringmem::io::{FramedReader, FramedWriter, LengthDelimited};
use ringmem::Ring;

/// The payload of frame `i`: mostly small, now and then 16 KiB, bytes derived from `i`.
fn payload(i: u64, out: &mut Vec<u8>) {
    let len = match i % 16 {
        0 => 16 << 10,
        1..=4 => 1 << 10,
        _ => 64,
    } + (i % 7) as usize;
    out.clear();
    out.extend((0..len).map(|j| (i as usize + j) as u8));
}

/// Echoes every frame of one connection until the peer stops sending.
fn serve(conn: TcpStream) -> io::Result<u64> {
    let codec = LengthDelimited::new();
    let reader = FramedReader::with_ring(conn.try_clone()?, codec, Ring::new(4 << 20));
    let mut writer = FramedWriter::new(BufWriter::with_capacity(64 << 10, conn), codec);
    let mut n = 0;
    for frame in reader {
        writer.write_frame(&frame?)?;
        n += 1;
    }
    writer.flush()?;
    writer.get_ref().get_ref().shutdown(Shutdown::Write)?;
    Ok(n)
}

fn main() -> io::Result<()> {
    let frames: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse().expect("a frame count"),
        None => 200_000,
    };
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = thread::spawn(move || serve(listener.accept()?.0));

    let conn = TcpStream::connect(addr)?;
    conn.set_nodelay(true)?;
    let start = Instant::now();
    let out = conn.try_clone()?;
    let sender = thread::spawn(move || -> io::Result<()> {
        let mut w = FramedWriter::new(
            BufWriter::with_capacity(64 << 10, out),
            LengthDelimited::new(),
        );
        let mut buf = Vec::new();
        for i in 0..frames {
            payload(i, &mut buf);
            w.write_frame(&buf)?;
        }
        w.flush()?;
        w.get_ref().get_ref().shutdown(Shutdown::Write)
    });

    let mut expected = Vec::new();
    let mut echoed = 0;
    let mut bytes = 0;
    for frame in FramedReader::new(conn, LengthDelimited::new()) {
        let frame = frame?;
        payload(echoed, &mut expected);
        assert_eq!(&frame[..], &expected[..], "echo of frame {echoed}");
        bytes += frame.len();
        echoed += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    sender.join().expect("the sender panicked")?;
    let served = server.join().expect("the server panicked")?;
    assert_eq!((served, echoed), (frames, frames), "frames lost");
    println!(
        "echo: {frames} frames ({:.1} MiB) there and back in {secs:.3} s: {:.0} frames/s",
        bytes as f64 / (1 << 20) as f64,
        frames as f64 / secs
    );
    Ok(())
}
