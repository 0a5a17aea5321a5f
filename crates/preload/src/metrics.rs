//! Prometheus metrics for the interposer: with [`ENV_METRICS`] naming an
//! address, the cache's metrics are served at `http://ADDR/metrics` from
//! the program's process once the cache is built (its first served open),
//! until the process ends (`foliocache run --metrics`; docs/metrics.md).
//! The server's threads make only socket calls, which pass through.

use std::net::SocketAddr;
use std::sync::OnceLock;

use fc::metrics::MetricsServer;
use fc::Cache;

use crate::state::warn;

/// The environment variable naming the address to serve metrics on
/// (`HOST:PORT`; unset or empty: none). `foliocache run --metrics` sets it.
pub const ENV_METRICS: &str = "FOLIOCACHE_PRELOAD_METRICS";

/// The server, kept for the life of the process.
static SERVER: OnceLock<Option<MetricsServer>> = OnceLock::new();

/// Once the cache is built (inside the library): serves its metrics if
/// [`ENV_METRICS`] asks for it; a bad address or one that cannot be bound
/// is said on stderr, and the program runs on without metrics.
pub(crate) fn start(cache: &'static Cache) {
    let Some(addr) = std::env::var(ENV_METRICS).ok().filter(|a| !a.is_empty()) else {
        return;
    };
    SERVER.get_or_init(|| {
        let addr: SocketAddr = match addr.parse() {
            Ok(a) => a,
            Err(_) => {
                warn(&format!("{ENV_METRICS}={addr}: not HOST:PORT; no metrics"));
                return None;
            }
        };
        let mut registry = prometheus_client::registry::Registry::default();
        fc::metrics::register(cache, &mut registry);
        fc::metrics::serve(addr, registry)
            .map_err(|e| warn(&format!("{e}; no metrics")))
            .ok()
    });
}
