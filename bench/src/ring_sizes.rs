//! How big a ring should be: ringal's fixed 64 B and 1 KiB rows (64 buffers held)
//! with rings of 2, 4 and 8 × max buffers × size, for ringal, ringmem, the
//! no-allocation control and the bounded control (the control's slots, waited for
//! when still held: what any ring of that capacity pays for being bounded),
//! `Vec (glibc)` being the reference of the speed-ups.

use crate::buffers::{self, ByteBufs, Shape};
use crate::harness::{measure, random_bytes, thousands, Config, Row, Runner, Table, Unit};
use crate::ringal_fixed::{variant_shape, ROWS};

/// The rows of ringal's fixed table swept: 64 B × 64 held and 1 KiB × 64 held.
const SWEPT_ROWS: [usize; 2] = [0, 1];

/// Ring capacities, in units of max buffers × size (ringal's benchmark uses 2).
const FACTORS: [usize; 3] = [2, 4, 8];

/// The sweep runs the published iterations divided by this (the main job's time).
const DIVISOR: usize = 2;

/// Row `row` of ringal's fixed table with a ring of `factor` × max buffers × size.
fn swept(cfg: &Config, row: usize, factor: usize) -> Shape {
    let mut s = variant_shape(cfg, row, false, buffers::Variant::Published);
    s.iterations = (s.iterations / DIVISOR).max(1000);
    s.ring_factor = factor;
    s
}

fn runner<'a, B: ByteBufs + 'a>(name: &str, shape: Shape, data: &'a [u8]) -> Runner<'a> {
    (
        name.to_string(),
        Box::new(move || Some(buffers::pipeline::<B>(shape, data))),
    )
}

/// The competitors, in column order.
fn runners(shape: Shape, d: &[u8]) -> Vec<Runner<'_>> {
    let mut r: Vec<Runner<'_>> = vec![runner::<buffers::Ringal>("ringal", shape, d)];
    #[cfg(feature = "ringmem-rows")]
    {
        r.push(runner::<buffers::Ringmem>("ringmem", shape, d));
        r.push(runner::<buffers::RingmemWait>("ringmem (wait)", shape, d));
        r.push(runner::<buffers::RingmemWaitTimeout>(
            "ringmem (wait_timeout)",
            shape,
            d,
        ));
    }
    r.push(runner::<buffers::SysVec>("Vec (glibc)", shape, d));
    r.push(runner::<buffers::Bounded>("bounded control", shape, d));
    r.push(runner::<buffers::Control>("control", shape, d));
    r
}

/// The rows of the capacity sweep's table.
pub const CASES: usize = SWEPT_ROWS.len() * FACTORS.len();

/// The capacity sweep's table.
pub fn table(cfg: &Config) -> Table {
    let data = random_bytes(ROWS[1].1);
    let shape0 = swept(cfg, 0, FACTORS[0]);
    let columns: Vec<String> = runners(shape0, &data).into_iter().map(|r| r.0).collect();
    let mut t = Table::new(
        format!(
            "ringal fixed: ring capacity sweep (iterations × {} / {DIVISOR})",
            cfg.factor()
        ),
        &["Buffer Size", "Max Buffers", "Ring"],
        &columns,
        Unit::Ms,
    )
    .baseline("Vec (glibc)");
    t.wait_columns = ["ringal", "ringmem", "bounded control"]
        .iter()
        .filter_map(|n| columns.iter().position(|c| c == n))
        .collect();
    for row in SWEPT_ROWS {
        for factor in FACTORS {
            let shape = swept(cfg, row, factor);
            crate::progress::case(&format!(
                "ring capacity sweep: {} B, {} held, ring {factor}×",
                shape.size, shape.max_buffers
            ));
            t.rows.push(Row {
                params: vec![
                    thousands(shape.size),
                    thousands(shape.max_buffers),
                    format!("{factor}× ({} KiB)", thousands(shape.capacity() / 1024)),
                ],
                cells: measure(cfg.reps, 1.0, &mut runners(shape, &data)),
            });
        }
    }
    t.notes = vec![
        format!(
            "ringal's published fixed loop (random lengths, the hand-rolled spin on a full ring), {} buffers per run, with the ring \
             (and the control's block) at 2, 4 and 8 × max buffers × buffer size; ringal's table uses 2×. \
             `Vec (glibc)` has no ring: it is the same loop at every size, the reference of the speed-ups.",
            thousands(shape0.iterations)
        ),
        "Time per run in ms, median of the repetitions, min–max in small print; waits as in the fixed table. \
         `ringmem (wait)` uses `fixed_wait`, `ringmem (wait_timeout)` `fixed_wait_timeout(size, 10 s)` (see the fixed table)."
            .into(),
        buffers::BOUNDED_NOTE.into(),
    ];
    t
}
