//! Under failure (issue 21): every public allocating operation of the ring buffers, the
//! codec pool, the thread-local ring and the `bytes` adapters, run once to count its
//! heap allocations and then once per allocation with that one refused (and once with
//! it and every later one refused); then panics in user code while ringmem memory is
//! held.
//!
//! Each refused run must end with the documented `None` or error (or a success, where
//! the refusal hit something with a fallback), every live buffer holding the bytes
//! written into it, and nothing counted left live once everything is dropped
//! ([`faulty::no_leak`] around every run).
//!
//! What is swept, and how:
//! - the forms that report failure (`Option`, `Result`, `io::Result`) with single
//!   refusals and with every allocation from the refused one on refused;
//! - the forms that panic on failure (`ExtBuf::reserve`, `ExtBuf::extend_from_slice`,
//!   `BufMut` on an `ExtBuf`, `BufferPool::get_writable`) with single refusals only:
//!   with every later allocation refused as well, formatting the panic message is
//!   itself refused, and the standard library aborts;
//! - operations that promise to allocate nothing (`finalize`, `freeze`, `clone`,
//!   `slice`, `split_to`, `push`, `get_data_owned`, `BufMut` on a `FixedBufMut`) are
//!   checked to allocate nothing, which leaves nothing to refuse.
//!
//! Not swept with refusals, because their API cannot report a refused allocation and so
//! aborts through `handle_alloc_error` as `Vec` does (an abort would end this binary):
//! - `Buffer::get_writable` of `BufferFromSystemMemory` (its `Vec::resize`); its
//!   `try_get_writable` is swept;
//! - `bytes::Bytes::from` a `FixedBuf`, a `FixedBufMut` or a codec `Slice`:
//!   `Bytes::from_owner` boxes a control block, as `Bytes::from(Vec<u8>)` does for a
//!   heap slice whose vector has spare capacity; they are run here to count and to check
//!   for leaks, never refused.
//!
//! Run with `--nocapture` to see how many allocations (injection points) each operation
//! made.

mod common;
#[path = "fault_sweep/harness.rs"]
mod harness;
#[path = "fault_sweep/panics.rs"]
mod panics;

use std::io::{self, Write};

use common::faulty::{self, no_leak};
use common::{fill, holds, scaled};
use harness::*;
use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool, Slice, WritableError};
use ringmem::{tls, ExtBuf, FixedBufMut, Ring, RingError, WhenFull};

#[global_allocator]
static ALLOC: faulty::Faulty = faulty::Faulty;

// ---------------------------------------------------------------------------------------
// Scenarios on a ring
// ---------------------------------------------------------------------------------------

/// `Ring::fixed`, in rounds (each reuses, splits and wraps over what the earlier ones
/// left), with requests larger than the ring.
fn fixed_scenario(run: &mut Run, ring: &Ring, held: &mut Vec<(u64, FixedBufMut)>) {
    let sizes = [24, 200, 700, 64, 1500, 8, 300, 5000];
    for round in 0..scaled(4) as u64 {
        for (i, &n) in sizes.iter().enumerate() {
            let id = round * 100 + i as u64;
            if let Some(b) = run.step("Ring::fixed", || ring.fixed(n)) {
                ensure(b.capacity() >= n && b.is_empty(), || {
                    format!("{b:?} for {n}")
                });
                keep(held, id, filled(b, id, n));
            }
            check_held("Ring::fixed", held);
        }
        held.retain(|(id, _)| id % 2 == 1);
    }
    no_alloc("Ring::fixed(0)", || {
        ensure(ring.fixed(0).is_none(), String::new)
    });
    no_alloc("Ring::fixed(usize::MAX)", || {
        ensure(ring.fixed(usize::MAX).is_none(), String::new)
    });
    check_held("Ring::fixed", held);
    held.clear();
    settle("Ring::fixed", ring);
}

/// The error kind of an `ExtBuf`'s `io::Write` that `ring` could not grow: a full
/// `Fail` ring says so, a `Heap` or `Grow` ring's refusing heap is out of memory.
fn full_kind(ring: &Ring) -> io::ErrorKind {
    match ring.when_full() {
        WhenFull::Fail => io::ErrorKind::StorageFull,
        _ => io::ErrorKind::OutOfMemory,
    }
}

/// The growth of an `ExtBuf` through every fallible form, with a pinned buffer after
/// it (so it must move rather than grow in place), then `finalize`, `freeze`, `clone`,
/// `slice` and `split_to`.
fn extendable_scenario(run: &mut Run, ring: &Ring) {
    let mut src = [0u8; 4096];
    fill(7, &mut src);
    let mut ext = run.step("Ring::extendable", || ring.extendable(16));
    let pin = run
        .step("Ring::fixed", || ring.fixed(40))
        .map(|b| filled(b, 1, 40));
    let mut big = run.step("Ring::extendable (larger than the ring)", || {
        ring.extendable(3000)
    });
    for (j, &n) in [10, 100, 300, 50, 900, 2000, 40, 500].iter().enumerate() {
        match j % 4 {
            0 => run.step_on("ExtBuf::try_extend_from_slice", &mut ext, |e| {
                let len = e.len();
                match e.try_extend_from_slice(&src[len..len + n]) {
                    Ok(()) => Some(()),
                    Err(err) => {
                        ensure(err.requested == len + n && e.len() == len, || {
                            format!("{err:?} after {len} + {n}, now {}", e.len())
                        });
                        None
                    }
                }
            }),
            1 => run.step_on("ExtBuf::try_reserve", &mut ext, |e| {
                let len = e.len();
                match e.try_reserve(n) {
                    Ok(()) => {
                        ensure(e.capacity() - len >= n, || format!("{e:?} for {n}"));
                        let copied = no_alloc("a write within capacity", || {
                            e.try_extend_from_slice(&src[len..len + n])
                        });
                        copied.ok()
                    }
                    Err(err) => {
                        ensure(err.requested == len + n && e.len() == len, || {
                            format!("{err:?} after {len} + {n}")
                        });
                        None
                    }
                }
            }),
            2 => run.step_on("io::Write::write on ExtBuf", &mut ext, |e| {
                let len = e.len();
                match e.write(&src[len..len + n]) {
                    // What still fits is written when the ring cannot grow it.
                    Ok(w) => {
                        ensure(w > 0 && w <= n && e.len() == len + w, || format!("{w}"));
                        Some(())
                    }
                    Err(err) => {
                        ensure(err.kind() == full_kind(ring), || format!("{err:?}"));
                        ensure(e.len() == len, || {
                            "a failed write changed the length".into()
                        });
                        None
                    }
                }
            }),
            _ => run.step_on("io::Write::write_all on ExtBuf", &mut ext, |e| {
                let len = e.len();
                match e.write_all(&src[len..len + n]) {
                    Ok(()) => Some(()),
                    Err(err) => {
                        ensure(err.kind() == full_kind(ring), || format!("{err:?}"));
                        None
                    }
                }
            }),
        };
        if let Some(e) = &ext {
            check_prefix("ExtBuf growth", e, &src);
        }
        if let Some(p) = &pin {
            ensure(holds(1, p), || "the pinned buffer lost its bytes".into());
        }
    }
    run.step_on("ExtBuf::try_extend_from_slice", &mut big, |e| {
        e.try_extend_from_slice(&src[..3000]).ok()
    });
    if let Some(e) = &big {
        check_prefix("ExtBuf larger than the ring", e, &src);
    }
    let fin = ext.map(|e| no_alloc("ExtBuf::finalize", || e.finalize()));
    let big = big.map(|e| no_alloc("ExtBuf::finalize", || e.finalize()));
    if let Some(f) = fin {
        check_prefix("ExtBuf::finalize", &f, &src);
        let len = f.len();
        let frozen = no_alloc("FixedBufMut::freeze", || f.freeze());
        let copy = no_alloc("FixedBuf::clone", || frozen.clone());
        let tail = no_alloc("FixedBuf::slice", || frozen.slice(1..));
        let mut rest = frozen.clone();
        let head = no_alloc("FixedBuf::split_to", || rest.split_to(len / 2));
        drop(frozen);
        ensure(
            copy[..] == src[..len]
                && tail[..] == src[1..len]
                && head[..] == src[..len / 2]
                && rest[..] == src[len / 2..len],
            || "a frozen view lost its bytes".into(),
        );
    }
    if let Some(b) = big {
        check_prefix("ExtBuf::finalize", &b, &src);
        let frozen = no_alloc("FixedBufMut::freeze", || b.freeze());
        let copy = no_alloc("FixedBuf::clone", || frozen.clone());
        drop(frozen);
        check_prefix("FixedBuf::clone", &copy, &src);
    }
    drop(pin);
    settle("ExtBuf", ring);
}

/// The forms of `ExtBuf` growth that panic when the ring cannot serve it.
fn extendable_panicking_scenario(run: &mut Run, ring: &Ring) {
    // Room for what is written below, and for `chunk_mut`'s filling of the capacity
    // that doubling growth reaches.
    let mut src = [0u8; 8192];
    fill(8, &mut src);
    let mut ext = run.step("Ring::extendable", || ring.extendable(0));
    let pin = run
        .step("Ring::fixed", || ring.fixed(40))
        .map(|b| filled(b, 1, 40));
    for (j, &n) in [30, 200, 500, 900].iter().enumerate() {
        let what = if j % 2 == 0 {
            "ExtBuf::extend_from_slice"
        } else {
            "ExtBuf::reserve"
        };
        run.step_on(what, &mut ext, |e| {
            let len = e.len();
            let r = catch(|| {
                if j % 2 == 0 {
                    e.extend_from_slice(&src[len..len + n]);
                } else {
                    e.reserve(n);
                    e.try_extend_from_slice(&src[len..len + n]).unwrap();
                }
            });
            match r {
                Ok(()) => Some(()),
                Err(p) => {
                    ensure(
                        message(&*p).starts_with("ringmem: ExtBuf cannot grow"),
                        || format!("panicked with {:?}", message(&*p)),
                    );
                    ensure(e.len() == len, || {
                        "a failed growth changed the length".into()
                    });
                    None
                }
            }
        });
        if let Some(e) = &ext {
            check_prefix(what, e, &src);
        }
    }
    #[cfg(feature = "bytes")]
    {
        use bytes::BufMut;
        for &n in &[100, 400] {
            run.step_on("BufMut::put_slice on ExtBuf", &mut ext, |e| {
                let len = e.len();
                match catch(|| e.put_slice(&src[len..len + n])) {
                    Ok(()) => Some(()),
                    Err(_) => {
                        ensure(e.len() == len, || "a failed put changed the length".into());
                        None
                    }
                }
            });
            run.step_on("BufMut::put (a Buf) on ExtBuf", &mut ext, |e| {
                let len = e.len();
                // `put` writes chunk by chunk: a failure may keep a prefix.
                catch(|| e.put(&src[len..len + n])).ok()
            });
            run.step_on("BufMut::chunk_mut on a full ExtBuf", &mut ext, |e| {
                let len = e.len();
                // Fill the spare capacity so `chunk_mut` must grow.
                let cap = e.capacity();
                ensure(cap <= src.len(), || {
                    format!("capacity {cap}: src too short")
                });
                e.try_extend_from_slice(&src[len..cap]).unwrap();
                catch(|| e.chunk_mut().len()).ok().filter(|&n| n > 0)
            });
            if let Some(e) = &ext {
                check_prefix("BufMut on ExtBuf", e, &src);
            }
        }
    }
    if let Some(e) = ext {
        let f = no_alloc("ExtBuf::finalize", || e.finalize());
        check_prefix("ExtBuf::finalize", &f, &src);
    }
    drop(pin);
    settle("ExtBuf, panicking forms", ring);
}

/// A 64-byte, 64-aligned element.
#[repr(align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

fn line(id: u64) -> Line {
    let mut l = Line([0; 64]);
    fill(id, &mut l.0);
    l
}

/// `Ring::typed` for word-sized and over-aligned `T`, within and beyond the ring, and
/// zero-sized `T`; `push` until full.
fn typed_scenario(run: &mut Run, ring: &Ring) {
    let mut words = run.step("Ring::typed::<u64>", || ring.typed::<u64>(20));
    let mut lines = run.step("Ring::typed::<Line>", || ring.typed::<Line>(4));
    let mut many = run.step("Ring::typed::<u64> (larger than the ring)", || {
        ring.typed::<u64>(300)
    });
    let mut wide = run.step("Ring::typed::<Line> (larger than the ring)", || {
        ring.typed::<Line>(40)
    });
    let zst = run.step("Ring::typed::<()>", || ring.typed::<()>(1000));
    ensure(zst.as_ref().map(|z| z.capacity()) == Some(1000), || {
        "zero-sized T needs no memory".into()
    });
    no_alloc("Ring::typed overflowing", || {
        ensure(ring.typed::<u64>(usize::MAX / 4).is_none(), String::new)
    });
    for v in [&mut words, &mut many].into_iter().flatten() {
        no_alloc("TypedBuf::push", || {
            for i in 0..v.capacity() as u64 {
                v.push(i.wrapping_mul(0x9E37_79B9)).unwrap();
            }
            ensure(v.push(0) == Err(0), || "push into a full buffer".into());
        });
    }
    for v in [&mut lines, &mut wide].into_iter().flatten() {
        ensure(v.as_ptr() as usize % 64 == 0, || "Line alignment".into());
        no_alloc("TypedBuf::push", || {
            for i in 0..v.capacity() as u64 {
                v.push(line(i)).ok().unwrap();
            }
            ensure(v.push(line(0)).is_err(), || {
                "push into a full buffer".into()
            });
        });
    }
    for v in [&words, &many].into_iter().flatten() {
        ensure(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9)),
            || "a typed buffer lost its values".into(),
        );
    }
    for v in [&lines, &wide].into_iter().flatten() {
        ensure(
            v.iter().enumerate().all(|(i, l)| holds(i as u64, &l.0)),
            || "a typed buffer lost its values".into(),
        );
    }
    drop((words, lines, many, wide, zst));
    settle("Ring::typed", ring);
}

#[test]
fn sweep_fixed() {
    for policy in POLICIES {
        let points = sweep(
            &format!("Ring::fixed, {policy:?}"),
            Refuse::Both,
            || (ring(policy), Vec::with_capacity(32)),
            |run, (ring, held)| fixed_scenario(run, ring, held),
        );
        if policy == WhenFull::Fail {
            assert_eq!(points, 0, "a Fail ring allocates nothing once built");
        } else {
            assert!(points > 0, "{policy:?}: the requests larger than the ring");
        }
    }
}

#[test]
fn sweep_extendable_growth() {
    for policy in POLICIES {
        let points = sweep(
            &format!("Ring::extendable and ExtBuf growth, {policy:?}"),
            Refuse::Both,
            || ring(policy),
            |run, ring| extendable_scenario(run, ring),
        );
        assert_eq!(points == 0, policy == WhenFull::Fail, "{policy:?}");
    }
}

#[test]
fn sweep_extendable_growth_panicking_forms() {
    for policy in POLICIES {
        // A `Fail` ring allocates nothing, and its full ring makes these forms panic
        // without any refusal: run, not swept.
        let refuse = if policy == WhenFull::Fail {
            Refuse::Never
        } else {
            Refuse::One
        };
        sweep(
            &format!("ExtBuf::reserve, extend_from_slice, BufMut, {policy:?}"),
            refuse,
            || ring(policy),
            |run, ring| extendable_panicking_scenario(run, ring),
        );
    }
}

#[test]
fn sweep_typed() {
    for policy in POLICIES {
        let points = sweep(
            &format!("Ring::typed and push, {policy:?}"),
            Refuse::Both,
            || ring(policy),
            |run, ring| typed_scenario(run, ring),
        );
        assert_eq!(points == 0, policy == WhenFull::Fail, "{policy:?}");
    }
}

// ---------------------------------------------------------------------------------------
// The codec pool
// ---------------------------------------------------------------------------------------

/// Appends `n` bytes to the message with the fallible form, then writes the pattern of
/// `id` over the whole message; on failure checks the message is unchanged.
fn piece<B: Buffer>(buf: &mut B, id: u64, n: usize) -> Option<()> {
    let before = buf.len();
    match buf.try_get_writable(n) {
        Ok(bytes) => {
            let zeroed = bytes.len() == n && bytes.iter().all(|&b| b == 0);
            ensure(zeroed, || format!("{n} zeroed bytes"));
            fill(id, buf.get_data_by_ref(usize::MAX));
            Some(())
        }
        Err(WritableError { requested, written }) => {
            ensure(requested == n && written == before, || {
                format!("error ({requested}, {written}) for {n} after {before}")
            });
            ensure(
                buf.len() == before && holds(id, buf.get_data_by_ref_(usize::MAX)),
                || "a refused piece changed the message".into(),
            );
            None
        }
    }
}

/// Messages of a header and a payload, some larger than the ring (the heap fallback,
/// or the ring's own policy), handed over and kept, the older ones dropped as it goes.
fn pool_scenario<B: Buffer>(
    run: &mut Run,
    pool: &mut BufferPool<B>,
    slices: &mut Vec<(u64, Slice)>,
) {
    let payloads = [10, 100, 500, 2000, 30, 700, 0, 1200, 64];
    for (i, &payload) in payloads.iter().enumerate() {
        let id = i as u64;
        run.step("BufferPool::try_get_writable (header)", || {
            piece(pool, id, 6)
        });
        run.step("BufferPool::try_get_writable (payload)", || {
            piece(pool, id, payload)
        });
        let msg = no_alloc("BufferPool::get_data_owned", || pool.get_data_owned());
        ensure(holds(id, &msg) && pool.is_empty(), || {
            format!("message {id} handed over")
        });
        keep(slices, id, msg);
        check_held("BufferPool slices", slices);
        if i % 3 == 2 {
            slices.retain(|(id, _)| id % 3 == 0);
        }
    }
    check_held("BufferPool slices", slices);
    slices.clear();
    if let Some(ring) = pool.ring() {
        settle("BufferPool", ring);
    }
}

#[test]
fn sweep_codec_pool() {
    for policy in POLICIES {
        sweep(
            &format!("BufferPool::try_get_writable, get_data_owned, {policy:?}"),
            Refuse::Both,
            || {
                let pool = BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0));
                (pool, Vec::with_capacity(32))
            },
            |run, (pool, slices)| pool_scenario(run, pool, slices),
        );
    }
}

#[test]
fn sweep_codec_pool_construction() {
    let points = sweep(
        "BufferPool::new, try_new",
        Refuse::Both,
        || Vec::with_capacity(32),
        |run, slices| {
            let (pool, seen) = watch(|| BufferPool::new(CAP));
            let outcome = if pool.ring().is_some() {
                Outcome::Ok
            } else {
                Outcome::Failed
            };
            // Without a ring the pool still serves, from the heap.
            run.record("BufferPool::new (its ring)", outcome, seen);
            let mut pool = pool;
            pool_scenario(run, &mut pool, slices);
            let tried = run.step("BufferPool::try_new", || match BufferPool::try_new(CAP) {
                Ok(p) => Some(p),
                Err(e) => {
                    ensure(matches!(e, RingError::OutOfMemory { .. }), || {
                        format!("{e:?}")
                    });
                    None
                }
            });
            drop(tried);
        },
    );
    assert!(
        points >= 4,
        "two rings of two allocations each, and fallbacks"
    );
}

#[test]
fn sweep_codec_system_memory() {
    sweep(
        "BufferFromSystemMemory::try_get_writable",
        Refuse::Both,
        || (BufferFromSystemMemory::new(0), Vec::with_capacity(8)),
        |run, (buf, kept)| {
            for (i, &n) in [6, 100, 3000].iter().enumerate() {
                let id = i as u64;
                run.step("BufferFromSystemMemory::try_get_writable", || {
                    piece(buf, id, 6)
                });
                run.step("BufferFromSystemMemory::try_get_writable", || {
                    piece(buf, id, n)
                });
                let v = no_alloc("BufferFromSystemMemory::get_data_owned", || {
                    buf.get_data_owned()
                });
                ensure(holds(id, &v), || format!("message {id}"));
                keep(kept, id, v);
            }
            check_held("BufferFromSystemMemory", kept);
            kept.clear();
        },
    );
}

#[test]
fn sweep_codec_get_writable_panicking() {
    for policy in POLICIES {
        sweep(
            &format!("BufferPool::get_writable, {policy:?}"),
            Refuse::One,
            || BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0)),
            |run, pool| {
                for (i, &n) in [100, 2000, 700, 3000].iter().enumerate() {
                    let id = i as u64;
                    run.step("BufferPool::get_writable", || {
                        let before = pool.len();
                        match catch(|| pool.get_writable(n).len()) {
                            Ok(len) => {
                                ensure(len == n, || format!("{len} bytes for {n}"));
                                fill(id, pool.get_data_by_ref(usize::MAX));
                                Some(())
                            }
                            Err(p) => {
                                ensure(message(&*p).starts_with("ringmem: codec"), || {
                                    format!("panicked with {:?}", message(&*p))
                                });
                                ensure(pool.len() == before, || "message changed".into());
                                None
                            }
                        }
                    });
                    let msg = pool.get_data_owned();
                    ensure(holds(id, &msg), || format!("message {id}"));
                }
                if let Some(ring) = pool.ring() {
                    settle("BufferPool::get_writable", ring);
                }
            },
        );
    }
}

// ---------------------------------------------------------------------------------------
// The thread-local ring
// ---------------------------------------------------------------------------------------

/// Every `tls` function, starting on a fresh thread: `configure` (which builds the
/// thread's ring), the first use (which builds a default ring if `configure`'s was
/// refused), then each kind of buffer, larger than the ring too.
fn tls_scenario(run: &mut Run, policy: WhenFull) {
    let mut src = [0u8; 4096];
    fill(9, &mut src);
    run.step("tls::configure", || {
        match tls::configure(Ring::builder().capacity(CAP).when_full(policy)) {
            Ok(()) => Some(()),
            Err(e) => {
                // The thread then keeps the default configuration.
                let oom = matches!(e, tls::ConfigError::Invalid(RingError::OutOfMemory { .. }));
                ensure(oom, || format!("{e:?}"));
                None
            }
        }
    });
    let a = run
        .step("tls::fixed", || tls::fixed(100))
        .map(|b| filled(b, 1, 100));
    let b = run
        .step("tls::fixed (larger than the ring)", || tls::fixed(3000))
        .map(|b| filled(b, 2, 3000));
    let mut t = run.step("tls::typed", || tls::typed::<u64>(40));
    if let Some(t) = &mut t {
        no_alloc("TypedBuf::push", || {
            for i in 0..t.capacity() as u64 {
                t.push(i).unwrap();
            }
        });
    }
    const GROWTH: [usize; 3] = [50, 400, 2000];
    let mut ran = false;
    let nested_before = run.allocs_recorded();
    let (e, mut seen) = watch(|| {
        tls::extendable_with(0, |ext| {
            ran = true;
            let mut ext = Some(ext);
            for n in GROWTH {
                run.step_on("ExtBuf::try_extend_from_slice (tls)", &mut ext, |e| {
                    let len = e.len();
                    e.try_extend_from_slice(&src[len..len + n]).ok()
                });
            }
            ext.map(ExtBuf::finalize)
        })
    });
    if !ran {
        // No ring (its creation was refused): the growth steps did not happen.
        for _ in GROWTH {
            run.record(
                "ExtBuf::try_extend_from_slice (tls)",
                Outcome::Skipped,
                Watched::default(),
            );
        }
    }
    // Its own allocations only, not those of the growth steps inside.
    seen.allocs -= run.allocs_recorded() - nested_before;
    let outcome = if e.is_some() {
        Outcome::Ok
    } else {
        Outcome::Failed
    };
    run.record("tls::extendable_with", outcome, seen);
    let e = e.flatten();
    let stats = run.step("tls::with_ring", || tls::with_ring(|r| r.stats()));
    if let Some(f) = &e {
        check_prefix("tls::extendable_with", f, &src);
    }
    for (id, b) in [(1, &a), (2, &b)] {
        if let Some(b) = b {
            ensure(holds(id, b), || format!("tls buffer {id}"));
        }
    }
    if let Some(t) = &t {
        ensure(
            t.iter().enumerate().all(|(i, &x)| x == i as u64),
            String::new,
        );
    }
    drop((a, b, t, e));
    if stats.is_some() {
        let st = tls::with_ring(|r| r.stats()).unwrap();
        ensure(st.live_buffers == 0, || {
            format!("{st:?} after dropping all")
        });
    }
}

#[test]
fn sweep_tls() {
    for policy in POLICIES {
        let points = sweep_on_thread(
            &format!("tls::configure, fixed, typed, extendable_with, with_ring, {policy:?}"),
            Refuse::Both,
            move |run| tls_scenario(run, policy),
        );
        assert!(points >= 2, "the ring is built once, two allocations");
    }
}

// ---------------------------------------------------------------------------------------
// The `bytes` adapters
// ---------------------------------------------------------------------------------------

#[cfg(feature = "bytes")]
mod with_bytes {
    use super::*;
    use bytes::{BufMut, Bytes};

    #[test]
    fn sweep_bufmut_on_fixed() {
        for policy in POLICIES {
            sweep(
                &format!("BufMut on FixedBufMut, {policy:?}"),
                Refuse::Both,
                || ring(policy),
                |run, ring| {
                    let mut b = run.step("Ring::fixed (larger than the ring)", || ring.fixed(2000));
                    if let Some(b) = &mut b {
                        no_alloc("BufMut on FixedBufMut", || {
                            b.put_u16(0xabcd);
                            b.put_slice(b"xyz");
                            b.put_bytes(7, 10);
                        });
                        ensure(
                            b[..] == *b"\xab\xcdxyz\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07",
                            String::new,
                        );
                    }
                    let mut small = ring.fixed(64).map(|b| filled(b, 3, 0));
                    if let Some(s) = &mut small {
                        no_alloc("BufMut on FixedBufMut", || s.put_u64_le(5));
                        ensure(s[..] == 5u64.to_le_bytes(), String::new);
                    }
                    drop((b, small));
                    settle("BufMut on FixedBufMut", ring);
                },
            );
        }
    }

    /// Converts buffers of every kind (ring and heap regions) into `Bytes`: counted and
    /// leak-checked, not refused (`Bytes::from_owner` boxes infallibly).
    #[test]
    fn bytes_from_buffers_count_and_leak_nothing() {
        for policy in POLICIES {
            let points = sweep(
                &format!("Bytes::from(FixedBuf, FixedBufMut, Slice), {policy:?}"),
                Refuse::Never,
                || BufferPool::from_ring(ring(policy), BufferFromSystemMemory::new(0)),
                |run, pool| {
                    let ring = pool.ring().unwrap();
                    for (id, n) in [(1u64, 100), (2, 3000)] {
                        let Some(b) = run.step("Ring::fixed", || ring.fixed(n)) else {
                            continue;
                        };
                        let b = filled(b, id, n);
                        let at = b.as_ptr();
                        let frozen = b.freeze();
                        let copy = frozen.clone();
                        let bytes = run.step("Bytes::from(FixedBuf)", || Some(Bytes::from(frozen)));
                        let bytes = bytes.unwrap();
                        ensure(bytes.as_ptr() == at && holds(id, &bytes), || {
                            "no copy".into()
                        });
                        let b = filled(ring.fixed(n).unwrap(), id, n);
                        let again = run.step("Bytes::from(FixedBufMut)", || Some(Bytes::from(b)));
                        let again = again.unwrap();
                        ensure(holds(id, &again) && holds(id, &copy), String::new);
                        drop((bytes, again, copy));
                    }
                    settle("Bytes::from", ring);
                    for (id, n) in [(3u64, 100), (4, 5000)] {
                        pool.get_writable(n);
                        fill(id, pool.get_data_by_ref(usize::MAX));
                        let slice = pool.get_data_owned();
                        let what = if slice.is_ring() {
                            "Bytes::from(Slice) (ring)"
                        } else {
                            "Bytes::from(Slice) (heap)"
                        };
                        let bytes = run.step(what, || Some(Bytes::from(slice))).unwrap();
                        ensure(holds(id, &bytes), String::new);
                    }
                    settle("Bytes::from(Slice)", pool.ring().unwrap());
                },
            );
            assert!(points >= 2, "{policy:?}: a control block per conversion");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Refusals while the ring itself is built, combined with every operation
// ---------------------------------------------------------------------------------------

/// The scenarios above with the ring built inside the swept run, so that refusals also
/// hit `Ring::builder().build()` (its block and its list of blocks) and every later
/// operation of a ring that then does not exist.
#[test]
fn sweep_with_the_ring_built_under_refusal() {
    for policy in POLICIES {
        let build = move || Ring::builder().capacity(CAP).when_full(policy).build();
        let checked = move |r: Result<Ring, RingError>| match r {
            Ok(ring) => Some(ring),
            Err(e) => {
                ensure(matches!(e, RingError::OutOfMemory { .. }), || {
                    format!("{e:?}")
                });
                None
            }
        };
        sweep(
            &format!("Ring::builder().build() and every operation, {policy:?}"),
            Refuse::Both,
            || Vec::with_capacity(32),
            |run, held| {
                let Some(ring) = run.step("Ring::builder().build()", || checked(build())) else {
                    return;
                };
                fixed_scenario(run, &ring, held);
                extendable_scenario(run, &ring);
                typed_scenario(run, &ring);
            },
        );
        sweep(
            &format!("BufferPool::from_ring(build()), {policy:?}"),
            Refuse::Both,
            || Vec::with_capacity(32),
            |run, slices| {
                let Some(ring) = run.step("Ring::builder().build()", || checked(build())) else {
                    return;
                };
                let mut pool = BufferPool::from_ring(ring, BufferFromSystemMemory::new(0));
                pool_scenario(run, &mut pool, slices);
            },
        );
    }
}

// ---------------------------------------------------------------------------------------
// Regressions found by the sweep
// ---------------------------------------------------------------------------------------

/// `io::Write` on an `ExtBuf` that a full ring cannot grow fails with `StorageFull`;
/// that error must not itself allocate (a boxed message), or the failure path aborts exactly
/// when the heap is refusing.
#[test]
fn ext_write_error_allocates_nothing() {
    no_leak("ExtBuf io::Write error", || {
        let ring = ring(WhenFull::Fail);
        let mut ext = ring.extendable(0).unwrap();
        let room = CAP - 8;
        ext.try_extend_from_slice(&ZEROS[..room]).unwrap();
        let (err, n) = {
            let before = faulty::served();
            let err = ext.write(&[1]).unwrap_err();
            (err, faulty::served() - before)
        };
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(n, 0, "the error allocated {n} times");
        let before = faulty::served();
        let err = ext.write_all(&[1; 10]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(faulty::served(), before);
        assert_eq!(ext.len(), room);
    });
}
