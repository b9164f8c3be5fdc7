//! The byte-buffer competitors shared by the ringal scenarios and the
//! many-threads scenario, and the one producer/consumer loop they all run.
//!
//! Every competitor implements [`ByteBufs`]: make a buffer of at least `size`
//! bytes and fill it through `std::io::Write` (fixed), or start from an empty
//! growable buffer and write 64-byte chunks (extendable), holding a partial buffer
//! while the ring is full or dropping it and starting over ([`Variant`]). The loop
//! in [`pipeline`] is the same code for all of them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::harness::{Cpu, Mi, Rng, Sample};

/// A source of byte buffers that are filled on one thread and dropped on another.
pub trait ByteBufs {
    /// What goes over the channel.
    type Buf: Send + 'static;
    /// Set up for a run whose ring (where there is one) holds `capacity` bytes.
    fn with_capacity(capacity: usize, size: usize) -> Self;
    /// A buffer of capacity >= `size` holding `data` (written through `io::Write`).
    fn fixed(&mut self, size: usize, data: &[u8], waits: &mut u64) -> Self::Buf;
    /// A buffer grown from empty by writing `data` in `chunk`-byte pieces; a piece that
    /// does not fit is retried, holding the partial buffer, until it does.
    fn chunked(
        &mut self,
        data: &[u8],
        chunk: usize,
        waits: &mut u64,
        restarts: &mut u64,
    ) -> Self::Buf;
    /// A buffer grown from empty by `write_all` of `data` in `chunk`-byte pieces; when a
    /// write fails, the partial buffer is dropped and the message starts over (counted
    /// in `restarts`). Buffers that never fail write as [`chunked`](ByteBufs::chunked).
    #[inline]
    fn restarting(
        &mut self,
        data: &[u8],
        chunk: usize,
        waits: &mut u64,
        restarts: &mut u64,
    ) -> Self::Buf {
        self.chunked(data, chunk, waits, restarts)
    }
}

/// Writes `data` into `w` in `chunk`-byte `write_all` calls; false at the first failure.
#[inline]
fn write_chunks(w: &mut impl Write, data: &[u8], chunk: usize) -> bool {
    data.chunks(chunk).all(|c| w.write_all(c).is_ok())
}

/// Waits for a full ring, the same way for every ring: a spin of 8 pauses (the consumer
/// is usually on the other core, about to release a batch; 64 pauses, about 3 µs on
/// this machine, made ringmem's 64 B row 1.9× slower), and a yield of the time slice
/// every 8th wait so a producer never starves a consumer that shares its core.
#[inline]
pub fn wait(waits: &mut u64) {
    *waits += 1;
    if *waits % 8 == 0 {
        thread::yield_now();
    } else {
        for _ in 0..8 {
            std::hint::spin_loop();
        }
    }
}

/// The note that says what the `bounded control` column is.
pub const BOUNDED_NOTE: &str = "`bounded control` is the control with the ring's bound and nothing else: capacity / size slots \
     (more than a ring with a header per buffer fits), each flagged while its buffer lives and cleared \
     when the consumer drops it; the producer waits (the hand-rolled spin) for the next slot. \
     What it takes beyond the control, any ring of that capacity pays.";

/// The note under a table whose cells show CPU time per message (`cpu`).
pub const CPU_NOTE: &str = "cpu: CPU time per message of the producer + the consumer threads in ns \
     (`CLOCK_THREAD_CPUTIME_ID`, medians of the runs, summed over a row's threads): what the run cost, \
     which other work on the machine moves less than the wall time. A thread asleep (a parked waiter, \
     a consumer on an empty channel) costs nothing; one that spins or yields does.";

/// The floor of a ring of this capacity: the control's slots (capacity / size of
/// them, more than a ring with headers fits), each with a flag its buffer clears
/// when the consumer drops it. Nothing is allocated per buffer, but the producer
/// waits, as a ring's does, when the next slot is still held. What it takes beyond
/// the control is what any ring of this capacity pays for being bounded.
pub struct Bounded {
    block: Vec<u8>,
    /// Leaked on drop while a buffer still points at its flag.
    held: Box<[AtomicBool]>,
    slot: usize,
    size: usize,
}

/// A [`Bounded`] buffer: its slot's flag, cleared when the consumer drops it.
pub struct BoundedBuf {
    flag: *const AtomicBool,
}

// SAFETY: the buffer only stores to an atomic flag, from whichever thread drops it.
unsafe impl Send for BoundedBuf {}

impl Drop for BoundedBuf {
    fn drop(&mut self) {
        // SAFETY: `Bounded::drop` frees the flags only when none is set, and this
        // buffer's flag stays set until this store, after which it is not touched.
        unsafe { (*self.flag).store(false, Ordering::Release) };
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        if self.held.iter().any(|f| f.load(Ordering::Acquire)) {
            // A buffer outlives its allocator: its flag must stay.
            Box::leak(core::mem::take(&mut self.held));
        }
    }
}

impl ByteBufs for Bounded {
    type Buf = BoundedBuf;
    fn with_capacity(capacity: usize, size: usize) -> Self {
        Bounded {
            block: vec![0; capacity],
            held: (0..capacity / size)
                .map(|_| AtomicBool::new(false))
                .collect(),
            slot: 0,
            size,
        }
    }
    #[inline]
    fn fixed(&mut self, _: usize, data: &[u8], waits: &mut u64) -> Self::Buf {
        let (flag, mut slot) = self.next_slot(waits);
        slot.write_all(data).unwrap();
        BoundedBuf { flag }
    }
    /// The chunks go into a whole slot, as the control writes them: with lengths
    /// below the size, a ring packs more messages than this has slots.
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64, _: &mut u64) -> Self::Buf {
        let (flag, mut slot) = self.next_slot(waits);
        for c in data.chunks(chunk) {
            slot.write_all(c).unwrap();
        }
        BoundedBuf { flag }
    }
}

impl Bounded {
    /// Waits until the next slot's buffer is dropped, then takes the slot: its flag,
    /// set, and its bytes.
    #[inline]
    fn next_slot(&mut self, waits: &mut u64) -> (*const AtomicBool, &mut [u8]) {
        let flag = &self.held[self.slot];
        while flag.load(Ordering::Acquire) {
            wait(waits);
        }
        flag.store(true, Ordering::Relaxed);
        let at = self.slot * self.size;
        self.slot = (self.slot + 1) % self.held.len();
        (flag, &mut self.block[at..at + self.size])
    }
}

/// `Vec<u8>` on the system allocator (glibc here).
pub struct SysVec;

impl ByteBufs for SysVec {
    type Buf = Vec<u8>;
    fn with_capacity(_: usize, _: usize) -> Self {
        SysVec
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], _: &mut u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(size);
        v.write_all(data).unwrap();
        v
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64, _: &mut u64) -> Vec<u8> {
        let mut v = Vec::new();
        for c in data.chunks(chunk) {
            v.write_all(c).unwrap();
        }
        v
    }
}

/// `Vec<u8, Mi>`: allocator-api2's `Vec` calling mimalloc directly.
pub struct MiVec;

impl ByteBufs for MiVec {
    type Buf = allocator_api2_02::vec::Vec<u8, Mi>;
    fn with_capacity(_: usize, _: usize) -> Self {
        MiVec
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], _: &mut u64) -> Self::Buf {
        let mut v = allocator_api2_02::vec::Vec::with_capacity_in(size, Mi);
        append(&mut v, data);
        v
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64, _: &mut u64) -> Self::Buf {
        let mut v = allocator_api2_02::vec::Vec::new_in(Mi);
        for c in data.chunks(chunk) {
            append(&mut v, c);
        }
        v
    }
}

/// Appends `data` to `v` in one copy, as `std`'s `Vec` writes. allocator-api2's
/// `extend_from_slice`, and so its `io::Write`, pushes byte by byte on stable Rust: the
/// column timed that loop rather than mimalloc (callgrind: about 6,850 instructions a
/// 1 KiB message, against 725 for a `std` `Vec` on mimalloc).
fn append(v: &mut allocator_api2_02::vec::Vec<u8, Mi>, data: &[u8]) {
    v.reserve(data.len());
    let len = v.len();
    // SAFETY: `reserve` left room for `data.len()` bytes past `len`; `data` is not the
    // vector's own buffer (`v` is borrowed mutably); the copy initialises those bytes
    // before `set_len` counts them.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), v.as_mut_ptr().add(len), data.len());
        v.set_len(len + data.len());
    }
}

/// `bytes::BytesMut` (system allocator), written through its `io::Write` adapter.
pub struct Bytes;

impl ByteBufs for Bytes {
    type Buf = bytes::BytesMut;
    fn with_capacity(_: usize, _: usize) -> Self {
        Bytes
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], _: &mut u64) -> Self::Buf {
        use bytes::BufMut;
        let mut w = bytes::BytesMut::with_capacity(size).writer();
        w.write_all(data).unwrap();
        w.into_inner()
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64, _: &mut u64) -> Self::Buf {
        use bytes::BufMut;
        let mut w = bytes::BytesMut::new().writer();
        for c in data.chunks(chunk) {
            w.write_all(c).unwrap();
        }
        w.into_inner()
    }
}

/// ringal's `RingAl`: `None` when the ring is full, then the producer waits.
pub struct Ringal(ringal::RingAl);

impl ByteBufs for Ringal {
    type Buf = ringal::FixedBufMut;
    fn with_capacity(capacity: usize, _: usize) -> Self {
        Ringal(ringal::RingAl::new(capacity))
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], waits: &mut u64) -> Self::Buf {
        let mut b = loop {
            match self.0.fixed(size) {
                Some(b) => break b,
                None => wait(waits),
            }
        };
        b.write_all(data).unwrap();
        b
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64, _: &mut u64) -> Self::Buf {
        let mut e = loop {
            match self.0.extendable(0) {
                Some(e) => break e,
                None => wait(waits),
            }
        };
        for c in data.chunks(chunk) {
            // A failed grow leaves the buffer as it was (except after a wrap, see
            // the notes): retry the same chunk once the consumer has freed space.
            while e.write_all(c).is_err() {
                wait(waits);
            }
        }
        e.finalize()
    }
    #[inline]
    fn restarting(
        &mut self,
        data: &[u8],
        chunk: usize,
        waits: &mut u64,
        restarts: &mut u64,
    ) -> Self::Buf {
        loop {
            let mut e = loop {
                match self.0.extendable(0) {
                    Some(e) => break e,
                    None => wait(waits),
                }
            };
            if write_chunks(&mut e, data, chunk) {
                return e.finalize();
            }
            drop(e);
            *restarts += 1;
            wait(waits);
        }
    }
}

/// The floor: slots of one preallocated block, nothing allocated per buffer.
/// A buffer is a slot index and a length; the consumer only drops it.
pub struct Control {
    block: Vec<u8>,
    slot: usize,
    slots: usize,
    size: usize,
}

impl ByteBufs for Control {
    type Buf = (u32, u32);
    fn with_capacity(capacity: usize, size: usize) -> Self {
        Control {
            block: vec![0; capacity],
            slot: 0,
            slots: capacity / size,
            size,
        }
    }
    #[inline]
    fn fixed(&mut self, _: usize, data: &[u8], _: &mut u64) -> Self::Buf {
        let at = self.slot * self.size;
        self.slot = (self.slot + 1) % self.slots;
        (&mut self.block[at..at + self.size])
            .write_all(data)
            .unwrap();
        (at as u32, data.len() as u32)
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64, _: &mut u64) -> Self::Buf {
        let at = self.slot * self.size;
        self.slot = (self.slot + 1) % self.slots;
        let mut w = &mut self.block[at..at + self.size];
        for c in data.chunks(chunk) {
            w.write_all(c).unwrap();
        }
        (at as u32, data.len() as u32)
    }
}

/// ringmem's `Ring` with `WhenFull::Fail`, so it waits exactly where ringal does.
#[cfg(feature = "ringmem-rows")]
pub struct Ringmem(ringmem::Ring);

#[cfg(feature = "ringmem-rows")]
impl ByteBufs for Ringmem {
    type Buf = ringmem::FixedBufMut;
    fn with_capacity(capacity: usize, _: usize) -> Self {
        let ring = ringmem::Ring::builder()
            .capacity(capacity)
            .when_full(ringmem::WhenFull::Fail)
            .build()
            .expect("ring");
        Ringmem(ring)
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], waits: &mut u64) -> Self::Buf {
        let mut b = loop {
            match self.0.fixed(size) {
                Some(b) => break b,
                None => wait(waits),
            }
        };
        b.write_all(data).unwrap();
        b
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64, _: &mut u64) -> Self::Buf {
        let mut e = loop {
            match self.0.extendable(0) {
                Some(e) => break e,
                None => wait(waits),
            }
        };
        for c in data.chunks(chunk) {
            // All or nothing (`write_all` may leave part of a chunk written when the
            // ring is full, and the retry would then write it twice).
            while e.try_extend_from_slice(c).is_err() {
                wait(waits);
            }
        }
        e.finalize()
    }
    #[inline]
    fn restarting(
        &mut self,
        data: &[u8],
        chunk: usize,
        waits: &mut u64,
        restarts: &mut u64,
    ) -> Self::Buf {
        loop {
            let mut e = loop {
                match self.0.extendable(0) {
                    Some(e) => break e,
                    None => wait(waits),
                }
            };
            if write_chunks(&mut e, data, chunk) {
                return e.finalize();
            }
            drop(e);
            *restarts += 1;
            wait(waits);
        }
    }
}

/// How long the `_timeout` forms of ringmem's waits may wait: far longer than any
/// release takes, so a wait that times out is a failure (a lost wake-up), not a load.
#[cfg(feature = "ringmem-rows")]
pub const WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a built-in wait gave back; a timeout or an error is a failure of the run.
#[cfg(feature = "ringmem-rows")]
fn waited<T>(r: Result<T, ringmem::WaitError>, what: &str) -> T {
    match r {
        Ok(t) => t,
        Err(ringmem::WaitError::TimedOut) => {
            panic!("{what} timed out after {WAIT_TIMEOUT:?}: a release did not wake it")
        }
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// ringmem's `Ring` (`WhenFull::Fail`) with its built-in wait: `fixed_wait` and
/// `extendable_wait` park the producer until the consumer's releases make room. With
/// `TIMED` the same loops call the `_timeout` forms ([`WAIT_TIMEOUT`]).
#[cfg(feature = "ringmem-rows")]
pub struct RingmemWaiting<const TIMED: bool>(ringmem::Ring);

/// [`RingmemWaiting`] with `fixed_wait`, `extendable_wait` and `reserve_wait`.
#[cfg(feature = "ringmem-rows")]
pub type RingmemWait = RingmemWaiting<false>;

/// [`RingmemWaiting`] with `fixed_wait_timeout`, `extendable_wait_timeout` and
/// `reserve_wait_timeout`.
#[cfg(feature = "ringmem-rows")]
pub type RingmemWaitTimeout = RingmemWaiting<true>;

#[cfg(feature = "ringmem-rows")]
impl<const TIMED: bool> RingmemWaiting<TIMED> {
    #[inline]
    fn fixed_wait(&self, n: usize) -> ringmem::FixedBufMut {
        let r = if TIMED {
            self.0.fixed_wait_timeout(n, WAIT_TIMEOUT)
        } else {
            self.0.fixed_wait(n)
        };
        waited(r, "fixed_wait")
    }

    #[inline]
    fn extendable_wait(&self, n: usize) -> ringmem::ExtBuf<'_> {
        let r = if TIMED {
            self.0.extendable_wait_timeout(n, WAIT_TIMEOUT)
        } else {
            self.0.extendable_wait(n)
        };
        waited(r, "extendable_wait")
    }

    #[inline]
    fn reserve_wait(e: &mut ringmem::ExtBuf<'_>, additional: usize) {
        let r = if TIMED {
            e.reserve_wait_timeout(additional, WAIT_TIMEOUT)
        } else {
            e.reserve_wait(additional)
        };
        waited(r, "reserve_wait");
    }
}

#[cfg(feature = "ringmem-rows")]
impl<const TIMED: bool> ByteBufs for RingmemWaiting<TIMED> {
    type Buf = ringmem::FixedBufMut;
    fn with_capacity(capacity: usize, size: usize) -> Self {
        RingmemWaiting(Ringmem::with_capacity(capacity, size).0)
    }
    #[inline]
    fn fixed(&mut self, size: usize, data: &[u8], _: &mut u64) -> Self::Buf {
        // A buffer of `size` fits a ring of 2 × max buffers × size.
        let mut b = self.fixed_wait(size);
        b.write_all(data).unwrap();
        b
    }
    /// Starts with `extendable_wait(0)`; a chunk that does not fit waits for room with
    /// `reserve_wait`, holding the partial buffer (as ringal's loop does with its spin).
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64, _: &mut u64) -> Self::Buf {
        let mut e = self.extendable_wait(0);
        for c in data.chunks(chunk) {
            // All or nothing, as in `Ringmem::chunked`.
            if e.try_extend_from_slice(c).is_err() {
                Self::reserve_wait(&mut e, c.len());
                e.try_extend_from_slice(c).expect("room was reserved");
            }
        }
        e.finalize()
    }
    /// Starts with `extendable_wait(0)`; after a failed write, drops the partial buffer
    /// and waits with `extendable_wait(data.len())` for room for the whole message.
    #[inline]
    fn restarting(
        &mut self,
        data: &[u8],
        chunk: usize,
        _: &mut u64,
        restarts: &mut u64,
    ) -> Self::Buf {
        let mut want = 0;
        loop {
            // A message fits a ring of 2 × max buffers × size.
            let mut e = self.extendable_wait(want);
            if write_chunks(&mut e, data, chunk) {
                return e.finalize();
            }
            drop(e);
            *restarts += 1;
            want = data.len();
        }
    }
}

/// Which loop the producer runs around the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// ringal's published loop: random lengths in `1..=size`; a full ring is waited
    /// out holding the partial buffer.
    Published,
    /// Every message at the full buffer size; waits as [`Variant::Published`].
    FullSize,
    /// Extendable only: the published lengths in 64-byte `write_all` calls; a failed
    /// write drops the partial buffer and starts the message over.
    Restart,
}

impl Variant {
    /// Its name on the `ringmem-bench-mimalloc` command line.
    pub fn arg(self) -> &'static str {
        match self {
            Variant::Published => "published",
            Variant::FullSize => "full",
            Variant::Restart => "restart",
        }
    }

    /// The variant named `arg` (see [`Variant::arg`]).
    #[allow(dead_code)] // read by the `ringmem-bench-mimalloc` child only
    pub fn from_arg(arg: &str) -> Option<Self> {
        [Variant::Published, Variant::FullSize, Variant::Restart]
            .into_iter()
            .find(|v| v.arg() == arg)
    }
}

/// Shape of one producer/consumer run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Buffers produced.
    pub iterations: usize,
    /// Upper bound of the random length written into each buffer.
    pub size: usize,
    /// The consumer drops what it holds each time it has this many.
    pub max_buffers: usize,
    /// Grow from empty in 64-byte chunks instead of a fixed capacity.
    pub extendable: bool,
    /// The producer's loop.
    pub variant: Variant,
    /// Ring capacity in units of max buffers × size (ringal's benchmark: 2).
    pub ring_factor: usize,
}

impl Shape {
    /// ringal's published loop and ring size.
    pub fn published(iterations: usize, size: usize, max_buffers: usize, extendable: bool) -> Self {
        Shape {
            iterations,
            size,
            max_buffers,
            extendable,
            variant: Variant::Published,
            ring_factor: 2,
        }
    }

    /// Bytes of the ring (or the control's block).
    pub fn capacity(&self) -> usize {
        self.ring_factor * self.max_buffers * self.size
    }
}

/// Chunk size of the extendable scenario (ringal's README).
pub const CHUNK: usize = 64;

/// The consumer: hold buffers, drop them in batches of `max_buffers`.
pub fn consume<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
    max_buffers: usize,
) -> thread::JoinHandle<Duration> {
    thread::spawn(move || {
        let mut held = Vec::with_capacity(max_buffers);
        for b in rx {
            held.push(b);
            if held.len() == max_buffers {
                held.clear();
            }
        }
        drop(held);
        thread_cpu()
    })
}

/// CPU time this thread has run (`CLOCK_THREAD_CPUTIME_ID`); zero where the clock
/// cannot be read.
pub fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid `timespec` for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// [`Cpu`] of `messages` messages from the producer's and consumer's CPU times.
fn per_message(producer: Duration, consumer: Duration, messages: usize) -> Cpu {
    let n = messages.max(1) as f64;
    Cpu {
        producer: producer.as_secs_f64() / n,
        consumer: consumer.as_secs_f64() / n,
    }
}

/// The producer loop: random lengths in `1..=size` (same seed for every competitor)
/// or the full size, as `shape.variant` says. Returns (waits, restarts).
pub fn produce<B: ByteBufs>(
    bufs: &mut B,
    shape: Shape,
    data: &[u8],
    seed: u64,
    tx: &mpsc::Sender<B::Buf>,
) -> (u64, u64) {
    let mut rng = Rng::new(seed);
    let (mut waits, mut restarts) = (0, 0);
    for _ in 0..shape.iterations {
        let len = match shape.variant {
            Variant::Published | Variant::Restart => rng.range(1, shape.size),
            Variant::FullSize => shape.size,
        };
        let data = &data[..len];
        let b = match (shape.extendable, shape.variant) {
            (true, Variant::Restart) => bufs.restarting(data, CHUNK, &mut waits, &mut restarts),
            (true, _) => bufs.chunked(data, CHUNK, &mut waits, &mut restarts),
            (false, _) => bufs.fixed(shape.size, data, &mut waits),
        };
        tx.send(b).unwrap();
    }
    (waits, restarts)
}

/// One run of ringal's scenario: set up (ring of `shape.capacity()`), produce,
/// consume on another thread over an unbounded `std::sync::mpsc` channel, join.
/// The clock stops before the allocator itself is dropped.
pub fn pipeline<B: ByteBufs>(shape: Shape, data: &[u8]) -> Sample {
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let mut bufs = B::with_capacity(shape.capacity(), shape.size);
    let (tx, rx) = mpsc::channel();
    let consumer = consume(rx, shape.max_buffers);
    let (waits, restarts) = produce(&mut bufs, shape, data, 0xC0FFEE, &tx);
    drop(tx);
    let producer = thread_cpu() - cpu0;
    let consumer = consumer.join().unwrap();
    let time = start.elapsed();
    drop(bufs);
    Sample {
        time,
        waits,
        restarts,
        cpu: Some(per_message(producer, consumer, shape.iterations)),
    }
}

/// `threads` producers, each with its own allocator and its own consumer thread.
/// The clock stops when the last producer's consumer has joined, before the
/// allocators are dropped (as in [`pipeline`]).
pub fn pipelines<B: ByteBufs>(threads: usize, shape: Shape, data: &[u8]) -> Sample {
    let start = Instant::now();
    let (end, (waits, restarts), (producer, consumer)) = thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let cpu0 = thread_cpu();
                    let mut bufs = B::with_capacity(shape.capacity(), shape.size);
                    let (tx, rx) = mpsc::channel();
                    let consumer = consume(rx, shape.max_buffers);
                    let w = produce(&mut bufs, shape, data, 0xC0FFEE + t as u64, &tx);
                    drop(tx);
                    let producer = thread_cpu() - cpu0;
                    let consumer = consumer.join().unwrap();
                    let end = Instant::now();
                    drop(bufs);
                    (end, w, (producer, consumer))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).fold(
            (start, (0, 0), (Duration::ZERO, Duration::ZERO)),
            |(e, (w, r), (p, c)), (e2, (w2, r2), (p2, c2))| {
                (e.max(e2), (w + w2, r + r2), (p + p2, c + c2))
            },
        )
    });
    Sample {
        time: end - start,
        waits,
        restarts,
        cpu: Some(per_message(producer, consumer, threads * shape.iterations)),
    }
}

/// The `ringmem-bench-mimalloc` executable: beside the running one, where cargo puts
/// every binary of this package.
fn mimalloc_child_exe() -> std::io::Result<PathBuf> {
    child_exe("ringmem-bench-mimalloc")
}

/// The executable of the workspace's binary `bin`: beside the running one, where cargo
/// puts every binary of the workspace built with the same profile.
pub fn child_exe(bin: &str) -> std::io::Result<PathBuf> {
    let name = format!("{bin}{}", std::env::consts::EXE_SUFFIX);
    Ok(std::env::current_exe()?.with_file_name(name))
}

/// Makes sure the `ringmem-bench-mimalloc` child is there for the `Vec (mimalloc global)`
/// columns, or says why those columns will be empty (see [`prepare_child`]).
pub fn prepare_mimalloc_child() -> Result<(), String> {
    prepare_child(
        "ringmem-bench-mimalloc",
        &[],
        "the `Vec (mimalloc global)` columns",
    )
}

/// Makes sure this package's binary `bin` (built with `features`) is there for `what`
/// (a child process measures it), or says why `what` will be empty: see
/// [`prepare_bin`].
pub fn prepare_child(bin: &str, features: &[&str], what: &str) -> Result<(), String> {
    prepare_bin("ringmem-bench", bin, features, what)
}

/// Makes sure the binary `bin` of the workspace's package `package` (built with
/// `features`) is there for `what`, beside this executable (a child process measures
/// it, or it is the server a child drives), or says why `what` will be empty.
///
/// `cargo run` builds only the binary it runs, so on a fresh clone the child is missing,
/// and after an edit to its sources it is stale (an edit to a file only the child reads
/// does not even make this binary newer than it). When cargo started this process
/// (`cargo run` sets `CARGO`), the child is therefore always built with that cargo, for
/// the profile, target and target directory this executable sits in: missing, with one
/// line saying so; otherwise quietly (cargo rebuilds it only if its sources changed).
/// Without `CARGO` a child that is there is used as it is.
///
/// `Err` holds the line for the report: why `what` stays empty.
pub fn prepare_bin(package: &str, bin: &str, features: &[&str], what: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let child = child_exe(bin).map_err(|e| format!("cannot locate this executable: {e}"))?;
    let by_hand = if features.is_empty() {
        format!("cargo build --release -p {package} --bin {bin}")
    } else {
        format!(
            "cargo build --release -p {package} --features {} --bin {bin}",
            features.join(",")
        )
    };
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before = modified(&child);
    let missing = before.is_none();
    let Some(cargo) = std::env::var_os("CARGO") else {
        if !missing {
            return Ok(());
        }
        return Err(format!(
            "{} is missing and no cargo started this process to build it: \
             run `{by_hand}` first, or start the bench with `cargo run`",
            child.display()
        ));
    };
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "-p", package, "--bin", bin]);
    if !features.is_empty() {
        build.arg("--features").arg(features.join(","));
    }
    build
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    build_layout_args(&exe, &mut build);
    // Cargo reports on stderr; its stdout would land in the report's tables.
    build.stdout(std::process::Stdio::null());
    if missing {
        eprintln!(
            "`cargo run` built only ringmem-bench: building {bin} for {what} ({})",
            child.display()
        );
    } else {
        build.arg("--quiet");
    }
    let status = build.status();
    match (status, modified(&child)) {
        (Ok(s), Some(after)) if s.success() => {
            if !missing && Some(after) != before {
                eprintln!("rebuilt {bin}: its sources had changed");
            }
            Ok(())
        }
        // A child that was there and could not be rebuilt still measures the code it has.
        (_, Some(_)) if !missing => {
            eprintln!("could not rebuild {bin}; {what} use the one built before");
            Ok(())
        }
        (Ok(s), None) if s.success() => {
            Err(format!("cargo built {bin}, but not at {}", child.display()))
        }
        (Ok(s), _) => Err(format!(
            "building {bin} failed ({s}; cargo's errors are above): build it with `{by_hand}`"
        )),
        (Err(e), _) => Err(format!(
            "cannot run cargo to build {bin} ({e}): build it with `{by_hand}`"
        )),
    }
}

/// The `--profile`, `--target-dir` and `--target` that put a binary beside `exe`:
/// `<target dir>[/<target triple>]/<profile dir>/ringmem-bench`, the target directory
/// being the one that holds cargo's `CACHEDIR.TAG`.
fn build_layout_args(exe: &Path, build: &mut std::process::Command) {
    let Some(dir) = exe.parent() else { return };
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(p) => p,
        None => return,
    };
    build.args(["--profile", profile]);
    let Some(mut target_dir) = dir.parent() else {
        return;
    };
    if !target_dir.join("CACHEDIR.TAG").exists() {
        if let (Some(up), Some(triple)) = (target_dir.parent(), target_dir.file_name()) {
            if up.join("CACHEDIR.TAG").exists() {
                build.arg("--target").arg(triple);
                target_dir = up;
            }
        }
    }
    build.arg("--target-dir").arg(target_dir);
}

/// One run in the `ringmem-bench-mimalloc` child (mimalloc as global allocator):
/// `threads == 0` runs [`pipeline`], otherwise [`pipelines`]. `None` when the
/// child binary is missing (see [`prepare_mimalloc_child`]) or fails.
pub fn mimalloc_child(threads: usize, shape: Shape) -> Option<Sample> {
    let out = std::process::Command::new(mimalloc_child_exe().ok()?)
        .args([
            threads.to_string(),
            shape.iterations.to_string(),
            shape.size.to_string(),
            shape.max_buffers.to_string(),
            if shape.extendable { "ext" } else { "fixed" }.to_string(),
            shape.variant.arg().to_string(),
            shape.ring_factor.to_string(),
        ])
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?;
    let mut f = line.split_whitespace();
    let secs: f64 = f.next()?.parse().ok()?;
    let waits: u64 = f.next()?.parse().ok()?;
    let restarts: u64 = f.next()?.parse().ok()?;
    let _rss = f.next();
    let mut num = || f.next()?.parse::<f64>().ok();
    let cpu = (|| {
        Some(Cpu {
            producer: num()?,
            consumer: num()?,
        })
    })();
    Some(Sample {
        time: Duration::from_secs_f64(secs),
        waits,
        restarts,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bounded_waits_until_a_slot_is_dropped() {
        let mut b = Bounded::with_capacity(4 * 64, 64);
        let mut waits = 0;
        let held: Vec<_> = (0..4).map(|_| b.fixed(64, b"x", &mut waits)).collect();
        assert_eq!(waits, 0);
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            drop(held);
        });
        let fifth = b.fixed(64, b"y", &mut waits);
        assert!(
            waits > 0,
            "the fifth buffer found a free slot among four held"
        );
        t.join().unwrap();
        let before = waits;
        let rest: Vec<_> = (0..3).map(|_| b.fixed(64, b"z", &mut waits)).collect();
        assert_eq!(waits, before, "slots freed by the consumer were not reused");
        drop((fifth, rest));
    }
}
