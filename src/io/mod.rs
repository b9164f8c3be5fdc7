//! Frames straight off a socket: a reader that reads into ring memory and yields each
//! complete frame as a [`FixedBuf`](crate::FixedBuf) (a slice of the region it was read
//! into, or for a frame under a quarter of that region a copy in a region of its own,
//! so that a frame kept costs its own bytes; no heap allocation per frame, memory
//! bounded by the ring or by a [`ReadPool`]'s budget), and writers that frame payloads
//! without copying them.
//!
//! Frame boundaries come from a [`Decoder`]: [`LengthDelimited`] (the options of
//! `tokio_util`'s `LengthDelimitedCodec` that matter), [`Lines`] and [`Resp`] (the
//! Redis protocol, RESP2) are built in. Bad input is an `io::Error` carrying a
//! [`FrameError`]. The writers frame payloads with an [`Encoder`]: the first two
//! built-in decoders again, or one of your own that writes the
//! bytes around each payload into a [`Framing`]. The async reader is
//! `AsyncFramedReader`, a `futures_core::Stream` behind the `tokio` feature; its writing
//! side is `AsyncFramedWriter`, which gathers queued frames into vectored writes. A
//! reader's `into_split` gives a writer over its own socket, for frames both ways. With
//! the `tokio-util` feature, `TokioEncoder` takes a `tokio_util` encoder's items to
//! `AsyncFramedWriter`.
//!
//! ```
//! use ringmem::io::{FramedReader, FramedWriter, LengthDelimited};
//! let mut wire = FramedWriter::new(Vec::new(), LengthDelimited::new());
//! for msg in [&b"ping"[..], b"pong"] {
//!     wire.write_frame(msg)?;
//! }
//! let wire = wire.into_inner();
//! let frames = FramedReader::new(&wire[..], LengthDelimited::new());
//! let got: Vec<_> = frames.collect::<Result<_, _>>()?;
//! assert_eq!(&got[1][..], b"pong");
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(feature = "tokio")]
mod async_reader;
#[cfg(feature = "tokio")]
mod async_writer;
mod core;
mod decoder;
mod encoder;
mod pool;
mod reader;
mod resp;
#[cfg(feature = "tokio-util")]
mod tokio_encoder;
mod writer;

#[cfg(uring)]
pub(crate) use self::core::{copied, filled, Trust};
#[cfg(uring)]
pub(crate) use async_reader::spend_budget;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use async_reader::AsyncFramedReader;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use async_writer::AsyncFramedWriter;
pub use decoder::{Decode, Decoder, Frame, FrameError, LengthDelimited, Lines, Resync};
pub use encoder::{Encoder, Framing};
#[cfg(uring)]
pub(crate) use pool::Memory;
pub use pool::ReadPool;
pub use reader::FramedReader;
pub use resp::{Resp, RespArgs};
#[cfg(feature = "tokio-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio-util")))]
pub use tokio_encoder::TokioEncoder;
pub use writer::FramedWriter;
