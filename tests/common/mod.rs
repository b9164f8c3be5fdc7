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

/// `seed`, `seed + 1`, ... (wrapping): 256 bytes of a table built at compile time.
/// Tests copy and compare it a slice at a time, one step each for Miri. Building it at
/// run time with `core::array::from_fn` cost Tree Borrows time quadratic in its length
/// (each element's write retags the whole array): 256 bytes took longer than a test's
/// own allocations.
pub fn counting(seed: u8) -> &'static [u8; 256] {
    static TABLE: [u8; 512] = {
        let mut t = [0; 512];
        let mut i = 0;
        while i < t.len() {
            t[i] = i as u8;
            i += 1;
        }
        t
    };
    let at = usize::from(seed);
    TABLE[at..at + 256].try_into().unwrap()
}

/// A byte pattern derived from an id, so a reader can check a buffer holds its own
/// bytes and not another's: the little-endian words of a xorshift stream seeded by the
/// id. [`fill`] and [`holds`] take it a word at a time and compare with slice
/// equality, which Miri runs as one step where a loop over bytes costs it one per byte.
pub fn pattern(id: u64, len: usize) -> impl Iterator<Item = u8> {
    let mut x = seed(id);
    (0..len.div_ceil(8))
        .flat_map(move |_| next_word(&mut x))
        .take(len)
}

fn seed(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

fn next_word(x: &mut u64) -> [u8; 8] {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    x.to_le_bytes()
}

/// Fills `buf` with the pattern of `id`.
pub fn fill(id: u64, buf: &mut [u8]) {
    let mut x = seed(id);
    for chunk in buf.chunks_mut(8) {
        chunk.copy_from_slice(&next_word(&mut x)[..chunk.len()]);
    }
}

/// Whether `buf` holds the pattern of `id`.
pub fn holds(id: u64, buf: &[u8]) -> bool {
    let mut x = seed(id);
    buf.chunks(8)
        .all(|chunk| *chunk == next_word(&mut x)[..chunk.len()])
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

/// Hands out the stream `sizes[i % len]` bytes (at least 1) per read.
pub struct Chunked<'a> {
    data: &'a [u8],
    sizes: Vec<usize>,
    /// Reads made so far.
    pub i: usize,
}

impl<'a> Chunked<'a> {
    pub fn new(data: &'a [u8], sizes: Vec<usize>) -> Self {
        Chunked { data, sizes, i: 0 }
    }
}

impl std::io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = self.sizes[self.i % self.sizes.len()].max(1);
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// `cases` natively, 2 under Miri; no failure file (Miri has no file system).
pub fn config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: if cfg!(miri) { 2 } else { cases },
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
