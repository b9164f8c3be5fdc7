//! Loom models of what a thread's exit hands back: the thread-locals behind
//! [`tls`](crate::tls), [`OneRingAlloc`](crate::OneRingAlloc) and the slab's magazines,
//! reached through the crate's door ([`thread_local!`](crate::sync::thread_local)), so
//! the code checked is the code that ships. Their threads end as `std` threads do (see
//! [`model`](crate::sync::model)): a `join` returns after the thread's thread-local
//! destructors. Pages and ring blocks come from loom's tracked heap, so one that is
//! leaked or freed twice fails a model; loom-visible cells stand for the memory handed
//! over, so an access not ordered after the previous holder's is reported as a race.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p ringmem --lib loom_exit -- --nocapture
//! ```

use std::sync::Arc;

use crate::slab::SharedArena;
use crate::sync::model::{run_model, thread};
use crate::sync::{AtomicUsize, CheckedCell, Ordering};

/// A loom-visible stand-in for memory handed between threads, and a drop counter.
struct Shadow {
    cell: CheckedCell<u64>,
    drops: AtomicUsize,
}

// SAFETY: the cell is accessed by whoever holds the memory it stands for; loom checks
// that those accesses are ordered, which is what the models are for.
unsafe impl Sync for Shadow {}

impl Shadow {
    fn new() -> Arc<Self> {
        Arc::new(Shadow {
            cell: CheckedCell::new(0),
            drops: AtomicUsize::new(0),
        })
    }

    fn write(&self, v: u64) {
        // SAFETY: loom checks this access against every other one for a race.
        self.cell.with_mut(|p| unsafe { *p = v });
    }

    fn read(&self) -> u64 {
        // SAFETY: as in `write`.
        self.cell.with_mut(|p| unsafe { *p })
    }
}

/// A slab value: writes the shadow (the slot's memory) when dropped, if `touching`.
struct Value {
    key: u64,
    shadow: Arc<Shadow>,
    touching: bool,
}

impl Drop for Value {
    fn drop(&mut self) {
        if self.touching {
            self.shadow.write(self.key);
        }
        // Relaxed: a count the main thread reads after the joins.
        self.shadow.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// A thread's magazine given back when the thread exits. The thread allocates twice
/// (its second allocation takes the page's free slots into its magazine), drops one
/// value (its slot joins the magazine) and hands the other over, while the main thread
/// allocates from the arena too: if that allocation reuses the dropped value's slot
/// (given back by the exit), it comes after the drop. Once the thread is joined, the
/// arena counts only the two live values (none of the magazine's slots is lost), and
/// dropping them and the arena frees every page (loom's leak check).
#[test]
fn magazine_given_back_at_thread_exit() {
    run_model("magazine_given_back_at_thread_exit", || {
        let shadow = Shadow::new();
        let arena = Arc::new(SharedArena::new());
        let dropped_at = Arc::new(AtomicUsize::new(0));
        let (arena2, shadow2, dropped_at2) = (arena.clone(), shadow.clone(), dropped_at.clone());
        let t = thread::spawn(move || {
            let dropped = arena2.alloc(Value {
                key: 1,
                shadow: shadow2.clone(),
                touching: true,
            });
            let handed = arena2.alloc(Value {
                key: 2,
                shadow: shadow2,
                touching: false,
            });
            // Relaxed: only says which slot to look for; the slot's own handover
            // orders the accesses the model checks.
            dropped_at2.store(&*dropped as *const Value as usize, Ordering::Relaxed);
            drop(dropped);
            handed
        });
        let mine = arena.alloc(Value {
            key: 3,
            shadow: shadow.clone(),
            touching: false,
        });
        if &*mine as *const Value as usize == dropped_at.load(Ordering::Relaxed) {
            assert_eq!(shadow.read(), 1, "a reused slot follows its value's drop");
            shadow.write(3);
        }
        let theirs = t.join().unwrap();
        assert_eq!(arena.len(), 2, "the exit gave the magazine's slots back");
        drop(theirs);
        drop(mine);
        assert_eq!(arena.len(), 0);
        assert_eq!(shadow.drops.load(Ordering::Relaxed), 3);
    });
}

/// A buffer of a thread's own ring ([`tls::fixed`](crate::tls::fixed)) handed to a
/// thread that drops it while the first one exits: the exit drops the thread's ring with
/// the buffer live, the drop comes before, during or after that, and whichever is last
/// frees the ring's block, once, after the buffer's last use.
#[test]
fn tls_buffer_dropped_elsewhere_as_its_thread_exits() {
    run_model("tls_buffer_dropped_elsewhere_as_its_thread_exits", || {
        let shadow = Shadow::new();
        let t = thread::spawn(move || {
            let mut buf = crate::tls::fixed(32).expect("the default ring has room");
            buf.try_extend_from_slice(&[7; 32]).unwrap();
            shadow.write(7);
            thread::spawn(move || {
                assert_eq!(shadow.read(), 7);
                assert_eq!(&buf[..], &[7; 32][..]);
                shadow.write(0);
                drop(buf);
            })
        });
        let u = t.join().unwrap();
        u.join().unwrap();
    });
}

/// [`OneRingAlloc`](crate::OneRingAlloc) memory (two small blocks of the thread's
/// chunk) allocated on one thread and freed on another while the first one exits. The
/// exit retires the chunk and drops the thread's ring; the freeing thread holds the
/// first block's bytes back (its `Held`, in a thread-local without a destructor) and
/// gives them back with the second's, or at its own exit. Whichever is last releases
/// the chunk and frees the ring's block, once, with no race on the chunk's count.
#[cfg(feature = "allocator-api2")]
#[test]
fn one_ring_alloc_freed_elsewhere_as_its_thread_exits() {
    use allocator_api2::boxed::Box;
    run_model("one_ring_alloc_freed_elsewhere_as_its_thread_exits", || {
        let t = thread::spawn(|| {
            let first = Box::new_in([5u8; 24], crate::OneRingAlloc);
            let second = Box::new_in([6u8; 24], crate::OneRingAlloc);
            thread::spawn(move || {
                assert_eq!((*first, *second), ([5u8; 24], [6u8; 24]));
                drop(first);
                drop(second);
            })
        });
        let u = t.join().unwrap();
        u.join().unwrap();
    });
}
