//! Codec buffers with `buffer_sv2`'s names: a protocol decoder writes a frame piece by
//! piece (header, then payload) into a [`Buffer`] and takes the filled bytes out as an
//! owned slice that it may keep, send to another thread and drop anywhere.
//!
//! | `buffer_sv2` | here | memory |
//! |---|---|---|
//! | `Buffer` | [`Buffer`] | the same trait shape (`get_writable`, `get_data_owned`, …) |
//! | `BufferPool<BufferFromSystemMemory>` | [`BufferPool`] | a [`Ring`](crate::Ring) owned by the pool, falling back to the heap |
//! | `BufferFromSystemMemory` | [`BufferFromSystemMemory`] | a `Vec<u8>` per frame |
//! | `Slice` | [`Slice`] | ring memory or a `Vec<u8>`; unique (not `Clone`) |
//!
//! Migrating is a change of `use` line. The differences: a [`Slice`] cannot be cloned
//! (a `buffer_sv2` clone frees a slot its original still uses); any number of slices may
//! be alive at once (not 8); dropping a pool never waits for its slices (they may outlive
//! it); [`Buffer::get_writable`] hands out zeroed bytes; and
//! [`Buffer::try_get_writable`] reports a length the memory cannot hold instead of
//! panicking. `aes_gcm`'s `AeadBuffer` is not implemented (this crate depends on no
//! cipher crate).
//!
//! ```
//! use ringmem::codec::{Buffer, BufferPool};
//! let mut pool = BufferPool::new(64 * 1024);
//! pool.get_writable(6).copy_from_slice(&[0, 0, 1, 3, 0, 0]); // a header: 3-byte payload
//! let payload_len = usize::from(pool.get_data_by_ref_(6)[3]);
//! pool.get_writable(payload_len).copy_from_slice(b"abc");
//! let frame = pool.get_data_owned();
//! assert_eq!(frame.as_ref(), &[0, 0, 1, 3, 0, 0, b'a', b'b', b'c']);
//! std::thread::spawn(move || drop(frame)).join().unwrap(); // released on any thread
//! ```

mod pool;
mod slice;
mod system;

use core::fmt;

pub use pool::BufferPool;
pub use slice::Slice;
pub use system::BufferFromSystemMemory;

/// The largest message a buffer can hold, as for `Vec<u8>`.
const MAX_MESSAGE: usize = isize::MAX as usize;

/// A buffer that a decoder fills piece by piece and empties one message at a time.
///
/// The bytes handed out by successive [`get_writable`](Buffer::get_writable) calls are
/// contiguous; together they form the current message, which
/// [`get_data_owned`](Buffer::get_data_owned) hands over as an owned slice, leaving the
/// buffer empty for the next one. The same shape as `buffer_sv2::Buffer`.
///
/// ```
/// use ringmem::codec::{Buffer, BufferFromSystemMemory, BufferPool};
/// fn frame<B: Buffer>(buf: &mut B, payload: &[u8]) -> B::Slice {
///     buf.get_writable(1)[0] = payload.len() as u8;
///     buf.get_writable(payload.len()).copy_from_slice(payload);
///     buf.get_data_owned()
/// }
/// assert_eq!(frame(&mut BufferPool::new(4096), b"hi").as_ref(), b"\x02hi");
/// assert_eq!(frame(&mut BufferFromSystemMemory::new(0), b"hi"), b"\x02hi");
/// ```
pub trait Buffer {
    /// The owned bytes of one message.
    type Slice: AsMut<[u8]> + AsRef<[u8]> + Into<Slice>;

    /// Appends `len` zeroed bytes to the current message and returns them for writing.
    ///
    /// # Panics
    /// When the message would exceed `isize::MAX` bytes; like `Vec`, it aborts when the
    /// heap refuses the memory. [`try_get_writable`](Buffer::try_get_writable) returns
    /// both as errors instead.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(2).copy_from_slice(b"ab");
    /// assert_eq!(pool.get_writable(3), &[0, 0, 0]);
    /// assert_eq!(pool.len(), 5);
    /// ```
    fn get_writable(&mut self, len: usize) -> &mut [u8];

    /// Like [`get_writable`](Buffer::get_writable), but says when the memory cannot
    /// hold the message; the message is unchanged then. The provided version only
    /// checks the `isize::MAX` limit; this crate's buffers also report a refused heap
    /// allocation.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(4);
    /// let err = pool.try_get_writable(usize::MAX).unwrap_err();
    /// assert_eq!((err.requested, err.written), (usize::MAX, 4));
    /// assert_eq!(pool.len(), 4);
    /// ```
    fn try_get_writable(&mut self, len: usize) -> Result<&mut [u8], WritableError> {
        let written = self.len();
        if written
            .checked_add(len)
            .is_none_or(|total| total > MAX_MESSAGE)
        {
            return Err(WritableError {
                requested: len,
                written,
            });
        }
        Ok(self.get_writable(len))
    }

    /// Hands over the current message and starts an empty one.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(3).copy_from_slice(b"abc");
    /// let msg = pool.get_data_owned();
    /// assert_eq!(msg.as_ref(), b"abc");
    /// assert!(pool.is_empty());
    /// ```
    fn get_data_owned(&mut self) -> Self::Slice;

    /// The first `len` bytes of the current message (all of it when it is shorter),
    /// writable in place.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(3).copy_from_slice(b"abc");
    /// pool.get_data_by_ref(1)[0] = b'x';
    /// assert_eq!(pool.get_data_by_ref(100), b"xbc");
    /// ```
    fn get_data_by_ref(&mut self, len: usize) -> &mut [u8];

    /// The first `len` bytes of the current message (all of it when it is shorter).
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(3).copy_from_slice(b"abc");
    /// assert_eq!(pool.get_data_by_ref_(2), b"ab");
    /// ```
    fn get_data_by_ref_(&self, len: usize) -> &[u8];

    /// Bytes in the current message.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory};
    /// let mut buf = BufferFromSystemMemory::new(0);
    /// buf.get_writable(7);
    /// assert_eq!(buf.len(), 7);
    /// ```
    fn len(&self) -> usize;

    /// Sets where the buffer's own `AsRef<[u8]>`/`AsMut<[u8]>` views of the current
    /// message start (a start past the end gives an empty view). Slices and the other
    /// methods are not affected.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(4).copy_from_slice(b"abcd");
    /// pool.danger_set_start(2);
    /// assert_eq!(pool.as_ref(), b"cd");
    /// ```
    fn danger_set_start(&mut self, index: usize);

    /// Whether the current message is empty.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// assert!(BufferPool::new(4096).is_empty());
    /// ```
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether dropping the buffer is fine. Always `true` for this crate's buffers: their
    /// slices keep their memory alive on their own.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool};
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(1);
    /// let slice = pool.get_data_owned();
    /// assert!(pool.is_droppable());
    /// drop(pool);
    /// assert_eq!(slice.as_ref(), &[0]);
    /// ```
    fn is_droppable(&self) -> bool {
        true
    }
}

/// [`Buffer::try_get_writable`] could not extend the message.
///
/// ```
/// use ringmem::codec::{Buffer, BufferFromSystemMemory};
/// let mut buf = BufferFromSystemMemory::new(0);
/// let err = buf.try_get_writable(usize::MAX).unwrap_err();
/// assert_eq!((err.requested, err.written), (usize::MAX, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritableError {
    /// Bytes asked for.
    pub requested: usize,
    /// Bytes already in the message.
    pub written: usize,
}

impl fmt::Display for WritableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot add {} bytes to a message of {} bytes: the memory cannot hold it",
            self.requested, self.written
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WritableError {}
