//! Decoding frames into ring memory with the codec pool (`ringmem::codec`, with
//! `buffer_sv2`'s names).
//!
//! A decoder asks its `BufferPool` for the header bytes, reads the payload length from
//! them, asks for the payload bytes, and takes the whole frame out with
//! `get_data_owned`: an owned `Slice` it can send to another thread. Frames live in the
//! pool's ring; when the ring is full (frames kept too long), they go to the heap
//! instead and the pool counts them, and the ring serves again once frames are dropped.
//! `examples/codec_tcp.rs` runs the same decoder over a TCP connection.
//!
//! ```text
//! cargo run --example codec_pool
//! ```

use std::sync::mpsc;
use std::thread;

use ringmem::codec::{Buffer, BufferPool, Slice};

/// Bytes of a frame header: the payload length, `u16` little-endian.
const HEADER: usize = 2;

/// A stream of `n` frames, as they would arrive on a socket.
fn stream(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let payload = format!("frame {i}: {}", "x".repeat(i % 300));
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(payload.as_bytes());
    }
    out
}

/// Decodes the next frame of `input` into `pool`, header included.
fn decode(pool: &mut BufferPool, input: &mut &[u8]) -> Slice {
    pool.get_writable(HEADER).copy_from_slice(&input[..HEADER]);
    let header = pool.get_data_by_ref_(HEADER);
    let len = usize::from(u16::from_le_bytes([header[0], header[1]]));
    pool.get_writable(len)
        .copy_from_slice(&input[HEADER..HEADER + len]);
    *input = &input[HEADER + len..];
    pool.get_data_owned()
}

fn main() {
    let mut pool = BufferPool::new(16 * 1024);

    // 1. Frames handed to a worker thread, which reads and drops them.
    let bytes = stream(10_000);
    let (tx, rx) = mpsc::sync_channel::<Slice>(32);
    let worker = thread::spawn(move || {
        let mut payload_bytes = 0;
        for frame in rx {
            assert!(frame[HEADER..].starts_with(b"frame "));
            payload_bytes += frame.len() - HEADER;
        } // each frame's ring memory is released here, on the worker thread
        payload_bytes
    });
    let (mut input, mut in_ring) = (&bytes[..], 0);
    while !input.is_empty() {
        let frame = decode(&mut pool, &mut input);
        in_ring += usize::from(frame.is_ring());
        tx.send(frame).unwrap();
    }
    drop(tx);
    let payload_bytes = worker.join().unwrap();
    println!(
        "streamed 10,000 frames ({payload_bytes} payload bytes) to a worker: \
         {in_ring} in ring memory, {} on the heap",
        pool.fallbacks()
    );

    // 2. Frames kept: the 16 KiB ring fills up and the heap takes the rest.
    let bytes = stream(200);
    let mut input = &bytes[..];
    let mut kept = Vec::new();
    while !input.is_empty() {
        kept.push(decode(&mut pool, &mut input));
    }
    let in_ring = kept.iter().filter(|f| f.is_ring()).count();
    println!(
        "kept 200 frames: {in_ring} in ring memory, {} on the heap (fallbacks so far: {})",
        kept.len() - in_ring,
        pool.fallbacks()
    );
    drop(kept);
    let mut input = &bytes[..];
    let frame = decode(&mut pool, &mut input);
    println!(
        "after dropping them, the next frame is in ring memory again: {}",
        frame.is_ring()
    );
}
