//! The benchmark harness of `foliocache bench`: fio-like jobs on several
//! engines in one run (foliocache, the kernel's buffered pread/pwrite,
//! O_DIRECT, RWF_DONTCACHE, a shared mapping; for the populate scenario a
//! memfile, a memfd and fresh anonymous memory) reported side by side,
//! with ratios to the kernel, as text, JSON and an SVG chart. Write runs
//! end with a sync inside their figures. With no options it runs the
//! reference scenarios, shortened (`--seeds --quick`). The `foliocache`
//! binary (crate `foliocache-cli`) parses [`BenchArgs`] and calls [`run`];
//! the scenarios and their figures are described in `docs/bench.md`.
//!
//! Modules, each using mostly those listed before it: [`state_path`] and
//! [`preload`] (built without the harness too, below), `units` (sizes,
//! bandwidths, durations, ratios), `sys` (the OS calls `std` lacks: the
//! only unsafe code, but for `engine`'s call of the unsafe
//! `sys::Mmap::new`, whose contract the bench keeps, and the embedded
//! scenarios' child's), `hist` (latency histogram), `clock` (what
//! times it), `cgroup` (the kernel engines' memory limit), `disk` (the
//! device's read counters), `data` (checkable pseudo-random data
//! files), `zipf` (zipfian offsets), `lru` (an exact LRU replayed
//! over a run's offsets), `spec` (engines and jobs as typed values),
//! `args` (the command line), `engine` (the engines and their
//! warming), `job` (the measured loop), `hot` (a hot reader beside a
//! job, counting its hits), `report` (text and JSON), `targets` (a
//! scenario's ratios and targets), `scenario` (what runs, one file per
//! scenario), `plot` (SVG), `run` (one engine run: setup, measure,
//! record) and `bench` (the driver).
//!
//! Built without the default feature `harness`, the crate is only what
//! the operator's commands share with the harness: [`state_path`] (the
//! warm-restart state file of `run` and `mount`) and [`preload`] (a
//! program under the interposer, for `foliocache run` and the `programs`
//! scenario).
#![deny(unsafe_code)]

pub mod preload;
pub mod state_path;

#[cfg(feature = "harness")]
mod args;
#[cfg(feature = "harness")]
mod bench;
#[cfg(feature = "harness")]
mod cgroup;
#[cfg(feature = "harness")]
mod clock;
#[cfg(feature = "harness")]
mod consume;
#[cfg(feature = "harness")]
mod data;
#[cfg(feature = "harness")]
mod disk;
#[cfg(feature = "harness")]
mod engine;
#[cfg(feature = "harness")]
mod hist;
#[cfg(feature = "harness")]
mod hot;
#[cfg(feature = "harness")]
mod job;
#[cfg(feature = "harness")]
mod lru;
#[cfg(feature = "harness")]
mod plot;
#[cfg(feature = "harness")]
mod report;
#[cfg(feature = "harness")]
mod run;
#[cfg(feature = "harness")]
mod scenario;
#[cfg(feature = "harness")]
mod spec;
#[cfg(feature = "harness")]
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "harness")]
mod targets;
#[cfg(feature = "harness")]
mod units;
#[cfg(feature = "harness")]
mod zipf;

#[cfg(feature = "harness")]
pub use args::BenchArgs;
#[cfg(feature = "harness")]
pub use bench::{run, Failure};

/// The hidden entry points of the processes the bench starts from its
/// own binary (a configuration of the redb or sqlite scenario; the
/// objectstore scenario's restart reader): the exit code where this
/// process is one of them, `None` where it is not. The binary calls it
/// first thing in `main`.
#[cfg(feature = "harness")]
pub fn child_main() -> Option<std::process::ExitCode> {
    scenario::child_main()
}
