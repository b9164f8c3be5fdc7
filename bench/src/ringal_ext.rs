//! Scenario 2, ringal's "extendable buffer (chunked writes)" table: the same five
//! rows as the fixed table, but each buffer starts empty and grows while the
//! random length is written in 64-byte chunks, then is sent to the consumer; and
//! the variants users write (full size; drop and restart on failure).

use crate::harness::{Config, Table};

/// The cases [`run`] runs.
pub fn case_count(cfg: &Config) -> usize {
    crate::ringal_fixed::case_count(cfg, true)
}

/// Scenario 2.
pub fn run(cfg: &Config) -> Vec<Table> {
    crate::ringal_fixed::scenario(cfg, true)
}
