//! A producer/consumer pipeline on a ring.
//!
//! One producer thread owns a `Ring` and writes each message into a `FixedBufMut` from
//! it, freezes it and sends it over a channel; consumer threads read the messages and
//! drop them. Each drop hands the buffer's bytes back to the producer's ring (one atomic
//! store, on the consumer's thread), so the producer allocates from the same small ring
//! for ever. The ring is small on purpose: when every byte is in messages the consumers
//! still hold, `fixed_wait` parks the producer until a consumer's drop makes room. Every
//! tenth message is built with `write!` into a growable buffer through `writer_wait`,
//! which waits for room the same way while the message grows.
//!
//! ```text
//! cargo run --release --example pipeline
//! cargo run --release --example pipeline -- 20000   # fewer messages
//! ```

use std::io::Write;
use std::thread;

use ringmem::{FixedBuf, Ring, WhenFull};

/// Messages the producer sends, unless the first argument says how many.
const MESSAGES: u64 = 200_000;
/// Threads that read and drop them.
const CONSUMERS: usize = 3;
/// Bytes of the producer's ring: room for a few hundred messages.
const RING_BYTES: usize = 64 * 1024;

fn main() {
    let messages: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse().expect("a message count"),
        None => MESSAGES,
    };
    // A bounded channel; the ring, not the channel, is what limits the messages in flight.
    let (tx, rx) = crossbeam_channel::bounded::<FixedBuf>(1024);

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let rx = rx.clone();
            thread::spawn(move || {
                let (mut count, mut bytes, mut ids) = (0u64, 0usize, 0u64);
                // Until the producer hangs up and the channel is empty.
                for msg in rx {
                    // Read the message: "order <id>: <padding>".
                    let text = std::str::from_utf8(&msg).expect("the producer writes text");
                    let id = text["order ".len()..].split(':').next().unwrap();
                    ids += id.parse::<u64>().expect("an order id");
                    count += 1;
                    bytes += msg.len();
                    // `msg` is dropped here: its region goes back to the producer's ring.
                }
                (count, bytes, ids)
            })
        })
        .collect();
    drop(rx);

    let producer = thread::spawn(move || {
        // The ring lives on the producer thread: `Ring` is `Send` but not `Sync`.
        let ring = Ring::builder()
            .capacity(RING_BYTES)
            .when_full(WhenFull::Fail)
            .build()
            .expect("a 64 KiB ring");
        for id in 0..messages {
            let padding = (id % 200) as usize;
            let msg = if id % 10 == 0 {
                // Its size is known once written: a growable buffer, and a writer that
                // waits for room instead of failing with `StorageFull`.
                let mut ext = ring.extendable_wait(0).expect("an empty buffer fits");
                let mut w = ext.writer_wait();
                write!(w, "order {id}: {}", ".".repeat(padding)).unwrap();
                ext.finalize()
            } else {
                // When full (every byte is in messages not yet dropped by a consumer),
                // parks until a consumer's drop makes room.
                let mut buf = ring
                    .fixed_wait(32 + padding)
                    .expect("a message fits the ring");
                write!(buf, "order {id}: ").unwrap();
                buf.write_all(&[b'.'; 200][..padding]).unwrap();
                buf
            };
            // Frozen: read-only, `Clone + Send + Sync`, still in ring memory.
            tx.send(msg.freeze()).unwrap();
        }
        let at_end = ring.stats();
        drop(tx);
        (ring, at_end)
    });

    let (ring, at_end) = producer.join().unwrap();
    println!(
        "producer: {messages} messages through a {} KiB ring",
        RING_BYTES / 1024
    );
    println!(
        "  when it finished, {} messages ({} bytes) were still with the consumers",
        at_end.live_buffers, at_end.bytes_in_use
    );
    let mut total_ids = 0;
    for (i, consumer) in consumers.into_iter().enumerate() {
        let (count, bytes, ids) = consumer.join().unwrap();
        println!("consumer {i}: read and dropped {count} messages, {bytes} bytes");
        total_ids += ids;
    }
    assert_eq!(
        total_ids,
        messages * (messages - 1) / 2,
        "every message read once"
    );
    // Every buffer was released on a consumer thread: the ring is empty again.
    println!("ring.stats() after the consumers: {:?}", ring.stats());
}
