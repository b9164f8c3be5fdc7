//! `ExtBuf` growth when the ring is tight: a message that fits as a fixed buffer of its
//! final size also fits when written from `extendable(0)` in 64-byte pieces; a dropped
//! buffer that is the latest region gives its space back; the starting capacity.

mod common;

use std::io::Write;

use common::{holds, scaled};
use proptest::prelude::*;
use ringmem::{FixedBufMut, Ring, WhenFull};

/// A step that builds a ring state.
#[derive(Clone, Debug)]
enum Op {
    /// `fixed(n)`, kept live (filled with its id's pattern).
    Fixed(usize),
    /// `extendable(0)`, `n` bytes written, finalized and kept live.
    Ext(usize),
    /// Drops the live buffer at this index (modulo their number).
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..700).prop_map(Op::Fixed),
        1 => (1usize..700).prop_map(Op::Ext),
        3 => any::<usize>().prop_map(Op::Drop),
    ]
}

/// Runs `ops` on `ring`; returns the live buffers with their ids. The same ops on two
/// fresh rings of the same capacity give the same state (regions, head, window).
fn build(ring: &Ring, ops: &[Op]) -> Vec<(u64, FixedBufMut)> {
    let mut live: Vec<(u64, FixedBufMut)> = Vec::new();
    for (id, op) in ops.iter().enumerate() {
        let id = id as u64;
        match *op {
            Op::Fixed(n) => {
                if let Some(mut b) = ring.fixed(n) {
                    let data: Vec<u8> = common::pattern(id, n).collect();
                    b.write_all(&data).unwrap();
                    live.push((id, b));
                }
            }
            Op::Ext(n) => {
                if let Some(mut e) = ring.extendable(0) {
                    let data: Vec<u8> = common::pattern(id, n).collect();
                    if e.try_extend_from_slice(&data).is_ok() {
                        live.push((id, e.finalize()));
                    }
                }
            }
            Op::Drop(i) => {
                if !live.is_empty() {
                    live.swap_remove(i % live.len());
                }
            }
        }
    }
    live
}

/// Tries that look at every region of a ring of `cap` bytes at least once: a region
/// takes at least 16 bytes, a try that finds no room looks at the head, and one in
/// eight such tries at 4 more regions (with a lap to spare).
fn lap_of_tries(cap: usize) -> usize {
    2 * 8 * (cap / 16 / 4 + 2)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 4 } else { scaled(2000) as u32 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// If `fixed(n)` would succeed in a ring state, `extendable(0)` and `write_all` of
    /// `n` bytes in 64-byte pieces succeed in the same state (`try_extend_from_slice`, the all-or-nothing append that
    /// `write_all` makes), every other buffer keeps
    /// its bytes, and the finalized buffer holds the message. (From 64 bytes up:
    /// `extendable(0)` starts with room for 64, so a smaller message may find a gap
    /// too small for that start.) Each call retried as a caller on a full ring does,
    /// for a lap's worth of tries: a try that finds no room looks at a few regions, and
    /// the tries after it go on round the ring (see `Ring`).
    #[test]
    fn a_message_that_fits_as_fixed_fits_as_extendable(
        cap_words in 16usize..1024,
        ops in prop::collection::vec(op(), 0..60),
        n in 64usize..4000,
    ) {
        let cap = cap_words * 8;
        let fixed_ring = Ring::new(cap);
        let fixed_live = build(&fixed_ring, &ops);
        let lap = lap_of_tries(cap);
        let fits = (0..lap).any(|_| fixed_ring.fixed(n).is_some());

        let ring = Ring::new(cap);
        let live = build(&ring, &ops);
        prop_assert_eq!(live.len(), fixed_live.len());
        let msg: Vec<u8> = common::pattern(u64::MAX, n).collect();
        let Some(mut ext) = (0..lap).find_map(|_| ring.extendable(0)) else {
            prop_assert!(!fits, "fixed({}) fits but extendable(0) failed", n);
            return Ok(());
        };
        // All or nothing, so a piece can be tried again.
        let wrote = msg
            .chunks(64)
            .all(|c| (0..lap).any(|_| ext.try_extend_from_slice(c).is_ok()));
        if fits {
            prop_assert!(wrote, "fixed({}) fits but the extendable failed at {}", n, ext.len());
        }
        for (id, b) in &live {
            prop_assert!(holds(*id, b), "buffer {} was overwritten", id);
        }
        if wrote {
            let buf = ext.finalize();
            prop_assert_eq!(&buf[..], &msg[..]);
            for (id, b) in &live {
                prop_assert!(holds(*id, b), "buffer {} was overwritten", id);
            }
        }
    }
}

#[test]
fn extendable_0_starts_with_64_bytes() {
    let ring = Ring::new(4096);
    assert_eq!(ring.extendable(0).unwrap().capacity(), 64);
    assert_eq!(ring.extendable(10).unwrap().capacity(), 64);
    assert_eq!(ring.extendable(100).unwrap().capacity(), 104);
    // A ring too small for 64 bytes still serves what it can.
    let tiny = Ring::new(64);
    let mut ext = tiny.extendable(0).unwrap();
    assert!(ext.capacity() < 64);
    ext.write_all(&[1; 56]).unwrap();
    assert_eq!(ext.len(), 56);
}

#[test]
fn small_buffers_grow_in_place_fourfold_then_twofold() {
    let ring = Ring::new(1 << 20);
    let mut ext = ring.extendable(0).unwrap();
    let start = ext.as_ptr();
    let mut caps = vec![ext.capacity()];
    for _ in 0..(16 * 1024 / 64) {
        ext.write_all(&[3; 64]).unwrap();
        if ext.capacity() != *caps.last().unwrap() {
            caps.push(ext.capacity());
        }
    }
    // Below 4 KiB a growth asks for four times the capacity, from there twice; the
    // latest region grows from the window, so it never moves.
    assert_eq!(caps, [64, 256, 1024, 4096, 8192, 16384]);
    assert_eq!(ext.as_ptr(), start);
    // What was not written goes back to the ring.
    ext.write_all(&[3; 8]).unwrap();
    assert_eq!(ext.capacity(), 32768);
    assert_eq!(ext.finalize().capacity(), 16384 + 8);
}

#[test]
fn the_first_small_write_does_not_move_the_buffer() {
    let ring = Ring::new(1024);
    // Leaves the window at [1008, 1024): 16 bytes, room for a header and 8 bytes.
    drop(ring.fixed(1000).unwrap());
    let mut ext = ring.extendable(0).unwrap();
    let at = ext.as_ptr();
    ext.write_all(&[1; 64]).unwrap();
    assert_eq!(ext.as_ptr(), at);
}

#[test]
fn a_dropped_latest_buffer_gives_its_space_back() {
    let ring = Ring::new(4096);
    let _before = ring.fixed(100).unwrap();
    let mut ext = ring.extendable(0).unwrap();
    ext.write_all(&[1; 300]).unwrap();
    let at = ext.as_ptr();
    drop(ext);
    // The restart takes the same bytes, not the ones after them.
    let again = ring.extendable(0).unwrap();
    assert_eq!(again.as_ptr(), at);
    drop(again);
    assert_eq!(ring.stats().live_buffers, 1);
}

/// The loop of issue 22: a message written in 64-byte pieces into a tight ring, the
/// partial buffer dropped when a write fails and the message started over. The space
/// of a failed attempt comes back: the restart finds the ring as the attempt did.
#[test]
fn a_failed_write_then_drop_restarts_in_the_same_place() {
    let ring = Ring::new(2048);
    let first = ring.fixed(1000).unwrap(); // [0, 1008)
    let mut ext = ring.extendable(0).unwrap(); // from 1008, the tail of the block
    let msg = [9u8; 1500];
    assert!(!msg.chunks(64).all(|c| ext.write_all(c).is_ok()));
    let at = ext.as_ptr();
    drop(ext);
    assert_eq!(ring.stats().live_buffers, 1);
    let mut again = ring.extendable(0).unwrap();
    assert_eq!(again.as_ptr(), at);
    // Once the first buffer goes, the message fits: it moves over the freed space and
    // its own, at the block start.
    drop(first);
    assert!(msg.chunks(64).all(|c| again.write_all(c).is_ok()));
    let buf = again.finalize();
    assert_eq!(&buf[..], &msg[..]);
}

/// A growth on a `Fail` ring that cannot grow in place moves to room that lies past
/// many live regions: it looks round the whole block before it fails, where a claim's
/// try looks at a few regions. (Its holder would otherwise drop a half-written message
/// and start over: ringal's extendable rows, drop-and-restart loop.)
#[test]
fn a_growth_finds_room_past_many_live_regions_before_it_fails() {
    let ring = Ring::new(64 * 1024);
    let mut ext = ring.extendable(0).unwrap();
    ext.write_all(&[7; 100]).unwrap();
    let mut fixed: Vec<Option<FixedBufMut>> = Vec::new();
    while let Some(b) = ring.fixed(1016) {
        fixed.push(Some(b));
    }
    assert!(fixed.len() > 40, "{} fixed buffers", fixed.len());
    // Room for 8 KiB and more, 20 live regions on from the buffer.
    for b in &mut fixed[20..31] {
        *b = None;
    }
    let msg: Vec<u8> = (0..8000).map(|i| i as u8).collect();
    assert!(msg.chunks(64).all(|c| ext.write_all(c).is_ok()));
    let buf = ext.finalize();
    assert_eq!(&buf[..100], &[7; 100][..]);
    assert_eq!(&buf[100..], &msg[..]);
    // With no such room, the growth fails, and the message is whole up to it.
    let mut ext = ring.extendable(0).unwrap();
    assert!(ext.write_all(&[1; 4096]).is_err());
}

/// Growth of a buffer that is not the latest region, and of rings of the other
/// policies, still serves every write.
#[test]
fn grows_under_every_policy() {
    for policy in [WhenFull::Fail, WhenFull::Heap, WhenFull::Grow] {
        let ring = Ring::builder()
            .capacity(4096)
            .when_full(policy)
            .build()
            .unwrap();
        let mut ext = ring.extendable(0).unwrap();
        ext.write_all(&[1; 100]).unwrap();
        let _after = ring.fixed(100).unwrap(); // ext is no longer the latest region
        let n = if policy == WhenFull::Fail {
            3000
        } else {
            10_000
        };
        let msg: Vec<u8> = (0..n).map(|i| i as u8).collect();
        for c in msg.chunks(64) {
            ext.write_all(c).unwrap();
        }
        assert_eq!(&ext[100..], &msg[..]);
        assert!(ext[..100].iter().all(|&b| b == 1));
    }
}

/// A buffer that is not the latest region grows over the free regions after it.
#[test]
fn grows_in_place_over_released_successors() {
    let ring = Ring::new(8192);
    let mut ext = ring.extendable(0).unwrap();
    ext.write_all(&[1; 64]).unwrap();
    let at = ext.as_ptr();
    let after = ring.fixed(3000).unwrap();
    let _later = ring.fixed(100).unwrap(); // the window is past `after`
    drop(after);
    for _ in 0..40 {
        ext.write_all(&[2; 64]).unwrap();
    }
    assert_eq!(ext.as_ptr(), at);
    assert_eq!(ext.len(), 41 * 64);
}

/// A write retried on a full ring (the buffer held) looks only right after the buffer
/// for a few retries, then walks again and finds space released anywhere else.
#[test]
fn a_held_buffer_retried_on_a_full_ring_finds_released_space() {
    let ring = Ring::new(4096);
    let a = ring.fixed(2000).unwrap(); // [0, 2008)
    let b = ring.fixed(500).unwrap(); // [2008, 2520)
    let mut ext = ring.extendable(0).unwrap(); // from 2520, to the block end
    assert!(ext.try_extend_from_slice(&[1; 1568]).is_ok());
    assert!(ext.try_extend_from_slice(&[2; 64]).is_err());
    assert!(ext.try_extend_from_slice(&[2; 64]).is_err());
    // Released space that is not right after the buffer (which ends at the block
    // end): found by a walk, at the latest after the retries that look only there.
    drop(a);
    assert!((0..=16).any(|_| ext.try_extend_from_slice(&[2; 64]).is_ok()));
    assert!(ext[..1568].iter().all(|&x| x == 1));
    assert_eq!(&ext[1568..], &[2; 64]);
    drop(ext);
    drop(b);
}
