//! `OneRingAlloc`: a zero-sized allocator over each thread's own ring, with a chunk per
//! thread for small layouts.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use allocator_api2::alloc::{AllocError, Allocator};

use super::chunk::{self, chunk_of, count_down, is_small, Current, Emptied, Head, CHUNK};
use super::chunk::{CHUNK_LAYOUT, GRAIN, SMALL_MAX};
use super::count::{ChunkCount, Count};
use super::kept::{self, Kept};
use super::{AllocStats, Counts, HeapCounts, Source, DEFAULT_HEAP_THRESHOLD};
use crate::ring::round_up;
use crate::sync::{plain_ref, AtomicUsize, Cell, Mutex, MutexGuard, Ordering};
use crate::tls;

crate::sync::thread_local! {
    /// This thread's heap threshold for `OneRingAlloc`.
    static THRESHOLD: Cell<usize> = const { Cell::new(DEFAULT_HEAP_THRESHOLD) };
    /// What this thread's `OneRingAlloc` requests sent to the heap for their size
    /// (cumulative only: their blocks may be freed on any thread).
    static HEAP: HeapCounts = const { HeapCounts::new(false) };
    /// This thread's current chunk. No destructor, so an access is a plain thread-local
    /// address (no state check) and works until the thread is gone.
    static CURRENT: Local = const {
        Local {
            chunks: Current::new(true),
            exiting: Cell::new(false),
        }
    };
    /// Armed by the first chunk: retires the current chunk when the thread exits.
    static RETIRE_AT_EXIT: RetireAtExit = const { RetireAtExit };
    /// Bytes of another chunk that this thread freed and has not subtracted yet.
    static HELD: Held = const {
        Held {
            chunk: Cell::new(ptr::null_mut()),
            bytes: Cell::new(0),
        }
    };
}

/// [`kept::stripe`] bits of [`KEPT`]: 256 stripes (4 under loom, whose models need more
/// than one but build the statics afresh for each execution).
const STRIPE_BITS: u32 = if cfg!(loom) { 2 } else { 8 };

/// Stripes of [`KEPT`].
const STRIPES: usize = 1 << STRIPE_BITS;

/// Stripes' bits per word of [`Stripes::filled`].
const WORD_BITS: usize = usize::BITS as usize;

/// Regions that serve small layouts, of every thread: shrinks that found no chunk to
/// move to (`kept.rs`). A kept block may be freed on any thread, so each stripe has its
/// own lock, and a look-up takes the one of its block's stripe, only if that stripe
/// lists a block. With 256 stripes and a few dozen kept blocks, most look-ups find
/// their stripe empty, and two threads rarely want one lock.
///
/// Invariants: every block listed in `lists[i]` has its address in stripe `i`
/// ([`kept::stripe`] with [`STRIPE_BITS`]); bit `i % WORD_BITS` of `filled[i /
/// WORD_BITS]` is written only under `lists[i]`'s lock, and is set exactly when that
/// list is not empty, at every unlock.
struct Stripes {
    filled: [AtomicUsize; STRIPES.div_ceil(WORD_BITS)],
    lists: [Mutex<Kept>; STRIPES],
}

impl Stripes {
    /// No kept block.
    #[cfg(not(loom))]
    const fn new() -> Self {
        Stripes {
            filled: [const { AtomicUsize::new(0) }; STRIPES.div_ceil(WORD_BITS)],
            lists: [const { Mutex::new(Kept::new()) }; STRIPES],
        }
    }

    /// No kept block (loom's atomics and locks are not made in constants).
    #[cfg(loom)]
    fn new() -> Self {
        Stripes {
            filled: core::array::from_fn(|_| AtomicUsize::new(0)),
            lists: core::array::from_fn(|_| Mutex::new(Kept::new())),
        }
    }

    /// The stripe of the block at `p`: its list, its word of `filled` and its bit there.
    #[inline(always)]
    fn of(&self, p: NonNull<u8>) -> Stripe<'_> {
        let i = kept::stripe(p.as_ptr() as usize, STRIPE_BITS);
        Stripe {
            list: &self.lists[i],
            filled: &self.filled[i / WORD_BITS],
            bit: 1 << (i % WORD_BITS),
        }
    }
}

/// One stripe of [`KEPT`] ([`Stripes::of`]).
struct Stripe<'a> {
    list: &'a Mutex<Kept>,
    filled: &'a AtomicUsize,
    bit: usize,
}

impl Stripe<'_> {
    /// The stripe's list, locked.
    fn lock(&self) -> MutexGuard<'_, Kept> {
        // The list is consistent at every unlock: a panic elsewhere cannot break it.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the stripe lists any block, from its bit. Relaxed: only a kept block's
    /// holder needs a `true` here, and it gets one. It learned of the block after
    /// [`list_kept`] listed it (on the same thread, or through a hand-over that
    /// synchronises), so its load reads that call's `fetch_or` or a later write of the
    /// word: other stripes' read-modify-writes, which keep this bit, or this stripe's,
    /// made under its lock, which clear the bit only once the list is empty, so not
    /// before the holder takes its own block off. Any other caller asks about a block
    /// that is not kept (a chunk's) and gets `false` whichever value it reads: from a
    /// clear bit, or from the list, under its lock.
    #[inline(always)]
    fn maybe_lists(&self) -> bool {
        self.filled.load(Ordering::Relaxed) & self.bit != 0
    }
}

crate::sync::global! {
    /// The kept blocks of `OneRingAlloc`, striped by address.
    static KEPT: Stripes = Stripes::new();
}

/// Whether the small block at `p` is kept (a region), and with `remove` takes it off
/// the list: one load, and the lock of `p`'s stripe only if that stripe lists a block.
#[inline(always)]
fn is_kept(p: NonNull<u8>, remove: bool) -> bool {
    let stripe = KEPT.of(p);
    stripe.maybe_lists() && is_kept_locked(&stripe, p, remove)
}

/// The rest of [`is_kept`], under the stripe's lock.
#[cold]
#[inline(never)]
fn is_kept_locked(stripe: &Stripe<'_>, p: NonNull<u8>, remove: bool) -> bool {
    let list = stripe.lock();
    if !remove {
        return list.contains(p);
    }
    let found = list.remove(p);
    if found && list.is_empty() {
        // Relaxed, under the stripe's lock: the bit follows the list in the order of the
        // lock, and a read-modify-write keeps the other stripes' bits of the word. A
        // reader that still sees it set takes the lock and finds the list empty.
        stripe.filled.fetch_and(!stripe.bit, Ordering::Relaxed);
    }
    found
}

/// The head of a chunk of `OneRingAlloc`: its count may be brought down on any thread.
type Chunk = Head<ChunkCount>;

/// Freed bytes of one chunk (not this thread's current one) that this thread has not yet
/// subtracted from the chunk's count. Blocks of a queue are freed in the order they were
/// made, so consecutive frees mostly fall in one chunk: they add up here, and the chunk
/// gets one atomic subtraction instead of one per block. The bytes are given back when
/// a free falls in another chunk, as soon as they are all the chunk still counts (so a
/// chunk is released with its last block, as before, unless other threads hold some of
/// its bytes too), at [`OneRingAlloc::flush`], and when the thread exits. So a thread
/// delays at most one chunk's release (when another thread frees some of its blocks, or
/// retires it, after this thread's last free of it), until it frees a block elsewhere,
/// flushes or exits.
///
/// Invariants: `bytes` is 0 exactly when `chunk` is null; otherwise `chunk` is live and
/// its count still includes `bytes`, so it cannot be released before they are given
/// back.
struct Held {
    chunk: Cell<*mut Chunk>,
    bytes: Cell<usize>,
}

impl Held {
    /// Adds `bytes` freed of the small block at `p` (in a live chunk other than this
    /// thread's current one). Returns the bytes to subtract now, and from which chunk:
    /// those of `p`'s chunk if they are all it counts (or if this thread's exit would not
    /// give them back), else those held of the chunk this free moves away from.
    ///
    /// # Safety
    /// - `p` is a live small block of a chunk, `bytes` of which (handed out, and not yet
    ///   counted as freed) the caller gives up.
    #[inline(always)]
    unsafe fn add(&self, p: *mut u8, bytes: usize) -> Option<(*mut Chunk, usize)> {
        let held = self.chunk.get();
        // A chunk spans one `CHUNK`-aligned stretch, and the held one is live, so no
        // other chunk can sit at its address.
        if self.holds_chunk_of(p) {
            let sum = self.bytes.get() + bytes;
            // SAFETY: the held chunk is live (invariant).
            if unsafe { (*held).count.is_only(sum) } {
                self.take();
                return Some((held, sum));
            }
            self.bytes.set(sum);
            return None;
        }
        let chunk: *mut Chunk = chunk_of(p);
        // Held bytes need the thread's exit to give them back.
        // SAFETY: `p` is in a live chunk (contract), so its head is live.
        if unsafe { (*chunk).count.is_only(bytes) } || !with_current(Local::exit_armed) {
            return Some((chunk, bytes));
        }
        let old = (held, self.bytes.replace(bytes));
        self.chunk.set(chunk);
        (!held.is_null()).then_some(old)
    }

    /// Whether the small block at `p` lies in the chunk whose bytes this thread holds;
    /// then it is that chunk's block, not a kept one. The held chunk is live
    /// (invariant), and a live chunk's region covers its `CHUNK`-aligned stretch but for
    /// the next region's header (`chunk.rs`), so no other region (and no kept block,
    /// which is one) has its data start there.
    #[inline(always)]
    fn holds_chunk_of(&self, p: *mut u8) -> bool {
        // A null `chunk` matches no block: none lies in the first `CHUNK` bytes.
        p as usize & !(CHUNK - 1) == self.chunk.get() as usize
    }

    /// Takes everything held: the chunk and its bytes, if any.
    fn take(&self) -> Option<(*mut Chunk, usize)> {
        let chunk = self.chunk.replace(ptr::null_mut());
        let bytes = self.bytes.replace(0);
        (!chunk.is_null()).then_some((chunk, bytes))
    }
}

/// Subtracts `bytes` from `chunk`'s count, and releases the chunk if that emptied it
/// after its retirement.
///
/// # Safety
/// - `chunk` is live and `bytes` of it (handed out, not yet counted as freed) are the
///   caller's to give up.
unsafe fn subtract((chunk, bytes): (*mut Chunk, usize)) {
    // SAFETY: forwarded from this function's contract.
    let emptied = unsafe { count_down(chunk, bytes) };
    if emptied.is_some() {
        release_chunk(emptied);
    }
}

/// Gives back the bytes this thread holds back, if any.
fn give_back_held() {
    if let Some(held) = HELD.with(Held::take) {
        // SAFETY: held bytes are of a live chunk, and now ours alone to give back.
        unsafe { subtract(held) };
    }
}

/// Runs `f` on this thread's [`Local`], reached through a plain pointer
/// ([`plain_ref`], which says why: every small allocation and free updates it).
#[inline(always)]
fn with_current<R>(f: impl FnOnce(&Local) -> R) -> R {
    CURRENT.with(|c| f(plain_ref(c)))
}

/// Where this thread's small allocations come from: a chunk it fills in order, as
/// `RingAlloc` does, whose blocks any thread may free (they then count down the chunk's
/// [`ChunkCount`]; those freed on this thread go back to the chunk's cursor or unused
/// bytes, see [`Current`]).
struct Local {
    chunks: Current<ChunkCount>,
    /// The thread's exit retired its chunk: each later small allocation on this thread
    /// gets a chunk of its own, retired at once (thread teardown only).
    exiting: Cell<bool>,
}

impl Local {
    /// Whether this thread's exit will still retire its chunk and give back the bytes it
    /// holds: the thread-local that does both is armed (this arms it) and has not run.
    /// Once it has, `exiting` says so from then on.
    fn exit_armed(&self) -> bool {
        if self.exiting.get() || RETIRE_AT_EXIT.try_with(|_| ()).is_err() {
            self.exiting.set(true);
            return false;
        }
        true
    }
}

/// Retires this thread's chunk when the thread exits (its blocks live on; the last
/// free releases the chunk).
struct RetireAtExit;

impl Drop for RetireAtExit {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| {
            c.exiting.set(true);
            release_chunk(c.chunks.retire());
        });
        give_back_held();
    }
}

/// Gives a chunk's region back to its ring (or the heap), from any thread, if there is
/// one to release.
#[inline(never)]
fn release_chunk(chunk: Option<Emptied>) {
    if let Some(chunk) = chunk {
        // SAFETY: a retired, empty chunk (`Emptied`): a region allocated with
        // `CHUNK_LAYOUT` by `Source::allocate` or claimed at the window (same header),
        // held by no one else, released once, here.
        unsafe { super::deallocate(chunk.region(), CHUNK_LAYOUT) }
    }
}

/// A new chunk's region, current for no one yet: from this thread's ring (tiling the
/// block when the window's front allows, as `RingAlloc`'s do), or from the heap when
/// the ring is gone or the threshold is below [`SMALL_MAX`].
fn new_chunk() -> Result<*mut u8, AllocError> {
    let to_heap = threshold() < SMALL_MAX;
    match tls::with_ring(|ring| chunk::claim(Some(ring), to_heap, Counts::Thread)) {
        Some(made) => made,
        None => chunk::claim(None, true, Counts::Thread),
    }
}

/// A small allocation from this thread's chunk ([`Current::bump`]).
#[inline(always)]
fn allocate_small(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    match with_current(|c| c.chunks.bump(layout)) {
        Some(block) => Ok(block),
        None => allocate_small_slow(layout),
    }
}

/// A small allocation when the current chunk is full (or there is none): the chunk
/// starts over if every block came back, else a new one becomes current and the old
/// one is retired.
#[cold]
#[inline(never)]
fn allocate_small_slow(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    with_current(|c| {
        if !c.chunks.restart() {
            release_chunk(c.chunks.retire());
            if !c.exit_armed() {
                return allocate_alone(layout);
            }
            c.chunks.start(new_chunk()?);
        }
        // An empty chunk holds any small layout: this does not come back here.
        allocate_small(layout)
    })
}

/// A small allocation during thread teardown, after the thread's chunk was retired: a
/// chunk of its own, retired at once, so that its free releases it.
fn allocate_alone(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    let chunk = new_chunk()?.cast::<Chunk>();
    let len = round_up(layout.size(), GRAIN);
    // SAFETY: a fresh block of `CHUNK - HDR` bytes, aligned to `CHUNK`: room for the
    // head.
    unsafe { ptr::addr_of_mut!((*chunk).count).write(ChunkCount::new()) };
    // The first block follows the head, a word multiple: no padding.
    let p = chunk
        .cast::<u8>()
        .wrapping_add(core::mem::size_of::<Chunk>());
    // SAFETY: the chunk is live; it hands out `len > 0` bytes, so it is not empty.
    let released = unsafe { (*chunk).count.retire(len) };
    debug_assert!(!released);
    // SAFETY: inside the chunk: not null.
    let p = unsafe { NonNull::new_unchecked(p) };
    Ok(NonNull::slice_from_raw_parts(p, len))
}

/// Releases a small block, on any thread: a block of this thread's chunk goes back to
/// it ([`Current::free`], no atomic instruction); a block of any other chunk counts it
/// down.
///
/// # Safety
/// - `ptr` was handed out by `OneRingAlloc` (any thread) for `layout` or a layout that
///   fits it, `layout` is small, and `ptr` is not used afterwards.
#[inline(always)]
unsafe fn deallocate_small(ptr: NonNull<u8>, layout: Layout) {
    let (p, len) = (ptr.as_ptr(), round_up(layout.size(), GRAIN));
    if !with_current(|c| c.chunks.free(p, len)) {
        // A block of the chunk this thread holds bytes of is not kept: so a queue freed
        // in order looks up the kept blocks once per chunk, not once per block.
        if !HELD.with(|h| h.holds_chunk_of(p)) && is_kept(ptr, true) {
            // SAFETY: forwarded from this function's contract: a kept block is a
            // region, of a small layout's alignment class.
            return unsafe { super::deallocate(ptr, layout) };
        }
        // SAFETY: forwarded from this function's contract; not kept, so in a chunk.
        unsafe { give_back(p, len) }
    }
}

/// `bytes` of the small block at `p` (the whole block, or the tail a shrink gave up)
/// are no longer used: counts down its chunk, now or later ([`Held`]), and releases the
/// chunk if that emptied it after its retirement.
///
/// # Safety
/// - `p` is a live small block of a chunk other than this thread's current one, `bytes`
///   of which (handed out, not yet counted as freed) the caller gives up.
///
/// Not kept out of line: freeing a queue in order comes here for nearly every block,
/// and a call would be a large share of each such free.
#[inline]
unsafe fn give_back(p: *mut u8, bytes: usize) {
    // SAFETY: forwarded from this function's contract.
    if let Some(now) = HELD.with(|h| unsafe { plain_ref(h).add(p, bytes) }) {
        // SAFETY: `Held::add` returns bytes of a live chunk that are ours to give up.
        unsafe { subtract(now) };
    }
}

/// `grow`, `grow_zeroed` and `shrink` of a small block to a small size, in place
/// ([`Current::resize`]).
///
/// # Safety
/// The `Allocator::grow` (`shrink`) contract; both layouts are small.
#[inline(always)]
unsafe fn resize_small(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Option<NonNull<[u8]>> {
    // Through a pointer, outside `LocalKey::with`: in it, the resize's code made `with`
    // too large for the compiler to inline into a `Vec`'s growth.
    let c = with_current(|c| c as *const Local);
    // SAFETY: forwarded from this function's contract. `c` is this thread's `Local`,
    // alive until the thread exits (it has no destructor), so for this whole call.
    let (block, elsewhere) = unsafe { (*c).chunks.resize(ptr, old, new, zeroed) }?;
    // A kept block's tail stays in its region.
    if elsewhere != 0 && !is_kept(ptr, false) {
        // SAFETY: the tail of a live block of another chunk (not kept), given up by the
        // caller.
        unsafe { give_back(ptr.as_ptr(), elsewhere) };
    }
    Some(block)
}

/// `grow`, `grow_zeroed` or `shrink` where either layout is small: in place in the chunk
/// when both are ([`resize_small`]), else allocate, copy, free.
///
/// # Safety
/// The `Allocator::grow` (`shrink`) contract.
#[inline(always)]
unsafe fn resize_chunked(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    if is_small(old) && is_small(new) {
        // SAFETY: the caller's contract, forwarded.
        if let Some(block) = unsafe { resize_small(ptr, old, new, zeroed) } {
            return Ok(block);
        }
        if is_kept(ptr, false) {
            // SAFETY: the caller's contract, forwarded; the block is kept.
            return Ok(unsafe { kept::resize_in_place(ptr, old, new, zeroed) });
        }
    }
    // SAFETY: the caller's contract, forwarded; nothing changed above.
    unsafe { resize_moving(ptr, old, new, zeroed) }
}

/// A resize that changes path, or a small one that cannot stay: allocate, copy, free.
///
/// # Safety
/// The `Allocator::grow` (`shrink`) contract.
#[inline(never)]
unsafe fn resize_moving(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: forwarded from this function's contract; the closures are
    // `OneRingAlloc`'s own allocation and release, and the old block is given up there.
    unsafe { super::move_block(ptr, old, new, zeroed, allocate_any, |p, l| release(p, l)) }
}

/// `allocate` on either path.
#[inline(always)]
fn allocate_any(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    if is_small(layout) {
        allocate_small(layout)
    } else {
        with_source(|s| s.allocate(layout))
    }
}

/// Counts a heap region just allocated for `layout` at `block` in this thread's
/// counters ([`OneRingAlloc::stats`]).
///
/// # Safety
/// As for [`HeapCounts::sent`].
#[cold]
pub(super) unsafe fn count_sent(block: NonNull<u8>, layout: Layout) {
    // SAFETY: forwarded from this function's contract.
    let _ = HEAP.try_with(|h| unsafe { h.sent(block, layout) });
}

/// This thread's heap threshold (the default while the thread is being torn down).
#[inline(always)]
fn threshold() -> usize {
    THRESHOLD
        .try_with(Cell::get)
        .unwrap_or(DEFAULT_HEAP_THRESHOLD)
}

/// Runs `f` with this thread's ring if it already exists and the thread is not being
/// torn down; `None` otherwise. The inlined part of [`with_source`].
#[inline(always)]
fn with_existing_source<R>(f: impl FnOnce(Source<'_>) -> R) -> Option<R> {
    let threshold = threshold();
    tls::with_existing_ring(|ring| f(Source::new(ring, threshold).counted(Counts::Thread)))
}

/// Runs `f` with this thread's ring, or with the heap alone while the thread is being
/// torn down (its ring is gone) or its ring cannot be made. `f` only captures the
/// request (`Copy`), so the slow path can run it again.
#[inline(always)]
fn with_source<R, F: FnOnce(Source<'_>) -> R + Copy>(f: F) -> R {
    match with_existing_source(f) {
        Some(r) => r,
        None => with_new_source(threshold(), f),
    }
}

/// The first request on a thread (which creates its ring), or one during teardown.
#[cold]
#[inline(never)]
fn with_new_source<R, F: FnOnce(Source<'_>) -> R + Copy>(threshold: usize, f: F) -> R {
    match tls::with_ring(|ring| f(Source::new(ring, threshold).counted(Counts::Thread))) {
        Some(r) => r,
        None => f(Source::HEAP),
    }
}

/// `grow`/`grow_zeroed`: the fast path (the latest allocation of this thread's ring
/// grows from the window's front) inlined, with one look-up of the ring; everything
/// else out of line, so that the caller's loop does not save and restore registers for
/// paths it rarely takes.
///
/// # Safety
/// The `Allocator::grow` contract, for an allocation of `OneRingAlloc`.
#[inline(always)]
unsafe fn grow(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    if is_small(old) || is_small(new) {
        // SAFETY: the caller's contract, forwarded.
        return unsafe { resize_chunked(ptr, old, new, zeroed) };
    }
    // SAFETY: the caller's contract, forwarded; the source is this thread's own ring.
    let fast = with_existing_source(|s| unsafe { s.grow_latest(ptr, old, new, zeroed) });
    match fast {
        Some(Some(block)) => Ok(block),
        // SAFETY: the caller's contract, forwarded; nothing changed above.
        _ => unsafe { grow_rest(ptr, old, new, zeroed) },
    }
}

/// The rest of [`grow`]: in place by the walk, by `realloc`, or by moving.
///
/// # Safety
/// As for [`grow`].
#[inline(never)]
unsafe fn grow_rest(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: the caller's contract, forwarded.
    with_source(|s| unsafe { s.grow_slow(ptr, old, new, zeroed) })
}

/// A shrink of a region to a small layout that found no chunk: the region keeps the
/// block, trimmed where the calling thread may trim it, and it joins the kept blocks
/// (`kept.rs`).
///
/// # Safety
/// The `Allocator::shrink` contract, with [`kept::can_keep`] for `old` and `new`.
#[cold]
#[inline(never)]
unsafe fn keep(ptr: NonNull<u8>, old: Layout, new: Layout) -> Result<NonNull<[u8]>, AllocError> {
    let trimmed = kept::trimmed(old);
    // SAFETY: forwarded from this function's contract: a region (the layout is not
    // small), shrunk with its own alignment class, which keeps it in place (another
    // thread's region is left as it is) or moves it by `realloc`.
    let block = with_source(|s| unsafe { s.shrink(ptr, old, trimmed) })?;
    // SAFETY: the region, ours, word-aligned (its class is up to a word) and holding
    // more than `SMALL_MAX` bytes (`can_keep`), given up for `new`.
    Ok(unsafe { list_kept(block, new) })
}

/// Lists `block` in its stripe of [`KEPT`] ([`kept::keep`]) and hands it out for `new`.
///
/// # Safety
/// As for [`kept::keep`], but for the list.
unsafe fn list_kept(block: NonNull<[u8]>, new: Layout) -> NonNull<[u8]> {
    let stripe = KEPT.of(block.cast());
    let list = stripe.lock();
    // SAFETY: forwarded from this function's contract; the list is the block's
    // stripe's, locked, and its bit is set below, under the lock.
    let block = unsafe { kept::keep(block, &list, new) };
    // Relaxed, under the stripe's lock: the block's holder, which learns of it from
    // this call (and any thread it hands the block to, with synchronisation), sees the
    // bit set (`Stripe::maybe_lists`); a read-modify-write, so the other stripes' bits
    // of the word stay.
    stripe.filled.fetch_or(stripe.bit, Ordering::Relaxed);
    block
}

/// Releases an allocation made on any thread; when it lies in this thread's ring, the
/// ring may also move its head back to it (`ring::release_unique_in`).
///
/// # Safety
/// As for `super::deallocate`.
#[inline]
unsafe fn release(ptr: NonNull<u8>, layout: Layout) {
    if is_small(layout) {
        // SAFETY: forwarded; the layout is small, so the block is in a chunk.
        return unsafe { deallocate_small(ptr, layout) };
    }
    if layout.size() == 0 {
        return;
    }
    // SAFETY: forwarded; the ring passed is this thread's own.
    let done = tls::with_existing_ring(|ring| unsafe {
        Source::new(ring, DEFAULT_HEAP_THRESHOLD).deallocate(ptr, layout)
    });
    if done.is_none() {
        // SAFETY: forwarded from this function's contract.
        unsafe { super::deallocate(ptr, layout) }
    }
}

/// A zero-sized allocator backed by a ring per thread: `Copy`, `Send + Sync`, so
/// `Vec<T, OneRingAlloc>` and `Box<T, OneRingAlloc>` cost no space for the allocator
/// and may cross threads.
///
/// - **Where.** Each thread allocates from the ring [`ringmem::tls`](crate::tls) uses
///   (1 MiB, [`WhenFull::Heap`](crate::WhenFull::Heap) unless [`tls::configure`] says
///   otherwise). Small layouts (1 to 256 bytes, alignment up to 8) share 4 KiB chunks
///   with no header per block; a live small block pins its chunk. Requests above
///   [`heap_threshold`](Self::heap_threshold) (256 KiB by default) go to the global
///   allocator, counted by [`stats`](Self::stats). Alignments up to
///   [`RingAlloc::MAX_ALIGN`](crate::RingAlloc::MAX_ALIGN).
/// - **Frees** may happen on any thread: one atomic operation per region, or per chunk
///   for a run of its blocks ([`flush`](Self::flush) settles an idle thread's). A
///   thread's ring outlives the thread until its last block is freed; nothing leaks.
/// - **Resizing.** `grow`/`shrink` work in place on the calling thread's ring; a block
///   of another thread's is moved to grow and kept to shrink. A shrink that keeps the
///   alignment never fails; a failed grow leaves the block as it was.
///
/// The name is ring-alloc's: see "From ring-alloc" on [`RingAlloc`](crate::RingAlloc).
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// use ringmem::OneRingAlloc;
///
/// fn build() -> Vec<Box<u32, OneRingAlloc>, OneRingAlloc> {
///     let b = Box::new_in(42, OneRingAlloc);
///     let mut v = Vec::new_in(OneRingAlloc);
///     v.push(b);
///     v
/// }
/// // Made on a thread that exits, used and freed on this one.
/// let v = std::thread::spawn(build).join().unwrap();
/// assert_eq!(*v[0], 42);
/// assert_eq!(core::mem::size_of_val(&v[0]), core::mem::size_of::<usize>());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OneRingAlloc;

impl OneRingAlloc {
    /// This thread's threshold: requests above this many bytes go to the global
    /// allocator.
    ///
    /// ```
    /// use ringmem::{OneRingAlloc, RingAlloc};
    /// assert_eq!(OneRingAlloc.heap_threshold(), RingAlloc::DEFAULT_HEAP_THRESHOLD);
    /// ```
    #[inline]
    pub fn heap_threshold(&self) -> usize {
        threshold()
    }

    /// Sets this thread's threshold (other threads keep theirs); see
    /// [`RingAlloc::set_heap_threshold`](crate::RingAlloc::set_heap_threshold).
    ///
    /// ```
    /// use ringmem::OneRingAlloc;
    /// std::thread::spawn(|| {
    ///     OneRingAlloc.set_heap_threshold(1024);
    ///     assert_eq!(OneRingAlloc.heap_threshold(), 1024);
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    #[inline]
    pub fn set_heap_threshold(&self, bytes: usize) {
        let _ = THRESHOLD.try_with(|t| t.set(bytes));
    }

    /// This thread's counters: its ring's [`RingStats`](crate::RingStats) (all zero
    /// before the thread's first allocation), and what `OneRingAlloc` requests made on
    /// this thread sent to the heap because of their size, since the thread started
    /// (per thread, as the ring and the threshold are). The live counts are `None`:
    /// a block may be freed on any thread, so no one thread's counters can follow it.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// use ringmem::OneRingAlloc;
    /// std::thread::spawn(|| {
    ///     let v: Vec<u8, _> = Vec::with_capacity_in(1 << 20, OneRingAlloc); // 1 MiB
    ///     let stats = OneRingAlloc.stats();
    ///     assert_eq!((stats.heap_allocs, stats.heap_bytes), (1, 1 << 20));
    ///     assert_eq!(stats.heap_live, None);
    ///     # drop(v);
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    pub fn stats(&self) -> AllocStats {
        let ring = tls::with_existing_ring(crate::Ring::stats).unwrap_or_default();
        HEAP.try_with(|h| h.stats(ring))
            .unwrap_or_else(|_| HeapCounts::new(false).stats(ring))
    }

    /// Releases this thread's current chunk of small allocations if none of its blocks
    /// is in use, so that [`Ring::stats`](crate::Ring::stats) of the thread's ring counts
    /// only live allocations (as [`RingAlloc::flush`](crate::RingAlloc::flush)), and
    /// gives back the freed bytes this thread holds back for one other chunk (frees of
    /// consecutive blocks of a chunk are subtracted from its count in one step, see
    /// [`OneRingAlloc`]). Other chunks go when their last block does, on whichever
    /// thread frees it, or when the last thread holding some of their bytes back frees a
    /// block of another chunk, flushes or exits.
    ///
    /// ```
    /// use allocator_api2::boxed::Box;
    /// use ringmem::OneRingAlloc;
    /// std::thread::spawn(|| {
    ///     drop(Box::new_in(1u64, OneRingAlloc));
    ///     let live = || ringmem::tls::with_ring(|r| r.stats().live_buffers).unwrap();
    ///     assert_eq!(live(), 1); // the empty chunk, kept for the next small block
    ///     OneRingAlloc.flush();
    ///     assert_eq!(live(), 0);
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    pub fn flush(&self) {
        give_back_held();
        let _ = CURRENT.try_with(|c| release_chunk(c.chunks.flush()));
    }

    /// Allocates a block for `layout` from this thread's ring (as
    /// [`Allocator::allocate`], callable without importing the trait, as in ring-alloc).
    ///
    /// [`Allocator::allocate`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/trait.Allocator.html#tymethod.allocate
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use ringmem::OneRingAlloc;
    /// let layout = Layout::new::<[u8; 100]>();
    /// let p = OneRingAlloc.allocate(layout).unwrap();
    /// let addr = p.cast::<u8>().as_ptr() as usize;
    /// // Freed on another thread (a 100-byte block is a ring region: one atomic store).
    /// std::thread::spawn(move || {
    ///     let p = core::ptr::NonNull::new(addr as *mut u8).unwrap();
    ///     // SAFETY: allocated above with this layout, not used elsewhere.
    ///     unsafe { OneRingAlloc.deallocate(p, layout) };
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        allocate_any(layout)
    }

    /// Releases a block (as [`Allocator::deallocate`]), on any thread; a no-op for
    /// zero-size layouts.
    ///
    /// [`Allocator::deallocate`]: https://docs.rs/allocator-api2/0.2/allocator_api2/alloc/trait.Allocator.html#tymethod.deallocate
    ///
    /// # Safety
    /// - `ptr` was allocated by `OneRingAlloc` (on any thread) for `layout`, or for a
    ///   layout that `layout` fits, and is not used afterwards.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use ringmem::OneRingAlloc;
    /// let p = OneRingAlloc.allocate(Layout::new::<u32>()).unwrap();
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { OneRingAlloc.deallocate(p.cast(), Layout::new::<u32>()) };
    /// ```
    #[inline]
    pub unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from this function's contract.
        unsafe { release(ptr, layout) }
    }
}

// SAFETY: blocks stay valid until deallocated: a thread's ring outlives neither the
// thread nor its allocations' validity (a dropped ring's blocks are freed by the orphan
// sweep only after their last region is released). Release is one atomic store (a
// region) or subtraction (a chunk's count, possibly deferred on the freeing thread,
// which keeps the chunk alive meanwhile), valid on any thread; in-place resizing
// happens only in the calling thread's own ring (`Ring::block_of`), so no two threads
// rewrite one block's region lengths.
unsafe impl Allocator for OneRingAlloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        allocate_any(layout)
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        super::zeroed(allocate_any(layout))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the `Allocator::deallocate` contract.
        unsafe { release(ptr, layout) }
    }

    #[inline(always)]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow` contract.
        unsafe { grow(ptr, old, new, false) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the `Allocator::grow_zeroed` contract.
        unsafe { grow(ptr, old, new, true) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if is_small(old) || is_small(new) {
            // SAFETY: the `Allocator::shrink` contract.
            return match unsafe { resize_chunked(ptr, old, new, false) } {
                // A shrink needs no memory: a region that found no chunk keeps the
                // block.
                // SAFETY: the `Allocator::shrink` contract; nothing changed.
                Err(_) if kept::can_keep(old, new) => unsafe { keep(ptr, old, new) },
                moved => moved,
            };
        }
        // SAFETY: as above.
        with_source(|s| unsafe { s.shrink(ptr, old, new) })
    }
}

/// Every interleaving (to the preemption bound) of the kept blocks' stripes: threads
/// free kept blocks that share a stripe (the last one empties it and clears its bit)
/// while another lists a block in that stripe and one in another stripe of the same
/// word of bits, and asks about a block that is not kept. Each holder finds its block,
/// the others do not, and the bits end as the lists do.
///
/// ```text
/// RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p ringmem --lib
/// ```
#[cfg(all(test, loom))]
mod tests {
    use core::alloc::Layout;
    use core::ptr::NonNull;
    use std::sync::Arc;
    use std::vec::Vec;

    use super::{is_kept, list_kept, Ordering, KEPT, STRIPE_BITS};
    use crate::alloc_api::kept::{self, KEPT as KEPT_BYTES};
    use crate::ring::WORD;
    use crate::sync::model::{run_model, thread};

    /// Stand-ins for kept blocks: `KEPT_BYTES`-byte, word-aligned pieces of one buffer.
    struct Blocks(Vec<usize>);

    impl Blocks {
        const N: usize = 32;

        fn new() -> Arc<Self> {
            Arc::new(Blocks(std::vec![0; Self::N * KEPT_BYTES / WORD]))
        }

        /// The address of piece `i`, exposed (as `kept::keep` does).
        fn addr(&self, i: usize) -> usize {
            self.0.as_ptr().wrapping_add(i * KEPT_BYTES / WORD) as usize
        }

        /// Pieces other than `not` in the stripe of `of` (`same`), or not (`!same`).
        fn pick(&self, of: usize, same: bool, not: &[usize]) -> usize {
            let s = |a| kept::stripe(a, STRIPE_BITS);
            (0..Self::N)
                .map(|i| self.addr(i))
                .find(|&a| (s(a) == s(of)) == same && !not.contains(&a))
                .expect("32 pieces fill 4 stripes")
        }
    }

    fn ptr(addr: usize) -> NonNull<u8> {
        NonNull::new(addr as *mut u8).unwrap()
    }

    /// Lists the piece at `addr` as a kept block of 100 bytes.
    fn keep(addr: usize) {
        let block = NonNull::slice_from_raw_parts(ptr(addr), KEPT_BYTES);
        // SAFETY: a word-aligned piece of `KEPT_BYTES` bytes of a live buffer, listed
        // once; the model uses none of its bytes.
        unsafe { list_kept(block, Layout::new::<[u8; 100]>()) };
    }

    #[test]
    fn kept_blocks_found_by_their_holders_only() {
        run_model("one_ring_kept_stripes", || {
            let blocks = Blocks::new();
            let x = blocks.addr(0);
            let y = blocks.pick(x, true, &[x]);
            let z = blocks.pick(x, true, &[x, y]);
            let w = blocks.pick(x, true, &[x, y, z]);
            let v = blocks.pick(x, false, &[]);
            keep(x);
            keep(y);
            // Handed over by the spawns.
            let far: Vec<_> = [x, y]
                .into_iter()
                .map(|p| {
                    let held = blocks.clone();
                    thread::spawn(move || {
                        assert!(is_kept(ptr(p), true), "its holder finds a kept block");
                        drop(held);
                    })
                })
                .collect();
            assert!(!is_kept(ptr(z), false), "a block that is not kept");
            keep(w);
            keep(v);
            for t in far {
                t.join().unwrap();
            }
            assert!(is_kept(ptr(w), true) && is_kept(ptr(v), true));
            assert!(!is_kept(ptr(x), false) && !is_kept(ptr(y), false));
            for word in &KEPT.filled {
                assert_eq!(word.load(Ordering::Relaxed), 0, "every stripe is empty");
            }
        });
    }
}
