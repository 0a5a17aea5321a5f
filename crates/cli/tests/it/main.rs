//! The `foliocache` binary run as a user runs it, one test binary (`cargo
//! test -p foliocache-cli --test it`): every test starts the built binary
//! in a child process, so the tests share no state in this one.

/// `foliocache bench` and the command line: usage errors, the quick smoke
/// run with its JSON and plot checked, verified runs of every engine.
mod bench;
/// `foliocache bench --scenario redb` and `--scenario sqlite`: the
/// databases embedded, each configuration under the memory limit.
mod dbs;
/// `foliocache run` as its program's guardian: killed writers lose no
/// accepted byte.
mod guard;
/// No files of the CLI import each other in a circle.
mod imports;
/// `foliocache run`: the launcher of the LD_PRELOAD interposer.
mod launch;
/// `foliocache run` at its limits: more files than the group's table
/// holds, a program that daemonizes.
mod launch_limits;
/// `foliocache mount` and `foliocache stat`: signals, restarts, unmounts.
mod mount;
/// `foliocache mount --cache`: the mount's server on a named cache,
/// beside a `foliocache run --cache` program.
mod mount_named;
/// `foliocache mount --object-store`: a store's objects, read-only,
/// through the cache and its disk tier.
mod mount_objects;
/// `foliocache cache serve` and `foliocache run --cache`: one named cache
/// for separate runs.
mod named;
/// `foliocache bench --scenario objectstore`'s memory job: readers in a
/// memory cgroup of their bound plus 10 %.
mod objectstore;
/// The operator's side of the mount: a mount on a mount refused,
/// `foliocache umount`, the server's log.
mod operate;
/// Every process of a launch killed, the launcher too: its files on
/// tmpfs keep what it accepted until `foliocache recover` or the next run.
mod persist;
/// PostgreSQL under `foliocache run -- pg_ctl start`, its server killed:
/// every acknowledged commit after the next start.
mod postgres;
/// `foliocache bench --scenario programs`: `db_bench` three ways.
mod programs;
/// `foliocache run --metrics`: the group's figures from the launcher, a
/// forked pool's reads in bytes, every worker's line.
mod run_metrics;
/// `bench --scenario scans`: hot point reads beside four scans.
mod scans;
/// xfstests' fsstress and fsx under `foliocache run`: ext4's tree, A-OK.
mod stress;
/// Warm restarts of the mount: the list saved at unmount, loaded by the
/// next mount.
mod warm;
