//! arrow-rs `parquet` as a client: a table written as a Parquet file of
//! many row groups, and the queries an engine on it sends through
//! `ParquetObjectReader` to any `ObjectStore`.
//!
//! The table's rows (all of them functions of the row's id, so that a
//! query's answer can be checked without the file):
//!
//! | column | type | value |
//! |---|---|---|
//! | `id` | Int64 | the row's index |
//! | `key` | Int64 | a hash of the id, in 0..1000 |
//! | `value` | Float64 | the id over 2 |
//! | `payload` | Binary | [`PAYLOAD`] bytes hashed from the id |
//!
//! Written uncompressed, one row group every
//! [`rows_per_group`](Table::rows_per_group) rows: `payload` is most of
//! the file, so a projection of `key` and `value` reads a small part of
//! each row group (their column chunks), and a lookup of `payload` in one
//! row group reads a few pages far from the rest: the two ways a query
//! engine reads object storage.
//!
//! The queries ([`Query`]) are run with [`run`]: the footer read by
//! `ParquetObjectReader` (its suffix request), then the column chunks the
//! projection and the filter need, by `get_ranges`. [`Asked`] wraps the
//! store a query is given and counts the bytes the reader asked for: what
//! a cache under it fetched from its remote beyond them is its cost.

use std::fmt;
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The answers' batches (arrow's).
pub use arrow_array::RecordBatch;
use arrow_array::{ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use foliocache_object_store::forward_object_store;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore};
use parquet::arrow::arrow_reader::{ArrowPredicateFn, RowFilter, RowSelection, RowSelector};
// Deprecated in parquet 60.1 (for readers written against
// `AsyncFileReader`), and still what engines on object_store read
// Parquet through: the client this crate puts on the cache.
#[allow(deprecated)]
use parquet::arrow::async_reader::ParquetObjectReader;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
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

/// The columns, by leaf index.
const ID: usize = 0;
const KEY: usize = 1;
const VALUE: usize = 2;
const PAYLOAD_COL: usize = 3;

/// A table's shape (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// Rows in all.
    pub rows: u64,
    /// Rows in each row group (the last may have fewer).
    pub rows_per_group: u64,
}

/// A query of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// `SELECT key, value WHERE key < below`: every row group's `key`
    /// chunk (the filter), then `value`'s pages of the rows it kept.
    Filter {
        /// The filter's bound, in 0..[`KEYS`].
        below: i64,
    },
    /// `SELECT id, payload` of rows `skip..skip + take` of row group
    /// `group`: one row group's pages of two columns.
    Lookup {
        /// The row group.
        group: usize,
        /// Rows of it skipped.
        skip: usize,
        /// Rows of it read after them.
        take: usize,
    },
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

    /// The rows `query` returns, counted from the rows' definition (not
    /// the file): what a reader's answer must hold.
    pub fn rows_of(&self, query: Query) -> u64 {
        match query {
            Query::Filter { below } => (0..self.rows).filter(|&id| key(id) < below).count() as u64,
            Query::Lookup { group, skip, take } => {
                let n = self.group_rows(group as u64);
                n.saturating_sub(skip as u64).min(take as u64)
            }
        }
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
fn key(id: u64) -> i64 {
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

/// Rows `ids` as a batch.
fn batch(ids: Range<u64>) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i as i64))),
        Arc::new(Int64Array::from_iter_values(ids.clone().map(key))),
        Arc::new(Float64Array::from_iter_values(
            ids.clone().map(|i| i as f64 / 2.0),
        )),
        Arc::new(BinaryArray::from_iter_values(ids.map(payload))),
    ];
    RecordBatch::try_new(schema(), cols).map_err(|e| ParquetError::General(e.to_string()))
}

/// Runs `query` over the Parquet file `path` of `size` bytes in `store`,
/// through `ParquetObjectReader`: its answer, in batches.
///
/// # Errors
/// The store's or the reader's.
#[allow(deprecated)] // ParquetObjectReader: see its import.
pub async fn run(
    store: Arc<dyn ObjectStore>,
    path: &Path,
    size: u64,
    query: Query,
) -> Result<Vec<RecordBatch>> {
    let reader = ParquetObjectReader::new(store, path.clone()).with_file_size(size);
    let b = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let leaves = |cols: &[usize]| ProjectionMask::leaves(b.parquet_schema(), cols.iter().copied());
    let b = match query {
        Query::Filter { below } => {
            let keys = leaves(&[KEY]);
            let out = leaves(&[KEY, VALUE]);
            let pred = ArrowPredicateFn::new(keys, move |batch: RecordBatch| {
                let keys = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| {
                        arrow_schema::ArrowError::CastError("key is not Int64".into())
                    })?;
                Ok(keys
                    .values()
                    .iter()
                    .map(|&k| Some(k < below))
                    .collect::<BooleanArray>())
            });
            b.with_projection(out)
                .with_row_filter(RowFilter::new(vec![Box::new(pred)]))
        }
        Query::Lookup { group, skip, take } => {
            let out = leaves(&[ID, PAYLOAD_COL]);
            let select =
                RowSelection::from(vec![RowSelector::skip(skip), RowSelector::select(take)]);
            b.with_row_groups(vec![group])
                .with_projection(out)
                .with_row_selection(select)
        }
    };
    b.build()?.try_collect().await
}

/// The rows of `batches`.
pub fn rows(batches: &[RecordBatch]) -> u64 {
    batches.iter().map(|b| b.num_rows() as u64).sum()
}

/// A store that counts the bytes its readers ask for (GETs' ranges and
/// `get_ranges`' ranges, before the store it wraps coalesces or widens
/// them) and passes every call to the store it wraps.
#[derive(Debug)]
pub struct Asked {
    inner: Arc<dyn ObjectStore>,
    bytes: AtomicU64,
    requests: AtomicU64,
}

impl Asked {
    /// `inner`, counted.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Asked {
        Asked {
            inner,
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// (requests, bytes) asked for so far: a `get_ranges` call counts
    /// once, with the sum of its ranges.
    pub fn asked(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn count(&self, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl fmt::Display for Asked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Asked({})", self.inner)
    }
}

forward_object_store! { Asked, inner,
    async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
        let head = o.head;
        let r = self.inner.get_opts(l, o).await?;
        if !head {
            self.count(r.range.end - r.range.start);
        }
        Ok(r)
    }

    async fn get_ranges(&self, l: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.count(ranges.iter().map(|r| r.end - r.start).sum());
        self.inner.get_ranges(l, ranges).await
    }
}
