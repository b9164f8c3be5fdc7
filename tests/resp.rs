//! The RESP2 decoder (`ringmem::io::Resp`): every type, every split of the stream,
//! limits, bad input with Redis's words, `Need` sizes, resumption, and round trips.

// `ringmem::io` is built on the waiting calls, which loom builds leave out.
#![cfg(not(loom))]

use std::io::{self, ErrorKind};
use std::time::Instant;

mod common;

use common::{config, Chunked};
use proptest::prelude::*;
use ringmem::io::{Decode, Decoder, Frame, FrameError, FramedReader, ReadPool, Resp};

/// A frame of `start..end`, `consumed` bytes taken.
fn frame(start: usize, end: usize, consumed: usize) -> Decode {
    Decode::Frame(Frame {
        start,
        end,
        consumed,
    })
}

/// A RESP2 value, for the reference encoder.
#[derive(Clone, Debug)]
enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Simple(s) => out.extend([&b"+"[..], s, b"\r\n"].concat()),
        Value::Error(s) => out.extend([&b"-"[..], s, b"\r\n"].concat()),
        Value::Int(n) => out.extend(format!(":{n}\r\n").bytes()),
        Value::Bulk(None) => out.extend(b"$-1\r\n"),
        Value::Bulk(Some(b)) => {
            out.extend(format!("${}\r\n", b.len()).bytes());
            out.extend(b);
            out.extend(b"\r\n");
        }
        Value::Array(None) => out.extend(b"*-1\r\n"),
        Value::Array(Some(items)) => {
            out.extend(format!("*{}\r\n", items.len()).bytes());
            for i in items {
                encode(i, out);
            }
        }
    }
}

fn wire(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode(v, &mut out);
    out
}

/// A request as clients send it: an array of bulk strings.
fn request(args: &[&[u8]]) -> Vec<u8> {
    let items = args.iter().map(|a| Value::Bulk(Some(a.to_vec()))).collect();
    wire(&Value::Array(Some(items)))
}

fn why(e: &io::Error) -> FrameError {
    *e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap()
}

/// Decodes `stream` the way a reader does, shown one more byte at a time from each
/// frame's start: the frames' bytes, checking each `Need` on the way (more than
/// shown, never past the frame's end).
fn byte_by_byte(mut d: Resp, stream: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    'frames: while at < stream.len() {
        let mut shown = 1;
        loop {
            match d.decode(&stream[at..at + shown])? {
                Decode::Frame(f) => {
                    assert!(f.start <= f.end && f.end <= f.consumed && f.consumed <= shown);
                    out.push(stream[at + f.start..at + f.end].to_vec());
                    at += f.consumed;
                    continue 'frames;
                }
                Decode::Need(n) => {
                    assert!(n > shown, "Need({n}) with {shown} shown");
                    if at + n > stream.len() {
                        // Only the end of the stream may be incomplete.
                        assert_eq!(d.decode(&stream[at..])?, Decode::Need(n));
                        return Ok(out);
                    }
                    // Skip to what was asked: the decoder must cope with jumps too.
                    shown = if shown % 2 == 0 { shown + 1 } else { n };
                }
            }
        }
    }
    Ok(out)
}

fn value_strategy() -> impl Strategy<Value = Value> {
    let text = prop::collection::vec(
        any::<u8>().prop_filter("no line end", |b| *b != b'\r' && *b != b'\n'),
        0..20,
    );
    let leaf = prop_oneof![
        text.clone().prop_map(Value::Simple),
        text.prop_map(Value::Error),
        any::<i64>().prop_map(Value::Int),
        prop::option::weighted(0.9, prop::collection::vec(any::<u8>(), 0..300))
            .prop_map(Value::Bulk),
        Just(Value::Array(None)),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop::collection::vec(inner, 0..8).prop_map(|v| Value::Array(Some(v)))
    })
}

#[test]
fn every_type_is_one_frame_of_the_whole_value() {
    let cases: [&[u8]; 9] = [
        b"+OK\r\n",
        b"-ERR no\r\n",
        b":-42\r\n",
        b"$5\r\nhe\r\no\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n$1\r\nx\r\n",
    ];
    for case in cases {
        let mut stream = case.to_vec();
        stream.extend(b"+next\r\n");
        let got = Resp::new().decode(&stream).unwrap();
        let n = case.len();
        assert_eq!(got, frame(0, n, n), "{case:?}");
    }
}

#[test]
fn inline_commands_are_their_line() {
    let mut d = Resp::new();
    let got = d.decode(b"PING\r\n").unwrap();
    assert_eq!(got, frame(0, 4, 6));
    let got = d.decode(b"SET k v\nGET k\n").unwrap();
    assert_eq!(got, frame(0, 7, 8));
    assert_eq!(d.decode(b"\r\n").unwrap(), frame(0, 0, 2));
    assert_eq!(d.decode(b"PIN").unwrap(), Decode::Need(4));
    // In requests, a line not starting with `*` is inline whatever its first byte.
    let got = Resp::requests().decode(b"$3 x\r\n").unwrap();
    assert_eq!(got, frame(0, 4, 6));
}

#[test]
fn every_split_gives_the_same_frames() {
    let mut stream = Vec::new();
    let values = [
        Value::Simple(b"OK".to_vec()),
        Value::Int(i64::MIN),
        Value::Bulk(Some(b"a\r\nb".to_vec())),
        Value::Bulk(None),
        Value::Array(Some(vec![
            Value::Array(Some(vec![Value::Int(1), Value::Bulk(Some(vec![0; 70]))])),
            Value::Error(b"WRONGTYPE x".to_vec()),
            Value::Array(None),
            Value::Array(Some(vec![])),
        ])),
    ];
    let mut want = Vec::new();
    for v in &values {
        let w = wire(v);
        stream.extend(&w);
        want.push(w);
    }
    stream.extend(b"PING x\r\n");
    want.push(b"PING x".to_vec());
    assert_eq!(byte_by_byte(Resp::new(), &stream).unwrap(), want);
    for cut in 0..=stream.len() {
        for size in [1, 2, 3, 7, 64] {
            let r = Chunked::new(&stream, vec![cut.max(1), size]);
            let got: Vec<Vec<u8>> = FramedReader::new(r, Resp::new())
                .map(|f| f.map(|f| f.to_vec()))
                .collect::<io::Result<_>>()
                .unwrap();
            assert_eq!(got, want, "first read {cut}, then {size}");
        }
    }
}

#[test]
fn args_are_ranges_of_the_frame() {
    let frame = request(&[b"SET", b"key", b"", b"a\r\nb"]);
    let args: Vec<&[u8]> = Resp::args(&frame).map(|r| &frame[r]).collect();
    assert_eq!(args, [&b"SET"[..], b"key", b"", b"a\r\nb"]);
    assert_eq!(Resp::args(&frame).len(), 4);
    let line = br#"  SET  "a b" 'c\'d' e"#;
    let words: Vec<&[u8]> = Resp::args(line).map(|r| &line[r]).collect();
    assert_eq!(words, [&b"SET"[..], b"a b", br"c\'d", b"e"]);
    assert_eq!(Resp::args(b"").count(), 0);
    assert_eq!(Resp::args(b"*0\r\n").count(), 0);
    assert_eq!(Resp::args(b"*-1\r\n").count(), 0);
    // Anything but bulk strings in an array ends the arguments.
    assert_eq!(Resp::args(b"*2\r\n:1\r\n$1\r\nx\r\n").count(), 0);
    assert_eq!(Resp::args(b"*2\r\n$1\r\nx\r\n").count(), 1);
}

#[test]
fn bad_input_reads_as_redis_says_it() {
    let cases: [(&[u8], &str); 14] = [
        (b"*x\r\n", "invalid multibulk length"),
        (b"*1048577\r\n", "invalid multibulk length"),
        (b"*99999999999999999999999\r\n", "invalid multibulk length"),
        (b"*1\r\n$x\r\n", "invalid bulk length"),
        (b"*1\r\n$-2\r\n", "invalid bulk length"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
        (b"*1\r\n$1000000000000\r\n", "invalid bulk length"),
        (b"*1\r\n$536870913\r\n", "invalid bulk length"),
        (b"*1\r\n$01\r\n", "invalid bulk length"),
        (b"*1\r\n:1\r\n", "expected '$', got ':'"),
        (b"*2\r\n$1\r\nx\r\nx", "expected '$', got 'x'"),
        (b"*1\r\n$1\r\nxyz", "expected '\\r', got 'y'"),
        (b"SET \"a b\r\n", "unbalanced quotes in request"),
        (b"SET 'a'b\r\n", "unbalanced quotes in request"),
    ];
    for (input, text) in cases {
        let err = Resp::requests().decode(input).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData, "{input:?}");
        assert_eq!(err.to_string(), text, "{input:?}");
        // Fed byte by byte, the same error.
        let err = byte_by_byte(Resp::requests(), input).unwrap_err();
        assert_eq!(err.to_string(), text, "{input:?} byte by byte");
    }
    let err = Resp::new().inline(false).decode(b"PING\r\n").unwrap_err();
    assert!(matches!(
        why(&err),
        FrameError::Malformed {
            reason: "unknown type byte",
            at: 0
        }
    ));
    let err = Resp::requests()
        .inline(false)
        .decode(b"PING\r\n")
        .unwrap_err();
    assert_eq!(err.to_string(), "expected '*', got 'P'");
    assert_eq!(
        Resp::new().decode(b"+a\nb").unwrap_err().to_string(),
        "expected '\\r', got '\\n'"
    );
    assert_eq!(
        Resp::new().decode(b":1x\r\n").unwrap_err().to_string(),
        "invalid integer"
    );
    // The decoder starts afresh after an error.
    let mut d = Resp::requests();
    assert!(d.decode(b"*1\r\n$x\r\n").is_err());
    assert!(matches!(
        d.decode(b"*1\r\n$1\r\nx\r\n"),
        Ok(Decode::Frame(_))
    ));
}

#[test]
fn limits_hold_and_redis_defaults_pass() {
    let mut d = Resp::requests();
    assert_eq!(d.decode(b"*1048576\r\n").unwrap(), Decode::Need(11));
    let mut d = Resp::requests();
    assert_eq!(
        d.decode(b"*1\r\n$536870912\r\n").unwrap(),
        Decode::Need(4 + 12 + 536870912 + 2)
    );
    // Inline: 64 KiB passes, a byte more (with no newline yet) is refused.
    let mut line = vec![b'a'; 64 << 10];
    line.extend(b"\r\n");
    assert!(matches!(Resp::new().decode(&line), Ok(Decode::Frame(_))));
    let long = vec![b'a'; (64 << 10) + 1];
    let err = Resp::new().decode(&long).unwrap_err();
    assert_eq!(err.to_string(), "too big inline request");
    assert!(matches!(
        Resp::new().decode(&long[..64 << 10]),
        Ok(Decode::Need(_))
    ));
    // Depth: 32 by default.
    let nested = |n: usize| [b"*1\r\n".repeat(n), b":1\r\n".to_vec()].concat();
    assert!(matches!(
        Resp::new().decode(&nested(32)),
        Ok(Decode::Frame(_))
    ));
    let err = Resp::new().decode(&nested(33)).unwrap_err();
    assert_eq!(err.to_string(), "nested too deep");
    assert!(Resp::new().max_depth(64).decode(&nested(64)).is_ok());
    // Small limits.
    let mut d = Resp::new()
        .max_bulk_len(2)
        .max_array_len(2)
        .max_inline_len(3);
    assert!(d.decode(b"*2\r\n$2\r\nab\r\n$0\r\n\r\n").is_ok());
    assert!(d.decode(b"*3\r\n").is_err());
    assert!(d.decode(b"$3\r\n").is_err());
    assert!(d.decode(b"+abcd\r\n").is_err());
    assert!(d.decode(b"+abc\r\n").is_ok());
    assert!(d.decode(b"abcd").is_err());
}

#[test]
#[should_panic(expected = "64 deep at most")]
fn depth_over_the_cap_panics() {
    let _ = Resp::new().max_depth(65);
}

#[test]
fn need_is_exact_once_a_bulk_header_is_read() {
    let mut d = Resp::new();
    assert_eq!(d.decode(b"").unwrap(), Decode::Need(1));
    assert_eq!(d.decode(b"$").unwrap(), Decode::Need(2));
    assert_eq!(d.decode(b"$10\r").unwrap(), Decode::Need(5));
    assert_eq!(d.decode(b"$10\r\n").unwrap(), Decode::Need(17));
    assert_eq!(d.decode(b"$10\r\n0123").unwrap(), Decode::Need(17));
    // The last bulk of a request: exact, however long the frame is.
    let mut d = Resp::requests();
    let head = [
        b"*2\r\n".to_vec(),
        request(&[&vec![b'x'; 100 << 10]])[4..].to_vec(),
    ]
    .concat();
    let with_last = [head.clone(), b"$100\r\n".to_vec()].concat();
    assert_eq!(
        d.decode(&with_last).unwrap(),
        Decode::Need(with_last.len() + 102)
    );
    // Elements follow a short bulk in a long frame: one more byte (the reader doubles).
    let mut d = Resp::requests();
    let mid = [b"*3\r\n".to_vec(), head[4..].to_vec(), b"$100\r\n".to_vec()].concat();
    assert_eq!(d.decode(&mid).unwrap(), Decode::Need(mid.len() + 1));
}

/// A bulk string of 10^8 bytes announced to a reader whose pool holds less: an error
/// at once, no allocation of its size and no wait.
#[test]
fn a_bulk_longer_than_the_pool_is_an_error_not_a_hang() {
    let pool = ReadPool::new(1 << 20);
    let wire = b"*2\r\n$3\r\nSET\r\n$100000000\r\nabc";
    let mut r = FramedReader::with_pool(&wire[..], Resp::requests(), &pool);
    let err = r.next_frame().unwrap_err();
    assert!(
        matches!(why(&err), FrameError::LargerThanRing { .. }),
        "{err}"
    );
    assert!(r.next_frame().unwrap().is_none());
    // Over the protocol's maximum: Redis's error.
    let wire = b"*2\r\n$3\r\nSET\r\n$1000000000000\r\n";
    let mut r = FramedReader::with_pool(&wire[..], Resp::requests(), &pool);
    assert_eq!(
        r.next_frame().unwrap_err().to_string(),
        "invalid bulk length"
    );
}

/// A million-element array arriving in small pieces is parsed once, not from its
/// start at each piece: quadratic work would take minutes here.
#[test]
fn a_long_array_arriving_slowly_is_read_in_linear_time() {
    let n = if cfg!(miri) { 100 } else { 1 << 20 };
    let mut stream = format!("*{n}\r\n").into_bytes();
    for _ in 0..n {
        stream.extend(b"$1\r\nx\r\n");
    }
    let start = Instant::now();
    let mut d = Resp::requests();
    let mut shown = 0;
    let frame = loop {
        shown = (shown + 16).min(stream.len());
        match d.decode(&stream[..shown]).unwrap() {
            Decode::Frame(f) => break f,
            Decode::Need(k) => assert!(k > shown),
        }
    };
    assert_eq!(frame.consumed, stream.len());
    assert_eq!(Resp::args(&stream).len(), n);
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
    // Through a reader on a pool, read 1 KiB at a time.
    let pool = ReadPool::new(64 << 20);
    let r = Chunked::new(&stream, vec![1024]);
    let mut r = FramedReader::with_pool(r, Resp::requests(), &pool);
    let f = r.next_frame().unwrap().unwrap();
    assert_eq!(f.len(), stream.len());
}

#[test]
fn a_stream_ending_mid_frame_is_truncated() {
    let mut r = FramedReader::new(&b"+OK\r\n*2\r\n:1\r\n"[..], Resp::new());
    assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"+OK\r\n");
    let err = r.next_frame().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
    let mut d = Resp::new();
    assert!(d.decode_eof(b"*2\r\n").is_err());
    // Afresh after it.
    assert!(matches!(d.decode(b":1\r\n"), Ok(Decode::Frame(_))));
}

proptest! {
    #![proptest_config(config(256))]

    /// Any values, the stream cut at any read sizes: each value one frame, its bytes.
    #[test]
    fn values_round_trip(
        values in prop::collection::vec(value_strategy(), 0..12),
        sizes in prop::collection::vec(1..200usize, 1..8),
    ) {
        let wires: Vec<Vec<u8>> = values.iter().map(wire).collect();
        let stream = wires.concat();
        let r = Chunked::new(&stream, sizes);
        let got: Vec<Vec<u8>> = FramedReader::new(r, Resp::new())
            .map(|f| f.map(|f| f.to_vec()))
            .collect::<io::Result<_>>()
            .unwrap();
        prop_assert_eq!(&got, &wires);
        prop_assert_eq!(byte_by_byte(Resp::new(), &stream).unwrap(), wires);
    }

    /// Any arguments, as an array of bulk strings: `args` gives them back.
    #[test]
    fn requests_round_trip(
        args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 0..20),
        cut in 1..64usize,
    ) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let frame = request(&refs);
        let r = Chunked::new(&frame, vec![cut]);
        let mut reader = FramedReader::new(r, Resp::requests());
        let f = reader.next_frame().unwrap().unwrap();
        let got: Vec<&[u8]> = Resp::args(&f).map(|r| &f[r]).collect();
        prop_assert_eq!(got, refs);
    }

    /// Inline words without quotes or spaces: `args` splits them back.
    #[test]
    fn inline_round_trip(words in prop::collection::vec("[a-zA-Z0-9:_-]{1,12}", 0..10)) {
        let line = format!("{}\r\n", words.join(" "));
        match Resp::requests().decode(line.as_bytes()).unwrap() {
            Decode::Frame(f) => {
                let frame = &line.as_bytes()[f.start..f.end];
                let got: Vec<&[u8]> = Resp::args(frame).map(|r| &frame[r]).collect();
                let want: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
                prop_assert_eq!(got, want);
            }
            need => prop_assert!(false, "{:?}", need),
        }
    }

    /// Any bytes: an error or frames, never a panic, and never a `Need` at or below
    /// what was shown.
    #[test]
    fn garbage_never_panics(stream in prop::collection::vec(
        prop::sample::select(vec![b'*', b'$', b'+', b'-', b':', b'\r', b'\n', b'1', b'0', b'-', b'a', b'"']),
        0..200,
    )) {
        for d in [Resp::new(), Resp::requests()] {
            let _ = byte_by_byte(d, &stream);
        }
        let _ = Resp::args(&stream).count();
    }
}
