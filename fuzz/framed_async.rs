//! The async framed reader against the reference decoder of `framed.rs`, through an
//! `AsyncRead` that misbehaves as safe code may: reads of any size, `Pending` (waking
//! itself) at any read, and on one read a `ReadBuf` of its own put in place of the one
//! it was handed. Up to that read the frames and errors must be the reference's; at
//! it, the reader must end with its `ReadBufReplaced` error, taking none of those
//! bytes. Reads cut short stay in proportion to the stream, as for the blocking reader.
//! Polled by hand with a waker that does nothing: no runtime.
//! Shared by the fuzz target `framed` and `tests/io_tokio.rs`.

use std::io::{self, ErrorKind};
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, Decoder, FrameError};
use ringmem::Ring;
use tokio::io::{AsyncRead, ReadBuf};

use super::framed::{assert_linear, Case, Decoding, Outcome};

/// Memory that outlives any `ReadBuf`, which safe code needs to put one of its own in
/// place of the one it was handed: `len` bytes cut off a leaked block, never handed out
/// twice. The block stays reachable from a static while bytes are left, and by its
/// address after, so a leak checker (LeakSanitizer, Miri's) does not report it.
pub fn foreign(len: usize) -> &'static mut [u8] {
    const BLOCK: usize = 1 << 20;
    static LEFT: Mutex<&'static mut [u8]> = Mutex::new(&mut []);
    static BLOCKS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let mut left = LEFT.lock().unwrap_or_else(|e| e.into_inner());
    if left.len() < len {
        let block: &'static mut [u8] = Box::leak(vec![0xee; BLOCK.max(len)].into_boxed_slice());
        let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        blocks.push(block.as_ptr() as usize);
        *left = block;
    }
    let (piece, rest) = core::mem::take(&mut *left).split_at_mut(len);
    *left = rest;
    piece
}

/// Hands out the stream in reads of the sizes given, in turn; with `stalls`, answers
/// `Pending` (waking itself) instead of a read of an odd size, once; on read `swap_at`
/// puts a `ReadBuf` over foreign memory, filled with the stream's next bytes, in place
/// of the reader's.
struct Hostile<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    /// Reads served.
    i: usize,
    stalls: bool,
    stalled: bool,
    swap_at: Option<usize>,
    fake_len: usize,
    swapped: bool,
    /// Reads offered less room than they would have filled.
    short: usize,
}

impl AsyncRead for Hostile<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let size = this.sizes[this.i % this.sizes.len()];
        if this.stalls && size % 2 == 1 && !this.stalled {
            this.stalled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.stalled = false;
        let i = this.i;
        this.i += 1;
        let due = usize::from(size).max(1).min(this.data.len());
        if this.swap_at == Some(i) {
            this.swapped = true;
            let fake = foreign(this.fake_len);
            let n = fake.len().min(this.data.len());
            fake[..n].copy_from_slice(&this.data[..n]);
            *buf = ReadBuf::new(fake);
            buf.set_filled(n);
            return Poll::Ready(Ok(()));
        }
        // A read into no bytes is the reader's look for bytes before a claim (one per
        // read cut short at most), not a read cut short.
        this.short += usize::from(buf.remaining() > 0 && buf.remaining() < due);
        let n = due.min(buf.remaining());
        buf.put_slice(&this.data[..n]);
        this.data = &this.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// The next item of `r`, polled until it comes (a reader never waits for room it
/// holds, and frames held are bounded: it must come). Stuck: polled many times without
/// a read (a wait for room yields 64 times, then retries once per poll).
// `Waker::noop` (1.85): clippy holds helpers to the library's MSRV; the fuzz crate and
// the suite's dev-dependencies need newer Rust anyway.
#[allow(clippy::incompatible_msrv)]
fn next<D: Decoder + Unpin>(
    r: &mut AsyncFramedReader<Hostile<'_>, D>,
) -> Option<io::Result<ringmem::FixedBuf>> {
    let mut cx = Context::from_waker(Waker::noop());
    let (mut reads, mut idle) = (r.get_ref().i, 0);
    loop {
        if let Poll::Ready(item) = Pin::new(&mut *r).poll_next(&mut cx) {
            return item;
        }
        if r.get_ref().i == reads {
            idle += 1;
            assert!(idle < 1000, "the async reader is stuck");
        } else {
            (reads, idle) = (r.get_ref().i, 0);
        }
    }
}

/// Every event of `r`, holding the last `hold` frames; checks the reader's linearity
/// and that it kept no ring memory. Also returns whether the swap happened.
fn read_all<D: Decoder + Unpin>(
    mut r: AsyncFramedReader<Hostile<'_>, D>,
    hold: usize,
) -> (Outcome, bool) {
    let stream_len = r.get_ref().data.len();
    let mut out = Vec::new();
    let mut held = Vec::new();
    let mut bug = false;
    while let Some(item) = next(&mut r) {
        assert!(!bug, "an event after the reader's bug: {item:?}");
        match item {
            Ok(f) => {
                out.push(Ok(f.to_vec()));
                held.push(f);
                if held.len() > hold {
                    held.remove(0);
                }
            }
            Err(e) => {
                if let Some(FrameError::ReadBufReplaced { .. }) =
                    e.get_ref().and_then(|e| e.downcast_ref())
                {
                    assert_eq!(e.kind(), ErrorKind::Other);
                    bug = true;
                }
                out.push(Err(e.kind()));
            }
        }
        assert!(
            out.len() <= stream_len + 2,
            "more events than bytes: {out:?}"
        );
    }
    assert!(next(&mut r).is_none(), "an event after the end");
    drop(held);
    assert_eq!(
        r.ring().unwrap().stats().live_buffers,
        0,
        "the reader kept ring memory"
    );
    let src = r.get_ref();
    assert_eq!(bug, src.swapped, "the replaced ReadBuf was taken for bytes");
    assert_linear(src.short, out.len(), stream_len, r.read_size());
    (out, bug)
}

/// Runs one input through the async reader (see [`Case::parse`]; `extra` bit 3: stalls,
/// bit 4: a `ReadBuf` replaced on read `extra >> 5`, with as many bytes as the last read
/// size says, modulo 128).
pub fn run(data: &[u8]) {
    let Some(case) = Case::parse(data) else {
        return;
    };
    let extra = case.extra;
    let src = Hostile {
        data: &case.stream,
        sizes: case.sizes,
        i: 0,
        stalls: extra & 8 != 0,
        stalled: false,
        swap_at: (extra & 16 != 0).then_some(usize::from(extra >> 5)),
        fake_len: usize::from(*case.sizes.last().expect("never empty")) % 128,
        swapped: false,
        short: 0,
    };
    let ring = Ring::new(case.capacity);
    let (got, swapped) = match case.decoder {
        Decoding::Lines(d) => {
            let r = AsyncFramedReader::with_ring(src, d, ring).with_read_size(case.read_size);
            read_all(r, case.hold)
        }
        Decoding::Length { codec, .. } => {
            let r = AsyncFramedReader::with_ring(src, codec, ring).with_read_size(case.read_size);
            read_all(r, case.hold)
        }
    };
    let want = case.reference();
    let ok = if swapped {
        // The reference's events up to the swap, then the reader's bug.
        let (bug, before) = got.split_last().expect("the bug is an event");
        *bug == Err(ErrorKind::Other) && want.starts_with(before)
    } else {
        got == want
    };
    assert!(
        ok,
        "config {:#010b}, extra {:#010b}, read sizes {:?}: got {got:?}, want {want:?}",
        case.config, case.extra, case.sizes
    );
}
