#!/usr/bin/env bash
# The fsstress matrix (docs/measurements/2026-11-30-fsstress-matrix.md):
# `fsstress -p 8 -n OPS -s SEED` alone on the filesystem of DIR, then under
# `foliocache run` at each capacity, default and `--shared`; each run's
# tree (type, mode, owner, links, size and the bytes' SHA-256, a link's
# target) compared with the lone run's, and the lines on its stderr that
# the lone run did not print counted. The test command runs the same
# comparison small (crates/cli/tests/it/stress.rs). One line per run.
# Usage: scripts/fsstress-matrix.sh [OPS (5000)] [SEEDS (3)] [DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ops="${1:-5000}"
seeds="${2:-3}"
work="${3:-$root/target/tmp/fsstress-matrix}"
bin="$root/target/release/foliocache"
bash "$root/third_party/xfstests/build.sh" "$root/target/tmp/xfstests"
fsstress="$root/target/tmp/xfstests/fsstress"
mkdir -p "$work"

tree() {
  python3 - "$1" <<'PY'
import hashlib, os, stat, sys
root, lines = sys.argv[1], []
for d, dirs, files in os.walk(root):
    for n in dirs + files:
        p = os.path.join(d, n)
        st = os.lstat(p)
        m = st.st_mode
        if stat.S_ISDIR(m):
            what = "dir"
        elif stat.S_ISLNK(m):
            what = "link to " + os.readlink(p)
        elif stat.S_ISREG(m):
            with open(p, "rb") as f:
                what = "file %d bytes, sha256 %s" % (st.st_size, hashlib.file_digest(f, "sha256").hexdigest())
        elif stat.S_ISCHR(m) or stat.S_ISBLK(m):
            what = "device %x" % st.st_rdev
        else:
            what = "other"
        lines.append("%s: %s, mode %o, owner %d:%d, links %d"
                     % (os.path.relpath(p, root), what, m, st.st_uid, st.st_gid, st.st_nlink))
print("\n".join(sorted(lines)))
PY
}

printf '%-5s %-10s %-8s %4s %8s %-6s %12s %9s\n' seed capacity mode exit entries tree stderr+lines seconds
for seed in $(seq 1 "$seeds"); do
  rm -rf "$work/ext4" && mkdir "$work/ext4"
  t0=$(date +%s.%N)
  rc=0; "$fsstress" -p 8 -n "$ops" -s "$seed" -d "$work/ext4" 2>"$work/ext4.err" >/dev/null || rc=$?
  t=$(echo "$(date +%s.%N) - $t0" | bc)
  tree "$work/ext4" >"$work/ext4.tree"
  printf '%-5s %-10s %-8s %4s %8s %-6s %12s %9.1f\n' "$seed" "-" ext4 "$rc" \
    "$(wc -l <"$work/ext4.tree")" "-" "$(wc -l <"$work/ext4.err")" "$t"
  for capacity in 8M 256M; do
    for mode in default shared; do
      d="$work/run" && rm -rf "$d" && mkdir "$d"
      flags=(--capacity "$capacity" --no-state --dir "$d")
      [ "$mode" = shared ] && flags=(--shared "${flags[@]}")
      t0=$(date +%s.%N)
      rc=0; "$bin" run "${flags[@]}" -- "$fsstress" -p 8 -n "$ops" -s "$seed" -d "$d" \
        2>"$work/run.err" >/dev/null || rc=$?
      t=$(echo "$(date +%s.%N) - $t0" | bc)
      tree "$d" >"$work/run.tree"
      same=equal
      if ! cmp -s "$work/ext4.tree" "$work/run.tree"; then
        same=DIFFERS
        cp "$work/run.tree" "$work/run-$seed-$capacity-$mode.tree"
        cp "$work/ext4.tree" "$work/ext4-$seed.tree"
      fi
      extra=$(grep -vxF -f "$work/ext4.err" "$work/run.err" | wc -l || true)
      [ ! -s "$work/ext4.err" ] && extra=$(wc -l <"$work/run.err")
      [ "$extra" != 0 ] && cp "$work/run.err" "$work/run-$seed-$capacity-$mode.err"
      printf '%-5s %-10s %-8s %4s %8s %-6s %12s %9.1f\n' "$seed" "$capacity" "$mode" "$rc" \
        "$(wc -l <"$work/run.tree")" "$same" "$extra" "$t"
    done
  done
done
rm -rf "$work/ext4" "$work/run"
