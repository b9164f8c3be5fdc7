//! The framed reader against a reference decoder: a byte string is a reader
//! configuration, a pattern of read sizes and a stream. Frames and errors must come in
//! the same order, a rejected frame being skipped where its decoder can resynchronise.
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

fn reference_length(mut s: &[u8], width: usize, big: bool, adjust: i64, max: usize) -> Outcome {
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
        if len > max as i128 {
            // Too long: reported, then skipped (a stream ending inside it ends cleanly).
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

fn reference_lines(mut s: &[u8], max: usize) -> Outcome {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (line, rest) = match s.iter().position(|&b| b == b'\n') {
            Some(i) => (&s[..i], &s[i + 1..]),
            None => (s, &s[s.len()..]),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A line too long is reported, then skipped up to its newline.
        out.push(if line.len() > max {
            Err(ErrorKind::InvalidData)
        } else {
            Ok(line.to_vec())
        });
        s = rest;
    }
    out
}

fn read_all<D: ringmem::io::Decoder>(mut r: FramedReader<Chunked<'_>, D>) -> Outcome {
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
                if held.len() > 3 {
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

/// Runs one input: `[config, read sizes.., 0, stream..]`.
pub fn run(data: &[u8]) {
    let Some((&config, rest)) = data.split_first() else {
        return;
    };
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (sizes, stream) = rest.split_at(split);
    let stream = stream.get(1..).unwrap_or_default();
    let sizes: &[u8] = if sizes.is_empty() { &[255] } else { sizes };
    let ring = Ring::new([1 << 15, 1 << 16][usize::from(config >> 7)]);
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
        (read_all(r), reference_lines(stream, max))
    } else {
        let width = [1, 2, 4, 8][usize::from(config >> 1 & 3)];
        let big = config & 8 != 0;
        let adjust = if config & 16 != 0 { -(width as i64) } else { 0 };
        // At most a quarter of the smaller ring: a frame never outgrows a region.
        let max = 4000;
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
            read_all(r),
            reference_length(stream, width, big, adjust, max),
        )
    };
    assert_eq!(got, want, "config {config:#010b}, read sizes {sizes:?}");
}
