//! The `queue` row of the conns child (`conns.rs`): an echo server that keeps some
//! frames for a while, as a server that queues work does.
//!
//! Each connection's task reads frames with the reader under test and writes every
//! frame back, framed the same way (a 4-byte big-endian length, then the payload), on
//! the connection's write half. The frames a read has already decoded are echoed in one
//! write, whatever the reader. Every `keep_every`-th frame of the whole server is then
//! sent, the frame handle itself, to one queue task that holds it for `hold` and drops
//! it, so a steady number of frames stays alive (about frames per second / `keep_every`
//! × `hold`) while the readers go on reading.
//!
//! The clients keep `pipeline` frames in flight on every connection: they send that
//! many, then another each time an echo comes back. Each frame carries the connection's
//! sequence number in its first 8 bytes, and each echo is checked for its length and
//! its number, so a reader that lost, reordered or cut a frame is seen.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_core::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, timeout, Instant};

use crate::conns::{next, Frame, Serve, HEADER, STALL};

/// Bytes of the connection's sequence number at the start of every frame's payload.
const SEQ: usize = 8;

/// The most bytes an echo task gathers before it writes them.
const BATCH: usize = 64 << 10;

/// The queue row's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Payload bytes of every frame (at least [`SEQ`]).
    pub size: usize,
    /// Frames in flight per connection.
    pub pipeline: usize,
    /// One frame in this many is kept (0: none).
    pub keep_every: u64,
    /// Seconds a kept frame is held.
    pub hold: f64,
}

impl Params {
    /// Seconds the server lets the row run before it measures: the first frames kept
    /// have been dropped by then, so the queue holds as many as it will.
    pub fn warm_up(&self) -> f64 {
        self.hold + 0.5
    }
}

/// What the echo tasks and the queue task share. The counters are `Relaxed`: the main
/// thread reads them as figures, and nothing is published through them.
pub struct Queue {
    /// Frames read by all the connections: every `keep_every`-th is kept.
    read: AtomicU64,
    /// Frames whose echo was written.
    echoed: AtomicU64,
    /// Frames the queue holds now, and the most it has held.
    held: AtomicU64,
    held_max: AtomicU64,
    keep_every: u64,
    /// The queue task's inbox: kept frames and when they were kept.
    tx: mpsc::UnboundedSender<(Instant, Frame)>,
}

impl Queue {
    /// Starts the queue task on `rt`, holding each frame `hold`.
    pub fn start(rt: &tokio::runtime::Runtime, p: Params) -> Arc<Queue> {
        let (tx, rx) = mpsc::unbounded_channel();
        let q = Arc::new(Queue {
            read: AtomicU64::new(0),
            echoed: AtomicU64::new(0),
            held: AtomicU64::new(0),
            held_max: AtomicU64::new(0),
            keep_every: p.keep_every,
            tx,
        });
        rt.spawn(hold_frames(rx, Duration::from_secs_f64(p.hold), q.clone()));
        q
    }

    /// Frames echoed so far.
    pub fn echoed(&self) -> u64 {
        self.echoed.load(Ordering::Relaxed)
    }

    /// Frames read so far.
    pub fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Frames the queue holds now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The most frames the queue has held at once.
    pub fn held_max(&self) -> u64 {
        self.held_max.load(Ordering::Relaxed)
    }

    /// The task for a connection whose echoes go to `out`.
    pub fn echo(self: &Arc<Self>, out: OwnedWriteHalf) -> Echo {
        Echo {
            queue: self.clone(),
            out,
        }
    }

    /// Whether the frame read now is one to keep.
    fn keeps_next(&self) -> bool {
        // A count only: the frame itself goes to the queue over its channel.
        let n = self.read.fetch_add(1, Ordering::Relaxed);
        self.keep_every > 0 && n % self.keep_every == self.keep_every - 1
    }
}

/// One connection's echo task, before it has a reader.
pub struct Echo {
    queue: Arc<Queue>,
    out: OwnedWriteHalf,
}

impl Serve for Echo {
    fn spawn<S, B>(self, frames: S)
    where
        S: Stream<Item = io::Result<B>> + Unpin + Send + 'static,
        B: Deref<Target = [u8]> + Into<Frame> + Send + 'static,
    {
        tokio::spawn(echo(frames, self.out, self.queue));
    }
}

/// The next frame if the reader has one without waiting: `None` if it would wait,
/// `Some(None)` at the stream's end.
async fn ready<S: Stream + Unpin>(s: &mut S) -> Option<Option<S::Item>> {
    // Polled with the task's own context: a frame that arrives later wakes the task,
    // which then finds it in the next `next`.
    poll_fn(|cx| match Pin::new(&mut *s).poll_next(cx) {
        Poll::Ready(f) => Poll::Ready(Some(f)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Echoes every frame of one connection: waits for a frame, takes those the reader has
/// ready too (up to [`BATCH`] bytes), writes them back in one write, then sends the
/// ones to keep to the queue. The others are dropped as soon as they are copied.
async fn echo<S, B>(mut frames: S, mut out: OwnedWriteHalf, q: Arc<Queue>)
where
    S: Stream<Item = io::Result<B>> + Unpin,
    B: Deref<Target = [u8]> + Into<Frame>,
{
    let mut wire = Vec::with_capacity(2 * BATCH);
    let mut kept: Vec<Frame> = Vec::new();
    let mut ended = false;
    while !ended {
        let mut got = next(&mut frames).await;
        let mut n = 0u64;
        loop {
            match got {
                Some(Ok(f)) => {
                    wire.extend_from_slice(&(f.len() as u32).to_be_bytes());
                    wire.extend_from_slice(&f);
                    n += 1;
                    if q.keeps_next() {
                        kept.push(f.into());
                    }
                }
                // An error of the reader ends the connection, as its end does.
                Some(Err(_)) | None => {
                    ended = true;
                    break;
                }
            }
            if wire.len() >= BATCH {
                break;
            }
            match ready(&mut frames).await {
                Some(f) => got = f,
                None => break,
            }
        }
        if !wire.is_empty() {
            if out.write_all(&wire).await.is_err() {
                break;
            }
            wire.clear();
        }
        q.echoed.fetch_add(n, Ordering::Relaxed);
        for f in kept.drain(..) {
            if q.tx.send((Instant::now(), f)).is_err() {
                return;
            }
        }
    }
}

/// The queue task: holds each kept frame `hold` after it was kept, then drops it,
/// oldest first; wakes when the oldest is due or a frame comes in.
async fn hold_frames(
    mut rx: mpsc::UnboundedReceiver<(Instant, Frame)>,
    hold: Duration,
    q: Arc<Queue>,
) {
    let mut held: VecDeque<(Instant, Frame)> = VecDeque::new();
    loop {
        let due = held.front().map(|f| f.0 + hold);
        tokio::select! {
            got = rx.recv() => match got {
                Some(f) => held.push_back(f),
                None => return,
            },
            () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
        }
        while let Ok(f) = rx.try_recv() {
            held.push_back(f);
        }
        let now = Instant::now();
        while held.front().is_some_and(|f| f.0 + hold <= now) {
            held.pop_front();
        }
        let n = held.len() as u64;
        q.held.store(n, Ordering::Relaxed);
        q.held_max.fetch_max(n, Ordering::Relaxed);
    }
}

/// What one client connection saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    /// Echoes received.
    pub echoed: u64,
    /// No echo came for [`STALL`] while frames were in flight.
    pub stalled: bool,
    /// An echo had the wrong length or sequence number.
    pub bad: bool,
}

/// One client connection: keeps `p.pipeline` frames of `p.size` bytes in flight on `s`
/// until `deadline`, then waits for the last echoes; returns the stream and what it saw.
pub async fn client(s: TcpStream, p: Params, deadline: Instant) -> (TcpStream, Seen) {
    let size = p.size.max(SEQ);
    let frame = HEADER + size;
    let mut wire = Vec::with_capacity(p.pipeline * frame);
    for _ in 0..p.pipeline {
        wire.extend_from_slice(&(size as u32).to_be_bytes());
        wire.resize(wire.len() + size, 0x5a);
    }
    let (mut rd, mut wr) = s.into_split();
    // Every in-flight frame's echo fits: at most `pipeline` are outstanding.
    let mut buf = vec![0u8; p.pipeline * frame];
    let (mut have, mut sent, mut seen) = (0usize, 0u64, Seen::default());
    let mut in_flight = p.pipeline;
    let mut to_send = p.pipeline;
    loop {
        if to_send > 0 && Instant::now() < deadline {
            for k in 0..to_send {
                let at = k * frame + HEADER;
                wire[at..at + SEQ].copy_from_slice(&(sent + k as u64).to_le_bytes());
            }
            if wr.write_all(&wire[..to_send * frame]).await.is_err() {
                break;
            }
            sent += to_send as u64;
        } else {
            in_flight -= to_send;
        }
        to_send = 0;
        if in_flight == 0 {
            break;
        }
        let n = match timeout(STALL, rd.read(&mut buf[have..])).await {
            Err(_) => {
                seen.stalled = true;
                break;
            }
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => n,
        };
        have += n;
        let mut at = 0;
        while have - at >= HEADER {
            let len = u32::from_be_bytes(buf[at..at + HEADER].try_into().expect("4 bytes"));
            if len as usize != size {
                seen.bad = true;
                break;
            }
            if have - at < frame {
                break;
            }
            let seq = u64::from_le_bytes(buf[at + HEADER..][..SEQ].try_into().expect("8 bytes"));
            seen.bad |= seq != seen.echoed;
            seen.echoed += 1;
            to_send += 1;
            at += frame;
        }
        if seen.bad {
            break;
        }
        buf.copy_within(at..have, 0);
        have -= at;
    }
    (rd.reunite(wr).expect("the halves of one stream"), seen)
}
