//! `WaitWriter`: `std::io::Write` into a growable buffer that waits for room.

use core::fmt;
use std::io;
use std::time::{Duration, Instant};

use super::{ExtBuf, WaitError};

/// `std::io::Write` into an [`ExtBuf`] that waits for room when the ring is full, where
/// the buffer's own `io::Write` fails with `ErrorKind::StorageFull`: for `write!`,
/// `write_all` and `io::copy`, whose sizes are not known before they write. Made by
/// [`ExtBuf::writer_wait`] and [`ExtBuf::writer_wait_timeout`].
///
/// Each `write` is all or nothing: it appends the whole slice, waiting as
/// [`ExtBuf::reserve_wait`] does until the buffer can grow for it, or appends nothing
/// and fails. So a `write_all` that fails part-way leaves what earlier writes appended,
/// never a piece of a slice, and a retried write never appends a piece twice.
///
/// Errors: `ErrorKind::TimedOut` when the time given runs out; `ErrorKind::InvalidInput`
/// (carrying the [`WaitError::NeverFits`]) when no release could make the buffer that
/// long; `ErrorKind::OutOfMemory` when a `Heap` or `Grow` ring's global allocator
/// refuses. The waiting is [`ExtBuf::reserve_wait`]'s: the room comes from releases of
/// other buffers, on any thread.
///
/// ```
/// use std::io::Write;
/// let ring = ringmem::Ring::new(4096);
/// let mut msg = ring.extendable(0).unwrap();
/// let held: Vec<_> = std::iter::from_fn(|| ring.fixed(64)).collect(); // the rest
/// std::thread::scope(|s| {
///     s.spawn(move || drop(held)); // a consumer releases on another thread
///     let mut w = msg.writer_wait();
///     write!(w, "{}", "x".repeat(1000)).unwrap(); // waits for room, then writes
/// });
/// assert_eq!(msg.len(), 1000);
/// ```
pub struct WaitWriter<'a, 'r> {
    ext: &'a mut ExtBuf<'r>,
    /// When the writer gives up; `None`: never.
    deadline: Option<Instant>,
}

impl<'r> ExtBuf<'r> {
    /// A writer into this buffer that waits for room when the ring is full (see
    /// [`WaitWriter`]).
    ///
    /// ```
    /// use std::io::Write;
    /// let ring = ringmem::Ring::new(4096);
    /// let mut msg = ring.extendable(0).unwrap();
    /// writeln!(msg.writer_wait(), "id={} len={}", 7, 42).unwrap();
    /// assert_eq!(&msg[..], b"id=7 len=42\n");
    /// ```
    pub fn writer_wait(&mut self) -> WaitWriter<'_, 'r> {
        WaitWriter {
            ext: self,
            deadline: None,
        }
    }

    /// [`writer_wait`](ExtBuf::writer_wait) whose writes together wait at most
    /// `timeout`, counted from this call: a message that cannot be completed in that
    /// time fails with `ErrorKind::TimedOut` (what was written stays).
    ///
    /// ```
    /// use std::io::Write;
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(1024);
    /// let mut msg = ring.extendable(0).unwrap();
    /// let _rest: Vec<_> = std::iter::from_fn(|| ring.fixed(8)).collect(); // full
    /// let mut w = msg.writer_wait_timeout(Duration::from_millis(5));
    /// let err = w.write_all(&[1; 500]).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// ```
    pub fn writer_wait_timeout(&mut self, timeout: Duration) -> WaitWriter<'_, 'r> {
        WaitWriter {
            ext: self,
            deadline: Instant::now().checked_add(timeout),
        }
    }
}

impl WaitWriter<'_, '_> {
    /// Waits until `additional` more bytes fit the buffer.
    fn reserve(&mut self, additional: usize) -> io::Result<()> {
        let waited = match self.deadline {
            None => self.ext.reserve_wait(additional),
            Some(d) => self
                .ext
                .reserve_wait_timeout(additional, d.saturating_duration_since(Instant::now())),
        };
        waited.map_err(|e| match e {
            WaitError::TimedOut => io::ErrorKind::TimedOut.into(),
            // Without a message: the heap is what refused.
            WaitError::OutOfMemory { .. } => io::ErrorKind::OutOfMemory.into(),
            e => io::Error::new(io::ErrorKind::InvalidInput, e),
        })
    }
}

impl io::Write for WaitWriter<'_, '_> {
    /// Appends all of `buf`, waiting for room if it must (see [`WaitWriter`]).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.ext.try_extend_from_slice(buf).is_ok() {
            return Ok(());
        }
        self.reserve(buf.len())?;
        // The room was reserved above: this append cannot fail.
        self.ext
            .try_extend_from_slice(buf)
            .map_err(|_| io::ErrorKind::OutOfMemory.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for WaitWriter<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitWriter")
            .field("ext", &self.ext)
            .field("deadline", &self.deadline)
            .finish()
    }
}
