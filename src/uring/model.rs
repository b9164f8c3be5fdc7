//! The books and the frame assembler driven by a fake kernel that completes into
//! provided buffers as Linux does (`io_uring/kbuf.c`): incremental consumption
//! (`IORING_CQE_F_BUF_MORE` while a buffer has room, one group head shared by every
//! connection), buffers consumed whole without it, short completions, and no buffer
//! (`ENOBUFS`). Runs under Miri, which checks that no view is written after it is
//! handed out and that nothing is freed while the kernel may write it.

use std::collections::VecDeque;
use std::sync::Arc;

use super::books::{Books, BooksError, Completion, Entry, Judge};
use super::frames::{Assembler, Chunk};
use crate::io::{LengthDelimited, Lines, Memory};
use crate::{FixedBuf, Ring};

/// Books of `entries` ids, and the judge their probes tell.
fn books(entries: u16) -> (Books, Arc<Judge>) {
    let judge = Arc::new(Judge::new());
    (
        Books::new(entries, Arc::clone(&judge), 2 * usize::from(entries)),
        judge,
    )
}

/// A completion's view as a reader holds it.
fn chunk(c: Completion) -> Chunk {
    Chunk::new(c.view, c.probe)
}

/// The kernel's side of a group: the published entries, the head first.
struct FakeKernel {
    entries: VecDeque<Entry>,
    incremental: bool,
}

impl FakeKernel {
    /// A receive of `data` (at most `cap` bytes of it) into the head buffer: the
    /// completion's buffer id, bytes and `BUF_MORE`; `None` for `ENOBUFS`.
    fn recv(&mut self, data: &[u8], cap: usize) -> Option<(u16, usize, bool)> {
        let head = self.entries.front_mut()?;
        let n = data.len().min(cap).min(head.len as usize);
        // SAFETY: the entry's bytes from `addr` on are the kernel's (the books hand out
        // views only of bytes completed before), and `n <= len` of them.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), head.addr, n) };
        let bid = head.bid;
        if self.incremental && n < head.len as usize {
            // SAFETY: `n < len`: still inside the buffer.
            head.addr = unsafe { head.addr.add(n) };
            head.len -= n as u32;
            return Some((bid, n, true));
        }
        self.entries.pop_front();
        Some((bid, n, false))
    }
}

/// An 8 KiB ring, a ring of their own for the copies, books of two ids, and a kernel
/// that holds one published 1 KiB buffer of the ring.
fn one_buffer(incremental: bool) -> (Ring, Memory, Books, FakeKernel) {
    let ring = Ring::new(8 << 10);
    let copies = Memory::Own(Box::new(Ring::new(8 << 10)));
    let (mut books, _) = books(2);
    let entry = books.publish(ring.fixed(1024).unwrap(), false).unwrap();
    let kernel = FakeKernel {
        entries: VecDeque::from([entry]),
        incremental,
    };
    (ring, copies, books, kernel)
}

/// xorshift64: the same run everywhere, Miri included.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A connection: the bytes it has still to send, the payloads its frames must be, and
/// its reader's state.
struct Conn {
    wire: VecDeque<u8>,
    expect: VecDeque<Vec<u8>>,
    frames: Assembler<LengthDelimited>,
    kept: Vec<(FixedBuf, Vec<u8>)>,
    waiting: bool,
}

/// Several connections' length-delimited frames (some longer than a buffer) through
/// one group, with short completions, refills at random moments and one frame in
/// eight kept to the end: every frame comes out whole and in order, every kept frame
/// still holds its bytes when the run ends, and once all is dropped the rings hold
/// nothing.
/// Returns the `ENOBUFS` met and the frames longer than a buffer.
fn run(incremental: bool, seed: u64) -> (usize, usize) {
    let steps = if cfg!(miri) { 300 } else { 20_000 };
    let ring = Ring::new(64 << 10);
    let copies = Memory::Own(Box::new(Ring::new(32 << 10)));
    let (mut books, _) = books(8);
    let mut kernel = FakeKernel {
        entries: VecDeque::new(),
        incremental,
    };
    let mut rng = Rng(seed);
    let mut conns: Vec<Conn> = (0..3)
        .map(|_| Conn {
            wire: VecDeque::new(),
            expect: VecDeque::new(),
            frames: Assembler::new(LengthDelimited::new()),
            kept: Vec::new(),
            waiting: false,
        })
        .collect();
    let mut enobufs = 0;
    let mut carried_frames = 0;
    let mut displaced = None;
    for step in 0..steps {
        // Publish under the free ids what the ring has room for, sometimes.
        if rng.below(4) == 0 {
            while books.free() > 0 {
                let len = [512, 1024, 3000][rng.below(3) as usize];
                let Some(region) = ring.fixed(len) else { break };
                // Some buffers' short frames copied, as while frames are found kept.
                let copy = rng.below(2) == 0;
                let entry = books.publish(region, copy).expect("an id is free");
                kernel.entries.push_back(entry);
            }
            conns.iter_mut().for_each(|c| c.waiting = false);
        }
        let k = rng.below(3) as usize;
        let c = &mut conns[k];
        if c.wire.len() < 64 {
            let n = [0, 5, 100, 700, 2500][rng.below(5) as usize];
            let payload: Vec<u8> = (0..n).map(|i| (step + i) as u8).collect();
            c.wire.extend((n as u32).to_be_bytes());
            c.wire.extend(&payload);
            c.expect.push_back(payload);
        }
        if c.waiting {
            continue; // its receive ended with ENOBUFS: it waits for a publish
        }
        let (front, _) = c.wire.as_slices();
        let cap = [7, 200, 4096][rng.below(3) as usize];
        match kernel.recv(front, cap) {
            None => {
                enobufs += 1;
                c.waiting = true;
            }
            Some((bid, n, more)) => {
                c.wire.drain(..n);
                let got = books
                    .complete(bid, n, more, k as u64)
                    .expect("the kernel keeps the protocol");
                displaced = got.displaced;
                c.frames.push(chunk(got));
            }
        }
        while let Some(frame) = c.frames.next(&copies).expect("well-formed frames") {
            let want = c.expect.pop_front().expect("a frame was sent");
            assert_eq!(&frame[..], &want[..], "step {step}");
            carried_frames += usize::from(want.len() > 1024);
            if rng.below(8) == 0 {
                c.kept.push((frame, want));
            }
        }
        // As the reader going to sleep, and the one the driver wakes when another
        // connection's bytes land after its partial frame: a view that can no longer
        // be joined is copied out. None is left holding a buffer for nothing.
        let woken = displaced.take().map(|d| d as usize);
        for j in [Some(k), woken].into_iter().flatten() {
            if conns[j].frames.held_view() == Some(false) {
                conns[j].frames.unpin(&copies).expect("room for the copy");
            }
        }
        for (j, c) in conns.iter().enumerate() {
            assert_ne!(c.frames.held_view(), Some(false), "step {step}, conn {j}");
        }
    }
    for c in &conns {
        for (frame, want) in &c.kept {
            assert_eq!(&frame[..], &want[..], "a kept frame was written over");
        }
    }
    drop(conns);
    drop(kernel); // unregistered: the kernel writes nothing more
    drop(books);
    assert_eq!(ring.stats().live_buffers, 0);
    assert_eq!(copies.own().expect("a ring").stats().live_buffers, 0);
    (enobufs, carried_frames)
}

/// Both runs together met `ENOBUFS` and frames longer than a buffer.
fn met_both(a: (usize, usize), b: (usize, usize)) {
    assert!(
        a.0 + b.0 > 0 && a.1 + b.1 > 0,
        "the runs met no ENOBUFS or no long frame: {a:?} {b:?}"
    );
}

#[test]
fn frames_survive_incremental_consumption() {
    met_both(run(true, 0x9e37_79b9_7f4a_7c15), run(true, 7));
}

#[test]
fn frames_survive_buffers_consumed_whole() {
    met_both(run(false, 0x9e37_79b9_7f4a_7c15), run(false, 11));
}

#[test]
fn a_completion_the_books_cannot_account_for_is_an_error() {
    let ring = Ring::new(8 << 10);
    let (mut books, trust) = books(2);
    assert_eq!(
        books.complete(0, 1, false, 0).unwrap_err(),
        BooksError::NotPublished(0)
    );
    assert_eq!(
        books.complete(9, 1, false, 0).unwrap_err(),
        BooksError::NotPublished(9)
    );
    let e = books.publish(ring.fixed(64).unwrap(), false).unwrap();
    books.publish(ring.fixed(64).unwrap(), false).unwrap();
    assert!(
        books.publish(ring.fixed(64).unwrap(), false).is_err(),
        "two ids only"
    );
    let err = books.complete(e.bid, 65, true, 0).unwrap_err();
    assert!(matches!(err, BooksError::Overrun { len: 64, .. }), "{err}");
    // SAFETY: the "kernel" writes the buffer it was given.
    unsafe { e.addr.write_bytes(b'x', 64) };
    let got = books.complete(e.bid, 64, false, 0).unwrap();
    assert_eq!(&got.view[..], &[b'x'; 64][..]);
    assert_eq!(
        books.complete(e.bid, 0, false, 0).unwrap_err(),
        BooksError::NotPublished(e.bid)
    );
    assert_eq!(books.free(), 1, "given back: no BUF_MORE");
    drop(books);
    // The kernel is done; the view closes the probe, which finds the region free: a
    // first probe found free makes the group trust its readers.
    assert!(trust.lock().probing());
    drop(chunk(got));
    assert!(!trust.lock().probing());
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn a_leaked_group_never_frees_what_the_kernel_holds() {
    let ring = Ring::new(8 << 10);
    let (mut books, _) = books(2);
    books.publish(ring.fixed(64).unwrap(), false).unwrap();
    books.leak();
    drop(books);
    assert_eq!(ring.stats().live_buffers, 1);
}

#[test]
fn lines_across_completions_are_copied_once_grown() {
    let ring = Ring::new(8 << 10);
    let copies = Memory::Own(Box::new(Ring::new(8 << 10)));
    let (mut books, _) = books(4);
    let mut kernel = FakeKernel {
        entries: VecDeque::new(),
        incremental: true,
    };
    while books.free() > 0 {
        kernel
            .entries
            .push_back(books.publish(ring.fixed(256).unwrap(), false).unwrap());
    }
    let mut frames = Assembler::new(Lines::new());
    let text = b"first line\na line much longer than one receive of seven bytes\nend\n";
    let mut got = Vec::new();
    for part in text.chunks(7) {
        let (bid, n, more) = kernel.recv(part, 7).unwrap();
        frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
        // Another connection's receive between each of this one's: the views do not
        // join.
        let (bid, n, more) = kernel.recv(b"?", 1).unwrap();
        drop(chunk(books.complete(bid, n, more, 1).unwrap()));
        while let Some(f) = frames.next(&copies).unwrap() {
            got.push(String::from_utf8(f.to_vec()).unwrap());
        }
    }
    assert_eq!(
        got,
        [
            "first line",
            "a line much longer than one receive of seven bytes",
            "end"
        ]
    );
    assert_eq!(frames.buffered(), 0);
}

#[test]
fn a_connections_views_back_to_back_join() {
    let (ring, copies, mut books, mut kernel) = one_buffer(true);
    let mut frames = Assembler::new(LengthDelimited::new());
    let mut wire = 600u32.to_be_bytes().to_vec();
    wire.extend([5u8; 600]);
    for part in wire.chunks(100) {
        let (bid, n, more) = kernel.recv(part, 100).unwrap();
        frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    }
    let frame = frames.next(&copies).unwrap().unwrap();
    assert_eq!(&frame[..], &[5u8; 600][..]);
    // No copy: the frame is a view of the provided buffer.
    assert_eq!(copies.own().unwrap().stats().live_buffers, 0);
    assert!(ring.stats().live_buffers == 1);
}

/// A reader that has yielded every frame holds no bytes of its own once its last
/// frame's view is retired: an idle connection costs no byte state (and a partial
/// frame keeps it until the frame is whole).
#[test]
fn an_idle_assembler_holds_nothing() {
    let (_ring, copies, mut books, mut kernel) = one_buffer(true);
    let mut frames = Assembler::new(LengthDelimited::new());
    assert!(frames.is_empty());
    let mut wire = Vec::new();
    for n in [10u32, 20] {
        wire.extend(n.to_be_bytes());
        wire.extend(vec![n as u8; n as usize]);
    }
    wire.extend(30u32.to_be_bytes()); // the start of a third frame
    let (bid, n, more) = kernel.recv(&wire, 1024).unwrap();
    frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    assert_eq!(frames.next(&copies).unwrap().unwrap().len(), 10);
    assert_eq!(frames.next(&copies).unwrap().unwrap().len(), 20);
    assert!(frames.next(&copies).unwrap().is_none());
    assert!(!frames.is_empty(), "the third frame's start is held");
    let (bid, n, more) = kernel.recv(&[3u8; 30], 1024).unwrap();
    frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    assert_eq!(&frames.next(&copies).unwrap().unwrap()[..], &[3u8; 30][..]);
    assert!(
        !frames.is_empty(),
        "the last frame's view is retired at the next call"
    );
    assert!(frames.next(&copies).unwrap().is_none());
    assert!(frames.is_empty());
    assert_eq!(frames.buffered(), 0);
}

/// A partial frame held as a view of a buffer the kernel gave back cannot be joined:
/// copied out, its buffer goes back to the ring, and the frame, completed from later
/// buffers, is whole.
#[test]
fn a_partial_frame_unpinned_frees_its_buffer() {
    let (ring, copies, mut books, mut kernel) = one_buffer(false);
    let mut frames = Assembler::new(LengthDelimited::new());
    let mut wire = 1500u32.to_be_bytes().to_vec();
    wire.extend((0..1500u32).map(|i| i as u8));
    let (bid, n, more) = kernel.recv(&wire, 1024).unwrap();
    frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    assert!(frames.next(&copies).unwrap().is_none());
    assert_eq!(ring.stats().live_buffers, 1, "the view holds its buffer");
    assert_eq!(
        frames.held_view(),
        Some(false),
        "consumed whole: given back"
    );
    assert!(frames.unpin(&copies).unwrap());
    assert_eq!(frames.held_view(), None);
    assert!(!frames.unpin(&copies).unwrap(), "nothing left to copy");
    assert_eq!(
        ring.stats().live_buffers,
        0,
        "the buffer is the ring's again"
    );
    kernel
        .entries
        .push_back(books.publish(ring.fixed(1024).unwrap(), false).unwrap());
    let (bid, n, more) = kernel.recv(&wire[1024..], 1024).unwrap();
    frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    let frame = frames.next(&copies).unwrap().unwrap();
    assert_eq!(&frame[..], &wire[4..]);
}

/// A partial frame at the end of its connection's last completion stays a view while
/// the kernel writes that buffer next right after it; another connection's completion
/// there says whose partial frame it displaced, which is then copied out, and the
/// books count the bytes the kernel has left.
#[test]
fn another_connections_bytes_after_a_partial_frame_displace_it() {
    let ring = Ring::new(8 << 10);
    let copies = Memory::Own(Box::new(Ring::new(8 << 10)));
    let (mut books, _) = books(2);
    let e = books.publish(ring.fixed(1024).unwrap(), false).unwrap();
    assert_eq!(books.unfilled(), 1024);
    let mut kernel = FakeKernel {
        entries: VecDeque::from([e]),
        incremental: true,
    };
    let mut frames = Assembler::new(LengthDelimited::new());
    let mut wire = 600u32.to_be_bytes().to_vec();
    wire.extend([7u8; 600]);
    let (bid, n, more) = kernel.recv(&wire, 100).unwrap();
    let got = books.complete(bid, n, more, 0).unwrap();
    assert_eq!(got.displaced, None);
    frames.push(chunk(got));
    assert!(frames.next(&copies).unwrap().is_none());
    assert_eq!(frames.held_view(), Some(true), "the next bytes may join it");
    // The same connection again: no one displaced, and the view joins.
    let (bid, n, more) = kernel.recv(&wire[100..], 100).unwrap();
    let got = books.complete(bid, n, more, 0).unwrap();
    assert_eq!(got.displaced, None);
    frames.push(chunk(got));
    assert!(frames.next(&copies).unwrap().is_none());
    assert_eq!(frames.held_view(), Some(true));
    assert_eq!(books.unfilled(), 1024 - 200);
    // Another connection's bytes land right after it.
    let (bid, n, more) = kernel.recv(b"other", 100).unwrap();
    let other = books.complete(bid, n, more, 1).unwrap();
    assert_eq!(other.displaced, Some(0));
    assert_eq!(frames.held_view(), Some(false), "no longer joinable");
    assert!(frames.unpin(&copies).unwrap());
    assert_eq!(copies.own().unwrap().stats().live_buffers, 1, "the copy");
    let (bid, n, more) = kernel.recv(&wire[200..], 1024).unwrap();
    let got = books.complete(bid, n, more, 0).unwrap();
    assert_eq!(got.displaced, Some(1));
    assert!(more);
    assert_eq!(books.unfilled(), 1024 - 205 - 404);
    frames.push(chunk(got));
    let frame = frames.next(&copies).unwrap().unwrap();
    assert_eq!(&frame[..], &[7u8; 600][..]);
    drop(other);
}

/// A buffer given back keeps its probe for a later buffer: reused once every view of
/// the first is dropped, not before.
#[test]
fn a_probe_is_reused_once_its_views_are_dropped() {
    let ring = Ring::new(8 << 10);
    let (mut books, _) = books(2);
    let mut kernel = FakeKernel {
        entries: VecDeque::from([books.publish(ring.fixed(1024).unwrap(), false).unwrap()]),
        incremental: false,
    };
    let (bid, n, more) = kernel.recv(b"first", 1024).unwrap();
    let first = books.complete(bid, n, more, 0).unwrap();
    let first_probe = Arc::as_ptr(&first.probe);
    let first = chunk(first);
    let e = books.publish(ring.fixed(1024).unwrap(), false).unwrap();
    kernel.entries.push_back(e);
    let (bid, n, more) = kernel.recv(b"second", 1024).unwrap();
    let second = books.complete(bid, n, more, 0).unwrap();
    assert_ne!(
        Arc::as_ptr(&second.probe),
        first_probe,
        "the first's view lives"
    );
    drop((first, chunk(second)));
    let e = books.publish(ring.fixed(1024).unwrap(), false).unwrap();
    kernel.entries.push_back(e);
    let (bid, n, more) = kernel.recv(b"third", 1024).unwrap();
    let third = books.complete(bid, n, more, 0).unwrap();
    assert_eq!(Arc::as_ptr(&third.probe), first_probe, "reused");
    assert_eq!(&third.view[..], b"third");
    drop(chunk(third));
    assert_eq!(ring.stats().live_buffers, 0);
}

/// The oldest spare still viewed (a kept frame's) goes to the back: the next one is
/// reused, no probe allocated.
#[test]
fn a_kept_views_probe_does_not_stop_the_next_from_reuse() {
    let ring = Ring::new(8 << 10);
    let (mut books, _) = books(2);
    let mut kernel = FakeKernel {
        entries: VecDeque::new(),
        incremental: false,
    };
    let mut receive = |books: &mut Books, data: &[u8]| {
        let e = books.publish(ring.fixed(1024).unwrap(), false).unwrap();
        kernel.entries.push_back(e);
        let (bid, n, more) = kernel.recv(data, 1024).unwrap();
        books.complete(bid, n, more, 0).unwrap()
    };
    let kept = receive(&mut books, b"kept");
    let kept_probe = Arc::as_ptr(&kept.probe);
    let kept = chunk(kept);
    let dropped = receive(&mut books, b"dropped");
    let dropped_probe = Arc::as_ptr(&dropped.probe);
    drop(chunk(dropped));
    let next = receive(&mut books, b"next");
    assert_eq!(
        Arc::as_ptr(&next.probe),
        dropped_probe,
        "reused past the kept one"
    );
    drop((chunk(next), kept));
    let last = receive(&mut books, b"last");
    assert_eq!(Arc::as_ptr(&last.probe), kept_probe, "reused once let go");
    drop(chunk(last));
}

#[test]
fn a_short_frame_of_a_copy_buffer_holds_its_own_bytes() {
    let ring = Ring::new(8 << 10);
    let copies = Memory::Own(Box::new(Ring::new(8 << 10)));
    let (mut books, trust) = books(2);
    let mut kernel = FakeKernel {
        entries: VecDeque::from([
            books.publish(ring.fixed(8).unwrap(), true).unwrap(),
            books.publish(ring.fixed(1024).unwrap(), false).unwrap(),
        ]),
        incremental: true,
    };
    let mut frames = Assembler::new(LengthDelimited::new());
    let mut wire = 4u32.to_be_bytes().to_vec();
    wire.extend(b"abcd");
    // The first buffer, filled and given back; its frame copied.
    let (bid, n, more) = kernel.recv(&wire, 1024).unwrap();
    let got = books.complete(bid, n, more, 0).unwrap();
    frames.push(chunk(got));
    let kept = frames.next(&copies).unwrap().unwrap();
    assert_eq!(&kept[..], b"abcd");
    // Its frame taken (a copy), nothing holds the buffer once the next call drops the
    // view the frame came from; a buffer of copies tells the trust nothing.
    assert!(frames.next(&copies).unwrap().is_none());
    assert_eq!(ring.stats().live_buffers, 1, "the other buffer alone");
    assert!(trust.lock().probing());
    // The same bytes into the other buffer: a view of it.
    let (bid, n, more) = kernel.recv(&wire, 1024).unwrap();
    let got = books.complete(bid, n, more, 0).unwrap();
    frames.push(chunk(got));
    let view = frames.next(&copies).unwrap().unwrap();
    drop((books, kernel, frames));
    // The copy holds a region of the copies' ring; the view holds its buffer.
    assert_eq!(copies.own().unwrap().stats().live_buffers, 1);
    assert_eq!(ring.stats().live_buffers, 1);
    drop(view);
    assert_eq!(ring.stats().live_buffers, 0);
    drop(kept);
}

#[test]
fn a_frame_kept_past_its_buffer_makes_the_next_buffers_copy() {
    let ring = Ring::new(8 << 10);
    let copies = Memory::Own(Box::new(Ring::new(8 << 10)));
    let (mut books, trust) = books(2);
    let e = books.publish(ring.fixed(8).unwrap(), false).unwrap();
    let mut kernel = FakeKernel {
        entries: VecDeque::from([e]),
        incremental: true,
    };
    let mut frames = Assembler::new(LengthDelimited::new());
    let (bid, n, more) = kernel.recv(b"\0\0\0\x04abcd", 8).unwrap();
    frames.push(chunk(books.complete(bid, n, more, 0).unwrap()));
    let kept = frames.next(&copies).unwrap().unwrap(); // a view: the buffer was trusted
    assert!(frames.next(&copies).unwrap().is_none()); // its view is done with
    let t = *trust.lock();
    assert!(
        t.copying(),
        "the frame held its buffer when the probe closed: {t:?}"
    );
    drop(kept);
    assert_eq!(ring.stats().live_buffers, 0);
}
