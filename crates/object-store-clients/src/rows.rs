//! The table the clients query: its rows, its shape, and how it is
//! written as a Parquet file of many row groups. Shared by this crate
//! (parquet 60) and the DataFusion client (`clients/datafusion`, parquet
//! 59 through DataFusion 55), which compiles this file as a module of its
//! own (`#[path]`): the same rows, whichever arrow writes them. It names
//! only `arrow_array`, `arrow_schema` and `parquet`, whose APIs used here
//! are the same in both.
//!
//! The table's rows (all of them functions of the row's id, so that a
//! query's answer can be checked without the file):
//!
//! | column | type | value |
//! |---|---|---|
//! | `id` | Int64 | the row's index |
//! | `key` | Int64 | a hash of the id, in 0..1000 ([`key`]) |
//! | `value` | Float64 | the id over 2 ([`value`]) |
//! | `payload` | Binary | [`PAYLOAD`] bytes hashed from the id |
//!
//! Written uncompressed, one row group every
//! [`rows_per_group`](Table::rows_per_group) rows: `payload` is most of
//! the file, so a projection of `key` and `value` reads a small part of
//! each row group (their column chunks), and a lookup of `payload` in one
//! row group reads a few pages far from the rest: the two ways a query
//! engine reads object storage.

use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::WriterProperties;

/// The bytes of each row's `payload`.
pub const PAYLOAD: usize = 96;
/// Bytes a row takes in the file, about: three 8-byte columns, the
/// payload and its 4-byte length.
pub const ROW_BYTES: u64 = 24 + PAYLOAD as u64 + 4;
/// Rows written at a time.
const BATCH: u64 = 8192;
/// The distinct keys (`key` is in 0..KEYS).
pub const KEYS: i64 = 1000;

/// A table's shape (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// Rows in all.
    pub rows: u64,
    /// Rows in each row group (the last may have fewer).
    pub rows_per_group: u64,
}

impl Table {
    /// A table of about `bytes` bytes in `groups` row groups (at least one
    /// row each).
    pub fn of_size(bytes: u64, groups: u64) -> Table {
        let rows = (bytes / ROW_BYTES).max(groups.max(1));
        Table {
            rows,
            rows_per_group: rows.div_ceil(groups.max(1)),
        }
    }

    /// Its row groups.
    pub fn groups(&self) -> u64 {
        self.rows.div_ceil(self.rows_per_group.max(1))
    }

    /// Rows of row group `group`.
    pub fn group_rows(&self, group: u64) -> u64 {
        let start = group * self.rows_per_group;
        self.rows.saturating_sub(start).min(self.rows_per_group)
    }

    /// Writes the table to `file` as Parquet: its size in bytes.
    ///
    /// # Errors
    /// The file could not be written.
    pub fn write(&self, file: &FsPath) -> Result<u64> {
        let out = std::fs::File::create(file)?;
        let props = WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_max_row_group_row_count(Some(self.rows_per_group.max(1) as usize))
            .build();
        let mut w = ArrowWriter::try_new(out, schema(), Some(props))?;
        let mut at = 0;
        while at < self.rows {
            let n = BATCH.min(self.rows - at);
            w.write(&batch(at..at + n)?)?;
            at += n;
        }
        w.close()?;
        Ok(std::fs::metadata(file)?.len())
    }
}

/// The table's schema.
fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
        Field::new("payload", DataType::Binary, false),
    ]))
}

/// SplitMix64's finaliser: ids to well-spread bits.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Row `id`'s key.
pub fn key(id: u64) -> i64 {
    (mix(id) % KEYS as u64) as i64
}

/// Row `id`'s payload.
fn payload(id: u64) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    for (w, out) in p.chunks_exact_mut(8).enumerate() {
        out.copy_from_slice(&mix((id << 4) | w as u64).to_le_bytes());
    }
    p
}

/// Row `id`'s value.
pub fn value(id: u64) -> f64 {
    id as f64 / 2.0
}

/// Rows `ids` as a batch.
fn batch(ids: Range<u64>) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i as i64))),
        Arc::new(Int64Array::from_iter_values(ids.clone().map(key))),
        Arc::new(Float64Array::from_iter_values(ids.clone().map(value))),
        Arc::new(BinaryArray::from_iter_values(ids.map(payload))),
    ];
    RecordBatch::try_new(schema(), cols).map_err(|e| ParquetError::General(e.to_string()))
}
