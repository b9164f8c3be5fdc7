//! Framing of one's own (`ringmem::io::Encoder`, `Framing`): a RESP-like encoder whose
//! heads are longer than a length field, round-tripped through a decoder of its own;
//! the limits of a `Framing`; the built-in encoders through the public trait.

// `ringmem::io` is built on the waiting calls, which loom builds leave out.
#![cfg(not(loom))]

use std::io::{self, ErrorKind, IoSlice, Write};

use proptest::prelude::*;
use ringmem::io::{
    Decode, Decoder, Encoder, Frame, FramedReader, FramedWriter, Framing, LengthDelimited, Lines,
};
use ringmem::{CapacityError, Ring};

/// RESP bulk strings: `$<len>\r\n<payload>\r\n`, at most `max` bytes of payload.
struct Bulk {
    max: usize,
}

impl Encoder for Bulk {
    fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
        if payload.len() > self.max {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "bulk string too long",
            ));
        }
        write!(framing, "${}\r\n", payload.len())?;
        framing.set_tail(b"\r\n")
    }
}

impl Decoder for Bulk {
    fn decode(&mut self, buf: &[u8]) -> io::Result<Decode> {
        let bad = |why: &str| io::Error::new(ErrorKind::InvalidData, why.to_string());
        let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
            return Ok(Decode::Need(buf.len() + 1));
        };
        let digits = buf[..end].strip_prefix(b"$").ok_or_else(|| bad("no `$`"))?;
        let len: usize = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| bad("no length"))?;
        let start = end + 2;
        let consumed = start + len + 2;
        if buf.len() < consumed {
            return Ok(Decode::Need(consumed));
        }
        if &buf[start + len..consumed] != b"\r\n" {
            return Err(bad("no `\\r\\n` after the payload"));
        }
        Ok(Decode::Frame(Frame {
            start,
            end: start + len,
            consumed,
        }))
    }
}

/// Takes at most `cap` bytes per call, across the slices it is given.
struct Trickle {
    out: Vec<u8>,
    cap: usize,
    calls: usize,
}

impl Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.calls += 1;
        let mut left = self.cap;
        for b in bufs {
            let k = b.len().min(left);
            self.out.extend_from_slice(&b[..k]);
            left -= k;
        }
        Ok(self.cap - left)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Bulk strings of every length digit count (heads of 4 to 10 bytes, past the 8 a
/// length field had) cross byte for byte, whatever the writer takes per call, and read
/// back whole through the matching decoder.
#[test]
fn bulk_strings_with_long_heads_round_trip() {
    let lens = [0, 1, 9, 10, 99, 100, 4095, 65_536, 1_048_576];
    let sent: Vec<Vec<u8>> = lens
        .iter()
        .map(|&n| (0..n).map(|i| (i * 7 % 251) as u8).collect())
        .collect();
    let mut expected = Vec::new();
    for p in &sent {
        expected.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        expected.extend_from_slice(p);
        expected.extend_from_slice(b"\r\n");
    }
    assert!(expected.starts_with(b"$0\r\n\r\n$1\r\n"));
    for cap in [1, 5, 4096, usize::MAX] {
        let out = Trickle {
            out: Vec::new(),
            cap,
            calls: 0,
        };
        let mut w = FramedWriter::new(out, Bulk { max: 1 << 20 });
        for p in &sent {
            w.write_frame(p).unwrap();
        }
        let t = w.into_inner();
        assert!(t.out == expected, "cap {cap}: the wire differs");
        if cap == usize::MAX {
            assert_eq!(t.calls, sent.len(), "one vectored write a frame");
        }
    }
    let ring = Ring::new(4 << 20);
    let got: Vec<Vec<u8>> = FramedReader::with_ring(&expected[..], Bulk { max: 1 << 20 }, ring)
        .map(|f| f.map(|f| f.to_vec()))
        .collect::<io::Result<_>>()
        .unwrap();
    assert!(got == sent, "the frames read back differ");
}

/// A payload the encoder refuses is an error with nothing written, and the writer goes
/// on with the next.
#[test]
fn a_refused_payload_writes_nothing() {
    let mut w = FramedWriter::new(Vec::new(), Bulk { max: 3 });
    let err = w.write_frame(b"four").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(w.get_ref().is_empty());
    w.write_frame(b"abc").unwrap();
    assert_eq!(w.get_ref(), b"$3\r\nabc\r\n");
}

/// An encoder keeps state across frames (`&mut self`): a sequence number in each head.
#[test]
fn an_encoder_keeps_state_across_frames() {
    struct Numbered(u8);
    impl Encoder for Numbered {
        fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
            self.0 += 1;
            let len = u8::try_from(payload.len()).map_err(|_| ErrorKind::InvalidInput)?;
            framing.extend_head(&[self.0, len])
        }
    }
    let mut w = FramedWriter::new(Vec::new(), Numbered(0));
    for p in [&b"ab"[..], b"", b"c"] {
        w.write_frame(p).unwrap();
    }
    assert_eq!(w.get_ref(), b"\x01\x02ab\x02\x00\x03\x01c");
}

/// An encoder that leaves the framing empty sends payloads bare, and an empty payload
/// then sends nothing.
#[test]
fn an_empty_framing_sends_the_payload_bare() {
    struct Raw;
    impl Encoder for Raw {
        fn encode(&mut self, _: &[u8], _: &mut Framing) -> io::Result<()> {
            Ok(())
        }
    }
    let mut w = FramedWriter::new(Vec::new(), Raw);
    for p in [&b"+OK\r\n"[..], b"", b"-ERR\r\n"] {
        w.write_frame(p).unwrap();
    }
    assert_eq!(w.get_ref(), b"+OK\r\n-ERR\r\n");
}

/// What an `AsyncFramedWriter` keeps per queued frame beside the payload: the same as
/// when heads were at most 8 bytes and tails static.
#[test]
fn a_framing_is_32_bytes() {
    assert_eq!(std::mem::size_of::<Framing>(), 32);
    assert_eq!(Framing::CAPACITY, 30);
}

/// Head and tail share the capacity; a write that passes it fails whole, with the
/// bytes asked and left, and leaves the framing as it was.
#[test]
fn a_framing_refuses_what_passes_its_capacity() {
    let capacity = |e: io::Error| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        *e.get_ref()
            .unwrap()
            .downcast_ref::<CapacityError>()
            .unwrap()
    };
    let mut f = Framing::new();
    f.set_tail(b"\r\n").unwrap();
    f.extend_head(&[b'h'; 27]).unwrap();
    let e = capacity(f.extend_head(b"xy").unwrap_err());
    assert_eq!((e.requested, e.available), (2, 1));
    let e = capacity(f.set_tail(b"xyz\r\n").unwrap_err());
    assert_eq!((e.requested, e.available), (5, 3));
    assert_eq!((f.head(), f.tail()), (&[b'h'; 27][..], &b"\r\n"[..]));
    // A formatted write that does not fit leaves the whole of it out.
    let e = capacity(write!(f, "{}", 12).unwrap_err());
    assert_eq!((e.requested, e.available), (2, 1));
    f.extend_head(b"!").unwrap();
    f.set_tail(b"").unwrap();
    assert_eq!(f.len(), 28);
    f.set_tail(b"..").unwrap();
    assert_eq!(f.len(), Framing::CAPACITY);
    assert_eq!(
        format!("{:?}", Framing::default()),
        "Framing { head: [], tail: [] }"
    );
}

proptest! {
    /// The built-in encoders through the public trait: `LengthDelimited`'s head is
    /// `encode_header`'s, `Lines`' tail its line end, and what they refuse, they refuse
    /// with the same errors as before.
    #[test]
    fn the_built_in_encoders_frame_as_before(
        len in 0usize..70_000,
        width in prop::sample::select(vec![1usize, 2, 4, 8]),
        little in any::<bool>(),
        adjustment in -4i64..4,
        crlf in any::<bool>(),
    ) {
        let mut d = LengthDelimited::new().field_width(width).adjustment(adjustment);
        if little {
            d = d.little_endian();
        }
        let payload = vec![b'a'; len];
        let mut f = Framing::new();
        let mut h = [0; 8];
        match (d.encode(&payload, &mut f), d.encode_header(len, &mut h)) {
            (Ok(()), Ok(n)) => {
                prop_assert_eq!(f.head(), &h[..n]);
                prop_assert!(f.tail().is_empty());
            }
            (Err(a), Err(b)) => {
                prop_assert_eq!(a.kind(), b.kind());
                prop_assert_eq!(a.to_string(), b.to_string());
                prop_assert!(f.is_empty());
            }
            (a, b) => prop_assert!(false, "{:?} against {:?}", a, b),
        }
        let mut lines = if crlf { Lines::new().crlf() } else { Lines::new() };
        let mut f = Framing::new();
        let refused = len > lines.max_len();
        prop_assert_eq!(lines.encode(&payload, &mut f).is_err(), refused);
        if !refused {
            prop_assert_eq!((f.head(), f.tail()), (&b""[..], lines.line_end()));
        }
    }
}
