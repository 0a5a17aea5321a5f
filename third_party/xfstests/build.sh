#!/usr/bin/env bash
# Builds xfstests' fsstress and fsx (this directory's copies; README.md)
# into OUT_DIR (default: ../../target/xfstests), each only when missing or
# older than its sources. Needs a C compiler and Debian's xfslibs-dev
# (<xfs/xfs.h>), which scripts/test.sh installs. Prints nothing on success.
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$src/../../target/xfstests}"
mkdir -p "$out"
if [ ! -e /usr/include/xfs/xfs.h ]; then
  echo "xfstests: <xfs/xfs.h> missing: install xfslibs-dev" >&2
  exit 2
fi
for prog in fsstress fsx; do
  exe="$out/$prog"
  if [ -x "$exe" ] && [ -z "$(find "$src" -newer "$exe" -name '*.[ch]')" ]; then
    continue
  fi
  # Built under a name of its own, then renamed: a concurrent build never
  # leaves a half-written program where another run looks for it.
  cc -O2 -w -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DXFS -DFALLOCATE \
    -DHAVE_COPY_FILE_RANGE -I"$src" \
    -o "$exe.$$" "$src/$prog.c" -lm
  mv -f "$exe.$$" "$exe"
done
