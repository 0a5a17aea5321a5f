//! foliocache-redb's integration tests, one binary (`cargo test -p
//! foliocache-redb --test it`), a module per theme.

/// redb's `StorageBackend` contract, method by method.
mod contract;

/// redb's own cycle on the backend: create, insert, commit, reopen,
/// abort, the file lock, integrity.
mod database;

/// A writer killed mid-transaction: the reopened database is whole.
mod crash;
