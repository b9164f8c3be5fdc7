//! Frame boundaries: the [`Decoder`] trait and the two built-in decoders.

use core::fmt;
use std::io;

/// Where the next frame lies in the buffered bytes, as a [`Decoder`] found it.
///
/// ```
/// use ringmem::io::{Decode, Decoder, Frame, LengthDelimited};
/// let mut d = LengthDelimited::new(); // 4-byte big-endian length
/// let found = d.decode(b"\0\0\0\x02hi+").unwrap();
/// assert_eq!(found, Decode::Frame(Frame { start: 4, end: 6, consumed: 6 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Offset of the frame's first byte (after any header).
    pub start: usize,
    /// Offset one past the frame's last byte.
    pub end: usize,
    /// Bytes the frame takes in the stream, header and trailer included
    /// (`start <= end <= consumed`).
    pub consumed: usize,
}

/// What a [`Decoder`] made of the buffered bytes.
///
/// ```
/// use ringmem::io::{Decode, Decoder, LengthDelimited};
/// let mut d = LengthDelimited::new();
/// // Half a header: at least the 4 header bytes are needed.
/// assert_eq!(d.decode(b"\0\0").unwrap(), Decode::Need(4));
/// // A whole header announcing 100 bytes: 104 are needed.
/// assert_eq!(d.decode(b"\0\0\0\x64").unwrap(), Decode::Need(104));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decode {
    /// A complete frame.
    Frame(Frame),
    /// No complete frame yet: at least this many bytes (counted from the start of the
    /// buffer, more than it holds now) are needed. A reader sizes its next region by it,
    /// so a decoder that knows the frame's length says so here.
    Need(usize),
}

/// How a reader gets past a frame its [`Decoder`] rejected ([`Decoder::resync`]).
///
/// ```
/// use ringmem::io::{Decoder, Lines, Resync};
/// let mut d = Lines::with_max_length(2);
/// assert!(d.decode(b"long\nok\n").is_err());
/// // The bad line ends at the first newline: drop it and its newline.
/// assert_eq!(d.resync(b"long\nok\n"), Resync::Skip(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resync {
    /// The stream cannot be followed any further: the reader ends after the error.
    Stop,
    /// Drop this many of the bytes shown (at most all of them); the next frame starts
    /// right after.
    Skip(usize),
    /// Drop all the bytes shown and show the next ones that arrive.
    More,
}

/// Finds frame boundaries in a byte stream. The reader passes every byte buffered since
/// the end of the last frame, and calls again with more once told what is missing.
///
/// ```
/// use std::io;
/// use ringmem::io::{Decode, Decoder, Frame};
/// /// Frames of exactly 3 bytes.
/// struct Triples;
/// impl Decoder for Triples {
///     fn decode(&mut self, buf: &[u8]) -> io::Result<Decode> {
///         Ok(if buf.len() >= 3 {
///             Decode::Frame(Frame { start: 0, end: 3, consumed: 3 })
///         } else {
///             Decode::Need(3)
///         })
///     }
/// }
/// let mut reader = ringmem::io::FramedReader::new(&b"abcdef"[..], Triples);
/// assert_eq!(&reader.next_frame()?.unwrap()[..], b"abc");
/// assert_eq!(&reader.next_frame()?.unwrap()[..], b"def");
/// assert!(reader.next_frame()?.is_none());
/// # Ok::<(), io::Error>(())
/// ```
pub trait Decoder {
    /// The next frame at the start of `buf`, or how many bytes it needs.
    ///
    /// # Errors
    /// Bad input ([`io::ErrorKind::InvalidData`] by convention); the reader then stops.
    fn decode(&mut self, buf: &[u8]) -> io::Result<Decode>;

    /// The last frame when the stream ends with `buf` (not empty) still buffered.
    ///
    /// # Errors
    /// By default [`io::ErrorKind::UnexpectedEof`]: the peer closed mid-frame.
    ///
    /// ```
    /// use ringmem::io::{Decoder, LengthDelimited};
    /// let err = LengthDelimited::new().decode_eof(b"\0\0").unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    /// ```
    fn decode_eof(&mut self, buf: &[u8]) -> io::Result<Frame> {
        Err(FrameError::Truncated {
            buffered: buf.len(),
        }
        .into())
    }

    /// After [`decode`](Self::decode) returned an error, or the reader found a frame
    /// larger than its ring ([`FrameError::LargerThanRing`]), how to reach the next
    /// frame. The reader yields the error, then calls this with the buffered bytes
    /// (starting at the rejected frame's first byte), and, while it answers [`Resync::More`],
    /// again with each read's bytes; a stream that ends meanwhile ends cleanly (the
    /// error has been reported).
    ///
    /// By default [`Resync::Stop`]: the reader drops what it buffered and ends.
    /// [`LengthDelimited`] skips a frame over its maximum or larger than the ring (its
    /// length is known), [`Lines`] such a line (up to its newline); a length field that
    /// overflows stops both.
    ///
    /// ```
    /// use ringmem::io::{Decoder, LengthDelimited, Resync};
    /// let mut d = LengthDelimited::new().field_width(1).max_frame_length(2);
    /// assert!(d.decode(&[5, b'a']).is_err());
    /// // The bad frame is 1 + 5 bytes; 2 are here, 4 more are to be dropped.
    /// assert_eq!(d.resync(&[5, b'a']), Resync::More);
    /// assert_eq!(d.resync(b"bcdef"), Resync::Skip(4));
    /// ```
    fn resync(&mut self, buf: &[u8]) -> Resync {
        let _ = buf;
        Resync::Stop
    }
}

/// What was wrong with a stream, carried inside the `io::Error`s of this module
/// (`err.get_ref()` and `downcast_ref::<FrameError>()` reach it).
///
/// ```
/// use ringmem::io::{Decoder, FrameError, LengthDelimited};
/// let mut d = LengthDelimited::new().max_frame_length(10);
/// let err = d.decode(b"\0\0\0\x64").unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
/// let why = err.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
/// assert_eq!(*why, FrameError::TooLong { len: 100, max: 10 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame longer than the decoder's maximum ([`io::ErrorKind::InvalidData`]).
    TooLong {
        /// The frame's length (for a line, the bytes seen so far without a newline).
        len: u64,
        /// The maximum.
        max: usize,
    },
    /// A length field whose value, adjusted, is negative or does not fit in memory
    /// ([`io::ErrorKind::InvalidData`]).
    LengthOverflow {
        /// The field as read.
        field: u64,
    },
    /// The stream ended inside a frame ([`io::ErrorKind::UnexpectedEof`]).
    Truncated {
        /// Bytes of the unfinished frame that had arrived.
        buffered: usize,
    },
    /// A frame (with its header) larger than a block of the reader's ring, which no
    /// release of memory can make room for ([`io::ErrorKind::InvalidData`]: the peer
    /// sent it; a [`LengthDelimited::max_frame_length`] under the ring's size turns it
    /// into [`FrameError::TooLong`]). The reader skips it as it skips a frame over the
    /// maximum ([`Decoder::resync`]).
    LargerThanRing {
        /// Bytes the frame needs in one region.
        needed: usize,
        /// Bytes of one block of the ring.
        block: usize,
    },
    /// A payload given to a writer with [`Lines`] that holds a newline, or ends in a
    /// carriage return that a `\n` would make a line end (not with
    /// [`Lines::crlf`]), at byte `at`: the reader would end the line there
    /// ([`io::ErrorKind::InvalidInput`]; nothing is written).
    DelimiterInFrame {
        /// The offset of the newline (or of the final carriage return).
        at: usize,
    },
    /// Bytes that break the protocol's grammar at offset `at` of the frame, for the
    /// `reason` given: a length that is not a number, a line too long
    /// ([`io::ErrorKind::InvalidData`]). [`Resp`](super::Resp)'s reasons are Redis's own
    /// words (`invalid bulk length`), so a server can answer `-ERR Protocol error: ` and
    /// the error.
    Malformed {
        /// What is wrong, in a few words.
        reason: &'static str,
        /// The offset, from the frame's first byte, of the part in error.
        at: usize,
    },
    /// A byte other than the one the protocol wants at offset `at` of the frame
    /// ([`io::ErrorKind::InvalidData`]): shown as Redis words it, ``expected '$', got 'x'``.
    Unexpected {
        /// The byte wanted.
        expected: u8,
        /// The byte found.
        found: u8,
        /// Its offset from the frame's first byte.
        at: usize,
    },
    /// The underlying `std::io::Read` said it read more bytes than the buffer it was
    /// handed holds: a bug in that reader, whose bytes cannot be where it says. The
    /// framed reader drops what it buffered and ends ([`io::ErrorKind::Other`]).
    ReadOverrun {
        /// The bytes the reader returned.
        read: usize,
        /// The bytes of the buffer it was handed.
        room: usize,
    },
    /// The underlying tokio `AsyncRead` put a `ReadBuf` of its own (another pointer or
    /// capacity) in place of the one it was handed to fill, as `tokio_util`'s
    /// `poll_read_buf` checks too: a bug in that reader, whose bytes are not in the
    /// framed reader's memory. Their count is not trusted: the framed reader drops
    /// what it buffered and ends ([`io::ErrorKind::Other`]).
    ReadBufReplaced {
        /// The bytes the `ReadBuf` found in its place said it held.
        filled: usize,
        /// The bytes of the `ReadBuf` the reader was handed.
        room: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLong { len, max } => {
                write!(f, "a frame of {len} bytes exceeds the maximum of {max}")
            }
            FrameError::LengthOverflow { field } => {
                write!(f, "the length field {field} overflows once adjusted")
            }
            FrameError::Truncated { buffered } => {
                write!(f, "the stream ended {buffered} bytes into a frame")
            }
            FrameError::LargerThanRing { needed, block } => write!(
                f,
                "a frame needing {needed} bytes never fits a ring of {block}-byte blocks"
            ),
            FrameError::Malformed { reason, .. } => f.write_str(reason),
            FrameError::Unexpected {
                expected, found, ..
            } => write!(
                f,
                "expected '{}', got '{}'",
                expected.escape_ascii(),
                found.escape_ascii()
            ),
            FrameError::DelimiterInFrame { at } => {
                write!(f, "the line holds a line break at byte {at}")
            }
            FrameError::ReadOverrun { read, room } => write!(
                f,
                "the reader's bug: it returned {read} bytes read into a buffer of {room}"
            ),
            FrameError::ReadBufReplaced { filled, room } => write!(
                f,
                "the reader's bug: it replaced the {room}-byte ReadBuf it was to fill \
                 with one of its own ({filled} bytes filled)"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        let kind = match e {
            FrameError::Truncated { .. } => io::ErrorKind::UnexpectedEof,
            FrameError::DelimiterInFrame { .. } => io::ErrorKind::InvalidInput,
            FrameError::ReadOverrun { .. } | FrameError::ReadBufReplaced { .. } => {
                io::ErrorKind::Other
            }
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// Byte order of a length field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endian {
    Big,
    Little,
}

/// Frames led by a length field, as `tokio_util::codec::LengthDelimitedCodec` reads
/// them by default: the header is the field alone, and the frame yielded is the payload
/// without it. Set the field width (1, 2, 4 or 8 bytes; 4 by default), the byte order
/// (big-endian by default), an adjustment added to the field to get the payload length
/// (for fields that count themselves), and a maximum payload length (8 MiB by default,
/// as tokio's).
///
/// ```
/// use ringmem::io::{Decode, Decoder, Frame, LengthDelimited};
/// // A 2-byte little-endian field that counts itself too.
/// let mut d = LengthDelimited::new().field_width(2).little_endian().adjustment(-2);
/// let got = d.decode(&[5, 0, b'a', b'b', b'c']).unwrap();
/// assert_eq!(got, Decode::Frame(Frame { start: 2, end: 5, consumed: 5 }));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LengthDelimited {
    width: usize,
    endian: Endian,
    adjustment: i64,
    max: usize,
    /// Bytes of a rejected frame still to be dropped (0: none).
    discard: u64,
}

impl Default for LengthDelimited {
    fn default() -> Self {
        LengthDelimited::new()
    }
}

impl LengthDelimited {
    /// A 4-byte big-endian length field, no adjustment, frames up to 8 MiB.
    ///
    /// ```
    /// assert_eq!(ringmem::io::LengthDelimited::new().header_len(), 4);
    /// ```
    pub fn new() -> Self {
        LengthDelimited {
            width: 4,
            endian: Endian::Big,
            adjustment: 0,
            max: 8 << 20,
            discard: 0,
        }
    }

    /// The length field's width in bytes.
    ///
    /// # Panics
    /// Unless `bytes` is 1, 2, 4 or 8.
    ///
    /// ```
    /// let d = ringmem::io::LengthDelimited::new().field_width(2);
    /// assert_eq!(d.header_len(), 2);
    /// ```
    pub fn field_width(mut self, bytes: usize) -> Self {
        assert!(
            matches!(bytes, 1 | 2 | 4 | 8),
            "a length field is 1, 2, 4 or 8 bytes wide, not {bytes}"
        );
        self.width = bytes;
        self
    }

    /// Reads the field big-endian (the default).
    ///
    /// ```
    /// use ringmem::io::{Decode, Decoder, LengthDelimited};
    /// let mut d = LengthDelimited::new().field_width(2).big_endian();
    /// assert_eq!(d.decode(&[1, 0]).unwrap(), Decode::Need(2 + 256));
    /// ```
    pub fn big_endian(mut self) -> Self {
        self.endian = Endian::Big;
        self
    }

    /// Reads the field little-endian.
    ///
    /// ```
    /// use ringmem::io::{Decode, Decoder, LengthDelimited};
    /// let mut d = LengthDelimited::new().field_width(2).little_endian();
    /// assert_eq!(d.decode(&[1, 0]).unwrap(), Decode::Need(2 + 1));
    /// ```
    pub fn little_endian(mut self) -> Self {
        self.endian = Endian::Little;
        self
    }

    /// Added to the field's value to get the payload's length (tokio's
    /// `length_adjustment`): `-(width as i64)` for a field that counts itself.
    ///
    /// ```
    /// use ringmem::io::{Decode, Decoder, LengthDelimited};
    /// let mut d = LengthDelimited::new().field_width(1).adjustment(1);
    /// assert_eq!(d.decode(&[3]).unwrap(), Decode::Need(1 + 4));
    /// ```
    pub fn adjustment(mut self, delta: i64) -> Self {
        self.adjustment = delta;
        self
    }

    /// The longest payload accepted; longer ones are [`FrameError::TooLong`].
    ///
    /// ```
    /// use ringmem::io::{Decoder, LengthDelimited};
    /// let mut d = LengthDelimited::new().field_width(1).max_frame_length(2);
    /// assert!(d.decode(&[3]).is_err());
    /// ```
    pub fn max_frame_length(mut self, bytes: usize) -> Self {
        self.max = bytes;
        self
    }

    /// Bytes of the header (the length field).
    ///
    /// ```
    /// assert_eq!(ringmem::io::LengthDelimited::new().field_width(8).header_len(), 8);
    /// ```
    pub fn header_len(&self) -> usize {
        self.width
    }

    /// The longest payload accepted.
    ///
    /// ```
    /// assert_eq!(ringmem::io::LengthDelimited::new().max_len(), 8 << 20);
    /// ```
    pub fn max_len(&self) -> usize {
        self.max
    }

    /// Writes the header of a `payload_len`-byte payload into `out` and returns its
    /// length (the inverse of [`decode`](Decoder::decode)).
    ///
    /// # Errors
    /// [`FrameError::TooLong`] over the maximum, [`FrameError::LengthOverflow`] when
    /// the field cannot hold the length (both `InvalidInput`: the caller's data).
    ///
    /// ```
    /// let d = ringmem::io::LengthDelimited::new().field_width(2).little_endian();
    /// let mut h = [0; 8];
    /// let n = d.encode_header(258, &mut h).unwrap();
    /// assert_eq!(&h[..n], &[2, 1]);
    /// ```
    pub fn encode_header(&self, payload_len: usize, out: &mut [u8; 8]) -> io::Result<usize> {
        let invalid = |e: FrameError| io::Error::new(io::ErrorKind::InvalidInput, e);
        if payload_len > self.max {
            return Err(invalid(FrameError::TooLong {
                len: payload_len as u64,
                max: self.max,
            }));
        }
        let field = (payload_len as i128) - i128::from(self.adjustment);
        let limit = if self.width == 8 {
            u64::MAX as i128
        } else {
            (1i128 << (8 * self.width)) - 1
        };
        if field < 0 || field > limit {
            return Err(invalid(FrameError::LengthOverflow {
                field: payload_len as u64,
            }));
        }
        let field = field as u64;
        let bytes = match self.endian {
            Endian::Big => field.to_be_bytes(),
            Endian::Little => field.to_le_bytes(),
        };
        let w = self.width;
        match self.endian {
            Endian::Big => out[..w].copy_from_slice(&bytes[8 - w..]),
            Endian::Little => out[..w].copy_from_slice(&bytes[..w]),
        }
        Ok(w)
    }

    #[inline]
    fn field(&self, head: &[u8]) -> u64 {
        let mut b = [0u8; 8];
        match self.endian {
            Endian::Big => {
                b[8 - self.width..].copy_from_slice(head);
                u64::from_be_bytes(b)
            }
            Endian::Little => {
                b[..self.width].copy_from_slice(head);
                u64::from_le_bytes(b)
            }
        }
    }
}

impl LengthDelimited {
    /// The payload length the header at the start of `head` announces (`head` holds the
    /// whole header), checked against memory but not against the maximum.
    #[inline]
    fn payload_len(&self, head: &[u8]) -> io::Result<usize> {
        let field = self.field(head);
        let len = i128::from(field) + i128::from(self.adjustment);
        // The payload and its header must be addressable.
        usize::try_from(len)
            .ok()
            .filter(|l| {
                l.checked_add(self.width)
                    .is_some_and(|t| t <= isize::MAX as usize)
            })
            .ok_or_else(|| FrameError::LengthOverflow { field }.into())
    }
}

impl Decoder for LengthDelimited {
    // Always: it is the whole of a reader's per-frame work beside slicing, and called
    // from two places, which would otherwise keep it out of line.
    #[inline(always)]
    fn decode(&mut self, buf: &[u8]) -> io::Result<Decode> {
        let w = self.width;
        let Some(head) = buf.get(..w) else {
            return Ok(Decode::Need(w));
        };
        let len = self.payload_len(head)?;
        if len > self.max {
            return Err(FrameError::TooLong {
                len: len as u64,
                max: self.max,
            }
            .into());
        }
        let end = w + len;
        Ok(if buf.len() >= end {
            Decode::Frame(Frame {
                start: w,
                end,
                consumed: end,
            })
        } else {
            Decode::Need(end)
        })
    }

    /// Skips the rejected frame, header and payload (one over the maximum, or larger
    /// than the reader's ring); stops at a length field that overflows (nothing says
    /// where the next frame starts).
    fn resync(&mut self, buf: &[u8]) -> Resync {
        if self.discard == 0 {
            // The first call: `buf` starts with the rejected frame's header.
            let len = match buf.get(..self.width).map(|h| self.payload_len(h)) {
                Some(Ok(len)) => len,
                _ => return Resync::Stop,
            };
            // Addressable, so no overflow (checked by `payload_len`).
            self.discard = (self.width + len) as u64;
        }
        match usize::try_from(self.discard) {
            Ok(n) if n <= buf.len() => {
                self.discard = 0;
                Resync::Skip(n)
            }
            _ => {
                self.discard -= buf.len() as u64;
                Resync::More
            }
        }
    }
}

/// Newline-delimited frames (`\n`, with a `\r` before it stripped too), at most
/// `max_length` bytes each without the newline; the last line may end without one.
/// The framed writers end each line with `\n`, or with `\r\n` after
/// [`crlf`](Lines::crlf).
///
/// ```
/// use ringmem::io::{Decode, Decoder, Frame, Lines};
/// let mut d = Lines::new();
/// let got = d.decode(b"hi\r\nrest").unwrap();
/// assert_eq!(got, Decode::Frame(Frame { start: 0, end: 2, consumed: 4 }));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Lines {
    max: usize,
    /// Bytes of the current line already searched for a newline.
    searched: usize,
    /// Writers end lines with `\r\n`.
    crlf: bool,
}

impl Default for Lines {
    fn default() -> Self {
        Lines::new()
    }
}

impl Lines {
    /// Lines of up to 64 KiB.
    ///
    /// ```
    /// assert_eq!(ringmem::io::Lines::new().max_len(), 64 << 10);
    /// ```
    pub fn new() -> Self {
        Lines::with_max_length(64 << 10)
    }

    /// Lines of up to `max` bytes (the newline not counted); a longer one is
    /// [`FrameError::TooLong`].
    ///
    /// ```
    /// use ringmem::io::{Decoder, Lines};
    /// assert!(Lines::with_max_length(3).decode(b"abcd").is_err());
    /// assert!(Lines::with_max_length(3).decode(b"abc\n").is_ok());
    /// ```
    pub fn with_max_length(max: usize) -> Self {
        Lines {
            max,
            searched: 0,
            crlf: false,
        }
    }

    /// The same lines, written with `\r\n` at the end of each instead of `\n`, as text
    /// protocols such as SMTP, IMAP or Redis's inline commands want them. Reading is
    /// unchanged: either ending is read, with or without this.
    ///
    /// ```
    /// use ringmem::io::{FramedWriter, Lines};
    /// let mut w = FramedWriter::new(Vec::new(), Lines::new().crlf());
    /// w.write_frame(b"EHLO example.com")?;
    /// assert_eq!(&w.get_ref()[..], b"EHLO example.com\r\n");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn crlf(mut self) -> Self {
        self.crlf = true;
        self
    }

    /// What the framed writers put after each line: `\n`, or `\r\n` after
    /// [`crlf`](Lines::crlf).
    ///
    /// ```
    /// use ringmem::io::Lines;
    /// assert_eq!((Lines::new().line_end(), Lines::new().crlf().line_end()), (&b"\n"[..], &b"\r\n"[..]));
    /// ```
    pub fn line_end(&self) -> &'static [u8] {
        if self.crlf {
            b"\r\n"
        } else {
            b"\n"
        }
    }

    /// The longest line accepted.
    ///
    /// ```
    /// assert_eq!(ringmem::io::Lines::with_max_length(9).max_len(), 9);
    /// ```
    pub fn max_len(&self) -> usize {
        self.max
    }

    fn line(&self, end: usize, buf: &[u8]) -> io::Result<usize> {
        let end = if end > 0 && buf[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        if end > self.max {
            return Err(FrameError::TooLong {
                len: end as u64,
                max: self.max,
            }
            .into());
        }
        Ok(end)
    }
}

impl Decoder for Lines {
    fn decode(&mut self, buf: &[u8]) -> io::Result<Decode> {
        let from = self.searched.min(buf.len());
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.searched = 0;
                let nl = from + i;
                let end = self.line(nl, buf)?;
                Ok(Decode::Frame(Frame {
                    start: 0,
                    end,
                    consumed: nl + 1,
                }))
            }
            None => {
                self.searched = buf.len();
                // A `\r` at the end may still be the start of a `\r\n`.
                let line = buf.len() - usize::from(buf.last() == Some(&b'\r'));
                if line > self.max {
                    self.searched = 0;
                    return Err(FrameError::TooLong {
                        len: buf.len() as u64,
                        max: self.max,
                    }
                    .into());
                }
                Ok(Decode::Need(buf.len() + 1))
            }
        }
    }

    /// Skips the rejected line (over the maximum, or larger than the reader's ring), up
    /// to and with its newline.
    fn resync(&mut self, buf: &[u8]) -> Resync {
        self.searched = 0;
        match buf.iter().position(|&b| b == b'\n') {
            Some(nl) => Resync::Skip(nl + 1),
            None => Resync::More,
        }
    }

    fn decode_eof(&mut self, buf: &[u8]) -> io::Result<Frame> {
        self.searched = 0;
        let end = self.line(buf.len(), buf)?;
        Ok(Frame {
            start: 0,
            end,
            consumed: buf.len(),
        })
    }
}
