//! The ring allocator: one or more preallocated blocks carved into regions in ring
//! order, each led by a one-word header (see `header.rs`, `block.rs`).

mod block;
mod header;
mod heap;
pub(crate) mod orphan;
mod region;
pub(crate) mod slots;
#[cfg(feature = "std")]
pub(crate) mod wait;

use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

#[cfg(feature = "allocator-api2")]
pub(crate) use block::prefetch;
use block::BlockCtl;
pub(crate) use block::{Claim, MAX_ALIGN};
pub(crate) use header::{round_up, Header, HDR, MAX_WORDS, WORD};
#[cfg(real_std)]
pub(crate) use heap::{
    carrying_span, claim as heap_claim, claim_carrying as heap_claim_carrying, Carried,
};
#[cfg(feature = "allocator-api2")]
pub(crate) use region::{claim_in, expose, header_of, resize_in};
#[cfg(real_std)]
pub(crate) use region::{is_slot, region_span};
pub(crate) use region::{release_shared, release_unique, release_unique_in, retain_shared};

use crate::sync::{Cell, UnsafeCell};
use crate::FixedBufMut;

/// What a [`Ring`] does when no free region fits a request.
///
/// ```
/// use ringmem::{Ring, WhenFull};
/// let ring = Ring::builder().capacity(64).when_full(WhenFull::Heap).build().unwrap();
/// let big = ring.fixed(1000).expect("served from the heap");
/// assert_eq!(big.capacity(), 1000);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WhenFull {
    /// Return `None` (the default): the caller decides whether to wait, drop or retry.
    #[default]
    Fail,
    /// Serve the request from the global allocator, as the same buffer type; it is
    /// released to the heap when dropped.
    Heap,
    /// Add another block of the ring's capacity (or larger, for a larger request).
    /// While the ring has more blocks than its first, allocation moves back to the
    /// first block whenever the current one runs out of room, and each time it comes
    /// round the first block again the blocks whose buffers have all been released go
    /// back to the system: all of them but a few of the ring's capacity kept as spares
    /// ([`RingBuilder::spare_blocks`], 1 by default). [`Ring::trim`] returns them at
    /// once. A spike of traffic does not keep its memory for ever.
    Grow,
}

/// Why a [`Ring`] could not be created.
///
/// ```
/// use ringmem::{Ring, RingError};
/// assert_eq!(Ring::try_new(0).unwrap_err(), RingError::ZeroCapacity);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// A capacity of zero bytes was requested.
    ZeroCapacity,
    /// The capacity exceeds what one block can address.
    TooLarge {
        /// The capacity asked for, in bytes.
        requested: usize,
        /// The largest capacity a block can have, in bytes.
        max: usize,
    },
    /// The global allocator refused the block.
    OutOfMemory {
        /// The block size that was refused, in bytes.
        requested: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::ZeroCapacity => f.write_str("a ring needs a capacity of at least 1 byte"),
            RingError::TooLarge { requested, max } => {
                write!(
                    f,
                    "capacity {requested} exceeds the largest block, {max} bytes"
                )
            }
            RingError::OutOfMemory { requested } => {
                write!(
                    f,
                    "the global allocator refused a block of {requested} bytes"
                )
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RingError {}

/// Configures a [`Ring`]; made by [`Ring::builder`].
///
/// ```
/// use ringmem::{Ring, WhenFull};
/// let ring = Ring::builder().capacity(1 << 20).when_full(WhenFull::Grow).build()?;
/// assert_eq!(ring.capacity(), 1 << 20);
/// # Ok::<(), ringmem::RingError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RingBuilder {
    capacity: usize,
    when_full: WhenFull,
    spare_blocks: usize,
}

impl Default for RingBuilder {
    fn default() -> Self {
        RingBuilder {
            capacity: 64 * 1024,
            when_full: WhenFull::Fail,
            spare_blocks: 1,
        }
    }
}

impl RingBuilder {
    /// Sets the bytes of one block, headers included (rounded up to a multiple of 8).
    /// The default is 64 KiB.
    ///
    /// ```
    /// let ring = ringmem::Ring::builder().capacity(100).build().unwrap();
    /// assert_eq!(ring.capacity(), 104);
    /// ```
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = bytes;
        self
    }

    /// Sets what happens when the ring is full; the default is [`WhenFull::Fail`].
    ///
    /// ```
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().when_full(WhenFull::Heap).build().unwrap();
    /// assert_eq!(ring.when_full(), WhenFull::Heap);
    /// ```
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.when_full = policy;
        self
    }

    /// Sets how many drained blocks of its capacity a [`WhenFull::Grow`] ring keeps
    /// beyond its first, ready for the next spike, when it gives the others back to the
    /// system; the default is 1. A larger block, made for one request larger than the
    /// capacity, is never kept: it goes back once its buffer is released.
    ///
    /// ```
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder()
    ///     .capacity(4096)
    ///     .when_full(WhenFull::Grow)
    ///     .spare_blocks(0)
    ///     .build()
    ///     .unwrap();
    /// let mut spike: Vec<_> = (0..8).map(|_| ring.fixed(4000).unwrap()).collect();
    /// assert_eq!(ring.stats().blocks, 8);
    /// let last = spike.pop().unwrap(); // keeps the current block full
    /// drop(spike);
    /// // The current block has no room: the next buffer takes the first block, and the
    /// // six drained blocks go back to the system.
    /// let next = ring.fixed(4000).unwrap();
    /// assert_eq!(ring.stats().blocks, 2);
    /// # drop((last, next));
    /// ```
    pub fn spare_blocks(mut self, blocks: usize) -> Self {
        self.spare_blocks = blocks;
        self
    }

    /// Allocates the first block and returns the ring.
    ///
    /// ```
    /// use ringmem::{Ring, RingError};
    /// let err = Ring::builder().capacity(usize::MAX).build().unwrap_err();
    /// assert!(matches!(err, RingError::TooLarge { .. }));
    /// ```
    pub fn build(self) -> Result<Ring, RingError> {
        let max = MAX_WORDS * WORD;
        if self.capacity == 0 {
            return Err(RingError::ZeroCapacity);
        }
        if self.capacity > max {
            return Err(RingError::TooLarge {
                requested: self.capacity,
                max,
            });
        }
        let len = round_up(self.capacity.max(HDR), WORD);
        orphan::on_build();
        orphan::on_activity();
        let first = BlockCtl::create(len).ok_or(RingError::OutOfMemory {
            requested: self.capacity,
        })?;
        // Fallibly, like the block: a ring that cannot be made is an error, not an
        // abort, however small the allocation that failed.
        let mut blocks = Vec::new();
        if blocks.try_reserve(1).is_err() {
            // SAFETY: just created; nothing else refers to it.
            unsafe { BlockCtl::destroy(first) };
            return Err(RingError::OutOfMemory {
                requested: core::mem::size_of::<NonNull<BlockCtl>>(),
            });
        }
        blocks.push(first);
        Ok(Ring {
            cur: Cell::new(first),
            blocks: UnsafeCell::new(blocks),
            block_len: len,
            when_full: self.when_full,
            spare_blocks: self.spare_blocks,
            give_back_skip: Cell::new((0, 0)),
            heap_fallbacks: Cell::new(0),
            heap_bytes: Cell::new(0),
            waits: Cell::new(0),
            given_back: Cell::new(0),
            counted: Cell::new((0, 0)),
            #[cfg(real_std)]
            give_back_due: Cell::new((0, None)),
            _not_sync: PhantomData,
        })
    }
}

/// How often a `Grow` ring, and a `ReadPool`'s sweeper, give free pages back by
/// themselves, at most (see `Ring::give_back_if_due`, `io::pool::sweep`).
#[cfg(real_std)]
pub(crate) const GIVE_BACK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Walks between a `Grow` ring's looks at the time (see `Ring::give_back_if_due`).
#[cfg(real_std)]
const GIVE_BACK_CHECK: u32 = 64;

/// Counters that help size a ring; see [`Ring::stats`].
///
/// ```
/// let ring = ringmem::Ring::new(4096);
/// let _buf = ring.fixed(100).unwrap();
/// let stats = ring.stats();
/// assert_eq!(stats.live_buffers, 1);
/// assert_eq!(stats.bytes_in_use, 8 + 104);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingStats {
    /// Buffers of this ring's blocks not yet released.
    pub live_buffers: usize,
    /// Bytes those buffers occupy, headers and padding included.
    pub bytes_in_use: usize,
    /// Bytes of all blocks.
    pub capacity: usize,
    /// Blocks (more than one only with [`WhenFull::Grow`]).
    pub blocks: usize,
    /// Requests served from the heap so far: by the [`WhenFull::Heap`] policy, and
    /// (allocator-api2) requests of `&Ring`, `RingAlloc` and `OneRingAlloc` larger than
    /// their heap threshold (`RingAlloc::DEFAULT_HEAP_THRESHOLD` by default). Not links:
    /// those types do not exist in every build this field does. A heap region resized by `realloc` is not counted again.
    ///
    /// ```
    /// # #[cfg(feature = "allocator-api2")] {
    /// use allocator_api2::vec::Vec;
    /// let ring = ringmem::Ring::new(64 * 1024);
    /// let big: Vec<u8, &ringmem::Ring> = Vec::with_capacity_in(1 << 20, &ring);
    /// assert_eq!(ring.stats().heap_fallbacks, 1); // above the threshold: on the heap
    /// # drop(big);
    /// # }
    /// ```
    pub heap_fallbacks: u64,
    /// Bytes of the largest buffer a block has room for now, in one run of free memory
    /// (a claim may get less: its alignment takes some, and a plain claim looks at a
    /// few regions only, a claim that waits at them all). Much less than `capacity - bytes_in_use` tells that the buffers
    /// still held are scattered through the ring and leave only short gaps between
    /// them: a claim longer than this waits (or fails, or grows the ring) even though
    /// the ring is far from full.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let mut bufs: Vec<_> = (0..4).map(|_| ring.fixed(1000).unwrap()).collect();
    /// drop(bufs.remove(2));
    /// drop(bufs.remove(0)); // two kept, each after room for 1,000 bytes
    /// let stats = ring.stats();
    /// assert_eq!(stats.capacity - stats.bytes_in_use, 4096 - 2 * (8 + 1000));
    /// assert_eq!(stats.largest_free, 1000);
    /// assert!(ring.fixed(1500).is_none());
    /// ```
    pub largest_free: usize,
}

/// Counts a ring (or an `io::ReadPool`, feature `std`) keeps as it
/// goes, read without a walk over its headers ([`Ring::counters`]): a server can export
/// them every second. What is live is as a walk last counted it (a pool's sweeper
/// thread walks once a second); what is live this instant takes a walk of one's own:
/// [`Ring::stats`].
///
/// ```
/// let ring = ringmem::Ring::new(4 << 20);
/// let spike: Vec<_> = (0..1000).map(|_| ring.fixed(4000).unwrap()).collect();
/// drop(spike);
/// let given = ring.give_back_pages();
/// let counters = ring.counters();
/// assert_eq!(counters.bytes_given_back, given as u64);
/// assert_eq!((counters.waits, counters.heap_fallbacks, counters.heap_bytes), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingCounters {
    /// Claims that found no room and waited for it (blocking, or a future that went
    /// pending), each counted once however long it waited and whether it ended with
    /// room or timed out; a claim no release could serve (an error at once) is not.
    ///
    /// ```
    /// use std::time::Duration;
    /// let ring = ringmem::Ring::new(64);
    /// let full = ring.fixed(40).unwrap();
    /// assert!(ring.fixed_wait_timeout(40, Duration::from_millis(1)).is_err());
    /// assert_eq!(ring.counters().waits, 1);
    /// # drop(full);
    /// ```
    pub waits: u64,
    /// [`RingStats::heap_fallbacks`]: requests served from the heap so far (on a
    /// `ReadPool`, frames that no gap between the frames held fitted, paid for with
    /// the gaps' room).
    ///
    /// ```
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(64).when_full(WhenFull::Heap).build().unwrap();
    /// let _big = ring.fixed(100).unwrap();
    /// assert_eq!(ring.counters().heap_fallbacks, 1);
    /// ```
    pub heap_fallbacks: u64,
    /// Bytes those requests asked for, all told: what went to the heap for want of
    /// room (or, with the allocator adapters, for its size).
    ///
    /// ```
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(64).when_full(WhenFull::Heap).build().unwrap();
    /// let _big = ring.fixed(100).unwrap();
    /// assert_eq!(ring.counters().heap_bytes, 100);
    /// ```
    pub heap_bytes: u64,
    /// Bytes of pages given back to the system so far ([`Ring::give_back_pages`], and
    /// a `Grow` ring's or a `ReadPool`'s own, once a second at most), whether or not
    /// claims touched them again since.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(1 << 20);
    /// assert_eq!(ring.counters().bytes_given_back, 0);
    /// ```
    pub bytes_given_back: u64,
    /// [`RingStats::live_buffers`] as last counted, without a walk of its own: on an
    /// `io::ReadPool`, by its sweeper thread once a second while claims come or any
    /// region is live (0 once it has seen none), and by `ReadPool::stats`; on a ring,
    /// by [`Ring::stats`] and [`Ring::give_back_pages`] (a `Grow` ring's own, once a
    /// second at most while claims walk). So a server that exports the counters every
    /// second sees its pool's live frames at most a second or two late, at no cost to
    /// its claims: the sweeper counts in the walk it makes to give pages back.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(1 << 20);
    /// let kept = ring.fixed(1000).unwrap();
    /// assert_eq!(ring.counters().live_buffers, 0); // not counted yet
    /// ring.give_back_pages();
    /// assert_eq!(ring.counters().live_buffers, 1);
    /// # drop(kept);
    /// ```
    pub live_buffers: usize,
    /// [`RingStats::bytes_in_use`] (headers included) as last counted, as
    /// [`live_buffers`](Self::live_buffers) is.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(1 << 20);
    /// let kept = ring.fixed(1000).unwrap();
    /// assert_eq!(ring.stats().bytes_in_use, 1008);
    /// assert_eq!(ring.counters().bytes_in_use, 1008); // as `stats` counted
    /// # drop(kept);
    /// ```
    pub bytes_in_use: usize,
}

/// The bytes the global allocator holds for the adapter's allocation at `ptr` (its
/// heap region, header and alignment included), or `None` for a ring region: what the
/// allocators' counts of live heap memory add and subtract.
///
/// # Safety
/// - As for [`header_of`].
#[cfg(feature = "allocator-api2")]
pub(crate) unsafe fn heap_bytes_of(ptr: NonNull<u8>, align: usize) -> Option<usize> {
    // SAFETY: forwarded from this function's contract.
    let hdr = unsafe { header_of(ptr, align) };
    // SAFETY: the caller's handle keeps the header alive.
    // Relaxed: the HEAP bit, and a heap region's span, change only through its one
    // handle, the caller's.
    let h = unsafe { hdr.as_ref() }.load(crate::sync::Ordering::Relaxed);
    (h & header::HEAP != 0).then(|| header::span(h))
}

/// A ring allocator for short-lived buffers.
///
/// One thread allocates (`&self`: `Ring` is `Send` but not `Sync`); the buffers it hands
/// out are `Send` and may be dropped on any thread, each release being one atomic
/// operation on the region's header. The walk for free space starts where the last
/// allocation ended, steps over regions that are still live, merges free neighbours
/// and wraps at the end of the block; when nothing fits, the [`WhenFull`] policy applies.
/// It wraps early, before memory no allocation has used yet, if the block start has
/// room: a large ring's resident memory stays near what its live buffers need.
///
/// A try that finds no room is as cheap as one that finds it, whatever the number of
/// live regions: it looks at the oldest region (the head, the next to be released when
/// buffers are dropped in the order they were made) and, at one try in eight, at 4 more
/// regions from where the last such try stopped, going round the ring. So `None` under
/// [`WhenFull::Fail`] (or a heap buffer under [`WhenFull::Heap`]) means: the oldest
/// region is live and the regions looked at had no room. A region released at the head
/// serves the next request; one released out of order (or the space past a buffer
/// pinned at the head) is found within 8 × (regions / 4 + 1) requests, and at the next
/// one when it was dropped on the ring's own thread by a handle that borrows the ring
/// (an [`ExtBuf`](crate::ExtBuf), an allocator adapter). A producer retrying on a full
/// ring reads about one header and a half a try, not every live region.
/// [`WhenFull::Grow`] walks every block before it adds one, and a waiting call walks
/// the ring after each wake-up.
///
/// ```
/// use std::io::Write;
/// let ring = ringmem::Ring::new(64 * 1024);
/// let mut buf = ring.fixed(256).unwrap();
/// buf.write_all(b"hello").unwrap();
/// let frozen = buf.freeze();
/// let shared = frozen.clone();
/// std::thread::spawn(move || assert_eq!(&shared[..], b"hello")).join().unwrap();
/// drop(ring); // buffers may outlive the ring: its block goes with the last of them
/// assert_eq!(&frozen[..], b"hello");
/// ```
/// Not `Sync`:
/// ```compile_fail
/// fn sync<T: Sync>(_: &T) {}
/// sync(&ringmem::Ring::new(64));
/// ```
pub struct Ring {
    /// The block the walk is in; one of `blocks`.
    cur: Cell<NonNull<BlockCtl>>,
    /// Every block of this ring (owner thread only).
    blocks: UnsafeCell<Vec<NonNull<BlockCtl>>>,
    /// Region bytes of a standard block.
    block_len: usize,
    when_full: WhenFull,
    /// Drained blocks a `Grow` ring keeps beyond its first (see `release_drained`).
    spare_blocks: usize,
    /// Laps of the first block to let pass before looking for drained blocks again,
    /// and the next such pause: doubled while a long-lived buffer pins a block, so the
    /// look costs little however long it stays (see `give_back_drained`).
    give_back_skip: Cell<(u32, u32)>,
    heap_fallbacks: Cell<u64>,
    /// Bytes of the requests served from the heap (see [`RingCounters::heap_bytes`]).
    heap_bytes: Cell<u64>,
    /// Claims that waited for room (see [`Ring::counters`]).
    waits: Cell<u64>,
    /// Bytes of pages given back to the system so far.
    given_back: Cell<u64>,
    /// Live regions and their bytes at the last walk that counted them (see
    /// [`RingCounters::bytes_in_use`]).
    counted: Cell<(usize, usize)>,
    /// A `Grow` ring's walks since it last looked at the time, and when it last gave its
    /// free pages back (see `give_back_if_due`).
    #[cfg(real_std)]
    give_back_due: Cell<(u32, Option<std::time::Instant>)>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the ring owns its blocks; the cells are touched only by the thread that holds
// the ring (it is not `Sync`), and other threads reach its memory only through buffer
// handles, which touch their own region's header atomically.
unsafe impl Send for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// Creates a ring of `capacity` bytes (headers included) that returns `None` when
    /// full.
    ///
    /// # Panics
    /// When `capacity` is 0, larger than a block can address (16 GiB), or the global
    /// allocator refuses it; [`Ring::try_new`] returns those as errors.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(1 << 16);
    /// assert_eq!(ring.capacity(), 1 << 16);
    /// ```
    pub fn new(capacity: usize) -> Ring {
        match Ring::try_new(capacity) {
            Ok(ring) => ring,
            Err(e) => panic!("ringmem: cannot create a ring of {capacity} bytes: {e}"),
        }
    }

    /// Creates a ring of `capacity` bytes, or says why it cannot.
    ///
    /// ```
    /// assert!(ringmem::Ring::try_new(4096).is_ok());
    /// assert!(ringmem::Ring::try_new(0).is_err());
    /// ```
    pub fn try_new(capacity: usize) -> Result<Ring, RingError> {
        Ring::builder().capacity(capacity).build()
    }

    /// A builder for a ring with a [`WhenFull`] policy.
    ///
    /// ```
    /// let ring = ringmem::Ring::builder().capacity(4096).build().unwrap();
    /// # drop(ring);
    /// ```
    pub fn builder() -> RingBuilder {
        RingBuilder::default()
    }

    /// Bytes of all the ring's blocks, headers included.
    ///
    /// ```
    /// assert_eq!(ringmem::Ring::new(4096).capacity(), 4096);
    /// ```
    pub fn capacity(&self) -> usize {
        self.blocks()
            .iter()
            .map(|b| {
                // SAFETY: the ring's blocks stay alive while the ring does.
                unsafe { b.as_ref() }.len()
            })
            .sum()
    }

    /// Bytes per block (headers included), as the builder's `capacity` set it; blocks
    /// added for larger requests may be longer.
    #[inline]
    pub(crate) fn block_len(&self) -> usize {
        self.block_len
    }

    /// The ring's policy when full.
    ///
    /// ```
    /// assert_eq!(ringmem::Ring::new(64).when_full(), ringmem::WhenFull::Fail);
    /// ```
    pub fn when_full(&self) -> WhenFull {
        self.when_full
    }

    /// Live buffers, bytes in use, blocks and heap fallbacks. It walks the region
    /// headers, so it costs one load per region: cheap for tuning, not for a hot loop.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// let a = ring.fixed(10).unwrap();
    /// assert_eq!(ring.stats().live_buffers, 1);
    /// drop(a);
    /// assert_eq!(ring.stats().live_buffers, 0);
    /// ```
    pub fn stats(&self) -> RingStats {
        let mut stats = RingStats {
            blocks: self.blocks().len(),
            heap_fallbacks: self.heap_fallbacks.get(),
            ..RingStats::default()
        };
        for b in self.blocks() {
            // SAFETY: the ring's blocks stay alive while the ring does.
            let b = unsafe { b.as_ref() };
            let (live, bytes, free_run) = b.usage();
            stats.live_buffers += live;
            stats.bytes_in_use += bytes;
            stats.largest_free = stats.largest_free.max(free_run.saturating_sub(HDR));
            stats.capacity += b.len();
        }
        self.counted.set((stats.live_buffers, stats.bytes_in_use));
        stats
    }

    /// Gives back to the system the pages of free memory past what the ring needs now,
    /// and returns their bytes: in each block, the memory claims lap moves back to
    /// twice the bytes of the buffers still held (at least 64 KiB, or a sixteenth of a
    /// smaller block), and the whole pages of the free memory past it, which claims
    /// have touched, stop counting as resident (`madvise(MADV_DONTNEED)`; Linux
    /// x86-64, elsewhere it returns 0 and gives nothing back). Claims then stay below
    /// that bound while what is live fits, and move it on as they need, as in a new
    /// ring: after a spike, the resident memory follows the buffers held again.
    ///
    /// It walks every region header: a call a second (a server's timer) costs little.
    /// A [`WhenFull::Grow`] ring does it by itself (feature `std`), once a second at
    /// most, from the claims that walk; the framed readers' `ReadPool`s from one thread
    /// of the process while claims come and once after they stop.
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4 << 20);
    /// let spike: Vec<_> = (0..1000).map(|_| ring.fixed(4000).unwrap()).collect();
    /// let kept = ring.fixed(64).unwrap();
    /// drop(spike);
    /// let given = ring.give_back_pages();
    /// # #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
    /// assert!(given >= 3 << 20); // most of the 4 MB the spike touched
    /// assert_eq!(ring.give_back_pages(), 0); // nothing more to give back
    /// assert!(ring.fixed(4000).is_some()); // claims go on as before
    /// # drop(kept);
    /// ```
    pub fn give_back_pages(&self) -> usize {
        let mut runs = Vec::new();
        self.take_free_pages(false, |run, touched| runs.push((run, touched)));
        let given = (runs.into_iter())
            .map(|(mut run, touched)| run.discard_pages(touched))
            .sum::<usize>();
        self.given_back.set(self.given_back.get() + given as u64);
        given
    }

    /// The first half of [`give_back_pages`](Self::give_back_pages): the free runs
    /// whose pages go back, each held as a buffer and handed to `f` with the bytes of
    /// it that claims touched (see `BlockCtl::take_free_runs`). The pages go back with
    /// `FixedBufMut::discard_pages`, on any thread (a pool's, after its lock is let
    /// go); dropping the buffer makes the run free again. `lapped`: for a ring made to
    /// [`lap_whole`](Self::lap_whole), the pages of every free run, as far as they are
    /// resident, and claims still lap the whole block, touching them again as they come
    /// round (for a ring claims have left alone a while).
    ///
    /// Returns the live regions and their bytes its walk counted, before any run was
    /// taken, which it also records as [`Ring::counters`]' count.
    pub(crate) fn take_free_pages(
        &self,
        lapped: bool,
        mut f: impl FnMut(FixedBufMut, usize),
    ) -> (usize, usize) {
        let (mut live, mut bytes) = (0, 0);
        for b in self.blocks() {
            // SAFETY: the ring's blocks stay alive while the ring does.
            let block = unsafe { b.as_ref() };
            let (l, b) = block.take_free_runs(lapped, &mut |run, touched| {
                f(FixedBufMut::from_claim(run, 0), touched)
            });
            (live, bytes) = (live + l, bytes + b);
        }
        self.counted.set((live, bytes));
        (live, bytes)
    }

    /// Lets claims lap the whole of each block of the ring (made so far), with no edge
    /// of the memory handed out (see `BlockCtl::edge`): all its pages are touched as
    /// soon as claims have gone round once. For a ring whose regions go back about in
    /// the order they came (a pool's read ring), where the edge would only shorten the
    /// window. Its free pages then go back through
    /// [`take_free_pages`](Self::take_free_pages), `lapped`.
    #[cfg(real_std)]
    pub(crate) fn lap_whole(&self) {
        for b in self.blocks() {
            // SAFETY: the ring's blocks stay alive while the ring does.
            unsafe { b.as_ref() }.without_edge();
        }
    }

    /// Says that every claim of the ring takes its lowest room
    /// ([`claim_lowest`](Self::claim_lowest)), so that its blocks' free pages go back
    /// down to an eighth more than what is live (see `BlockCtl::pack_low`).
    #[cfg(real_std)]
    pub(crate) fn pack_low(&self) {
        for b in self.blocks() {
            // SAFETY: the ring's blocks stay alive while the ring does.
            unsafe { b.as_ref() }.pack_low();
        }
    }

    /// Makes a try that finds no room in a block of the ring (made so far) go on with
    /// the walk's scan at once (see `BlockCtl::scan_eagerly`): for a ring whose oldest
    /// regions are not the next to be released (a pool's copy ring).
    #[cfg(real_std)]
    pub(crate) fn scan_eagerly(&self) {
        for b in self.blocks() {
            // SAFETY: the ring's blocks stay alive while the ring does.
            unsafe { b.as_ref() }.scan_eagerly();
        }
    }

    /// A region of `bytes` bytes in the first free run from the start of the current
    /// block that holds it (see `BlockCtl::claim_lowest`): for regions claimed seldom
    /// and kept long, so that they pack low and the block's pages past them stay
    /// untouched. Never the ring's [`WhenFull`] policy: `None` without such a run.
    #[cfg(real_std)]
    pub(crate) fn claim_lowest(&self, bytes: usize) -> Option<FixedBufMut> {
        if bytes > self.block_len {
            return None;
        }
        // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
        let cur = unsafe { self.cur.get().as_ref() };
        let c = cur.claim_lowest(bytes, 1)?;
        Some(FixedBufMut::from_claim(c, 0))
    }

    /// What the ring has counted so far: its waits, heap fallbacks and pages given
    /// back ([`RingCounters`]). A few loads, no walk: cheap enough for a server to
    /// export every second, unlike [`stats`](Self::stats).
    ///
    /// ```
    /// let ring = ringmem::Ring::new(4096);
    /// assert_eq!(ring.counters(), ringmem::RingCounters::default());
    /// ```
    pub fn counters(&self) -> RingCounters {
        RingCounters {
            waits: self.waits.get(),
            heap_fallbacks: self.heap_fallbacks.get(),
            heap_bytes: self.heap_bytes.get(),
            bytes_given_back: self.given_back.get(),
            live_buffers: self.counted.get().0,
            bytes_in_use: self.counted.get().1,
        }
    }

    /// A `Grow` ring's own [`give_back_pages`](Self::give_back_pages): once every
    /// [`GIVE_BACK_CHECK`] walks (the claims' slow path, when the window has no room)
    /// it looks at the time, and gives the free pages back if it has not for
    /// [`GIVE_BACK_EVERY`]. So a spike's pages go back a second or so after claims run
    /// below it again, at one walk over every header a second at most, and a clock
    /// read every few dozen walks. Between a claim's tries, with no walk under way.
    #[cfg(real_std)]
    #[cold]
    pub(crate) fn give_back_if_due(&self) {
        let (walks, last) = self.give_back_due.get();
        let walks = walks.wrapping_add(1);
        if walks % GIVE_BACK_CHECK != 0 {
            self.give_back_due.set((walks, last));
            return;
        }
        let now = std::time::Instant::now();
        match last {
            // The first look starts the clock.
            None => self.give_back_due.set((walks, Some(now))),
            Some(t) if now.duration_since(t) < GIVE_BACK_EVERY => {
                self.give_back_due.set((walks, last));
            }
            Some(_) => {
                self.give_back_due.set((walks, Some(now)));
                self.give_back_pages();
            }
        }
    }

    /// Counts in [`RingCounters::waits`] a claim that found no room and waits for it.
    #[cfg(feature = "std")]
    #[cold]
    pub(crate) fn count_wait(&self) {
        self.waits.set(self.waits.get() + 1);
    }

    /// Counts in [`RingStats::heap_fallbacks`] (and [`RingCounters::heap_bytes`]) a
    /// request of `bytes` served from the heap: by the ring's `WhenFull::Heap` policy, or
    /// sent there by an allocator adapter for its size (above its threshold), so that
    /// `stats` tells where the ring's users' memory went.
    #[cold]
    pub(crate) fn count_heap_fallback(&self, bytes: usize) {
        self.heap_fallbacks.set(self.heap_fallbacks.get() + 1);
        self.heap_bytes.set(self.heap_bytes.get() + bytes as u64);
    }

    /// Gives back to the system every block of a [`WhenFull::Grow`] ring whose buffers
    /// have all been released, except the first block and the current one; returns how
    /// many went. Rings of the other policies have one block, and keep it.
    ///
    /// ```
    /// use ringmem::{Ring, WhenFull};
    /// let ring = Ring::builder().capacity(4096).when_full(WhenFull::Grow).build().unwrap();
    /// let first = ring.fixed(4000).unwrap();
    /// let spike: Vec<_> = (0..8).map(|_| ring.fixed(4000).unwrap()).collect();
    /// drop(spike);
    /// assert_eq!(ring.stats().blocks, 9);
    /// assert_eq!(ring.trim(), 7); // the last one made is current, and stays
    /// assert_eq!(ring.stats().blocks, 2);
    /// # drop(first);
    /// ```
    pub fn trim(&self) -> usize {
        self.release_drained(0)
    }

    /// Frees the blocks whose regions are all free, but for the first, the current one
    /// and `keep` others of the ring's capacity; returns how many it freed.
    fn release_drained(&self, keep: usize) -> usize {
        let cur = self.cur.get();
        // SAFETY: see `blocks`; no reference into the vector is alive here (callers
        // hold none across this call), and no user code runs until it returns.
        let blocks = unsafe { &mut *self.blocks.get() };
        let (mut kept, mut freed, mut i) = (0, 0, 1);
        while i < blocks.len() {
            let b = blocks[i];
            // SAFETY: the ring's blocks stay alive while the ring does.
            // `drained` reads every header with Acquire: a block it finds with no live
            // region has no handle left, and nothing else refers to it but this list.
            let block = unsafe { b.as_ref() };
            let drained = b != cur && block.drained();
            let spare = drained && kept < keep && block.len() == self.block_len;
            if !drained || spare {
                kept += usize::from(spare);
                i += 1;
                continue;
            }
            blocks.remove(i);
            // SAFETY: every region is free (above), the block is not current, and it
            // has just left the ring's list: nothing refers to it.
            unsafe { BlockCtl::destroy(b) };
            freed += 1;
        }
        self.set_defer();
        freed
    }

    /// Sets each block's `defer`: on for every block while a `Grow` ring has blocks it
    /// would give back once drained (more than its spares of its capacity, or a larger
    /// one), so that allocation goes back to the first block, the others drain, and
    /// each lap of the first block looks for them; off otherwise.
    fn set_defer(&self) {
        let blocks = self.blocks();
        // SAFETY: the ring's blocks stay alive while the ring does.
        let len = |b: &NonNull<BlockCtl>| unsafe { b.as_ref() }.len();
        let normal = blocks[1..]
            .iter()
            .filter(|&b| len(b) == self.block_len)
            .count();
        let on = normal > self.spare_blocks || normal + 1 < blocks.len();
        self.give_back_skip.set((0, 0));
        for b in blocks {
            // SAFETY: the ring's blocks stay alive while the ring does.
            unsafe { b.as_ref() }.defer.set(on);
        }
    }

    /// Whether the ring has blocks it would give back once drained: what `set_defer`
    /// last set every block's `defer` to, the first block's included.
    fn surplus(&self) -> bool {
        // SAFETY: a ring always has its first block, alive while the ring is.
        unsafe { self.blocks()[0].as_ref() }.defer.get()
    }

    /// Gives back the drained blocks beyond the spares, now or after a pause: a block
    /// pinned by a long-lived buffer is looked at after 1, 2, 4, … 64 laps of the first
    /// block, so the walk over its headers stays a small part of a lap's work.
    fn give_back_drained(&self) {
        let (skip, pause) = self.give_back_skip.get();
        if skip > 0 {
            self.give_back_skip.set((skip - 1, pause));
            return;
        }
        self.release_drained(self.spare_blocks);
        if self.surplus() {
            let pause = (pause * 2).clamp(1, 64);
            self.give_back_skip.set((pause, pause));
        }
    }

    fn blocks(&self) -> &Vec<NonNull<BlockCtl>> {
        // SAFETY: only this thread (the ring is !Sync) mutates `blocks`, in `claim_full`,
        // and never while a reference from here is alive (no user code runs in between).
        unsafe { &*self.blocks.get() }
    }

    /// The addresses of this ring's region headers, which a producer waiting for room
    /// gives the waiters' table (`wait.rs`): a release there may make room.
    #[cfg(feature = "std")]
    pub(crate) fn span(&self) -> wait::Span {
        (self.blocks().iter()).fold(wait::Span::NONE, |s, b| {
            // SAFETY: the ring's blocks stay alive while the ring does.
            s.hull(unsafe { b.as_ref() }.span())
        })
    }

    /// When `walk` (a waiter's try that a release may have woken), makes the next claim
    /// walk the whole current block (see `BlockCtl::unstick`).
    #[cfg(feature = "std")]
    pub(crate) fn unstick_if(&self, walk: bool) {
        if walk {
            // SAFETY: `cur` is one of the ring's blocks, alive while the ring is.
            unsafe { self.cur.get().as_ref() }.unstick();
        }
    }

    /// Whether a request of `bytes` (word-aligned) could be served by an empty block
    /// of this ring: a `Fail` ring that refuses it now will refuse it for ever.
    #[cfg(feature = "std")]
    pub(crate) fn could_fit(&self, bytes: usize) -> bool {
        bytes != 0
            && bytes
                .checked_add(HDR + WORD)
                .is_some_and(|b| round_up(b - WORD, WORD) <= self.block_len)
    }

    /// [`could_fit`](Self::could_fit) for data aligned to `align` (a power of two):
    /// counting the padding an empty block puts before such data, and `false` for an
    /// alignment beyond what the ring serves.
    #[cfg(feature = "std")]
    pub(crate) fn could_fit_aligned(&self, bytes: usize, align: usize) -> bool {
        if align <= WORD {
            return self.could_fit(bytes);
        }
        // An empty block's first region starts where the block's base, aligned to
        // `MAX_ALIGN`, puts the data the least padding away; any later start pads as
        // much or more, and ends no sooner.
        align <= MAX_ALIGN
            && bytes != 0
            && bytes <= self.block_len
            && BlockCtl::need(0, bytes, align).0 <= self.block_len
    }

    /// The most bytes a request can have and still pass [`could_fit`](Self::could_fit).
    #[cfg(real_std)]
    pub(crate) fn largest_fit(&self) -> usize {
        // `round_up(b + HDR, WORD) <= block_len` ⇔ `b + HDR <= block_len` rounded down
        // to a word (`HDR` is a whole number of words).
        (self.block_len / WORD * WORD).saturating_sub(HDR)
    }

    /// The full path: the current block has no room.
    #[cold]
    #[inline(never)]
    fn claim_full(&self, bytes: usize, align: usize, init: u64) -> Option<Claim> {
        if align > MAX_ALIGN || bytes > MAX_WORDS * WORD - 2 * MAX_ALIGN {
            return None;
        }
        // No orphan sweep here: a parked block costs the claims nothing (releases of its
        // blockers free it), only the `Grow` policy sweeps, before it adds a block.
        match self.when_full {
            WhenFull::Fail => None,
            WhenFull::Heap => {
                let c = heap::claim(bytes, align, init)?;
                self.count_heap_fallback(bytes);
                Some(c)
            }
            WhenFull::Grow => {
                let found = self.blocks().iter().find_map(|&b| {
                    // SAFETY: the ring's blocks stay alive while the ring does.
                    let block = unsafe { b.as_ref() };
                    if bytes > block.len() {
                        return None;
                    }
                    // A full walk of every block, the current one included (its claim
                    // may have looked at its head only): no block is added while one
                    // has room.
                    Some((b, block.claim_walk(bytes, align, init)?))
                });
                if let Some((b, c)) = found {
                    self.cur.set(b);
                    // The current block ran out of room: the moment to give back the
                    // blocks a spike left drained (not on the hot path, and rare).
                    if self.surplus() {
                        self.give_back_drained();
                    }
                    return Some(c);
                }
                // Memory goes to the system before more is taken from it.
                orphan::on_activity();
                let len = self
                    .block_len
                    .max(round_up(bytes, WORD) + HDR + align.max(WORD));
                // SAFETY: see `blocks`; no reference into the vector is alive here.
                let blocks = unsafe { &mut *self.blocks.get() };
                // Room in the list first: a block made and then not kept would leak.
                blocks.try_reserve(1).ok()?;
                let b = BlockCtl::create(len)?;
                // SAFETY: just created, owned by this ring.
                unsafe { b.as_ref() }.without_edge();
                blocks.push(b);
                self.cur.set(b);
                self.set_defer();
                // SAFETY: just created, owned by this ring. (`claim_walk`: a new block's
                // window is closed, and its claim must not defer to the ring.)
                unsafe { b.as_ref() }.claim_walk(bytes, align, init)
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        for &b in self.blocks.get_mut().iter() {
            // SAFETY: the ring's blocks stay alive while the ring does; the window's
            // header is written before the block is walked by anyone else.
            unsafe { b.as_ref() }.close();
            // SAFETY: the ring gives the block up; only buffer handles may still refer
            // to it, and the orphan sweep frees it after their release.
            unsafe { orphan::retire(b) };
        }
        orphan::on_activity();
    }
}

// Outside loom: they use the ring's atomics outside a model.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::header::{count, span};
    use super::*;
    use crate::sync::Ordering;

    /// Whether `f` holds within a few seconds: a sweep that another test's ring runs
    /// may hold a release's request for a moment, and frees the block when it ends.
    fn soon(f: impl Fn() -> bool) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(5) {
            if f() {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[cfg(real_std)]
    #[test]
    fn the_largest_fit_is_the_largest_request_an_empty_ring_serves() {
        for cap in [1000, 1024, 4096, 1 << 16] {
            let ring = Ring::new(cap);
            let n = ring.largest_fit();
            assert!(
                ring.could_fit(n) && !ring.could_fit(n + 1),
                "capacity {cap}"
            );
            assert!(Ring::new(cap).fixed(n).is_some(), "capacity {cap}");
            assert!(Ring::new(cap).fixed(n + 1).is_none(), "capacity {cap}");
        }
    }

    #[test]
    fn dropped_ring_is_freed_by_the_last_release() {
        let _one = orphan::one_test();
        let ring = Ring::new(1024);
        let a = ring.fixed(8).unwrap();
        let b = ring.fixed(8).unwrap().freeze();
        let b2 = b.clone();
        // A sweep on another thread (other tests' rings sweep while a block is orphaned)
        // holds the stack for a moment: `soon` looks again.
        drop(ring);
        assert!(
            soon(orphan::pending),
            "a block with live buffers waits on the orphan stack"
        );
        drop(a);
        drop(b);
        assert!(soon(orphan::pending));
        std::thread::spawn(move || drop(b2)).join().unwrap();
        assert!(
            soon(|| !orphan::pending()),
            "the last release swept the block"
        );
    }

    /// One buffer kept after its ring was dropped: releases elsewhere do not sweep
    /// (the old design swept on every release while any block was orphaned), and the
    /// kept buffer's own release frees its block.
    #[test]
    #[cfg(not(loom))]
    fn a_pinned_orphan_costs_other_releases_no_sweep() {
        let _one = orphan::one_test();
        let other = Ring::new(1024);
        let pinned = other.fixed(8).unwrap();
        drop(other);
        let ring = Ring::new(1 << 16);
        let before = orphan::SWEEPS.load(Ordering::Relaxed);
        for _ in 0..1000 {
            drop(ring.fixed(64).unwrap());
        }
        let swept = orphan::SWEEPS.load(Ordering::Relaxed) - before;
        // Other tests of this binary may drop rings (and sweep) meanwhile: a bound, not 0.
        assert!(swept < 100, "{swept} sweeps for 1000 unrelated releases");
        drop(pinned);
        // Its release swept: nothing of this test is left.
        assert!(soon(|| !orphan::pending()), "the pinned release swept");
    }

    /// Whether releases fence follows the kernel's answer; with
    /// `--cfg ringmem_refuse_membarrier` the fallback is on, and a producer that waits
    /// is still woken by a release on another thread (the CI's ASan stage runs the
    /// integration tests that way too).
    #[cfg(feature = "std")]
    #[test]
    fn releases_fence_when_membarrier_is_refused() {
        // Its wait sweeps on every try while the orphan tests park a block, and counts
        // toward the tries of `a_waiter_sleeps_while_other_rings_release`.
        let _one = orphan::one_test();
        let ring = Ring::new(1024);
        assert_eq!(orphan::fenced(), !crate::sync::barrier::ready());
        if cfg!(ringmem_refuse_membarrier) {
            assert!(orphan::fenced(), "the fallback is on");
        }
        let full = ring.fixed(1000).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(full);
        });
        assert!(ring.fixed_wait(1000).is_ok());
        t.join().unwrap();
    }

    /// A producer waiting on a full ring sleeps while another ring releases (each of
    /// those releases woke it before the waiters' table: thousands of tries, a core of
    /// system time), and the release into its own ring wakes it.
    #[cfg(feature = "std")]
    #[test]
    fn a_waiter_sleeps_while_other_rings_release() {
        // The only other unit test that waits; it counts toward the same tries.
        let _one = orphan::one_test();
        let tries = || wait::TRIES.load(Ordering::Relaxed);
        let a = Ring::new(1024);
        let full = a.fixed(1000).unwrap();
        let before = tries();
        let waiter = std::thread::spawn(move || {
            a.fixed_wait_timeout(1000, std::time::Duration::from_secs(60))
                .is_ok()
        });
        assert!(soon(|| tries() > before), "the producer registers");
        let busy = Ring::new(1 << 16);
        for i in 0..if cfg!(miri) { 200 } else { 200_000 } {
            let mut b = busy.fixed(64).unwrap();
            b.try_extend_from_slice(&[i as u8; 64]).unwrap();
        }
        // Its first try only: nothing bumps its entry's epoch before the release into
        // its own ring (the bound leaves one try of slack).
        let while_busy = tries() - before;
        drop(full);
        assert!(waiter.join().unwrap(), "the release into its ring woke it");
        assert!(
            while_busy <= 2,
            "{while_busy} tries while another ring released"
        );
    }

    /// The regions of `ring`'s block as its walks see them, the window taken as one free
    /// run: they tile the block, the head is a header (or the window's start), and the
    /// live ones are `live`.
    #[cfg(real_std)]
    fn assert_tiled(ring: &Ring, live: usize, what: &dyn core::fmt::Display) {
        // SAFETY: the ring's only block is alive.
        let block = unsafe { ring.cur.get().as_ref() };
        let (head, limit) = block.window();
        let (mut off, mut n, mut head_seen) = (0, 0, head == 0 || head == block.len());
        while off < block.len() {
            head_seen |= off == head;
            if off == head && limit > head {
                off = limit;
                continue;
            }
            // SAFETY: walking headers from offset 0, over the window.
            let h = unsafe { block.hdr(off) }.load(Ordering::Relaxed);
            assert!(span(h) >= HDR, "{what}: empty span at {off}");
            off += span(h);
            n += usize::from(count(h) != 0);
        }
        assert_eq!(
            off,
            block.len(),
            "{what}: regions must tile the block exactly"
        );
        assert!(head_seen, "{what}: the head {head} is not a header");
        assert_eq!(n, live, "{what}: live regions");
    }

    /// Whether the lowest claims' floor of `ring`'s block is a header (or the block's
    /// end), outside the window.
    #[cfg(real_std)]
    fn floor_is_a_header(ring: &Ring) -> bool {
        // SAFETY: the ring's only block is alive.
        let block = unsafe { ring.cur.get().as_ref() };
        let ((head, limit), floor) = (block.window(), block.floor());
        if floor == block.len() {
            return true;
        }
        let mut off = 0;
        while off < floor {
            // SAFETY: walking headers from offset 0; the window is checked below.
            off += span(unsafe { block.hdr(off) }.load(Ordering::Relaxed));
            if off > head && off <= limit {
                return false; // the floor would lie inside the window
            }
            if off == head && limit > head {
                off = limit;
            }
        }
        off == floor && !(head < floor && floor < limit)
    }

    /// Lowest claims of one size amid kept regions with short gaps between them: each
    /// starts where the last found room, not at the block start (a pool's copy ring,
    /// whose kept frames leave gaps too short for a read region).
    #[cfg(real_std)]
    #[test]
    fn a_lowest_claim_starts_where_the_last_of_its_size_found_room() {
        let (n, size) = if cfg!(miri) {
            (200, 16 << 10)
        } else {
            (2000, 64 << 10)
        };
        let ring = Ring::new(8 << 20);
        ring.pack_low();
        let mut small: Vec<_> = (0..n)
            .map(|_| Some(ring.claim_lowest(1000).unwrap()))
            .collect();
        for r in small.iter_mut().step_by(2) {
            *r = None; // gaps, each too short for what follows
        }
        let steps = || block::FIRST_FIT_STEPS.with(|s| s.get());
        let before = steps();
        let large: Vec<_> = (0..32).map(|_| ring.claim_lowest(size).unwrap()).collect();
        let walked = steps() - before;
        // From the start, every claim steps over the `n` regions; from the floor, one
        // in 16 does.
        assert!(walked < 32 * n / 5, "{walked} headers for 32 claims");
        for pair in large.windows(2) {
            assert!(
                pair[0].as_ptr() < pair[1].as_ptr(),
                "the lowest room, in order"
            );
        }
        assert!(floor_is_a_header(&ring));
        // Room made below the floor is taken within 16 claims.
        drop(small);
        let low = (0..=16)
            .map(|_| ring.claim_lowest(size).unwrap())
            .any(|r| r.as_ptr() < large[0].as_ptr());
        assert!(low, "the room below the floor was not found");
    }

    /// A claim that finds no room past the floor walks from the block start.
    #[cfg(real_std)]
    #[test]
    fn a_lowest_claim_without_room_past_the_floor_looks_below_it() {
        let ring = Ring::new(1 << 20);
        ring.pack_low();
        let mut all: Vec<_> = core::iter::from_fn(|| ring.claim_lowest(8 << 10)).collect();
        let first = all.remove(0);
        let at = first.as_ptr();
        drop(first); // room below the floor, the rest held
        let again = ring
            .claim_lowest(8 << 10)
            .expect("the room below the floor");
        assert_eq!(again.as_ptr(), at);
        drop(all);
    }

    /// The floor is a header no more once a walk merges free regions over it, or a
    /// region grows over it: it goes back to the block start.
    #[cfg(real_std)]
    #[test]
    fn the_floor_stays_a_header() {
        // Merged over: the floor's region and the one before it released, then a plain
        // claim's walk takes both.
        let ring = Ring::new(64 << 10);
        ring.pack_low();
        let mut all: Vec<_> = (0..15).map(|_| ring.claim_lowest(4000).unwrap()).collect();
        let (at, below) = (all.pop().unwrap(), all.pop().unwrap()); // `at`: the floor
        let (floor, start) = (at.as_ptr(), below.as_ptr());
        drop((below, at));
        assert!(floor_is_a_header(&ring));
        ring.unstick_if(true); // a walk round the block, as a woken waiter's
        let both = ring.fixed(6000).expect("the two regions merged");
        assert_eq!(both.as_ptr(), start);
        assert!(floor < both.as_ptr().wrapping_add(6000));
        assert!(floor_is_a_header(&ring), "merged over");
        // Grown over: the floor's region given back to the window (it was the latest),
        // then the region before it grown in place over the window's front.
        let ring = Ring::new(64 << 10);
        ring.pack_low();
        let mut before = ring.claim_lowest(1000).unwrap();
        ring.claim_lowest(1000).unwrap().release_in(&ring);
        before.grow_in(2000, &ring);
        assert!(before.capacity() >= 2000);
        assert!(floor_is_a_header(&ring), "grown over");
    }

    /// A ring whose claims take the lowest room gives back the pages of long free runs
    /// amid what is live, not of short ones; any other ring, only past what it keeps.
    #[test]
    #[cfg(real_std)]
    fn a_ring_that_packs_low_gives_back_long_runs_wherever_they_lie() {
        let region = 60 << 10;
        // The regions whose room starts a run taken.
        let taken = |low: bool| {
            let ring = Ring::new(8 << 20);
            if low {
                ring.pack_low();
            }
            let mut all: Vec<_> = (0..64)
                .map(|_| Some(ring.claim_lowest(region).unwrap()))
                .collect();
            let at: Vec<_> = all.iter().map(|r| r.as_ref().unwrap().as_ptr()).collect();
            // Live: 0..32, 36, 60 and 63; free runs of 4 regions (short), 23 and 2.
            for (i, r) in all.iter_mut().enumerate() {
                if !(i < 32 || [36, 60, 63].contains(&i)) {
                    *r = None;
                }
            }
            let mut runs = Vec::new();
            ring.take_free_pages(false, |run, _| runs.push(run));
            let mut starts: Vec<_> = runs
                .iter()
                .map(|run| at.iter().position(|&p| p == run.as_ptr()))
                .collect();
            starts.sort();
            starts
        };
        // Past an eighth over the live bytes (35 regions), the run at 61 and the rest
        // (`None`: past the last region); the long one at 37 below that too.
        assert_eq!(taken(true), [None, Some(37), Some(61)]);
        // Past twice them alone: the ring's tail, past its 64 regions.
        assert_eq!(taken(false), [None]);
    }

    /// A ring whose claims take the lowest room gives free pages back down to an eighth
    /// over what is live; any other, down to twice it (see `BlockCtl::pack_low`).
    #[test]
    #[cfg(real_std)]
    fn a_ring_that_packs_low_keeps_an_eighth_over_what_is_live() {
        let region = 60 << 10;
        let live = 16 * (HDR + region);
        // The bytes below the first free run taken, from the first region.
        let kept = |low: bool| {
            let ring = Ring::new(8 << 20);
            if low {
                ring.pack_low();
            }
            let mut held: Vec<_> = (0..64)
                .map(|_| ring.claim_lowest(region).unwrap())
                .collect();
            held.truncate(16);
            let mut runs = Vec::new();
            ring.take_free_pages(false, |run, _| runs.push(run));
            let first = runs.iter().map(|r| r.as_ptr() as usize).min().unwrap();
            first - held[0].as_ptr() as usize
        };
        let (low, plain) = (kept(true), kept(false));
        assert!(
            (live..live + live / 8 + HDR).contains(&low),
            "{low} for {live} live"
        );
        assert!(
            (2 * live..2 * live + HDR).contains(&plain),
            "{plain} for {live} live"
        );
    }

    /// Every way a pool's rings change, in random order, against the ring's invariants
    /// and the bytes of what is live: claims at the window and grown over it, the
    /// lowest claim (which merges free runs the head may lie in), shrinks, splits,
    /// releases on the ring's thread and elsewhere, free runs held while their pages go
    /// back. (A lowest claim that found no room once left the head inside a run it
    /// merged, and the next claim there cut a live region in two.)
    #[test]
    #[cfg(real_std)]
    fn every_change_keeps_regions_tiled() {
        // Under Miri, fewer steps and sizes a sixteenth as large (every byte is checked).
        let (steps, scale) = if cfg!(miri) { (150, 16) } else { (3_000, 1) };
        for seed in 1..=if cfg!(miri) { 1u64 } else { 8 } {
            let ring = Ring::new((256 << 10) / scale);
            ring.scan_eagerly();
            let mut x: u64 = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rnd = |m: usize| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % m as u64) as usize
            };
            let (mut live, mut runs): (Vec<(FixedBufMut, u8)>, Vec<_>) = (Vec::new(), Vec::new());
            for i in 0..steps {
                let v = (i % 250) as u8 + 1;
                let mut fill = |mut b: FixedBufMut, n: usize| {
                    let n = n.min(b.capacity());
                    b.try_extend_from_slice(&vec![v; n]).unwrap();
                    live.push((b, v));
                };
                match rnd(12) {
                    0 | 1 => {
                        let n = 1 + rnd((20 << 10) / scale);
                        if let Some(b) = ring.claim_lowest(n) {
                            fill(b, n);
                        }
                    }
                    2..=4 => {
                        let n = 1 + rnd((8 << 10) / scale);
                        if let Some(mut b) = ring.fixed(1 + rnd(n)) {
                            b.grow_in(n, &ring);
                            fill(b, rnd(n));
                        }
                    }
                    5 if !live.is_empty() => live.last_mut().unwrap().0.shrink_in(&ring),
                    6 if !live.is_empty() => {
                        let (b, v) = live.last_mut().unwrap();
                        if let Some(rest) = b.split_spare_in(8, &ring) {
                            let v = *v;
                            live.push((rest, v));
                        }
                    }
                    7 if !live.is_empty() => live.pop().unwrap().0.release_in(&ring),
                    8 if runs.is_empty() => {
                        ring.take_free_pages(rnd(2) == 0, |run, t| runs.push((run, t)));
                    }
                    8 => runs
                        .drain(..)
                        .for_each(|(mut run, t)| _ = run.discard_pages(t)),
                    _ if !live.is_empty() => drop(live.swap_remove(rnd(live.len()))),
                    _ => {}
                }
                assert_tiled(
                    &ring,
                    live.len() + runs.len(),
                    &format_args!("seed {seed}, step {i}"),
                );
                for (b, v) in live.iter().filter(|_| i % 8 == 0) {
                    assert!(
                        b.iter().all(|x| x == v),
                        "seed {seed}, step {i}: bytes overwritten"
                    );
                }
            }
        }
    }

    #[test]
    fn walk_keeps_regions_tiled() {
        let ring = Ring::new(2048);
        let mut live = alloc::vec::Vec::new();
        for i in 0..500usize {
            if i % 3 == 0 && !live.is_empty() {
                live.swap_remove((i * 7) % live.len());
            }
            if let Some(b) = ring.fixed(1 + (i * 37) % 200) {
                live.push(b);
            }
            // SAFETY: the ring's only block is alive.
            let block = unsafe { ring.cur.get().as_ref() };
            block.close();
            let (mut off, mut n) = (0, 0);
            while off < block.len() {
                // SAFETY: walking headers from offset 0.
                let h = unsafe { block.hdr(off) }.load(Ordering::Relaxed);
                assert!(span(h) >= HDR, "empty span at {off}");
                off += span(h);
                n += usize::from(count(h) != 0);
            }
            assert_eq!(off, block.len(), "regions must tile the block exactly");
            assert_eq!(n, live.len());
        }
    }
}
