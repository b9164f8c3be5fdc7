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
//! Both may read the old values unless something orders each store before its load.
//! On Linux x86-64 the waiter pays for both sides with `membarrier` (private
//! expedited: every running thread of the process executes a full barrier before it
//! returns), and the release side needs only a compiler fence (`light_barrier`): a
//! release whose load came before the waiter's barrier had its store made visible by
//! it, and one whose load came after sees the bit. Elsewhere, or where the kernel
//! refuses `membarrier`, the release side pays a `SeqCst` fence
//! ([`release_fence`]), and a blocked waiter also wakes on a short timeout.
//!
//! A waiter that tries again must walk its whole ring (`Ring::claim_waiting`): a plain
//! claim may look only at the oldest region for a while after a full lap.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::orphan;

/// Tries before a waiter registers: a release on another core is often this close.
const SPINS: u32 = 64;

/// The longest a blocked waiter sleeps without a wake-up when the release side has no
/// barrier of its own (the fallback): a lost wake-up costs this much, not a hang.
const FALLBACK_SLICE: Duration = Duration::from_millis(1);

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

static WAITERS: Mutex<Waiters> = Mutex::new(Waiters {
    epoch: 0,
    blocked: 0,
    tasks: Vec::new(),
    next_id: 0,
});

/// Blocked threads sleep here.
static WOKEN: Condvar = Condvar::new();

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

/// Called by a release that found the bit set: wakes every waiter.
#[cold]
#[inline(never)]
pub(crate) fn wake() {
    let tasks = {
        let mut w = lock();
        w.epoch = w.epoch.wrapping_add(1);
        let tasks = core::mem::take(&mut w.tasks);
        settle(&w);
        tasks
    };
    WOKEN.notify_all();
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
    orphan::set_waiting(true);
    let out = loop {
        let epoch = w.epoch;
        drop(w);
        let exact = heavy_barrier();
        let got = try_claim(true);
        w = lock();
        if got.is_some() {
            break got;
        }
        if w.epoch != epoch {
            continue; // a release came while the ring was tried: try again
        }
        let slice = if exact { Duration::MAX } else { FALLBACK_SLICE };
        let sleep = match deadline {
            None => slice,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(slice),
                _ => break None,
            },
        };
        w = if sleep == Duration::MAX {
            WOKEN.wait(w).unwrap_or_else(|e| e.into_inner())
        } else {
            WOKEN
                .wait_timeout(w, sleep)
                .unwrap_or_else(|e| e.into_inner())
                .0
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
    let exact = heavy_barrier();
    if let Some(t) = try_claim() {
        slot.leave();
        return Poll::Ready(t);
    }
    if !exact {
        // No barrier on the release side: poll again rather than risk a lost wake-up.
        cx.waker().wake_by_ref();
    }
    Poll::Pending
}

/// The waiter's side of the store-load pattern: `true` when every thread of the
/// process has executed a full barrier (so the release side needs only
/// [`light_barrier`]); `false` after a `SeqCst` fence, when the release side must fence
/// too ([`release_fence`] says whether it does).
fn heavy_barrier() -> bool {
    if membarrier::expedited() {
        return true;
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    false
}

/// Whether a release must pay a `SeqCst` fence between its header store and its load of
/// the word: where `membarrier` cannot serve the waiter. A constant per build.
pub(crate) const fn release_fence() -> bool {
    !membarrier::AVAILABLE
}

/// Linux's `membarrier` through a raw system call (no libc dependency).
mod membarrier {
    /// Whether this build can call it at all; the kernel may still refuse.
    pub(super) const AVAILABLE: bool =
        cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri)));

    /// Registers (once) and runs a private expedited barrier; `false` when the build or
    /// the kernel cannot.
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
    pub(super) fn expedited() -> bool {
        use std::sync::atomic::{AtomicU8, Ordering};
        const SYS_MEMBARRIER: usize = 324;
        const CMD_PRIVATE_EXPEDITED: usize = 1 << 3;
        const CMD_REGISTER_PRIVATE_EXPEDITED: usize = 1 << 4;
        /// 0: not tried yet, 1: registered, 2: refused.
        static STATE: AtomicU8 = AtomicU8::new(0);
        // Relaxed: the state only says which call to make; the kernel orders the rest.
        let mut state = STATE.load(Ordering::Relaxed);
        if state == 0 {
            state = if syscall(SYS_MEMBARRIER, CMD_REGISTER_PRIVATE_EXPEDITED) == 0 {
                1
            } else {
                2
            };
            STATE.store(state, Ordering::Relaxed);
        }
        state == 1 && syscall(SYS_MEMBARRIER, CMD_PRIVATE_EXPEDITED) == 0
    }

    #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri))))]
    pub(super) fn expedited() -> bool {
        false
    }

    /// `syscall(nr, cmd, 0, 0)`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
    fn syscall(nr: usize, cmd: usize) -> isize {
        let ret: isize;
        // SAFETY: `membarrier(cmd, flags = 0, cpu_id = 0)` reads and writes no memory of
        // this process; the kernel clobbers rcx and r11 on `syscall`, declared here.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") cmd,
                in("rsi") 0usize,
                in("rdx") 0usize,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }
}
