//! Every interleaving (to the preemption bound) of the slab's release, reuse and
//! drop-the-pool-while-live protocols.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_slab
//! ```
//!
//! Pages come from loom's tracked allocator under `cfg(loom)`, so a leaked or twice
//! freed page fails the model. Values carry a loom `UnsafeCell` that their `Drop` writes
//! and the allocator writes again when it reuses the slot: if a release were not
//! `Release`, or the reuse not `Acquire`, loom would report the two writes as a race.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use ringmem::slab::{Arena, ArenaArc, ArenaBox, SharedArena, PAGE_SLOTS};

/// Runs one model with the bound the docs name unless the environment sets one, and
/// prints how many interleavings it explored.
fn run_model(name: &str, f: impl Fn() + Send + Sync + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    println!(
        "loom model {name}: {} interleavings (preemption bound {:?})",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        builder.preemption_bound
    );
}

/// State shared by all values of one model: a cell their `Drop` writes (standing for the
/// memory of the slot) and a drop counter.
struct Shared {
    cell: UnsafeCell<u64>,
    drops: AtomicUsize,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            cell: UnsafeCell::new(0),
            drops: AtomicUsize::new(0),
        })
    }

    /// A write to "the slot's memory"; loom checks it is ordered with the others.
    fn touch(&self) {
        self.cell.with_mut(|p| {
            // SAFETY: loom checks this access against every other one for a race.
            unsafe { *p += 1 }
        });
    }
}

/// A value; fillers (`shared: None`) only take room. A `touching` value writes the
/// shared cell when dropped: the slot whose reuse the model checks.
struct Value {
    key: u64,
    shared: Option<Arc<Shared>>,
    touching: bool,
}

impl Value {
    fn new(key: u64, shared: &Arc<Shared>) -> Self {
        Value {
            key,
            shared: Some(shared.clone()),
            touching: false,
        }
    }

    fn touching(key: u64, shared: &Arc<Shared>) -> Self {
        Value {
            key,
            shared: Some(shared.clone()),
            touching: true,
        }
    }

    fn filler(key: u64) -> Self {
        Value {
            key,
            shared: None,
            touching: false,
        }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            if self.touching {
                shared.touch();
            }
            shared.drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Fills the current page of `alloc`'s pool so that its next allocation must look at
/// the page word (the released bits), returning the fillers.
fn fill_page<B>(mut alloc: impl FnMut(u64) -> B, already: usize) -> Vec<B> {
    (already..PAGE_SLOTS)
        .map(|i| alloc(100 + i as u64))
        .collect()
}

/// A box dropped on another thread while the arena's thread allocates: the slot is
/// reused only after the drop's effects are visible.
#[test]
fn arena_release_on_other_thread_then_reuse() {
    run_model("arena release / reuse", || {
        let shared = Shared::new();
        let arena = Arena::new();
        let a = arena.alloc(Value::touching(1, &shared));
        let a_addr = &*a as *const Value as usize;
        let t = thread::spawn(move || drop(a));
        let fillers = fill_page(|k| arena.alloc(Value::filler(k)), 1);
        let b = arena.alloc(Value::new(2, &shared));
        if &*b as *const Value as usize == a_addr {
            // Reused `a`'s slot: `a`'s drop must happen before this.
            shared.touch();
            assert_eq!(shared.drops.load(Ordering::Relaxed), 1);
        }
        assert_eq!(b.key, 2);
        t.join().unwrap();
        drop((b, fillers));
        assert_eq!(shared.drops.load(Ordering::Relaxed), 2);
    });
}

/// The arena is dropped while another thread drops the last values: the page is freed
/// exactly once, by whichever goes last (loom's allocator checks once, and not never).
#[test]
fn arena_dropped_while_handles_live() {
    run_model("arena dropped while live", || {
        let shared = Shared::new();
        let arena = Arena::new();
        let a = arena.alloc(Value::new(1, &shared));
        let b = arena.alloc(Value::new(2, &shared));
        let t = thread::spawn(move || {
            assert_eq!(a.key, 1);
            drop(a);
        });
        drop(arena);
        assert_eq!(b.key, 2);
        drop(b);
        t.join().unwrap();
        assert_eq!(shared.drops.load(Ordering::Relaxed), 2);
    });
}

/// The arena moves to another thread and is dropped there while this thread drops a
/// value and an `ArenaArc` clone is dropped on a third.
#[test]
fn arena_moved_and_dropped_with_arc_clones() {
    run_model("arena moved, arcs", || {
        let shared = Shared::new();
        let arena = Arena::new();
        let arc: ArenaArc<Value> = arena.alloc_arc(Value::new(7, &shared));
        let clone = arc.clone();
        let t = thread::spawn(move || {
            assert_eq!(clone.key, 7);
            drop(clone);
        });
        let u = thread::spawn(move || drop(arena));
        drop(arc);
        t.join().unwrap();
        u.join().unwrap();
        assert_eq!(shared.drops.load(Ordering::Relaxed), 1);
    });
}

/// Two threads allocate from one `SharedArena` at once (its shard locks), each drops
/// its box on the other thread's side, then the slots are reused.
#[test]
fn shared_arena_concurrent_alloc_and_release() {
    run_model("shared arena alloc / release", || {
        let shared = Shared::new();
        let arena = Arc::new(SharedArena::new());
        let (arena2, shared2) = (arena.clone(), shared.clone());
        let t = thread::spawn(move || arena2.alloc(Value::new(1, &shared2)));
        let mine = arena.alloc(Value::new(2, &shared));
        let theirs: ArenaBox<Value> = t.join().unwrap();
        assert_ne!(&*mine as *const Value, &*theirs as *const Value);
        assert_eq!((mine.key, theirs.key), (2, 1));
        let u = thread::spawn(move || drop(mine));
        drop(theirs);
        u.join().unwrap();
        assert_eq!(arena.len(), 0);
        assert_eq!(shared.drops.load(Ordering::Relaxed), 2);
    });
}

/// A `SharedArena` value dropped on another thread while its allocator reuses the page,
/// then the arena is dropped while a box is still alive elsewhere.
#[test]
fn shared_arena_reuse_and_drop_while_live() {
    run_model("shared arena reuse, dropped while live", || {
        let shared = Shared::new();
        let arena = SharedArena::new();
        let a = arena.alloc(Value::touching(1, &shared));
        let a_addr = &*a as *const Value as usize;
        let t = thread::spawn(move || drop(a));
        let fillers = fill_page(|k| arena.alloc(Value::filler(k)), 1);
        let b = arena.alloc(Value::new(2, &shared));
        if &*b as *const Value as usize == a_addr {
            shared.touch();
        }
        let u = thread::spawn(move || {
            assert_eq!(b.key, 2);
            drop(b);
        });
        drop(arena);
        drop(fillers);
        t.join().unwrap();
        u.join().unwrap();
        assert_eq!(shared.drops.load(Ordering::Relaxed), 2);
    });
}

/// Two threads claim the pages `with_capacity` made from the arena's reserve at once,
/// while a third gives the rest back with `shrink_to_fit`: each page is claimed once,
/// and every page is freed exactly once (loom's allocator checks) after the arena and
/// the boxes go in either order. The seed page is used up first (its slots go first,
/// with no lock), so that the two allocations go to the shards and the reserve.
#[test]
fn shared_arena_reserve_claims() {
    run_model("shared arena reserve claims", || {
        let shared = Shared::new();
        let arena = Arc::new(SharedArena::with_capacity(3 * PAGE_SLOTS));
        let seed = fill_page(|k| arena.alloc(Value::filler(k)), 0);
        let (arena2, shared2) = (arena.clone(), shared.clone());
        let t = thread::spawn(move || arena2.alloc(Value::new(1, &shared2)));
        let arena3 = arena.clone();
        let u = thread::spawn(move || {
            arena3.shrink_to_fit();
        });
        let mine = arena.alloc(Value::new(2, &shared));
        let theirs: ArenaBox<Value> = t.join().unwrap();
        u.join().unwrap();
        assert_ne!(&*mine as *const Value, &*theirs as *const Value);
        assert_eq!((mine.key, theirs.key), (2, 1));
        assert_eq!(arena.len(), 2 + PAGE_SLOTS);
        drop(mine);
        drop(arena);
        drop((theirs, seed));
        assert_eq!(shared.drops.load(Ordering::Relaxed), 2);
    });
}

/// The seed page (the first page `with_capacity` makes) hands out slots through a
/// compare-and-swap on its word, with no shard lock. With one slot left in it, a slot
/// released on another thread, and two threads allocating at once: each slot goes once,
/// and a released slot is taken again only after the release's effects are visible
/// (loom reports the value's drop and the reuse as a race otherwise).
#[test]
fn shared_arena_seed_page_reuse() {
    run_model("shared arena seed page reuse", || {
        let shared = Shared::new();
        let arena = Arc::new(SharedArena::with_capacity(PAGE_SLOTS));
        let a = arena.alloc(Value::touching(1, &shared));
        let a_addr = &*a as *const Value as usize;
        // One thread so far: the first of these takes the seed page's free slots into
        // this thread's magazine, and they all come out of it (the magazine lets go of
        // the page with its last slot).
        let mut fillers = fill_page(|k| arena.alloc(Value::filler(k)), 1);
        // So this release goes to the seed page's word: the one slot left in it.
        drop(fillers.pop());
        // An allocation from another arena makes this thread's next one from `arena` a
        // first miss again (a magazine is refilled at the second miss in a row), which
        // takes one slot out of the seed page's word, as the other thread's does.
        let other = SharedArena::new();
        drop(other.alloc(Value::filler(0)));
        let t = thread::spawn(move || drop(a));
        let (arena2, shared2) = (arena.clone(), shared.clone());
        let u = thread::spawn(move || {
            let v = arena2.alloc(Value::new(2, &shared2));
            if &*v as *const Value as usize == a_addr {
                shared2.touch();
            }
            v
        });
        let b = arena.alloc(Value::new(3, &shared));
        if &*b as *const Value as usize == a_addr {
            shared.touch();
        }
        let theirs = u.join().unwrap();
        t.join().unwrap();
        assert_ne!(&*b as *const Value, &*theirs as *const Value);
        assert_eq!((b.key, theirs.key), (3, 2));
        assert_eq!(arena.len(), PAGE_SLOTS);
        drop(arena);
        drop((fillers, theirs, b));
        assert_eq!(shared.drops.load(Ordering::Relaxed), 3);
    });
}
