//! The thread-local ring.

use std::io::Write;
use std::thread;

use ringmem::{tls, Ring, WhenFull};

#[test]
fn nested_calls_do_not_panic() {
    let out = tls::extendable(0, |mut outer| {
        let inner = tls::extendable(0, |mut e| {
            let f = tls::fixed(8).unwrap();
            let t = tls::typed::<u16>(4).unwrap();
            e.write_all(b"inner").unwrap();
            drop((f, t));
            e.finalize()
        })
        .unwrap();
        outer.write_all(&inner).unwrap();
        tls::with_ring(|r| assert!(r.capacity() > 0)).unwrap();
        outer.finalize()
    })
    .unwrap();
    assert_eq!(&out[..], b"inner");
}

#[test]
fn configure_applies_before_first_use_only() {
    thread::spawn(|| {
        let bad = tls::configure(Ring::builder().capacity(0)).unwrap_err();
        assert!(matches!(bad, tls::ConfigError::Invalid(_)));
        tls::configure(Ring::builder().capacity(256).when_full(WhenFull::Fail)).unwrap();
        assert_eq!(tls::with_ring(|r| r.capacity()), Some(256));
        assert!(
            tls::fixed(1000).is_none(),
            "Fail policy, larger than the ring"
        );
        assert_eq!(
            tls::configure(Ring::builder()).unwrap_err(),
            tls::ConfigError::AlreadyCreated
        );
    })
    .join()
    .unwrap();
}

#[test]
fn default_ring_falls_back_to_the_heap() {
    thread::spawn(|| {
        let big = tls::fixed(tls::DEFAULT_CAPACITY * 2).expect("heap fallback by default");
        assert_eq!(big.capacity(), tls::DEFAULT_CAPACITY * 2);
        assert!(tls::fixed(0).is_none());
    })
    .join()
    .unwrap();
}

#[test]
fn buffers_outlive_their_thread() {
    let bufs: Vec<_> = thread::spawn(|| {
        (0..10u8)
            .map(|i| {
                let mut b = tls::fixed(32).unwrap();
                b.write_all(&[i; 32]).unwrap();
                b.freeze()
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    // The thread (and its ring) is gone; the memory stays until the buffers go.
    for (i, b) in bufs.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u8));
    }
}
