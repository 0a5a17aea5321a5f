//! The integration tests of foliocache-preload: one binary, a module a
//! theme (`calls`: the C programs of `tests/c/`, every call and a random
//! exerciser, run under the built library; `programs`: real programs,
//! sqlite3 and fio, run under it).

mod calls;
/// What write(2) accepted outlives a writer that dies.
mod crash;
/// One cache for a group of processes.
mod group;
mod programs;
/// The standard streams and other second paths to a served file; the
/// exit hand-over after thread-locals are destroyed.
mod streams;
mod support;
/// Warm restarts: the state file saved at exit and loaded by the next
/// run.
mod warm;
