//! `Slice`: the owned bytes of one decoded message.

use alloc::vec::Vec;
use core::fmt;
use core::ops::{Deref, DerefMut, Index, IndexMut};
use core::slice::SliceIndex;

use crate::FixedBufMut;

/// The owned bytes of one message, from ring memory or the heap.
///
/// It is unique: `Send` (and `Sync`), writable in place, and not `Clone`, so the memory
/// it holds is released exactly once, when it is dropped, on whatever thread that is.
/// It does not borrow the pool that made it and may outlive it. With the `bytes`
/// feature, `bytes::Bytes::from(slice)` takes it over without copying the bytes.
///
/// ```
/// use ringmem::codec::{Buffer, BufferPool, Slice};
/// let mut pool = BufferPool::new(4096);
/// pool.get_writable(3).copy_from_slice(b"abc");
/// let mut msg: Slice = pool.get_data_owned();
/// msg[0] = b'x';
/// assert_eq!(&msg[..], b"xbc");
/// assert!(msg.is_ring());
/// drop(pool); // the slice keeps its bytes
/// std::thread::spawn(move || assert_eq!(&msg[1..], b"bc")).join().unwrap();
/// ```
///
/// A slice cannot be cloned (`buffer_sv2`'s `Slice` can, and dropping the clone frees a
/// slot the original still uses):
/// ```compile_fail
/// fn clone<T: Clone>(_: &T) {}
/// let mut pool = ringmem::codec::BufferPool::new(4096);
/// let msg = ringmem::codec::Buffer::get_data_owned(&mut pool);
/// clone(&msg);
/// ```
pub struct Slice(Repr);

enum Repr {
    /// Ring memory (or a ring's heap region), released with the buffer.
    Ring(FixedBufMut),
    /// Heap memory, from a fallback buffer or a caller's `Vec`.
    Heap(Vec<u8>),
}

impl Slice {
    /// Bytes in the slice.
    ///
    /// ```
    /// let slice = ringmem::codec::Slice::from(vec![1, 2, 3]);
    /// assert_eq!(slice.len(), 3);
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Ring(b) => b.len(),
            Repr::Heap(v) => v.len(),
        }
    }

    /// Whether the slice holds no bytes.
    ///
    /// ```
    /// assert!(ringmem::codec::Slice::from(Vec::new()).is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes live in a [`Ring`](crate::Ring)'s buffer (`false`: a `Vec<u8>`).
    ///
    /// ```
    /// use ringmem::codec::{Buffer, BufferPool, Slice};
    /// assert!(!Slice::from(vec![1]).is_ring());
    /// let mut pool = BufferPool::new(4096);
    /// pool.get_writable(1);
    /// assert!(pool.get_data_owned().is_ring());
    /// ```
    #[inline]
    pub fn is_ring(&self) -> bool {
        matches!(self.0, Repr::Ring(_))
    }

    /// The ring buffer, or the vector, that holds the bytes.
    #[cfg_attr(not(feature = "bytes"), allow(dead_code))]
    pub(crate) fn into_inner(self) -> Result<FixedBufMut, Vec<u8>> {
        match self.0 {
            Repr::Ring(b) => Ok(b),
            Repr::Heap(v) => Err(v),
        }
    }

    /// The bytes.
    ///
    /// ```
    /// let slice = ringmem::codec::Slice::from(vec![1, 2]);
    /// assert_eq!(slice.as_slice(), &[1, 2]);
    /// ```
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Ring(b) => b,
            Repr::Heap(v) => v,
        }
    }

    /// The bytes, writable.
    ///
    /// ```
    /// let mut slice = ringmem::codec::Slice::from(vec![1, 2]);
    /// slice.as_mut_slice()[0] = 9;
    /// assert_eq!(slice.as_slice(), &[9, 2]);
    /// ```
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Repr::Ring(b) => b,
            Repr::Heap(v) => v,
        }
    }
}

/// Takes the vector over without copying.
///
/// ```
/// let slice = ringmem::codec::Slice::from(b"abc".to_vec());
/// assert_eq!(slice.as_ref(), b"abc");
/// ```
impl From<Vec<u8>> for Slice {
    #[inline]
    fn from(v: Vec<u8>) -> Self {
        Slice(Repr::Heap(v))
    }
}

/// Takes the ring buffer over without copying; its written bytes are the slice.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.try_extend_from_slice(b"abc").unwrap();
/// let slice = ringmem::codec::Slice::from(buf);
/// assert!(slice.is_ring());
/// assert_eq!(slice.len(), 3);
/// ```
impl From<FixedBufMut> for Slice {
    #[inline]
    fn from(b: FixedBufMut) -> Self {
        Slice(Repr::Ring(b))
    }
}

impl Deref for Slice {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for Slice {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for Slice {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for Slice {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// Indexes the bytes as `[u8]` does (`buffer_sv2`'s `Slice` is indexable too).
///
/// ```
/// let slice = ringmem::codec::Slice::from(vec![1, 2, 3]);
/// assert_eq!((slice[0], &slice[1..]), (1, &[2, 3][..]));
/// ```
impl<I: SliceIndex<[u8]>> Index<I> for Slice {
    type Output = I::Output;
    #[inline]
    fn index(&self, index: I) -> &I::Output {
        &self.as_slice()[index]
    }
}

/// Indexes the bytes mutably as `[u8]` does.
///
/// ```
/// let mut slice = ringmem::codec::Slice::from(vec![1, 2, 3]);
/// slice[1..].copy_from_slice(&[8, 9]);
/// assert_eq!(slice.as_slice(), &[1, 8, 9]);
/// ```
impl<I: SliceIndex<[u8]>> IndexMut<I> for Slice {
    #[inline]
    fn index_mut(&mut self, index: I) -> &mut I::Output {
        &mut self.as_mut_slice()[index]
    }
}

impl PartialEq for Slice {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Slice {}

impl PartialEq<[u8]> for Slice {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slice")
            .field("len", &self.len())
            .field("ring", &self.is_ring())
            .finish()
    }
}
