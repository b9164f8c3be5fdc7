# shellcheck shell=bash
# The minimum supported Rust version: the library and the comparison binary build
# with the `rust-version` of the root Cargo.toml's `[workspace.package]`, which both
# packages inherit. Sourced by .ci/run, which calls `msrv` from the repository root.
#
# Only the library (with and without its default features, and with `bytes`) and the
# bench are checked; not the `tokio` feature, whose MSRV is tokio's own (1.85 for the
# tokio that Cargo.lock pins), nor the test suite: its dev-dependencies (proptest,
# tokio, rand) ask for newer Rust than the MSRV, so the tests, examples and benches are
# not built with it. `--locked`: an old
# cargo must build what Cargo.lock pins, not resolve again (and not rewrite the file).
# Its own target directory, as the other tools have, so its builds replace no others.

msrv() {
  local version
  version=$(sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' Cargo.toml | head -n 1)
  if [[ -z $version ]]; then
    echo "msrv: no rust-version in Cargo.toml" >&2
    return 1
  fi
  # Under .ci/run's rustup lock: another lane may be adding nightly components.
  mkdir -p target
  if ! flock target/.ci-rustup.lock rustup toolchain install "$version" --profile minimal \
    >/dev/null 2>&1; then
    echo "SKIPPED: msrv: rustup could not install $version"
    return 0
  fi
  echo "msrv: Rust $version"
  local cargo=(cargo "+$version")
  CARGO_TARGET_DIR=target/msrv "${cargo[@]}" check --locked -p ringmem &&
    CARGO_TARGET_DIR=target/msrv "${cargo[@]}" check --locked -p ringmem --features bytes &&
    CARGO_TARGET_DIR=target/msrv "${cargo[@]}" check --locked -p ringmem --no-default-features &&
    CARGO_TARGET_DIR=target/msrv "${cargo[@]}" check --locked -p ringmem-bench
}
