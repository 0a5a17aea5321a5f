//! DataFusion 55 over `CachedStore`: the job's SQL query through every
//! contender (the local file, the bare throttled store, the cache at a
//! quarter of the file in memory and with a disk tier, cold and warm)
//! gives the local file's answer, and the local file's answer is the one
//! the table's rows define.

use std::time::Duration;

use datafusion::arrow::array::{Float64Array, Int64Array};
use foliocache_datafusion_client::job::{expected, Job};

/// About 8 MiB in 32 row groups, at 2 ms a request: seconds, not minutes.
fn job(name: &str) -> Job {
    let dir = std::env::temp_dir().join(format!("datafusion-client-{name}-{}", std::process::id()));
    let mut j = Job::new(8 << 20, dir);
    j.latency = Duration::from_millis(2);
    j.rounds = 1;
    j.warm_passes = 2;
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_query_through_every_contender_is_the_local_files() {
    let j = job("answers");
    let r = j.run(&|_| {}).await.unwrap();
    let _ = std::fs::remove_dir_all(&j.dir);
    assert_eq!(r.table.groups(), 32);
    let col = |i: usize| r.answer.column(i).clone();
    let keys = col(0);
    let keys = keys.as_any().downcast_ref::<Int64Array>().unwrap();
    let counts = col(1);
    let counts = counts.as_any().downcast_ref::<Int64Array>().unwrap();
    let sums = col(2);
    let sums = sums.as_any().downcast_ref::<Float64Array>().unwrap();
    let got: Vec<(i64, i64, f64)> = (0..r.answer.num_rows())
        .map(|i| (keys.value(i), counts.value(i), sums.value(i)))
        .collect();
    // The values are halves of integers and their sums far below 2^53:
    // exact in any order of addition.
    assert_eq!(got, expected(&r.table), "the local file's answer");
    // Every cache read from its remote, and asked for what it read.
    for c in [&r.memory, &r.disk] {
        assert!(c.remote_cold > 0 && c.asked_cold > 0 && c.asked_warm > 0);
    }
}

/// The query's columns fit in a quarter of the file: its warm passes
/// send no GET and miss nothing, in memory and with the disk tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warm_passes_of_the_query_fetch_nothing() {
    let j = job("warm");
    let r = j.run(&|_| {}).await.unwrap();
    let _ = std::fs::remove_dir_all(&j.dir);
    for c in [&r.memory, &r.disk] {
        assert_eq!(c.remote_warm, 0, "remote bytes of the warm passes");
        assert_eq!(c.warm_reads[1], 0, "misses of the warm passes");
        assert_eq!(c.warm_reads[2], 0, "GETs of the warm passes");
    }
}
