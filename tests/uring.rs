//! The io_uring receive path on the real kernel: frames whole and in order over many
//! connections, with and without incremental consumption; `ENOBUFS` while frames are
//! held, then a release; a reader that does not read, taking nothing until its first
//! look and then paused at its queue's cap; readers that stop reading, whose queues are
//! copied out so that another connection goes on; pages given back once the receives
//! are quiet; forty connections parked at once, all restarted in turn; readers asleep
//! on partial frames, which leave the ring once they cannot be joined; a dropped
//! reader's receive cancelled and its socket closed; a runtime dropped with receives in
//! flight; io_uring refused by a seccomp filter.
//!
//! Where the kernel refuses io_uring itself (the probe: an instance of two entries),
//! each test prints `URING SKIPPED` and returns; where the probe works, a group that
//! cannot be made fails the test. Each test that ran prints `URING RAN` (CI counts
//! both lines).
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ringmem::io::LengthDelimited;
use ringmem::uring::{UringError, UringFramedReader, UringGroup, UringOptions, UringStats};
use ringmem::FixedBuf;

/// A group as `opts` say, or `None` (after a loud line) where the kernel refuses
/// io_uring outright.
fn group(name: &str, opts: UringOptions) -> Option<UringGroup> {
    match UringGroup::with_options(opts) {
        Ok(g) => {
            eprintln!("URING RAN {name} (incremental: {})", g.stats().incremental);
            Some(g)
        }
        Err(UringError::Unavailable(e)) if io_uring::IoUring::new(2).is_err() => {
            eprintln!("URING SKIPPED {name}: io_uring refused here: {e}");
            None
        }
        Err(e) => panic!("{name}: io_uring works here, but the group failed: {e}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Reads the frames `sent` in order from `frames`, a reader of `group`, each within
/// 10 s (`what`, the frame's index in `sent` and the group's stats say which stalled).
async fn read_all(
    group: &UringGroup,
    frames: &mut UringFramedReader<LengthDelimited>,
    sent: &[Vec<u8>],
    what: &str,
) {
    for (i, p) in sent.iter().enumerate() {
        let f = tokio::time::timeout(Duration::from_secs(10), frames.next_frame())
            .await
            .unwrap_or_else(|_| panic!("{what}: stalled at frame {i}: {:?}", group.stats()))
            .unwrap()
            .expect("a frame");
        assert_eq!(&f[..], &p[..], "{what}: frame {i}");
    }
}

/// Reads `frames`' first frame, `sent[0]`, and leaves the reader asleep: a reader's
/// first look for bytes starts its connection's receive.
async fn read_first(
    group: &UringGroup,
    frames: &mut UringFramedReader<LengthDelimited>,
    sent: &[Vec<u8>],
) {
    read_all(group, frames, &sent[..1], "the first frame").await;
}

/// Waits until the group's stats say `done`, 10 s at most (then fails with `what`).
async fn wait_until(group: &UringGroup, what: &str, done: impl Fn(&UringStats) -> bool) {
    let start = Instant::now();
    loop {
        let stats = group.stats();
        if done(&stats) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A connected pair: the client (std, blocking) and the server side (tokio).
async fn pair(listener: &tokio::net::TcpListener) -> (TcpStream, tokio::net::TcpStream) {
    let addr = listener.local_addr().unwrap();
    let client = tokio::task::spawn_blocking(move || TcpStream::connect(addr));
    let (server, _) = listener.accept().await.unwrap();
    (client.await.unwrap().unwrap(), server)
}

/// The payloads client `c` sends: lengths from 0 to past two buffers.
fn payloads(c: usize, n: usize) -> Vec<Vec<u8>> {
    let mut x = 0x9e37_79b9_u32.wrapping_mul(c as u32 + 1);
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = [0, 1, 60, 900, 5000, 40_000][(x % 6) as usize];
            (0..len).map(|j| (i + j + c) as u8).collect()
        })
        .collect()
}

fn wire(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    for p in payloads {
        w.extend((p.len() as u32).to_be_bytes());
        w.extend(p);
    }
    w
}

fn frames_whole(name: &str, opts: UringOptions) {
    runtime().block_on(async {
        let Some(group) = group(name, opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tasks = Vec::new();
        for c in 0..4 {
            let (mut client, server) = pair(&listener).await;
            let sent = payloads(c, 300);
            let bytes = wire(&sent);
            std::thread::spawn(move || {
                // Writes of odd sizes, so frames straddle receives.
                for part in bytes.chunks(7919) {
                    client.write_all(part).unwrap();
                }
            });
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            tasks.push(tokio::spawn(async move {
                let mut got = 0;
                let mut kept: Vec<(FixedBuf, usize)> = Vec::new();
                while let Some(f) = frames.next_frame().await.unwrap() {
                    assert_eq!(&f[..], &sent[got][..], "connection {c}, frame {got}");
                    if got % 10 == 0 {
                        kept.push((f, got));
                    }
                    got += 1;
                }
                assert_eq!(got, sent.len(), "connection {c}");
                for (f, i) in kept {
                    assert_eq!(&f[..], &sent[i][..], "a kept frame changed");
                }
                drop(server);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let s = group.stats();
        assert!(s.completions > 0 && s.published > 0, "{s:?}");
        // Two io_uring instances per worker thread, the connections spread over them.
        assert_eq!(s.shards, 4, "{s:?}");
    });
}

#[test]
fn frames_arrive_whole_and_in_order() {
    frames_whole(
        "frames_arrive_whole_and_in_order",
        UringOptions::new(4 << 20),
    );
}

#[test]
fn frames_arrive_whole_with_buffers_consumed_whole() {
    frames_whole(
        "frames_arrive_whole_with_buffers_consumed_whole",
        UringOptions::new(4 << 20).incremental(false),
    );
}

#[test]
fn out_of_buffers_waits_for_a_release() {
    runtime().block_on(async {
        let opts = UringOptions::new(64 << 10)
            .buf_len(8 << 10)
            .queue_cap(1 << 20);
        let Some(group) = group("out_of_buffers_waits_for_a_release", opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut client, server) = pair(&listener).await;
        let sent = vec![vec![7u8; 1000]; 400]; // 400 KB: six times the group
        let bytes = wire(&sent);
        let writer = std::thread::spawn(move || client.write_all(&bytes).map(|()| client));
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        // Every frame held: the group runs out of buffers.
        let mut held = Vec::new();
        while group.stats().out_of_buffers == 0 {
            let f = tokio::time::timeout(Duration::from_secs(10), frames.next_frame())
                .await
                .expect("frames come until the buffers run out")
                .unwrap()
                .unwrap();
            held.push(f);
        }
        // Waiting: no receive is restarted while nothing is released.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = group.stats();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = group.stats();
        assert_eq!(
            (before.restarts, before.completions),
            (after.restarts, after.completions),
            "a receive without buffers spun"
        );
        assert!(held.len() < sent.len());
        let mut got = held.len();
        drop(held); // the release: the rest arrives
        while let Some(f) = frames.next_frame().await.unwrap() {
            assert_eq!(&f[..], &sent[got][..]);
            got += 1;
            if got == sent.len() {
                break;
            }
        }
        assert_eq!(got, sent.len());
        assert!(group.stats().restarts > 0);
        drop(writer.join().unwrap().unwrap());
    });
}

/// Whether the kernel's release is `major.minor` or later.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || {
        parts
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
    };
    (next(), next()) >= (major, minor)
}

/// A connection whose client writes 16 MiB of 16 KiB frames (twice the 8 MiB groups of
/// the tests that use it) from a thread: the payloads, the writer, the server side.
async fn sixteen_mib() -> (
    Vec<Vec<u8>>,
    std::thread::JoinHandle<std::io::Result<TcpStream>>,
    tokio::net::TcpStream,
) {
    streaming(1024).await
}

/// A connection whose client writes `n` frames of 16 KiB (from a thread): the frames,
/// the writer, and the server side.
async fn streaming(
    n: usize,
) -> (
    Vec<Vec<u8>>,
    std::thread::JoinHandle<std::io::Result<TcpStream>>,
    tokio::net::TcpStream,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut client, server) = pair(&listener).await;
    let sent: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 16 << 10]).collect();
    let bytes = wire(&sent);
    let writer = std::thread::spawn(move || client.write_all(&bytes).map(|()| client));
    (sent, writer, server)
}

/// A reader that does not read: until its first look for bytes its connection takes
/// nothing from the group (the bytes wait in the socket); after it, the receive pauses
/// once the bytes waiting for the reader reach its cap (a buffer's, 64 KiB: the reader
/// has not taken a full queue yet), so the rest waits in the socket and the group keeps
/// room for the others; read, every frame arrives in order.
#[test]
fn a_reader_that_does_not_read_holds_a_buffer_of_the_group() {
    runtime().block_on(async {
        let name = "a_reader_that_does_not_read_holds_a_buffer_of_the_group";
        let Some(group) = group(name, UringOptions::new(8 << 20).shards(1)) else {
            return;
        };
        let before = group.stats();
        let (sent, writer, server) = sixteen_mib().await;
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let idle = group.stats();
        assert_eq!(idle.completions, 0, "{idle:?}");
        assert_eq!(idle.bytes_in_use, before.bytes_in_use, "{idle:?}");
        read_first(&group, &mut frames, &sent).await;
        wait_until(&group, "no pause", |s| s.pauses > 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = group.stats();
        // The kernel's buffers (2 MiB) and the queue: from Linux 6.17 the receive ends
        // at the cap itself (the queue holds 64 KiB, the reader part of a buffer);
        // before, it is cancelled a few buffers past it.
        let bound = if kernel_at_least(6, 17) {
            (2 << 20) + (200 << 10)
        } else {
            4 << 20
        };
        assert!(stats.bytes_in_use < bound, "{stats:?}");
        read_all(&group, &mut frames, &sent[1..], "read at last").await;
        drop(writer.join().unwrap().unwrap());
    });
}

/// Half the frames read (their buffers going round the 8 MiB ring), then bytes queued
/// while the reader waits, up to its cap, then the rest read and dropped, then
/// quiet: the pages the buffers went through past what the published buffers need go
/// back to the system within a couple of seconds, with no receive completing to bring
/// the driver a turn.
#[test]
fn pages_go_back_once_the_receives_are_quiet() {
    runtime().block_on(async {
        let name = "pages_go_back_once_the_receives_are_quiet";
        let opts = UringOptions::new(8 << 20).queue_cap(6 << 20).shards(1);
        let Some(group) = group(name, opts) else {
            return;
        };
        let (sent, writer, server) = sixteen_mib().await;
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        read_all(&group, &mut frames, &sent[..512], "the first half").await;
        // Meanwhile bytes queue up to the reader's cap, and its receive pauses.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for p in &sent[512..] {
            let f = frames.next_frame().await.unwrap().expect("a frame");
            assert_eq!(&f[..], &p[..]);
        }
        let quiet = group.stats();
        let start = Instant::now();
        while group.stats().bytes_given_back == quiet.bytes_given_back {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "no pages given back: {quiet:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(group.stats().completions, quiet.completions, "quiet");
        drop(writer.join().unwrap().unwrap());
    });
}

/// Readers that read for a while and then stop with their queues full (a handler
/// blocked on its downstream; sixteen, each with a cap grown towards a quarter of the
/// group: together four times the ring) do not stop another connection: once the ring
/// is short, their queued bytes are copied into the pool, their buffers go back, and
/// the other connection's 16 MiB arrive. Their caps grew only while the group's bytes
/// covered them, so they hold at most the group's bytes and a buffer's each (with a
/// fixed cap, 8 MiB); their frames still arrive whole and in order when they read
/// again.
#[test]
fn readers_that_stop_reading_do_not_stop_the_others() {
    stopped_readers("readers_that_stop_reading_do_not_stop_the_others", 1);
}

/// The same on two instances of 1 MiB, eight stopped readers each, the other
/// connection on the first: each instance copies its own stopped readers' bytes out,
/// and together they hold what one instance of 2 MiB does.
#[test]
fn readers_that_stop_reading_on_two_instances() {
    stopped_readers("readers_that_stop_reading_on_two_instances", 2);
}

fn stopped_readers(name: &str, shards: usize) {
    runtime().block_on(async {
        let pool = ringmem::io::ReadPool::new(32 << 20);
        let opts = UringOptions::new(2 << 20)
            .buffers(8)
            .shards(shards)
            .pool(pool.clone());
        let Some(group) = group(name, opts) else {
            return;
        };
        let mut stalled = Vec::new();
        for c in 0..16 {
            let (sent, writer, server) = streaming(96).await;
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            let what = format!("connection {c}, before it stops");
            read_all(&group, &mut frames, &sent[..48], &what).await;
            stalled.push((sent, writer, server, frames));
        }
        wait_until(&group, "nothing copied out", |s| s.bytes_moved > 0).await;
        let (sent, writer, server) = sixteen_mib().await;
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        read_all(&group, &mut frames, &sent, "the other connection").await;
        assert_eq!(group.stats().shards, shards);
        drop((writer.join().unwrap().unwrap(), server, frames));
        // What the stalled readers hold, in the ring and copied out, and the kernel's
        // buffers (512 KiB): their caps, at most 2 MiB and 64 KiB each; a completion past
        // the cap each, and the one each took last: 5.5 MiB. Before Linux 6.17 a
        // receive is cancelled past its cap, up to all the kernel's buffers past it.
        let held = group.stats().bytes_in_use + pool.stats().bytes_in_use;
        if kernel_at_least(6, 17) {
            assert!(held < 7 << 20, "{held} bytes held: {:?}", group.stats());
        } else {
            eprintln!("URING NOT CHECKED {name}: the bytes held, before Linux 6.17: {held}");
        }
        for (c, (sent, writer, server, mut frames)) in stalled.into_iter().enumerate() {
            let what = format!("stalled connection {c}, read at last");
            read_all(&group, &mut frames, &sent[48..], &what).await;
            drop((writer.join().unwrap().unwrap(), server));
        }
    });
}

/// More connections parked for want of buffers than one buffer published restarts at
/// once (one buffer id; forty connections with bytes waiting, their readers reading
/// from the start, so that the buffer goes round while most are parked): each still
/// gets every frame, as the restarts go on turn by turn.
#[test]
fn many_parked_connections_all_get_their_frames() {
    runtime().block_on(async {
        let opts = UringOptions::new(64 << 10)
            .buf_len(8 << 10)
            .buffers(1)
            .shards(1);
        let Some(group) = group("many_parked_connections_all_get_their_frames", opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tasks = Vec::new();
        let mut writers = Vec::new();
        for c in 0..40 {
            let (mut client, server) = pair(&listener).await;
            let sent = payloads(c, 30);
            let bytes = wire(&sent);
            writers.push(std::thread::spawn(move || {
                client.write_all(&bytes).map(|()| client)
            }));
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            tasks.push(tokio::spawn(async move {
                for p in &sent {
                    let f = frames.next_frame().await.unwrap().expect("a frame");
                    assert_eq!(&f[..], &p[..], "connection {c}");
                }
                drop(server);
            }));
        }
        for t in tasks {
            let r = tokio::time::timeout(Duration::from_secs(20), t).await;
            assert!(
                r.is_ok(),
                "every connection gets its frames: {:?}",
                group.stats()
            );
        }
        for w in writers {
            drop(w.join().unwrap().unwrap());
        }
        let stats = group.stats();
        assert!(
            stats.out_of_buffers >= 20 && stats.restarts >= 20,
            "{stats:?}"
        );
    });
}

/// Thirty connections send a frame at once to a group of one 4 KiB buffer: most find
/// no buffer and wait in line, and are served by single receives; each then has no
/// bytes left, so its next receive waits for bytes in the kernel, not in line. Put
/// back in line after each single receive, they took the restarts the buffer allowed
/// with receives that never completed, and connections stalled for good at their
/// first frame (three runs of three); connections that come later read theirs too.
#[test]
fn idle_connections_do_not_hold_up_the_line() {
    runtime().block_on(async {
        let opts = UringOptions::new(64 << 10)
            .buf_len(4 << 10)
            .buffers(1)
            .shards(1);
        let name = "idle_connections_do_not_hold_up_the_line";
        let Some(group) = group(name, opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut idle = Vec::new();
        for c in 0..30 {
            let (client, server) = pair(&listener).await;
            let sent = vec![vec![c as u8; 3000]];
            let bytes = wire(&sent);
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let group = group.clone();
            tokio::spawn(async move {
                read_first(&group, &mut frames, &sent).await;
                _ = tx.send(());
                // Idle: looking for a next frame, which does not come.
                drop((frames.next_frame().await, server));
            });
            idle.push((client, bytes, rx));
        }
        // Sent once every receive waits: more than the buffer serves at once.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (client, bytes, _) in &mut idle {
            client.write_all(bytes).unwrap();
        }
        for (_, _, rx) in &mut idle {
            rx.await.unwrap();
        }
        wait_until(&group, "the idle readers' buffer goes back", |s| {
            s.buffers == 1
        })
        .await;
        let mut tasks = Vec::new();
        for c in 0..2 {
            let (mut client, server) = pair(&listener).await;
            let sent = payloads(c, 20);
            let bytes = wire(&sent);
            std::thread::spawn(move || client.write_all(&bytes).map(|()| client));
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            let group = group.clone();
            tasks.push(tokio::spawn(async move {
                read_all(&group, &mut frames, &sent, "a later connection").await;
                drop(server);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        drop(idle);
    });
}

/// Readers asleep, each holding the first part of a frame whose rest does not come
/// (forty parts, five times the ring's buffers): each part is copied out of its buffer
/// once another connection's bytes land after it or the kernel gives the buffer back,
/// so the parts hold no more of the ring than the buffer the kernel holds, and another
/// connection's frame still arrives; the parts' frames arrive whole once their rest is
/// sent.
#[test]
fn partial_frames_that_cannot_be_joined_leave_the_ring() {
    runtime().block_on(async {
        let opts = UringOptions::new(64 << 10)
            .buf_len(8 << 10)
            .buffers(1)
            .shards(1);
        let name = "partial_frames_that_cannot_be_joined_leave_the_ring";
        let Some(group) = group(name, opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tasks = Vec::new();
        let mut rests = Vec::new();
        for c in 0..40 {
            let (mut client, server) = pair(&listener).await;
            let payload: Vec<u8> = (0..10_000).map(|i| (i + c) as u8).collect();
            let bytes = wire(std::slice::from_ref(&payload));
            let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
            tasks.push(tokio::spawn(async move {
                let f = frames.next_frame().await.unwrap().expect("a frame");
                assert_eq!(&f[..], &payload[..], "connection {c}");
                drop(server);
            }));
            client.write_all(&bytes[..1600]).unwrap();
            rests.push((client, bytes[1600..].to_vec()));
        }
        // The parts arrive (and are copied out) before another connection's frame is
        // sent.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stats = group.stats();
        assert!(
            stats.bytes_in_use <= 2 * (8 << 10),
            "the kernel's buffer and at most one part's: {stats:?}"
        );
        let (mut client, server) = pair(&listener).await;
        let payload = vec![9u8; 20_000];
        client
            .write_all(&wire(std::slice::from_ref(&payload)))
            .unwrap();
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        let f = tokio::time::timeout(Duration::from_secs(10), frames.next_frame()).await;
        let f = f.unwrap_or_else(|_| panic!("a frame past the held parts: {:?}", group.stats()));
        assert_eq!(&f.unwrap().expect("a frame")[..], &payload[..]);
        for (client, rest) in &mut rests {
            client.write_all(rest).unwrap();
        }
        for t in tasks {
            let r = tokio::time::timeout(Duration::from_secs(20), t).await;
            assert!(r.is_ok(), "every frame arrives: {:?}", group.stats());
        }
        drop((client, rests));
    });
}

/// One frame in 1,000 kept: no stall, and what the kept frames hold (in the group's
/// ring and in the copies' pool) within 4 times their bytes and a buffer; frames all
/// dropped, the ring holds the published buffers alone.
#[test]
fn kept_frames_hold_about_their_own_bytes() {
    runtime().block_on(async {
        let pool = ringmem::io::ReadPool::new(16 << 20);
        let opts = UringOptions::new(8 << 20).pool(pool.clone());
        let Some(group) = group("kept_frames_hold_about_their_own_bytes", opts) else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut client, server) = pair(&listener).await;
        let n = 200_000;
        let bytes = wire(&vec![vec![9u8; 100]; n]); // 20 MB through an 8 MiB group
        let writer = std::thread::spawn(move || client.write_all(&bytes).map(|()| client));
        let mut frames = group.framed(&server, LengthDelimited::new()).unwrap();
        let mut kept = Vec::new();
        for i in 0..n {
            let f = tokio::time::timeout(Duration::from_secs(10), frames.next_frame())
                .await
                .unwrap_or_else(|_| panic!("stalled at frame {i}: {:?}", group.stats()))
                .unwrap()
                .unwrap();
            if i % 1000 == 999 {
                kept.push(f);
            }
        }
        // What the kept frames hold: the group's ring and the copies' pool with them,
        // less the same without them.
        let with = (group.stats(), pool.stats().bytes_in_use);
        let kept_bytes: usize = kept.iter().map(|f| f.len()).sum();
        let n_kept = kept.len();
        drop(kept);
        let without = (group.stats(), pool.stats().bytes_in_use);
        let held =
            (with.0.bytes_in_use + with.1).saturating_sub(without.0.bytes_in_use + without.1);
        eprintln!(
            "kept {n_kept} frames, {kept_bytes} B; held {held} B; {:?}",
            with.0
        );
        // And a buffer: the frame kept before any was found kept holds the buffer it
        // was received into (as for `AsyncFramedReader`'s regions).
        assert!(
            held <= 4 * kept_bytes + with.0.buf_len + 8,
            "kept {kept_bytes} B, held {held} B: {with:?} {without:?}"
        );
        let s = without.0;
        assert!(s.bytes_in_use <= s.buffers * (s.buf_len + 8), "{s:?}");
        drop(writer.join().unwrap().unwrap());
    });
}

/// A 1 MiB group (`None` where io_uring is refused) with one connection: the
/// client, the server side and its reader.
async fn one_reader(
    name: &str,
) -> Option<(
    UringGroup,
    TcpStream,
    tokio::net::TcpStream,
    UringFramedReader<LengthDelimited>,
)> {
    let group = group(name, UringOptions::new(1 << 20))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (client, server) = pair(&listener).await;
    let frames = group.framed(&server, LengthDelimited::new()).unwrap();
    Some((group, client, server, frames))
}

/// What the peer `client` reads next (0 at the end of the stream), within 10 s.
async fn peer_read(mut client: TcpStream) -> usize {
    let read = tokio::task::spawn_blocking(move || {
        client.set_read_timeout(Some(Duration::from_secs(10)))?;
        client.read(&mut [0u8; 8])
    });
    read.await.unwrap().unwrap()
}

#[test]
fn a_dropped_reader_cancels_its_receive_and_closes_its_socket() {
    runtime().block_on(async {
        let Some((group, mut client, server, mut frames)) =
            one_reader("a_dropped_reader_cancels_its_receive_and_closes_its_socket").await
        else {
            return;
        };
        client.write_all(&wire(&[b"one".to_vec()])).unwrap();
        assert_eq!(&frames.next_frame().await.unwrap().unwrap()[..], b"one");
        drop(frames);
        // Its last descriptor (the group's slot goes with the receive): the peer sees
        // the close once the kernel has ended the receive.
        drop(server);
        assert_eq!(peer_read(client).await, 0, "the socket stays open");
        wait_until(&group, "more than the published buffers left", |s| {
            s.bytes_in_use <= s.buffers * (s.buf_len + 64)
        })
        .await;
    });
}

/// The descriptors of this process open on `fd`'s file (`socket:[inode]`).
fn descriptors_of(fd: &impl AsRawFd) -> usize {
    let link = |n: &dyn AsRef<std::path::Path>| std::fs::read_link(n).ok();
    let target = link(&format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| link(&e.ok()?.path()))
        .filter(|t| *t == target)
        .count()
}

#[test]
fn a_reader_holds_its_socket_without_a_descriptor() {
    runtime().block_on(async {
        let Some((_group, mut client, server, mut frames)) =
            one_reader("a_reader_holds_its_socket_without_a_descriptor").await
        else {
            return;
        };
        // The group's file table holds the socket: no duplicate descriptor.
        assert_eq!(descriptors_of(&server), 1);
        // The caller's descriptor closed, the reader still reads.
        drop(server);
        client.write_all(&wire(&[b"after".to_vec()])).unwrap();
        assert_eq!(&frames.next_frame().await.unwrap().unwrap()[..], b"after");
        // The reader dropped, the socket closes: the peer reads its end.
        drop(frames);
        assert_eq!(peer_read(client).await, 0, "the socket stays open");
    });
}

#[test]
fn a_runtime_dropped_with_receives_in_flight() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut clients = Vec::new();
    let rt = runtime();
    let readers = rt.block_on(async {
        let group = group(
            "a_runtime_dropped_with_receives_in_flight",
            UringOptions::new(1 << 20),
        )?;
        let mut readers = Vec::new();
        for _ in 0..8 {
            let mut c = TcpStream::connect(addr).unwrap();
            let (s, _) = listener.accept().unwrap();
            c.write_all(&wire(&[vec![1u8; 3000]])).unwrap();
            c.write_all(&[0, 0, 1]).unwrap(); // a partial frame
            clients.push(c);
            readers.push((group.framed(&s, LengthDelimited::new()).unwrap(), s));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        Some((group, readers))
    });
    drop(rt); // the driver goes with it; the receives are still armed
    for c in &mut clients {
        c.write_all(&[0u8; 4000]).unwrap(); // the kernel may still write the buffers
    }
    drop(readers); // the group drains its receives, then frees its memory
}

/// The child half of `refused_io_uring_is_a_clear_error`: with io_uring_setup refused
/// by a seccomp filter, a group is `Unavailable` with `EPERM`.
#[test]
fn refused_child() {
    if std::env::var_os("RINGMEM_URING_REFUSED_CHILD").is_none() {
        return;
    }
    refuse_io_uring_setup();
    let err = runtime().block_on(async { UringGroup::new(1 << 20).unwrap_err() });
    match err {
        UringError::Unavailable(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        e => panic!("{e}"),
    }
    println!("REFUSED AS EXPECTED");
}

#[test]
fn refused_io_uring_is_a_clear_error() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "refused_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RINGMEM_URING_REFUSED_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("REFUSED AS EXPECTED"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("URING RAN refused_io_uring_is_a_clear_error");
}

/// Installs a seccomp filter on this process that fails `io_uring_setup` with `EPERM`
/// (as Docker's default profile does) and allows everything else.
fn refuse_io_uring_setup() {
    use libc::{sock_filter, sock_fprog};
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let filter = [
        // The syscall number: `seccomp_data.nr`, at offset 0.
        sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: plain prctl calls; the filter outlives the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let r = libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const sock_fprog,
        );
        assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
    }
}
