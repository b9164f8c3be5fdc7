//! `BufferFromSystemMemory`: a codec buffer on the heap, one `Vec<u8>` per message.

use alloc::vec::Vec;
use core::mem;

use super::{Buffer, WritableError, MAX_MESSAGE};

/// A codec [`Buffer`] on the heap: each message is a `Vec<u8>`, handed over whole by
/// [`get_data_owned`](Buffer::get_data_owned) (no copy), so every message costs one
/// allocation or more. It is the fallback of [`BufferPool`](super::BufferPool) and the
/// reference it is measured against.
///
/// ```
/// use ringmem::codec::{Buffer, BufferFromSystemMemory};
/// let mut buf = BufferFromSystemMemory::new(0);
/// buf.get_writable(2).copy_from_slice(b"hi");
/// let msg: Vec<u8> = buf.get_data_owned();
/// assert_eq!(msg, b"hi");
/// ```
#[derive(Debug, Default)]
pub struct BufferFromSystemMemory {
    /// The current message: every byte of it is written (`inner.len()` is the length).
    inner: Vec<u8>,
    /// Where the `AsRef`/`AsMut` views start (see [`Buffer::danger_set_start`]).
    start: usize,
}

impl BufferFromSystemMemory {
    /// An empty buffer. `capacity` is accepted for `buffer_sv2` parity and ignored: each
    /// message allocates what it needs.
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferFromSystemMemory};
    /// assert!(BufferFromSystemMemory::new(1024).is_empty());
    /// ```
    pub fn new(capacity: usize) -> Self {
        let _ = capacity;
        BufferFromSystemMemory::default()
    }
}

impl Buffer for BufferFromSystemMemory {
    type Slice = Vec<u8>;

    #[inline]
    fn get_writable(&mut self, len: usize) -> &mut [u8] {
        let at = self.inner.len();
        let total = match at.checked_add(len) {
            Some(total) if total <= MAX_MESSAGE => total,
            _ => panic!("ringmem: a codec message of {at} + {len} bytes overflows isize::MAX"),
        };
        self.inner.resize(total, 0);
        &mut self.inner[at..]
    }

    fn try_get_writable(&mut self, len: usize) -> Result<&mut [u8], WritableError> {
        let at = self.inner.len();
        let err = WritableError {
            requested: len,
            written: at,
        };
        if at.checked_add(len).is_none_or(|total| total > MAX_MESSAGE) {
            return Err(err);
        }
        self.inner.try_reserve(len).map_err(|_| err)?;
        self.inner.resize(at + len, 0);
        Ok(&mut self.inner[at..])
    }

    #[inline]
    fn get_data_owned(&mut self) -> Vec<u8> {
        mem::take(&mut self.inner)
    }

    fn get_data_by_ref(&mut self, len: usize) -> &mut [u8] {
        let n = len.min(self.inner.len());
        &mut self.inner[..n]
    }

    fn get_data_by_ref_(&self, len: usize) -> &[u8] {
        &self.inner[..len.min(self.inner.len())]
    }

    #[inline]
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn danger_set_start(&mut self, index: usize) {
        self.start = index;
    }
}

/// The current message from the [`danger_set_start`](Buffer::danger_set_start) index.
///
/// ```
/// use ringmem::codec::{Buffer, BufferFromSystemMemory};
/// let mut buf = BufferFromSystemMemory::new(0);
/// buf.get_writable(3).copy_from_slice(b"abc");
/// buf.danger_set_start(1);
/// assert_eq!(buf.as_ref(), b"bc");
/// ```
impl AsRef<[u8]> for BufferFromSystemMemory {
    fn as_ref(&self) -> &[u8] {
        self.inner.get(self.start..).unwrap_or_default()
    }
}

/// The current message from the [`danger_set_start`](Buffer::danger_set_start) index,
/// writable.
///
/// ```
/// use ringmem::codec::{Buffer, BufferFromSystemMemory};
/// let mut buf = BufferFromSystemMemory::new(0);
/// buf.get_writable(2);
/// buf.as_mut().copy_from_slice(b"ok");
/// assert_eq!(buf.get_data_owned(), b"ok");
/// ```
impl AsMut<[u8]> for BufferFromSystemMemory {
    fn as_mut(&mut self) -> &mut [u8] {
        self.inner.get_mut(self.start..).unwrap_or_default()
    }
}
