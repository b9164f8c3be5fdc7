//! The framed reader's state machine, shared by the blocking and the async reader: they
//! differ only in how they wait for ring room and for bytes.

use core::mem::MaybeUninit;
use core::ops::Range;
use std::collections::VecDeque;
use std::io;

use super::decoder::{Decode, Decoder, Frame, FrameError, Resync};
use super::pool::Memory;
use crate::{FixedBuf, FixedBufMut, WaitError};

/// What the reader must do next.
pub(crate) enum Step {
    /// Yield this frame.
    Frame(FixedBuf),
    /// Get a region of at least `need` bytes (waiting for room if the ring has not
    /// got them now), and pass it to [`Core::install`].
    Alloc {
        /// The bytes the region must have.
        need: usize,
        /// The bytes of the smaller region a first try takes (at least `least`): in a
        /// run of like frames, one frame's, since a region shorter than the next frame
        /// would only be read into, then copied into one that holds it (a first try
        /// with no room for it then takes `least`).
        like: usize,
        /// The bytes of a smaller region that serves too (the partial frame's, at
        /// least [`LEAST_READ`]; `need` when nothing smaller will do): a reader takes
        /// one when the ring has no room for `need` (a read's worth first, see
        /// `pool::claim_or_least`), rather than wait while the regions held by others
        /// (frames kept, other readers' on a pool) leave gaps shorter than a read region.
        least: usize,
        /// Bytes of a region for the next frame alone (0: none), tried first: a slot
        /// of its length on a pool, for a run of like frames whose consumer keeps them
        /// (see [`Core::alone`]).
        alone: usize,
    },
    /// Read into [`Core::spare`] and report with [`Core::filled`] or [`Core::eof`].
    Read,
    /// Read into [`Core::spare`] if the bytes are there now (report as for `Read`);
    /// if they are not, or on an error, call [`Core::settle`] and go on.
    TopUp,
    /// Yield this error of the underlying reader, deferred behind the frames that
    /// arrived before it.
    ReaderError(io::Error),
    /// The stream has ended (cleanly, or after an error that was returned).
    End,
}

/// Frames decoded ahead at most: the queue's bound whatever the frames' sizes.
const QUEUE: usize = 32;

/// Bytes a region read without copies holds at most until the reader knows that frames
/// are dropped before the reader is done with their region (see [`Core::retire`]): what
/// a frame kept from it holds.
const PROBE_READ: usize = 4 << 10;

/// Regions of copies after a region found held, at first and at least (see
/// [`Core::retire`]): as many as [`PROBE_EASE`], so that a probe found free shortens
/// the gap by at least one. With 4, probes were more frequent while one frame in ten
/// was kept, each a region a kept frame may hold: 4 KiB frames ran at 0.87-0.88 times
/// the rate they run at with 32 (conns scenario, keep row, two rounds).
const PROBE_MIN: u32 = 32;

/// Regions of copies after a region found held, at most: a frame kept from a region read
/// without copies holds that region, once in this many regions read.
const PROBE_MAX: u32 = 1024;

/// A probe found free shortens the gap by this fraction of it (see [`Core::retire`]):
/// one found held doubles it, so the gap stays long while more than one probe in some
/// 23 is found held (`ln 2 / ln(32/31)`). Halving it instead kept it near
/// [`PROBE_MIN`] under a consumer keeping one frame in ten (a probe found held one
/// time in ten): the probes whose frames were kept held their regions for seconds
/// among the read regions of a pool and left the read rings no room (conns scenario,
/// 16 KiB frames: some 470 regions live in a read ring of 2 MiB, the other reads
/// going to the copy rings and spreading over them).
const PROBE_EASE: u32 = 32;

/// Frames of probes in a row found free after which a reader whose frames were found
/// held reads without copies again: evidence enough that no more than about one frame
/// in this many is kept.
const TRUST_FRAMES: u32 = 4096;

/// Frames whose copies (see [`frame_of`]) a reader on a pool claims at once, at most:
/// one lock for them all.
const BATCH: usize = 16;

/// Bytes of the copies claimed at once, at most.
const BATCH_BYTES: usize = 16 << 10;

/// Bytes of a partial frame from which completing it in place (one more read) is
/// preferred to copying them into the next region: about what a read call costs in
/// copying.
pub(crate) const TOP_UP_MIN: usize = 4 << 10;

/// Bytes of the least region a reader reads into when the ring has only short gaps.
const LEAST_READ: usize = 64;

/// Frames of one length in a row after which a stream is taken to go on with them
/// (a mixed stream rarely has as many).
const RUN: usize = 16;

/// Bytes of a frame (its stride) from which, and up to [`ALONE_MAX`], a reader on a
/// pool whose frames are kept reads a run of like frames one to a region of its own
/// (see [`Core::alone`]). At 4 KiB the read call cost what the copy saved (conns
/// scenario, one frame in 100 kept: 2.75-2.97 us of server CPU a frame, against
/// 2.59-2.69 copied); at 8 KiB, one in ten kept, 4.25-4.41 against 5.42-5.55.
const ALONE_MIN: usize = 2 * TOP_UP_MIN;

/// See [`ALONE_MIN`]: a page of slots holds 16 of them at least (`ring/slots.rs`), up
/// to 4 MiB, a quarter of the least shard's copy ring.
const ALONE_MAX: usize = 256 << 10;

/// Whether a reader's frames are kept past its turn: the probes' state machine of
/// [`Core::retire`], also the io_uring group's (`uring`), which retires its buffers as
/// `Core` its regions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trust {
    /// Regions left whose short frames are copied (see [`frame_of`]); 0: frames are
    /// slices of their region.
    copy_left: u32,
    /// Regions of copies after the next region found still held when the reader is
    /// done with it: from [`PROBE_MIN`], doubling to [`PROBE_MAX`].
    probe_gap: u32,
    /// The last region read without copies was found free: frames are slices, in
    /// regions of a bulk read. Else, out of copy mode, the next region is a probe: at
    /// most [`PROBE_READ`] bytes.
    trusted: bool,
    /// Frames of probes found free since a region was last found held.
    free_frames: u32,
    /// `free_frames` a reader needs to read without copies again: 0 until a region was
    /// found held, then [`TRUST_FRAMES`].
    trust_after: u32,
}

impl Trust {
    /// A reader's start: its first region a probe.
    pub(crate) const fn new() -> Trust {
        Trust {
            copy_left: 0,
            probe_gap: PROBE_MIN,
            trusted: false,
            free_frames: 0,
            trust_after: 0,
        }
    }

    /// Whether the short frames of the region read next are copied.
    pub(crate) fn copying(&self) -> bool {
        self.copy_left > 0
    }

    /// Whether regions are read without copies, no frame having been found kept since
    /// the probes said so.
    pub(crate) fn trusted(&self) -> bool {
        self.trusted
    }

    /// Whether the region read next is a probe: at most [`PROBE_READ`] bytes, without
    /// copies.
    pub(crate) fn probing(&self) -> bool {
        self.copy_left == 0 && !self.trusted
    }

    /// A region is done with, in the order they were read: `free`, no frame of it is
    /// held any more; `frames` were yielded from it. See [`Core::retire`].
    pub(crate) fn retire(&mut self, free: bool, frames: u32) {
        if self.copy_left > 0 {
            self.copy_left -= 1;
        } else {
            self.found(free, frames);
        }
    }

    /// A region whose short frames were copied is done with, out of order with the
    /// others (the io_uring group's buffers close in any order): one fewer to copy.
    #[cfg(uring)]
    pub(crate) fn retire_copy(&mut self) {
        self.copy_left = self.copy_left.saturating_sub(1);
    }

    /// A region read without copies (a probe, or one read while trusted) is done with:
    /// `free`, no frame of it is held; `frames` were yielded from it.
    ///
    /// A free region that yielded no frame says nothing of the consumer: its bytes were
    /// the first part of a frame, carried on into the next region, which is the probe
    /// then. Counted free, a probe of 4 KiB always was for frames longer than that,
    /// whatever the consumer did: the gap stayed at [`PROBE_MIN`] (conns scenario, 16
    /// KiB frames kept one in ten: a probe every 33 frames, each two read regions, one
    /// in ten of them kept).
    pub(crate) fn found(&mut self, free: bool, frames: u32) {
        if free && frames == 0 {
            return;
        }
        if !free {
            self.trusted = false;
            self.free_frames = 0;
            self.trust_after = TRUST_FRAMES;
            self.copy_left = self.probe_gap;
            self.probe_gap = self.probe_gap.saturating_mul(2).min(PROBE_MAX);
        } else if !self.trusted {
            self.probe_gap = (self.probe_gap - self.probe_gap / PROBE_EASE).max(PROBE_MIN);
            self.free_frames = self.free_frames.saturating_add(frames);
            if self.free_frames >= self.trust_after {
                self.trusted = true;
            } else {
                self.copy_left = self.probe_gap;
            }
        }
    }
}

/// What follows the queued frames in the buffered bytes.
enum After {
    /// Not decoded yet (the queue filled up first), or nothing.
    Unwalked,
    /// A partial frame, needing this many bytes from its first.
    Need(usize),
    /// Bytes the decoder rejected.
    Error(io::Error),
}

/// The buffered bytes. At most one of `ready`, `pending`, `carry` and the spill holds
/// them at a time: `carry` only between a `Need` that outgrew its region (or a region
/// cut short while idle that filled up) and the next `install`, the spill only between
/// a wait for room or an idle async reader's `Pending` and the next `install`.
///
/// Between two calls of an async reader that returned `Pending` (its socket had
/// nothing to read), the reader holds no ring memory but a partial frame of at least
/// [`TOP_UP_MIN`] bytes, in a region cut to at most twice its length ([`Core::idle`]).
pub(crate) struct Core<D> {
    pub(crate) decoder: D,
    /// Bytes of a region's bulk read when no frame asks for more.
    pub(crate) read_size: usize,
    /// Whether the reader can read without waiting ([`Step::TopUp`]): regions then get
    /// room beyond `read_size` to complete their last frame in place.
    top_up: bool,
    /// Frames decoded and not yet yielded, each as the decoder found it at the end of
    /// the one before (the first at the start of `ready`, or of `pending` while
    /// `topping`); at most [`QUEUE`].
    queue: VecDeque<Frame>,
    /// What follows the queued frames.
    after: After,
    /// Regions claimed for copies of the first queued frames, one entry per frame from
    /// the first (`None`: the frame is yielded as a slice of `ready`), claimed at once
    /// ([`plan_copies`](Self::plan_copies)).
    copies: VecDeque<Option<FixedBufMut>>,
    /// Whether the short frames of the next regions are copied (see
    /// [`retire`](Self::retire)).
    trust: Trust,
    /// The region the last frame was yielded from, when it was its last: retired at the
    /// next step, once the consumer had the chance to drop that frame.
    retiring: Option<FixedBuf>,
    /// Frames yielded from the region being read, counted for [`retire`](Self::retire).
    yielded: u32,
    /// Bytes of `pending` the queued frames take (0 unless `topping`).
    walked: usize,
    /// `pending` is kept open after frames were decoded in it, to complete its last
    /// (partial) frame in place if the reader has the bytes at once.
    topping: bool,
    /// A read (a top-up) saw the end of the stream: it ends once the queue drains.
    at_eof: bool,
    /// An error of a top-up read, yielded once the queue drains.
    deferred: Option<io::Error>,
    /// A frozen region's bytes not yet yielded: the queued frames, then what `after`
    /// says; it starts at a frame boundary.
    ready: Option<FixedBuf>,
    /// The region being read into: from its first byte, the queued frames (while
    /// `topping`) and a partial frame. Its capacity is at least `need`, but after
    /// [`Core::idle`] cut it short: then it is carried when it fills up first.
    pending: Option<FixedBufMut>,
    /// A partial frame to copy into the next region.
    carry: Option<FixedBuf>,
    /// The partial frame, moved to the heap (`spilled`) before waiting for room (the
    /// region it was in may be what stands in the way), or by an idle async reader
    /// when it is short (see [`Core::idle`]). Empty otherwise, keeping at most
    /// [`TOP_UP_MIN`] bytes of heap.
    spill: Vec<u8>,
    spilled: bool,
    /// Bytes `pending` must hold before decoding is worth trying again.
    need: usize,
    /// `need` is only one byte more than the partial frame holds: the decoder does not
    /// know where the frame ends (a line). Past a bulk read, its next region is twice
    /// as large, as far as `fit` allows, and never less (see [`Core::region_for`]).
    open_ended: bool,
    /// The most bytes one region of the ring can have (`usize::MAX` for a ring that
    /// makes larger blocks on demand).
    fit: usize,
    /// The reader's memory is a pool (see [`Core::alone`]).
    pooled: bool,
    /// Bytes (header included) of the last frame yielded.
    last: usize,
    /// `last`, when the frame before it was as long (a stream of like frames), else 0:
    /// reads are sized to end where such frames would, see [`Core::read_len`].
    stride: usize,
    /// Frames of `last` bytes in a row (up to [`RUN`]).
    run: usize,
    /// Leading bytes of `pending` known initialised (its data and zeroed spare).
    init: usize,
    /// Dropping the rest of a rejected frame: every byte read goes to
    /// [`Decoder::resync`] until it says where the next frame starts (`pending` then
    /// holds no frame, only bytes not yet shown to it).
    discarding: bool,
    done: bool,
}

impl<D: Decoder> Core<D> {
    pub(crate) fn new(decoder: D, mem: &Memory, read_size: usize, top_up: bool) -> Self {
        Core {
            decoder,
            read_size,
            top_up,
            // Allocated by the first walk (`reserve_queue`): a reader that never gets a
            // byte holds no heap.
            queue: VecDeque::new(),
            after: After::Unwalked,
            copies: VecDeque::new(),
            trust: Trust::new(),
            retiring: None,
            yielded: 0,
            walked: 0,
            topping: false,
            at_eof: false,
            deferred: None,
            ready: None,
            pending: None,
            carry: None,
            spill: Vec::new(),
            spilled: false,
            need: 1,
            open_ended: false,
            fit: mem.fit(),
            pooled: mem.pool().is_some(),
            last: 0,
            stride: 0,
            run: 0,
            init: 0,
            discarding: false,
            done: false,
        }
    }

    /// The region for a frame that needs `need` in all: a bulk read, and room to
    /// complete the frame it ends in if the reader can top up.
    ///
    /// If the decoder does not know the frame's end and it is longer than a bulk read,
    /// twice `need` (or the largest region of the ring, if that is less), and nothing
    /// less: the reader waits for that room rather than settle for a region a few
    /// bytes longer than the frame so far, which would take a read and a copy of the
    /// whole frame per few bytes of it (quadratic in its length). Where the ring cannot
    /// hold the doubled region beside the one the frame is in now, the frame moves to
    /// the heap first ([`before_wait`](Self::before_wait)), so a frame costs copies in
    /// proportion to its length, and reaches [`FrameError::LargerThanRing`] after a
    /// number of reads logarithmic in the ring's size.
    ///
    /// The least region that serves (for a reader without room for the bulk one) holds
    /// the frame, or twice what a line has, and at least [`LEAST_READ`].
    fn region_for(&self, need: usize) -> Step {
        if self.long_open_frame() {
            let need = need.saturating_mul(2).min(self.fit).max(need);
            return Step::Alloc {
                need,
                like: need,
                least: need,
                alone: 0,
            };
        }
        // A line that goes on past a probe's region is read on as any (the probe is no
        // verdict then, see `Trust::found`): from a probe's few KiB, its doublings
        // would take more reads than one bulk read does.
        let read_size = if self.open_ended {
            self.read_size
        } else {
            self.bulk_read()
        };
        let bulk = need.max(read_size + self.slack(read_size));
        // A line doubles, as above, so that its copies stay in proportion to it.
        let least = if self.open_ended {
            need.saturating_mul(2)
        } else {
            need
        };
        let least = least.max(LEAST_READ).min(bulk);
        // In a run of like frames the next is taken to be one more.
        let like = if self.run >= RUN {
            self.stride.clamp(least, bulk)
        } else {
            least
        };
        Step::Alloc {
            need: bulk,
            like,
            least,
            alone: self.alone(need),
        }
    }

    /// Bytes of a region for the next frame alone, or 0: on a pool, when the reader
    /// does not trust its consumer (it copies its frames, or probes: see
    /// [`retire`](Self::retire)) and they come in a run of like frames of
    /// [`ALONE_MIN`] to [`ALONE_MAX`] bytes, the next is read into a slot of its length
    /// (`pool::Rings::alone_slot`), which the frame then holds without a copy: one read
    /// call a frame, where a bulk read's frames are each copied out (over 16 KiB, each
    /// into a region the copy ring is walked for), and no read region to claim. Conns
    /// scenario, one frame in ten kept, server CPU a frame against bulk reads: 16 KiB
    /// 7.6-7.9 us against 8.9-9.2 (`FramedRead`'s 8.3), 32 KiB 14.0-16.8 against
    /// 22.6-25.0, 128 KiB 60-64 against 96-100. A probe so read is a slot too, whose
    /// frame is its only one: a probe's region of 4 KiB (and the region its frame was
    /// carried into) kept the read rings in use, resident whole.
    fn alone(&self, need: usize) -> usize {
        let stride = self.stride;
        let like = self.pooled && self.run >= RUN && !self.open_ended && need <= stride;
        if like && !self.trust.trusted() && (ALONE_MIN..=ALONE_MAX).contains(&stride) {
            stride
        } else {
            0
        }
    }

    /// Bytes of a bulk read: [`read_size`](Self::read_size), or a probe's (see
    /// [`retire`](Self::retire)), also when the region is larger (a pool's spare).
    fn bulk_read(&self) -> usize {
        if self.trust.probing() {
            self.read_size.min(PROBE_READ)
        } else {
            self.read_size
        }
    }

    /// The room a region for a read of `read_size` bytes has beyond it, for a top-up
    /// ([`Step::TopUp`]): a quarter more, when the reader can read without waiting.
    fn slack(&self, read_size: usize) -> usize {
        if self.top_up {
            read_size / 4
        } else {
            0
        }
    }

    /// Whether the partial frame is of unknown end and already longer than a bulk read:
    /// its regions double, and its reads take all their room.
    fn long_open_frame(&self) -> bool {
        self.open_ended && self.need > self.read_size
    }

    /// The queue's room for one frame, allocated once in a reader's life: a reader of
    /// requests answered one at a time (a server's idle connections) never needs more.
    #[inline]
    fn reserve_queue(&mut self) {
        if self.queue.capacity() == 0 {
            self.queue.reserve_exact(1);
        }
    }

    /// Decodes frames of `buf` from `from` into the queue; returns where they end and
    /// what follows.
    fn walk(&mut self, buf: &[u8], mut from: usize) -> (usize, After) {
        // Only the first frame is needed ahead (to know the region holds one) without
        // top-ups, or when the bytes are a whole number of frames of a long run of like
        // frames (reads are sized for that: no partial frame is expected); the rest
        // are then decoded as they are taken.
        self.reserve_queue();
        let stride = self.stride;
        let aligned = self.run >= RUN && (buf.len() - from) % stride == 0;
        let most = if self.top_up && !aligned { QUEUE } else { 1 };
        while from < buf.len() {
            if self.queue.len() >= most {
                return (from, After::Unwalked);
            }
            match self.decoder.decode(&buf[from..]) {
                Ok(Decode::Frame(f)) => {
                    check(f, buf.len() - from);
                    queue_frame(&mut self.queue, f);
                    from += f.consumed;
                }
                Ok(Decode::Need(n)) => return (from, After::Need(n)),
                Err(e) => return (from, After::Error(e)),
            }
        }
        (from, After::Unwalked)
    }

    /// The reader is done with `region` (its frames yielded, its partial frame copied
    /// on): whether frames of it are still held elsewhere decides whether the next
    /// regions' short frames are copied ([`frame_of`]).
    ///
    /// A copy per frame is what a frame the application keeps must cost to hold its own
    /// bytes rather than its region and the frames read with it; it is wasted on frames
    /// dropped before the next is taken, the loop most readers run. So frames are slices
    /// of bulk reads until a region is found held when the reader is done with it (a
    /// frame of it kept, or queued for another task). From then on the reader copies the
    /// short frames (see [`copied`]) of `probe_gap` regions ([`Trust`]), then
    /// reads a probe: a region of at most [`PROBE_READ`] bytes, without copies. A probe
    /// found held doubles the gap (to [`PROBE_MAX`]); found free, it shortens it by a
    /// [`PROBE_EASE`]th (to [`PROBE_MIN`]), and once probes in a row have shown
    /// [`TRUST_FRAMES`] frames free, the reader reads without copies again. A reader
    /// starts with a probe, and one found free is enough then.
    ///
    /// On a pool, a run of like frames of [`ALONE_MIN`] bytes or more is read one frame
    /// to a slot of its own meanwhile, its probes too ([`alone`](Self::alone)): no copy.
    ///
    /// So a frame kept for good holds its own bytes and a header, or a probe's 4 KiB
    /// (about one frame in `TRUST_FRAMES` read, once frames were found kept), or, once
    /// for each time a consumer that drops its frames in place for thousands of frames
    /// starts keeping them, the region it was read into.
    fn retire(&mut self, region: FixedBuf) {
        let free = region.release_was_last();
        let frames = core::mem::take(&mut self.yielded);
        self.trust.retire(free, frames);
    }

    /// On a pool: decodes up to [`BATCH`] frames of `ready` ahead (into the queue, as
    /// the walk does) and claims the copies of the short ones among them (see
    /// [`frame_of`]) at once, up to [`BATCH_BYTES`]: one lock for them all, where a
    /// claim per frame had the threads polling readers take each other's locks and
    /// cache lines at every frame. Frames past the ones planned get a plan of their own
    /// when they come up. (On a reader's own ring, where a claim takes no lock, the
    /// plan's bookkeeping cost more than it saved: a copy is claimed as its frame is
    /// yielded, [`frame_of`].)
    fn plan_copies(&mut self, mem: &Memory) {
        self.reserve_queue();
        let Some(ready) = &self.ready else { return };
        debug_assert!(self.copies.is_empty());
        let mut off: usize = self.queue.iter().map(|f| f.consumed).sum();
        while self.queue.len() < BATCH && off < ready.len() {
            if !matches!(self.after, After::Unwalked) {
                break;
            }
            match self.decoder.decode(&ready[off..]) {
                Ok(Decode::Frame(f)) => {
                    check(f, ready.len() - off);
                    off += f.consumed;
                    queue_frame(&mut self.queue, f);
                }
                Ok(Decode::Need(n)) => self.after = After::Need(n),
                Err(e) => self.after = After::Error(e),
            }
        }
        let (region, pooled) = (ready.region_span(), !ready.is_slot());
        let (mut plan, mut planned, mut bytes) = ([None; BATCH], 0, 0);
        for f in self.queue.iter().take(BATCH) {
            let len = f.end - f.start;
            if copied(len, region, pooled) {
                bytes += len;
                if bytes > BATCH_BYTES && bytes > len {
                    break;
                }
                plan[planned] = Some(len);
            }
            planned += 1;
        }
        if self.copies.capacity() == 0 {
            // Once in a reader's life.
            self.copies.reserve_exact(BATCH);
        }
        mem.claim_copies(plan[..planned].iter().copied(), &mut self.copies);
    }

    /// Bytes read from the reader and not yet yielded as frames: the frames decoded
    /// ahead and the rest of the last region read, a partial frame (in the region
    /// being read into, carried, or spilled to the heap).
    pub(crate) fn buffered(&self) -> usize {
        let len = |b: &Option<FixedBuf>| b.as_ref().map_or(0, |b| b.len());
        let pending = self.pending.as_ref().map_or(0, |p| p.len());
        let spilled = if self.spilled { self.spill.len() } else { 0 };
        len(&self.ready) + pending + len(&self.carry) + spilled
    }

    pub(crate) fn step(&mut self, mem: &Memory) -> io::Result<Step> {
        if let Some(done) = self.retiring.take() {
            self.retire(done);
        }
        loop {
            if self.done {
                return Ok(Step::End);
            }
            if self.topping {
                return Ok(Step::TopUp);
            }
            let copying = self.trust.copying();
            if copying && self.ready.is_some() && self.copies.is_empty() && mem.pool().is_some() {
                self.plan_copies(mem);
            }
            let Some(ready) = &mut self.ready else { break };
            let f = match self.queue.pop_front() {
                Some(f) => f,
                // Past the frames decoded ahead: one at a time, as they are taken.
                None if matches!(self.after, After::Unwalked) => match self.decoder.decode(ready) {
                    Ok(Decode::Frame(f)) => {
                        check(f, ready.len());
                        f
                    }
                    Ok(Decode::Need(n)) => {
                        self.after = After::Need(n);
                        continue;
                    }
                    Err(e) => {
                        self.after = After::Error(e);
                        continue;
                    }
                },
                None => {
                    let rest = self.ready.take().expect("checked above");
                    match core::mem::replace(&mut self.after, After::Unwalked) {
                        After::Need(_) if self.at_eof => {
                            self.done = true;
                            return Ok(self.finish(rest, mem)?.map_or(Step::End, Step::Frame));
                        }
                        After::Need(n) => {
                            self.need = n.max(rest.len() + 1);
                            self.open_ended = n <= rest.len() + 1;
                            self.carry = Some(rest);
                        }
                        After::Error(e) => return Err(self.bad_input(e, rest)),
                        After::Unwalked => unreachable!("matched above"),
                    }
                    break;
                }
            };
            if f.consumed == self.last {
                self.stride = f.consumed;
                self.run = (self.run + 1).min(RUN);
            } else {
                self.stride = 0;
                self.run = 1;
            }
            self.last = f.consumed;
            self.yielded = self.yielded.wrapping_add(1);
            let frame = if !copying {
                ready.slice(f.start..f.end)
            } else {
                match self.copies.pop_front() {
                    Some(Some(copy)) => filled(copy, &ready[f.start..f.end]),
                    Some(None) => ready.slice(f.start..f.end),
                    None => frame_of(ready, f.start..f.end, mem),
                }
            };
            ready.skip(f.consumed);
            if ready.is_empty() {
                debug_assert!(self.queue.is_empty(), "frames past {ready:?}");
                self.retiring = self.ready.take();
                self.need = 1;
                self.open_ended = false;
                self.after = After::Unwalked;
            }
            return Ok(Step::Frame(frame));
        }
        if let Some(e) = self.deferred.take() {
            return Ok(Step::ReaderError(e));
        }
        if self.at_eof {
            // A top-up saw the end, and nothing (or only discarded bytes) is left.
            self.done = true;
            self.discarding = false;
            self.pending = None;
            return Ok(Step::End);
        }
        Ok(match self.pending {
            None => self.region_for(self.need),
            Some(_) => Step::Read,
        })
    }

    /// A top-up found no bytes ready (or failed, or saw the end): freezes the region
    /// with the frames decoded in it, its partial frame to be carried.
    pub(crate) fn settle(&mut self, mem: &Memory) {
        debug_assert!(self.topping, "settle without a top-up");
        self.topping = false;
        self.freeze_pending(mem);
    }

    /// Makes `pending` (its queued frames, then `after`) the `ready` bytes.
    fn freeze_pending(&mut self, mem: &Memory) {
        debug_assert!(self.ready.is_none());
        self.walked = 0;
        let p = self.pending.take().expect("no region to freeze");
        self.ready = Some(mem.freeze_read(p));
    }

    /// As [`settle`](Self::settle), after a top-up read failed with `e`: the frames
    /// before it are yielded first.
    #[cfg(feature = "tokio")]
    pub(crate) fn defer(&mut self, e: io::Error, mem: &Memory) {
        self.settle(mem);
        self.deferred = Some(e);
    }

    /// As [`settle`](Self::settle), after a top-up read saw the end of the stream.
    #[cfg(feature = "tokio")]
    pub(crate) fn top_up_eof(&mut self, mem: &Memory) {
        self.settle(mem);
        self.at_eof = true;
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
            self.retire(carry);
        }
    }

    /// An async read returned `Pending` (the socket has nothing to read now): the
    /// region read into gives the ring back what the reader does not need while it
    /// waits, so an idle connection holds no ring memory (invariant 11).
    ///
    /// - No partial frame (nothing read into the region, or bytes being discarded,
    ///   which are shown to the decoder as they come): the region goes; the next poll
    ///   claims a new one.
    /// - A partial frame under [`TOP_UP_MIN`] bytes moves to the heap and the region
    ///   goes: copying it into the next region costs about what a read does. The heap
    ///   is kept for the next time (at most `TOP_UP_MIN` bytes), so that a reader
    ///   allocates nothing per frame however often it goes idle mid-frame. In the
    ///   heap, not in a smaller region of the ring: many idle readers' short parts,
    ///   one in each place a region of theirs began, would cut a shared ring into
    ///   gaps too short for a read region, and readers with bytes to read would wait
    ///   for readers without.
    /// - A longer one stays where it is, in place to be completed by the next reads,
    ///   and the region is cut to the frame's end if that is at most twice what it has,
    ///   else to twice what it has: the frame holds at most about twice its own bytes
    ///   while it waits. If the cut region fills before the frame ends, the frame is
    ///   carried into a region for all of it ([`filled`](Self::filled)), one copy per
    ///   doubling of what it has: a frame that arrives in many pieces costs copies in
    ///   proportion to its length, never one per piece.
    #[cfg(feature = "tokio")]
    pub(crate) fn idle(&mut self, mem: &Memory) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        debug_assert!(
            !self.topping && self.ready.is_none() && self.queue.is_empty(),
            "idle with frames in {p:?}"
        );
        debug_assert!(self.carry.is_none() && !self.spilled, "idle while carrying");
        let len = p.len();
        if len == 0 {
            let p = self.pending.take().expect("matched above");
            mem.give_back(p);
            return;
        }
        if len < TOP_UP_MIN {
            self.spill.clear();
            if self.spill.capacity() < len {
                // Doubling up to `TOP_UP_MIN`: a few allocations in a reader's life.
                let want = len.max(2 * self.spill.capacity()).min(TOP_UP_MIN);
                self.spill.reserve_exact(want);
            }
            self.spill.extend_from_slice(p);
            self.spilled = true;
            let p = self.pending.take().expect("matched above");
            mem.give_back(p);
            return;
        }
        let twice = len.saturating_mul(2);
        let keep = if !self.open_ended && self.need <= twice {
            self.need
        } else {
            twice
        };
        if keep < p.capacity() {
            mem.shrink_to(p, keep);
            self.init = self.init.min(p.capacity());
        }
    }

    /// Takes a region from a `Step::Alloc` of at least that size.
    pub(crate) fn install(&mut self, mut region: FixedBufMut) {
        debug_assert!(self.pending.is_none() && self.ready.is_none() && self.queue.is_empty());
        // The one copy of a partial frame: `need > ` its length, and the region was
        // sized for `need`.
        let fits = if let Some(carry) = self.carry.take() {
            let fits = region.try_extend_from_slice(&carry);
            self.retire(carry);
            fits
        } else if self.spilled {
            self.spilled = false;
            let fits = region.try_extend_from_slice(&self.spill);
            // A long frame's heap (spilled before a wait) goes; a short one's (an idle
            // reader's) stays for the next, so that a reader going idle mid-frame again
            // and again allocates nothing (a few times in its life, see `idle`).
            if self.spill.capacity() > TOP_UP_MIN {
                self.spill = Vec::new();
            } else {
                self.spill.clear();
            }
            fits
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
        if self.topping {
            // Exactly the rest of the last frame (`need <= cap` when topping began).
            return self.need - len;
        }
        // A bulk read leaves the region's slack for a top-up, which a frame of unknown
        // end never takes: it reads all the room it has (cut to a stride, the read
        // could end a few bytes on, again and again, as the frame grows).
        if self.long_open_frame() {
            return cap - len;
        }
        // A probe's bytes and its slack (as `region_for` sizes it) into a region that
        // holds more (a pool's spare), when it starts a frame: a partial frame reads
        // on as a bulk read does.
        let probe = self.bulk_read();
        let bulk = if len == 0 && probe < self.read_size {
            probe + self.slack(probe)
        } else {
            self.read_size
        };
        let limit = self.need.max(bulk).min(cap);
        let limit = if limit > len { limit } else { cap };
        let spare = limit - len;
        let stride = self.stride;
        if stride == 0 {
            return spare;
        }
        // `pending` starts at a frame boundary; its frame ends at `need` when the
        // decoder has read its header (a `need` shorter than a frame is a header's),
        // never when it only asks for one more byte (a line).
        let base = if !self.open_ended && self.need > len && self.need >= stride {
            self.need
        } else {
            0
        };
        let end = base + limit.saturating_sub(base) / stride * stride;
        if len < end && end <= limit {
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
            let fresh = &mut spare[self.init - len..];
            // SAFETY: `fresh` is a slice of the region's spare, valid for writes of its
            // length; one `write_bytes` (a memset) rather than a loop per byte, which
            // is slow in debug builds and under Miri.
            unsafe { core::ptr::write_bytes(fresh.as_mut_ptr(), 0, fresh.len()) };
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
    pub(crate) unsafe fn filled(&mut self, n: usize, mem: &Memory) -> io::Result<()> {
        debug_assert!(n > 0);
        let p = self.pending.as_mut().expect("Step::Read without a region");
        // SAFETY: the caller's contract.
        unsafe { p.advance(n) };
        if self.discarding {
            self.discard(mem);
            return Ok(());
        }
        if p.len() < self.need {
            if p.spare() == 0 {
                // A region cut short while the reader was idle ([`idle`](Self::idle))
                // is full before its frame is: the frame moves on, as one that outgrew
                // its region does.
                let p = self.pending.take().expect("checked above");
                self.carry = Some(p.freeze());
            }
            return Ok(());
        }
        let p = self.pending.take().expect("checked above");
        let (end, after) = self.walk(&p, self.walked);
        let (len, cap) = (p.len(), p.capacity());
        if self.queue.is_empty() {
            // Still the region's first frame, from its first byte.
            match after {
                After::Need(n) => {
                    self.need = n.max(len + 1);
                    self.open_ended = n <= len + 1;
                    if self.need > cap {
                        let mut p = p;
                        mem.shrink(&mut p);
                        self.carry = Some(p.freeze());
                    } else {
                        self.pending = Some(p);
                    }
                }
                After::Error(e) => {
                    let mut bad = p;
                    mem.shrink(&mut bad);
                    return Err(self.bad_input(e, bad.freeze()));
                }
                After::Unwalked => unreachable!("{len} bytes, no frame and no need"),
            }
            return Ok(());
        }
        self.pending = Some(p);
        if let After::Need(n) = after {
            // Rather than freeze the region with the last frame's first part at its end
            // (to be copied into the next), complete it in place if the reader has the
            // rest at once: one more read, worth it for a part too long to copy cheaply,
            // when the decoder knows where the frame ends (a `Lines` decoder, asking
            // for one more byte at a time, would make a read of each).
            let (part, need) = (len - end, end + n);
            if self.top_up && part >= TOP_UP_MIN && n > part + 1 && need <= cap {
                self.walked = end;
                self.need = need;
                self.after = After::Need(n);
                self.topping = true;
                return Ok(());
            }
        }
        self.topping = false;
        self.freeze_pending(mem);
        self.after = after;
        self.need = 1;
        self.open_ended = false;
        Ok(())
    }

    /// The decoder rejected the frame at the start of `bad` (every byte buffered) with
    /// `e`: drop that frame as [`Decoder::resync`] says, or end the stream if it cannot.
    /// Returns `e`, for the reader to yield.
    fn bad_input(&mut self, e: io::Error, mut bad: FixedBuf) -> io::Error {
        debug_assert!(self.ready.is_none() && self.pending.is_none() && self.carry.is_none());
        debug_assert!(self.queue.is_empty());
        self.need = 1;
        self.open_ended = false;
        self.after = After::Unwalked;
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
    fn discard(&mut self, mem: &Memory) {
        let p = self.pending.as_mut().expect("Step::Read without a region");
        match self.decoder.resync(p) {
            // The region is reused for the bytes that follow.
            Resync::More => p.clear(),
            Resync::Skip(n) => {
                self.discarding = false;
                let mut p = self.pending.take().expect("checked above");
                mem.shrink(&mut p);
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
    pub(crate) fn eof(&mut self, mem: &Memory) -> io::Result<Option<FixedBuf>> {
        self.done = true;
        if self.discarding {
            self.discarding = false;
            self.pending = None;
            return Ok(None);
        }
        let Some(mut p) = self.pending.take().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        mem.shrink(&mut p);
        self.finish(p.freeze(), mem)
    }

    /// The last frame, if the decoder makes one of `tail`, what is left at the end.
    fn finish(&mut self, tail: FixedBuf, mem: &Memory) -> io::Result<Option<FixedBuf>> {
        match self.decoder.decode_eof(&tail) {
            Ok(f) => {
                check(f, tail.len());
                Ok(Some(if self.trust.copying() {
                    frame_of(&tail, f.start..f.end, mem)
                } else {
                    tail.slice(f.start..f.end)
                }))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// The bytes read and not yet yielded, from where the next frame starts (while a
    /// rejected frame is skipped: the part of it read so far). At most one of the
    /// places below holds them (see the fields); `carry` only inside a call, which
    /// installs or spills it before it returns.
    pub(crate) fn into_buffered(self) -> Vec<u8> {
        if self.spilled {
            return self.spill;
        }
        let bytes: &[u8] = match (&self.ready, &self.pending, &self.carry) {
            (Some(ready), _, _) => ready,
            (_, Some(pending), _) => pending,
            (_, _, Some(carry)) => carry,
            _ => &[],
        };
        bytes.to_vec()
    }

    /// Drops every buffered byte and ends the stream with `e`.
    pub(crate) fn fail(&mut self, e: io::Error) -> io::Error {
        self.ready = None;
        self.pending = None;
        self.carry = None;
        self.spill = Vec::new();
        self.spilled = false;
        self.queue.clear();
        self.copies.clear();
        self.after = After::Unwalked;
        self.topping = false;
        self.deferred = None;
        self.discarding = false;
        self.done = true;
        e
    }

    /// Why a region of `n` bytes could not be had, as the error to yield. A frame that
    /// no region of the ring can hold is rejected like one the decoder rejects: the
    /// reader goes on where [`Decoder::resync`] finds the next frame (its partial
    /// bytes are still `carry`: the caller asks before [`before_wait`](Self::before_wait)
    /// spills them). Otherwise the stream ends.
    pub(crate) fn fail_alloc(&mut self, e: WaitError, n: usize) -> io::Error {
        match e {
            WaitError::NeverFits { block, .. } => {
                let e = FrameError::LargerThanRing { needed: n, block }.into();
                match self.carry.take() {
                    Some(part) => self.bad_input(e, part),
                    None => self.fail(e),
                }
            }
            WaitError::OutOfMemory { .. } => {
                self.fail(io::Error::new(io::ErrorKind::OutOfMemory, e))
            }
            e => self.fail(io::Error::other(e)),
        }
    }
}

/// Bytes of a frame at most that a reader on a pool whose frames are kept copies out
/// of its region whatever the region holds besides (a frame read alone too): the copy
/// goes to a slot of the shard's copy ring (`ring/slots.rs`), so that frames kept never
/// stay in its read ring.
/// There, each would cut the room readers lap into gaps, and every claim would walk
/// them (a server keeping one 4 KiB frame in ten, mostly read one to a region: some
/// 7,000 kept in each read ring, 2.6 rings tried per claim). A batch's worth
/// ([`BATCH_BYTES`]): the copy of a frame costs about what its read did. A frame read
/// alone into a slot ([`Core::alone`]) is not copied.
const POOL_COPY_MAX: usize = BATCH_BYTES;

/// The bytes of a region at most this many times a frame's that the frame may hold
/// alone: a shorter frame is copied into a region of its own as it is yielded.
const PIN_MAX: usize = 4;

/// Queues `f`; the first time two frames are queued, the queue takes its room for
/// [`QUEUE`] at once (the second and last allocation of its life, see
/// [`Core::reserve_queue`]).
#[inline]
fn queue_frame(queue: &mut VecDeque<Frame>, f: Frame) {
    if queue.len() == queue.capacity() {
        queue.reserve_exact(QUEUE.saturating_sub(queue.len()).max(1));
    }
    queue.push_back(f);
}

/// The frame at `range` of `region`'s bytes: a view of the region when the frame is at
/// least a [`PIN_MAX`]th of it (and, on a pool, longer than [`POOL_COPY_MAX`]), else a
/// copy in a region of its own (see [`copied`]), so that a frame the application keeps
/// holds at most `PIN_MAX` times its bytes (the copy: its own, and a header), never the
/// bytes of the frames read with it. Without room for the copy now, the view: a frame
/// is never held back for memory.
///
/// The copy costs a claim (on a pool, under its lock) and the frame's bytes, and saves
/// the view's two atomic operations on the shared region's count; on a reader's own
/// ring it is taken only for frames that share their region with others, so a stream of
/// long frames (a quarter of a read or more) is not copied.
fn frame_of(region: &FixedBuf, range: Range<usize>, mem: &Memory) -> FixedBuf {
    let len = range.len();
    let pooled = mem.pool().is_some() && !region.is_slot();
    if copied(len, region.region_span(), pooled) {
        if let Some(own) = mem.claim_now(len) {
            return filled(own, &region[range]);
        }
    }
    region.slice(range)
}

/// `copy`, a region claimed for `bytes` (at least as long), holding them, frozen.
pub(crate) fn filled(mut copy: FixedBufMut, bytes: &[u8]) -> FixedBuf {
    let copied = copy.try_extend_from_slice(bytes);
    debug_assert!(copied.is_ok(), "{} bytes copied into {copy:?}", bytes.len());
    copy.freeze()
}

/// Whether a frame of `len` bytes is copied out of a region of `span` bytes (header
/// included) rather than held as a slice of it, by a reader whose frames are kept (see
/// [`Core::retire`]): when it is less than a [`PIN_MAX`]th of the region, and on a
/// pool (`pooled`, a region not a slot) also when it is at most [`POOL_COPY_MAX`] bytes.
#[inline]
pub(crate) fn copied(len: usize, span: usize, pooled: bool) -> bool {
    len.saturating_mul(PIN_MAX) < span || (pooled && len <= POOL_COPY_MAX)
}

/// A decoder's frame must lie inside the bytes it was shown and consume some.
#[inline]
fn check(f: Frame, len: usize) {
    assert!(
        f.start <= f.end && f.end <= f.consumed && f.consumed <= len && f.consumed > 0,
        "a Decoder returned {f:?} for {len} buffered bytes"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe whose bytes were only a frame's first part, carried on into the next
    /// region, is no verdict: the region the frame ends in is the probe.
    #[test]
    fn a_probe_carried_on_is_judged_by_the_region_its_frame_ends_in() {
        let mut t = Trust::new();
        t.found(false, 1);
        let gap = t.probe_gap;
        while t.copying() {
            t.retire(true, 1);
        }
        assert!(t.probing());
        t.retire(true, 0); // a frame's first part, carried on
        assert!(t.probing(), "judged by a region that yielded no frame");
        t.retire(false, 1); // the region the frame ended in, its frame kept
        assert_eq!((t.copy_left, t.probe_gap), (gap, 2 * gap));
    }
}
