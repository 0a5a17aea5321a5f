#!/bin/bash
# PostgreSQL's pgbench on ext4 and under `foliocache run --shared`, rounds
# interleaved (docs/measurements/2026-11-28-shared-run.md): a database of
# scale SCALE (about 16 MB a unit) with `shared_buffers` small (16 MB), so
# the page cache serves most reads; `pgbench -S` (read-only) and the
# default TPC-B-like run, 2 clients, SECONDS each. Run as root at the
# workspace's root after `cargo build --release`; PostgreSQL (Debian's
# `postgresql`) runs as the `postgres` user.
#
#   scripts/pgbench-shared.sh [ROUNDS] [SCALE] [SECONDS] [CAPACITY]
set -euo pipefail
rounds=${1:-3} scale=${2:-16} secs=${3:-15} capacity=${4:-1G}
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
fc=$(realpath target/release/foliocache)
work=$(mktemp -d /tmp/pgbench-shared.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
cat > "$work/one.sh" <<EOS
#!/bin/bash
# one.sh DIR: a fresh cluster in DIR, the server, both runs, the shutdown.
set -e
D=\$1
"$bin/initdb" -D "\$D/data" -A trust > /dev/null
"$bin/postgres" -D "\$D/data" -c shared_buffers=16MB -c listen_addresses= \
  -c unix_socket_directories="\$D" -c max_wal_size=1GB > "\$D/log" 2>&1 &
pid=\$!
for i in \$(seq 100); do "$bin/pg_isready" -h "\$D" -q && break; sleep 0.2; done
"$bin/pgbench" -h "\$D" -i -s $scale postgres > /dev/null 2>&1
"$bin/pgbench" -h "\$D" -S -c 2 -j 2 -T $secs postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/select \1/p'
"$bin/pgbench" -h "\$D" -c 2 -j 2 -T $secs postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/tpcb \1/p'
kill -INT \$pid
wait \$pid || true
EOS
chmod 755 "$work/one.sh"
grep -m1 "model name" /proc/cpuinfo
for r in $(seq "$rounds"); do
  for way in ext4 shared; do
    dir="$work/$way-$r"
    mkdir "$dir"
    chown postgres "$dir"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    case $way in
      ext4) out=$(su postgres -c "$work/one.sh $dir") ;;
      shared) out=$(su postgres -c "$fc run --shared --capacity $capacity --dir $dir -- $work/one.sh $dir") ;;
    esac
    echo "round $r $way $(echo $out)"
    rm -rf "$dir"
  done
done
