//! A global allocator for tests that counts what it serves and refuses on demand.
//!
//! A test binary installs it with
//! `#[global_allocator] static A: common::faulty::Faulty = common::faulty::Faulty;`.
//! Only *armed* threads are counted or refused: the test's own thread (see
//! [`arm`]) and the threads it spawns through [`spawn`]. The test harness's threads are
//! left alone, so tests of one binary may still run side by side. Each allocation
//! carries a tag in front of it that names the [`no_leak`] check it was counted in, so
//! a counted block freed on another thread is uncounted correctly, and a block left
//! from an earlier check (a failed test's panic message) does not count in a later one.
//!
//! Refusals are per thread: [`refuse_nth`] refuses the `n`th counted allocation from
//! now (and, with `and_after`, every one after it), [`refuse_above`] every allocation
//! larger than a size.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// The allocator; see the module docs.
pub struct Faulty;

/// Bytes of counted allocations still live, over all threads.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
/// Counted allocations still live, over all threads.
static LIVE_BLOCKS: AtomicIsize = AtomicIsize::new(0);
/// The current [`no_leak`] check, numbered from 1 (0: none has run).
static SESSION: AtomicUsize = AtomicUsize::new(0);
/// Refusals so far, over all threads (so a test can tell a refusal happened).
static REFUSED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (and may be refused).
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// Counted allocations this thread made since it was armed.
    static SERVED: Cell<u64> = const { Cell::new(0) };
    /// The `SERVED` number at which to refuse (0: never).
    static REFUSE_AT: Cell<u64> = const { Cell::new(0) };
    /// Refuse every allocation from `REFUSE_AT` on, not only that one.
    static REFUSE_AFTER: Cell<bool> = const { Cell::new(false) };
    /// Refuse every allocation larger than this many bytes.
    static REFUSE_ABOVE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The tag before each block: room for it at the block's alignment.
fn prefix(layout: Layout) -> usize {
    layout.align().max(16)
}

fn refuse(size: usize) -> bool {
    let served = SERVED.with(|s| {
        let n = s.get() + 1;
        s.set(n);
        n
    });
    let at = REFUSE_AT.with(Cell::get);
    let hit = at != 0 && (served == at || (served > at && REFUSE_AFTER.with(Cell::get)));
    hit || size > REFUSE_ABOVE.with(Cell::get)
}

// SAFETY: every block comes from `System` with a layout `prefix` bytes larger at the
// same alignment, and is returned to it with that same layout; the tag lies inside the
// prefix, before the bytes handed out.
unsafe impl GlobalAlloc for Faulty {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let armed = ARMED.try_with(Cell::get).unwrap_or(false);
        if armed && refuse(layout.size()) {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        let pre = prefix(layout);
        let Ok(outer) = Layout::from_size_align(layout.size() + pre, layout.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `outer` has a non-zero size.
        let base = unsafe { System.alloc(outer) };
        if base.is_null() {
            return base;
        }
        // Exposed: `dealloc` gets a pointer that a collection may have narrowed to its
        // value (allocator-api2's `Box` does), and finds the tag and the block's start
        // from its address (so Miri runs these tests with permissive provenance).
        let _ = base as usize;
        // SAFETY: `pre >= 16` bytes lie before the block, the tag in the last word.
        unsafe {
            let p = base.add(pre);
            let session = if armed {
                SESSION.load(Ordering::Relaxed)
            } else {
                0
            };
            p.cast::<usize>().sub(1).write(session);
            if armed {
                LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
                LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let pre = prefix(layout);
        // The block's start, with the provenance `alloc` exposed.
        let base = (ptr as usize - pre) as *mut u8;
        // SAFETY: `ptr` came from `alloc` with this layout: the tag is just before it,
        // and the block starts `pre` bytes earlier with the outer layout.
        unsafe {
            let session = base.add(pre).cast::<usize>().sub(1).read();
            if session != 0 && session == SESSION.load(Ordering::Relaxed) {
                LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
                LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
            }
            let outer = Layout::from_size_align_unchecked(layout.size() + pre, layout.align());
            System.dealloc(base, outer);
        }
    }
}

/// Counts (and allows refusing) this thread's allocations from now on, with no refusal
/// planned.
pub fn arm() {
    ARMED.with(|a| a.set(true));
    SERVED.with(|s| s.set(0));
    disarm_refusals();
}

/// Stops counting this thread's allocations (blocks already counted stay counted).
pub fn disarm() {
    disarm_refusals();
    ARMED.with(|a| a.set(false));
}

/// Cancels any planned refusal on this thread.
pub fn disarm_refusals() {
    REFUSE_AT.with(|r| r.set(0));
    REFUSE_AFTER.with(|r| r.set(false));
    REFUSE_ABOVE.with(|r| r.set(usize::MAX));
}

/// Refuses this thread's `n`th counted allocation from now (`n >= 1`); with
/// `and_after`, every one after it too.
pub fn refuse_nth(n: u64, and_after: bool) {
    assert!(n >= 1);
    let served = SERVED.with(Cell::get);
    REFUSE_AT.with(|r| r.set(served + n));
    REFUSE_AFTER.with(|r| r.set(and_after));
}

/// Refuses every allocation of this thread larger than `bytes`.
pub fn refuse_above(bytes: usize) {
    REFUSE_ABOVE.with(|r| r.set(bytes));
}

/// Counted allocations this thread has made since [`arm`].
pub fn served() -> u64 {
    SERVED.with(Cell::get)
}

/// Refusals so far, over all threads.
pub fn refused() -> usize {
    REFUSED.load(Ordering::Relaxed)
}

/// `(bytes, blocks)` of counted allocations still live, over all threads.
pub fn live() -> (isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    )
}

/// Spawns a thread whose allocations are counted too.
pub fn spawn<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        arm();
        let r = f();
        disarm();
        r
    })
}

/// Runs `f` on this thread, armed, and checks that every byte it allocated was freed
/// by the end (its own and those of the threads it spawned through [`spawn`]). Blocks
/// allocated before the call are not counted. Runs one such check at a time in the
/// process: counts are global. Print outside the check: the test harness keeps what a
/// test prints, which would read as a leak.
pub fn no_leak<T>(what: &str, f: impl FnOnce() -> T) -> T {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    LIVE_BYTES.store(0, Ordering::Relaxed);
    LIVE_BLOCKS.store(0, Ordering::Relaxed);
    SESSION.fetch_add(1, Ordering::Relaxed);
    arm();
    let r = f();
    disarm();
    assert_eq!(
        live(),
        (0, 0),
        "{what}: (bytes, blocks) allocated during the check and still live: leaked"
    );
    r
}
