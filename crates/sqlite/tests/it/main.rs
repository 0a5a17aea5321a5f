//! foliocache-sqlite's integration tests, one binary (`cargo test -p
//! foliocache-sqlite --test it`), a module per theme. Every test opens its
//! databases through the VFS `common::VFS`, registered once per process.

mod common;

/// SQLite's own behaviour through the VFS: create, transactions,
/// rollback, reopen, integrity, a database larger than the cache,
/// memory-mapped reads (`xFetch`), and WAL refused.
mod sql;

/// Several connections of one process on one database, and a second
/// process refused.
mod locking;

/// A writer process killed mid-transaction: the reopened database is
/// whole and holds what was committed.
mod crash;
