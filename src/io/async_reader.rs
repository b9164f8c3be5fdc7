//! `AsyncFramedReader`: frames from a tokio `AsyncRead`, as a `Stream`.

use core::fmt;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::io;

use futures_core::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};

use super::async_writer::AsyncFramedWriter;
use super::core::{Core, Step};
use super::decoder::{Decoder, FrameError, LengthDelimited};
use super::pool::{Memory, ReadPool};
use super::reader::{clamp_read_size, DEFAULT_READ};
use crate::ring::wait::{poll_until, TaskSlot};
use crate::{FixedBuf, Ring};

/// [`FramedReader`](super::FramedReader) for a tokio [`AsyncRead`](https://docs.rs/tokio/1/tokio/io/trait.AsyncRead.html): a
/// [`Stream`](https://docs.rs/futures-core/0.3/futures_core/stream/trait.Stream.html) of frames, each a [`FixedBuf`] slice of the ring region it was read into.
/// When the frames still held fill the ring, the stream waits (the task is woken by a
/// release on any thread) instead of failing, so memory stays bounded by the ring
/// whatever the peer sends. Where the blocking reader copies a frame cut by the end of
/// a read into the next region, this one first asks the reader for the rest of it in
/// place (a region keeps a quarter of its size spare for that), and copies only if the
/// bytes are not there yet: it never waits for them while frames are ready. Errors,
/// and what follows them, are the blocking reader's iterator's: after a rejected frame
/// the stream goes on where the decoder resynchronises, and after an error of the
/// underlying reader it ends (releasing what it buffered). A reader that puts a
/// `ReadBuf` of its own in place of the one it is handed to fill (a bug) is such an
/// error, `Other` with [`FrameError::ReadBufReplaced`]: its bytes are never framed.
///
/// While its socket has nothing to read, the stream holds no region: it gives its
/// region back and claims another when polled again (after a read that filled less
/// than it was given, only once a read into no bytes finds the reader ready). A frame
/// cut by the end of a read keeps about its own bytes while it waits for the rest
/// (under 4 KiB on the heap, else in place, copied once per doubling at most). So many
/// mostly idle streams can share one budget, a [`ReadPool`] ([`with_pool`](Self::with_pool)):
/// what stays is the stream, in its task (an `async fn` taking it as an argument holds
/// it twice; make it in the task, or move it into an `async move` block).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::future::poll_fn;
/// use std::pin::Pin;
/// use futures_core::Stream;
/// use ringmem::io::{AsyncFramedReader, LengthDelimited};
/// let wire: &[u8] = b"\0\0\0\x02hi\0\0\0\x03you";
/// let mut frames = AsyncFramedReader::new(wire, LengthDelimited::new());
/// let mut got = Vec::new();
/// // `StreamExt::next` (futures, tokio-stream) in a real program.
/// while let Some(frame) = poll_fn(|cx| Pin::new(&mut frames).poll_next(cx)).await {
///     got.push(frame?);
/// }
/// assert_eq!((&got[0][..], &got[1][..]), (&b"hi"[..], &b"you"[..]));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct AsyncFramedReader<R, D = LengthDelimited> {
    reader: R,
    mem: Memory,
    core: Core<D>,
    /// This stream's place among the ring's waiters while it waits for room.
    slot: TaskSlot,
    /// A wait for room is under way (its claim was found hopeless or not, and its
    /// partial frame spilled, when it began): polls go on with it.
    waiting: bool,
    /// Bytes of frames yielded since the task last spent a unit of tokio's budget on
    /// them (see [`COOP_BYTES`]).
    owed: usize,
    /// Whether the next claim looks for bytes first (see [`Probe`]).
    probe: Probe,
}

/// A look for bytes before a region is claimed for them, by a read into no bytes.
///
/// A read that fills less than it is given has, as a rule, drained its socket; tokio
/// then marks the socket not ready, and its next read returns `Pending` without a
/// system call. The reader would claim a region for that read and give it back at
/// once: two turns of a pool's lock, for each request of a client that waits for its
/// reply (`ringmem-resp` under `redis-benchmark -P 1`, a GET of 3 B: 4,798 instructions
/// without the look, 4,352 with it, `FramedRead`'s 3,348). So after a short read the
/// next claim first reads into an empty buffer: `Pending` (the waker registered, as
/// for any read), and the stream holds nothing while it waits; ready, and it claims
/// and reads. On a socket tokio found ready again, that look is a system call of its
/// own (a `recv` of 0 bytes): each look that finds bytes makes the next ones skip, 1,
/// 2, 4, up to [`PROBE_BACKOFF`] short reads, halved again by each look that finds
/// none, so that a stream whose bytes come faster than it is polled pays it rarely
/// (the conns scenario's 100 streaming connections: 213 looks found bytes, among
/// 24,238 `recvfrom` calls).
#[derive(Default)]
struct Probe {
    /// The last read filled less than it was given.
    drained: bool,
    /// Short reads left whose next claim does not look first.
    skip: u8,
    /// `skip` after the next look that finds bytes (halved by one that finds none).
    backoff: u8,
}

/// Short reads, at most, whose next claim does not look for bytes first (see [`Probe`]).
const PROBE_BACKOFF: u8 = 64;

impl Probe {
    /// Whether to look for bytes before the next claim (once per short read).
    fn wanted(&mut self) -> bool {
        if !core::mem::take(&mut self.drained) {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// A look found the reader ready (`true`) or not.
    fn found(&mut self, ready: bool) {
        if ready {
            self.backoff = (self.backoff.saturating_mul(2)).clamp(1, PROBE_BACKOFF);
            self.skip = self.backoff;
        } else {
            self.backoff /= 2;
        }
    }
}

/// Bytes of frames yielded for one unit of tokio's cooperative budget, besides the unit
/// each read spends. A read here brings in up to 64 KiB for its one unit, `FramedRead`'s
/// 8 KiB (its buffer's first size) for its own: without this, a stream whose socket
/// always has bytes kept its worker thread several times longer per turn than a
/// `FramedRead` one, and the other connections' frames waited behind it (the conns
/// bench, 100 streaming among 1,000: p99.9 latency 4-5x `FramedRead`'s). With it, a
/// stream of short frames spends about 5 units per 64 KiB read, `FramedRead` 8. At
/// 8 KiB a unit the 4-connection framed rows ran 10-20 % slower than with none; at 16
/// KiB they ran as without, and the p99.9 latency of the 100 streams stayed level with
/// `FramedRead`'s (single runs each: see the commit that set it).
const COOP_BYTES: usize = 16 << 10;

/// Spends a unit of tokio's cooperative budget per [`COOP_BYTES`] of `owed` (the bytes
/// of frames a stream yielded since), taking them off; `Pending` when the task's turn
/// is over (it is woken for the next, and the rest is spent then). Outside a tokio
/// runtime, always ready.
pub(crate) fn spend_budget(owed: &mut usize, cx: &mut Context<'_>) -> Poll<()> {
    while *owed >= COOP_BYTES {
        match tokio::task::coop::poll_proceed(cx) {
            Poll::Ready(coop) => {
                coop.made_progress();
                *owed -= COOP_BYTES;
            }
            Poll::Pending => return Poll::Pending,
        }
    }
    Poll::Ready(())
}

/// What a frame costs against [`COOP_BYTES`]: its bytes and a word, so that empty
/// frames count too.
const FRAME_COST: usize = 8;

impl<R: AsyncRead + Unpin, D: Decoder + Unpin> AsyncFramedReader<R, D> {
    /// A reader on the process's [`ReadPool`] ([`ReadPool::global`]: 64 MiB for all
    /// the readers made so, unless set), reading up to 64 KiB at a time: what a server
    /// with many connections wants. For a reader on a ring of its own, see
    /// [`with_ring`](Self::with_ring).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines, ReadPool};
    /// let r = AsyncFramedReader::new(tokio::io::empty(), Lines::new());
    /// assert_eq!(r.pool().unwrap().budget(), ReadPool::global().budget());
    /// ```
    pub fn new(reader: R, decoder: D) -> Self {
        Self::with_pool(reader, decoder, ReadPool::global())
    }

    /// A reader on `ring`, reading up to 64 KiB at a time (or a quarter of the ring).
    ///
    /// ```
    /// use ringmem::{io::{AsyncFramedReader, Lines}, Ring};
    /// let r = AsyncFramedReader::with_ring(tokio::io::empty(), Lines::new(), Ring::new(1 << 16));
    /// assert_eq!(r.read_size(), 1 << 14);
    /// ```
    pub fn with_ring(reader: R, decoder: D, ring: Ring) -> Self {
        Self::with_memory(reader, decoder, Memory::Own(Box::new(ring)))
    }

    /// A reader that claims its regions from `pool`, shared with other readers (async
    /// or blocking, on any threads) under one budget, reading up to 64 KiB at a time
    /// (or a quarter of the budget). When the pool is full the stream waits for a
    /// release on any thread, as on a ring of its own; while its socket has nothing to
    /// read it holds no region of the pool (see the type's docs). The stream is `Send`
    /// when its reader and decoder are: a multi-thread runtime may poll it from any
    /// worker.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap().block_on(async {
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use futures_core::Stream;
    /// use ringmem::io::{AsyncFramedReader, Lines, ReadPool};
    /// let pool = ReadPool::new(1 << 20);
    /// let tasks: Vec<_> = [&b"one\n"[..], b"two\n"]
    ///     .into_iter()
    ///     .map(|wire| {
    ///         let mut r = AsyncFramedReader::with_pool(wire, Lines::new(), &pool);
    ///         tokio::spawn(async move { poll_fn(|cx| Pin::new(&mut r).poll_next(cx)).await })
    ///     })
    ///     .collect();
    /// let mut lines = Vec::new();
    /// for t in tasks {
    ///     lines.push(t.await.unwrap().unwrap()?);
    /// }
    /// assert_eq!((&lines[0][..], &lines[1][..]), (&b"one"[..], &b"two"[..]));
    /// assert_eq!(pool.stats().live_buffers, 2);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn with_pool(reader: R, decoder: D, pool: &ReadPool) -> Self {
        Self::with_memory(reader, decoder, Memory::Pool(pool.clone()))
    }

    fn with_memory(reader: R, decoder: D, mem: Memory) -> Self {
        let read_size = clamp_read_size(&mem, DEFAULT_READ);
        AsyncFramedReader {
            reader,
            core: Core::new(decoder, &mem, read_size, true),
            mem,
            slot: TaskSlot::default(),
            waiting: false,
            owed: 0,
            probe: Probe::default(),
        }
    }

    /// Sets the bytes of a region when no frame asks for more, at most a quarter of the
    /// ring (or of the pool's budget).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let r = AsyncFramedReader::new(tokio::io::empty(), Lines::new()).with_read_size(4096);
    /// assert_eq!(r.read_size(), 4096);
    /// ```
    pub fn with_read_size(mut self, bytes: usize) -> Self {
        self.core.read_size = clamp_read_size(&self.mem, bytes);
        self
    }

    /// The bytes of a region when no frame asks for more.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// assert_eq!(AsyncFramedReader::new(tokio::io::empty(), Lines::new()).read_size(), 64 << 10);
    /// ```
    pub fn read_size(&self) -> usize {
        self.core.read_size
    }

    /// Bytes read from the connection and not yet taken as frames: `0` when the next
    /// frame needs a read. A server that answers pipelined requests takes the frames
    /// already read, and writes its replies before it waits for more once this is `0`
    /// (a read tried then finds nothing, most often: a system call for `EAGAIN`, and
    /// on a pool a region claimed and given back).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let mut lines = AsyncFramedReader::new(&b"one\ntwo\nthr"[..], Lines::new());
    /// assert_eq!(lines.buffered(), 0); // nothing read yet
    /// lines.next_frame().await?;
    /// assert_eq!(lines.buffered(), 7); // "two\n" and the start of a third line
    /// lines.next_frame().await?;
    /// assert_eq!(lines.buffered(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn buffered(&self) -> usize {
        self.core.buffered()
    }

    /// The next frame, as [`FramedReader::next_frame`](super::FramedReader::next_frame)
    /// gives it (`Ok(None)` when the stream ends at a frame boundary; the same errors,
    /// after which the next call goes on as the `Stream` does): a loop over a
    /// connection without `StreamExt`. Cancelling it loses nothing: a frame is taken
    /// only when the call returns it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let mut lines = AsyncFramedReader::new(&b"one\ntwo\n"[..], Lines::new());
    /// while let Some(line) = lines.next_frame().await? {
    ///     assert!(line == "one" || line == "two");
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn next_frame(&mut self) -> io::Result<Option<FixedBuf>> {
        core::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .transpose()
    }

    /// The ring the frames live in, for a reader made by [`with_ring`](Self::with_ring);
    /// `None` for a reader of a [`ReadPool`] ([`new`](Self::new),
    /// [`with_pool`](Self::with_pool)), whose frames live in the pool's rings, behind
    /// their locks: see [`pool`](Self::pool).
    ///
    /// ```
    /// use ringmem::{io::{AsyncFramedReader, Lines}, Ring};
    /// let r = AsyncFramedReader::with_ring(&b""[..], Lines::new(), Ring::new(1 << 16));
    /// assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
    /// assert!(AsyncFramedReader::new(&b""[..], Lines::new()).ring().is_none());
    /// ```
    pub fn ring(&self) -> Option<&Ring> {
        self.mem.own()
    }

    /// The pool the frames live in, for a reader made by [`with_pool`](Self::with_pool)
    /// (or [`new`](Self::new): the process's pool); `None` for a reader on a ring of
    /// its own ([`ring`](Self::ring)).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines, ReadPool};
    /// let pool = ReadPool::new(1 << 16);
    /// let r = AsyncFramedReader::with_pool(tokio::io::empty(), Lines::new(), &pool);
    /// assert_eq!(r.pool().unwrap().budget(), 1 << 16);
    /// let own = AsyncFramedReader::with_ring(tokio::io::empty(), Lines::new(), ringmem::Ring::new(1 << 16));
    /// assert!(own.pool().is_none());
    /// ```
    pub fn pool(&self) -> Option<&ReadPool> {
        self.mem.pool()
    }

    /// The underlying reader.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let r = AsyncFramedReader::new(&b"xy"[..], Lines::new());
    /// assert_eq!(r.get_ref().len(), 2);
    /// ```
    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// The underlying reader, mutably (reading from it directly loses the framing).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let mut r = AsyncFramedReader::new(&b"xy"[..], Lines::new());
    /// *r.get_mut() = &b""[..];
    /// assert!(r.get_ref().is_empty());
    /// ```
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }

    /// The decoder.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let r = AsyncFramedReader::new(tokio::io::empty(), Lines::with_max_length(9));
    /// assert_eq!(r.decoder().max_len(), 9);
    /// ```
    pub fn decoder(&self) -> &D {
        &self.core.decoder
    }

    /// The underlying reader, and the bytes already read from it that no frame has
    /// taken, as [`FramedReader::into_parts`](super::FramedReader::into_parts) (a
    /// stream waiting for ring room stops waiting).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use futures_core::Stream;
    /// use ringmem::io::{AsyncFramedReader, Lines};
    /// let wire: &[u8] = b"UPGRADE\nraw bytes";
    /// let mut r = AsyncFramedReader::new(wire, Lines::new());
    /// let line = poll_fn(|cx| Pin::new(&mut r).poll_next(cx)).await.unwrap()?;
    /// assert_eq!(&line[..], b"UPGRADE");
    /// let (rest, buffered) = r.into_parts();
    /// assert_eq!([&buffered[..], rest].concat(), b"raw bytes");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn into_parts(self) -> (R, Vec<u8>) {
        (self.reader, self.core.into_buffered())
    }

    /// Spends tokio's budget on the frames yielded since the last read, a unit per
    /// [`COOP_BYTES`] (outside a tokio runtime, always ready): called before a read,
    /// once the frames read before are out, so that the task never leaves its turn
    /// with frames read and not yet yielded. `Pending`: the turn is over (the task is
    /// woken for the next), and what is left to spend is spent then.
    fn spend(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        spend_budget(&mut self.owed, cx)
    }

    /// After a short read, a look for bytes before a claim (see [`Probe`]): `Pending`
    /// when the reader has none (the stream then holds nothing: the look is made only
    /// with nothing buffered), else ready to claim.
    fn poll_look(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !(self.probe.drained && self.core.buffered() == 0 && self.probe.wanted()) {
            return Poll::Ready(Ok(()));
        }
        let mut none = ReadBuf::new(&mut []);
        let at = none.filled().as_ptr();
        match Pin::new(&mut self.reader).poll_read(cx, &mut none) {
            // Held to what a read is (see `filled`).
            Poll::Ready(Ok(())) => match filled(&none, at, 0) {
                Ok(_) => {
                    self.probe.found(true);
                    Poll::Ready(Ok(()))
                }
                Err(e) => Poll::Ready(Err(self.core.fail(e))),
            },
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.core.fail(e))),
            Poll::Pending => {
                self.probe.found(false);
                Poll::Pending
            }
        }
    }

    /// A region of `n` bytes (of `like` or `least` at least, see `Step::Alloc`), waiting
    /// for room (for `least`).
    fn poll_region(
        &mut self,
        cx: &mut Context<'_>,
        n: usize,
        like: usize,
        least: usize,
        alone: usize,
    ) -> Poll<io::Result<()>> {
        let mem = &self.mem;
        // A wait under way goes on in `poll_until`, whose tries are cheap: the first
        // try of a claim may walk a pool (see `Memory::first_try`).
        let first = if self.waiting {
            None
        } else {
            mem.first_try_like(n, like, least, alone)
        };
        let region = match first {
            Some(region) => {
                // A wait this try ends leaves the waiters (the slot's drop), as one that
                // `poll_until` ends does: else the next wait starts with this one's
                // yields spent and registers at once, and a registration still listed
                // stays armed until a release wakes the task for nothing.
                self.slot = TaskSlot::default();
                region
            }
            None => {
                if !self.waiting {
                    if let Some(e) = mem.hopeless(least) {
                        return Poll::Ready(Err(self.core.fail_alloc(e, n)));
                    }
                    self.core.before_wait();
                }
                // On a pool, each try takes its lock and lets it go: the lock is never
                // held while the task waits.
                match poll_until(&mut self.slot, cx, mem.span(), least, |walk| {
                    mem.try_claim(n, least, walk)
                }) {
                    Poll::Ready(region) => {
                        self.waiting = false;
                        region
                    }
                    Poll::Pending => {
                        if !core::mem::replace(&mut self.waiting, true) {
                            mem.count_wait();
                        }
                        return Poll::Pending;
                    }
                }
            }
        };
        self.core.install(region);
        Poll::Ready(Ok(()))
    }
}

impl<S, D> AsyncFramedReader<S, D>
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: Decoder + Unpin,
{
    /// Frames both ways over one stream: splits the stream this reads
    /// (`tokio::io::split`), goes on reading from its read half (with its memory, pool
    /// or ring, and the bytes it has buffered), and gives its write half to an
    /// [`AsyncFramedWriter`] framing with `encoder`. The two may go to different tasks.
    /// Each poll of a half takes a lock the halves share, held for that call only; a
    /// `TcpStream`'s own `into_split` takes none: for one, make the two from its halves
    /// with `new`. `ReadHalf::unsplit` joins the halves again.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::{io::{AsyncFramedReader, Lines}, FixedBuf};
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// let (mut client, server) = tokio::io::duplex(64);
    /// let (mut r, mut w) = AsyncFramedReader::new(server, Lines::new()).into_split(Lines::new());
    /// client.write_all(b"ping\n").await?;
    /// let ping: FixedBuf = r.next_frame().await?.unwrap();
    /// w.send(ping).await?; // the frame read goes back out, uncopied
    /// w.flush().await?;
    /// let mut echo = [0; 5];
    /// client.read_exact(&mut echo).await?;
    /// assert_eq!(&echo, b"ping\n");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    // The two types are the answer: an alias would hide them from the docs.
    #[allow(clippy::type_complexity)]
    pub fn into_split<F: AsRef<[u8]>, E>(
        self,
        encoder: E,
    ) -> (
        AsyncFramedReader<ReadHalf<S>, D>,
        AsyncFramedWriter<WriteHalf<S>, F, E>,
    ) {
        let AsyncFramedReader {
            reader,
            mem,
            core,
            slot,
            waiting,
            owed,
            probe,
        } = self;
        let (read, write) = tokio::io::split(reader);
        let reader = AsyncFramedReader {
            reader: read,
            mem,
            core,
            slot,
            waiting,
            owed,
            probe,
        };
        (reader, AsyncFramedWriter::new(write, encoder))
    }
}

impl<R: AsyncRead + Unpin, D: Decoder + Unpin> Stream for AsyncFramedReader<R, D> {
    type Item = io::Result<FixedBuf>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let step = match this.core.step(&this.mem) {
                Ok(step) => step,
                Err(e) => return Poll::Ready(Some(Err(e))),
            };
            match step {
                Step::Frame(f) => {
                    this.owed += f.len() + FRAME_COST;
                    return Poll::Ready(Some(Ok(f)));
                }
                Step::End => return Poll::Ready(None),
                // The stream ends with an error of the reader, its bytes released.
                Step::ReaderError(e) => return Poll::Ready(Some(Err(this.core.fail(e)))),
                Step::TopUp => {
                    // The region's last frame, if its rest is there now; if it is not,
                    // the frames before it go out and the part is carried.
                    let spare = this.core.spare();
                    let (at, room) = (spare.as_ptr().cast::<u8>(), spare.len());
                    let mut buf = ReadBuf::uninit(spare);
                    match Pin::new(&mut this.reader).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => {
                            this.core.defer(e, &this.mem);
                            continue;
                        }
                        Poll::Pending => {
                            this.core.settle(&this.mem);
                            continue;
                        }
                    }
                    let n = match filled(&buf, at, room) {
                        Ok(0) => {
                            this.core.top_up_eof(&this.mem);
                            continue;
                        }
                        Ok(n) => n,
                        Err(e) => return Poll::Ready(Some(Err(this.core.fail(e)))),
                    };
                    // SAFETY: `buf` is the `ReadBuf` made from the spare (`filled`
                    // checked), which vouches that its first `n` bytes are initialised.
                    if let Err(e) = unsafe { this.core.filled(n, &this.mem) } {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Step::Alloc { .. } | Step::Read if this.spend(cx).is_pending() => {
                    return Poll::Pending;
                }
                Step::Alloc {
                    need,
                    like,
                    least,
                    alone,
                } => {
                    match this.poll_look(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                        Poll::Pending => return Poll::Pending,
                    }
                    match this.poll_region(cx, need, like, least, alone) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Step::Read => {
                    let spare = this.core.spare();
                    let (at, room) = (spare.as_ptr().cast::<u8>(), spare.len());
                    let mut buf = ReadBuf::uninit(spare);
                    match Pin::new(&mut this.reader).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(this.core.fail(e)))),
                        Poll::Pending => {
                            // Nothing to read: the region goes back while the socket
                            // is idle, but for a partial frame's own bytes.
                            this.core.idle(&this.mem);
                            return Poll::Pending;
                        }
                    }
                    let n = match filled(&buf, at, room) {
                        Ok(0) => return Poll::Ready(this.core.eof(&this.mem).transpose()),
                        Ok(n) => n,
                        Err(e) => return Poll::Ready(Some(Err(this.core.fail(e)))),
                    };
                    this.probe.drained = n < room;
                    // SAFETY: `buf` is the `ReadBuf` made from the spare (`filled`
                    // checked), which vouches that its first `n` bytes are initialised.
                    if let Err(e) = unsafe { this.core.filled(n, &this.mem) } {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

/// The bytes a `poll_read` filled in `buf`, the `ReadBuf` made from the `room` bytes at
/// `at`; an error if the reader put a `ReadBuf` of its own in its place (safe code can:
/// `*buf = ReadBuf::new(..)` over memory that outlives the call), whose filled bytes
/// are not the framed reader's. A `ReadBuf` over the same memory can only be the one
/// handed out: safe code cannot borrow that memory for the `ReadBuf`'s lifetime.
fn filled(buf: &ReadBuf<'_>, at: *const u8, room: usize) -> io::Result<usize> {
    let n = buf.filled().len();
    if buf.filled().as_ptr() == at && buf.capacity() == room && n <= room {
        Ok(n)
    } else {
        Err(FrameError::ReadBufReplaced { filled: n, room }.into())
    }
}

impl<R, D> fmt::Debug for AsyncFramedReader<R, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("AsyncFramedReader");
        match &self.mem {
            Memory::Own(ring) => d.field("ring", ring),
            Memory::Pool(pool) => d.field("pool", pool),
        };
        d.finish_non_exhaustive()
    }
}
