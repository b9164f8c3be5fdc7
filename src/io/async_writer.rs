//! `AsyncFramedWriter`: frames to a tokio `AsyncWrite`, many frames per vectored write.

use core::fmt;
use core::future::poll_fn;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::collections::VecDeque;
use std::io::{self, IoSlice};

use futures_sink::Sink;
use tokio::io::AsyncWrite;

use super::decoder::LengthDelimited;
use super::encoder::{Encoder, Framing};
use crate::FixedBuf;

/// Slices of one vectored write: the headers, payloads and delimiters of up to 32
/// frames (empty ones left out).
const SLICES: usize = 96;

/// Frames queued up to which a vectored write's slices are made in a short array.
const FEW: usize = 2;

/// Fills `slices` with the parts of the frames at the front of `queue` (up to three a
/// frame, as many frames as `slices` holds a third of), the front one without its
/// first `written` bytes; empty parts are left out. Returns the slices filled.
fn fill_slices<'q, F: AsRef<[u8]>>(
    queue: &'q VecDeque<Queued<F>>,
    written: usize,
    slices: &mut [IoSlice<'q>],
) -> usize {
    let (mut n, mut skip) = (0, written);
    for q in queue.iter().take(slices.len() / 3) {
        for part in q.parts() {
            let s = part.get(skip..).unwrap_or_default();
            skip = skip.saturating_sub(part.len());
            if !s.is_empty() {
                slices[n] = IoSlice::new(s);
                n += 1;
            }
        }
    }
    // Every queued frame has a byte to write (`push`), and written frames leave the
    // queue.
    debug_assert!(n > 0, "a queued frame with nothing left to write");
    n
}

/// Queued bytes at which [`send`](AsyncFramedWriter::send) writes the queue out.
const DEFAULT_HIGH_WATER: usize = 64 << 10;

/// A frame waiting to be written: its header, its payload, its delimiter.
struct Queued<F> {
    framing: Framing,
    payload: F,
}

impl<F: AsRef<[u8]>> Queued<F> {
    fn parts(&self) -> [&[u8]; 3] {
        [
            self.framing.head(),
            self.payload.as_ref(),
            self.framing.tail(),
        ]
    }

    fn len(&self) -> usize {
        self.framing.len() + self.payload.as_ref().len()
    }
}

/// Writes frames (each payload framed by an [`Encoder`]: behind a length header with
/// [`LengthDelimited`], the default, followed by a newline with [`Lines`](super::Lines),
/// or as a protocol of your own says) to a tokio [`AsyncWrite`](https://docs.rs/tokio/1/tokio/io/trait.AsyncWrite.html), gathering the framing and
/// payloads of the frames queued so far into vectored writes: a payload is never
/// copied, and a run
/// of small frames costs one system call, not one per frame. The writer holds each
/// payload (a [`FixedBuf`] frame from a ring, a `Vec`, anything `AsRef<[u8]>`) until
/// its last byte is written, then drops it: a frame read by an
/// [`AsyncFramedReader`](super::AsyncFramedReader) goes back to its ring there.
///
/// [`send`](Self::send) queues a frame and writes the queue once it holds 64 KiB
/// ([`with_high_water`](Self::with_high_water)); [`flush`](Self::flush) writes
/// everything. Both keep their progress in the writer, so a cancelled call loses
/// nothing: the next one goes on where it stopped. A writer whose
/// [`is_write_vectored`](AsyncWrite::is_write_vectored) is false takes one slice per
/// call; give it a `tokio::io::BufWriter` (which gathers them by copying).
///
/// It is also a [`Sink`](https://docs.rs/futures-sink/0.3/futures_sink/trait.Sink.html) of frames (`poll_ready` writes the queue out once it reaches
/// the high-water mark), so a reader's frames can be forwarded with
/// `StreamExt::forward` or `SinkExt::send_all` from the `futures` crate.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
/// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
/// w.send(b"hello".to_vec()).await?;
/// w.send(Vec::new()).await?;
/// w.flush().await?;
/// assert_eq!(&w.get_ref()[..], b"\0\0\0\x05hello\0\0\0\0");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct AsyncFramedWriter<W, F = FixedBuf, E = LengthDelimited> {
    writer: W,
    codec: E,
    queue: VecDeque<Queued<F>>,
    /// Bytes of the front frame (header, payload, delimiter) already written.
    written: usize,
    /// Bytes queued and not yet written.
    queued: usize,
    high_water: usize,
}

impl<W: AsyncWrite + Unpin, F: AsRef<[u8]>, E> AsyncFramedWriter<W, F, E> {
    /// A writer of frames framed by `codec`.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let w: AsyncFramedWriter<_> = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// assert_eq!(w.queued_bytes(), 0);
    /// ```
    pub fn new(writer: W, codec: E) -> Self {
        AsyncFramedWriter {
            writer,
            codec,
            queue: VecDeque::new(),
            written: 0,
            queued: 0,
            high_water: DEFAULT_HIGH_WATER,
        }
    }

    /// Sets the queued bytes at which [`send`](Self::send) writes the queue out (at
    /// least 1: every `send` then writes).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let w = AsyncFramedWriter::<_, Vec<u8>>::new(Vec::new(), LengthDelimited::new())
    ///     .with_high_water(4096);
    /// assert_eq!(w.high_water(), 4096);
    /// ```
    pub fn with_high_water(mut self, bytes: usize) -> Self {
        self.high_water = bytes.max(1);
        self
    }

    /// The queued bytes at which [`send`](Self::send) writes the queue out.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let w: AsyncFramedWriter<_> = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// assert_eq!(w.high_water(), 64 << 10);
    /// ```
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// The encoder, mutably: for one whose framing depends on more than the payload's
    /// bytes (the kind of reply a protocol sends next), set before each
    /// [`feed`](Self::feed).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, Lines};
    /// let mut w = AsyncFramedWriter::<_, Vec<u8>, _>::new(Vec::new(), Lines::new());
    /// *w.codec_mut() = Lines::new().crlf();
    /// w.feed(b"hi".to_vec())?;
    /// assert_eq!(w.queued_bytes(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn codec_mut(&mut self) -> &mut E {
        &mut self.codec
    }

    /// Queues `payload` framed by `framing`; a frame with no bytes at all is dropped at
    /// once (it has nothing to write, and the queue holds only frames that do).
    pub(super) fn push(&mut self, framing: Framing, payload: F) {
        let q = Queued { framing, payload };
        if q.len() > 0 {
            self.queued += q.len();
            self.queue.push_back(q);
        }
    }

    /// Writes the queue out if it holds [`high_water`](Self::high_water) bytes.
    pub(super) fn poll_below_high_water(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.queued >= self.high_water {
            self.poll_write_queued(cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }

    /// Writes every queued frame, then flushes the underlying writer.
    ///
    /// # Errors
    /// As [`poll_flush`](Self::poll_flush).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(b"x".to_vec())?;
    /// w.flush().await?;
    /// assert_eq!(&w.get_ref()[..], b"\0\0\0\x01x");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn flush(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_flush(cx)).await
    }

    /// Writes every queued frame, flushes and shuts the underlying writer down.
    ///
    /// # Errors
    /// As [`poll_flush`](Self::poll_flush), and the writer's `poll_shutdown`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(b"bye".to_vec())?;
    /// w.shutdown().await?;
    /// assert_eq!(w.get_ref().len(), 7);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn shutdown(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_shutdown(cx)).await
    }

    /// [`poll_flush`](Self::poll_flush), then the writer's `poll_shutdown`.
    pub(super) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_flush(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.writer).poll_shutdown(cx),
            other => other,
        }
    }

    /// Writes the queued frames with vectored writes until none is left, dropping each
    /// payload once it is written; does not flush the underlying writer. Progress is
    /// kept across `Pending` and errors: the next call goes on where this one stopped.
    ///
    /// # Errors
    /// The writer's, and `WriteZero` when it accepts no more bytes.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::future::poll_fn;
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(b"ab".to_vec())?;
    /// w.feed(b"c".to_vec())?;
    /// poll_fn(|cx| w.poll_write_queued(cx)).await?;
    /// assert_eq!((w.get_ref().len(), w.queued_bytes()), (11, 0));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.queue.is_empty() {
            // A few frames (a reply, a batch of short ones gathered) take a short array:
            // making all `SLICES` was a sixth of a small reply's cost.
            let writer = Pin::new(&mut self.writer);
            let written = if self.queue.len() <= FEW {
                let mut slices = [IoSlice::new(&[]); 3 * FEW];
                let n = fill_slices(&self.queue, self.written, &mut slices);
                writer.poll_write_vectored(cx, &slices[..n])
            } else {
                let mut slices = [IoSlice::new(&[]); SLICES];
                let n = fill_slices(&self.queue, self.written, &mut slices);
                writer.poll_write_vectored(cx, &slices[..n])
            };
            let wrote = match written {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(k)) => k,
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            self.pop_written(wrote);
        }
        Poll::Ready(Ok(()))
    }

    /// Counts `k` more bytes written: drops the frames now written whole.
    fn pop_written(&mut self, k: usize) {
        self.queued -= k;
        let mut done = self.written + k;
        while let Some(front) = self.queue.front() {
            let len = front.len();
            if done < len {
                break;
            }
            done -= len;
            // Written whole: the payload goes (a ring frame back to its ring).
            self.queue.pop_front();
        }
        self.written = done;
    }

    /// Writes every queued frame ([`poll_write_queued`](Self::poll_write_queued)), then
    /// flushes the underlying writer.
    ///
    /// # Errors
    /// As [`poll_write_queued`](Self::poll_write_queued), and the writer's
    /// `poll_flush`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use std::future::poll_fn;
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(b"z".to_vec())?;
    /// poll_fn(|cx| w.poll_flush(cx)).await?;
    /// assert_eq!(w.get_ref().len(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_write_queued(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.writer).poll_flush(cx),
            other => other,
        }
    }

    /// Bytes queued (payloads and their framing) and not yet written.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(vec![1, 2])?;
    /// assert_eq!(w.queued_bytes(), 6);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// Frames queued and not yet written whole.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(vec![1])?;
    /// w.feed(vec![])?;
    /// assert_eq!(w.queued_frames(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn queued_frames(&self) -> usize {
        self.queue.len()
    }
}

impl<W: AsyncWrite + Unpin, F: AsRef<[u8]>, E: Encoder> AsyncFramedWriter<W, F, E> {
    /// Queues a frame without writing anything.
    ///
    /// # Errors
    /// `InvalidInput` for a payload the codec cannot frame (see [`Encoder`]: over the
    /// maximum, a length its field cannot express, a line with a newline); nothing is
    /// queued then. A frame with nothing to write (an empty payload left unframed) is
    /// dropped at once.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let codec = LengthDelimited::new().field_width(1);
    /// let mut w = AsyncFramedWriter::new(Vec::new(), codec);
    /// assert!(w.feed(vec![0; 256]).is_err()); // 256 needs more than one byte
    /// w.feed(vec![7; 3])?;
    /// assert_eq!(w.queued_bytes(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn feed(&mut self, frame: F) -> io::Result<()> {
        let mut framing = Framing::new();
        self.codec.encode(frame.as_ref(), &mut framing)?;
        self.push(framing, frame);
        Ok(())
    }

    /// Queues a frame and, once the queue holds [`high_water`](Self::high_water)
    /// bytes, writes it out (without flushing the underlying writer).
    ///
    /// # Errors
    /// As [`feed`](Self::feed), and [`poll_write_queued`](Self::poll_write_queued)'s.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new()).with_high_water(10);
    /// w.send(b"abc".to_vec()).await?; // 7 bytes queued
    /// assert!(w.get_ref().is_empty());
    /// w.send(b"de".to_vec()).await?; // 13: written
    /// assert_eq!(w.get_ref().len(), 13);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn send(&mut self, frame: F) -> io::Result<()> {
        self.feed(frame)?;
        poll_fn(|cx| self.poll_below_high_water(cx)).await
    }
}

impl<W, F, E> AsyncFramedWriter<W, F, E> {
    /// The underlying writer.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let w: AsyncFramedWriter<_> = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// assert!(w.get_ref().is_empty());
    /// ```
    pub fn get_ref(&self) -> &W {
        &self.writer
    }

    /// The underlying writer, mutably (bytes written to it directly go out between
    /// frames: before the queued ones, or inside a frame that is partly written).
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w: AsyncFramedWriter<_> = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.get_mut().push(1);
    /// assert_eq!(w.get_ref().len(), 1);
    /// ```
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.writer
    }

    /// The underlying writer, given back; the frames still queued are dropped unwritten.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
    /// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
    /// w.feed(vec![9])?;
    /// assert!(w.into_inner().is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_inner(self) -> W {
        self.writer
    }
}

/// The queue as a [`Sink`](https://docs.rs/futures-sink/0.3/futures_sink/trait.Sink.html): `start_send` is [`feed`](AsyncFramedWriter::feed),
/// `poll_ready` writes the queue out once it holds the high-water mark, `poll_flush`
/// is [`poll_flush`](AsyncFramedWriter::poll_flush), and `poll_close` flushes and shuts
/// the writer down.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::future::poll_fn;
/// use std::pin::Pin;
/// use futures_sink::Sink;
/// use ringmem::io::{AsyncFramedWriter, LengthDelimited};
/// let mut w = AsyncFramedWriter::new(Vec::new(), LengthDelimited::new());
/// poll_fn(|cx| Pin::new(&mut w).poll_ready(cx)).await?;
/// Pin::new(&mut w).start_send(b"hi".to_vec())?;
/// poll_fn(|cx| Pin::new(&mut w).poll_close(cx)).await?;
/// assert_eq!(&w.get_ref()[..], b"\0\0\0\x02hi");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
impl<W, F, E> Sink<F> for AsyncFramedWriter<W, F, E>
where
    W: AsyncWrite + Unpin,
    F: AsRef<[u8]> + Unpin,
    E: Encoder + Unpin,
{
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_below_high_water(cx)
    }

    fn start_send(self: Pin<&mut Self>, frame: F) -> io::Result<()> {
        self.get_mut().feed(frame)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncFramedWriter::poll_flush(self.get_mut(), cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_shutdown(cx)
    }
}

impl<W, F, E: fmt::Debug> fmt::Debug for AsyncFramedWriter<W, F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncFramedWriter")
            .field("codec", &self.codec)
            .field("queued_frames", &self.queue.len())
            .field("queued_bytes", &self.queued)
            .field("high_water", &self.high_water)
            .finish_non_exhaustive()
    }
}
