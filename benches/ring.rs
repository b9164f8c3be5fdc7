//! Criterion micro-benchmarks of the ring's hot paths, each run through one small trait
//! so the ring and the system allocator execute the same loop code.
//!
//! `cargo bench -p ringmem-micro --bench ring` (the peers are compared in `bench/`, the
//! only crate that depends on them).

use std::hint::black_box;
use std::io::Write;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ringmem::Ring;

/// A source of writable byte buffers.
trait Bytes {
    type Buf: Write + AsRef<[u8]> + Send + 'static;
    fn name(&self) -> &'static str;
    fn get(&self, n: usize) -> Self::Buf;
}

struct RingBytes(Ring);
impl Bytes for RingBytes {
    type Buf = ringmem::FixedBufMut;
    fn name(&self) -> &'static str {
        "ringmem"
    }
    #[inline]
    fn get(&self, n: usize) -> Self::Buf {
        self.0.fixed(n).expect("ring sized for the bench")
    }
}

struct VecBytes;
impl Bytes for VecBytes {
    type Buf = Vec<u8>;
    fn name(&self) -> &'static str {
        "Vec (system allocator)"
    }
    #[inline]
    fn get(&self, n: usize) -> Self::Buf {
        Vec::with_capacity(n)
    }
}

fn alloc_write_drop<B: Bytes>(c: &mut Criterion, src: &B) {
    let mut g = c.benchmark_group("alloc+write+drop");
    for size in [64usize, 1024] {
        let data = vec![7u8; size];
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{}/{size}", src.name()), |b| {
            b.iter(|| {
                let mut buf = src.get(size);
                buf.write_all(black_box(&data)).unwrap();
                black_box(buf.as_ref().len());
            })
        });
    }
    g.finish();
}

fn cross_thread_release<B: Bytes>(c: &mut Criterion, src: &B) {
    // Buffers allocated here, dropped by another thread in batches of 64.
    let mut g = c.benchmark_group("cross-thread release (batch of 64)");
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<B::Buf>>(4);
    let dropper = std::thread::spawn(move || {
        for batch in rx {
            drop(batch)
        }
    });
    g.throughput(Throughput::Elements(64));
    g.bench_function(src.name(), |b| {
        b.iter_batched(
            || (),
            |()| {
                let batch: Vec<_> = (0..64).map(|_| src.get(64)).collect();
                tx.send(batch).unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    drop(tx);
    dropper.join().unwrap();
    g.finish();
}

fn ring_only(c: &mut Criterion) {
    let ring = Ring::new(1 << 20);
    let mut g = c.benchmark_group("ring only");
    g.bench_function("freeze+clone+drop", |b| {
        b.iter(|| {
            let mut buf = ring.fixed(64).unwrap();
            buf.write_all(&[1; 64]).unwrap();
            let f = buf.freeze();
            let f2 = black_box(f.clone());
            drop(f);
            drop(f2);
        })
    });
    g.bench_function("extendable 0 -> 4 KiB in 64 B writes", |b| {
        b.iter(|| {
            let mut ext = ring.extendable(0).unwrap();
            for _ in 0..64 {
                ext.write_all(black_box(&[2; 64])).unwrap();
            }
            black_box(ext.finalize());
        })
    });
    // Issue 22: `write_all` through `io::Write` should cost what the fallible append
    // does, for the 1 KiB messages of ringal's extendable rows.
    g.bench_function("extendable 0 -> 1 KiB in 64 B write_all", |b| {
        b.iter(|| {
            let mut ext = ring.extendable(0).unwrap();
            for _ in 0..16 {
                ext.write_all(black_box(&[2; 64])).unwrap();
            }
            black_box(ext.finalize());
        })
    });
    g.bench_function("extendable 0 -> 1 KiB in 64 B try_extend_from_slice", |b| {
        b.iter(|| {
            let mut ext = ring.extendable(0).unwrap();
            for _ in 0..16 {
                ext.try_extend_from_slice(black_box(&[2; 64])).unwrap();
            }
            black_box(ext.finalize());
        })
    });
    g.bench_function("Vec 0 -> 4 KiB in 64 B writes", |b| {
        b.iter(|| {
            let mut v = Vec::new();
            for _ in 0..64 {
                v.write_all(black_box(&[2; 64])).unwrap();
            }
            black_box(v);
        })
    });
    g.finish();
}

/// Allocate and drop while a buffer of a dropped ring stays alive (an orphaned block
/// that cannot be freed yet), and while a producer waits on another ring that stays
/// full, against the same loop with neither: this ring's releases should not pay for
/// them.
fn beside_other_rings(c: &mut Criterion) {
    let ring = Ring::new(1 << 20);
    let mut g = c.benchmark_group("alloc+drop 64 B, beside other rings");
    let run = |g: &mut criterion::BenchmarkGroup<'_, _>, name: &str| {
        g.bench_function(name, |b| {
            b.iter(|| {
                let buf = ring.fixed(black_box(64)).unwrap();
                black_box(buf.capacity());
            })
        });
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<ringmem::FixedBufMut>>(4);
        let dropper = std::thread::spawn(move || rx.into_iter().for_each(drop));
        g.throughput(Throughput::Elements(64));
        g.bench_function(format!("{name}, released on another thread"), |b| {
            b.iter(|| {
                let batch: Vec<_> = (0..64).map(|_| ring.fixed(64).unwrap()).collect();
                tx.send(batch).unwrap();
            })
        });
        g.throughput(Throughput::Elements(1));
        drop(tx);
        dropper.join().unwrap();
    };
    run(&mut g, "none");
    let other = Ring::new(1 << 16);
    let pinned = other.fixed(64).unwrap();
    drop(other);
    run(&mut g, "one pinned");
    drop(pinned);
    // A ring full for the whole run, and a producer waiting on it (timing out every
    // 50 ms and waiting again).
    let full = Ring::new(4096);
    let held: Vec<_> = (0..).map_while(|_| full.fixed(248)).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiting = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let got = full.fixed_wait_timeout(248, std::time::Duration::from_millis(50));
                assert!(got.is_err(), "nothing is released into the full ring");
            }
        })
    };
    run(&mut g, "a producer waits on another ring");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    waiting.join().unwrap();
    drop(held);
    g.finish();
}

/// A waiting future on a full ring of 16,384 live buffers, polled by hand: its first
/// poll (a try, then a yield), against a poll of it once registered that no wake-up
/// caused (as a `select!` sibling's wake-up polls it).
fn spurious_poll(c: &mut Criterion) {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let mut g = c.benchmark_group("waiting future poll, 16,384 live buffers");
    let mut ring = Ring::new(16_384 * 16);
    let live: Vec<_> = std::iter::from_fn(|| ring.fixed(8)).collect();
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    g.bench_function("first poll", |b| {
        b.iter(|| {
            let mut wait = std::pin::pin!(ring.fixed_async(8));
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        })
    });
    let mut wait = std::pin::pin!(ring.fixed_async(8));
    // Past its yields: registered.
    for _ in 0..64 {
        assert!(wait.as_mut().poll(&mut cx).is_pending());
    }
    g.bench_function("registered, no wake-up", |b| {
        b.iter(|| assert!(wait.as_mut().poll(&mut cx).is_pending()))
    });
    g.finish();
    drop(live);
}

/// Tasks waiting on one full ring (64 or 1,024 `tls::fixed_async` futures, on a
/// hand-made executor of one thread: its thread-local ring), while another thread
/// releases each buffer handed out once its task waits again and every task woken has
/// been polled: the time per buffer handed out. A release makes room for one buffer; if it woke every waiter, each
/// would try the ring and register again.
fn many_waiters(c: &mut Criterion) {
    use std::future::Future;
    use std::sync::{mpsc, Arc, Mutex};
    use std::task::{Context, Poll, Wake, Waker};
    /// The executor's run queue: a task's waker pushes its index and unparks it.
    struct Ready {
        queue: Mutex<Vec<usize>>,
        executor: std::thread::Thread,
    }
    struct Task(usize, Arc<Ready>);
    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.1.queue.lock().unwrap().push(self.0);
            self.1.executor.unpark();
        }
    }
    const SIZE: usize = 248;
    /// Hands out `iters` buffers to `tasks` waiting tasks, on this thread's ring.
    fn run(tasks: usize, iters: u64) -> std::time::Duration {
        let ring = Ring::builder()
            .capacity(64 << 10)
            .when_full(ringmem::WhenFull::Fail);
        ringmem::tls::configure(ring).unwrap();
        let mut held: Vec<_> = std::iter::from_fn(|| ringmem::tls::fixed(SIZE)).collect();
        let ready = Arc::new(Ready {
            queue: Mutex::new((0..tasks).collect()),
            executor: std::thread::current(),
        });
        let wakers: Vec<Waker> = (0..tasks)
            .map(|i| Waker::from(Arc::new(Task(i, ready.clone()))))
            .collect();
        let mut waits: Vec<_> = (0..tasks)
            .map(|_| Box::pin(ringmem::tls::fixed_async(SIZE)))
            .collect();
        let (tx, rx) = mpsc::channel::<ringmem::FixedBufMut>();
        let dropper = std::thread::spawn(move || rx.iter().for_each(drop));
        // Every task polled until it sleeps registered (its first polls yield).
        let mut batch = Vec::new();
        loop {
            batch.append(&mut ready.queue.lock().unwrap());
            if batch.is_empty() {
                break;
            }
            for i in batch.drain(..) {
                let mut cx = Context::from_waker(&wakers[i]);
                assert!(waits[i].as_mut().poll(&mut cx).is_pending());
            }
        }
        let start = std::time::Instant::now();
        tx.send(held.pop().unwrap()).unwrap();
        let (mut served, mut outbox) = (0, Vec::new());
        while served < iters {
            batch.append(&mut ready.queue.lock().unwrap());
            if batch.is_empty() {
                std::thread::park();
                continue;
            }
            for i in batch.drain(..) {
                let mut cx = Context::from_waker(&wakers[i]);
                if let Poll::Ready(got) = waits[i].as_mut().poll(&mut cx) {
                    served += 1;
                    // The task waits again, registered before the buffer goes: every
                    // task waits when a release comes.
                    waits[i] = Box::pin(ringmem::tls::fixed_async(SIZE));
                    loop {
                        assert!(waits[i].as_mut().poll(&mut cx).is_pending());
                        let mut queue = ready.queue.lock().unwrap();
                        if queue.last() != Some(&i) {
                            break; // registered: its poll no longer wakes it
                        }
                        queue.pop();
                    }
                    outbox.push(got.unwrap());
                }
            }
            // The consumer releases after the executor has polled every task woken.
            outbox.drain(..).for_each(|got| tx.send(got).unwrap());
        }
        let took = start.elapsed();
        drop(waits);
        drop(tx);
        dropper.join().unwrap();
        took
    }
    let mut g = c.benchmark_group("tasks waiting on one full ring, per buffer handed out");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    for tasks in [64, 1024] {
        g.bench_function(format!("{tasks} tasks"), |b| {
            b.iter_custom(|iters| {
                std::thread::spawn(move || run(tasks, iters))
                    .join()
                    .unwrap()
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    many_waiters(c);
    spurious_poll(c);
    beside_other_rings(c);
    let ring = RingBytes(Ring::new(1 << 20));
    alloc_write_drop(c, &ring);
    alloc_write_drop(c, &VecBytes);
    cross_thread_release(c, &RingBytes(Ring::new(1 << 20)));
    cross_thread_release(c, &VecBytes);
    ring_only(c);
}

criterion_group!(ring_benches, benches);
criterion_main!(ring_benches);
