//! ringmem makes short-lived memory nearly free.
//!
//! (Crate docs: see README.)
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks, missing_docs)]
#![doc(test(attr(deny(warnings))))]

extern crate alloc;

mod buf;
mod raw;
mod ring;
mod sync;

pub mod slab;
#[cfg(feature = "std")]
pub mod tls;

pub use buf::{AllocError, CapacityError, ExtBuf, FixedBuf, FixedBufMut, TypedBuf};
pub use ring::{Ring, RingBuilder, RingError, RingStats, WhenFull};
