#!/usr/bin/env bash
# The project's test command (README "Quick start", and what .ci/run runs):
# formatting, lints, the API docs' links, a smoke run of every benchmark,
# the loom models, Miri over the unsafe modules, a smoke run of
# `foliocache bench`, and every test in release mode (the fuzz targets'
# smoke run among them). Installs what it needs that a fresh machine may
# lack.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how long the run has taken so far (CI's budget is 35 minutes
# on 2 cores: the figures show which step to shorten).
step() { printf '\n==> %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# Jobs started beside the steps (`start_beside`), each at the lowest
# priority: they take the cores' time the steps leave idle (a release
# build's serial stretches, the tests' waits) and nothing a step wants.
# Those still running when the run stops early are killed, with their
# children (a cargo, a test binary).
beside_pids=()
stop_beside() {
  local pid
  for pid in "${beside_pids[@]}"; do
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
}
trap stop_beside EXIT

# Runs the function or command `$2...` beside the steps at nice 19, its
# output to the log `$1`; its pid is the last of `beside_pids`.
start_beside() {
  local log=$1
  shift
  {
    renice -n 19 -p "$BASHPID" >/dev/null
    "$@"
  } >"$log" 2>&1 &
  beside_pids+=($!)
}

# Waits for a job started beside the steps (pid `$1`), prints its log
# (`$2`) whole, and fails the run if it failed (`$3`: what it was).
finish_beside() {
  local status=0
  wait "$1" || status=$?
  cat "$2"
  [ "$status" = 0 ] || { echo "$3 failed (exit $status)" >&2; exit 1; }
}

# The FUSE mount's tests need fusermount3 (package fuse3; as root only to
# unmount), fio (the verified workloads through the mount), sqlite3 and
# db_bench (rocksdb-tools): real programs through the mount; the
# interposer's, fio and sqlite3. Only the tests run these (`missing`):
# they are installed beside the builds (it waits on the network and on
# dpkg), and waited for before the first step that runs programs, the
# `bench --quick` smoke run. What the builds need (`build_missing`) is
# installed first.
missing=() build_missing=()
command -v fio >/dev/null 2>&1 || missing+=(fio)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v db_bench >/dev/null 2>&1 || missing+=(rocksdb-tools)
# The programs scenario's pgbench job runs PostgreSQL (initdb, the
# server, pgbench) on ext4 and under `foliocache run --shared`.
[ -d /usr/lib/postgresql ] || missing+=(postgresql)
# stress-ng's file stressors run forked workers in a named shared cache
# (the CLI's named-cache test).
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
# xfstests' fsstress and fsx (third_party/xfstests, built by the CLI's
# stress tests) need <xfs/xfs.h>.
[ -e /usr/include/xfs/xfs.h ] || missing+=(xfslibs-dev)
# The advisor scenario's db_bench trace is recorded with strace.
command -v strace >/dev/null 2>&1 || missing+=(strace)
# The C API's install test builds a program with pkg-config's flags.
command -v pkg-config >/dev/null 2>&1 || build_missing+=(pkg-config)
# foliocache-sqlite links the system's libsqlite3 (rusqlite, found by
# pkg-config).
pkg-config --exists sqlite3 2>/dev/null || build_missing+=(libsqlite3-dev)
# The SQLite extension's tests load it into Debian's Python (built with
# loadable extensions, over the system's libsqlite3); moto's environment
# (below, beside the builds) is made with it.
[ -x /usr/bin/python3 ] || build_missing+=(python3)
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$@" >/dev/null; }
}
can_apt=false
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && can_apt=true
if [ ${#build_missing[@]} -gt 0 ]; then
  if $can_apt; then
    step "installing ${build_missing[*]} (the builds)"
    apt_install "${build_missing[@]}"
  else
    echo "note: ${build_missing[*]} missing and not root: the builds of foliocache-sqlite and the C API's install test need them"
  fi
fi
# Not killed when the run stops early (dpkg is left to finish); waited
# for (`apt_pid`) before the `bench --quick` smoke run.
apt_pid=
if [ ${#missing[@]} -gt 0 ]; then
  if $can_apt; then
    mkdir -p target
    echo "installing ${missing[*]} (the tests' programs) beside the builds"
    apt_install "${missing[@]}" >target/apt.log 2>&1 &
    apt_pid=$!
  else
    echo "note: ${missing[*]} missing and not root: the FUSE mount tests will skip (they fail under CI=true)"
  fi
fi

if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
# The bench's `parquet` job (off by default: arrow and parquet's build).
cargo clippy -p foliocache-bench --features parquet --all-targets -- -D warnings

# The operator's binary (run, mount, stat, cache, umount) builds without
# the bench harness and its dependencies.
step "cargo check -p foliocache-cli --no-default-features"
cargo check --quiet -p foliocache-cli --no-default-features

step "cargo doc (broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# The crates meant for crates.io (every crate without `publish = false`)
# and the Rust each declares (its own `rust-version`, or the workspace's).
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
declare -A by_msrv=()
published=()
for toml in crates/*/Cargo.toml; do
  grep -q '^publish = false' "$toml" && continue
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$toml" | head -n 1)
  v=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$toml" | head -n 1)
  published+=("$name")
  by_msrv[${v:-$msrv}]+=" -p $name"
done

# What crates.io would receive: each published crate packaged, then
# checked from its package alone with the oldest Rust it declares. The
# packages are unpacked into a workspace of their own (target/packaged),
# each sibling found through `[patch.crates-io]` at its package (as
# crates.io would serve it), the dependencies at this workspace's locked
# versions. One check a Rust version serves both questions (does the
# package hold every file its build needs; does it build with its
# `rust-version`), where `cargo package`'s own verification built every
# package again in the dev profile (3 to 4 minutes here).
step "cargo package (${published[*]}), unpacked into target/packaged"
packages=()
for name in "${published[@]}"; do packages+=(-p "$name"); done
rm -rf target/package/*.crate target/packaged
cargo package --quiet --no-verify --allow-dirty "${packages[@]}"
mkdir -p target/packaged
members=() patches=()
for crate in target/package/*.crate; do
  dir=$(basename "$crate" .crate)
  tar -xzf "$crate" -C target/packaged
  members+=("\"$dir\"")
  patches+=("${dir%-*} = { path = \"$dir\" }")
done
cp Cargo.lock target/packaged/
{
  echo '[workspace]'
  echo 'resolver = "2"'
  echo "members = [$(IFS=,; echo "${members[*]}")]"
  echo '[patch.crates-io]'
  printf '%s\n' "${patches[@]}"
} >target/packaged/Cargo.toml

# The MSRV checks run beside the steps below (their own target
# directory, target/msrv, so they wait for no build of the workspace's):
# four toolchains checking every dependency again are about 3.5 minutes of
# both cores, most of which the steps leave idle (docs/testing.md, "What
# each step costs"). Each toolchain is installed there too, just before
# its check: a fresh machine downloads about 115 MiB a toolchain, which
# the builds need not wait for. rustup is not made for concurrent
# installs (Miri's nightly is installed beside too): every install holds
# target/rustup.lock, and none updates rustup itself
# (`--no-self-update`: the steps' cargo runs through the rustup binary
# meanwhile). Their output is printed whole at the end.
if ! command -v rustup >/dev/null 2>&1 && [ "${CI:-}" = true ]; then
  echo "no rustup: cannot install the Rust versions the crates declare (${!by_msrv[*]})" >&2
  exit 1
fi
rustup_install() {
  flock target/rustup.lock rustup toolchain install --no-self-update --profile minimal "$@"
}
msrv_checks() {
  for v in "${!by_msrv[@]}"; do
    step "MSRV: cargo +$v check${by_msrv[$v]} (from their packages)"
    if command -v rustup >/dev/null 2>&1; then
      rustup toolchain list | grep -q "^$v" || rustup_install "$v"
      # shellcheck disable=SC2086 # one -p argument per crate
      (cd target/packaged && CARGO_TARGET_DIR=../msrv cargo "+$v" check --quiet ${by_msrv[$v]})
    else
      echo "note: no rustup: the MSRV check is skipped (it runs under CI=true)"
      # shellcheck disable=SC2086 # one -p argument per crate
      (cd target/packaged && CARGO_TARGET_DIR=../msrv cargo check --quiet ${by_msrv[$v]})
    fi
  done
}
start_beside target/msrv.log msrv_checks
msrv_pid=${beside_pids[-1]}

# Miri beside the steps too (target/miri): it interprets on one core for
# most of its 4.5 minutes. Its nightly, with the rust-src component `cargo
# miri setup` would otherwise add itself, is installed here under the
# lock (scripts/miri.sh installs it when run alone). Its output is
# printed whole at the end.
miri_beside() {
  if command -v rustup >/dev/null 2>&1 && ! cargo +nightly miri --version >/dev/null 2>&1; then
    printf '\n==> installing nightly with miri and rust-src (rustup)\n'
    rustup_install nightly --component miri --component rust-src
  fi
  bash scripts/miri.sh
}
start_beside target/miri.log miri_beside
miri_pid=${beside_pids[-1]}

# Every release build below (the benchmarks, the `bench --quick` smoke
# run, S3 on loopback, the workspace's tests) names the whole workspace
# and one feature set, so cargo builds each crate once: with `-p CRATE`
# cargo unifies only that crate's features, and the smoke run's and the
# S3 step's builds were 51 units of their own (docs/testing.md, "What
# each step costs"). `e2e-s3` adds only the S3 test module: object_store's
# S3 client is in the workspace's build already (the mount's default).
workspace=(--workspace --features foliocache-object-store/e2e-s3)

# moto's S3 server (from PyPI, in a virtual environment under target/)
# for the S3 step below: installed beside the builds (it waits on the
# network), waited for before that step.
moto=target/moto/bin/moto_server
moto_pid=
if [ ! -x "$moto" ]; then
  mkdir -p target
  { python3 -m venv target/moto &&
      target/moto/bin/pip install --quiet --disable-pip-version-check 'moto[server]==5.2.5'
  } >target/moto-install.log 2>&1 &
  moto_pid=$!
fi

# `--bench '*'`: the bench targets alone (`--benches` takes every
# library too, whose unit tests the workspace's tests run again).
step "benchmark smoke run (each benchmark once, no timing)"
cargo bench "${workspace[@]}" --bench '*' -- --test

# Both crates' models in one build (one feature set, so the dependencies
# under `--cfg loom` are built once).
step "loom models: the xarray's reader/writer protocol, the cache's lookup vs removal, fills, reclaim, writeback (--cfg loom)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p foliocache-xarray -p foliocache --release --test loom

# The CLI's smoke run: `foliocache bench --quick` (every scenario, every
# default engine, two repeats) on 8 MiB files; the test checks every JSON
# field, the readahead scenario's summary ratios and the SVG plot, and
# prints the bench's tables here.
step "bench smoke run: foliocache bench --quick on 8 MiB, JSON and plot checked"
if [ -n "$apt_pid" ]; then
  wait "$apt_pid" || { cat target/apt.log >&2; echo "installing ${missing[*]} failed" >&2; exit 1; }
fi
cargo test --release "${workspace[@]}" --test it quick_seeds_smoke_run -- --nocapture

# The object-store cache and the mount of a bucket through a real
# S3-protocol server on loopback: moto's server (from PyPI, in a virtual
# environment under target/), and object_store's S3 client (the mount's
# default build; the cache crate's `e2e-s3` feature), so the HTTP path,
# ranged GETs, e_tags and `If-Match` are exercised end to end, and
# `foliocache mount --object-store s3://...` from the default binary
# (docs/object-store.md, "Tests").
step "object store through S3 on loopback (moto's server, object_store's S3 client)"
if [ -n "$moto_pid" ]; then
  wait "$moto_pid" || { cat target/moto-install.log >&2; exit 1; }
fi
# Every `s3::` test of the workspace (the cache crate's, the fuse and CLI
# crates' mounts of a bucket), from the builds above; the workspace's
# tests below skip them.
MOTO_SERVER="$PWD/$moto" cargo test --release "${workspace[@]}" --test it s3::

# One test binary a crate (`tests/it/`, a module a theme) and the few that
# need a process of their own (loom, memory_audit, soak, the fuzz smoke
# run): docs/testing.md.
# `foliocache run` and `mount` keep warm-restart state files under
# $XDG_STATE_HOME by default: the tests' go to the target directory.
export XDG_STATE_HOME="$PWD/target/test-state"

# Beside the workspace's tests, at the lowest priority, in the cores'
# time they leave idle (they wait on fsync, forks, sleeps and real
# programs for about half of it: docs/testing.md, "What each step
# costs"): the cdylibs the C API's and the CLI's tests build (`cargo
# build -p ...` with their own package selection, so with their own
# features: 29 units of their own), before those tests ask for them, and
# the object-store cache's tests over object_store 0.13's trait
# (DataFusion 55; the workspace's build tests 0.14), whose build is 38
# units of its own. Cargo lets one build at a time use the target
# directory: this starts after the workspace's test binaries are built
# and their run has begun (started first, it would only put itself before
# them); a test that builds meanwhile waits for it. Its output is printed
# whole after theirs.
step "cargo test --workspace --release: the build"
cargo test --release "${workspace[@]}" --no-run --message-format=json-render-diagnostics >target/test-build.json
builds_beside_tests() {
  sleep 10
  cargo build --release -p foliocache-capi
  cargo build --release -p foliocache-preload -p foliocache-capi -p foliocache-sqlite-ext
  cargo test --release -p foliocache-object-store --no-default-features \
    --features object-store-013,prometheus --lib --test it
}
start_beside target/beside.log builds_beside_tests
tests_beside_pid=${beside_pids[-1]}

# The tests in two lanes at once: cargo runs one test binary at a time,
# and the binaries wait on fsync, forks, sleeps and real programs for
# most of their time (docs/testing.md, "What each step costs"). The CLI's
# binaries (its `it`, the longest: db_bench, redb, PostgreSQL, fsstress,
# crash trials; and the binary's unit tests) run in one lane, from the
# build above, as cargo would run them (in the crate's directory, `CARGO`
# set: its tests build the cdylibs with it); `cargo test --exclude
# foliocache-cli` runs every other binary and the doctests in the other.
# Excluding the CLI changes no unit of the build: the other crates' units
# and their features are the workspace's (docs/testing.md). A failing
# lane fails the run; the CLI's output is printed whole after the other's.
mapfile -t cli_tests < <(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m.get("executable")
            and m["profile"]["test"] and m["manifest_path"] == sys.argv[1]):
        print(m["executable"])
' "$PWD/crates/cli/Cargo.toml" <target/test-build.json)
[ ${#cli_tests[@]} -ge 2 ] || { echo "the CLI's test binaries were not found in the build's messages" >&2; exit 1; }
cli_lane() {
  local exe
  cd crates/cli
  export CARGO CARGO_MANIFEST_DIR="$PWD"
  CARGO=$(rustup which cargo 2>/dev/null || command -v cargo)
  for exe in "${cli_tests[@]}"; do
    printf '     Running %s\n' "$exe"
    "$exe" --skip quick_seeds_smoke_run --skip s3:: || return
  done
}

step "cargo test --workspace --release in two lanes (the CLI's binaries; the rest), the cdylibs and the object_store 0.13 tests built beside them"
# (the S3 tests, `s3::`, and the quick smoke run ran above)
cli_lane >target/cli-tests.log 2>&1 &
cli_pid=$!
beside_pids+=("$cli_pid")
cargo test --release "${workspace[@]}" --exclude foliocache-cli -- --skip quick_seeds_smoke_run --skip s3::
step "the CLI's tests (the other lane): waiting for them, their output"
finish_beside "$cli_pid" target/cli-tests.log "the CLI's tests"

step "the cdylibs' builds, the object-store cache over object_store 0.13 (DataFusion 55's): waiting for them, their output"
finish_beside "$tests_beside_pid" target/beside.log "the builds and tests beside the workspace's tests"
step "the MSRV checks (beside the steps since the packages): waiting for them, their output"
finish_beside "$msrv_pid" target/msrv.log "the MSRV checks"
step "miri over the unsafe modules' tests (xarray node frees, arena, IO buffers; beside the steps since the packages): waiting for it, its output"
finish_beside "$miri_pid" target/miri.log miri
step "done"
