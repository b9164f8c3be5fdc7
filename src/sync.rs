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

/// `r` itself, through a pointer whose origin the compiler cannot see.
///
/// For thread-local state that every call updates (`OneRingAlloc`'s chunk cursor). On
/// x86-64 a thread-local's fields are addressed through the `%fs` segment, and a value
/// stored that way and loaded back at once is forwarded more slowly than one at a plain
/// address. Passing the reference through an empty `asm!` keeps the compiler from
/// folding the accesses back into `%fs`-relative addressing; the `asm!` is pure, so a
/// loop computes it once. (The slab magazine's thread-local, updated on every
/// `SharedArena` allocation, showed no change this way: it is left as it is.)
#[cfg(all(feature = "std", not(loom)))]
#[inline(always)]
pub(crate) fn plain_ref<T>(r: &T) -> &T {
    #[allow(unused_mut)] // changed by the `asm!` only
    let mut p: *const T = r;
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // The asm reads no memory: the pointer passes through it as a number.
    #[allow(clippy::pointers_in_nomem_asm_block)]
    // SAFETY: the template is empty: `p` keeps its value, and nothing else is read or
    // written.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags));
    }
    // SAFETY: `p` is `r`, with its lifetime.
    unsafe { &*p }
}
