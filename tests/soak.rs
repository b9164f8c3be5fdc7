//! Soak test (issue 21): every part of the crate at once, on several threads, for a
//! configurable time, under a heap that refuses now and then.
//!
//! Producers each hold one ring of every [`WhenFull`] policy and make fixed, extendable
//! (grown through `std::io::Write`), frozen (cloned, sliced, split) and typed buffers,
//! `OneRingAlloc` vectors and values of two shared pools. Each carries a pattern of its
//! own, and goes over a channel to a consumer that checks it on arrival and again when
//! it drops it, after a random delay (a few are pinned for much longer). Now and then a
//! producer drops one of its rings while buffers of it are still in flight and makes a
//! new one. Each producer also grows, shrinks and drops allocator-api2 collections on a
//! `RingAlloc` of its own. Before some allocating calls the heap is told to refuse one
//! of the next few allocations: the call must then succeed or report the failure, and
//! nothing else (an abort, a lost byte, a leak) may happen.
//!
//! At the end no byte mismatched, nothing was lost on the way, every ring and pool is
//! empty, every typed value was dropped once, the counting allocator is back where it
//! started ([`faulty::no_leak`]) and the peak RSS stayed under a bound derived from the
//! capacities below ([`rss_bound`]).
//!
//! It is `#[ignore]`d, so `cargo test` skips it. It runs for `RINGMEM_SOAK_SECS`
//! seconds (default 20):
//!
//! ```text
//! # short (CI)
//! RINGMEM_SOAK_SECS=60 cargo test --release --test soak -- --ignored --nocapture
//! # long
//! RINGMEM_SOAK_SECS=3600 cargo test --release --test soak -- --ignored --nocapture
//! ```
//!
//! Under a sanitizer, build with `RINGMEM_SMALL=1` as `.ci/run` does (sizes shrink
//! through `common::scaled`, and the RSS bound is not checked), e.g.
//!
//! ```text
//! RUSTFLAGS=-Zsanitizer=address RINGMEM_SMALL=1 RINGMEM_SOAK_SECS=20 \
//!   CARGO_TARGET_DIR=target/asan cargo +nightly test --target x86_64-unknown-linux-gnu \
//!   --test soak -- --ignored --nocapture
//! ```

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use allocator_api2::boxed::Box as A2Box;
use allocator_api2::vec::Vec as A2Vec;
use common::faulty::{self, no_leak};
use common::{fill, holds, pattern, scaled};
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use ringmem::slab::{ArenaArc, ArenaBox, SharedArena};
use ringmem::{
    FixedBuf, FixedBufMut, OneRingAlloc, Ring, RingAlloc, RingStats, TypedBuf, WhenFull,
};

#[global_allocator]
static ALLOC: faulty::Faulty = faulty::Faulty;

// ---------------------------------------------------------------------------------------
// Sizes. The RSS bound is derived from these (see `rss_bound`).

const PRODUCERS: usize = 3;
const CONSUMERS: usize = 2;
/// The ring policies, in the order of a producer's `rings`.
const POLICIES: [WhenFull; 3] = [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow];
/// Block sizes a ring (or a `RingAlloc`) is made with, one picked at random each time.
const CAPACITIES: [usize; 3] = [64 << 10, 128 << 10, 256 << 10];
const MAX_CAPACITY: usize = CAPACITIES[CAPACITIES.len() - 1];
/// Messages a producer may have in flight (queued, or held by a consumer) before it
/// waits: this bounds the memory the soak holds, whatever the thread timing.
const IN_FLIGHT: usize = 48;
/// Messages and pool values a producer keeps itself, the longest-lived buffers.
const KEPT: usize = 6;
/// One message in this many is pinned: held by its consumer for `PINNED_MS`.
const PIN_ONE_IN: usize = 256;
const PINNED_MS: (usize, usize) = (50, 250);
/// Other messages are held for up to this long, so they are dropped out of order.
const HOLD_MAX_US: usize = 2000;
/// One allocating call in this many runs with a refusal planned.
const REFUSE_ONE_IN: usize = 6;
/// One producer step in this many replaces one of its rings.
const REPLACE_RING_ONE_IN: usize = 400;
/// Collections a producer's `RingAlloc` holds at most.
const MAX_VECS: usize = 12;
const MAX_BOXES: usize = 16;

// Lengths, which are loop counts (fill and check each byte or value): smaller under
// Miri and the sanitizers. The constants are the full sizes, used by `rss_bound`.
const MAX_LEN: usize = 8 << 10;
const MAX_TYPED: usize = 64;
const MAX_WORDS: usize = 2048;
const MAX_VEC: usize = 4096;

fn max_len() -> usize {
    scaled(MAX_LEN)
}
fn max_typed() -> usize {
    scaled(MAX_TYPED)
}
fn max_words() -> usize {
    scaled(MAX_WORDS)
}
fn max_vec() -> usize {
    scaled(MAX_VEC)
}

/// The run time: `RINGMEM_SOAK_SECS`, default 20.
fn soak_secs() -> u64 {
    match std::env::var("RINGMEM_SOAK_SECS") {
        Ok(s) => s
            .trim()
            .parse()
            .expect("RINGMEM_SOAK_SECS: a number of seconds"),
        Err(_) => 20,
    }
}

// ---------------------------------------------------------------------------------------
// Small tools: a PRNG, patterns, a value that counts itself, refusals.

/// xorshift64*: deterministic per thread, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n >= 1`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Whether `bytes` are `id`'s pattern from its `offset`th byte on (a slice of a buffer).
fn holds_at(id: u64, offset: usize, bytes: &[u8]) -> bool {
    pattern(id, offset + bytes.len())
        .skip(offset)
        .eq(bytes.iter().copied())
}

/// The `i`th word of collection `id`.
fn word(id: u64, i: usize) -> u64 {
    id.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ i as u64
}

/// Typed values alive, made, and found damaged (or dropped twice) when dropped.
static TRACKED_LIVE: AtomicIsize = AtomicIsize::new(0);
static TRACKED_MADE: AtomicU64 = AtomicU64::new(0);
static TRACKED_BAD: AtomicU64 = AtomicU64::new(0);

/// What a dropped `Tracked` leaves in its seal, so that a second drop of the same
/// memory is seen.
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// A value for typed buffers and pools that counts its instances and checks, when
/// dropped, that it is intact and dropped once. One in eight owns a heap allocation,
/// so a value that is never dropped also shows up as a leak, and one dropped twice as
/// a double free.
struct Tracked {
    id: u64,
    seal: u64,
    heap: Option<Box<u64>>,
}

fn seal_of(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EA1
}

impl Tracked {
    /// Allocates (infallibly) for one value in eight: call it outside refusal windows.
    fn new(id: u64) -> Tracked {
        TRACKED_MADE.fetch_add(1, Ordering::Relaxed);
        TRACKED_LIVE.fetch_add(1, Ordering::Relaxed);
        Tracked {
            id,
            seal: seal_of(id),
            heap: (id % 8 == 0).then(|| Box::new(!id)),
        }
    }

    fn is_intact(&self, id: u64) -> bool {
        self.id == id && self.seal == seal_of(id) && self.heap.iter().all(|h| **h == !id)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.is_intact(self.id) {
            TRACKED_BAD.fetch_add(1, Ordering::Relaxed);
        }
        self.seal = DEAD;
        TRACKED_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `call`, in one call out of [`REFUSE_ONE_IN`] with one of this thread's next
/// three heap allocations refused; returns its result and whether a refusal hit.
///
/// `call` must use fallible APIs only: an infallible allocation that is refused aborts
/// the process, as documented. Refusals are cancelled as soon as it returns, so the
/// caller's bookkeeping (std vectors, channels) never meets one.
fn under_refusal<R>(rng: &mut Rng, counts: &mut Counts, call: impl FnOnce() -> R) -> (R, bool) {
    let nth = if rng.one_in(REFUSE_ONE_IN) {
        rng.range(1, 3) as u64
    } else {
        0
    };
    let served = faulty::served();
    if nth > 0 {
        faulty::refuse_nth(nth, false);
    }
    let r = call();
    faulty::disarm_refusals();
    // `served` counts refused allocations too: the refusal hit if the call got that far.
    let hit = nth > 0 && faulty::served() >= served + nth;
    counts.refusals_hit += u64::from(hit);
    (r, hit)
}

// ---------------------------------------------------------------------------------------
// Counters, summed over threads.

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// Buffers, vectors, collections and pool values made.
    made: u64,
    /// Messages sent by producers, received by consumers.
    sent: u64,
    received: u64,
    /// Bytes (or values, as 8 bytes each) compared with what their producer wrote.
    bytes_checked: u64,
    /// Comparisons that failed: must stay 0.
    mismatches: u64,
    /// Planned refusals that hit an allocation.
    refusals_hit: u64,
    /// `None` from a full `Fail` ring: expected.
    nones_full: u64,
    /// `None`/`Err` after a refusal hit: expected.
    nones_refused: u64,
    /// `None`/`Err` with no refusal from a call that fails only when the heap refuses
    /// (a `Heap` or `Grow` ring, a collection, a pool): must stay 0.
    unexpected: u64,
    /// Rings made, and rings dropped while buffers of theirs were still live.
    rings_made: u64,
    rings_dropped_live: u64,
    /// `RingAlloc`s made after the first.
    ring_allocs_made: u64,
    /// Times a producer waited for consumers (too much in flight).
    throttled: u64,
    /// Requests the `Heap` rings served from the heap.
    heap_fallbacks: u64,
    /// The most blocks a `Grow` ring had when it was dropped.
    grow_blocks_max: usize,
}

impl Counts {
    fn add(mut self, o: Counts) -> Counts {
        self.made += o.made;
        self.sent += o.sent;
        self.received += o.received;
        self.bytes_checked += o.bytes_checked;
        self.mismatches += o.mismatches;
        self.refusals_hit += o.refusals_hit;
        self.nones_full += o.nones_full;
        self.nones_refused += o.nones_refused;
        self.unexpected += o.unexpected;
        self.rings_made += o.rings_made;
        self.rings_dropped_live += o.rings_dropped_live;
        self.ring_allocs_made += o.ring_allocs_made;
        self.throttled += o.throttled;
        self.heap_fallbacks += o.heap_fallbacks;
        self.grow_blocks_max = self.grow_blocks_max.max(o.grow_blocks_max);
        self
    }

    /// Counts a call that returned `None`/`Err`. `full_possible`: the call may fail for
    /// want of room (a `Fail` ring); otherwise only a refused heap explains it.
    fn failed(&mut self, refused: bool, full_possible: bool) {
        if refused {
            self.nones_refused += 1;
        } else if full_possible {
            self.nones_full += 1;
        } else {
            self.unexpected += 1;
        }
    }

    /// Notes the stats of a ring about to be dropped.
    fn note(&mut self, s: &RingStats) {
        self.rings_dropped_live += u64::from(s.live_buffers > 0);
        self.heap_fallbacks += s.heap_fallbacks;
        self.grow_blocks_max = self.grow_blocks_max.max(s.blocks);
    }

    fn checked(&mut self, (ok, bytes): (bool, usize)) {
        self.bytes_checked += bytes as u64;
        self.mismatches += u64::from(!ok);
    }
}

// ---------------------------------------------------------------------------------------
// What travels from producers to consumers.

/// A vector on the producer's thread-local ring, freed by a consumer.
type OneRingVec = A2Vec<u32, OneRingAlloc>;

enum Payload {
    /// A fixed or extendable buffer holding `id`'s pattern.
    Bytes {
        id: u64,
        buf: FixedBufMut,
    },
    /// A handle to part of a frozen buffer: `id`'s pattern from byte `offset` on.
    Frozen {
        id: u64,
        offset: usize,
        buf: FixedBuf,
    },
    /// Values `first`, `first + 1`, ...
    Typed {
        first: u64,
        buf: TypedBuf<Tracked>,
    },
    /// Words of `id`, on this producer's thread-local ring.
    Words {
        id: u64,
        v: OneRingVec,
    },
    Pooled {
        id: u64,
        b: ArenaBox<Tracked>,
    },
    Shared {
        id: u64,
        a: ArenaArc<Tracked>,
    },
}

impl Payload {
    /// Whether the payload still holds what its producer put in, and its size.
    fn check(&self) -> (bool, usize) {
        match self {
            Payload::Bytes { id, buf } => (holds(*id, buf), buf.len()),
            Payload::Frozen { id, offset, buf } => (holds_at(*id, *offset, buf), buf.len()),
            Payload::Typed { first, buf } => {
                let ok = (*first..).zip(buf.iter()).all(|(id, t)| t.is_intact(id));
                (ok, buf.len() * 8)
            }
            Payload::Words { id, v } => {
                let ok = v.iter().enumerate().all(|(i, &w)| w == word(*id, i) as u32);
                (ok, v.len() * 4)
            }
            Payload::Pooled { id, b } => (b.is_intact(*id), 8),
            Payload::Shared { id, a } => (a.is_intact(*id), 8),
        }
    }
}

/// One message in flight: its producer counts it until it is dropped.
struct Msg {
    payload: Payload,
    hold: Duration,
    /// Last, so it is dropped after the payload.
    _ticket: Ticket,
}

/// Counts a producer's messages in flight; dropped after the payload it travels with.
struct Ticket(Arc<AtomicUsize>);

impl Ticket {
    fn new(in_flight: &Arc<AtomicUsize>) -> Ticket {
        in_flight.fetch_add(1, Ordering::Relaxed);
        Ticket(Arc::clone(in_flight))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Release: the payload's drop (just before) happens before the producer's
        // Acquire load that reads the count as 0 and then looks at its rings' stats.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

enum Control {
    Msg(Msg),
    /// Give back the bytes this thread holds back for `OneRingAlloc` chunks, then ack.
    Flush(Sender<()>),
}

// ---------------------------------------------------------------------------------------
// Consumers.

/// Checks each message on arrival, holds it for its delay, checks it again and drops
/// it; returns when every producer has hung up.
fn consume(rx: Receiver<Control>) -> Counts {
    let mut counts = Counts::default();
    let mut held: Vec<(Instant, Msg)> = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_micros(200)) {
            Ok(Control::Msg(msg)) => {
                counts.received += 1;
                counts.checked(msg.payload.check());
                held.push((Instant::now() + msg.hold, msg));
            }
            Ok(Control::Flush(ack)) => {
                OneRingAlloc.flush();
                ack.send(()).expect("the producer waits for the ack");
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        release_due(&mut held, Instant::now(), &mut counts);
    }
    for (_, msg) in held.drain(..) {
        counts.checked(msg.payload.check());
    }
    counts
}

/// Drops the held messages due by `now`, each checked once more first: a region reused
/// while still live shows up here, as someone else's bytes.
fn release_due(held: &mut Vec<(Instant, Msg)>, now: Instant, counts: &mut Counts) {
    let mut i = 0;
    while i < held.len() {
        if held[i].0 <= now {
            let (_, msg) = held.swap_remove(i);
            counts.checked(msg.payload.check());
        } else {
            i += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Producers.

/// Collections on a producer's `RingAlloc`, which never leave its thread.
type RingVec = A2Vec<u64, RingAlloc>;
type RingBox = A2Box<[u64; 8], RingAlloc>;

/// The two pools all producers share: one made with a capacity (a seed page), one not.
struct Pools([SharedArena<Tracked>; 2]);

impl Pools {
    fn new() -> Pools {
        Pools([SharedArena::with_capacity(256), SharedArena::new()])
    }

    /// Slots in use over both pools.
    fn used(&self) -> usize {
        self.0.iter().map(|p| p.stats().used).sum()
    }
}

fn pick_capacity(rng: &mut Rng) -> usize {
    CAPACITIES[rng.below(CAPACITIES.len())]
}

/// A ring for byte and typed buffers. Its capacity shrinks with the buffers' lengths
/// (`scaled`), so that the rings still fill up and the `WhenFull` policies still apply
/// under Miri and the sanitizers.
fn make_ring(policy: WhenFull, capacity: usize) -> Result<Ring, ringmem::RingError> {
    Ring::builder()
        .capacity(scaled(capacity))
        .when_full(policy)
        .build()
}

struct Producer {
    rng: Rng,
    counts: Counts,
    /// Ids of this producer's payloads: the producer's number in the top bits.
    next_id: u64,
    /// One ring per policy, in the order of [`POLICIES`].
    rings: [Ring; 3],
    collections: Collections,
    pools: Arc<Pools>,
    to: Vec<Sender<Control>>,
    in_flight: Arc<AtomicUsize>,
    kept: Vec<Payload>,
    /// A pattern is written here and copied into a buffer (or written in pieces).
    scratch: Vec<u8>,
}

impl Producer {
    fn new(p: usize, to: Vec<Sender<Control>>, pools: Arc<Pools>) -> Producer {
        let mut rng = Rng::new(0x50A6 + p as u64);
        let rings = POLICIES.map(|policy| make_ring(policy, pick_capacity(&mut rng)).unwrap());
        let alloc = RingAlloc::try_with_capacity(pick_capacity(&mut rng)).unwrap();
        Producer {
            rng,
            counts: Counts {
                rings_made: 3,
                ..Counts::default()
            },
            next_id: (p as u64 + 1) << 48,
            rings,
            collections: Collections::new(alloc),
            pools,
            to,
            in_flight: Arc::new(AtomicUsize::new(0)),
            kept: Vec::with_capacity(KEPT + 1),
            scratch: vec![0; MAX_LEN],
        }
    }

    fn run(mut self, deadline: Instant) -> Counts {
        while Instant::now() < deadline {
            if self.in_flight.load(Ordering::Relaxed) >= IN_FLIGHT {
                // Too much in flight: give something back and let consumers catch up.
                self.counts.throttled += 1;
                self.drop_kept();
                thread::sleep(Duration::from_micros(100));
                continue;
            }
            self.step();
        }
        self.finish()
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=21 => self.send_fixed(),
            22..=39 => self.send_extendable(),
            40..=54 => self.send_frozen(),
            55..=64 => self.send_typed(),
            65..=72 => self.send_words(),
            73..=82 => self.pool_value(),
            _ => self.collections.step(&mut self.rng, &mut self.counts),
        }
        if self.rng.one_in(REPLACE_RING_ONE_IN) {
            self.replace_ring();
        }
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A fixed buffer from a random ring, filled with a new id's pattern.
    fn make_fixed(&mut self) -> Option<(u64, FixedBufMut)> {
        let (r, len, id) = (
            self.rng.below(3),
            self.rng.range(1, max_len()),
            self.new_id(),
        );
        let ring = &self.rings[r];
        let (buf, refused) = under_refusal(&mut self.rng, &mut self.counts, || ring.fixed(len));
        let Some(mut buf) = buf else {
            self.failed(refused, POLICIES[r] == WhenFull::Fail);
            return None;
        };
        self.counts.made += 1;
        assert!(
            buf.capacity() >= len,
            "fixed({len}) gave {}",
            buf.capacity()
        );
        // Half written in place, half copied in through `io::Write`.
        if self.rng.one_in(2) {
            buf.try_extend_from_slice(&self.scratch[..len]).unwrap();
            fill(id, &mut buf);
        } else {
            fill(id, &mut self.scratch[..len]);
            buf.write_all(&self.scratch[..len]).unwrap();
        }
        Some((id, buf))
    }

    /// An extendable buffer from a random ring, grown through `io::Write` in pieces of
    /// random size; sometimes another buffer is taken from the same ring meanwhile, so
    /// the growing one must move. A refused or full ring leaves a shorter buffer.
    fn make_extendable(&mut self) -> Option<(u64, FixedBufMut)> {
        let (r, len, id) = (
            self.rng.below(3),
            self.rng.range(1, max_len()),
            self.new_id(),
        );
        let full_possible = POLICIES[r] == WhenFull::Fail;
        let start = self.rng.below(64);
        fill(id, &mut self.scratch[..len]);
        let (ring, scratch, rng, counts, kept) = (
            &self.rings[r],
            &self.scratch,
            &mut self.rng,
            &mut self.counts,
            &mut self.kept,
        );
        let mut ext = match under_refusal(rng, counts, || ring.extendable(start)) {
            (Some(ext), _) => ext,
            (None, refused) => {
                give_way(kept, rng, counts, refused, full_possible);
                return None;
            }
        };
        counts.made += 1;
        let mut interloper = None;
        let mut written = 0;
        while written < len {
            let n = rng.range(1, 512).min(len - written);
            let piece = &scratch[written..written + n];
            let (res, refused) = under_refusal(rng, counts, || ext.write_all(piece));
            if let Err(e) = res {
                let kind = if full_possible {
                    std::io::ErrorKind::StorageFull
                } else {
                    std::io::ErrorKind::OutOfMemory
                };
                assert_eq!(e.kind(), kind, "{e}");
                counts.failed(refused, full_possible);
                break;
            }
            written += n;
            if interloper.is_none() && rng.one_in(8) {
                interloper = ring.fixed(rng.range(1, 256));
                match interloper {
                    Some(_) => counts.made += 1,
                    None => counts.failed(false, full_possible),
                }
            }
        }
        // What was written before a failure stays: a prefix of the pattern.
        counts.checked((holds(id, &ext), ext.len()));
        let buf = ext.finalize();
        if let Some(mut other) = interloper {
            let other_id = id | 1 << 47;
            fill(other_id, &mut self.scratch[..other.capacity()]);
            other
                .try_extend_from_slice(&self.scratch[..other.capacity()])
                .unwrap();
            self.send(Payload::Bytes {
                id: other_id,
                buf: other,
            });
        }
        Some((id, buf))
    }

    fn send_fixed(&mut self) {
        if let Some((id, buf)) = self.make_fixed() {
            self.send(Payload::Bytes { id, buf });
        }
    }

    fn send_extendable(&mut self) {
        if let Some((id, buf)) = self.make_extendable() {
            self.send(Payload::Bytes { id, buf });
        }
    }

    /// Freezes a buffer and sends clones, slices and split-off heads of it to random
    /// consumers; sometimes keeps the rest.
    fn send_frozen(&mut self) {
        let made = if self.rng.one_in(2) {
            self.make_fixed()
        } else {
            self.make_extendable()
        };
        let Some((id, buf)) = made else { return };
        let mut rest = buf.freeze();
        let mut offset = 0;
        if rest.len() > 1 && self.rng.one_in(3) {
            let at = self.rng.below(rest.len());
            let head = rest.split_to(at);
            self.send(Payload::Frozen {
                id,
                offset: 0,
                buf: head,
            });
            offset = at;
        }
        for _ in 0..self.rng.range(1, 3) {
            let len = rest.len();
            let (a, b) = (self.rng.below(len + 1), self.rng.below(len + 1));
            let (a, b) = (a.min(b), a.max(b));
            let part = if self.rng.one_in(3) {
                (0, rest.clone())
            } else {
                (a, rest.slice(a..b))
            };
            self.send(Payload::Frozen {
                id,
                offset: offset + part.0,
                buf: part.1,
            });
        }
        if self.rng.one_in(4) {
            self.keep(Payload::Frozen {
                id,
                offset,
                buf: rest,
            });
        }
    }

    /// A typed buffer of new values; some are dropped (truncated, popped) before it
    /// goes, so the values' drops happen on both threads.
    fn send_typed(&mut self) {
        let (r, n) = (self.rng.below(3), self.rng.range(1, max_typed()));
        let first = self.next_id + 1;
        self.next_id += n as u64;
        let ring = &self.rings[r];
        let (buf, refused) =
            under_refusal(&mut self.rng, &mut self.counts, || ring.typed::<Tracked>(n));
        let Some(mut buf) = buf else {
            self.failed(refused, POLICIES[r] == WhenFull::Fail);
            return;
        };
        self.counts.made += 1;
        for id in first..first + n as u64 {
            assert!(buf.push(Tracked::new(id)).is_ok(), "typed({n}) holds {n}");
        }
        if self.rng.one_in(4) {
            buf.truncate(self.rng.below(n + 1));
        }
        if self.rng.one_in(4) {
            drop(buf.pop());
        }
        self.send(Payload::Typed { first, buf });
    }

    /// A `OneRingAlloc` vector, grown in a few steps (in place while it is the latest
    /// allocation of this thread's ring), sent to be freed on another thread.
    fn send_words(&mut self) {
        let (id, len) = (self.new_id(), self.rng.range(1, max_words()));
        let mut v: OneRingVec = A2Vec::new_in(OneRingAlloc);
        while v.len() < len {
            let step = self.rng.range(1, len - v.len());
            let (res, refused) =
                under_refusal(&mut self.rng, &mut self.counts, || v.try_reserve(step));
            if res.is_err() {
                self.failed(refused, false);
                break;
            }
            // Reserved: these pushes do not allocate.
            for _ in 0..step {
                v.push(word(id, v.len()) as u32);
            }
        }
        if !v.is_empty() {
            self.counts.made += 1;
            self.send(Payload::Words { id, v });
        }
    }

    /// A value in a random pool, boxed or shared, through the fallible calls (under
    /// refusals) or `alloc_arc`; sent, and sometimes kept.
    fn pool_value(&mut self) {
        let (id, which) = (self.new_id(), self.rng.below(2));
        let pool = &self.pools.0[which];
        let value = Tracked::new(id);
        let payload = match self.rng.below(3) {
            0 => match under_refusal(&mut self.rng, &mut self.counts, || pool.try_alloc(value)) {
                (Ok(b), _) => Payload::Pooled { id, b },
                (Err(_), refused) => return self.failed(refused, false),
            },
            1 => match under_refusal(&mut self.rng, &mut self.counts, || {
                pool.try_alloc_arc(value)
            }) {
                (Ok(a), _) => Payload::Shared { id, a },
                (Err(_), refused) => return self.failed(refused, false),
            },
            // Infallible, so outside any refusal window.
            _ => Payload::Shared {
                id,
                a: pool.alloc_arc(value),
            },
        };
        self.counts.made += 1;
        if let Payload::Shared { a, .. } = &payload {
            if self.rng.one_in(3) {
                let a = a.clone();
                self.keep(Payload::Shared { id, a });
            }
        }
        if self.rng.one_in(4) {
            self.keep(payload);
        } else {
            self.send(payload);
        }
        if self.rng.one_in(256) {
            self.pools.0[which].shrink_to_fit();
        }
    }

    /// Replaces a random ring with a new one of the same policy; the old one is dropped
    /// at once, usually with buffers of it still in flight.
    fn replace_ring(&mut self) {
        let (r, capacity) = (self.rng.below(3), pick_capacity(&mut self.rng));
        let (ring, refused) = under_refusal(&mut self.rng, &mut self.counts, || {
            make_ring(POLICIES[r], capacity)
        });
        match ring {
            Ok(ring) => {
                self.counts.rings_made += 1;
                let old = std::mem::replace(&mut self.rings[r], ring);
                self.counts.note(&old.stats());
                drop(old); // usually with buffers of it still in flight
            }
            Err(_) => self.failed(refused, false),
        }
    }

    fn failed(&mut self, refused: bool, full_possible: bool) {
        give_way(
            &mut self.kept,
            &mut self.rng,
            &mut self.counts,
            refused,
            full_possible,
        );
    }

    fn send(&mut self, payload: Payload) {
        let hold = if self.rng.one_in(PIN_ONE_IN) {
            Duration::from_millis(self.rng.range(PINNED_MS.0, PINNED_MS.1) as u64)
        } else {
            Duration::from_micros(self.rng.below(HOLD_MAX_US) as u64)
        };
        let msg = Msg {
            payload,
            hold,
            _ticket: Ticket::new(&self.in_flight),
        };
        let to = &self.to[self.rng.below(CONSUMERS)];
        to.send(Control::Msg(msg))
            .expect("consumers outlive producers");
        self.counts.sent += 1;
    }

    /// Keeps a payload on this thread; beyond [`KEPT`], drops one at random.
    fn keep(&mut self, payload: Payload) {
        self.kept.push(payload);
        if self.kept.len() > KEPT {
            self.drop_kept();
        }
    }

    fn drop_kept(&mut self) {
        drop_one(&mut self.kept, &mut self.rng, &mut self.counts);
    }

    /// Drops what this thread holds, waits for the consumers to drop the rest, and
    /// checks that every ring it holds is empty.
    fn finish(mut self) -> Counts {
        while !self.kept.is_empty() {
            self.drop_kept();
        }
        self.collections.finish(&mut self.counts);
        wait_until("consumers drop every buffer in flight", || {
            self.in_flight.load(Ordering::Acquire) == 0
        });
        for (ring, policy) in self.rings.iter().zip(POLICIES) {
            let s = ring.stats();
            assert_eq!(
                (s.live_buffers, s.bytes_in_use),
                (0, 0),
                "{policy:?} ring not empty once all its buffers are gone: {s:?}"
            );
            self.counts.note(&s);
        }
        // Consumers may hold back the freed bytes of one `OneRingAlloc` chunk each (of
        // this thread's ring) until they flush: ask them to, then release the current
        // chunk here too.
        let (ack_tx, ack_rx) = bounded(CONSUMERS);
        for to in &self.to {
            to.send(Control::Flush(ack_tx.clone())).unwrap();
        }
        for _ in 0..CONSUMERS {
            ack_rx.recv().unwrap();
        }
        OneRingAlloc.flush();
        let s = ringmem::tls::with_ring(|r| r.stats()).expect("this thread's ring");
        assert_eq!(
            (s.live_buffers, s.bytes_in_use),
            (0, 0),
            "thread-local ring not empty once every OneRingAlloc vector is gone: {s:?}"
        );
        self.counts
    }
}

/// Checks and drops a random one of the payloads a producer keeps.
fn drop_one(kept: &mut Vec<Payload>, rng: &mut Rng, counts: &mut Counts) {
    if !kept.is_empty() {
        let payload = kept.swap_remove(rng.below(kept.len()));
        counts.checked(payload.check());
    }
}

/// Counts a failed call; when the ring may just be full, gives a kept payload back and
/// lets the consumers run, rather than retrying at once.
fn give_way(
    kept: &mut Vec<Payload>,
    rng: &mut Rng,
    counts: &mut Counts,
    refused: bool,
    full_possible: bool,
) {
    counts.failed(refused, full_possible);
    if full_possible && !refused {
        drop_one(kept, rng, counts);
        thread::yield_now();
    }
}

/// Waits (sleeping, not spinning) until `done`, for at most a minute.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let limit = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < limit, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// allocator-api2 collections on one producer's `RingAlloc`: vectors grown (in place
/// or moved), shrunk and dropped, boxes made and dropped, and now and then all of it
/// dropped and the allocator replaced.
struct Collections {
    alloc: RingAlloc,
    next_id: u64,
    vecs: Vec<(u64, RingVec)>,
    boxes: Vec<(u64, RingBox)>,
}

impl Collections {
    fn new(alloc: RingAlloc) -> Collections {
        Collections {
            alloc,
            next_id: 0,
            vecs: Vec::with_capacity(MAX_VECS),
            boxes: Vec::with_capacity(MAX_BOXES),
        }
    }

    fn step(&mut self, rng: &mut Rng, counts: &mut Counts) {
        match rng.below(20) {
            0..=5 => self.grow(rng, counts),
            6..=7 => self.shrink(rng, counts),
            8..=9 => self.drop_vec(rng, counts),
            10..=17 => self.boxed(rng, counts),
            18 => self.check_all(counts),
            _ if rng.one_in(10) => self.renew(rng, counts),
            _ => {}
        }
    }

    /// Grows a vector (a new one while there is room for it) in steps of random size:
    /// small steps grow in place, big ones may move.
    fn grow(&mut self, rng: &mut Rng, counts: &mut Counts) {
        if self.vecs.len() < MAX_VECS && (self.vecs.is_empty() || rng.one_in(2)) {
            self.next_id += 1;
            self.vecs
                .push((self.next_id, A2Vec::new_in(self.alloc.clone())));
            counts.made += 1;
        }
        let i = rng.below(self.vecs.len());
        let (id, v) = &mut self.vecs[i];
        // Small vectors live in the shared chunks, larger ones are regions of their own.
        let limit = if *id % 2 == 0 { 32 } else { max_vec() };
        let target = (v.len() + rng.range(1, limit)).min(limit);
        while v.len() < target {
            let step = rng.range(1, target - v.len());
            let (res, refused) = under_refusal(rng, counts, || v.try_reserve(step));
            if res.is_err() {
                counts.failed(refused, false);
                break;
            }
            // Reserved: these pushes do not allocate.
            for _ in 0..step {
                v.push(word(*id, v.len()));
            }
        }
    }

    /// Truncates a vector and gives its spare capacity back.
    fn shrink(&mut self, rng: &mut Rng, counts: &mut Counts) {
        if self.vecs.is_empty() {
            return;
        }
        let i = rng.below(self.vecs.len());
        let (id, v) = &mut self.vecs[i];
        v.truncate(rng.below(v.len() + 1));
        // Outside a refusal window: `shrink_to_fit` aborts if the allocator fails.
        v.shrink_to_fit();
        counts.checked(check_vec(*id, v));
    }

    fn drop_vec(&mut self, rng: &mut Rng, counts: &mut Counts) {
        if !self.vecs.is_empty() {
            let (id, v) = self.vecs.swap_remove(rng.below(self.vecs.len()));
            counts.checked(check_vec(id, &v));
        }
    }

    /// A small box (in a chunk), in place of a random old one once there are enough.
    fn boxed(&mut self, rng: &mut Rng, counts: &mut Counts) {
        self.next_id += 1;
        let id = self.next_id;
        let value: [u64; 8] = std::array::from_fn(|i| word(id, i));
        let alloc = self.alloc.clone();
        let (res, refused) = under_refusal(rng, counts, || A2Box::try_new_in(value, alloc));
        match res {
            Ok(b) => {
                counts.made += 1;
                if self.boxes.len() == MAX_BOXES {
                    let (old_id, old) = self.boxes.swap_remove(rng.below(MAX_BOXES));
                    counts.checked(check_box(old_id, &old));
                }
                self.boxes.push((id, b));
            }
            Err(_) => counts.failed(refused, false),
        }
    }

    fn check_all(&self, counts: &mut Counts) {
        for (id, v) in &self.vecs {
            counts.checked(check_vec(*id, v));
        }
        for (id, b) in &self.boxes {
            counts.checked(check_box(*id, b));
        }
    }

    /// Drops every collection, checks the ring is empty, and replaces the allocator.
    fn renew(&mut self, rng: &mut Rng, counts: &mut Counts) {
        self.finish(counts);
        let capacity = pick_capacity(rng);
        let (res, refused) = under_refusal(rng, counts, || RingAlloc::try_with_capacity(capacity));
        match res {
            Ok(alloc) => {
                self.alloc = alloc;
                counts.ring_allocs_made += 1;
            }
            Err(_) => counts.failed(refused, false),
        }
    }

    /// Checks and drops every collection; the allocator's ring must then be empty.
    fn finish(&mut self, counts: &mut Counts) {
        self.check_all(counts);
        self.vecs.clear();
        self.boxes.clear();
        // The current chunk is kept when it empties, for the next small allocation.
        self.alloc.flush();
        let s = self.alloc.ring().stats();
        assert_eq!(
            (s.live_buffers, s.bytes_in_use),
            (0, 0),
            "RingAlloc's ring not empty once its collections are gone: {s:?}"
        );
    }
}

fn check_vec(id: u64, v: &RingVec) -> (bool, usize) {
    let ok = v.iter().enumerate().all(|(i, &w)| w == word(id, i));
    (ok, v.len() * 8)
}

fn check_box(id: u64, b: &RingBox) -> (bool, usize) {
    let ok = b.iter().enumerate().all(|(i, &w)| w == word(id, i));
    (ok, 64)
}

// ---------------------------------------------------------------------------------------
// The run and its checks.

/// What the run saw; plain numbers, so it outlives `no_leak`.
#[derive(Clone, Copy, Debug)]
struct Summary {
    elapsed: Duration,
    produced: Counts,
    consumed: Counts,
    pool_slots_used: usize,
    tracked_live: isize,
    tracked_made: u64,
    tracked_bad: u64,
    /// `faulty::live()` once every thread, ring and buffer is gone, before the extra
    /// sweep below.
    left_for_a_sweep: (isize, isize),
}

/// Starts the consumers and producers, lets them run for `time`, and collects what they
/// counted once each is done.
fn run(time: Duration) -> Summary {
    let start = Instant::now();
    let deadline = start + time;
    let pools = Arc::new(Pools::new());
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..CONSUMERS).map(|_| unbounded()).unzip();
    let consumers: Vec<_> = rxs
        .into_iter()
        .map(|rx| faulty::spawn(move || consume(rx)))
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (to, pools) = (txs.clone(), Arc::clone(&pools));
            faulty::spawn(move || Producer::new(p, to, pools).run(deadline))
        })
        .collect();
    drop(txs);
    let join = |h: thread::JoinHandle<Counts>| h.join().expect("a soak thread panicked");
    let produced = producers
        .into_iter()
        .map(join)
        .fold(Counts::default(), Counts::add);
    let consumed = consumers
        .into_iter()
        .map(join)
        .fold(Counts::default(), Counts::add);
    let pool_slots_used = pools.used();
    drop(pools);
    Summary {
        elapsed: start.elapsed(),
        produced,
        consumed,
        pool_slots_used,
        tracked_live: TRACKED_LIVE.load(Ordering::Relaxed),
        tracked_made: TRACKED_MADE.load(Ordering::Relaxed),
        tracked_bad: TRACKED_BAD.load(Ordering::Relaxed),
        left_for_a_sweep: (0, 0),
    }
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`), where there is one.
fn proc_status_bytes(field: &str) -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let kib = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: usize = kib.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kib << 10)
    })
}

/// The most the soak may add to the process's resident memory, from the sizes above.
///
/// At any moment a producer has at most `live` buffers alive (in flight, kept, being
/// built). Each is one region of one block, so:
/// - its `Fail` and `Heap` rings hold one block each, and `Heap` serves at most `live`
///   buffers from the heap;
/// - its `Grow` ring adds a block only when none of its blocks can serve a request,
///   which needs a live buffer in each (a block with none is all free), so it holds at
///   most `1 + live` blocks, kept until the ring is dropped;
/// - dropped rings' blocks live on only while a buffer of theirs does: at most `live`;
/// - its `RingAlloc` is another `Grow` ring, for at most `MAX_VECS + MAX_BOXES`
///   collections (plus a vector's old and new place while it moves);
/// - its thread-local ring (`OneRingAlloc`) is 1 MiB, and serves at most `live`
///   vectors from the heap when full.
///
/// Blocks are at most [`MAX_CAPACITY`] (no request is larger than a block). This worst
/// case is well above what the soak holds in practice, yet a short run passes it if
/// the blocks of the rings it drops (one per [`REPLACE_RING_ONE_IN`] steps of each
/// producer) leak, or are only freed at the end, which `no_leak` alone would not see.
/// The allowance covers the test's own memory: channels, the consumers' lists, thread
/// stacks, the system allocator's arenas.
fn rss_bound() -> usize {
    const ALLOWANCE: usize = 48 << 20;
    let live = IN_FLIGHT + KEPT + 2;
    let rings = MAX_CAPACITY * (2 + (1 + live) + live) + live * MAX_LEN;
    let ring_alloc = MAX_CAPACITY * (1 + MAX_VECS + MAX_BOXES + 1);
    let one_ring = RingAlloc::DEFAULT_CAPACITY + live * MAX_WORDS * 4;
    PRODUCERS * (rings + ring_alloc + one_ring) + ALLOWANCE
}

const MIB: f64 = (1 << 20) as f64;

#[test]
#[ignore = "a soak test of RINGMEM_SOAK_SECS seconds: run with --ignored (module docs)"]
fn soak() {
    let secs = soak_secs();
    let rss_start = proc_status_bytes("VmRSS");
    let s = no_leak("soak", || {
        let mut s = run(Duration::from_secs(secs));
        // A block of a dropped ring whose last release raced the ring's drop may stay
        // parked until the next ring activity (README, "Safety and correctness"): any
        // ring activity sweeps it. Counted, so a run says whether that happened.
        s.left_for_a_sweep = faulty::live();
        drop(Ring::new(64));
        s
    });
    let peak = proc_status_bytes("VmHWM");
    let (p, c) = (s.produced, s.consumed);
    println!(
        "soak: {:.1} s, {PRODUCERS} producers, {CONSUMERS} consumers",
        s.elapsed.as_secs_f64()
    );
    println!(
        "soak: made {} buffers, vectors and values ({} typed values), sent {} messages, \
         received {}",
        p.made, s.tracked_made, p.sent, c.received
    );
    println!(
        "soak: checked {:.1} MiB, mismatches {} (consumers) + {} (producers), damaged \
         values {}",
        (p.bytes_checked + c.bytes_checked) as f64 / MIB,
        c.mismatches,
        p.mismatches,
        s.tracked_bad
    );
    println!(
        "soak: heap refusals {} ({} planned refusals hit); None/Err: {} full Fail ring, \
         {} refused, {} unexpected",
        faulty::refused(),
        p.refusals_hit,
        p.nones_full,
        p.nones_refused,
        p.unexpected
    );
    println!(
        "soak: rings made {}, dropped with live buffers {}; Grow rings had up to {} blocks; \
         Heap rings fell back {} times; RingAllocs replaced {}; producer waits {}",
        p.rings_made,
        p.rings_dropped_live,
        p.grow_blocks_max,
        p.heap_fallbacks,
        p.ring_allocs_made,
        p.throttled
    );
    println!(
        "soak: left for a later sweep (bytes, blocks): {:?}",
        s.left_for_a_sweep
    );
    let bound = rss_start.map(|start| start + rss_bound());
    match (peak, rss_start, bound) {
        (Some(peak), Some(start), Some(bound)) => println!(
            "soak: peak RSS {:.1} MiB (at start {:.1} MiB, bound {:.1} MiB)",
            peak as f64 / MIB,
            start as f64 / MIB,
            bound as f64 / MIB
        ),
        _ => println!("soak: peak RSS not readable here"),
    }

    assert_eq!(p.mismatches + c.mismatches, 0, "buffers lost their bytes");
    assert_eq!(s.tracked_bad, 0, "typed values damaged or dropped twice");
    assert_eq!(s.tracked_live, 0, "typed values never dropped");
    assert_eq!(
        p.unexpected, 0,
        "calls failed with no refusal to explain it"
    );
    assert_eq!(p.sent, c.received, "messages lost on the way");
    assert_eq!(s.pool_slots_used, 0, "pool slots still in use at the end");
    // Sanitizers (built with RINGMEM_SMALL) keep freed memory in quarantine and add
    // shadow memory: RSS there says nothing about the crate.
    if option_env!("RINGMEM_SMALL").is_none() {
        if let (Some(peak), Some(bound)) = (peak, bound) {
            assert!(
                peak <= bound,
                "peak RSS {peak} bytes above the bound {bound}: memory kept or leaked"
            );
        }
    }
}
