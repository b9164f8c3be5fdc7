//! `ExtBuf::writer_wait`: `io::Write` into a growable buffer that waits for room.

use std::io::{self, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ringmem::{FixedBufMut, Ring, WaitError};

/// Takes every byte the ring has left, in buffers of `size`.
fn fill(ring: &Ring, size: usize) -> Vec<FixedBufMut> {
    std::iter::from_fn(|| ring.fixed(size)).collect()
}

#[test]
fn a_plain_write_into_a_full_ring_says_the_ring_is_full() {
    let ring = Ring::new(1024);
    let mut msg = ring.extendable(0).unwrap();
    let _rest = fill(&ring, 8);
    let err = msg.write_all(&[1; 500]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
}

#[test]
fn waits_while_full_and_resumes_on_a_release() {
    let ring = Ring::new(4096);
    let mut msg = ring.extendable(0).unwrap();
    msg.extend_from_slice(b"head:");
    let held = fill(&ring, 64);
    assert!(msg.try_reserve(2000).is_err(), "the ring should be full");
    let (tx, rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        s.spawn(move || {
            // Released only once the writer has started to write.
            rx.recv().unwrap();
            thread::sleep(Duration::from_millis(20));
            drop(held);
        });
        let mut w = msg.writer_wait();
        tx.send(()).unwrap();
        w.write_all(&[7; 2000]).unwrap();
        write!(w, "|{}|", 42).unwrap();
    });
    assert_eq!(msg.len(), 5 + 2000 + 4);
    assert_eq!(&msg[..5], b"head:");
    assert!(msg[5..2005].iter().all(|&b| b == 7));
    assert_eq!(&msg[2005..], b"|42|");
}

#[test]
fn times_out_and_leaves_what_was_written() {
    let ring = Ring::new(1024);
    let mut msg = ring.extendable(0).unwrap();
    msg.extend_from_slice(b"abc");
    let _rest = fill(&ring, 8);
    let mut w = msg.writer_wait_timeout(Duration::from_millis(10));
    let err = w.write_all(&[1; 500]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    // The deadline is the writer's: a later write does not wait again.
    let err = w.write(&[1; 500]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert_eq!(&msg[..], b"abc");
}

#[test]
fn a_write_no_release_can_serve_fails_at_once() {
    let ring = Ring::new(1024);
    let mut msg = ring.extendable(0).unwrap();
    let err = msg.writer_wait().write_all(&[1; 4096]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    let inner = err.into_inner().unwrap();
    let wait = inner.downcast_ref::<WaitError>().unwrap();
    assert!(matches!(
        wait,
        WaitError::NeverFits {
            requested: 4096,
            ..
        }
    ));
    assert!(msg.is_empty());
}

/// Every chunk lands exactly once, whole and in order, while a consumer releases the
/// ring's other buffers a few at a time and the writer keeps waiting for them; chunks
/// that time out are written again after a release, and never appear twice.
#[test]
fn never_writes_a_chunk_twice_or_in_part() {
    let ring = Ring::new(8192);
    let mut msg = ring.extendable(0).unwrap();
    let held = fill(&ring, 256);
    let (tx, rx) = mpsc::channel::<FixedBufMut>();
    let chunks: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i; 5 + 7 * i as usize]).collect();
    let total: usize = chunks.iter().map(Vec::len).sum();
    thread::scope(|s| {
        s.spawn(move || {
            for buf in rx {
                thread::sleep(Duration::from_millis(1));
                drop(buf);
            }
        });
        let mut held = held.into_iter();
        for chunk in &chunks {
            loop {
                let mut w = msg.writer_wait_timeout(Duration::from_millis(2));
                match w.write_all(chunk) {
                    Ok(()) => break,
                    Err(e) => {
                        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
                        // Let the consumer make room, then write the chunk again.
                        tx.send(held.next().expect("room was made")).unwrap();
                    }
                }
            }
        }
        drop(tx);
        drop(held);
    });
    assert_eq!(msg.len(), total);
    let mut at = 0;
    for chunk in &chunks {
        assert_eq!(&msg[at..at + chunk.len()], &chunk[..]);
        at += chunk.len();
    }
}
