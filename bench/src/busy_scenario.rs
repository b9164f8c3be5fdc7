//! A busy machine (issue 45): ringal's published fixed and extendable tables and the
//! many-threads rows, every competitor run both quiet and beside one busy neighbour
//! per core ([`crate::busy`]), the quiet and busy runs interleaved across the
//! repetitions. A table per scenario shows the busy medians and their slowdown
//! against the quiet ones of the same invocation; its verdict says where ringmem
//! slowed down more than ringal, `Vec (glibc)` or the bounded control, and whether it
//! stayed ahead of ringal.

use crate::buffers::{self, Variant};
use crate::busy::Neighbours;
use crate::harness::{
    measure, random_bytes, thousands, Config, Ratio, Row, Runner, Stats, Table, Unit,
};
use crate::{many_threads, ringal_fixed};

/// The columns run under load: the ring peers, the references, and the bounded
/// control (what any ring of that capacity pays when its consumer is slow to run). The
/// rest of the ringal tables' columns are left out to keep the main job short.
const COLUMNS: [&str; 6] = [
    "ringal",
    "ringmem",
    "ringmem (wait)",
    "Vec (glibc)",
    "Vec (mimalloc global)",
    "bounded control",
];

/// Under load a ring's producer waits each time for a consumer that must first win a
/// CPU back from a neighbour, which makes the rings' runs many times longer than
/// quiet: the iterations are those of the quiet tables divided by this, as the
/// variant tables' are, to keep the scenario's share of the main job modest.
const DIVISOR: usize = 8;

/// `iterations` shortened for the runs under load (see [`DIVISOR`]).
fn shortened(iterations: usize) -> usize {
    (iterations / DIVISOR).max(1000)
}

/// `run` under load: `n` neighbours start before it and end after it. `None` (no
/// sample) when they cannot be started.
fn loaded(n: usize, (name, mut run): Runner<'_>) -> Runner<'_> {
    (
        name,
        Box::new(move || {
            let _neighbours = Neighbours::start(n).ok()?;
            run()
        }),
    )
}

/// One row measured quiet and under load.
struct Measured {
    /// The row's parameter values.
    params: Vec<String>,
    /// The columns' stats, quiet.
    quiet: Vec<Option<Stats>>,
    /// The columns' stats under load.
    busy: Vec<Option<Stats>>,
}

/// Row `params`: the stats of the [`COLUMNS`] that `make` builds (called twice: one set
/// runs quiet, the other under load), quiet and busy runs interleaved; and the columns.
fn measure_row<'a>(
    cfg: &Config,
    per: f64,
    params: Vec<String>,
    make: impl Fn() -> Vec<Runner<'a>>,
) -> (Vec<String>, Measured) {
    let chosen = || {
        make()
            .into_iter()
            .filter(|r| COLUMNS.contains(&r.0.as_str()))
    };
    let mut runners: Vec<Runner<'a>> = chosen().collect();
    let columns: Vec<String> = runners.iter().map(|r| r.0.clone()).collect();
    runners.extend(chosen().map(|r| loaded(cfg.cores, r)));
    let mut quiet = measure(cfg.reps, per, &mut runners);
    let busy = quiet.split_off(columns.len());
    (
        columns,
        Measured {
            params,
            quiet,
            busy,
        },
    )
}

/// A table under load from its measured rows.
fn table(
    title: String,
    params: &[&str],
    unit: Unit,
    columns: &[String],
    rows: Vec<Measured>,
) -> Table {
    let mut t = Table::new(title, params, columns, unit).baseline("Vec (glibc)");
    t.wait_columns = ["ringal", "ringmem", "bounded control"]
        .iter()
        .filter_map(|n| columns.iter().position(|c| c == n))
        .collect();
    let mut quiet = Vec::with_capacity(rows.len());
    for m in rows {
        quiet.push(m.quiet);
        t.rows.push(Row {
            params: m.params,
            cells: m.busy,
        });
    }
    t.ratio = Ratio::Slowdown(quiet);
    t
}

/// The notes every table under load carries.
fn common_notes(cfg: &Config, why_empty: Option<&str>) -> Vec<String> {
    let mut notes = vec![
        format!(
            "Each competitor runs quiet and beside {} busy processes (one per CPU: this binary with `--busy-child`, spinning \
             on integer arithmetic), started before the run and killed after it; the quiet and busy runs of every column \
             are interleaved across the {} repetitions. A cell: the busy median and its slowdown against the same column's \
             quiet median (busy / quiet, 1.00× = unaffected), then the busy min–max and the quiet median (with its \
             min–max in the Markdown report).",
            cfg.cores, cfg.reps
        ),
        "Two slowdowns differ beyond the spread when their ranges (busy fastest / quiet slowest to busy slowest / quiet \
         fastest) do not overlap. waits: median under load, as in the quiet tables."
            .into(),
        format!(
            "Quiet and busy alike run the iterations of the published table at this scale divided by {DIVISOR}, as the \
             variant tables do: under load the rings' runs take many times longer. Left out, to keep the main job short: `BytesMut`, `Vec (mimalloc)` in this process, \
             `ringmem (wait_timeout)`, the no-allocation `control`, and the full-size and restart variants."
        ),
        buffers::BOUNDED_NOTE.into(),
    ];
    if let Some(why) = why_empty {
        notes.push(format!(
            "The busy neighbours could not be started ({why}): every cell is empty (–)."
        ));
    }
    notes
}

/// ringal's published fixed or extendable table under load.
fn ringal_table(cfg: &Config, extendable: bool, why_empty: Option<&str>) -> Table {
    let data = random_bytes(131_072);
    let what = if extendable {
        "ringal extendable buffers, chunked 64-byte writes"
    } else {
        "ringal fixed preallocated buffers"
    };
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    for row in 0..ringal_fixed::ROWS.len() {
        let mut shape = ringal_fixed::variant_shape(cfg, row, extendable, Variant::Published);
        shape.iterations = shortened(shape.iterations);
        crate::progress::case(&format!(
            "under load: {what}: {} × {} B, {} held",
            thousands(shape.iterations),
            shape.size,
            shape.max_buffers
        ));
        let params = vec![
            thousands(shape.iterations),
            thousands(shape.size),
            thousands(shape.max_buffers),
        ];
        let (c, m) = measure_row(cfg, 1.0, params, || ringal_fixed::row_runners(shape, &data));
        columns = c;
        rows.push(m);
    }
    let mut t = table(
        format!(
            "under load: {what} beside {} busy processes (iterations × {} / {DIVISOR})",
            cfg.cores,
            cfg.factor()
        ),
        &["Iterations", "Buffer Size", "Max Buffers"],
        Unit::Ms,
        &columns,
        rows,
    );
    t.notes = common_notes(cfg, why_empty);
    t.notes.push(format!(
        "The loop of ringal's published {} table (random lengths, the hand-rolled spin on a full ring); \
         `ringmem (wait)` waits with {}, as there.",
        if extendable { "extendable" } else { "fixed" },
        if extendable {
            "`extendable_wait(0)` and `reserve_wait(chunk)`"
        } else {
            "`fixed_wait(size)`"
        }
    ));
    if extendable && crate::ext_check::ringal().wrong > 0 {
        t.notes.push(
            "ringal 0.4's extendable buffers are handed memory that live buffers still hold (see the check under the \
             extendable tables): its column times a ring that need not wait for the consumer."
                .into(),
        );
    }
    t
}

/// The many-threads rows under load.
fn many_threads_table(cfg: &Config, why_empty: Option<&str>) -> Table {
    let data = random_bytes(1024);
    let mut shape = many_threads::shape(cfg);
    shape.iterations = shortened(shape.iterations);
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    for n in many_threads::producers(cfg) {
        crate::progress::case(&format!("under load: many threads: {n} producers"));
        let per = (n * shape.iterations) as f64;
        let params = vec![n.to_string(), (2 * n).to_string()];
        let (c, m) = measure_row(cfg, per, params, || many_threads::runners(n, shape, &data));
        columns = c;
        rows.push(m);
    }
    let mut t = table(
        format!(
            "under load: many threads beside {} busy processes ({} buffers of ≤ 1 KiB per producer)",
            cfg.cores,
            thousands(shape.iterations)
        ),
        &["producers", "threads"],
        Unit::Mops,
        &columns,
        rows,
    );
    t.notes = common_notes(cfg, why_empty);
    t.notes.push(
        "Millions of buffers per second over all producers, as in the many-threads table; the slowdown is the quiet \
         rate over the busy one."
            .into(),
    );
    t
}

/// The cases [`run`] runs: ringal's fixed and extendable rows, the many-threads rows.
pub fn case_count(cfg: &Config) -> usize {
    2 * ringal_fixed::ROWS.len() + many_threads::case_count(cfg)
}

/// The busy-machine scenario: three tables under load.
pub fn run(cfg: &Config) -> Vec<Table> {
    // Once up front, to say in the notes why the cells are empty if they cannot start.
    let why_empty = Neighbours::start(cfg.cores).err().map(|e| e.to_string());
    vec![
        ringal_table(cfg, false, why_empty.as_deref()),
        ringal_table(cfg, true, why_empty.as_deref()),
        many_threads_table(cfg, why_empty.as_deref()),
    ]
}
