//! `TokioEncoder`: the items of a `tokio_util` encoder through an `AsyncFramedWriter`.

use core::fmt;
use core::future::poll_fn;
use core::pin::Pin;
use core::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_sink::Sink;
use tokio::io::AsyncWrite;
use tokio_util::codec::Encoder as Encode;

use super::async_writer::AsyncFramedWriter;
use super::encoder::Framing;

/// The bytes a [`TokioEncoder`]'s buffer starts with, and allocates at least whenever
/// it cannot reuse its memory: `FramedWrite`'s first capacity.
const INITIAL: usize = 8 << 10;

/// A `tokio_util::codec::Encoder` as the encoding of an [`AsyncFramedWriter`] of
/// `Bytes`, for items that are not byte payloads (a reply enum, say), or an encoder one
/// already has: `feed_item`, `send_item` and the writer's `Sink` of items encode each
/// item into a buffer this owns and queue its bytes, split off the buffer as `Bytes`.
///
/// That path copies, where an [`Encoder`](super::Encoder) never does: the item's bytes
/// are written into the buffer, as with tokio_util's `FramedWrite`. Splitting them off
/// copies nothing; it allocates a small shared header once per buffer, and a buffer
/// (8 KiB at first) when the last one is full and frames cut from it are still queued
/// (else its memory is reused). Each item is a slice of the writer's vectored writes,
/// so a write carries at most 32 items, where `FramedWrite` writes its buffer as one.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use bytes::{BufMut, BytesMut};
/// use ringmem::io::{AsyncFramedWriter, TokioEncoder};
/// enum Reply { Ok, Int(i64) }
/// /// Replies as RESP simple strings and integers.
/// struct Resp;
/// impl tokio_util::codec::Encoder<Reply> for Resp {
///     type Error = std::io::Error;
///     fn encode(&mut self, reply: Reply, dst: &mut BytesMut) -> std::io::Result<()> {
///         match reply {
///             Reply::Ok => dst.put_slice(b"+OK\r\n"),
///             Reply::Int(n) => dst.put_slice(format!(":{n}\r\n").as_bytes()),
///         }
///         Ok(())
///     }
/// }
/// let mut w = AsyncFramedWriter::new(Vec::new(), TokioEncoder::new(Resp));
/// w.send_item(Reply::Ok).await?;
/// w.send_item(Reply::Int(42)).await?;
/// w.flush().await?;
/// assert_eq!(&w.get_ref()[..], b"+OK\r\n:42\r\n");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct TokioEncoder<C> {
    codec: C,
    /// Empty between calls: each item's bytes are split off as soon as encoded.
    buf: BytesMut,
}

impl<C> TokioEncoder<C> {
    /// An encoding by `codec`, with a buffer of 8 KiB.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, TokioEncoder};
    /// let e = TokioEncoder::new(tokio_util::codec::BytesCodec::new());
    /// let w: AsyncFramedWriter<_, bytes::Bytes, _> = AsyncFramedWriter::new(Vec::new(), e);
    /// assert_eq!(w.queued_frames(), 0);
    /// ```
    pub fn new(codec: C) -> Self {
        TokioEncoder {
            codec,
            buf: BytesMut::with_capacity(INITIAL),
        }
    }

    /// The bytes `codec` makes of `item`, split off the buffer; the buffer is left empty
    /// whatever happens.
    fn encode<I>(&mut self, item: I) -> Result<Bytes, C::Error>
    where
        C: Encode<I>,
    {
        match self.codec.encode(item, &mut self.buf) {
            Ok(()) => Ok(self.buf.split().freeze()),
            Err(e) => {
                // What the codec wrote before it failed goes.
                self.buf.clear();
                Err(e)
            }
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for TokioEncoder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioEncoder")
            .field("codec", &self.codec)
            .finish_non_exhaustive()
    }
}

impl<W: AsyncWrite + Unpin, C> AsyncFramedWriter<W, Bytes, TokioEncoder<C>> {
    /// Encodes `item` and queues its bytes, without writing anything (an item encoded
    /// to no bytes queues nothing).
    ///
    /// # Errors
    /// The codec's; nothing is queued then.
    ///
    /// ```
    /// use ringmem::io::{AsyncFramedWriter, TokioEncoder};
    /// use tokio_util::codec::LinesCodec;
    /// let mut w = AsyncFramedWriter::new(Vec::new(), TokioEncoder::new(LinesCodec::new()));
    /// w.feed_item("ping")?;
    /// assert_eq!((w.queued_frames(), w.queued_bytes()), (1, 5));
    /// # Ok::<(), tokio_util::codec::LinesCodecError>(())
    /// ```
    pub fn feed_item<I>(&mut self, item: I) -> Result<(), C::Error>
    where
        C: Encode<I>,
    {
        let bytes = self.codec_mut().encode(item)?;
        self.push(Framing::new(), bytes);
        Ok(())
    }

    /// Encodes and queues `item` and, once the queue holds the writer's high-water
    /// mark, writes it out, as [`send`](AsyncFramedWriter::send) does a payload.
    ///
    /// # Errors
    /// The codec's, and the writer's (converted by the codec's error type).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use ringmem::io::{AsyncFramedWriter, TokioEncoder};
    /// use tokio_util::codec::LinesCodec;
    /// let codec = TokioEncoder::new(LinesCodec::new());
    /// let mut w = AsyncFramedWriter::new(Vec::new(), codec).with_high_water(4);
    /// w.send_item("hi").await?; // 3 bytes: queued
    /// assert!(w.get_ref().is_empty());
    /// w.send_item("you").await?; // 7: written
    /// assert_eq!(&w.get_ref()[..], b"hi\nyou\n");
    /// # Ok::<(), tokio_util::codec::LinesCodecError>(())
    /// # }).unwrap();
    /// ```
    pub async fn send_item<I>(&mut self, item: I) -> Result<(), C::Error>
    where
        C: Encode<I>,
    {
        self.feed_item(item)?;
        poll_fn(|cx| self.poll_below_high_water(cx)).await?;
        Ok(())
    }
}

/// The writer as a `Sink` of the codec's items: `start_send` is
/// [`feed_item`](AsyncFramedWriter::feed_item); the rest is as for the `Sink` of
/// payloads, the writer's errors converted by the codec's error type.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::{future::poll_fn, pin::Pin};
/// use futures_sink::Sink;
/// use ringmem::io::{AsyncFramedWriter, TokioEncoder};
/// use tokio_util::codec::LinesCodec;
/// let mut w = AsyncFramedWriter::new(Vec::new(), TokioEncoder::new(LinesCodec::new()));
/// // `LinesCodec` encodes any `AsRef<str>`: say which.
/// poll_fn(|cx| Sink::<&str>::poll_ready(Pin::new(&mut w), cx)).await?;
/// Pin::new(&mut w).start_send("bye")?;
/// poll_fn(|cx| Sink::<&str>::poll_close(Pin::new(&mut w), cx)).await?;
/// assert_eq!(&w.get_ref()[..], b"bye\n");
/// # Ok::<(), tokio_util::codec::LinesCodecError>(())
/// # }).unwrap();
/// ```
impl<W, I, C> Sink<I> for AsyncFramedWriter<W, Bytes, TokioEncoder<C>>
where
    W: AsyncWrite + Unpin,
    C: Encode<I> + Unpin,
{
    type Error = C::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.get_mut().poll_below_high_water(cx).map_err(Into::into)
    }

    fn start_send(self: Pin<&mut Self>, item: I) -> Result<(), C::Error> {
        self.get_mut().feed_item(item)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        AsyncFramedWriter::poll_flush(self.get_mut(), cx).map_err(Into::into)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.get_mut().poll_shutdown(cx).map_err(Into::into)
    }
}
