//! The FUSE server's integration tests, one binary (`cargo test -p
//! foliocache-fuse --test it`): the mount driven by a user's system calls,
//! and fio's verified workloads through it. Skipped where FUSE (or fio) is
//! missing, except under `CI=true`: see `docs/testing.md`.

/// fio's verified workloads through a mount.
mod fio;
/// The mount: files, directories, attributes, sync, the control file, a
/// random exerciser against a model.
mod mount;
