//! The `bytes` adapters: `BufMut` on writable buffers, zero-copy `Bytes`.
#![cfg(feature = "bytes")]

mod common;

use std::thread;

use bytes::{BufMut, Bytes};
use common::{fill, holds, scaled};
use ringmem::codec::{Buffer, BufferPool, Slice};
use ringmem::{Ring, WhenFull};

#[test]
fn frozen_buffers_become_bytes_without_copy_and_outlive_the_ring() {
    let ring = Ring::new(4096);
    let mut buf = ring.fixed(100).unwrap();
    buf.put_bytes(0, 100);
    fill(1, &mut buf);
    let frozen = buf.freeze();
    let keep = frozen.clone();
    let at = frozen.as_ptr();
    let bytes = Bytes::from(frozen);
    assert_eq!(bytes.as_ptr(), at, "no copy");
    assert_eq!(ring.stats().live_buffers, 1);
    drop(keep);
    let clones: Vec<Bytes> = (0..8).map(|_| bytes.clone()).collect();
    drop(bytes);
    assert_eq!(
        ring.stats().live_buffers,
        1,
        "the Bytes clones hold the region"
    );
    let handles: Vec<_> = clones
        .into_iter()
        .map(|b| thread::spawn(move || assert!(holds(1, &b))))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ring.stats().live_buffers, 0, "released by the last Bytes");

    // Outliving the ring: the block goes with the last Bytes.
    let mut buf = ring.fixed(16).unwrap();
    buf.put_slice(b"survives");
    let bytes = Bytes::from(buf.freeze()).slice(1..);
    drop(ring);
    thread::spawn(move || assert_eq!(&bytes[..], b"urvives"))
        .join()
        .unwrap();
}

#[test]
fn writable_buffers_become_bytes_without_copy() {
    let ring = Ring::new(4096);
    let mut buf = ring.fixed(8).unwrap();
    buf.put_u32(7);
    let at = buf.as_ptr();
    let bytes = Bytes::from(buf);
    assert_eq!((bytes.as_ptr(), &bytes[..]), (at, &[0, 0, 0, 7][..]));
    drop(ring);
    assert_eq!(bytes.len(), 4);
}

#[test]
fn codec_slices_become_bytes_and_outlive_the_pool() {
    let mut pool = BufferPool::new(1024);
    let mut all = Vec::new();
    for id in 0..20u64 {
        fill(id, pool.get_writable(100));
        let slice: Slice = pool.get_data_owned();
        let (ring, at) = (slice.is_ring(), slice.as_ptr());
        let bytes = Bytes::from(slice);
        assert_eq!(bytes.as_ptr(), at, "no copy (ring: {ring})");
        all.push((id, ring, bytes));
    }
    assert!(all.iter().any(|(_, ring, _)| *ring) && all.iter().any(|(_, ring, _)| !*ring));
    drop(pool);
    thread::spawn(move || {
        for (id, _, bytes) in all {
            assert!(holds(id, &bytes));
        }
    })
    .join()
    .unwrap();
}

#[test]
fn fixed_bufmut_puts_within_its_capacity() {
    let ring = Ring::new(4096);
    let mut buf = ring.fixed(16).unwrap();
    assert_eq!(buf.remaining_mut(), 16);
    buf.put_u8(1);
    buf.put_u16_le(0x0302);
    buf.put_u64(0x0405_0607_0809_0a0b);
    assert_eq!(buf.remaining_mut(), 5);
    let chunk = buf.chunk_mut();
    assert_eq!(chunk.len(), 5);
    chunk[..2].copy_from_slice(b"xy");
    // SAFETY: the first two bytes of the chunk were just written.
    unsafe { buf.advance_mut(2) };
    buf.put(&b"abc"[..]);
    assert!(!buf.has_remaining_mut());
    assert_eq!(
        &buf[..],
        b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0bxyabc"
    );
    assert_eq!(buf.chunk_mut().len(), 0);
    // SAFETY: advancing by 0 initialises nothing.
    unsafe { buf.advance_mut(0) };
}

#[test]
#[should_panic(expected = "do not fit")]
fn fixed_bufmut_put_past_its_capacity_panics() {
    let ring = Ring::new(4096);
    let mut buf = ring.fixed(8).unwrap();
    buf.put_u32(1);
    buf.put_u64(2);
}

#[test]
#[should_panic(expected = "past the")]
fn fixed_bufmut_advance_past_its_capacity_panics() {
    let ring = Ring::new(4096);
    let mut buf = ring.fixed(8).unwrap();
    for b in buf.spare_mut() {
        b.write(0);
    }
    // SAFETY: all 8 spare bytes are initialised; the 9th is refused with a panic.
    unsafe { buf.advance_mut(9) };
}

/// Encodes a frame through `BufMut` alone, as `bytes`-based codecs do.
fn encode(out: &mut impl BufMut, payload: &[u8]) {
    out.put_u16_le(0);
    out.put_u8(1);
    out.put_uint_le(payload.len() as u64, 3);
    out.put_slice(payload);
}

#[test]
fn ext_buf_grows_as_it_is_put_into() {
    let ring = Ring::new(64 * 1024);
    let mut ext = ring.extendable(0).unwrap();
    let payload: Vec<u8> = (0..=255).collect();
    let frames = scaled(100);
    for _ in 0..frames {
        encode(&mut ext, &payload);
    }
    assert_eq!(ext.len(), frames * (6 + 256));
    assert_eq!(&ext[..6], &[0, 0, 1, 0, 1, 0]);
    assert_eq!(&ext[6..262], &payload[..]);
    // A full buffer's chunk is never empty: chunk_mut grows it.
    let mut ext = ring.extendable(8).unwrap();
    ext.put_u64(1);
    let spare = ext.capacity() - ext.len(); // it starts with room for 64 bytes
    ext.put_bytes(0, spare);
    assert_eq!(ext.capacity(), ext.len());
    assert!(ext.chunk_mut().len() > 0);
    let frozen = ext.finalize().freeze();
    assert_eq!(&Bytes::from(frozen)[..8], &1u64.to_be_bytes());
}

#[test]
fn fixed_and_ext_buffers_encode_alike() {
    let ring = Ring::new(4096);
    let mut fixed = ring.fixed(64).unwrap();
    let mut ext = ring.extendable(0).unwrap();
    encode(&mut fixed, b"payload");
    encode(&mut ext, b"payload");
    assert_eq!(&fixed[..], &ext[..]);
}

#[test]
#[should_panic(expected = "cannot grow")]
fn ext_buf_put_panics_when_the_ring_cannot_grow_it() {
    let ring = Ring::builder()
        .capacity(256)
        .when_full(WhenFull::Fail)
        .build()
        .unwrap();
    let mut ext = ring.extendable(0).unwrap();
    ext.put_bytes(1, 1000);
}
