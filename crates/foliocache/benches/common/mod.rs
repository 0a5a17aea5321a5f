//! What the side-by-side benches (`add_folio`, `window`) share: criterion's
//! settings, and the sums behind the summary each prints at the end (the
//! mean time per operation of each variant, and their ratio, from the
//! same run).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use criterion::Criterion;

/// Criterion for a side-by-side bench (0.5 s warm-up, 2 s measurement, 20
/// samples, then the command line's settings); prints how to reproduce
/// bench `name`.
pub fn criterion(name: &str) -> Criterion {
    let c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    eprintln!("reproduce: cargo bench -p foliocache --bench {name}");
    c
}

/// The time and the operations timed per key, summed over a run's
/// iterations.
pub type Means<K> = RefCell<BTreeMap<K, (Duration, u64)>>;

/// Adds `n` operations that took `t` to `key`'s sums.
pub fn record<K: Ord>(means: &Means<K>, key: K, t: Duration, n: u64) {
    let mut m = means.borrow_mut();
    let e = m.entry(key).or_default();
    e.0 += t;
    e.1 += n;
}

/// Nanoseconds per operation of `key`, if it ran.
pub fn mean_ns<K: Ord>(means: &BTreeMap<K, (Duration, u64)>, key: &K) -> Option<f64> {
    means
        .get(key)
        .map(|(t, n)| t.as_nanos() as f64 / (*n).max(1) as f64)
}

/// `ns` with one decimal, `-` where it did not run.
pub fn ns_text(ns: Option<f64>) -> String {
    ns.map_or("-".into(), |x| format!("{x:.1}"))
}

/// How many times `base`'s time `other` takes (`1.23x`), `-` unless both
/// ran.
pub fn ratio_text(base: Option<f64>, other: Option<f64>) -> String {
    match (base, other) {
        (Some(a), Some(b)) => format!("{:.2}x", b / a),
        _ => "-".into(),
    }
}
