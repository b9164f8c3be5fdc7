//! Whether extendable buffers still hold what was written: a ring of ringal's 64 B
//! row (8 KiB), buffers grown from `extendable(0)` by one `write_all`, buffer `i`
//! filled with byte `i`, all held until the ring refuses one (or there are
//! [`MAX_HELD`]); then every buffer is read back. Printed under the extendable tables.

use std::io::Write;

use crate::harness::thousands;

/// Ring capacity: 2 × 64 buffers × 64 B, the first row of ringal's table.
const CAPACITY: usize = 8192;
/// Bytes written into each buffer.
const LEN: usize = 64;
/// More buffers than the ring can hold: where the check stops asking.
const MAX_HELD: usize = 1000;

/// What the check found for one ring.
pub struct Found {
    /// Buffers handed out before the ring refused one (or `MAX_HELD`).
    pub held: usize,
    /// Held buffers whose bytes are no longer the ones written.
    pub wrong: usize,
}

/// The check on ringal's `RingAl`.
pub fn ringal() -> Found {
    let mut ring = ringal::RingAl::new(CAPACITY);
    let mut held = Vec::new();
    for i in 0..MAX_HELD {
        let Some(mut e) = ring.extendable(0) else {
            break;
        };
        if e.write_all(&[i as u8; LEN]).is_err() {
            break;
        }
        held.push(e.finalize());
    }
    found(held.iter().map(|b| &b[..]))
}

/// The check on ringmem's `Ring`.
#[cfg(feature = "ringmem-rows")]
pub fn ringmem() -> Found {
    let ring = ringmem::Ring::new(CAPACITY);
    let mut held = Vec::new();
    for i in 0..MAX_HELD {
        let Some(mut e) = ring.extendable(0) else {
            break;
        };
        if e.write_all(&[i as u8; LEN]).is_err() {
            break;
        }
        held.push(e.finalize());
    }
    found(held.iter().map(|b| &b[..]))
}

fn found<'a>(bufs: impl Iterator<Item = &'a [u8]>) -> Found {
    let (mut held, mut wrong) = (0, 0);
    for (i, b) in bufs.enumerate() {
        held += 1;
        if b.len() != LEN || b.iter().any(|&x| x != i as u8) {
            wrong += 1;
        }
    }
    Found { held, wrong }
}

/// The note under the extendable tables.
pub fn note() -> String {
    let a = ringal();
    let mut s = format!(
        "Check: in a ring of {} KiB, buffers from `extendable(0)` and one `write_all` of {LEN} bytes each \
         (buffer i filled with byte i), all held: ringal handed out {}{} ({} B), of which {} no longer hold what was written",
        CAPACITY / 1024,
        a.held,
        if a.held == MAX_HELD { " before the check stopped" } else { "" },
        thousands(a.held * LEN),
        a.wrong
    );
    #[cfg(feature = "ringmem-rows")]
    {
        let m = ringmem();
        s.push_str(&format!(
            "; ringmem handed out {} ({} B), {} wrong",
            m.held,
            thousands(m.held * LEN),
            m.wrong
        ));
    }
    s.push('.');
    if a.wrong > 0 {
        s.push_str(
            " ringal 0.4's extendable buffers are handed memory that live buffers still hold, so its columns in \
             the extendable tables time a ring that need not wait for the consumer (and overwrites its buffers).",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_counts_the_buffers_that_changed() {
        let bufs: [&[u8]; 3] = [&[0; LEN], &[9; LEN], &[2; LEN]];
        let f = found(bufs.into_iter());
        assert_eq!((f.held, f.wrong), (3, 1));
    }

    #[cfg(feature = "ringmem-rows")]
    #[test]
    fn ringmem_buffers_keep_their_bytes() {
        let m = ringmem();
        assert_eq!(m.wrong, 0);
        assert!(m.held > 0 && m.held * LEN <= CAPACITY, "{} held", m.held);
    }
}
