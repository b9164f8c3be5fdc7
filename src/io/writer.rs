//! `FramedWriter`: frames to a `std::io::Write`.

use std::io::{self, IoSlice, Write};

use super::decoder::LengthDelimited;
use super::encoder::{Encoder, Framing};

/// Writes each payload framed by an [`Encoder`] (behind a length header with
/// [`LengthDelimited`], the default, followed by a newline with [`Lines`](super::Lines),
/// or as a protocol of your own says), the framing and the payload in one vectored
/// write: the
/// payload is never copied into a staging buffer, whatever holds it (a
/// [`FixedBuf`](crate::FixedBuf) frame, a slice). Partial writes are carried on until
/// the frame is out.
///
/// ```
/// use ringmem::io::{FramedReader, FramedWriter, LengthDelimited};
/// let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new());
/// w.write_frame(b"hello")?;
/// w.write_frame(b"")?;
/// let wire = w.into_inner();
/// assert_eq!(&wire[..], b"\0\0\0\x05hello\0\0\0\0");
/// let frames: Vec<_> = FramedReader::new(&wire[..], LengthDelimited::new())
///     .collect::<Result<_, _>>()?;
/// assert_eq!(frames.len(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct FramedWriter<W, E = LengthDelimited> {
    writer: W,
    codec: E,
}

impl<W: Write, E: Encoder> FramedWriter<W, E> {
    /// A writer of frames framed by `codec`.
    ///
    /// ```
    /// let w = ringmem::io::FramedWriter::new(Vec::new(), ringmem::io::LengthDelimited::new());
    /// assert!(w.get_ref().is_empty());
    /// ```
    pub fn new(writer: W, codec: E) -> Self {
        FramedWriter { writer, codec }
    }

    /// Writes one frame: its header, `payload`, its delimiter.
    ///
    /// # Errors
    /// `InvalidInput` for a payload the codec cannot frame (see [`Encoder`]; nothing is
    /// written then); the writer's errors (`Interrupted` is retried), and `WriteZero`
    /// when it accepts no more bytes. After an error from the writer, part of the frame
    /// may have been written.
    ///
    /// ```
    /// use ringmem::io::{FramedWriter, LengthDelimited};
    /// let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new().field_width(1));
    /// assert!(w.write_frame(&[0; 256]).is_err()); // 256 needs more than one byte
    /// w.write_frame(&[7; 255])?;
    /// assert_eq!(w.get_ref().len(), 256);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_frame(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut framing = Framing::new();
        self.codec.encode(payload, &mut framing)?;
        let mut parts = [framing.head(), payload, framing.tail()].map(IoSlice::new);
        let mut left = &mut parts[..];
        // Drops the empty parts in front (a `Lines` frame has no header; a frame may
        // have nothing at all).
        IoSlice::advance_slices(&mut left, 0);
        while !left.is_empty() {
            // A writer without vectored writes writes the first slice with bytes.
            match self.writer.write_vectored(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => IoSlice::advance_slices(&mut left, k),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Flushes the writer.
    ///
    /// # Errors
    /// The writer's.
    ///
    /// ```
    /// let mut w = ringmem::io::FramedWriter::new(Vec::new(), ringmem::io::LengthDelimited::new());
    /// w.flush()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// The underlying writer.
    ///
    /// ```
    /// let w = ringmem::io::FramedWriter::new(Vec::<u8>::new(), ringmem::io::LengthDelimited::new());
    /// assert_eq!(w.get_ref().len(), 0);
    /// ```
    pub fn get_ref(&self) -> &W {
        &self.writer
    }

    /// The underlying writer, mutably.
    ///
    /// ```
    /// let mut w = ringmem::io::FramedWriter::new(Vec::new(), ringmem::io::LengthDelimited::new());
    /// w.get_mut().push(1);
    /// assert_eq!(w.get_ref().len(), 1);
    /// ```
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.writer
    }

    /// The underlying writer, given back.
    ///
    /// ```
    /// let w = ringmem::io::FramedWriter::new(Vec::<u8>::new(), ringmem::io::LengthDelimited::new());
    /// assert!(w.into_inner().is_empty());
    /// ```
    pub fn into_inner(self) -> W {
        self.writer
    }
}
