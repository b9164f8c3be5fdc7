//! Standard collections on a ring: allocator-api2's `Vec` and hashbrown's `HashMap`
//! with `RingAlloc` as their allocator.
//!
//! A `RingAlloc` is a cloneable handle to one ring (like an `Rc`), so collections hold
//! their own clone and need no lifetime. A `Vec` that grows while it is the ring's latest
//! allocation grows in place; small blocks (up to 256 bytes) share 4 KiB chunks.
//! When the collections are dropped, their memory goes back to the ring.
//!
//! ```text
//! cargo run --example collections
//! ```

use allocator_api2::vec::Vec;
use hashbrown::HashMap;
use ringmem::RingAlloc;

const TEXT: &str = "the ring hands out memory in order and takes it back in any order \
                    the ring grows a vector in place when the memory after it is free \
                    the ring frees a block with one store";

fn main() {
    let alloc = RingAlloc::with_capacity(1 << 20);

    // A growing Vec: count how often its buffer moved, on the ring and on the heap.
    let mut on_ring: Vec<u64, RingAlloc> = Vec::new_in(alloc.clone());
    let mut on_heap: std::vec::Vec<u64> = std::vec::Vec::new();
    let (mut ring_moves, mut heap_moves) = (0, 0);
    // 30,000 × 8 bytes: below the 256 KiB above which RingAlloc sends requests to the heap.
    for i in 0..30_000u64 {
        let (before_ring, before_heap) = (on_ring.as_ptr(), on_heap.as_ptr());
        on_ring.push(i * i);
        on_heap.push(i * i);
        // The first allocation is not a move.
        ring_moves += usize::from(i > 0 && on_ring.as_ptr() != before_ring);
        heap_moves += usize::from(i > 0 && on_heap.as_ptr() != before_heap);
    }
    println!(
        "Vec<u64, RingAlloc>: 30,000 pushes, capacity {}, buffer moves: {ring_moves} \
         (std Vec on the global allocator: {heap_moves})",
        on_ring.capacity()
    );

    // A word count in a HashMap on the same ring (keys borrow from TEXT).
    let mut counts: HashMap<&str, u32, _, RingAlloc> = HashMap::new_in(alloc.clone());
    for word in TEXT.split_whitespace() {
        *counts.entry(word).or_insert(0) += 1;
    }
    let mut top: Vec<(&str, u32), RingAlloc> = Vec::new_in(alloc.clone());
    top.extend(counts.iter().map(|(w, n)| (*w, *n)));
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    println!(
        "HashMap<&str, u32, _, RingAlloc>: {} distinct words, most frequent {:?}",
        counts.len(),
        &top[..3]
    );

    let live = alloc.ring().stats();
    println!(
        "while they live: {} ring regions, {} bytes of {} in use",
        live.live_buffers, live.bytes_in_use, live.capacity
    );

    drop((on_ring, counts, top));
    // The current small-block chunk stays for the next small allocations; flush gives
    // it back when it is empty.
    alloc.flush();
    let after = alloc.ring().stats();
    println!(
        "after dropping them: {} ring regions, {} bytes in use",
        after.live_buffers, after.bytes_in_use
    );
}
