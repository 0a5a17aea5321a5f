//! arrow-rs `parquet` as a client: the queries an engine sends through
//! `ParquetObjectReader` to any `ObjectStore`, over the table of
//! [`rows`](crate::rows) written as a Parquet file of many row groups.
//!
//! The queries ([`Query`]) are run with [`run`]: the footer read by
//! `ParquetObjectReader` (its suffix request), then the column chunks the
//! projection and the filter need, by `get_ranges`. [`Asked`](crate::Asked)
//! wraps the store a query is given and counts the bytes the reader asked
//! for: what a cache under it fetched from its remote beyond them is its
//! cost.

use std::sync::Arc;

/// The answers' batches (arrow's).
pub use arrow_array::RecordBatch;
use arrow_array::{BooleanArray, Int64Array};
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, RowFilter, RowSelection, RowSelector};
// Deprecated in parquet 60.1 (for readers written against
// `AsyncFileReader`), and still what engines on object_store read
// Parquet through: the client this crate puts on the cache.
#[allow(deprecated)]
use parquet::arrow::async_reader::ParquetObjectReader;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::errors::Result;

use crate::rows::key;
pub use crate::rows::{Table, KEYS, PAYLOAD, ROW_BYTES};

/// The columns, by leaf index.
const ID: usize = 0;
const KEY: usize = 1;
const VALUE: usize = 2;
const PAYLOAD_COL: usize = 3;

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
