//! Scenario 2, ringal's "extendable buffer (chunked writes)" table: the same five
//! rows as the fixed table, but each buffer starts empty and grows while the
//! random length is written in 64-byte chunks, then is sent to the consumer.

use crate::harness::{Config, Table};

/// Scenario 2.
pub fn run(cfg: &Config) -> Vec<Table> {
    let mut t = vec![crate::ringal_fixed::ringal_table(cfg, true)];
    t.extend(crate::ringal_fixed::rss_table(cfg, true));
    t
}
