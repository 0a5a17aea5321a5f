//! DataFusion 55 as a client of `foliocache-object-store`: a SQL query
//! (`SELECT ... WHERE ... GROUP BY`) over a Parquet file of many row
//! groups, with a [`CachedStore`] registered as the table's object store
//! (object_store 0.13, the cache's `v013`).
//!
//! - [`rows`] and [`asked`]: the table's rows and the counter of the bytes
//!   a query asks its store for, the files of
//!   `crates/object-store-clients` compiled here (the same rows as its
//!   Parquet client's, written by DataFusion's arrow);
//! - [`job`]: the query through four contenders in one run, interleaved
//!   (a local file with the kernel's cache warm, the bare throttled
//!   store, `CachedStore` in memory and with a disk tier, cold then warm),
//!   and what each took and fetched.
//!
//! A crate outside the repository's workspace (its own `[workspace]`
//! table and lock): DataFusion's build is long, so the workspace's build
//! and test command never pay it; `foliocache bench --scenario
//! objectstore` builds it when its `datafusion` job is named
//! (docs/bench/objectstore.md).
//!
//! [`CachedStore`]: foliocache_object_store::CachedStore

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

#[path = "../../../crates/object-store-clients/src/asked.rs"]
pub mod asked;
pub mod job;
#[path = "../../../crates/object-store-clients/src/rows.rs"]
pub mod rows;

pub use asked::Asked;
pub use rows::Table;
