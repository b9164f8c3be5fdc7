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

// ---------------------------------------------------------------------------------
// Ordinary bytes as frozen buffers (replies that are not frames), and the trait gaps
// against `Bytes`.

#[cfg(all(feature = "std", not(loom)))]
#[test]
fn a_static_reply_is_held_in_place_and_counts_nothing_down() {
    static OK: &[u8] = b"+OK\r\n";
    let (ok, n) = allocations(|| FixedBuf::from_static(OK));
    assert_eq!((ok.as_ptr(), ok.len(), n), (OK.as_ptr(), 5, 0));
    // Clones and drops on many threads, far more drops than any one handle's count:
    // the immortal header never frees, and the bytes stay the static's.
    std::thread::scope(|s| {
        for _ in 0..4 {
            let ok = ok.clone();
            s.spawn(move || {
                for _ in 0..10_000 {
                    let again = FixedBuf::from_static(OK);
                    let c = again.clone();
                    assert_eq!(c, ok);
                }
            });
        }
    });
    assert_eq!(ok, "+OK\r\n");
    let empty = FixedBuf::from_static(b"");
    assert!(empty.is_empty() && empty.slice(..).is_empty());
}

#[cfg(all(feature = "std", not(loom)))]
#[test]
fn copies_of_ordinary_bytes_land_in_the_threads_ring() {
    let live = || ringmem::tls::with_ring(|r| r.stats().live_buffers).unwrap();
    let before = live();
    let (frames, n) = allocations(|| {
        [
            FixedBuf::from(&b"slice"[..]),
            FixedBuf::from(b"array"),
            FixedBuf::from("str"),
            FixedBuf::copy_from_slice(b"copy"),
        ]
    });
    assert_eq!(n, 0, "heap allocations for copies into a warm ring");
    assert_eq!(live(), before + 4);
    assert_eq!(frames[0], "slice");
    assert_eq!(frames[3], b"copy");
    let from_vec = FixedBuf::from(vec![1u8, 2, 3]);
    let from_string = FixedBuf::from(format!(":{}\r\n", 42));
    assert!(from_vec == [1u8, 2, 3] && from_string == ":42\r\n");
    drop((frames, from_vec, from_string));
    assert_eq!(live(), before);
    assert!(FixedBuf::copy_from_slice(b"").is_empty());
}

#[cfg(all(feature = "std", not(loom)))]
#[test]
fn a_copy_the_threads_ring_cannot_hold_goes_to_the_heap() {
    std::thread::spawn(|| {
        let builder = Ring::builder()
            .capacity(4096)
            .when_full(ringmem::WhenFull::Fail);
        ringmem::tls::configure(builder).unwrap();
        let big = vec![7u8; 64 << 10];
        let frame = FixedBuf::from(&big[..]);
        assert_eq!(frame, big);
        let live = ringmem::tls::with_ring(|r| r.stats().live_buffers).unwrap();
        assert_eq!(live, 0, "the copy is on the heap");
    })
    .join()
    .unwrap();
}

#[test]
fn a_named_ring_copies_or_says_it_has_no_room() {
    let ring = Ring::builder()
        .capacity(4096)
        .when_full(ringmem::WhenFull::Fail)
        .build()
        .unwrap();
    let a = ring.copy_from_slice(b"abc").unwrap();
    assert!(a == b"abc" && ring.stats().live_buffers == 1);
    assert!(ring.copy_from_slice(&[0; 8192]).is_none());
    assert_eq!(ring.copy_from_slice(b"").unwrap().len(), 0);
}

#[test]
fn frames_compare_with_text_both_ways() {
    let ring = Ring::new(4096);
    let f = frozen(&ring, b"GET");
    let w = writable(&ring, b"GET");
    let s = String::from("GET");
    assert!(f == "GET");
    assert!("GET" == f);
    assert!(f == *"GET");
    assert!(*"GET" == f);
    assert!(f == s);
    assert!(s == f);
    assert!(w == s);
    assert!(s == w);
    assert!(w == "GET");
    assert!("GET" == w);
    assert_eq!(f.partial_cmp("PUT"), Some(Ordering::Less));
    assert_eq!("PUT".partial_cmp(&f), Some(Ordering::Greater));
    assert_eq!(f.partial_cmp(&"DEL"), Some(Ordering::Greater));
    assert_ne!(f, "PUT");
    assert_ne!("PUT", f);
    let (put, del) = (String::from("PUT"), String::from("DEL"));
    assert_eq!(w.partial_cmp(&put), Some(Ordering::Less));
    assert_eq!(del.partial_cmp(&w), Some(Ordering::Less));
    // Bytes, not characters: a non-UTF-8 frame equals no string.
    assert!(frozen(&ring, &[0xff]) != "\u{ff}");
}

#[test]
fn frames_convert_into_vecs() {
    let ring = Ring::new(4096);
    let v: Vec<u8> = frozen(&ring, b"abc").into();
    let w: Vec<u8> = writable(&ring, b"de").into();
    assert_eq!((v, w), (b"abc".to_vec(), b"de".to_vec()));
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn extend_from_slice_fills_and_panics_past_the_capacity() {
    let ring = Ring::new(4096);
    let mut b = ring.fixed(4).unwrap();
    b.extend_from_slice(b"ab");
    b.extend_from_slice(b"cd");
    let fill = vec![b'x'; b.spare()];
    b.extend_from_slice(&fill);
    assert_eq!(&b[..4], b"abcd");
    let full = b.to_vec();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.extend_from_slice(b"e")));
    assert!(err.is_err());
    assert_eq!(b, full, "a refused write changes nothing");
}

#[cfg(feature = "bytes")]
#[test]
fn frames_compare_with_bytes_both_ways() {
    use bytes::{Bytes, BytesMut};
    let ring = Ring::new(4096);
    let f = frozen(&ring, b"key");
    let w = writable(&ring, b"key");
    let (b, m) = (Bytes::from_static(b"key"), BytesMut::from(&b"key"[..]));
    for ok in [
        f == b,
        b == f,
        w == b,
        b == w,
        f == m,
        m == f,
        w == m,
        m == w,
    ] {
        assert!(ok);
    }
    let later = Bytes::from_static(b"kez");
    for ok in [f < later, later > f, f != later, later != w] {
        assert!(ok);
    }
}

#[cfg(all(feature = "serde", feature = "std", not(loom)))]
#[test]
fn frames_deserialize_into_the_threads_ring_or_a_named_one() {
    use serde::de::DeserializeSeed;
    let f: FixedBuf = serde_json::from_str(r#""+OK""#).unwrap();
    let g: FixedBuf = serde_json::from_str("[1,2,255]").unwrap();
    assert!(f == "+OK" && g == [1u8, 2, 255]);
    assert!(serde_json::from_str::<FixedBuf>("[256]").is_err());
    assert!(serde_json::from_str::<FixedBuf>("{}").is_err());
    // A round trip: what `Serialize` writes reads back.
    let ring = Ring::builder()
        .capacity(4096)
        .when_full(ringmem::WhenFull::Fail)
        .build()
        .unwrap();
    let json = serde_json::to_string(&frozen(&ring, b"hi")).unwrap();
    let mut de = serde_json::Deserializer::from_str(&json);
    let back = ringmem::InRing(&ring).deserialize(&mut de).unwrap();
    assert!(back == b"hi" && ring.stats().live_buffers == 1);
    // A ring with no room: the format's error, saying so.
    let long = serde_json::to_string(&vec![0u8; 8192]).unwrap();
    let mut de = serde_json::Deserializer::from_str(&long);
    let err = ringmem::InRing(&ring).deserialize(&mut de).unwrap_err();
    assert!(err.to_string().contains("no room"), "{err}");
}
