#!/bin/sh
# Strips an installed file as a package does:
#   strip.sh FILE DEBUG_DIR
# `strip --strip-unneeded` FILE; with SPLIT_DEBUG=1, its debug information
# is kept first in DEBUG_DIR/NAME.debug and FILE gets a debuglink to it
# (gdb and perf find it there). STRIP=none leaves FILE as built; STRIP names
# another strip (a cross toolchain's). Without strip on the machine, FILE is
# left as built and a line says so.
set -eu
file=$1
debug_dir=$2
strip=${STRIP:-strip}
[ "$strip" = none ] && exit 0
if ! command -v "$strip" >/dev/null 2>&1; then
    echo "$0: no $strip: $file installed with its symbols" >&2
    exit 0
fi
if [ "${SPLIT_DEBUG:-0}" = 1 ]; then
    mkdir -p "$debug_dir"
    debug="$debug_dir/$(basename "$file").debug"
    objcopy --only-keep-debug "$file" "$debug"
    chmod 0644 "$debug"
    "$strip" --strip-unneeded "$file"
    objcopy --add-gnu-debuglink="$debug" "$file"
else
    "$strip" --strip-unneeded "$file"
fi
