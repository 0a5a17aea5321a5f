//! Random operation sequences through the cache, every crash state of
//! their logs checked: no write a sync acknowledged is lost.

use std::sync::Arc;
use std::time::Instant;

use backing::Backing;
use test_support::crash::Explore;
use test_support::env_or;

use super::driver::{explore, Rec};

/// The cache's own backing, recorded: nothing in between.
fn direct(rec: Arc<Rec>) -> Arc<dyn Backing> {
    rec
}

/// At least 100,000 crash states (`FOLIOCACHE_CRASH_STATES` for more),
/// from sequences of 40 operations (`FOLIOCACHE_CRASH_OPS`) from seed
/// `FOLIOCACHE_CRASH_SEED`.
#[test]
fn no_acknowledged_write_is_lost() {
    let states: u64 = env_or("FOLIOCACHE_CRASH_STATES", 100_000);
    let ops: usize = env_or("FOLIOCACHE_CRASH_OPS", 40);
    let seed: u64 = env_or("FOLIOCACHE_CRASH_SEED", 0xc0ff_ee00);
    let start = Instant::now();
    let (checked, sequences) = explore(
        seed,
        ops,
        // A sequence checks many states: the bound on sequences is never
        // the one reached.
        (states, states),
        Explore { random: 8, seed: 0 },
        &direct,
        true,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "crash: {} crash states checked at {} cuts of {sequences} sequences of {ops} \
         operations, in {:.1?}",
        checked.states,
        checked.cuts,
        start.elapsed()
    );
    assert!(checked.states >= states, "{checked:?}");
}
