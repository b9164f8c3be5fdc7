//! The framed reader against a reference decoder: a byte string is a reader
//! configuration, a pattern of read sizes and a stream. Frames and errors must come in
//! the same order, a rejected frame (over the maximum, or larger than the ring) being
//! skipped where its decoder can resynchronise.
//! Shared by the fuzz target `framed` and `tests/io.rs`.

use std::io::{self, ErrorKind, Read};

use ringmem::io::{FramedReader, LengthDelimited, Lines};
use ringmem::Ring;

/// Hands out the stream in reads of the sizes given, in turn (at least 1 byte each).
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    i: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::from(self.sizes[self.i % self.sizes.len()]).max(1);
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// What a plain decoder makes of a stream, in order: each frame, or the error for a
/// frame it rejects (after which it goes on where the next frame is known to start, or
/// ends); then the end.
type Outcome = Vec<Result<Vec<u8>, ErrorKind>>;

/// `fits`: the most bytes (header included) a frame of the reader's ring can have.
fn reference_length(
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
fn reference_lines(mut s: &[u8], max: usize, fits: usize) -> Outcome {
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
    let bound = r.get_ref().data.len() + 2;
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
    drop(held);
    assert_eq!(
        r.ring().stats().live_buffers,
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

/// Runs one input: `[config, extra, read sizes.., 0, stream..]`. `extra` bit 0: frames
/// up to 16 MiB for the length-delimited decoder (larger than the ring); bit 1: a ring
/// of 4 KiB, which frames and lines in a short stream can outgrow.
pub fn run(data: &[u8]) {
    let [config, extra, rest @ ..] = data else {
        return;
    };
    let (config, extra) = (*config, *extra);
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (sizes, stream) = rest.split_at(split);
    let stream = stream.get(1..).unwrap_or_default();
    let sizes: &[u8] = if sizes.is_empty() { &[255] } else { sizes };
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
    let ring = Ring::new(capacity);
    // Frames bounded by a quarter of the ring leave room for three held ones.
    let hold = if extra == 0 { 3 } else { 0 };
    let read_size = [64, 200, 4096, 1 << 16][usize::from(config >> 5 & 3)];
    let reader = Chunked {
        data: stream,
        sizes,
        i: 0,
    };
    let (got, want) = if config & 1 == 0 {
        let max = [16, 1000][usize::from(config >> 1 & 1)];
        let r = FramedReader::with_ring(reader, Lines::with_max_length(max), ring)
            .with_read_size(read_size);
        (read_all(r, hold), reference_lines(stream, max, fits))
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
        let c = if big {
            c.big_endian()
        } else {
            c.little_endian()
        };
        let r = FramedReader::with_ring(reader, c, ring).with_read_size(read_size);
        (
            read_all(r, hold),
            reference_length(stream, width, big, adjust, max, fits),
        )
    };
    assert_eq!(
        got, want,
        "config {config:#010b}, extra {extra:#04b}, read sizes {sizes:?}"
    );
}
