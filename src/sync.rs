//! The one place that names atomics and cells.
//!
//! Normal builds re-export `core`'s atomics; `--cfg loom` builds re-export loom's, so
//! the code the loom models check is the code that ships. `Cell` is re-exported from
//! here too: it only ever holds state of the thread that owns a [`Ring`](crate::Ring),
//! so loom has nothing to check in it, but every cell still enters through this door.
#![allow(unused_imports)]

pub(crate) use core::cell::{Cell, UnsafeCell};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
