//! The framed reader's state machine, shared by the blocking and the async reader: they
//! differ only in how they wait for ring room and for bytes.

use core::mem::MaybeUninit;
use std::io;

use super::decoder::{Decode, Decoder, Frame, FrameError, Resync};
use crate::{FixedBuf, FixedBufMut, Ring, WaitError};

/// What the reader must do next.
pub(crate) enum Step {
    /// Yield this frame.
    Frame(FixedBuf),
    /// Get a region of at least this many bytes and pass it to [`Core::install`].
    Alloc(usize),
    /// Read into [`Core::spare`] and report with [`Core::filled`] or [`Core::eof`].
    Read,
    /// The stream has ended (cleanly, or after an error that was returned).
    End,
}

/// The buffered bytes. At most one of `ready`, `pending` holds data at a time, and
/// `carry` only between a `Need` that outgrew its region and the next `install`.
pub(crate) struct Core<D> {
    pub(crate) decoder: D,
    /// Bytes of a region when no frame asks for more.
    pub(crate) read_size: usize,
    /// A frozen region's bytes not yet yielded; it starts at a frame boundary (when it
    /// holds no complete frame, [`Core::step`] moves it to `carry`).
    ready: Option<FixedBuf>,
    /// The region being read into: a partial frame, from its first byte.
    pending: Option<FixedBufMut>,
    /// A partial frame to copy into the next region.
    carry: Option<FixedBuf>,
    /// The partial frame, moved to the heap before waiting for room (`spilled`): the
    /// region it was in may be what stands in the way.
    spill: Vec<u8>,
    spilled: bool,
    /// Bytes `pending` must hold before decoding is worth trying again.
    need: usize,
    /// Bytes (header included) of the last frame yielded.
    last: usize,
    /// `last`, when the frame before it was as long (a stream of like frames), else 0:
    /// reads are sized to end where such frames would, see [`Core::read_len`].
    stride: usize,
    /// Leading bytes of `pending` known initialised (its data and zeroed spare).
    init: usize,
    /// Dropping the rest of a rejected frame: every byte read goes to
    /// [`Decoder::resync`] until it says where the next frame starts (`pending` then
    /// holds no frame, only bytes not yet shown to it).
    discarding: bool,
    done: bool,
}

impl<D: Decoder> Core<D> {
    pub(crate) fn new(decoder: D, read_size: usize) -> Self {
        Core {
            decoder,
            read_size,
            ready: None,
            pending: None,
            carry: None,
            spill: Vec::new(),
            spilled: false,
            need: 1,
            last: 0,
            stride: 0,
            init: 0,
            discarding: false,
            done: false,
        }
    }

    /// Region bytes for a frame that needs `need` in all.
    fn region_for(&self, need: usize) -> usize {
        need.max(self.read_size)
    }

    pub(crate) fn step(&mut self) -> io::Result<Step> {
        if self.done {
            return Ok(Step::End);
        }
        if let Some(ready) = &mut self.ready {
            match self.decoder.decode(ready) {
                Ok(Decode::Frame(f)) => {
                    check(f, ready.len());
                    self.stride = if f.consumed == self.last {
                        f.consumed
                    } else {
                        0
                    };
                    self.last = f.consumed;
                    let frame = ready.slice(f.start..f.end);
                    if f.consumed == ready.len() {
                        self.ready = None;
                        self.need = 1;
                    } else {
                        ready.skip(f.consumed);
                    }
                    return Ok(Step::Frame(frame));
                }
                Ok(Decode::Need(n)) => {
                    self.need = n.max(ready.len() + 1);
                    self.carry = self.ready.take();
                }
                Err(e) => {
                    let bad = self.ready.take().expect("decoded above");
                    return Err(self.bad_input(e, bad));
                }
            }
        }
        Ok(match self.pending {
            None => Step::Alloc(self.region_for(self.need)),
            Some(_) => Step::Read,
        })
    }

    /// Called when the ring has no room for a `Step::Alloc` and the reader is about to
    /// wait: the partial frame moves to the heap and its region is released, so the
    /// reader never waits for memory it holds itself (a frame over half the ring, or a
    /// ring cut in two by that region, could otherwise wait for ever). A heap copy only
    /// on this path, once per wait, never per frame.
    pub(crate) fn before_wait(&mut self) {
        if let Some(carry) = self.carry.take() {
            self.spill.clear();
            self.spill.extend_from_slice(&carry);
            self.spilled = true;
        }
    }

    /// Takes a region from a `Step::Alloc` of at least that size.
    pub(crate) fn install(&mut self, mut region: FixedBufMut) {
        debug_assert!(self.pending.is_none() && self.ready.is_none());
        // The one copy of a partial frame: `need > ` its length, and the region was
        // sized for `need`.
        let fits = if let Some(carry) = self.carry.take() {
            region.try_extend_from_slice(&carry)
        } else if self.spilled {
            self.spilled = false;
            region.try_extend_from_slice(&self.spill)
        } else {
            Ok(())
        };
        debug_assert!(fits.is_ok(), "a partial frame carried into {region:?}");
        self.init = region.len();
        self.pending = Some(region);
    }

    /// Bytes to ask of the next read into `pending` (at least 1, at most its spare).
    ///
    /// A read that stops inside a frame leaves that frame's first part at the end of a
    /// region that is then frozen for the frames before it, so the part is copied into
    /// the next region. Frames of one length are the common case worth sizing for: the
    /// read is cut to end where such frames would end (the pending frame's end, if the
    /// decoder knows it, plus whole frames), so that a reader handed what it asks for
    /// ends each read on a frame boundary and copies nothing. Other streams read the
    /// whole spare (a stride is only taken after two frames of the same length).
    fn read_len(&self) -> usize {
        let p = self.pending.as_ref().expect("Step::Read without a region");
        let (len, cap) = (p.len(), p.capacity());
        let spare = cap - len;
        let stride = self.stride;
        if stride == 0 {
            return spare;
        }
        // `pending` starts at a frame boundary; its frame ends at `need` when the
        // decoder has read its header (a `need` shorter than a frame is a header's).
        let base = if self.need > len && self.need >= stride {
            self.need
        } else {
            0
        };
        let end = base + cap.saturating_sub(base) / stride * stride;
        if len < end && end <= cap {
            end - len
        } else {
            spare
        }
    }

    /// The bytes to read into next, for an `AsyncRead`'s `ReadBuf`: the first
    /// [`read_len`](Self::read_len) bytes of the region's spare.
    #[cfg(feature = "tokio")]
    pub(crate) fn spare(&mut self) -> &mut [MaybeUninit<u8>] {
        let n = self.read_len();
        let p = self.pending.as_mut().expect("Step::Read without a region");
        &mut p.spare_mut()[..n]
    }

    /// The first [`read_len`](Self::read_len) bytes of the region's spare, initialised
    /// for a `std::io::Read` (which may only be handed initialised memory): zeroed the
    /// first time, and only as far as a read is asked to go.
    pub(crate) fn spare_init(&mut self) -> &mut [u8] {
        let n = self.read_len();
        let p = self.pending.as_mut().expect("Step::Read without a region");
        let len = p.len();
        let spare = &mut p.spare_mut()[..n];
        if self.init < len + n {
            for b in &mut spare[self.init - len..] {
                b.write(0);
            }
            self.init = len + n;
        }
        // SAFETY: the first `n` spare bytes, up to `init`, were written above or
        // before, and `u8` has no invalid values.
        unsafe { &mut *(spare as *mut [MaybeUninit<u8>] as *mut [u8]) }
    }

    /// Records that a read wrote the first `n` (> 0) bytes of the spare.
    ///
    /// # Safety
    /// - `n <= ` the spare's length;
    /// - those bytes have been initialised.
    pub(crate) unsafe fn filled(&mut self, n: usize, ring: &Ring) -> io::Result<()> {
        debug_assert!(n > 0);
        let p = self.pending.as_mut().expect("Step::Read without a region");
        // SAFETY: the caller's contract.
        unsafe { p.advance(n) };
        if self.discarding {
            self.discard(ring);
            return Ok(());
        }
        if p.len() < self.need {
            return Ok(());
        }
        match self
            .decoder
            .decode(self.pending.as_deref().unwrap_or_default())
        {
            Ok(Decode::Frame(_)) => {
                // `step` decodes it again from `ready`: the decoder may keep state.
                let mut p = self.pending.take().expect("checked above");
                p.shrink_in(ring);
                self.ready = Some(p.freeze());
                self.need = 1;
            }
            Ok(Decode::Need(n)) => {
                let p = self.pending.take().expect("checked above");
                self.need = n.max(p.len() + 1);
                if self.need > p.capacity() {
                    let mut p = p;
                    p.shrink_in(ring);
                    self.carry = Some(p.freeze());
                } else {
                    self.pending = Some(p);
                }
            }
            Err(e) => {
                let mut bad = self.pending.take().expect("checked above");
                bad.shrink_in(ring);
                return Err(self.bad_input(e, bad.freeze()));
            }
        }
        Ok(())
    }

    /// The decoder rejected the frame at the start of `bad` (every byte buffered) with
    /// `e`: drop that frame as [`Decoder::resync`] says, or end the stream if it cannot.
    /// Returns `e`, for the reader to yield.
    fn bad_input(&mut self, e: io::Error, mut bad: FixedBuf) -> io::Error {
        debug_assert!(self.ready.is_none() && self.pending.is_none() && self.carry.is_none());
        self.need = 1;
        match self.decoder.resync(&bad) {
            Resync::Stop => return self.fail(e),
            Resync::Skip(n) => {
                bad.skip(n);
                // Whatever follows is decoded (and carried, if partial) from `ready`.
                self.ready = Some(bad).filter(|b| !b.is_empty());
            }
            Resync::More => self.discarding = true,
        }
        e
    }

    /// Shows the bytes just read to [`Decoder::resync`] while discarding.
    fn discard(&mut self, ring: &Ring) {
        let p = self.pending.as_mut().expect("Step::Read without a region");
        match self.decoder.resync(p) {
            // The region is reused for the bytes that follow.
            Resync::More => p.clear(),
            Resync::Skip(n) => {
                self.discarding = false;
                let mut p = self.pending.take().expect("checked above");
                p.shrink_in(ring);
                let mut rest = p.freeze();
                rest.skip(n);
                self.ready = Some(rest).filter(|r| !r.is_empty());
            }
            Resync::Stop => {
                // The error was reported when discarding began: end quietly.
                self.fail(io::ErrorKind::InvalidData.into());
            }
        }
    }

    /// The stream ended: the last frame, if the decoder makes one of what is left.
    /// While discarding, the stream ends cleanly: the rejected frame was reported.
    pub(crate) fn eof(&mut self, ring: &Ring) -> io::Result<Option<FixedBuf>> {
        self.done = true;
        if self.discarding {
            self.discarding = false;
            self.pending = None;
            return Ok(None);
        }
        let Some(mut p) = self.pending.take().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        match self.decoder.decode_eof(&p) {
            Ok(f) => {
                check(f, p.len());
                p.shrink_in(ring);
                Ok(Some(p.freeze().slice(f.start..f.end)))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Drops every buffered byte and ends the stream with `e`.
    pub(crate) fn fail(&mut self, e: io::Error) -> io::Error {
        self.ready = None;
        self.pending = None;
        self.carry = None;
        self.spill = Vec::new();
        self.spilled = false;
        self.discarding = false;
        self.done = true;
        e
    }

    /// Ends the stream with why a region of `n` bytes could not be had.
    pub(crate) fn fail_alloc(&mut self, e: WaitError, n: usize) -> io::Error {
        let e = match e {
            WaitError::NeverFits { block, .. } => {
                FrameError::LargerThanRing { needed: n, block }.into()
            }
            WaitError::OutOfMemory { .. } => io::Error::new(io::ErrorKind::OutOfMemory, e),
            e => io::Error::other(e),
        };
        self.fail(e)
    }
}

/// A decoder's frame must lie inside the bytes it was shown and consume some.
#[inline]
fn check(f: Frame, len: usize) {
    assert!(
        f.start <= f.end && f.end <= f.consumed && f.consumed <= len && f.consumed > 0,
        "a Decoder returned {f:?} for {len} buffered bytes"
    );
}
