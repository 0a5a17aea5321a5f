//! SlateDB 0.18 as a client of `foliocache-object-store`: a database of
//! fixed-size values on a remote store paced at S3's latency and
//! bandwidth ([`Throttled`]), read by random gets and a scan through two
//! caches in front of the remote, at the same memory and disk:
//!
//! - SlateDB's own `CachedObjectStore` (4 MiB parts on local disk);
//! - [`CachedStore`], in memory and with its [`DiskTier`].
//!
//! Both under SlateDB's block cache (moka's, a tenth of the data, as
//! SlateDB's own benchmark sizes it).
//!
//! - [`asked`]: the counter of what a store is asked for, the file of
//!   `crates/object-store-clients` compiled here: it counts the remote's
//!   GETs and bytes under either cache;
//! - [`job`]: the database, the contenders interleaved round by round,
//!   and their figures.
//!
//! A crate outside the repository's workspace (its own `[workspace]`
//! table and lock), as `clients/datafusion`: SlateDB's build is minutes,
//! so the workspace's build and test command never pay it; `foliocache
//! bench --scenario objectstore` builds it when its `slatedb` job is named
//! (docs/bench/objectstore.md).
//!
//! [`Throttled`]: foliocache_object_store::Throttled
//! [`CachedStore`]: foliocache_object_store::CachedStore
//! [`DiskTier`]: foliocache_object_store::DiskTier

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

#[path = "../../../crates/object-store-clients/src/asked.rs"]
pub mod asked;
pub mod job;

pub use asked::Asked;
