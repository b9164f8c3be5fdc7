//! `ringmem-resp`: a Redis-protocol (RESP2) key-value server on ringmem's framed
//! readers, and the same server on tokio_util's `FramedRead`, for comparison.
//!
//! ```text
//! cargo run --release -p ringmem-resp -- --port 6380 --memory ringmem --budget-mib 64
//! redis-benchmark -p 6380 -t set,get -P 16 -q          # or redis-cli -p 6380
//! cargo run --release -p ringmem-resp -- --port 6381 --memory framed
//! ```
//!
//! It prints `listening on 127.0.0.1:N` once it accepts, and serves PING, ECHO, SET
//! (EX/PX), GET, DEL, EXISTS, INCR, MSET, MGET, LPUSH, RPUSH, LPOP, RPOP, LRANGE,
//! CONFIG GET, COMMAND, QUIT and INFO, as Redis 7 answers them, from 64 shards of
//! `Mutex<HashMap>` on a multi-threaded tokio runtime.
//!
//! **Reading requests.** Each connection reads with an `AsyncFramedReader` on one
//! `ReadPool` (`--budget-mib`) through `ringmem::io::Resp`: a request is one frame, a
//! `FixedBuf` of the pool, and its arguments are ranges of it (`Resp::args`), sliced
//! without a copy. An idle connection holds no pool memory; a connection's memory is
//! bounded by the pool whatever it sends (a bulk announced at 10^9 bytes is `invalid
//! bulk length`, one the pool can never hold a `-ERR Protocol error`, and the
//! connection is closed, as Redis closes it).
//!
//! **Where values live.** A `SET` of 4 KiB or more keeps its value as a slice of its
//! own request's frame (`FixedBuf::slice`: no allocation and no copy of its own; the
//! reader moves a short frame it sees kept into a slot of the pool, so a value holds
//! about its frame's bytes, not the read region's), and a `GET` sends that slice, not
//! a copy. A shorter value is copied into every reply anyway, and a frame kept for it
//! costs more than a heap copy: the reader's copy into a slot once it sees frames
//! kept, and the frame's header, key and slot rounding beside the value (1 KiB values,
//! 16 pipelined, callgrind: `MSET` 25,200 instructions a request kept, 19,200 copied;
//! 200,000 keys: 1,231-1,263 bytes resident a key kept, 1,191-1,220 copied). So values
//! under 4 KiB are copied: up to 30 bytes into the store's entry itself, longer ones
//! to the heap (`Arc<[u8]>`). Kept frames count against the pool's budget, and a pool
//! full of values would stop every reader, a `DEL` too: values are kept in the pool
//! only while they take at most half its budget, and copied to the heap beyond, so
//! readers always have the other half and never wait for room however large the store
//! grows. Values deleted go back as they go: the pool's pages by its sweeper, the
//! heap's by `malloc_trim` once megabytes of values were dropped, and once the drops
//! stop (glibc is told to keep 1 MiB free at the top of each heap, not 128 KiB: see
//! `main.rs`).
//!
//! **Replies** go out through an `AsyncFramedWriter` with a RESP `Encoder`: a bulk
//! reply of 4 KiB or more has its `$len\r\n` and `\r\n` as its framing and the
//! stored value itself as its payload (a clone of the `FixedBuf`, a count: no copy).
//! Every shorter reply is copied into a buffer of the connection, which goes out as
//! one payload: a slice of a vectored write per short reply cost a system call per
//! 32 of them. No heap allocation per reply once warm.
//!
//! With `--memory framed`, the same commands run on `FramedRead` over a `BytesMut`
//! (the same decoder, as a `tokio_util` codec), values are `Bytes` slices of the read
//! buffer (each holds the buffer it was read into), and replies are encoded into a
//! `BytesMut` and written with `write_all`, as a tokio user writes it.
//!
//! `INFO` reports `used_memory_rss`, `keys`, `reader_waits` (the pool's count of
//! readers that waited for room) and `pool_bytes_in_use`.

mod command;
pub mod framed_mode;
pub mod ringmem_mode;
mod store;

use std::io;

pub use command::{execute, rss_bytes, Info, Replies, Then};
use ringmem::io::FrameError;
pub use store::{Entry, Shard, Slot, Store, Value};

/// Arguments a connection keeps room for between requests (one of more arguments
/// allocates its room, and gives it back after).
pub const ARGS_KEPT: usize = 1024;

/// Bytes of replies queued after which a connection writes them out before reading on.
pub const HIGH_WATER: usize = 64 << 10;

/// The reply to a request the reader rejected, as Redis words it (`-ERR Protocol
/// error: ...`), or `None` for an error that ends the connection silently (the client
/// left mid-request, the socket failed).
pub fn protocol_error(e: &io::Error) -> Option<String> {
    let why = e.get_ref()?.downcast_ref::<FrameError>()?;
    match why {
        FrameError::LargerThanRing { needed, .. } => Some(format!(
            "-ERR Protocol error: a request of {needed} bytes is larger than the read budget allows\r\n"
        )),
        FrameError::Truncated { .. } | FrameError::ReadOverrun { .. } | FrameError::ReadBufReplaced { .. } => None,
        _ => Some(format!("-ERR Protocol error: {why}\r\n")),
    }
}
