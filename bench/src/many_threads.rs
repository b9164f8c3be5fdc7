//! Scenario 6, many threads: N producer threads (1, 2, all cores), each with its
//! own allocator (its own ring for ringal and ringmem) and its own consumer thread
//! that drops the buffers in batches, as in ringal's fixed scenario
//! (buffer size 1 KiB, 64 held). Throughput over all threads.

use crate::buffers::{self, ByteBufs, Shape};
use crate::harness::{measure, random_bytes, thousands, Config, Row, Runner, Table, Unit};

fn runner<'a, B: ByteBufs + 'a>(
    name: &str,
    threads: usize,
    shape: Shape,
    data: &'a [u8],
) -> Runner<'a> {
    (
        name.to_string(),
        Box::new(move || Some(buffers::pipelines::<B>(threads, shape, data))),
    )
}

/// The rows: 1, 2 and as many producers as there are cores.
pub fn producers(cfg: &Config) -> Vec<usize> {
    let mut counts = vec![1, 2, cfg.cores];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The cases [`run`] runs: one per row.
pub fn case_count(cfg: &Config) -> usize {
    producers(cfg).len()
}

/// Buffers each producer makes per run.
pub fn iterations(cfg: &Config) -> usize {
    cfg.scaled(4_000_000, 1000)
}

/// What each producer does: ringal's fixed 1 KiB row, 64 buffers held.
pub fn shape(cfg: &Config) -> Shape {
    Shape::published(iterations(cfg), 1024, 64, false)
}

/// The competitors of the row of `n` producers, in column order.
pub fn runners(n: usize, shape: Shape, d: &[u8]) -> Vec<Runner<'_>> {
    let mut r: Vec<Runner<'_>> = vec![runner::<buffers::Ringal>("ringal", n, shape, d)];
    #[cfg(feature = "ringmem-rows")]
    {
        r.push(runner::<buffers::Ringmem>("ringmem", n, shape, d));
        r.push(runner::<buffers::RingmemWait>(
            "ringmem (wait)",
            n,
            shape,
            d,
        ));
    }
    r.push(runner::<buffers::SysVec>("Vec (glibc)", n, shape, d));
    r.push(runner::<buffers::MiVec>("Vec (mimalloc)", n, shape, d));
    r.push((
        "Vec (mimalloc global)".into(),
        Box::new(move || buffers::mimalloc_child(n, shape)),
    ));
    r.push(runner::<buffers::Bounded>("bounded control", n, shape, d));
    r.push(runner::<buffers::Control>("control", n, shape, d));
    r
}

/// Scenario 6.
pub fn run(cfg: &Config) -> Table {
    let data = random_bytes(1024);
    let shape = shape(cfg);
    let columns: Vec<String> = runners(1, shape, &data).into_iter().map(|r| r.0).collect();
    let iterations = shape.iterations;
    let mut t = Table::new(
        format!("many threads: each producer its own ring, frees on its consumer thread ({} buffers of ≤ 1 KiB per producer)", thousands(iterations)),
        &["producers", "threads"],
        &columns,
        Unit::Mops,
    )
    .baseline("Vec (glibc)");
    t.wait_columns = ["ringal", "ringmem", "bounded control"]
        .iter()
        .filter_map(|n| columns.iter().position(|c| c == n))
        .collect();
    for n in producers(cfg) {
        crate::progress::case(&format!("many threads: {n} producers"));
        let stats = measure(
            cfg.reps,
            (n * iterations) as f64,
            &mut runners(n, shape, &data),
        );
        t.rows.push(Row {
            params: vec![n.to_string(), (2 * n).to_string()],
            cells: stats,
        });
    }
    t.notes = vec![
        "Millions of buffers per second over all producers (higher is better), median of the repetitions, ratio against `Vec (glibc)`; \
         min–max in small print. Each producer has its own consumer thread, so N producers run 2N threads."
            .into(),
        format!("This machine has {} CPUs: rows beyond {} producers oversubscribe it.", cfg.cores, cfg.cores / 2),
        "waits: median, summed over producers, of the times a ring (or the bounded control's next slot) was full and the \
         producer yielded."
            .into(),
        "`Vec (mimalloc)`: allocator-api2 `Vec<u8, Mi>` in this process; `Vec (mimalloc global)`: the same loop in a child process \
         with mimalloc as `#[global_allocator]`."
            .into(),
        buffers::BOUNDED_NOTE.into(),
        buffers::CPU_NOTE.into(),
    ];
    if cfg!(feature = "ringmem-rows") {
        t.notes.push(
            "`ringmem (wait)`: ringmem with its built-in wait (`fixed_wait`) instead of the hand-rolled spin, as in the \
             ringal tables."
                .into(),
        );
    }
    t
}
