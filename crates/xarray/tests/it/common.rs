//! What the suites share: the array type they test, its entries, and the
//! property tests' configuration.

use std::sync::Arc;

use foliocache_xarray::{Entry, XArray};
use proptest::test_runner::Config as ProptestConfig;

/// The array under test: items are `Arc<u64>`.
pub type Xa = XArray<Arc<u64>>;
/// One of its entries.
pub type E = Entry<Arc<u64>>;

/// A value entry.
pub fn val(x: u64) -> E {
    Entry::Value(x)
}

/// An item entry holding `x`.
pub fn item(x: u64) -> E {
    Entry::Item(Arc::new(x))
}

/// The property tests' configuration: no failure files, 256 cases unless
/// `PROPTEST_CASES` says otherwise.
pub fn cfg() -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c
}
