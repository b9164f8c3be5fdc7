//! Which bytes of which provided buffer belong to whom: the bookkeeping of a buffer
//! group as a plain state machine, with no system call in it, so that a fake kernel
//! can drive it under Miri (`model` tests) as the real one does.
//!
//! A buffer is a ring region. Published, it belongs to the kernel, which may write any
//! byte of it past what it has completed so far; the books hold the region's count
//! for it. Each completion that names the buffer carries the bytes written since the
//! last one: they become a [`FixedBuf`] view of the region (a count more), never
//! written again. A completion without `IORING_CQE_F_BUF_MORE` gives the buffer back:
//! the books hand their count to the caller (whose release of it, once the views are
//! dropped too, gives the region back to the ring, and tells whether a frame of it is
//! still held) and the buffer's id is free to publish another region under.

use core::fmt;

use crate::{FixedBuf, FixedBufMut};

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

/// What a completion brings.
#[derive(Debug)]
pub(crate) struct Completion {
    /// Its bytes: a view of its buffer.
    pub(crate) view: FixedBuf,
    /// Whether the short frames of the buffer are copied (its flag when published).
    pub(crate) copy: bool,
    /// The buffer, when the kernel gave it back with this completion.
    pub(crate) returned: Option<Returned>,
}

/// A buffer the kernel has given back.
#[derive(Debug)]
pub(crate) struct Returned {
    /// The region's count the kernel held (a view of no bytes).
    pub(crate) held: FixedBuf,
    /// Completions it served.
    pub(crate) views: u32,
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
    /// Whether the short frames of its views are copied.
    copy: bool,
    /// Completions it served so far.
    views: u32,
}

/// The buffers of one group, by id.
pub(crate) struct Books {
    slots: Box<[Slot]>,
    /// Ids the kernel does not hold, the next to publish last.
    free: Vec<u16>,
}

impl Books {
    /// Books for ids `0..entries`, all free.
    pub(crate) fn new(entries: u16) -> Books {
        Books {
            slots: (0..entries).map(|_| Slot::default()).collect(),
            free: (0..entries).rev().collect(),
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
        let entry = Entry {
            addr: held.raw_ptr(),
            len: len as u32,
            bid,
        };
        self.slots[usize::from(bid)] = Slot {
            held: Some(held),
            filled: 0,
            len,
            copy,
            views: 0,
        };
        Ok(entry)
    }

    /// The `bytes` a completion put into buffer `bid`, as a view of its region;
    /// `more`: the completion had `IORING_CQE_F_BUF_MORE` (the kernel keeps the buffer
    /// for more). Without it the buffer is returned, and its id free again.
    pub(crate) fn complete(
        &mut self,
        bid: u16,
        bytes: usize,
        more: bool,
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
        slot.views += 1;
        let copy = slot.copy;
        let returned = (!more).then(|| {
            self.free.push(bid);
            Returned {
                held: slot.held.take().expect("checked above"),
                views: slot.views,
            }
        });
        Ok(Completion {
            view,
            copy,
            returned,
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
