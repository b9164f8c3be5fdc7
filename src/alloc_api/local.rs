//! `RingAlloc`: a cheap-to-clone, single-thread handle to one shared ring.

use alloc::rc::Rc;
use core::alloc::Layout;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use super::{Source, DEFAULT_HEAP_THRESHOLD};
use crate::ring::MAX_ALIGN;
use crate::sync::Cell;
use crate::{Ring, RingError, WhenFull};

/// A ring allocator handle for collections: `Vec<T, RingAlloc>`, `Box<T, RingAlloc>`,
/// hashbrown's `HashMap<K, V, S, RingAlloc>` (allocator-api2).
///
/// Clones share one [`Ring`] (the handle is an `Rc`-like pointer), so collections need
/// no lifetime; the ring goes when the last clone and the last allocation are gone.
/// Like the ring it allocates on one thread: `RingAlloc` is neither `Send` nor `Sync`
/// (use [`OneRingAlloc`](crate::OneRingAlloc) for collections that cross threads).
///
/// - Alignments up to [`RingAlloc::MAX_ALIGN`] (4096) are served; larger ones get
///   [`AllocError`], as do sizes the ring and the heap cannot serve.
/// - Zero-size layouts get a dangling, well-aligned pointer; the ring is not touched.
/// - Requests above [`heap_threshold`](Self::heap_threshold) bytes (default
///   [`RingAlloc::DEFAULT_HEAP_THRESHOLD`], 256 KiB) go to the global allocator as heap
///   regions with the same header, so deallocation needs no size check.
/// - `grow`/`shrink` stay in place when the regions after the allocation are free,
///   which is the usual case for the latest allocation: a growing `Vec` is not copied.
/// - `deallocate` finds the region header from the pointer alone: for alignments up to
///   8 it is the word before the data; for larger ones that word is either the header
///   (odd: a held region has count 1) or, when the ring put padding between header
///   and data, the padding's length (even), written there at allocation. Releasing is
///   then the ring's one `Release` store.
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// use ringmem::RingAlloc;
///
/// fn build() -> Vec<Box<u32, RingAlloc>, RingAlloc> {
///     let alloc = RingAlloc::new();
///     let b = Box::new_in(42, alloc.clone());
///     let mut v = Vec::new_in(alloc);
///     v.push(b);
///     v
/// }
/// let v = build(); // no lifetime ties the Vec to a ring variable
/// assert_eq!(*v[0], 42);
/// ```
///
/// # Migrating from ring-alloc
///
/// The names are ring-alloc's, so a change of `use` line migrates:
///
/// | ring-alloc 0.2                       | ringmem                                        |
/// |--------------------------------------|------------------------------------------------|
/// | `use ring_alloc::RingAlloc;`         | `use ringmem::RingAlloc;`                      |
/// | `use ring_alloc::OneRingAlloc;`      | `use ringmem::OneRingAlloc;`                   |
/// | `RingAlloc::new()`, `Default`, `Clone`, `PartialEq`, `Hash` | the same            |
/// | `alloc.allocate(layout)` / `alloc.deallocate(ptr, layout)` (inherent) | the same  |
/// | `OneRingAlloc` (ZST, `Copy`, `Send + Sync`) | the same                                |
/// | `RingAlloc::new_in(a)` (custom chunk allocator) | not offered: blocks come from the global allocator; [`RingAlloc::with_capacity`] / `From<Ring>` size them |
/// | `flush`, `clean_local`, `clean_global` | not needed: a ring's free space is reused in place, and a dropped ring's blocks are freed after their last allocation |
///
/// What changes underneath: memory is reused region by region (a long-lived allocation
/// pins its own bytes, not a whole chunk), `grow`/`shrink` work in place, and
/// allocations above the threshold bypass the ring.
///
/// Not `Send`:
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// send(ringmem::RingAlloc::new());
/// ```
pub struct RingAlloc {
    shared: Rc<Shared>,
}

/// What the clones of a `RingAlloc` share.
struct Shared {
    /// Dropped (or recycled) in `Shared`'s `Drop`, nowhere else.
    ring: ManuallyDrop<Ring>,
    /// Requests above this many bytes go to the global allocator.
    threshold: Cell<usize>,
    /// Made by `RingAlloc::new`: on drop, the ring may become this thread's spare.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    recyclable: bool,
}

#[cfg(feature = "std")]
std::thread_local! {
    /// One default ring per thread, kept from the last dropped `RingAlloc::new()` so
    /// that the next one reuses its (cache- and page-warm) block instead of asking the
    /// global allocator for a fresh megabyte. Bounded: one block per thread.
    static SPARE: core::cell::Cell<Option<Ring>> = const { core::cell::Cell::new(None) };
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: `ring` is taken exactly once, here, and not used afterwards.
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        #[cfg(feature = "std")]
        if self.recyclable && ring.capacity() == RingAlloc::DEFAULT_CAPACITY {
            // Allocations still in the ring keep working: the ring stays alive, and
            // they release by their header store as always.
            let ring = core::cell::Cell::new(Some(ring));
            let _ = SPARE.try_with(|s| s.set(ring.take()));
            drop(ring.take()); // the thread is exiting: drop it normally
            return;
        }
        drop(ring);
    }
}

impl RingAlloc {
    /// The largest `Layout` alignment served (the ring's block alignment).
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let ok = Layout::from_size_align(8, ringmem::RingAlloc::MAX_ALIGN).unwrap();
    /// let too_big = Layout::from_size_align(8, 2 * ringmem::RingAlloc::MAX_ALIGN).unwrap();
    /// let p = a.allocate(ok).unwrap();
    /// assert!(a.allocate(too_big).is_err());
    /// # // SAFETY: `p` came from `a.allocate(ok)` and is freed once.
    /// # unsafe { a.deallocate(p.cast(), ok) };
    /// ```
    pub const MAX_ALIGN: usize = MAX_ALIGN;

    /// Bytes of the ring made by [`RingAlloc::new`] (1 MiB).
    ///
    /// ```
    /// let a = ringmem::RingAlloc::new();
    /// assert_eq!(a.ring().capacity(), ringmem::RingAlloc::DEFAULT_CAPACITY);
    /// ```
    pub const DEFAULT_CAPACITY: usize = 1 << 20;

    /// Requests above this many bytes (256 KiB) go to the global allocator unless
    /// [`set_heap_threshold`](Self::set_heap_threshold) says otherwise; `&Ring` and
    /// [`OneRingAlloc`](crate::OneRingAlloc) use it too.
    ///
    /// ```
    /// let a = ringmem::RingAlloc::new();
    /// assert_eq!(a.heap_threshold(), ringmem::RingAlloc::DEFAULT_HEAP_THRESHOLD);
    /// ```
    pub const DEFAULT_HEAP_THRESHOLD: usize = DEFAULT_HEAP_THRESHOLD;

    /// A handle to a new ring of [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) bytes that
    /// adds blocks when full ([`WhenFull::Grow`]), so allocations fail only when the
    /// global allocator does.
    ///
    /// With `std`, each thread keeps one spare default ring: when the last handle of a
    /// `RingAlloc::new()` ring drops (and the ring has not grown past one block), the
    /// ring is kept, and the next `RingAlloc::new()` on that thread reuses it, warm,
    /// instead of asking the global allocator for a fresh megabyte. Allocations still
    /// in it keep working as before.
    ///
    /// # Panics
    /// When the global allocator refuses the first block.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// let mut v = Vec::new_in(ringmem::RingAlloc::new());
    /// v.extend_from_slice(b"hello");
    /// assert_eq!(&v[..], b"hello");
    /// ```
    pub fn new() -> Self {
        #[cfg(feature = "std")]
        if let Some(ring) = SPARE.try_with(|s| s.take()).ok().flatten() {
            return Self::from_ring(ring, true);
        }
        let ring = Ring::builder()
            .capacity(Self::DEFAULT_CAPACITY)
            .when_full(WhenFull::Grow)
            .build()
            .unwrap_or_else(|e| panic!("ringmem: cannot create a RingAlloc: {e}"));
        Self::from_ring(ring, true)
    }

    fn from_ring(ring: Ring, recyclable: bool) -> Self {
        RingAlloc {
            shared: Rc::new(Shared {
                ring: ManuallyDrop::new(ring),
                threshold: Cell::new(DEFAULT_HEAP_THRESHOLD),
                recyclable,
            }),
        }
    }

    /// A handle to a new ring of `bytes` bytes per block (headers included) that adds
    /// blocks when full ([`WhenFull::Grow`]).
    ///
    /// # Panics
    /// When `bytes` is 0 or larger than a block can address, or the global allocator
    /// refuses it; [`try_with_capacity`](Self::try_with_capacity) returns those as errors.
    ///
    /// ```
    /// let a = ringmem::RingAlloc::with_capacity(4096);
    /// assert_eq!(a.ring().capacity(), 4096);
    /// ```
    pub fn with_capacity(bytes: usize) -> Self {
        match Self::try_with_capacity(bytes) {
            Ok(a) => a,
            Err(e) => panic!("ringmem: cannot create a RingAlloc of {bytes} bytes: {e}"),
        }
    }

    /// A handle to a new ring of `bytes` bytes per block, or why it cannot be made.
    ///
    /// ```
    /// use ringmem::{RingAlloc, RingError};
    /// assert!(RingAlloc::try_with_capacity(4096).is_ok());
    /// assert_eq!(RingAlloc::try_with_capacity(0).unwrap_err(), RingError::ZeroCapacity);
    /// ```
    pub fn try_with_capacity(bytes: usize) -> Result<Self, RingError> {
        let ring = Ring::builder()
            .capacity(bytes)
            .when_full(WhenFull::Grow)
            .build()?;
        Ok(Self::from(ring))
    }

    /// The shared ring (for [`Ring::stats`], or to make buffers from it).
    ///
    /// ```
    /// use allocator_api2::boxed::Box;
    /// let a = ringmem::RingAlloc::new();
    /// let b = Box::new_in(1u64, a.clone());
    /// assert_eq!(a.ring().stats().live_buffers, 1);
    /// drop(b);
    /// assert_eq!(a.ring().stats().live_buffers, 0);
    /// ```
    #[inline]
    pub fn ring(&self) -> &Ring {
        &self.shared.ring
    }

    /// Requests above this many bytes go to the global allocator (shared by all clones).
    ///
    /// ```
    /// assert_eq!(ringmem::RingAlloc::new().heap_threshold(), 256 * 1024);
    /// ```
    #[inline]
    pub fn heap_threshold(&self) -> usize {
        self.shared.threshold.get()
    }

    /// Sends requests above `bytes` bytes to the global allocator, for this handle and
    /// all its clones. `usize::MAX` keeps everything on the ring (under its
    /// [`WhenFull`] policy); 0 sends everything to the heap. Existing allocations are
    /// not moved; a ring allocation that grows past the threshold moves to the heap.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// let a = ringmem::RingAlloc::new();
    /// a.set_heap_threshold(64);
    /// let v: Vec<u8, _> = Vec::with_capacity_in(1000, a.clone());
    /// assert_eq!(a.ring().stats().live_buffers, 0); // it is on the heap
    /// # drop(v);
    /// ```
    #[inline]
    pub fn set_heap_threshold(&self, bytes: usize) {
        self.shared.threshold.set(bytes);
    }

    #[inline]
    fn source(&self) -> Source<'_> {
        Source::new(&self.shared.ring, self.shared.threshold.get())
    }

    /// Allocates a block for `layout` (as [`Allocator::allocate`], callable without
    /// importing the trait, as in ring-alloc).
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let layout = Layout::new::<[u64; 4]>();
    /// let p = a.allocate(layout).unwrap();
    /// assert!(p.len() >= 32);
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { a.deallocate(p.cast(), layout) };
    /// ```
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.source().allocate(layout)
    }

    /// Releases a block (as [`Allocator::deallocate`]); a no-op for zero-size layouts.
    ///
    /// # Safety
    /// - `ptr` was allocated by this allocator (or a clone) for `layout`, or for a
    ///   layout that `layout` fits (allocator-api2's *fit*), and is not used afterwards.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// let a = ringmem::RingAlloc::new();
    /// let p = a.allocate(Layout::new::<u32>()).unwrap();
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { a.deallocate(p.cast(), Layout::new::<u32>()) };
    /// ```
    #[inline]
    pub unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from this function's contract; `RingAlloc` is not `Send`,
        // so this is the ring's thread.
        unsafe { self.source().deallocate(ptr, layout) }
    }
}

impl Default for RingAlloc {
    /// [`RingAlloc::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl From<Ring> for RingAlloc {
    /// Shares an existing ring, with its capacity and [`WhenFull`] policy.
    ///
    /// ```
    /// use ringmem::{Ring, RingAlloc, WhenFull};
    /// let ring = Ring::builder().capacity(4096).when_full(WhenFull::Heap).build().unwrap();
    /// let a = RingAlloc::from(ring);
    /// assert_eq!(a.ring().when_full(), WhenFull::Heap);
    /// ```
    fn from(ring: Ring) -> Self {
        Self::from_ring(ring, false)
    }
}

impl Clone for RingAlloc {
    /// Another handle to the same ring.
    #[inline]
    fn clone(&self) -> Self {
        RingAlloc {
            shared: Rc::clone(&self.shared),
        }
    }
}

impl PartialEq for RingAlloc {
    /// Whether both handles share one ring.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for RingAlloc {}

impl Hash for RingAlloc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Rc::as_ptr(&self.shared).hash(state);
    }
}

impl fmt::Debug for RingAlloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingAlloc")
            .field("ring", &self.shared.ring)
            .field("heap_threshold", &self.shared.threshold.get())
            .finish()
    }
}

// SAFETY: as for `Ring` (see its impl): blocks stay valid until deallocated, whichever
// clone or thread releases them, and whether or not the ring is still alive; clones
// share the ring, so any clone may release or resize another's allocations.
unsafe impl Allocator for RingAlloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.source().allocate(layout)
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.source().allocate_zeroed(layout)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the `Allocator::deallocate` contract; `RingAlloc` is not `Send`, so
        // this is the ring's thread.
        unsafe { self.source().deallocate(ptr, layout) }
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow` contract.
        unsafe { self.source().grow(ptr, old, new, false) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow_zeroed` contract.
        unsafe { self.source().grow(ptr, old, new, true) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::shrink` contract.
        unsafe { self.source().shrink(ptr, old, new) }
    }
}
