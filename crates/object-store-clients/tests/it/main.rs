//! The clients of `foliocache-object-store` through the public API: each
//! client's queries through `CachedStore` return what the same queries
//! return from the local file (docs/testing.md).

mod parquet;
