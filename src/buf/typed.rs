//! `TypedBuf<T>`: a fixed-capacity vector of `T` in ring memory.

use core::fmt;
use core::marker::PhantomData;
use core::mem;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::ring::{self, Claim, Header};

/// A fixed-capacity `Vec<T>`-like buffer in ring memory, aligned for `T`.
///
/// It drops its elements exactly once (when removed, cleared, or with the buffer), never
/// writes past its capacity (`push` and `insert` hand the value back when full), and is
/// `Send`/`Sync` exactly when `T` is. Zero-sized `T` takes no ring memory at all.
///
/// When an element's destructor panics, the elements after it are still dropped, the
/// region is still released (when the buffer itself is dropped), and the panic
/// propagates; after a panicking [`truncate`](Self::truncate) or
/// [`clear`](Self::clear), the buffer holds the elements before the cut and stays
/// usable. A second destructor that panics while the first panic unwinds aborts the
/// process, as it does for `Vec`.
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let mut v = ring.typed::<String>(2).unwrap();
/// v.push("a".to_string()).unwrap();
/// v.insert(0, "b".to_string()).unwrap();
/// assert_eq!(v.push("c".to_string()), Err("c".to_string())); // full
/// assert_eq!(v.join(","), "b,a");
/// ```
///
/// Not `Send` when `T` is not:
/// ```compile_fail
/// let ring = ringmem::Ring::new(4096);
/// let v = ring.typed::<std::rc::Rc<u8>>(1).unwrap();
/// std::thread::spawn(move || drop(v));
/// ```
pub struct TypedBuf<T> {
    /// `None` for zero-sized `T`, which needs no region.
    hdr: Option<NonNull<Header>>,
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its `T`s (as `Vec<T>` does) and releases its region with an
// atomic operation that is valid on any thread.
unsafe impl<T: Send> Send for TypedBuf<T> {}
// SAFETY: `&TypedBuf<T>` gives only `&T`.
unsafe impl<T: Sync> Sync for TypedBuf<T> {}

impl<T> TypedBuf<T> {
    /// Wraps a claimed region, or `None` for a zero-sized `T` of capacity `n`.
    #[inline]
    pub(crate) fn from_claim(c: Option<Claim>, n: usize) -> Self {
        match c {
            Some(c) => TypedBuf {
                hdr: Some(c.hdr),
                ptr: c.data.cast(),
                len: 0,
                cap: c.cap / mem::size_of::<T>(),
                _owns: PhantomData,
            },
            None => {
                debug_assert_eq!(mem::size_of::<T>(), 0);
                TypedBuf {
                    hdr: None,
                    ptr: NonNull::dangling(),
                    len: 0,
                    cap: n,
                    _owns: PhantomData,
                }
            }
        }
    }

    /// Elements held.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u32>(4).unwrap();
    /// v.push(1).unwrap();
    /// assert_eq!(v.len(), 1);
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert!(ring.typed::<u32>(4).unwrap().is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements it can hold (at least the number asked for).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert!(ring.typed::<u64>(3).unwrap().capacity() >= 3);
    /// ```
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Appends `value`, or hands it back when full.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u64>(1).unwrap();
    /// assert_eq!(v.push(1), Ok(()));
    /// assert_eq!(v.push(2), Err(2));
    /// ```
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), T> {
        if self.len == self.cap {
            return Err(value);
        }
        // SAFETY: `len < cap`, so the slot is inside the region and unoccupied.
        unsafe { self.ptr.as_ptr().add(self.len).write(value) };
        self.len += 1;
        Ok(())
    }

    /// Inserts `value` at `index`, shifting later elements right; hands the value back
    /// when full or when `index > len`.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u8>(3).unwrap();
    /// v.push(1).unwrap();
    /// v.insert(0, 0).unwrap();
    /// assert_eq!(v.insert(5, 9), Err(9));
    /// assert_eq!(&v[..], &[0, 1]);
    /// ```
    pub fn insert(&mut self, index: usize, value: T) -> Result<(), T> {
        if self.len == self.cap || index > self.len {
            return Err(value);
        }
        // SAFETY: `index <= len < cap`: the shifted range `index..len` moves to
        // `index+1..len+1`, which is inside the capacity.
        unsafe {
            let at = self.ptr.as_ptr().add(index);
            ptr::copy(at, at.add(1), self.len - index);
            at.write(value);
        }
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the last element.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u8>(3).unwrap();
    /// v.push(7).unwrap();
    /// assert_eq!((v.pop(), v.pop()), (Some(7), None));
    /// ```
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: the slot at the old `len - 1` holds a value, now no longer counted.
        Some(unsafe { self.ptr.as_ptr().add(self.len).read() })
    }

    /// Removes the element at `index`, shifting later ones left; `None` when out of
    /// range.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u8>(3).unwrap();
    /// for x in [1, 2, 3] { v.push(x).unwrap(); }
    /// assert_eq!(v.remove(0), Some(1));
    /// assert_eq!(v.remove(9), None);
    /// assert_eq!(&v[..], &[2, 3]);
    /// ```
    pub fn remove(&mut self, index: usize) -> Option<T> {
        if index >= self.len {
            return None;
        }
        // SAFETY: `index < len`: read the value out, then close the gap.
        unsafe {
            let at = self.ptr.as_ptr().add(index);
            let value = at.read();
            ptr::copy(at.add(1), at, self.len - index - 1);
            self.len -= 1;
            Some(value)
        }
    }

    /// Removes the element at `index`, moving the last one into its place; `None` when
    /// out of range.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u8>(3).unwrap();
    /// for x in [1, 2, 3] { v.push(x).unwrap(); }
    /// assert_eq!(v.swap_remove(0), Some(1));
    /// assert_eq!(&v[..], &[3, 2]);
    /// ```
    pub fn swap_remove(&mut self, index: usize) -> Option<T> {
        if index >= self.len {
            return None;
        }
        self.len -= 1;
        // SAFETY: `index <= new len`; both slots hold values; the last slot is no
        // longer counted after the read.
        unsafe {
            let base = self.ptr.as_ptr();
            let value = base.add(index).read();
            if index != self.len {
                ptr::copy_nonoverlapping(base.add(self.len), base.add(index), 1);
            }
            Some(value)
        }
    }

    /// Drops every element (capacity unchanged).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<String>(2).unwrap();
    /// v.push("x".into()).unwrap();
    /// v.clear();
    /// assert!(v.is_empty());
    /// ```
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Drops the elements from `len` on.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut v = ring.typed::<u8>(3).unwrap();
    /// for x in [1, 2, 3] { v.push(x).unwrap(); }
    /// v.truncate(1);
    /// assert_eq!(&v[..], &[1]);
    /// ```
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let tail = ptr::slice_from_raw_parts_mut(
            // SAFETY: `len < self.len`, inside the initialised range.
            unsafe { self.ptr.as_ptr().add(len) },
            self.len - len,
        );
        // Uncount first: if a destructor panics the rest are still dropped (slice drop
        // glue continues) and none is dropped twice.
        self.len = len;
        // SAFETY: the tail holds initialised values no longer counted by `len`.
        unsafe { ptr::drop_in_place(tail) };
    }
}

impl<T> Drop for TypedBuf<T> {
    fn drop(&mut self) {
        struct Release(Option<NonNull<Header>>, usize);
        impl Drop for Release {
            fn drop(&mut self) {
                if let Some(hdr) = self.0 {
                    // SAFETY: the buffer is this region's only handle and is going away;
                    // it was claimed with this alignment.
                    unsafe { ring::release_unique(hdr, self.1) }
                }
            }
        }
        // Released even if an element's destructor panics.
        let _release = Release(self.hdr, mem::align_of::<T>());
        self.clear();
    }
}

impl<T> Deref for TypedBuf<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` slots are initialised and aligned for `T`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for TypedBuf<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, exclusively through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: fmt::Debug> fmt::Debug for TypedBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}
