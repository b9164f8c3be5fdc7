//! Waiting for room on a full ring: blocking and `async` forms, woken by releases on
//! other threads; requests that can never fit fail at once.

mod common;

use std::time::Duration;

use common::{fill, holds, scaled};
use ringmem::{Ring, WaitError, WhenFull};

/// Long enough never to be reached unless a wake-up is lost.
const GUARD: Duration = Duration::from_secs(20);

/// A ring exactly full of 120-byte buffers (regions of 128 bytes tile it).
fn full_ring() -> (Ring, Vec<ringmem::FixedBufMut>) {
    let ring = Ring::new(4096);
    let held: Vec<_> = (0..32).map(|_| ring.fixed(120).unwrap()).collect();
    assert!(ring.fixed(120).is_none());
    (ring, held)
}

#[test]
fn a_blocked_producer_wakes_on_a_release_elsewhere() {
    for which in [0, 16, 31] {
        let (ring, mut held) = full_ring();
        // Fail a few times first, so the ring's "look at the oldest only" shortcut is on.
        for _ in 0..3 {
            assert!(ring.fixed(120).is_none());
        }
        let one = held.remove(which);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(one);
        });
        let buf = ring
            .fixed_wait_timeout(120, GUARD)
            .expect("woken by the release");
        assert_eq!(buf.capacity(), 120);
        releaser.join().unwrap();
    }
}

#[test]
fn requests_no_release_can_serve_fail_at_once() {
    let (ring, _held) = full_ring();
    assert_eq!(
        ring.fixed_wait(4096).unwrap_err(),
        WaitError::NeverFits {
            requested: 4096,
            block: 4096
        }
    );
    assert!(matches!(
        ring.fixed_wait(0),
        Err(WaitError::NeverFits { .. })
    ));
    assert!(matches!(
        ring.typed_wait::<u64>(usize::MAX / 4),
        Err(WaitError::NeverFits { .. })
    ));
    assert_eq!(
        ring.fixed_wait_timeout(8, Duration::from_millis(10))
            .unwrap_err(),
        WaitError::TimedOut
    );
    // Policies that never report a full ring do not wait.
    let heap = Ring::builder()
        .capacity(1024)
        .when_full(WhenFull::Heap)
        .build()
        .unwrap();
    assert!(heap.fixed_wait(10_000).is_ok());
}

/// A producer thread per ring that waits for room (`fixed_wait_timeout`) and sends
/// `messages` buffers of `len(i)` bytes to a consumer thread, which checks each one's
/// bytes and keeps some, releasing them as `release` decides; at the end every ring is
/// empty. Each ring's messages are numbered apart, so a buffer seen by the wrong
/// consumer or with another's bytes fails `holds`.
fn producers_and_consumers(
    rings: u64,
    capacity: usize,
    channel: usize,
    messages: u64,
    len: fn(u64) -> usize,
    release: fn(&mut std::collections::VecDeque<ringmem::FixedBufMut>),
) {
    let producers: Vec<_> = (0..rings)
        .map(|p| {
            std::thread::spawn(move || {
                let ring = Ring::new(capacity);
                let (tx, rx) =
                    std::sync::mpsc::sync_channel::<(u64, ringmem::FixedBufMut)>(channel);
                let consumer = std::thread::spawn(move || {
                    let mut kept = std::collections::VecDeque::new();
                    for (id, buf) in rx {
                        assert!(holds(id, &buf), "message {id} kept its bytes");
                        kept.push_back(buf);
                        release(&mut kept);
                    }
                });
                for i in 0..messages {
                    let id = p << 32 | i;
                    let len = len(i);
                    let mut buf = ring
                        .fixed_wait_timeout(len, GUARD)
                        .expect("a consumer makes room");
                    let mut bytes = vec![0; len];
                    fill(id, &mut bytes);
                    buf.try_extend_from_slice(&bytes).unwrap();
                    tx.send((id, buf)).unwrap();
                }
                drop(tx);
                consumer.join().unwrap();
                assert_eq!(ring.stats().live_buffers, 0);
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
}

/// Producers on full rings wait while consumers on other threads release in any
/// order: every message arrives with its bytes, and nobody hangs.
#[test]
fn producers_wait_on_full_rings_across_threads() {
    producers_and_consumers(
        2,
        8 * 1024,
        256,
        scaled(20_000) as u64,
        |i| 1 + (i as usize * 37) % 500,
        |kept| {
            // At most 8 of at most 504 bytes kept, less than half the ring, so the
            // producer always gets room in the end; released out of order: the newest
            // first, then the oldest.
            if kept.len() > 8 {
                let newest = kept.pop_back();
                drop(newest);
                kept.drain(..4);
            }
        },
    );
}

#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn an_async_producer_wakes_on_a_release_in_another_task() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        // The ring moves into the task: the waiting future keeps the task `Send`.
        let task = tokio::spawn(async move {
            let (mut ring, held) = full_ring();
            let (tx, mut rx) = tokio::sync::mpsc::channel(64);
            let consumer = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(held);
                while let Some(buf) = rx.recv().await {
                    drop::<ringmem::FixedBufMut>(buf);
                }
            });
            for _ in 0..scaled(2000) {
                let buf = tokio::time::timeout(GUARD, ring.fixed_async(1000))
                    .await
                    .expect("woken by the consumer")
                    .unwrap();
                tx.send(buf).await.unwrap();
            }
            drop(tx);
            consumer.await.unwrap();
            assert_eq!(ring.stats().live_buffers, 0);
        });
        task.await.unwrap();
    });
}

#[test]
fn a_dropped_waiting_future_leaves_nothing_behind() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let (mut ring, held) = full_ring();
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut wait = Box::pin(ring.fixed_async(120));
        assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Pending));
    }
    {
        let mut wait = Box::pin(ring.extendable_async(0));
        assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Pending));
    }
    drop(held);
    assert!(ring.fixed(120).is_some());
    assert!(ring.extendable(0).is_some());
}

/// More producers wait at once, each on its own full ring, than the waiters' table has
/// entries (8): some entries publish the hull of several rings' spans, and each
/// producer is still woken by the release into its own ring, round after round
/// (entries are shared, narrowed and taken again between rounds).
#[test]
fn more_waited_rings_than_the_table_holds() {
    const PRODUCERS: usize = 12;
    let rounds = scaled(400);
    let (tx, rx) = std::sync::mpsc::channel::<ringmem::FixedBufMut>();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let (ring, mut held) = full_ring();
                for _ in 0..rounds {
                    // One buffer to the releasing thread, then wait for its room.
                    tx.send(held.pop().unwrap()).unwrap();
                    let again = ring
                        .fixed_wait_timeout(120, GUARD)
                        .expect("the release into this ring wakes its producer");
                    held.push(again);
                }
            })
        })
        .collect();
    drop(tx);
    for _ in 0..rounds {
        let mut batch: Vec<_> = (0..PRODUCERS).map(|_| rx.recv().unwrap()).collect();
        // Most producers are waiting by now: release into their rings, newest first.
        std::thread::sleep(Duration::from_micros(200));
        while let Some(buf) = batch.pop() {
            drop(buf);
        }
    }
    for p in producers {
        p.join().unwrap();
    }
}

/// A byte pattern that tells positions apart.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn a_partial_message_waits_to_grow_and_keeps_its_bytes() {
    // `before`: bytes held ahead of the message and released by the other thread;
    // `after`: whether the buffers behind it are released too. Released ahead only, the
    // message must move to the front of the block to grow.
    for (before, after) in [(0, true), (3000, false), (3000, true)] {
        let ring = Ring::new(4096);
        let ahead = (before > 0).then(|| ring.fixed(before).unwrap());
        let mut msg = ring.extendable(0).unwrap();
        let head = pattern(200);
        msg.extend_from_slice(&head);
        let behind: Vec<_> = std::iter::from_fn(|| ring.fixed(56)).collect();
        assert!(msg.try_reserve(2000).is_err(), "the ring should be full");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(ahead);
            // Held on until the message has grown, unless `after`.
            (!after).then_some(behind)
        });
        msg.reserve_wait_timeout(2000, GUARD)
            .expect("woken by the release");
        assert!(msg.capacity() >= 2200);
        assert_eq!(&msg[..], &head[..], "the partial message changed");
        msg.extend_from_slice(&pattern(2000));
        assert_eq!(&msg[200..], &pattern(2000)[..]);
        drop(releaser.join().unwrap());
    }
}

#[test]
fn growth_that_no_release_can_serve_fails_at_once() {
    let ring = Ring::new(4096);
    let mut msg = ring.extendable(0).unwrap();
    msg.extend_from_slice(b"abc");
    let _rest: Vec<_> = std::iter::from_fn(|| ring.fixed(8)).collect();
    assert!(matches!(
        msg.reserve_wait(4096),
        Err(WaitError::NeverFits { block: 4096, .. })
    ));
    assert!(matches!(
        msg.reserve_wait(usize::MAX),
        Err(WaitError::NeverFits { .. })
    ));
    assert_eq!(&msg[..], b"abc");
}

#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn an_async_writer_waits_to_grow_while_its_thread_releases() {
    // One thread: a blocking `reserve_wait` here would never return, as the consumer
    // runs only when the writer yields.
    on_one_thread(|consumer_yields| async move {
        let ring = Ring::new(4096);
        let mut msg = ring.extendable(0).unwrap();
        let head = pattern(200);
        msg.extend_from_slice(&head);
        let held: Vec<_> = std::iter::from_fn(|| ring.fixed(56)).collect();
        assert!(msg.try_reserve(2000).is_err(), "the ring should be full");
        let consumer = release_after(consumer_yields, held);
        let grow = tokio::time::timeout(GUARD, msg.reserve_async(2000));
        let (grown, ()) = tokio::join!(grow, consumer);
        grown.expect("woken by the consumer").unwrap();
        assert!(msg.capacity() >= 2200);
        assert_eq!(&msg[..], &head[..], "the partial message changed");
    });
}

/// Runs `test` on a current-thread runtime twice, with the number of yields its
/// consumer should make before it releases: 3, and 200, which outlast a waiting
/// future's 64 yields (it registers, and is woken through the waiters' table).
fn on_one_thread<F: std::future::Future<Output = ()>>(test: impl Fn(usize) -> F) {
    for consumer_yields in [3, 200] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(test(consumer_yields));
    }
}

/// Drops `held` after yielding to the executor `yields` times.
async fn release_after<T>(yields: usize, held: T) {
    for _ in 0..yields {
        tokio::task::yield_now().await;
    }
    drop(held);
}

#[test]
#[cfg_attr(miri, ignore = "tokio's runtime is too slow under Miri")]
fn an_async_extendable_waits_for_room_made_by_its_thread() {
    // As the writer above, from the first byte: a blocking `extendable_wait` on this
    // thread would never return.
    on_one_thread(|consumer_yields| async move {
        let (ring, held) = full_ring();
        let start = 500;
        assert!(ring.extendable(start).is_none(), "the ring should be full");
        let consumer = release_after(consumer_yields, held);
        let wait = tokio::time::timeout(GUARD, ring.extendable_async(start));
        let (msg, ()) = tokio::join!(wait, consumer);
        let mut msg = msg.expect("woken by the consumer").unwrap();
        assert!(msg.capacity() >= start);
        let body = pattern(3000);
        msg.extend_from_slice(&body);
        assert_eq!(&msg.finalize()[..], &body[..]);
        assert!(matches!(
            ring.extendable_async(8192).await,
            Err(WaitError::NeverFits {
                requested: 8192,
                ..
            })
        ));
    });
}

/// A single-thread executor, as simple as they come: polls each task whose waker was
/// called, until all are done. `false` when tasks are left pending and none was woken:
/// nothing would ever poll them again (a lost wake-up, told without a timeout).
fn run_local<'a>(
    tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>>,
) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let mut tasks: Vec<_> = (tasks.into_iter())
        .map(|t| (t, Arc::new(Flag(AtomicBool::new(true)))))
        .collect();
    while !tasks.is_empty() {
        let mut polled = false;
        tasks.retain_mut(|(task, flag)| {
            if !flag.0.swap(false, Ordering::SeqCst) {
                return true;
            }
            polled = true;
            let waker = Waker::from(flag.clone());
            task.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        });
        if !polled {
            return false;
        }
    }
    true
}

/// Yields to the executor `n` times (more than a waiting future's 64 yields, so that
/// it has registered by then).
async fn yields(n: usize) {
    for _ in 0..n {
        let mut once = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut once, true) {
                std::task::Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await;
    }
}

/// A task waits for room that a task of the same thread makes without a release
/// store: the ring's latest region goes back to it (an `ExtBuf` dropped, or giving back
/// its capacity as it is finalized). That must wake the waiting task as a release
/// does, on a local executor (here a hand-made one: nothing else would poll it).
#[test]
fn room_made_on_the_rings_own_thread_wakes_its_tasks() {
    for how in ["drop", "finalize", "reserve"] {
        let ring = Ring::new(4096);
        let mut latest = ring.extendable(4000).unwrap();
        latest.extend_from_slice(b"abc");
        assert!(ring.extendable(1000).is_none(), "the ring should be full");
        let kept = std::cell::RefCell::new(None);
        let waiter: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> = match how {
            "reserve" => {
                // A second buffer, started before the ring filled, waits to grow.
                drop(latest);
                let mut early = ring.extendable(0).unwrap();
                early.extend_from_slice(b"xyz");
                latest = ring.extendable(3900).unwrap();
                assert!(early.try_reserve(1000).is_err(), "the ring should be full");
                Box::pin(async move {
                    early.reserve_async(1000).await.unwrap();
                    assert_eq!(&early[..3], b"xyz");
                })
            }
            _ => Box::pin(async { drop(ring.extendable_async(1000).await.unwrap()) }),
        };
        let maker = Box::pin(async {
            yields(200).await;
            match how {
                "finalize" => *kept.borrow_mut() = Some(latest.finalize()),
                _ => drop(latest),
            }
        });
        assert!(
            run_local(vec![waiter, maker]),
            "{how}: room made on the ring's thread left its task waiting"
        );
        drop(kept);
    }
}

/// The same with the ring's memory in a `Vec` on the ring (allocator-api2), dropped by
/// a task of the ring's thread.
#[test]
#[cfg(feature = "allocator-api2")]
fn a_vec_dropped_on_the_rings_thread_wakes_its_tasks() {
    let ring = Ring::new(4096);
    let mut v = allocator_api2::vec::Vec::<u8, &Ring>::with_capacity_in(3900, &ring);
    v.extend_from_slice(b"abc");
    assert!(ring.extendable(1000).is_none(), "the ring should be full");
    let waiter = Box::pin(async { drop(ring.extendable_async(1000).await.unwrap()) });
    let maker = Box::pin(async {
        yields(200).await;
        drop(v);
    });
    assert!(run_local(vec![waiter, maker]), "the Vec's room woke nobody");
}

/// The thread-local ring: a task waits in `tls::fixed_async` while the thread's
/// `tls::extendable_with` buffer fills the ring; the buffer's drop at the end of the
/// closure gives the room back and must wake the task.
#[test]
fn room_made_by_tls_extendable_with_wakes_tls_fixed_async() {
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    std::thread::spawn(|| {
        let builder = Ring::builder().capacity(4096).when_full(WhenFull::Fail);
        ringmem::tls::configure(builder).unwrap();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = Box::pin(ringmem::tls::fixed_async(1000));
        ringmem::tls::extendable_with(4000, |mut ext| {
            ext.extend_from_slice(b"abc");
            assert!(
                ringmem::tls::fixed(1000).is_none(),
                "the ring should be full"
            );
            // Polled until it registers: a poll that does not wake its own task.
            loop {
                flag.0.store(false, Ordering::SeqCst);
                assert!(wait.as_mut().poll(&mut cx).is_pending());
                if !flag.0.load(Ordering::SeqCst) {
                    break;
                }
            }
        })
        .unwrap();
        assert!(
            flag.0.load(Ordering::SeqCst),
            "the buffer's room woke the waiting task"
        );
        let Poll::Ready(buf) = wait.as_mut().poll(&mut cx) else {
            panic!("woken, yet no room");
        };
        assert_eq!(buf.unwrap().capacity(), 1000);
    })
    .join()
    .unwrap();
}

#[repr(C, align(16))]
struct Align16([u8; 16]);
#[repr(C, align(256))]
struct Align256([u8; 256]);
#[repr(C, align(2048))]
struct Align2048([u8; 2048]);
#[repr(C, align(4096))]
struct Align4096([u8; 4096]);
#[repr(C, align(8192))]
struct Align8192([u8; 8192]);

/// For each ring capacity and count, `typed_wait` of an over-aligned `T` on an empty
/// ring serves what `typed` serves there, and fails at once with `NeverFits` (not a
/// wait for ever, not `TimedOut`) where `typed` fails: the padding the alignment needs
/// counts, and alignments beyond the ring's (over 4,096) never fit.
fn over_aligned_requests_fail_at_once<T>() {
    for cap in [1000, 2048, 4000, 4096, 8192, 12_000, 1 << 16] {
        for n in 1..=4 {
            let ring = Ring::new(cap);
            let serves = ring.typed::<T>(n).is_some();
            let what = format!("{n} x {} on a ring of {cap}", std::any::type_name::<T>());
            match ring.typed_wait_timeout::<T>(n, GUARD) {
                Ok(_) => assert!(serves, "{what}: served by the wait only"),
                Err(WaitError::NeverFits { .. }) => assert!(!serves, "{what}: fits"),
                Err(e) => panic!("{what}: {e}"),
            }
            let mut ring = ring;
            let (tx, rx) = std::sync::mpsc::channel();
            let done = run_local(vec![Box::pin(async {
                tx.send(ring.typed_async::<T>(n).await.map(drop)).unwrap();
            })]);
            assert!(done, "{what}: the async form waits");
            match rx.recv().unwrap() {
                Ok(()) => assert!(serves, "{what}: served by the async wait only"),
                Err(WaitError::NeverFits { .. }) => assert!(!serves, "{what}: fits"),
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }
}

#[test]
fn over_aligned_typed_waits_that_no_release_can_serve_fail_at_once() {
    over_aligned_requests_fail_at_once::<Align16>();
    over_aligned_requests_fail_at_once::<Align256>();
    over_aligned_requests_fail_at_once::<Align2048>();
    over_aligned_requests_fail_at_once::<Align4096>();
    over_aligned_requests_fail_at_once::<Align8192>();
    let ring = Ring::new(3000); // 2,048 bytes and a header, but not aligned to 2,048
    assert!(matches!(
        ring.typed_wait::<Align2048>(1),
        Err(WaitError::NeverFits {
            requested: 2048,
            ..
        })
    ));
}

/// More rings than the waiters' table has entries (8), each with a producer that waits
/// for room and a consumer thread that releases: every message arrives with its bytes
/// and nobody hangs, while the table's entries are shared, narrowed and reused. Run
/// under ThreadSanitizer by CI (with `RINGMEM_SMALL=1`).
#[test]
fn many_rings_each_with_a_waiting_producer_and_a_releasing_consumer() {
    producers_and_consumers(
        12,
        2048,
        16,
        scaled(3000) as u64,
        |i| 1 + (i as usize * 53) % 200,
        |kept| {
            // At most 4 of at most 208 bytes kept, less than half the ring: the
            // producer always gets room in the end, often only after a wait.
            if kept.len() > 4 {
                kept.pop_front();
            }
        },
    );
}
