//! Typed pools against `Box` on the system allocator.
//!
//! ```text
//! cargo bench -p ringmem-micro --bench slab
//! ```
//!
//! - `alloc_drop`: allocate one object and drop it at once (the handle's release is
//!   inside the timed loop).
//! - `single_alloc`: `shared_arena`'s own `SingleAlloc` case: allocate one object, its
//!   drop batched outside the timing (`iter_with_large_drop`).
//! - `churn`: 1024 live objects; each iteration replaces one of them (a drop and an
//!   allocation in a pool whose slots are scattered over its pages).
//!
//! `control` writes the object into a preallocated block and allocates nothing: the cost
//! of the loop itself (building the object through `black_box`, handing the handle
//! out), which every row pays.
//!
//! Every competitor runs the same code through the `Competitor` trait. The comparison
//! with the peer crates (shared_arena itself) is in the `bench/` binary.

use std::cell::{Cell, UnsafeCell};
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ringmem::slab::{Arena, Pool, SharedArena};

/// `shared_arena`'s benchmark object: 24 bytes.
#[allow(dead_code)]
#[derive(Clone, Copy)]
struct MyStruct {
    a: Option<usize>,
    b: &'static str,
    c: usize,
}

impl Default for MyStruct {
    fn default() -> Self {
        MyStruct {
            a: None,
            b: "hello",
            c: 90909,
        }
    }
}

/// Something that makes owning handles to `MyStruct`s.
trait Competitor {
    type Handle;
    const NAME: &'static str;
    fn with_capacity(cap: usize) -> Self;
    fn make(&self, value: MyStruct) -> Self::Handle;
}

impl Competitor for Pool<MyStruct> {
    type Handle = ringmem::slab::PoolBox<MyStruct>;
    const NAME: &'static str = "ringmem Pool";
    fn with_capacity(cap: usize) -> Self {
        Pool::with_capacity(cap)
    }
    #[inline]
    fn make(&self, value: MyStruct) -> Self::Handle {
        self.alloc(value)
    }
}

impl Competitor for Arena<MyStruct> {
    type Handle = ringmem::slab::ArenaBox<MyStruct>;
    const NAME: &'static str = "ringmem Arena";
    fn with_capacity(cap: usize) -> Self {
        Arena::with_capacity(cap)
    }
    #[inline]
    fn make(&self, value: MyStruct) -> Self::Handle {
        self.alloc(value)
    }
}

impl Competitor for SharedArena<MyStruct> {
    type Handle = ringmem::slab::ArenaBox<MyStruct>;
    const NAME: &'static str = "ringmem SharedArena";
    fn with_capacity(cap: usize) -> Self {
        SharedArena::with_capacity(cap)
    }
    #[inline]
    fn make(&self, value: MyStruct) -> Self::Handle {
        self.alloc(value)
    }
}

/// The floor every competitor stands on: writes the object into the next slot of one
/// preallocated block and hands out its address; allocates and frees nothing. What a
/// row costs beyond this is allocation.
struct Control {
    slots: Box<[UnsafeCell<MaybeUninit<MyStruct>>]>,
    next: Cell<usize>,
}

impl Competitor for Control {
    type Handle = NonNull<MyStruct>;
    const NAME: &'static str = "control (no allocation)";
    fn with_capacity(cap: usize) -> Self {
        let len = cap.max(1).next_power_of_two();
        Control {
            slots: (0..len)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            next: Cell::new(0),
        }
    }
    #[inline]
    fn make(&self, value: MyStruct) -> Self::Handle {
        let i = self.next.get();
        self.next.set((i + 1) & (self.slots.len() - 1));
        let slot = self.slots[i].get().cast::<MyStruct>();
        // SAFETY: `slot` points into `self.slots`, valid for a `MyStruct`; no reference to
        // it is live (handles are raw pointers nobody reads), and `MyStruct` is `Copy`,
        // so overwriting drops nothing.
        unsafe { slot.write(value) };
        // SAFETY: a pointer into a live boxed slice is not null.
        unsafe { NonNull::new_unchecked(slot) }
    }
}

/// `Box` on the system allocator.
struct SystemBox;

impl Competitor for SystemBox {
    type Handle = Box<MyStruct>;
    const NAME: &'static str = "Box (system allocator)";
    fn with_capacity(_: usize) -> Self {
        SystemBox
    }
    #[inline]
    fn make(&self, value: MyStruct) -> Self::Handle {
        Box::new(value)
    }
}

fn alloc_drop<C: Competitor>(c: &mut Criterion) {
    let pool = C::with_capacity(1024);
    c.benchmark_group("alloc_drop")
        .bench_function(C::NAME, |b| {
            b.iter(|| drop(black_box(pool.make(black_box(MyStruct::default())))))
        });
}

fn single_alloc<C: Competitor>(c: &mut Criterion) {
    let pool = C::with_capacity(1_000_000);
    c.benchmark_group("single_alloc")
        .bench_function(C::NAME, |b| {
            b.iter_with_large_drop(|| pool.make(black_box(MyStruct::default())))
        });
}

fn churn<C: Competitor>(c: &mut Criterion) {
    const LIVE: usize = 1024;
    let pool = C::with_capacity(LIVE);
    let mut live: Vec<C::Handle> = (0..LIVE).map(|_| pool.make(MyStruct::default())).collect();
    // A fixed pseudo-random walk over the live set (xorshift), the same for everyone.
    let mut x: u32 = 0x9e37_79b9;
    c.benchmark_group("churn")
        .bench_with_input(BenchmarkId::new(C::NAME, LIVE), &LIVE, |b, _| {
            b.iter(|| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = x as usize % LIVE;
                live[i] = pool.make(black_box(MyStruct::default()));
            })
        });
}

fn all<C: Competitor>(c: &mut Criterion) {
    alloc_drop::<C>(c);
    single_alloc::<C>(c);
    churn::<C>(c);
}

fn benches(c: &mut Criterion) {
    all::<Pool<MyStruct>>(c);
    all::<Arena<MyStruct>>(c);
    all::<SharedArena<MyStruct>>(c);
    all::<SystemBox>(c);
    all::<Control>(c);
}

criterion_group! {
    name = slab;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(slab);
