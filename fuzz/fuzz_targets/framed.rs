//! Differential fuzz target for the framed readers: an arbitrary stream, split at
//! arbitrary read boundaries, must yield exactly the frames (and the end, clean or
//! which error) of a reference decoder, through the blocking reader (see
//! `../framed.rs`, shared with `tests/io.rs`) and through the async one, whose reader
//! also stalls and replaces a `ReadBuf` (`../framed_async.rs`, shared with
//! `tests/io_tokio.rs`); and neither may cut reads short out of proportion to the
//! stream (a frame that grows a few bytes per read is quadratic).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run framed -- -max_total_time=60 -max_len=4096
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../framed.rs"]
mod framed;
#[path = "../framed_async.rs"]
mod framed_async;

fuzz_target!(|data: &[u8]| {
    framed::run(data);
    framed_async::run(data);
});
