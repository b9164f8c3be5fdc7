//! Frozen buffers from ordinary bytes: a static slice held in place, or a copy in a
//! ring (the thread's, or one the caller names); and the bytes back out as a `Vec`.
//!
//! A static slice needs no region: its handles count on an immortal header (one of a
//! few in a static, picked per thread so that threads sending the same reply do not
//! share a cache line), whose count starts at [`IMMORTAL`] and so never falls to zero.
//! Nothing else reads a frozen buffer's header: its bytes are read through its own
//! pointer, and only the readers' internals (never handed such a buffer) look at spans.

use alloc::vec::Vec;
#[cfg(real_std)]
use core::cell::Cell;
#[cfg(real_std)]
use core::ptr::NonNull;
#[cfg(real_std)]
use core::sync::atomic::{AtomicUsize, Ordering};

use super::{FixedBuf, FixedBufMut};
use crate::ring::Ring;

impl Ring {
    /// A frozen copy of `bytes` in this ring, or `None` when it cannot serve one (as
    /// [`fixed`](Ring::fixed)); an empty slice takes a one-byte region.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let reply = ring.copy_from_slice(b"+OK\r\n").unwrap();
    /// assert_eq!(reply, b"+OK\r\n");
    /// assert_eq!(ring.stats().live_buffers, 1);
    /// ```
    pub fn copy_from_slice(&self, bytes: &[u8]) -> Option<FixedBuf> {
        let mut buf = self.fixed(bytes.len().max(1))?;
        buf.extend_from_slice(bytes);
        Some(buf.freeze())
    }
}

impl FixedBufMut {
    /// Appends `bytes`, as [`try_extend_from_slice`](Self::try_extend_from_slice) does.
    ///
    /// # Panics
    /// When `bytes` is longer than the room left ([`spare`](Self::spare)): the
    /// capacity is fixed.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut buf = ring.fixed(8).unwrap();
    /// buf.extend_from_slice(b"abc");
    /// assert_eq!(buf, b"abc");
    /// ```
    #[track_caller]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_extend_from_slice(bytes) {
            panic!("ringmem: FixedBufMut::extend_from_slice: {e}");
        }
    }
}

/// The count an immortal header starts with: half of what a clone may reach
/// (`MAX_REFS`), so that no run of drops takes it to zero and clones still have room.
#[cfg(real_std)]
const IMMORTAL: u64 = 1 << 29;

/// Immortal headers, one cache line each.
#[cfg(real_std)]
#[repr(align(128))]
struct Padded(crate::ring::Header);

#[cfg(real_std)]
const HEADERS: usize = 16;

#[cfg(real_std)]
static IMMORTALS: [Padded; HEADERS] = {
    use crate::ring::{Header, HDR};
    use core::sync::atomic::AtomicU64;
    // A header's span is its own word: no region follows it. The constant is only
    // the array's initialiser: each element is a header of its own.
    #[allow(clippy::declare_interior_mutable_const)]
    const H: Padded = Padded(Header(AtomicU64::new(
        (((HDR / crate::ring::WORD) as u64) << 32) | IMMORTAL,
    )));
    [H; HEADERS]
};

#[cfg(real_std)]
impl FixedBuf {
    /// A frozen buffer of `bytes`, held where they are: no copy and no allocation,
    /// and a clone or a drop costs an atomic add on an uncontended count, as any
    /// frozen buffer's does. For replies a server sends all day (`+OK\r\n`).
    ///
    /// ```
    /// use ringmem::FixedBuf;
    /// let ok = FixedBuf::from_static(b"+OK\r\n");
    /// assert_eq!(ok.as_ptr(), b"+OK\r\n".as_ptr()); // in place
    /// let again = ok.clone();
    /// std::thread::spawn(move || assert_eq!(again, "+OK\r\n")).join().unwrap();
    /// ```
    pub fn from_static(bytes: &'static [u8]) -> FixedBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        crate::sync::thread_local! {
            static PICK: Cell<usize> = const { Cell::new(HEADERS) };
        }
        let pick = (PICK.try_with(|p| {
            if p.get() == HEADERS {
                p.set(NEXT.fetch_add(1, Ordering::Relaxed) % HEADERS);
            }
            p.get()
        }))
        .unwrap_or(0);
        let hdr = NonNull::from(&IMMORTALS[pick].0);
        // SAFETY: the header is a static's, alive for good; this new handle takes a
        // count of it, which never reaches zero (it starts at `IMMORTAL`), so no release
        // frees anything.
        unsafe { crate::ring::retain_shared(hdr) };
        // `&'static` bytes: never written, alive for good.
        FixedBuf::from_raw(hdr, NonNull::from(bytes).cast(), bytes.len())
    }

    /// A frozen copy of `bytes` in this thread's ring ([`tls`](crate::tls)), or in a
    /// heap region of its own when that ring cannot serve it (a ring configured to
    /// fail when full, a thread being torn down): one claim and one copy, and no heap
    /// allocation once the thread's ring exists and has room.
    ///
    /// # Panics
    /// When the heap refuses too, as `Vec` does.
    ///
    /// ```
    /// let name = String::from("world");
    /// let reply = ringmem::FixedBuf::copy_from_slice(format!("hello {name}").as_bytes());
    /// assert_eq!(reply, "hello world");
    /// ```
    pub fn copy_from_slice(bytes: &[u8]) -> FixedBuf {
        if bytes.is_empty() {
            return FixedBuf::from_static(&[]);
        }
        let mut buf = crate::tls::fixed(bytes.len())
            .or_else(|| FixedBufMut::on_heap(bytes.len()))
            .unwrap_or_else(|| hopeless_alloc(bytes.len()));
        buf.extend_from_slice(bytes);
        buf.freeze()
    }
}

/// The panic of a copy the heap refused.
#[cfg(real_std)]
#[cold]
fn hopeless_alloc(n: usize) -> ! {
    match core::alloc::Layout::from_size_align(n, crate::ring::WORD) {
        Ok(layout) => std::alloc::handle_alloc_error(layout),
        Err(_) => panic!("ringmem: a copy of {n} bytes is too large to allocate"),
    }
}

/// A copy in this thread's ring (see [`FixedBuf::copy_from_slice`]).
///
/// ```
/// let frame = ringmem::FixedBuf::from(&b"bytes"[..]);
/// assert_eq!(frame, b"bytes");
/// ```
#[cfg(real_std)]
impl From<&[u8]> for FixedBuf {
    fn from(bytes: &[u8]) -> FixedBuf {
        FixedBuf::copy_from_slice(bytes)
    }
}

/// A copy in this thread's ring (see [`FixedBuf::copy_from_slice`]); for a literal
/// held in place, [`FixedBuf::from_static`].
///
/// ```
/// let frame = ringmem::FixedBuf::from(b"bytes");
/// assert_eq!(frame, b"bytes");
/// ```
#[cfg(real_std)]
impl<const N: usize> From<&[u8; N]> for FixedBuf {
    fn from(bytes: &[u8; N]) -> FixedBuf {
        FixedBuf::copy_from_slice(bytes)
    }
}

/// A copy in this thread's ring (see [`FixedBuf::copy_from_slice`]): a ring buffer
/// needs its header before its bytes, so a `Vec`'s allocation cannot be taken over;
/// it is freed here.
///
/// ```
/// let frame = ringmem::FixedBuf::from(vec![1, 2, 3]);
/// assert_eq!(frame, [1, 2, 3]);
/// ```
#[cfg(real_std)]
impl From<Vec<u8>> for FixedBuf {
    fn from(bytes: Vec<u8>) -> FixedBuf {
        FixedBuf::copy_from_slice(&bytes)
    }
}

/// A copy of the string's bytes in this thread's ring (see
/// [`FixedBuf::copy_from_slice`]).
///
/// ```
/// let frame = ringmem::FixedBuf::from("-ERR unknown command\r\n");
/// assert_eq!(frame, "-ERR unknown command\r\n");
/// ```
#[cfg(real_std)]
impl From<&str> for FixedBuf {
    fn from(s: &str) -> FixedBuf {
        FixedBuf::copy_from_slice(s.as_bytes())
    }
}

/// A copy of the string's bytes in this thread's ring (see
/// [`FixedBuf::copy_from_slice`]).
///
/// ```
/// let frame = ringmem::FixedBuf::from(format!(":{}\r\n", 42));
/// assert_eq!(frame, ":42\r\n");
/// ```
#[cfg(real_std)]
impl From<alloc::string::String> for FixedBuf {
    fn from(s: alloc::string::String) -> FixedBuf {
        FixedBuf::copy_from_slice(s.as_bytes())
    }
}

/// A copy of the bytes in view, on the heap (the buffer's region is released as its
/// handle drops).
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let frame = ring.copy_from_slice(b"abc").unwrap();
/// assert_eq!(Vec::from(frame), b"abc");
/// assert_eq!(ring.stats().live_buffers, 0);
/// ```
impl From<FixedBuf> for Vec<u8> {
    fn from(buf: FixedBuf) -> Vec<u8> {
        buf[..].to_vec()
    }
}

/// A copy of the bytes written, on the heap (the buffer's region is released as its
/// handle drops).
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.extend_from_slice(b"abc");
/// assert_eq!(Vec::from(buf), b"abc");
/// ```
impl From<FixedBufMut> for Vec<u8> {
    fn from(buf: FixedBufMut) -> Vec<u8> {
        buf[..].to_vec()
    }
}

#[cfg(all(test, real_std))]
mod tests {
    use super::*;

    #[test]
    fn static_bytes_are_shared_in_place_across_threads() {
        static BYTES: &[u8] = b"+OK\r\n";
        let ok = FixedBuf::from_static(BYTES);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let ok = ok.clone();
                std::thread::spawn(move || {
                    let mine = FixedBuf::from_static(BYTES);
                    assert_eq!((mine.clone(), ok.slice(1..)), (ok.clone(), mine.slice(1..)));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!((ok.as_ptr(), &ok[..]), (BYTES.as_ptr(), BYTES));
    }

    #[test]
    fn copies_are_the_callers_bytes_and_go_back() {
        let frame = FixedBuf::copy_from_slice(b"copied");
        let ring = Ring::new(4096);
        let named = ring.copy_from_slice(&frame).unwrap();
        assert_eq!(Vec::from(named), b"copied");
        assert_eq!(
            (Vec::from(frame), ring.stats().live_buffers),
            (b"copied".to_vec(), 0)
        );
    }
}
