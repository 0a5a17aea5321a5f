#!/bin/sh
# Installs foliocache as a distribution package would:
#   scripts/install.sh [--no-build] PREFIX
# builds the release profile (`cargo build --release`: the binary, the C
# library, the interposer and the SQLite extension), then puts
#   PREFIX/bin/foliocache
#   PREFIX/lib/libfoliocache.so.VERSION, .so.0 (its SONAME) and .so
#   PREFIX/lib/foliocache/libfoliocache_preload.so (loaded by `foliocache
#     run`, not linked: a directory of its own keeps it off the linker's path)
#   PREFIX/lib/foliocache/libfoliocache_sqlite_ext.so (SQLite's `.load`)
#   PREFIX/include/foliocache.h
#   PREFIX/lib/pkgconfig/foliocache.pc
# Installed files are stripped (`strip --strip-unneeded`, as a package's
# are: the release profile keeps line tables for profiling, 45 MB in the
# binary); with SPLIT_DEBUG=1 their debug information goes first to
# PREFIX/lib/debug/NAME.debug, which a debugger finds through the
# stripped file's debuglink. STRIP=none installs them as built.
# DESTDIR, if set, is prepended to every path written (a staging root), not
# to the paths the files name. `--no-build` installs what target/release
# holds (BUILD_DIR, default ${CARGO_TARGET_DIR:-target}/release). LIBDIR (default PREFIX/lib) moves the C library; the interposer
# stays in PREFIX/lib/foliocache, where `foliocache run` looks for it.
set -eu
build=1
if [ "${1:-}" = "--no-build" ]; then
    build=0
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 [--no-build] PREFIX" >&2
    exit 2
fi
prefix=$1
libdir=${LIBDIR:-$prefix/lib}
dest=${DESTDIR:-}
cd "$(dirname "$0")/.."
if [ "$build" = 1 ]; then
    cargo build --release
fi
out=${BUILD_DIR:-${CARGO_TARGET_DIR:-target}/release}
for f in "$out/foliocache" "$out/libfoliocache.so" "$out/libfoliocache_preload.so" "$out/libfoliocache_sqlite_ext.so"; do
    if [ ! -f "$f" ]; then
        echo "$0: $f is missing: run \`cargo build --release\` first" >&2
        exit 1
    fi
done
mkdir -p "$dest$prefix/bin" "$dest$prefix/lib/foliocache"
strip_installed=crates/capi/strip.sh
cp "$out/foliocache" "$dest$prefix/bin/foliocache"
sh "$strip_installed" "$dest$prefix/bin/foliocache" "$dest$prefix/lib/debug"
chmod 0755 "$dest$prefix/bin/foliocache"
cp "$out/libfoliocache_preload.so" "$dest$prefix/lib/foliocache/libfoliocache_preload.so"
sh "$strip_installed" "$dest$prefix/lib/foliocache/libfoliocache_preload.so" "$dest$prefix/lib/debug"
chmod 0755 "$dest$prefix/lib/foliocache/libfoliocache_preload.so"
cp "$out/libfoliocache_sqlite_ext.so" "$dest$prefix/lib/foliocache/libfoliocache_sqlite_ext.so"
sh "$strip_installed" "$dest$prefix/lib/foliocache/libfoliocache_sqlite_ext.so" "$dest$prefix/lib/debug"
chmod 0755 "$dest$prefix/lib/foliocache/libfoliocache_sqlite_ext.so"
# The C library (stripped there too), its header and its pkg-config file.
LIB="$out/libfoliocache.so" sh crates/capi/install.sh "$prefix" "$libdir"
