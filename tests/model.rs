//! Model-based test: random operation sequences on a ring against a plain model
//! (`Vec<u8>` per buffer), sweeping ring capacities, policies and sizes. After every
//! step, no two live regions overlap and every buffer holds exactly its model's bytes.

mod common;

use std::io::Write;

use common::{assert_disjoint, scaled};
use proptest::prelude::*;
use ringmem::{ExtBuf, FixedBuf, FixedBufMut, Ring, TypedBuf, WhenFull};

#[derive(Clone, Debug)]
enum Op {
    Fixed(usize),
    Ext(usize, usize),
    Typed(usize),
    Write(usize, u8, usize),
    Freeze(usize),
    Clone(usize),
    Slice(usize, usize),
    Drop(usize),
    Grow(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..600).prop_map(Op::Fixed),
        1 => (0usize..300, 1usize..900).prop_map(|(a, b)| Op::Ext(a, b)),
        1 => (1usize..40).prop_map(Op::Typed),
        3 => (any::<usize>(), any::<u8>(), 0usize..200).prop_map(|(i, b, n)| Op::Write(i, b, n)),
        1 => any::<usize>().prop_map(Op::Freeze),
        1 => any::<usize>().prop_map(Op::Clone),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, s)| Op::Slice(i, s)),
        3 => any::<usize>().prop_map(Op::Drop),
        1 => (0usize..100, 1usize..2000).prop_map(|(a, b)| Op::Grow(a, b)),
    ]
}

enum Live {
    Mut(FixedBufMut, Vec<u8>),
    Frozen(FixedBuf, Vec<u8>),
    Typed(TypedBuf<u64>, Vec<u64>),
}

impl Live {
    fn range(&self) -> (usize, usize) {
        match self {
            Live::Mut(b, _) => (b.as_ptr() as usize, b.capacity()),
            Live::Frozen(..) => (0, 0), // shares its region with its clones
            Live::Typed(t, _) => (t.as_ptr() as usize, t.capacity() * 8),
        }
    }

    fn check(&self) {
        match self {
            Live::Mut(b, m) => assert_eq!(&b[..], &m[..]),
            Live::Frozen(b, m) => assert_eq!(&b[..], &m[..]),
            Live::Typed(t, m) => assert_eq!(&t[..], &m[..]),
        }
    }
}

fn grow_and_finalize(
    mut ext: ExtBuf<'_>,
    chunks: usize,
    seed: u8,
) -> Option<(FixedBufMut, Vec<u8>)> {
    let mut model = Vec::new();
    for k in 0..chunks / 64 + 1 {
        let chunk = vec![seed.wrapping_add(k as u8); 64.min(chunks - model.len().min(chunks))];
        if chunk.is_empty() {
            break;
        }
        if ext.write_all(&chunk).is_err() {
            // The ring is full: the buffer keeps what it had.
            assert_eq!(&ext[..model.len()], &model[..]);
            return None;
        }
        model.extend_from_slice(&chunk);
        assert_eq!(&ext[..], &model[..]);
    }
    Some((ext.finalize(), model))
}

fn run(capacity: usize, policy: WhenFull, ops: Vec<Op>) {
    let ring = Ring::builder()
        .capacity(capacity)
        .when_full(policy)
        .build()
        .unwrap();
    let mut live: Vec<Live> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        let pick = |i: usize, n: usize| if n == 0 { None } else { Some(i % n) };
        match op {
            Op::Fixed(n) => {
                if let Some(b) = ring.fixed(n) {
                    assert!(b.capacity() >= n);
                    live.push(Live::Mut(b, Vec::new()));
                } else {
                    assert!(policy == WhenFull::Fail || n > capacity);
                }
            }
            Op::Ext(n, len) => {
                if let Some(ext) = ring.extendable(n) {
                    if let Some((b, m)) = grow_and_finalize(ext, len, step as u8) {
                        live.push(Live::Mut(b, m));
                    }
                }
            }
            Op::Typed(n) => {
                if let Some(mut t) = ring.typed::<u64>(n) {
                    assert_eq!(t.as_ptr() as usize % 8, 0);
                    let m: Vec<u64> = (0..n as u64).map(|x| x * step as u64).collect();
                    for &x in &m {
                        t.push(x).unwrap();
                    }
                    assert!(t.push(0).is_err() || t.capacity() > n);
                    live.push(Live::Typed(t, m));
                }
            }
            Op::Write(i, byte, n) => {
                if let Some(Live::Mut(b, m)) = pick(i, live.len()).map(|i| &mut live[i]) {
                    let data = vec![byte; n];
                    let wrote = b.write(&data).unwrap();
                    assert_eq!(wrote, n.min(b.capacity() - m.len()));
                    m.extend_from_slice(&data[..wrote]);
                }
            }
            Op::Freeze(i) => {
                if let Some(i) = pick(i, live.len()) {
                    if let Live::Mut(..) = live[i] {
                        let Live::Mut(b, m) = live.swap_remove(i) else {
                            unreachable!()
                        };
                        live.push(Live::Frozen(b.freeze(), m));
                    }
                }
            }
            Op::Clone(i) => {
                if let Some(Live::Frozen(b, m)) = pick(i, live.len()).map(|i| &live[i]) {
                    let c = Live::Frozen(b.clone(), m.clone());
                    live.push(c);
                }
            }
            Op::Slice(i, s) => {
                if let Some(Live::Frozen(b, m)) = pick(i, live.len()).map(|i| &live[i]) {
                    let start = if m.is_empty() { 0 } else { s % (m.len() + 1) };
                    let c = Live::Frozen(b.slice(start..), m[start..].to_vec());
                    live.push(c);
                }
            }
            Op::Drop(i) => {
                if let Some(i) = pick(i, live.len()) {
                    live.swap_remove(i);
                }
            }
            Op::Grow(start, extra) => {
                // An ExtBuf grows while other buffers stay live and intact.
                if let Some(mut ext) = ring.extendable(start) {
                    let _ = ext.try_reserve(extra);
                    let other = ring.fixed(16);
                    if let Some(o) = &other {
                        assert_disjoint(vec![
                            (ext.as_ptr() as usize, ext.capacity()),
                            (o.as_ptr() as usize, o.capacity()),
                        ]);
                    }
                }
            }
        }
        assert_disjoint(live.iter().map(Live::range).collect());
        live.iter().for_each(Live::check);
    }
    drop(live);
    assert_eq!(ring.stats().live_buffers, 0, "every region came back");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(256) as u32, ..ProptestConfig::default() })]

    #[test]
    fn ring_matches_model(
        capacity in prop_oneof![Just(64usize), 65usize..4096, Just(1 << 14)],
        policy in prop_oneof![Just(WhenFull::Fail), Just(WhenFull::Heap), Just(WhenFull::Grow)],
        ops in proptest::collection::vec(op(), 1..scaled(200).max(20)),
    ) {
        run(capacity, policy, ops);
    }
}
