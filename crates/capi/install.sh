#!/bin/sh
# Installs the C API as a distribution package does:
#   crates/capi/install.sh PREFIX [LIBDIR]
# puts the shared object LIB (default target/release/libfoliocache.so, from
# `cargo build --release -p foliocache-capi`) in LIBDIR (default PREFIX/lib)
# as libfoliocache.so.VERSION, with the links libfoliocache.so.0 (its
# SONAME, what programs load) and libfoliocache.so (what `-lfoliocache`
# finds); the header in PREFIX/include; and foliocache.pc, made from
# foliocache.pc.in, in LIBDIR/pkgconfig. DESTDIR, if set, is prepended to
# every path written (a staging root), not to the paths in foliocache.pc.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PREFIX [LIBDIR]" >&2
    exit 2
fi
prefix=$1
libdir=${2:-$prefix/lib}
here=$(dirname "$0")
lib=${LIB:-target/release/libfoliocache.so}
dest=${DESTDIR:-}
version=$(sed -n 's/^Version: //p' "$here/foliocache.pc.in")
mkdir -p "$dest$libdir/pkgconfig" "$dest$prefix/include"
cp "$lib" "$dest$libdir/libfoliocache.so.$version"
# Stripped, as a package's library is (SPLIT_DEBUG=1, STRIP=none: strip.sh).
sh "$here/strip.sh" "$dest$libdir/libfoliocache.so.$version" "$dest$libdir/debug"
chmod 0755 "$dest$libdir/libfoliocache.so.$version"
ln -sf "libfoliocache.so.$version" "$dest$libdir/libfoliocache.so.0"
ln -sf libfoliocache.so.0 "$dest$libdir/libfoliocache.so"
cp "$here/include/foliocache.h" "$dest$prefix/include/foliocache.h"
chmod 0644 "$dest$prefix/include/foliocache.h"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" "$here/foliocache.pc.in" \
    >"$dest$libdir/pkgconfig/foliocache.pc"
