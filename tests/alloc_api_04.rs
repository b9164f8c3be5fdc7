//! allocator-api2 0.4's `Allocator` on the ring (feature `allocator-api2-04`): the
//! collections of the version `cargo add allocator-api2` gives, on every allocator.
#![cfg(feature = "allocator-api2-04")]

use ringmem::allocator_api2_04::boxed::Box;
use ringmem::allocator_api2_04::vec::Vec;
use ringmem::{Ring, RingAlloc};

#[test]
fn vec_on_a_ring_grows_and_gives_its_memory_back() {
    let ring = Ring::new(1 << 16);
    {
        let mut v: Vec<u64, &Ring> = Vec::new_in(&ring);
        v.extend(0..1000);
        assert_eq!(v.iter().sum::<u64>(), 499_500);
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v[..], (0..10).collect::<std::vec::Vec<_>>()[..]);
        assert!(ring.stats().live_buffers > 0);
    }
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn box_and_vec_on_ring_alloc() {
    let alloc = RingAlloc::with_capacity(1 << 16);
    let b = Box::new_in([7u8; 100], alloc.clone());
    let mut v: Vec<String, RingAlloc> = Vec::new_in(alloc.clone());
    v.push("on the ring".to_string());
    assert_eq!(b.iter().map(|&x| x as usize).sum::<usize>(), 700);
    assert_eq!(v[0], "on the ring");
}

/// Both versions share one allocator: a block from one is the other's to free.
#[test]
fn both_versions_share_one_ring() {
    let ring = Ring::new(1 << 16);
    let mut new: Vec<u8, &Ring> = Vec::new_in(&ring);
    let mut old: ringmem::allocator_api2::vec::Vec<u8, &Ring> =
        ringmem::allocator_api2::vec::Vec::new_in(&ring);
    new.extend_from_slice(b"0.4");
    old.extend_from_slice(b"0.2");
    assert_eq!(ring.stats().live_buffers, 2);
    drop((new, old));
    assert_eq!(ring.stats().live_buffers, 0);
}

#[cfg(feature = "std")]
#[test]
fn one_ring_alloc_serves_0_4_collections() {
    let mut v: Vec<u32, ringmem::OneRingAlloc> = Vec::new_in(ringmem::OneRingAlloc);
    v.extend(0..100);
    assert_eq!(v.len(), 100);
}
