#!/usr/bin/env bash
# Miri over the tests of the unsafe modules (CONVENTIONS "Unsafe: small,
# named, justified"): the xarray's nodes and entries (crates/xarray: the
# `invariants` and `value_nodes` tests, and `model`'s property tests with
# few cases), the folio arena (crates/foliocache: `arena::` unit tests and
# tests/arena.rs) and the IO buffers (crates/backing: tests/buf.rs).
#
# Installs a nightly toolchain with the miri component through rustup if
# it is missing (`rustup toolchain install nightly --component miri
# --profile minimal`, then `cargo +nightly miri setup`), so a fresh machine
# needs network access once.
#
# Time on this project's 2-core VMs: about TIME_TBD, most of it building
# the dependencies for Miri the first time (the build is kept in
# target/miri). Not part of scripts/test.sh: see the README.
#
# Flags: `-Zmiri-tree-borrows`, because crossbeam-epoch (the xarray's
# readers' epochs) breaks Stacked Borrows' rules in its own list code
# (crossbeam-rs/crossbeam#545; crossbeam runs Miri with Tree Borrows,
# crossbeam-rs/crossbeam#996); `-Zmiri-permissive-provenance`, because
# crossbeam-epoch casts integers to pointers. What cannot run under Miri
# (threads in the hundreds, real mmap/madvise, O_DIRECT, io_uring) is
# `#[cfg_attr(miri, ignore)]` or sized down with `cfg!(miri)` in the tests
# themselves; the arena's region is a heap block under Miri (see
# `Region` in crates/foliocache/src/arena.rs).
#
# Usage: scripts/miri.sh [extra args for every `cargo miri test`]
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  step "installing nightly with miri (rustup)"
  rustup toolchain install nightly --component miri --profile minimal
fi
cargo +nightly miri setup >/dev/null

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/miri"
export MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks -Zmiri-isolation-error=warn-nobacktrace"
# Property tests: a few cases each (Miri runs ~1000x slower than native).
export PROPTEST_CASES="${PROPTEST_CASES:-4}"

start=$SECONDS

step "miri: xarray nodes (building, shrinking and freeing trees)"
cargo +nightly miri test -p xarray --test regress_node_free_provenance "$@"

step "miri: foliocache arena (buddy allocator, region)"
cargo +nightly miri test -p foliocache --lib "$@" arena::
cargo +nightly miri test -p foliocache --test arena "$@"

step "miri: backing IO buffers"
cargo +nightly miri test -p backing --test buf "$@"

if [ "${MIRI_FULL:-0}" = 1 ]; then
  # The xarray's whole suites: every node operation (stores, erases,
  # splits, marks, iteration, lockless readers on two threads) checked,
  # but slow: single tests take minutes under Miri even with a tenth of
  # the entries, and the three files take well over an hour here.
  step "miri: xarray invariants, value nodes and the model (MIRI_FULL=1)"
  cargo +nightly miri test -p xarray --test invariants --test value_nodes --test model "$@"
fi

step "miri: done in $((SECONDS - start)) s"
