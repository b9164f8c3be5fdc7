//! Frames from a connection's received bytes: views of the provided buffers they
//! arrived in, and a copy only for a frame that more than one completion carries.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::LocalKey;

use super::books::Probe;
use crate::io::Memory;
use crate::io::{copied, filled, Decode, Decoder, Resync};
use crate::{FixedBuf, FixedBufMut};

/// Bytes a copy grows by at least when its decoder asks for one byte more than it
/// holds (a decoder that does not know the frame's length, such as `Lines`): copying
/// a byte at a time would decode once per byte.
const GROW_LEAST: usize = 64;

/// Spare boxes of [`Held`] and deques of a connection's queue kept per thread, at most
/// this many of each: a streaming connection's reader empties its bytes and sleeps
/// after each completion or so, and would otherwise allocate and free both each time.
const SPARE_MOST: usize = 64;

thread_local! {
    // Boxes, not `Held`s: a reader takes one and gives it back whole.
    #[allow(clippy::vec_box)]
    static SPARE_HELD: RefCell<Vec<Box<Held>>> = const { RefCell::new(Vec::new()) };
    static SPARE_DEQUES: RefCell<Vec<VecDeque<Chunk>>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `t` (empty) in this thread's `list` if it has room, else drops it.
fn spare<T>(list: &'static LocalKey<RefCell<Vec<T>>>, t: T) {
    // A thread being torn down has no list: `t` is dropped.
    let _ = list.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            if l.len() < SPARE_MOST {
                l.push(t);
            }
        }
    });
}

/// One of this thread's spares in `list`, if any.
fn reuse<T>(list: &'static LocalKey<RefCell<Vec<T>>>) -> Option<T> {
    list.try_with(|l| l.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
}

/// Gives the empty deque of a queue whose reader goes to sleep to this thread's spares
/// (an idle connection holds none).
pub(crate) fn spare_deque(deque: VecDeque<Chunk>) {
    debug_assert!(deque.is_empty());
    spare(&SPARE_DEQUES, deque);
}

/// A deque for a queue that has none: a spare of this thread's, or a new one.
pub(crate) fn new_deque() -> VecDeque<Chunk> {
    reuse(&SPARE_DEQUES).unwrap_or_default()
}

/// A completion's bytes: a view of its buffer, and the buffer's probe, closed when the
/// view is dropped (a copy's leftover has none).
pub(crate) struct Chunk {
    bytes: FixedBuf,
    probe: Option<Arc<Probe>>,
}

impl Chunk {
    /// A view handed out for `probe`.
    pub(crate) fn new(bytes: FixedBuf, probe: Arc<Probe>) -> Chunk {
        Chunk {
            bytes,
            probe: Some(probe),
        }
    }

    /// Its bytes.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// A view's bytes copied into a region of `mem` if it has room now, so that the
    /// view's buffer can go back to the group (see [`is_view`](Self::is_view)).
    pub(crate) fn moved(&self, mem: &Memory) -> Option<Chunk> {
        let copy = mem.claim_now(self.len())?;
        Some(Chunk {
            bytes: filled(copy, &self.bytes),
            probe: None,
        })
    }

    /// Whether it is a view of a buffer of the group (not a copy).
    pub(crate) fn is_view(&self) -> bool {
        self.probe.is_some()
    }

    /// Takes its bytes out, leaving none (the view's count goes with them).
    fn take(&mut self) -> FixedBuf {
        core::mem::replace(&mut self.bytes, FixedBuf::from_static(b""))
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if let Some(probe) = self.probe.take() {
            // The view's own count first: the probe looks for counts other than frames'.
            drop(self.take());
            probe.close();
        }
    }
}

/// One connection's received bytes, in order, and the frames found in them.
///
/// The bytes are a partial frame's copy (`carry`, first when there is one) and then
/// the completions' views (`chunks`). A frame wholly inside a view is a slice of it;
/// a frame that starts in one view and goes on in the next is copied (its first part
/// when the decoder asks for more than its view holds, then each next part as it
/// comes), so it holds a region of its own bytes. While the group does not trust its
/// readers (frames were found kept, see `Probe`), a short frame is copied too, as
/// `AsyncFramedReader` copies one (`io::core::copied`): a frame kept holds its own
/// bytes, not its buffer.
pub(crate) struct Assembler<D> {
    pub(crate) decoder: D,
    /// The bytes, while there are any: an idle connection's reader holds none of its
    /// own (see [`Held`]).
    held: Option<Box<Held>>,
    /// After a rejected frame, while [`Decoder::resync`] answers `More`.
    discarding: bool,
    /// The decoder can follow the stream no further.
    stopped: bool,
}

/// What an [`Assembler`] holds while it has bytes, boxed and given up once it has none
/// (its views' deque with it, to the thread's spares): a reader sits in its
/// connection's task, and most connections of a server are idle.
#[derive(Default)]
struct Held {
    carry: Option<FixedBufMut>,
    /// Bytes `carry` must hold before the decoder is asked again (what it needs).
    need: usize,
    /// Bytes `carry` is filled up to from the views: `need` where the decoder knows the
    /// frame's length, else as many as it has room for.
    fill: usize,
    chunks: VecDeque<Chunk>,
    /// The view the last frame was yielded from, when that emptied it: dropped (its
    /// probe closed) at the next call, once the consumer had the chance to drop that
    /// frame, as `Core` retires a region.
    retiring: Option<Chunk>,
}

impl<D: Decoder> Assembler<D> {
    pub(crate) fn new(decoder: D) -> Assembler<D> {
        Assembler {
            decoder,
            held: None,
            discarding: false,
            stopped: false,
        }
    }

    /// Appends the bytes of a completion (a view that follows the last one in its
    /// region joins it, and its probe is closed: one view fewer).
    pub(crate) fn push(&mut self, mut chunk: Chunk) {
        if chunk.bytes.is_empty() || self.stopped {
            return;
        }
        let held = self.held.get_or_insert_with(Held::new);
        if let Some(last) = held.chunks.back_mut() {
            match last.bytes.try_join(chunk.take()) {
                Ok(()) => return, // `chunk`'s drop closes its view
                Err(bytes) => chunk.bytes = bytes,
            }
        }
        held.chunks.push_back(chunk);
    }

    /// Bytes received and not yet yielded in a frame.
    pub(crate) fn buffered(&self) -> usize {
        self.held.as_ref().map_or(0, |h| {
            h.carry.as_ref().map_or(0, |c| c.len())
                + h.chunks.iter().map(|c| c.bytes.len()).sum::<usize>()
        })
    }

    /// Whether it holds nothing of its own: no bytes, and no box for them.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_none()
    }

    /// Whether the decoder stopped the stream (a frame it cannot get past).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The next frame if the bytes hold one; `Ok(None)` when more bytes are needed (or
    /// the stream is stopped). An error is a rejected frame: the stream goes on past
    /// it unless [`stopped`](Self::stopped) says otherwise.
    #[inline]
    pub(crate) fn next(&mut self, mem: &Memory) -> io::Result<Option<FixedBuf>> {
        let Some(held) = self.held.as_deref_mut() else {
            return Ok(None);
        };
        held.retiring = None;
        if held.carry.is_none() && held.chunks.is_empty() {
            if let Some(held) = self.held.take() {
                spare(&SPARE_HELD, held);
            }
            return Ok(None);
        }
        loop {
            if self.stopped {
                return Ok(None);
            }
            let Some(h) = self.held.as_deref_mut() else {
                return Ok(None);
            };
            if self.discarding {
                let Some(front) = h.chunks.front_mut() else {
                    return Ok(None);
                };
                match self.decoder.resync(&front.bytes) {
                    Resync::More => _ = h.chunks.pop_front(),
                    Resync::Skip(n) => {
                        front.bytes.skip(n.min(front.bytes.len()));
                        self.discarding = false;
                    }
                    Resync::Stop => self.stop(),
                }
                self.drop_empty_front();
                continue;
            }
            if let Some(carry) = &mut h.carry {
                while carry.len() < h.fill {
                    let Some(front) = h.chunks.front_mut() else {
                        break;
                    };
                    let take = front.bytes.len().min(h.fill - carry.len());
                    carry
                        .try_extend_from_slice(&front.bytes[..take])
                        .expect("a copy has room for what it wants");
                    front.bytes.skip(take);
                    if front.bytes.is_empty() {
                        h.chunks.pop_front();
                    }
                }
                if carry.len() < h.need {
                    return Ok(None);
                }
                match self.decoder.decode(carry) {
                    Ok(Decode::Frame(f)) => {
                        let carry = h.carry.take().expect("matched above").freeze();
                        if f.consumed < carry.len() {
                            let bytes = carry.slice(f.consumed..);
                            h.chunks.push_front(Chunk { bytes, probe: None });
                        }
                        return Ok(Some(carry.slice(f.start..f.end)));
                    }
                    Ok(Decode::Need(n)) => h.want_more(n, mem)?,
                    Err(e) => {
                        let bad = h.carry.take().expect("matched above").freeze();
                        self.reject(bad);
                        return Err(e);
                    }
                }
                continue;
            }
            let Some(front) = h.chunks.front_mut() else {
                return Ok(None);
            };
            match self.decoder.decode(&front.bytes) {
                Ok(Decode::Frame(f)) => {
                    let len = f.end - f.start;
                    // Decided per frame: views taken before frames were found kept are
                    // copied from then on.
                    let copy = copied(len, front.bytes.region_span(), true)
                        && front.probe.as_ref().is_some_and(|p| p.copies());
                    let frame = if copy {
                        let copy = (mem.claim_now(len))
                            .or_else(|| FixedBufMut::on_heap(len))
                            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
                        filled(copy, &front.bytes[f.start..f.end])
                    } else {
                        front.bytes.slice(f.start..f.end)
                    };
                    front.bytes.skip(f.consumed);
                    if front.bytes.is_empty() {
                        h.retiring = h.chunks.pop_front();
                    }
                    return Ok(Some(frame));
                }
                Ok(Decode::Need(n)) => {
                    if h.chunks.len() == 1 {
                        return Ok(None); // the next completion may join it
                    }
                    h.want_more(n, mem)?;
                }
                Err(e) => {
                    // Its probe closes once `reject` is done with the bytes.
                    let mut bad = h.chunks.pop_front().expect("matched above");
                    self.reject(bad.take());
                    return Err(e);
                }
            }
        }
    }

    /// The last frame when the stream has ended with bytes still here (see
    /// [`Decoder::decode_eof`]); `Ok(None)` when there are none (or they were being
    /// discarded). Everything else buffered is dropped.
    pub(crate) fn finish(&mut self) -> io::Result<Option<FixedBuf>> {
        let rest = self.held.as_deref_mut().and_then(|h| match h.carry.take() {
            Some(carry) => Some(carry.freeze()),
            None => h.chunks.pop_front().map(|mut c| c.take()),
        });
        let discarding = self.discarding;
        self.stop();
        let Some(rest) = rest.filter(|r| !r.is_empty() && !discarding) else {
            return Ok(None);
        };
        let f = self.decoder.decode_eof(&rest)?;
        Ok(Some(rest.slice(f.start..f.end)))
    }

    /// Drops everything buffered: the stream ends.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        self.held = None;
    }

    /// Whether a partial frame is held as a view of a provided buffer, waiting for
    /// the next completion to join it: `Some(true)` while it can (the kernel writes
    /// that buffer next right after it), `Some(false)` once it cannot (another
    /// connection's bytes landed there, or the kernel gave the buffer back): then it
    /// only holds the buffer, and [`unpin`](Self::unpin) frees it.
    pub(crate) fn held_view(&self) -> Option<bool> {
        let h = self.held.as_deref()?;
        if h.chunks.len() != 1 || h.carry.is_some() || self.discarding || self.stopped {
            return None;
        }
        let front = h.chunks.front()?;
        let probe = front.probe.as_ref()?;
        Some(probe.joinable(front.bytes.as_ptr_range().end))
    }

    /// Copies a partial frame held as a view into a region of its own, so that its
    /// buffer can go back to the ring. `true` if it did.
    pub(crate) fn unpin(&mut self, mem: &Memory) -> io::Result<bool> {
        if self.held_view().is_none() {
            return Ok(false);
        }
        let Some(h) = self.held.as_deref_mut() else {
            return Ok(false);
        };
        let Some(front) = h.chunks.front() else {
            return Ok(false);
        };
        match self.decoder.decode(&front.bytes) {
            Ok(Decode::Need(n)) => h.want_more(n, mem).map(|()| true),
            _ => Ok(false), // a frame or an error: the next call yields it
        }
    }

    /// After the decoder rejected the frame at the start of `bad` (the bytes from
    /// it to the end of the view or copy it was found in): drops it as
    /// [`Decoder::resync`] says.
    fn reject(&mut self, bad: FixedBuf) {
        match self.decoder.resync(&bad) {
            Resync::Stop => self.stop(),
            Resync::Skip(n) if n < bad.len() => {
                let held = self.held.get_or_insert_with(Held::new);
                held.chunks.push_front(Chunk {
                    bytes: bad.slice(n..),
                    probe: None,
                });
            }
            Resync::Skip(_) => {}
            Resync::More => self.discarding = true,
        }
    }

    fn drop_empty_front(&mut self) {
        if let Some(h) = self.held.as_deref_mut() {
            if h.chunks.front().is_some_and(|c| c.bytes.is_empty()) {
                h.chunks.pop_front();
            }
        }
    }
}

impl Held {
    /// A spare of this thread's (empty, see [`SPARE_MOST`]), or a new one.
    fn new() -> Box<Held> {
        reuse(&SPARE_HELD).unwrap_or_default()
    }

    /// The decoder needs `n` bytes from the first: copies what there is into a region
    /// that holds them (a larger one if the copy so far is too short), to be completed
    /// from the next views.
    fn want_more(&mut self, n: usize, mem: &Memory) -> io::Result<()> {
        let have = match &self.carry {
            Some(c) => c.len(),
            None => self.chunks.front().map_or(0, |c| c.bytes.len()),
        };
        // A decoder asking for one more byte may not know the frame's length: the copy
        // takes as much as it has room for then, and grows geometrically (at worst a
        // frame's bytes are copied twice). One that knows gets exactly its bytes: those
        // after them may be frames of their own, views of their buffer.
        let exact = n > have + 1;
        let cap = if exact {
            n
        } else {
            (have * 2).max(have + GROW_LEAST)
        };
        (self.need, self.fill) = (n, cap);
        if self.carry.as_ref().is_some_and(|c| c.capacity() >= cap) {
            return Ok(());
        }
        let mut copy = mem
            .claim_now(cap)
            .or_else(|| FixedBufMut::on_heap(cap))
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        match self.carry.take() {
            Some(old) => copy.try_extend_from_slice(&old),
            None => {
                let front = self.chunks.pop_front().expect("a partial frame is here");
                copy.try_extend_from_slice(&front.bytes)
            }
        }
        .expect("the new copy holds the old");
        self.carry = Some(copy);
        Ok(())
    }
}
