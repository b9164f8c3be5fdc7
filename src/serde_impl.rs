//! `serde` for the byte buffers (feature `serde`): `Serialize` writes their bytes,
//! through `serialize_bytes`, the form binary formats store compactly (as `bytes::Bytes`
//! and `serde_bytes` do); a self-describing text format such as JSON writes them as an
//! array of numbers, as it writes a `Vec<u8>`. A frozen buffer deserializes from bytes,
//! a string or a sequence of numbers, into the thread's ring (`Deserialize`) or one the
//! caller names ([`InRing`]).

use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserializer, Serialize, Serializer};

use crate::{ExtBuf, FixedBuf, FixedBufMut, Ring};

/// Deserializes a [`FixedBuf`] into the ring it names (a [`DeserializeSeed`]): a
/// format's bytes, a string's, or a sequence of numbers (JSON's form of bytes), copied
/// into one region of the ring. Fails with the format's error when the ring cannot
/// serve the region (full, under [`WhenFull::Fail`](crate::WhenFull::Fail)).
///
/// ```
/// use serde::de::DeserializeSeed;
/// let ring = ringmem::Ring::new(4096);
/// let mut de = serde_json::Deserializer::from_str("[104,105]");
/// let frame = ringmem::InRing(&ring).deserialize(&mut de).unwrap();
/// assert_eq!(frame, b"hi");
/// assert_eq!(ring.stats().live_buffers, 1);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct InRing<'r>(pub &'r Ring);

impl<'de> DeserializeSeed<'de> for InRing<'_> {
    type Value = FixedBuf;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<FixedBuf, D::Error> {
        let ring = self.0;
        d.deserialize_bytes(Copier(move |bytes: &[u8]| {
            ring.copy_from_slice(bytes)
                .ok_or("the ring has no room for the bytes")
        }))
    }
}

/// Into the thread's ring ([`FixedBuf::copy_from_slice`]: a heap region when it has no
/// room): bytes, a string, or a sequence of numbers.
///
/// ```
/// let frame: ringmem::FixedBuf = serde_json::from_str(r#""+OK""#).unwrap();
/// assert_eq!(frame, "+OK");
/// let frame: ringmem::FixedBuf = serde_json::from_str("[1,2,3]").unwrap();
/// assert_eq!(frame, [1, 2, 3]);
/// ```
#[cfg(real_std)]
impl<'de> serde::Deserialize<'de> for FixedBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FixedBuf, D::Error> {
        d.deserialize_bytes(Copier(|bytes: &[u8]| Ok(FixedBuf::copy_from_slice(bytes))))
    }
}

/// The visitor: hands the bytes it is given to its closure, which copies them.
struct Copier<F>(F);

impl<'de, F: FnOnce(&[u8]) -> Result<FixedBuf, &'static str>> Visitor<'de> for Copier<F> {
    type Value = FixedBuf;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes, a string or a sequence of bytes")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<FixedBuf, E> {
        (self.0)(v).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<FixedBuf, E> {
        self.visit_bytes(v.as_bytes())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FixedBuf, A::Error> {
        // A bound on the hint: a hostile length must not size an allocation.
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            v.push(b);
        }
        self.visit_bytes(&v)
    }
}

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
