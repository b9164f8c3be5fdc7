//! Panics in user code while ringmem memory is held: element destructors, closures given
//! to the thread-local ring, a decoder between `get_writable` and `get_data_owned`, a
//! fallback buffer, and code unwinding through a growing `ExtBuf`. Each case checks that
//! the crate stays consistent, releases what it held (ring statistics, drop counters,
//! and `no_leak`), and propagates the panic.

use std::cell::Cell;
use std::fmt;
use std::io::Write;
use std::rc::Rc;

use crate::common::faulty::{self, no_leak};
use crate::common::{fill, holds};
use crate::harness::*;
use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool, WritableError};
use ringmem::{tls, Ring, WhenFull};

/// An element that counts its drops in a slot of its own and may panic when dropped.
struct Bomb<'a> {
    id: usize,
    drops: &'a [Cell<u32>],
    explode: bool,
}

impl Drop for Bomb<'_> {
    fn drop(&mut self) {
        self.drops[self.id].set(self.drops[self.id].get() + 1);
        if self.explode {
            panic!("fault_sweep: bomb {}", self.id);
        }
    }
}

#[test]
fn typed_buffer_element_drop_panics() {
    quiet_expected_panics();
    for policy in POLICIES {
        // Within the ring, and larger than it (a heap region, or a new block).
        for n in [8, 60] {
            for bomb in [0, n / 2, n - 1] {
                for how in ["drop", "truncate", "clear"] {
                    let label = format!("TypedBuf<Bomb>, {policy:?}, {n}, bomb {bomb}, {how}");
                    no_leak(&label, || {
                        let ring = ring(policy);
                        let drops: Vec<Cell<u32>> = (0..n).map(|_| Cell::new(0)).collect();
                        let counts = |r: std::ops::Range<usize>| -> Vec<u32> {
                            drops[r].iter().map(Cell::get).collect()
                        };
                        let Some(mut v) = ring.typed::<Bomb>(n) else {
                            assert_eq!(policy, WhenFull::Fail, "{label}");
                            return;
                        };
                        for id in 0..n {
                            let b = Bomb {
                                id,
                                drops: &drops,
                                explode: id == bomb,
                            };
                            assert!(v.push(b).is_ok());
                        }
                        let expected = format!("fault_sweep: bomb {bomb}");
                        if how == "drop" {
                            let p = catch(move || drop(v)).expect_err("the panic propagates");
                            assert_eq!(message(&*p), expected, "{label}");
                            assert_eq!(counts(0..n), vec![1; n], "{label}: each dropped once");
                        } else {
                            let keep = if how == "clear" { 0 } else { bomb / 2 };
                            let p = catch(|| {
                                if how == "clear" {
                                    v.clear();
                                } else {
                                    v.truncate(keep);
                                }
                            })
                            .expect_err("the panic propagates");
                            assert_eq!(message(&*p), expected, "{label}");
                            assert_eq!(v.len(), keep, "{label}");
                            assert_eq!(counts(0..keep), vec![0; keep], "{label}: kept");
                            assert_eq!(counts(keep..n), vec![1; n - keep], "{label}: dropped");
                            if n == 8 || policy == WhenFull::Grow {
                                assert_eq!(ring.stats().live_buffers, 1, "{label}");
                            }
                            drop(v);
                            assert_eq!(counts(0..n), vec![1; n], "{label}: each dropped once");
                        }
                        settle(&label, &ring);
                    });
                }
            }
        }
    }
}

/// After a panicking `truncate`, the buffer is still usable and drops what it still
/// holds once.
#[test]
fn typed_buffer_usable_after_a_panicking_truncate() {
    quiet_expected_panics();
    for policy in POLICIES {
        no_leak("TypedBuf after a panicking truncate", || {
            let ring = ring(policy);
            let drops: Vec<Cell<u32>> = (0..16).map(|_| Cell::new(0)).collect();
            let mut v = ring.typed::<Bomb>(8).unwrap();
            for id in 0..8 {
                let b = Bomb {
                    id,
                    drops: &drops,
                    explode: id == 5,
                };
                assert!(v.push(b).is_ok());
            }
            assert!(catch(|| v.truncate(3)).is_err());
            assert_eq!(v.len(), 3);
            let counts: Vec<u32> = drops.iter().map(Cell::get).collect();
            assert_eq!(counts[..8], [0, 0, 0, 1, 1, 1, 1, 1]);
            for id in 8..13 {
                let b = Bomb {
                    id,
                    drops: &drops,
                    explode: false,
                };
                assert!(v.push(b).is_ok());
            }
            assert_eq!(
                v.iter().map(|b| b.id).collect::<Vec<_>>(),
                [0, 1, 2, 8, 9, 10, 11, 12]
            );
            assert_eq!(ring.stats().live_buffers, 1);
            drop(v);
            assert!(
                drops[..13].iter().all(|d| d.get() == 1),
                "each dropped once"
            );
            settle("TypedBuf", &ring);
        });
    }
}

thread_local! {
    static ZST_DROPS: Cell<u32> = const { Cell::new(0) };
}

/// A zero-sized element whose third drop panics.
struct ZstBomb;

impl Drop for ZstBomb {
    fn drop(&mut self) {
        let n = ZST_DROPS.with(|d| d.replace(d.get() + 1)) + 1;
        if n == 3 {
            panic!("fault_sweep: zero-sized bomb");
        }
    }
}

#[test]
fn typed_buffer_of_zero_sized_elements_with_a_panicking_drop() {
    quiet_expected_panics();
    no_leak("TypedBuf<ZstBomb>", || {
        let ring = ring(WhenFull::Fail);
        ZST_DROPS.with(|d| d.set(0));
        let mut v = ring.typed::<ZstBomb>(5).unwrap();
        for _ in 0..5 {
            assert!(v.push(ZstBomb).is_ok());
        }
        assert!(catch(move || drop(v)).is_err());
        assert_eq!(ZST_DROPS.with(Cell::get), 5, "each dropped once");
        settle("TypedBuf<ZstBomb>", &ring);
    });
}

/// Panics inside the closures of the `tls` functions: the thread's ring stays and
/// keeps serving, and what the closure was building is released.
#[test]
fn tls_closures_that_panic() {
    quiet_expected_panics();
    for policy in POLICIES {
        no_leak("tls closures that panic", || {
            faulty::spawn(move || {
                tls::configure(Ring::builder().capacity(CAP).when_full(policy)).unwrap();
                let stats = || tls::with_ring(|r| r.stats()).unwrap();
                // A panic on the ring's first use: the ring was made before the closure
                // ran, and stays.
                let p = catch(|| tls::with_ring::<()>(|_| panic!("fault_sweep: in with_ring")));
                assert_eq!(message(&*p.unwrap_err()), "fault_sweep: in with_ring");
                assert_eq!(stats().live_buffers, 0);
                assert_eq!(stats().capacity, CAP, "the same ring, not a second one");

                let held = filled(tls::fixed(100).unwrap(), 1, 100);
                let before = stats();
                // A panic while an ExtBuf grows, within the ring and past it (served
                // from the heap or a new block, or refused under `Fail`).
                for n in [600, 3000] {
                    let p = catch(|| {
                        tls::extendable_with::<()>(0, |mut ext| {
                            let grown = ext.try_extend_from_slice(&ZEROS[..n]).is_ok();
                            assert_eq!(grown, n < CAP || policy != WhenFull::Fail);
                            panic!("fault_sweep: in extendable");
                        })
                    });
                    assert_eq!(message(&*p.unwrap_err()), "fault_sweep: in extendable");
                    assert_eq!(stats().live_buffers, before.live_buffers, "released");
                    assert_eq!(stats().bytes_in_use, before.bytes_in_use);
                }
                // Its memory serves again: under `Fail`, 600 more bytes fit only if the
                // panicked buffer gave them back.
                drop(tls::fixed(600).expect("the released region serves again"));
                // A panic after `finalize`: the finished buffer is released on the way out.
                let p = catch(|| {
                    tls::extendable_with::<()>(0, |mut ext| {
                        ext.extend_from_slice(b"finished");
                        let _done = ext.finalize();
                        panic!("fault_sweep: after finalize");
                    })
                });
                assert!(p.is_err());
                assert_eq!(stats().live_buffers, before.live_buffers);
                // A panic nested inside `with_ring`, unwinding through a typed buffer of
                // counted elements (which must not panic themselves: a second panic
                // while unwinding aborts, as everywhere in Rust).
                let drops: Vec<Cell<u32>> = (0..4).map(|_| Cell::new(0)).collect();
                let p = catch(|| {
                    tls::with_ring(|ring| {
                        let mut v = ring.typed::<Bomb>(4).unwrap();
                        for id in 0..4 {
                            let b = Bomb {
                                id,
                                drops: &drops,
                                explode: false,
                            };
                            assert!(v.push(b).is_ok());
                        }
                        tls::extendable_with::<()>(8, |mut ext| {
                            ext.extend_from_slice(b"nested");
                            panic!("fault_sweep: nested");
                        })
                    })
                });
                assert_eq!(message(&*p.unwrap_err()), "fault_sweep: nested");
                assert!(drops.iter().all(|d| d.get() == 1), "each dropped once");
                assert_eq!(stats().live_buffers, before.live_buffers);
                assert!(holds(1, &held));
                drop(held);
                assert_eq!(stats().live_buffers, 0);
                assert_eq!(stats().bytes_in_use, 0);
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        });
    }
}

// Codec pool buffers held across a panic.

/// Writes message `id` (a header, then `payload` bytes) into the pool, unfinished.
fn start_message<B: Buffer>(pool: &mut BufferPool<B>, id: u64, payload: usize) {
    pool.get_writable(6);
    pool.get_writable(payload);
    fill(id, pool.get_data_by_ref(usize::MAX));
}

/// A panic between `get_writable` and `get_data_owned`, with the message in the ring
/// and in the heap fallback, and with the pool dropped by the unwinding or kept.
#[test]
fn codec_pool_panic_mid_message() {
    quiet_expected_panics();
    for policy in POLICIES {
        // 100 bytes stay in the ring; 3000 go to the fallback (or the ring's heap region,
        // or a new block).
        for payload in [100, 3000] {
            let label = format!("BufferPool, {policy:?}, payload {payload}");
            no_leak(&label, || {
                // The pool dropped while unwinding; a slice it made outlives it.
                let mut pool = BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0));
                start_message(&mut pool, 1, 50);
                let earlier = pool.get_data_owned();
                let p = catch(move || {
                    start_message(&mut pool, 2, payload);
                    panic!("fault_sweep: mid-message");
                });
                assert_eq!(message(&*p.unwrap_err()), "fault_sweep: mid-message");
                assert!(holds(1, &earlier), "{label}");
                drop(earlier);

                // The pool kept: the unfinished message is still its current one.
                let mut pool = BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0));
                let p = catch(|| {
                    start_message(&mut pool, 3, payload);
                    panic!("fault_sweep: mid-message");
                });
                assert!(p.is_err());
                assert_eq!(pool.len(), 6 + payload, "{label}");
                assert!(holds(3, pool.get_data_by_ref_(usize::MAX)), "{label}");
                pool.get_writable(10);
                fill(3, pool.get_data_by_ref(usize::MAX));
                let msg = pool.get_data_owned();
                assert_eq!(msg.len(), 16 + payload);
                assert!(holds(3, &msg), "{label}");
                start_message(&mut pool, 4, 20);
                let next = pool.get_data_owned();
                assert!(holds(4, &next) && next.len() == 26, "{label}");
                assert!(next.is_ring(), "{label}: the ring serves again");
                drop((msg, next));
                settle(&label, pool.ring().unwrap());
            });
        }
    }
}

/// A panic while slices are out, from the ring, from the ring's heap region and from
/// the heap fallback: the unwinding drops them and each is released.
#[test]
fn codec_pool_panic_with_slices_out() {
    quiet_expected_panics();
    for policy in POLICIES {
        no_leak("BufferPool slices dropped by a panic", || {
            let mut pool = BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0));
            let p = catch(|| {
                let mut out = Vec::new();
                for (id, payload) in [(1, 100), (2, 3000), (3, 200), (4, 5000)] {
                    start_message(&mut pool, id, payload);
                    out.push(pool.get_data_owned());
                }
                if policy == WhenFull::Fail {
                    assert!(out.iter().any(|s| !s.is_ring()), "a heap fallback is out");
                }
                panic!("fault_sweep: with slices out");
            });
            assert!(p.is_err());
            settle("BufferPool slices", pool.ring().unwrap());
            start_message(&mut pool, 5, 100);
            let msg = pool.get_data_owned();
            assert!(msg.is_ring() && holds(5, &msg));
        });
    }
}

/// A fallback buffer (user code) that panics once when its flag says so, wrapping the
/// heap's; the test keeps the flags while the pool owns the buffer.
#[derive(Default)]
struct Flaky {
    inner: BufferFromSystemMemory,
    panic_in_take: Rc<Cell<bool>>,
    panic_in_write: Rc<Cell<bool>>,
}

impl Buffer for Flaky {
    type Slice = Vec<u8>;

    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        self.try_get_writable(len).unwrap()
    }

    fn try_get_writable(&mut self, len: usize) -> Result<&mut [u8], WritableError> {
        if self.panic_in_write.replace(false) {
            panic!("fault_sweep: fallback write");
        }
        self.inner.try_get_writable(len)
    }

    fn get_data_owned(&mut self) -> Vec<u8> {
        if self.panic_in_take.replace(false) {
            panic!("fault_sweep: fallback take");
        }
        self.inner.get_data_owned()
    }

    fn get_data_by_ref(&mut self, len: usize) -> &mut [u8] {
        self.inner.get_data_by_ref(len)
    }

    fn get_data_by_ref_(&self, len: usize) -> &[u8] {
        self.inner.get_data_by_ref_(len)
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn danger_set_start(&mut self, index: usize) {
        self.inner.danger_set_start(index);
    }
}

/// The fallback panics while handing over the message it holds: the pool must still
/// take the message as its current one, rather than start the next message in the ring
/// while the old bytes stay in the fallback (where the next move would append to them).
#[test]
fn codec_pool_fallback_panics_in_get_data_owned() {
    quiet_expected_panics();
    no_leak("BufferPool, fallback panics in get_data_owned", || {
        let fallback = Flaky::default();
        let take = fallback.panic_in_take.clone();
        let mut pool = BufferPool::from_ring(ring(WhenFull::Fail), fallback);
        // Larger than the ring: the message moves to the fallback.
        start_message(&mut pool, 1, 2000);
        assert_eq!(pool.fallbacks(), 1);
        take.set(true);
        let p = catch(|| pool.get_data_owned());
        assert_eq!(message(&*p.unwrap_err()), "fault_sweep: fallback take");
        assert_eq!(
            pool.len(),
            2006,
            "the message is still the pool's current one"
        );
        assert!(holds(1, pool.get_data_by_ref_(usize::MAX)));
        let msg = pool.get_data_owned();
        assert!(!msg.is_ring() && holds(1, &msg) && msg.len() == 2006);
        // The next message, moved to the fallback, holds its own bytes only.
        start_message(&mut pool, 2, 20);
        pool.get_writable(2000);
        fill(2, pool.get_data_by_ref(usize::MAX));
        let next = pool.get_data_owned();
        assert_eq!(next.len(), 2026, "no bytes of the earlier message");
        assert!(holds(2, &next));
        drop((msg, next));
        settle("Flaky fallback", pool.ring().unwrap());
    });
}

/// The fallback panics while the pool moves a message into it: the message's ring
/// region is released and the pool starts afresh.
#[test]
fn codec_pool_fallback_panics_while_taking_a_message() {
    quiet_expected_panics();
    no_leak("BufferPool, fallback panics in try_get_writable", || {
        let fallback = Flaky::default();
        let write = fallback.panic_in_write.clone();
        let mut pool = BufferPool::from_ring(ring(WhenFull::Fail), fallback);
        start_message(&mut pool, 2, 100);
        write.set(true);
        let p = catch(|| pool.get_writable(2000).len());
        assert_eq!(message(&*p.unwrap_err()), "fault_sweep: fallback write");
        settle("the message's region is released", pool.ring().unwrap());
        assert_eq!(pool.len(), 0, "the message went with the unwinding");
        start_message(&mut pool, 3, 30);
        let msg = pool.get_data_owned();
        assert!(msg.is_ring() && holds(3, &msg) && msg.len() == 36);
        drop(msg);
        settle("Flaky fallback", pool.ring().unwrap());
    });
}

// A panic unwinding through an ExtBuf being grown.

/// Writes ASCII text through `fmt`, 37 bytes at a time, then panics after `upto` bytes.
struct Spill<'a> {
    text: &'a [u8],
    upto: usize,
}

impl fmt::Display for Spill<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.text[..self.upto].chunks(37) {
            // On to the panic even when the buffer cannot take more.
            let _ = f.write_str(std::str::from_utf8(chunk).unwrap());
        }
        panic!("fault_sweep: in Display");
    }
}

fn ascii(id: u64, buf: &mut [u8]) {
    fill(id, buf);
    for b in buf {
        *b = b'a' + *b % 26;
    }
}

#[test]
fn panic_unwinding_through_a_growing_ext_buf() {
    quiet_expected_panics();
    let mut text = [0u8; 4096];
    ascii(5, &mut text);
    for policy in POLICIES {
        for upto in [300, 3000] {
            let label = format!("ExtBuf, write! panics, {policy:?}, {upto}");
            no_leak(&label, || {
                let ring = ring(policy);
                // Owned by the panicking code: released by the unwinding.
                let p = catch(|| {
                    let mut ext = ring.extendable(0).unwrap();
                    let _pin = ring.fixed(40).unwrap();
                    let _ = write!(ext, "{}", Spill { text: &text, upto });
                });
                assert_eq!(message(&*p.unwrap_err()), "fault_sweep: in Display");
                settle(&label, &ring);

                // Borrowed by it: survives with the bytes written so far, and grows on.
                let mut ext = ring.extendable(0).unwrap();
                let pin = filled(ring.fixed(40).unwrap(), 1, 40);
                let p = catch(|| {
                    let _ = write!(ext, "{}", Spill { text: &text, upto });
                });
                assert!(p.is_err());
                assert!(ext.len() <= upto, "{label}");
                check_prefix(&label, &ext, &text);
                if policy != WhenFull::Fail {
                    assert_eq!(ext.len(), upto, "{label}: every byte before the panic");
                    let len = ext.len();
                    ext.try_extend_from_slice(&text[len..len + 500]).unwrap();
                    check_prefix(&label, &ext, &text);
                }
                let done = ext.finalize();
                check_prefix(&label, &done, &text);
                assert!(holds(1, &pin));
                drop((done, pin));
                settle(&label, &ring);
            });
        }
    }
}

/// A `bytes::Buf` whose `chunk` panics once `limit` bytes were taken from it.
#[cfg(feature = "bytes")]
struct PanickyBuf<'a> {
    bytes: &'a [u8],
    at: usize,
    limit: usize,
}

#[cfg(feature = "bytes")]
impl bytes::Buf for PanickyBuf<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn chunk(&self) -> &[u8] {
        if self.at >= self.limit {
            panic!("fault_sweep: in Buf::chunk");
        }
        &self.bytes[self.at..(self.at + 50).min(self.bytes.len())]
    }

    fn advance(&mut self, cnt: usize) {
        self.at += cnt;
    }
}

#[cfg(feature = "bytes")]
#[test]
fn panic_unwinding_through_bufmut_put_on_an_ext_buf() {
    use bytes::BufMut;
    quiet_expected_panics();
    let mut text = [0u8; 4096];
    fill(6, &mut text);
    for policy in POLICIES {
        no_leak("ExtBuf, BufMut::put panics", || {
            let ring = ring(policy);
            let mut ext = ring.extendable(0).unwrap();
            let pin = filled(ring.fixed(40).unwrap(), 1, 40);
            let limit = if policy == WhenFull::Fail { 500 } else { 2000 };
            let src = PanickyBuf {
                bytes: &text,
                at: 0,
                limit,
            };
            let p = catch(|| ext.put(src));
            assert_eq!(message(&*p.unwrap_err()), "fault_sweep: in Buf::chunk");
            // `put` copies what the source and the buffer's spare chunk both offer.
            assert!((limit..limit + 50).contains(&ext.len()), "{}", ext.len());
            check_prefix("BufMut::put", &ext, &text);
            assert!(holds(1, &pin));
            let p = catch(|| {
                let mut owned = ring.extendable(0).unwrap();
                owned.put(PanickyBuf {
                    bytes: &text,
                    at: 0,
                    limit: 300,
                });
            });
            assert!(p.is_err());
            drop((ext, pin));
            settle("BufMut::put", &ring);
        });
    }
}
