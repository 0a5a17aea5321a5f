//! The command line: `foliocache COMMAND`. Parsing is clap's (derive);
//! `bench`'s options are the bench crate's (`foliocache_bench::BenchArgs`,
//! with the default feature `bench`).

use clap::{Parser, Subcommand};

/// `foliocache`: the foliocache page cache's command-line tool.
#[derive(Debug, Parser)]
#[command(
    name = "foliocache",
    version,
    about = "foliocache: a page cache programs embed, and the tools around it",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark foliocache side by side with the kernel's page cache
    /// (no options: the reference scenarios, shortened: `--seeds --quick`).
    #[cfg(feature = "bench")]
    Bench(foliocache_bench::BenchArgs),
    /// Serve a directory (or an object store's objects, read-only) through
    /// the cache over FUSE, so unmodified programs run on it.
    Mount(crate::mount::MountArgs),
    /// A running mount's cache figures, and cachestat per file.
    Stat(crate::stat::StatArgs),
    /// Unmount a `foliocache mount` (its server writes its dirty data back
    /// and exits).
    Umount(crate::mounted::UmountArgs),
    /// Run a program with its file calls on DIRs served by a foliocache
    /// inside it (LD_PRELOAD of libfoliocache_preload.so).
    Run(crate::launch::RunArgs),
    /// Host a named cache that the processes of many `foliocache run
    /// --cache NAME` share, or show one's figures.
    Cache(crate::named::CacheArgs),
    /// Write back what launches killed with their programs left unsaved
    /// (their memory files on tmpfs, /dev/shm/foliocache-UID): what the
    /// next `foliocache run` on their directories does before it serves.
    Recover(crate::recover::RecoverArgs),
}
