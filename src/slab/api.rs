//! The allocation methods every pool shares, written once.
//!
//! Each pool provides `fn slot(&self) -> Result<NonNull<Slot<T, W>>, AllocError>`, which
//! takes a free slot (uninitialised, owned by the caller) without calling user code, and
//! `fn slot_or_oom(&self) -> NonNull<Slot<T, W>>`, the same or the out-of-memory handler
//! (its fast path returns a bare pointer, so no `Result` goes through memory); these
//! macros build the public methods on top of them.

/// `alloc`, `try_alloc`, `alloc_with`, `try_alloc_with` returning `$Box`.
macro_rules! box_api {
    ($Pool:ident, $Box:ident) => {
        impl<T> $Pool<T> {
            /// Moves `value` into the pool; aborts through
            /// [`handle_alloc_error`](alloc::alloc::handle_alloc_error) if a new page is
            /// needed and cannot be had.
            ///
            /// ```
            #[doc = concat!("use ringmem::slab::{", stringify!($Pool), ", ", stringify!($Box), "};")]
            #[doc = concat!("let pool = ", stringify!($Pool), "::new();")]
            #[doc = concat!("let n: ", stringify!($Box), "<u32> = pool.alloc(0xff);")]
            /// assert_eq!(*n, 255);
            /// ```
            #[inline]
            pub fn alloc(&self, value: T) -> $Box<T> {
                let slot = self.slot_or_oom();
                // SAFETY: the slot is ours and uninitialised; writing initialises it and
                // the handle takes ownership of both.
                unsafe {
                    core::ptr::write(super::page::Slot::value_ptr(slot), value);
                    $Box::from_slot(slot)
                }
            }

            /// Moves `value` into the pool, or returns [`AllocError`](super::AllocError)
            /// (dropping `value`) if a new page is needed and cannot be had.
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            /// let n = pool.try_alloc(1u8).expect("out of memory");
            /// assert_eq!(*n, 1);
            /// ```
            #[inline]
            pub fn try_alloc(&self, value: T) -> Result<$Box<T>, super::AllocError> {
                let slot = self.slot()?;
                // SAFETY: as in `alloc`.
                unsafe {
                    core::ptr::write(super::page::Slot::value_ptr(slot), value);
                    Ok($Box::from_slot(slot))
                }
            }

            /// Initialises a value in place: `init` gets the slot as
            /// `&mut MaybeUninit<T>` and returns the reference `MaybeUninit::write` gives
            /// back. Nothing is copied through the stack.
            ///
            /// If `init` panics the slot is given back and nothing is dropped.
            ///
            /// # Panics
            ///
            /// If `init` returns a reference other than the one to its argument (then
            /// the value, if written, is leaked, never dropped uninitialised).
            ///
            /// ```
            /// use std::mem::MaybeUninit;
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            /// let big = pool.alloc_with(|slot: &mut MaybeUninit<[u64; 512]>| slot.write([7; 512]));
            /// assert_eq!(big[511], 7);
            /// ```
            #[inline]
            pub fn alloc_with<F>(&self, init: F) -> $Box<T>
            where
                F: FnOnce(&mut core::mem::MaybeUninit<T>) -> &T,
            {
                let slot = self.slot_or_oom();
                // SAFETY: the slot was just taken and is ours; `init_with` returns only
                // once it is initialised, and the handle then owns it.
                unsafe {
                    super::handles::init_with(slot, init);
                    $Box::from_slot(slot)
                }
            }

            /// [`alloc_with`](Self::alloc_with), returning
            /// [`AllocError`](super::AllocError) instead of aborting (`init` is not called
            /// then).
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            /// let s = pool.try_alloc_with(|slot| slot.write(String::from("in place"))).unwrap();
            /// assert_eq!(*s, "in place");
            /// ```
            #[inline]
            pub fn try_alloc_with<F>(&self, init: F) -> Result<$Box<T>, super::AllocError>
            where
                F: FnOnce(&mut core::mem::MaybeUninit<T>) -> &T,
            {
                let slot = self.slot()?;
                // SAFETY: as in `alloc_with`.
                unsafe {
                    super::handles::init_with(slot, init);
                    Ok($Box::from_slot(slot))
                }
            }
        }
    };
}

/// `alloc_$kind`, `try_alloc_$kind`, `alloc_$kind_with`, `try_alloc_$kind_with`
/// returning `$Handle`.
macro_rules! shared_api {
    (
        $Pool:ident,
        $Handle:ident,
        $alloc:ident,
        $try_alloc:ident,
        $alloc_with:ident,
        $try_alloc_with:ident
    ) => {
        impl<T> $Pool<T> {
            #[doc = concat!("Moves `value` into the pool behind a shared [`", stringify!($Handle), "`](super::", stringify!($Handle), ").")]
            ///
            /// Aborts through [`handle_alloc_error`](alloc::alloc::handle_alloc_error)
            /// if a new page is needed and cannot be had.
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            #[doc = concat!("let a = pool.", stringify!($alloc), "(10);")]
            /// let b = a.clone();
            /// assert_eq!(*a + *b, 20);
            /// ```
            #[inline]
            pub fn $alloc(&self, value: T) -> super::$Handle<T> {
                let slot = self.slot_or_oom();
                // SAFETY: the slot is ours and uninitialised; writing initialises it and
                // the handle takes ownership of both, with a count of 1.
                unsafe {
                    core::ptr::write(super::page::Slot::value_ptr(slot), value);
                    super::$Handle::from_slot(slot)
                }
            }

            #[doc = concat!("[`", stringify!($alloc), "`](Self::", stringify!($alloc), "), returning [`AllocError`](super::AllocError) (and dropping `value`) instead of aborting.")]
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            #[doc = concat!("let a = pool.", stringify!($try_alloc), "('x').unwrap();")]
            /// assert_eq!(*a, 'x');
            /// ```
            #[inline]
            pub fn $try_alloc(&self, value: T) -> Result<super::$Handle<T>, super::AllocError> {
                let slot = self.slot()?;
                // SAFETY: as above.
                unsafe {
                    core::ptr::write(super::page::Slot::value_ptr(slot), value);
                    Ok(super::$Handle::from_slot(slot))
                }
            }

            #[doc = concat!("Initialises a value in place behind a shared [`", stringify!($Handle), "`](super::", stringify!($Handle), "); see [`alloc_with`](Self::alloc_with).")]
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            #[doc = concat!("let a = pool.", stringify!($alloc_with), "(|slot| slot.write(5u64));")]
            /// assert_eq!(*a.clone(), 5);
            /// ```
            #[inline]
            pub fn $alloc_with<F>(&self, init: F) -> super::$Handle<T>
            where
                F: FnOnce(&mut core::mem::MaybeUninit<T>) -> &T,
            {
                let slot = self.slot_or_oom();
                // SAFETY: the slot was just taken and is ours; `init_with` returns only
                // once it is initialised, and the handle then owns it.
                unsafe {
                    super::handles::init_with(slot, init);
                    super::$Handle::from_slot(slot)
                }
            }

            #[doc = concat!("[`", stringify!($alloc_with), "`](Self::", stringify!($alloc_with), "), returning [`AllocError`](super::AllocError) instead of aborting (`init` is not called then).")]
            ///
            /// ```
            #[doc = concat!("let pool = ringmem::slab::", stringify!($Pool), "::new();")]
            #[doc = concat!("let a = pool.", stringify!($try_alloc_with), "(|slot| slot.write(5u64)).unwrap();")]
            /// assert_eq!(*a.clone(), 5);
            /// ```
            #[inline]
            pub fn $try_alloc_with<F>(&self, init: F) -> Result<super::$Handle<T>, super::AllocError>
            where
                F: FnOnce(&mut core::mem::MaybeUninit<T>) -> &T,
            {
                let slot = self.slot()?;
                // SAFETY: as in the infallible form above.
                unsafe {
                    super::handles::init_with(slot, init);
                    Ok(super::$Handle::from_slot(slot))
                }
            }
        }
    };
}
