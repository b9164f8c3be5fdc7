//! `ExtendBytes`: bytes appended to allocator-api2's `Vec<u8, A>` in one copy, on every
//! allocator and both allocator-api2 versions, with the same outcome as
//! `extend_from_slice`; and what a write the allocator has no room for does.
#![cfg(feature = "allocator-api2")]

use std::io::{ErrorKind, Write};

use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::vec::Vec;
use ringmem::{AllocError, ExtendBytes, Ring, RingAlloc, WhenFull};

/// Bytes each case appends, shrunk under Miri.
const TOTAL: usize = if cfg!(miri) { 3_000 } else { 300_000 };

/// Appends pieces of `data` of lengths 0, 1, 2, ... (wrapping at 700) to a vector on
/// `a` by each route, and checks every one holds what `std`'s `Vec` does.
fn appends_as_std<A: Allocator + Copy>(a: A) {
    let data: std::vec::Vec<u8> = (0..TOTAL).map(|i| (i * 31 % 251) as u8).collect();
    let (mut plain, mut tried, mut written) = (Vec::new_in(a), Vec::new_in(a), Vec::new_in(a));
    let mut expected = std::vec::Vec::new();
    let (mut at, mut n) = (0, 0);
    while at < data.len() {
        let piece = &data[at..(at + n).min(data.len())];
        plain.extend_bytes(piece);
        tried.try_extend_bytes(piece).unwrap();
        written.byte_writer().write_all(piece).unwrap();
        expected.extend_from_slice(piece);
        at += piece.len();
        n = (n + 1) % 700;
    }
    for v in [&plain, &tried, &written] {
        assert_eq!(v.len(), expected.len());
        assert!(v[..] == expected[..], "the bytes differ");
    }
}

#[test]
fn extend_bytes_appends_what_std_does_on_every_allocator() {
    let ring = Ring::new(1 << 20);
    appends_as_std(&ring);
    appends_as_std(&RingAlloc::with_capacity(1 << 20));
    appends_as_std(Global);
    // Past the ring's room: a `Grow` ring adds blocks, and large vectors go to the heap.
    let small = Ring::builder()
        .capacity(4096)
        .when_full(WhenFull::Grow)
        .build()
        .unwrap();
    appends_as_std(&small);
    assert_eq!(ring.stats().live_buffers, 0);
}

/// A ring of 4 KiB that fails a claim it has no room for.
fn failing_ring() -> Ring {
    Ring::builder()
        .capacity(4096)
        .when_full(WhenFull::Fail)
        .build()
        .unwrap()
}

#[test]
fn a_write_without_room_fails_and_leaves_the_vector() {
    let ring = failing_ring();
    let mut v = Vec::new_in(&ring);
    v.extend_bytes(b"kept");
    let before = v.capacity();
    assert_eq!(
        v.try_extend_bytes(&[1; 5000]),
        Err(AllocError { requested: 5004 })
    );
    assert_eq!((&v[..], v.capacity()), (&b"kept"[..], before));
    let e = v.byte_writer().write_all(&[1; 5000]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    let inner = e.get_ref().and_then(|e| e.downcast_ref::<AllocError>());
    assert_eq!(inner, Some(&AllocError { requested: 5004 }));
    assert_eq!(
        v.byte_writer().write(&[2; 5000]).unwrap_err().kind(),
        ErrorKind::OutOfMemory
    );
    // What fits still does.
    v.byte_writer().write_all(&[3; 1000]).unwrap();
    assert_eq!(v.len(), 1004);
    drop(v);
    assert_eq!(ring.stats().live_buffers, 0);
}

#[cfg(feature = "allocator-api2-04")]
#[test]
fn allocator_api2_0_4_vectors_too() {
    use ringmem::allocator_api2_04::vec::Vec as Vec04;
    let ring = failing_ring();
    let mut v: Vec04<u8, &Ring> = Vec04::new_in(&ring);
    v.extend_bytes(b"zero ");
    v.try_extend_bytes(b"four").unwrap();
    write!(v.byte_writer(), " {}", 4).unwrap();
    assert_eq!(&v[..], b"zero four 4");
    assert_eq!(
        v.try_extend_bytes(&[0; 5000]),
        Err(AllocError { requested: 5011 })
    );
    assert_eq!(&v[..], b"zero four 4");
}
