//! The one place that names atomics, cells, locks, thread-locals and loom.
//!
//! Normal builds re-export `core`'s atomics; `--cfg loom` builds re-export loom's, so
//! the code the loom models check is the code that ships. The same goes for the locks
//! of the waiters, the cell that a lock guards ([`CheckedCell`]), process-wide statics
//! ([`global!`](crate::sync::global)), thread-locals
//! ([`thread_local!`](crate::sync::thread_local), with loom's thread ends), a yield
//! inside spin loops ([`model_yield`]) and the tracked heap (`heap`, under loom). `Cell`, `RefCell` and `UnsafeCell` are re-exported from here too:
//! they only ever hold state of the thread that owns a ring or a pool, so loom has
//! nothing to check in them, but every cell still enters through this door. No other
//! module names `loom`. The raw system call lives here too: `membarrier` for the
//! asymmetric barrier ([`barrier`]).
#![allow(unused_imports)]

pub(crate) use core::cell::{Cell, RefCell, UnsafeCell};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(real_std)]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(all(feature = "std", loom))]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

/// Parking one blocked thread: `std`'s, or loom's under `cfg(loom)`, so the models
/// check the waiters' own wake-ups. A waiter parks until the release that makes room in
/// its ring unparks it by its handle, and nobody else does (`ring/wait.rs`).
#[cfg(feature = "std")]
pub(crate) mod park {
    #[cfg(not(loom))]
    pub(crate) use std::thread::{current, park, Thread};

    #[cfg(loom)]
    pub(crate) use loom::thread::{current, park, Thread};

    /// Parks for at most `left`. Under loom, whose models wait without a deadline
    /// (loom has no clock), as [`park`] does.
    pub(crate) fn park_timeout(left: std::time::Duration) {
        #[cfg(not(loom))]
        std::thread::park_timeout(left);
        #[cfg(loom)]
        {
            let _ = left;
            park();
        }
    }
}

/// The heap that loom tracks, so a model fails when a block is leaked or freed twice
/// (`raw.rs` is its only user).
#[cfg(loom)]
pub(crate) use loom::alloc as heap;

/// A process-wide `static`: a plain one, or loom's lazily built one (fresh for each
/// execution of a model) under `cfg(loom)`. The initialiser must be a constant
/// expression outside loom.
macro_rules! global {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(loom))]
        $(#[$attr])*
        static $name: $ty = $init;
        #[cfg(loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
}
pub(crate) use global;

/// Declares thread-locals: `std::thread_local!`, or under `cfg(loom)` keys of
/// `local` whose values are made per loom thread, so that the models check the shipped
/// code that uses them. Only the `const { .. }` form, whose values the sites rely on
/// being there without a check of the key's state; only `with` and `try_with` on the
/// keys (loom's keys have no more).
#[cfg(feature = "std")]
macro_rules! door_thread_local {
    ($($(#[$attr:meta])* $vis:vis static $name:ident: $ty:ty = const { $init:expr };)+) => {
        $(
            #[cfg(not(loom))]
            std::thread_local! {
                $(#[$attr])* $vis static $name: $ty = const { $init };
            }
            #[cfg(loom)]
            $(#[$attr])*
            $vis static $name: $crate::sync::local::LocalKey<$ty> =
                $crate::sync::local::LocalKey::new(|| $init);
        )+
    };
}
// Under another name, which the prelude's `thread_local!` would make ambiguous.
#[cfg(feature = "std")]
pub(crate) use door_thread_local as thread_local;

/// The thread-locals of [`thread_local!`](crate::sync::thread_local) under loom.
///
/// `loom::thread_local!` alone would not do: when a loom thread ends, loom takes every
/// one of its thread-locals out before it drops the first, so a destructor cannot reach
/// another thread-local. `std` keeps a `const` thread-local without a destructor usable
/// until the thread is gone, and the sites rely on it: the magazine's and
/// `OneRingAlloc`'s exit hooks empty state held in such a thread-local. So every value
/// of a thread lives in one [`Locals`] (a loom thread-local, dropped when the loom thread
/// ends), and its drop runs the values' destructors as `std` does: latest first, each
/// key refusing access from its destructor on, the others still there.
///
/// Reaching the `Locals` of a thread whose loom thread-locals are being dropped cannot go
/// through loom (nor through `loom::thread::current`, itself a loom thread-local). Each
/// loom thread runs on a stack of its own, so a dropping `Locals` leaves the address of a
/// local of its `drop` in [`TEARDOWN`], and an access from a destructor it runs finds it
/// as the nearest entry above its own stack address (stacks grow down on the targets the
/// models run on, so a callee's locals lie below): every address between the two lies
/// on the same thread's stack, where no other thread's entry can be. That only holds
/// for accesses from the destructors a `Locals` runs, which are the only ones during
/// teardown (the crate has no other loom thread-local with a destructor).
#[cfg(loom)]
pub(crate) mod local {
    use core::ptr::NonNull;
    use std::any::Any;
    use std::boxed::Box;
    use std::cell::RefCell;
    use std::sync::Mutex;
    use std::vec::Vec;

    /// A key of [`thread_local!`](crate::sync::thread_local): `init` makes a thread's
    /// value at its first access.
    pub(crate) struct LocalKey<T: 'static> {
        init: fn() -> T,
    }

    /// A key whose destructor has begun on this thread (`std::thread::AccessError`).
    #[derive(Debug)]
    pub(crate) struct AccessError;

    impl<T: 'static> LocalKey<T> {
        /// A key whose values `init` makes.
        pub(crate) const fn new(init: fn() -> T) -> Self {
            LocalKey { init }
        }

        /// `std::thread::LocalKey::with`: panics once the value's destructor has begun.
        pub(crate) fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
            self.try_with(f)
                .expect("a thread-local used during or after its destructor")
        }

        /// `std::thread::LocalKey::try_with`.
        pub(crate) fn try_with<R>(
            &'static self,
            f: impl FnOnce(&T) -> R,
        ) -> Result<R, AccessError> {
            let locals = current().ok_or(AccessError)?;
            // SAFETY: `current` returns the `Values` of this thread, alive until its
            // `Locals` is done dropping, which is after every access on this thread.
            let value = unsafe { locals.as_ref() }.get_or_init(self)?;
            // SAFETY: a value stays in its box, where it was made, until its destructor
            // runs: at this thread's end, after this call (which runs on the thread), or
            // never for a type without one; only shared references to it are made.
            Ok(f(unsafe { value.as_ref() }))
        }
    }

    /// One value of a thread: `None` once its destructor has begun.
    struct Entry {
        key: usize,
        value: Option<Box<dyn Any>>,
        needs_drop: bool,
    }

    /// A thread's values, in the order they were made.
    struct Values(RefCell<Vec<Entry>>);

    impl Values {
        /// This thread's value of `key`, made now if this is its first access.
        fn get_or_init<T: 'static>(
            &self,
            key: &'static LocalKey<T>,
        ) -> Result<NonNull<T>, AccessError> {
            let id = key as *const LocalKey<T> as usize;
            if let Some(entry) = self.0.borrow().iter().find(|e| e.key == id) {
                let value = entry.value.as_ref().ok_or(AccessError)?;
                let value = value.downcast_ref::<T>().expect("one type per key");
                return Ok(NonNull::from(value));
            }
            // Not borrowed while `init` runs, nor while the closure of the access does:
            // both may reach other keys.
            let value: Box<dyn Any> = Box::new((key.init)());
            let at = NonNull::from(value.downcast_ref::<T>().expect("made as a `T`"));
            self.0.borrow_mut().push(Entry {
                key: id,
                value: Some(value),
                needs_drop: core::mem::needs_drop::<T>(),
            });
            Ok(at)
        }

        /// Runs the destructors of the values that have one, latest first; those that
        /// destructors make too (they arm more), until none is left, as `std` does.
        fn run_destructors(&self) {
            loop {
                let next = {
                    let mut values = self.0.borrow_mut();
                    values
                        .iter_mut()
                        .rev()
                        .find(|e| e.needs_drop && e.value.is_some())
                        .and_then(|e| e.value.take())
                };
                // Not borrowed while the destructor runs: it may reach other keys.
                match next {
                    Some(value) => drop(value),
                    None => return,
                }
            }
        }
    }

    /// Owns a thread's [`Values`] (through a pointer, so that the `&mut` of its drop does
    /// not cover the values the destructors reach).
    struct Locals(NonNull<Values>);

    impl Drop for Locals {
        fn drop(&mut self) {
            let marker = 0u8;
            let at = core::hint::black_box(&marker) as *const u8 as usize;
            let values = self.0.as_ptr() as usize;
            teardown().push((at, values));
            // SAFETY: made from a box in `LOCALS`' initialiser and freed below, only.
            unsafe { self.0.as_ref() }.run_destructors();
            teardown().retain(|&(_, v)| v != values);
            // SAFETY: leaked from a box in `LOCALS`' initialiser; no access remains
            // (this thread's end, the destructors are done).
            drop(unsafe { Box::from_raw(self.0.as_ptr()) });
        }
    }

    loom::thread_local! {
        // Leaked here, freed by `Locals::drop` (`Box::from_raw`).
        static LOCALS: Locals =
            Locals(NonNull::from(Box::leak(Box::new(Values(RefCell::new(Vec::new()))))));
    }

    /// The dropping `Locals`: the address of a local of their `drop`, and their values.
    static TEARDOWN: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

    /// [`TEARDOWN`], locked. No loom operation runs while it is held, so no other loom
    /// thread can ask for it meanwhile.
    fn teardown() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
        TEARDOWN.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs this thread's destructors now, as a `std` thread does before its `join`
    /// returns: loom's `join` returns before the thread's loom thread-locals are
    /// dropped, and the model's statics are gone before the main thread's are (see
    /// [`model`](super::model), which calls this at the end of each of its threads).
    #[cfg(test)]
    pub(crate) fn thread_exit() {
        if let Some(values) = current() {
            // SAFETY: as in `LocalKey::try_with`: this thread's values.
            unsafe { values.as_ref() }.run_destructors();
        }
    }

    /// This thread's values: through loom, or while its loom thread-locals are being
    /// dropped, through [`TEARDOWN`] (see the module); `None` after that.
    fn current() -> Option<NonNull<Values>> {
        if let Ok(values) = LOCALS.try_with(|l| l.0) {
            return Some(values);
        }
        let marker = 0u8;
        let here = core::hint::black_box(&marker) as *const u8 as usize;
        let (_, values) = teardown()
            .iter()
            .copied()
            .filter(|&(at, _)| at >= here)
            .min_by_key(|&(at, _)| at)?;
        NonNull::new(values as *mut Values)
    }
}

/// Lets loom run another thread inside a spin loop (a model would otherwise spin for
/// ever); nothing in normal builds, where the loop's own back-off decides.
#[inline(always)]
pub(crate) fn model_yield() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// An `UnsafeCell` shared between threads under a lock of the caller's: `core`'s, or
/// loom's under `cfg(loom)`, so the models check that the lock really gives exclusive
/// access.
pub(crate) struct CheckedCell<T>(
    #[cfg(not(loom))] core::cell::UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> CheckedCell<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: T) -> Self {
        #[cfg(not(loom))]
        return CheckedCell(core::cell::UnsafeCell::new(value));
        #[cfg(loom)]
        return CheckedCell(loom::cell::UnsafeCell::new(value));
    }

    /// Runs `f` on a pointer to the value; the caller holds the lock that makes the
    /// access exclusive.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        return f(self.0.get());
        #[cfg(loom)]
        return self.0.with_mut(f);
    }
}

/// The `Acquire` side of a count that `Release` read-modify-writes bring down, for the
/// thread whose RMW found the last owner (as `Arc`'s drop): an `Acquire` *load* of the
/// word, not `fence(Acquire)`. It reads that RMW's value or a later one, which lies in
/// the release sequence of every `Release` RMW before it, so it synchronises with all of
/// them, as the fence would; ThreadSanitizer, which does not model fences, can check it
/// (`std`'s `Arc` makes the same substitution under TSan). On x86 it is a plain `mov`.
pub(crate) trait AcquireCount {
    /// See the trait.
    fn acquire_count(&self);
}

impl AcquireCount for AtomicU64 {
    #[inline(always)]
    fn acquire_count(&self) {
        self.load(Ordering::Acquire);
    }
}

impl AcquireCount for AtomicUsize {
    #[inline(always)]
    fn acquire_count(&self) {
        self.load(Ordering::Acquire);
    }
}

/// What the crate's own loom models need (`cargo test --lib` under `--cfg loom`): loom's
/// threads, and [`run_model`](model::run_model).
///
/// Their threads, the main one included, run their thread-locals' destructors as they
/// end ([`local::thread_exit`]), as `std` threads do: a `join` then returns after them,
/// and they run while the model's statics (the ring's orphan list) still exist. A model
/// whose threads come from `loom::thread` directly (`tests/`) gets them when loom drops
/// its thread-locals, which may be after the `join`.
#[cfg(all(test, loom))]
pub(crate) mod model {
    /// loom's threads, with a [`spawn`](thread::spawn) that ends as `std`'s does.
    pub(crate) mod thread {
        pub(crate) use loom::thread::*;

        /// `loom::thread::spawn`, running the thread's thread-locals' destructors before
        /// `join` can return.
        pub(crate) fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
            loom::thread::spawn(move || {
                let result = f();
                crate::sync::local::thread_exit();
                result
            })
        }
    }

    /// Runs one model with the preemption bound from `LOOM_MAX_PREEMPTIONS` (2 unless
    /// set) and prints how many interleavings it explored.
    pub(crate) fn run_model(name: &str, f: impl Fn() + Send + Sync + 'static) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        builder.check(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            f();
            crate::sync::local::thread_exit();
        });
        std::println!(
            "loom model {name}: {} interleavings (preemption bound {:?})",
            runs.load(Ordering::Relaxed),
            builder.preemption_bound
        );
    }
}

/// The run flag of a helper thread that works while work comes and stops once none has
/// (a `ReadPool`'s sweeper, `io::pool::sweep`), without missing work that comes as it
/// stops. Work is counted under locks the helper also takes to look at it:
///
/// - who brings work counts it under its lock and, under that lock, asks
///   [`stopped`](Self::stopped); if so, after letting the lock go, [`start`](Self::start)
///   says whether it is the one to start a helper;
/// - the helper, finding no work, calls [`stop`](Self::stop), which lowers the flag and
///   then looks at the counts under their locks: work counted before its look it sees,
///   and goes on (unless a starter raised the flag first); work counted after reads the
///   flag lowered (the lock orders the two), and starts a helper. So after work comes,
///   exactly one helper runs (the loom model `a_helper_that_stops_misses_no_work`).
///
/// Relaxed throughout: the locks order what matters, and the swap makes one starter.
#[cfg(any(real_std, all(test, loom)))]
pub(crate) struct RunFlag(AtomicBool);

#[cfg(any(real_std, all(test, loom)))]
impl RunFlag {
    /// A flag that says "stopped".
    #[cfg(not(loom))]
    pub(crate) const fn new() -> RunFlag {
        RunFlag(AtomicBool::new(false))
    }

    /// A flag that says "stopped" (loom's atomics are not `const`).
    #[cfg(loom)]
    pub(crate) fn new() -> RunFlag {
        RunFlag(AtomicBool::new(false))
    }

    /// Whether no helper runs; asked under the lock the work was counted under.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
    }

    /// Raises the flag: whether this caller raised it, and so starts the helper.
    pub(crate) fn start(&self) -> bool {
        !self.0.swap(true, Ordering::Relaxed)
    }

    /// Lowers the flag of a helper that cannot be running: in a process just forked,
    /// which has none of its parent's threads.
    #[cfg(not(loom))]
    pub(crate) fn forget(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    /// The helper's stop, `worked_since` looking at the work counts under their locks:
    /// whether the helper goes on (work came, and no starter took its place).
    pub(crate) fn stop(&self, worked_since: impl FnOnce() -> bool) -> bool {
        if switch::on("mutant_look_then_stop") {
            // The known bug: work counted between the look and the store is lost.
            let worked = worked_since();
            self.0.store(false, Ordering::Relaxed);
            return worked && self.start();
        }
        self.0.store(false, Ordering::Relaxed);
        worked_since() && self.start()
    }
}

#[cfg(all(test, loom))]
mod run_flag_tests {
    use super::model::{run_model, thread};
    use super::{Mutex, RunFlag};
    use std::sync::Arc;

    /// A helper stopping while work comes on another thread: afterwards exactly one
    /// helper runs, the old one going on or one the work started.
    #[test]
    fn a_helper_that_stops_misses_no_work() {
        run_model("a_helper_that_stops_misses_no_work", || {
            let shared = Arc::new((Mutex::new(0u64), RunFlag::new()));
            assert!(shared.1.start(), "the helper runs");
            let work = shared.clone();
            let comes = thread::spawn(move || {
                let stopped = {
                    let mut count = work.0.lock().unwrap();
                    *count += 1;
                    work.1.stopped()
                };
                stopped && work.1.start()
            });
            // The helper saw no work at its last look (count 0), and stops.
            let goes_on = shared.1.stop(|| *shared.0.lock().unwrap() != 0);
            let started = comes.join().unwrap();
            assert!(goes_on != started, "goes on: {goes_on}, started: {started}");
            assert!(!shared.1.stopped());
        });
    }
}

/// `r` itself, through a pointer whose origin the compiler cannot see.
///
/// For thread-local state that every call updates (`OneRingAlloc`'s chunk cursor). On
/// x86-64 a thread-local's fields are addressed through the `%fs` segment, and a value
/// stored that way and loaded back at once is forwarded more slowly than one at a plain
/// address. Passing the reference through an empty `asm!` keeps the compiler from
/// folding the accesses back into `%fs`-relative addressing; the `asm!` is pure, so a
/// loop computes it once. (The slab magazine's thread-local, updated on every
/// `SharedArena` allocation, showed no change this way: it is left as it is.)
#[cfg(all(feature = "std", feature = "allocator-api2"))] // only `OneRingAlloc` uses it
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

/// Switches for the loom models, read at run time so that one loom build serves every
/// model: the environment variable `RINGMEM_LOOM` lists them, separated by commas.
/// `refuse_membarrier` runs the fallback of a kernel that refuses `membarrier` (in a
/// native build, `--cfg ringmem_refuse_membarrier`); each `mutant_*` is a known bug
/// that a model must catch (`.ci/run`'s loom-mutant stages, `tests/loom.rs`). Outside
/// loom every switch is off, a constant the compiler folds away: no shipped code reads
/// the environment.
pub(crate) mod switch {
    /// Whether `RINGMEM_LOOM` names `name`.
    #[cfg(loom)]
    pub(crate) fn on(name: &str) -> bool {
        // Not a loom object: the list is the process's, the same in every model.
        static LIST: std::sync::OnceLock<std::string::String> = std::sync::OnceLock::new();
        LIST.get_or_init(|| std::env::var("RINGMEM_LOOM").unwrap_or_default())
            .split(',')
            .any(|s| s.trim() == name)
    }

    /// Off: only loom builds read the switches.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) const fn on(_name: &str) -> bool {
        false
    }

    /// `strong`, or `Relaxed` while the mutant `name` is on: an ordering a loom model
    /// proves needed.
    #[inline(always)]
    pub(crate) fn weakened(name: &str, strong: super::Ordering) -> super::Ordering {
        if on(name) {
            super::Ordering::Relaxed
        } else {
            strong
        }
    }
}

/// The asymmetric store-load barrier: each side stores, then loads what the other side
/// stored (the Dekker pattern), and at least one of the two must see the other's store.
///
/// The frequent side (every buffer release: a header store, then a load of the orphans'
/// word) calls [`light`](barrier::light); the rare side (a producer that starts to wait,
/// a sweep that parks a block) calls [`heavy`](barrier::heavy). On Linux x86-64 the heavy
/// side is `membarrier` (private expedited: every running thread of the process executes
/// a full barrier before it returns), so the light side is only a compiler fence. Where
/// `membarrier` does not exist (other targets, Miri) both sides are `SeqCst` fences; where
/// the kernel refuses it at run time, [`ready`](barrier::ready) says so before the first
/// ring is built and releases fence through the orphans' word (`ring/orphan.rs`). Under
/// loom both sides are `SeqCst` fences, which loom models; the mutant (the loom switch
/// `mutant_no_barrier`, see [`switch`]) drops the release's side, and the models fail.
///
/// `--cfg ringmem_refuse_membarrier` (tests only; under loom the switch
/// `refuse_membarrier`) acts as a kernel that refuses `membarrier`: the light side is a
/// compiler fence and [`ready`](barrier::ready) says `false`, so the releases' fence
/// through the orphans' word is all that closes the window. Under loom that puts the
/// fallback itself in the models.
pub(crate) mod barrier {
    use super::Ordering;

    /// Whether this build calls `membarrier` for the heavy side (the light side is then
    /// a compiler fence).
    pub(crate) const ASYMMETRIC: bool = cfg!(all(
        target_os = "linux",
        target_arch = "x86_64",
        not(miri),
        not(loom)
    ));

    /// `--cfg ringmem_refuse_membarrier` (under loom, the switch `refuse_membarrier`):
    /// as if the kernel refused `membarrier`.
    #[inline(always)]
    fn refused() -> bool {
        cfg!(ringmem_refuse_membarrier) || super::switch::on("refuse_membarrier")
    }

    /// The frequent side: after its store, before its load.
    #[inline(always)]
    pub(crate) fn light() {
        if super::switch::on("mutant_no_barrier") {
            return;
        }
        if ASYMMETRIC || refused() {
            core::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            super::fence(Ordering::SeqCst);
        }
    }

    /// The frequent side where `membarrier` was refused ([`ready`] said `false`): a
    /// full fence, which releases pay once the orphans' word says so. The mutant drops
    /// it too: it is then the release's side of the barrier.
    #[inline(always)]
    pub(crate) fn refused_light() {
        if !super::switch::on("mutant_no_barrier") {
            super::fence(Ordering::SeqCst);
        }
    }

    /// The rare side: after its store, before its load.
    #[cold]
    pub(crate) fn heavy() {
        if refused() || !(ASYMMETRIC && membarrier::expedited()) {
            // No `membarrier` (or refused, in which case releases fence too: `ready`).
            super::fence(Ordering::SeqCst);
        }
    }

    /// Registers this process for `membarrier` (once; later calls return the first
    /// answer). `false` when the kernel refuses it: the light side must then fence.
    pub(crate) fn ready() -> bool {
        !refused() && (!ASYMMETRIC || membarrier::register())
    }

    /// Linux's `membarrier` through a raw system call (no libc dependency).
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
    mod membarrier {
        use core::sync::atomic::{AtomicU8, Ordering};

        const SYS_MEMBARRIER: usize = 324;
        const CMD_PRIVATE_EXPEDITED: usize = 1 << 3;
        const CMD_REGISTER_PRIVATE_EXPEDITED: usize = 1 << 4;

        /// 0: not tried yet, 1: registered, 2: refused.
        static STATE: AtomicU8 = AtomicU8::new(0);

        pub(super) fn register() -> bool {
            // Relaxed: the state only says which call to make; the kernel orders the
            // rest. Two threads that race here both register, which is harmless.
            let mut state = STATE.load(Ordering::Relaxed);
            if state == 0 {
                state = if syscall(SYS_MEMBARRIER, CMD_REGISTER_PRIVATE_EXPEDITED) == 0 {
                    1
                } else {
                    2
                };
                STATE.store(state, Ordering::Relaxed);
            }
            state == 1
        }

        /// A barrier on every running thread of the process; `false` when refused.
        pub(super) fn expedited() -> bool {
            register() && syscall(SYS_MEMBARRIER, CMD_PRIVATE_EXPEDITED) == 0
        }

        /// `membarrier(cmd, flags = 0, cpu_id = 0)`.
        fn syscall(nr: usize, cmd: usize) -> isize {
            // SAFETY: `membarrier` reads and writes no memory of this process.
            unsafe { super::super::raw_syscall(nr, cmd, 0, 0) }
        }
    }

    #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom))))]
    mod membarrier {
        pub(super) fn register() -> bool {
            false
        }

        pub(super) fn expedited() -> bool {
            false
        }
    }
}

/// Bytes of a page where [`discard_pages`] gives pages back (x86-64 Linux's base page).
pub(crate) const PAGE: usize = 4096;

/// Gives the pages `start..start + len` (whole pages: `start` and `len` multiples of
/// [`PAGE`]) back to the system with `madvise(MADV_DONTNEED)`: they stop counting as
/// resident, and read as zeros when next touched. `false` where it does nothing (other
/// targets, Miri, loom), or when the kernel refused.
///
/// # Safety
/// The pages lie inside one allocation of the caller's, and no live data is in them:
/// nothing reads their bytes before writing them again (a free region's inside).
#[allow(unused_variables)] // where it does nothing
pub(crate) unsafe fn discard_pages(start: *mut u8, len: usize) -> bool {
    debug_assert!(
        start as usize % PAGE == 0 && len % PAGE == 0,
        "not whole pages"
    );
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
    {
        const SYS_MADVISE: usize = 28;
        const MADV_DONTNEED: usize = 4;
        // SAFETY: `madvise` only drops the pages' contents, which hold no live data
        // (contract); the asm call clobbers memory, so no value read from them before
        // is assumed after.
        unsafe { raw_syscall(SYS_MADVISE, start as usize, len, MADV_DONTNEED) == 0 }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom))))]
    false
}

/// Bytes of the pages `start..start + len` (whole pages, as for [`discard_pages`]) that
/// are resident, by `mincore`: for a count of pages given back that only counts pages
/// that were there to give. 0 where [`discard_pages`] does nothing, or when the kernel
/// refused.
#[allow(unused_variables)] // where it does nothing
pub(crate) fn resident_bytes(start: *const u8, len: usize) -> usize {
    debug_assert!(
        start as usize % PAGE == 0 && len % PAGE == 0,
        "not whole pages"
    );
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
    {
        const SYS_MINCORE: usize = 27;
        // A byte per page, for this many pages per call.
        let mut flags = [0u8; 256];
        let mut resident = 0;
        for at in (0..len).step_by(flags.len() * PAGE) {
            let pages = ((len - at) / PAGE).min(flags.len());
            // SAFETY: `mincore` writes one byte per page of the range into `flags`, which
            // holds `pages` bytes; it reads no memory of the range.
            let ret = unsafe {
                raw_syscall(
                    SYS_MINCORE,
                    start as usize + at,
                    pages * PAGE,
                    flags.as_mut_ptr() as usize,
                )
            };
            if ret != 0 {
                return 0;
            }
            resident += flags[..pages].iter().filter(|&&f| f & 1 != 0).count() * PAGE;
        }
        resident
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom))))]
    0
}

/// `syscall(nr, a, b, c)` on Linux x86-64, without a libc dependency.
///
/// # Safety
/// The call must read and write only memory that the arguments allow it to, which the
/// caller owns for the call's duration.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
unsafe fn raw_syscall(nr: usize, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: the call's memory accesses are the caller's contract; the kernel clobbers
    // rcx and r11 on `syscall`, declared here.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}
