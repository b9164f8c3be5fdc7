//! The `bytes` crate adapters: `bytes::BufMut` on the writable buffers, `bytes::Buf` on
//! the frozen buffer, and zero-copy `bytes::Bytes` from the frozen buffer, the writable
//! buffer and codec slices.
//!
//! `Bytes::from_owner` keeps the ringmem handle inside the `Bytes`; the bytes are not
//! copied, and the region is released when the last `Bytes` clone drops, on whatever
//! thread that is. (`from_owner` itself allocates one small control block on the heap
//! per conversion, with no way to report a refusal: like `Box::new`, it aborts if the
//! global allocator refuses it. Cloning the `Bytes` afterwards allocates nothing.)

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes};

use crate::codec::Slice;
use crate::{ExtBuf, FixedBuf, FixedBufMut};

/// Smallest growth of an [`ExtBuf`] asked for by `chunk_mut` on a full buffer.
const CHUNK_GROWTH: usize = 64;

/// Writes into the spare capacity. A fixed buffer never grows: `remaining_mut` is its
/// [`spare`](FixedBufMut::spare), and the `put_*` methods panic when the value does not
/// fit (as for `&mut [u8]`); check `remaining_mut` first, or use
/// [`FixedBufMut::try_extend_from_slice`].
///
/// ```
/// use bytes::BufMut;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.put_u16(0xabcd);
/// buf.put_slice(b"xyz");
/// assert_eq!(&buf[..], b"\xab\xcdxyz");
/// assert_eq!(buf.remaining_mut(), 3);
/// ```
///
/// ```should_panic
/// use bytes::BufMut;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.put_slice(&[0; 9]); // does not fit: panics
/// ```
// SAFETY: `remaining_mut` is the spare capacity, `chunk_mut` is exactly that spare
// memory, and `advance_mut` refuses (panics) to move past it, so the written length
// never exceeds the capacity and only initialised bytes become visible (the caller of
// `advance_mut` vouches for the first `cnt` chunk bytes).
unsafe impl BufMut for FixedBufMut {
    #[inline]
    fn remaining_mut(&self) -> usize {
        self.spare()
    }

    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        let spare = self.spare();
        assert!(
            cnt <= spare,
            "ringmem: advance_mut({cnt}) past the {spare} spare bytes"
        );
        // SAFETY: `cnt <= spare` (checked), and the caller initialised the first `cnt`
        // bytes of `chunk_mut`, which are the first spare bytes.
        unsafe { self.advance(cnt) };
    }

    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        UninitSlice::uninit(self.spare_mut())
    }

    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        if let Err(e) = self.try_extend_from_slice(src) {
            panic!("ringmem: put_slice into a FixedBufMut: {e}");
        }
    }
}

/// Writes at the end, growing as `Vec<u8>` does. `remaining_mut` is what a `Vec` says
/// (`isize::MAX - len`); the `put_*` methods panic when the ring cannot grow the buffer
/// (under [`WhenFull::Fail`](crate::WhenFull::Fail)), as `ExtBuf::extend_from_slice`
/// does.
///
/// ```
/// use bytes::BufMut;
/// let ring = ringmem::Ring::new(4096);
/// let mut ext = ring.extendable(0).unwrap();
/// for i in 0..100u32 {
///     ext.put_u32_le(i);
/// }
/// assert_eq!(ext.len(), 400);
/// assert_eq!(&ext[4..8], &1u32.to_le_bytes());
/// ```
// SAFETY: `chunk_mut` returns the spare capacity (growing it first when it is empty),
// and `advance_mut` refuses (panics) to move past it, so only initialised bytes within
// the region become visible.
unsafe impl BufMut for ExtBuf<'_> {
    #[inline]
    fn remaining_mut(&self) -> usize {
        isize::MAX as usize - self.len()
    }

    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        let spare = self.capacity() - self.len();
        assert!(
            cnt <= spare,
            "ringmem: advance_mut({cnt}) past the {spare} spare bytes"
        );
        // SAFETY: `cnt <= spare` (checked); the caller initialised those bytes.
        unsafe { self.assume_written(cnt) };
    }

    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        if self.capacity() == self.len() {
            self.reserve(CHUNK_GROWTH);
        }
        UninitSlice::uninit(self.spare_uninit())
    }

    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        self.extend_from_slice(src);
    }
}

/// Reads from the front: the buffer is its own cursor. [`advance`](Buf::advance) moves
/// the view's start (no copy, and the count in the region header is untouched), so a
/// decoder reads a frame with the `get_*` methods and the region is released when the
/// last handle drops. [`copy_to_bytes`](Buf::copy_to_bytes) shares the region instead
/// of copying, as `Bytes::from(frozen)` does.
///
/// ```
/// use bytes::Buf;
/// let ring = ringmem::Ring::new(4096);
/// let mut b = ring.fixed(16).unwrap();
/// b.try_extend_from_slice(b"\x00\x05hello, world").unwrap();
/// let mut frame = b.freeze();
/// let len = usize::from(frame.get_u16());
/// let word = frame.copy_to_bytes(len);
/// assert_eq!((&word[..], frame.remaining(), frame.chunk()), (&b"hello"[..], 7, &b", world"[..]));
/// frame.advance(2);
/// assert_eq!(frame, b"world");
/// ```
///
/// Advancing past the end panics, as it does for `bytes::Bytes`:
///
/// ```should_panic
/// use bytes::Buf;
/// let ring = ringmem::Ring::new(4096);
/// let mut b = ring.fixed(8).unwrap();
/// b.try_extend_from_slice(b"abc").unwrap();
/// b.freeze().advance(4);
/// ```
impl Buf for FixedBuf {
    #[inline]
    fn remaining(&self) -> usize {
        self.len()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        self.skip(cnt);
    }

    /// Shares the next `len` bytes: the `Bytes` holds a handle to the region (one small
    /// heap block for `Bytes::from_owner`, no copy); `len == 0` allocates nothing.
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        if len == 0 {
            return Bytes::new();
        }
        Bytes::from_owner(self.split_to(len))
    }
}

/// Shares the frozen buffer's bytes without copying; the region is released when the
/// last `Bytes` (or `FixedBuf`) handle drops.
///
/// ```
/// use bytes::Bytes;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(5).unwrap();
/// buf.try_extend_from_slice(b"hello").unwrap();
/// let frozen = buf.freeze();
/// let at = frozen.as_ptr();
/// let bytes = Bytes::from(frozen);
/// assert_eq!(bytes.as_ptr(), at); // no copy
/// drop(ring);
/// assert_eq!(&bytes[..], b"hello");
/// ```
impl From<FixedBuf> for Bytes {
    #[inline]
    fn from(buf: FixedBuf) -> Bytes {
        Bytes::from_owner(buf)
    }
}

/// Takes the written bytes over without copying (the buffer can no longer be written).
///
/// ```
/// use bytes::Bytes;
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.try_extend_from_slice(b"abc").unwrap();
/// let bytes = Bytes::from(buf);
/// assert_eq!(&bytes[..], b"abc");
/// ```
impl From<FixedBufMut> for Bytes {
    #[inline]
    fn from(buf: FixedBufMut) -> Bytes {
        Bytes::from_owner(buf)
    }
}

/// Takes a codec slice over without copying; a heap slice becomes a `Vec`-backed
/// `Bytes`.
///
/// ```
/// use bytes::Bytes;
/// use ringmem::codec::{Buffer, BufferPool};
/// let mut pool = BufferPool::new(4096);
/// pool.get_writable(3).copy_from_slice(b"abc");
/// let bytes = Bytes::from(pool.get_data_owned());
/// drop(pool);
/// assert_eq!(&bytes[..], b"abc");
/// ```
impl From<Slice> for Bytes {
    #[inline]
    fn from(slice: Slice) -> Bytes {
        match slice.into_inner() {
            Ok(buf) => Bytes::from_owner(buf),
            Err(vec) => Bytes::from(vec),
        }
    }
}

/// `$t == Bytes`, `Bytes == $t` and the orderings, by their bytes.
macro_rules! cmp_bytes {
    ($t:ty, $other:ty) => {
        impl PartialEq<$other> for $t {
            #[inline]
            fn eq(&self, other: &$other) -> bool {
                self[..] == other[..]
            }
        }

        impl PartialEq<$t> for $other {
            #[inline]
            fn eq(&self, other: &$t) -> bool {
                self[..] == other[..]
            }
        }

        impl PartialOrd<$other> for $t {
            #[inline]
            fn partial_cmp(&self, other: &$other) -> Option<core::cmp::Ordering> {
                self[..].partial_cmp(&other[..])
            }
        }

        impl PartialOrd<$t> for $other {
            #[inline]
            fn partial_cmp(&self, other: &$t) -> Option<core::cmp::Ordering> {
                self[..].partial_cmp(&other[..])
            }
        }
    };
}

cmp_bytes!(FixedBuf, Bytes);
cmp_bytes!(FixedBufMut, Bytes);
cmp_bytes!(FixedBuf, bytes::BytesMut);
cmp_bytes!(FixedBufMut, bytes::BytesMut);
