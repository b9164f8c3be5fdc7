//! ringmem's `nightly` feature: `Ring`, `RingAlloc` and `OneRingAlloc` are
//! `core::alloc::Allocator`, so the standard library's own collections run on them.
#![feature(allocator_api)]

use std::alloc::{Allocator, Layout};

use ringmem::{OneRingAlloc, Ring, RingAlloc};

/// Fails to compile unless `A` implements the standard trait.
fn standard<A: Allocator>(a: A) -> A {
    a
}

#[test]
fn std_vec_grows_in_the_ring_and_gives_it_back() {
    let ring = Ring::new(64 * 1024);
    {
        let mut v: Vec<u32, &Ring> = Vec::new_in(standard(&ring));
        v.extend(0..5000);
        assert_eq!(ring.stats().live_buffers, 1);
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v.iter().sum::<u32>(), 45);
        assert_eq!(ring.stats().live_buffers, 1);
    }
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn std_box_and_rc_on_ring_alloc() {
    let a = standard(RingAlloc::with_capacity(16 * 1024));
    let b = Box::new_in(String::from("boxed"), a.clone());
    let r = std::rc::Rc::new_in([7u64; 16], a.clone());
    let r2 = std::rc::Rc::clone(&r);
    assert_eq!(a.ring().stats().live_buffers, 2);
    assert_eq!((b.as_str(), r2[15]), ("boxed", 7));
    drop((b, r, r2));
    assert_eq!(a.ring().stats().live_buffers, 0);
}

#[test]
fn std_vec_on_one_ring_crosses_threads() {
    let v: Vec<Box<u64, OneRingAlloc>, OneRingAlloc> = std::thread::spawn(|| {
        let mut v = Vec::new_in(standard(OneRingAlloc));
        v.extend((0..1000u64).map(|i| Box::new_in(i, OneRingAlloc)));
        v
    })
    .join()
    .unwrap();
    // Made on a thread that has exited; read and freed here.
    assert_eq!(v.iter().map(|b| **b).sum::<u64>(), 999 * 1000 / 2);
    drop(v);
}

#[test]
fn raw_calls_through_the_standard_trait() {
    let ring = Ring::new(8 * 1024);
    for align in [1, 8, 64, 4096] {
        let layout = Layout::from_size_align(100, align).unwrap();
        let p = Allocator::allocate(&&ring, layout).unwrap();
        assert_eq!(p.cast::<u8>().as_ptr() as usize % align, 0);
        assert!(p.len() >= 100);
        // SAFETY: allocated just above with this layout, not used afterwards.
        unsafe { Allocator::deallocate(&&ring, p.cast(), layout) };
    }
    // Above the largest alignment served: refused, not UB.
    let huge = Layout::from_size_align(8, 8192).unwrap();
    assert!(Allocator::allocate(&&ring, huge).is_err());
    assert_eq!(ring.stats().live_buffers, 0);
}

#[test]
fn hashbrown_with_its_nightly_feature() {
    let a = RingAlloc::with_capacity(8 * 1024);
    let mut m = hashbrown::HashMap::new_in(a.clone());
    for i in 0..2000u32 {
        m.insert(i, i.to_string());
    }
    m.retain(|k, _| k % 3 == 0);
    assert!(m.iter().all(|(k, v)| *v == k.to_string()));
    assert_eq!(m.len(), 667);
    drop(m);
    assert_eq!(a.ring().stats().live_buffers, 0);
}
