//! The kernel side: an io_uring instance, its provided-buffer group over a ring, each
//! connection's multishot receive, and the task that reaps their completions.
//!
//! Everything the kernel shares sits in [`State`], behind one lock that is held per
//! batch of completions, per submission and per connection made or dropped, never per
//! frame: a reader takes its connection's views from its [`Queue`] (a lock of its own)
//! and finds frames in them without the group's lock.

use core::cell::Cell;
use core::pin::Pin;
use core::ptr::NonNull;
use std::alloc::Layout;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::books::{Books, Entry, Judge};
use super::frames::Chunk;
use super::lock;
use crate::io::{Memory, ReadPool};
use crate::ring::wait::{poll_until, Span, TaskSlot};
use crate::{FixedBufMut, Ring};

/// The group's id: one group per io_uring instance.
const BGID: u16 = 0;

/// `IOU_PBUF_RING_INC`, incremental consumption (Linux 6.12): the io-uring crate does
/// not name it.
const PBUF_RING_INC: u16 = 2;

/// Bytes of a probe buffer (see `Trust`): what a frame kept from it holds. A quarter
/// of a reader's probe region (`io::core::PROBE_READ`): a buffer here serves any
/// connection, and is republished as soon as the kernel gives it back.
const PROBE_BUF: usize = 1 << 10;

/// Bytes of the least buffer published when the ring has no room for a whole one.
const LEAST_BUF: usize = 4 << 10;

/// What a receive is taken to bring before any has completed (see `State::recv_avg`).
const RECV_GUESS: usize = 8 << 10;

/// How often, at most, the driver gives the ring's free pages back to the system (a
/// walk of its headers, under the lock): see `Ring::give_back_pages`.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(1);

/// A timeout of [`GIVE_BACK_EVERY`], which brings the driver a turn to give pages back
/// in once the receives have gone quiet (see `State::give_back`). The kernel reads it
/// when the request is submitted.
static GIVE_BACK_TIMER: types::Timespec = types::Timespec::new().sec(GIVE_BACK_EVERY.as_secs());

/// `user_data` of that timeout: no connection's (see [`user_data`]).
const TIMER: u64 = u64::MAX;

/// Offset of `optlen` in the kernel's 64-byte `io_uring_sqe` (a union with
/// `file_index` and `splice_fd_in`).
const SQE_OPTLEN: usize = 44;

/// `sqe` (a multishot receive) ending on its own once it has received `total` bytes
/// (Linux 6.17; earlier kernels fail the receive with `EINVAL`). The io-uring crate
/// has no field for it.
fn capped(sqe: squeue::Entry, total: u32) -> squeue::Entry {
    // `squeue::Entry` is `#[repr(C)]` around the kernel's `io_uring_sqe`: 64 bytes of
    // integers and unions of them, no padding (`transmute` checks the size).
    // `SQE_OPTLEN` is the ABI's offset of `optlen`, which a receive that names its
    // socket in `fd` does not use otherwise.
    // SAFETY: every pattern of 64 bytes is a value of either type (above).
    let mut raw: [u8; 64] = unsafe { core::mem::transmute(sqe) };
    raw[SQE_OPTLEN..SQE_OPTLEN + 4].copy_from_slice(&total.to_ne_bytes());
    // SAFETY: as above.
    unsafe { core::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

/// How long a connection's receive stays paused with bytes its reader has not taken
/// before they may be copied out of the ring (see `State::move_out`): a reader that
/// long without taking its bytes has stopped reading, for now.
const STALLED_AFTER: Duration = Duration::from_millis(20);

/// A timeout of [`STALLED_AFTER`], which brings the driver a turn to copy stalled
/// readers' bytes out while the ring is short (see `State::move_out`).
static STALLED_TIMER: types::Timespec =
    types::Timespec::new().nsec(STALLED_AFTER.as_nanos() as u32);

/// `user_data` of that timeout.
const STALL_TIMER: u64 = u64::MAX - 2;

/// How long a group dropped with receives in flight waits for their last completions
/// before it leaks their buffers instead.
const DRAIN: Duration = Duration::from_secs(5);

/// `user_data` of a connection's receive, and of its cancellation: the connection's
/// index, its generation (an index is reused), and the kind.
fn user_data(id: u32, gen: u32, cancel: bool) -> u64 {
    (u64::from(id) << 32) | (u64::from(gen & 0x7fff_ffff) << 1) | u64::from(cancel)
}

/// The connection's index and generation in a `user_data`.
fn conn_key(ud: u64) -> (u32, u32) {
    ((ud >> 32) as u32, ((ud >> 1) & 0x7fff_ffff) as u32)
}

thread_local! {
    /// An empty list with room, for the next `State::take_wake` on this thread: a turn
    /// allocates no list of its own.
    static SPARE_WAKE: Cell<Vec<Waker>> = const { Cell::new(Vec::new()) };
}

/// Wakes the tasks of `wake` (taken from under the lock), and keeps the list.
fn wake_all(mut wake: Vec<Waker>) {
    wake.drain(..).for_each(Waker::wake);
    SPARE_WAKE.with(|s| s.set(wake));
}

/// The group's settings, as `UringOptions` gives them.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) bytes: usize,
    pub(crate) buf_len: usize,
    pub(crate) incremental: Option<bool>,
    pub(crate) queue_cap: usize,
    /// Buffers the kernel holds at most.
    pub(crate) buffers: usize,
    /// Slots of the file table at most.
    pub(crate) slots: u32,
    /// Where stalled readers' bytes go when the ring is short.
    pub(crate) pool: ReadPool,
}

/// The count of one receive path's events, as `UringStats` shows them, and what
/// readers look at without the group's lock.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) completions: AtomicU64,
    pub(crate) out_of_buffers: AtomicU64,
    pub(crate) rearms: AtomicU64,
    pub(crate) pauses: AtomicU64,
    pub(crate) published: AtomicU64,
    /// Bytes of stalled readers copied out of the ring.
    pub(crate) moved: AtomicU64,
}

/// What the group's handles, its readers and its driver share.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Group handles and readers alive: the driver ends once there are none and no
    /// receive is in flight.
    users: AtomicUsize,
    /// The ring's span, which a release that makes room falls in.
    span: Span,
    pub(crate) incremental: bool,
    pub(crate) buf_len: usize,
    pub(crate) counters: Arc<Counters>,
}

/// A connection's received bytes, handed from the driver to its reader.
#[derive(Default)]
pub(crate) struct Queue {
    /// Views of completions, in order.
    pub(crate) chunks: VecDeque<Chunk>,
    /// Their bytes.
    pub(crate) bytes: usize,
    /// The reader's task.
    pub(crate) waker: Option<Waker>,
    /// How the receive ended for good: the peer closed (`Ok`), or an error.
    pub(crate) end: Option<io::Result<()>>,
    /// The receive was stopped because the queue held too much: the reader starts it
    /// again once it has taken the bytes ([`Shared::resume`]).
    pub(crate) paused: bool,
    /// Its reader sleeps holding the start of a frame as a view that the next
    /// completion may join (`Assembler::held_view`): woken when another connection's
    /// completion lands in that buffer, or gives it back, to copy the start out.
    pub(crate) pinned: bool,
    /// Completions its reader has taken (wrapping): a reader that took one since its
    /// receive paused is reading, not stalled (see `State::move_out`).
    pub(crate) taken: u32,
}

/// Where a connection's receive stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recv {
    /// Submitted and not ended: the kernel may complete into the group's buffers.
    Armed,
    /// Its cancellation is submitted; the last completion is still to come.
    Cancelling,
    /// Ended: no completion is to come.
    Idle,
}

struct Conn {
    /// The socket the receive reads.
    file: ConnFile,
    queue: Arc<Mutex<Queue>>,
    gen: u32,
    recv: Recv,
    /// Its reader is gone: the connection goes once its receive has ended.
    closing: bool,
    /// Waiting in line for buffers: after `ENOBUFS` or a single receive that left
    /// bytes in its socket, or started again while others waited (see
    /// `State::arm_in_turn`).
    parked: bool,
    /// When its receive was last paused with bytes its reader had not taken, or its
    /// reader last found taking them since, and `Queue::taken` then.
    paused_at: Instant,
    taken_then: u32,
    /// Listed in `State::stalled`.
    listed: bool,
    /// Its reader has looked for bytes: the receive has been started.
    started: bool,
    /// Its receive is a single one, started while more waited for buffers than the
    /// kernel's had room for: it ends at its first completion and waits again.
    single: bool,
    /// Bytes its queue may hold before its receive is paused: its share of
    /// `State::granted` (see [`State::grow`]).
    cap: usize,
}

/// How a connection's receive names its socket.
enum ConnFile {
    /// The slot of the instance's file table with the connection's id: the table holds
    /// the socket open, so the connection uses no descriptor of the process. Cleared
    /// when the connection goes.
    Slot,
    /// A descriptor of the connection's own (ids past the table), kept open until the
    /// last completion (the receive holds the file anyway).
    Fd(OwnedFd),
}

/// Slots of a group's file tables registered at most, over its shards (fewer where the
/// descriptor limit is lower: the kernel refuses a table longer than it).
pub(crate) const SLOTS_MOST: u32 = 1 << 16;

/// Registers an empty file table of at most `most` slots on `uring`, as long as the
/// kernel takes (Linux 5.19 on): its slots, 0 where it takes none.
fn file_slots(uring: &IoUring, most: u32) -> u32 {
    let mut slots = most;
    while slots >= 64 {
        if uring.submitter().register_files_sparse(slots).is_ok() {
            return slots;
        }
        slots /= 2;
    }
    0
}

/// The socket of a connection to be made: the caller's, or given to the group.
pub(crate) enum Socket<'a> {
    Borrowed(BorrowedFd<'a>),
    Owned(OwnedFd),
}

/// The group's entry array, shared with the kernel: page-aligned, its tail in the first
/// entry's last field.
struct EntryRing {
    ptr: NonNull<RawEntry>,
    entries: u16,
    /// The tail as published and after the entries pushed since.
    tail: u16,
}

/// `struct io_uring_buf`.
#[repr(C)]
struct RawEntry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

// SAFETY: the array is this value's alone (and the kernel's, which does not care which
// thread publishes); it moves with the state, behind its lock.
unsafe impl Send for EntryRing {}

impl EntryRing {
    fn layout(entries: u16) -> Layout {
        let bytes = (usize::from(entries) * core::mem::size_of::<RawEntry>()).max(4096);
        Layout::from_size_align(bytes, 4096).expect("a page-aligned array of at most 512 KiB")
    }

    fn new(entries: u16) -> Option<EntryRing> {
        let layout = Self::layout(entries);
        let ptr = crate::raw::alloc(layout)?;
        // SAFETY: `layout.size()` bytes were just allocated.
        unsafe { ptr.as_ptr().write_bytes(0, layout.size()) };
        Some(EntryRing {
            ptr: ptr.cast(),
            entries,
            tail: 0,
        })
    }

    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// Writes `e` at the tail (seen by the kernel once [`publish`](Self::publish)ed).
    fn push(&mut self, e: Entry) {
        let slot = usize::from(self.tail & (self.entries - 1));
        // SAFETY: `slot < entries`. An id per published entry, `e`'s free: the kernel is
        // done with the entry replaced, and reads this one once the tail moves past it.
        // The tail (the first entry's `resv`) is not written here.
        unsafe {
            let p = self.ptr.as_ptr().add(slot);
            core::ptr::addr_of_mut!((*p).addr).write_volatile(e.addr as usize as u64);
            core::ptr::addr_of_mut!((*p).len).write_volatile(e.len);
            core::ptr::addr_of_mut!((*p).bid).write_volatile(e.bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Shows the kernel the entries pushed so far.
    fn publish(&self) {
        // SAFETY: the tail is the first entry's `resv`, a 2-byte-aligned u16 inside the
        // array, which only this store writes (the kernel reads it with an acquire).
        let tail = unsafe { &*core::ptr::addr_of!((*self.ptr.as_ptr()).resv).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// Frees the array.
    ///
    /// # Safety
    /// The kernel no longer has it (the group is unregistered), and it is not used again.
    unsafe fn free(&mut self) {
        // SAFETY: allocated in `new` with this layout; the caller promises the rest.
        unsafe { crate::raw::dealloc(self.ptr.cast(), Self::layout(self.entries)) };
    }
}

/// What the lock guards: all that the kernel shares with the group.
pub(crate) struct State {
    ring: Ring,
    books: Books,
    entries: EntryRing,
    conns: Vec<Option<Conn>>,
    free_ids: Vec<u32>,
    /// The file table's slots: a connection whose id is lower reads through its slot.
    slots: u32,
    /// The next connection's generation (an id is reused; a stale completion is not
    /// taken for the new connection's).
    next_gen: u32,
    /// The most bytes a connection's queue holds before its receive is paused; a
    /// connection starts with `buf_len` and grows towards it (see [`grow`](Self::grow)).
    queue_cap: usize,
    /// The connections' caps summed beyond `buf_len` each, and the most that sum
    /// reaches (the ring's bytes): what readers that stop reading can hold, copied
    /// out, beyond `buf_len` each.
    granted: usize,
    grant_most: usize,
    /// Whether the kernel ends a receive at a total of bytes (Linux 6.17): the queue's
    /// cap holds without a cancellation. Found out by the first receive.
    total_cap: bool,
    buf_len: usize,
    /// The driver's task, woken when the last user goes.
    driver: Option<Waker>,
    /// Tasks to wake once the lock is let go.
    wake: Vec<Waker>,
    /// Bytes a receive brought, a moving average over the last few: how many parked
    /// receives the bytes the kernel has left can serve (see `refill`).
    recv_avg: usize,
    /// Single receives started since completions were last reaped (see `refill`).
    started_since_reap: usize,
    /// Connections whose receive was paused with bytes their reader had not taken,
    /// each once, in the order they were first paused: `move_out` looks at them.
    stalled: VecDeque<(u32, u32)>,
    /// When `move_out` last looked at them.
    moved_at: Instant,
    /// A timeout for `move_out` is in flight.
    stall_timer: bool,
    /// The pool that stalled readers' bytes are copied into, and the most bytes one
    /// turn of `move_out` copies (a quarter of the ring: the copies are made under the
    /// lock).
    mem: Memory,
    move_most: usize,
    /// Connections waiting in line for buffers (`Conn::parked`), to start again once
    /// the kernel has buffers, oldest first; an id may be stale (its connection gone,
    /// or started again): its `Conn::parked` says.
    parked: VecDeque<u32>,
    /// When free pages of the ring last went back to the system, the bytes that went,
    /// and the buffers published by then.
    given_back: Instant,
    given_bytes: usize,
    published_then: u64,
    /// A timeout for the next give-back is in flight (see `give_back`).
    timer: bool,
    /// The group's counts (also `Shared`'s, read without the lock).
    counters: Arc<Counters>,
    /// Whether frames are found kept (the buffers' probes tell it): decides whether
    /// short frames are copied, and when a buffer is a probe (see `Core::retire`).
    judge: Arc<Judge>,
    /// Dropped last (see `Drop`), or leaked.
    uring: ManuallyDrop<IoUring>,
}

/// The group's io_uring instance, for `AsyncFd`.
struct UringFd(RawFd);

impl AsRawFd for UringFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Why a group could not be made: see `UringError`.
pub(crate) enum StartError {
    NoRuntime,
    Refused(io::Error),
    Other(io::Error),
}

impl Shared {
    /// Sets up the io_uring instance and its group, publishes the first buffers and
    /// spawns the driver on the current tokio runtime.
    pub(crate) fn start(config: Config) -> Result<Arc<Shared>, StartError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        // A receive's completion is task work of the thread that submitted it. By
        // default the kernel interrupts that thread (an IPI) to run it; cooperative
        // task work runs at the thread's next system call instead, which a tokio worker
        // makes often (a sleeping one is still woken). Linux 5.19 on; older ones refuse
        // the flag, and the default serves there.
        let uring = IoUring::builder()
            .setup_cqsize(4096)
            .setup_coop_taskrun()
            .build(256)
            .or_else(|_| IoUring::builder().setup_cqsize(4096).build(256))
            .map_err(StartError::Refused)?;
        let buf_len = config.buf_len.clamp(LEAST_BUF, u32::MAX as usize >> 1);
        let bytes = config.bytes.max(buf_len);
        let ring = Ring::builder()
            .capacity(bytes)
            .build()
            .map_err(|e| StartError::Other(io::Error::new(io::ErrorKind::OutOfMemory, e)))?;
        // An id per buffer the kernel may hold: few, so that the buffers the kernel
        // cycles through (and the pages it touches) are few; the rest of the ring is for
        // the frames the application keeps.
        let buffers = config.buffers.clamp(1, 1 << 15);
        let entries = u16::try_from(buffers.next_power_of_two()).expect("at most 2^15");
        let entry_ring = EntryRing::new(entries)
            .ok_or_else(|| StartError::Other(io::ErrorKind::OutOfMemory.into()))?;
        let register = |flags| {
            // SAFETY: the array is page-aligned, `entries` long, zeroed, and lives until
            // the group is unregistered (`State`'s drop) or for ever (leaked there).
            unsafe {
                uring.submitter().register_buf_ring_with_flags(
                    entry_ring.addr(),
                    entries,
                    BGID,
                    flags,
                )
            }
        };
        let incremental = match config.incremental {
            Some(false) => register(0).map(|()| false),
            Some(true) => register(PBUF_RING_INC).map(|()| true),
            None => register(PBUF_RING_INC)
                .map(|()| true)
                .or_else(|_| register(0).map(|()| false)),
        };
        let incremental = match incremental {
            Ok(inc) => inc,
            Err(e) => {
                let mut entry_ring = entry_ring;
                // SAFETY: never registered.
                unsafe { entry_ring.free() };
                return Err(StartError::Refused(e));
            }
        };
        let fd = uring.as_raw_fd();
        let span = ring.span();
        // A probe per buffer of the ring that views may hold, and one per id.
        let spares = bytes / buf_len + usize::from(entries);
        let judge = Arc::new(Judge::new());
        let mut state = State {
            ring,
            books: Books::new(entries, Arc::clone(&judge), spares),
            entries: entry_ring,
            conns: Vec::new(),
            free_ids: Vec::new(),
            slots: file_slots(&uring, config.slots),
            next_gen: 0,
            queue_cap: config.queue_cap.max(buf_len),
            granted: 0,
            grant_most: bytes,
            total_cap: true,
            buf_len,
            driver: None,
            wake: Vec::new(),
            parked: VecDeque::new(),
            stalled: VecDeque::new(),
            moved_at: Instant::now(),
            stall_timer: false,
            mem: Memory::Pool(config.pool),
            move_most: bytes / 4,
            recv_avg: RECV_GUESS,
            started_since_reap: 0,
            given_back: Instant::now(),
            given_bytes: 0,
            published_then: 0,
            timer: false,
            counters: Arc::default(),
            judge,
            uring: ManuallyDrop::new(uring),
        };
        // From the start, claims stay low in the ring while what is live fits there.
        state.ring.give_back_pages();
        state.refill(false);
        let counters = Arc::clone(&state.counters);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            users: AtomicUsize::new(1),
            span,
            incremental,
            buf_len,
            counters,
        });
        let _guard = rt.enter();
        // The descriptor stays open while the `AsyncFd` lives: the driver drops it (its
        // first field) before its count of `Shared`, which owns the instance. (The
        // unsafe `register_with_interest` that says so is in tokio 1.51.6 and 1.53.3 on,
        // newer than this crate's tokio floor.)
        #[allow(deprecated)]
        let fd =
            AsyncFd::with_interest(UringFd(fd), Interest::READABLE).map_err(StartError::Other)?;
        rt.spawn(Driver {
            fd,
            shared: Arc::clone(&shared),
            room: TaskSlot::default(),
        });
        Ok(shared)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Counts a new user (a group handle or a reader).
    pub(crate) fn add_user(&self) {
        // Relaxed: as `Arc`'s increment, from a user that exists.
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// A user goes: the last wakes the driver, which ends once no receive is in flight.
    pub(crate) fn drop_user(&self) {
        if self.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            let driver = self.lock().driver.take();
            if let Some(w) = driver {
                w.wake();
            }
        }
    }

    /// Registers a connection reading `socket` and starts its receive: its id,
    /// generation and queue.
    pub(crate) fn connect(&self, socket: Socket<'_>) -> io::Result<(u32, u32, Arc<Mutex<Queue>>)> {
        let queue = Arc::new(Mutex::new(Queue::default()));
        let mut st = self.lock();
        let id = match st.free_ids.pop() {
            Some(id) => id,
            None => {
                let id = u32::try_from(st.conns.len())
                    .map_err(|_| io::Error::other("more than 2^32 connections on one group"))?;
                st.conns.push(None);
                id
            }
        };
        let raw = match &socket {
            Socket::Borrowed(fd) => fd.as_raw_fd(),
            Socket::Owned(fd) => fd.as_raw_fd(),
        };
        // The table takes its own reference to the socket: an owned descriptor is
        // closed here, a borrowed one stays the caller's.
        let in_slot = id < st.slots
            && matches!(
                st.uring.submitter().register_files_update(id, &[raw]),
                Ok(1)
            );
        let file = match socket {
            _ if in_slot => ConnFile::Slot,
            Socket::Owned(fd) => ConnFile::Fd(fd),
            Socket::Borrowed(fd) => match fd.try_clone_to_owned() {
                Ok(fd) => ConnFile::Fd(fd),
                Err(e) => {
                    st.free_ids.push(id);
                    return Err(e);
                }
            },
        };
        let gen = st.next_gen;
        st.next_gen = gen.wrapping_add(1) & 0x7fff_ffff;
        let cap = st.buf_len;
        st.conns[id as usize] = Some(Conn {
            file,
            queue: Arc::clone(&queue),
            gen,
            recv: Recv::Idle,
            closing: false,
            parked: false,
            paused_at: Instant::now(),
            taken_then: 0,
            listed: false,
            started: false,
            single: false,
            cap,
        });
        // Its receive starts when the reader first looks for bytes: a connection
        // whose reader is not read takes nothing from the group (its bytes wait in
        // the socket, as on epoll).
        lock(&queue).paused = true;
        Ok((id, gen, queue))
    }

    /// Starts a paused connection's receive again.
    pub(crate) fn resume(&self, id: u32, gen: u32) {
        let mut st = self.lock();
        let Some(c) = st
            .conn(id, gen)
            .filter(|c| c.recv == Recv::Idle && !c.closing)
        else {
            return;
        };
        // The first start (the reader's first look) is no restart; a restart follows
        // a reader that took a queue its cap had filled: a cap to grow.
        let again = core::mem::replace(&mut c.started, true);
        if !again {
            // Whether its socket has bytes is not known: a receive that waits for
            // them, taking no buffer till then, not a place in line (see `refill`).
            st.arm(id);
        } else {
            st.grow(id);
            if st.arm_in_turn(id) {
                self.counters.rearms.fetch_add(1, Ordering::Relaxed);
            }
        }
        st.submit();
    }

    /// Its reader is gone: cancels the connection's receive; the connection goes with
    /// its last completion.
    pub(crate) fn close(&self, id: u32, gen: u32) {
        let mut st = self.lock();
        st.close(id, gen);
        st.submit();
    }

    /// Takes the completions waiting, if the lock is free now: a reader that found its
    /// queue empty does the driver's work rather than wait for its turn. `true` if any
    /// was taken.
    pub(crate) fn try_reap(&self) -> bool {
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        let before = self.counters.completions.load(Ordering::Relaxed);
        st.reap();
        if self.counters.completions.load(Ordering::Relaxed) == before {
            return false;
        }
        // Readers may reap every completion for a while: the give-back's timer must
        // not wait for a turn of the driver's.
        st.give_back();
        st.refill(false);
        st.submit();
        let mut wake = st.take_wake();
        // Ids left without a buffer: the driver waits for room in the ring (a reader
        // does not), so it must see them.
        if st.books.free() > 0 {
            wake.extend(st.driver.clone());
        }
        drop(st);
        wake_all(wake);
        true
    }

    /// The ring's bytes in use and counters, and buffers published.
    pub(crate) fn ring_stats(&self) -> (crate::RingStats, crate::RingCounters, usize) {
        let st = self.lock();
        (st.ring.stats(), st.ring.counters(), st.books.published())
    }
}

impl State {
    fn conn(&mut self, id: u32, gen: u32) -> Option<&mut Conn> {
        (self.conns.get_mut(id as usize))
            .and_then(Option::as_mut)
            .filter(|c| c.gen == gen)
    }

    fn push(&mut self, sqe: &squeue::Entry) {
        loop {
            // SAFETY: the receives' buffers are the group's, which live until their
            // last completion (see `Drop`); a cancellation holds no memory.
            if unsafe { self.uring.submission().push(sqe) }.is_ok() {
                return;
            }
            // The queue is full: hand it to the kernel first, and if the kernel refuses
            // (completions overflowed: `EBUSY`), take the completions first.
            if self.uring.submit().is_err() {
                self.reap();
            }
        }
    }

    /// Hands the queued submissions to the kernel (a failure is retried at the
    /// driver's next turn).
    fn submit(&mut self) {
        if !self.uring.submission().is_empty() {
            _ = self.uring.submit();
        }
    }

    /// Doubles connection `id`'s cap, up to `queue_cap`, if the caps' sum stays within
    /// `grant_most`: its reader took a queue that had filled the cap, so a larger one
    /// keeps its receive going longer. A reader that stops reading keeps the cap it had
    /// (its bytes are that much at most), and gives it back only when it goes: so
    /// readers that stop, however many, hold at most the ring's bytes between them
    /// beyond `buf_len` each, where a fixed cap let each hold `queue_cap`.
    fn grow(&mut self, id: u32) {
        let (most, room) = (self.queue_cap, self.grant_most.saturating_sub(self.granted));
        let Some(c) = self.conns.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        let more = c.cap.min(most.saturating_sub(c.cap)).min(room);
        c.cap += more;
        self.granted += more;
    }

    /// Starts connection `id`'s receive, for the room its queue has left under its
    /// cap; with its queue full, pauses it instead (its reader starts it again). `true`
    /// if it started.
    fn arm(&mut self, id: u32) -> bool {
        self.arm_as(id, false)
    }

    /// [`arm`](Self::arm), unless receives wait for buffers: then it waits behind them
    /// (it would take buffers they wait for, and end in `ENOBUFS` itself).
    fn arm_in_turn(&mut self, id: u32) -> bool {
        if self.parked.is_empty() {
            return self.arm(id);
        }
        self.park(id);
        false
    }

    /// Puts connection `id` in line for buffers, unless it is there.
    fn park(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(id as usize).and_then(Option::as_mut) {
            if !core::mem::replace(&mut c.parked, true) {
                self.parked.push_back(id);
            }
        }
    }

    /// [`arm`](Self::arm); a single receive (one completion) if `single`.
    fn arm_as(&mut self, id: u32, single: bool) -> bool {
        let Some(c) = self.conns.get_mut(id as usize).and_then(Option::as_mut) else {
            return false;
        };
        c.parked = false;
        c.single = single;
        let mut q = lock(&c.queue);
        if q.bytes >= c.cap {
            // Its reader starts it again once it has taken the bytes.
            q.paused = true;
            drop(q);
            self.stall(id);
            return false;
        }
        let room = c.cap - q.bytes;
        drop(q);
        c.recv = Recv::Armed;
        let room = room.min(u32::MAX as usize) as u32;
        // The opcodes take a fixed slot and a descriptor as two types.
        macro_rules! recv {
            ($file:expr) => {
                if single {
                    // At most `room` bytes, into a buffer of the group (`BUFFER_SELECT`).
                    opcode::Recv::new($file, core::ptr::null_mut(), room)
                        .buf_group(BGID)
                        .build()
                } else {
                    opcode::RecvMulti::new($file, BGID).build()
                }
            };
        }
        let sqe = match &c.file {
            ConnFile::Slot => recv!(types::Fixed(id)),
            ConnFile::Fd(fd) => recv!(types::Fd(fd.as_raw_fd())),
        };
        let mut sqe = sqe.user_data(user_data(id, c.gen, false));
        if single {
            sqe = sqe.flags(squeue::Flags::BUFFER_SELECT);
        } else if self.total_cap {
            sqe = capped(sqe, room);
        }
        self.push(&sqe);
        // A single receive is started from the line, on a socket with bytes: it takes
        // a buffer's bytes before its completion is seen (see `refill`).
        self.started_since_reap += usize::from(single);
        true
    }

    fn cancel(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if c.recv != Recv::Armed {
            return;
        }
        c.recv = Recv::Cancelling;
        let gen = c.gen;
        let sqe = opcode::AsyncCancel::new(user_data(id, gen, false))
            .build()
            .user_data(user_data(id, gen, true));
        self.push(&sqe);
    }

    fn close(&mut self, id: u32, gen: u32) {
        let Some(c) = self.conn(id, gen) else {
            return;
        };
        c.closing = true;
        match c.recv {
            Recv::Armed => self.cancel(id),
            Recv::Cancelling => {}
            Recv::Idle => self.remove(id),
        }
    }

    fn remove(&mut self, id: u32) {
        let Some(c) = self.conns[id as usize].take() else {
            return;
        };
        self.granted -= c.cap - self.buf_len;
        if let ConnFile::Slot = c.file {
            // Closes the socket unless its owner still holds it. Should the kernel
            // refuse, the next connection with this id replaces the slot's file.
            _ = self.uring.submitter().register_files_update(id, &[-1]);
        }
        self.free_ids.push(id);
    }

    /// Routes every completion waiting: a receive's bytes to its connection's queue,
    /// its end to the connection's state.
    fn reap(&mut self) {
        self.started_since_reap = 0;
        loop {
            let Some(cqe) = self.uring.completion().next() else {
                return;
            };
            self.route(cqe.user_data(), cqe.result(), cqe.flags());
        }
    }

    fn route(&mut self, ud: u64, res: i32, flags: u32) {
        if ud == TIMER {
            self.timer = false;
            return;
        }
        if ud == STALL_TIMER {
            self.stall_timer = false;
            return;
        }
        if ud & 1 == 1 {
            return; // a cancellation's own completion
        }
        self.counters.completions.fetch_add(1, Ordering::Relaxed);
        let (id, gen) = conn_key(ud);
        let got = cqueue::buffer_select(flags).map(|bid| {
            (self.books)
                .complete(bid, res.max(0) as usize, cqueue::buffer_more(flags), ud)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        });
        if let Some(Ok(got)) = &got {
            if !got.view.is_empty() {
                self.recv_avg += got.view.len() / 8;
                self.recv_avg -= self.recv_avg / 8;
            }
            // The buffer's last completion before this one was another connection's:
            // a partial frame its reader holds at the end of it cannot be joined now.
            if let Some((id, gen)) = got.displaced.map(conn_key) {
                self.unpin(id, gen);
            }
        }
        let total_cap = self.total_cap;
        let (mut uncapped, mut again, mut wait) = (false, false, false);
        let Some(c) = self.conn(id, gen) else {
            return; // gone: the view, if any, is dropped
        };
        let (cap, single) = (c.cap, c.single);
        let mut q = lock(&c.queue);
        match got {
            Some(Ok(got)) if !got.view.is_empty() && !c.closing => {
                let chunk = Chunk::new(got.view, got.probe);
                q.bytes += chunk.len();
                if q.chunks.capacity() == 0 {
                    q.chunks = super::frames::new_deque();
                }
                q.chunks.push_back(chunk);
            }
            Some(Err(e)) if q.end.is_none() => q.end = Some(Err(e)),
            _ => {}
        }
        let mut pause = false;
        let mut parked = false;
        if !cqueue::more(flags) {
            let was = core::mem::replace(&mut c.recv, Recv::Idle);
            const ENOBUFS: i32 = -libc::ENOBUFS;
            const ECANCELED: i32 = -libc::ECANCELED;
            const EINVAL: i32 = -libc::EINVAL;
            match res {
                _ if c.closing => {}
                0 => q.end = q.end.take().or(Some(Ok(()))),
                ENOBUFS if was == Recv::Armed => parked = true,
                ECANCELED | ENOBUFS => q.paused = true,
                1.. if was == Recv::Cancelling => q.paused = true,
                // A single receive: back in line for buffers if its socket has more
                // bytes, else a receive that waits for them.
                1.. if single && cqueue::sock_nonempty(flags) => parked = true,
                1.. if single => wait = true,
                // Ended at its total cap, or for another reason (completions
                // overflowed): started again at once, or paused if its queue is full.
                1.. => again = true,
                // A kernel before 6.17 refuses the receive's total cap: started again
                // without one.
                EINVAL if total_cap && was == Recv::Armed => (parked, uncapped) = (true, true),
                e => q.end = q.end.take().or(Some(Err(io::Error::from_raw_os_error(-e)))),
            }
            // Out of buffers with its queue full: paused, not parked, so that it is
            // listed for `move_out` now (a parked receive waits for a buffer, which a
            // ring full of such queues never publishes).
            if parked && q.bytes >= cap {
                (parked, q.paused) = (false, true);
            }
        } else if q.bytes > cap && c.recv == Recv::Armed {
            pause = true;
        }
        let stalled = q.paused && !q.chunks.is_empty();
        let waker = q.waker.take();
        drop(q);
        let out_of_buffers = parked && res == -libc::ENOBUFS;
        let gone = c.closing && c.recv == Recv::Idle;
        self.total_cap &= !uncapped;
        self.wake.extend(waker);
        if gone {
            self.remove(id);
        } else if parked {
            self.park(id);
        }
        if out_of_buffers {
            self.counters.out_of_buffers.fetch_add(1, Ordering::Relaxed);
        }
        if pause {
            self.cancel(id);
        }
        if stalled && !gone {
            self.stall(id);
        }
        if again && !gone && self.arm_in_turn(id) {
            self.counters.rearms.fetch_add(1, Ordering::Relaxed);
        }
        if wait && !gone {
            self.arm(id);
        }
    }

    /// Connection `id`'s receive is paused with bytes its reader has not taken: lists
    /// it for [`move_out`](Self::move_out).
    fn stall(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        self.counters.pauses.fetch_add(1, Ordering::Relaxed);
        c.paused_at = Instant::now();
        if !core::mem::replace(&mut c.listed, true) {
            self.stalled.push_back((id, c.gen));
        }
    }

    /// While the ring has no room for the buffers the kernel is short of: copies the
    /// bytes of readers that have not taken them for [`STALLED_AFTER`] into the pool
    /// (while it has room), so that their buffers go back. A reader that stops reading
    /// then holds at most the completion it took last, not its queue; a connection
    /// whose reader does not read keeps the rest of its bytes in its socket, as on
    /// epoll. At most once per `STALLED_AFTER`, and at most `move_most` bytes; a
    /// timeout brings the next turn while any is listed. `true` if any bytes moved.
    fn move_out(&mut self) -> bool {
        if self.stalled.is_empty() {
            return false;
        }
        let now = Instant::now();
        if now.duration_since(self.moved_at) < STALLED_AFTER {
            self.stall_turn();
            return false;
        }
        self.moved_at = now;
        let mut moved = 0;
        // The pool is full, or this turn has moved its share.
        let mut stop = false;
        for _ in 0..self.stalled.len() {
            let (id, gen) = self.stalled.pop_front().expect("counted");
            let Some(c) =
                (self.conns.get_mut(id as usize).and_then(Option::as_mut)).filter(|c| c.gen == gen)
            else {
                continue;
            };
            let queue = Arc::clone(&c.queue);
            let mut q = lock(&queue);
            let still = c.recv == Recv::Idle && q.paused && !c.closing;
            // A reader that has taken bytes since is reading: its queue goes on waiting
            // for it, not into the pool.
            if still && q.taken != c.taken_then {
                (c.taken_then, c.paused_at) = (q.taken, now);
            }
            if still && (stop || now.duration_since(c.paused_at) < STALLED_AFTER) {
                drop(q);
                self.stalled.push_back((id, gen));
                continue;
            }
            if still {
                for chunk in q.chunks.iter_mut().filter(|c| c.is_view()) {
                    let copy = (moved < self.move_most)
                        .then(|| chunk.moved(&self.mem))
                        .flatten();
                    let Some(copy) = copy else {
                        stop = true;
                        break;
                    };
                    moved += copy.len();
                    *chunk = copy;
                }
            }
            if still && stop {
                drop(q);
                self.stalled.push_back((id, gen));
            } else {
                c.listed = false;
            }
        }
        self.counters
            .moved
            .fetch_add(moved as u64, Ordering::Relaxed);
        if !self.stalled.is_empty() {
            self.stall_turn();
        }
        moved > 0
    }

    /// Brings the driver a turn after [`STALLED_AFTER`] (one timeout in flight).
    fn stall_turn(&mut self) {
        if !core::mem::replace(&mut self.stall_timer, true) {
            let sqe = opcode::Timeout::new(&STALLED_TIMER)
                .build()
                .user_data(STALL_TIMER);
            self.push(&sqe);
        }
    }

    /// A region for a buffer: a whole one, else at least [`LEAST_BUF`] bytes grown over
    /// its free run; a probe's (see `Trust`) when frames were found kept; with `walk`,
    /// after a walk of the ring (see `Ring::unstick_if`).
    fn claim(&self, walk: bool) -> Option<FixedBufMut> {
        self.ring.unstick_if(walk);
        let len = if self.judge.lock().probing() {
            PROBE_BUF
        } else {
            self.buf_len
        };
        if let Some(region) = self.ring.fixed(len) {
            return Some(region);
        }
        let mut region = self.ring.fixed(LEAST_BUF.min(len))?;
        region.grow_in(len, &self.ring);
        Some(region)
    }

    /// Publishes a buffer under every free id the ring has room for, then restarts
    /// parked receives if the kernel has buffers: as many as the bytes it has left
    /// serve at the bytes receives brought lately (`recv_avg`), at least one. `true`
    /// if any was published.
    ///
    /// Not all of them: when the ring is full, one buffer published would end most of
    /// a thousand restarted receives in `ENOBUFS` again (and a streaming connection's
    /// receive takes a whole buffer). A receive is put in line when its socket had
    /// bytes (`ENOBUFS`, a single receive's completion that says more wait) or when
    /// its reader starts it again after a pause, so the receives restarted complete
    /// soon, and each completion's turn restarts the next. Not all surely: a socket
    /// may have none (a paused reader's peer that has stopped), and its receive then
    /// waits without a completion; so while any wait in line and the kernel has
    /// buffers a timeout brings a turn (without buffers, the driver waits for room in
    /// the ring, and publishing brings one).
    fn refill(&mut self, walk: bool) -> bool {
        let mut published = 0;
        let mut walk = walk;
        while self.books.free() > 0 {
            let Some(region) = self.claim(core::mem::replace(&mut walk, false)) else {
                break;
            };
            let copy = self.judge.lock().copying();
            let entry = self.books.publish(region, copy).expect("an id is free");
            self.entries.push(entry);
            published += 1;
            self.counters.published.fetch_add(1, Ordering::Relaxed);
        }
        if published > 0 {
            self.entries.publish();
        }
        if self.books.published() > 0 {
            let mut budget = (self.books.unfilled() / self.recv_avg.max(1)).max(1);
            // More waiting than that: single receives, as many as the buffers the kernel
            // holds less the single receives started since the last reap, whose
            // completions are not seen yet. A receive from a socket with bytes waiting
            // takes the rest of a buffer, and a multishot one takes buffer after buffer
            // until `ENOBUFS`: half the completions were that, 1,000 connections
            // streaming on a short group.
            let single = self.parked.len() > budget;
            if single {
                budget = self
                    .books
                    .published()
                    .saturating_sub(self.started_since_reap);
            }
            while budget > 0 {
                let Some(id) = self.parked.pop_front() else {
                    break;
                };
                let waits = (self.conns.get(id as usize))
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.parked && !c.closing && c.recv == Recv::Idle);
                if waits {
                    budget -= 1;
                    if self.arm_as(id, single) {
                        self.counters.rearms.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if !self.parked.is_empty() {
                self.stall_turn();
            }
        }
        published > 0
    }

    /// Wakes the reader of connection `id` if it sleeps holding the start of a frame
    /// as a view that can no longer be joined (`Queue::pinned`), to copy it out.
    ///
    /// Its reader reads the buffer's tail under the queue's lock after setting
    /// `pinned`, and the tail was moved before this takes the lock: either this sees
    /// `pinned`, or the reader sees the tail moved.
    fn unpin(&mut self, id: u32, gen: u32) {
        let Some(c) = self.conn(id, gen) else {
            return;
        };
        let mut q = lock(&c.queue);
        if core::mem::take(&mut q.pinned) {
            let waker = q.waker.take();
            drop(q);
            self.wake.extend(waker);
        }
    }

    /// Gives the ring's free pages back to the system at most once per
    /// [`GIVE_BACK_EVERY`]; while buffers were published since, or the last time gave
    /// pages back, a timeout brings the driver its next turn even if no receive
    /// completes: once the connections go quiet, the pages the buffers cycled through
    /// go back too. (A frame released after that, with nothing published, leaves its
    /// pages until the receives' next turn.)
    fn give_back(&mut self) {
        let published = self.counters.published.load(Ordering::Relaxed);
        if self.given_back.elapsed() >= GIVE_BACK_EVERY {
            self.given_back = Instant::now();
            self.given_bytes = self.ring.give_back_pages();
            self.published_then = published;
        }
        if !self.timer && (published != self.published_then || self.given_bytes > 0) {
            self.timer = true;
            let sqe = opcode::Timeout::new(&GIVE_BACK_TIMER)
                .build()
                .user_data(TIMER);
            self.push(&sqe);
        }
    }

    /// The tasks to wake once the lock is let go (see [`wake_all`]).
    fn take_wake(&mut self) -> Vec<Waker> {
        let spare = SPARE_WAKE.with(Cell::take);
        core::mem::replace(&mut self.wake, spare)
    }

    /// Whether a receive may still complete.
    fn in_flight(&self) -> bool {
        self.conns.iter().flatten().any(|c| c.recv != Recv::Idle)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The kernel writes the group's buffers until each receive's last completion:
        // cancel them all and wait for those, then unregister. If they do not come, the
        // buffers, the entry array and the instance are leaked, never freed under it.
        let ids: Vec<u32> = (0..self.conns.len() as u32).collect();
        for id in ids {
            if let Some(c) = self.conns[id as usize].as_mut() {
                c.closing = true;
            }
            self.cancel(id);
        }
        let start = Instant::now();
        while self.in_flight() && start.elapsed() < DRAIN {
            let ts = types::Timespec::new().nsec(100_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.uring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                    ) => {}
                Err(_) => break,
            }
            self.reap();
        }
        if self.in_flight() {
            self.books.leak();
            return; // `uring` and the entry array stay the kernel's
        }
        _ = self.uring.submitter().unregister_buf_ring(BGID);
        // SAFETY: unregistered (or never to be read: no receive is in flight and the
        // instance is closed next), and not used again.
        unsafe { self.entries.free() };
        // SAFETY: dropped once, here, after everything that used it.
        unsafe { ManuallyDrop::drop(&mut self.uring) };
    }
}

/// The task that reaps the group's completions: woken by the instance's descriptor
/// when completions wait, and by a release into the ring when buffers could not all be
/// published.
struct Driver {
    fd: AsyncFd<UringFd>,
    shared: Arc<Shared>,
    /// Its place among the ring's waiters while it waits for room.
    room: TaskSlot,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let shared = &*this.shared;
        loop {
            let ready = match this.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    true
                }
                // The runtime is going away: `State`'s drop drains what is left.
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => false,
            };
            let (short, done, wake) = {
                let mut st = shared.lock();
                if !st.driver.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.driver = Some(cx.waker().clone());
                }
                st.reap();
                st.give_back();
                st.refill(false);
                // Short of room: stalled readers' bytes go to the pool.
                if st.books.free() > 0 && st.move_out() {
                    st.refill(false);
                }
                st.submit();
                let done = shared.users.load(Ordering::Acquire) == 0 && !st.in_flight();
                (st.books.free() > 0, done, st.take_wake())
            };
            wake_all(wake);
            if done {
                return Poll::Ready(());
            }
            if short {
                let room = poll_until(&mut this.room, cx, shared.span, LEAST_BUF, |walk| {
                    let mut st = shared.lock();
                    let any = st.refill(walk);
                    st.submit();
                    let wake = st.take_wake();
                    drop(st);
                    wake_all(wake);
                    any.then_some(())
                });
                if room.is_ready() {
                    continue;
                }
            }
            if !ready {
                return Poll::Pending;
            }
        }
    }
}
