//! The differential driver shared by the cargo-fuzz target (`fuzz/fuzz_targets/ring_ops.rs`)
//! and its proptest twin (`tests/fuzz_model.rs`), both of which include this one file by
//! `#[path]`.
//!
//! A byte string is read as a program: a ring (policy and capacity from the first bytes),
//! then operations — allocate fixed / extendable / typed, write, grow, finalize, freeze,
//! clone, slice, split, truncate, typed push/insert/remove/pop, send to another thread,
//! drop, drop the ring (and continue on a new one while old buffers live on), and
//! allocations made while the global allocator refuses everything (`Refusing`, which
//! each binary that includes this file installs). A plain model (a `Vec` per buffer)
//! runs beside it. After every operation:
//! - no two live buffers overlap (clones and slices of one frozen region count once);
//! - every buffer still holds exactly the bytes (or values) the model says;
//! - typed buffers are aligned for their type, and their values are dropped exactly once;
//! - under `WhenFull::Heap` and `WhenFull::Grow` a reasonable request never fails,
//!   unless the global allocator refused it (then it is `None`, and nothing leaks).
//!
//! At sync points (the other thread has dropped what it was sent) and at the end, the
//! ring's `stats().live_buffers` equals the regions the model holds, and at the end all
//! memory is back: no live buffer, no byte in use, no typed value alive.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread;

use ringmem::{ExtBuf, FixedBuf, FixedBufMut, Ring, TypedBuf, WhenFull};

thread_local! {
    /// Whether the global allocator refuses this thread's requests.
    static REFUSE: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, refusing every request of a thread inside [`refusing`].
pub struct Refusing;

fn refused() -> bool {
    REFUSE.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: forwards to `System`, or returns null (a refusal) without touching memory.
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if refused() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if refused() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if refused() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` with every global allocation of this thread refused.
fn refusing<T>(f: impl FnOnce() -> T) -> T {
    REFUSE.with(|r| r.set(true));
    let out = f();
    REFUSE.with(|r| r.set(false));
    out
}

/// An over-aligned typed value that counts how many of its kind are alive.
#[repr(align(64))]
pub struct Aligned {
    value: u64,
    alive: Arc<AtomicIsize>,
}

impl Aligned {
    fn new(value: u64, alive: &Arc<AtomicIsize>) -> Aligned {
        alive.fetch_add(1, Ordering::Relaxed);
        Aligned {
            value,
            alive: alive.clone(),
        }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let before = self.alive.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "a typed value was dropped twice");
    }
}

/// A buffer held outside any `ExtBuf` borrow, with what the model says it holds.
enum Held {
    Fixed {
        buf: FixedBufMut,
        model: Vec<u8>,
    },
    /// `region` is (id, start, bytes) of the frozen region, shared by clones and slices.
    Frozen {
        buf: FixedBuf,
        model: Vec<u8>,
        region: (u64, usize, usize),
    },
    Typed {
        buf: TypedBuf<Aligned>,
        model: Vec<u64>,
    },
}

impl Held {
    fn check(&self) {
        match self {
            Held::Fixed { buf, model } => {
                assert_eq!(&buf[..], &model[..], "a fixed buffer lost its bytes");
                assert!(buf.capacity() >= buf.len());
            }
            Held::Frozen { buf, model, .. } => {
                assert_eq!(&buf[..], &model[..], "a frozen buffer lost its bytes")
            }
            Held::Typed { buf, model } => {
                assert_eq!(buf.as_ptr() as usize % 64, 0, "typed buffer misaligned");
                let got: Vec<u64> = buf.iter().map(|a| a.value).collect();
                assert_eq!(&got, model, "a typed buffer lost its values");
            }
        }
    }

    /// (region id, start, bytes) for the overlap check. Frozen handles carry their
    /// region's id; a unique buffer gets `unique`, an id no other buffer has.
    fn range(&self, unique: u64) -> (u64, usize, usize) {
        match self {
            Held::Fixed { buf, .. } => (unique, buf.as_ptr() as usize, buf.capacity()),
            Held::Frozen { region, .. } => *region,
            Held::Typed { buf, .. } => (
                unique,
                buf.as_ptr() as usize,
                buf.capacity() * core::mem::size_of::<Aligned>(),
            ),
        }
    }
}

/// Ids of unique buffers in the overlap check: never equal to a frozen region's id.
const UNIQUE: u64 = 1 << 63;

/// Messages to the other thread.
enum Msg {
    /// Check, keep a while, check again, drop.
    Buf(Held),
    /// Drop everything held, then answer.
    Sync(SyncSender<()>),
}

/// The other thread: holds up to a few buffers, checking each on arrival and on drop.
fn other_thread(rx: Receiver<Msg>) {
    let mut held: Vec<Held> = Vec::new();
    for msg in rx {
        match msg {
            Msg::Buf(h) => {
                h.check();
                held.push(h);
                if held.len() > 3 {
                    let h = held.remove(0);
                    h.check();
                }
            }
            Msg::Sync(done) => {
                for h in held.drain(..) {
                    h.check();
                }
                done.send(()).unwrap();
            }
        }
    }
    for h in held {
        h.check();
    }
}

/// Reads the program.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn byte_or0(&mut self) -> u8 {
        self.byte().unwrap_or(0)
    }

    /// A size: mostly small, sometimes up to a few KiB, sometimes absurd.
    fn size(&mut self) -> usize {
        let b = self.byte_or0();
        match b >> 6 {
            0 | 1 => usize::from(b & 0x7f),
            2 => usize::from(b & 0x3f) * 64 + usize::from(self.byte_or0() & 63),
            _ => match b & 7 {
                0 => usize::MAX,
                1 => usize::MAX / 2,
                2 => 1 << 20,
                _ => usize::from(b & 0x3f) * 8,
            },
        }
    }

    fn index(&mut self, len: usize) -> Option<usize> {
        let b = self.byte()?;
        (len > 0).then(|| usize::from(b) % len)
    }
}

/// Builds the next ring from the input: every policy, capacities from 8 B to ~8 KiB.
fn new_ring(input: &mut Input<'_>) -> Ring {
    let policy =
        [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow][usize::from(input.byte_or0() % 3)];
    let cap = 8 + usize::from(input.byte_or0()) * 32;
    Ring::builder()
        .capacity(cap)
        .when_full(policy)
        .build()
        .expect("a valid capacity")
}

/// Whether a request of `n` bytes must succeed under `policy`.
fn must_fit(policy: WhenFull, n: usize) -> bool {
    policy != WhenFull::Fail && n <= 1 << 16
}

/// Program state that outlives rings.
struct State {
    held: Vec<Held>,
    to_other: Sender<Msg>,
    stamp: u8,
    next_region: u64,
    alive: Arc<AtomicIsize>,
    values: u64,
}

impl State {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        self.stamp = self.stamp.wrapping_add(1);
        let s = self.stamp;
        (0..n)
            .map(|i| s.wrapping_mul(7).wrapping_add(i as u8))
            .collect()
    }

    fn sync(&self) {
        let (tx, rx) = sync_channel(0);
        self.to_other.send(Msg::Sync(tx)).unwrap();
        rx.recv().expect("the other thread panicked");
    }

    fn check(&self, exts: &[(ExtBuf<'_>, Vec<u8>)]) {
        let mut ranges: Vec<(u64, usize, usize)> = self
            .held
            .iter()
            .enumerate()
            .map(|(i, h)| h.range(UNIQUE | i as u64))
            .collect();
        for (i, (e, model)) in exts.iter().enumerate() {
            assert_eq!(&e[..], &model[..], "an extendable buffer lost its bytes");
            ranges.push((
                UNIQUE | (1 << 62) | i as u64,
                e.as_ptr() as usize,
                e.capacity(),
            ));
        }
        for h in &self.held {
            h.check();
        }
        ranges.retain(|r| r.2 > 0);
        ranges.sort_unstable_by_key(|r| (r.0, r.1));
        ranges.dedup_by_key(|r| r.0);
        ranges.sort_unstable_by_key(|r| r.1);
        for w in ranges.windows(2) {
            assert!(
                w[0].1 + w[0].2 <= w[1].1,
                "live buffers overlap: {:#x}+{} and {:#x}+{}",
                w[0].1,
                w[0].2,
                w[1].1,
                w[1].2
            );
        }
    }
}

/// Runs one program. Panics on any disagreement with the model.
pub fn run(data: &[u8]) {
    let mut input = Input { data, pos: 0 };
    let (to_other, rx) = channel();
    let other = thread::spawn(move || other_thread(rx));
    let mut st = State {
        held: Vec::new(),
        to_other,
        stamp: 0,
        next_region: 0,
        alive: Arc::new(AtomicIsize::new(0)),
        values: 0,
    };
    let mut last_ring = None;
    while input.pos < input.data.len() {
        let ring = new_ring(&mut input);
        let more = epoch(&ring, &mut input, &mut st);
        if !more {
            last_ring = Some(ring);
            break;
        }
        // Dropping the ring here while `st.held` and the other thread keep its buffers.
    }
    // Everything goes back.
    st.check(&[]);
    st.held.clear();
    st.sync();
    assert_eq!(
        st.alive.load(Ordering::Relaxed),
        0,
        "typed values leaked or double-dropped"
    );
    if let Some(ring) = last_ring {
        let stats = ring.stats();
        assert_eq!(stats.live_buffers, 0, "all buffers dropped, {stats:?}");
        assert_eq!(stats.bytes_in_use, 0, "all bytes back, {stats:?}");
        if ring.when_full() == WhenFull::Fail && stats.blocks == 1 && ring.capacity() > 16 {
            // The whole block is one free region again.
            assert!(
                ring.fixed(ring.capacity() - 16).is_some(),
                "the ring is whole again"
            );
        }
    }
    drop(st.to_other);
    if let Err(e) = other.join() {
        std::panic::resume_unwind(e);
    }
}

/// Runs operations on `ring` until the input ends (`false`) or asks for a new ring
/// (`true`).
fn epoch(ring: &Ring, input: &mut Input<'_>, st: &mut State) -> bool {
    let policy = ring.when_full();
    let mut exts: Vec<(ExtBuf<'_>, Vec<u8>)> = Vec::new();
    // Regions of this ring the model holds, for the stats check (`Fail`/`Grow` only:
    // their buffers are all in the ring's blocks).
    let mine = |st: &State, exts: &[(ExtBuf<'_>, Vec<u8>)], from: usize| {
        let mut ids: Vec<u64> = st.held[from..]
            .iter()
            .enumerate()
            .map(|(i, h)| h.range(UNIQUE | i as u64).0)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len() + exts.len()
    };
    // Buffers before this index belong to earlier rings. Buffers of this ring are
    // only ever appended after it, and removed from anywhere.
    let mut first_mine = st.held.len();
    while let Some(op) = input.byte() {
        match op % 20 {
            0 | 1 => {
                let n = input.size();
                match ring.fixed(n) {
                    Some(mut buf) => {
                        assert!(
                            n > 0 && buf.capacity() >= n,
                            "fixed({n}) gave {}",
                            buf.capacity()
                        );
                        let fill = input.byte_or0() as usize;
                        let model = st.bytes(fill.min(buf.capacity()));
                        buf.try_extend_from_slice(&model).unwrap();
                        st.held.push(Held::Fixed { buf, model });
                    }
                    None => assert!(
                        n == 0 || !must_fit(policy, n),
                        "fixed({n}) refused under {policy:?}"
                    ),
                }
            }
            2 => {
                let n = input.size();
                match ring.extendable(n) {
                    Some(e) => {
                        assert!(e.capacity() >= n);
                        exts.push((e, Vec::new()));
                    }
                    None => {
                        assert!(
                            !must_fit(policy, n),
                            "extendable({n}) refused under {policy:?}"
                        )
                    }
                }
            }
            3 => {
                let n = input.size() % 64;
                match ring.typed::<Aligned>(n) {
                    Some(mut buf) => {
                        assert!(buf.capacity() >= n);
                        let mut model = Vec::new();
                        for _ in 0..input.byte_or0() % 4 {
                            st.values += 1;
                            let v = Aligned::new(st.values, &st.alive);
                            match buf.push(v) {
                                Ok(()) => model.push(st.values),
                                Err(v) => {
                                    assert_eq!(buf.len(), buf.capacity());
                                    drop(v);
                                }
                            }
                        }
                        st.held.push(Held::Typed { buf, model });
                    }
                    None => assert!(n == 0 || !must_fit(policy, n * 64), "typed({n}) refused"),
                }
            }
            4 | 5 => {
                // Write into an extendable buffer (grows) or a fixed one (fits or not).
                let n = input.size() % 4096;
                let bytes = st.bytes(n);
                if let Some(i) = input.index(exts.len()).filter(|_| op == 4) {
                    let (e, model) = &mut exts[i];
                    match e.try_extend_from_slice(&bytes) {
                        Ok(()) => model.extend_from_slice(&bytes),
                        Err(err) => {
                            assert!(
                                !must_fit(policy, model.len() + n),
                                "ext grow refused: {err}"
                            );
                            assert_eq!(&e[..], &model[..], "a failed write changed nothing");
                        }
                    }
                } else if let Some(i) = input.index(st.held.len()) {
                    if let Held::Fixed { buf, model } = &mut st.held[i] {
                        let room = buf.capacity() - buf.len();
                        match buf.try_extend_from_slice(&bytes) {
                            Ok(()) => model.extend_from_slice(&bytes),
                            Err(err) => assert_eq!((err.requested, err.available), (n, room)),
                        }
                    }
                }
            }
            6 => {
                // Grow without writing.
                let n = input.size();
                if let Some(i) = input.index(exts.len()) {
                    let (e, model) = &mut exts[i];
                    match e.try_reserve(n) {
                        Ok(()) => assert!(e.capacity() - e.len() >= n),
                        Err(_) => assert!(!must_fit(policy, model.len().saturating_add(n))),
                    }
                }
            }
            7 => {
                // Finalize an extendable buffer into a `Send` fixed one.
                if let Some(i) = input.index(exts.len()) {
                    let (e, model) = exts.swap_remove(i);
                    let buf = e.finalize();
                    st.held.push(Held::Fixed { buf, model });
                }
            }
            8 => {
                if let Some(i) = input.index(st.held.len()) {
                    if matches!(st.held[i], Held::Fixed { .. }) {
                        let Held::Fixed { buf, model } = st.held.remove(i) else {
                            unreachable!()
                        };
                        st.next_region += 1;
                        let region = (st.next_region, buf.as_ptr() as usize, buf.capacity());
                        let h = Held::Frozen {
                            buf: buf.freeze(),
                            model,
                            region,
                        };
                        if i < first_mine {
                            // An old ring's buffer stays among the old ones.
                            st.held.insert(0, h);
                        } else {
                            st.held.push(h);
                        }
                    }
                }
            }
            9 => {
                // Clone, slice or split a frozen buffer.
                if let Some(i) = input.index(st.held.len()) {
                    if let Held::Frozen { buf, model, region } = &mut st.held[i] {
                        let region = *region;
                        let a = input.byte_or0() as usize % (model.len() + 1);
                        let b = a + input.byte_or0() as usize % (model.len() - a + 1);
                        let (nbuf, nmodel) = match input.byte_or0() % 3 {
                            0 => (buf.clone(), model.clone()),
                            1 => (buf.slice(a..b), model[a..b].to_vec()),
                            _ => {
                                let head = buf.split_to(a);
                                let rest = model.split_off(a);
                                (head, core::mem::replace(model, rest))
                            }
                        };
                        let h = Held::Frozen {
                            buf: nbuf,
                            model: nmodel,
                            region,
                        };
                        if i < first_mine {
                            // A handle to an old ring's region: keep it with the old ones.
                            st.held.insert(0, h);
                            first_mine += 1;
                        } else {
                            st.held.push(h);
                        }
                    }
                }
            }
            10 => {
                if let Some(i) = input.index(st.held.len()) {
                    match &mut st.held[i] {
                        Held::Fixed { buf, model } => {
                            let n = input.byte_or0() as usize;
                            if input.byte_or0() & 1 == 0 {
                                buf.truncate(n);
                                model.truncate(n);
                            } else {
                                buf.clear();
                                model.clear();
                            }
                        }
                        Held::Typed { buf, model } => {
                            let k = input.byte_or0() as usize;
                            match input.byte_or0() % 5 {
                                0 => assert_eq!(buf.pop().map(|a| a.value), model.pop()),
                                1 => {
                                    let j = k % (model.len() + 1);
                                    st.values += 1;
                                    let v = Aligned::new(st.values, &st.alive);
                                    match buf.insert(j, v) {
                                        Ok(()) => model.insert(j, st.values),
                                        Err(v) => {
                                            assert_eq!(model.len(), buf.capacity());
                                            drop(v);
                                        }
                                    }
                                }
                                2 if !model.is_empty() => {
                                    let j = k % model.len();
                                    assert_eq!(
                                        buf.remove(j).map(|a| a.value),
                                        Some(model.remove(j))
                                    );
                                }
                                3 if !model.is_empty() => {
                                    let j = k % model.len();
                                    let got = buf.swap_remove(j).map(|a| a.value);
                                    assert_eq!(got, Some(model.swap_remove(j)));
                                }
                                _ => {
                                    buf.truncate(k % 4);
                                    model.truncate(k % 4);
                                }
                            }
                        }
                        Held::Frozen { .. } => {}
                    }
                }
            }
            11 => {
                if let Some(i) = input.index(exts.len()) {
                    let (e, model) = &mut exts[i];
                    let n = input.byte_or0() as usize;
                    e.truncate(n);
                    model.truncate(n);
                }
            }
            12 | 13 => {
                // Drop a buffer here.
                if let Some(i) = input.index(st.held.len()) {
                    st.held.remove(i);
                    if i < first_mine {
                        first_mine -= 1;
                    }
                } else if let Some(i) = input.index(exts.len()) {
                    exts.swap_remove(i);
                }
            }
            14 | 15 => {
                // Send a buffer to the other thread, which checks and drops it.
                if let Some(i) = input.index(st.held.len()) {
                    let h = st.held.remove(i);
                    if i < first_mine {
                        first_mine -= 1;
                    }
                    st.to_other.send(Msg::Buf(h)).unwrap();
                }
            }
            16 => {
                // Sync point: the other thread has dropped everything it was sent.
                st.sync();
                let live = ring.stats().live_buffers;
                let held = mine(st, &exts, first_mine);
                match policy {
                    WhenFull::Heap => assert!(live <= held, "{live} live, model holds {held}"),
                    _ => assert_eq!(live, held, "stats disagree with the model"),
                }
            }
            17 => {
                // Drop the ring (extendable buffers end first: they borrow it), keep
                // going on a new one while this one's buffers live on.
                for (e, model) in exts.drain(..) {
                    st.held.push(Held::Fixed {
                        buf: e.finalize(),
                        model,
                    });
                }
                st.check(&[]);
                return true;
            }
            19 => {
                // The heap refuses: a request that needs it (a heap buffer, a new
                // block) is `None`, and one the ring can serve is unaffected.
                let n = input.size();
                let grow_by = input.size() % 4096;
                match input.byte_or0() % 3 {
                    0 => {
                        if let Some(buf) = refusing(|| ring.fixed(n)) {
                            assert!(buf.capacity() >= n);
                            st.held.push(Held::Fixed {
                                buf,
                                model: Vec::new(),
                            });
                        }
                    }
                    1 => {
                        if let Some(buf) = refusing(|| ring.typed::<Aligned>(n % 64 + 1)) {
                            st.held.push(Held::Typed {
                                buf,
                                model: Vec::new(),
                            });
                        }
                    }
                    _ => {
                        if let Some((e, model)) = exts.last_mut() {
                            let bytes = st.bytes(grow_by);
                            if refusing(|| e.try_extend_from_slice(&bytes)).is_ok() {
                                model.extend_from_slice(&bytes);
                            }
                        }
                    }
                }
            }
            _ => {
                // Refusals of bad input allocate nothing.
                let before = ring.stats();
                assert!(ring.fixed(0).is_none());
                assert!(ring.fixed(usize::MAX).is_none());
                assert!(ring.typed::<u64>(usize::MAX / 4).is_none());
                assert!(ring.extendable(usize::MAX).is_none());
                // (The other thread may release some meanwhile: never more live.)
                assert!(ring.stats().live_buffers <= before.live_buffers);
            }
        }
        st.check(&exts);
    }
    for (e, model) in exts.drain(..) {
        assert_eq!(&e[..], &model[..]);
    }
    false
}
