//! Nothing here: the tests in `tests/` use `std`'s own `Vec`, `Box` and hashbrown's
//! `HashMap` on ringmem's allocators through `core::alloc::Allocator`, which the
//! `nightly` feature implements (CI: `cargo +nightly test --manifest-path
//! nightly/Cargo.toml`).
