//! Frames received with io_uring (Linux, feature `io-uring`): a group of provided
//! buffers that are ring memory, a multishot receive per connection, and readers that
//! yield each connection's frames as [`FixedBuf`](crate::FixedBuf)s.
//!
//! A reader on epoll ([`AsyncFramedReader`](crate::io::AsyncFramedReader)) claims a
//! region before each read, whether or not its socket has bytes. Here the kernel takes
//! a buffer from the group only when a socket has data, so memory follows the bytes in
//! flight, not the connections. Where the kernel has incremental consumption
//! (Linux 6.12; detected when the group is made) one buffer serves many receives, each
//! taking the bytes it got, from whichever connection; elsewhere each receive takes a
//! buffer whole. A buffer is a region of the group's ring, given back by the kernel
//! after its last completion; the region comes back to the ring once the frames read
//! from it are dropped, on any thread, and the group publishes it again.
//!
//! The group runs on tokio: a task spawned on the runtime it is made in reaps the
//! completions (woken through the io_uring descriptor, registered with tokio's
//! reactor), hands each connection's bytes to its reader and wakes it. Its cost: a
//! wake-up of that task per batch of completions, and one lock per batch. The kernel
//! finishes a receive on the thread that started it, at that thread's next system
//! call (cooperative task work, Linux 5.19 on), not by interrupting it: a worker busy
//! in a long computation without system calls delays its connections' bytes.
//!
//! The kernel runs one io_uring instance's receives one at a time, copies included,
//! so a group is made of two instances per worker thread of the runtime (its shards,
//! [`UringOptions::shards`]), each with its share of the group's bytes, its buffers
//! and its task; connections are given to them in turn. With one instance, 100
//! connections streaming on two cores read 0.55x the frames of the epoll reader, which
//! copies on both; with one per worker, two workers still meet at one instance often
//! enough that four busy connections read 0.91-1.00x its frames, with two per worker
//! 0.99-1.05x.
//!
//! ```no_run
//! # #![allow(dead_code)] // `serve` is the example: nothing calls it here
//! use ringmem::io::LengthDelimited;
//! use ringmem::uring::{UringError, UringGroup};
//!
//! # async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
//! let group = match UringGroup::new(16 << 20) {
//!     Ok(group) => group,
//!     // io_uring refused (seccomp, `kernel.io_uring_disabled`, an old kernel): the
//!     // epoll reader serves instead.
//!     Err(UringError::Unavailable(e)) => return Err(e),
//!     Err(e) => return Err(e.into()),
//! };
//! loop {
//!     let (conn, _) = listener.accept().await?;
//!     let mut frames = group.framed(&conn, LengthDelimited::new())?;
//!     tokio::spawn(async move {
//!         while let Ok(Some(frame)) = frames.next_frame().await {
//!             drop(frame); // or keep it: it holds its buffer's region
//!         }
//!         drop(conn);
//!     });
//! }
//! # }
//! ```
//!
//! A frame kept holds the region of the buffer it was received into (up to the
//! buffer's length, [`UringOptions::buf_len`]), as a frame read by the epoll reader
//! without copies does.
//!
//! An idle connection costs its reader (112 bytes with [`LengthDelimited`], in the
//! task that polls it), a queue it shares with the group's task (104 bytes on the
//! heap) and an entry in its instance's connection table. What a connection has
//! received and not yet yielded (views, a partial frame's copy) is held in a box made
//! when its bytes come and dropped once it has none, the queue's deque too.
//!
//! [`LengthDelimited`]: crate::io::LengthDelimited
//!
//! When the kernel finds no buffer (`ENOBUFS`) the receive waits until the group
//! publishes again; then as many waiting receives start again as the bytes the kernel
//! has can serve, at what receives brought lately, not all of them. While more wait
//! than that, each starts as a single receive (one completion, then back in line if
//! its socket has more bytes), as many as the buffers the kernel holds: a multishot
//! receive on a socket with bytes waiting takes buffer after buffer until `ENOBUFS`,
//! and a receive whose reader starts it again waits in line behind them. A receive on
//! a socket without bytes waits for them in the kernel, taking no buffer and no place
//! in line.
//!
//! A connection receives only once its reader has looked for bytes, and at most its
//! cap ahead of it; the rest waits in the socket, as on epoll. The cap starts at a
//! buffer's bytes ([`UringOptions::buf_len`]) and doubles, up to
//! [`UringOptions::queue_cap`], each time the reader takes a queue that had filled it,
//! while the caps of the group's connections sum to at most the group's bytes beyond a
//! buffer's each (a connection gives its share back when it goes). Readers that stop
//! reading with their cap queued while the ring has no room for the buffers the kernel
//! needs have their queued bytes copied into the pool once they have taken nothing for
//! 20 ms, so that their buffers go back: a reader that stops reading holds the buffer
//! of the completion it took last, not the group, and however many stop, their copies
//! come to at most the group's bytes and a buffer's each. The price is paid where many
//! connections stream at once: each receives less far ahead of its reader (with 100 of
//! 1,000 streaming on an 8 MiB group of one instance, 0.8x the frames per second of a
//! fixed cap).
//!
//! A reader holding the start of a frame keeps it as a view only while its
//! connection's next bytes can join it (the kernel writes that buffer next, right
//! after it); once another connection's bytes land there, or the kernel gives the
//! buffer back, the reader copies it out (into the group's read pool, or the heap).
//! So partial frames hold no more of the ring than the buffers the kernel holds,
//! however many connections wait for the rest of a frame.

mod books;
mod driver;
mod frames;
mod reader;

/// A mutex's guard, whether or not a holder panicked: every update under the group's
/// locks is one assignment, push or take, so what it guards stays consistent.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

use core::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use reader::UringFramedReader;

use crate::io::{Decoder, Memory, ReadPool};
use driver::{Config, Shared, Socket, StartError};

/// The least and most default `UringOptions::queue_cap`.
const QUEUE_CAP_LEAST: usize = 256 << 10;
const QUEUE_CAP_MOST: usize = 4 << 20;

/// Why a [`UringGroup`] could not be made.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap().block_on(async {
/// use ringmem::uring::{UringError, UringGroup};
/// match UringGroup::new(1 << 20) {
///     Ok(group) => assert!(group.stats().buffers > 0),
///     Err(UringError::Unavailable(e)) => eprintln!("io_uring refused here: {e}"),
///     Err(e) => panic!("{e}"),
/// }
/// # });
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum UringError {
    /// The kernel refused io_uring or its provided-buffer rings: `EPERM` (a seccomp
    /// filter, as Docker's default, or `kernel.io_uring_disabled`), `ENOSYS`, or
    /// `EINVAL` from a kernel older than 5.19. Use
    /// [`AsyncFramedReader`](crate::io::AsyncFramedReader) instead.
    Unavailable(io::Error),
    /// Not called from inside a tokio runtime, which the group's task runs on.
    NoRuntime,
    /// Another failure (memory for the ring, registering the descriptor with tokio).
    Other(io::Error),
}

impl fmt::Display for UringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UringError::Unavailable(e) => write!(f, "io_uring is not available: {e}"),
            UringError::NoRuntime => f.write_str("a UringGroup is made inside a tokio runtime"),
            UringError::Other(e) => write!(f, "io_uring group: {e}"),
        }
    }
}

impl std::error::Error for UringError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UringError::Unavailable(e) | UringError::Other(e) => Some(e),
            UringError::NoRuntime => None,
        }
    }
}

impl From<UringError> for io::Error {
    fn from(e: UringError) -> io::Error {
        let kind = match &e {
            UringError::Unavailable(_) => io::ErrorKind::Unsupported,
            UringError::NoRuntime | UringError::Other(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// How a [`UringGroup`] is made.
///
/// ```
/// use ringmem::uring::UringOptions;
/// let opts = UringOptions::new(8 << 20).buf_len(32 << 10).incremental(false);
/// assert_eq!(opts.bytes(), 8 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct UringOptions {
    bytes: usize,
    buf_len: usize,
    incremental: Option<bool>,
    queue_cap: usize,
    buffers: usize,
    shards: usize,
    pool: Option<ReadPool>,
}

impl UringOptions {
    /// A group of `bytes` of ring memory (at least one buffer's), in buffers of 64 KiB
    /// with incremental consumption where the kernel has it and 16 KiB where not.
    ///
    /// ```
    /// assert_eq!(ringmem::uring::UringOptions::new(1 << 20).bytes(), 1 << 20);
    /// ```
    pub fn new(bytes: usize) -> UringOptions {
        UringOptions {
            bytes,
            buf_len: 0,
            incremental: None,
            queue_cap: 0,
            buffers: 32,
            shards: 0,
            pool: None,
        }
    }

    /// The group's bytes.
    ///
    /// ```
    /// assert_eq!(ringmem::uring::UringOptions::new(4096).bytes(), 4096);
    /// ```
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes of each buffer (at least 4 KiB). A frame kept holds its buffer's region:
    /// shorter buffers cost kept frames less, longer ones serve more receives each.
    /// Keep them longer than most frames: a frame longer than a buffer comes in pieces,
    /// its start copied, and while connections wait in line for buffers each receives
    /// a buffer's bytes in turn, so each may hold a copy of its frame's start at once
    /// (from the group's pool, then the heap).
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).buf_len(16 << 10);
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn buf_len(mut self, bytes: usize) -> UringOptions {
        self.buf_len = bytes;
        self
    }

    /// Incremental consumption on (`true`: the group fails where the kernel has none)
    /// or off; by default on where the kernel has it.
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).incremental(false);
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn incremental(mut self, on: bool) -> UringOptions {
        self.incremental = Some(on);
        self
    }

    /// The most bytes a connection's received, untaken bytes may reach before its
    /// receive is paused until its reader takes them (at least a buffer's): a reader
    /// that does not keep up cannot take the whole group. A connection's cap starts at a
    /// buffer's bytes and grows towards this while its reader keeps up and the group's
    /// bytes cover it (see the [module](self)). By default a quarter of a shard's bytes
    /// (the group's over [`shards`](Self::shards)), from 256 KiB to 4 MiB. From Linux
    /// 6.17 a receive ends at the cap by itself; before, a pause cancels it (a multishot
    /// receive takes many buffers in a row from a connection with bytes waiting, so the
    /// queue may pass the cap by a few), and either way the connection stalls until its
    /// reader has taken its bytes.
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).queue_cap(1 << 20);
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn queue_cap(mut self, bytes: usize) -> UringOptions {
        self.queue_cap = bytes;
        self
    }

    /// Buffers the kernel holds at most (32 by default, shared out over the shards):
    /// what receives can take before the group publishes more, as buffers come back.
    /// The kernel fills them in turn, so they are the pages receiving keeps resident,
    /// with the frames held.
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).buffers(8);
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn buffers(mut self, n: usize) -> UringOptions {
        self.buffers = n;
        self
    }

    /// The io_uring instances the group is made of, its shards (`0`, the default: two
    /// per worker thread of the runtime it is made in), each with an even share of the
    /// group's bytes (at least a buffer's), its buffers and a task of its own;
    /// connections are given to them in turn. The kernel runs one instance's receives
    /// one at a time, copies included: a group of one instance copies on one core at a
    /// time, where the epoll reader copies on the core that reads.
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).shards(1);
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn shards(mut self, n: usize) -> UringOptions {
        self.shards = n;
        self
    }

    /// The pool the copies of frames carried by more than one completion come from
    /// (by default [`ReadPool::global`]).
    ///
    /// ```
    /// let opts = ringmem::uring::UringOptions::new(1 << 20).pool(ringmem::io::ReadPool::new(1 << 20));
    /// assert_eq!(opts.bytes(), 1 << 20);
    /// ```
    pub fn pool(mut self, pool: ReadPool) -> UringOptions {
        self.pool = Some(pool);
        self
    }
}

/// What a [`UringGroup`] holds and has done.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap().block_on(async {
/// # let Ok(group) = ringmem::uring::UringGroup::new(1 << 20) else { return };
/// let stats = group.stats();
/// assert_eq!(stats.completions, 0);
/// assert!(stats.buffers > 0 && stats.bytes_in_use >= stats.buffers * 1024);
/// # });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UringStats {
    /// The group's io_uring instances ([`UringOptions::shards`]); the figures below
    /// are their sums.
    pub shards: usize,
    /// Buffers the kernel holds now.
    pub buffers: usize,
    /// Bytes of the group's ring in use (buffers the kernel holds, and those frames
    /// still hold), headers included.
    pub bytes_in_use: usize,
    /// The ring's bytes.
    pub capacity: usize,
    /// Whether buffers are consumed incrementally.
    pub incremental: bool,
    /// Bytes of a whole buffer.
    pub buf_len: usize,
    /// Receive completions so far.
    pub completions: u64,
    /// Receives that found no buffer (`ENOBUFS`); each waited for one.
    pub out_of_buffers: u64,
    /// Receives started again after waiting for buffers, or after a pause.
    pub restarts: u64,
    /// Receives paused because their reader had not taken their bytes.
    pub pauses: u64,
    /// Buffers published so far.
    pub published: u64,
    /// Bytes of the ring's free pages given back to the system so far (once a second
    /// at most, and once the receives go quiet).
    pub bytes_given_back: u64,
    /// Bytes copied out of the ring into the pool, from readers that had stopped
    /// taking them while the ring was short of room.
    pub bytes_moved: u64,
}

/// A group of io_uring provided buffers in ring memory and the receives that fill them
/// (see the [module](self)). Cloned, the handles share it; it ends once the handles and
/// its readers are dropped and the kernel has finished every receive.
///
/// ```no_run
/// # #![allow(dead_code)]
/// # async fn f(conn: tokio::net::TcpStream) -> Result<(), Box<dyn std::error::Error>> {
/// let group = ringmem::uring::UringGroup::new(8 << 20)?;
/// let mut lines = group.framed(&conn, ringmem::io::Lines::new())?;
/// if let Some(first) = lines.next_frame().await? {
///     println!("{}", String::from_utf8_lossy(&first));
/// }
/// # Ok(()) }
/// ```
pub struct UringGroup {
    shards: Arc<Shards>,
    /// Where the copies of frames carried by more than one completion go.
    pool: ReadPool,
}

/// The group's io_uring instances, which the group's handles share: each counts them
/// as one user of its own (see `Shared::drop_user`).
struct Shards {
    list: Vec<Arc<Shared>>,
    /// The shard the next connection goes to, modulo their number.
    next: AtomicUsize,
}

impl Drop for Shards {
    fn drop(&mut self) {
        for shard in &self.list {
            shard.drop_user();
        }
    }
}

impl UringGroup {
    /// A group of `bytes` of ring memory with the default options ([`UringOptions::new`]).
    ///
    /// # Errors
    /// See [`UringError`].
    ///
    /// # Panics
    /// Inside a tokio runtime whose I/O driver is off (`enable_io`), as tokio's own
    /// I/O types do.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap().block_on(async {
    /// match ringmem::uring::UringGroup::new(1 << 20) {
    ///     Ok(group) => assert_eq!(group.stats().capacity, 1 << 20),
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// # });
    /// ```
    pub fn new(bytes: usize) -> Result<UringGroup, UringError> {
        UringGroup::with_options(UringOptions::new(bytes))
    }

    /// A group made as `options` say.
    ///
    /// # Errors
    /// See [`UringError`].
    ///
    /// # Panics
    /// As [`new`](Self::new).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap().block_on(async {
    /// use ringmem::uring::{UringGroup, UringOptions};
    /// if let Ok(group) = UringGroup::with_options(UringOptions::new(1 << 20).incremental(false)) {
    ///     assert!(!group.stats().incremental);
    /// }
    /// # });
    /// ```
    pub fn with_options(options: UringOptions) -> Result<UringGroup, UringError> {
        let inc_default = options.incremental != Some(false);
        let buf_len = match options.buf_len {
            0 if inc_default => 64 << 10,
            0 => 16 << 10,
            n => n,
        };
        let pool = options.pool.unwrap_or_else(|| ReadPool::global().clone());
        let n = match options.shards {
            0 => tokio::runtime::Handle::try_current()
                .map_err(|_| UringError::NoRuntime)?
                .metrics()
                .num_workers()
                .saturating_mul(2),
            n => n,
        };
        let bytes = options.bytes / n;
        let config = Config {
            bytes,
            buf_len,
            incremental: options.incremental,
            queue_cap: match options.queue_cap {
                0 => (bytes / 4).clamp(QUEUE_CAP_LEAST, QUEUE_CAP_MOST),
                n => n,
            },
            // The kernel's buffers and the table's slots are shared out: connections are too.
            buffers: options.buffers.div_ceil(n),
            slots: driver::SLOTS_MOST / u32::try_from(n).unwrap_or(u32::MAX),
            pool: pool.clone(),
        };
        let mut shards = Shards {
            list: Vec::with_capacity(n),
            next: AtomicUsize::new(0),
        };
        for _ in 0..n {
            // On an error the shards started end with `shards`.
            let shared = Shared::start(config.clone()).map_err(|e| match e {
                StartError::NoRuntime => UringError::NoRuntime,
                StartError::Refused(e) => UringError::Unavailable(e),
                StartError::Other(e) => UringError::Other(e),
            })?;
            shards.list.push(shared);
        }
        Ok(UringGroup {
            shards: Arc::new(shards),
            pool,
        })
    }

    /// A reader of `socket`'s frames (the caller keeps `socket` to write replies on).
    /// The reader uses no descriptor of its own: the io_uring instance it is given to
    /// holds the socket in a slot of its file table until the reader is dropped and
    /// the kernel has finished its receive. Past the table's slots (65,536 shared out
    /// over the shards, halved until the kernel takes them: it refuses more than the
    /// descriptor limit when the group is made) or where the kernel has no such table
    /// (before Linux 5.19), the reader receives on a duplicate of the descriptor.
    ///
    /// # Errors
    /// Duplicating the descriptor failed (where a duplicate is needed).
    ///
    /// ```no_run
    /// # #![allow(dead_code)]
    /// # async fn f(group: &ringmem::uring::UringGroup, conn: tokio::net::TcpStream) -> std::io::Result<()> {
    /// let mut frames = group.framed(&conn, ringmem::io::LengthDelimited::new())?;
    /// let first = frames.next_frame().await?;
    /// println!("{:?}", first.map(|f| f.len()));
    /// # Ok(()) }
    /// ```
    pub fn framed<D: Decoder>(
        &self,
        socket: &impl AsFd,
        decoder: D,
    ) -> io::Result<UringFramedReader<D>> {
        self.reader(Socket::Borrowed(socket.as_fd()), decoder)
    }

    /// A reader of the frames of the socket `fd` (closed once the reader is dropped
    /// and the kernel has finished its receive; in a slot of the group's file table,
    /// as [`framed`](Self::framed) says, `fd` itself is closed at once).
    ///
    /// # Errors
    /// None today; `io::Result` for what a later kernel interface may refuse.
    ///
    /// ```no_run
    /// # #![allow(dead_code)]
    /// # async fn f(group: &ringmem::uring::UringGroup, conn: std::net::TcpStream) -> std::io::Result<()> {
    /// let mut lines = group.framed_owned(conn.into(), ringmem::io::Lines::new())?;
    /// let first = lines.next_frame().await?;
    /// println!("{:?}", first.map(|f| f.len()));
    /// # Ok(()) }
    /// ```
    pub fn framed_owned<D: Decoder>(
        &self,
        fd: OwnedFd,
        decoder: D,
    ) -> io::Result<UringFramedReader<D>> {
        self.reader(Socket::Owned(fd), decoder)
    }

    fn reader<D: Decoder>(
        &self,
        socket: Socket<'_>,
        decoder: D,
    ) -> io::Result<UringFramedReader<D>> {
        let Shards { list, next } = &*self.shards;
        let shard = &list[next.fetch_add(1, Ordering::Relaxed) % list.len()];
        let conn = shard.connect(socket)?;
        Ok(UringFramedReader::new(
            Arc::clone(shard),
            conn,
            decoder,
            Memory::Pool(self.pool.clone()),
        ))
    }

    /// What the group holds and has done.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap().block_on(async {
    /// if let Ok(group) = ringmem::uring::UringGroup::new(1 << 20) {
    ///     assert_eq!(group.stats().out_of_buffers, 0);
    /// }
    /// # });
    /// ```
    pub fn stats(&self) -> UringStats {
        let list = &self.shards.list;
        let mut stats = UringStats {
            shards: list.len(),
            buffers: 0,
            bytes_in_use: 0,
            capacity: 0,
            incremental: list[0].incremental,
            buf_len: list[0].buf_len,
            completions: 0,
            out_of_buffers: 0,
            restarts: 0,
            pauses: 0,
            published: 0,
            bytes_given_back: 0,
            bytes_moved: 0,
        };
        for shard in list {
            let (ring, counters, buffers) = shard.ring_stats();
            let c = &shard.counters;
            stats.buffers += buffers;
            stats.bytes_in_use += ring.bytes_in_use;
            stats.capacity += ring.capacity;
            stats.completions += c.completions.load(Ordering::Relaxed);
            stats.out_of_buffers += c.out_of_buffers.load(Ordering::Relaxed);
            stats.restarts += c.rearms.load(Ordering::Relaxed);
            stats.pauses += c.pauses.load(Ordering::Relaxed);
            stats.published += c.published.load(Ordering::Relaxed);
            stats.bytes_given_back += counters.bytes_given_back;
            stats.bytes_moved += c.moved.load(Ordering::Relaxed);
        }
        stats
    }
}

impl Clone for UringGroup {
    fn clone(&self) -> Self {
        UringGroup {
            shards: Arc::clone(&self.shards),
            pool: self.pool.clone(),
        }
    }
}

impl fmt::Debug for UringGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringGroup")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod model;
