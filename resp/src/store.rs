//! The store: keys in 64 shards, each a `Mutex<HashMap>`, values of any [`Value`] type.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hashbrown::HashMap;

/// Shards of the key space: enough that threads seldom meet on a lock.
const SHARDS: usize = 64;

/// What a stored value is made of: a slice of the request's frame (kept as it was
/// read) or a copy, as the memory mode decides.
pub trait Value: AsRef<[u8]> + Send + Sync + 'static {
    /// The frames requests arrive in.
    type Frame: AsRef<[u8]>;

    /// The value at `range` of `frame`, kept for as long as the store holds it.
    fn keep(frame: &Self::Frame, range: Range<usize>) -> Self;

    /// A value made by the server (`INCR`'s number).
    fn copy(bytes: &[u8]) -> Self;
}

/// What a key holds.
pub enum Entry<V> {
    /// A string (`SET`, `INCR`).
    Str(V),
    /// A list (`LPUSH`, `RPUSH`).
    List(VecDeque<V>),
}

/// An entry and when it expires.
pub struct Slot<V> {
    /// The value.
    pub entry: Entry<V>,
    /// When it expires (`SET ... EX`), if ever.
    pub deadline: Option<Instant>,
}

impl<V> Slot<V> {
    fn live(&self, now: Instant) -> bool {
        self.deadline.is_none_or(|d| d > now)
    }

    /// Whether it has expired: the clock is read for a key with a deadline only.
    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| d <= Instant::now())
    }
}

/// One shard's keys.
pub struct Shard<V> {
    map: HashMap<Box<[u8]>, Slot<V>>,
    /// Keys with a deadline, so that the sweep visits only shards that have some.
    expiring: usize,
    /// Bytes of values dropped since [`Store::with`] last collected them.
    dropped: usize,
}

impl<V: AsRef<[u8]>> Entry<V> {
    /// Bytes of its values.
    pub fn bytes(&self) -> usize {
        match self {
            Entry::Str(v) => v.as_ref().len(),
            Entry::List(l) => l.iter().map(|v| v.as_ref().len()).sum(),
        }
    }
}

impl<V: AsRef<[u8]>> Shard<V> {
    /// The live entry of `key`; an expired one is removed.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Slot<V>> {
        if self.map.get(key).is_some_and(Slot::expired) {
            self.remove(key);
            return None;
        }
        self.map.get_mut(key)
    }

    /// Removes `key`, whether it had expired or not: whether it was live.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.map.remove(key) {
            Some(s) => {
                if s.deadline.is_some() {
                    self.expiring -= 1;
                }
                self.dropped += s.entry.bytes();
                !s.expired()
            }
            None => false,
        }
    }

    /// Sets `key` to `entry`, with a lifetime or none; returns the entry it replaces,
    /// for the caller to drop once the shard is unlocked.
    #[must_use = "the replaced entry is meant to be dropped after the shard's lock"]
    pub fn set(&mut self, key: &[u8], entry: Entry<V>, ttl: Option<Duration>) -> Option<Entry<V>> {
        // A deadline past what `Instant` holds (millions of years) never comes.
        let deadline = ttl.and_then(|t| Instant::now().checked_add(t));
        let slot = Slot { entry, deadline };
        let old = match self.map.get_mut(key) {
            Some(s) => Some(std::mem::replace(s, slot)),
            None => {
                self.map.insert(key.into(), slot);
                None
            }
        };
        self.expiring += usize::from(deadline.is_some());
        let old = old?;
        self.expiring -= usize::from(old.deadline.is_some());
        self.dropped += old.entry.bytes();
        Some(old.entry)
    }

    /// The entry of `key`, made with `f` if it has none.
    pub fn entry_or(&mut self, key: &[u8], f: impl FnOnce() -> Entry<V>) -> &mut Slot<V> {
        if self.get_mut(key).is_none() {
            self.map.insert(
                key.into(),
                Slot {
                    entry: f(),
                    deadline: None,
                },
            );
        }
        self.map.get_mut(key).expect("inserted above")
    }

    /// Counts `bytes` of values dropped (popped from a list).
    pub fn note_dropped(&mut self, bytes: usize) {
        self.dropped += bytes;
    }

    fn sweep(&mut self, now: Instant) {
        if self.expiring == 0 {
            return;
        }
        let before = self.map.len();
        let dropped = &mut self.dropped;
        self.map.retain(|_, s| {
            let live = s.live(now);
            if !live {
                *dropped += s.entry.bytes();
            }
            live
        });
        self.expiring -= before - self.map.len();
    }
}

/// The keys, in shards behind locks of their own.
pub struct Store<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    hasher: foldhash::fast::FixedState,
    /// Keys stored, as the shards count them at their last change.
    keys: AtomicUsize,
    /// Bytes of values dropped so far (overwritten, deleted, expired, popped).
    dropped: AtomicUsize,
}

impl<V: AsRef<[u8]>> Default for Store<V> {
    fn default() -> Self {
        Store::new()
    }
}

impl<V: AsRef<[u8]>> Store<V> {
    /// An empty store.
    pub fn new() -> Self {
        Store {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        expiring: 0,
                        dropped: 0,
                    })
                })
                .collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed),
            keys: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        }
    }

    /// The shard of `key`, locked; `f` runs on it.
    pub fn with<R>(&self, key: &[u8], f: impl FnOnce(&mut Shard<V>) -> R) -> R {
        let i = self.hasher.hash_one(key) as usize % SHARDS;
        let mut shard = lock(&self.shards[i]);
        let before = shard.map.len();
        let r = f(&mut shard);
        let after = shard.map.len();
        let dropped = std::mem::take(&mut shard.dropped);
        drop(shard);
        if dropped > 0 {
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        // Relaxed: a count for INFO, which orders nothing.
        if after > before {
            self.keys.fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.keys.fetch_sub(before - after, Ordering::Relaxed);
        }
        r
    }

    /// Bytes of values dropped so far (overwritten, deleted, expired, popped).
    pub fn dropped_bytes(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Keys stored (expired ones not yet swept included).
    pub fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// Removes the expired keys of every shard that has keys with a deadline.
    pub fn sweep(&self) {
        let now = Instant::now();
        for shard in self.shards.iter() {
            let mut s = lock(shard);
            let before = s.map.len();
            s.sweep(now);
            let gone = before - s.map.len();
            let dropped = std::mem::take(&mut s.dropped);
            drop(s);
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
            self.keys.fetch_sub(gone, Ordering::Relaxed);
        }
    }
}

/// A shard's lock, also after a panic elsewhere (a command's panic leaves no entry
/// half-written: each is replaced whole).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
