//! The ring and its buffers: allocation walk, policies, handles, bad input.

mod common;

use std::cell::Cell;
use std::io::Write;
use std::rc::Rc;

use common::{assert_disjoint, fill, holds, scaled};
use ringmem::{FixedBufMut, Ring, RingError, WhenFull};

#[test]
fn fixed_write_read_and_capacity() {
    let ring = Ring::new(1024);
    let mut b = ring.fixed(10).unwrap();
    assert_eq!((b.len(), b.capacity(), b.spare()), (0, 16, 16));
    b.write_all(b"0123456789").unwrap();
    assert_eq!(&b[..], b"0123456789");
    // A full buffer refuses more through io::Write.
    b.write_all(b"abcdef").unwrap();
    let err = b.write_all(b"x").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WriteZero);
    b.truncate(3);
    assert_eq!(&b[..], b"012");
    b[0] = b'x';
    assert_eq!(&b[..], b"x12");
    b.clear();
    assert!(b.is_empty());
}

#[test]
fn bad_input_is_refused_cleanly() {
    assert_eq!(Ring::try_new(0).unwrap_err(), RingError::ZeroCapacity);
    assert!(matches!(
        Ring::try_new(usize::MAX),
        Err(RingError::TooLarge { .. })
    ));
    assert!(std::panic::catch_unwind(|| Ring::new(0)).is_err());
    let ring = Ring::new(256);
    assert!(ring.fixed(0).is_none());
    assert!(ring.fixed(usize::MAX).is_none());
    assert!(ring.fixed(usize::MAX / 2).is_none());
    assert!(ring.fixed(257).is_none());
    assert!(ring.extendable(usize::MAX).is_none());
    assert!(ring.typed::<u64>(usize::MAX / 4).is_none());
    assert!(ring.typed::<u64>(0).is_none());
    #[repr(align(8192))]
    struct Huge(#[allow(dead_code)] u8);
    assert!(ring.typed::<Huge>(1).is_none());
    // Nothing was leaked by the refusals.
    assert_eq!(ring.stats().live_buffers, 0);
    let heap = Ring::builder()
        .capacity(64)
        .when_full(WhenFull::Heap)
        .build()
        .unwrap();
    assert!(heap.fixed(usize::MAX).is_none());
    let grow = Ring::builder()
        .capacity(64)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    assert!(grow.fixed(usize::MAX).is_none());
    assert!(grow.typed::<u32>(usize::MAX / 2).is_none());
}

#[test]
fn tiny_ring_capacities_work_or_refuse() {
    for cap in 1..64 {
        let ring = Ring::new(cap);
        assert_eq!(ring.capacity() % 8, 0);
        let room = ring.capacity().saturating_sub(8);
        for n in 1..=70 {
            let b = ring.fixed(n);
            assert_eq!(b.is_some(), n <= room, "cap {cap} n {n}");
        }
    }
}

#[test]
fn fills_then_refuses_then_reuses() {
    let ring = Ring::new(8 * (8 + 64));
    let mut held: Vec<_> = (0..8).map(|_| ring.fixed(64).unwrap()).collect();
    assert!(ring.fixed(1).is_none(), "the ring is exactly full");
    held.remove(3);
    // After a full lap, up to 16 requests look at the oldest region only.
    let again = (0..=16)
        .find_map(|_| ring.fixed(64))
        .expect("the freed region is reused");
    held.push(again);
    assert_eq!(ring.stats().live_buffers, 8);
    let ranges = held
        .iter()
        .map(|b| (b.as_ptr() as usize, b.capacity()))
        .collect();
    assert_disjoint(ranges);
}

#[test]
fn wraps_splits_and_merges() {
    let ring = Ring::new(1024);
    for round in 0..scaled(2000) {
        let sizes = [8usize, 24, 100, 200, 40, 512, 16];
        let n = sizes[round % sizes.len()];
        let small: Vec<_> = (0..3).map(|_| ring.fixed(8).unwrap()).collect();
        drop(small);
        // A larger buffer must fit after the small ones free: merging works.
        let mut big = ring.fixed(n).expect("merged free space serves it");
        fill(round as u64, &mut vec![0; n]);
        big.try_extend_from_slice(&vec![round as u8; n]).unwrap();
        assert!(big.iter().all(|&b| b == round as u8));
    }
    assert_eq!(ring.stats().live_buffers, 0);
    // After all that churn the whole ring merges back into one buffer.
    assert!(ring.fixed(1024 - 8).is_some());
}

#[test]
fn a_long_lived_buffer_does_not_stall_the_ring() {
    let ring = Ring::new(4096);
    let mut pinned = ring.fixed(100).unwrap();
    pinned.try_extend_from_slice(b"pinned").unwrap();
    for lap in 0..scaled(10_000) {
        let mut b = ring
            .fixed(500)
            .unwrap_or_else(|| panic!("stalled at lap {lap}"));
        b.try_extend_from_slice(&[lap as u8; 500]).unwrap();
        let (p, len) = (pinned.as_ptr() as usize, pinned.capacity());
        assert_disjoint(vec![(p, len), (b.as_ptr() as usize, b.capacity())]);
    }
    assert_eq!(&pinned[..], b"pinned");
}

/// The highest byte past the first buffer that a FIFO of `live` buffers of `size`
/// bytes reaches in `ring` over `n` messages, built by `make`.
fn reach<'r, B: std::ops::Deref<Target = [u8]> + 'r>(
    live: usize,
    n: usize,
    mut make: impl FnMut() -> B,
) -> usize {
    let mut queue = std::collections::VecDeque::new();
    let (mut lo, mut hi) = (usize::MAX, 0);
    for _ in 0..n {
        if queue.len() == live {
            queue.pop_front();
        }
        let b = make();
        lo = lo.min(b.as_ptr() as usize);
        hi = hi.max(b.as_ptr() as usize + b.len());
        queue.push_back(b);
    }
    hi - lo
}

#[test]
fn released_memory_is_reused_before_untouched_memory() {
    // 16 live buffers of 4 KiB (64 KiB) in a 4 MiB ring: the ring wraps to the
    // released space at its start instead of touching all of its pages.
    const RING: usize = 4 << 20;
    let n = scaled(4_000);
    let ring = Ring::new(RING);
    let fixed = reach(16, n, || {
        let mut b = ring.fixed(4096).unwrap();
        b.try_extend_from_slice(&[7; 4096]).unwrap();
        b
    });
    let ring = Ring::new(RING);
    let ext = reach(16, n, || {
        let mut b = ring.extendable(0).unwrap();
        for _ in 0..64 {
            b.write_all(&[9; 64]).unwrap();
        }
        b
    });
    for (what, reach) in [("fixed", fixed), ("extendable", ext)] {
        assert!(
            reach < 512 << 10,
            "{what}: {n} messages reached {reach} bytes of a {RING}-byte ring"
        );
    }
}

/// Buffers of `size` bytes claimed until the ring has no room (or `most` of them),
/// each filled with its id, from `first` on. A plain claim may look at a few regions
/// only: a failed one is tried again with a walk of the whole ring, as a waiting claim
/// makes it.
fn fill_up(ring: &Ring, size: usize, first: u64, most: usize) -> Vec<(u64, FixedBufMut)> {
    let zero = std::time::Duration::ZERO;
    std::iter::from_fn(|| (ring.fixed(size)).or_else(|| ring.fixed_wait_timeout(size, zero).ok()))
        .take(most)
        .zip(first..)
        .map(|(mut b, id)| {
            b.try_extend_from_slice(&vec![0; size]).unwrap();
            fill(id, &mut b);
            (id, b)
        })
        .collect()
}

/// Asserts that `held`'s buffers do not overlap and each holds what its id filled it with.
fn assert_intact(held: &[(u64, FixedBufMut)]) {
    assert_disjoint(
        held.iter()
            .map(|(_, b)| (b.as_ptr() as usize, b.len()))
            .collect(),
    );
    for (id, b) in held {
        assert!(holds(*id, b), "buffer {id} changed");
    }
}

/// After a spike, `give_back_pages` keeps the buffers still held (scattered over the
/// memory the spike touched, some past the new bound) intact, and later claims lap the
/// memory below the bound instead of the spike's pages; when the ring has no room
/// below it, claims go past it again, into the pages given back, and every byte they
/// hand out is theirs.
#[test]
fn pages_given_back_after_a_spike_keep_what_is_held() {
    const RING: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
    const SIZE: usize = 4000;
    let ring = Ring::new(RING);
    let spike: Vec<_> = std::iter::from_fn(|| ring.fixed(SIZE))
        .take(scaled(1000))
        .collect();
    let (lo, count) = (spike[0].as_ptr() as usize, spike.len());
    // Every 64th held on (four of them past the bound), the rest released.
    let mut kept: Vec<_> = (spike.into_iter().enumerate())
        .filter(|(i, _)| i % 64 == 0)
        .map(|(i, mut b)| {
            b.try_extend_from_slice(&[0; SIZE]).unwrap();
            fill(i as u64, &mut b);
            (i as u64, b)
        })
        .collect();
    let given = ring.give_back_pages();
    if cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri))) {
        // The spike touched count × 4 KB; what is held, twice over, stays below.
        assert!(
            given >= count * SIZE / 2,
            "gave back {given} bytes of {}",
            count * SIZE
        );
    }
    // Claims lap below the bound while the ring holds few buffers at a time.
    let reach = reach(4, scaled(4000), || ring.fixed(SIZE).unwrap());
    let bound = 2 * kept.len() * (SIZE + 8) + SIZE;
    assert!(
        reach <= bound.max(64 << 10) + 2 * SIZE,
        "claims reached {reach} bytes past the bound, {bound}"
    );
    // Fill the whole ring: past the bound, into the pages given back.
    // (A plain claim may look at a few regions only: a failed one is tried again
    // with a walk of the whole ring, as a waiting claim makes it.)
    let more = fill_up(&ring, SIZE, 1_000_000, usize::MAX);
    let held = more.len() + kept.len();
    assert!(
        held >= count,
        "the ring lost room: {held} buffers, {count} before"
    );
    kept.extend(more);
    assert_intact(&kept);
    assert!(kept.iter().all(|(_, b)| b.as_ptr() as usize >= lo));
    drop(kept);
    assert_eq!(ring.stats().live_buffers, 0);
}

/// Buffers still held past where `give_back_pages` moves the bound of the memory
/// handed out keep their pages; once released, the next call gives those pages back
/// (it used to take only pages below the bound, so they stayed resident for good),
/// and claims still get every byte of the ring.
#[test]
fn pages_held_past_the_bound_go_back_once_released() {
    const RING: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
    const SIZE: usize = 4000;
    let ring = Ring::new(RING);
    let mut spike: Vec<_> = std::iter::from_fn(|| ring.fixed(SIZE)).collect();
    let count = spike.len();
    // The last few held on and written, the rest released.
    let tail: Vec<_> = (spike.split_off(count - 4).into_iter())
        .map(|mut b| {
            b.try_extend_from_slice(&[7; SIZE]).unwrap();
            b
        })
        .collect();
    drop(spike);
    ring.give_back_pages(); // the bound moves below the tail, which stays
    let released = tail.len() * SIZE;
    drop(tail);
    let given = ring.give_back_pages();
    if cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri))) {
        assert!(
            given >= released / 2,
            "gave back {given} bytes of the {released} released past the bound"
        );
    }
    assert_eq!(ring.give_back_pages(), 0, "nothing more to give back");
    refill(&ring, SIZE, count);
}

/// Fills `ring` with buffers of `size` bytes: at least `count` fit, as many as before
/// its pages went back, each its own; then empties it.
fn refill(ring: &Ring, size: usize, count: usize) {
    let held = fill_up(ring, size, 0, count + 1);
    assert!(
        held.len() >= count,
        "{} buffers, {count} before",
        held.len()
    );
    assert_intact(&held);
    drop(held);
    assert_eq!(ring.stats().live_buffers, 0);
}

/// `give_back_pages` with the claims' head inside the run of free regions it makes one
/// region (a header no more): later claims start from a region boundary and hand out
/// disjoint room, instead of splitting a stale header whose span reaches over the new
/// run's header (where pages given back read as zeros: a walk of span-0 headers).
#[test]
fn pages_given_back_with_the_head_inside_a_free_run() {
    const RING: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
    const SIZE: usize = 4000;
    let ring = Ring::new(RING);
    // A spike moves the edge of the memory handed out to the block end.
    let spike: Vec<_> = std::iter::from_fn(|| ring.fixed(SIZE)).collect();
    let (lo, count) = (spike[0].as_ptr() as usize - 8, spike.len());
    drop(spike);
    // Small claims until one lands at the block start, and one more after it: the
    // head is then a few headers in, below the bound, inside what is all free.
    let mut small: Vec<_> = Vec::new();
    while small.last().map(|b: &FixedBufMut| b.as_ptr() as usize - 8) != Some(lo) {
        small.push(ring.fixed(64).expect("the small claims lap to the start"));
        assert!(small.len() <= RING / 72, "no claim came back to the start");
    }
    small.push(ring.fixed(64).unwrap());
    drop(small);
    ring.give_back_pages();
    refill(&ring, SIZE, count);
}

/// A `Grow` ring gives a spike's free pages back by itself, once claims that walk go on
/// a second later (`Ring::give_back_if_due`), counts them, and goes on serving.
#[test]
fn a_grow_ring_gives_a_spikes_pages_back_by_itself() {
    const RING: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
    const SIZE: usize = 4000;
    let claims = if cfg!(miri) { 2_000 } else { 100_000 };
    let ring = Ring::builder()
        .capacity(RING)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    let spike = fill_up(&ring, SIZE, 0, RING / SIZE * 3 / 4);
    let touched = spike.len() * SIZE;
    drop(spike);
    // A queue of a few buffers: its claims walk once a lap at least.
    let queue = |ring: &Ring| reach(4, claims, || ring.fixed(SIZE).unwrap());
    queue(&ring); // the first look at the time
    assert_eq!(
        ring.counters().bytes_given_back,
        0,
        "before a second passed"
    );
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    queue(&ring);
    let given = ring.counters().bytes_given_back as usize;
    if cfg!(all(target_os = "linux", target_arch = "x86_64", not(miri))) {
        assert!(given >= touched / 2, "gave back {given} of {touched} bytes");
    }
    assert_eq!(ring.stats().blocks, 1);
    assert_eq!(ring.stats().live_buffers, 0);
}

/// `Ring::counters`: a wait counts once however often its future is polled, whether
/// it ends with room or times out; a claim served at once and one no release could
/// serve count nothing; pages given back add up.
#[test]
fn counters_count_each_wait_once() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut ring = Ring::new(256);
    let held = ring.fixed(200).unwrap();
    assert!(
        ring.fixed_wait(1000).is_err(),
        "no release makes room: no wait"
    );
    assert!(ring.fixed_wait(8).is_ok(), "room now: no wait");
    let zero = std::time::Duration::ZERO;
    assert!(ring.fixed_wait_timeout(100, zero).is_err());
    assert_eq!(ring.counters().waits, 1, "a wait that timed out");
    let mut held = Some(held);
    {
        let mut wait = ring.fixed_async(100);
        let mut polls = 0;
        let buf = loop {
            polls += 1;
            if polls == 4 {
                drop(held.take());
            }
            let poll = std::pin::Pin::new(&mut wait).poll(&mut Context::from_waker(&waker));
            if let Poll::Ready(buf) = poll {
                break buf.unwrap();
            }
            assert!(polls < 100, "the future never got its room");
        };
        assert!(polls >= 4, "served before the release, after {polls} polls");
        drop(buf);
    }
    assert_eq!(ring.counters().waits, 2, "one wait over many polls");
    let big = ring.fixed(200).unwrap();
    let waiter = std::thread::scope(|s| {
        let release = s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(big);
        });
        let buf = ring.fixed_wait(200).map(drop);
        release.join().unwrap();
        buf
    });
    assert!(waiter.is_ok());
    assert_eq!(ring.counters().waits, 3, "a blocking wait");
    assert_eq!(
        ring.counters().bytes_given_back,
        ring.give_back_pages() as u64
    );
}

#[test]
fn policies_when_full() {
    let fail = Ring::builder().capacity(128).build().unwrap();
    let _a = fail.fixed(100).unwrap();
    assert!(fail.fixed(100).is_none());

    let heap = Ring::builder()
        .capacity(128)
        .when_full(WhenFull::Heap)
        .build()
        .unwrap();
    let mut a = heap.fixed(100).unwrap();
    let mut b = heap.fixed(100).unwrap();
    a.try_extend_from_slice(&[1; 100]).unwrap();
    b.try_extend_from_slice(&[2; 100]).unwrap();
    assert_eq!(heap.stats().heap_fallbacks, 1);
    assert_eq!(
        heap.stats().live_buffers,
        1,
        "heap buffers live outside the ring"
    );
    let fb = b.freeze();
    let fb2 = fb.clone();
    std::thread::spawn(move || assert!(fb2.iter().all(|&x| x == 2)))
        .join()
        .unwrap();
    drop(fb);
    assert!(a.iter().all(|&x| x == 1));

    let grow = Ring::builder()
        .capacity(128)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    let held: Vec<_> = (0..10).map(|_| grow.fixed(100).unwrap()).collect();
    assert_eq!(grow.stats().blocks, 10);
    drop(held);
    let _again: Vec<_> = (0..10).map(|_| grow.fixed(100).unwrap()).collect();
    assert!(
        grow.stats().blocks <= 10,
        "drained blocks are reused (or given back), none added"
    );
    let big = grow.fixed(10_000).expect("a block large enough is added");
    assert!(big.capacity() >= 10_000);
}

#[test]
fn frozen_buffers_share_and_slice() {
    let ring = Ring::new(4096);
    let mut b = ring.fixed(11).unwrap();
    b.write_all(b"hello world").unwrap();
    let f = b.freeze();
    let hello = f.slice(..5);
    let world = f.slice(6..);
    assert_eq!(&hello[..], b"hello");
    assert_eq!(&world[..], b"world");
    assert_eq!(f.slice(11..).len(), 0);
    assert!(std::panic::catch_unwind(|| f.slice(3..12)).is_err());
    assert!(std::panic::catch_unwind(|| f.slice(std::ops::Range { start: 4, end: 3 })).is_err());
    drop(f);
    assert_eq!(ring.stats().live_buffers, 1);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let w = world.clone();
            std::thread::spawn(move || assert_eq!(&w[..], b"world"))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    drop((hello, world));
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn extendable_grows_in_place_and_keeps_its_lock() {
    let ring = Ring::new(8192);
    let mut ext = ring.extendable(0).unwrap();
    let start = ext.as_ptr();
    ext.write_all(&[1; 64]).unwrap();
    let first = ext.as_ptr();
    ext.write_all(&[2; 1000]).unwrap();
    assert_eq!(ext.as_ptr(), first, "grew in place");
    assert_eq!(start, first);
    // While it lives, the ring serves others, and never inside the grown region.
    let other = ring.fixed(64).unwrap();
    let (e, c) = (ext.as_ptr() as usize, ext.capacity());
    assert_disjoint(vec![(e, c), (other.as_ptr() as usize, other.capacity())]);
    // The other buffer blocks in-place growth, so it moves, keeping its bytes.
    ext.write_all(&[3; 4000]).unwrap();
    assert_eq!(ext.len(), 5064);
    assert!(ext[..64].iter().all(|&b| b == 1));
    assert!(ext[64..1064].iter().all(|&b| b == 2));
    assert!(ext[1064..].iter().all(|&b| b == 3));
    let fixed = ext.finalize();
    assert_eq!(fixed.capacity(), 5064);
    assert_eq!(ring.stats().live_buffers, 2);
    let t = std::thread::spawn(move || fixed.len());
    assert_eq!(t.join().unwrap(), 5064);
}

#[test]
fn extendable_out_of_room_fails_cleanly() {
    let ring = Ring::new(512);
    let mut ext = ring.extendable(0).unwrap();
    let err = ext.write_all(&[9; 1000]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
    assert!(ext.len() <= 504);
    assert!(ext.iter().all(|&b| b == 9));
    assert!(ext.try_reserve(usize::MAX).is_err());
    assert!(
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ext.reserve(10_000))).is_err()
    );
}

#[test]
fn finalize_returns_unused_capacity() {
    let ring = Ring::new(1024);
    let mut ext = ring.extendable(900).unwrap();
    ext.extend_from_slice(b"abc");
    let buf = ext.finalize();
    assert_eq!(buf.capacity(), 8);
    let rest = ring
        .fixed(1024 - 16 - 8)
        .expect("the trimmed tail is free again");
    drop((buf, rest));
}

#[test]
fn typed_buffers_drop_elements_exactly_once() {
    struct Counted<'a>(&'a Cell<usize>, #[allow(dead_code)] u64);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }
    let drops = Cell::new(0);
    let ring = Ring::new(4096);
    {
        let mut v = ring.typed::<Counted>(4).unwrap();
        assert_eq!(v.capacity(), 4);
        for i in 0..4 {
            assert!(v.push(Counted(&drops, i)).is_ok());
        }
        let back = v.push(Counted(&drops, 9)).unwrap_err();
        assert_eq!(back.1, 9);
        drop(back);
        assert_eq!(drops.get(), 1);
        let back = v.insert(0, Counted(&drops, 10)).unwrap_err();
        drop(back);
        drop(v.remove(1));
        drop(v.swap_remove(0));
        drop(v.pop());
        assert_eq!(drops.get(), 5);
        assert_eq!(v.len(), 1);
    }
    assert_eq!(drops.get(), 6);
}

#[test]
fn typed_insert_remove_match_vec() {
    let ring = Ring::new(4096);
    let mut v = ring.typed::<u32>(10).unwrap();
    let mut model = Vec::new();
    let ops = [(0usize, 5u32), (0, 6), (2, 7), (1, 8), (4, 9), (9, 1)];
    for (i, x) in ops {
        let r = v.insert(i, x);
        if i <= model.len() {
            assert!(r.is_ok());
            model.insert(i, x);
        } else {
            assert_eq!(r, Err(x));
        }
        assert_eq!(&v[..], &model[..]);
    }
    assert_eq!(v.remove(2), Some(model.remove(2)));
    assert_eq!(v.swap_remove(0), Some(model.swap_remove(0)));
    assert_eq!(v.remove(100), None);
    assert_eq!(v.swap_remove(100), None);
    assert_eq!(&v[..], &model[..]);
}

#[test]
fn typed_alignment_is_honoured_and_next_header_intact() {
    #[repr(align(256))]
    #[derive(Clone, Copy)]
    struct A256([u8; 256]);
    #[repr(align(4096))]
    struct Page(#[allow(dead_code)] u8);
    let ring = Ring::new(16 * 1024);
    for i in 0..scaled(200) {
        let pad = ring.fixed(1 + i % 50).unwrap();
        let mut v = ring.typed::<A256>(3).unwrap();
        assert_eq!(v.as_ptr() as usize % 256, 0);
        for k in 0..3 {
            v.push(A256([k; 256])).ok().unwrap();
        }
        let after = ring.fixed(8).unwrap();
        // The typed buffer's last byte and the next buffer do not overlap.
        let end = v.as_ptr() as usize + 3 * 256;
        assert!(after.as_ptr() as usize >= end || (after.as_ptr() as usize) < v.as_ptr() as usize);
        assert!(v
            .iter()
            .enumerate()
            .all(|(k, a)| a.0.iter().all(|&b| b == k as u8)));
        let p = ring.typed::<Page>(1).unwrap();
        assert_eq!(p.as_ptr() as usize % 4096, 0);
        drop((pad, after, p));
    }
}

#[test]
fn zero_sized_types_take_no_memory() {
    let ring = Ring::new(64);
    let mut v = ring.typed::<()>(1_000_000).unwrap();
    for _ in 0..1000 {
        v.push(()).unwrap();
    }
    assert_eq!(v.len(), 1000);
    assert_eq!(ring.stats().live_buffers, 0);
    struct Zst;
    static DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    impl Drop for Zst {
        fn drop(&mut self) {
            DROPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let mut z = ring.typed::<Zst>(3).unwrap();
    for _ in 0..3 {
        assert!(z.push(Zst).is_ok());
    }
    assert!(z.push(Zst).is_err());
    drop(z);
    assert_eq!(DROPS.load(std::sync::atomic::Ordering::Relaxed), 4);
}

#[test]
fn typed_panicking_drop_still_releases() {
    struct Boom(bool);
    impl Drop for Boom {
        fn drop(&mut self) {
            if self.0 {
                panic!("boom");
            }
        }
    }
    let ring = Ring::new(1024);
    let mut v = ring.typed::<Boom>(3).unwrap();
    v.push(Boom(false)).ok().unwrap();
    v.push(Boom(true)).ok().unwrap();
    v.push(Boom(false)).ok().unwrap();
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(v))).is_err());
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn ring_dropped_while_buffers_live_elsewhere() {
    for policy in [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow] {
        let ring = Ring::builder()
            .capacity(1024)
            .when_full(policy)
            .build()
            .unwrap();
        let mut bufs = Vec::new();
        for i in 0..20u64 {
            if let Some(mut b) = ring.fixed(64) {
                let mut data = [0u8; 64];
                fill(i, &mut data);
                b.try_extend_from_slice(&data).unwrap();
                bufs.push((i, b.freeze()));
            }
        }
        drop(ring);
        let handles: Vec<_> = bufs
            .chunks(5)
            .map(|c| {
                let c = c.to_vec();
                std::thread::spawn(move || {
                    for (i, b) in c {
                        assert!(holds(i, &b));
                    }
                })
            })
            .collect();
        drop(bufs);
        handles.into_iter().for_each(|h| h.join().unwrap());
    }
}

#[test]
fn ring_is_send_and_moves_between_threads() {
    let ring = Ring::new(1024);
    let b = ring.fixed(8).unwrap();
    let ring = std::thread::spawn(move || {
        let c = ring.fixed(8).unwrap();
        drop(c);
        ring
    })
    .join()
    .unwrap();
    drop(b);
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn stats_track_use() {
    let ring = Ring::new(4096);
    let a = ring.fixed(100).unwrap();
    let b = ring.typed::<u64>(10).unwrap();
    let s = ring.stats();
    assert_eq!(
        (s.live_buffers, s.bytes_in_use, s.capacity, s.blocks),
        (2, 112 + 88, 4096, 1)
    );
    drop((a, b));
    assert_eq!(ring.stats().bytes_in_use, 0);
}

#[test]
fn typed_is_send_only_for_send_values() {
    fn is_send<T: Send>(_: &T) {}
    let ring = Ring::new(1024);
    let v = ring.typed::<u8>(1).unwrap();
    is_send(&v);
    let r = ring.typed::<Rc<u8>>(1).unwrap();
    drop(r);
}

/// What `None` promises (see `Ring`'s docs): the oldest region is still live and the
/// regions looked at had no room. A region released out of order is found within
/// 8 × (regions / 4 + 1) requests (the scan goes on 4 regions at one request in 8, and
/// starts over at the head once round); a region released at the head, by the next one.
/// And a try that finds no room costs the same whatever the number of live regions:
/// see `ringmem-failed-try` in `bench/`, which counts its instructions.
#[test]
fn none_after_a_lap_is_bounded() {
    // Regions of 128 bytes (120 and a header) tile the block: no free tail.
    let full = |ring: &Ring| {
        let mut held = Vec::new();
        while let Some(b) = ring.fixed(120) {
            held.push(b);
        }
        assert!(ring.fixed(120).is_none(), "full");
        held
    };
    let ring = Ring::new(4096);
    let mut held = full(&ring);
    let bound = 8 * (held.len() / 4 + 1);
    drop(held.remove(held.len() / 2)); // out of order: the oldest stays live
    let tries = (1..=bound).find(|_| ring.fixed(120).is_some());
    assert!(tries.is_some(), "found within {bound} requests");
    // Not at the first request (the scan does not look there at once), so the bound is
    // what the test checks.
    assert!(tries > Some(1), "found by request {tries:?}");

    let ring = Ring::new(4096);
    let mut held = full(&ring);
    drop(held.remove(0)); // the oldest
    assert!(
        ring.fixed(120).is_some(),
        "the oldest region serves the next request"
    );

    let ring = Ring::builder()
        .capacity(4096)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    let mut held = full_grow(&ring);
    drop(held.remove(held.len() / 2));
    assert!(ring.fixed(120).is_some());
    assert_eq!(ring.stats().blocks, 1, "Grow walks before it adds a block");
}

/// Fills a one-block `Grow` ring exactly, without adding a block.
fn full_grow(ring: &Ring) -> Vec<ringmem::FixedBufMut> {
    (0..4096 / 128).map(|_| ring.fixed(120).unwrap()).collect()
}

/// A `Grow` ring gives a spike back: after many blocks' worth of live buffers are
/// released, steady traffic of less than a block moves back to the first block and the
/// drained blocks go back to the system, but for one spare; `trim` returns that too.
#[test]
fn grow_gives_a_spike_back() {
    let cap = if cfg!(miri) { 1 << 14 } else { 1 << 20 };
    let ring = Ring::builder()
        .capacity(cap)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    let piece = cap / 16 - 64;
    // The spike: 64 blocks' worth live at once (64 MiB), every buffer filled.
    let blocks = scaled(64).max(3);
    let spike: Vec<_> = (0..blocks * 16)
        .map(|i| {
            let mut b = ring.fixed(piece).unwrap();
            let mut bytes = vec![0; piece];
            fill(i as u64, &mut bytes);
            b.try_extend_from_slice(&bytes).unwrap();
            b
        })
        .collect();
    assert!(ring.stats().blocks >= blocks);
    assert!(spike.iter().enumerate().all(|(i, b)| holds(i as u64, b)));
    drop(spike);
    // Steady: half a block live, oldest dropped first.
    let mut live = std::collections::VecDeque::new();
    for i in 0..scaled(2000) {
        live.push_back(ring.fixed(piece).unwrap());
        if live.len() > 8 {
            live.pop_front();
        }
        if i > 100 {
            assert!(ring.stats().blocks <= 3, "{:?}", ring.stats());
        }
    }
    let stats = ring.stats();
    assert!(
        stats.blocks <= 2,
        "the first block and one spare: {stats:?}"
    );
    drop(live);
    ring.trim();
    assert_eq!(
        ring.stats().blocks,
        1,
        "trim leaves the first (and current) block"
    );
}

/// A block made for one large buffer goes back once that buffer is released, even when
/// allocation has long since moved back to the first block and never runs out of room
/// again (a framed reader after one huge frame): the first block's laps look for it.
/// A drained block of the ring's capacity stays as the one default spare.
#[test]
fn grow_gives_back_a_large_block_released_later() {
    let cap = 1 << 14;
    let ring = Ring::builder()
        .capacity(cap)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    let big = ring.fixed(16 * cap).unwrap(); // a block of its own
    let fill: Vec<_> = (0..cap / 1024).map(|_| ring.fixed(1000).unwrap()).collect();
    let spare = ring.fixed(1000).unwrap(); // no room left: a block of the ring's size
    drop(fill); // allocation goes back to the first block
    assert_eq!(ring.stats().blocks, 3);
    let mut live = std::collections::VecDeque::new();
    let mut steady = |laps: usize| {
        for _ in 0..laps * cap / 1024 {
            live.push_back(ring.fixed(1000).unwrap());
            if live.len() > 4 {
                live.pop_front();
            }
        }
    };
    steady(scaled(200).max(4));
    assert_eq!(
        ring.stats().blocks,
        3,
        "the large buffer still pins its block"
    );
    drop((big, spare));
    steady(scaled(200).max(140));
    assert_eq!(
        ring.stats().blocks,
        2,
        "the large block went back, the spare of the ring's size stayed"
    );
}

/// A buffer claimed and dropped before the next claim (on the ring's thread or any
/// other) gives the next its bytes, still in the cache, rather than the ring's next
/// room: a loop that writes a message and drops it touches one region, not a lap.
#[test]
fn a_buffer_dropped_before_the_next_claim_gives_it_its_bytes() {
    let ring = Ring::new(1 << 20);
    let first = ring.fixed(1024).unwrap();
    let at = first.as_ptr();
    drop(first);
    for _ in 0..scaled(10_000) {
        let mut b = ring.fixed(1024).unwrap();
        assert_eq!(b.as_ptr(), at);
        b.write_all(&[7; 1024]).unwrap();
    }
    // Dropped on another thread, a frozen buffer's last clone, a shorter claim.
    let b = ring.fixed(1024).unwrap();
    std::thread::spawn(move || drop(b)).join().unwrap();
    let shared = ring.fixed(1024).unwrap().freeze();
    assert_eq!(shared.as_ptr(), at);
    let clone = shared.clone();
    drop(shared);
    let held = ring.fixed(100).unwrap();
    assert_ne!(held.as_ptr(), at, "a clone still holds it");
    drop((clone, held));
    assert_ne!(
        ring.fixed(100).unwrap().as_ptr(),
        at,
        "the latest region is the 100-byte one"
    );
    // Not a region too short for the claim: the window goes on past it.
    let small = ring.fixed(64).unwrap();
    let small_at = small.as_ptr();
    drop(small);
    let large = ring.fixed(4096).unwrap();
    assert_ne!(large.as_ptr(), small_at);
    let stats = ring.stats();
    drop(large);
    assert_eq!(stats.live_buffers, 1);
}
