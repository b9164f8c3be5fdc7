//! Criterion micro-benchmarks of the ring's hot paths (filled below).
fn main() {}
