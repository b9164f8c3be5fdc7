//! Differential fuzz target: a byte string is a program of ring operations, checked
//! against a plain model (see `../driver.rs`, shared with `tests/fuzz_model.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run ring_ops -- -max_total_time=180
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../driver.rs"]
mod driver;

/// The driver's allocator, so that programs can make the heap refuse.
#[global_allocator]
static ALLOC: driver::Refusing = driver::Refusing;

fuzz_target!(|data: &[u8]| driver::run(data));
