//! `serde::Serialize` for the byte buffers (feature `serde`): their bytes, through
//! `serialize_bytes`, the form binary formats store compactly (as `bytes::Bytes` and
//! `serde_bytes` do). A self-describing text format such as JSON writes them as an array
//! of numbers, as it writes a `Vec<u8>`.

use serde::{Serialize, Serializer};

use crate::{ExtBuf, FixedBuf, FixedBufMut};

/// The bytes of the view, as `serialize_bytes`.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(3).unwrap();
/// buf.try_extend_from_slice(b"abc").unwrap();
/// assert_eq!(serde_json::to_string(&buf.freeze()).unwrap(), "[97,98,99]");
/// ```
impl Serialize for FixedBuf {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self)
    }
}

/// The bytes written so far, as `serialize_bytes`.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut buf = ring.fixed(8).unwrap();
/// buf.try_extend_from_slice(b"hi").unwrap();
/// assert_eq!(serde_json::to_string(&buf).unwrap(), "[104,105]");
/// ```
impl Serialize for FixedBufMut {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self)
    }
}

/// The bytes written so far, as `serialize_bytes`.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut ext = ring.extendable(0).unwrap();
/// ext.extend_from_slice(b"ok");
/// assert_eq!(serde_json::to_string(&ext).unwrap(), "[111,107]");
/// ```
impl Serialize for ExtBuf<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self)
    }
}
