//! Real clients of `foliocache-object-store`: what the engines its users
//! run do to a [`CachedStore`](foliocache_object_store::CachedStore), in
//! tests and in `foliocache bench --scenario objectstore`.
//!
//! - [`table`]: arrow-rs `parquet`'s `ParquetObjectReader` (parquet 60,
//!   object_store 0.14): a projection of two columns with a filter, and
//!   point lookups by row group, through any `ObjectStore`, over the
//!   table of [`rows`] (a Parquet file of many row groups written here);
//!   [`Asked`] counts the bytes a query asks its store for, the measure
//!   of what a cache under it fetched beyond them.
//!
//! DataFusion 55 (object_store 0.13) is the client of `clients/datafusion`,
//! a crate outside the workspace that compiles [`rows`] and [`asked`] as
//! its own modules.
//!
//! A crate of its own, so that arrow's and parquet's build is paid only by
//! the workspace's tests and the bench's `parquet` feature
//! (docs/object-store.md, "Clients").

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod asked;
pub mod rows;
pub mod table;

pub use asked::Asked;
pub use table::{Query, Table};
