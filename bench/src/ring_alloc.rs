//! Scenario 5, ring-alloc's `benches/bench.rs` (criterion, allocator-api2):
//! - "warm-up / alloc 4 bytes x 65535": 65,535 `allocate(Layout::new::<u32>())`
//!   never freed, then the allocator's reset, per iteration;
//! - "allocation / alloc": one `allocate` + `deallocate` of a `u32`;
//! - "vec / push x n" and "vec / reserve_exact(1) x n" for n in 10, 146, 2,134,
//!   17,453: an allocator-api2 `Vec` built in the allocator, dropped, allocator
//!   reset, per iteration (the loop calls `reserve_exact(i)` on an empty `Vec`,
//!   so the capacity grows by one element per call).
//!
//! - ringmem's own row, "free 4 bytes x 65535 in order": the warm-up's allocations
//!   (untimed), then their deallocation in the order they were made (timed), the way
//!   a queue is drained.
//!
//! Same loops against ring-alloc's `RingAlloc` and `OneRingAlloc`, `bumpalo::Bump`,
//! `blink_alloc::BlinkAlloc` (allocator-api2 0.4), `Global` and mimalloc.

use std::hint::black_box;
use std::time::Instant;

use crate::harness::{measure, Config, Mi, Row, Runner, Sample, Table, Unit};

/// ring-alloc's vector sizes.
const VEC_SIZES: [usize; 4] = [10, 146, 2134, 17_453];
/// ring-alloc's warm-up count.
const WARM_UP: usize = 65_535;

/// Which loop to run, with its iteration count.
#[derive(Clone, Copy)]
pub enum Case {
    /// 65,535 × 4 bytes, then reset; `k` iterations.
    WarmUp(usize),
    /// `k` × allocate + deallocate one `u32`.
    Alloc(usize),
    /// `k` × (push n `usize`s, drop, reset).
    Push(usize, usize),
    /// `k` × (reserve_exact(i) for i in 0..n on a `Vec<u32>`, drop, reset).
    Reserve(usize, usize),
    /// `k` × (65,535 × 4 bytes, freed in order (timed), reset).
    FreeInOrder(usize),
}

macro_rules! loops {
    ($module:ident, $api:ident) => {
        /// The loops over one allocator-api2 generation.
        pub mod $module {
            use super::*;
            use $api::alloc::{Allocator, Layout};
            use $api::vec::Vec as AVec;

            /// An allocator under test and its reset (as each peer's bench resets it).
            pub trait Subject {
                /// The allocator handle the loops allocate from.
                type A<'a>: Allocator
                where
                    Self: 'a;
                /// The handle.
                fn alloc(&self) -> Self::A<'_>;
                /// Between iterations: free everything at once where the allocator can.
                fn reset(&mut self);
            }

            /// One run of `case` against `s`. Each case's loop is its own function, so
            /// that the register allocation of one loop does not depend on the others
            /// (in one function, the counter of the `alloc` loop was kept on the stack
            /// for some allocators and in a register for others).
            pub fn run<S: Subject>(
                s: &mut S,
                case: Case,
                ptrs: &mut Vec<std::ptr::NonNull<u8>>,
            ) -> Sample {
                let time = match case {
                    Case::WarmUp(k) => warm_up(s, k, ptrs),
                    Case::Alloc(k) => alloc_free(s, k),
                    Case::Push(n, k) => push(s, n, k),
                    Case::Reserve(n, k) => reserve(s, n, k),
                    Case::FreeInOrder(k) => free_in_order(s, k, ptrs),
                };
                Sample::timed(time)
            }

            /// The warm-up's allocations: [`WARM_UP`] `u32`s, their pointers in `ptrs`.
            #[inline(always)]
            fn fill<S: Subject>(s: &mut S, ptrs: &mut Vec<std::ptr::NonNull<u8>>) {
                let l = Layout::new::<u32>();
                let a = s.alloc();
                for _ in 0..WARM_UP {
                    ptrs.push(black_box(a.allocate(l).unwrap()).cast());
                }
            }

            #[inline(never)]
            fn warm_up<S: Subject>(
                s: &mut S,
                k: usize,
                ptrs: &mut Vec<std::ptr::NonNull<u8>>,
            ) -> std::time::Duration {
                let l = Layout::new::<u32>();
                let mut time = std::time::Duration::ZERO;
                for _ in 0..k {
                    let start = Instant::now();
                    fill(s, ptrs);
                    time += start.elapsed();
                    {
                        let a = s.alloc();
                        for p in ptrs.drain(..) {
                            // SAFETY: `p` came from `a.allocate(l)` above and is freed once.
                            unsafe { a.deallocate(p, l) };
                        }
                    }
                    let start = Instant::now();
                    s.reset();
                    time += start.elapsed();
                }
                time
            }

            #[inline(never)]
            fn free_in_order<S: Subject>(
                s: &mut S,
                k: usize,
                ptrs: &mut Vec<std::ptr::NonNull<u8>>,
            ) -> std::time::Duration {
                let l = Layout::new::<u32>();
                let mut time = std::time::Duration::ZERO;
                for _ in 0..k {
                    fill(s, ptrs);
                    let start = Instant::now();
                    {
                        let a = s.alloc();
                        for p in ptrs.drain(..) {
                            // SAFETY: `p` came from `a.allocate(l)` above and is freed once.
                            unsafe { a.deallocate(black_box(p), l) };
                        }
                    }
                    time += start.elapsed();
                    s.reset();
                }
                time
            }

            #[inline(never)]
            fn alloc_free<S: Subject>(s: &mut S, k: usize) -> std::time::Duration {
                let l = Layout::new::<u32>();
                let start = Instant::now();
                let a = s.alloc();
                for _ in 0..k {
                    let p = black_box(a.allocate(l).unwrap());
                    // SAFETY: `p` was just allocated with `l` by `a`.
                    unsafe { a.deallocate(p.cast(), l) };
                }
                start.elapsed()
            }

            #[inline(never)]
            fn push<S: Subject>(s: &mut S, n: usize, k: usize) -> std::time::Duration {
                let start = Instant::now();
                for _ in 0..k {
                    {
                        let mut v = AVec::new_in(s.alloc());
                        for i in 0..n {
                            v.push(i);
                        }
                        black_box(&v);
                    }
                    s.reset();
                }
                start.elapsed()
            }

            #[inline(never)]
            fn reserve<S: Subject>(s: &mut S, n: usize, k: usize) -> std::time::Duration {
                let start = Instant::now();
                for _ in 0..k {
                    {
                        let mut v = AVec::<u32, _>::new_in(s.alloc());
                        for i in 0..n {
                            v.reserve_exact(i);
                        }
                        black_box(&v);
                    }
                    s.reset();
                }
                start.elapsed()
            }
        }
    };
}

loops!(api02, allocator_api2_02);
loops!(api04, allocator_api2_04);

/// `Global`: the system allocator.
pub struct GlobalA;
impl api02::Subject for GlobalA {
    type A<'a> = allocator_api2_02::alloc::Global;
    fn alloc(&self) -> Self::A<'_> {
        allocator_api2_02::alloc::Global
    }
    fn reset(&mut self) {}
}

/// mimalloc through allocator-api2.
pub struct MiA;
impl api02::Subject for MiA {
    type A<'a> = Mi;
    fn alloc(&self) -> Mi {
        Mi
    }
    fn reset(&mut self) {}
}

/// ring-alloc's thread-local `RingAlloc`; its bench resets it by making a new one.
pub struct Ring(ring_alloc::RingAlloc);
impl api02::Subject for Ring {
    type A<'a> = &'a ring_alloc::RingAlloc;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {}
}

/// `RingAlloc` in the warm-up case, replaced by a new one at each reset (as published).
pub struct RingFresh(ring_alloc::RingAlloc);
impl api02::Subject for RingFresh {
    type A<'a> = &'a ring_alloc::RingAlloc;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {
        self.0 = ring_alloc::RingAlloc::new();
    }
}

/// ring-alloc's global `OneRingAlloc` (thread-local rings, chunks shared globally).
pub struct OneRing;
impl api02::Subject for OneRing {
    type A<'a> = ring_alloc::OneRingAlloc;
    fn alloc(&self) -> Self::A<'_> {
        ring_alloc::OneRingAlloc
    }
    fn reset(&mut self) {}
}

/// `bumpalo::Bump`, reset between iterations.
pub struct Bump(bumpalo::Bump);
impl api02::Subject for Bump {
    type A<'a> = &'a bumpalo::Bump;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// `blink_alloc::BlinkAlloc` (allocator-api2 0.4), reset between iterations.
pub struct Blink(blink_alloc::BlinkAlloc);
impl api04::Subject for Blink {
    type A<'a> = &'a blink_alloc::BlinkAlloc;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// ringmem's `RingAlloc` (an `Rc` handle to a 1 MiB ring that grows by blocks); as
/// ring-alloc's `RingAlloc`, replaced by a new one at each warm-up reset.
#[cfg(feature = "ringmem-rows")]
pub struct RmRing(ringmem::RingAlloc, bool);
#[cfg(feature = "ringmem-rows")]
impl api02::Subject for RmRing {
    type A<'a> = &'a ringmem::RingAlloc;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {
        if self.1 {
            self.0 = ringmem::RingAlloc::new();
        }
    }
}

/// ringmem's `OneRingAlloc` (this thread's ring, 1 MiB, heap when full).
#[cfg(feature = "ringmem-rows")]
pub struct RmOneRing;
#[cfg(feature = "ringmem-rows")]
impl api02::Subject for RmOneRing {
    type A<'a> = ringmem::OneRingAlloc;
    fn alloc(&self) -> Self::A<'_> {
        ringmem::OneRingAlloc
    }
    fn reset(&mut self) {}
}

/// `&ringmem::Ring`: a ring of 1 MiB blocks that grows by blocks, made once per
/// competitor (as the peers' allocators are); nothing to reset (everything was deallocated).
#[cfg(feature = "ringmem-rows")]
pub struct RmRef(ringmem::Ring);
#[cfg(feature = "ringmem-rows")]
impl RmRef {
    fn new() -> Self {
        RmRef(
            ringmem::Ring::builder()
                .capacity(1 << 20)
                .when_full(ringmem::WhenFull::Grow)
                .build()
                .expect("a 1 MiB ring"),
        )
    }
}
#[cfg(feature = "ringmem-rows")]
impl api02::Subject for RmRef {
    type A<'a> = &'a ringmem::Ring;
    fn alloc(&self) -> Self::A<'_> {
        &self.0
    }
    fn reset(&mut self) {}
}

/// The control: a bump pointer over one preallocated 1 MiB block, with nothing else (no
/// chunks, headers, counts or growth by blocks); freeing or resizing the latest block
/// moves the pointer back or on, the reset empties the block. Its state sits behind an
/// opaque reference, like every competitor's, so it shows what is left of these loops
/// when allocation costs next to nothing (no strict floor: its own time moves with the
/// binary's layout). Not an allocator anyone could use (it fails
/// once the block is full), so it has no part in the bars.
pub struct Control {
    block: Box<[std::mem::MaybeUninit<u8>]>,
    /// The next free byte, in `block`.
    cur: std::cell::Cell<*mut u8>,
}

impl Control {
    /// Bytes in the block: the largest row (the warm-up's 65,535 × 4 bytes, or a `Vec`
    /// of 17,453 `usize`s at its doubled capacity, grown in place) fits.
    const BYTES: usize = 1 << 20;

    fn new() -> Self {
        let mut block = Box::new_uninit_slice(Self::BYTES);
        let cur = std::cell::Cell::new(block.as_mut_ptr().cast());
        Control { block, cur }
    }

    /// Whether `[p, p + bytes)` ends inside the block (`p` at or after its start; an
    /// alignment may have moved `p` past its end).
    fn fits(&self, p: *mut u8, bytes: usize) -> bool {
        let end = self.block.as_ptr() as usize + Self::BYTES;
        end.checked_sub(p as usize)
            .is_some_and(|room| bytes <= room)
    }

    /// Whether `ptr` is the latest block, of `size` bytes.
    fn latest(&self, ptr: std::ptr::NonNull<u8>, size: usize) -> bool {
        ptr.as_ptr().wrapping_add(size) == self.cur.get()
    }
}

// SAFETY: blocks are disjoint ranges of `block` (the pointer only moves back over the
// latest block, which its owner gives up or resizes), valid until deallocated or reset
// (`reset` takes `&mut self`, so no block is alive then), and `block` lives as long as
// the allocator.
unsafe impl allocator_api2_02::alloc::Allocator for Control {
    #[inline]
    fn allocate(
        &self,
        l: allocator_api2_02::alloc::Layout,
    ) -> Result<std::ptr::NonNull<[u8]>, allocator_api2_02::alloc::AllocError> {
        let cur = self.cur.get();
        let p = cur.wrapping_add((cur as usize).wrapping_neg() & (l.align() - 1));
        if !self.fits(p, l.size()) {
            return Err(allocator_api2_02::alloc::AllocError);
        }
        self.cur.set(p.wrapping_add(l.size()));
        // SAFETY: inside the block (checked above), so not null.
        let p = unsafe { std::ptr::NonNull::new_unchecked(p) };
        Ok(std::ptr::NonNull::slice_from_raw_parts(p, l.size()))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, l: allocator_api2_02::alloc::Layout) {
        if self.latest(ptr, l.size()) {
            self.cur.set(ptr.as_ptr());
        }
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: std::ptr::NonNull<u8>,
        old: allocator_api2_02::alloc::Layout,
        new: allocator_api2_02::alloc::Layout,
    ) -> Result<std::ptr::NonNull<[u8]>, allocator_api2_02::alloc::AllocError> {
        let aligned = ptr.as_ptr() as usize & (new.align() - 1) == 0;
        if aligned && self.latest(ptr, old.size()) && self.fits(ptr.as_ptr(), new.size()) {
            self.cur.set(ptr.as_ptr().wrapping_add(new.size()));
            return Ok(std::ptr::NonNull::slice_from_raw_parts(ptr, new.size()));
        }
        let p = self.allocate(new)?;
        // SAFETY: the old block holds `old.size()` bytes and the new one is distinct and
        // at least as long (the `grow` contract).
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.as_ptr(), p.as_ptr().cast(), old.size());
            self.deallocate(ptr, old);
        }
        Ok(p)
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: std::ptr::NonNull<u8>,
        old: allocator_api2_02::alloc::Layout,
        new: allocator_api2_02::alloc::Layout,
    ) -> Result<std::ptr::NonNull<[u8]>, allocator_api2_02::alloc::AllocError> {
        if ptr.as_ptr() as usize & (new.align() - 1) != 0 {
            return Err(allocator_api2_02::alloc::AllocError);
        }
        if self.latest(ptr, old.size()) {
            self.cur.set(ptr.as_ptr().wrapping_add(new.size()));
        }
        Ok(std::ptr::NonNull::slice_from_raw_parts(ptr, new.size()))
    }
}

impl api02::Subject for Control {
    type A<'a> = &'a Control;
    fn alloc(&self) -> Self::A<'_> {
        // Behind a reference the loop cannot see through, as every allocator's state is
        // (theirs is on the heap): without this, the compiler kept the control's
        // pointer in a register for a whole loop (the loops take the subject as
        // `&mut`), and it measured 56 µs in the warm-up where a bump pointer in memory
        // takes about 65.
        black_box(self)
    }
    fn reset(&mut self) {
        self.cur.set(self.block.as_mut_ptr().cast());
    }
}

fn r02<'a, S: api02::Subject + 'a>(name: &str, mut s: S, case: Case) -> Runner<'a> {
    let mut ptrs = Vec::with_capacity(WARM_UP);
    (
        name.to_string(),
        Box::new(move || Some(api02::run(&mut s, case, &mut ptrs))),
    )
}

fn r04<'a, S: api04::Subject + 'a>(name: &str, mut s: S, case: Case) -> Runner<'a> {
    let mut ptrs = Vec::with_capacity(WARM_UP);
    (
        name.to_string(),
        Box::new(move || Some(api04::run(&mut s, case, &mut ptrs))),
    )
}

/// The competitor columns, in order.
pub fn columns() -> Vec<String> {
    let mut c: Vec<String> = ["Global (glibc)", "mimalloc"].map(String::from).to_vec();
    if cfg!(feature = "ringmem-rows") {
        c.extend(
            [
                "ringmem::RingAlloc",
                "ringmem::OneRingAlloc",
                "&ringmem::Ring",
            ]
            .map(String::from),
        );
    }
    c.extend(
        [
            "ring_alloc::RingAlloc",
            "ring_alloc::OneRingAlloc",
            "bumpalo::Bump",
            "blink_alloc::BlinkAlloc",
            "control",
        ]
        .map(String::from),
    );
    c
}

fn runners<'a>(case: Case) -> Vec<Runner<'a>> {
    let warm = matches!(case, Case::WarmUp(_));
    let ring: Runner<'a> = if warm {
        r02(
            "ring_alloc::RingAlloc",
            RingFresh(ring_alloc::RingAlloc::new()),
            case,
        )
    } else {
        r02(
            "ring_alloc::RingAlloc",
            Ring(ring_alloc::RingAlloc::new()),
            case,
        )
    };
    let mut r = vec![
        r02("Global (glibc)", GlobalA, case),
        r02("mimalloc", MiA, case),
    ];
    #[cfg(feature = "ringmem-rows")]
    r.extend([
        r02(
            "ringmem::RingAlloc",
            RmRing(ringmem::RingAlloc::new(), warm),
            case,
        ),
        r02("ringmem::OneRingAlloc", RmOneRing, case),
        r02("&ringmem::Ring", RmRef::new(), case),
    ]);
    r.extend([
        ring,
        r02("ring_alloc::OneRingAlloc", OneRing, case),
        r02("bumpalo::Bump", Bump(bumpalo::Bump::new()), case),
        r04(
            "blink_alloc::BlinkAlloc",
            Blink(blink_alloc::BlinkAlloc::new()),
            case,
        ),
        r02("control", Control::new(), case),
    ]);
    debug_assert_eq!(r.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), columns());
    r
}

/// The rows: label, case, iterations per run.
fn cases(cfg: &Config) -> Vec<(String, Case, usize)> {
    let mut cases: Vec<(String, Case, usize)> = Vec::new();
    let k = cfg.scaled(400, 3);
    cases.push((format!("alloc 4 bytes x {WARM_UP}"), Case::WarmUp(k), k));
    let k = cfg.scaled(20_000_000, 10_000);
    cases.push(("alloc".into(), Case::Alloc(k), k));
    for n in VEC_SIZES {
        let k = cfg.scaled(40_000_000 / n, 3);
        cases.push((format!("push x {n}"), Case::Push(n, k), k));
        let k = cfg.scaled(4_000_000 / n, 3);
        cases.push((format!("reserve_exact(1) x {n}"), Case::Reserve(n, k), k));
    }
    // Last, so that the published rows keep their indices (`--rss-child` rows, RSS_ROWS).
    let k = cfg.scaled(400, 3);
    cases.push((
        format!("free 4 bytes x {WARM_UP} in order (ringmem's own)"),
        Case::FreeInOrder(k),
        k,
    ));
    cases
}

/// Rows of the peak-RSS table (indices into [`cases`]): warm-up, push and
/// reserve_exact(1) × 17,453.
const RSS_ROWS: [usize; 3] = [0, 8, 9];

/// One run of row `row`, column `col`, in a child process (peak-RSS table).
pub fn child(cfg: &Config, row: usize, col: usize) -> Option<Sample> {
    let (_, case, _) = *cases(cfg).get(row)?;
    let mut r = runners(case);
    (r.get_mut(col)?.1)()
}

/// The cases [`run`] runs: its rows, then the peak-RSS rows.
pub fn case_count(cfg: &Config) -> usize {
    cases(cfg).len() + if cfg.rss { RSS_ROWS.len() } else { 0 }
}

/// Scenario 5: ring-alloc's three groups in one table.
pub fn run(cfg: &Config) -> Vec<Table> {
    let columns = columns();
    let mut t = Table::new(
        "ring-alloc: warm-up, allocation, vec (time per iteration)",
        &["benchmark"],
        &columns,
        Unit::Auto,
    )
    .baseline("Global (glibc)");
    let cases = cases(cfg);
    for (row, (label, case, k)) in cases.iter().enumerate() {
        crate::progress::case(&format!("ring-alloc: {label} ({k} iterations per run)"));
        let stats = if cfg.procs > 0 {
            crate::harness::measure_in_children(cfg, "ring-alloc", row, columns.len(), *k as f64)
        } else {
            measure(cfg.reps, *k as f64, &mut runners(*case))
        };
        t.rows.push(Row {
            params: vec![format!("`{label}`")],
            cells: stats,
        });
    }
    t.notes = vec![
        "Time per iteration (criterion-table layout: speed-up against `Global`), median of the repetitions, min–max in small print.".into(),
        "warm-up: the published loop never frees the 65,535 allocations (it leaks them on `Global`); here they are deallocated \
         outside the timing, then the allocator's reset is timed as published (`RingAlloc`: a new one; `Bump`/`BlinkAlloc`: `reset()`)."
            .into(),
        "`bumpalo::Bump` needs nightly in ring-alloc's bench; here it runs on stable through bumpalo's `allocator-api2` feature. \
         `BlinkAlloc` implements allocator-api2 0.4, the others 0.2: the same loop code is instantiated for both."
            .into(),
        "`control`: not an allocator to use: a bump pointer over one preallocated 1 MiB block, with no chunks, headers \
         or growth (freeing or resizing the latest block moves the pointer back or on; the reset empties the block), behind an \
         opaque reference like every column: what is left of a row when allocation costs next to nothing. No strict floor: \
         its own time moves with the binary's layout.".into(),
        "free in order (ringmem's own row, not one of ring-alloc's): the warm-up's 65,535 allocations, made untimed, then \
         deallocated in the order they were made (timed), as a queue is drained; the reset is untimed. `bumpalo::Bump`, \
         `BlinkAlloc` and the control free only their latest block, so for them this is a loop of checks: they give the \
         memory back at the reset."
            .into(),
        "`mimalloc`: an allocator-api2 handle calling `mimalloc::MiMalloc`'s `GlobalAlloc` methods (grow = `realloc`).".into(),
        "ringmem (allocator-api2 0.2): `ringmem::RingAlloc::new()` (1 MiB blocks, grows by blocks; in the warm-up replaced by a new \
         one at each reset, as ring-alloc's `RingAlloc`), `ringmem::OneRingAlloc` (this thread's ring: 1 MiB, heap when full; no reset), \
         `&ringmem::Ring` (a `Ring` of 1 MiB blocks with `WhenFull::Grow`, made once like the peers' allocators; no reset)."
            .into(),
    ];
    if cfg.procs > 0 {
        t.notes.push(format!(
            "{} child processes per cell, one timed run each after an untimed one: median and min–max over the processes.",
            cfg.procs
        ));
    }
    let mut tables = vec![t];
    if let Some(rss) = crate::harness::rss_table(
        cfg,
        "ring-alloc",
        "ring-alloc: peak RSS per competitor",
        &columns,
        &RSS_ROWS.map(|i| (cases[i].0.clone(), i)),
    ) {
        tables.push(rss);
    }
    tables
}
