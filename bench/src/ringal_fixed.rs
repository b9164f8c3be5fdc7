//! Scenario 1, ringal's "fixed preallocated buffer" table: allocate a buffer of
//! capacity >= buffer size, write a random number of bytes (at most the buffer
//! size) through `io::Write`, send it over an unbounded channel to a consumer
//! thread that drops its buffers in batches of max buffers. Ring capacity is
//! 2 × max buffers × buffer size.

use crate::buffers::{self, ByteBufs, Shape};
use crate::harness::{measure, random_bytes, thousands, Config, Row, Runner, Table, Unit};

/// ringal's five published rows: (iterations, buffer size, max buffers).
pub const ROWS: [(usize, usize, usize); 5] = [
    (10_000_000, 64, 64),
    (10_000_000, 1024, 64),
    (10_000_000, 1024, 1024),
    (1_000_000, 65_536, 64),
    (1_000_000, 131_072, 1024),
];

fn runner<'a, B: ByteBufs + 'a>(name: &str, shape: Shape, data: &'a [u8]) -> Runner<'a> {
    (
        name.to_string(),
        Box::new(move || Some(buffers::pipeline::<B>(shape, data))),
    )
}

/// Row `row` of the table at this scale.
fn shape(cfg: &Config, row: usize, extendable: bool) -> Shape {
    let (iters, size, max_buffers) = ROWS[row];
    Shape {
        iterations: cfg.scaled(iters, 1000),
        size,
        max_buffers,
        extendable,
    }
}

/// The competitors of one row, in column order.
fn row_runners(shape: Shape, d: &[u8]) -> Vec<Runner<'_>> {
    let mut runners: Vec<Runner<'_>> = vec![runner::<buffers::Ringal>("ringal", shape, d)];
    #[cfg(feature = "ringmem-rows")]
    runners.push(runner::<buffers::Ringmem>("ringmem", shape, d));
    runners.push(runner::<buffers::SysVec>("Vec (glibc)", shape, d));
    runners.push(runner::<buffers::MiVec>("Vec (mimalloc)", shape, d));
    runners.push((
        "Vec (mimalloc global)".into(),
        Box::new(move || buffers::mimalloc_child(0, shape)),
    ));
    runners.push(runner::<buffers::Bytes>("BytesMut", shape, d));
    runners.push(runner::<buffers::Control>("control", shape, d));
    runners
}

/// Rows of the peak-RSS tables: 1 KiB × 1,024 held and 128 KiB × 1,024 held.
const RSS_ROWS: [usize; 2] = [2, 4];

/// One run of row `row`, column `col`, in a child process (peak-RSS table). The
/// `Vec (mimalloc global)` column is a process of its own: not measured here.
fn child(cfg: &Config, row: usize, col: usize, extendable: bool) -> Option<crate::harness::Sample> {
    if row >= ROWS.len() {
        return None;
    }
    let data = random_bytes(131_072);
    let mut r = row_runners(shape(cfg, row, extendable), &data);
    let (name, f) = r.get_mut(col)?;
    if name == "Vec (mimalloc global)" {
        return None;
    }
    f()
}

/// [`child`] for the fixed table.
pub fn child_fixed(cfg: &Config, row: usize, col: usize) -> Option<crate::harness::Sample> {
    child(cfg, row, col, false)
}

/// [`child`] for the extendable table.
pub fn child_ext(cfg: &Config, row: usize, col: usize) -> Option<crate::harness::Sample> {
    child(cfg, row, col, true)
}

/// The peak-RSS table of the fixed or extendable scenario.
pub fn rss_table(cfg: &Config, extendable: bool) -> Option<Table> {
    let (id, title) = if extendable {
        ("ringal-ext", "ringal extendable: peak RSS per competitor")
    } else {
        ("ringal-fixed", "ringal fixed: peak RSS per competitor")
    };
    let rows: Vec<(String, usize)> = RSS_ROWS
        .iter()
        .map(|&i| {
            let s = shape(cfg, i, extendable);
            (
                format!(
                    "{} × {} B, {} held",
                    thousands(s.iterations),
                    thousands(s.size),
                    thousands(s.max_buffers)
                ),
                i,
            )
        })
        .collect();
    crate::harness::rss_table(cfg, id, title, &columns(), &rows)
}

/// The competitor columns of the ringal tables, in order.
pub fn columns() -> Vec<String> {
    let mut c = vec!["ringal".to_string()];
    if cfg!(feature = "ringmem-rows") {
        c.push("ringmem".into());
    }
    c.extend(
        [
            "Vec (glibc)",
            "Vec (mimalloc)",
            "Vec (mimalloc global)",
            "BytesMut",
            "control",
        ]
        .map(String::from),
    );
    c
}

/// Runs ringal's table, fixed or extendable.
pub fn ringal_table(cfg: &Config, extendable: bool) -> Table {
    let data = random_bytes(131_072);
    let title = if extendable {
        "ringal: extendable buffers, chunked 64-byte writes"
    } else {
        "ringal: fixed preallocated buffers"
    };
    let mut table = Table::new(
        format!("{title} (iterations × {})", cfg.factor()),
        &["Iterations", "Buffer Size", "Max Buffers"],
        &columns(),
        Unit::Ms,
    )
    .baseline("Vec (glibc)");
    table.wait_columns = if cfg!(feature = "ringmem-rows") {
        vec![0, 1]
    } else {
        vec![0]
    };
    for row in 0..ROWS.len() {
        let shape = shape(cfg, row, extendable);
        eprintln!(
            "  {title}: {} × {} B, {} held",
            thousands(shape.iterations),
            shape.size,
            shape.max_buffers
        );
        let stats = measure(cfg.reps, 1.0, &mut row_runners(shape, &data));
        table.rows.push(Row {
            params: vec![
                thousands(shape.iterations),
                thousands(shape.size),
                thousands(shape.max_buffers),
            ],
            cells: stats,
        });
    }
    table.notes = vec![
        "Time per run in ms: median of the repetitions, speed-up against `Vec (glibc)` in bold (italic = slower), min–max in small print. \
         A run includes creating the ring (ringal's numbers are whole-process hyperfine runs) but not dropping it."
            .into(),
        "Lengths are uniform in 1..=buffer size, the same stream for every column; `std::sync::mpsc` unbounded channel \
         (ringal's benchmark code is not published; its README says \"unbounded channel\" and ringal has no dependencies)."
            .into(),
        "`Vec (mimalloc)` is allocator-api2's `Vec<u8, Mi>` whose allocator calls `mimalloc::MiMalloc`'s `GlobalAlloc` \
         methods directly, in this process; the channel's own nodes use the system allocator in every column. \
         `Vec (mimalloc global)` runs the same loop in a child process (`ringmem-bench-mimalloc`, built alongside) whose \
         `#[global_allocator]` is mimalloc, so the channel and threads use it too; the child times itself, process start excluded."
            .into(),
        "`control` writes into slots of one preallocated block of the ring's size and sends (slot, length): no allocation, no release. \
         On 2 cores it is not a strict floor: the channel and thread hand-off dominate the small rows."
            .into(),
        "waits: median number of times the producer found its ring full (`None`) and yielded.".into(),
    ];
    if extendable {
        table.notes.push(
            "Extendable: start from `extendable(0)` / `Vec::new()` / `BytesMut::new()` and write the random length in 64-byte chunks; \
             the control writes the chunks into its slot. A failed ring grow is retried after a yield (counted as a wait). \
             Each chunk goes in with the buffer's own append: ringal's `io::Write::write_all`, ringmem's `try_extend_from_slice` \
             (all or nothing: a `write_all` that fails half-way leaves part of the chunk written, and the retry would write it twice), \
             `io::Write::write_all` for `Vec`, `BytesMut` (its writer) and the control."
                .into(),
        );
    }
    table
}

/// Scenario 1.
pub fn run(cfg: &Config) -> Vec<Table> {
    let mut t = vec![ringal_table(cfg, false)];
    t.extend(rss_table(cfg, false));
    t
}
