//! The handles: `PoolBox`, `ArenaBox` (unique), `ArenaRc`, `ArenaArc` (shared).
//!
//! Each is one pointer to its slot (`ArenaRc` adds a flag saying which kind of page).
//! Dropping the last handle drops the value and releases the slot into its page's
//! word, also when the value's `Drop` panics (`drop_and_release`); the pool itself is
//! never touched, so handles may outlive it.

use crate::sync::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, MaybeUninit};
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::sync::AtomicU64;

use super::page::{Page, Slot, Word, COUNT_ONE, MAX_COUNT};

/// Releases a slot when dropped: the slot of a value being dropped, so that a panic in
/// the value's `Drop` does not lose it (the panic goes on; the rest of the value is
/// dropped by the unwinding drop glue before the guard runs), and the slot of a value
/// being initialised, unless forgotten once the initialiser has returned (bumpalo's
/// `RewindGuard` is the same idea).
struct ReleaseGuard<T, W: Word>(NonNull<Slot<T, W>>);

impl<T, W: Word> ReleaseGuard<T, W> {
    /// # Safety
    /// - the caller owns `slot` and gives it up to the guard: when the guard drops, the
    ///   slot's value has been dropped or is treated as never initialised, and nothing
    ///   uses the slot again (unless the guard is forgotten).
    #[inline(always)]
    unsafe fn new(slot: NonNull<Slot<T, W>>) -> Self {
        ReleaseGuard(slot)
    }
}

impl<T, W: Word> Drop for ReleaseGuard<T, W> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the guard owns the slot and its value is gone (`ReleaseGuard::new`'s
        // contract), so this is the slot's one release.
        unsafe { release(self.0) };
    }
}

/// Marks `slot` free: into this thread's magazine if it holds the slot's page (a plain
/// `or`, see `magazine.rs`), else into the page word ([`Page::release`]). Decided here,
/// one level above both, so that pages know nothing of magazines.
///
/// # Safety
/// - `slot` belongs to a live page, its value is dropped or was never initialised, and
///   no handle will use it again (each allocation is released exactly once).
#[inline(always)]
unsafe fn release<T, W: Word>(slot: NonNull<Slot<T, W>>) {
    // SAFETY: forwarded from the caller.
    let (page, idx) = unsafe { Page::of(slot) };
    // SAFETY: `W::ATOMIC` pages are `Page<T, AtomicU64>`; the slot is released (its
    // value gone) and the caller gives it up.
    #[cfg(feature = "std")]
    if W::ATOMIC && unsafe { super::magazine::keep(page.cast(), 1u64 << idx) } {
        return;
    }
    // SAFETY: the page is live and `idx < SLOTS` (`Page::of`); the slot's value is gone
    // and the caller gives it up.
    unsafe { Page::release(page, idx) };
}

/// Drops the value of `slot`, then releases the slot, even if the value's `Drop` panics
/// (the panic then goes on).
///
/// # Safety
/// - the caller owns `slot` and its initialised value, gives both up, and nothing uses
///   either again.
#[inline(always)]
unsafe fn drop_and_release<T, W: Word>(slot: NonNull<Slot<T, W>>) {
    // SAFETY: the slot is ours (caller); its value is dropped below before the guard
    // releases it, during a panic of that drop too.
    let _release = unsafe { ReleaseGuard::new(slot) };
    // SAFETY: the value is initialised and ours (caller), and dropped once, here.
    unsafe { ptr::drop_in_place(Slot::value_ptr(slot)) };
}

/// Runs `init` on the uninitialised value of `slot`. If it panics, or returns a
/// reference other than the one it was given, the slot is released without dropping
/// anything and the panic goes on.
///
/// # Safety
/// - `slot` was just taken from a heap: its value is uninitialised and nothing else
///   refers to it.
#[inline(always)]
pub(crate) unsafe fn init_with<T, W: Word, F>(slot: NonNull<Slot<T, W>>, init: F)
where
    F: FnOnce(&mut MaybeUninit<T>) -> &T,
{
    // If the guard drops, `init` panicked: the value is treated as never initialised (a
    // value the initialiser wrote is leaked, not dropped). Once `init` has returned, the
    // guard is forgotten and the handle takes the slot.
    // SAFETY: the slot is ours (caller), and nothing else knows it.
    let rollback = unsafe { ReleaseGuard::new(slot) };
    let ptr = Slot::value_ptr(slot);
    // SAFETY: the slot is ours alone (caller) and its memory is valid for a `T`;
    // `MaybeUninit<T>` has `T`'s layout and needs no initialisation.
    let uninit = unsafe { &mut *ptr.cast::<MaybeUninit<T>>() };
    let returned: *const T = init(uninit);
    // Only a reference to this very slot proves the slot was initialised: safe code can
    // make one only through `MaybeUninit::write`, no other object lives at its address.
    assert!(
        ptr::eq(returned, ptr),
        "the initialiser must return the reference it was given ({ptr:p}), not {returned:p}"
    );
    mem::forget(rollback);
}

/// A value in a [`Pool`](super::Pool), owned like a `Box`: unique and mutable.
///
/// Dropping it drops the value and gives the slot back to the pool, in a couple of plain
/// instructions (no atomics: a `PoolBox` never leaves its thread). It may outlive its
/// pool.
///
/// ```
/// use ringmem::slab::{Pool, PoolBox};
///
/// let pool = Pool::new();
/// let mut name: PoolBox<String> = pool.alloc(String::from("ring"));
/// name.push_str("mem");
/// assert_eq!(*name, "ringmem");
/// ```
///
/// It stays on its thread:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// let pool = ringmem::slab::Pool::new();
/// send(pool.alloc(1u32));
/// ```
///
/// and it is unique:
///
/// ```compile_fail
/// let pool = ringmem::slab::Pool::new();
/// let a = pool.alloc(1u32);
/// let b: ringmem::slab::PoolBox<u32> = a.clone();
/// drop((a, b));
/// ```
pub struct PoolBox<T> {
    slot: NonNull<Slot<T, Cell<u64>>>,
    /// Owns a `T`; `!Send` and `!Sync` come from the raw pointer.
    _owns: PhantomData<T>,
}

/// A value in an [`Arena`](super::Arena) or a [`SharedArena`](super::SharedArena), owned
/// like a `Box`: unique and mutable, and it may be dropped on any thread (one atomic
/// read-modify-write gives the slot back, or a plain `or` into the thread's magazine if
/// that holds the slot's page). It may outlive its arena.
///
/// ```
/// use ringmem::slab::{Arena, ArenaBox};
///
/// let arena = Arena::new();
/// let mut v: ArenaBox<Vec<u8>> = arena.alloc(Vec::new());
/// v.push(1);
/// let t = std::thread::spawn(move || v.len()); // dropped on the other thread
/// assert_eq!(t.join().unwrap(), 1);
/// ```
///
/// `Send` only when `T` is:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// let arena = ringmem::slab::SharedArena::new();
/// send(arena.alloc(std::rc::Rc::new(1u32)));
/// ```
///
/// and unique:
///
/// ```compile_fail
/// let arena = ringmem::slab::Arena::new();
/// let a = arena.alloc(1u32);
/// let b: ringmem::slab::ArenaBox<u32> = a.clone();
/// drop((a, b));
/// ```
pub struct ArenaBox<T> {
    slot: NonNull<Slot<T, AtomicU64>>,
    _owns: PhantomData<T>,
}

// SAFETY: an `ArenaBox<T>` owns its `T` like a `Box<T>`; releasing the slot is an atomic
// operation on the page word, valid from any thread, and the page outlives the handle.
unsafe impl<T: Send> Send for ArenaBox<T> {}
// SAFETY: `&ArenaBox<T>` only gives `&T`.
unsafe impl<T: Sync> Sync for ArenaBox<T> {}

/// A value shared like an `Rc`, on one thread: cloning bumps a count in the slot, the
/// last drop drops the value and gives the slot back.
///
/// Made by `alloc_rc` on any of the three pools. It may outlive its pool.
///
/// ```
/// use ringmem::slab::{ArenaRc, Pool};
///
/// let pool = Pool::new();
/// let a: ArenaRc<u32> = pool.alloc_rc(5);
/// let b = a.clone();
/// assert_eq!(*a + *b, 10);
/// drop(a);
/// assert_eq!(<(usize, usize)>::from(pool.stats()), (1, 62)); // `b` still holds the slot
/// drop(b);
/// assert_eq!(<(usize, usize)>::from(pool.stats()), (0, 63));
/// ```
///
/// It stays on its thread:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// let arena = ringmem::slab::SharedArena::new();
/// send(arena.alloc_rc(1u32));
/// ```
pub struct ArenaRc<T> {
    value: NonNull<T>,
    /// The slot is a `Slot<T, AtomicU64>` (arena page) rather than a `Slot<T, Cell<u64>>`.
    atomic_page: bool,
    /// Owns a share of a `T`; `!Send`/`!Sync` like `Rc`.
    _owns: PhantomData<(T, *const ())>,
}

/// A value shared like an `Arc`, across threads: cloning is one atomic add, the last
/// drop (on any thread) drops the value and gives the slot back.
///
/// Made by `alloc_arc` on [`Arena`](super::Arena) and
/// [`SharedArena`](super::SharedArena). It may outlive its arena. Like `Arc`, it is
/// `Send` and `Sync` only when `T` is `Send + Sync`.
///
/// ```
/// use ringmem::slab::{ArenaArc, SharedArena};
///
/// let arena = SharedArena::new();
/// let a: ArenaArc<String> = arena.alloc_arc("shared".to_string());
/// let b = a.clone();
/// let t = std::thread::spawn(move || b.len());
/// assert_eq!(t.join().unwrap(), a.len());
/// ```
///
/// A `Send` but `!Sync` value cannot be shared across threads through it:
///
/// ```compile_fail
/// fn send<S: Send>(_: S) {}
/// let arena = ringmem::slab::Arena::new();
/// send(arena.alloc_arc(std::cell::Cell::new(1u32)));
/// ```
pub struct ArenaArc<T> {
    slot: NonNull<Slot<T, AtomicU64>>,
    _owns: PhantomData<T>,
}

// SAFETY: as `Arc<T>`: clones on several threads give `&T` to each (needs `T: Sync`) and
// whichever drops last drops the `T` (needs `T: Send`); the count and the slot release
// are atomic.
unsafe impl<T: Send + Sync> Send for ArenaArc<T> {}
// SAFETY: as above: `&ArenaArc<T>` can be cloned into an owning handle on another thread.
unsafe impl<T: Send + Sync> Sync for ArenaArc<T> {}

impl<T> PoolBox<T> {
    /// # Safety
    /// - `slot` was taken from a `Pool` heap and its value initialised; the new handle
    ///   owns both.
    #[inline(always)]
    pub(crate) unsafe fn from_slot(slot: NonNull<Slot<T, Cell<u64>>>) -> Self {
        PoolBox {
            slot,
            _owns: PhantomData,
        }
    }
}

impl<T> ArenaBox<T> {
    /// # Safety
    /// - `slot` was taken from an arena heap and its value initialised; the new handle
    ///   owns both.
    #[inline(always)]
    pub(crate) unsafe fn from_slot(slot: NonNull<Slot<T, AtomicU64>>) -> Self {
        ArenaBox {
            slot,
            _owns: PhantomData,
        }
    }
}

impl<T> ArenaRc<T> {
    /// # Safety
    /// - `slot` was taken from a heap and its value initialised; the new handle owns
    ///   both, and its count is 0.
    #[inline(always)]
    pub(crate) unsafe fn from_slot<W: Word>(slot: NonNull<Slot<T, W>>) -> Self {
        // SAFETY: the page is live while we own the slot.
        let meta = unsafe { Slot::meta(slot) };
        debug_assert!(meta.read() < COUNT_ONE, "fresh slot {slot:p} has a count");
        meta.write(meta.read() + COUNT_ONE);
        ArenaRc {
            // SAFETY: slots are never null.
            value: unsafe { NonNull::new_unchecked(Slot::value_ptr(slot)) },
            atomic_page: W::ATOMIC,
            _owns: PhantomData,
        }
    }

    /// Runs `f` with this handle's slot, typed by its kind of page.
    #[inline(always)]
    fn with_slot<R>(
        &self,
        local: impl FnOnce(NonNull<Slot<T, Cell<u64>>>) -> R,
        atomic: impl FnOnce(NonNull<Slot<T, AtomicU64>>) -> R,
    ) -> R {
        // The value is at offset 0 of its slot, so the value's pointer is the slot's.
        if self.atomic_page {
            atomic(self.value.cast())
        } else {
            local(self.value.cast())
        }
    }

    /// How many `ArenaRc`s share this value.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let a = pool.alloc_rc('x');
    /// let b = a.clone();
    /// assert_eq!(ringmem::slab::ArenaRc::strong_count(&b), 2);
    /// ```
    pub fn strong_count(this: &Self) -> usize {
        let count = |m: u64| (m / COUNT_ONE) as usize;
        this.with_slot(
            // SAFETY: the handle keeps its page alive.
            |s| count(unsafe { Slot::meta(s) }.read()),
            // SAFETY: as above.
            |s| count(unsafe { Slot::meta(s) }.read()),
        )
    }

    /// Whether two handles share one value.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let a = pool.alloc_rc(1);
    /// assert!(ringmem::slab::ArenaRc::ptr_eq(&a, &a.clone()));
    /// assert!(!ringmem::slab::ArenaRc::ptr_eq(&a, &pool.alloc_rc(1)));
    /// ```
    pub fn ptr_eq(this: &Self, other: &Self) -> bool {
        this.value == other.value
    }
}

impl<T> ArenaArc<T> {
    /// # Safety
    /// - `slot` was taken from an arena heap and its value initialised; the new handle
    ///   owns both, and its count is 0.
    #[inline(always)]
    pub(crate) unsafe fn from_slot(slot: NonNull<Slot<T, AtomicU64>>) -> Self {
        // SAFETY: the page is live while we own the slot.
        let meta = unsafe { Slot::meta(slot) };
        debug_assert!(meta.read() < COUNT_ONE, "fresh slot {slot:p} has a count");
        // No other thread knows the slot yet: a plain store, published by whatever
        // sends the handle.
        meta.write(meta.read() + COUNT_ONE);
        ArenaArc {
            slot,
            _owns: PhantomData,
        }
    }

    /// How many `ArenaArc`s share this value (a snapshot, like `Arc::strong_count`).
    ///
    /// ```
    /// let arena = ringmem::slab::Arena::new();
    /// let a = arena.alloc_arc(1u8);
    /// let b = a.clone();
    /// assert_eq!(ringmem::slab::ArenaArc::strong_count(&b), 2);
    /// ```
    pub fn strong_count(this: &Self) -> usize {
        // SAFETY: the handle keeps its page alive.
        (unsafe { Slot::meta(this.slot) }.read() / COUNT_ONE) as usize
    }

    /// Whether two handles share one value.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::new();
    /// let a = arena.alloc_arc(1u8);
    /// assert!(ringmem::slab::ArenaArc::ptr_eq(&a, &a.clone()));
    /// ```
    pub fn ptr_eq(this: &Self, other: &Self) -> bool {
        this.slot == other.slot
    }
}

impl<T> Deref for PoolBox<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the handle owns an initialised value, alive as long as the handle.
        unsafe { &*Slot::value_ptr(self.slot) }
    }
}

impl<T> DerefMut for PoolBox<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`, and the handle is unique, so `&mut self` is exclusive.
        unsafe { &mut *Slot::value_ptr(self.slot) }
    }
}

impl<T> Deref for ArenaBox<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the handle owns an initialised value, alive as long as the handle.
        unsafe { &*Slot::value_ptr(self.slot) }
    }
}

impl<T> DerefMut for ArenaBox<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`, and the handle is unique, so `&mut self` is exclusive.
        unsafe { &mut *Slot::value_ptr(self.slot) }
    }
}

impl<T> Deref for ArenaRc<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the value lives while any handle does; handles only share it.
        unsafe { self.value.as_ref() }
    }
}

impl<T> Deref for ArenaArc<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the value lives while any handle does; handles only share it.
        unsafe { &*Slot::value_ptr(self.slot) }
    }
}

impl<T> Drop for PoolBox<T> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the handle owns the slot and its initialised value and is going away:
        // the value is dropped once and the slot released once, here.
        unsafe { drop_and_release(self.slot) };
    }
}

impl<T> Drop for ArenaBox<T> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the handle owns the slot and its initialised value and is going away:
        // the value is dropped once and the slot released once, here.
        unsafe { drop_and_release(self.slot) };
    }
}

/// Drops one single-thread reference to `slot`'s value; the last one drops the value and
/// releases the slot.
///
/// # Safety
/// - the caller holds one reference counted in `slot`'s `meta`, all the others live on
///   this thread, and the caller gives its reference up.
#[inline(always)]
unsafe fn rc_release<T, W: Word>(slot: NonNull<Slot<T, W>>) {
    // SAFETY: our reference keeps the page alive until the release below.
    let meta = unsafe { Slot::meta(slot) };
    let m = meta.read();
    debug_assert!(m >= COUNT_ONE, "ArenaRc {slot:p} dropped with count 0");
    // Every reference is on this thread (`ArenaRc` is `!Send`): load and store suffice.
    meta.write(m - COUNT_ONE);
    if m < 2 * COUNT_ONE {
        // SAFETY: this was the last reference: the value is dropped once and the slot
        // released once.
        unsafe { drop_and_release(slot) };
    }
}

impl<T> Drop for ArenaRc<T> {
    #[inline]
    fn drop(&mut self) {
        self.with_slot(
            // SAFETY: this handle holds one reference; `ArenaRc` is `!Send`, so all
            // references are on this thread.
            |s| unsafe { rc_release(s) },
            // SAFETY: as above.
            |s| unsafe { rc_release(s) },
        )
    }
}

impl<T> Drop for ArenaArc<T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this handle holds one reference, so the page is alive.
        let meta = unsafe { Slot::meta(self.slot) };
        // Release, paired with the last owner's Acquire load below (`meta.acquire()`).
        let old = meta.sub_release(COUNT_ONE);
        debug_assert!(
            old >= COUNT_ONE,
            "ArenaArc {:p} dropped with count 0",
            self.slot
        );
        if old < 2 * COUNT_ONE {
            // Sees every other owner's use of the value before we drop it.
            meta.acquire();
            // SAFETY: this was the last reference: the value is dropped once and the
            // slot released once.
            unsafe { drop_and_release(self.slot) };
        }
    }
}

impl<T> Clone for ArenaRc<T> {
    /// Another handle to the same value.
    ///
    /// ```
    /// let pool = ringmem::slab::Pool::new();
    /// let a = pool.alloc_rc(3);
    /// assert_eq!(*a.clone(), 3);
    /// ```
    #[inline]
    fn clone(&self) -> Self {
        fn bump<W: Word>(meta: &W) {
            let m = meta.read();
            assert!(m < MAX_COUNT, "ArenaRc count overflow");
            meta.write(m + COUNT_ONE);
        }
        self.with_slot(
            // SAFETY: this handle keeps the page alive.
            |s| bump(unsafe { Slot::meta(s) }),
            // SAFETY: as above.
            |s| bump(unsafe { Slot::meta(s) }),
        );
        ArenaRc {
            value: self.value,
            atomic_page: self.atomic_page,
            _owns: PhantomData,
        }
    }
}

impl<T> Clone for ArenaArc<T> {
    /// Another handle to the same value: one atomic add.
    ///
    /// ```
    /// let arena = ringmem::slab::SharedArena::new();
    /// let a = arena.alloc_arc(3);
    /// assert_eq!(*a.clone(), 3);
    /// ```
    #[inline]
    fn clone(&self) -> Self {
        // SAFETY: this handle keeps the page alive.
        let meta = unsafe { Slot::meta(self.slot) };
        let old = meta.add_relaxed(COUNT_ONE);
        if old >= MAX_COUNT {
            // Undo and refuse, rather than let the count reach the index bits.
            meta.sub_release(COUNT_ONE);
            panic!("ArenaArc count overflow");
        }
        ArenaArc {
            slot: self.slot,
            _owns: PhantomData,
        }
    }
}

macro_rules! fmt_impls {
    ($($Handle:ident),*) => {$(
        impl<T: fmt::Debug> fmt::Debug for $Handle<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&**self, f)
            }
        }
        impl<T: fmt::Display> fmt::Display for $Handle<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&**self, f)
            }
        }
        impl<T> fmt::Pointer for $Handle<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Pointer::fmt(&(&**self as *const T), f)
            }
        }
        impl<T> AsRef<T> for $Handle<T> {
            fn as_ref(&self) -> &T {
                self
            }
        }
        impl<T> core::borrow::Borrow<T> for $Handle<T> {
            fn borrow(&self) -> &T {
                self
            }
        }
    )*};
}

fmt_impls!(PoolBox, ArenaBox, ArenaRc, ArenaArc);
