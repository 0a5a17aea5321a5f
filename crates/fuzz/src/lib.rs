//! Fuzz targets for foliocache, as library functions over raw bytes.
//!
//! Each entry point decodes its input (with [`arbitrary`]) into a sequence of
//! operations, runs them against the real code and a simple model, and
//! panics with a clear message on the first difference:
//!
//! - [`xarray_ops`]: the `xarray` crate's simple and cursor APIs against a
//!   `BTreeMap` model (entries, multi-order entries, marks, reservations,
//!   splits, searches, the tree's exact shape and the items' lifetimes).
//! - [`file_ops`]: a file through the cache (`write_at`, `read_at` cached and
//!   uncached, `set_len`, `punch_hole`, `sync_data`, close and reopen) over a
//!   fault-injecting memory backing, against a `Vec<u8>` image of the file
//!   and of what is known durable.
//!
//! The same functions run three ways: under cargo-fuzz (`crates/fuzz/fuzz`,
//! nightly, `scripts/fuzz.sh`), over the committed corpus and random inputs
//! in the stable smoke test (`crates/fuzz/tests/smoke.rs`), and by hand on
//! one file (`FUZZ_DEBUG=1` prints the decoded operations).

mod file_ops;
mod xarray_ops;

pub use file_ops::file_ops;
pub use xarray_ops::xarray_ops;
