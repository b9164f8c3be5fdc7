//! The thread-local ring.

use std::io::Write;
use std::thread;

use ringmem::{tls, Ring, WhenFull};

#[test]
fn nested_calls_do_not_panic() {
    let out = tls::extendable_with(0, |mut outer| {
        let inner = tls::extendable_with(0, |mut e| {
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

/// A thread whose ring is `capacity` bytes and never falls back: the `_wait` forms wait.
fn on_fail_ring(capacity: usize, f: impl FnOnce() + Send + 'static) {
    thread::spawn(move || {
        tls::configure(Ring::builder().capacity(capacity).when_full(WhenFull::Fail)).unwrap();
        f();
    })
    .join()
    .unwrap();
}

#[test]
fn wait_forms_park_until_a_release_on_another_thread() {
    on_fail_ring(1024, || {
        let all = tls::fixed(1016).unwrap(); // the whole ring
        assert!(tls::fixed(8).is_none());
        let (tx, rx) = std::sync::mpsc::channel::<ringmem::FixedBufMut>();
        let consumer = thread::spawn(move || drop(rx.recv().unwrap()));
        tx.send(all).unwrap();
        let a = tls::fixed_wait(256).unwrap();
        assert_eq!(a.capacity(), 256);
        let t = tls::typed_wait::<u64>(8).unwrap();
        assert_eq!(t.capacity(), 8);
        let grown = tls::extendable_wait_with(16, |mut ext| {
            ext.extend_from_slice(b"after the wait");
            ext.finalize()
        })
        .unwrap();
        assert_eq!(&grown[..], b"after the wait");
        consumer.join().unwrap();
    });
}

#[test]
fn wait_timeout_forms_time_out_and_reject_what_never_fits() {
    use ringmem::WaitError;
    use std::time::Duration;
    on_fail_ring(1024, || {
        let all = tls::fixed(1016).unwrap();
        let short = Duration::from_millis(5);
        assert_eq!(
            tls::fixed_wait_timeout(8, short).unwrap_err(),
            WaitError::TimedOut
        );
        assert_eq!(
            tls::typed_wait_timeout::<u32>(2, short).unwrap_err(),
            WaitError::TimedOut
        );
        let mut called = false;
        let err = tls::extendable_wait_timeout_with(0, short, |_| called = true).unwrap_err();
        assert_eq!(err, WaitError::TimedOut);
        assert!(!called, "no buffer, no call");
        // Larger than the ring: no release can help, so no waiting at all.
        assert!(matches!(
            tls::fixed_wait(4096),
            Err(WaitError::NeverFits {
                requested: 4096,
                ..
            })
        ));
        assert!(matches!(
            tls::fixed_wait(0),
            Err(WaitError::NeverFits { .. })
        ));
        drop(all);
        assert!(tls::fixed_wait_timeout(8, short).is_ok());
    });
}

#[test]
fn wait_forms_return_at_once_on_the_default_ring() {
    thread::spawn(|| {
        // The default ring falls back to the heap: larger than the ring still succeeds.
        let big = tls::fixed_wait(tls::DEFAULT_CAPACITY * 2).unwrap();
        assert_eq!(big.capacity(), tls::DEFAULT_CAPACITY * 2);
        let v = tls::typed_wait_timeout::<u8>(3, std::time::Duration::ZERO).unwrap();
        assert!(v.capacity() >= 3);
    })
    .join()
    .unwrap();
}

#[test]
fn configure_builds_the_ring_the_thread_uses() {
    thread::spawn(|| {
        tls::configure(Ring::builder().capacity(4096).when_full(WhenFull::Fail)).unwrap();
        let first = tls::with_ring(|r| r as *const Ring).unwrap();
        let buf = tls::fixed(64).unwrap();
        assert_eq!(tls::with_ring(|r| r as *const Ring), Some(first));
        assert_eq!(
            tls::with_ring(|r| (r.capacity(), r.stats().live_buffers)),
            Some((4096, 1))
        );
        drop(buf);
    })
    .join()
    .unwrap();
}

#[test]
fn async_forms_wait_for_a_release_and_are_send() {
    fn send_static<F: std::future::Future + Send + 'static>(f: F) -> F {
        f
    }
    on_fail_ring(1024, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let all = tls::fixed(1016).unwrap();
            assert!(matches!(
                send_static(tls::fixed_async(4096)).await,
                Err(ringmem::WaitError::NeverFits { .. })
            ));
            let (tx, rx) = std::sync::mpsc::channel::<ringmem::FixedBufMut>();
            let consumer = thread::spawn(move || {
                thread::sleep(std::time::Duration::from_millis(20));
                drop(rx.recv().unwrap());
            });
            tx.send(all).unwrap();
            let buf = send_static(tls::fixed_async(512)).await.unwrap();
            assert_eq!(buf.capacity(), 512);
            let mut v = send_static(tls::typed_async::<u16>(4)).await.unwrap();
            v.push(9).unwrap();
            assert_eq!(tls::with_ring(|r| r.stats().live_buffers), Some(2));
            consumer.join().unwrap();
        });
    });
}
