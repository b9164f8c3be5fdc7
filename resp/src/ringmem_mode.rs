//! `--memory ringmem`: requests read by `AsyncFramedReader` into a `ReadPool`, values
//! kept as slices of their request's frame while they fit a share of the pool, replies
//! queued in an `AsyncFramedWriter` and written in vectored writes.

use std::io::{self, Write as _};

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::FutureExt;
use ringmem::io::{AsyncFramedReader, AsyncFramedWriter, Encoder, Framing, ReadPool, Resp};
use ringmem::FixedBuf;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::command::{execute, fmt_i64, Info, Replies, Then};
use crate::store::{Store, Value};
use crate::{protocol_error, ARGS_KEPT, HIGH_WATER};

/// What a kept slice is counted at beyond its bytes: its share of the frame's header
/// and `\r\n`s, and of the copy slot's rounding.
const KEPT_OVERHEAD: usize = 32;

/// Bytes of values held as slices of the pool (counted with [`KEPT_OVERHEAD`]).
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// [`KEPT`]'s limit: a share of the pool's budget, set by [`set_keep_limit`].
static KEEP_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Values shorter than this are copied to the heap: set by [`set_keep_min`].
static KEEP_MIN: AtomicUsize = AtomicUsize::new(DEFAULT_KEEP_MIN);

/// The shortest value kept in the pool unless [`set_keep_min`] says otherwise: the
/// shortest a reply sends uncopied (see the crate's docs for why).
pub const DEFAULT_KEEP_MIN: usize = ZERO_COPY_MIN;

/// Values shorter than `bytes` are copied to the heap, not kept in the pool.
pub fn set_keep_min(bytes: usize) {
    KEEP_MIN.store(bytes, Ordering::Relaxed);
}

/// Values are kept as slices of the pool while they take at most `bytes` of it (with
/// 32 bytes more each, for their frame's framing), and copied to the heap beyond.
pub fn set_keep_limit(bytes: usize) {
    KEEP_LIMIT.store(bytes, Ordering::Relaxed);
}

/// Bytes of values held in the pool, as counted against the limit.
pub fn kept_bytes() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// A slice of a request's frame, counted in [`kept_bytes`] while the store holds it.
pub struct Kept(FixedBuf);

impl Drop for Kept {
    fn drop(&mut self) {
        // Relaxed: a count, which orders nothing (the frame's release has its own).
        KEPT.fetch_sub(self.0.len() + KEPT_OVERHEAD, Ordering::Relaxed);
    }
}

/// A stored value: the request's own bytes in the pool, a copy on the heap, or, up to
/// [`INLINE`] bytes, in the value itself.
pub enum RingValue {
    /// A slice of the frame it arrived in: no copy.
    Pool(Kept),
    /// A copy, once the pool's share for values is used up (or a value the server made).
    Heap(Arc<[u8]>),
    /// A short value's bytes (the first `len` of them), in the store's own entry: no
    /// allocation, where a heap copy cost a `malloc` and a `free` (about 2,000 of the
    /// 14,000 instructions of an `MSET` of ten 3-byte values, callgrind).
    Inline {
        /// How many of `bytes` are the value's.
        len: u8,
        /// The value, then unused bytes.
        bytes: [u8; INLINE],
    },
}

/// The longest value kept in a [`RingValue`] itself: what 32 bytes hold beside its
/// length and the variant's tag (with two variants, a slice of the pool and a heap
/// copy, the enum took 24).
pub const INLINE: usize = 30;

// An inline value is always sent as a copy (see `Queue::bulk`).
const _: () = assert!(INLINE < ZERO_COPY_MIN);
const _: () = assert!(std::mem::size_of::<RingValue>() == 32);

impl RingValue {
    /// `bytes` inline if short enough, else a heap copy.
    fn small(bytes: &[u8]) -> Self {
        match bytes.len() {
            len @ ..=INLINE => {
                let mut inline = [0; INLINE];
                inline[..len].copy_from_slice(bytes);
                RingValue::Inline {
                    len: len as u8,
                    bytes: inline,
                }
            }
            _ => RingValue::Heap(Arc::from(bytes)),
        }
    }
}

impl AsRef<[u8]> for RingValue {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match self {
            RingValue::Pool(k) => &k.0,
            RingValue::Heap(h) => h,
            RingValue::Inline { len, bytes } => &bytes[..usize::from(*len)],
        }
    }
}

impl Value for RingValue {
    type Frame = FixedBuf;

    fn keep(frame: &FixedBuf, range: Range<usize>) -> Self {
        if range.len() < KEEP_MIN.load(Ordering::Relaxed) {
            return RingValue::small(&frame[range]);
        }
        let cost = range.len() + KEPT_OVERHEAD;
        // Relaxed: a count; two connections racing past the limit overshoot it by a
        // value each at most.
        let before = KEPT.fetch_add(cost, Ordering::Relaxed);
        if before + cost <= KEEP_LIMIT.load(Ordering::Relaxed) {
            RingValue::Pool(Kept(frame.slice(range)))
        } else {
            KEPT.fetch_sub(cost, Ordering::Relaxed);
            RingValue::Heap(Arc::from(&frame[range]))
        }
    }

    fn copy(bytes: &[u8]) -> Self {
        RingValue::small(bytes)
    }
}

/// A reply's payload: pool bytes (a stored value), heap bytes, or short replies.
pub enum Payload {
    /// A frozen buffer: a value's slice, or a request's bytes.
    Buf(FixedBuf),
    /// A heap value, shared with the store.
    Heap(Arc<[u8]>),
    /// Short replies gathered in the connection's buffer.
    Bytes(Bytes),
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        match self {
            Payload::Buf(b) => b,
            Payload::Heap(h) => h,
            Payload::Bytes(b) => b,
        }
    }
}

/// How the next payload is framed.
#[derive(Clone, Copy, Debug, Default)]
enum Kind {
    /// As it is (replies gathered in the connection's buffer).
    #[default]
    Bare,
    /// `$<len>\r\n` payload `\r\n`: a stored value, uncopied.
    Bulk,
}

/// The replies' encoder: the framing of the kind of reply set before each `feed`.
#[derive(Debug, Default)]
pub struct RespEncoder {
    next: Kind,
}

impl Encoder for RespEncoder {
    fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
        if let Kind::Bulk = std::mem::take(&mut self.next) {
            let mut digits = [0; 20];
            framing.write_all(b"$")?;
            framing.write_all(fmt_i64(payload.len() as i64, &mut digits))?;
            framing.write_all(b"\r\n")?;
            framing.set_tail(b"\r\n")?;
        }
        Ok(())
    }
}

/// Values at least this long go out as their own slice of a vectored write (no copy);
/// shorter ones, and every other reply, are copied into the connection's buffer, which
/// goes out as one slice: a slice per short reply made a long `LRANGE` of short
/// values take a system call per 32 of them. A value's own slice costs about 600
/// instructions (its framing, the writer's queue, a count taken and let go), a copy
/// about 100 a KiB: `GET` at `-P 16` (callgrind), 1 KiB values 2,690 instructions a
/// request as slices against 2,451 copied, 4 KiB 2,713 against 2,776.
const ZERO_COPY_MIN: usize = 4 << 10;

type Writer = AsyncFramedWriter<OwnedWriteHalf, Payload, RespEncoder>;

/// The replies of one connection: short ones gathered in `small`, values queued in
/// the writer after what `small` holds.
struct Queue<'a> {
    writer: &'a mut Writer,
    small: &'a mut BytesMut,
}

impl Queue<'_> {
    /// Queues what `small` holds as one payload (split off: its memory is reused once
    /// written).
    fn gathered(&mut self) {
        if !self.small.is_empty() {
            let bytes = self.small.split().freeze();
            self.feed(Kind::Bare, Payload::Bytes(bytes));
        }
    }

    fn feed(&mut self, kind: Kind, payload: Payload) {
        self.writer.codec_mut().next = kind;
        // The framings fit `Framing::CAPACITY`: at most 23 bytes of head, 2 of tail.
        let fed = self.writer.feed(payload);
        debug_assert!(fed.is_ok(), "{fed:?}");
    }

    fn head(&mut self, kind: u8, n: i64) {
        let mut digits = [0; 20];
        self.small.put_u8(kind);
        self.small.put_slice(fmt_i64(n, &mut digits));
        self.small.put_slice(b"\r\n");
    }

    /// A bulk reply: copied if short, else queued as it is after the replies before it.
    fn bulk_of(&mut self, bytes: &[u8], uncopied: impl FnOnce() -> Payload) {
        if bytes.len() < ZERO_COPY_MIN {
            self.head(b'$', bytes.len() as i64);
            self.small.put_slice(bytes);
            self.small.put_slice(b"\r\n");
        } else {
            self.gathered();
            self.feed(Kind::Bulk, uncopied());
        }
    }
}

impl Replies<RingValue> for Queue<'_> {
    fn raw(&mut self, bytes: &'static [u8]) {
        self.small.put_slice(bytes);
    }

    fn error(&mut self, message: &str) {
        self.small.put_u8(b'-');
        self.small.put_slice(message.as_bytes());
        self.small.put_slice(b"\r\n");
    }

    fn int(&mut self, n: i64) {
        self.head(b':', n);
    }

    fn bulk(&mut self, value: &RingValue) {
        self.bulk_of(value.as_ref(), || match value {
            RingValue::Pool(k) => Payload::Buf(k.0.clone()),
            RingValue::Heap(h) => Payload::Heap(h.clone()),
            // Never past `ZERO_COPY_MIN`: `bulk_of` copies it.
            RingValue::Inline { .. } => unreachable!("an inline value sent uncopied"),
        });
    }

    fn bulk_arg(&mut self, frame: &FixedBuf, range: Range<usize>) {
        let r = range.clone();
        self.bulk_of(&frame[range], || Payload::Buf(frame.slice(r)));
    }

    fn bulk_made(&mut self, bytes: &[u8]) {
        self.bulk_of(bytes, || Payload::Heap(Arc::from(bytes)));
    }

    fn array(&mut self, n: usize) {
        self.head(b'*', n as i64);
    }
}

fn info(pool: &ReadPool) -> Info {
    let c = pool.counters();
    Info {
        mode: "ringmem",
        reader_waits: c.waits,
        // Counted now (a walk over the pool's headers, as rare as INFO is), not as the
        // sweeper last counted it (`counters`, up to a second old).
        pool_bytes_in_use: pool.stats().bytes_in_use,
        extra: format!(
            "pool_budget:{}\r\nkept_value_bytes:{}\r\nkeep_limit:{}\r\n",
            pool.budget(),
            kept_bytes(),
            KEEP_LIMIT.load(Ordering::Relaxed)
        ),
    }
}

/// What a connection's requests are read with: the epoll reader over its read half
/// ([`serve`]), or the io_uring reader (`serve_uring`, Linux).
pub trait Requests: Send {
    /// The next request; `Ok(None)` once the client has closed.
    fn next_frame(&mut self) -> impl Future<Output = io::Result<Option<FixedBuf>>> + Send + '_;
    /// Bytes read and not yet taken as requests.
    fn buffered(&self) -> usize;
}

impl Requests for AsyncFramedReader<OwnedReadHalf, Resp> {
    fn next_frame(&mut self) -> impl Future<Output = io::Result<Option<FixedBuf>>> + Send + '_ {
        AsyncFramedReader::next_frame(self)
    }
    fn buffered(&self) -> usize {
        AsyncFramedReader::buffered(self)
    }
}

#[cfg(target_os = "linux")]
impl Requests for ringmem::uring::UringFramedReader<Resp> {
    fn next_frame(&mut self) -> impl Future<Output = io::Result<Option<FixedBuf>>> + Send + '_ {
        ringmem::uring::UringFramedReader::next_frame(self)
    }
    fn buffered(&self) -> usize {
        ringmem::uring::UringFramedReader::buffered(self)
    }
}

/// Serves one connection until it closes, says `QUIT`, or breaks the protocol.
pub async fn serve(
    conn: TcpStream,
    store: Arc<Store<RingValue>>,
    pool: ReadPool,
) -> io::Result<()> {
    let (rd, wr) = conn.into_split();
    let requests = AsyncFramedReader::with_pool(rd, Resp::requests(), &pool);
    serve_with(requests, wr, store, pool).await
}

/// [`serve`] with requests received by io_uring into `group`'s buffers (its frames
/// kept as values as the pool's are).
#[cfg(target_os = "linux")]
pub async fn serve_uring(
    conn: TcpStream,
    store: Arc<Store<RingValue>>,
    pool: ReadPool,
    group: ringmem::uring::UringGroup,
) -> io::Result<()> {
    let requests = group.framed(&conn, Resp::requests())?;
    let (_, wr) = conn.into_split();
    serve_with(requests, wr, store, pool).await
}

async fn serve_with(
    mut requests: impl Requests,
    wr: OwnedWriteHalf,
    store: Arc<Store<RingValue>>,
    pool: ReadPool,
) -> io::Result<()> {
    let mut replies = AsyncFramedWriter::new(wr, RespEncoder::default());
    // Short replies, gathered; its memory is reused once what was split off is written.
    let mut small = BytesMut::new();
    // The arguments' ranges, one allocation for the connection's life.
    let mut args: Vec<Range<usize>> = Vec::new();
    let mut next = requests.next_frame().await;
    loop {
        let frame = match next {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                if let Some(line) = protocol_error(&e) {
                    small.put_slice(line.as_bytes());
                }
                break;
            }
        };
        args.clear();
        args.extend(Resp::args(&frame));
        let mut queue = Queue {
            writer: &mut replies,
            small: &mut small,
        };
        let then = execute(&store, &frame, &args, &mut queue, || info(&pool));
        drop(frame);
        if args.capacity() > ARGS_KEPT {
            // A request of many arguments does not leave its room to an idle connection.
            args = Vec::new();
        }
        if then == Then::Close {
            break;
        }
        let many = replies.queued_frames() > ARGS_KEPT;
        if many || replies.queued_bytes() + small.len() >= HIGH_WATER {
            write_out(&mut replies, &mut small).await?;
        }
        if many {
            // A reply of many parts (a long LRANGE) does not leave the room of its
            // queue to an idle connection: a new writer on the same socket.
            replies = AsyncFramedWriter::new(replies.into_inner(), RespEncoder::default());
        }
        // The requests already read go first; the replies are written once none is,
        // before a read (with nothing read, one tried at once finds nothing, most
        // often: a system call for `EAGAIN` and a region claimed and given back).
        let read = (requests.buffered() > 0).then(|| requests.next_frame().now_or_never());
        next = match read.flatten() {
            Some(got) => got,
            None => {
                write_out(&mut replies, &mut small).await?;
                requests.next_frame().await
            }
        };
    }
    write_out(&mut replies, &mut small).await?;
    replies.shutdown().await
}

/// Writes every reply queued and gathered. With no value queued, the short replies
/// go out of the connection's buffer at once, which is then reused as it is (queued
/// as a payload, they cost a split, a count and a vectored write's slices: 4 % of a
/// GET's instructions at `-P 1`).
async fn write_out(replies: &mut Writer, small: &mut BytesMut) -> io::Result<()> {
    if replies.queued_frames() == 0 {
        replies.get_mut().write_all(small).await?;
        small.clear();
        return Ok(());
    }
    Queue {
        writer: replies,
        small,
    }
    .gathered();
    replies.flush().await
}
