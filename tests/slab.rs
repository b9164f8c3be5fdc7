//! Typed pools: each flavour, zero-sized and over-aligned types, drop counting,
//! panicking initialisers, pools dropped before their handles, a multi-thread stress
//! test and a model-based property test.
#![cfg(not(loom))]

use std::cell::Cell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use proptest::prelude::*;
use ringmem::slab::{
    AllocError, Arena, ArenaArc, ArenaBox, ArenaRc, Pool, PoolBox, PoolStats, SharedArena,
    PAGE_SLOTS,
};

/// `stats()` as `shared_arena`'s `(used, free)` tuple, to compare in one assertion.
fn used_free(stats: PoolStats) -> (usize, usize) {
    stats.into()
}

/// Iteration counts, shrunk under Miri in this one place.
const fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        let m = n / 100;
        if m < 4 {
            4
        } else {
            m
        }
    } else {
        n
    }
}

/// Counts its drops in a shared counter.
struct Counted {
    value: u64,
    drops: Arc<AtomicUsize>,
}

impl Counted {
    fn new(value: u64, drops: &Arc<AtomicUsize>) -> Self {
        Counted {
            value,
            drops: Arc::clone(drops),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

#[repr(align(128))]
#[derive(Debug, PartialEq)]
struct Aligned(u64);

fn assert_send<S: Send>() {}
fn assert_sync<S: Sync>() {}

#[test]
fn auto_traits() {
    assert_send::<Arena<u8>>();
    assert_send::<SharedArena<u8>>();
    assert_sync::<SharedArena<u8>>();
    assert_send::<ArenaBox<u8>>();
    assert_sync::<ArenaBox<u8>>();
    assert_send::<ArenaArc<u8>>();
    assert_sync::<ArenaArc<u8>>();
    // A `Send + !Sync` value may still go in a `Send` arena and box.
    assert_send::<Arena<Cell<u8>>>();
    assert_send::<ArenaBox<Cell<u8>>>();
    // The negative cases are `compile_fail` doctests on each type.
}

/// Allocation, reuse and stats, written once for the three flavours.
/// `$kept`: free slots that `shrink_to_fit` keeps once every value is gone.
macro_rules! flavour_tests {
    ($name:ident, $Pool:ident, $kept:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn alloc_deref_mut_and_reuse() {
                let pool = $Pool::new();
                assert_eq!((pool.len(), pool.capacity()), (0, 0));
                let mut a = pool.alloc(String::from("a"));
                a.push('b');
                assert_eq!(*a, "ab");
                assert_eq!(used_free(pool.stats()), (1, 62));
                let addr = &*a as *const String;
                drop(a);
                assert_eq!(used_free(pool.stats()), (0, 63));
                // Fill the page (the freed slot comes back once the cached bits run out).
                let all: Vec<_> = (0..63).map(|i| pool.alloc(i.to_string())).collect();
                assert!(all.iter().any(|s| &**s as *const String == addr));
                assert_eq!(used_free(pool.stats()), (63, 0));
                let more = pool.alloc(String::from("64th"));
                assert_eq!(pool.capacity(), 126);
                assert_eq!(pool.len(), 64);
                for (i, s) in all.iter().enumerate() {
                    assert_eq!(**s, i.to_string());
                }
                drop((all, more));
                assert!(pool.is_empty());
            }

            #[test]
            fn with_capacity_and_shrink() {
                let pool = $Pool::<u64>::with_capacity(2048);
                assert_eq!(used_free(pool.stats()), (0, 2079));
                let values: Vec<_> = (0..80).map(|i| pool.alloc(i)).collect();
                assert!(pool.shrink_to_fit(), "the empty pages go");
                assert!(!pool.shrink_to_fit(), "nothing more to give back");
                let (used, free) = pool.stats().into();
                assert_eq!(used, 80);
                assert!(free < 2 * PAGE_SLOTS * 2, "free {free}");
                drop(values);
                pool.shrink_to_fit();
                assert_eq!(used_free(pool.stats()), (0, $kept));
                // Usable again after shrinking to nothing.
                assert_eq!(*pool.alloc(5), 5);
            }

            #[test]
            fn try_alloc_family() {
                let pool = $Pool::new();
                let a = pool.try_alloc(1u32).unwrap();
                let b = pool.try_alloc_with(|s| s.write(2)).unwrap();
                let c = pool.try_alloc_rc(3).unwrap();
                let d = pool.alloc_rc_with(|s| s.write(4));
                let e = pool.try_alloc_rc_with(|s| s.write(5)).unwrap();
                assert_eq!(*a + *b + *c + *d + *e, 15);
                // The pools' error is the crate's one allocation error.
                let err: ringmem::AllocError = AllocError { requested: 8 };
                assert_eq!(err.to_string(), "cannot allocate 8 bytes");
            }

            #[test]
            fn rc_counts_and_drops_once() {
                let drops = Arc::new(AtomicUsize::new(0));
                let pool = $Pool::new();
                let a: ArenaRc<Counted> = pool.alloc_rc(Counted::new(9, &drops));
                let clones: Vec<_> = (0..10).map(|_| a.clone()).collect();
                assert_eq!(ArenaRc::strong_count(&a), 11);
                assert!(clones
                    .iter()
                    .all(|c| ArenaRc::ptr_eq(c, &a) && c.value == 9));
                drop(clones);
                assert_eq!(drops.load(Ordering::Relaxed), 0);
                assert_eq!(pool.len(), 1);
                drop(a);
                assert_eq!(drops.load(Ordering::Relaxed), 1);
                assert_eq!(pool.len(), 0);
            }

            #[test]
            fn zero_sized_values() {
                static DROPS: AtomicUsize = AtomicUsize::new(0);
                struct Z;
                impl Drop for Z {
                    fn drop(&mut self) {
                        DROPS.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let pool = $Pool::new();
                let n = scaled(500);
                let zs: Vec<_> = (0..n).map(|_| pool.alloc(Z)).collect();
                let rc = pool.alloc_rc(Z);
                let rc2 = rc.clone();
                assert_eq!(pool.len(), n + 1);
                drop(zs);
                assert_eq!(DROPS.load(Ordering::Relaxed), n);
                drop((rc, rc2));
                assert_eq!(DROPS.load(Ordering::Relaxed), n + 1);
                assert_eq!(*$Pool::new().alloc(()), ());
            }

            #[test]
            fn over_aligned_values() {
                let pool = $Pool::new();
                let vs: Vec<_> = (0..scaled(200) as u64)
                    .map(|i| pool.alloc(Aligned(i)))
                    .collect();
                for (i, v) in vs.iter().enumerate() {
                    assert_eq!(&**v as *const Aligned as usize % 128, 0);
                    assert_eq!(v.0, i as u64);
                }
                let rc = pool.alloc_rc(Aligned(7));
                assert_eq!(&*rc as *const Aligned as usize % 128, 0);
                assert_eq!(*rc, Aligned(7));
            }

            #[test]
            fn drop_counting() {
                let drops = Arc::new(AtomicUsize::new(0));
                let pool = $Pool::new();
                let n = scaled(1000);
                let mut vs: Vec<_> = (0..n as u64)
                    .map(|i| pool.alloc(Counted::new(i, &drops)))
                    .collect();
                vs.truncate(n / 2);
                assert_eq!(drops.load(Ordering::Relaxed), n - n / 2);
                let again: Vec<_> = (0..n as u64)
                    .map(|i| pool.alloc(Counted::new(i, &drops)))
                    .collect();
                assert!(vs.iter().enumerate().all(|(i, v)| v.value == i as u64));
                assert!(again.iter().enumerate().all(|(i, v)| v.value == i as u64));
                drop((vs, again));
                assert_eq!(drops.load(Ordering::Relaxed), 2 * n);
                assert_eq!(pool.len(), 0);
            }

            #[test]
            fn panicking_initialiser_rolls_back() {
                let drops = Arc::new(AtomicUsize::new(0));
                let pool = $Pool::<Counted>::new();
                let keep = pool.alloc(Counted::new(1, &drops));
                let r = catch_unwind(AssertUnwindSafe(|| {
                    pool.alloc_with(|_slot| panic!("initialiser failed"))
                }));
                assert!(r.is_err());
                assert_eq!(pool.len(), 1);
                // Written, then panicked: the value is leaked, never dropped. (A value
                // that owns no heap memory, so that Miri's leak check stays meaningful.)
                struct Flag;
                static FLAG_DROPS: AtomicUsize = AtomicUsize::new(0);
                impl Drop for Flag {
                    fn drop(&mut self) {
                        FLAG_DROPS.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let flags = $Pool::<Flag>::new();
                let r = catch_unwind(AssertUnwindSafe(|| {
                    flags.alloc_rc_with(|slot| {
                        slot.write(Flag);
                        panic!("after writing")
                    })
                }));
                assert!(r.is_err());
                assert_eq!(flags.len(), 0);
                assert_eq!(FLAG_DROPS.load(Ordering::Relaxed), 0);
                // Returning some other reference is refused.
                // (Safe code can only return the given reference or a `'static` one.)
                let raw = Box::into_raw(Box::new(Counted::new(3, &drops)));
                // SAFETY: `raw` is a live box, reclaimed below once `other` is unused.
                let other: &'static Counted = unsafe { &*raw };
                let r = catch_unwind(AssertUnwindSafe(|| {
                    pool.alloc_with(|_slot: &mut MaybeUninit<Counted>| other)
                }));
                assert!(r.is_err());
                assert_eq!(pool.len(), 1);
                // SAFETY: `raw` came from `Box::into_raw`; `other` is no longer used.
                drop(unsafe { Box::from_raw(raw) });
                assert_eq!(keep.value, 1);
                let after = pool.alloc_with(|slot| slot.write(Counted::new(4, &drops)));
                assert_eq!(after.value, 4);
                drop((keep, after));
                // `other`, `keep` and `after`.
                assert_eq!(drops.load(Ordering::Relaxed), 3);
                assert!(pool.is_empty());
            }

            #[test]
            fn pool_dropped_before_handles() {
                let drops = Arc::new(AtomicUsize::new(0));
                let pool = $Pool::with_capacity(200);
                let n = scaled(150);
                let boxes: Vec<_> = (0..n as u64)
                    .map(|i| pool.alloc(Counted::new(i, &drops)))
                    .collect();
                let rc = pool.alloc_rc(Counted::new(1000, &drops));
                let rc2 = rc.clone();
                drop(pool);
                assert!(boxes.iter().enumerate().all(|(i, b)| b.value == i as u64));
                drop(boxes);
                drop(rc);
                assert_eq!(rc2.value, 1000);
                drop(rc2);
                assert_eq!(drops.load(Ordering::Relaxed), n + 1);
            }

            #[test]
            fn fragmentation_reuses_pages() {
                let pool = $Pool::new();
                let n = scaled(6300);
                let mut vs: Vec<_> = (0..n).map(|i| Some(pool.alloc(i))).collect();
                let cap = pool.capacity();
                for v in vs.iter_mut().step_by(2) {
                    *v = None;
                }
                let refill: Vec<_> = (0..n / 2).map(|i| pool.alloc(i)).collect();
                assert!(
                    pool.capacity() <= cap + cap / 2 + PAGE_SLOTS,
                    "{} > {cap}",
                    pool.capacity()
                );
                assert_eq!(pool.len(), n - n.div_ceil(2) + n / 2);
                assert!(refill.iter().enumerate().all(|(i, v)| **v == i));
            }

            #[test]
            fn formatting() {
                let pool = $Pool::new();
                let b = pool.alloc(5);
                let rc = pool.alloc_rc(6);
                assert_eq!(format!("{b} {b:?} {rc} {rc:?}"), "5 5 6 6");
                assert!(format!("{b:p}").starts_with("0x"));
                assert!(format!("{pool:?}").contains("used: 2"));
            }
        }
    };
}

flavour_tests!(pool, Pool, 0);
flavour_tests!(arena, Arena, 0);
// `SharedArena::shrink_to_fit` keeps the seed page (the first page of `with_capacity`).
flavour_tests!(shared_arena, SharedArena, PAGE_SLOTS);

#[test]
fn pool_box_is_a_box() {
    let pool = Pool::new();
    let mut b: PoolBox<Option<i32>> = pool.alloc(Some(10));
    assert_eq!(b.take(), Some(10));
    assert!(b.is_none());
    let rcs = Pool::new();
    let rc: ArenaRc<Rc<u8>> = rcs.alloc_rc(Rc::new(1));
    assert_eq!(**rc, 1);
}

macro_rules! arc_tests {
    ($name:ident, $Pool:ident) => {
        mod $name {
            use super::*;

            #[test]
            fn arc_shared_across_threads_drops_once() {
                let drops = Arc::new(AtomicUsize::new(0));
                let pool = $Pool::new();
                let a: ArenaArc<Counted> = pool.alloc_arc(Counted::new(42, &drops));
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        let a = a.clone();
                        thread::spawn(move || {
                            for _ in 0..scaled(1000) {
                                let c = a.clone();
                                assert_eq!(c.value, 42);
                            }
                        })
                    })
                    .collect();
                drop(pool);
                handles.into_iter().for_each(|h| h.join().unwrap());
                assert_eq!(ArenaArc::strong_count(&a), 1);
                assert_eq!(drops.load(Ordering::Relaxed), 0);
                drop(a);
                assert_eq!(drops.load(Ordering::Relaxed), 1);
            }

            #[test]
            fn boxes_dropped_on_other_threads_are_reused() {
                let pool = $Pool::new();
                let first: Vec<_> = (0..63u64).map(|i| pool.alloc(i)).collect();
                let cap = pool.capacity();
                thread::spawn(move || drop(first)).join().unwrap();
                let again: Vec<_> = (0..63u64).map(|i| pool.alloc(i)).collect();
                assert_eq!(pool.capacity(), cap, "released slots were not reused");
                assert!(again.iter().enumerate().all(|(i, v)| **v == i as u64));
                let arc = pool.alloc_arc_with(|s| s.write(1));
                assert_eq!(&*arc as *const u64 as usize % 8, 0);
            }

            #[test]
            fn over_aligned_arcs() {
                let pool = $Pool::new();
                let arcs: Vec<_> = (0..70).map(|i| pool.alloc_arc(Aligned(i))).collect();
                assert!(arcs
                    .iter()
                    .all(|a| &**a as *const Aligned as usize % 128 == 0));
                let moved = thread::spawn(move || arcs.iter().map(|a| a.0).sum::<u64>());
                assert_eq!(moved.join().unwrap(), (0..70).sum());
            }
        }
    };
}

arc_tests!(arena_arc, Arena);
arc_tests!(shared_arena_arc, SharedArena);

#[test]
fn arena_dropped_on_another_thread_while_handles_live() {
    let drops = Arc::new(AtomicUsize::new(0));
    let arena = Arena::new();
    let n = scaled(500);
    let vs: Vec<_> = (0..n as u64)
        .map(|i| arena.alloc(Counted::new(i, &drops)))
        .collect();
    let (tx, rx) = crossbeam_channel::unbounded();
    let dropper = thread::spawn(move || {
        rx.recv().unwrap();
        drop(arena);
    });
    let releaser = thread::spawn(move || {
        tx.send(()).unwrap();
        for (i, v) in vs.into_iter().enumerate() {
            assert_eq!(v.value, i as u64);
        }
    });
    dropper.join().unwrap();
    releaser.join().unwrap();
    assert_eq!(drops.load(Ordering::Relaxed), n);
}

/// Producers allocate on a `SharedArena` (and each its own `Arena`), consumers on other
/// threads check and drop. Every value is checked and dropped exactly once, and every
/// slot comes back.
#[test]
fn stress_alloc_here_drop_there() {
    const PRODUCERS: u64 = 3;
    let per_producer = scaled(20_000) as u64;
    let drops = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(SharedArena::<Counted>::new());
    let (tx, rx) = crossbeam_channel::bounded::<(u64, u64, ArenaBox<Counted>)>(256);
    let (arc_tx, arc_rx) = crossbeam_channel::bounded::<ArenaArc<Counted>>(64);

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (shared, tx, arc_tx, drops) = (
                Arc::clone(&shared),
                tx.clone(),
                arc_tx.clone(),
                Arc::clone(&drops),
            );
            thread::spawn(move || {
                let own = Arena::new();
                for i in 0..per_producer {
                    let key = p << 32 | i;
                    let b = if i % 2 == 0 {
                        shared.alloc(Counted::new(key, &drops))
                    } else {
                        own.alloc_with(|s| s.write(Counted::new(key, &drops)))
                    };
                    tx.send((p, i, b)).unwrap();
                    if i % 64 == 0 {
                        let a = shared.alloc_arc(Counted::new(key, &drops));
                        arc_tx.send(a.clone()).unwrap();
                        assert_eq!(a.value, key);
                    }
                }
                // `own` is dropped here, usually with values still in flight.
            })
        })
        .collect();
    drop((tx, arc_tx));

    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (rx, arc_rx) = (rx.clone(), arc_rx.clone());
            thread::spawn(move || {
                let mut seen = HashMap::new();
                for (p, i, b) in rx.iter() {
                    assert_eq!(b.value, p << 32 | i, "value changed in flight");
                    *seen.entry(p).or_insert(0u64) += 1;
                    if let Ok(a) = arc_rx.try_recv() {
                        assert!(a.value >> 32 < PRODUCERS);
                    }
                }
                for a in arc_rx.iter() {
                    drop(a);
                }
                seen
            })
        })
        .collect();
    producers.into_iter().for_each(|p| p.join().unwrap());
    let mut total = 0;
    for c in consumers {
        total += c.join().unwrap().values().sum::<u64>();
    }
    assert_eq!(total, PRODUCERS * per_producer);
    let arcs = (PRODUCERS * per_producer.div_ceil(64)) as usize;
    assert_eq!(
        drops.load(Ordering::Relaxed),
        (PRODUCERS * per_producer) as usize + arcs
    );
    assert_eq!(shared.len(), 0);
    assert!(shared.shrink_to_fit() || shared.capacity() == 0);
    assert_eq!(shared.capacity(), 0);
}

/// Allocates `make(t, i)` for `i` in `0..n` on each of `threads` threads, which start
/// together, each keeping the values with `keep(i)`; returns every thread's kept values.
fn alloc_on_threads<T: Send + 'static>(
    arena: &Arc<SharedArena<T>>,
    threads: u64,
    n: u64,
    keep: fn(u64) -> bool,
    make: fn(u64, u64) -> T,
) -> Vec<ArenaBox<T>> {
    let start = Arc::new(std::sync::Barrier::new(threads as usize));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (arena, start) = (Arc::clone(arena), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut kept = Vec::new();
                for i in 0..n {
                    let v = arena.alloc(make(t, i));
                    if keep(i) {
                        kept.push(v);
                    }
                }
                kept
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Panics if two of `values` share a slot.
fn assert_disjoint<T>(values: &[ArenaBox<T>]) {
    let mut addrs: Vec<_> = values.iter().map(|v| &**v as *const T as usize).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), values.len(), "two live values share a slot");
}

/// Many threads allocate from one `SharedArena` at once and keep their values; no two
/// live values share a slot and every one keeps its contents.
#[test]
fn stress_shared_allocation_is_disjoint() {
    let arena = Arc::new(SharedArena::<[u64; 3]>::new());
    let n = scaled(5_000) as u64;
    let kept = alloc_on_threads(&arena, 4, n, |i| i % 3 == 0, |t, i| [t, i, t ^ i]);
    assert_disjoint(&kept);
    assert!(kept.iter().all(|v| v[2] == v[0] ^ v[1]));
    assert_eq!(arena.len(), kept.len());
}

/// `with_capacity` pages serve whichever thread allocates: one thread alone fills the
/// whole capacity without a new page (the pages wait in a reserve rather than being dealt
/// out to shards it never uses), and several threads together stay disjoint and count
/// right. Unclaimed pages are freed by `shrink_to_fit` or with the arena (Miri checks).
#[test]
fn shared_arena_capacity_serves_any_thread() {
    let pages = scaled(40);
    let cap = pages * PAGE_SLOTS;

    let arena = SharedArena::<u64>::with_capacity(cap);
    assert_eq!(used_free(arena.stats()), (0, cap));
    let values: Vec<_> = (0..cap as u64).map(|i| arena.alloc(i)).collect();
    assert_eq!(
        arena.capacity(),
        cap,
        "grew although the capacity was there"
    );
    assert_eq!(used_free(arena.stats()), (cap, 0));
    assert!(values.iter().enumerate().all(|(i, v)| **v == i as u64));
    drop(values);
    assert_eq!(used_free(arena.stats()), (0, cap));

    let arena = Arc::new(SharedArena::<[u64; 2]>::with_capacity(cap));
    let per_thread = (cap / 4) as u64;
    let kept = alloc_on_threads(&arena, 4, per_thread, |_| true, |t, i| [t, i]);
    assert_disjoint(&kept);
    assert_eq!(arena.len(), kept.len());
    assert!(arena.capacity() >= cap);

    // A reserve that nobody claimed: freed by `shrink_to_fit`, or with the arena.
    let idle = SharedArena::<u8>::with_capacity(cap);
    let one = idle.alloc(1);
    assert!(idle.shrink_to_fit());
    assert_eq!(used_free(idle.stats()), (1, PAGE_SLOTS - 1));
    drop(SharedArena::<u8>::with_capacity(cap));
    drop(idle);
    assert_eq!(*one, 1);
}

/// A `SharedArena` thread takes free slots a page at a time into its magazine, from its
/// second allocation in a row on: until it gives them back they count as used for other
/// threads, and its own `stats()` gives them back first, so one thread always sees exact
/// counts.
#[test]
fn shared_arena_magazines_count_as_used_until_given_back() {
    let arena = Arc::new(SharedArena::<u64>::new());
    let (to_main, from_thread) = std::sync::mpsc::channel();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let t = {
        let arena = Arc::clone(&arena);
        thread::spawn(move || {
            // One slot from the shard, then a magazine-full: the other 62.
            to_main.send((arena.alloc(6), None)).unwrap();
            from_main.recv().unwrap();
            to_main.send((arena.alloc(7), None)).unwrap();
            from_main.recv().unwrap();
            let own = used_free(arena.stats()); // gives this thread's 61 cached slots back
            to_main.send((arena.alloc(8), Some(own))).unwrap(); // takes them again
        })
    };
    let (first, _) = from_thread.recv().unwrap();
    // One allocation is no reason to take a page's slots.
    assert_eq!(used_free(arena.stats()), (1, PAGE_SLOTS - 1));
    to_thread.send(()).unwrap();
    let (second, _) = from_thread.recv().unwrap();
    // The thread's page: two values, 61 slots in its magazine.
    assert_eq!(used_free(arena.stats()), (PAGE_SLOTS, 0));
    to_thread.send(()).unwrap();
    let (third, own) = from_thread.recv().unwrap();
    assert_eq!(own, Some((2, PAGE_SLOTS - 2)));
    t.join().unwrap();
    // The thread exited: its magazine went back to the page.
    assert_eq!(used_free(arena.stats()), (3, PAGE_SLOTS - 3));
    assert_eq!((*first, *second, *third), (6, 7, 8));
    drop(first);
    assert_eq!(used_free(arena.stats()), (2, PAGE_SLOTS - 2));
}

/// One magazine per thread, for one arena at a time: alternating between arenas of
/// different types hands each its own slots back (a wrong type would free a page with
/// the wrong layout: Miri checks), and a page whose arena is gone while another thread
/// still caches some of its slots is freed when that thread lets go of them (Miri checks
/// that nothing leaks).
#[test]
fn shared_arena_magazines_switch_arenas_and_outlive_them() {
    let small = SharedArena::<u8>::new();
    let big = SharedArena::<[u64; 9]>::new();
    let n = scaled(500);
    let mut smalls = Vec::new();
    let mut bigs = Vec::new();
    // Runs of three: each run's second allocation switches the magazine over.
    for i in 0..n {
        smalls.push(small.alloc(i as u8));
        if i % 3 == 2 {
            for j in i - 2..=i {
                bigs.push(big.alloc([j as u64; 9]));
            }
        }
    }
    for j in n - n % 3..n {
        bigs.push(big.alloc([j as u64; 9]));
    }
    assert!(smalls.iter().enumerate().all(|(i, v)| **v == i as u8));
    assert!(bigs.iter().enumerate().all(|(i, v)| v[8] == i as u64));
    assert_eq!((small.len(), big.len()), (n, n));
    drop(smalls);
    assert_eq!(small.stats().used, 0);
    drop(small); // this thread's cached slots, if any, go back first

    let arena = Arc::new(SharedArena::<String>::new());
    let (to_main, from_thread) = std::sync::mpsc::channel();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let t = {
        let arena = Arc::clone(&arena);
        thread::spawn(move || {
            let v = arena.alloc(String::from("made"));
            let w = arena.alloc(String::from("there")); // fills the magazine
            drop(arena);
            to_main.send((v, w)).unwrap();
            from_main.recv().unwrap();
            // The arena is gone; this thread still caches slots of its page. Another
            // arena's allocation gives them back, which frees the page.
            let other = SharedArena::<u8>::new();
            *other.alloc(3)
        })
    };
    let (v, w) = from_thread.recv().unwrap();
    drop(arena);
    assert_eq!((v.as_str(), w.as_str()), ("made", "there"));
    drop((v, w)); // the last values: the page waits for the thread's cached slots
    to_thread.send(()).unwrap();
    assert_eq!(t.join().unwrap(), 3);
    drop(bigs);
    drop(big);
}

/// A thread that allocates from an arena and drops the values itself puts their slots
/// into its magazine (no atomic instruction) and allocates them again from there: the
/// arena never takes a second page, and its counts stay exact.
#[test]
fn releases_on_the_allocating_thread_are_reused_in_place() {
    fn churn<H: std::ops::Deref<Target = u64>>(
        alloc: impl Fn(u64) -> H,
        stats: impl Fn() -> (usize, usize),
    ) {
        let mut kept = Vec::new();
        for i in 0..scaled(20_000) as u64 {
            let v = alloc(i);
            assert_eq!(*v, i);
            if i % 7 == 0 {
                kept.push(v); // a few stay alive, so slots are released out of order
            }
            if kept.len() == 40 {
                assert_eq!(stats(), (40, PAGE_SLOTS - 40));
                kept.drain(..30);
            }
        }
        assert_eq!(stats().0, kept.len());
        drop(kept);
        assert_eq!(stats(), (0, PAGE_SLOTS));
    }
    let arena = Arena::new();
    churn(|i| arena.alloc(i), || used_free(arena.stats()));
    let shared = SharedArena::new();
    churn(|i| shared.alloc(i), || used_free(shared.stats()));
    assert_eq!(
        (arena.capacity(), shared.capacity()),
        (PAGE_SLOTS, PAGE_SLOTS)
    );
}

/// An arena moved to another thread while the thread it came from still holds its page in
/// its magazine: both threads allocate and release, no slot goes twice, every value is
/// dropped once, and the page the arena no longer has is freed when the old thread
/// lets go of it, as another arena (of another type: a wrong layout is caught by Miri)
/// adopts its own page. Miri also checks that nothing leaks.
#[test]
fn arena_moved_away_from_a_thread_that_caches_its_page() {
    let drops = Arc::new(AtomicUsize::new(0));
    let arena = Arena::new();
    let n = scaled(150) as u64;
    let here: Vec<_> = (0..n)
        .map(|i| arena.alloc(Counted::new(i, &drops)))
        .collect();
    let there = {
        let drops = Arc::clone(&drops);
        thread::spawn(move || {
            let mut vs: Vec<_> = (n..2 * n)
                .map(|i| arena.alloc(Counted::new(i, &drops)))
                .collect();
            vs.retain(|v| v.value % 2 == 0); // released on the arena's new thread
            vs.extend((2 * n..3 * n).map(|i| arena.alloc(Counted::new(i, &drops))));
            // Counted as in use: the values, and the slots the first thread's magazine
            // holds (at most a page's).
            let live = vs.len() + n as usize;
            assert!((live..=live + PAGE_SLOTS).contains(&arena.len()));
            vs
        })
        .join()
        .unwrap()
    };
    // The arena is gone. This thread's releases of its former page go to its magazine.
    let mut values: Vec<u64> = here.iter().chain(&there).map(|v| v.value).collect();
    values.sort_unstable();
    values.dedup();
    assert_eq!(
        values.len(),
        here.len() + there.len(),
        "a slot was handed out twice"
    );
    drop(here);
    drop(there);
    assert_eq!(drops.load(Ordering::Relaxed), 3 * n as usize);
    let other = Arena::<[u8; 3]>::new();
    assert_eq!(*other.alloc([1, 2, 3]), [1, 2, 3]);
}

/// A thread that exits holding, in its magazine, the slots it released of a page whose
/// arena is gone gives them back on the way out, which frees the page (Miri checks
/// that nothing leaks); a value dropped on a thread whose magazine holds another page
/// goes to its own page's word.
#[test]
fn a_thread_exiting_with_released_slots_gives_them_back() {
    let arena = Arena::new();
    let keep = arena.alloc(String::from("kept"));
    let v = arena.alloc(String::from("moved"));
    let t = thread::spawn(move || {
        let own = Arena::new();
        let mine: Vec<_> = (0..3).map(|i| own.alloc(i)).collect();
        drop(v); // another page than this thread's magazine holds
        drop(own);
        mine.iter().map(|v| **v).sum::<i32>()
    });
    assert_eq!(t.join().unwrap(), 3);
    assert_eq!(used_free(arena.stats()), (1, PAGE_SLOTS - 1));
    let t = thread::spawn(move || {
        let w = arena.alloc(String::from("there")); // this thread adopts the page
        drop(arena);
        drop(keep); // into this thread's magazine: the page waits for it
        w.len()
    });
    assert_eq!(t.join().unwrap(), 5);
}

/// The seed page (the first page `with_capacity` makes): threads that start on a fresh
/// arena at once take its slots with compare-and-swaps on its word, with no lock; no
/// slot goes twice, the counts stay exact, `shrink_to_fit` keeps the page, and it is
/// freed with the arena (Miri checks for leaks and races).
#[test]
fn shared_arena_seed_page_shared_by_threads() {
    let threads = 4;
    let per_thread = scaled(40) as u64;
    let arena = Arc::new(SharedArena::<(u64, u64)>::with_capacity(PAGE_SLOTS));
    assert_eq!(arena.capacity(), PAGE_SLOTS);
    // Every other value goes at once, so its slot is released into the page word while
    // the others allocate.
    let kept = alloc_on_threads(&arena, threads, per_thread, |i| i % 2 == 0, |t, i| (t, i));
    assert_disjoint(&kept);
    for t in 0..threads {
        let mine: Vec<_> = kept.iter().filter(|v| v.0 == t).map(|v| v.1).collect();
        assert_eq!(mine, (0..per_thread).step_by(2).collect::<Vec<_>>());
    }
    // The threads exited, so their magazines went back: exact counts.
    let capacity = arena.capacity();
    assert_eq!(
        used_free(arena.stats()),
        (kept.len(), capacity - kept.len())
    );
    drop(kept);
    arena.shrink_to_fit();
    assert_eq!(
        used_free(arena.stats()),
        (0, PAGE_SLOTS),
        "the seed page is kept"
    );
    assert_eq!(*arena.alloc((9, 9)), (9, 9));
}

/// An operation in the model-based test.
#[derive(Debug, Clone)]
enum Op {
    Alloc(u32),
    AllocWith(u32),
    AllocRc(u32),
    CloneRc(usize),
    Drop(usize),
    Mutate(usize, u32),
    Shrink,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u32>().prop_map(Op::Alloc),
        2 => any::<u32>().prop_map(Op::AllocWith),
        1 => any::<u32>().prop_map(Op::AllocRc),
        1 => any::<usize>().prop_map(Op::CloneRc),
        4 => any::<usize>().prop_map(Op::Drop),
        1 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Mutate(i, v)),
        1 => Just(Op::Shrink),
    ]
}

/// Fewer and shorter cases under Miri, which also cannot write the failure file.
fn model_config() -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 64 });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}

/// Runs `ops` on a pool and on a model: a `Vec` of live handles with the values they
/// must hold, and a `HashMap` from slot address to the values living there. After each
/// step: every handle holds its value, distinct values never share an address, and the
/// pool's `len` is the model's.
macro_rules! model_test {
    ($name:ident, $Pool:ident) => {
        proptest! {
            #![proptest_config(model_config())]
            #[test]
            fn $name(cap in 0usize..if cfg!(miri) { 130 } else { 300 }, ops in proptest::collection::vec(op(), 0..if cfg!(miri) { 24 } else { 400 })) {
                enum H<B> { Box(B, u32), Rc(ArenaRc<Cell<u32>>, u32) }
                let pool = $Pool::with_capacity(cap);
                let rcs = $Pool::<Cell<u32>>::new();
                let mut live: Vec<H<_>> = Vec::new();
                let mut distinct = 0usize; // values, not handles
                for op in ops {
                    match op {
                        Op::Alloc(v) => { live.push(H::Box(pool.alloc(v), v)); distinct += 1; }
                        Op::AllocWith(v) => { live.push(H::Box(pool.alloc_with(|s| s.write(v)), v)); distinct += 1; }
                        Op::AllocRc(v) => { live.push(H::Rc(rcs.alloc_rc(Cell::new(v)), v)); distinct += 1; }
                        Op::CloneRc(i) if !live.is_empty() => {
                            let i = i % live.len();
                            if let H::Rc(rc, v) = &live[i] { let c = (rc.clone(), *v); live.push(H::Rc(c.0, c.1)); }
                        }
                        Op::Drop(i) if !live.is_empty() => {
                            let h = live.swap_remove(i % live.len());
                            match h {
                                H::Box(..) => distinct -= 1,
                                H::Rc(rc, _) => if ArenaRc::strong_count(&rc) == 1 { distinct -= 1 },
                            }
                        }
                        Op::Mutate(i, v) if !live.is_empty() => {
                            let i = i % live.len();
                            match &mut live[i] {
                                H::Box(b, old) => { **b = v; *old = v; }
                                H::Rc(rc, _) => {
                                    rc.set(v);
                                    let p = &**rc as *const Cell<u32>;
                                    for h in live.iter_mut() {
                                        if let H::Rc(r, old) = h { if &**r as *const Cell<u32> == p { *old = v; } }
                                    }
                                }
                            }
                        }
                        Op::Shrink => { pool.shrink_to_fit(); rcs.shrink_to_fit(); }
                        _ => {}
                    }
                    let mut slots: HashMap<usize, u32> = HashMap::new();
                    for h in &live {
                        let (addr, v, actual) = match h {
                            H::Box(b, v) => (&**b as *const u32 as usize, *v, **b),
                            H::Rc(r, v) => (&**r as *const Cell<u32> as usize, *v, r.get()),
                        };
                        prop_assert_eq!(actual, v);
                        // Two handles share an address only if they share the value.
                        if let Some(prev) = slots.insert(addr, v) { prop_assert_eq!(prev, v); }
                    }
                    prop_assert_eq!(slots.len(), distinct);
                    prop_assert_eq!(pool.len() + rcs.len(), distinct);
                    let (used, free) = pool.stats().into();
                    prop_assert_eq!(used + free, pool.capacity());
                }
                drop(live);
                prop_assert_eq!(pool.len(), 0);
                prop_assert_eq!(rcs.len(), 0);
            }
        }
    };
}

model_test!(model_pool, Pool);
model_test!(model_arena, Arena);
model_test!(model_shared_arena, SharedArena);
