//! Failure paths of the typed pools: values whose `Drop` panics, initialisers that
//! panic, and the heap refusing each allocation a pool makes in turn.
//!
//! This binary installs `common::faulty::Faulty` as its global allocator, so a test can
//! refuse the heap's `n`th allocation from now and check that nothing counted is left
//! live once everything is dropped (`no_leak`).
//!
//! The operations swept (every public operation of `Pool`, `Arena` and `SharedArena`
//! that allocates and does not abort when the heap refuses):
//! `try_with_capacity`, `try_alloc`, `try_alloc_with`, `try_alloc_rc`, `try_alloc_arc`
//! (the arenas), each through page growth, and `shrink_to_fit` (it may allocate a
//! smaller page list, and keeps the old one if refused). Not swept, because they call
//! `handle_alloc_error` (an abort) when the heap refuses, by design: `with_capacity`,
//! `SharedArena::new` and `default` (the shard array), `alloc`, `alloc_with`,
//! `alloc_rc`, `alloc_rc_with`, `alloc_arc`, `alloc_arc_with`.
#![cfg(not(loom))]

mod common;

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::panic::{self, catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use common::faulty::{self, no_leak, refuse_nth, served};
use common::scaled;
use ringmem::slab::{
    AllocError, Arena, ArenaArc, ArenaBox, ArenaRc, Pool, PoolBox, SharedArena, PAGE_SLOTS,
};

#[global_allocator]
static ALLOC: faulty::Faulty = faulty::Faulty;

/// The payload of this binary's own panics: zero-sized, so a panic allocates no payload
/// (the leak counts stay exact), and recognisable by the quiet hook.
struct Boom;

/// Panics with [`Boom`].
fn boom() -> ! {
    panic::panic_any(Boom)
}

/// Installs, once, a panic hook that says nothing about [`Boom`] panics and passes
/// every other panic to the hook it replaces. (The default hook writes into the test
/// harness's captured output, a buffer that grows on the panicking thread and that the
/// leak checks would count.)
fn quiet_booms() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Boom>() {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, which must panic with [`Boom`].
fn expect_boom<R>(f: impl FnOnce() -> R) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic"),
        Err(payload) => assert!(payload.is::<Boom>(), "panicked with something else"),
    }
}

std::thread_local! {
    /// Drops of [`Bomb`]s on this thread (each test's values stay on its thread).
    static BOMB_DROPS: Cell<usize> = const { Cell::new(0) };
}

fn bomb_drops() -> usize {
    BOMB_DROPS.with(Cell::get)
}

/// A value whose `Drop` panics if it is `loud`; every drop is counted.
struct Bomb {
    id: u64,
    loud: bool,
}

impl Bomb {
    fn quiet(id: u64) -> Self {
        Bomb { id, loud: false }
    }

    fn loud(id: u64) -> Self {
        Bomb { id, loud: true }
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        BOMB_DROPS.with(|d| d.set(d.get() + 1));
        if self.loud {
            boom();
        }
    }
}

/// The four handles, seen alike by the tests.
trait Handle: Deref + Sized {
    /// Another handle to the same value, for the shared kinds.
    fn share(&self) -> Option<Self>;
}

impl<T> Handle for PoolBox<T> {
    fn share(&self) -> Option<Self> {
        None
    }
}

impl<T> Handle for ArenaBox<T> {
    fn share(&self) -> Option<Self> {
        None
    }
}

impl<T> Handle for ArenaRc<T> {
    fn share(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<T> Handle for ArenaArc<T> {
    fn share(&self) -> Option<Self> {
        Some(self.clone())
    }
}

/// The three pools, seen alike by the tests.
trait Flavour: Sized {
    const NAME: &'static str;
    fn try_with_capacity(cap: usize) -> Result<Self, AllocError>;
    fn stats(&self) -> (usize, usize);
    fn capacity(&self) -> usize;
    fn shrink_to_fit(&self);
}

macro_rules! flavour {
    ($Pool:ident) => {
        impl<T> Flavour for $Pool<T> {
            const NAME: &'static str = stringify!($Pool);
            fn try_with_capacity(cap: usize) -> Result<Self, AllocError> {
                $Pool::try_with_capacity(cap)
            }
            fn stats(&self) -> (usize, usize) {
                $Pool::stats(self).into()
            }
            fn capacity(&self) -> usize {
                $Pool::capacity(self)
            }
            fn shrink_to_fit(&self) {
                $Pool::shrink_to_fit(self);
            }
        }
    };
}

flavour!(Pool);
flavour!(Arena);
flavour!(SharedArena);

/// Where a handle's value lives.
fn addr<H: Deref>(h: &H) -> usize {
    &**h as *const H::Target as *const () as usize
}

/// Allocates `stats().1` more values (every free slot, as the pool counts them) and
/// checks that this took no new page and that one of them reuses the slot at `reused`.
fn fill_free_slots<P: Flavour, H: Handle<Target = Bomb>>(
    pool: &P,
    alloc: &impl Fn(&P, u64) -> H,
    reused: usize,
) -> Vec<H> {
    let cap = pool.capacity();
    let (_, free) = pool.stats();
    let refill: Vec<H> = (0..free as u64).map(|i| alloc(pool, 1000 + i)).collect();
    assert!(refill
        .iter()
        .enumerate()
        .all(|(i, h)| h.id == 1000 + i as u64));
    assert_eq!(pool.capacity(), cap, "{}: a free slot was lost", P::NAME);
    assert!(
        refill.iter().any(|h| addr(h) == reused),
        "{}: the slot at {reused:#x} was not reused",
        P::NAME
    );
    refill
}

// ---------------------------------------------------------------------------------
// A value's `Drop` panics: the panic goes on, and the slot is released all the same.
// ---------------------------------------------------------------------------------

/// Drops a handle (its last share) whose value's `Drop` panics: the panic reaches the
/// caller, the value was dropped once, and its slot is free and reused.
fn panicking_drop_releases<P: Flavour, H: Handle<Target = Bomb>>(
    alloc: impl Fn(&P, u64) -> H,
    loud: impl Fn(&P, u64) -> H,
) {
    quiet_booms();
    no_leak(P::NAME, || {
        for cap in [0, 2 * PAGE_SLOTS] {
            let pool = P::try_with_capacity(cap).unwrap();
            let keep = alloc(&pool, 1);
            let bomb = loud(&pool, 2);
            let at = addr(&bomb);
            let used = pool.stats().0;
            let drops = bomb_drops();
            if let Some(share) = bomb.share() {
                drop(share); // not the last: nothing is dropped
                assert_eq!(bomb_drops(), drops);
            }
            expect_boom(move || drop(bomb));
            assert_eq!(bomb_drops(), drops + 1, "{}: dropped once", P::NAME);
            assert_eq!(pool.stats().0, used - 1, "{}: the slot stays used", P::NAME);
            let refill = fill_free_slots(&pool, &alloc, at);
            assert_eq!(keep.id, 1);
            drop((keep, refill));
            assert_eq!(pool.stats().0, 0);
        }
    });
}

/// Drops the pool while it holds values whose `Drop` panics, then those values: each is
/// dropped once, its panic goes on, and the page goes with the last of them (`no_leak`).
/// Pools do not drop values themselves, so dropping the pool does not panic.
fn pool_dropped_before_panicking_values<P: Flavour, H: Handle<Target = Bomb>>(
    alloc: impl Fn(&P, u64) -> H,
    loud: impl Fn(&P, u64) -> H,
) {
    quiet_booms();
    no_leak(P::NAME, || {
        for cap in [0, 2 * PAGE_SLOTS] {
            let pool = P::try_with_capacity(cap).unwrap();
            let first = loud(&pool, 1);
            let quiet = alloc(&pool, 2);
            let last = loud(&pool, 3);
            let shared = last.share();
            let drops = bomb_drops();
            drop(pool);
            assert_eq!(bomb_drops(), drops, "{}: the pool dropped a value", P::NAME);
            expect_boom(move || drop(first));
            assert_eq!(quiet.id, 2);
            drop(quiet);
            drop(shared);
            assert_eq!(last.id, 3);
            expect_boom(move || drop(last));
            assert_eq!(bomb_drops(), drops + 3, "{}: each dropped once", P::NAME);
        }
    });
}

macro_rules! panicking_drop_tests {
    ($name:ident, $Pool:ident, $alloc:ident) => {
        mod $name {
            use super::*;

            #[test]
            fn slot_released_and_reused() {
                panicking_drop_releases::<$Pool<Bomb>, _>(
                    |p, id| p.$alloc(Bomb::quiet(id)),
                    |p, id| p.$alloc(Bomb::loud(id)),
                );
            }

            #[test]
            fn pool_dropped_first() {
                pool_dropped_before_panicking_values::<$Pool<Bomb>, _>(
                    |p, id| p.$alloc(Bomb::quiet(id)),
                    |p, id| p.$alloc(Bomb::loud(id)),
                );
            }
        }
    };
}

panicking_drop_tests!(drop_pool_box, Pool, alloc);
panicking_drop_tests!(drop_pool_rc, Pool, alloc_rc);
panicking_drop_tests!(drop_arena_box, Arena, alloc);
panicking_drop_tests!(drop_arena_rc, Arena, alloc_rc);
panicking_drop_tests!(drop_arena_arc, Arena, alloc_arc);
panicking_drop_tests!(drop_shared_box, SharedArena, alloc);
panicking_drop_tests!(drop_shared_rc, SharedArena, alloc_rc);
panicking_drop_tests!(drop_shared_arc, SharedArena, alloc_arc);

// ---------------------------------------------------------------------------------
// An initialiser panics: the slot goes back, nothing is dropped, the panic goes on.
// ---------------------------------------------------------------------------------

/// Runs `with` (an `_with` allocation) with initialisers that panic before and after
/// writing the value: each panic reaches the caller, nothing is dropped (a value written
/// before the panic is leaked: `Bomb` owns no memory), the slots are free and reused,
/// and the pool serves on.
fn panicking_initialiser_rolls_back<P: Flavour, H: Handle<Target = Bomb>>(
    with: impl Fn(&P, &mut dyn FnMut(&mut MaybeUninit<Bomb>) -> &Bomb) -> H,
) {
    quiet_booms();
    let alloc = |p: &P, id: u64| with(p, &mut |slot| slot.write(Bomb::quiet(id)));
    no_leak(P::NAME, || {
        for cap in [0, 2 * PAGE_SLOTS] {
            let pool = P::try_with_capacity(cap).unwrap();
            let keep = alloc(&pool, 1);
            let drops = bomb_drops();
            let at = Cell::new(0);
            expect_boom(|| {
                with(&pool, &mut |slot| {
                    at.set(slot.as_ptr() as usize);
                    boom()
                })
            });
            let first = at.get();
            expect_boom(|| {
                with(&pool, &mut |slot| {
                    at.set(slot.as_ptr() as usize);
                    slot.write(Bomb::quiet(2));
                    boom()
                })
            });
            assert_eq!(bomb_drops(), drops, "{}: a value was dropped", P::NAME);
            assert_eq!(pool.stats().0, 1, "{}: a slot stays used", P::NAME);
            // The first slot is reused (the second one may be too).
            let refill = fill_free_slots(&pool, &alloc, first);
            assert!(refill.iter().any(|h| addr(h) == at.get()));
            assert_eq!(keep.id, 1);
            drop((keep, refill));
            assert_eq!(pool.stats().0, 0);
            assert_eq!(alloc(&pool, 7).id, 7);
        }
    });
}

macro_rules! panicking_initialiser_tests {
    ($name:ident, $Pool:ident, $with:ident $(, $unwrap:ident)?) => {
        #[test]
        fn $name() {
            panicking_initialiser_rolls_back::<$Pool<Bomb>, _>(|p, init| {
                p.$with(|slot| init(slot))$(.$unwrap())?
            });
        }
    };
}

panicking_initialiser_tests!(init_pool_alloc_with, Pool, alloc_with);
panicking_initialiser_tests!(init_pool_try_alloc_with, Pool, try_alloc_with, unwrap);
panicking_initialiser_tests!(init_pool_alloc_rc_with, Pool, alloc_rc_with);
panicking_initialiser_tests!(init_arena_alloc_with, Arena, alloc_with);
panicking_initialiser_tests!(init_arena_try_alloc_with, Arena, try_alloc_with, unwrap);
panicking_initialiser_tests!(init_arena_alloc_rc_with, Arena, alloc_rc_with);
panicking_initialiser_tests!(init_arena_alloc_arc_with, Arena, alloc_arc_with);
panicking_initialiser_tests!(init_shared_alloc_with, SharedArena, alloc_with);
panicking_initialiser_tests!(
    init_shared_try_alloc_with,
    SharedArena,
    try_alloc_with,
    unwrap
);
panicking_initialiser_tests!(init_shared_alloc_rc_with, SharedArena, alloc_rc_with);
panicking_initialiser_tests!(init_shared_alloc_arc_with, SharedArena, alloc_arc_with);

// ---------------------------------------------------------------------------------
// The heap refuses each allocation of an operation sequence in turn.
// ---------------------------------------------------------------------------------

/// A value whose contents say which it is.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Val([u64; 3]);

fn val(id: u64) -> Val {
    Val([id, id.wrapping_mul(0x9E37_79B9_7F4A_7C15), !id])
}

/// One of the handles a sweep keeps.
enum Held<B> {
    Box(B),
    Rc(ArenaRc<Val>),
    Arc(ArenaArc<Val>),
}

impl<B: Deref<Target = Val>> Held<B> {
    fn get(&self) -> Val {
        match self {
            Held::Box(b) => **b,
            Held::Rc(r) => **r,
            Held::Arc(a) => **a,
        }
    }
}

/// The fallible allocations of a pool, by kind.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// `try_alloc`
    Box,
    /// `try_alloc_with`
    With,
    /// `try_alloc_rc`
    Rc,
    /// `try_alloc_arc` (the arenas only)
    Arc,
}

/// A pool the sweep can drive.
trait Swept: Flavour + 'static {
    type Box: Deref<Target = Val>;
    /// The kinds this pool offers.
    const KINDS: &'static [Kind];
    fn try_kind(&self, kind: Kind, v: Val) -> Result<Held<Self::Box>, AllocError>;
}

macro_rules! swept {
    ($Pool:ident, $Box:ident, [$($kind:ident),*]) => {
        impl Swept for $Pool<Val> {
            type Box = $Box<Val>;
            const KINDS: &'static [Kind] = &[$(Kind::$kind),*];
            fn try_kind(&self, kind: Kind, v: Val) -> Result<Held<Self::Box>, AllocError> {
                Ok(match kind {
                    Kind::Box => Held::Box(self.try_alloc(v)?),
                    Kind::With => Held::Box(self.try_alloc_with(|slot| slot.write(v))?),
                    Kind::Rc => Held::Rc(self.try_alloc_rc(v)?),
                    Kind::Arc => swept!(@arc self, v, $($kind)*),
                })
            }
        }
    };
    (@arc $self:ident, $v:ident, Box With Rc Arc) => { Held::Arc($self.try_alloc_arc($v)?) };
    (@arc $self:ident, $v:ident, Box With Rc) => { unreachable!("no ArenaArc from a Pool") };
}

swept!(Pool, PoolBox, [Box, With, Rc]);
swept!(Arena, ArenaBox, [Box, With, Rc, Arc]);
swept!(SharedArena, ArenaBox, [Box, With, Rc, Arc]);

/// An operation sequence to sweep.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `try_with_capacity(n)`, then `try_alloc` up to the capacity.
    WithCapacity,
    /// From an empty pool, `n` allocations of one kind: page growth.
    Grow(Kind),
    /// Every kind in turn, dropping some values as it goes.
    Mixed,
    /// `n` values, most dropped, `shrink_to_fit`, then `n` more (growth again).
    Shrink,
}

/// Values per sequence: enough for several growths (and three pages under Miri).
fn values() -> usize {
    scaled(600).max(3 * PAGE_SLOTS)
}

/// Checks that every kept handle still holds its value.
fn check_all<B: Deref<Target = Val>>(held: &[(u64, Held<B>)]) {
    for (id, h) in held {
        assert_eq!(h.get(), val(*id), "value {id} was overwritten");
    }
}

/// What a run ended with.
#[derive(Default, Debug)]
struct Outcome {
    /// Allocations the run made after its setup: the injection points.
    served: u64,
    /// Operations that returned `AllocError`.
    errors: usize,
}

/// Runs `op` on a fresh pool; with `refuse`, the heap refuses the `k`th allocation from
/// the start of the sequence (and, with `and_after`, every one after). Every operation
/// must succeed or return `AllocError`, every value kept must keep its contents, and the
/// pool's count must match the handles kept. Then refusals stop and the pool must serve
/// again.
fn run<P: Swept>(op: Op, refuse: Option<(u64, bool)>) -> Outcome {
    let n = values();
    let mut held: Vec<(u64, Held<P::Box>)> = Vec::with_capacity(3 * n);
    let mut out = Outcome::default();
    let start = served();
    if let Some((k, and_after)) = refuse {
        refuse_nth(k, and_after);
    }
    let next_id = Cell::new(0u64);
    let errors = Cell::new(0usize);
    let alloc = |pool: &P, kind: Kind, held: &mut Vec<(u64, Held<P::Box>)>| {
        let id = next_id.replace(next_id.get() + 1);
        match pool.try_kind(kind, val(id)) {
            Ok(h) => {
                assert_eq!(h.get(), val(id));
                held.push((id, h));
            }
            Err(e) => {
                assert!(e.requested > 0, "{e:?}");
                errors.set(errors.get() + 1);
                check_all(held);
            }
        }
    };
    let cap = if matches!(op, Op::WithCapacity) { n } else { 0 };
    let pool = match P::try_with_capacity(cap) {
        Ok(pool) => pool,
        Err(e) => {
            assert!(e.requested > 0, "{e:?}");
            faulty::disarm_refusals();
            out.served = served() - start;
            out.errors = 1;
            return out;
        }
    };
    let counts_match = |pool: &P, held: &[(u64, Held<P::Box>)]| {
        assert_eq!(pool.stats().0, held.len(), "{}: counts differ", P::NAME);
    };
    match op {
        Op::WithCapacity => {
            assert!(pool.capacity() >= n);
            for _ in 0..pool.capacity() {
                alloc(&pool, Kind::Box, &mut held);
            }
        }
        Op::Grow(kind) => {
            for _ in 0..n {
                alloc(&pool, kind, &mut held);
            }
        }
        Op::Mixed => {
            for i in 0..n {
                alloc(&pool, P::KINDS[i % P::KINDS.len()], &mut held);
                if i % 3 == 2 && !held.is_empty() {
                    held.swap_remove(i % held.len());
                }
            }
        }
        Op::Shrink => {
            for _ in 0..n {
                alloc(&pool, Kind::Box, &mut held);
            }
            // Keep one value in four pages' worth: most pages empty out.
            held.retain(|(id, _)| (*id as usize / PAGE_SLOTS) % 4 == 0);
            counts_match(&pool, &held);
            pool.shrink_to_fit();
            check_all(&held);
            counts_match(&pool, &held);
            for i in 0..n {
                alloc(&pool, P::KINDS[i % P::KINDS.len()], &mut held);
            }
        }
    }
    check_all(&held);
    counts_match(&pool, &held);
    out.served = served() - start;
    out.errors = errors.get();
    // The heap serves again: so must the pool.
    faulty::disarm_refusals();
    for _ in 0..PAGE_SLOTS + 1 {
        alloc(&pool, Kind::Box, &mut held);
    }
    assert_eq!(errors.get(), out.errors, "{}: no recovery", P::NAME);
    check_all(&held);
    counts_match(&pool, &held);
    // Half the runs drop the pool first: its pages then go with their last values.
    if refuse.is_some_and(|(k, _)| k % 2 == 1) {
        drop(pool);
        drop(held);
    } else {
        drop(held);
        assert_eq!(pool.stats().0, 0);
        drop(pool);
    }
    out
}

/// Sweeps `op` on `P`: counts the allocations it makes, then reruns it refusing each in
/// turn, once alone and once with every later one. Each run is on a fresh thread, so it
/// starts with no magazine (the thread-locals are made during the run, as in a program's
/// first use). Returns the number of injection points.
fn sweep<P: Swept>(op: Op) -> u64 {
    // Look the parallelism up now, outside the runs, so that every run's arena has the
    // same number of shards.
    drop(SharedArena::<u8>::new());
    let what = format!("{} {op:?}", P::NAME);
    let counted = no_leak(&what, || {
        faulty::spawn(move || run::<P>(op, None)).join().unwrap()
    });
    assert_eq!(counted.errors, 0, "{what}: failed with nothing refused");
    assert!(counted.served > 0, "{what}: allocates nothing");
    for k in 1..=counted.served {
        for and_after in [false, true] {
            let refused = faulty::refused();
            no_leak(&what, || {
                faulty::spawn(move || run::<P>(op, Some((k, and_after))))
                    .join()
                    .unwrap()
            });
            assert!(
                faulty::refused() > refused,
                "{what}: allocation {k} of {} was never asked for",
                counted.served
            );
        }
    }
    eprintln!("sweep {what}: {} injection points", counted.served);
    counted.served
}

fn sweep_all<P: Swept>() {
    sweep::<P>(Op::WithCapacity);
    for &kind in P::KINDS {
        sweep::<P>(Op::Grow(kind));
    }
    sweep::<P>(Op::Mixed);
    sweep::<P>(Op::Shrink);
}

#[test]
fn sweep_pool() {
    sweep_all::<Pool<Val>>();
}

#[test]
fn sweep_arena() {
    sweep_all::<Arena<Val>>();
}

#[test]
fn sweep_shared_arena() {
    sweep_all::<SharedArena<Val>>();
}
