#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "std"), no_std)]
#![cfg_attr(feature = "nightly", feature(allocator_api))]
#![cfg_attr(docsrs, feature(doc_cfg))]
// `real_std` (see build.rs) is `feature = "std"` outside loom: items show their feature.
#![cfg_attr(docsrs, doc(auto_cfg(hide(real_std))))]
#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]
#![doc(test(attr(deny(warnings))))]

extern crate alloc;

#[cfg(feature = "allocator-api2")]
mod alloc_api;
mod buf;
#[cfg(feature = "bytes")]
mod bytes_impl;
#[cfg(all(test, loom, feature = "std"))]
mod loom_exit;
mod raw;
mod ring;
#[cfg(feature = "serde")]
mod serde_impl;
mod sync;

pub mod codec;
// Frames straight off a socket; built on the waiting calls, which loom builds leave out.
#[cfg(real_std)]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod io;
pub mod slab;
#[cfg(uring)]
#[cfg_attr(docsrs, doc(cfg(all(feature = "io-uring", target_os = "linux"))))]
pub mod uring;
/// The guide: every part of the crate with an example, how the ring works, how it
/// behaves under failure, the naming grammar, migrating from ringal, and how the crate
/// is checked (`docs/guide.md`). Nothing but documentation.
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod tls;

#[cfg(all(feature = "allocator-api2", feature = "std"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "allocator-api2", feature = "std"))))]
pub use alloc_api::ByteWriter;
#[cfg(all(feature = "allocator-api2", feature = "std"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "allocator-api2", feature = "std"))))]
pub use alloc_api::OneRingAlloc;
#[cfg(feature = "allocator-api2")]
pub use alloc_api::{AllocStats, ExtendBytes, RingAlloc};
/// The allocator-api2 crate whose `Allocator` trait the ring's allocators implement
/// (version 0.2): name collections through it so the versions match. Its
/// `Vec::extend_from_slice` pushes byte by byte on stable Rust: append bytes with
/// [`ExtendBytes`].
///
/// ```
/// use ringmem::{allocator_api2::vec::Vec, ExtendBytes};
/// let alloc = ringmem::RingAlloc::with_capacity(1 << 16);
/// let mut v: Vec<u8, _> = Vec::new_in(alloc);
/// v.extend_bytes(b"on the ring");
/// assert_eq!(v.len(), 11);
/// ```
#[cfg(feature = "allocator-api2")]
pub use allocator_api2;
/// allocator-api2 0.4, whose `Allocator` the ring's allocators also implement with the
/// feature `allocator-api2-04` (the version `cargo add allocator-api2` gives).
///
/// ```
/// use ringmem::allocator_api2_04::vec::Vec;
/// let ring = ringmem::Ring::new(1 << 16);
/// let mut v: Vec<u32, &ringmem::Ring> = Vec::new_in(&ring);
/// v.extend(0..100);
/// assert_eq!(v.iter().sum::<u32>(), 4950);
/// ```
#[cfg(feature = "allocator-api2-04")]
pub use allocator_api2_04;
pub use buf::{AllocError, BorrowsRing, CapacityError, ExtBuf, FixedBuf, FixedBufMut, TypedBuf};
#[cfg(feature = "std")]
pub use buf::{ExtWait, Reserve, Wait, WaitError, WaitWriter};
pub use ring::{Ring, RingBuilder, RingCounters, RingError, RingStats, WhenFull};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use serde_impl::InRing;
