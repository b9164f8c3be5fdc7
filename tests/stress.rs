//! Many threads: producers fill ring buffers with a pattern derived from an id,
//! consumers on other threads check the pattern before dropping. A region handed out
//! twice, reused before its release is visible, or freed under a live buffer shows up
//! as a wrong pattern (or, under ASan/TSan/Miri, as a report).

mod common;

use std::io::Write;
use std::thread;

use common::{assert_disjoint, fill, holds, scaled};
use crossbeam_channel::{bounded, unbounded};
use ringmem::{FixedBuf, FixedBufMut, Ring, WhenFull};

enum Msg {
    Unique(u64, FixedBufMut),
    Shared(u64, FixedBuf),
}

fn produce(ring: &Ring, id: u64, len: usize, extendable: bool) -> Option<FixedBufMut> {
    let mut data = vec![0u8; len];
    fill(id, &mut data);
    if extendable {
        let mut ext = ring.extendable(0)?;
        for chunk in data.chunks(64) {
            ext.write_all(chunk).ok()?;
        }
        Some(ext.finalize())
    } else {
        let mut b = ring.fixed(len)?;
        b.write_all(&data).unwrap();
        Some(b)
    }
}

#[test]
fn producers_and_consumers_verify_patterns() {
    let producers = 3;
    let per_producer = scaled(20_000) as u64;
    let (tx, rx) = unbounded::<Msg>();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            thread::spawn(move || {
                let mut held = Vec::new();
                let mut seen = 0u64;
                for msg in rx {
                    match msg {
                        Msg::Unique(id, b) => {
                            assert!(holds(id, &b), "buffer {id} lost its bytes");
                            held.push((id, b.freeze()));
                        }
                        Msg::Shared(id, b) => assert!(holds(id, &b), "frozen {id} lost its bytes"),
                    }
                    seen += 1;
                    // Drop in batches, out of order, keeping a few for longer (at most
                    // 2 x 9 x 712 bytes held: less than the 16 KiB of a `Fail` ring, so
                    // its producer can always make progress).
                    if held.len() > 8 {
                        for (id, b) in held.drain(..6).rev() {
                            assert!(holds(id, &b), "held buffer {id} changed");
                        }
                    }
                }
                seen
            })
        })
        .collect();
    drop(rx);
    let workers: Vec<_> = (0..producers)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                let policy = [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow][p % 3];
                let mut ring = Ring::builder()
                    .capacity(16 * 1024)
                    .when_full(policy)
                    .build()
                    .unwrap();
                let mut waits = 0u64;
                for i in 0..per_producer {
                    let id = (p as u64) << 40 | i;
                    let len = 1 + (id.wrapping_mul(2654435761) % 700) as usize;
                    let buf = loop {
                        match produce(&ring, id, len, i % 3 == 0) {
                            Some(b) => break b,
                            None => {
                                waits += 1;
                                thread::yield_now();
                            }
                        }
                    };
                    if i % 5 == 0 {
                        let f = buf.freeze();
                        tx.send(Msg::Shared(id, f.clone())).unwrap();
                        tx.send(Msg::Shared(id, f.slice(..))).unwrap();
                    } else {
                        tx.send(Msg::Unique(id, buf)).unwrap();
                    }
                    if i % 4096 == 4095 {
                        // Drop the ring with buffers in flight; carry on with a new one.
                        ring = Ring::builder()
                            .capacity(16 * 1024)
                            .when_full(policy)
                            .build()
                            .unwrap();
                    }
                }
                waits
            })
        })
        .collect();
    drop(tx);
    for w in workers {
        w.join().unwrap();
    }
    let seen: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    let shared = (0..per_producer).filter(|i| i % 5 == 0).count() as u64;
    assert_eq!(seen, producers as u64 * (per_producer + shared));
}

#[test]
fn live_buffers_never_overlap_under_churn() {
    let ring = Ring::new(8 * 1024);
    let (tx, rx) = bounded::<(u64, FixedBufMut)>(64);
    let consumer = thread::spawn(move || {
        for (id, b) in rx {
            assert!(holds(id, &b));
        }
    });
    let mut held: Vec<(u64, FixedBufMut)> = Vec::new();
    for id in 0..scaled(50_000) as u64 {
        let len = 1 + (id.wrapping_mul(0x9E37_79B9) % 300) as usize;
        let Some(mut b) = ring.fixed(len) else {
            // Full: hand the oldest over to the consumer and retry later.
            if !held.is_empty() {
                let (i, b) = held.remove(0);
                tx.send((i, b)).unwrap();
            }
            continue;
        };
        let mut data = vec![0; len];
        fill(id, &mut data);
        b.try_extend_from_slice(&data).unwrap();
        held.push((id, b));
        if id % 64 == 0 {
            assert_disjoint(
                held.iter()
                    .map(|(_, b)| (b.as_ptr() as usize, b.capacity()))
                    .collect(),
            );
            for (i, b) in &held {
                assert!(holds(*i, b));
            }
        }
        if held.len() > 20 {
            let (i, b) = held.swap_remove((id as usize * 7) % held.len());
            tx.send((i, b)).unwrap();
        }
    }
    drop(tx);
    consumer.join().unwrap();
}

#[test]
fn rings_dropped_on_one_thread_buffers_on_many() {
    for _ in 0..scaled(200) {
        let ring = Ring::new(4096);
        let bufs: Vec<_> = (0..8u64)
            .filter_map(|id| {
                let mut b = ring.fixed(100)?;
                let mut d = [0u8; 100];
                fill(id, &mut d);
                b.try_extend_from_slice(&d).unwrap();
                Some((id, b.freeze()))
            })
            .collect();
        let clones = bufs.clone();
        let t1 = thread::spawn(move || bufs.into_iter().all(|(i, b)| holds(i, &b)));
        let t2 = thread::spawn(move || clones.into_iter().all(|(i, b)| holds(i, &b)));
        drop(ring);
        assert!(t1.join().unwrap() && t2.join().unwrap());
    }
}

/// `OneRingAlloc`'s small blocks cross threads: producers allocate boxes and vectors in
/// their threads' chunks (filled in order, counted down by whichever thread frees a
/// block) and exit while consumers still hold them; consumers check, shrink, free, and
/// allocate small blocks of their own in between. A chunk released while a block in it
/// lives, or never released, shows up as a wrong pattern, or under ASan/TSan as a report.
///
/// Not under Miri: this file runs there with strict provenance, and `OneRingAlloc`
/// finds a block's chunk from its address with exposed provenance (`tests/alloc_api.rs`,
/// with these paths across threads, runs under Miri with permissive provenance; see
/// `.ci/run`).
#[cfg(all(feature = "allocator-api2", not(loom), not(miri)))]
#[test]
fn one_ring_small_blocks_freed_on_other_threads() {
    use allocator_api2::boxed::Box;
    use allocator_api2::vec::Vec;
    use ringmem::OneRingAlloc;

    type Item = (u64, Box<[u64; 3], OneRingAlloc>, Vec<u8, OneRingAlloc>);
    let producers = 3;
    let per_producer = scaled(20_000) as u64;
    let (tx, rx) = bounded::<Item>(64);
    let consumers: std::vec::Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            thread::spawn(move || {
                let mut kept = std::vec::Vec::new();
                let mut seen = 0u64;
                for (id, b, mut v) in rx {
                    assert_eq!(*b, [id, id + 1, id + 2], "box {id}");
                    assert!(v
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == (id as u8) ^ i as u8));
                    v.truncate(v.len() / 2);
                    v.shrink_to_fit(); // another thread's chunk: shrinks where it is
                    let mine = Box::new_in(id, OneRingAlloc); // this thread's chunk
                    if id % 7 == 0 {
                        kept.push((id, b, v)); // freed later, out of order
                    }
                    assert_eq!(*mine, id);
                    seen += 1;
                }
                for (id, b, v) in kept {
                    assert_eq!(b[0], id);
                    assert!(v
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == (id as u8) ^ i as u8));
                }
                seen
            })
        })
        .collect();
    drop(rx);
    let handles: std::vec::Vec<_> = (0..producers)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in 0..per_producer {
                    let id = p * per_producer + i;
                    let len = (id % 60) as usize + 1;
                    let mut v = Vec::with_capacity_in(len, OneRingAlloc);
                    v.extend((0..len).map(|i| (id as u8) ^ i as u8));
                    let scratch = Box::new_in([id; 5], OneRingAlloc); // freed here, latest
                    assert_eq!(scratch[4], id);
                    drop(scratch);
                    tx.send((id, Box::new_in([id, id + 1, id + 2], OneRingAlloc), v))
                        .unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    let seen: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(seen, producers * per_producer);
}
