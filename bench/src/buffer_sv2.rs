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
    /// Messages that went to a heap fallback (where the buffer counts them).
    fn fallbacks(&self) -> u64 {
        0
    }
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

/// ringmem's codec `BufferPool`: a ring of the pool's capacity, heap fallback.
#[cfg(feature = "ringmem-rows")]
pub struct RmPool(ringmem::codec::BufferPool);
#[cfg(feature = "ringmem-rows")]
impl Msg for ringmem::codec::Slice {
    fn length(&self) -> usize {
        self.len()
    }
}
#[cfg(feature = "ringmem-rows")]
impl Codec for RmPool {
    type Out = ringmem::codec::Slice;
    fn with_capacity(capacity: usize) -> Self {
        RmPool(ringmem::codec::BufferPool::new(capacity))
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        ringmem::codec::Buffer::get_writable(&mut self.0, len)
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        ringmem::codec::Buffer::get_data_owned(&mut self.0)
    }
    fn fallbacks(&self) -> u64 {
        self.0.fallbacks()
    }
}

/// ringmem's codec `BufferFromSystemMemory` (a `Vec<u8>` per message).
#[cfg(feature = "ringmem-rows")]
pub struct RmSys(ringmem::codec::BufferFromSystemMemory);
#[cfg(feature = "ringmem-rows")]
impl Codec for RmSys {
    type Out = Vec<u8>;
    fn with_capacity(_: usize) -> Self {
        RmSys(ringmem::codec::BufferFromSystemMemory::new(0))
    }
    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        ringmem::codec::Buffer::get_writable(&mut self.0, len)
    }
    #[inline]
    fn get_data_owned(&mut self) -> Self::Out {
        ringmem::codec::Buffer::get_data_owned(&mut self.0)
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
    let waits = c.fallbacks();
    drop(c);
    for h in handles {
        h.join().unwrap();
    }
    Sample {
        time,
        waits,
        restarts: 0,
        cpu: None,
    }
}

/// buffer_sv2's "without pool threaded" as published: writes go into a pool `P`,
/// the slices handed to the threads come from an empty buffer `E`
/// (`BufferFromSystemMemory` of the same crate).
fn published_without_pool<P: Codec, E: Codec>(
    d: Duration,
    producer_sleep: bool,
    input: &[u8],
) -> Sample {
    let mut rng = Rng::new(2024);
    let mut handles = Vec::with_capacity(2000);
    let start = Instant::now();
    let mut pool = P::with_capacity(CAPACITY);
    let mut empty = E::with_capacity(0);
    for i in 0..1000 {
        let len = message_len(&mut rng, 1 << 16);
        for _ in 0..2 {
            add_bytes(&mut pool, len, &input[i..]);
            let s = empty.get_data_owned();
            handles.push(thread::spawn(move || {
                thread::sleep(d);
                black_box(s.length());
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
    Sample::timed(time)
}

/// The competitor columns, in order.
pub fn columns() -> Vec<String> {
    let mut c = vec!["buffer_sv2 BufferPool".to_string()];
    if cfg!(feature = "ringmem-rows") {
        c.push("ringmem BufferPool".into());
    }
    c.push("buffer_sv2 BufferFromSystemMemory".into());
    if cfg!(feature = "ringmem-rows") {
        c.push("ringmem BufferFromSystemMemory".into());
    }
    c.extend(["Vec (mimalloc)", "control"].map(String::from));
    c
}

fn runner<'a, C: Codec + 'a>(
    sink: Sink,
    input: &'a [u8],
) -> Box<dyn FnMut() -> Option<Sample> + 'a> {
    Box::new(move || Some(run_loop::<C>(sink, input)))
}

fn runners(sink: Sink, input: &[u8]) -> Vec<Runner<'_>> {
    let mut f: Vec<Box<dyn FnMut() -> Option<Sample> + '_>> = vec![runner::<Pool>(sink, input)];
    #[cfg(feature = "ringmem-rows")]
    f.push(runner::<RmPool>(sink, input));
    f.push(runner::<Sys>(sink, input));
    #[cfg(feature = "ringmem-rows")]
    f.push(runner::<RmSys>(sink, input));
    f.push(runner::<MiSys>(sink, input));
    f.push(runner::<Control>(sink, input));
    columns().into_iter().zip(f).collect()
}

/// The published "without pool threaded" loops as written, one runner per crate,
/// in the columns of that crate's `BufferFromSystemMemory`.
fn published_runners(d: Duration, sleep: bool, input: &[u8]) -> Vec<Runner<'_>> {
    let cols = columns();
    let mut r: Vec<Runner<'_>> = Vec::new();
    for name in &cols {
        let f: Box<dyn FnMut() -> Option<Sample> + '_> = match name.as_str() {
            "buffer_sv2 BufferFromSystemMemory" => {
                Box::new(move || Some(published_without_pool::<Pool, Sys>(d, sleep, input)))
            }
            #[cfg(feature = "ringmem-rows")]
            "ringmem BufferFromSystemMemory" => {
                Box::new(move || Some(published_without_pool::<RmPool, RmSys>(d, sleep, input)))
            }
            _ => Box::new(|| None),
        };
        r.push((name.clone(), f));
    }
    r
}

/// The rows of the table: label and what runs in it.
#[derive(Clone, Copy)]
enum Case {
    /// The fixed loops (writes and slices from the same buffer).
    Loop(Sink),
    /// The published "without pool threaded" loops as written.
    Published(Duration, bool),
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        (
            "single thread (\"with pool\" / \"without pool\")",
            Case::Loop(Sink::Drop),
        ),
        (
            "thread 1: a thread per slice, sleeps 10 µs",
            Case::Loop(Sink::Spawn(Duration::from_micros(10), false)),
        ),
        (
            "thread 2: a thread per slice, 10 ns sleeps",
            Case::Loop(Sink::Spawn(Duration::from_nanos(10), true)),
        ),
        (
            "one long-lived consumer thread (added)",
            Case::Loop(Sink::Consumer),
        ),
        (
            "published \"without pool threaded 1\" (writes to a pool, empty slices)",
            Case::Published(Duration::from_micros(10), false),
        ),
        (
            "published \"without pool threaded 2\" (writes to a pool, empty slices)",
            Case::Published(Duration::from_nanos(10), true),
        ),
    ]
}

fn case_runners(case: Case, input: &[u8]) -> Vec<Runner<'_>> {
    match case {
        Case::Loop(sink) => runners(sink, input),
        Case::Published(d, sleep) => published_runners(d, sleep, input),
    }
}

/// Rows of the peak-RSS table (indices into [`cases`]).
const RSS_ROWS: [usize; 3] = [0, 1, 3];

/// One run of row `row`, column `col`, in a child process (peak-RSS table).
pub fn child(_: &Config, row: usize, col: usize) -> Option<Sample> {
    let input = random_bytes(1 << 17);
    let (_, case) = *cases().get(row)?;
    let mut r = case_runners(case, &input);
    (r.get_mut(col)?.1)()
}

/// The cases [`run`] runs: its rows, then the peak-RSS rows.
pub fn case_count(cfg: &Config) -> usize {
    cases().len() + if cfg.rss { RSS_ROWS.len() } else { 0 }
}

/// Scenario 4.
pub fn run(cfg: &Config) -> Vec<Table> {
    let input = random_bytes(1 << 17);
    let input = &input[..];
    let columns = columns();
    let mut t = Table::new(
        "buffer_sv2: 1,000 × 2 messages of 4–16 KiB written 10 bytes at a time",
        &["loop"],
        &columns,
        Unit::Auto,
    )
    .baseline("buffer_sv2 BufferFromSystemMemory");
    if let Some(i) = columns.iter().position(|c| c == "ringmem BufferPool") {
        t.wait_columns = vec![i];
        t.wait_label = "heap fallbacks of 2,000".into();
    }
    for (label, case) in cases() {
        crate::progress::case(&format!("buffer_sv2: {label}"));
        // The thread-per-slice loops are dominated by `thread::spawn` and scatter widely
        // on a loaded machine: they get more repetitions.
        let reps = match case {
            Case::Loop(Sink::Spawn(..)) | Case::Published(..) => cfg.reps * 2 + 1,
            _ => cfg.reps,
        };
        let stats = measure(reps, 1.0, &mut case_runners(case, input));
        t.rows.push(Row {
            params: vec![label.into()],
            cells: stats,
        });
    }
    t.notes = vec![
        "Time per run (2,000 messages), median of the repetitions (the thread-per-slice rows: 2 × reps + 1 repetitions), speed-up against buffer_sv2's `BufferFromSystemMemory`; sizes are buffer_sv2's own in both modes."
            .into(),
        "The threaded loops spawn one OS thread per slice, as published, so they mostly measure `thread::spawn`; the added \
         long-lived-consumer row sends every slice to one thread over `std::sync::mpsc` instead."
            .into(),
        "The last two rows reproduce buffer_sv2's \"without pool threaded\" loops as written: their bytes go into a `BufferPool` \
         and the slices come from an empty `BufferFromSystemMemory` (no allocation at all) with 2^16-byte messages; each crate's \
         version is in its `BufferFromSystemMemory` column. The other rows fix this (writes and slices from the same buffer, \
         2^14-byte messages for every column)."
            .into(),
        "`ringmem BufferPool` is `ringmem::codec::BufferPool::new(5 × 2^16)`: a ring of that many bytes owned by the pool, \
         heap fallback (the last column: median number of messages, of 2,000, that went to the heap because the ring was full); \
         `ringmem BufferFromSystemMemory` is its heap-only counterpart (a `Vec<u8>` per message). Both go through \
         `ringmem::codec::Buffer`'s `get_writable` / `get_data_owned`, as buffer_sv2's columns go through buffer_sv2's `Buffer`."
            .into(),
        "`Vec (mimalloc)` mirrors `BufferFromSystemMemory` (resize, then take the `Vec`) over allocator-api2's `Vec<u8, Mi>`. \
         `control` lays messages one after another in one preallocated block and hands out (offset, length)."
            .into(),
    ];
    let mut tables = vec![t];
    if let Some(rss) = crate::harness::rss_table(
        cfg,
        "buffer-sv2",
        "buffer_sv2: peak RSS per competitor",
        &columns,
        &RSS_ROWS.map(|i| (cases()[i].0.to_string(), i)),
    ) {
        tables.push(rss);
    }
    tables
}
