//! An async producer that waits for ring room instead of failing.
//!
//! A task on a single-threaded tokio runtime builds messages in growable ring buffers:
//! `extendable_async` waits for room to start one, `reserve_async` for room to grow it,
//! and the finished message (`finalize`, then `freeze`) goes to a consumer task that
//! drops it a little later, giving its bytes back to the ring. The ring holds a few
//! dozen messages, so the producer waits for the consumer again and again, without a
//! spin loop and without blocking the thread the consumer runs on.
//!
//! ```text
//! cargo run --example async_pipeline --features tokio
//! cargo run --example async_pipeline --features tokio -- 2000   # fewer messages
//! ```

use ringmem::{FixedBuf, Ring, WhenFull};
use tokio::sync::mpsc;

/// Bytes of the producer's ring.
const RING_BYTES: usize = 16 * 1024;

fn main() {
    let messages: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().expect("a message count"),
        None => 20_000,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    // An `ExtBuf` borrows its ring, so the task that builds messages is not `Send`: a
    // `LocalSet` runs it on this thread, beside the consumer task.
    let local = tokio::task::LocalSet::new();
    let (sent, received) = local.block_on(&runtime, async move {
        let (tx, mut rx) = mpsc::channel::<FixedBuf>(64);
        let consumer = tokio::task::spawn_local(async move {
            let mut bytes = 0;
            while let Some(msg) = rx.recv().await {
                assert!(msg.starts_with(b"msg "));
                bytes += msg.len();
                tokio::task::yield_now().await; // the consumer takes its time
                drop(msg); // back to the producer's ring
            }
            bytes
        });
        let ring = Ring::builder()
            .capacity(RING_BYTES)
            .when_full(WhenFull::Fail)
            .build()
            .expect("a 16 KiB ring");
        let mut sent = 0;
        for i in 0..messages {
            let mut msg = ring.extendable_async(0).await.expect("a message fits");
            msg.extend_from_slice(format!("msg {i}:").as_bytes());
            // The body's length is known only now: wait for room to grow.
            let body = 64 + i % 512;
            msg.reserve_async(body)
                .await
                .expect("a message fits the ring");
            msg.extend_from_slice(&[b'.'; 576][..body]);
            sent += msg.len();
            let msg = msg.finalize().freeze();
            if tx.send(msg).await.is_err() {
                break;
            }
        }
        drop(tx);
        (sent, consumer.await.expect("the consumer panicked"))
    });
    assert_eq!(sent, received, "every byte arrived");
    println!("async pipeline: {messages} messages, {sent} bytes through a 16 KiB ring");
}
