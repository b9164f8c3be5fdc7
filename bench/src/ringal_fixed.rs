//! Scenario 1, ringal's "fixed preallocated buffer" table: allocate a buffer of
//! capacity >= buffer size, write a random number of bytes (at most the buffer
//! size) through `io::Write`, send it over an unbounded channel to a consumer
//! thread that drops its buffers in batches of max buffers. Ring capacity is
//! 2 × max buffers × buffer size.
//!
//! Besides the published loop, the loops users write ([`Variant`]): every message
//! at the full size, and (extendable) `write_all` that drops and restarts on failure;
//! ringmem runs both with a hand-rolled spin and with its built-in wait.

use crate::buffers::{self, ByteBufs, Shape, Variant};
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

/// The variants' iterations are the published loop's divided by this, so that the
/// main job stays within about 1.5 × the time it took with the published tables only.
const VARIANT_DIVISOR: usize = 8;

/// Row `row` of the published table at this scale.
fn shape(cfg: &Config, row: usize, extendable: bool) -> Shape {
    let (iters, size, max_buffers) = ROWS[row];
    Shape::published(cfg.scaled(iters, 1000), size, max_buffers, extendable)
}

/// Row `row` of a variant's table at this scale (fewer iterations but for the
/// published variant: see [`VARIANT_DIVISOR`]).
pub fn variant_shape(cfg: &Config, row: usize, extendable: bool, variant: Variant) -> Shape {
    let mut s = shape(cfg, row, extendable);
    s.variant = variant;
    if variant != Variant::Published {
        s.iterations = (s.iterations / VARIANT_DIVISOR).max(1000);
    }
    s
}

/// The competitors of one row, in column order.
pub fn row_runners(shape: Shape, d: &[u8]) -> Vec<Runner<'_>> {
    let mut runners: Vec<Runner<'_>> = vec![runner::<buffers::Ringal>("ringal", shape, d)];
    #[cfg(feature = "ringmem-rows")]
    {
        runners.push(runner::<buffers::Ringmem>("ringmem", shape, d));
        runners.push(runner::<buffers::RingmemWait>("ringmem (wait)", shape, d));
        runners.push(runner::<buffers::RingmemWaitTimeout>(
            "ringmem (wait_timeout)",
            shape,
            d,
        ));
    }
    runners.push(runner::<buffers::SysVec>("Vec (glibc)", shape, d));
    runners.push(runner::<buffers::MiVec>("Vec (mimalloc)", shape, d));
    runners.push((
        "Vec (mimalloc global)".into(),
        Box::new(move || buffers::mimalloc_child(0, shape)),
    ));
    runners.push(runner::<buffers::Bytes>("BytesMut", shape, d));
    runners.push(runner::<buffers::Bounded>("bounded control", shape, d));
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
        c.push("ringmem (wait)".into());
        c.push("ringmem (wait_timeout)".into());
    }
    c.extend(
        [
            "Vec (glibc)",
            "Vec (mimalloc)",
            "Vec (mimalloc global)",
            "BytesMut",
            "bounded control",
            "control",
        ]
        .map(String::from),
    );
    c
}

/// The title of the fixed or extendable table of `variant` (its subject follows `: `).
fn title(extendable: bool, variant: Variant) -> &'static str {
    match (extendable, variant) {
        (false, Variant::Published) => "ringal: fixed preallocated buffers",
        (false, _) => "ringal: fixed buffers, full-size writes",
        (true, Variant::Published) => "ringal: extendable buffers, chunked 64-byte writes",
        (true, Variant::FullSize) => "ringal: extendable buffers, full-size chunked writes",
        (true, Variant::Restart) => "ringal: extendable buffers, write_all, restart on failure",
    }
}

/// Runs ringal's table, fixed or extendable, in one variant.
pub fn ringal_table(cfg: &Config, extendable: bool, variant: Variant) -> Table {
    let data = random_bytes(131_072);
    let title = title(extendable, variant);
    let columns = columns();
    let scale = match variant {
        Variant::Published => cfg.factor(),
        _ => format!("{} / {VARIANT_DIVISOR}", cfg.factor()),
    };
    let mut table = Table::new(
        format!("{title} (iterations × {scale})"),
        &["Iterations", "Buffer Size", "Max Buffers"],
        &columns,
        Unit::Ms,
    )
    .baseline("Vec (glibc)");
    let ring_columns = |names: &[&str]| -> Vec<usize> {
        names
            .iter()
            .filter_map(|n| columns.iter().position(|c| c == n))
            .collect()
    };
    table.wait_columns = ring_columns(&["ringal", "ringmem"]);
    // Only the restart variant drops partial buffers; the others hold them.
    table.restart_columns = match (extendable, variant) {
        (true, Variant::Restart) => ring_columns(&[
            "ringal",
            "ringmem",
            "ringmem (wait)",
            "ringmem (wait_timeout)",
        ]),
        _ => Vec::new(),
    };
    for row in 0..ROWS.len() {
        let shape = variant_shape(cfg, row, extendable, variant);
        crate::progress::case(&format!(
            "{title}: {} × {} B, {} held",
            thousands(shape.iterations),
            shape.size,
            shape.max_buffers
        ));
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
    table.notes = notes(extendable, variant);
    table
}

/// The notes under a ringal table.
fn notes(extendable: bool, variant: Variant) -> Vec<String> {
    let mut notes: Vec<String> = vec![
        "Time per run in ms: median of the repetitions, speed-up against `Vec (glibc)` in bold (italic = slower), min–max in small print. \
         A run includes creating the ring (ringal's numbers are whole-process hyperfine runs) but not dropping it."
            .into(),
        match variant {
            Variant::Published | Variant::Restart => "Lengths are uniform in 1..=buffer size, the same stream for every column; `std::sync::mpsc` unbounded channel \
                 (ringal's benchmark code is not published; its README says \"unbounded channel\" and ringal has no dependencies).",
            _ => "Every message is written at the full buffer size (the published loop writes half of it on average); \
                 `std::sync::mpsc` unbounded channel, as in the published table.",
        }
        .into(),
        "`Vec (mimalloc)` is allocator-api2's `Vec<u8, Mi>` whose allocator calls `mimalloc::MiMalloc`'s `GlobalAlloc` \
         methods directly, in this process; the channel's own nodes use the system allocator in every column. \
         `Vec (mimalloc global)` runs the same loop in a child process (`ringmem-bench-mimalloc`, built alongside) whose \
         `#[global_allocator]` is mimalloc, so the channel and threads use it too; the child times itself, process start excluded."
            .into(),
        "`control` writes into slots of one preallocated block of the ring's size and sends (slot, length): no allocation, no release. \
         On 2 cores it is not a strict floor: the channel and thread hand-off dominate the small rows."
            .into(),
        "waits: median number of times the producer found its ring full (`None`) and yielded (the hand-rolled spin: \
         8 pause instructions, a yield every 8th time)."
            .into(),
        if extendable && variant != Variant::FullSize {
            format!(
                "{} Here, with lengths below the size, a ring packs more messages than it has slots: it is stricter than a ring.",
                buffers::BOUNDED_NOTE
            )
        } else {
            buffers::BOUNDED_NOTE.into()
        },
        buffers::CPU_NOTE.into(),
    ];
    if cfg!(feature = "ringmem-rows") {
        notes.push(match (extendable, variant) {
            (false, _) => "`ringmem (wait)`: ringmem with its built-in wait instead of the spin: `fixed_wait(size)` spins briefly, \
                 then parks until the consumer's release makes room. `ringmem (wait_timeout)`: the same loop with \
                 `fixed_wait_timeout(size, 10 s)`.",
            (true, Variant::Restart) => "`ringmem (wait)`: ringmem with its built-in wait instead of the spin: `extendable_wait(0)` \
                 and `io::Write::write_all` in 64-byte chunks; the buffer's `io::Write` fails on a full ring rather than wait, \
                 so a failed write drops the partial buffer, and `extendable_wait(message length)` parks until there is room for \
                 the whole message, which is then written again (counted as a restart). `ringmem (wait_timeout)`: the same loop \
                 with `extendable_wait_timeout(.., 10 s)`.",
            (true, _) => "`ringmem (wait)`: ringmem with its built-in wait instead of the spin: `extendable_wait(0)`, then each \
                 64-byte chunk appended with `try_extend_from_slice`; a chunk that does not fit waits with `reserve_wait(chunk)`, \
                 holding the partial buffer, until a release makes room (it grows in place or moves within its block), and is \
                 then appended. `ringmem (wait_timeout)`: the same loop with `extendable_wait_timeout(0, 10 s)` and \
                 `reserve_wait_timeout(chunk, 10 s)`. (`ExtBuf::writer_wait`'s `write_all` is this same sequence behind \
                 `io::Write`: no column of its own.)",
        }
        .into());
        notes.push(
            "A `_timeout` wait that times out stops the bench: 10 s is far longer than any release takes."
                .into(),
        );
    }
    if extendable {
        notes.push(crate::ext_check::note());
        notes.push(match variant {
            Variant::Restart => "Restart: each message starts from `extendable(0)` / `Vec::new()` / `BytesMut::new()` and is written with \
                 `io::Write::write_all` in 64-byte chunks; when a write fails, the partial buffer is dropped, the producer waits once \
                 (the spin above) and starts the message over. restarts: median number of dropped partial buffers per run \
                 (`Vec`, `BytesMut` and the control never fail).",
            _ => "Extendable: start from `extendable(0)` / `Vec::new()` / `BytesMut::new()` and write the length in 64-byte chunks; \
                 the control writes the chunks into its slot. A failed ring grow is retried after a yield (counted as a wait), \
                 holding the partial buffer. Each chunk goes in with the buffer's own append: ringal's `io::Write::write_all`, \
                 ringmem's `try_extend_from_slice` (all or nothing: a `write_all` that fails half-way leaves part of the chunk \
                 written, and the retry would write it twice), `io::Write::write_all` for `Vec`, `BytesMut` (its writer) and the control.",
        }
        .into());
    }
    notes
}

/// The variants of the fixed or extendable scenario, published first.
fn variants(extendable: bool) -> &'static [Variant] {
    if extendable {
        &[Variant::Published, Variant::FullSize, Variant::Restart]
    } else {
        &[Variant::Published, Variant::FullSize]
    }
}

/// Scenario 1 or 2: the tables of every variant, the fixed one's capacity sweep,
/// then peak RSS.
pub fn scenario(cfg: &Config, extendable: bool) -> Vec<Table> {
    let mut t: Vec<Table> = variants(extendable)
        .iter()
        .map(|&v| ringal_table(cfg, extendable, v))
        .collect();
    if !extendable {
        t.push(crate::ring_sizes::table(cfg));
    }
    t.extend(rss_table(cfg, extendable));
    t
}

/// The cases [`scenario`] runs: every variant's rows, the fixed one's capacity sweep,
/// then the peak-RSS rows.
pub fn case_count(cfg: &Config, extendable: bool) -> usize {
    let sweep = if extendable {
        0
    } else {
        crate::ring_sizes::CASES
    };
    variants(extendable).len() * ROWS.len() + sweep + if cfg.rss { RSS_ROWS.len() } else { 0 }
}

/// Scenario 1.
pub fn run(cfg: &Config) -> Vec<Table> {
    scenario(cfg, false)
}
