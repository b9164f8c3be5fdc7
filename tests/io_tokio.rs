//! The async framed reader on loopback TCP (feature `tokio`).

use std::future::poll_fn;
use std::io::{self, ErrorKind, Read};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use proptest::prelude::*;
use ringmem::io::{
    AsyncFramedReader, Decoder, FrameError, FramedReader, FramedWriter, LengthDelimited, Lines,
};
use ringmem::{FixedBuf, Ring};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

async fn next<R: AsyncRead + Unpin, D: ringmem::io::Decoder + Unpin>(
    s: &mut AsyncFramedReader<R, D>,
) -> Option<std::io::Result<FixedBuf>> {
    poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = [0, 1, 64, 1000, 5000, 17_000][i % 6] + i % 7;
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        })
        .collect()
}

fn encode(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new());
    for f in frames {
        w.write_frame(f).unwrap();
    }
    w.into_inner()
}

/// A connected loopback pair whose sending side writes `wire` in `chunk`-byte writes,
/// pausing now and then so reads end at many places, then closes.
async fn serve(wire: Vec<u8>, chunk: usize) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        for (i, part) in wire.chunks(chunk).enumerate() {
            s.write_all(part).await.unwrap();
            if i % 16 == 0 {
                tokio::task::yield_now().await;
            }
        }
        s.shutdown().await.unwrap();
    });
    TcpStream::connect(addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_over_loopback_tcp() {
    let sent = frames(600);
    for chunk in [1 << 16, 4093, 100] {
        let conn = serve(encode(&sent), chunk).await;
        let mut reader =
            AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(1 << 20));
        let mut got = Vec::new();
        while let Some(f) = next(&mut reader).await {
            got.push(f.unwrap().to_vec());
        }
        assert_eq!(got, sent, "{chunk}-byte writes");
        assert_eq!(reader.ring().unwrap().stats().live_buffers, 0);
    }
}

/// A ring smaller than what the consumer holds: the stream waits for releases made on
/// another task (and thread) instead of failing, and every frame arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_waits_for_the_consumer() {
    let sent = frames(300);
    let conn = serve(encode(&sent), 1 << 16).await;
    let mut reader =
        AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(128 << 10));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<FixedBuf>(1000);
    let consumer = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(f) = rx.recv().await {
            tokio::time::sleep(Duration::from_micros(300)).await;
            got.push(f.to_vec());
        }
        got
    });
    while let Some(f) = next(&mut reader).await {
        tx.send(f.unwrap()).await.unwrap();
    }
    drop(tx);
    assert_eq!(consumer.await.unwrap(), sent);
}

#[tokio::test]
async fn bad_input_is_an_error_then_skipped_or_the_end() {
    // A line over the maximum (skipped), then a frame cut by the peer's close (the end).
    let conn = serve(b"short\nmuch too long for this\nnext\n".to_vec(), 7).await;
    let mut r = AsyncFramedReader::with_ring(conn, Lines::with_max_length(10), Ring::new(1 << 20));
    assert_eq!(&next(&mut r).await.unwrap().unwrap()[..], b"short");
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert_eq!(&next(&mut r).await.unwrap().unwrap()[..], b"next");
    assert!(next(&mut r).await.is_none());
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);

    let mut wire = encode(&[vec![1; 10], vec![2; 500]]);
    wire.truncate(wire.len() - 1);
    let conn = serve(wire, 64).await;
    let mut r = AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(1 << 20));
    assert_eq!(next(&mut r).await.unwrap().unwrap().len(), 10);
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert_eq!(*why, FrameError::Truncated { buffered: 503 });
    assert!(next(&mut r).await.is_none());
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
}

#[tokio::test]
async fn a_frame_larger_than_the_ring_is_invalid_data_then_skipped() {
    let c = LengthDelimited::new();
    let conn = serve(encode(&[vec![9; 200_000], vec![7; 30]]), 1 << 16).await;
    let mut r = AsyncFramedReader::with_ring(conn, c, Ring::new(1 << 16));
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert!(matches!(
        why,
        FrameError::LargerThanRing {
            needed: 200_004,
            ..
        }
    ));
    assert_eq!(&next(&mut r).await.unwrap().unwrap()[..], &[7; 30]);
    assert!(next(&mut r).await.is_none());
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
}

/// Hands out a stream in reads of `sizes[i % len]` bytes (at least 1), answering
/// `Pending` (and waking itself) on the polls `stalls[i % len]` marks, and, once the
/// stream is out, an error if `fail` (else the end).
#[derive(Clone)]
struct Scripted {
    data: Vec<u8>,
    pos: usize,
    sizes: Vec<usize>,
    stalls: Vec<bool>,
    fail: bool,
    i: usize,
}

impl Scripted {
    /// The next read: `None` to stall, else the bytes to hand out (or the error).
    fn serve(&mut self, room: usize) -> Option<io::Result<&[u8]>> {
        let i = self.i;
        self.i += 1;
        if self.stalls[i % self.stalls.len()] {
            return None;
        }
        if self.pos == self.data.len() && self.fail {
            return Some(Err(ErrorKind::ConnectionReset.into()));
        }
        let n = self.sizes[i % self.sizes.len()]
            .max(1)
            .min(room)
            .min(self.data.len() - self.pos);
        self.pos += n;
        Some(Ok(&self.data[self.pos - n..self.pos]))
    }
}

impl AsyncRead for Scripted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().serve(buf.remaining()) {
            None => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(got) => Poll::Ready(got.map(|b| buf.put_slice(b))),
        }
    }
}

/// The same reads, blocking: the stalls skipped.
impl Read for Scripted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.serve(buf.len()) {
                None => continue,
                Some(got) => {
                    let got = got?;
                    buf[..got.len()].copy_from_slice(got);
                    return Ok(got.len());
                }
            }
        }
    }
}

type Events = Vec<Result<Vec<u8>, ErrorKind>>;

/// Every frame and error the async reader yields, to the end.
fn read_async<D: Decoder + Unpin>(src: Scripted, d: D, read_size: usize) -> Events {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        let bound = src.data.len() + 2;
        let mut r =
            AsyncFramedReader::with_ring(src, d, Ring::new(1 << 18)).with_read_size(read_size);
        let mut got = Vec::new();
        let mut held = Vec::new();
        while let Some(f) = next(&mut r).await {
            got.push(
                f.map(|f| {
                    held.push(f.clone());
                    if held.len() > 3 {
                        held.remove(0);
                    }
                    f.to_vec()
                })
                .map_err(|e| e.kind()),
            );
            assert!(got.len() <= bound, "more events than bytes");
        }
        drop(held);
        assert_eq!(
            r.ring().unwrap().stats().live_buffers,
            0,
            "the reader kept ring memory"
        );
        got
    })
}

/// The blocking reader's (checked against a reference decoder by the fuzz target).
fn read_blocking<D: Decoder>(src: Scripted, d: D, read_size: usize) -> Events {
    let r = FramedReader::with_ring(src, d, Ring::new(1 << 18)).with_read_size(read_size);
    r.map(|f| f.map(|f| f.to_vec()).map_err(|e| e.kind()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever reads return and however often they stall, the async reader (which
    /// completes a region's last frame in place when the bytes are there) yields what
    /// the blocking reader does: the same frames, errors, skips and end.
    #[test]
    fn the_async_reader_agrees_with_the_blocking_one(
        lens in prop::collection::vec(prop_oneof![0..300usize, 0..12_000usize], 0..40),
        cut in any::<prop::sample::Index>(),
        whole in any::<bool>(),
        sizes in prop::collection::vec(1..30_000usize, 1..5),
        stalls in prop::collection::vec(any::<bool>(), 1..4),
        fail in any::<bool>(),
        read_size in prop::sample::select(vec![64usize, 200, 4096, 16_384]),
        lines in any::<bool>(),
        like in any::<bool>(),
    ) {
        // Frames of one length, then others: reads sized for the run, then not.
        let lens: Vec<usize> = if like {
            (0..lens.len() * 2).map(|i| lens.get(i / 20).copied().unwrap_or(7)).collect()
        } else {
            lens
        };
        let mut stalls = stalls;
        stalls.push(false); // not every poll stalls
        let data = if lines {
            lens.iter().flat_map(|&n| {
                let mut l = vec![b'a'; n % 9000];
                l.push(if n % 7 == 0 { b'\r' } else { b'\n' });
                l
            }).collect::<Vec<u8>>()
        } else {
            let frames: Vec<Vec<u8>> = lens.iter().map(|&n| vec![n as u8; n]).collect();
            let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new().field_width(2));
            for f in &frames {
                w.write_frame(f).unwrap();
            }
            w.into_inner()
        };
        let end = if whole || data.is_empty() { data.len() } else { cut.index(data.len()) };
        let src = Scripted {
            data: data[..end].to_vec(),
            pos: 0,
            sizes,
            stalls,
            fail,
            i: 0,
        };
        let (got, want) = if lines {
            let d = Lines::with_max_length(6000);
            (read_async(src.clone(), d, read_size), read_blocking(src, d, read_size))
        } else {
            let d = LengthDelimited::new().field_width(2).max_frame_length(10_000);
            (read_async(src.clone(), d, read_size), read_blocking(src, d, read_size))
        };
        prop_assert_eq!(got, want);
    }

    /// Taken apart after any number of frames, however the reads were cut and stalled,
    /// and (the async reader) after a stall in the middle of a frame, either reader
    /// gives back exactly the bytes after the frames it yielded: what it had buffered,
    /// then what the source still has.
    #[test]
    fn into_parts_gives_back_the_rest_of_the_stream(
        lens in prop::collection::vec(prop_oneof![0..300usize, 0..12_000usize], 1..30),
        take in any::<prop::sample::Index>(),
        sizes in prop::collection::vec(1..30_000usize, 1..5),
        stalls in prop::collection::vec(any::<bool>(), 1..4),
        read_size in prop::sample::select(vec![64usize, 200, 4096, 16_384]),
        lines in any::<bool>(),
        polls in prop::option::of(1..80usize),
    ) {
        let k = take.index(lens.len() + 1);
        let (data, ends): (Vec<u8>, Vec<usize>) = if lines {
            let data = lens.iter().flat_map(|&n| {
                let mut l = vec![b'a'; n];
                l.push(b'\n');
                l
            }).collect();
            (data, lens.iter().map(|n| n + 1).collect())
        } else {
            let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new().field_width(2));
            for &n in &lens {
                w.write_frame(&vec![n as u8; n]).unwrap();
            }
            (w.into_inner(), lens.iter().map(|n| n + 2).collect())
        };
        let mut stalls = stalls;
        stalls.push(false); // not every poll stalls
        let src = Scripted { data: data.clone(), pos: 0, sizes, stalls, fail: false, i: 0 };
        let (yielded, rest) = if lines {
            rest_after(src, Lines::new(), read_size, k, polls)
        } else {
            rest_after(src, LengthDelimited::new().field_width(2), read_size, k, polls)
        };
        let after: usize = ends[..yielded].iter().sum();
        prop_assert_eq!(&rest[..], &data[after..]);
    }
}

/// Up to `k` frames of `src` through a reader (the async one polled at most `polls`
/// times, so it may stop in the middle of a frame, after a stall), then the reader
/// taken apart: the frames it yielded, and its buffered bytes followed by what the
/// source still has.
// `Waker::noop` (1.85): clippy holds helpers, not tests, to the library's MSRV, and the
// suite's dev-dependencies need newer Rust than it anyway (`.ci/msrv.sh`).
#[allow(clippy::incompatible_msrv)]
fn rest_after<D: Decoder + Unpin + Copy>(
    src: Scripted,
    d: D,
    read_size: usize,
    k: usize,
    polls: Option<usize>,
) -> (usize, Vec<u8>) {
    let ((src, buffered), yielded) = match polls {
        None => {
            let mut r =
                FramedReader::with_ring(src, d, Ring::new(1 << 18)).with_read_size(read_size);
            for _ in 0..k {
                r.next_frame().unwrap().expect("a frame");
            }
            (r.into_parts(), k)
        }
        Some(polls) => {
            let mut r =
                AsyncFramedReader::with_ring(src, d, Ring::new(1 << 18)).with_read_size(read_size);
            // Polled by hand: the `Scripted` source wakes its task on each stall.
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let mut yielded = 0;
            for _ in 0..polls {
                if yielded == k {
                    break;
                }
                match Pin::new(&mut r).poll_next(&mut cx) {
                    Poll::Ready(f) => {
                        f.expect("a frame").unwrap();
                        yielded += 1;
                    }
                    Poll::Pending => {}
                }
            }
            (r.into_parts(), yielded)
        }
    };
    (yielded, [&buffered[..], &src.data[src.pos..]].concat())
}

/// The async reader taken apart while it waits for ring room (the frames it yielded
/// are all held): the partial frame it moved to the heap before waiting comes back
/// too.
#[test]
fn into_parts_while_waiting_for_room_gives_back_the_partial_frame() {
    // Of unlike lengths: reads are not sized to end on a frame boundary.
    let frames: Vec<Vec<u8>> = (0..100u8)
        .map(|i| vec![i; 700 + usize::from(i) * 37 % 600])
        .collect();
    let wire = encode(&frames);
    let src = Scripted {
        data: wire.clone(),
        pos: 0,
        sizes: vec![100_000],
        stalls: vec![false],
        fail: false,
        i: 0,
    };
    let mut r = AsyncFramedReader::with_ring(src, LengthDelimited::new(), Ring::new(1 << 14));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut held = Vec::new();
    while let Poll::Ready(f) = Pin::new(&mut r).poll_next(&mut cx) {
        held.push(f.expect("the ring fills before the stream ends").unwrap());
    }
    assert!(held.len() < frames.len(), "the reader waits for room");
    let (src, buffered) = r.into_parts();
    assert!(!buffered.is_empty(), "a partial frame was buffered");
    let rest = [&buffered[..], &src.data[src.pos..]].concat();
    let taken: usize = frames[..held.len()].iter().map(|f| f.len() + 4).sum();
    assert_eq!(&rest[..], &wire[taken..]);
}

/// An error of the reader while the async reader tops up a region: the frames already
/// in the region come first, then the error, then the end.
#[test]
fn a_read_error_while_topping_up_comes_after_the_frames() {
    let frames: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 10_000]).collect();
    let wire = encode(&frames);
    // One read ends 6000 bytes into the second frame (worth a top-up); the next fails.
    let src = Scripted {
        data: wire[..16_004].to_vec(),
        pos: 0,
        sizes: vec![16_004],
        stalls: vec![false],
        fail: true,
        i: 0,
    };
    let got = read_async(src, LengthDelimited::new(), 16_384);
    let want = vec![Ok(frames[0].clone()), Err(ErrorKind::ConnectionReset)];
    assert_eq!(got, want);
}

/// Interop with tokio_util's codecs (features `tokio` and `bytes`): a frame from the
/// ring becomes a `Bytes` without a copy (`Bytes::from`, backed by the frame's region)
/// and goes out through `FramedWrite<_, LengthDelimitedCodec>`, which writes the wire
/// format `LengthDelimited::new()` reads (its encoder copies into its write buffer, as
/// for any `Bytes`). The regions are released once the codec has written them.
#[cfg(feature = "bytes")]
#[tokio::test]
async fn frames_go_out_through_tokio_util_framed_write() {
    use futures_sink::Sink;
    use tokio_util::codec::{FramedWrite, LengthDelimitedCodec};
    let sent = frames(40);
    let conn = serve(encode(&sent), 4096).await;
    let mut r = AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(1 << 20));
    let mut out = FramedWrite::new(Vec::new(), LengthDelimitedCodec::new());
    while let Some(frame) = next(&mut r).await {
        let frame = frame.unwrap();
        let at = frame.as_ptr();
        let frame = bytes::Bytes::from(frame);
        if !frame.is_empty() {
            assert_eq!(frame.as_ptr(), at, "Bytes::from copied the frame");
        }
        poll_fn(|cx| Sink::<bytes::Bytes>::poll_ready(Pin::new(&mut out), cx))
            .await
            .unwrap();
        Pin::new(&mut out).start_send(frame).unwrap();
    }
    poll_fn(|cx| Sink::<bytes::Bytes>::poll_flush(Pin::new(&mut out), cx))
        .await
        .unwrap();
    assert_eq!(out.get_ref(), &encode(&sent));
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
}

/// An `AsyncWrite` that takes at most `cap` bytes per call, answers `Pending` to every
/// other call (waking the task at once), and records the slices of each vectored write.
/// A writer that keeps calling without getting its bytes out (four calls per byte taken
/// is twice what the slowest case needs) fails the test rather than spinning forever.
struct Trickle {
    out: Vec<u8>,
    cap: usize,
    calls: usize,
    slices: Vec<usize>,
    zero: bool,
}

impl Trickle {
    fn new(cap: usize) -> Self {
        Trickle {
            out: Vec::new(),
            cap,
            calls: 0,
            slices: Vec::new(),
            zero: false,
        }
    }
}

impl tokio::io::AsyncWrite for Trickle {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.calls += 1;
        assert!(
            self.calls <= 4 * self.out.len() + 64,
            "{} calls for {} bytes: the writer makes no progress",
            self.calls,
            self.out.len()
        );
        if self.calls % 2 == 1 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.zero {
            return Poll::Ready(Ok(0));
        }
        self.slices.push(bufs.len());
        let mut left = self.cap;
        for b in bufs {
            let k = b.len().min(left);
            self.out.extend_from_slice(&b[..k]);
            left -= k;
        }
        Poll::Ready(Ok(self.cap - left))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `bytes` as a frozen buffer of `ring` (of at least one byte's capacity).
fn ring_frame(ring: &Ring, bytes: &[u8]) -> FixedBuf {
    let mut buf = ring.fixed(bytes.len().max(1)).unwrap();
    buf.try_extend_from_slice(bytes).unwrap();
    buf.freeze()
}

/// Frames from a ring go out through `AsyncFramedWriter` whole and in order, whatever
/// the writer takes per call (headers and payloads cut anywhere, `Pending` between
/// calls); many frames share one vectored write; each frame goes back to its ring once
/// written, not before.
#[tokio::test]
async fn the_writer_gathers_frames_and_survives_partial_writes() {
    use ringmem::io::AsyncFramedWriter;
    for cap in [1, 3, 7, 100, 4096, 1 << 20] {
        let sent = frames(if cap < 100 { 12 } else { 100 });
        let ring = Ring::new(1 << 20);
        let mut w = AsyncFramedWriter::new(Trickle::new(cap), LengthDelimited::new())
            .with_high_water(32 << 10);
        for f in &sent {
            w.send(ring_frame(&ring, f)).await.unwrap();
        }
        assert_eq!(ring.stats().live_buffers, w.queued_frames(), "cap {cap}");
        w.flush().await.unwrap();
        assert_eq!((w.queued_frames(), w.queued_bytes()), (0, 0));
        assert_eq!(ring.stats().live_buffers, 0, "written frames are released");
        let t = w.into_inner();
        assert_eq!(t.out, encode(&sent), "cap {cap}");
        if cap >= 4096 {
            assert!(
                t.slices.iter().any(|&n| n > 2),
                "no gathering: {:?}",
                t.slices
            );
            assert!(t.slices.len() < sent.len(), "{} writes", t.slices.len());
        }
    }
}

/// Lines go out through `AsyncFramedWriter` as the blocking writer writes them, each
/// followed by its line end (`\n`, or `\r\n`), many to a vectored write; a line with
/// a newline inside is refused with nothing queued.
#[tokio::test]
async fn the_line_writer_gathers_lines_and_survives_partial_writes() {
    use ringmem::io::{AsyncFramedWriter, Lines};
    let lines: Vec<Vec<u8>> = (0..60usize)
        .map(|i| (0..i * 37 % 900).map(|j| b'a' + (j % 26) as u8).collect())
        .collect();
    for (cap, encoding) in [
        (1, Lines::new()),
        (7, Lines::new().crlf()),
        (4096, Lines::new()),
    ] {
        let mut blocking = FramedWriter::new(Vec::new(), encoding);
        for l in &lines {
            blocking.write_frame(l).unwrap();
        }
        let ends = blocking
            .get_ref()
            .windows(2)
            .filter(|w| w == b"\r\n")
            .count();
        let crlf = encoding.line_end() == b"\r\n";
        assert_eq!(ends, if crlf { lines.len() } else { 0 });
        let ring = Ring::new(1 << 20);
        let frame = |bytes: &[u8]| ring_frame(&ring, bytes);
        let mut w = AsyncFramedWriter::new(Trickle::new(cap), encoding);
        assert!(w.feed(frame(b"a\nb")).is_err());
        assert_eq!(w.queued_frames(), 0);
        for l in &lines {
            w.send(frame(l)).await.unwrap();
        }
        w.flush().await.unwrap();
        assert_eq!(ring.stats().live_buffers, 0, "written lines are released");
        let t = w.into_inner();
        assert_eq!(&t.out, blocking.get_ref(), "cap {cap}");
        if cap == 4096 {
            assert!(
                t.slices.iter().any(|&n| n > 2),
                "no gathering: {:?}",
                t.slices
            );
        }
    }
}

/// The writer's errors: a frame its codec cannot express is refused with nothing
/// queued; a writer that takes nothing is `WriteZero`, with the frame still queued.
#[tokio::test]
async fn the_writer_refuses_bad_frames_and_reports_write_zero() {
    use ringmem::io::AsyncFramedWriter;
    let mut w = AsyncFramedWriter::new(Trickle::new(64), LengthDelimited::new().field_width(1));
    let err = w.feed(vec![0; 256]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(w.queued_frames(), 0);
    w.get_mut().zero = true;
    w.feed(vec![1; 10]).unwrap();
    assert_eq!(w.flush().await.unwrap_err().kind(), ErrorKind::WriteZero);
    assert_eq!(w.queued_bytes(), 11);
    w.get_mut().zero = false;
    w.flush().await.unwrap();
    assert_eq!(w.get_ref().out, [&[10u8][..], &[1; 10]].concat());
}

/// A reader on one connection and a writer on another, over loopback TCP: every frame
/// crosses whole, and the reader's ring is empty at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_round_trip_through_the_async_writer() {
    use ringmem::io::AsyncFramedWriter;
    let sent = frames(300);
    let conn = serve(encode(&sent), 3000).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let back = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let mut r = AsyncFramedReader::with_ring(s, LengthDelimited::new(), Ring::new(1 << 20));
        let mut got = Vec::new();
        while let Some(f) = next(&mut r).await {
            got.push(f.unwrap().to_vec());
        }
        got
    });
    let mut r = AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(1 << 20));
    let mut w = AsyncFramedWriter::new(
        TcpStream::connect(addr).await.unwrap(),
        LengthDelimited::new(),
    );
    while let Some(f) = next(&mut r).await {
        w.send(f.unwrap()).await.unwrap();
    }
    w.shutdown().await.unwrap();
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
    assert_eq!(back.await.unwrap(), sent);
}

/// The writer as a `Sink`: `poll_ready` writes the queue out at the high-water mark
/// (so the queue stays bounded), `poll_close` writes the rest and shuts down.
#[tokio::test]
async fn the_writer_is_a_bounded_sink() {
    use futures_sink::Sink;
    use ringmem::io::AsyncFramedWriter;
    let sent = frames(50);
    let mut w =
        AsyncFramedWriter::new(Trickle::new(100), LengthDelimited::new()).with_high_water(1000);
    for f in &sent {
        poll_fn(|cx| Pin::new(&mut w).poll_ready(cx)).await.unwrap();
        assert!(w.queued_bytes() < 1000, "{} bytes queued", w.queued_bytes());
        Pin::new(&mut w).start_send(f.clone()).unwrap();
    }
    poll_fn(|cx| Pin::new(&mut w).poll_close(cx)).await.unwrap();
    assert_eq!(w.queued_frames(), 0);
    assert_eq!(w.into_inner().out, encode(&sent));
}

/// A framing of one's own through `AsyncFramedWriter`: RESP bulk strings, whose heads
/// (up to 10 bytes here) pass the 8 a length field had, go out gathered and byte for
/// byte, payloads uncopied and released once written; a frame with nothing to write
/// (an empty payload an encoder leaves bare) is never queued.
#[tokio::test]
async fn the_writer_frames_with_an_encoder_of_ones_own() {
    use ringmem::io::{AsyncFramedWriter, Encoder, Framing};
    use std::io::Write;
    struct Bulk;
    impl Encoder for Bulk {
        fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
            write!(framing, "${}\r\n", payload.len())?;
            framing.set_tail(b"\r\n")
        }
    }
    struct Raw;
    impl Encoder for Raw {
        fn encode(&mut self, _: &[u8], _: &mut Framing) -> io::Result<()> {
            Ok(())
        }
    }
    let sent = frames(60);
    let mut expected = Vec::new();
    for f in &sent {
        expected.extend_from_slice(format!("${}\r\n", f.len()).as_bytes());
        expected.extend_from_slice(f);
        expected.extend_from_slice(b"\r\n");
    }
    for cap in [1, 7, 4096, 1 << 20] {
        let ring = Ring::new(1 << 20);
        let mut w = AsyncFramedWriter::new(Trickle::new(cap), Bulk).with_high_water(16 << 10);
        for f in &sent {
            w.send(ring_frame(&ring, f)).await.unwrap();
        }
        let before = w.queued_bytes();
        w.feed(ring_frame(&ring, &[7; 100_000])).unwrap();
        assert_eq!(w.queued_bytes(), before + 9 + 100_000 + 2);
        w.flush().await.unwrap();
        assert_eq!(ring.stats().live_buffers, 0, "written frames are released");
        let t = w.into_inner();
        let (head, last) = t.out.split_at(expected.len());
        assert!(head == expected, "cap {cap}: the wire differs");
        assert!(last.starts_with(b"$100000\r\n\x07") && last.ends_with(b"\x07\r\n"));
        assert_eq!(last.len(), 100_011);
        if cap >= 4096 {
            assert!(
                t.slices.iter().any(|&n| n > 3),
                "no gathering: {:?}",
                t.slices
            );
        }
    }
    let mut w = AsyncFramedWriter::new(Trickle::new(3), Raw);
    w.feed(b"+OK\r\n".to_vec()).unwrap();
    w.feed(Vec::new()).unwrap();
    assert_eq!((w.queued_frames(), w.queued_bytes()), (1, 5));
    w.feed(Vec::new()).unwrap();
    w.flush().await.unwrap();
    w.feed(Vec::new()).unwrap();
    w.flush().await.unwrap();
    assert_eq!(w.into_inner().out, b"+OK\r\n");
}

/// A reader split with its writer over one TCP connection (`into_split`): the frames
/// it buffered before the split still come, another task writes each back, and the
/// halves join again into the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_reader_and_writer_echo_over_tcp() {
    use ringmem::io::AsyncFramedWriter;
    use tokio::io::AsyncReadExt;
    let wire = encode(&frames(300));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let (mut from, mut to) = client.into_split();
    let sending = wire.clone();
    let sender = tokio::spawn(async move {
        to.write_all(&sending).await.unwrap();
        to.shutdown().await.unwrap();
    });
    let receiver = tokio::spawn(async move {
        let mut got = Vec::new();
        from.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut r = AsyncFramedReader::with_ring(server, LengthDelimited::new(), Ring::new(1 << 20));
    let first = next(&mut r).await.unwrap().unwrap();
    let (mut r, mut w): (_, AsyncFramedWriter<_, FixedBuf, _>) =
        r.into_split(LengthDelimited::new());
    w.send(first).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let echo = tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            w.send(f).await.unwrap();
        }
        w.flush().await.unwrap();
        w
    });
    while let Some(f) = next(&mut r).await {
        tx.send(f.unwrap()).await.unwrap();
    }
    drop(tx);
    let w = echo.await.unwrap();
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
    let (half, buffered) = r.into_parts();
    assert!(buffered.is_empty());
    let mut socket = half.unsplit(w.into_inner());
    socket.shutdown().await.unwrap();
    sender.await.unwrap();
    assert!(receiver.await.unwrap() == wire, "the echo differs");
}

/// A tokio_util encoder through `AsyncFramedWriter` (`TokioEncoder`): its items go out
/// as it encodes them, whole through partial writes and gathered many to a write,
/// whether sent, fed or given to the `Sink`; `LengthDelimitedCodec` writes what
/// `LengthDelimited` does.
#[cfg(feature = "tokio-util")]
#[tokio::test]
async fn a_tokio_util_encoder_feeds_the_writer() {
    use bytes::Bytes;
    use futures_sink::Sink;
    use ringmem::io::{AsyncFramedWriter, TokioEncoder};
    use tokio_util::codec::LengthDelimitedCodec;
    let sent = frames(60);
    for cap in [1, 7, 4096, 1 << 20] {
        let codec = TokioEncoder::new(LengthDelimitedCodec::new());
        let mut w = AsyncFramedWriter::new(Trickle::new(cap), codec).with_high_water(16 << 10);
        for (i, f) in sent.iter().enumerate() {
            let item = Bytes::from(f.clone());
            match i % 3 {
                0 => w.send_item(item).await.unwrap(),
                1 => w.feed_item(item).unwrap(),
                _ => {
                    let sink =
                        |cx: &mut Context<'_>| Sink::<Bytes>::poll_ready(Pin::new(&mut w), cx);
                    poll_fn(sink).await.unwrap();
                    Pin::new(&mut w).start_send(item).unwrap();
                }
            }
        }
        poll_fn(|cx| Sink::<Bytes>::poll_close(Pin::new(&mut w), cx))
            .await
            .unwrap();
        assert_eq!((w.queued_frames(), w.queued_bytes()), (0, 0));
        let t = w.into_inner();
        assert!(t.out == encode(&sent), "cap {cap}: the wire differs");
        if cap >= 4096 {
            assert!(
                t.slices.iter().any(|&n| n > 3),
                "no gathering: {:?}",
                t.slices
            );
        }
    }
}

/// A codec that fails leaves nothing queued, not even the bytes it wrote before it
/// failed; an item it encodes to nothing queues nothing; the writer goes on.
#[cfg(feature = "tokio-util")]
#[tokio::test]
async fn a_tokio_util_encoder_that_fails_queues_nothing() {
    use bytes::{BufMut, BytesMut};
    use ringmem::io::{AsyncFramedWriter, TokioEncoder};
    struct Digits;
    impl tokio_util::codec::Encoder<i64> for Digits {
        type Error = io::Error;
        fn encode(&mut self, n: i64, dst: &mut BytesMut) -> io::Result<()> {
            dst.put_slice(b":");
            if n < 0 {
                return Err(ErrorKind::InvalidInput.into());
            }
            if n > 0 {
                dst.put_slice(format!("{n}\r\n").as_bytes());
            } else {
                dst.clear(); // zero: nothing at all
            }
            Ok(())
        }
    }
    let mut w = AsyncFramedWriter::new(Trickle::new(2), TokioEncoder::new(Digits));
    w.feed_item(7).unwrap();
    let err = w.send_item(-1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    w.feed_item(0).unwrap();
    assert_eq!((w.queued_frames(), w.queued_bytes()), (1, 4));
    w.send_item(12).await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(w.into_inner().out, b":7\r\n:12\r\n");
}

/// A stream of `line` bytes `x`, a newline, then `x`s without end, that fills every
/// read to the brim (a peer with unlimited data), counting the reads.
struct Endless {
    line: usize,
    sent: usize,
    reads: usize,
}

impl Endless {
    fn new(line: usize) -> Self {
        Endless {
            line,
            sent: 0,
            reads: 0,
        }
    }
}

impl AsyncRead for Endless {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.reads += 1;
        let room = buf.initialize_unfilled();
        room.fill(b'x');
        if let Some(nl) = (this.line.checked_sub(this.sent)).filter(|&i| i < room.len()) {
            room[nl] = b'\n';
        }
        let n = room.len();
        buf.advance(n);
        this.sent += n;
        Poll::Ready(Ok(()))
    }
}

/// The next item of `r`, polled by hand (no runtime): a reader that yields to its
/// executor while it waits for room wakes itself, and is polled again at once.
// `Waker::noop` (1.85): see `rest_after`.
#[allow(clippy::incompatible_msrv)]
fn poll_next_now<R: AsyncRead + Unpin, D: Decoder + Unpin>(
    r: &mut AsyncFramedReader<R, D>,
) -> Option<io::Result<FixedBuf>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..1000 {
        if let Poll::Ready(item) = Pin::new(&mut *r).poll_next(&mut cx) {
            return item;
        }
    }
    panic!("the reader is stuck");
}

/// As the blocking reader's test of the same name (`tests/io.rs`): a line of unknown
/// length past half the ring is carried into regions that at least double, so a line
/// larger than the ring is an error after a few reads, not after one read of a few
/// bytes (and a copy of the whole line) per word of the ring.
#[test]
fn a_line_larger_than_the_ring_errs_within_a_few_reads() {
    let lines = Lines::with_max_length(usize::MAX);
    let mut r = AsyncFramedReader::with_ring(Endless::new(1 << 20), lines, Ring::new(256 << 10));
    let e = poll_next_now(&mut r).unwrap().unwrap_err();
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert!(matches!(why, FrameError::LargerThanRing { .. }), "{e:?}");
    let reads = r.get_ref().reads;
    assert!(reads <= 20, "{reads} reads");
}

/// A legal line (under `Lines::new`'s maximum) of most of the ring arrives in a few
/// reads.
#[test]
fn a_long_line_in_a_small_ring_arrives_within_a_few_reads() {
    let line = 60 << 10;
    let mut r =
        AsyncFramedReader::with_ring(Endless::new(line), Lines::new(), Ring::new(100 << 10));
    assert_eq!(poll_next_now(&mut r).unwrap().unwrap().len(), line);
    let reads = r.get_ref().reads;
    assert!(reads <= 5, "{reads} reads");
}

/// An `AsyncRead` with a bug: it hands out `data` in reads of up to `size` bytes, but
/// on read number `swap_at` (from 0) it puts a `ReadBuf` over memory of its own, filled
/// with `fake`, in place of the one it was handed. Safe code can: any memory that
/// outlives the call will do, here a piece of a leaked block (`framed_async::foreign`).
struct Swapper {
    data: Vec<u8>,
    pos: usize,
    size: usize,
    swap_at: usize,
    reads: usize,
    fake: Option<&'static mut [u8]>,
}

impl Swapper {
    fn new(data: Vec<u8>, size: usize, swap_at: usize, fake: &[u8]) -> Self {
        Swapper {
            data,
            pos: 0,
            size,
            swap_at,
            reads: 0,
            fake: Some({
                let piece = framed_async::foreign(fake.len());
                piece.copy_from_slice(fake);
                piece
            }),
        }
    }
}

impl AsyncRead for Swapper {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.reads += 1;
        if this.reads - 1 == this.swap_at {
            let fake = this.fake.take().expect("one swap");
            let n = fake.len();
            *buf = ReadBuf::new(fake);
            buf.set_filled(n);
        } else {
            let n = this
                .size
                .min(buf.remaining())
                .min(this.data.len() - this.pos);
            buf.put_slice(&this.data[this.pos..this.pos + n]);
            this.pos += n;
        }
        Poll::Ready(Ok(()))
    }
}

/// Every item of `r` to the end: the frames and the one error, which must be the
/// reader's bug, and come last.
fn frames_then_the_bug<D: Decoder + Unpin>(mut r: AsyncFramedReader<Swapper, D>) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut bug = None;
    let reads = r.get_ref().swap_at + 1;
    while let Some(item) = poll_next_now(&mut r) {
        assert!(bug.is_none(), "an item after the reader's bug: {item:?}");
        match item {
            Ok(f) => got.push(f.to_vec()),
            Err(e) => bug = Some(e),
        }
    }
    let e = bug.expect("the replaced ReadBuf was taken for bytes");
    assert_eq!(r.get_ref().reads, reads, "reads after the reader's bug");
    assert_eq!(e.kind(), ErrorKind::Other, "{e:?}");
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert!(matches!(why, FrameError::ReadBufReplaced { .. }), "{e:?}");
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
    got
}

/// A `ReadBuf` put in place of the reader's in a plain read: an error (`Other`,
/// `ReadBufReplaced`), then the end, and never a frame of the foreign bytes (nor of the
/// region's unwritten ones, as many as the foreign buffer said it held).
#[test]
fn a_replaced_read_buf_is_an_error_not_bytes() {
    let fake = encode(&[b"FAKE!".to_vec()]);
    for swap_at in [0, 1] {
        let src = Swapper::new(encode(&frames(3)), 1 << 20, swap_at, &fake);
        let r = AsyncFramedReader::with_ring(src, LengthDelimited::new(), Ring::new(1 << 16));
        let got = frames_then_the_bug(r);
        assert_eq!(got, frames(3)[..got.len()], "swapped at read {swap_at}");
    }
    // An empty one is not the end of the stream either.
    let src = Swapper::new(b"a\nb".to_vec(), 1 << 20, 0, &[]);
    let got = frames_then_the_bug(AsyncFramedReader::with_ring(
        src,
        Lines::new(),
        Ring::new(1 << 20),
    ));
    assert!(got.is_empty());
}

/// The same in a top-up (the read that completes a region's last frame in place): the
/// frame it was to complete never comes out (the reader ends at once, dropping the
/// frame before it too).
#[test]
fn a_read_buf_replaced_in_a_top_up_is_an_error_not_bytes() {
    let frames: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 10_000]).collect();
    let wire = encode(&frames);
    // The first read ends 6000 bytes into the second frame (worth a top-up); the
    // top-up gets a buffer of 4004 foreign bytes, the rest of that frame.
    let src = Swapper::new(wire, 16_004, 1, &[b'F'; 4004]);
    let r = AsyncFramedReader::with_ring(src, LengthDelimited::new(), Ring::new(1 << 18))
        .with_read_size(16_384);
    let got = frames_then_the_bug(r);
    assert!(got.len() <= 1 && got == frames[..got.len()], "{got:?}");
}

/// A waker that counts its wake-ups.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Polls `r` (holding every frame in `held`) until it waits for room, and through the
/// polls in which it yields to its executor (it wakes its own task and returns
/// `Pending`) up to the one that registers for a release (`Pending` without a wake).
/// Returns the yields.
fn wait_for_room(
    r: &mut AsyncFramedReader<Scripted, LengthDelimited>,
    held: &mut Vec<FixedBuf>,
    wakes: &std::sync::Arc<CountWakes>,
) -> usize {
    let waker = std::task::Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let count = || wakes.0.load(std::sync::atomic::Ordering::Relaxed);
    let mut yields = 0;
    for _ in 0..10_000 {
        let before = count();
        match Pin::new(&mut *r).poll_next(&mut cx) {
            Poll::Ready(f) => {
                assert_eq!(yields, 0, "a frame in the middle of a wait");
                held.push(f.expect("the ring fills first").unwrap());
            }
            Poll::Pending if count() > before => yields += 1,
            Poll::Pending => return yields,
        }
    }
    panic!("the reader neither waited nor registered");
}

/// A wait for room that ends in a plain try (the poll after a release's wake-up) leaves
/// the waiters: the next wait yields to the executor as many times as the first before
/// it registers, rather than registering at once with the first wait's yields spent.
#[test]
fn a_wait_for_room_ends_when_a_try_succeeds() {
    let frames: Vec<Vec<u8>> = (0..200u8).map(|i| vec![i; 1000]).collect();
    let src = Scripted {
        data: encode(&frames),
        pos: 0,
        sizes: vec![1 << 20],
        stalls: vec![false],
        fail: false,
        i: 0,
    };
    let mut r = AsyncFramedReader::with_ring(src, LengthDelimited::new(), Ring::new(1 << 14))
        .with_read_size(1024);
    let wakes = std::sync::Arc::new(CountWakes(Default::default()));
    let mut held = Vec::new();
    let first = wait_for_room(&mut r, &mut held, &wakes);
    assert!(first > 0, "the first wait registered at once");
    // Room: the releases wake the registered task, whose next poll's try succeeds.
    let had = held.len();
    held.clear();
    let second = wait_for_room(&mut r, &mut held, &wakes);
    assert!(!held.is_empty() && had + held.len() < frames.len());
    assert_eq!(second, first, "yields before the second wait registered");
}

/// The fuzz target's drivers (`fuzz/framed.rs`, whose blocking `run` is `tests/io.rs`'s,
/// and `fuzz/framed_async.rs`), on random inputs: the async reader against the
/// reference decoder, through a source that stalls and replaces a `ReadBuf`.
#[allow(dead_code)]
#[path = "../fuzz/framed.rs"]
mod framed;
#[path = "../fuzz/framed_async.rs"]
mod framed_async;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_async_fuzz_driver_agrees(
        config in any::<u8>(),
        extra in any::<u8>(),
        sizes in prop::collection::vec(1..=255u8, 0..6),
        stream in prop::collection::vec(
            prop::sample::select(vec![0u8, 1, 2, 3, 10, 13, 0x0f, 0x10, 0x80, 0xfe, 0xff, b'a']),
            0..3000,
        ),
    ) {
        let data = [&[config, extra][..], &sizes, &[0], &stream].concat();
        framed_async::run(&data);
    }
}

/// Inputs with long frames and lines (`0xfe, k`: `(k + 1) * 512` bytes `a`) and replaced
/// `ReadBuf`s, through both drivers.
#[test]
fn the_fuzz_drivers_on_fixed_inputs() {
    let run = |data: &[u8]| {
        framed::run(data);
        framed_async::run(data);
    };
    // Lines of no maximum, 64 KiB ring, read size 4096: a 60 KiB line, a 1 MiB one.
    let lines = [&b"a\n\xfe\x77\nb\n"[..], &[0xfe, 0xff].repeat(8), b"\nc\n"].concat();
    run(&[[0b1100_0010, 0b0000_0100].as_slice(), &[255, 0], &lines].concat());
    // The same, stalling, and a `ReadBuf` replaced on the second read.
    run(&[[0b1100_0010, 0b0101_1100].as_slice(), &[255, 7, 0], &lines].concat());
    // A 40 KiB length-delimited frame, 4-byte big-endian header, frames up to 16 MiB.
    let mut wire = vec![0, 0, 0xa0, 0x00];
    wire.extend([0xfe, 0x4f]);
    wire.extend([0, 0, 0, 1, b'z']);
    run(&[[0b1100_1101, 0b0000_0101].as_slice(), &[200, 0], &wire].concat());
    // A `ReadBuf` replaced on the first read, with 0 and with 50 bytes.
    run(&[
        [0b0000_0011, 0b0001_0000].as_slice(),
        &[128, 0],
        b"\0\x02hi",
    ]
    .concat());
    run(&[[0b0000_0011, 0b0001_0000].as_slice(), &[50, 0], b"\0\x02hi"].concat());
    // Reads of one byte: each cut short, each followed by a look for bytes (a read into
    // no bytes), which is not a read cut short (found by the fuzzer).
    run(b"\xf8-\x01\x00%\x00\x00%\x00\xfe(");
}

/// A stream whose reader always has bytes (here a slice: its reads never wait) spends
/// tokio's cooperative budget on the frames it yields, as `FramedRead` spends a unit
/// per 8 KiB read: another task on the same worker runs before a long stream ends,
/// instead of after it.
#[tokio::test]
async fn a_busy_stream_lets_other_tasks_run() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let frames: Vec<Vec<u8>> = (0..40_000u32).map(|i| i.to_be_bytes().repeat(25)).collect();
    let wire = encode(&frames);
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    // Let the ticker start.
    tokio::task::yield_now().await;
    let start = ticks.load(Ordering::Relaxed);
    let mut r = AsyncFramedReader::new(&wire[..], LengthDelimited::new());
    let mut n = 0;
    while let Some(f) = next(&mut r).await {
        assert_eq!(&f.unwrap()[..], &frames[n][..]);
        n += 1;
    }
    assert_eq!(n, frames.len());
    // 4 MB of frames: about 500 units of a budget of 128 a turn.
    let ran = ticks.load(Ordering::Relaxed) - start;
    ticker.abort();
    assert!(
        ran >= 2,
        "the other task ran {ran} times while the stream was read"
    );
}

/// A reply server's loop: echoed frames, a static reply and formatted ones go out
/// through one writer of `FixedBuf`s, in order.
#[tokio::test]
async fn replies_that_are_not_frames_go_out_beside_echoed_ones() {
    use ringmem::io::AsyncFramedWriter;
    let wire = b"PING\nECHO hi\nCOUNT\n".to_vec();
    let mut r = AsyncFramedReader::new(&wire[..], Lines::new());
    let mut w: AsyncFramedWriter<_, FixedBuf, _> = AsyncFramedWriter::new(Vec::new(), Lines::new());
    let mut seen = 0;
    while let Some(frame) = next(&mut r).await {
        let frame = frame.unwrap();
        seen += 1;
        let reply = if frame == "PING" {
            FixedBuf::from_static(b"+PONG")
        } else if frame.starts_with(b"ECHO ") {
            frame.slice(5..)
        } else {
            FixedBuf::from(format!(":{seen}"))
        };
        w.send(reply).await.unwrap();
    }
    w.flush().await.unwrap();
    assert_eq!(w.get_ref(), b"+PONG\nhi\n:3\n");
}

/// `next_frame` gives what the `Stream` gives: a frame over the maximum is an error,
/// after which the next call goes on with the frame after it; then the clean end.
#[tokio::test]
async fn next_frame_goes_on_after_a_frame_over_the_maximum() {
    let wire = encode(&[b"ok".to_vec(), vec![7; 100], b"after".to_vec()]);
    let codec = LengthDelimited::new().max_frame_length(64);
    let mut r = AsyncFramedReader::new(&wire[..], codec);
    assert_eq!(r.next_frame().await.unwrap().unwrap(), "ok");
    let err = r.next_frame().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert_eq!(r.next_frame().await.unwrap().unwrap(), "after");
    assert!(r.next_frame().await.unwrap().is_none());
}

/// A socket, as the reader sees it: each read takes the next step (`None`: nothing to
/// read now). A read into no bytes (the reader's look before a claim) takes a `None`
/// step, and finds a step of bytes ready without taking it. Records each read's room.
struct Socket {
    steps: std::collections::VecDeque<Option<&'static [u8]>>,
    rooms: Vec<usize>,
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.rooms.push(buf.remaining());
        match this.steps.front() {
            None => Poll::Ready(Ok(())), // the end
            Some(None) => {
                this.steps.pop_front();
                Poll::Pending
            }
            Some(Some(_)) if buf.remaining() == 0 => Poll::Ready(Ok(())),
            Some(Some(bytes)) => {
                buf.put_slice(bytes);
                this.steps.pop_front();
                Poll::Ready(Ok(()))
            }
        }
    }
}

/// After a read that filled less than it was given, the next poll looks for bytes by a
/// read into no bytes before it claims a region: a socket with nothing to read costs no
/// claim, and the stream holds nothing meanwhile. A look that finds bytes makes the
/// next short read's claim go without one (then 2, 4, ...), so that a stream whose
/// bytes are always there pays few.
#[test]
fn a_short_read_is_followed_by_a_look_not_a_claim() {
    let steps = [
        Some(&b"a\n"[..]),
        None,
        Some(b"b\n"),
        Some(b"c\n"),
        None,
        Some(b"d\n"),
        None,
    ];
    let socket = Socket {
        steps: steps.into_iter().collect(),
        rooms: Vec::new(),
    };
    let mut r = AsyncFramedReader::with_ring(socket, Lines::new(), Ring::new(1 << 16));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut poll = |r: &mut AsyncFramedReader<Socket, Lines>| match Pin::new(r).poll_next(&mut cx) {
        Poll::Ready(Some(f)) => Some(f.unwrap().to_vec()),
        Poll::Ready(None) => panic!("the end"),
        Poll::Pending => None,
    };
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(poll(&mut r));
        if seen.last().unwrap().is_none() {
            let live = r.ring().unwrap().stats().live_buffers;
            assert_eq!(live, 0, "a region held while idle");
        }
    }
    let frame = |b: &[u8]| Some(b.to_vec());
    let expect = [
        frame(b"a"),
        None,
        frame(b"b"),
        frame(b"c"),
        None,
        frame(b"d"),
        None,
    ];
    assert_eq!(seen, expect);
    // A read of room (R) or a look (0): the look after "a" finds nothing, the one after
    // "b" finds "c", so the read after "c" claims without one, and the read after "d"
    // looks again and finds nothing.
    let looks: Vec<bool> = r.get_ref().rooms.iter().map(|&n| n == 0).collect();
    let (l, read) = (true, false);
    assert_eq!(looks, [read, l, read, l, read, read, read, l]);
}
