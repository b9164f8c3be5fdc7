//! Names the one configuration the library gates most of its `std` items on.
//!
//! `real_std`: the `std` feature, built for real threads rather than loom's model
//! (`--cfg loom`). Thread-locals, parking and `std::io` adapters exist only there, and
//! one name reads better than `all(feature = "std", not(loom))` repeated in every
//! module.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(real_std)");
    println!("cargo::rerun-if-changed=build.rs");
    let std = std::env::var_os("CARGO_FEATURE_STD").is_some();
    // Cargo passes the target's cfgs (RUSTFLAGS' `--cfg loom` included) as CARGO_CFG_*.
    let loom = std::env::var_os("CARGO_CFG_LOOM").is_some();
    if std && !loom {
        println!("cargo::rustc-cfg=real_std");
    }
}
