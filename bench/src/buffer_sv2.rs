//! Scenario 4, buffer_sv2's `benches/pool_benchmark.rs` (criterion). Each run is
//! 1,000 iterations × 2 messages; a message is 2^14 − rand(0..12,000) bytes
//! written 10 bytes at a time through `get_writable(10)`, then taken with
//! `get_data_owned()`:
//! - "with pool" / "without pool": the slice is dropped at once (one thread);
//! - "thread 1": each slice moves into a newly spawned thread that sleeps 10 µs
//!   and reads it (threads are never joined inside the timing);
//! - "thread 2": the same with a 10 ns sleep, and the producer sleeps 10 ns per
//!   iteration;
//!
//! plus a version with one long-lived consumer thread instead of a thread per slice.
//! The published "without pool threaded" loops write into a `BufferPool` but take
//! the data from a separate, empty `BufferFromSystemMemory` (and use 2^16-byte
//! messages): kept as published in their own rows, and fixed in the others.

use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use buffer_sv2::Buffer as _;

use crate::harness::{measure, random_bytes, Config, Mi, Rng, Row, Runner, Sample, Table, Unit};

/// The codec-buffer interface the loops use (buffer_sv2's `Buffer`, reduced).
pub trait Codec {
    /// The owned message.
    type Out: Msg + Send + 'static;
    /// A codec buffer backed by `capacity` bytes where that applies.
    fn with_capacity(capacity: usize) -> Self;
    /// `len` writable bytes at the end of the message being built.
    fn get_writable(&mut self, len: usize) -> &mut [u8];
    /// Takes the message built so far.
    fn get_data_owned(&mut self) -> Self::Out;
}

/// What a consumer reads from a message: its length.
pub trait Msg {
    /// Bytes in the message.
    fn length(&self) -> usize;
}

impl Msg for buffer_sv2::Slice {
    fn length(&self) -> usize {
        self.len()
    }
}

impl Msg for Vec<u8> {
    fn length(&self) -> usize {
        self.len()
    }
}

/// buffer_sv2's `BufferPool` (heap fallback when its slots are full).
pub struct Pool(buffer_sv2::BufferPool<buffer_sv2::BufferFromSystemMemory>);
impl Codec for Pool {
    type Out = buffer_sv2::Slice;
    fn with_capacity(capacity: usize) -> Self {
        Pool(buffer_sv2::BufferPool::new(capacity))
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        self.0.get_writable(len)
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        self.0.get_data_owned()
    }
}

/// buffer_sv2's `BufferFromSystemMemory` (a `Vec<u8>` per message).
pub struct Sys(buffer_sv2::BufferFromSystemMemory);
impl Codec for Sys {
    type Out = Vec<u8>;
    fn with_capacity(_: usize) -> Self {
        Sys(buffer_sv2::BufferFromSystemMemory::new(0))
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        self.0.get_writable(len)
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        self.0.get_data_owned()
    }
}

/// The same growth policy as `BufferFromSystemMemory`, over `Vec<u8, Mi>` (mimalloc).
pub struct MiSys(allocator_api2_02::vec::Vec<u8, Mi>);

/// A message in mimalloc memory.
pub struct MiMsg(allocator_api2_02::vec::Vec<u8, Mi>);
impl Msg for MiMsg {
    fn length(&self) -> usize {
        self.0.len()
    }
}

impl Codec for MiSys {
    type Out = MiMsg;
    fn with_capacity(_: usize) -> Self {
        MiSys(allocator_api2_02::vec::Vec::new_in(Mi))
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        let at = self.0.len();
        self.0.resize(at + len, 0);
        &mut self.0[at..]
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        MiMsg(std::mem::replace(
            &mut self.0,
            allocator_api2_02::vec::Vec::new_in(Mi),
        ))
    }
}

/// The floor: messages laid one after another in one preallocated block; a
/// message is (offset, length) and the consumer only reads its length.
pub struct Control {
    block: Vec<u8>,
    start: usize,
    cursor: usize,
}

/// A control message: the length of a span of the block (the consumer only reads that).
pub struct Span {
    /// Length.
    pub len: usize,
}
impl Msg for Span {
    fn length(&self) -> usize {
        self.len
    }
}

impl Codec for Control {
    type Out = Span;
    fn with_capacity(capacity: usize) -> Self {
        Control {
            block: vec![0; capacity],
            start: 0,
            cursor: 0,
        }
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        let at = self.cursor;
        self.cursor += len;
        &mut self.block[at..at + len]
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        let s = Span {
            len: self.cursor - self.start,
        };
        if self.cursor + (1 << 16) > self.block.len() {
            self.cursor = 0;
        }
        self.start = self.cursor;
        s
    }
}

/// buffer_sv2's pool size in its benches: 5 × 2^16 bytes.
const CAPACITY: usize = 5 << 16;

/// Writes one message of `len` bytes in 10-byte pieces (buffer_sv2's `add_random_bytes`).
#[inline]
fn add_bytes<C: Codec>(c: &mut C, len: usize, input: &[u8]) {
    for i in 0..len / 10 {
        c.get_writable(10).copy_from_slice(&input[i..i + 10]);
    }
}

fn message_len(rng: &mut Rng, base: usize) -> usize {
    base - rng.range(0, 11_999)
}

/// Where the slices go.
#[derive(Clone, Copy)]
enum Sink {
    /// Dropped at once.
    Drop,
    /// A new thread per slice sleeps this long, reads it, drops it; the producer
    /// also sleeps this long per iteration when the flag is set.
    Spawn(Duration, bool),
    /// One consumer thread for the whole run.
    Consumer,
}

fn run_loop<C: Codec>(sink: Sink, input: &[u8]) -> Sample {
    let mut rng = Rng::new(2024);
    let mut handles = Vec::with_capacity(2000);
    let start = Instant::now();
    let mut c = C::with_capacity(CAPACITY);
    let (tx, consumer) = if let Sink::Consumer = sink {
        let (tx, rx) = mpsc::channel::<C::Out>();
        let h = thread::spawn(move || {
            for s in rx {
                black_box(s.length());
            }
        });
        (Some(tx), Some(h))
    } else {
        (None, None)
    };
    for i in 0..1000 {
        let len = message_len(&mut rng, 1 << 14);
        for _ in 0..2 {
            add_bytes(&mut c, len, &input[i..]);
            let s = c.get_data_owned();
            match sink {
                Sink::Drop => drop(s),
                Sink::Spawn(d, _) => handles.push(thread::spawn(move || {
                    thread::sleep(d);
                    black_box(s.length());
                })),
                Sink::Consumer => tx.as_ref().unwrap().send(s).unwrap(),
            }
        }
        if let Sink::Spawn(d, true) = sink {
            thread::sleep(d);
        }
    }
    drop(tx);
    if let Some(h) = consumer {
        h.join().unwrap();
    }
    let time = start.elapsed();
    for h in handles {
        h.join().unwrap();
    }
    Sample { time, waits: 0 }
}

/// buffer_sv2's "without pool threaded" as published: writes go into a pool,
/// the slices handed to the threads come from an empty `BufferFromSystemMemory`.
fn published_without_pool(d: Duration, producer_sleep: bool, input: &[u8]) -> Sample {
    let mut rng = Rng::new(2024);
    let mut handles = Vec::with_capacity(2000);
    let start = Instant::now();
    let mut pool = Pool::with_capacity(CAPACITY);
    let mut empty = buffer_sv2::BufferFromSystemMemory::new(0);
    for i in 0..1000 {
        let len = message_len(&mut rng, 1 << 16);
        for _ in 0..2 {
            add_bytes(&mut pool, len, &input[i..]);
            let s = empty.get_data_owned();
            handles.push(thread::spawn(move || {
                thread::sleep(d);
                black_box(s.len());
            }));
        }
        if producer_sleep {
            thread::sleep(d);
        }
    }
    let time = start.elapsed();
    for h in handles {
        h.join().unwrap();
    }
    Sample { time, waits: 0 }
}

const COLUMNS: [&str; 4] = [
    "BufferPool",
    "BufferFromSystemMemory",
    "Vec (mimalloc)",
    "control",
];

fn runners(sink: Sink, input: &[u8]) -> Vec<Runner<'_>> {
    vec![
        (
            "BufferPool".into(),
            Box::new(move || Some(run_loop::<Pool>(sink, input))),
        ),
        (
            "BufferFromSystemMemory".into(),
            Box::new(move || Some(run_loop::<Sys>(sink, input))),
        ),
        (
            "Vec (mimalloc)".into(),
            Box::new(move || Some(run_loop::<MiSys>(sink, input))),
        ),
        (
            "control".into(),
            Box::new(move || Some(run_loop::<Control>(sink, input))),
        ),
    ]
}

/// Scenario 4.
pub fn run(cfg: &Config) -> Vec<Table> {
    let input = random_bytes(1 << 17);
    let input = &input[..];
    let columns: Vec<String> = COLUMNS.map(String::from).to_vec();
    let mut t = Table::new(
        "buffer_sv2: 1,000 × 2 messages of 4–16 KiB written 10 bytes at a time",
        &["loop"],
        &columns,
        Unit::Auto,
    )
    .baseline("BufferFromSystemMemory");
    let cases: [(&str, Sink); 4] = [
        (
            "single thread (\"with pool\" / \"without pool\")",
            Sink::Drop,
        ),
        (
            "thread 1: a thread per slice, sleeps 10 µs",
            Sink::Spawn(Duration::from_micros(10), false),
        ),
        (
            "thread 2: a thread per slice, 10 ns sleeps",
            Sink::Spawn(Duration::from_nanos(10), true),
        ),
        ("one long-lived consumer thread (added)", Sink::Consumer),
    ];
    for (label, sink) in cases {
        eprintln!("  buffer_sv2: {label}");
        let stats = measure(cfg.reps, 1.0, &mut runners(sink, input));
        t.rows.push(Row {
            params: vec![label.into()],
            cells: stats,
        });
    }
    for (label, d, sleep) in [
        (
            "published \"without pool threaded 1\" (writes to a pool, empty slices)",
            Duration::from_micros(10),
            false,
        ),
        (
            "published \"without pool threaded 2\" (writes to a pool, empty slices)",
            Duration::from_nanos(10),
            true,
        ),
    ] {
        eprintln!("  buffer_sv2: {label}");
        let mut r: Vec<Runner<'_>> = vec![(
            "as published".into(),
            Box::new(move || Some(published_without_pool(d, sleep, input))),
        )];
        let stats = measure(cfg.reps, 1.0, &mut r);
        t.rows.push(Row {
            params: vec![label.into()],
            cells: vec![None, stats[0], None, None],
        });
    }
    t.notes = vec![
        "Time per run (2,000 messages), median of the repetitions, speed-up against `BufferFromSystemMemory`; sizes are buffer_sv2's own in both modes."
            .into(),
        "The threaded loops spawn one OS thread per slice, as published, so they mostly measure `thread::spawn`; the added \
         long-lived-consumer row sends every slice to one thread over `std::sync::mpsc` instead."
            .into(),
        "The last two rows reproduce buffer_sv2's \"without pool threaded\" loops as written: their bytes go into a `BufferPool` \
         and the slices come from an empty `BufferFromSystemMemory` (no allocation at all) with 2^16-byte messages; the other rows \
         fix this (writes and slices from the same buffer, 2^14-byte messages for every column)."
            .into(),
        "`Vec (mimalloc)` mirrors `BufferFromSystemMemory` (resize, then take the `Vec`) over allocator-api2's `Vec<u8, Mi>`. \
         `control` lays messages one after another in one preallocated block and hands out (offset, length)."
            .into(),
        "ringmem rows: pending issue 5/7 (the codec buffer pool).".into(),
    ];
    vec![t]
}
