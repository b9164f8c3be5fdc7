//! The framed reader and writer (`ringmem::io`): frames against a reference decoder
//! at every read boundary, bad input, waiting for room, and no allocation per frame.

// `ringmem::io` is built on the waiting calls, which loom builds leave out.
#![cfg(not(loom))]

mod common;

use std::io::{self, ErrorKind, Read};
use std::time::Duration;

use common::{config, faulty, Chunked};
use proptest::prelude::*;
use ringmem::io::{FrameError, FramedReader, FramedWriter, LengthDelimited, Lines};
use ringmem::{FixedBuf, Ring};

#[global_allocator]
static A: faulty::Faulty = faulty::Faulty;

/// The plain decoder the reader must agree with: (width, big-endian, adjustment).
fn reference_length_delimited(mut s: &[u8], width: usize, big: bool, adjust: i64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let mut b = [0u8; 8];
        if big {
            b[8 - width..].copy_from_slice(&s[..width]);
        } else {
            b[..width].copy_from_slice(&s[..width]);
        }
        let field = if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        };
        let len = (field as i64 + adjust) as usize;
        out.push(s[width..width + len].to_vec());
        s = &s[width + len..];
    }
    out
}

fn reference_lines(s: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        out.push(line.strip_suffix(b"\r").unwrap_or(line).to_vec());
        rest = next;
    }
    out
}

fn codec(width: usize, big: bool, adjust: i64) -> LengthDelimited {
    let c = LengthDelimited::new()
        .field_width(width)
        .adjustment(adjust)
        .max_frame_length(1 << 20);
    if big {
        c.big_endian()
    } else {
        c.little_endian()
    }
}

fn encode(frames: &[Vec<u8>], c: LengthDelimited) -> Vec<u8> {
    let mut w = FramedWriter::new(Vec::new(), c);
    for f in frames {
        w.write_frame(f).unwrap();
    }
    w.into_inner()
}

fn collect<R: Read, D: ringmem::io::Decoder>(r: FramedReader<R, D>) -> io::Result<Vec<Vec<u8>>> {
    r.map(|f| f.map(|f| f.to_vec())).collect()
}

proptest! {
    #![proptest_config(config(256))]

    /// Any frames, any header shape, the stream cut at any read boundaries, any ring
    /// and region size: the frames of the reference decoder, in order.
    #[test]
    fn length_delimited_matches_the_reference(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..40),
        width_i in 0..3usize,
        big in any::<bool>(),
        counts_itself in any::<bool>(),
        sizes in prop::collection::vec(1..700usize, 1..8),
        read_size in 64..2048usize,
    ) {
        let width = [2, 4, 8][width_i];
        let adjust = if counts_itself { -(width as i64) } else { 0 };
        let c = codec(width, big, adjust);
        let wire = encode(&frames, c);
        prop_assert_eq!(&reference_length_delimited(&wire, width, big, adjust), &frames);
        let reader = FramedReader::with_ring(Chunked::new(&wire, sizes), c, Ring::new(8192))
            .with_read_size(read_size);
        prop_assert_eq!(collect(reader).unwrap(), frames);
    }

    /// The same for lines, with `\r\n` endings and a last line without a newline.
    #[test]
    fn lines_match_the_reference(
        wire in prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'\r', b'\n']), 0..2000),
        sizes in prop::collection::vec(1..300usize, 1..8),
    ) {
        let reader = FramedReader::with_ring(Chunked::new(&wire, sizes), Lines::new(), Ring::new(1 << 14))
            .with_read_size(256);
        prop_assert_eq!(collect(reader).unwrap(), reference_lines(&wire));
    }

    /// Lines written by the line writer, ending in `\n` or in `\r\n`, read back as
    /// themselves, and exactly the lines that would not (a newline inside, a carriage
    /// return at the end before a lone `\n`) are refused.
    #[test]
    fn written_lines_read_back(
        lines in prop::collection::vec(
            prop::collection::vec(prop::sample::select(vec![b'a', b'\r', b'\n']), 0..40),
            0..40,
        ),
        sizes in prop::collection::vec(1..300usize, 1..8),
        crlf: bool,
    ) {
        let encoding = if crlf { Lines::new().crlf() } else { Lines::new() };
        let mut w = FramedWriter::new(Vec::new(), encoding);
        let mut sent = Vec::new();
        for l in lines {
            let cut = l.contains(&b'\n') || (!crlf && l.last() == Some(&b'\r'));
            prop_assert_eq!(w.write_frame(&l).is_err(), cut);
            if !cut {
                sent.push(l);
            }
        }
        let wire = w.into_inner();
        let reader = FramedReader::with_ring(Chunked::new(&wire, sizes), Lines::new(), Ring::new(1 << 14))
            .with_read_size(256);
        prop_assert_eq!(collect(reader).unwrap(), sent);
    }
}

/// Every read boundary, one byte up to `k` bytes per read, for one stream of each kind.
#[test]
fn every_read_size_up_to_k() {
    let frames: Vec<Vec<u8>> = (0..60u8)
        .map(|i| vec![i; (i as usize * 37) % 500])
        .collect();
    let c = LengthDelimited::new();
    let wire = encode(&frames, c);
    for k in 1..=64 {
        let reader = FramedReader::with_ring(Chunked::new(&wire, vec![k]), c, Ring::new(1 << 14))
            .with_read_size(128);
        assert_eq!(collect(reader).unwrap(), frames, "{k} bytes per read");
    }
}

fn frame_error(e: &io::Error) -> FrameError {
    *e.get_ref()
        .and_then(|e| e.downcast_ref::<FrameError>())
        .unwrap_or_else(|| panic!("not a FrameError: {e:?}"))
}

/// After an error the reader yields nothing more and holds no ring memory.
fn assert_ended<R: Read, D: ringmem::io::Decoder>(mut r: FramedReader<R, D>) {
    assert!(r.next_frame().unwrap().is_none());
    assert_eq!(
        r.ring().unwrap().stats().live_buffers,
        0,
        "the reader kept a region"
    );
}

/// A frame over the maximum is an error, and the reader skips it and goes on: its
/// length is known.
#[test]
fn a_frame_over_the_maximum_is_invalid_data_then_skipped() {
    let c = LengthDelimited::new().max_frame_length(100);
    let mut wire = encode(&[vec![1; 10]], LengthDelimited::new());
    wire.extend(encode(&[vec![2; 101], vec![3; 7]], LengthDelimited::new()));
    let mut r = FramedReader::with_ring(&wire[..], c, Ring::new(1 << 20));
    let first = r.next_frame().unwrap().unwrap();
    let e = r.next_frame().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert_eq!(frame_error(&e), FrameError::TooLong { len: 101, max: 100 });
    assert_eq!(&first[..], &[1; 10]); // frames already yielded stay valid
    drop(first);
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], &[3; 7]);
    assert_ended(r);
}

/// Skipping a long frame that arrives over many reads and regions, at every read size,
/// with good frames around it; a stream that ends inside the skipped frame ends cleanly.
#[test]
fn a_long_frame_is_skipped_across_reads() {
    let c = LengthDelimited::new().max_frame_length(1000);
    let big = LengthDelimited::new();
    let frames = [
        vec![1; 5],
        vec![2; 3000],
        vec![3; 900],
        vec![4; 1001],
        vec![5; 0],
    ];
    let wire = encode(&frames, big);
    for k in [1, 7, 64, 500, 4096] {
        let r = FramedReader::with_ring(Chunked::new(&wire, vec![k]), c, Ring::new(1 << 14))
            .with_read_size(256);
        let got: Vec<_> = r
            .map(|f| f.map(|f| f.to_vec()).map_err(|e| e.kind()))
            .collect();
        let too_long = Err(ErrorKind::InvalidData);
        let want = vec![
            Ok(vec![1; 5]),
            too_long.clone(),
            Ok(vec![3; 900]),
            too_long,
            Ok(vec![]),
        ];
        assert_eq!(got, want, "{k} bytes per read");
    }
    let cut = &wire[..wire.len() - 4 - 500];
    let r = FramedReader::with_ring(Chunked::new(cut, vec![100]), c, Ring::new(1 << 14));
    let got: Vec<_> = r
        .map(|f| f.map(|f| f.len()).map_err(|e| e.kind()))
        .collect();
    assert_eq!(
        got,
        vec![
            Ok(5),
            Err(ErrorKind::InvalidData),
            Ok(900),
            Err(ErrorKind::InvalidData)
        ]
    );
}

/// A line over the maximum is an error, and the reader goes on after its newline,
/// whether the newline was in the same read or comes reads later.
#[test]
fn a_line_over_the_maximum_is_invalid_data_then_skipped() {
    let wire = [&b"ok\n"[..], &[b'x'; 50], b"\r\nnext\n", &[b'y'; 30]].concat();
    for k in [1, 7, 200] {
        let mut r = FramedReader::with_ring(
            Chunked::new(&wire, vec![k]),
            Lines::with_max_length(20),
            Ring::new(1 << 20),
        );
        assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"ok");
        let e = r.next_frame().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert!(matches!(
            frame_error(&e),
            FrameError::TooLong { max: 20, .. }
        ));
        assert_eq!(
            &r.next_frame().unwrap().unwrap()[..],
            b"next",
            "{k} bytes per read"
        );
        // The last line, without a newline, is too long too: an error, then the end.
        assert_eq!(r.next_frame().unwrap_err().kind(), ErrorKind::InvalidData);
        assert_ended(r);
    }
}

/// An underlying reader that fails every time: the iterator yields the error once and
/// ends (a `for` loop would otherwise spin for ever); `next_frame` still retries.
#[test]
fn the_iterator_ends_after_a_read_error() {
    struct Broken(usize);
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            self.0 += 1;
            Err(ErrorKind::ConnectionReset.into())
        }
    }
    let mut r = FramedReader::with_ring(Broken(0), LengthDelimited::new(), Ring::new(1 << 20));
    let got: Vec<_> = r
        .by_ref()
        .take(5)
        .map(|f| f.map(|_| ()).map_err(|e| e.kind()))
        .collect();
    assert_eq!(got, vec![Err(ErrorKind::ConnectionReset)]);
    assert!(r.next().is_none());
    assert_eq!(r.get_ref().0, 1);
    assert_eq!(
        r.next_frame().unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    assert_eq!(r.get_ref().0, 2);
}

#[test]
fn a_length_field_that_overflows_is_invalid_data() {
    // u64::MAX does not fit in memory.
    let wire = [0xff; 8];
    let c = LengthDelimited::new()
        .field_width(8)
        .max_frame_length(usize::MAX);
    let e = FramedReader::with_ring(&wire[..], c, Ring::new(1 << 20))
        .next_frame()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert_eq!(
        frame_error(&e),
        FrameError::LengthOverflow { field: u64::MAX }
    );
    // An adjustment that makes the length negative.
    let c = LengthDelimited::new().field_width(1).adjustment(-4);
    let r = FramedReader::with_ring(&[2u8, 0, 0][..], c, Ring::new(1 << 20));
    let mut r = r;
    let e = r.next_frame().unwrap_err();
    assert_eq!(frame_error(&e), FrameError::LengthOverflow { field: 2 });
    assert_ended(r);
}

#[test]
fn a_peer_that_closes_mid_frame_is_unexpected_eof() {
    let wire = encode(&[vec![5; 30], vec![6; 300]], LengthDelimited::new());
    for cut in [wire.len() - 1, 34 + 2, 34 + 4 + 100] {
        let mut r = FramedReader::with_ring(
            Chunked::new(&wire[..cut], vec![13]),
            LengthDelimited::new(),
            Ring::new(1 << 20),
        );
        assert_eq!(r.next_frame().unwrap().unwrap().len(), 30);
        let e = r.next_frame().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "cut at {cut}");
        assert_eq!(
            frame_error(&e),
            FrameError::Truncated { buffered: cut - 34 }
        );
        assert_ended(r);
    }
}

/// A frame no region of the ring can hold is an error, and the reader skips it as it
/// skips one over the maximum: the frames after it arrive, in reads of any size.
#[test]
fn a_frame_larger_than_the_ring_is_invalid_data_then_skipped() {
    let c = LengthDelimited::new().max_frame_length(1 << 20);
    let wire = encode(&[vec![1; 100], vec![2; 100_000], vec![3; 50]], c);
    for reads in [vec![1 << 16], vec![7, 4096], vec![70_000]] {
        let mut r =
            FramedReader::with_ring(Chunked::new(&wire, reads.clone()), c, Ring::new(1 << 16));
        assert_eq!(r.next_frame().unwrap().unwrap().len(), 100);
        let e = r.next_frame().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert!(
            matches!(
                frame_error(&e),
                FrameError::LargerThanRing {
                    needed: 100_004,
                    ..
                }
            ),
            "{e:?}, reads {reads:?}"
        );
        assert_eq!(&r.next_frame().unwrap().unwrap()[..], &[3; 50]);
        assert_ended(r);
    }
    // Cut inside it, the stream ends cleanly: the error was the report.
    let mut r = FramedReader::with_ring(&wire[..90_000], c, Ring::new(1 << 16));
    assert_eq!(r.next_frame().unwrap().unwrap().len(), 100);
    assert_eq!(r.next_frame().unwrap_err().kind(), ErrorKind::InvalidData);
    assert_ended(r);
}

/// A line longer than a region: the decoder asks for one byte more than it holds, and
/// the reader doubles the region it carries the line into rather than growing it by
/// that byte, which would read one byte (and copy the whole line) at a time.
#[test]
fn a_long_line_takes_reads_in_proportion_to_its_length() {
    let mut wire = vec![b'x'; 256 << 10];
    wire.extend(b"\nnext\n");
    let lines = Lines::with_max_length(1 << 20);
    let mut r = FramedReader::with_ring(Chunked::new(&wire, vec![4096]), lines, Ring::new(4 << 20));
    assert_eq!(r.next_frame().unwrap().unwrap().len(), 256 << 10);
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"next");
    assert!(r.next_frame().unwrap().is_none());
    let reads = r.get_ref().i;
    assert!(reads <= 2 * wire.len() / 4096 + 16, "{reads} reads");
}

/// A line larger than the ring (under the maximum) is skipped up to its newline.
#[test]
fn a_line_larger_than_the_ring_is_skipped() {
    let mut wire = b"short\n".to_vec();
    wire.extend(vec![b'x'; 40_000]);
    wire.extend(b"\nafter\n");
    let mut r = FramedReader::with_ring(&wire[..], Lines::new(), Ring::new(1 << 15));
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"short");
    let e = r.next_frame().unwrap_err();
    assert!(
        matches!(frame_error(&e), FrameError::LargerThanRing { .. }),
        "{e:?}"
    );
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"after");
    assert_ended(r);
}

#[test]
fn a_clean_end_and_an_empty_stream() {
    assert!(
        FramedReader::with_ring(&b""[..], LengthDelimited::new(), Ring::new(1 << 20))
            .next_frame()
            .unwrap()
            .is_none()
    );
    let wire = encode(&[vec![], vec![1]], LengthDelimited::new());
    let got = collect(FramedReader::with_ring(
        &wire[..],
        LengthDelimited::new(),
        Ring::new(1 << 20),
    ))
    .unwrap();
    assert_eq!(got, vec![vec![], vec![1]]);
}

/// Frames dropped before the next is taken are slices of the region they were read
/// into, back to back: nothing is copied.
#[test]
fn frames_dropped_in_place_are_not_copied() {
    let frames: Vec<Vec<u8>> = (0..3000u32).map(|i| vec![i as u8; 100]).collect();
    let wire = encode(&frames, LengthDelimited::new());
    let mut r = FramedReader::with_ring(&wire[..], LengthDelimited::new(), Ring::new(1 << 20));
    let (mut prev, mut adjacent, mut n) = (0, 0, 0);
    while let Some(f) = r.next_frame().unwrap() {
        assert_eq!(&f[..], &frames[n][..]);
        let at = f.as_ptr() as usize;
        adjacent += usize::from(at == prev + 100 + 4);
        (prev, n) = (at, n + 1);
    }
    assert_eq!(n, frames.len());
    // All but the first of each read's frames (reads of 64 KiB, 630 frames).
    assert!(adjacent > n * 9 / 10, "{adjacent} of {n} frames in place");
}

/// Frames kept past the next are copied into regions of their own once the reader
/// finds the region it read them into still held: a kept frame then holds its own
/// bytes and a header, not the region and the frames read with it. Before that, the
/// reader's first region is a probe of 4 KiB. Long frames (a quarter of their region
/// or more) are never copied.
#[test]
fn frames_kept_past_their_read_hold_their_own_bytes() {
    let frames: Vec<Vec<u8>> = (0..3000u32).map(|i| vec![i as u8; 100]).collect();
    let wire = encode(&frames, LengthDelimited::new());
    let mut r = FramedReader::with_ring(&wire[..], LengthDelimited::new(), Ring::new(1 << 20));
    let mut got: Vec<FixedBuf> = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        got.push(f);
    }
    for (f, want) in got.iter().zip(&frames) {
        assert_eq!(&f[..], &want[..]);
    }
    let stats = r.ring().unwrap().stats();
    // A region of 8 + 104 bytes for each frame but those of the probes (some 40 frames
    // in one region each): the first region, and one after the first 4 regions of
    // copies (then 8, 16, ...: this stream has 5 regions' worth).
    let probe = 8 + (4 << 10);
    assert!(
        stats.bytes_in_use <= 2 * probe + got.len() * (8 + 104),
        "{stats:?}"
    );
    assert!(
        stats.live_buffers >= got.len() - 2 * 4096 / 104,
        "{stats:?}"
    );
    drop(got);
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);

    let frames: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 16 << 10]).collect();
    let wire = encode(&frames, LengthDelimited::new());
    let mut r = FramedReader::with_ring(&wire[..], LengthDelimited::new(), Ring::new(1 << 20));
    let got: Vec<FixedBuf> = (0..12).map(|_| r.next_frame().unwrap().unwrap()).collect();
    // Three to a read of 64 KiB, in the regions they were read into (the first two
    // apart: the probe's region of 4 KiB, and the one the first frame is carried into).
    let stats = r.ring().unwrap().stats();
    assert!(
        stats.live_buffers <= 8,
        "{stats:?} for {} frames",
        got.len()
    );
}

/// A reader that records where each read put the stream: (address, stream offset,
/// bytes), serving as much as asked up to `max` per read (as a socket with data queued).
struct Recorded<'a> {
    data: &'a [u8],
    pos: usize,
    max: usize,
    reads: Vec<(usize, usize, usize)>,
}

impl<'a> Recorded<'a> {
    /// A source of `data` serving at most `max` bytes a read.
    fn new(data: &'a [u8], max: usize) -> Self {
        Recorded {
            data,
            pos: 0,
            max,
            reads: Vec::new(),
        }
    }
}

impl Read for Recorded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.max).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.reads.push((buf.as_ptr() as usize, self.pos, n));
        self.pos += n;
        Ok(n)
    }
}

/// Frames of one length that keep straddling the end of a read would each be copied
/// into the next region in part; the reader sizes its reads to end on their boundaries
/// instead: once the length is known, every read ends where a frame does.
#[test]
fn reads_end_on_the_boundaries_of_frames_of_one_length() {
    for (size, count) in [(16 << 10, 40), (1000, 400), (100, 3000)] {
        // A few regions' worth under Miri, which zeroes each region a byte at a time.
        let count = if cfg!(miri) { count / 4 } else { count };
        let frames: Vec<Vec<u8>> = (0..count).map(|i| vec![i as u8; size]).collect();
        let wire = encode(&frames, LengthDelimited::new());
        let src = Recorded::new(&wire, 64 << 10);
        let mut r = FramedReader::with_ring(src, LengthDelimited::new(), Ring::new(1 << 20));
        let mut got = 0;
        while let Some(f) = r.next_frame().unwrap() {
            assert_eq!(&f[..], &frames[got][..]);
            got += 1;
        }
        assert_eq!(got, count);
        // The first read (a probe of 4 KiB, see `FramedReader`), before the reader has
        // seen two frames, may stop inside one, and the reads that carry the part on
        // until the stride is known (two more).
        let inside = (r.get_ref().reads.iter())
            .filter(|&&(_, from, n)| n > 0 && (from + n) % (size + 4) != 0)
            .count();
        assert!(
            inside <= 3,
            "{inside} reads ended inside a frame of {size} bytes: {:?}",
            r.get_ref().reads
        );
    }
}

/// A reader whose ring is full of frames the consumer holds waits for their release
/// (on another thread) instead of failing.
#[test]
fn a_full_ring_waits_for_room() {
    let frames: Vec<Vec<u8>> = (0..200u32).map(|i| vec![i as u8; 900]).collect();
    let wire = encode(&frames, LengthDelimited::new());
    let mut r = FramedReader::with_ring(
        Chunked::new(&wire, vec![3000]),
        LengthDelimited::new(),
        Ring::new(1 << 14),
    );
    let (tx, rx) = std::sync::mpsc::channel::<FixedBuf>();
    let consumer = std::thread::spawn(move || {
        let mut got = Vec::new();
        for f in rx {
            // Slower than the reader: the ring fills and the reader must wait.
            std::thread::sleep(Duration::from_micros(200));
            got.push(f.to_vec());
        }
        got
    });
    for f in &mut r {
        tx.send(f.unwrap()).unwrap();
    }
    drop(tx);
    assert_eq!(consumer.join().unwrap(), frames);
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
}

/// Once warm, reading and dropping frames allocates nothing on the heap.
#[test]
fn no_heap_allocation_per_frame() {
    let frames: Vec<Vec<u8>> = (0..5000u32)
        .map(|i| vec![i as u8; 20 + (i as usize % 300)])
        .collect();
    let c = LengthDelimited::new();
    let wire = encode(&frames, c);
    let mut r = FramedReader::with_ring(
        Chunked::new(&wire, vec![4000, 1, 777]),
        c,
        Ring::new(1 << 16),
    );
    for _ in 0..100 {
        r.next_frame().unwrap().unwrap();
    }
    faulty::arm();
    let before = faulty::served();
    let mut n = 0;
    while let Some(f) = r.next_frame().unwrap() {
        n += f.len();
    }
    let allocations = faulty::served() - before;
    faulty::disarm();
    assert!(n > 0);
    assert_eq!(allocations, 0, "heap allocations while reading 4900 frames");
}

/// A writer that takes 1 to 5 bytes per call (of the first slice with bytes, as
/// `write_vectored` does by default) and is `Interrupted` every third call.
struct Trickle(Vec<u8>, usize);

impl io::Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.1 += 1;
        if self.1 % 3 == 0 {
            return Err(ErrorKind::Interrupted.into());
        }
        let n = buf.len().min(self.1 % 5 + 1);
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Partial writes: a writer that takes 1..k bytes per call still gets whole frames.
#[test]
fn the_writer_carries_on_after_partial_writes() {
    let frames: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; i as usize * 3]).collect();
    let c = LengthDelimited::new().field_width(2).little_endian();
    let mut w = FramedWriter::new(Trickle(Vec::new(), 0), c);
    for f in &frames {
        w.write_frame(f).unwrap();
    }
    let wire = w.into_inner().0;
    assert_eq!(wire, encode(&frames, c));
    assert_eq!(reference_length_delimited(&wire, 2, false, 0), frames);
}

/// Lines go out with a newline after each, whole through partial writes, and read
/// back as the same lines.
#[test]
fn the_line_writer_carries_on_after_partial_writes() {
    let lines: Vec<Vec<u8>> = (0..20u8)
        .map(|i| (0..i as usize * 3).map(|j| b'a' + (j % 26) as u8).collect())
        .collect();
    let mut w = FramedWriter::new(Trickle(Vec::new(), 0), Lines::new());
    for l in &lines {
        w.write_frame(l).unwrap();
    }
    let wire = w.into_inner().0;
    assert_eq!(
        wire,
        lines
            .iter()
            .flat_map(|l| l.iter().chain(b"\n"))
            .copied()
            .collect::<Vec<u8>>()
    );
    let got: Vec<FixedBuf> = FramedReader::with_ring(&wire[..], Lines::new(), Ring::new(1 << 20))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.iter().map(|f| f.to_vec()).collect::<Vec<_>>(), lines);
}

/// A line the reader would cut or strip (a newline inside, a carriage return at the
/// end) or one over the maximum is refused, and nothing is written.
#[test]
fn the_line_writer_refuses_what_would_not_read_back() {
    let mut w = FramedWriter::new(Vec::new(), Lines::with_max_length(8));
    for (line, why) in [
        (&b"ab\ncd"[..], FrameError::DelimiterInFrame { at: 2 }),
        (b"\n", FrameError::DelimiterInFrame { at: 0 }),
        (b"abc\r", FrameError::DelimiterInFrame { at: 3 }),
        (b"123456789", FrameError::TooLong { len: 9, max: 8 }),
    ] {
        let e = w.write_frame(line).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{line:?}");
        assert_eq!(
            e.get_ref().unwrap().downcast_ref::<FrameError>(),
            Some(&why)
        );
    }
    assert!(w.get_ref().is_empty());
    w.write_frame(b"a\rb").unwrap(); // a carriage return inside reads back as is
    assert_eq!(&w.get_ref()[..], b"a\rb\n");
}

/// With `\r\n` line ends a final carriage return reads back (the reader strips only
/// the one before the newline); a newline inside is still refused.
#[test]
fn crlf_lines_keep_a_final_carriage_return() {
    let mut w = FramedWriter::new(Vec::new(), Lines::with_max_length(8).crlf());
    let e = w.write_frame(b"ab\ncd").unwrap_err();
    assert_eq!(
        e.get_ref().unwrap().downcast_ref::<FrameError>(),
        Some(&FrameError::DelimiterInFrame { at: 2 })
    );
    for line in [&b"PING"[..], b"", b"abc\r", b"\r"] {
        w.write_frame(line).unwrap();
    }
    let wire = w.into_inner();
    assert_eq!(&wire[..], b"PING\r\n\r\nabc\r\r\n\r\r\n");
    let got: Vec<FixedBuf> = FramedReader::with_ring(&wire[..], Lines::new(), Ring::new(1 << 20))
        .collect::<Result<_, _>>()
        .unwrap();
    let got: Vec<&[u8]> = got.iter().map(|f| &f[..]).collect();
    assert_eq!(got, [&b"PING"[..], b"", b"abc\r", b"\r"]);
}

#[test]
fn the_writer_refuses_what_the_header_cannot_say() {
    let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new().max_frame_length(3));
    let e = w.write_frame(b"abcd").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(w.get_ref().is_empty());
}

/// A reader and a writer over one TCP connection (`into_split`): a thread sends back
/// every frame it reads while the client is still writing, and every byte comes back.
#[test]
#[cfg_attr(miri, ignore = "Miri's isolation has no sockets")]
fn a_split_reader_and_writer_echo_over_tcp() {
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};
    let frames: Vec<Vec<u8>> = (0..2000usize)
        .map(|i| vec![i as u8; i * 37 % 3000])
        .collect();
    let c = LengthDelimited::new();
    let wire = encode(&frames, c);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let server = listener.accept().unwrap().0;
    let (mut r, mut w) = FramedReader::with_ring(server, c, Ring::new(1 << 20))
        .into_split(c)
        .unwrap();
    let echo = std::thread::spawn(move || {
        while let Some(f) = r.next_frame().unwrap() {
            w.write_frame(&f).unwrap();
        }
        r.ring().unwrap().stats().live_buffers
    });
    let mut from = client.try_clone().unwrap();
    let back = std::thread::spawn(move || {
        let mut got = Vec::new();
        from.read_to_end(&mut got).unwrap();
        got
    });
    client.write_all(&wire).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(echo.join().unwrap(), 0, "every frame was released");
    assert!(back.join().unwrap() == wire, "the echo differs");
}

/// The fuzz target's differential check (`fuzz/framed.rs`) on random inputs.
#[path = "../fuzz/framed.rs"]
mod fuzz_framed;

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn the_fuzz_driver_agrees(
        config in any::<u8>(),
        extra in 0..4u8,
        sizes in prop::collection::vec(1..=255u8, 0..6),
        stream in prop::collection::vec(
            prop::sample::select(vec![0u8, 1, 2, 3, 10, 13, 0x0f, 0x10, 0x80, 0xff, b'a']),
            0..3000,
        ),
    ) {
        let data = [&[config, extra][..], &sizes, &[0], &stream].concat();
        fuzz_framed::run(&data);
    }
}

#[test]
fn the_fuzz_driver_on_fixed_inputs() {
    fuzz_framed::run(&[]);
    fuzz_framed::run(&[0b1000_0011, 0]);
    fuzz_framed::run(&[0b0000_0011, 0, 1, 0, 0, 0, 0, 2, b'h', b'i']);
    fuzz_framed::run(&[0b0110_0000, 0, 7, 3, 0, b'a', b'\r', b'\n', b'b']);
    fuzz_framed::run(&[0b0000_0111, 0, 5, 0, 0xff, 0xff, 0xff, 0xff]);
    // A 4 KiB ring: a 5,000-byte frame (2-byte big-endian header) between two small
    // ones, and a 5,000-byte line between two short ones.
    let mut wire = vec![0, 1, b'a', 0x13, 0x88];
    wire.extend([b'x'; 5000]);
    wire.extend([0, 1, b'b']);
    fuzz_framed::run(&[[0b0000_1011, 3].as_slice(), &[200, 0], &wire].concat());
    let mut lines = b"a\n".to_vec();
    lines.extend([b'x'; 5000]);
    lines.extend(b"\nb\n");
    fuzz_framed::run(&[[0b0000_0010, 2].as_slice(), &[0], &lines].concat());
}

/// A frame over half the ring (but within a block) while the reader still holds the
/// region its first bytes arrived in: the reader must not wait for itself.
#[test]
fn a_large_frame_does_not_wait_for_its_own_region() {
    let c = LengthDelimited::new();
    let frames = vec![vec![1u8; 10], vec![2u8; 50_000], vec![3u8; 40_000]];
    let wire = encode(&frames, c);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = FramedReader::with_ring(Chunked::new(&wire, vec![5000]), c, Ring::new(1 << 16))
            .with_read_size(16 << 10);
        let _ = tx.send(collect(r).map_err(|e| e.kind()));
    });
    // Under Miri a stuck reader is a deadlock, which Miri reports (its clock is slow).
    let got = if cfg!(miri) {
        rx.recv().expect("the reader thread panicked")
    } else {
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the reader is stuck waiting for room")
    };
    assert_eq!(got.unwrap(), frames);
}

/// A stream of `line` bytes `x`, a newline, then `x`s without end, that fills every
/// read to the brim: a peer with unlimited data. Counts the reads.
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

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads += 1;
        buf.fill(b'x');
        if let Some(nl) = self.line.checked_sub(self.sent).filter(|&i| i < buf.len()) {
            buf[nl] = b'\n';
        }
        self.sent += buf.len();
        Ok(buf.len())
    }
}

/// Sizes of the long-line tests: as the audit found them natively, a sixteenth under
/// Miri (whose byte-by-byte newline search would take minutes over a MiB).
const SCALE: usize = if cfg!(miri) { 16 } else { 1 };

/// A line of unknown length past half the ring: each region it is carried into at least
/// doubles, so a line larger than the ring is an error after a few reads rather than
/// after one read of a few bytes (and a copy of the whole line) per word of the ring.
#[test]
fn a_line_larger_than_the_ring_errs_within_a_few_reads() {
    let lines = Lines::with_max_length(usize::MAX);
    let ring = Ring::new((256 << 10) / SCALE);
    let mut r = FramedReader::with_ring(Endless::new((1 << 20) / SCALE), lines, ring);
    let e = r.next_frame().unwrap_err();
    assert!(
        matches!(frame_error(&e), FrameError::LargerThanRing { .. }),
        "{e:?}"
    );
    let reads = r.get_ref().reads;
    assert!(reads <= 20, "{reads} reads");
}

/// A legal line (under `Lines::new`'s maximum) of most of the ring arrives in a few
/// reads, each offered all the room the line's region has.
#[test]
fn a_long_line_in_a_small_ring_arrives_within_a_few_reads() {
    let line = (60 << 10) / SCALE;
    let ring = Ring::new((100 << 10) / SCALE);
    let mut r = FramedReader::with_ring(Endless::new(line), Lines::new(), ring);
    assert_eq!(r.next_frame().unwrap().unwrap().len(), line);
    let reads = r.get_ref().reads;
    assert!(reads <= 5, "{reads} reads");
}

/// A `Read` with a bug: it says it read one byte more than the buffer it was handed
/// holds (after a first, honest read of `honest` bytes).
struct Overrun<'a> {
    honest: &'a [u8],
}

impl Read for Overrun<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.honest.is_empty() {
            buf.fill(b'x');
            return Ok(buf.len() + 1);
        }
        let n = self.honest.len().min(buf.len());
        buf[..n].copy_from_slice(&self.honest[..n]);
        self.honest = &self.honest[n..];
        Ok(n)
    }
}

/// A reader's count past the buffer it was handed is its bug, reported as such: its
/// bytes are not taken (not even as many as fit), and the stream ends.
#[test]
fn a_read_past_its_buffer_is_an_error_and_the_end() {
    let mut r = FramedReader::with_ring(
        Overrun {
            honest: b"ok\npart",
        },
        Lines::new(),
        Ring::new(1 << 14),
    );
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"ok");
    let e = r.next_frame().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other);
    assert!(
        matches!(frame_error(&e), FrameError::ReadOverrun { read, room } if read == room + 1),
        "{e:?}"
    );
    assert!(r.next().is_none());
    assert!(r.next_frame().unwrap().is_none());
    assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
}

/// The default reader (the process's pool, split into shards) takes a frame as long as
/// the default decoder allows, 8 MiB: a shard holds it whatever the parallelism.
#[test]
#[cfg_attr(miri, ignore = "8 MiB: too slow under Miri")]
fn the_default_reader_takes_the_largest_default_frame() {
    let max = LengthDelimited::new().max_len();
    assert_eq!(max, 8 << 20);
    let frames = vec![vec![7u8; max], vec![1, 2, 3]];
    let wire = encode(&frames, LengthDelimited::new());
    let got = collect(FramedReader::new(&wire[..], LengthDelimited::new())).unwrap();
    assert_eq!(got, frames);
}

/// A run of like frames read where frames kept earlier left gaps shorter than one: once
/// the run is known, the reader takes no region that its next frame would outgrow (to
/// be read into, then copied into one that holds it), so its reads end on the frames'
/// boundaries as they do in free room. The frames not kept are dropped at once (their
/// room the next one's), or once the next is read (gaps between those kept).
#[test]
fn a_run_of_like_frames_skips_gaps_shorter_than_one() {
    for drop_later in [false, true] {
        let inside = like_frames_read_across_regions(drop_later);
        // But a probe (a read of 4 KiB: has the consumer let its frames go?). Taking
        // the gaps, one read in four ended inside a frame (10); settling for a region
        // shorter than a frame where a walk round the ring finds one, 8.
        assert!(inside.len() <= 1, "dropped later: {drop_later}, {inside:?}");
    }
}

/// The reads of [`a_run_of_like_frames_skips_gaps_shorter_than_one`] that ended inside
/// a frame of the run.
fn like_frames_read_across_regions(drop_later: bool) -> Vec<(usize, usize, usize)> {
    let (short, long) = (6000, 16 << 10);
    let mut frames: Vec<Vec<u8>> = (0..40u32).map(|i| vec![i as u8; short]).collect();
    frames.extend((0..60u32).map(|i| vec![i as u8; long]));
    let wire = encode(&frames, LengthDelimited::new());
    let src = Recorded::new(&wire, 64 << 10);
    let mut r = FramedReader::with_ring(src, LengthDelimited::new(), Ring::new(256 << 10));
    let (mut kept, mut later) = (Vec::new(), None);
    let mut n = 0;
    while let Some(f) = r.next_frame().unwrap() {
        assert_eq!(&f[..], &frames[n][..]);
        if n < 40 && n % 2 == 0 {
            kept.push(f);
        } else if drop_later {
            later = Some(f);
        }
        n += 1;
    }
    drop((kept, later));
    assert_eq!(n, frames.len());
    let start = 40 * (short + 4);
    (r.get_ref().reads.iter().copied())
        .filter(|&(_, from, len)| from >= start + 20 * (long + 4) && len > 0)
        .filter(|&(_, from, len)| (from + len - start) % (long + 4) != 0)
        .collect()
}
