//! The FUSE server's integration tests, one binary (`cargo test -p
//! foliocache-fuse --test it`): the mount driven by a user's system calls,
//! fio's verified workloads, sqlite3 and db_bench through it. Skipped
//! where FUSE (or the program) is missing, except under `CI=true`: see
//! `docs/testing.md`.

/// fio's verified workloads through a mount.
mod fio;
/// The object mount's directories listed in pages.
#[cfg(feature = "object-store")]
mod listing;
/// Many files with a bounded set of the server's descriptors.
mod many;
/// The mount: files, directories, attributes, sync, the control file,
/// memory maps, fallocate, a random exerciser against a model.
mod mount;
/// The mount on a named shared cache, beside another program of the
/// group.
mod named;
/// The mount of an object store: its tree read-only, through the cache.
#[cfg(feature = "object-store")]
mod objects;
/// Real programs through the mount: sqlite3 and db_bench.
mod programs;
