//! The framed reader against a reference decoder: a byte string is a reader
//! configuration, a pattern of read sizes and a stream. Frames and errors must come in
//! the same order, a rejected frame (over the maximum, or larger than the ring) being
//! skipped where its decoder can resynchronise. The reads the reader cuts short (offers
//! less room than the source would fill) stay in proportion to the frames and the
//! stream's length: a frame that costs a read (and a copy of itself) per few bytes is
//! quadratic.
//! Shared by the fuzz target `framed`, `tests/io.rs` and (with `framed_async.rs`)
//! `tests/io_tokio.rs`.

use std::borrow::Cow;
use std::io::{self, ErrorKind, Read};

use ringmem::io::{FramedReader, LengthDelimited, Lines};
use ringmem::Ring;

/// Hands out the stream in reads of the sizes given, in turn (at least 1 byte each).
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    i: usize,
    /// Reads offered less room than they would have filled.
    short: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::from(self.sizes[self.i % self.sizes.len()]).max(1);
        self.i += 1;
        let due = want.min(self.data.len());
        self.short += usize::from(buf.len() < due);
        let n = due.min(buf.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// What a plain decoder makes of a stream, in order: each frame, or the error for a
/// frame it rejects (after which it goes on where the next frame is known to start, or
/// ends); then the end.
pub type Outcome = Vec<Result<Vec<u8>, ErrorKind>>;

/// `fits`: the most bytes (header included) a frame of the reader's ring can have.
pub fn reference_length(
    mut s: &[u8],
    width: usize,
    big: bool,
    adjust: i64,
    max: usize,
    fits: usize,
) -> Outcome {
    let mut out = Vec::new();
    loop {
        if s.is_empty() {
            return out;
        }
        if s.len() < width {
            out.push(Err(ErrorKind::UnexpectedEof));
            return out;
        }
        let mut b = [0u8; 8];
        let field = if big {
            b[8 - width..].copy_from_slice(&s[..width]);
            u64::from_be_bytes(b)
        } else {
            b[..width].copy_from_slice(&s[..width]);
            u64::from_le_bytes(b)
        };
        let len = i128::from(field) + i128::from(adjust);
        if len < 0 || len + width as i128 > isize::MAX as i128 {
            // The length overflows: nothing says where the next frame starts.
            out.push(Err(ErrorKind::InvalidData));
            return out;
        }
        let end = width + len as usize;
        if len > max as i128 || end > fits {
            // Too long or larger than the ring: reported, then skipped (a stream ending
            // inside it ends cleanly).
            out.push(Err(ErrorKind::InvalidData));
            s = s.get(end..).unwrap_or_default();
            continue;
        }
        if s.len() < end {
            out.push(Err(ErrorKind::UnexpectedEof));
            return out;
        }
        out.push(Ok(s[width..end].to_vec()));
        s = &s[end..];
    }
}

/// `fits` as for [`reference_length`]: the reader, looking for a line's end, asks for
/// one more byte than it holds, so a line is larger than the ring when its bytes up to
/// its newline (or the end), plus one, are more than `fits`.
pub fn reference_lines(mut s: &[u8], max: usize, fits: usize) -> Outcome {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (line, rest) = match s.iter().position(|&b| b == b'\n') {
            Some(i) => (&s[..i], &s[i + 1..]),
            None => (s, &s[s.len()..]),
        };
        let held = line.len() + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A line too long is reported, then skipped up to its newline.
        out.push(if line.len() > max || held > fits {
            Err(ErrorKind::InvalidData)
        } else {
            Ok(line.to_vec())
        });
        s = rest;
    }
    out
}

/// Reads every event of `r`, holding the last `hold` frames (a reader waits for room
/// that held frames take: with frames that can outgrow a quarter of the ring, a
/// single-threaded caller holding any would wait for ever).
fn read_all<D: ringmem::io::Decoder>(mut r: FramedReader<Chunked<'_>, D>, hold: usize) -> Outcome {
    let mut out = Vec::new();
    let mut held = Vec::new();
    // Every event but the end takes at least one byte of the stream (a header, a
    // newline): a reader that yields more is stuck.
    let stream_len = r.get_ref().data.len();
    let bound = stream_len + 2;
    loop {
        match r.next_frame() {
            Ok(Some(f)) => {
                out.push(Ok(f.to_vec()));
                // Keep a few frames alive, so regions are shared and the ring wraps.
                held.push(f);
                if held.len() > hold {
                    held.remove(0);
                }
            }
            Ok(None) => break,
            Err(e) => out.push(Err(e.kind())),
        }
        assert!(out.len() <= bound, "more events than bytes: {out:?}");
    }
    assert!(r.next_frame().unwrap().is_none(), "a frame after the end");
    let short = r.get_ref().short;
    assert_linear(short, out.len(), stream_len, r.read_size());
    drop(held);
    assert_eq!(
        r.ring().unwrap().stats().live_buffers,
        0,
        "the reader kept ring memory"
    );
    out
}

/// The most bytes one buffer of an empty `Ring::new(capacity)` can have.
fn largest_buffer(capacity: usize) -> usize {
    let (mut lo, mut hi) = (0, capacity);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if Ring::new(capacity).fixed(mid).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Reads the reader cut short, at most: a few per region (its last read; one cut to
/// end on a frame boundary; a top-up), a region per event, per read size of the
/// stream, and per doubling of a long frame's region (a few dozen at most). What a
/// frame that outgrows its region by a few bytes per read costs (one short read per
/// few bytes of it) is far above it.
pub fn assert_linear(short: usize, events: usize, stream: usize, read_size: usize) {
    let bound = 4 * (events + 1 + stream / read_size + 64);
    assert!(
        short <= bound,
        "{short} reads cut short for {events} events of a {stream}-byte stream \
         (read size {read_size}): more than {bound}"
    );
}

/// The stream to read: as given, or with long runs (extra bit 2): a byte `0xfe`
/// followed by `k` stands for `(k + 1) * 512` bytes `a`, up to [`LONG`] bytes in all
/// (frames and lines longer than the input, and than the ring).
fn expand(stream: &[u8], long: bool) -> Cow<'_, [u8]> {
    if !long || !stream.contains(&0xfe) {
        return Cow::Borrowed(stream);
    }
    let mut out = Vec::with_capacity(stream.len());
    let mut it = stream.iter();
    while let Some(&b) = it.next() {
        match (b, it.as_slice().first()) {
            (0xfe, Some(&k)) if out.len() < LONG => {
                it.next();
                let n = ((usize::from(k) + 1) * 512).min(LONG - out.len());
                out.resize(out.len() + n, b'a');
            }
            _ => out.push(b),
        }
    }
    Cow::Owned(out)
}

/// The longest stream [`expand`] makes.
const LONG: usize = 1 << 19;

/// A decoder of a [`Case`], and what the reference decoder needs to know of it.
pub enum Decoding {
    Lines(Lines),
    Length {
        codec: LengthDelimited,
        big: bool,
        adjust: i64,
    },
}

/// One input, parsed: `[config, extra, read sizes.., 0, stream..]`. `config` bit 0:
/// length-delimited, else lines; bits 1-4 the decoder's shape, 5-6 the read size, 7
/// the ring. `extra` bit 0: frames up to 16 MiB for the length-delimited decoder
/// (larger than the ring); bit 1: a ring of 4 KiB, which frames and lines in a short
/// stream can outgrow; bit 2: long runs in the stream ([`expand`]), and lines of up
/// to 1,000 bytes or no maximum; bits 3-7: for the async driver (`framed_async.rs`).
pub struct Case<'a> {
    pub config: u8,
    pub extra: u8,
    pub sizes: &'a [u8],
    pub stream: Cow<'a, [u8]>,
    pub capacity: usize,
    /// The most bytes one buffer of the ring can have.
    pub fits: usize,
    /// Frames to hold (so regions are shared and the ring wraps) where none can wait
    /// for room held frames take.
    pub hold: usize,
    pub read_size: usize,
    pub decoder: Decoding,
}

impl<'a> Case<'a> {
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let [config, extra, rest @ ..] = data else {
            return None;
        };
        let (config, extra) = (*config, *extra);
        let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let (sizes, stream) = rest.split_at(split);
        let stream = stream.get(1..).unwrap_or_default();
        let sizes: &[u8] = if sizes.is_empty() { &[255] } else { sizes };
        let long = extra & 4 != 0;
        let stream = expand(stream, long);
        let capacity = if extra & 2 != 0 {
            1 << 12
        } else {
            [1 << 15, 1 << 16][usize::from(config >> 7)]
        };
        static FITS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());
        let fits = {
            let mut known = FITS.lock().unwrap();
            match known.iter().find(|(c, _)| *c == capacity) {
                Some(&(_, f)) => f,
                None => {
                    let f = largest_buffer(capacity);
                    known.push((capacity, f));
                    f
                }
            }
        };
        // Frames bounded by a quarter of the ring leave room for three held ones.
        let hold = if extra & 7 == 0 { 3 } else { 0 };
        let read_size = [64, 200, 4096, 1 << 16][usize::from(config >> 5 & 3)];
        let decoder = if config & 1 == 0 {
            let max = match (long, config >> 1 & 1) {
                (false, 0) => 16,
                (false, _) => 1000,
                (true, 0) => 1000,
                (true, _) => usize::MAX,
            };
            Decoding::Lines(Lines::with_max_length(max))
        } else {
            let width = [1, 2, 4, 8][usize::from(config >> 1 & 3)];
            let big = config & 8 != 0;
            let adjust = if config & 16 != 0 { -(width as i64) } else { 0 };
            // Under a quarter of the 32 KiB ring, or more than the largest ring.
            let max = if extra & 1 != 0 { 1 << 24 } else { 4000 };
            let c = LengthDelimited::new()
                .field_width(width)
                .adjustment(adjust)
                .max_frame_length(max);
            let codec = if big {
                c.big_endian()
            } else {
                c.little_endian()
            };
            Decoding::Length { codec, big, adjust }
        };
        Some(Case {
            config,
            extra,
            sizes,
            stream,
            capacity,
            fits,
            hold,
            read_size,
            decoder,
        })
    }

    /// What the reference decoder makes of the stream.
    pub fn reference(&self) -> Outcome {
        match self.decoder {
            Decoding::Lines(d) => reference_lines(&self.stream, d.max_len(), self.fits),
            Decoding::Length { codec, big, adjust } => reference_length(
                &self.stream,
                codec.header_len(),
                big,
                adjust,
                codec.max_len(),
                self.fits,
            ),
        }
    }
}

/// Runs one input through the blocking reader (see [`Case::parse`]).
pub fn run(data: &[u8]) {
    let Some(case) = Case::parse(data) else {
        return;
    };
    let ring = Ring::new(case.capacity);
    let reader = Chunked {
        data: &case.stream,
        sizes: case.sizes,
        i: 0,
        short: 0,
    };
    let got = match case.decoder {
        Decoding::Lines(d) => {
            let r = FramedReader::with_ring(reader, d, ring).with_read_size(case.read_size);
            read_all(r, case.hold)
        }
        Decoding::Length { codec, .. } => {
            let r = FramedReader::with_ring(reader, codec, ring).with_read_size(case.read_size);
            read_all(r, case.hold)
        }
    };
    let want = case.reference();
    assert_eq!(
        got, want,
        "config {:#010b}, extra {:#04b}, read sizes {:?}",
        case.config, case.extra, case.sizes
    );
}
