//! `Encoder`: how the framed writers frame each payload.

use std::io;

use super::decoder::{FrameError, LengthDelimited, Lines};

/// The bytes a writer puts around one payload: a header before it (up to 8 bytes) and a
/// delimiter after it. Public in a private module: the sealed trait names it.
#[derive(Clone, Copy, Debug)]
pub struct Framing {
    head: [u8; 8],
    head_len: u8,
    tail: &'static [u8],
}

impl Framing {
    /// The bytes before the payload.
    pub(crate) fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// The bytes after the payload.
    pub(crate) fn tail(&self) -> &'static [u8] {
        self.tail
    }

    /// Bytes around the payload, before and after.
    #[cfg(feature = "tokio")]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.head_len) + self.tail.len()
    }
}

pub(crate) mod sealed {
    /// The method behind [`Encoder`](super::Encoder), out of users' reach.
    pub trait Sealed {
        /// The framing of `payload`, or `InvalidInput` if this encoding cannot carry it.
        fn framing(&self, payload: &[u8]) -> std::io::Result<super::Framing>;
    }
}

/// How [`FramedWriter`](super::FramedWriter) and `AsyncFramedWriter` frame each
/// payload, so that the decoder of the same name reads it back whole:
/// [`LengthDelimited`] writes a length header before it, [`Lines`] a newline after it.
/// A payload the encoding cannot carry is refused with `InvalidInput` (nothing is
/// written): one over the maximum length, one whose length the field cannot hold, a
/// line that holds a newline or ends in a carriage return (unless the lines end with
/// `\r\n`, [`Lines::crlf`]) ([`FrameError::DelimiterInFrame`]). The trait is sealed:
/// those two are its implementations.
///
/// ```
/// use ringmem::io::{FramedReader, FramedWriter, Lines};
/// let mut w = FramedWriter::new(Vec::new(), Lines::new());
/// w.write_frame(b"hello")?;
/// w.write_frame(b"")?;
/// assert!(w.write_frame(b"two\nlines").is_err());
/// let wire = w.into_inner();
/// assert_eq!(&wire[..], b"hello\n\n");
/// let lines: Vec<_> = FramedReader::new(&wire[..], Lines::new()).collect::<Result<_, _>>()?;
/// assert_eq!((&lines[0][..], lines.len()), (&b"hello"[..], 2));
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Encoder: sealed::Sealed {}

impl Encoder for LengthDelimited {}

impl sealed::Sealed for LengthDelimited {
    fn framing(&self, payload: &[u8]) -> io::Result<Framing> {
        let mut head = [0; 8];
        let n = self.encode_header(payload.len(), &mut head)?;
        Ok(Framing {
            head,
            // A length field is at most 8 bytes wide.
            head_len: n as u8,
            tail: b"",
        })
    }
}

impl Encoder for Lines {}

impl sealed::Sealed for Lines {
    fn framing(&self, payload: &[u8]) -> io::Result<Framing> {
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
        Ok(Framing {
            head: [0; 8],
            head_len: 0,
            tail: self.line_end(),
        })
    }
}
