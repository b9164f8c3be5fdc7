//! Framed readers sharing one `ReadPool` (feature `tokio`): many readers under one
//! budget on a multi-thread runtime, idle readers holding no region, a full pool making
//! readers wait, a reader dropped while it waits, blocking readers on threads.

mod common;

use std::future::poll_fn;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{faulty, holds, pattern, scaled};
use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, Decoder, FramedReader, LengthDelimited, Lines, ReadPool};
use ringmem::{FixedBuf, Ring};
use tokio::io::{AsyncRead, AsyncWriteExt, DuplexStream, ReadBuf};

#[global_allocator]
static A: faulty::Faulty = faulty::Faulty;

/// Bytes of a region's header: what a live region costs beyond its data, at most.
const HDR: usize = 16;

async fn next<R: AsyncRead + Unpin, D: Decoder + Unpin>(
    r: &mut AsyncFramedReader<R, D>,
) -> Option<io::Result<FixedBuf>> {
    poll_fn(|cx| Pin::new(&mut *r).poll_next(cx)).await
}

/// One poll of the stream, whatever it answers.
async fn poll_once<R: AsyncRead + Unpin, D: Decoder + Unpin>(
    r: &mut AsyncFramedReader<R, D>,
) -> Poll<Option<io::Result<FixedBuf>>> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *r).poll_next(cx))).await
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

/// The longest `wire` of `conns` connections' `indexes(frames, true)`.
fn longest_wire(conns: usize, frames: usize) -> usize {
    (0..conns)
        .flat_map(|c| indexes(frames, true).into_iter().map(move |i| wire(c, i)))
        .map(|w| w.len())
        .max()
        .unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The first `frames` frame indexes, or those of frames under 20 KiB (`short`): a
/// budget that frames of 70,000 bytes leave in gaps too short for them stops the
/// readers with less of it held than a test of its bound wants.
fn indexes(frames: usize, short: bool) -> Vec<usize> {
    (0..)
        .filter(|i| !short || i % 7 != 4)
        .take(frames)
        .collect()
}

/// Writes frames `idxs` of connection `conn`, yielding now and then so that reads end
/// inside frames, then closes.
async fn send(mut client: DuplexStream, conn: usize, idxs: Vec<usize>) {
    for idx in idxs {
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
    // One ring, and four (of 256 KiB: reads of 64 KiB).
    many_async_readers_share_one_pool_on(ReadPool::new(1 << 20));
    many_async_readers_share_one_pool_on(ReadPool::with_shards(1 << 20, 4).unwrap());
}

fn many_async_readers_share_one_pool_on(pool: ReadPool) {
    const CONNS: usize = 64;
    let frames = scaled(42);
    // 64 regions of 80 KiB would be 5 MiB: readers wait for each other's room.
    let rt = multi_thread();
    let (to_thread, thread_rx) = crossbeam_channel::unbounded::<FixedBuf>();
    let consumer = std::thread::spawn(move || {
        let mut held = std::collections::VecDeque::new();
        let mut n = 0;
        loop {
            match thread_rx.recv_timeout(Duration::from_millis(20)) {
                Ok(f) => {
                    check(&f);
                    n += 1;
                    held.push_back(f);
                    if held.len() > 8 {
                        held.pop_front();
                    }
                }
                // The frames held could leave only gaps too short for the readers'
                // next ones (a frame keeps its whole region): let them go.
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => held.clear(),
                Err(_) => return n,
            }
        }
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
            tokio::spawn(send(client, conn, indexes(frames, false)));
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

/// (b) Connections that sent a 1 KiB and a 16 KiB frame and went quiet (still open):
/// once their frames are dropped, their readers hold no region of the pool. Then each
/// sends the start of a frame and goes quiet again: a short start (under 4 KiB) holds
/// no ring memory, a longer one at most about twice its bytes. Then the frames complete.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn idle_readers_hold_no_region() {
    const CONNS: usize = 32;
    let pool = ReadPool::new(8 << 20);
    let rt = multi_thread();
    rt.block_on(async {
        let mut conns = Vec::new();
        for conn in 0..CONNS {
            let (mut client, server) = tokio::io::duplex(64 << 10);
            let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
            conns.push(tokio::spawn(async move {
                client.write_all(&wire(conn, 0)).await.unwrap();
                client.write_all(&wire(conn, 1)).await.unwrap();
                for idx in 0..2 {
                    let f = next(&mut r).await.unwrap().unwrap();
                    assert_eq!(check(&f), (conn, idx));
                }
                // Nothing more to read: the stream is pending, and stays open.
                assert!(poll_once(&mut r).await.is_pending());
                (client, r)
            }));
        }
        let mut conns: Vec<_> = futures_join(conns).await;
        let stats = pool.stats();
        assert_eq!(
            stats.live_buffers, 0,
            "idle readers hold regions: {stats:?}"
        );
        assert_eq!(stats.bytes_in_use, 0, "{stats:?}");

        // The start of a 16 KiB frame: 100 bytes on even connections, 6,000 on odd.
        let part = |conn: usize| if conn % 2 == 0 { 100 } else { 6000 };
        let mut tasks = Vec::new();
        for (conn, (mut client, mut r)) in conns.drain(..).enumerate() {
            tasks.push(tokio::spawn(async move {
                let w = wire(conn, 1);
                client.write_all(&w[..4 + part(conn)]).await.unwrap();
                assert!(poll_once(&mut r).await.is_pending());
                (client, r)
            }));
        }
        let mut conns: Vec<_> = futures_join(tasks).await;
        let stats = pool.stats();
        let long = (0..CONNS).filter(|&c| part(c) >= 4096);
        let bound: usize = long.clone().map(|c| 2 * (4 + part(c)) + HDR).sum();
        assert_eq!(stats.live_buffers, long.count(), "{stats:?}");
        assert!(
            stats.bytes_in_use <= bound,
            "partial frames take {} bytes of the pool, more than {bound}",
            stats.bytes_in_use
        );

        // The rest: every frame completes with its own bytes, and the readers are idle
        // again, holding nothing.
        let mut tasks = Vec::new();
        for (conn, (mut client, mut r)) in conns.drain(..).enumerate() {
            tasks.push(tokio::spawn(async move {
                let w = wire(conn, 1);
                client.write_all(&w[4 + part(conn)..]).await.unwrap();
                let f = next(&mut r).await.unwrap().unwrap();
                assert_eq!(check(&f), (conn, 1));
                drop(f);
                assert!(poll_once(&mut r).await.is_pending());
                (client, r)
            }));
        }
        let conns: Vec<_> = futures_join(tasks).await;
        assert_eq!(pool.stats().live_buffers, 0, "{:?}", pool.stats());
        drop(conns);
    });
}

/// Awaits every task, in order.
async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// (b) on a reader's own ring: idle, it holds no region of it either.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn an_idle_reader_on_its_own_ring_holds_nothing() {
    current_thread().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 << 10);
        let mut r =
            AsyncFramedReader::with_ring(server, LengthDelimited::new(), Ring::new(1 << 20));
        client.write_all(&wire(0, 0)).await.unwrap();
        let f = next(&mut r).await.unwrap().unwrap();
        assert!(poll_once(&mut r).await.is_pending());
        assert_eq!(
            r.ring().unwrap().stats().live_buffers,
            1,
            "the frame's region only"
        );
        drop(f);
        assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
        // A partial frame of 10,000 bytes: at most about twice that, in place.
        let w = wire(0, 1);
        client.write_all(&w[..10_004]).await.unwrap();
        assert!(poll_once(&mut r).await.is_pending());
        let stats = r.ring().unwrap().stats();
        assert_eq!(stats.live_buffers, 1);
        assert!(stats.bytes_in_use <= 2 * 10_004 + HDR, "{stats:?}");
        client.write_all(&w[10_004..]).await.unwrap();
        assert_eq!(check(&next(&mut r).await.unwrap().unwrap()), (0, 1));
    });
}

/// A frame that arrives in many small pieces, the reader idle between them: it never
/// holds more than about twice what it has of the frame, and the frame arrives whole
/// (its copies, one per doubling, are not checked here, only their result). The same
/// for a line, whose end the decoder cannot know.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn a_frame_in_many_pieces_holds_about_its_own_bytes() {
    current_thread().block_on(async {
        let pool = ReadPool::new(4 << 20);
        let (mut client, server) = tokio::io::duplex(64 << 10);
        let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
        let mut w = wire(1, 4); // 70,004 bytes of payload
        w.extend_from_slice(&wire(1, 5));
        let first = 4 + payload(1, 4).len();
        let mut sent = 0;
        for piece in w[..first - 1].chunks(2500) {
            client.write_all(piece).await.unwrap();
            sent += piece.len();
            assert!(poll_once(&mut r).await.is_pending());
            let used = pool.stats().bytes_in_use;
            assert!(used <= 2 * sent + HDR, "{sent} bytes read, {used} held");
        }
        client.write_all(&w[first - 1..]).await.unwrap();
        assert_eq!(check(&next(&mut r).await.unwrap().unwrap()), (1, 4));
        assert_eq!(check(&next(&mut r).await.unwrap().unwrap()), (1, 5));
        assert!(poll_once(&mut r).await.is_pending());
        assert_eq!(pool.stats().live_buffers, 0);

        let (mut client, server) = tokio::io::duplex(64 << 10);
        let lines = Lines::with_max_length(1 << 20);
        let mut r = AsyncFramedReader::with_pool(server, lines, &pool);
        let line: Vec<u8> = pattern(7, 200_000).map(|b| b | 0x80).collect();
        for (i, piece) in line.chunks(7000).enumerate() {
            client.write_all(piece).await.unwrap();
            assert!(poll_once(&mut r).await.is_pending());
            let (sent, used) = ((i * 7000 + piece.len()), pool.stats().bytes_in_use);
            assert!(used <= 2 * sent + HDR, "{sent} bytes read, {used} held");
        }
        client.write_all(b"\n").await.unwrap();
        assert_eq!(next(&mut r).await.unwrap().unwrap(), line[..]);
    });
}

/// (c) A consumer keeps every frame: once the frames held leave too few bytes for the
/// next frame the readers stop (no error, no frame), and once it drops them every
/// frame arrives.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn a_full_pool_makes_readers_wait_not_fail() {
    const CONNS: usize = 8;
    // Not scaled down for the sanitizers (`common::scaled`): fewer frames would not
    // fill the pool.
    let frames = 64;
    let budget = 256 << 10;
    let pool = ReadPool::new(budget);
    let rt = multi_thread();
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut readers = Vec::new();
        let mut sent_bytes = 0;
        for conn in 0..CONNS {
            let (client, server) = tokio::io::duplex(8 << 10);
            let idxs = indexes(frames, true);
            sent_bytes += idxs.iter().map(|&i| payload(conn, i).len()).sum::<usize>();
            tokio::spawn(send(client, conn, idxs));
            let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
            let tx = tx.clone();
            readers.push(tokio::spawn(async move {
                while let Some(f) = next(&mut r).await {
                    tx.send(f).unwrap();
                }
            }));
        }
        drop(tx);
        assert!(sent_bytes > 4 * budget, "the test sends too little");
        let longest = longest_wire(CONNS, frames);
        let mut held = Vec::new();
        let mut kept = 0;
        let start = std::time::Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
                Ok(f) => {
                    let f = f.expect("every frame fit the budget").unwrap();
                    kept += f.len();
                    held.push(f);
                }
                // The readers wait only when the gaps between the frames held no
                // longer hold the bytes of a frame together (the longest: 70 KiB and
                // its prefix; a frame no gap holds comes from the heap, paid for
                // with the gaps' room); a wake-up lost, or a claim that misses the
                // room there is, leaves them waiting with such room.
                Err(_) if free(&pool) < longest + 64 => break,
                Err(_) => assert!(
                    start.elapsed().as_secs() < 60,
                    "stuck at {kept} bytes in {} frames: {:?}",
                    held.len(),
                    pool.stats()
                ),
            }
        }
        let total = CONNS * frames;
        assert!(held.len() < total, "every frame fit the budget");
        let waits = pool.counters().waits;
        assert!(waits >= 1, "readers wait, and {waits} waits were counted");
        // The frames received fill most of the rest (88-93 % of the budget in local
        // runs; 46-80 % when a reader waited for a gap that held its frame).
        assert!(
            kept >= budget / 2,
            "the readers stopped at {kept} bytes kept"
        );
        assert!(
            readers.iter().any(|r| !r.is_finished()),
            "every reader ended while the pool was full"
        );
        let mut n = held.len();
        for f in held.drain(..) {
            check(&f);
        }
        while let Some(f) = rx.recv().await {
            check(&f.unwrap());
            n += 1;
        }
        assert_eq!(n, total);
        for r in readers {
            r.await.unwrap();
        }
    });
    assert_eq!(pool.stats().live_buffers, 0);
}

/// Bytes of `pool` that no region holds.
fn free(pool: &ReadPool) -> usize {
    let stats = pool.stats();
    stats.capacity - stats.bytes_in_use
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
    let pool = ReadPool::new(16 << 10);
    const FRAMES: usize = 30; // some 30 KiB, for a pool of 16
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
    blocking_readers_share_a_pool_on(ReadPool::new(512 << 10));
    blocking_readers_share_a_pool_on(ReadPool::with_shards(512 << 10, 4).unwrap());
}

fn blocking_readers_share_a_pool_on(pool: ReadPool) {
    const THREADS: usize = 4;
    // Not scaled down for the sanitizers: fewer frames would not fill the pool.
    let frames = 48;
    let budget = pool.budget();
    let (tx, rx) = crossbeam_channel::unbounded::<io::Result<FixedBuf>>();
    let readers: Vec<_> = (0..THREADS)
        .map(|conn| {
            let idxs = indexes(frames, true);
            let data = idxs.iter().flat_map(|&i| wire(conn, i)).collect();
            let src = Pieces {
                data,
                pos: 0,
                i: conn,
            };
            let mut r = FramedReader::with_pool(src, LengthDelimited::new(), &pool);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut k = 0;
                while let Some(f) = r.next_frame().transpose() {
                    if let Ok(f) = &f {
                        assert_eq!(check(f), (conn, idxs[k]));
                    }
                    k += 1;
                    tx.send(f).unwrap();
                }
                k
            })
        })
        .collect();
    drop(tx);
    let mut held = Vec::new();
    let mut kept = 0;
    // Frames until none comes for a while and no gap holds the longest frame: the
    // readers wait for room (see `a_full_pool_makes_readers_wait_not_fail`). Had the
    // budget not stopped them, they would end: the channel closes.
    let longest = longest_wire(THREADS, frames);
    let start = std::time::Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(300)) {
            Ok(f) => {
                let f = f.unwrap();
                kept += f.len();
                held.push(f);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout)
                if pool.stats().largest_free < longest =>
            {
                break
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => assert!(
                start.elapsed().as_secs() < 60,
                "stuck at {kept} bytes in {} frames: {:?}",
                held.len(),
                pool.stats()
            ),
            Err(e) => panic!("every frame fit the budget: {e}"),
        }
    }
    let total = THREADS * frames;
    assert!(held.len() < total, "every frame fit the budget");
    assert!(
        kept >= budget / 4,
        "the readers stopped at {kept} bytes kept"
    );
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

/// Hands out a stream in reads of varying sizes, answering `Pending` (and waking
/// itself) before every other read: the reader goes idle inside frames again and again.
struct Stalling {
    data: Vec<u8>,
    pos: usize,
    i: usize,
}

impl AsyncRead for Stalling {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.i += 1;
        if this.i % 2 == 0 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = [700, 3000, 9000, 1][this.i / 2 % 4]
            .min(buf.remaining())
            .min(this.data.len() - this.pos);
        buf.put_slice(&this.data[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// Once warm, a stream that goes idle inside frames again and again (its short parts
/// to the heap, its long ones cut in place) allocates nothing on the heap per frame.
#[test]
fn going_idle_mid_frame_allocates_nothing_once_warm() {
    let frames = if cfg!(miri) { 60 } else { 3000 };
    let len = |i: usize| [20, 300, 1000, 6000, 12_000][i % 5] + i % 7;
    let data = (0..frames)
        .flat_map(|i| {
            let mut w = (len(i) as u32).to_be_bytes().to_vec();
            w.extend(pattern(i as u64, len(i)));
            w
        })
        .collect();
    let pool = ReadPool::new(1 << 20);
    let src = Stalling { data, pos: 0, i: 0 };
    let mut r = AsyncFramedReader::with_pool(src, LengthDelimited::new(), &pool);
    let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let (mut n, mut pending) = (0, 0);
    let mut next = || loop {
        match Pin::new(&mut r).poll_next(&mut cx) {
            Poll::Ready(f) => return f.map(Result::unwrap),
            Poll::Pending => pending += 1,
        }
    };
    let warm = (frames / 10).max(30);
    while n < warm {
        let f = next().unwrap();
        assert!(holds(n as u64, &f), "frame {n}");
        n += 1;
    }
    faulty::arm();
    let before = faulty::served();
    while let Some(f) = next() {
        assert!(holds(n as u64, &f), "frame {n}");
        n += 1;
    }
    let allocations = faulty::served() - before;
    faulty::disarm();
    assert_eq!(n, frames);
    assert!(pending > frames, "the stream went idle {pending} times");
    assert_eq!(
        allocations, 0,
        "heap allocations while reading {frames} frames"
    );
    assert_eq!(pool.stats().live_buffers, 0);
}

#[test]
fn a_pool_reader_has_a_pool_and_no_ring() {
    let pool = ReadPool::new(1 << 16);
    let r = FramedReader::with_pool(&b""[..], Lines::new(), &pool);
    assert!(r.ring().is_none());
    assert_eq!(r.pool().map(ReadPool::budget), Some(1 << 16));
    let own = FramedReader::with_ring(&b""[..], Lines::new(), ringmem::Ring::new(1 << 16));
    assert!(own.ring().is_some() && own.pool().is_none());
}

/// Readers and the pool are what a multi-thread runtime needs: `Send` (the pool `Sync`
/// too); the pool's handles share one budget, and a frame outlives them all.
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
    // A frame outlives its pool (the ring's block goes with its last buffer).
    drop((r, b, pool, other));
    assert_eq!(line, b"line"[..]);
}

/// Keeps one frame in `every` of `count` frames of `size` bytes read by `reader` (a
/// consumer thread behind a bounded channel, as a worker that caches some messages);
/// returns the frames kept, or panics when no frame arrives for 10 s (a stall).
type Reader = FramedReader<io::Cursor<Arc<[u8]>>, LengthDelimited>;

fn keep_one_in(mut reader: Reader, count: usize, every: usize) -> (Vec<FixedBuf>, Reader) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<FixedBuf>(64);
    let producer = std::thread::spawn(move || {
        while let Some(f) = reader.next_frame().unwrap() {
            tx.send(f).unwrap();
        }
        reader
    });
    let mut kept = Vec::new();
    for i in 0..count {
        let f = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("stalled after {i} frames, {} kept", kept.len()));
        assert_eq!(u32::from_be_bytes(f[..4].try_into().unwrap()) as usize, i);
        if i % every == 0 {
            kept.push(f);
        }
    }
    (kept, producer.join().unwrap())
}

/// `count` frames of `size` bytes, each starting with its index.
fn numbered(count: usize, size: usize) -> Arc<[u8]> {
    let mut wire = Vec::with_capacity(count * (size + 4));
    for i in 0..count {
        wire.extend_from_slice(&(size as u32).to_be_bytes());
        wire.extend_from_slice(&(i as u32).to_be_bytes());
        wire.resize(wire.len() + size - 4, i as u8);
    }
    wire.into()
}

/// (e) A consumer that keeps one short frame in 1,000 never stalls the reader, and
/// what stays held is the kept frames' own bytes (each copied into a region of its
/// own), not the regions they were read into: on the default constructor and on a
/// pool. On a small ring of the reader's own (where the kept frames soon cut the ring
/// into gaps shorter than a read region, and reads get shorter instead of waiting) the
/// reader never stalls either, but what it holds depends on the consumer's timing:
/// 1.3 to 1.9 times the kept bytes on an idle machine, natively and under ASan, but
/// 5.0 once in CI's test stage beside other work, so only the stall is checked there.
#[test]
#[cfg_attr(miri, ignore = "200,000 frames: too slow under Miri")]
fn keeping_one_frame_in_a_thousand_holds_its_own_bytes() {
    // Not scaled down for the sanitizers: the bound is for a stream long enough that
    // the kept frames outweigh a probe's region.
    let count = 200_000;
    let wire = numbered(count, 100);
    let src = |wire: &Arc<[u8]>| io::Cursor::new(wire.clone());
    let pool = ReadPool::new(1 << 20);
    let readers = [
        ("new", FramedReader::new(src(&wire), LengthDelimited::new())),
        (
            "pool",
            FramedReader::with_pool(src(&wire), LengthDelimited::new(), &pool),
        ),
        (
            "small ring",
            FramedReader::with_ring(src(&wire), LengthDelimited::new(), Ring::new(256 << 10)),
        ),
    ];
    for (name, reader) in readers {
        let (kept, reader) = keep_one_in(reader, count, 1000);
        assert_eq!(kept.len(), count.div_ceil(1000), "{name}");
        let stats = match reader.pool() {
            Some(pool) => pool.stats(),
            None => reader.ring().unwrap().stats(),
        };
        // The kept frames, each in a region of its own (its bytes and a header), but a
        // few in a probe's region of 4 KiB (see `FramedReader`): within 4 times the
        // kept bytes (about 1.5 times in this stream), and on a pool a page of slots
        // (8 KiB for these frames' size) in each shard, which copies go round.
        assert!(stats.live_buffers <= kept.len(), "{name}: {stats:?}");
        let kept_bytes: usize = kept.iter().map(|f| f.len()).sum();
        let pages = reader.pool().map_or(0, |p| p.shards() * (8 << 10));
        assert!(
            name == "small ring" || stats.bytes_in_use <= 4 * kept_bytes + pages,
            "{name}: {stats:?} for {kept_bytes} bytes kept"
        );
        drop(kept);
    }
    assert_eq!(pool.stats().live_buffers, 0);
}

/// Blocking readers on two threads claim from a pool of two shards, and send their
/// frames to a third that keeps them all and drops them at the end: the shards serve
/// both threads, regions are trimmed on the shard that holds them, the frames kept are
/// copied into regions of their own in batches under one lock (after the first
/// probe), and every region goes back. Small enough for Miri (`miri-io` in CI).
#[test]
fn blocking_readers_on_two_shards_across_threads() {
    let pool = ReadPool::with_shards(128 << 10, 2).unwrap();
    assert_eq!(pool.shards(), 2);
    let frames: Vec<Vec<u8>> = (0..120u32)
        .map(|i| vec![i as u8; if i % 40 == 39 { 5000 } else { 100 }])
        .collect();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, FixedBuf)>();
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let mut wire = Vec::new();
            for f in &frames {
                wire.extend_from_slice(&(f.len() as u32).to_be_bytes());
                wire.extend_from_slice(f);
            }
            let (pool, tx) = (pool.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut r = FramedReader::with_pool(&wire[..], LengthDelimited::new(), &pool);
                let mut n = 0;
                while let Some(f) = r.next_frame().unwrap() {
                    tx.send((t, f)).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    drop(tx);
    let mut kept: [Vec<FixedBuf>; 2] = [Vec::new(), Vec::new()];
    for (t, f) in rx {
        kept[t].push(f);
    }
    for r in readers {
        assert_eq!(r.join().unwrap(), frames.len());
    }
    for got in &kept {
        for (f, want) in got.iter().zip(&frames) {
            assert_eq!(&f[..], &want[..]);
        }
    }
    let held = pool.stats();
    assert!(held.live_buffers > 2 * 40, "few frames copied: {held:?}");
    drop(kept);
    assert_eq!(pool.stats().live_buffers, 0);
}

/// (f) The pool's fairness between connections: a consumer that stops taking frames
/// stops its own reader, which holds at most one read region of the pool while it is
/// not polled (and its connection's bytes wait in the socket: TCP's backpressure), so
/// the other connections go on within the budget that leaves them. Here 16 stalled
/// connections, each stopped after three frames with a stream of frames still queued
/// behind it, and 4 others that must each deliver all of theirs, on a pool of 2 MiB.
#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn stalled_consumers_hold_a_region_each_and_the_others_go_on() {
    const STALLED: usize = 16;
    const LIVE: usize = 4;
    let frames = 40;
    let pool = ReadPool::new(2 << 20);
    let rt = multi_thread();
    rt.block_on(async {
        let mut stalled = Vec::new();
        for conn in 0..STALLED {
            let (mut client, server) = tokio::io::duplex(256 << 10);
            let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
            let mut wire_all = Vec::new();
            for idx in indexes(frames, true) {
                wire_all.extend_from_slice(&wire(conn, idx));
            }
            // As much as the pipe takes; the rest waits, as in a socket.
            let writer = tokio::spawn(async move {
                let _ = client.write_all(&wire_all).await;
                client
            });
            // Past the reader's first region (a probe of 4 KiB), into a bulk one.
            for idx in 0..3 {
                assert_eq!(check(&next(&mut r).await.unwrap().unwrap()), (conn, idx));
            }
            // The consumer keeps its reader, and polls it no more.
            stalled.push((r, writer));
        }
        let held = pool.stats();
        let region = (64 << 10) + (16 << 10) + 64; // a read region and its slack
        assert!(
            held.bytes_in_use <= STALLED * region,
            "{STALLED} stalled readers hold {held:?}"
        );
        let live: Vec<_> = (STALLED..STALLED + LIVE)
            .map(|conn| {
                let (client, server) = tokio::io::duplex(8 << 10);
                let idxs = indexes(frames, false);
                let n = idxs.len();
                tokio::spawn(send(client, conn, idxs));
                let mut r = AsyncFramedReader::with_pool(server, LengthDelimited::new(), &pool);
                tokio::spawn(async move {
                    let mut got = 0;
                    while let Some(f) = next(&mut r).await {
                        assert_eq!(check(&f.unwrap()), (conn, got));
                        got += 1;
                    }
                    assert_eq!(got, n);
                })
            })
            .collect();
        for t in live {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("a live connection stopped behind the stalled ones")
                .unwrap();
        }
        drop(stalled);
    });
    assert_eq!(pool.stats().live_buffers, 0);
}

/// After a spike of frames held, the pool gives the pages it touched back: by a call,
/// and by itself (its sweeper) a second or two after the claims stop, with no claim
/// to come, in every shard (the spike spread over both).
#[test]
#[cfg_attr(miri, ignore = "a spike of megabytes, and a second's wait")]
fn a_pool_gives_a_spikes_pages_back() {
    let pool = ReadPool::with_shards(16 << 20, 2).unwrap();
    // Frames of 1 KiB, enough for two spikes of some 1.8 MB each and what follows.
    let frames = 4_000;
    let bytes: Vec<u8> = (0..frames).flat_map(|i| wire(0, 7 * i)).collect();
    let mut reader = FramedReader::with_pool(&bytes[..], LengthDelimited::new(), &pool);
    let spike = |reader: &mut FramedReader<&[u8], LengthDelimited>, n: usize| {
        let held: Vec<_> = (0..n)
            .map(|_| reader.next_frame().unwrap().unwrap())
            .collect();
        for f in &held {
            check(f);
        }
        let touched = pool.stats().bytes_in_use;
        drop(held);
        touched
    };
    let gives_back = cfg!(all(target_os = "linux", target_arch = "x86_64"));
    let touched = spike(&mut reader, 1_700);
    assert_eq!(
        pool.counters().waits,
        0,
        "a spike below the budget waits for nothing"
    );
    pool.give_back_pages();
    // On call (and by the sweeper, on a machine slow enough for a tick to pass).
    let given = pool.counters().bytes_given_back as usize;
    assert!(
        !gives_back || given >= touched / 2,
        "gave back {given} bytes of the {touched} a spike held"
    );
    let touched = spike(&mut reader, 1_700);
    // The sweeper gives back at most twice once claims stop (a tick that saw them,
    // then one that saw none), a tick apart: wait until its count stays 3 s.
    let (mut last, mut since) = (given, std::time::Instant::now());
    while since.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
        let now = pool.counters().bytes_given_back as usize;
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
    let left = pool.give_back_pages();
    assert!(
        left < touched / 4,
        "the claims stopped, {left} bytes of {touched} were left to give back"
    );
    let counted = pool.counters().bytes_given_back as usize;
    assert!(
        counted >= given + left && (!gives_back || counted > given + left),
        "{counted} bytes counted, {given} and {left} given back on call, none by the sweeper"
    );
}

/// A reader waits only when what is held reaches the budget, never because the frames
/// kept leave no gap its next frame fits in: frames of a sixteenth of the budget, each
/// kept, fill 90 % of it without a wait, though the rings of its shards hold only about
/// half as many (a frame no gap holds comes from the heap, paid for with the gaps'
/// room). What is held never passes the budget: the next frame, longer, waits, and
/// the release of a frame served from the heap gives its room back and wakes the
/// reader.
#[test]
fn kept_frames_fill_the_budget_before_a_reader_waits() {
    // Under Miri a pool of one shard (its read ring and its copy ring).
    let budget = if cfg!(miri) { 1 << 20 } else { 64 << 20 };
    let pool = ReadPool::new(budget);
    let size = budget / 16 - 64;
    let count = 16;
    // The last frame a 32nd of the budget longer: with the fifteen before it held, it
    // cannot fit, whatever the rings' layout leaves over.
    let big = size + budget / 32;
    let mut wire = numbered(count - 1, size).to_vec();
    wire.extend_from_slice(&(big as u32).to_be_bytes());
    wire.extend_from_slice(&(count as u32 - 1).to_be_bytes());
    wire.resize(wire.len() + big - 4, 0);
    // The last frame's bytes come once the others are checked: until then the reader
    // waits for bytes, not room.
    let (more, gate) = std::sync::mpsc::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader_pool = pool.clone();
    let reader = std::thread::spawn(move || {
        let mut r = FramedReader::with_pool(Gate::new(gate), LengthDelimited::new(), &reader_pool);
        while let Some(frame) = r.next_frame().unwrap() {
            tx.send(frame).unwrap();
        }
    });
    let last = wire.len() - (big + 4);
    more.send(wire[..last].to_vec()).unwrap();
    let timeout = Duration::from_secs(if cfg!(miri) { 600 } else { 20 });
    let mut held: Vec<FixedBuf> = Vec::new();
    let frame_of = |f: &FixedBuf| u32::from_be_bytes(f[..4].try_into().unwrap()) as usize;
    // Fifteen sixteenths, less what their headers and prefixes leave out.
    for _ in 0..count - 1 {
        let frame = rx.recv_timeout(timeout).unwrap_or_else(|_| {
            panic!(
                "the reader waits with {} frames held: {:?}, {:?}",
                held.len(),
                pool.stats(),
                pool.counters()
            )
        });
        assert_eq!((frame.len(), frame_of(&frame)), (size, held.len()));
        held.push(frame);
    }
    let (stats, counters) = (pool.stats(), pool.counters());
    assert_eq!(counters.waits, 0, "{stats:?}");
    assert!(stats.bytes_in_use >= budget * 9 / 10, "{stats:?}");
    assert!(
        counters.heap_fallbacks > 0,
        "the premise: the rings' gaps serve them all"
    );
    // The frames held, those sent and not yet received, and the region the reader
    // reads the next one into.
    assert!(stats.live_buffers >= held.len(), "{stats:?}");
    assert!(stats.bytes_in_use <= budget, "{stats:?}");
    // The budget is a bound: the next frame, a sixteenth and a 32nd, waits.
    more.send(wire[last..].to_vec()).unwrap();
    drop(more);
    let waited = std::time::Instant::now();
    while pool.counters().waits == 0 {
        assert!(
            rx.try_recv().is_err(),
            "a frame past the budget: {:?}",
            pool.stats()
        );
        assert!(
            waited.elapsed() < timeout,
            "the reader neither waits nor reads"
        );
        std::thread::yield_now();
    }
    // A frame released gives its room back and wakes the reader (one served from the
    // heap too: see the pool's unit test `a_frame_from_the_heap_pays_with_the_gaps`).
    drop(held.pop());
    let frame = rx
        .recv_timeout(timeout)
        .expect("the release woke no reader");
    assert_eq!(frame_of(&frame), held.len() + 1);
    drop((held, frame));
    reader.join().unwrap();
    let stats = pool.stats();
    assert_eq!(
        (stats.live_buffers, stats.bytes_in_use),
        (0, 0),
        "{stats:?}"
    );
}

/// A `Read` of the chunks a channel brings, blocking for each; the stream ends with the
/// channel.
struct Gate {
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: io::Cursor<Vec<u8>>,
}

impl Gate {
    fn new(chunks: std::sync::mpsc::Receiver<Vec<u8>>) -> Gate {
        Gate {
            chunks,
            chunk: io::Cursor::new(Vec::new()),
        }
    }
}

impl Read for Gate {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.chunk.read(buf)? {
                0 if !buf.is_empty() => match self.chunks.recv() {
                    Ok(chunk) => self.chunk = io::Cursor::new(chunk),
                    Err(_) => return Ok(0),
                },
                n => return Ok(n),
            }
        }
    }
}
