//! The async API: futures for a [`File`]'s reads, writes, syncs and
//! `set_len`, on any executor.
//!
//! A miss costs a future, not a thread. A read's first poll runs the
//! blocking read's hit path with [`ReadFlags::NOWAIT`]: a hit inside one
//! folio completes there, with no allocation, no system call and no
//! waker. On a miss the poll inserts the folios it needs and submits
//! their reads to the cache's IO engine instead of waiting for them (a
//! read continuing the handle's last one through the blocking read's
//! synchronous readahead, its window; any other read just its pages, as a
//! queued read's), then queues its task's waker on the lock of the first
//! folio it needs
//! ([`Folio::wait_unlocked_async`](crate::filemap::Folio::wait_unlocked_async))
//! and returns `Pending`. The engine's completion fills the folio, marks
//! it uptodate and unlocks it; the unlock wakes every task waiting on it.
//! The woken read copies what is now cached and goes on from where it
//! stopped. No runtime is required: the wake comes from the IO engine's
//! completion thread, whatever executor polls the future.
//!
//! # Cancellation
//! A read's IO targets the cache's folios, never the caller's buffer: the
//! buffer is written only inside `poll`, on the polling thread, by a copy
//! out of an uptodate folio. Dropping a read future at any point (before
//! its first poll, while it waits, after it completed) leaves the read in
//! flight to complete into the cache and unlock its folios, takes the
//! future's waker back from the folio it waited on, and holds no folio
//! reference or lock of its own: nothing touches the buffer after the
//! drop, and the cache stays as a blocking read that was never made would
//! leave it (with the folios it started reading cached).
//!
//! # Writes, syncs and `set_len`
//! A write's pieces are copied into the cache on the polling thread (the
//! caller's buffer is read only inside `poll`); a write into cached
//! folios under the dirty limit completes on its first poll. What a
//! blocking write, sync or `set_len` waits for runs instead as a job on
//! the cache's writeback pool (`future/job.rs`), whose end wakes every
//! task waiting for it: the wait for reclaim of a read or write that found
//! no memory without waiting (one job per cache, which every task short
//! of memory joins), the writeback of a writer over the dirty limit
//! (`writeback::throttle`, shared by the file's throttled writers), a sync's
//! writeback and the backing's sync (shared by the file's syncs queued
//! together), `set_len`'s truncation. A page a write covers in part and
//! that is not cached is read first through the read futures' path. A
//! dropped future leaves its job to run to its end (the writeback
//! completes and ends the folios' writeback state); see `docs/async.md`
//! for what each dropped future has done.
//!
//! With the `tokio` feature, `Cursor` (`File::cursor`, borrowing the
//! file) and `AsyncFile` (`File::into_async`, owning a handle, for a task
//! as `tokio::fs::File`) read and write a file through
//! `tokio::io::AsyncRead + AsyncWrite + AsyncSeek`.
//!
//! A read that started IO records its latency in the cache's
//! `miss_latency` (`CacheStats::miss_latency`, the metric
//! `foliocache_miss_latency_seconds`) when it completes, from its first
//! miss on, as the blocking read does; a hit reads no clock.
//!
//! `docs/async.md` has the design: what wakes what, and every operation's
//! cancellation.
//!
//! [`File`]: crate::File
//! [`ReadFlags::NOWAIT`]: crate::ReadFlags::NOWAIT

#[cfg(feature = "tokio")]
mod cursor;
pub(crate) mod job;
mod read;
mod write;

pub use crate::folio::WaitUnlocked;
#[cfg(feature = "tokio")]
pub use cursor::{AsyncFile, Cursor};
pub use read::{PinAt, ReadAt, ReadExactAt};
pub use write::{SetLen, SyncAt, WriteAllAt, WriteAt};
