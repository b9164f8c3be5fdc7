//! Waiting for room: the protocol between a producer that found its ring full and the
//! releases that make room.
//!
//! A release already loads one word after its header store (`orphan::after_release`);
//! a waiter sets a bit in that word, so a release pays nothing more while nobody waits.
//! With the bit set, a release bumps an epoch, notifies the blocked threads and wakes
//! the waiting tasks (`wake`).
//!
//! The lost wake-up to rule out is the store-load pattern: the waiter sets the bit and
//! then tries its ring again; a release stores its header and then loads the word.
//! Both may read the old values unless something orders each store before its load:
//! the waiter pays [`barrier::heavy`] (`membarrier` on Linux x86-64) and the release
//! [`barrier::light`] (a compiler fence there), the pair that also closes the orphans'
//! window (`sync.rs`). The loom models in `tests/loom.rs` check it, and fail without
//! the light side.
//!
//! A waiter that tries again must walk its whole ring (`Ring::claim_waiting`): a plain
//! claim may look only at the oldest region for a while after a full lap.

use std::task::{Context, Poll, Waker};
use std::time::Instant;
use std::vec::Vec;

use super::orphan;
use crate::sync::{barrier, Condvar, Mutex, MutexGuard};

/// Tries before a waiter registers: a release on another core is often this close.
/// One under loom, which models every try.
const SPINS: u32 = if cfg!(loom) { 1 } else { 64 };

/// Who waits, under one lock.
struct Waiters {
    /// Bumped by every release that finds the bit set: a blocked waiter that saw it
    /// change while it was trying its ring tries again instead of sleeping.
    epoch: u64,
    /// Threads blocked in [`block_until`].
    blocked: usize,
    /// Tasks waiting in [`poll_until`], with the id their future keeps.
    tasks: Vec<(u64, Waker)>,
    next_id: u64,
}

const NOBODY: Waiters = Waiters {
    epoch: 0,
    blocked: 0,
    tasks: Vec::new(),
    next_id: 0,
};

crate::sync::global! {
    static WAITERS: Mutex<Waiters> = Mutex::new(NOBODY);
}

crate::sync::global! {
    /// Blocked threads sleep here.
    static WOKEN: Condvar = Condvar::new();
}

fn lock() -> MutexGuard<'static, Waiters> {
    // The state stays consistent at every unlock: a panic elsewhere cannot break it.
    WAITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Clears the bit once nobody waits (under the lock, like every change of it).
fn settle(w: &Waiters) {
    if w.blocked == 0 && w.tasks.is_empty() {
        orphan::set_waiting(false);
    }
}

/// Called by a release that found the bit set: wakes every waiter, and clears the bit
/// (a waiter that still finds no room sets it again before it tries), so the other
/// releases of a batch do not all take the lock while the woken thread gets going.
#[cold]
#[inline(never)]
pub(crate) fn wake() {
    let (tasks, blocked) = {
        let mut w = lock();
        w.epoch = w.epoch.wrapping_add(1);
        orphan::set_waiting(false);
        (core::mem::take(&mut w.tasks), w.blocked)
    };
    if blocked != 0 {
        WOKEN.notify_all();
    }
    for (_, waker) in tasks {
        waker.wake();
    }
}

/// Runs `try_claim` until it returns `Some`, parking between tries until a release
/// wakes this thread; `None` when `deadline` passes first. `try_claim(true)` must walk
/// the whole ring: it runs after a wake-up.
pub(crate) fn block_until<T>(
    mut try_claim: impl FnMut(bool) -> Option<T>,
    deadline: Option<Instant>,
) -> Option<T> {
    for _ in 0..SPINS {
        if let Some(t) = try_claim(false) {
            return Some(t);
        }
        core::hint::spin_loop();
    }
    let mut w = lock();
    w.blocked += 1;
    let out = loop {
        // Set again on every try: a release that woke this thread cleared it.
        orphan::set_waiting(true);
        let epoch = w.epoch;
        drop(w);
        barrier::heavy();
        let got = try_claim(true);
        w = lock();
        if got.is_some() {
            break got;
        }
        if w.epoch != epoch {
            continue; // a release came while the ring was tried: try again
        }
        w = match deadline {
            None => WOKEN.wait(w).unwrap_or_else(|e| e.into_inner()),
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => {
                    WOKEN
                        .wait_timeout(w, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                _ => break None,
            },
        };
    };
    w.blocked -= 1;
    settle(&w);
    out
}

/// A task's place among the waiters (its future keeps it), removed on drop.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot(Option<u64>);

impl TaskSlot {
    fn leave(&mut self) {
        if let Some(id) = self.0.take() {
            let mut w = lock();
            let gone = take_task(&mut w, id);
            settle(&w);
            drop(w);
            // Dropped unlocked: a waker's drop is the executor's code, and what it
            // drops may release ring memory, whose release takes this lock.
            drop(gone);
        }
    }
}

/// Removes the task `id` from the waiters, handing its waker back to be dropped once
/// the lock is released.
fn take_task(w: &mut Waiters, id: u64) -> Option<Waker> {
    let at = w.tasks.iter().position(|(i, _)| *i == id)?;
    Some(w.tasks.swap_remove(at).1)
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        self.leave();
    }
}

/// One poll of a waiting future: `try_claim` now, else registers the task's waker
/// (replacing the one it registered before) and tries once more.
pub(crate) fn poll_until<T>(
    slot: &mut TaskSlot,
    cx: &mut Context<'_>,
    mut try_claim: impl FnMut() -> Option<T>,
) -> Poll<T> {
    if let Some(t) = try_claim() {
        slot.leave();
        return Poll::Ready(t);
    }
    let waker = cx.waker().clone();
    let old = {
        let mut w = lock();
        let old = slot.0.and_then(|id| take_task(&mut w, id));
        let id = w.next_id;
        w.next_id += 1;
        w.tasks.push((id, waker));
        slot.0 = Some(id);
        orphan::set_waiting(true);
        old
    };
    drop(old); // unlocked, as in `TaskSlot::leave`
    barrier::heavy();
    if let Some(t) = try_claim() {
        slot.leave();
        return Poll::Ready(t);
    }
    Poll::Pending
}
