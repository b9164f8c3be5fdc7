//! Differential fuzz target for the framed reader: an arbitrary stream, split at
//! arbitrary read boundaries, must yield exactly the frames (and the end, clean or
//! which error) of a reference decoder (see `../framed.rs`, shared with `tests/io.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run framed -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../framed.rs"]
mod framed;

fuzz_target!(|data: &[u8]| framed::run(data));
