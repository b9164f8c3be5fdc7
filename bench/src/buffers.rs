//! The byte-buffer competitors shared by the ringal scenarios and the
//! many-threads scenario, and the one producer/consumer loop they all run.
//!
//! Every competitor implements [`ByteBufs`]: make a buffer of at least `size`
//! bytes and fill it through `std::io::Write` (fixed), or start from an empty
//! growable buffer and write 64-byte chunks (extendable). The loop in
//! [`pipeline`] is the same code for all of them.

use std::io::Write;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use crate::harness::{Mi, Rng, Sample};

/// A source of byte buffers that are filled on one thread and dropped on another.
pub trait ByteBufs {
    /// What goes over the channel.
    type Buf: Send + 'static;
    /// Set up for a run whose ring (where there is one) holds `capacity` bytes.
    fn with_capacity(capacity: usize, size: usize) -> Self;
    /// A buffer of capacity >= `size` holding `data` (written through `io::Write`).
    fn fixed(&mut self, size: usize, data: &[u8], waits: &mut u64) -> Self::Buf;
    /// A buffer grown from empty by writing `data` in `chunk`-byte pieces.
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64) -> Self::Buf;
}

/// Waits for a full ring, the same way for every ring: a spin of 8 pauses (the consumer
/// is usually on the other core, about to release a batch; 64 pauses, about 3 µs on
/// this machine, made ringmem's 64 B row 1.9× slower), and a yield of the time slice
/// every 8th wait so a producer never starves a consumer that shares its core.
#[inline]
pub fn wait(waits: &mut u64) {
    *waits += 1;
    if (*waits).is_multiple_of(8) {
        thread::yield_now();
    } else {
        for _ in 0..8 {
            std::hint::spin_loop();
        }
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
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64) -> Vec<u8> {
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
        v.write_all(data).unwrap();
        v
    }
    #[inline]
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64) -> Self::Buf {
        let mut v = allocator_api2_02::vec::Vec::new_in(Mi);
        for c in data.chunks(chunk) {
            v.write_all(c).unwrap();
        }
        v
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
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64) -> Self::Buf {
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
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64) -> Self::Buf {
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
    fn chunked(&mut self, data: &[u8], chunk: usize, _: &mut u64) -> Self::Buf {
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
    fn chunked(&mut self, data: &[u8], chunk: usize, waits: &mut u64) -> Self::Buf {
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
}

/// Chunk size of the extendable scenario (ringal's README).
pub const CHUNK: usize = 64;

/// The consumer: hold buffers, drop them in batches of `max_buffers`.
pub fn consume<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
    max_buffers: usize,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut held = Vec::with_capacity(max_buffers);
        for b in rx {
            held.push(b);
            if held.len() == max_buffers {
                held.clear();
            }
        }
    })
}

/// The producer loop: random lengths in `1..=size`, same seed for every competitor.
pub fn produce<B: ByteBufs>(
    bufs: &mut B,
    shape: Shape,
    data: &[u8],
    seed: u64,
    tx: &mpsc::Sender<B::Buf>,
) -> u64 {
    let mut rng = Rng::new(seed);
    let mut waits = 0;
    for _ in 0..shape.iterations {
        let len = rng.range(1, shape.size);
        let b = if shape.extendable {
            bufs.chunked(&data[..len], CHUNK, &mut waits)
        } else {
            bufs.fixed(shape.size, &data[..len], &mut waits)
        };
        tx.send(b).unwrap();
    }
    waits
}

/// One run of ringal's scenario: set up (ring of 2 × max_buffers × size), produce,
/// consume on another thread over an unbounded `std::sync::mpsc` channel, join.
/// The clock stops before the allocator itself is dropped.
pub fn pipeline<B: ByteBufs>(shape: Shape, data: &[u8]) -> Sample {
    let start = Instant::now();
    let mut bufs = B::with_capacity(2 * shape.max_buffers * shape.size, shape.size);
    let (tx, rx) = mpsc::channel();
    let consumer = consume(rx, shape.max_buffers);
    let waits = produce(&mut bufs, shape, data, 0xC0FFEE, &tx);
    drop(tx);
    consumer.join().unwrap();
    let time = start.elapsed();
    drop(bufs);
    Sample { time, waits }
}

/// `threads` producers, each with its own allocator and its own consumer thread.
/// The clock stops when the last producer's consumer has joined, before the
/// allocators are dropped (as in [`pipeline`]).
pub fn pipelines<B: ByteBufs>(threads: usize, shape: Shape, data: &[u8]) -> Sample {
    let start = Instant::now();
    let (end, waits) = thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut bufs = B::with_capacity(2 * shape.max_buffers * shape.size, shape.size);
                    let (tx, rx) = mpsc::channel();
                    let consumer = consume(rx, shape.max_buffers);
                    let w = produce(&mut bufs, shape, data, 0xC0FFEE + t as u64, &tx);
                    drop(tx);
                    consumer.join().unwrap();
                    let end = Instant::now();
                    drop(bufs);
                    (end, w)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold((start, 0), |(e, w), (e2, w2)| (e.max(e2), w + w2))
    });
    Sample {
        time: end - start,
        waits,
    }
}

/// One run in the `ringmem-bench-mimalloc` child (mimalloc as global allocator):
/// `threads == 0` runs [`pipeline`], otherwise [`pipelines`]. `None` when the
/// child binary is missing (it sits next to this one after `cargo build`) or fails.
pub fn mimalloc_child(threads: usize, shape: Shape) -> Option<Sample> {
    let exe = std::env::current_exe()
        .ok()?
        .with_file_name("ringmem-bench-mimalloc");
    let out = std::process::Command::new(exe)
        .args([
            threads.to_string(),
            shape.iterations.to_string(),
            shape.size.to_string(),
            shape.max_buffers.to_string(),
            if shape.extendable { "ext" } else { "fixed" }.to_string(),
        ])
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?;
    let mut f = line.split_whitespace();
    let secs: f64 = f.next()?.parse().ok()?;
    let waits: u64 = f.next()?.parse().ok()?;
    Some(Sample {
        time: std::time::Duration::from_secs_f64(secs),
        waits,
    })
}
