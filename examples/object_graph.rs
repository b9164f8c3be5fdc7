//! Object graphs on the typed pools (`ringmem::slab`).
//!
//! 1. An expression graph on a `Pool` (one thread, no atomic instructions): nodes are
//!    `ArenaRc` handles, counted like `Rc`, so a subexpression used twice is one node.
//!    Dropping the root releases every node no one else holds.
//! 2. A persistent list on a `SharedArena` (`Send + Sync`): several threads allocate
//!    from the same arena at once and share one tail through `ArenaArc` handles,
//!    counted like `Arc`.
//!
//! ```text
//! cargo run --example object_graph
//! ```

use std::thread;

use ringmem::slab::{ArenaArc, ArenaRc, Pool, SharedArena};

/// A node of an expression graph.
enum Expr {
    Var,
    Num(f64),
    Add(ArenaRc<Expr>, ArenaRc<Expr>),
    Mul(ArenaRc<Expr>, ArenaRc<Expr>),
}

fn eval(e: &Expr, x: f64) -> f64 {
    match e {
        Expr::Var => x,
        Expr::Num(n) => *n,
        Expr::Add(a, b) => eval(a, x) + eval(b, x),
        Expr::Mul(a, b) => eval(a, x) * eval(b, x),
    }
}

/// A cell of a singly linked list whose tails are shared.
struct Cell {
    value: u64,
    next: Option<ArenaArc<Cell>>,
}

fn sum(mut cell: Option<&ArenaArc<Cell>>) -> (u64, usize) {
    let (mut total, mut len) = (0, 0);
    while let Some(c) = cell {
        total += c.value;
        len += 1;
        cell = c.next.as_ref();
    }
    (total, len)
}

fn main() {
    // 1. (x + 1)^32 by repeated squaring: each square uses the node below it twice.
    let pool = Pool::new();
    let x_plus_1 = pool.alloc_rc(Expr::Add(
        pool.alloc_rc(Expr::Var),
        pool.alloc_rc(Expr::Num(1.0)),
    ));
    let mut power = x_plus_1.clone();
    for _ in 0..5 {
        power = pool.alloc_rc(Expr::Mul(power.clone(), power));
    }
    println!(
        "(x + 1)^32 at x = 1: {} from {} nodes; `x + 1` has {} handles",
        eval(&power, 1.0),
        pool.len(),
        ArenaRc::strong_count(&x_plus_1)
    );
    drop(power); // the five squares go; `x + 1` and its operands are still held
    println!("after dropping the root: {} nodes live", pool.len());
    drop(x_plus_1);
    println!(
        "after dropping `x + 1`: {} nodes live, slots {:?}",
        pool.len(),
        pool.stats()
    );

    // 2. One shared tail 1..=100, and four threads that each put 1,000 cells in front of it.
    let arena = SharedArena::new();
    let mut tail = None;
    for value in (1..=100).rev() {
        tail = Some(arena.alloc_arc(Cell { value, next: tail }));
    }
    let tail = tail.unwrap();
    let lists: Vec<_> = thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (arena, tail) = (&arena, tail.clone());
                s.spawn(move || {
                    let mut head = tail;
                    for i in 0..1000 {
                        let next = Some(head);
                        head = arena.alloc_arc(Cell {
                            value: t * 1000 + i,
                            next,
                        });
                    }
                    head
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (t, head) in lists.iter().enumerate() {
        let (total, len) = sum(Some(head));
        println!("thread {t}'s list: {len} cells, sum {total}");
    }
    println!(
        "arena: {} cells live; the shared tail has {} handles",
        arena.len(),
        ArenaArc::strong_count(&tail)
    );
    drop(lists); // each thread's cells go; the tail stays, held by `tail`
    println!(
        "after dropping the four lists: {} cells live, the tail has {} handle",
        arena.len(),
        ArenaArc::strong_count(&tail)
    );
}
