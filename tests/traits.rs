//! The std traits a `bytes` user reaches for on `FixedBuf` and `FixedBufMut` (equality,
//! ordering and hashing as `[u8]`'s, `Borrow<[u8]>`, `Debug` as `b"..."`), the frozen
//! buffer's `split_to` / `split_off` / `truncate`, and `bytes::Buf` on it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use proptest::prelude::*;
use ringmem::{FixedBuf, FixedBufMut, Ring};

// ---------------------------------------------------------------------------------
// A global allocator that counts this thread's heap allocations, so that a test can
// check a few calls allocate nothing while other tests run on other threads.

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the allocator also serves threads whose locals are being torn down.
    let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards to `System`, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns its result with the heap allocations it made on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCS.with(Cell::get);
    let r = f();
    (r, ALLOCS.with(Cell::get) - before)
}

// ---------------------------------------------------------------------------------

fn frozen(ring: &Ring, bytes: &[u8]) -> FixedBuf {
    writable(ring, bytes).freeze()
}

fn writable(ring: &Ring, bytes: &[u8]) -> FixedBufMut {
    // `fixed(0)` is `None`: an empty buffer is a larger one left empty.
    let mut b = ring.fixed(bytes.len().max(1)).unwrap();
    b.try_extend_from_slice(bytes).unwrap();
    b
}

fn config() -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(if cfg!(miri) { 8 } else { 512 });
    // Miri's isolation refuses the file system, where failures would be persisted.
    config.failure_persistence = None;
    config
}

/// Short byte strings over a small alphabet, so that equal strings and common prefixes
/// are frequent.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xff)],
        0..12,
    )
}

/// Every comparison of `x` against `b` says `want`, the order of `x`'s bytes against
/// `b`'s (computed by the caller: in here, the bounds would take over `[u8]`'s `==`).
fn check_against<T>(x: &T, b: &[u8], want: Ordering)
where
    T: PartialEq<[u8]> + PartialOrd<[u8]> + PartialEq<Vec<u8>> + PartialOrd<Vec<u8>>,
    T: for<'s> PartialEq<&'s [u8]> + for<'s> PartialOrd<&'s [u8]>,
    [u8]: PartialEq<T> + PartialOrd<T>,
    Vec<u8>: PartialEq<T> + PartialOrd<T>,
    for<'s> &'s [u8]: PartialEq<T> + PartialOrd<T>,
{
    let eq = want == Ordering::Equal;
    let vb = b.to_vec();
    assert_eq!(*x == *b, eq);
    assert_eq!(*x == b, eq);
    assert_eq!(*x == vb, eq);
    assert_eq!(*b == *x, eq);
    assert_eq!(b == *x, eq);
    assert_eq!(vb == *x, eq);
    assert_eq!(x.partial_cmp(b), Some(want));
    assert_eq!(x.partial_cmp(&b), Some(want));
    assert_eq!(x.partial_cmp(&vb), Some(want));
    assert_eq!(b.partial_cmp(x), Some(want.reverse()));
    assert_eq!((&b).partial_cmp(x), Some(want.reverse()));
    assert_eq!(vb.partial_cmp(x), Some(want.reverse()));
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn equality_ordering_and_hash_agree_with_slices(a in bytes(), b in bytes()) {
        let ring = Ring::new(4096);
        let (fa, fb) = (frozen(&ring, &a), frozen(&ring, &b));
        let (ma, mb) = (writable(&ring, &a), writable(&ring, &b));
        let want = a.cmp(&b);

        prop_assert_eq!(fa == fb, a == b);
        prop_assert_eq!(fa.cmp(&fb), want);
        prop_assert_eq!(fa.partial_cmp(&fb), Some(want));
        prop_assert_eq!(ma == mb, a == b);
        prop_assert_eq!(ma.cmp(&mb), want);
        prop_assert_eq!(fa == mb, a == b);
        prop_assert_eq!(mb == fa, a == b);
        prop_assert_eq!(fa.partial_cmp(&mb), Some(want));
        prop_assert_eq!(mb.partial_cmp(&fa), Some(want.reverse()));
        check_against(&fa, &b, want);
        check_against(&ma, &b, want);

        // `Hash` as `[u8]`'s: the property `Borrow<[u8]>` relies on.
        let s = RandomState::new();
        prop_assert_eq!(s.hash_one(&fa), s.hash_one(&a[..]));
        prop_assert_eq!(s.hash_one(&ma), s.hash_one(&a[..]));
        prop_assert_eq!(s.hash_one(&fa) == s.hash_one(&fb), s.hash_one(&a[..]) == s.hash_one(&b[..]));
    }

    #[test]
    fn split_to_split_off_and_truncate_cut_where_asked(data in prop::collection::vec(any::<u8>(), 0..64), at in 0usize..64) {
        let ring = Ring::new(4096);
        let at = at.min(data.len());

        let mut rest = frozen(&ring, &data);
        let front = rest.split_to(at);
        prop_assert_eq!((&front[..], &rest[..]), (&data[..at], &data[at..]));

        let mut head = frozen(&ring, &data);
        let tail = head.split_off(at);
        prop_assert_eq!((&head[..], &tail[..]), (&data[..at], &data[at..]));

        let mut cut = frozen(&ring, &data);
        cut.truncate(at);
        prop_assert_eq!(&cut[..], &data[..at]);
        cut.truncate(usize::MAX);
        prop_assert_eq!(&cut[..], &data[..at]);

        drop((front, rest, head, tail, cut));
        prop_assert_eq!(ring.stats().live_buffers, 0);
    }
}

#[test]
fn equal_buffers_hash_equal_whatever_their_region() {
    let ring = Ring::new(4096);
    let s = RandomState::new();
    let whole = frozen(&ring, b"xxabcxx");
    let inner = whole.slice(2..5);
    let other = frozen(&ring, b"abc");
    assert_eq!(inner, other);
    assert_eq!(s.hash_one(&inner), s.hash_one(&other));
    assert_eq!(s.hash_one(&inner), s.hash_one(&b"abc"[..]));
}

#[test]
fn frames_key_maps_looked_up_by_slices() {
    let ring = Ring::new(4096);
    let mut by_name: HashMap<FixedBuf, u32> = HashMap::new();
    by_name.insert(frozen(&ring, b"alpha"), 1);
    by_name.insert(frozen(&ring, b"beta"), 2);
    assert_eq!(by_name.get(&b"alpha"[..]), Some(&1));
    assert_eq!(by_name.get(b"beta".as_slice()), Some(&2));
    assert_eq!(by_name.get(&b"gamma"[..]), None);
    assert_eq!(by_name.remove(&b"alpha"[..]), Some(1));

    let mut sorted: BTreeMap<FixedBufMut, u32> = BTreeMap::new();
    for (i, name) in [&b"c"[..], b"a", b"b"].into_iter().enumerate() {
        sorted.insert(writable(&ring, name), i as u32);
    }
    let keys: Vec<&[u8]> = sorted.keys().map(|k| &k[..]).collect();
    assert_eq!(keys, [&b"a"[..], b"b", b"c"]);
    assert_eq!(sorted.get(&b"b"[..]), Some(&2));

    let set: HashSet<FixedBufMut> = [writable(&ring, b"k")].into_iter().collect();
    assert!(set.contains(&b"k"[..]));
}

#[test]
fn compares_with_arrays_and_literals_both_ways() {
    let ring = Ring::new(4096);
    let f = frozen(&ring, b"abc");
    let m = writable(&ring, b"abc");
    assert_eq!(f, b"abc");
    assert_eq!(f, *b"abc");
    assert_eq!(b"abc", f);
    assert_eq!(*b"abc", f);
    assert_eq!(m, b"abc");
    assert_eq!(b"abc", m);
    assert_eq!(f, m);
    assert_eq!(f, &m);
    assert_ne!(f, b"abd");
    assert!(f < b"abd" && f > *b"abb");
    assert!(b"abd" > f && *b"ab" < m);
    assert_eq!(f.partial_cmp(b"abc"), Some(Ordering::Equal));
    assert_eq!(f, vec![b'a', b'b', b'c']);
    assert_eq!(vec![b'a', b'b', b'c'], m);
}

#[test]
fn debug_prints_escaped_bytes_capped_with_the_length() {
    let ring = Ring::new(4096);
    let cases: [(&[u8], &str); 6] = [
        (b"", r#"b"""#),
        (b"GET /\r\n", r#"b"GET /\r\n""#),
        (b"tab\there", r#"b"tab\there""#),
        (b"q\"b\\s'", r#"b"q\"b\\s'""#),
        (b"\0\x01\x7f\x80\xff ~", r#"b"\0\x01\x7f\x80\xff ~""#),
        (b"\x1b[0m", r#"b"\x1b[0m""#),
    ];
    for (bytes, want) in cases {
        assert_eq!(format!("{:?}", frozen(&ring, bytes)), want);
        assert_eq!(format!("{:?}", writable(&ring, bytes)), want);
    }

    let exactly = [b'x'; 64];
    assert_eq!(
        format!("{:?}", frozen(&ring, &exactly)),
        format!("b\"{}\"", "x".repeat(64)),
        "64 bytes are shown whole"
    );
    let long: Vec<u8> = (0..1000u32).map(|i| b"ab\n"[i as usize % 3]).collect();
    let shown = "ab\\n".repeat(22);
    let shown = &shown[..shown.len() - "b\\n".len()]; // 64 bytes: 21 triples and an `a`
    assert_eq!(
        format!("{:?}", frozen(&ring, &long)),
        format!("b\"{shown}\"... (1000 bytes)")
    );
    assert_eq!(
        format!("{:?}", writable(&ring, &long)),
        format!("b\"{shown}\"... (1000 bytes)")
    );
    assert_eq!(
        format!("{:.4?}", frozen(&ring, &long)),
        r#"b"ab\na"... (1000 bytes)"#
    );
    assert_eq!(format!("{:.2000?}", frozen(&ring, &long)).len(), 1333 + 3);
    // Inside a derived `Debug`, as a frame in a user's message type.
    #[derive(Debug)]
    #[allow(dead_code)]
    struct Msg {
        id: u8,
        body: FixedBuf,
    }
    let msg = Msg {
        id: 7,
        body: frozen(&ring, b"hi"),
    };
    assert_eq!(format!("{msg:?}"), r#"Msg { id: 7, body: b"hi" }"#);
}

#[test]
fn splitting_and_truncating_allocate_nothing() {
    let ring = Ring::new(4096);
    let data: Vec<u8> = (0..=255).collect();
    let mut buf = frozen(&ring, &data);
    let at = buf.as_ptr();
    let ((head, tail, mid), n) = allocations(|| {
        let head = buf.split_to(16);
        let tail = buf.split_off(200);
        buf.truncate(100);
        let mid = buf.clone().split_off(50);
        (head, tail, mid)
    });
    assert_eq!(n, 0, "heap allocations while splitting");
    assert_eq!((head.as_ptr(), &head[..]), (at, &data[..16]));
    assert_eq!(&tail[..], &data[216..]);
    assert_eq!(&buf[..], &data[16..116]);
    assert_eq!(&mid[..], &data[66..116]);
    // SAFETY: `at + 216` is inside the 256-byte region `at` points into.
    assert_eq!(tail.as_ptr(), unsafe { at.add(216) }, "no copy");

    // The region stays held until its last view drops, whichever that is.
    drop((head, buf, mid));
    assert_eq!(ring.stats().live_buffers, 1);
    drop(tail);
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn splits_at_the_ends_give_empty_views() {
    let ring = Ring::new(4096);
    let mut buf = frozen(&ring, b"abc");
    assert!(buf.split_to(0).is_empty());
    assert!(buf.split_off(3).is_empty());
    assert_eq!(buf.split_off(0), b"abc");
    assert!(buf.is_empty());
    let mut buf = frozen(&ring, b"abc");
    assert_eq!(buf.split_to(3), b"abc");
    assert!(buf.is_empty());
    assert_eq!(format!("{buf:?}"), r#"b"""#);
}

#[test]
#[should_panic(expected = "split_to(4) is out of bounds of a buffer of 3")]
fn split_to_past_the_end_panics() {
    let ring = Ring::new(4096);
    let _ = frozen(&ring, b"abc").split_to(4);
}

#[test]
#[should_panic(expected = "split_off(4) is out of bounds of a buffer of 3")]
fn split_off_past_the_end_panics() {
    let ring = Ring::new(4096);
    let _ = frozen(&ring, b"abc").split_off(4);
}

#[cfg(feature = "bytes")]
mod buf {
    use bytes::{Buf, Bytes};

    use super::{allocations, frozen};
    use ringmem::Ring;

    #[test]
    fn reads_from_the_front_without_copying() {
        let ring = Ring::new(4096);
        let mut frame = frozen(&ring, b"\x01\x00\x02\x00\x00\x00\x03tail bytes");
        let at = frame.as_ptr();
        assert_eq!(frame.remaining(), 17);
        let ((a, b, c), n) = allocations(|| (frame.get_u8(), frame.get_u16(), frame.get_u32()));
        assert_eq!((a, b, c, n), (1, 2, 3, 0));
        assert_eq!(frame.chunk(), b"tail bytes");
        // SAFETY: 7 bytes into the region `at` points into.
        assert_eq!(frame.chunk().as_ptr(), unsafe { at.add(7) });
        let mut word = [0; 4];
        frame.copy_to_slice(&mut word);
        assert_eq!(&word, b"tail");
        let ((), n) = allocations(|| frame.advance(1));
        assert_eq!((n, frame.remaining(), frame.has_remaining()), (0, 5, true));
        frame.advance(5);
        assert!(!frame.has_remaining());
        assert_eq!(frame, b"");
        drop(frame);
        assert_eq!(ring.stats().live_buffers, 0);
    }

    #[test]
    fn copy_to_bytes_shares_the_region() {
        let ring = Ring::new(4096);
        let mut frame = frozen(&ring, b"headbody");
        let at = frame.as_ptr();
        let (empty, n) = allocations(|| frame.copy_to_bytes(0));
        assert_eq!((empty, n), (Bytes::new(), 0));
        let head = frame.copy_to_bytes(4);
        assert_eq!((&head[..], head.as_ptr()), (&b"head"[..], at));
        assert_eq!(frame, b"body");
        drop(frame);
        assert_eq!(ring.stats().live_buffers, 1, "the Bytes holds the region");
        drop(head);
        assert_eq!(ring.stats().live_buffers, 0);
    }

    #[test]
    fn chains_and_takes_as_any_buf() {
        let ring = Ring::new(4096);
        let mut joined = frozen(&ring, b"abc").chain(frozen(&ring, b"def"));
        assert_eq!(joined.copy_to_bytes(6), &b"abcdef"[..]);
        let take = frozen(&ring, b"abcdef").take(2);
        assert_eq!((take.remaining(), take.chunk()), (2, &b"ab"[..]));
    }

    #[test]
    #[should_panic(expected = "cannot advance 4 bytes past a view of 3")]
    fn advance_past_the_end_panics() {
        let ring = Ring::new(4096);
        frozen(&ring, b"abc").advance(4);
    }

    #[test]
    #[should_panic(expected = "split_to(4) is out of bounds of a buffer of 3")]
    fn copy_to_bytes_past_the_end_panics() {
        let ring = Ring::new(4096);
        let _ = frozen(&ring, b"abc").copy_to_bytes(4);
    }
}
