//! The allocator-api2 adapters on a full ring: every `Allocator` method, for `&Ring`,
//! `RingAlloc` and `OneRingAlloc`, called directly and through the collections that call
//! them (allocator-api2's `Vec` and `Box`, hashbrown's `HashMap`; allocator-api2 0.2 has
//! no `VecDeque`).
//!
//! A shrink needs no memory: collections end the process when one fails
//! (`Vec::shrink_to_fit` calls `handle_alloc_error`), so here a failed shrink aborts the
//! test binary. A call that needs memory the full ring does not have fails: the
//! fallible collection calls (`try_reserve`, `Box::try_new_in`) return `Err`, and the
//! old block keeps its bytes. Once everything is dropped the ring holds no region.
#![cfg(feature = "allocator-api2")]

mod common;

use std::ptr::NonNull;

use allocator_api2::alloc::{Allocator, Layout};
use allocator_api2::boxed::Box;
use allocator_api2::vec::Vec;
use ringmem::{FixedBufMut, OneRingAlloc, Ring, RingAlloc, WhenFull};

/// Bytes of the rings: the smallest whose blocks `RingAlloc` fills in chunks.
const RING: usize = 32 * 1024;

/// A ring of [`RING`] bytes that fails when full.
fn failing_ring() -> Ring {
    Ring::builder()
        .capacity(RING)
        .when_full(WhenFull::Fail)
        .build()
        .unwrap()
}

/// Takes every byte `ring` has left, largest pieces first.
fn fill_ring(ring: &Ring) -> std::vec::Vec<FixedBufMut> {
    let mut held = std::vec::Vec::new();
    for n in [8192, 1024, 128, 16, 1] {
        while let Some(b) = ring.fixed(n) {
            held.push(b);
        }
    }
    held
}

/// Takes every byte the current chunk of small allocations has left (none for `&Ring`),
/// after the ring is full: the next small allocation needs a chunk it cannot get.
fn fill_chunk<A: Allocator + Clone>(a: &A) -> std::vec::Vec<Box<[u8; 4], A>> {
    let mut held = std::vec::Vec::new();
    while let Ok(b) = Box::try_new_in([0xC5; 4], a.clone()) {
        held.push(b);
    }
    held
}

/// The byte at index `i` of the test vectors.
fn byte(i: usize) -> u8 {
    (i * 7 + 3) as u8
}

/// A vector of `len` bytes with `cap` bytes of capacity, made while the ring has room.
fn bytes_in<A: Allocator>(a: A, cap: usize, len: usize) -> Vec<u8, A> {
    let mut v = Vec::with_capacity_in(cap, a);
    v.extend((0..len).map(byte));
    v
}

fn holds_bytes<A: Allocator>(v: &[u8], what: &str, _: &A) {
    assert!(
        v.iter().enumerate().all(|(i, &b)| b == byte(i)),
        "{what}: lost its bytes"
    );
}

/// The collections scenario on a ring that `fill` fills: allocate, grow, shrink (to a
/// small size, from a ring region: the regression), truncate and shrink, turn into a
/// boxed slice, free. `live` gives the ring's live regions once the current chunk is
/// released if empty.
fn collections_on_a_full_ring<A: Allocator + Clone>(
    what: &str,
    a: &A,
    fill: impl Fn() -> std::vec::Vec<FixedBufMut>,
    live: impl Fn() -> usize,
) {
    let empty = live();
    // Made while the ring has room: ring regions, small blocks, a map.
    let mut shrunk = bytes_in(a.clone(), 900, 900);
    let boxed = bytes_in(a.clone(), 900, 600);
    let mut words: Vec<u64, A> = Vec::with_capacity_in(300, a.clone());
    words.extend(0..300u64);
    let mut large = bytes_in(a.clone(), 4000, 4000);
    let mut small = bytes_in(a.clone(), 200, 200);
    let mut grows = bytes_in(a.clone(), 100, 100);
    let mut map =
        hashbrown::HashMap::with_hasher_in(hashbrown::DefaultHashBuilder::default(), a.clone());
    map.extend((0..50u64).map(|k| (k, k * k)));
    let boxes = (
        Box::new_in([7u64; 40], a.clone()),
        Box::new_in(9u64, a.clone()),
    );

    let fillers = (fill(), fill_chunk(a));

    // `allocate` and `allocate_zeroed` fail.
    assert!(
        Box::try_new_in([0u8; 1000], a.clone()).is_err(),
        "{what}: a region"
    );
    assert!(
        Box::try_new_in(0u32, a.clone()).is_err(),
        "{what}: a small block"
    );
    assert!(
        Box::<[u8; 1000], A>::try_new_zeroed_in(a.clone()).is_err(),
        "{what}: zeroed"
    );
    assert!(
        Box::<u64, A>::try_new_zeroed_in(a.clone()).is_err(),
        "{what}: small zeroed"
    );
    assert!(
        Vec::<u8, A>::new_in(a.clone()).try_reserve(300).is_err(),
        "{what}: reserve"
    );

    // `grow` fails and keeps the old block: small to region, small to small, region.
    assert!(grows.try_reserve(1000).is_err(), "{what}: grow to a region");
    assert!(
        grows.try_reserve_exact(50).is_err(),
        "{what}: grow in a full chunk"
    );
    holds_bytes(&grows, what, a);
    assert!(large.try_reserve(100_000).is_err(), "{what}: grow a region");
    holds_bytes(&large, what, a);

    // `shrink` from a region to a small size: the regression (issue 47), which aborted.
    shrunk.truncate(100);
    shrunk.shrink_to_fit();
    assert!(shrunk.capacity() >= 100);
    holds_bytes(&shrunk, what, a);
    // The shrunk block grows and shrinks again as a small one.
    shrunk
        .try_reserve_exact(100)
        .unwrap_or_else(|e| panic!("{what}: grow a shrunk block in place: {e:?}"));
    shrunk.extend((100..200).map(byte));
    holds_bytes(&shrunk, what, a);
    assert!(
        shrunk.try_reserve(1000).is_err(),
        "{what}: grow a shrunk block out"
    );
    shrunk.truncate(50);
    shrunk.shrink_to_fit();
    holds_bytes(&shrunk, what, a);

    // `shrink` through `into_boxed_slice`, of `u64`s, to zero, region to region, small.
    let mut boxed = boxed;
    boxed.truncate(100);
    let boxed = boxed.into_boxed_slice();
    assert_eq!(boxed.len(), 100);
    holds_bytes(&boxed, what, a);
    words.truncate(5);
    words.shrink_to_fit();
    assert_eq!(&words[..], &[0, 1, 2, 3, 4]);
    words.clear();
    words.shrink_to_fit();
    assert_eq!(words.capacity(), 0);
    large.truncate(1000);
    large.shrink_to_fit();
    holds_bytes(&large, what, a);
    small.truncate(10);
    small.shrink_to_fit();
    holds_bytes(&small, what, a);

    // The map: reserving fails, inserting within its capacity does not allocate, and an
    // emptied map frees its table.
    assert!(map.try_reserve(1000).is_err(), "{what}: map reserve");
    let room = map.capacity() - map.len();
    map.extend((100..100 + room as u64).map(|k| (k, k * k)));
    assert!(map.iter().all(|(k, v)| *v == k * k));
    map.clear();
    map.shrink_to(0);
    assert_eq!(map.capacity(), 0);

    assert_eq!(*boxes.0, [7u64; 40]);
    assert_eq!(*boxes.1, 9);

    // With room again, the shrunk block grows out to a region (if the ring's next try
    // finds the room: a failed try does not walk the whole ring).
    drop(fillers);
    if shrunk.try_reserve(2000).is_ok() {
        shrunk.extend((50..2000).map(byte));
    }
    holds_bytes(&shrunk, what, a);

    drop((shrunk, boxed, words, large, small, grows, map, boxes));
    assert_eq!(live(), empty, "{what}: every region released");
}

/// The regression of issue 47 alone: a 900-byte vector on a full ring, truncated to
/// 100 bytes and shrunk, aborted the process ("memory allocation of 100 bytes failed"):
/// the shrink moved it into a chunk, which the full ring could not give.
#[test]
fn shrink_to_fit_on_a_full_ring_keeps_the_block() {
    let a = RingAlloc::from(failing_ring());
    let mut v = bytes_in(a.clone(), 900, 900);
    let fillers = (fill_ring(a.ring()), fill_chunk(&a));
    v.truncate(100);
    v.shrink_to_fit();
    assert_eq!(v.capacity(), 100);
    holds_bytes(&v, "RingAlloc", &a);
    drop((v, fillers));
    a.flush();
    assert_eq!(
        a.ring().stats().live_buffers,
        0,
        "the kept block was released"
    );
}

#[test]
fn ring_alloc_collections_on_a_full_ring() {
    let a = RingAlloc::from(failing_ring());
    collections_on_a_full_ring(
        "RingAlloc",
        &a,
        || fill_ring(a.ring()),
        || {
            a.flush();
            a.ring().stats().live_buffers
        },
    );
}

#[test]
fn ring_ref_collections_on_a_full_ring() {
    let ring = failing_ring();
    collections_on_a_full_ring(
        "&Ring",
        &&ring,
        || fill_ring(&ring),
        || ring.stats().live_buffers,
    );
}

/// Runs `f` on a thread of its own whose ring (`OneRingAlloc`'s) is a full-failing
/// [`RING`]-byte one.
fn on_a_failing_thread_ring<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(|| {
        ringmem::tls::configure(Ring::builder().capacity(RING).when_full(WhenFull::Fail)).unwrap();
        f()
    })
    .join()
    .unwrap()
}

fn thread_ring_fill() -> std::vec::Vec<FixedBufMut> {
    ringmem::tls::with_ring(fill_ring).unwrap()
}

fn thread_ring_live() -> usize {
    OneRingAlloc.flush();
    ringmem::tls::with_ring(|r| r.stats().live_buffers).unwrap()
}

#[test]
fn one_ring_collections_on_a_full_ring() {
    on_a_failing_thread_ring(|| {
        collections_on_a_full_ring(
            "OneRingAlloc",
            &OneRingAlloc,
            thread_ring_fill,
            thread_ring_live,
        )
    });
}

/// A block that a shrink kept in its region (no chunk on the full ring) is freed on
/// another thread, which finds it among the kept blocks of every thread.
#[test]
fn one_ring_kept_block_freed_on_another_thread() {
    on_a_failing_thread_ring(|| {
        let empty = thread_ring_live();
        let mut v = bytes_in(OneRingAlloc, 900, 900);
        let fillers = (thread_ring_fill(), fill_chunk(&OneRingAlloc));
        v.truncate(100);
        v.shrink_to_fit();
        std::thread::spawn(move || {
            holds_bytes(&v, "OneRingAlloc", &OneRingAlloc);
            drop(v);
        })
        .join()
        .unwrap();
        drop(fillers);
        assert_eq!(thread_ring_live(), empty, "the kept block was released");
    });
}

/// Kept blocks made at once: more than the stripes of a `RingAlloc`'s table (64), so
/// that some share a stripe.
const MANY_KEPT: usize = 72;

/// Small blocks made before the kept ones: a few chunks' worth (one under Miri).
const SMALL_BLOCKS: usize = if cfg!(miri) { 300 } else { 3000 };

/// The byte at index `i` of kept vector `k`.
fn kept_byte(k: usize, i: usize) -> u8 {
    (i * 7 + k * 31 + 3) as u8
}

/// What keeps a ring full (its fillers), and small blocks in chunks.
type Fillers<A> = (std::vec::Vec<FixedBufMut>, std::vec::Vec<Box<[u8; 4], A>>);

/// [`MANY_KEPT`] vectors of `a` kept in their regions (300 bytes each, truncated to
/// `100 + k` and shrunk on the ring that `fill` fills, with no chunk to take them),
/// the fillers, and small blocks of `a` in chunks.
fn many_kept<A: Allocator + Clone>(
    a: &A,
    fill: impl Fn() -> std::vec::Vec<FixedBufMut>,
) -> (std::vec::Vec<Vec<u8, A>>, Fillers<A>) {
    // Chunk blocks from a few chunks, freed among the kept ones.
    let mut small: std::vec::Vec<_> = (0..SMALL_BLOCKS)
        .map(|_| Box::new_in([0xC5; 4], a.clone()))
        .collect();
    let mut kept: std::vec::Vec<_> = (0..MANY_KEPT)
        .map(|k| {
            let mut v = Vec::with_capacity_in(300, a.clone());
            v.extend((0..300).map(|i| kept_byte(k, i)));
            v
        })
        .collect();
    let fill = fill();
    small.extend(fill_chunk(a));
    for (k, v) in kept.iter_mut().enumerate() {
        let at = v.as_ptr();
        v.truncate(100 + k);
        v.shrink_to_fit();
        assert_eq!(v.as_ptr(), at, "kept block {k} stayed in its region");
    }
    (kept, (fill, small))
}

/// Checks kept vector `k`'s bytes, and drops it.
fn check_and_drop<A: Allocator>(k: usize, v: Vec<u8, A>) {
    assert_eq!(v.len(), 100 + k);
    assert!(
        v.iter().enumerate().all(|(i, &b)| b == kept_byte(k, i)),
        "kept block {k} lost its bytes"
    );
    drop(v);
}

/// `0..n` in a mixed order (a fixed permutation: multiples of a stride coprime to `n`).
fn mixed(n: usize) -> impl Iterator<Item = usize> {
    let stride = (1..n)
        .rev()
        .find(|s| gcd(*s, n) == 1 && *s < n / 2 + 2)
        .unwrap_or(1);
    (0..n).map(move |i| i * stride % n)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Many kept blocks of `OneRingAlloc` (several in one stripe of its lists, some in the
/// same stripe as chunk blocks freed beside them) freed in mixed order from several
/// threads, with the chunk blocks of the full ring: every block keeps its bytes, each
/// kept block is found and released, and every region goes back to the ring.
#[test]
fn one_ring_many_kept_blocks_freed_on_several_threads() {
    const THREADS: usize = 4;
    std::thread::spawn(|| {
        let ring = Ring::builder().capacity(2 * RING).when_full(WhenFull::Fail);
        ringmem::tls::configure(ring).unwrap();
        let empty = thread_ring_live();
        let (kept, (fill, small)) = many_kept(&OneRingAlloc, thread_ring_fill);
        // Thread `t` frees every `THREADS`th kept block of the mixed order, and every
        // `THREADS`th chunk block, interleaved.
        let mut kept: std::vec::Vec<_> = kept.into_iter().map(Some).collect();
        let mut small: std::vec::Vec<_> = small.into_iter().map(Some).collect();
        let mut shares: std::vec::Vec<(std::vec::Vec<_>, std::vec::Vec<_>)> =
            (0..THREADS).map(|_| Default::default()).collect();
        for (n, k) in mixed(kept.len()).enumerate() {
            shares[n % THREADS].0.push((k, kept[k].take().unwrap()));
        }
        for (n, i) in mixed(small.len()).enumerate() {
            shares[n % THREADS].1.push(small[i].take().unwrap());
        }
        let threads: std::vec::Vec<_> = shares
            .into_iter()
            .map(|(kept, small)| {
                std::thread::spawn(move || {
                    let mut small = small.into_iter();
                    for (k, v) in kept {
                        check_and_drop(k, v);
                        for b in small.by_ref().take(4) {
                            assert_eq!(*b, [0xC5; 4], "a chunk block kept its bytes");
                        }
                    }
                    for b in small {
                        assert_eq!(*b, [0xC5; 4], "a chunk block kept its bytes");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(fill);
        assert_eq!(thread_ring_live(), empty, "every kept block was released");
    })
    .join()
    .unwrap();
}

/// Many kept blocks of a `RingAlloc` (more than its stripes) freed in mixed order,
/// among its chunk blocks: every block keeps its bytes and every region is released.
#[test]
fn ring_alloc_many_kept_blocks_freed_in_mixed_order() {
    let a = RingAlloc::from(
        Ring::builder()
            .capacity(2 * RING)
            .when_full(WhenFull::Fail)
            .build()
            .unwrap(),
    );
    let (kept, (fill, small)) = many_kept(&a, || fill_ring(a.ring()));
    let mut kept: std::vec::Vec<_> = kept.into_iter().map(Some).collect();
    let mut small: std::vec::Vec<_> = small.into_iter().map(Some).collect();
    let mut frees = mixed(small.len());
    for k in mixed(kept.len()) {
        check_and_drop(k, kept[k].take().unwrap());
        for i in frees.by_ref().take(4) {
            assert_eq!(*small[i].take().unwrap(), [0xC5; 4]);
        }
    }
    for i in frees {
        assert_eq!(*small[i].take().unwrap(), [0xC5; 4]);
    }
    drop(fill);
    a.flush();
    assert_eq!(
        a.ring().stats().live_buffers,
        0,
        "every kept block was released"
    );
}

// ---------------------------------------------------------------------------------
// Every method, called directly: layouts of small blocks and regions, at alignments up
// to 64, grown and shrunk on the full ring.

/// Sizes swept: small blocks, just past them, regions.
const SIZES: [usize; 7] = [4, 100, 256, 257, 300, 900, 2000];
/// Alignments swept.
const ALIGNS: [usize; 4] = [1, 8, 16, 64];

fn write(p: NonNull<[u8]>, len: usize, seed: u8) {
    let table = common::counting(seed);
    for at in (0..len).step_by(table.len()) {
        let n = (len - at).min(table.len());
        // SAFETY: the block holds at least `len` bytes (callers pass a layout's size),
        // and the table is not in it.
        unsafe {
            core::ptr::copy_nonoverlapping(table.as_ptr(), p.cast::<u8>().as_ptr().add(at), n)
        };
    }
}

fn holds(p: NonNull<u8>, len: usize, seed: u8, what: &str) {
    let table = common::counting(seed);
    // SAFETY: as in `write`, and written by it.
    let bytes = unsafe { core::slice::from_raw_parts(p.as_ptr(), len) };
    for (k, chunk) in bytes.chunks(table.len()).enumerate() {
        assert!(
            *chunk == table[..chunk.len()],
            "{what}: bytes {} to {}",
            k * table.len(),
            k * table.len() + chunk.len()
        );
    }
}

/// Every method on a ring that `fill` fills. Shrinks keep the alignment (as collections
/// do) and must succeed; grows may fail, and then the old block keeps its bytes.
fn methods_on_a_full_ring<A: Allocator + Clone>(
    what: &str,
    a: &A,
    fill: impl Fn() -> std::vec::Vec<FixedBufMut>,
    live: impl Fn() -> usize,
) {
    let empty = live();
    let mut blocks = std::vec::Vec::new();
    for (i, &align) in ALIGNS.iter().enumerate() {
        for (j, &size) in SIZES.iter().enumerate() {
            let layout = Layout::from_size_align(size, align).unwrap();
            let p = a.allocate(layout).unwrap();
            let seed = (i * SIZES.len() + j) as u8;
            write(p, size, seed);
            blocks.push((p.cast::<u8>(), layout, seed));
        }
    }
    let fillers = (fill(), fill_chunk(a));
    for &size in &SIZES {
        for &align in &ALIGNS {
            let layout = Layout::from_size_align(size, align).unwrap();
            assert!(a.allocate(layout).is_err(), "{what}: allocate {layout:?}");
            assert!(
                a.allocate_zeroed(layout).is_err(),
                "{what}: zeroed {layout:?}"
            );
        }
    }
    for (p, layout, seed) in &mut blocks {
        let here = format!("{what}: {layout:?}");
        // Grow (zeroed or not) to twice the size, and past the small sizes.
        for zeroed in [false, true] {
            let to = if zeroed {
                layout.size() + 300
            } else {
                layout.size() * 2
            };
            let new = Layout::from_size_align(to, layout.align()).unwrap();
            // SAFETY: a live block of `a` for `layout`, and `new` is no smaller.
            let grown = unsafe {
                if zeroed {
                    a.grow_zeroed(*p, *layout, new)
                } else {
                    a.grow(*p, *layout, new)
                }
            };
            match grown {
                Ok(block) => {
                    holds(block.cast(), layout.size(), *seed, &here);
                    if zeroed {
                        let tail = (layout.size()..to)
                            // SAFETY: inside the grown block.
                            .all(|i| unsafe { block.cast::<u8>().as_ptr().add(i).read() } == 0);
                        assert!(tail, "{here}: grown bytes zeroed");
                    }
                    write(block, to, *seed);
                    (*p, *layout) = (block.cast(), new);
                }
                Err(_) => holds(*p, layout.size(), *seed, &here),
            }
        }
        // Shrink, down to one byte: never fails.
        for to in [layout.size() / 2, 100, 30, 1] {
            if to == 0 || to > layout.size() {
                continue;
            }
            let new = Layout::from_size_align(to, layout.align()).unwrap();
            // SAFETY: a live block of `a` for `layout`, and `new` is no larger.
            let block = unsafe { a.shrink(*p, *layout, new) }
                .unwrap_or_else(|_| panic!("{here}: shrink to {to} failed"));
            holds(block.cast(), to, *seed, &here);
            (*p, *layout) = (block.cast(), new);
        }
        // Back up within the small sizes, zeroed: a block a shrink kept in its region
        // (no chunk on the full ring) grows where it is.
        let new = Layout::from_size_align(200, layout.align()).unwrap();
        // SAFETY: a live block of `a` for `layout`, and `new` is no smaller.
        if let Ok(block) = unsafe { a.grow_zeroed(*p, *layout, new) } {
            holds(block.cast(), layout.size(), *seed, &here);
            // SAFETY: inside the grown block.
            let tail = (layout.size()..200)
                .all(|i| unsafe { block.cast::<u8>().as_ptr().add(i).read() } == 0);
            assert!(tail, "{here}: grown bytes zeroed");
            (*p, *layout) = (block.cast(), new);
        }
    }
    for (p, layout, _) in blocks {
        // SAFETY: a live block of `a` for `layout`, freed once.
        unsafe { a.deallocate(p, layout) };
    }
    drop(fillers);
    assert_eq!(live(), empty, "{what}: every region released");
}

#[test]
fn ring_alloc_methods_on_a_full_ring() {
    let a = RingAlloc::from(failing_ring());
    methods_on_a_full_ring(
        "RingAlloc",
        &a,
        || fill_ring(a.ring()),
        || {
            a.flush();
            a.ring().stats().live_buffers
        },
    );
}

#[test]
fn ring_ref_methods_on_a_full_ring() {
    let ring = failing_ring();
    methods_on_a_full_ring(
        "&Ring",
        &&ring,
        || fill_ring(&ring),
        || ring.stats().live_buffers,
    );
}

#[test]
fn one_ring_methods_on_a_full_ring() {
    on_a_failing_thread_ring(|| {
        methods_on_a_full_ring(
            "OneRingAlloc",
            &OneRingAlloc,
            thread_ring_fill,
            thread_ring_live,
        )
    });
}
