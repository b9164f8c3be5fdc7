//! Helpers shared by the integration tests.
#![allow(dead_code)]

/// Shrinks iteration counts under Miri and the sanitizers: the one place sizes shrink.
pub fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        (n / 200).max(2)
    } else if option_env!("RINGMEM_SMALL").is_some() {
        (n / 10).max(2)
    } else {
        n
    }
}

/// A byte pattern derived from an id, so a reader can check a buffer holds its own
/// bytes and not another's.
pub fn pattern(id: u64, len: usize) -> impl Iterator<Item = u8> {
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    })
}

/// Fills `buf` with the pattern of `id`.
pub fn fill(id: u64, buf: &mut [u8]) {
    let len = buf.len();
    for (b, p) in buf.iter_mut().zip(pattern(id, len)) {
        *b = p;
    }
}

/// Whether `buf` holds the pattern of `id`.
pub fn holds(id: u64, buf: &[u8]) -> bool {
    buf.iter().copied().eq(pattern(id, buf.len()))
}

/// Checks that no two of the byte ranges overlap.
pub fn assert_disjoint(mut ranges: Vec<(usize, usize)>) {
    ranges.retain(|r| r.1 > 0);
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "buffers overlap: {:#x}+{} and {:#x}+{}",
            w[0].0,
            w[0].1,
            w[1].0,
            w[1].1
        );
    }
}
pub mod faulty;
