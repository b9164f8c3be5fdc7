//! Scenario 3, shared_arena's benchmarks (`benches/mempool.rs`, criterion):
//! - "SingleAlloc": `iter_with_large_drop(|| arena.alloc(MyStruct::default()))`
//!   on a long-lived arena — it times the allocation only, criterion drops the
//!   handles outside the timing;
//! - "Benchmark/n": a fresh arena `with_capacity(n)` per sample, n allocations
//!   pushed into a pre-sized `Vec`, drops again outside the timing, n = 1 and
//!   10,000 … 100,000;
//!
//! plus what a user pays in practice: allocate + drop one object, and a churn
//! case (1,024 objects alive, replaced in random order).

use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

use crate::harness::{
    measure, measure_in_children, thousands, Config, Mi, Rng, Row, Runner, Sample, Stats, Table,
    Unit,
};

/// A small object like shared_arena's bench struct (three words).
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // payload: written by every competitor, read by none
pub struct Obj {
    /// An optional word.
    pub a: Option<usize>,
    /// A static string.
    pub b: &'static str,
    /// A word.
    pub c: usize,
}

/// The object of iteration `i`. Only the counter goes through `black_box`: a whole
/// `black_box(Obj)` is spilled to the stack as three stores and read back as two
/// 16-byte loads, one of which spans two stores and cannot be forwarded; that stall
/// (about 10 cycles here, measured with `perf annotate`) then dominated every column,
/// the control included.
#[inline(always)]
fn obj(i: usize) -> Obj {
    Obj {
        c: black_box(i),
        ..Obj::default()
    }
}

impl Default for Obj {
    fn default() -> Self {
        Obj {
            a: None,
            b: "hello",
            c: 90_909,
        }
    }
}

/// A typed allocator for the loops below: every competitor runs the same code.
pub trait Objs {
    /// The owning handle; dropping it frees the slot.
    type H;
    /// An allocator sized for `cap` live objects (where the API takes a size).
    fn with_capacity(cap: usize) -> Self;
    /// Allocates one object.
    fn alloc(&self, v: Obj) -> Self::H;
}

macro_rules! peer_objs {
    ($name:ident, $ty:ty, $h:ty) => {
        /// A shared_arena allocator.
        pub struct $name($ty);
        impl Objs for $name {
            type H = $h;
            fn with_capacity(cap: usize) -> Self {
                $name(<$ty>::with_capacity(cap))
            }
            #[inline]
            fn alloc(&self, v: Obj) -> Self::H {
                self.0.alloc(v)
            }
        }
    };
}

peer_objs!(
    PeerShared,
    shared_arena::SharedArena<Obj>,
    shared_arena::ArenaBox<Obj>
);
peer_objs!(
    PeerArena,
    shared_arena::Arena<Obj>,
    shared_arena::ArenaBox<Obj>
);
peer_objs!(
    PeerPool,
    shared_arena::Pool<Obj>,
    shared_arena::PoolBox<Obj>
);

#[cfg(feature = "ringmem-slab-rows")]
peer_objs!(
    MemShared,
    ringmem::slab::SharedArena<Obj>,
    ringmem::slab::ArenaBox<Obj>
);
#[cfg(feature = "ringmem-slab-rows")]
peer_objs!(
    MemArena,
    ringmem::slab::Arena<Obj>,
    ringmem::slab::ArenaBox<Obj>
);
#[cfg(feature = "ringmem-slab-rows")]
peer_objs!(
    MemPool,
    ringmem::slab::Pool<Obj>,
    ringmem::slab::PoolBox<Obj>
);

/// `Box` on the system allocator.
pub struct SysBox;
impl Objs for SysBox {
    type H = Box<Obj>;
    fn with_capacity(_: usize) -> Self {
        SysBox
    }
    #[inline]
    fn alloc(&self, v: Obj) -> Self::H {
        Box::new(v)
    }
}

/// allocator-api2's `Box<Obj, Mi>`: mimalloc called directly.
pub struct MiBox;
impl Objs for MiBox {
    type H = allocator_api2_02::boxed::Box<Obj, Mi>;
    fn with_capacity(_: usize) -> Self {
        MiBox
    }
    #[inline]
    fn alloc(&self, v: Obj) -> Self::H {
        allocator_api2_02::boxed::Box::new_in(v, Mi)
    }
}

/// The floor: writes into the next slot of one preallocated array; the handle is an index.
/// The long-lived one of each case is sized for the objects the case keeps alive (see
/// [`control_slots`]), as an allocator that reuses freed slots would be.
pub struct Control {
    slots: Box<[Cell<Obj>]>,
    next: Cell<usize>,
}
impl Objs for Control {
    type H = usize;
    fn with_capacity(cap: usize) -> Self {
        Control::with_slots(cap.max(1024))
    }
    #[inline]
    fn alloc(&self, v: Obj) -> usize {
        let i = self.next.get();
        self.slots[i].set(v);
        self.next
            .set(if i + 1 == self.slots.len() { 0 } else { i + 1 });
        i
    }
}
impl Control {
    /// A control of `n` slots (at least one).
    fn with_slots(n: usize) -> Self {
        Control {
            slots: (0..n.max(1)).map(|_| Cell::new(Obj::default())).collect(),
            next: Cell::new(0),
        }
    }
}

/// Which loop a runner executes.
#[derive(Clone, Copy)]
enum Case {
    /// Published SingleAlloc: `k` allocations timed, drops not timed, warm allocator.
    AllocOnly(usize),
    /// `k` × allocate and drop at once.
    AllocDrop(usize),
    /// Published Benchmark/n: fresh allocator of capacity n, n allocations timed.
    Fresh(usize),
    /// 1,024 alive, `k` replacements at random positions.
    Churn(usize),
}

fn run_case<A: Objs>(a: &A, case: Case, held: &mut Vec<A::H>) -> Sample {
    match case {
        Case::AllocOnly(k) => {
            let start = Instant::now();
            for i in 0..k {
                held.push(a.alloc(obj(i)));
            }
            let t = start.elapsed();
            held.clear();
            Sample::timed(t)
        }
        Case::AllocDrop(k) => {
            let start = Instant::now();
            for i in 0..k {
                let h = a.alloc(obj(i));
                black_box(&h);
                drop(h);
            }
            Sample::timed(start.elapsed())
        }
        Case::Fresh(n) => {
            // Small n: time `m` fresh allocators back to back (all created before the
            // clock starts) so that the clock's resolution does not dominate.
            let m = (10_000 / n).max(1);
            let fresh: Vec<A> = (0..m).map(|_| A::with_capacity(n)).collect();
            let mut v = Vec::with_capacity(n * m);
            let start = Instant::now();
            for f in &fresh {
                for i in 0..n {
                    v.push(f.alloc(obj(i)));
                }
            }
            let t = start.elapsed() / m as u32;
            drop(v);
            drop(fresh);
            Sample::timed(t)
        }
        Case::Churn(k) => {
            held.clear();
            for _ in 0..1024 {
                held.push(a.alloc(Obj::default()));
            }
            let mut rng = Rng::new(77);
            let start = Instant::now();
            for j in 0..k {
                let i = (rng.next_u64() % 1024) as usize;
                held[i] = a.alloc(obj(j));
            }
            let t = start.elapsed();
            held.clear();
            Sample::timed(t)
        }
    }
}

/// The long-lived control's slots for `case` run with capacity `cap`: as many as the
/// case keeps alive at once. Allocate + drop keeps one, so the control writes one
/// cache-resident slot, as every pool does that reuses the slot just freed; with a slot
/// per iteration (2,000,000 × 24 bytes) it measured memory bandwidth instead (5.6 ns
/// per object, three times the pools' time, on 2026-11-24). Churn keeps 1,024. The
/// other cases keep at least 1,024 slots, as before (Benchmark/n makes its own fresh
/// controls with `with_capacity`).
fn control_slots(case: Case, cap: usize) -> usize {
    match case {
        Case::AllocDrop(_) => 1,
        Case::Churn(_) => 1024,
        Case::AllocOnly(_) | Case::Fresh(_) => cap.max(1024),
    }
}

fn runner<'a, A: Objs + 'a>(name: &str, case: Case, cap: usize) -> Runner<'a> {
    runner_of(name, case, A::with_capacity(cap), cap)
}

fn runner_of<'a, A: Objs + 'a>(name: &str, case: Case, a: A, cap: usize) -> Runner<'a> {
    let mut held: Vec<A::H> = Vec::with_capacity(cap.max(1024));
    (
        name.to_string(),
        Box::new(move || Some(run_case(&a, case, &mut held))),
    )
}

fn columns() -> Vec<String> {
    let mut c: Vec<String> = ["SharedArena", "Arena", "Pool"].map(String::from).to_vec();
    if cfg!(feature = "ringmem-slab-rows") {
        c.extend(["ringmem SharedArena", "ringmem Arena", "ringmem Pool"].map(String::from));
    }
    c.extend(["Box (glibc)", "Box (mimalloc)", "control"].map(String::from));
    c
}

fn runners<'a>(case: Case, cap: usize) -> Vec<Runner<'a>> {
    #[allow(unused_mut)]
    let mut r: Vec<Runner<'a>> = vec![
        runner::<PeerShared>("SharedArena", case, cap),
        runner::<PeerArena>("Arena", case, cap),
        runner::<PeerPool>("Pool", case, cap),
    ];
    #[cfg(feature = "ringmem-slab-rows")]
    r.extend([
        runner::<MemShared>("ringmem SharedArena", case, cap),
        runner::<MemArena>("ringmem Arena", case, cap),
        runner::<MemPool>("ringmem Pool", case, cap),
    ]);
    r.push(runner::<SysBox>("Box (glibc)", case, cap));
    r.push(runner::<MiBox>("Box (mimalloc)", case, cap));
    r.push(runner_of(
        "control",
        case,
        Control::with_slots(control_slots(case, cap)),
        cap,
    ));
    r
}

/// The per-object rows come first in [`cases`]: this many.
const PER_OBJECT: usize = 3;

/// Every row of both tables, in order: label, case, the capacity its allocators are
/// made with, and the divisor of a run's time.
fn cases(cfg: &Config) -> Vec<(String, Case, usize, f64)> {
    let k = cfg.scaled(2_000_000, 200_000);
    let mut rows: Vec<(String, Case, usize, f64)> = [
        (
            "SingleAlloc (published: allocation only, drops untimed)",
            Case::AllocOnly(k),
        ),
        ("allocate + drop one object", Case::AllocDrop(k)),
        ("churn: 1,024 alive, replace at random", Case::Churn(k)),
    ]
    .into_iter()
    .map(|(label, case)| (label.to_string(), case, k, k as f64))
    .collect();
    let ns: Vec<usize> = if cfg.scale >= 1.0 {
        (0..=10).map(|i| (i * 10_000).max(1)).collect()
    } else {
        vec![1, 10_000, 50_000, 100_000]
    };
    rows.extend(
        ns.into_iter()
            .map(|n| (thousands(n), Case::Fresh(n), n, 1.0)),
    );
    rows
}

/// One run of row `row` (of [`cases`]), column `col`, in a child process.
pub fn child(cfg: &Config, row: usize, col: usize) -> Option<Sample> {
    let (_, case, cap, _) = *cases(cfg).get(row)?;
    let mut r = runners(case, cap);
    (r.get_mut(col)?.1)()
}

/// The cells of row `row` (of [`cases`]): in this process, or with `--procs` in child
/// processes for the rows whose memory stays warm in a short-lived process (allocate +
/// drop, churn). SingleAlloc (2,000,000 objects) and Benchmark/n (fresh allocators)
/// first-touch tens of megabytes that a fresh process gets from the kernel, page fault
/// by page fault, where a long-running one reuses its heap: in child processes they
/// took twice their in-process time, and stay in this process.
fn timings(cfg: &Config, row: usize, case: Case, cap: usize, per: f64) -> Vec<Option<Stats>> {
    if cfg.procs > 0 && matches!(case, Case::AllocDrop(_) | Case::Churn(_)) {
        measure_in_children(cfg, "shared-arena", row, columns().len(), per)
    } else {
        measure(cfg.reps, per, &mut runners(case, cap))
    }
}

/// The cases [`run`] runs: the rows of both tables.
pub fn case_count(cfg: &Config) -> usize {
    cases(cfg).len()
}

/// Scenario 3: two tables, per-object costs and the published n-curve.
pub fn run(cfg: &Config) -> Vec<Table> {
    let k = cfg.scaled(2_000_000, 200_000);
    let mut per_obj = Table::new(
        format!(
            "shared_arena: cost per object ({} objects per run)",
            thousands(k)
        ),
        &["case"],
        &columns(),
        Unit::Auto,
    )
    .baseline("Box (glibc)");
    let all = cases(cfg);
    for (row, (label, case, cap, per)) in all.iter().cloned().enumerate().take(PER_OBJECT) {
        crate::progress::case(&format!("shared_arena: {label}"));
        let stats = timings(cfg, row, case, cap, per);
        per_obj.rows.push(Row {
            params: vec![label],
            cells: stats,
        });
    }
    per_obj.notes = vec![
        "Time per object: median of the repetitions, speed-up against `Box (glibc)`, min–max in small print.".into(),
        "shared_arena's SingleAlloc uses criterion's `iter_with_large_drop`, so its published per-allocation time excludes the drop; \
         here the handles are collected in a pre-sized `Vec` and dropped after the clock stops, from a warm, long-lived allocator."
            .into(),
        "`Box (mimalloc)` is allocator-api2's `Box<T, Mi>` calling mimalloc directly. `control` writes into the next slot of a preallocated array \
         (no allocator): one slot in allocate + drop, 1,024 in churn, one per object in SingleAlloc."
            .into(),
    ];
    if cfg.procs > 0 {
        per_obj.notes.push(format!(
            "allocate + drop and churn: {} child processes per cell, one timed run each after an untimed one (median and min–max \
             over the processes); SingleAlloc: {} repetitions in this process.",
            cfg.procs, cfg.reps
        ));
    }
    if !cfg!(feature = "ringmem-slab-rows") {
        per_obj.notes.push("ringmem rows: pending (`ringmem::slab` does not export its pools yet; feature `ringmem-slab-rows`).".into());
    }

    let mut curve = Table::new(
        "shared_arena: Benchmark/n — n allocations from a fresh allocator of capacity n (drops untimed)",
        &["n"],
        &columns(),
        Unit::Auto,
    )
    .baseline("Box (glibc)");
    for (row, (label, case, n, per)) in all.into_iter().enumerate().skip(PER_OBJECT) {
        crate::progress::case(&format!("shared_arena: fresh n = {n}"));
        let stats = timings(cfg, row, case, n, per);
        curve.rows.push(Row {
            params: vec![label],
            cells: stats,
        });
    }
    curve.notes = vec![
        "Time per run (n allocations). The allocator is created and the handles dropped outside the timing, as published; \
         the quick mode runs n = 1, 10k, 50k, 100k, the full mode every published n. For n < 10,000 one run times \
         10,000 / n fresh allocators back to back and reports the average, so the clock's resolution does not dominate."
            .into(),
    ];
    vec![per_obj, curve]
}
