//! `FramedReader`: frames from a `std::io::Read`, in ring memory.

use core::fmt;
use std::io::{self, Read};
use std::net::TcpStream;

use super::core::{Core, Step};
use super::decoder::{Decoder, FrameError, LengthDelimited};
use super::encoder::Encoder;
use super::pool::{Memory, ReadPool};
use super::writer::FramedWriter;
use crate::{FixedBuf, Ring};

/// Bytes of a region by default.
pub(crate) const DEFAULT_READ: usize = 64 << 10;

/// Reads a byte stream straight into regions of a [`ReadPool`] shared with other
/// readers (the process's, [`new`](Self::new), or another, [`with_pool`](Self::with_pool))
/// or of a [`Ring`] of its own ([`with_ring`](Self::with_ring)), and yields each
/// complete frame as a [`FixedBuf`]: a slice of the region it arrived in, with no copy
/// and no heap allocation per frame while the consumer drops each frame before it takes
/// the next.
///
/// - **Kept frames.** Once it finds frames of a region still held after it is done
///   with it, the reader copies the short frames of the next regions (under a quarter
///   of their region) into regions of their own, so a kept frame holds its own bytes,
///   never the frames read with it; probes (a region of 4 KiB, or the one a longer
///   frame ends in) tell it when frames are dropped in place again.
/// - **Cost.** A frame cut by the end of a read is copied once, into the next region;
///   a line whose end the decoder cannot know is carried into regions of twice its
///   size, so its copies add up to a small multiple of its length.
/// - **When full.** When the frames held fill the memory, the reader waits
///   ([`Ring::fixed_wait`]) for a release on any thread; it first moves its partial
///   frame to the heap, so it never waits for itself.
/// - **Errors.** A frame no region could hold is [`FrameError::LargerThanRing`]
///   (`InvalidData`). After the decoder rejects a frame, the reader yields the error
///   and goes on where [`Decoder::resync`] finds the next frame; otherwise (a length
///   field that overflows, a stream that ends mid-frame) it yields no more. An error
///   from the underlying reader leaves it as it was: [`next_frame`](Self::next_frame)
///   may be called again, but the [`Iterator`] ends after yielding it.
///
/// ```
/// use ringmem::io::{FramedReader, LengthDelimited};
/// let stream: &[u8] = b"\0\0\0\x05hello\0\0\0\x03abc";
/// let mut frames = FramedReader::new(stream, LengthDelimited::new());
/// let hello = frames.next_frame()?.unwrap();
/// let abc = frames.next_frame()?.unwrap();
/// assert_eq!((&hello[..], &abc[..]), (&b"hello"[..], &b"abc"[..]));
/// assert!(frames.next_frame()?.is_none()); // a clean end
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct FramedReader<R, D = LengthDelimited> {
    reader: R,
    mem: Memory,
    core: Core<D>,
    /// The last call's error came from `reader`: the iterator yields no more.
    reader_failed: bool,
}

/// A region's bytes at most: `read_size` clamped so that four regions fit a block.
pub(crate) fn clamp_read_size(mem: &Memory, read_size: usize) -> usize {
    read_size.min(mem.block_len() / 4).max(64)
}

impl<R: Read, D: Decoder> FramedReader<R, D> {
    /// A reader on the process's [`ReadPool`] ([`ReadPool::global`]: 64 MiB for all
    /// the readers made so, unless set), reading up to 64 KiB at a time: what a server
    /// with many connections wants. For a reader on a ring of its own, see
    /// [`with_ring`](Self::with_ring).
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines, ReadPool};
    /// let mut r = FramedReader::new(&b"hi\n"[..], Lines::new());
    /// assert_eq!(r.pool().unwrap().budget(), ReadPool::global().budget());
    /// assert_eq!(&r.next_frame()?.unwrap()[..], b"hi");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(reader: R, decoder: D) -> Self {
        Self::with_pool(reader, decoder, ReadPool::global())
    }

    /// A reader on `ring`, reading up to 64 KiB at a time (or a quarter of the ring, if
    /// smaller).
    ///
    /// ```
    /// use ringmem::{io::{FramedReader, Lines}, Ring};
    /// let r = FramedReader::with_ring(&b""[..], Lines::new(), Ring::new(1 << 16));
    /// assert_eq!(r.read_size(), 1 << 14);
    /// ```
    pub fn with_ring(reader: R, decoder: D, ring: Ring) -> Self {
        Self::with_memory(reader, decoder, Memory::Own(Box::new(ring)))
    }

    /// A reader that claims its regions from `pool`, shared with other readers under
    /// one budget, reading up to 64 KiB at a time (or a quarter of the budget). When
    /// the pool is full it waits (blocking the thread) for a release on any thread, as
    /// a reader on its own ring does. The thread blocks inside `read` and cannot tell an
    /// idle socket from a slow one: the reader keeps the region it reads into while it
    /// reads (`AsyncFramedReader` gives it back while its socket has nothing to read);
    /// between calls it holds what a reader on its own ring holds, the bytes read and
    /// not yet yielded.
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines, ReadPool};
    /// let pool = ReadPool::new(1 << 20);
    /// let mut a = FramedReader::with_pool(&b"one\n"[..], Lines::new(), &pool);
    /// let mut b = FramedReader::with_pool(&b"two\n"[..], Lines::new(), &pool);
    /// let (one, two) = (a.next_frame()?.unwrap(), b.next_frame()?.unwrap());
    /// assert_eq!((&one[..], &two[..]), (&b"one"[..], &b"two"[..]));
    /// assert_eq!(pool.stats().live_buffers, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_pool(reader: R, decoder: D, pool: &ReadPool) -> Self {
        Self::with_memory(reader, decoder, Memory::Pool(pool.clone()))
    }

    fn with_memory(reader: R, decoder: D, mem: Memory) -> Self {
        let read_size = clamp_read_size(&mem, DEFAULT_READ);
        FramedReader {
            reader,
            core: Core::new(decoder, &mem, read_size, false),
            mem,
            reader_failed: false,
        }
    }

    /// Sets the bytes of a region (and so of a read) when no frame asks for more, at
    /// most a quarter of the ring (or of the pool's budget).
    ///
    /// ```
    /// let r = ringmem::io::FramedReader::new(&b""[..], ringmem::io::Lines::new())
    ///     .with_read_size(4096);
    /// assert_eq!(r.read_size(), 4096);
    /// ```
    pub fn with_read_size(mut self, bytes: usize) -> Self {
        self.core.read_size = clamp_read_size(&self.mem, bytes);
        self
    }

    /// The bytes of a region when no frame asks for more.
    ///
    /// ```
    /// let r = ringmem::io::FramedReader::new(&b""[..], ringmem::io::Lines::new());
    /// assert_eq!(r.read_size(), 64 << 10);
    /// ```
    pub fn read_size(&self) -> usize {
        self.core.read_size
    }

    /// Bytes read from the reader and not yet taken as frames: `0` when the next frame
    /// needs a read (`AsyncFramedReader::buffered`, feature `tokio`, says what a
    /// server does with it).
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines};
    /// let mut lines = FramedReader::new(&b"one\ntwo\n"[..], Lines::new());
    /// assert_eq!(lines.buffered(), 0); // nothing read yet
    /// lines.next_frame()?;
    /// assert_eq!(lines.buffered(), 4); // "two\n"
    /// lines.next_frame()?;
    /// assert_eq!(lines.buffered(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn buffered(&self) -> usize {
        self.core.buffered()
    }

    /// The next frame; `Ok(None)` when the stream ends at a frame boundary.
    ///
    /// # Errors
    /// The decoder's (`InvalidData` for a frame over the maximum or a length field
    /// that overflows), `UnexpectedEof` when the stream ends inside a frame,
    /// `InvalidData` with [`FrameError::LargerThanRing`] for a frame that no region of
    /// the ring can hold, the underlying reader's errors (but `Interrupted`, which
    /// is retried), and `Other` with [`FrameError::ReadOverrun`] for a reader that
    /// returns more bytes than the buffer it was handed holds (a bug in it; the stream
    /// ends).
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines};
    /// let mut lines = FramedReader::new(&b"one\r\ntwo"[..], Lines::new());
    /// assert_eq!(&lines.next_frame()?.unwrap()[..], b"one");
    /// assert_eq!(&lines.next_frame()?.unwrap()[..], b"two");
    /// assert!(lines.next_frame()?.is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn next_frame(&mut self) -> io::Result<Option<FixedBuf>> {
        self.reader_failed = false;
        loop {
            match self.core.step(&self.mem)? {
                Step::Frame(f) => return Ok(Some(f)),
                Step::End => return Ok(None),
                // A blocking read cannot tell whether the bytes are there: no top-up.
                Step::TopUp => self.core.settle(&self.mem),
                Step::ReaderError(e) => {
                    self.reader_failed = true;
                    return Err(e);
                }
                Step::Alloc {
                    need: n,
                    like,
                    least,
                    alone,
                } => {
                    let region = match self.mem.first_try_like(n, like, least, alone) {
                        Some(region) => region,
                        None => {
                            // Before the partial frame is spilled: a frame that can
                            // never fit is skipped from it.
                            if let Some(e) = self.mem.hopeless(least) {
                                return Err(self.core.fail_alloc(e, n));
                            }
                            self.core.before_wait();
                            match self.mem.fixed_wait(n, least) {
                                Ok(region) => region,
                                Err(e) => return Err(self.core.fail_alloc(e, n)),
                            }
                        }
                    };
                    self.core.install(region);
                }
                Step::Read => {
                    let spare = self.core.spare_init();
                    let room = spare.len();
                    let n = match self.reader.read(spare) {
                        // A count past the buffer is a bug of the reader's, not bytes:
                        // clamped, it would make frames of bytes it did not write.
                        Ok(n) if n > room => {
                            self.reader_failed = true;
                            let e = FrameError::ReadOverrun { read: n, room };
                            return Err(self.core.fail(e.into()));
                        }
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            self.reader_failed = true;
                            return Err(e);
                        }
                    };
                    if n == 0 {
                        return self.core.eof(&self.mem);
                    }
                    // SAFETY: `n <= room`, and the spare was initialised before `read`
                    // (which may have written it, but only with bytes).
                    unsafe { self.core.filled(n, &self.mem)? };
                }
            }
        }
    }

    /// The ring the frames live in, for a reader made by [`with_ring`](Self::with_ring);
    /// `None` for a reader of a [`ReadPool`] ([`new`](Self::new),
    /// [`with_pool`](Self::with_pool)), whose frames live in the pool's rings, behind
    /// their locks: see [`pool`](Self::pool).
    ///
    /// ```
    /// use ringmem::{io::{FramedReader, Lines}, Ring};
    /// let r = FramedReader::with_ring(&b""[..], Lines::new(), Ring::new(1 << 16));
    /// assert_eq!(r.ring().unwrap().stats().live_buffers, 0);
    /// assert!(FramedReader::new(&b""[..], Lines::new()).ring().is_none());
    /// ```
    pub fn ring(&self) -> Option<&Ring> {
        self.mem.own()
    }

    /// The pool the frames live in, for a reader made by [`with_pool`](Self::with_pool)
    /// (or [`new`](Self::new): the process's pool); `None` for a reader on a ring of
    /// its own ([`ring`](Self::ring)).
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines, ReadPool};
    /// let pool = ReadPool::new(1 << 16);
    /// let r = FramedReader::with_pool(&b""[..], Lines::new(), &pool);
    /// assert_eq!(r.pool().unwrap().budget(), 1 << 16);
    /// let own = FramedReader::with_ring(&b""[..], Lines::new(), ringmem::Ring::new(1 << 16));
    /// assert!(own.pool().is_none());
    /// ```
    pub fn pool(&self) -> Option<&ReadPool> {
        self.mem.pool()
    }

    /// The underlying reader.
    ///
    /// ```
    /// let r = ringmem::io::FramedReader::new(&b"xy"[..], ringmem::io::Lines::new());
    /// assert_eq!(r.get_ref().len(), 2);
    /// ```
    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// The underlying reader, mutably (reading from it directly loses the framing).
    ///
    /// ```
    /// let mut r = ringmem::io::FramedReader::new(&b"xy"[..], ringmem::io::Lines::new());
    /// *r.get_mut() = &b"z\n"[..];
    /// assert_eq!(&r.next_frame().unwrap().unwrap()[..], b"z");
    /// ```
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }

    /// The decoder.
    ///
    /// ```
    /// let r = ringmem::io::FramedReader::new(&b""[..], ringmem::io::Lines::with_max_length(9));
    /// assert_eq!(r.decoder().max_len(), 9);
    /// ```
    pub fn decoder(&self) -> &D {
        &self.core.decoder
    }

    /// The underlying reader, and the bytes already read from it that no frame has
    /// taken: the stream goes on with those bytes, then the reader's. For a protocol
    /// that stops framing this way mid-stream (after `STARTTLS`, an HTTP upgrade, a
    /// PROXY header). The bytes start where the next frame would have (while a rejected
    /// frame is being skipped, they are the part of it read so far); an error of the
    /// reader that was not returned yet is dropped.
    ///
    /// ```
    /// use ringmem::io::{FramedReader, Lines};
    /// let mut r = FramedReader::new(&b"STARTTLS\n\x16\x03\x01 binary from here"[..], Lines::new());
    /// assert_eq!(&r.next_frame()?.unwrap()[..], b"STARTTLS");
    /// let (rest, buffered) = r.into_parts();
    /// assert_eq!([&buffered[..], rest].concat(), b"\x16\x03\x01 binary from here");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_parts(self) -> (R, Vec<u8>) {
        (self.reader, self.core.into_buffered())
    }
}

impl<D: Decoder> FramedReader<TcpStream, D> {
    /// Frames both ways over one socket: the reader goes on as it was, and a
    /// [`FramedWriter`] framing with `encoder` writes to a clone of its socket
    /// ([`TcpStream::try_clone`], a second descriptor of the same connection). The two
    /// may go to different threads; the connection closes when both are dropped.
    ///
    /// # Errors
    /// `try_clone`'s (the process out of file descriptors, say); the reader is dropped
    /// with its socket then.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::net::{Shutdown, TcpListener, TcpStream};
    /// use ringmem::io::{FramedReader, Lines};
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let mut client = TcpStream::connect(listener.local_addr()?)?;
    /// let (r, mut w) = FramedReader::new(listener.accept()?.0, Lines::new()).into_split(Lines::new())?;
    /// let echo = std::thread::spawn(move || {
    ///     for line in r {
    ///         w.write_frame(&line?)?; // the frame read goes back out, uncopied
    ///     }
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// client.write_all(b"ping\npong\n")?;
    /// client.shutdown(Shutdown::Write)?;
    /// let mut back = Vec::new();
    /// client.read_to_end(&mut back)?; // until the echo thread drops both halves
    /// echo.join().unwrap()?;
    /// assert_eq!(back, b"ping\npong\n");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_split<E: Encoder>(
        self,
        encoder: E,
    ) -> io::Result<(Self, FramedWriter<TcpStream, E>)> {
        let socket = self.reader.try_clone()?;
        Ok((self, FramedWriter::new(socket, encoder)))
    }
}

/// The frames, then the end: after an error of the underlying reader the iterator
/// yields `None` (until [`FramedReader::next_frame`] is called again), so that a reader
/// that keeps failing does not make a `for` loop spin; after a rejected frame it goes on
/// where the decoder resynchronises.
impl<R: Read, D: Decoder> Iterator for FramedReader<R, D> {
    type Item = io::Result<FixedBuf>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.reader_failed {
            return None;
        }
        self.next_frame().transpose()
    }
}

impl<R, D> fmt::Debug for FramedReader<R, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("FramedReader");
        match &self.mem {
            Memory::Own(ring) => d.field("ring", ring),
            Memory::Pool(pool) => d.field("pool", pool),
        };
        d.finish_non_exhaustive()
    }
}
