#!/usr/bin/env bash
# Runs one coverage-guided fuzzer (cargo-fuzz / libFuzzer) for a while.
#
#   scripts/fuzz.sh TARGET [SECONDS] [-- LIBFUZZER_ARGS...]   fuzz (default 1800 s)
#       (the recorded file_ops run added `-- -len_control=0`: whole
#       sequences from the start instead of inputs that grow slowly)
#   scripts/fuzz.sh cmin TARGET                               minimize the corpus in place
#   scripts/fuzz.sh repro TARGET FILE                         run one input (a crash)
#
# TARGET is xarray_ops (the xarray against a BTreeMap model) or file_ops (a
# file through the cache over a fault-injecting backing, against a Vec<u8>).
# New corpus entries go to crates/fuzz/corpus/TARGET (committed: minimize
# with `cmin` before committing), crashes to crates/fuzz/fuzz/artifacts/TARGET.
# One process (no -jobs/-workers): these machines have two cores. Leak
# detection is off: each file_ops input builds a cache whose flusher thread
# notices the cache is gone only within 500 ms, so the last few are still
# alive (holding their closures) when the process exits. Needs the nightly
# toolchain and cargo-fuzz:
#   rustup toolchain install nightly --profile minimal && cargo install cargo-fuzz
# The inputs are checked on stable too: `cargo test -p foliocache-fuzz --release`
# replays the corpus and runs random inputs (crates/fuzz/tests/smoke.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz_dir=crates/fuzz/fuzz
run() { cargo +nightly fuzz "$@"; }
# (LeakSanitizer's check at exit: see above.)
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"


case "${1:-}" in
  cmin)
    # Keeps a smallest set of inputs that covers every edge the corpus
    # covers (hit counts aside), so the committed corpus stays small.
    t=${2:?usage: scripts/fuzz.sh cmin TARGET}
    run build --fuzz-dir "$fuzz_dir" -a "$t"
    bin="${CARGO_TARGET_DIR:-$fuzz_dir/target}/$(rustc -vV | sed -n 's/^host: //p')/release/$t"
    tmp=$(mktemp -d)
    chmod 755 "$tmp"
    "$bin" -set_cover_merge=1 -use_counters=0 -detect_leaks=0 -rss_limit_mb=4096 \
      -timeout=30 "$tmp" "crates/fuzz/corpus/$t"
    rm -rf "crates/fuzz/corpus/$t"
    mv "$tmp" "crates/fuzz/corpus/$t"
    echo "crates/fuzz/corpus/$t: $(ls "crates/fuzz/corpus/$t" | wc -l) files"
    ;;
  repro)
    t=${2:?usage: scripts/fuzz.sh repro TARGET FILE}
    f=${3:?usage: scripts/fuzz.sh repro TARGET FILE}
    run run --fuzz-dir "$fuzz_dir" -a "$t" "$f"
    ;;
  xarray_ops | file_ops)
    t=$1
    shift
    secs=1800
    if [ $# -gt 0 ] && [ "$1" != -- ]; then
      secs=$1
      shift
    fi
    [ "${1:-}" = -- ] && shift
    mkdir -p "crates/fuzz/corpus/$t" "$fuzz_dir/artifacts/$t"
    run run --fuzz-dir "$fuzz_dir" -a "$t" "crates/fuzz/corpus/$t" -- \
      -max_total_time="$secs" -max_len=4096 -timeout=30 \
      -rss_limit_mb=4096 -print_final_stats=1 -detect_leaks=0 \
      -artifact_prefix="$fuzz_dir/artifacts/$t/" "$@"
    ;;
  *)
    sed -n '2,21p' "$0" >&2
    exit 2
    ;;
esac
