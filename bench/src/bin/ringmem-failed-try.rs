//! What a try costs on a full ring, in instructions: for callgrind, which counts them
//! repeatably where a timer on a shared machine cannot (issue 45).
//!
//! ```text
//! cargo build --release -p ringmem-bench --bin ringmem-failed-try
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='ringmem_probe*' \
//!     target/release/ringmem-failed-try fail 1024 100000
//! ```
//!
//! `MODE REGIONS TRIES`: a `Fail` ring holding `REGIONS` live 56-byte buffers (64-byte
//! regions) and no free byte, then `TRIES` calls inside `ringmem_probe` (or `ringmem_probe_grow`),
//! the functions callgrind counts:
//! - `fail`: `fixed(56)`, each `None`;
//! - `fail-orphan`: the same while a block of a dropped ring is parked (one of its
//!   buffers is kept);
//! - `claim`: a successful claim, as a producer on a full ring gets it: the oldest
//!   buffer is dropped (released in the order of allocation), then `fixed(56)`;
//! - `wait`: `fixed_wait(56)` after the oldest buffer is dropped;
//! - `grow`: an `ExtBuf` (the first region, written full) asked for 64 bytes more with
//!   `try_reserve`, each an error.
//!
//! Divide the count by `TRIES` (or take the difference of two counts) for a try's cost.

use std::collections::VecDeque;
use std::hint::black_box;

use ringmem::{FixedBufMut, Ring};

/// Data bytes of each buffer: with its header, a 64-byte region.
const SIZE: usize = 56;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: ringmem-failed-try fail|fail-orphan|claim|wait|grow REGIONS TRIES";
    let mode = args.next().expect(usage);
    let regions: usize = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let tries: usize = args.next().and_then(|a| a.parse().ok()).expect(usage);
    // A block of a dropped ring, parked while one of its buffers lives.
    let orphan = (mode == "fail-orphan").then(|| {
        let other = Ring::new(4096);
        let kept = other.fixed(SIZE).expect("an empty ring has room");
        let _ = other.fixed(SIZE).expect("an empty ring has room");
        drop(other);
        kept
    });
    let ring = Ring::new(regions * (SIZE + 8));
    let mut ext = (mode == "grow").then(|| {
        let mut ext = ring.extendable(SIZE).expect("an empty ring has room");
        ext.try_extend_from_slice(&[7; SIZE])
            .expect("room for SIZE bytes");
        ext
    });
    // Every byte taken (the `ExtBuf`'s region is a little larger than the others).
    let mut live: VecDeque<FixedBufMut> = core::iter::from_fn(|| ring.fixed(SIZE)).collect();
    assert!(live.len() + 2 >= regions, "the ring holds REGIONS buffers");
    assert!(ring.fixed(SIZE).is_none(), "the ring must be full");
    // A lap first, as a producer's first failed try after room pays it.
    assert!(ring.fixed(SIZE).is_none(), "the ring must be full");
    let got = match ext.as_mut() {
        Some(ext) => ringmem_probe_grow(ext, tries),
        None => ringmem_probe(&mode, &ring, &mut live, tries),
    };
    println!("{mode} regions={regions} tries={tries} successes={got}");
    drop(orphan);
}

/// The tries callgrind counts (`--toggle-collect=ringmem_probe`).
#[no_mangle]
#[inline(never)]
extern "Rust" fn ringmem_probe(
    mode: &str,
    ring: &Ring,
    live: &mut VecDeque<FixedBufMut>,
    tries: usize,
) -> usize {
    let mut got = 0;
    match mode {
        "fail" | "fail-orphan" => {
            for _ in 0..tries {
                got += usize::from(black_box(ring.fixed(black_box(SIZE))).is_some());
            }
        }
        "claim" | "wait" => {
            for _ in 0..tries {
                drop(live.pop_front());
                let b = if mode == "claim" {
                    ring.fixed(SIZE)
                } else {
                    ring.fixed_wait(SIZE).ok()
                };
                let b = b.expect("the released region has room");
                live.push_back(b);
                got += 1;
            }
        }
        _ => panic!("unknown mode {mode}"),
    }
    got
}

/// The `grow` tries, counted as [`ringmem_probe`]'s
/// (`--toggle-collect=ringmem_probe_grow`).
#[no_mangle]
#[inline(never)]
extern "Rust" fn ringmem_probe_grow(ext: &mut ringmem::ExtBuf<'_>, tries: usize) -> usize {
    let mut got = 0;
    for _ in 0..tries {
        got += usize::from(black_box(ext.try_reserve(black_box(SIZE + 8))).is_ok());
    }
    got
}
