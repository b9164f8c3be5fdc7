//! `Encoder` and `Framing`: how the framed writers frame each payload.

use core::fmt;
use std::io;

use super::decoder::{FrameError, LengthDelimited, Lines};
use crate::CapacityError;

/// The bytes a framed writer puts around one payload: a head before it and a tail
/// after it, [`CAPACITY`](Self::CAPACITY) bytes between them, held inline (the whole
/// value is 32 bytes, what an `AsyncFramedWriter` keeps per queued frame beside the
/// payload). An [`Encoder`] fills it; the writer sends head, payload and tail as three
/// slices of one vectored write, so the payload is never copied.
///
/// A head grows with [`extend_head`](Self::extend_head) or `io::Write` (`write!`), and
/// a tail is set whole with [`set_tail`](Self::set_tail). A write that would take the
/// two past the capacity fails with `InvalidInput` carrying a [`CapacityError`], and
/// writes none of its bytes (the writers drop a framing whose encoder failed).
///
/// ```
/// use std::io::Write;
/// use ringmem::io::Framing;
/// let mut f = Framing::new();
/// write!(f, "${}\r\n", 1048576)?; // a RESP bulk string's head: 10 bytes
/// f.set_tail(b"\r\n")?;
/// assert_eq!((f.head(), f.tail(), f.len()), (&b"$1048576\r\n"[..], &b"\r\n"[..], 12));
/// let err = f.extend_head(&[0; Framing::CAPACITY]).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// assert_eq!(f.len(), 12); // unchanged
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Framing {
    /// The head in `bytes[..head]`, the tail in `bytes[CAPACITY - tail..]`; the two
    /// never overlap (`head + tail <= CAPACITY`).
    bytes: [u8; Framing::CAPACITY],
    head: u8,
    tail: u8,
}

impl Framing {
    /// Bytes of head and tail together at most: room for a `u64` length in decimal
    /// with its punctuation, or a varint and a type byte, and a short tail.
    pub const CAPACITY: usize = 30;

    /// No head and no tail.
    ///
    /// ```
    /// let f = ringmem::io::Framing::new();
    /// assert!(f.is_empty() && f.head().is_empty() && f.tail().is_empty());
    /// ```
    pub const fn new() -> Framing {
        Framing {
            bytes: [0; Framing::CAPACITY],
            head: 0,
            tail: 0,
        }
    }

    /// The bytes before the payload.
    ///
    /// ```
    /// let mut f = ringmem::io::Framing::new();
    /// f.extend_head(b"\x01")?;
    /// f.extend_head(b"\x05")?;
    /// assert_eq!(f.head(), b"\x01\x05");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn head(&self) -> &[u8] {
        &self.bytes[..usize::from(self.head)]
    }

    /// The bytes after the payload.
    ///
    /// ```
    /// let mut f = ringmem::io::Framing::new();
    /// f.set_tail(b"\r\n")?;
    /// assert_eq!(f.tail(), b"\r\n");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tail(&self) -> &[u8] {
        &self.bytes[Framing::CAPACITY - usize::from(self.tail)..]
    }

    /// Bytes of head and tail together.
    ///
    /// ```
    /// let mut f = ringmem::io::Framing::new();
    /// f.extend_head(b"abc")?;
    /// f.set_tail(b"\n")?;
    /// assert_eq!(f.len(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        usize::from(self.head) + usize::from(self.tail)
    }

    /// Whether there is neither head nor tail (the writer then sends the payload bare).
    ///
    /// ```
    /// let mut f = ringmem::io::Framing::new();
    /// assert!(f.is_empty());
    /// f.set_tail(b"\n")?;
    /// assert!(!f.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `bytes` to the head.
    ///
    /// # Errors
    /// `InvalidInput` carrying a [`CapacityError`] when head and tail would pass
    /// [`CAPACITY`](Self::CAPACITY); nothing is appended then.
    ///
    /// ```
    /// use ringmem::{io::Framing, CapacityError};
    /// let mut f = Framing::new();
    /// f.extend_head(&[0; 28])?;
    /// let err = f.extend_head(b"xyz").unwrap_err();
    /// let why = err.get_ref().unwrap().downcast_ref::<CapacityError>().unwrap();
    /// assert_eq!((why.requested, why.available), (3, 2));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn extend_head(&mut self, bytes: &[u8]) -> io::Result<()> {
        let at = usize::from(self.head);
        self.check(bytes.len(), self.len())?;
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
        // At most `CAPACITY`, checked above.
        self.head = (at + bytes.len()) as u8;
        Ok(())
    }

    /// Sets the tail to `bytes`, in place of any tail set before.
    ///
    /// # Errors
    /// `InvalidInput` carrying a [`CapacityError`] when head and tail would pass
    /// [`CAPACITY`](Self::CAPACITY); the tail is left as it was then.
    ///
    /// ```
    /// let mut f = ringmem::io::Framing::new();
    /// f.set_tail(b"\r\n")?;
    /// f.set_tail(b"\n")?;
    /// assert_eq!(f.tail(), b"\n");
    /// assert!(f.set_tail(&[0; 31]).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_tail(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.check(bytes.len(), usize::from(self.head))?;
        self.bytes[Framing::CAPACITY - bytes.len()..].copy_from_slice(bytes);
        // At most `CAPACITY`, checked above.
        self.tail = bytes.len() as u8;
        Ok(())
    }

    /// Whether `more` bytes fit beside the `kept` ones.
    fn check(&self, more: usize, kept: usize) -> io::Result<()> {
        let available = Framing::CAPACITY - kept;
        if more > available {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                CapacityError {
                    requested: more,
                    available,
                },
            ));
        }
        Ok(())
    }
}

impl Default for Framing {
    fn default() -> Self {
        Framing::new()
    }
}

impl fmt::Debug for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framing")
            .field("head", &self.head())
            .field("tail", &self.tail())
            .finish()
    }
}

/// Appends to the head, all of each write or none of it (`write!` formats a head).
impl io::Write for Framing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.extend_head(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How [`FramedWriter`](super::FramedWriter) and `AsyncFramedWriter` frame each
/// payload: the bytes that go before it and after it, written into a [`Framing`] the
/// writer owns; the payload itself is never copied. [`LengthDelimited`] writes a length
/// header, [`Lines`] a newline after it; implement it for a protocol of your own.
///
/// A payload the encoding cannot carry is refused with `InvalidInput`, and the writer
/// then writes nothing: the built-in ones refuse one over the maximum length, one whose
/// length the field cannot hold, a line that holds a newline or ends in a carriage
/// return (unless the lines end with `\r\n`, [`Lines::crlf`])
/// ([`FrameError::DelimiterInFrame`]). An encoder that leaves the framing empty sends
/// the payload bare (an empty one then sends nothing).
///
/// ```
/// use std::io::{self, Write};
/// use ringmem::io::{Encoder, FramedWriter, Framing};
/// /// RESP bulk strings: `$<len>\r\n<payload>\r\n`.
/// struct Bulk;
/// impl Encoder for Bulk {
///     fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
///         write!(framing, "${}\r\n", payload.len())?;
///         framing.set_tail(b"\r\n")
///     }
/// }
/// let mut w = FramedWriter::new(Vec::new(), Bulk);
/// w.write_frame(b"hello")?;
/// w.write_frame(b"")?;
/// assert_eq!(&w.get_ref()[..], b"$5\r\nhello\r\n$0\r\n\r\n");
/// # Ok::<(), io::Error>(())
/// ```
pub trait Encoder {
    /// Writes the head and tail of `payload` into `framing` (given empty).
    ///
    /// # Errors
    /// A payload this encoding cannot carry (`InvalidInput` by convention), or a head
    /// and tail that pass [`Framing::CAPACITY`]; the writer writes nothing then.
    ///
    /// ```
    /// use ringmem::io::{Encoder, Framing, LengthDelimited};
    /// let mut f = Framing::new();
    /// LengthDelimited::new().field_width(2).encode(b"hey", &mut f)?;
    /// assert_eq!((f.head(), f.tail()), (&[0, 3][..], &b""[..]));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()>;
}

impl Encoder for LengthDelimited {
    fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
        let mut head = [0; 8];
        let n = self.encode_header(payload.len(), &mut head)?;
        framing.extend_head(&head[..n])
    }
}

impl Encoder for Lines {
    fn encode(&mut self, payload: &[u8], framing: &mut Framing) -> io::Result<()> {
        let invalid = |e: FrameError| io::Error::new(io::ErrorKind::InvalidInput, e);
        if payload.len() > self.max_len() {
            return Err(invalid(FrameError::TooLong {
                len: payload.len() as u64,
                max: self.max_len(),
            }));
        }
        // A final `\r` before a lone `\n` would read as part of the line end; before
        // `\r\n` it reads back as itself (the reader strips one).
        let bare_cr = self.line_end() == b"\n" && payload.last() == Some(&b'\r');
        // `contains` on bytes is a `memchr`; the position is looked for on error only.
        if payload.contains(&b'\n') || bare_cr {
            let at = payload.iter().position(|&b| b == b'\n');
            return Err(invalid(FrameError::DelimiterInFrame {
                at: at.unwrap_or(payload.len() - 1),
            }));
        }
        framing.set_tail(self.line_end())
    }
}
