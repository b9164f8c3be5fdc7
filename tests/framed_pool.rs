//! Framed readers sharing one `ReadPool` (feature `tokio`): many readers under one
//! budget on a multi-thread runtime, a reader dropped while it waits, blocking readers
//! on threads.

mod common;

use std::future::poll_fn;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{holds, pattern, scaled};
use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, Decoder, FramedReader, LengthDelimited, Lines, ReadPool};
use ringmem::FixedBuf;
use tokio::io::{AsyncRead, AsyncWriteExt, DuplexStream};

async fn next<R: AsyncRead + Unpin, D: Decoder + Unpin>(
    r: &mut AsyncFramedReader<R, D>,
) -> Option<io::Result<FixedBuf>> {
    poll_fn(|cx| Pin::new(&mut *r).poll_next(cx)).await
}

/// Frame `idx` of connection `conn`: its id (8 bytes), then the id's pattern; the
/// lengths cycle through the 1 KiB and 16 KiB, small ones, and one longer than
/// a read region.
fn payload(conn: usize, idx: usize) -> Vec<u8> {
    let len = [1024, 16 << 10, 8, 100, 70_000, 5000, 3][idx % 7].max(8) + idx % 5;
    let id = ((conn as u64) << 32) | idx as u64;
    id.to_le_bytes()
        .into_iter()
        .chain(pattern(id, len - 8))
        .collect()
}

/// The frame's (connection, index), after checking that it holds its own bytes.
fn check(frame: &[u8]) -> (usize, usize) {
    let id = u64::from_le_bytes(frame[..8].try_into().unwrap());
    let (conn, idx) = ((id >> 32) as usize, id as u32 as usize);
    assert_eq!(frame.len(), payload(conn, idx).len(), "frame {conn}/{idx}");
    assert!(
        holds(id, &frame[8..]),
        "frame {conn}/{idx} holds other bytes"
    );
    (conn, idx)
}

/// `payload` with its 4-byte length prefix, as `LengthDelimited` reads it.
fn wire(conn: usize, idx: usize) -> Vec<u8> {
    let p = payload(conn, idx);
    let mut w = (p.len() as u32).to_be_bytes().to_vec();
    w.extend_from_slice(&p);
    w
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes frames `0..frames` of connection `conn`, yielding now and then so that reads
/// end inside frames, then closes.
async fn send(mut client: DuplexStream, conn: usize, frames: usize) {
    for idx in 0..frames {
        client.write_all(&wire(conn, idx)).await.unwrap();
        if idx % 3 == conn % 3 {
            tokio::task::yield_now().await;
        }
    }
    client.shutdown().await.unwrap();
}

/// (a) 64 connections on one pool smaller than their read regions together, on a
/// 2-worker runtime: half the readers move to another thread halfway (a blocking-pool
/// thread of the runtime, which goes on polling them there), frames go to a consumer
/// thread and to a consumer task, which check and drop them (some after holding them
/// for a while). Every frame arrives, in order per connection, with its own bytes, and
/// the pool is empty at the end.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn many_async_readers_share_one_pool() {
    const CONNS: usize = 64;
    let frames = scaled(42);
    // 64 regions of 80 KiB would be 5 MiB: readers wait for each other's room.
    let pool = ReadPool::new(1 << 20);
    let rt = multi_thread();
    let (to_thread, thread_rx) = crossbeam_channel::unbounded::<FixedBuf>();
    let consumer = std::thread::spawn(move || {
        let mut held = std::collections::VecDeque::new();
        let mut n = 0;
        for f in thread_rx {
            check(&f);
            n += 1;
            held.push_back(f);
            if held.len() > 8 {
                held.pop_front();
            }
        }
        n
    });
    let polled_on = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let got = rt.block_on(async {
        let (to_task, mut task_rx) = tokio::sync::mpsc::unbounded_channel::<FixedBuf>();
        let task_consumer = tokio::spawn(async move {
            let mut n = 0;
            while let Some(f) = task_rx.recv().await {
                check(&f);
                n += 1;
                if n % 5 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            n
        });
        let mut readers = Vec::new();
        for conn in 0..CONNS {
            let (client, server) = tokio::io::duplex(1024 + conn * 331);
            tokio::spawn(send(client, conn, frames));
            let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
            let (to_thread, to_task) = (to_thread.clone(), to_task.clone());
            let polled_on = polled_on.clone();
            let handle = tokio::runtime::Handle::current();
            readers.push(tokio::spawn(async move {
                let mut idx = 0;
                let take = move |f: io::Result<FixedBuf>, idx: &mut usize| {
                    let f = f.unwrap();
                    assert_eq!(check(&f), (conn, *idx), "out of order");
                    *idx += 1;
                    polled_on
                        .lock()
                        .unwrap()
                        .insert(std::thread::current().id());
                    if *idx % 2 == 0 {
                        to_thread.send(f).unwrap();
                    } else {
                        to_task.send(f).unwrap();
                    }
                };
                while idx < frames / 2 {
                    take(next(&mut r).await.unwrap(), &mut idx);
                }
                if conn % 2 == 1 {
                    // The rest on another thread, off the runtime's workers.
                    return tokio::task::spawn_blocking(move || {
                        handle.block_on(async move {
                            while let Some(f) = next(&mut r).await {
                                take(f, &mut idx);
                            }
                            idx
                        })
                    })
                    .await
                    .unwrap();
                }
                while let Some(f) = next(&mut r).await {
                    take(f, &mut idx);
                }
                idx
            }));
        }
        drop((to_thread, to_task));
        let mut got = 0;
        for (conn, r) in readers.into_iter().enumerate() {
            assert_eq!(r.await.unwrap(), frames, "connection {conn}");
            got += frames;
        }
        got - task_consumer.await.unwrap()
    });
    assert_eq!(consumer.join().unwrap(), got, "frames the thread consumed");
    let threads = polled_on.lock().unwrap().len();
    assert!(threads >= 2, "readers polled on {threads} thread(s)");
    let stats = pool.stats();
    assert_eq!(
        (stats.live_buffers, stats.bytes_in_use),
        (0, 0),
        "{stats:?}"
    );
}

/// A waker that counts its wake-ups.
struct CountWakes(AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// (d) A reader dropped while it waits for room (registered for a release, its own
/// bytes always ready): the release that makes room does not wake it (it left the
/// waiters), another reader on the pool goes on, and the pool ends empty.
#[test]
fn a_reader_dropped_while_waiting_leaves() {
    let pool = ReadPool::new(64 << 10);
    const FRAMES: usize = 100; // some 100 KiB, for a pool of 64
    let small = |conn| -> Vec<u8> { (0..FRAMES).flat_map(|i| wire(conn, 7 * i)).collect() };
    let (a_wire, x_wire) = (small(0), small(1));
    let mut a = AsyncFramedReader::with_pool(&a_wire[..], LengthDelimited::new(), &pool);
    let mut x = AsyncFramedReader::with_pool(&x_wire[..], LengthDelimited::new(), &pool);
    let a_wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let a_waker = Waker::from(a_wakes.clone());
    let mut a_cx = Context::from_waker(&a_waker);
    // `a` fills the pool with frames held here; its bytes are always ready, so its
    // first `Pending` is a wait for room.
    let mut held = Vec::new();
    while let Poll::Ready(f) = Pin::new(&mut a).poll_next(&mut a_cx) {
        let f = f.expect("the pool never filled").unwrap();
        held.push(f);
    }
    assert!(held.len() < FRAMES, "the pool held every frame");
    let x_wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let x_waker = Waker::from(x_wakes.clone());
    let mut x_cx = Context::from_waker(&x_waker);
    // Past its yields to the executor (each wakes its own task), `x` registers.
    for _ in 0..100 {
        assert!(Pin::new(&mut x).poll_next(&mut x_cx).is_pending());
    }
    let before = x_wakes.0.load(Ordering::Relaxed);
    assert!(
        Pin::new(&mut x).poll_next(&mut x_cx).is_pending(),
        "room without a release"
    );
    assert_eq!(
        x_wakes.0.load(Ordering::Relaxed),
        before,
        "a registered waiter woke itself"
    );
    drop(x);
    let ids: Vec<_> = held.iter().map(|f| check(f)).collect();
    drop(held);
    assert_eq!(
        x_wakes.0.load(Ordering::Relaxed),
        before,
        "the release woke a dropped reader"
    );
    // `a` goes on with the room made.
    let mut n = ids.len();
    loop {
        match Pin::new(&mut a).poll_next(&mut a_cx) {
            Poll::Ready(Some(f)) => {
                assert_eq!(check(&f.unwrap()), (0, 7 * n));
                n += 1;
            }
            Poll::Ready(None) => break,
            Poll::Pending => panic!("waiting on an empty pool"),
        }
    }
    assert_eq!(n, FRAMES);
    let stats = pool.stats();
    assert_eq!(
        (stats.live_buffers, stats.bytes_in_use),
        (0, 0),
        "{stats:?}"
    );
}

/// Reads a wire in pieces of varying sizes (so that reads end inside frames).
struct Pieces {
    data: Vec<u8>,
    pos: usize,
    i: usize,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.i += 1;
        let n = [7000, 100, 30_000, 1, 4096][self.i % 5]
            .min(buf.len())
            .min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// (e) Blocking readers on threads sharing one pool: a consumer thread keeps their
/// frames until the readers stop (they wait, blocked, for room), then drops them; every
/// frame arrives with its own bytes.
#[test]
#[cfg_attr(
    miri,
    ignore = "a wait of 300 ms per phase, and threads: too slow under Miri"
)]
fn blocking_readers_share_a_pool() {
    const THREADS: usize = 4;
    let frames = scaled(48);
    let budget = 512 << 10;
    let pool = ReadPool::new(budget);
    let (tx, rx) = crossbeam_channel::unbounded::<io::Result<FixedBuf>>();
    let readers: Vec<_> = (0..THREADS)
        .map(|conn| {
            let data = (0..frames).flat_map(|i| wire(conn, i)).collect();
            let src = Pieces {
                data,
                pos: 0,
                i: conn,
            };
            let mut r = FramedReader::with_pool(src, LengthDelimited::new(), &pool);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut idx = 0;
                while let Some(f) = r.next_frame().transpose() {
                    if let Ok(f) = &f {
                        assert_eq!(check(f), (conn, idx));
                    }
                    idx += 1;
                    tx.send(f).unwrap();
                }
                idx
            })
        })
        .collect();
    drop(tx);
    let mut held = Vec::new();
    let mut kept = 0;
    // Frames until none comes for a while once they fill half the budget: the readers
    // wait for room. (Had the budget not stopped them, they would end: the channel
    // closes.)
    let start = std::time::Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(300)) {
            Ok(f) => {
                let f = f.unwrap();
                kept += f.len();
                held.push(f);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) if kept >= budget / 2 => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                assert!(start.elapsed().as_secs() < 60, "stuck at {kept} bytes")
            }
            Err(e) => panic!("every frame fit the budget: {e}"),
        }
    }
    let total = THREADS * frames;
    assert!(held.len() < total, "every frame fit the budget");
    let mut n = held.len();
    drop(held);
    for f in rx {
        check(&f.unwrap());
        n += 1;
    }
    assert_eq!(n, total);
    for r in readers {
        assert_eq!(r.join().unwrap(), frames);
    }
    assert_eq!(pool.stats().live_buffers, 0);
}

#[test]
#[should_panic(expected = "ReadPool")]
fn ring_of_a_pool_reader_panics() {
    let pool = ReadPool::new(1 << 16);
    let r = FramedReader::with_pool(&b""[..], Lines::new(), &pool);
    let _ = r.ring();
}

/// Readers and the pool are what a multi-thread runtime needs: `Send` (the pool `Sync`
/// too), and the pool's handles share one budget.
#[test]
fn pool_handles_share_one_budget() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let pool = ReadPool::new(1 << 16);
    send_sync(&pool);
    let r = AsyncFramedReader::with_pool(tokio::io::empty(), Lines::new(), &pool);
    send(&r);
    let other = pool.clone();
    let mut b = FramedReader::with_pool(&b"line\n"[..], Lines::new(), &other);
    let line = b.next_frame().unwrap().unwrap();
    assert_eq!(
        pool.stats().live_buffers,
        1,
        "a clone's frame is in the same pool"
    );
    assert_eq!(r.pool().unwrap().budget(), pool.budget());
    drop(line);
    assert_eq!(other.stats().live_buffers, 0);
}
