//! The sweep harness: a run without refusals to count an operation's allocations, runs
//! with each of them refused, compared step by step; and the helpers the scenarios
//! share.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use crate::common::faulty::{self, no_leak, refuse_nth};
use crate::common::{fill, holds};
use ringmem::{FixedBufMut, Ring, WhenFull};

/// Bytes of one block of every ring here: small, so that a few buffers fill it and the
/// policies come into play (and Miri stays quick).
pub const CAP: usize = 1024;

/// Every policy a full ring can have.
pub const POLICIES: [WhenFull; 3] = [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow];

/// Bytes to extend buffers with before filling them in place.
pub static ZEROS: [u8; 8192] = [0; 8192];

/// A ring of [`CAP`] bytes under `policy`, built before any refusal is armed.
pub fn ring(policy: WhenFull) -> Ring {
    Ring::builder()
        .capacity(CAP)
        .when_full(policy)
        .build()
        .expect("a ring, nothing refused yet")
}

thread_local! {
    /// The refusal of the run on this thread, for failure messages.
    static REFUSAL: Cell<Option<(u64, bool)>> = const { Cell::new(None) };
    /// A panic on this thread is expected (see [`catch`]): the hook stays quiet.
    static EXPECTING: Cell<bool> = const { Cell::new(false) };
    /// Expected panics on this thread so far.
    static PANICS: Cell<u64> = const { Cell::new(0) };
}

/// Installs (once, outside any armed region, since the hook is boxed) a panic hook that
/// stays quiet for the panics a test provokes on purpose.
pub fn quiet_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if EXPECTING.with(Cell::get) {
                PANICS.with(|p| p.set(p.get() + 1));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs `f`, whose panic is expected, and hands its payload back.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Box<dyn Any + Send>> {
    let was = EXPECTING.with(|e| e.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    EXPECTING.with(|e| e.set(was));
    r
}

/// The message of a panic payload.
pub fn message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "<not a string>"
    }
}

/// `assert!` that cancels this thread's refusals first: with every allocation refused,
/// formatting the message would abort instead of failing the test.
#[track_caller]
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) {
    if !cond {
        faulty::disarm_refusals();
        match REFUSAL.with(Cell::get) {
            Some((k, false)) => panic!("{} (allocation {k} refused)", msg()),
            Some((k, true)) => panic!("{} (allocation {k} and later ones refused)", msg()),
            None => panic!("{} (nothing refused)", msg()),
        }
    }
}

/// Runs `f` and checks that it made no heap allocation.
#[track_caller]
pub fn no_alloc<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let before = faulty::served();
    let r = f();
    let n = faulty::served() - before;
    ensure(n == 0, || format!("{what} allocated {n} times"));
    r
}

/// What the allocator saw while a step ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct Watched {
    /// It refused something.
    pub refused: bool,
    /// Allocations it was asked for (served or refused).
    pub allocs: u64,
}

/// Runs `f` and says what the allocator saw meanwhile.
pub fn watch<T>(f: impl FnOnce() -> T) -> (T, Watched) {
    let (refused, served) = (faulty::refused(), faulty::served());
    let r = f();
    let w = Watched {
        refused: faulty::refused() != refused,
        allocs: faulty::served() - served,
    };
    (r, w)
}

/// The outcome of one step of a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    /// Not attempted: an earlier step did not make the buffer it works on.
    Skipped,
}

pub const MAX_STEPS: usize = 160;

/// The steps of one run, in order, with the allocations each made (an array:
/// recording them must not allocate).
#[derive(Clone, Copy)]
pub struct Outcomes {
    steps: [(&'static str, Outcome, u64); MAX_STEPS],
    n: usize,
}

impl Outcomes {
    /// Allocations per step label, in order of first appearance, with the number of
    /// steps of that label: the injection points of each operation.
    pub fn per_operation(&self) -> Vec<(&'static str, usize, u64)> {
        let mut ops: Vec<(&'static str, usize, u64)> = Vec::new();
        for &(what, outcome, allocs) in &self.steps[..self.n] {
            if outcome == Outcome::Skipped {
                continue;
            }
            match ops.iter_mut().find(|op| op.0 == what) {
                Some(op) => {
                    op.1 += 1;
                    op.2 += allocs;
                }
                None => ops.push((what, 1, allocs)),
            }
        }
        ops
    }
}

/// One run of a scenario. A run with a refusal is compared step by step with the run
/// without one: a step may fail where that one succeeded only if the allocator refused
/// something during the step, and succeed where that one failed only once an earlier
/// refusal changed what the ring holds.
pub struct Run {
    reference: Option<Outcomes>,
    out: Outcomes,
    diverged: bool,
}

impl Run {
    pub fn new(reference: Option<Outcomes>) -> Run {
        Run {
            reference,
            out: Outcomes {
                steps: [("", Outcome::Skipped, 0); MAX_STEPS],
                n: 0,
            },
            diverged: false,
        }
    }

    /// Allocations made by the steps recorded so far (to tell a step's own from those
    /// of the steps nested in it).
    pub fn allocs_recorded(&self) -> u64 {
        self.out.steps[..self.out.n].iter().map(|s| s.2).sum()
    }

    /// Records a step with its outcome and what the allocator saw during it.
    pub fn record(&mut self, what: &'static str, outcome: Outcome, seen: Watched) {
        let refused = seen.refused;
        let i = self.out.n;
        ensure(i < MAX_STEPS, || format!("more than {MAX_STEPS} steps"));
        self.out.steps[i] = (what, outcome, seen.allocs);
        self.out.n += 1;
        let Some(reference) = &self.reference else {
            return;
        };
        let (was_what, was, _) = if i < reference.n {
            reference.steps[i]
        } else {
            ("(none)", Outcome::Skipped, 0)
        };
        ensure(self.diverged || was_what == what, || {
            format!("step {i} is {what}, but {was_what} without a refusal")
        });
        match (outcome, was) {
            (Outcome::Failed, Outcome::Ok) => ensure(refused, || {
                format!("step {i}, {what}: failed with nothing refused")
            }),
            (Outcome::Ok, Outcome::Failed) => ensure(self.diverged, || {
                format!("step {i}, {what}: succeeded where the run without a refusal failed")
            }),
            _ => {}
        }
        self.diverged |= refused;
    }

    /// A step that fails with `None`.
    pub fn step<T>(&mut self, what: &'static str, f: impl FnOnce() -> Option<T>) -> Option<T> {
        let (r, seen) = watch(f);
        let outcome = if r.is_some() {
            Outcome::Ok
        } else {
            Outcome::Failed
        };
        self.record(what, outcome, seen);
        r
    }

    /// A step on a buffer that an earlier step may not have made: skipped without it.
    pub fn step_on<B, T>(
        &mut self,
        what: &'static str,
        b: &mut Option<B>,
        f: impl FnOnce(&mut B) -> Option<T>,
    ) -> Option<T> {
        match b {
            Some(b) => self.step(what, || f(b)),
            None => {
                self.record(what, Outcome::Skipped, Watched::default());
                None
            }
        }
    }
}

/// Which refusals a sweep tries at each allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// That one alone, and that one with every later one.
    Both,
    /// That one alone (for operations that panic on failure).
    One,
    /// None: count and leak-check only (operations that abort on failure).
    Never,
}

impl Refuse {
    pub fn modes(self) -> &'static [bool] {
        match self {
            Refuse::Both => &[false, true],
            Refuse::One => &[false],
            Refuse::Never => &[],
        }
    }
}

/// Sweeps `op`: `setup` makes what must exist before refusals are armed (rings, room
/// for the buffers kept), `op` runs the steps under test. Returns the allocations `op`
/// made without a refusal: its injection points.
pub fn sweep<S>(
    name: &str,
    refuse: Refuse,
    setup: impl Fn() -> S,
    op: impl Fn(&mut Run, &mut S),
) -> u64 {
    quiet_expected_panics();
    let (reference, points) = no_leak(name, || {
        let mut s = setup();
        let mut run = Run::new(None);
        let panics = PANICS.with(Cell::get);
        let start = faulty::served();
        op(&mut run, &mut s);
        let points = faulty::served() - start;
        // A panic formats its message on the heap: those allocations would be counted
        // as the operation's, and refusing one aborts the process.
        assert!(
            refuse != Refuse::One || PANICS.with(Cell::get) == panics,
            "{name}: the run without a refusal must not panic"
        );
        drop(s);
        (run.out, points)
    });
    for k in 1..=points {
        for &and_after in refuse.modes() {
            let label = format!("{name}, refusal {k} (and after: {and_after})");
            no_leak(&label, || {
                let mut s = setup();
                let mut run = Run::new(Some(reference));
                REFUSAL.with(|r| r.set(Some((k, and_after))));
                let before = faulty::refused();
                refuse_nth(k, and_after);
                op(&mut run, &mut s);
                faulty::disarm_refusals();
                REFUSAL.with(|r| r.set(None));
                assert!(faulty::refused() > before, "{label}: nothing was refused");
                drop(s);
            });
        }
    }
    report(name, refuse, points, &reference);
    points
}

/// Prints the injection points of a sweep, per operation (outside any armed region:
/// printing allocates).
fn report(name: &str, refuse: Refuse, points: u64, reference: &Outcomes) {
    let kind = match refuse {
        Refuse::Never => "allocations, counted and not refused",
        _ => "injection points",
    };
    println!("{name}: {points} {kind}");
    for (what, calls, allocs) in reference.per_operation() {
        println!("    {what}: {allocs} over {calls} calls");
    }
}

/// [`sweep`] of an operation that must run on a thread of its own (the thread-local
/// ring lives until its thread exits, so the leak check sees it freed only then).
pub fn sweep_on_thread(
    name: &str,
    refuse: Refuse,
    op: impl Fn(&mut Run) + Copy + Send + 'static,
) -> u64 {
    quiet_expected_panics();
    let (reference, points) = no_leak(name, || {
        faulty::spawn(move || {
            let mut run = Run::new(None);
            let start = faulty::served();
            op(&mut run);
            (run.out, faulty::served() - start)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    for k in 1..=points {
        for &and_after in refuse.modes() {
            let label = format!("{name}, refusal {k} (and after: {and_after})");
            no_leak(&label, || {
                let refused = faulty::spawn(move || {
                    let mut run = Run::new(Some(reference));
                    REFUSAL.with(|r| r.set(Some((k, and_after))));
                    let before = faulty::refused();
                    refuse_nth(k, and_after);
                    op(&mut run);
                    faulty::disarm_refusals();
                    faulty::refused() > before
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
                assert!(refused, "{label}: nothing was refused");
            });
        }
    }
    report(name, refuse, points, &reference);
    points
}

/// Checks that the ring holds no buffer any more.
#[track_caller]
pub fn settle(what: &str, ring: &Ring) {
    let st = ring.stats();
    ensure(st.live_buffers == 0 && st.bytes_in_use == 0, || {
        format!("{what}: everything dropped, yet the ring reports {st:?}")
    });
}

/// Checks that every kept buffer holds its own pattern.
#[track_caller]
pub fn check_held<B: AsRef<[u8]>>(what: &str, held: &[(u64, B)]) {
    for (id, b) in held {
        ensure(holds(*id, b.as_ref()), || {
            format!("{what}: buffer {id} lost its bytes")
        });
    }
}

/// Keeps `b` (room was reserved before the run: pushing must not allocate).
#[track_caller]
pub fn keep<B>(held: &mut Vec<(u64, B)>, id: u64, b: B) {
    ensure(held.len() < held.capacity(), || {
        "room to keep a buffer".into()
    });
    held.push((id, b));
}

/// A fixed buffer filled to `n` bytes with the pattern of `id`.
pub fn filled(mut b: FixedBufMut, id: u64, n: usize) -> FixedBufMut {
    b.try_extend_from_slice(&ZEROS[..n]).expect("n <= capacity");
    fill(id, &mut b);
    b
}

/// Checks that `ext` holds the first `ext.len()` bytes of `src`.
#[track_caller]
pub fn check_prefix(what: &str, ext: &[u8], src: &[u8]) {
    ensure(ext == &src[..ext.len()], || {
        format!("{what}: the growing buffer lost its bytes")
    });
}
