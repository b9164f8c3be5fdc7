//! `Resp`: the Redis protocol's frames (RESP2), requests and replies.

use core::ops::Range;
use std::io;

use super::decoder::{Decode, Decoder, Frame, FrameError};

/// Arrays nested at most this deep, whatever [`Resp::max_depth`] asks for: the parse
/// state keeps a count per open array inline.
const DEPTH_CAP: usize = 64;

/// Bytes of the longest integer `string2ll` reads (`-9223372036854775808`).
const INT_DIGITS: usize = 20;

/// A frame this long or shorter is sized exactly by a bulk string's [`Decode::Need`]
/// even when elements follow it: a reader's bulk read is as long anyway.
const EXACT_NEED: usize = 64 << 10;

/// Frames of the Redis protocol, RESP2: one frame per top-level value, as
/// `redis-server` reads requests and clients read replies. A simple string (`+OK`),
/// an error (`-ERR x`), an integer (`:1`), a bulk string (`$3\r\nfoo\r\n`, `$-1` for
/// null) or an array of any of them (`*2\r\n...`, `*-1`), nested up to a depth; and
/// inline commands, a line of words such as `PING\r\n` (on by default,
/// [`inline`](Self::inline)). The frame is the whole value, type byte and final
/// `\r\n` included; an inline command's is its line without the line end.
/// [`Resp::args`] gives the ranges of a request's arguments in it.
///
/// Limits are Redis's ([`max_bulk_len`](Self::max_bulk_len) and the others). Bad
/// input is `InvalidData` carrying a [`FrameError`] that reads as Redis's protocol
/// errors (`invalid bulk length`); the reader then stops ([`Decoder::resync`]'s
/// default). [`Decode::Need`] is exact once a bulk string's header is read, unless
/// elements follow it in a long frame (then one more byte: readers double their
/// region for it). A reader sizes its region by it, and a length no region of its
/// ring holds is `FrameError::LargerThanRing`, never an allocation of that size.
/// Decoding resumes where the last call stopped: a long array arriving in pieces is
/// read once, not from its start at each read.
///
/// ```
/// use ringmem::io::{FramedReader, Resp};
/// let wire = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
/// let mut r = FramedReader::new(&wire[..], Resp::requests());
/// let get = r.next_frame()?.unwrap();
/// let args: Vec<&[u8]> = Resp::args(&get).map(|a| &get[a]).collect();
/// assert_eq!(args, [&b"GET"[..], b"k"]);
/// let ping = r.next_frame()?.unwrap();
/// assert_eq!(&ping[..], b"PING");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Resp {
    max_bulk: usize,
    max_array: usize,
    max_inline: usize,
    max_depth: usize,
    inline: bool,
    requests: bool,
    /// Bytes of the current frame parsed: an element boundary.
    pos: usize,
    /// Arrays open at `pos`.
    depth: usize,
    /// Elements still to read of each open array, outermost first (`left[..depth]`).
    left: [u32; DEPTH_CAP],
    /// Where the search for the end of the line at `pos` goes on (0: from its start).
    scan: usize,
}

impl Default for Resp {
    fn default() -> Self {
        Resp::new()
    }
}

/// The bytes Redis's inline parser splits words at.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c')
}

/// A decimal integer as Redis's `string2ll` reads it: an optional `-`, no leading
/// zeros, no `+`, at most 20 bytes.
fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] if s.len() <= INT_DIGITS => {}
        _ => return None,
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

/// A header line at `at` (type byte, integer, `\r\n`): the integer and the offset
/// after the line, `Ok(None)` while it is incomplete, `Err(())` when malformed.
fn header(buf: &[u8], at: usize) -> Result<Option<(i64, usize)>, ()> {
    let from = at + 1;
    let window = &buf[from.min(buf.len())..buf.len().min(from + INT_DIGITS + 1)];
    match window.iter().position(|&b| b == b'\r') {
        Some(i) => match buf.get(from + i + 1) {
            None => Ok(None),
            Some(b'\n') => parse_int(&window[..i])
                .map(|v| Some((v, from + i + 2)))
                .ok_or(()),
            Some(_) => Err(()),
        },
        None if window.len() > INT_DIGITS => Err(()),
        None => Ok(None),
    }
}

/// The words of an inline command's line: ranges of `line`, or `Err(at)` for quotes
/// left open (or a closing quote with no space after it) at offset `at`.
fn next_word(line: &[u8], pos: &mut usize) -> Option<Result<Range<usize>, usize>> {
    let mut i = *pos;
    while i < line.len() && is_space(line[i]) {
        i += 1;
    }
    if i == line.len() {
        *pos = i;
        return None;
    }
    let q = line[i];
    if q == b'"' || q == b'\'' {
        let start = i + 1;
        let mut j = start;
        while j < line.len() {
            match line[j] {
                b'\\' if j + 1 < line.len() => j += 2,
                b if b == q => {
                    if line.get(j + 1).is_some_and(|&b| !is_space(b)) {
                        *pos = line.len();
                        return Some(Err(j));
                    }
                    *pos = j + 1;
                    return Some(Ok(start..j));
                }
                _ => j += 1,
            }
        }
        *pos = line.len();
        return Some(Err(i));
    }
    let start = i;
    while i < line.len() && !is_space(line[i]) {
        i += 1;
    }
    *pos = i;
    Some(Ok(start..i))
}

fn malformed(reason: &'static str, at: usize) -> io::Error {
    FrameError::Malformed { reason, at }.into()
}

impl Resp {
    /// Any RESP2 value (requests and replies), inline commands too, with Redis's
    /// limits: what a client reads replies with.
    ///
    /// ```
    /// use ringmem::io::{Decode, Decoder, Frame, Resp};
    /// let mut d = Resp::new();
    /// let got = d.decode(b"*2\r\n:1\r\n$-1\r\n").unwrap();
    /// assert_eq!(got, Decode::Frame(Frame { start: 0, end: 13, consumed: 13 }));
    /// ```
    pub fn new() -> Self {
        Resp {
            max_bulk: 512 << 20,
            max_array: 1 << 20,
            max_inline: 64 << 10,
            max_depth: 32,
            inline: true,
            requests: false,
            pos: 0,
            depth: 0,
            left: [0; DEPTH_CAP],
            scan: 0,
        }
    }

    /// What a Redis server accepts: an array of bulk strings, or an inline command
    /// (a line that does not start with `*`). Anything else inside an array is
    /// ``expected '$', got 'x'``; a null or negative array is an empty request, and a
    /// null bulk string is `invalid bulk length`, as `redis-server` says.
    ///
    /// ```
    /// use ringmem::io::{Decode, Decoder, Resp};
    /// let err = Resp::requests().decode(b"*1\r\n:1\r\n").unwrap_err();
    /// assert_eq!(err.to_string(), "expected '$', got ':'");
    /// // `+PING` is not a simple string here: an inline command.
    /// assert!(matches!(Resp::requests().decode(b"+PING\r\n"), Ok(Decode::Frame(_))));
    /// ```
    pub fn requests() -> Self {
        Resp {
            requests: true,
            ..Resp::new()
        }
    }

    /// Whether a line that does not start with a type byte is read as an inline
    /// command (the default) or rejected (`unknown type byte`).
    ///
    /// ```
    /// use ringmem::io::{Decoder, Resp};
    /// assert!(Resp::new().inline(false).decode(b"PING\r\n").is_err());
    /// assert!(Resp::new().decode(b"PING\r\n").is_ok());
    /// ```
    pub fn inline(mut self, on: bool) -> Self {
        self.inline = on;
        self
    }

    /// The longest bulk string accepted (512 MiB by default, Redis's
    /// `proto-max-bulk-len`); a longer one is `invalid bulk length`.
    ///
    /// ```
    /// use ringmem::io::{Decoder, Resp};
    /// let mut d = Resp::new().max_bulk_len(3);
    /// assert!(d.decode(b"$3\r\nabc\r\n").is_ok());
    /// assert_eq!(d.decode(b"$4\r\n").unwrap_err().to_string(), "invalid bulk length");
    /// ```
    pub fn max_bulk_len(mut self, bytes: usize) -> Self {
        self.max_bulk = bytes;
        self
    }

    /// The most elements of one array (1,048,576 by default); more is `invalid
    /// multibulk length`.
    ///
    /// ```
    /// use ringmem::io::{Decoder, Resp};
    /// let err = Resp::new().max_array_len(1).decode(b"*2\r\n").unwrap_err();
    /// assert_eq!(err.to_string(), "invalid multibulk length");
    /// ```
    pub fn max_array_len(mut self, elements: usize) -> Self {
        self.max_array = elements.min(u32::MAX as usize);
        self
    }

    /// The longest inline command, and simple string or error line (64 KiB by
    /// default); longer is `too big inline request`.
    ///
    /// ```
    /// use ringmem::io::{Decoder, Resp};
    /// let err = Resp::new().max_inline_len(4).decode(b"PING PONG").unwrap_err();
    /// assert_eq!(err.to_string(), "too big inline request");
    /// ```
    pub fn max_inline_len(mut self, bytes: usize) -> Self {
        self.max_inline = bytes;
        self
    }

    /// Arrays nested at most this deep (32 by default; 1 allows no array inside an
    /// array); deeper is `nested too deep`.
    ///
    /// # Panics
    /// Above 64.
    ///
    /// ```
    /// use ringmem::io::{Decoder, Resp};
    /// assert!(Resp::new().max_depth(2).decode(b"*1\r\n*1\r\n:1\r\n").is_ok());
    /// assert!(Resp::new().max_depth(1).decode(b"*1\r\n*1\r\n:1\r\n").is_err());
    /// ```
    pub fn max_depth(mut self, depth: usize) -> Self {
        assert!(
            depth <= DEPTH_CAP,
            "Resp nests arrays {DEPTH_CAP} deep at most, not {depth}"
        );
        self.max_depth = depth;
        self
    }

    /// The ranges of a request's arguments in `frame` (as [`Resp::requests`] yields
    /// it): the bulk strings of an array, or the words of an inline command (split at
    /// spaces; a word in quotes is the bytes between them, escapes left as they are).
    /// Slice the frame with them: no copy. The iterator stops at anything else.
    ///
    /// ```
    /// use ringmem::io::Resp;
    /// let frame = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv\n\r\n";
    /// let args: Vec<_> = Resp::args(frame).collect();
    /// assert_eq!(args, [8..11, 17..18, 24..26]);
    /// let inline = br#"SET k "a b""#;
    /// let words: Vec<&[u8]> = Resp::args(inline).map(|r| &inline[r]).collect();
    /// assert_eq!(words, [&b"SET"[..], b"k", b"a b"]);
    /// ```
    pub fn args(frame: &[u8]) -> RespArgs<'_> {
        let mut args = RespArgs {
            frame,
            pos: 0,
            left: 0,
            inline: true,
        };
        if frame.first() == Some(&b'*') {
            args.inline = false;
            if let Ok(Some((n, next))) = header(frame, 0) {
                args.left = usize::try_from(n).unwrap_or(0);
                args.pos = next;
            }
        }
        args
    }

    fn reset(&mut self) {
        self.pos = 0;
        self.depth = 0;
        self.scan = 0;
    }

    /// Whether the element at `pos` ends the frame: every open array has no other.
    fn last_element(&self) -> bool {
        match self.left[..self.depth].split_last() {
            None => true,
            Some((top, outer)) => *top == 1 && outer.iter().all(|&n| n == 0),
        }
    }

    /// An element ends at `end`: counted in its array, and arrays it completes closed.
    /// The frame's end when no array is left open.
    fn done(&mut self, end: usize) -> Option<Frame> {
        self.pos = end;
        self.scan = 0;
        if self.depth > 0 {
            self.left[self.depth - 1] -= 1;
        }
        while self.depth > 0 && self.left[self.depth - 1] == 0 {
            self.depth -= 1;
        }
        (self.depth == 0).then_some(Frame {
            start: 0,
            end,
            consumed: end,
        })
    }

    /// The line starting at `from` (searched from `scan` on): the offset of its `\n`.
    fn line_end(&mut self, buf: &[u8], from: usize) -> Option<usize> {
        let at = self.scan.max(from);
        match buf[at..].iter().position(|&b| b == b'\n') {
            Some(i) => Some(at + i),
            None => {
                self.scan = buf.len();
                None
            }
        }
    }

    fn inline_command(&mut self, buf: &[u8]) -> io::Result<Decode> {
        let too_big = || malformed("too big inline request", 0);
        let Some(nl) = self.line_end(buf, 0) else {
            let line = buf.len() - usize::from(buf.last() == Some(&b'\r'));
            return if line > self.max_inline {
                Err(too_big())
            } else {
                Ok(Decode::Need(buf.len() + 1))
            };
        };
        let end = nl - usize::from(nl > 0 && buf[nl - 1] == b'\r');
        if end > self.max_inline {
            return Err(too_big());
        }
        let line = &buf[..end];
        let mut pos = 0;
        while let Some(word) = next_word(line, &mut pos) {
            if let Err(at) = word {
                return Err(malformed("unbalanced quotes in request", at));
            }
        }
        Ok(Decode::Frame(Frame {
            start: 0,
            end,
            consumed: nl + 1,
        }))
    }

    fn parse(&mut self, buf: &[u8]) -> io::Result<Decode> {
        if buf.len() < self.pos {
            // Not the bytes shown before: start again.
            self.reset();
        }
        if self.pos == 0 {
            let Some(&t) = buf.first() else {
                return Ok(Decode::Need(1));
            };
            let typed = if self.requests {
                t == b'*'
            } else {
                matches!(t, b'*' | b'$' | b'+' | b'-' | b':')
            };
            if !typed {
                return if self.inline {
                    self.inline_command(buf)
                } else if self.requests {
                    Err(FrameError::Unexpected {
                        expected: b'*',
                        found: t,
                        at: 0,
                    }
                    .into())
                } else {
                    Err(malformed("unknown type byte", 0))
                };
            }
        }
        loop {
            let at = self.pos;
            let Some(&t) = buf.get(at) else {
                return Ok(Decode::Need(at + 1));
            };
            if self.requests && self.depth > 0 && t != b'$' {
                return Err(FrameError::Unexpected {
                    expected: b'$',
                    found: t,
                    at,
                }
                .into());
            }
            let more = Decode::Need(buf.len() + 1);
            let frame = match t {
                b'*' => {
                    let (n, next) = match header(buf, at) {
                        Ok(Some(h)) => h,
                        Ok(None) => return Ok(more),
                        Err(()) => return Err(malformed("invalid multibulk length", at)),
                    };
                    if n > self.max_array as i64 || (n < -1 && !self.requests) {
                        return Err(malformed("invalid multibulk length", at));
                    }
                    if n <= 0 {
                        self.done(next)
                    } else {
                        if self.depth == self.max_depth {
                            return Err(malformed("nested too deep", at));
                        }
                        // Counted in its own array now (which stays open at least
                        // until this one closes), its elements in the new one.
                        self.pos = next;
                        self.scan = 0;
                        if self.depth > 0 {
                            self.left[self.depth - 1] -= 1;
                        }
                        self.left[self.depth] = n as u32;
                        self.depth += 1;
                        None
                    }
                }
                b'$' => {
                    let (n, next) = match header(buf, at) {
                        Ok(Some(h)) => h,
                        Ok(None) => return Ok(more),
                        Err(()) => return Err(malformed("invalid bulk length", at)),
                    };
                    if n == -1 && !self.requests {
                        self.done(next)
                    } else {
                        let len = usize::try_from(n)
                            .ok()
                            .filter(|&n| n <= self.max_bulk)
                            .ok_or_else(|| malformed("invalid bulk length", at))?;
                        let end = next + len + 2;
                        if buf.len() < end {
                            let exact = self.last_element() || end <= EXACT_NEED || end >= 2 * at;
                            return Ok(if exact { Decode::Need(end) } else { more });
                        }
                        if &buf[end - 2..end] != b"\r\n" {
                            let bad = end - 2 + usize::from(buf[end - 2] == b'\r');
                            return Err(FrameError::Unexpected {
                                expected: if bad == end - 2 { b'\r' } else { b'\n' },
                                found: buf[bad],
                                at: bad,
                            }
                            .into());
                        }
                        self.done(end)
                    }
                }
                b':' => match header(buf, at) {
                    Ok(Some((_, next))) => self.done(next),
                    Ok(None) => return Ok(more),
                    Err(()) => return Err(malformed("invalid integer", at)),
                },
                b'+' | b'-' => {
                    let Some(nl) = self.line_end(buf, at + 1) else {
                        return if buf.len() - at > self.max_inline + 2 {
                            Err(malformed("too big inline request", at))
                        } else {
                            Ok(more)
                        };
                    };
                    if buf[nl - 1] != b'\r' || nl - 1 == at {
                        return Err(FrameError::Unexpected {
                            expected: b'\r',
                            found: b'\n',
                            at: nl,
                        }
                        .into());
                    }
                    if nl - at - 2 > self.max_inline {
                        return Err(malformed("too big inline request", at));
                    }
                    self.done(nl + 1)
                }
                _ => return Err(malformed("unknown type byte", at)),
            };
            if let Some(f) = frame {
                return Ok(Decode::Frame(f));
            }
        }
    }
}

impl Decoder for Resp {
    fn decode(&mut self, buf: &[u8]) -> io::Result<Decode> {
        let got = self.parse(buf);
        if !matches!(got, Ok(Decode::Need(_))) {
            self.reset();
        }
        got
    }

    fn decode_eof(&mut self, buf: &[u8]) -> io::Result<Frame> {
        self.reset();
        Err(FrameError::Truncated {
            buffered: buf.len(),
        }
        .into())
    }
}

/// The ranges of a request's arguments in its frame: [`Resp::args`].
///
/// ```
/// let frame = b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
/// let mut args = ringmem::io::Resp::args(frame);
/// assert_eq!(args.len(), 2);
/// assert_eq!(&frame[args.nth(1).unwrap()], b"hi");
/// ```
#[derive(Clone, Debug)]
pub struct RespArgs<'a> {
    frame: &'a [u8],
    pos: usize,
    /// An array's elements still to read.
    left: usize,
    inline: bool,
}

impl RespArgs<'_> {
    /// The arguments left: an array's count (as its header says), or an inline
    /// command's words (counted by splitting the rest of its line).
    ///
    /// ```
    /// assert_eq!(ringmem::io::Resp::args(b"SET k v").len(), 3);
    /// ```
    // Not `ExactSizeIterator`: an inline line's words are counted by walking them.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        if self.inline {
            self.clone().count()
        } else {
            self.left
        }
    }
}

impl Iterator for RespArgs<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.inline {
            return next_word(self.frame, &mut self.pos)?.ok();
        }
        if self.left == 0 {
            return None;
        }
        let bulk = (self.frame.get(self.pos) == Some(&b'$'))
            .then(|| header(self.frame, self.pos))
            .and_then(|h| h.ok().flatten())
            .and_then(|(n, next)| Some(next..next + usize::try_from(n).ok()?))
            .filter(|r| r.end + 2 <= self.frame.len());
        match bulk {
            Some(r) => {
                self.left -= 1;
                self.pos = r.end + 2;
                Some(r)
            }
            None => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.inline {
            (0, Some(self.frame.len() - self.pos))
        } else {
            (0, Some(self.left))
        }
    }
}
