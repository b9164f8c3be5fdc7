//! Which bytes of which provided buffer belong to whom: the bookkeeping of a buffer
//! group as a plain state machine, with no system call in it, so that a fake kernel
//! can drive it under Miri (`model` tests) as the real one does.
//!
//! A buffer is a ring region. Published, it belongs to the kernel, which may write any
//! byte of it past what it has completed so far; the books hold the region's count
//! for it. Each completion that names the buffer carries the bytes written since the
//! last one: they become a [`FixedBuf`] view of the region (a count more), never
//! written again. A completion without `IORING_CQE_F_BUF_MORE` gives the buffer back:
//! the books hand their count to the buffer's [`Probe`] and the id is free to publish
//! another region under. Once the kernel and every reader are done with the buffer
//! (the last view dropped), the probe releases that count: whether it was the region's
//! last tells whether frames of it are kept, which the group's [`Trust`] hears.

use core::fmt;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;
use crate::io::Trust;
use crate::{FixedBuf, FixedBufMut};

/// Spare probes tried for reuse at a publish, the oldest first.
const SPARES_TRIED: usize = 4;

/// What the kernel is given for one buffer: an entry of the group's ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// The first byte the kernel may write, with the provenance to write it.
    pub(crate) addr: *mut u8,
    /// Bytes it may write.
    pub(crate) len: u32,
    /// The buffer's id, which completions name.
    pub(crate) bid: u16,
}

/// A completion the books cannot account for: the kernel (or a fake one) broke the
/// protocol. The bytes are not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BooksError {
    /// A completion names a buffer the kernel was not given.
    NotPublished(u16),
    /// A completion runs past the end of its buffer.
    Overrun {
        /// The buffer.
        bid: u16,
        /// Bytes completed before, and in this completion.
        filled: usize,
        bytes: usize,
        /// The buffer's length.
        len: usize,
    },
}

impl fmt::Display for BooksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BooksError::NotPublished(bid) => {
                write!(
                    f,
                    "a completion names buffer {bid}, which the kernel does not hold"
                )
            }
            BooksError::Overrun {
                bid,
                filled,
                bytes,
                len,
            } => write!(
                f,
                "a completion of {bytes} bytes into buffer {bid} after {filled} runs past its {len}"
            ),
        }
    }
}

impl std::error::Error for BooksError {}

/// The group's verdict on its readers (see `Trust`), and whether it trusts them, read
/// without the lock by every frame a reader yields.
pub(crate) struct Judge {
    pub(crate) trust: Mutex<Trust>,
    trusted: AtomicBool,
}

impl Judge {
    /// A group's start: its first buffers probes.
    pub(crate) fn new() -> Judge {
        Judge {
            trust: Mutex::new(Trust::new()),
            trusted: AtomicBool::new(false),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Trust> {
        lock(&self.trust)
    }

    /// Whether frames are slices of their views now (no frame found kept since the
    /// probes said so); else short ones are copied.
    pub(crate) fn trusted(&self) -> bool {
        // Relaxed: a hint; a frame copied or not is correct either way.
        self.trusted.load(Ordering::Relaxed)
    }
}

/// What a completion brings.
#[derive(Debug)]
pub(crate) struct Completion {
    /// Its bytes: a view of its buffer.
    pub(crate) view: FixedBuf,
    /// The buffer's probe, of which the view is one open view: closed by whoever drops
    /// the view ([`Probe::close`]).
    pub(crate) probe: Arc<Probe>,
    /// Whose completion was the buffer's last before this one, if it was another's:
    /// a partial frame that one holds at the buffer's end can no longer be joined by
    /// its next bytes (see [`Probe::joinable`]).
    pub(crate) displaced: Option<u64>,
}

/// One buffer's account of who is still at it: the views handed out and not yet
/// dropped by their readers, and the kernel until it gives the buffer back. When the
/// last closes, nothing but frames can hold the region: the probe releases the count
/// the kernel held and tells the group's [`Trust`] whether it was the region's last
/// (no frame kept) or not (a frame kept), as `Core::retire` does for a reader's region.
pub(crate) struct Probe {
    /// Views not yet closed, and one for the kernel while it holds the buffer.
    open: AtomicU32,
    /// Views handed out.
    views: AtomicU32,
    /// The byte right after the buffer's last completion, where the kernel writes
    /// next (compared, never read through); null once it gave the buffer back.
    tail: AtomicPtr<u8>,
    /// The region's count the kernel held, once it gave the buffer back.
    held: Mutex<Option<FixedBuf>>,
    /// Frames of it were copied (it was published while copying, or the group stopped
    /// trusting meanwhile): its close counts one such buffer done with, whatever it
    /// finds; else it tells whether frames are kept.
    copy: AtomicBool,
    /// Published as a probe (`Trust::probing`): its frames are never copied, they are
    /// the test.
    pub(crate) probing: bool,
    pub(crate) judge: Arc<Judge>,
}

impl Probe {
    /// Whether a short frame of this buffer is copied now: not a probe's, and the
    /// group does not trust its readers. Marks the buffer as one of copies.
    pub(crate) fn copies(&self) -> bool {
        let copy = !self.probing && !self.judge.trusted();
        if copy {
            self.copy.store(true, Ordering::Relaxed);
        }
        copy
    }

    /// Whether bytes that end at `end` (a view's end) can still be joined by the next
    /// completion of their connection: the kernel writes this buffer next right there.
    /// Read under the reader's queue lock, which orders it after the driver's update
    /// of every completion routed before (see `State::route`).
    pub(crate) fn joinable(&self, end: *const u8) -> bool {
        // Relaxed: ordered by the queue's lock, as said above.
        core::ptr::eq(self.tail.load(Ordering::Relaxed), end)
    }

    /// One view (or the kernel's hold) is done with; the last looks whether a frame
    /// still holds the region.
    pub(crate) fn close(&self) {
        // AcqRel: the last closer sees every other closer's drops of its handles.
        if self.open.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let held = lock(&self.held).take();
        if let Some(held) = held {
            let free = held.release_was_last();
            let views = self.views.load(Ordering::Relaxed);
            let mut trust = self.judge.lock();
            // Relaxed: stored before the views it marks were dropped, which the
            // closes' `AcqRel` orders before this.
            if self.copy.load(Ordering::Relaxed) {
                trust.retire_copy();
            } else {
                trust.found(free, views);
            }
            self.judge.trusted.store(trust.trusted(), Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("open", &self.open)
            .field("views", &self.views)
            .finish_non_exhaustive()
    }
}

/// One buffer id's state.
#[derive(Default)]
struct Slot {
    /// The region's count the kernel holds, a view of no bytes at its start; `None`
    /// while the id is free.
    held: Option<FixedBuf>,
    /// Bytes completed so far, from the start.
    filled: usize,
    /// Bytes the kernel was given.
    len: usize,
    /// Its probe, while the kernel holds it.
    probe: Option<Arc<Probe>>,
    /// Whose completion was its last (see [`Completion::displaced`]).
    last: Option<u64>,
}

/// The buffers of one group, by id.
pub(crate) struct Books {
    slots: Box<[Slot]>,
    /// What the probes tell.
    judge: Arc<Judge>,
    /// Ids the kernel does not hold, the next to publish last.
    free: Vec<u16>,
    /// Bytes of the buffers the kernel holds that no completion has taken yet.
    unfilled: usize,
    /// Probes of buffers given back, the longest ago first, for buffers published
    /// later once their views are closed (no allocation per buffer in a steady run).
    spare: VecDeque<Arc<Probe>>,
    /// Probes kept spare at most.
    spares: usize,
}

impl Books {
    /// Books for ids `0..entries`, all free, whose probes tell `judge`; `spares`
    /// probes of buffers given back are kept for reuse (a buffer's probe lives while
    /// views of it do: as many as the buffers the ring holds, to allocate none).
    pub(crate) fn new(entries: u16, judge: Arc<Judge>, spares: usize) -> Books {
        Books {
            slots: (0..entries).map(|_| Slot::default()).collect(),
            judge,
            free: (0..entries).rev().collect(),
            unfilled: 0,
            spare: VecDeque::new(),
            spares,
        }
    }

    /// Ids free to publish a region under.
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// Buffers the kernel holds.
    pub(crate) fn published(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Bytes the kernel holds that no completion has taken yet: what receives can
    /// still take before the next buffer is published.
    pub(crate) fn unfilled(&self) -> usize {
        self.unfilled
    }

    /// Publishes `region` (its whole capacity, at most `u32::MAX` bytes) under a free
    /// id: the kernel may write it from now on, until a completion without `BUF_MORE`
    /// gives it back. `copy`: the short frames of its views are to be copied. `Err`
    /// with the region when every id is taken.
    pub(crate) fn publish(
        &mut self,
        region: FixedBufMut,
        copy: bool,
    ) -> Result<Entry, FixedBufMut> {
        let Some(bid) = self.free.pop() else {
            return Err(region);
        };
        let len = region.capacity().min(u32::MAX as usize);
        let mut region = region;
        region.clear();
        let held = region.freeze();
        self.unfilled += len;
        let probing = !copy && self.judge.lock().probing();
        let entry = Entry {
            addr: held.raw_ptr(),
            len: len as u32,
            bid,
        };
        let probe = Probe {
            open: AtomicU32::new(1),
            views: AtomicU32::new(0),
            tail: AtomicPtr::new(core::ptr::null_mut()),
            held: Mutex::new(None),
            copy: AtomicBool::new(copy),
            probing,
            judge: Arc::clone(&self.judge),
        };
        // A spare whose views are all dropped is this list's alone (`get_mut` sees
        // every other count's release). The oldest few are tried; one still viewed
        // (a kept frame's) goes to the back.
        let mut reused = None;
        for _ in 0..self.spare.len().min(SPARES_TRIED) {
            let Some(mut p) = self.spare.pop_front() else {
                break;
            };
            if Arc::get_mut(&mut p).is_some() {
                reused = Some(p);
                break;
            }
            self.spare.push_back(p);
        }
        let probe = match reused {
            Some(mut p) => {
                // Alone (checked above), and no one else can count it anew.
                *Arc::get_mut(&mut p).expect("this list's alone") = probe;
                p
            }
            None => Arc::new(probe),
        };
        self.slots[usize::from(bid)] = Slot {
            held: Some(held),
            filled: 0,
            len,
            last: None,
            probe: Some(probe),
        };
        Ok(entry)
    }

    /// The `bytes` a completion of `who` (a connection's key) put into buffer `bid`,
    /// as a view of its region; `more`: the completion had `IORING_CQE_F_BUF_MORE`
    /// (the kernel keeps the buffer for more). Without it the buffer is returned, and
    /// its id free again.
    pub(crate) fn complete(
        &mut self,
        bid: u16,
        bytes: usize,
        more: bool,
        who: u64,
    ) -> Result<Completion, BooksError> {
        let slot = (self.slots.get_mut(usize::from(bid)))
            .filter(|s| s.held.is_some())
            .ok_or(BooksError::NotPublished(bid))?;
        if bytes > slot.len - slot.filled {
            return Err(BooksError::Overrun {
                bid,
                filled: slot.filled,
                bytes,
                len: slot.len,
            });
        }
        let held = slot.held.as_ref().expect("checked above");
        // A completion reports the bytes the kernel wrote into the buffer from where its
        // last completion of it ended (incremental consumption moves the entry's address
        // on by them; a buffer consumed whole serves one completion).
        // SAFETY: inside the region (checked above), written, and the kernel writes only
        // past them from now on.
        let view = unsafe { held.view_ahead(slot.filled, bytes) };
        slot.filled += bytes;
        self.unfilled -= bytes;
        let displaced = slot.last.replace(who).filter(|&w| w != who);
        let probe = Arc::clone(slot.probe.as_ref().expect("published"));
        probe.open.fetch_add(1, Ordering::Relaxed);
        probe.views.fetch_add(1, Ordering::Relaxed);
        let tail = if more {
            view.as_ptr_range().end.cast_mut()
        } else {
            core::ptr::null_mut()
        };
        probe.tail.store(tail, Ordering::Relaxed);
        if !more {
            // Given back: the probe takes the kernel's count, and the kernel is done.
            let held = slot.held.take().expect("checked above");
            self.unfilled -= slot.len - slot.filled;
            *lock(&probe.held) = Some(held);
            let spare = slot.probe.take();
            if self.spare.len() < self.spares {
                self.spare.extend(spare);
            }
            self.free.push(bid);
            probe.close();
        }
        Ok(Completion {
            view,
            probe,
            displaced,
        })
    }

    /// Gives up the count of every buffer the kernel holds without releasing it: for a
    /// group whose receives could not be drained, so that memory the kernel may still
    /// write is never reused (a leak, the one safe outcome then).
    pub(crate) fn leak(&mut self) {
        for slot in self.slots.iter_mut() {
            core::mem::forget(slot.held.take());
        }
    }
}
