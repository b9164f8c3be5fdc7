//! Memory that comes back: a spike of 64 MiB live in 1 MiB buffers, then a steady
//! phase holding about 1 MiB, for a `WhenFull::Grow` ring against `Vec<u8>` and
//! `BytesMut` doing the same. Each competitor runs in a child process of its own,
//! which reports its peak resident set (`VmHWM`) and its resident set at the end of
//! the steady phase (`VmRSS`, the competitor still alive).

use std::collections::VecDeque;
use std::io::Write;
use std::time::Instant;

use crate::harness::{random_bytes, Config, Row, Sample, Stats, Table, Unit};

/// Buffers live at the top of the spike.
const SPIKE_BUFFERS: usize = 64;
/// Bytes of each spike buffer.
const SPIKE_SIZE: usize = 1 << 20;
/// Bytes of each steady-phase buffer.
const STEADY_SIZE: usize = 64 << 10;
/// Steady-phase buffers held at once (1 MiB).
const STEADY_HELD: usize = 16;
/// Steady-phase buffers made in all (each held until `STEADY_HELD` newer ones exist).
const STEADY_MESSAGES: usize = 4096;
/// Capacity of the ring's first block (and of each block it adds): four times what
/// the steady phase holds.
const RING_CAPACITY: usize = 4 << 20;

/// A source of written byte buffers; `settle` runs at the end of the steady phase.
trait Source {
    type Buf;
    fn buf(&self, data: &[u8]) -> Self::Buf;
    fn settle(&self) {}
}

#[cfg(feature = "ringmem-rows")]
struct GrowRing {
    ring: ringmem::Ring,
    trim: bool,
}

#[cfg(feature = "ringmem-rows")]
impl GrowRing {
    fn new(trim: bool) -> Self {
        let ring = ringmem::Ring::builder()
            .capacity(RING_CAPACITY)
            .when_full(ringmem::WhenFull::Grow)
            .build()
            .expect("ring");
        GrowRing { ring, trim }
    }
}

#[cfg(feature = "ringmem-rows")]
impl Source for GrowRing {
    type Buf = ringmem::FixedBufMut;
    fn buf(&self, data: &[u8]) -> Self::Buf {
        let mut b = self
            .ring
            .fixed(data.len())
            .expect("a Grow ring adds a block when full");
        b.write_all(data).unwrap();
        b
    }
    fn settle(&self) {
        if self.trim {
            self.ring.trim();
        }
    }
}

struct SysVec;

impl Source for SysVec {
    type Buf = Vec<u8>;
    fn buf(&self, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(data.len());
        v.write_all(data).unwrap();
        v
    }
}

struct Bytes;

impl Source for Bytes {
    type Buf = bytes::BytesMut;
    fn buf(&self, data: &[u8]) -> Self::Buf {
        let mut b = bytes::BytesMut::with_capacity(data.len());
        b.extend_from_slice(data);
        b
    }
}

/// The spike, then the steady phase; prints `steady <VmRSS MiB>` at its end, before
/// `source` is dropped.
fn spike_then_steady<S: Source>(source: S) -> Sample {
    let data = random_bytes(SPIKE_SIZE);
    let start = Instant::now();
    let spike: Vec<S::Buf> = (0..SPIKE_BUFFERS).map(|_| source.buf(&data)).collect();
    drop(spike);
    let mut held = VecDeque::with_capacity(STEADY_HELD + 1);
    for _ in 0..STEADY_MESSAGES {
        held.push_back(source.buf(&data[..STEADY_SIZE]));
        if held.len() > STEADY_HELD {
            held.pop_front();
        }
    }
    source.settle();
    let time = start.elapsed();
    println!("steady {:.2}", rss_mib().unwrap_or(0.0));
    drop(held);
    Sample::timed(time)
}

/// Resident set of this process now, in MiB (Linux `VmRSS`).
fn rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The competitors, in column order.
fn columns() -> Vec<&'static str> {
    let mut c = Vec::new();
    if cfg!(feature = "ringmem-rows") {
        c.extend(["ringmem Grow", "ringmem Grow, trim()"]);
    }
    c.extend(["Vec<u8> (glibc)", "BytesMut (glibc)"]);
    c
}

/// One run of column `col` in a child process (`--rss-child grow-spike 0 COL`).
pub fn child(_: &Config, row: usize, col: usize) -> Option<Sample> {
    if row != 0 {
        return None;
    }
    let name = *columns().get(col)?;
    match name {
        #[cfg(feature = "ringmem-rows")]
        "ringmem Grow" => Some(spike_then_steady(GrowRing::new(false))),
        #[cfg(feature = "ringmem-rows")]
        "ringmem Grow, trim()" => Some(spike_then_steady(GrowRing::new(true))),
        "Vec<u8> (glibc)" => Some(spike_then_steady(SysVec)),
        "BytesMut (glibc)" => Some(spike_then_steady(Bytes)),
        _ => None,
    }
}

/// A value `key <MiB>` from a child's output.
fn value(out: &str, key: &str) -> Option<Stats> {
    let m: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))?
        .trim()
        .parse()
        .ok()?;
    Some(Stats {
        median: m,
        min: m,
        max: m,
        waits: 0,
        restarts: 0,
        cpu: None,
    })
}

/// The cases [`run`] runs: a child process per column (none with `--no-rss`).
pub fn case_count(cfg: &Config) -> usize {
    if cfg.rss {
        columns().len()
    } else {
        0
    }
}

/// The scenario: one table of peak and steady resident set (none with `--no-rss`).
pub fn run(cfg: &Config) -> Vec<Table> {
    if !cfg.rss {
        return Vec::new();
    }
    let mut cols: Vec<String> = columns().into_iter().map(String::from).collect();
    let outs: Vec<Option<String>> = (0..cols.len())
        .map(|c| {
            crate::progress::case(&format!("grow spike: {}", cols[c]));
            crate::harness::child_output(cfg, "grow-spike", 0, c, &[])
        })
        .collect();
    cols.push("idle child".into());
    let idle = crate::harness::child_output(cfg, "grow-spike", 0, usize::MAX, &[]);
    let mut t = Table::new(
        "memory that comes back: a 64 MiB spike, then 1 MiB held",
        &["resident set"],
        &cols,
        Unit::Mib,
    );
    for (label, key) in [
        ("peak (`VmHWM`)", "rss"),
        ("after the steady phase (`VmRSS`)", "steady"),
    ] {
        let mut cells: Vec<Option<Stats>> =
            outs.iter().map(|o| value(o.as_deref()?, key)).collect();
        // The idle child has no steady phase: its peak stands for both rows.
        cells.push(idle.as_deref().and_then(|o| value(o, "rss")));
        t.rows.push(Row {
            params: vec![label.into()],
            cells,
        });
    }
    t.notes = vec![
        format!(
            "Each column is a child process (this binary, `--rss-child grow-spike`) that makes {SPIKE_BUFFERS} buffers of {} MiB, \
             writes them and holds them all (the spike), drops them, then makes {STEADY_MESSAGES} buffers of {} KiB, \
             each held until {STEADY_HELD} newer ones exist (about 1 MiB live: the steady phase). \
             `VmRSS` is read at the end of the steady phase with the allocator and its {STEADY_HELD} buffers still alive; \
             the process's own baseline is included (`idle child`: the same child running nothing).",
            SPIKE_SIZE >> 20,
            STEADY_SIZE >> 10
        ),
        format!(
            "ringmem: `Ring::builder().capacity({} MiB).when_full(WhenFull::Grow)`, `spare_blocks` left at its default (1): \
             the ring adds blocks for the spike and gives drained ones back when it next runs out of room in its current block. \
             `trim()`: the same, with `Ring::trim()` called at the end of the steady phase.",
            RING_CAPACITY >> 20
        ),
        "`Vec<u8>` and `BytesMut` use glibc's malloc, which may keep freed memory in its heap (it returns a 1 MiB block, \
         above its mmap threshold, to the system at once, but then raises that threshold); `malloc_trim(0)` is the user's \
         way to give it back, not called here."
            .into(),
    ];
    vec![t]
}
