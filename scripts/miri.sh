#!/usr/bin/env bash
# Miri over the tests of the unsafe modules (unsafe code is kept to a few
# named modules, each block justified by a SAFETY comment): the xarray's
# nodes (tests/it/regress_node_free_provenance.rs: trees built, shrunk and
# dropped, the nodes freed through their addresses), the folio arena
# (crates/foliocache: `arena::` unit tests and tests/it/arena.rs, whose
# tests stamp and check every block they get), the async wait on a folio
# lock (crates/foliocache: `folio::tests::async*`, the waker table and the
# wait future's states, under a second of Miri; and `future::job::tests`,
# the async jobs' end and its waiters), the
# shared copies of folio bytes (crates/foliocache: `copy::` unit tests,
# which race copies on three threads: under Miri they are the byte-atomic
# loops, which the data race detector checks, about 10 s) and the IO
# buffers (crates/backing: tests/it/buf.rs). Each runs in its crate's `it`
# binary, filtered to its module. With MIRI_FULL=1 also the
# xarray's whole suites (invariants, value_nodes, model): far slower, see
# below.
#
# Installs a nightly toolchain with the miri component through rustup if
# it is missing (`rustup toolchain install nightly --component miri
# --profile minimal`, then `cargo +nightly miri setup`), so a fresh machine
# needs network access once.
#
# Time on this project's 2-core VMs: about 100 s once built, 110 s with
# the shared copies' tests (156 s measured beside another build; the first
# run also builds the dependencies for Miri, about 1.5 minutes more; the
# build is kept in target/miri). MIRI_FULL=1 adds well over half an hour:
# single xarray tests take minutes under Miri even with a tenth of their
# entries (`random_tree`), and that run was not finished here.
#
# Flags: `-Zmiri-tree-borrows`, because crossbeam-epoch (the xarray's
# readers' epochs) breaks Stacked Borrows' rules in its own list code
# (crossbeam-rs/crossbeam#545; crossbeam runs Miri with Tree Borrows,
# crossbeam-rs/crossbeam#996); `-Zmiri-permissive-provenance`, because
# crossbeam-epoch and the xarray's node words cast integers to pointers;
# `-Zmiri-ignore-leaks`, because nodes retired into crossbeam-epoch's
# global collector may still wait for an epoch when a test ends;
# `-Zmiri-isolation-error=warn-nobacktrace`, so proptest's failure
# persistence (getcwd) gets an error instead of stopping the run. What cannot run under Miri
# (threads in the hundreds, real mmap/madvise, O_DIRECT, io_uring) is
# `#[cfg_attr(miri, ignore)]` or sized down with `cfg!(miri)` in the tests
# themselves; the arena's region is a heap block under Miri (see
# `Region` in crates/foliocache/src/arena/region.rs).
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
# Property tests that read it: a few cases each (Miri runs ~1000x slower).
export PROPTEST_CASES="${PROPTEST_CASES:-4}"

start=$SECONDS

step "miri: xarray nodes (building, shrinking and freeing trees)"
cargo +nightly miri test -p foliocache-xarray --test it "$@" regress_node_free_provenance::

step "miri: foliocache arena (buddy allocator, region)"
cargo +nightly miri test -p foliocache --lib "$@" arena::
cargo +nightly miri test -p foliocache --test it "$@" arena::

step "miri: foliocache async wait (the folio lock's waker table, the wait's state machine)"
cargo +nightly miri test -p foliocache --lib "$@" folio::tests::async
cargo +nightly miri test -p foliocache --lib "$@" future::job::tests

step "miri: foliocache shared copies (byte atomics racing on three threads)"
cargo +nightly miri test -p foliocache --lib "$@" copy::

step "miri: backing IO buffers"
cargo +nightly miri test -p foliocache-backing --test it "$@" buf::

if [ "${MIRI_FULL:-0}" = 1 ]; then
  # The xarray's whole suites: every node operation (stores, erases,
  # splits, marks, iteration, lockless readers on two threads) checked,
  # but slow: single tests take minutes under Miri even with a tenth of
  # the entries, and the three files take well over an hour here.
  step "miri: xarray invariants, value nodes and the model (MIRI_FULL=1)"
  for module in invariants value_nodes model; do
    cargo +nightly miri test -p foliocache-xarray --test it "$@" "$module::"
  done
fi

step "miri: done in $((SECONDS - start)) s"
