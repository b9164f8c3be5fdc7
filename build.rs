//! Names the one configuration the library gates its real-thread `std` items on.
//!
//! `real_std`: the `std` feature, built for real threads rather than loom's model
//! (`--cfg loom`). What needs real threads or the operating system (`std`'s parking
//! locks, the `std::io` and tokio adapters, asking the machine's parallelism, clock
//! deadlines in the codec pool) exists only there, and one name reads better than
//! `all(feature = "std", not(loom))` repeated in every module. `uring`: `real_std`, the
//! `io-uring` feature and Linux, where `ringmem::uring` exists.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(real_std)");
    println!("cargo::rerun-if-changed=build.rs");
    let std = std::env::var_os("CARGO_FEATURE_STD").is_some();
    // Cargo passes the target's cfgs (RUSTFLAGS' `--cfg loom` included) as CARGO_CFG_*.
    let loom = std::env::var_os("CARGO_CFG_LOOM").is_some();
    if std && !loom {
        println!("cargo::rustc-cfg=real_std");
    }
    // `uring`: the io_uring receive path, on Linux with the `io-uring` feature.
    println!("cargo::rustc-check-cfg=cfg(uring)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if std && !loom && linux && std::env::var_os("CARGO_FEATURE_IO_URING").is_some() {
        println!("cargo::rustc-cfg=uring");
    }
}
