//! Blocks whose ring was dropped while buffers still lived in them.
//!
//! Releasing a uniquely owned buffer is one `Release` store, with no read-modify-write
//! that could tell the releasing thread it was the last user of a dropped ring's block.
//! So a dropped ring does not wait and does not leak: it frees each block whose regions
//! are all free, and pushes the others on a global lock-free stack of orphans. Those are
//! freed by a sweep that runs
//! - after any release while the stack is non-empty (one `Relaxed` load of the stack
//!   head on every release: a plain `mov` on x86, on a line that is only read), and
//! - on ring activity: `Ring::new`, `Ring`'s drop, and the ring's full path.
//!
//! A sweep takes the whole stack with one `swap`, scans each block from where its last
//! scan stopped (so a long-lived buffer costs one header read per sweep, not a walk),
//! frees the blocks that are all free and pushes the rest back.
//!
//! The one window left: the release store and the stack-head load of the very last
//! buffer may pass the dropping ring's scan and push (a store-load reordering no
//! `Release`/`Acquire` pair forbids). The block then stays on the stack until the next
//! release or ring activity anywhere in the process sweeps it.

use core::ptr::{self, NonNull};

use super::block::BlockCtl;
use crate::sync::{AtomicPtr, Ordering};

#[cfg(not(loom))]
static ORPHANS: AtomicPtr<BlockCtl> = AtomicPtr::new(ptr::null_mut());

#[cfg(loom)]
loom::lazy_static! {
    static ref ORPHANS: AtomicPtr<BlockCtl> = AtomicPtr::new(ptr::null_mut());
}

/// Called by a ring that gives up `ctl`: frees it now if every region is free, or
/// leaves it to a later sweep.
///
/// # Safety
/// - `ctl` is a live block that no ring will use again;
/// - only buffer handles may still refer to it.
pub(crate) unsafe fn retire(ctl: NonNull<BlockCtl>) {
    // SAFETY: the block is alive and now ours alone (contract).
    let block = unsafe { ctl.as_ref() };
    block.cursor.set(0);
    if block.scan_free() {
        // SAFETY: every region reads free with Acquire, so no handle touches it again;
        // no ring or list refers to it.
        unsafe { BlockCtl::destroy(ctl) };
    } else {
        push_list(ctl.as_ptr(), ctl.as_ptr());
    }
}

/// Called after every release: sweeps when there are orphans.
#[inline]
pub(crate) fn after_release() {
    // Relaxed: only a hint; the sweep synchronises through the stack itself.
    if !ORPHANS.load(Ordering::Relaxed).is_null() {
        sweep();
    }
}

/// Frees every orphaned block whose regions have all been released.
#[cold]
#[inline(never)]
pub(crate) fn sweep() {
    // Acquire: pairs with the Release in `push_list`, making the blocks' control areas
    // and headers (as the rings left them) visible.
    let mut cur = ORPHANS.swap(ptr::null_mut(), Ordering::Acquire);
    let (mut keep_head, mut keep_tail): (*mut BlockCtl, *mut BlockCtl) =
        (ptr::null_mut(), ptr::null_mut());
    while let Some(ctl) = NonNull::new(cur) {
        // SAFETY: blocks on the stack are alive until a sweep that took them frees them;
        // this sweep took `ctl`, so no one else touches its control area.
        let block = unsafe { ctl.as_ref() };
        cur = block.next.get();
        if block.scan_free() {
            // SAFETY: all regions released (Acquire scan); we removed it from the stack.
            unsafe { BlockCtl::destroy(ctl) };
        } else {
            block.next.set(keep_head);
            if keep_tail.is_null() {
                keep_tail = ctl.as_ptr();
            }
            keep_head = ctl.as_ptr();
        }
    }
    if !keep_head.is_null() {
        push_list(keep_head, keep_tail);
    }
}

/// Pushes the chain `head ..= tail` (linked through `next`) on the stack.
fn push_list(head: *mut BlockCtl, tail: *mut BlockCtl) {
    // Relaxed on failure: we retry with the fresh head; Release on success publishes the
    // chain's control areas to the sweep that takes it (its Acquire swap).
    let mut old = ORPHANS.load(Ordering::Relaxed);
    loop {
        // SAFETY: `tail` is an orphaned block owned by this thread until it is pushed.
        unsafe { (*tail).next.set(old) };
        match ORPHANS.compare_exchange_weak(old, head, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => old = now,
        }
    }
}

/// Whether any orphaned block waits for its buffers.
#[cfg(test)]
pub(crate) fn pending() -> bool {
    !ORPHANS.load(Ordering::Acquire).is_null()
}
