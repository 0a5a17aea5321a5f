//! The group's flusher: a thread of the process holding the cache (the
//! `foliocache run --shared` launcher) that writes back what the group's
//! processes leave dirty, as the kernel's flusher threads do for the page
//! cache (`wb_workfn`): once the dirty pages pass a quarter of the cache
//! (the background threshold, half the writers' own: past half the cache
//! dirty a writer writes back its file before its write, as
//! `balance_dirty_pages` throttles one), and every
//! [`Flusher::EXPIRE`] whatever is dirty (the kernel's `dirty_expire_centisecs`),
//! so that a writer rarely meets the throttle and no write stays only in
//! memory for long.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::SharedCache;

/// How often the flusher looks at the dirty count.
const TICK: Duration = Duration::from_millis(100);

/// A running flusher ([`SharedCache::start_flusher`]); stopped, after the
/// round in progress, when dropped: woken from its wait, so that a
/// launcher whose program ended goes at once.
pub struct Flusher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// The longest the flusher leaves anything dirty (the kernel's
    /// `dirty_expire_centisecs`, 30 s).
    pub const EXPIRE: Duration = Duration::from_secs(30);
}

impl SharedCache {
    /// Starts the group's flusher on a thread of this process (module
    /// docs: a quarter of the cache dirty, or [`Flusher::EXPIRE`] since the last
    /// full writeback with anything dirty, writes back every dirty file by
    /// [`write_back_all`](Self::write_back_all); its errors are counted in
    /// no figure and the pages stay dirty, retried at the next round).
    /// The thread takes the signal mask of the calling thread.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start_flusher(&self) -> std::io::Result<Flusher> {
        let stop = Arc::new(AtomicBool::new(false));
        let (cache, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("foliocache-flush".into())
            .spawn(move || cache.flush_until(&flag))?;
        Ok(Flusher {
            stop,
            thread: Some(thread),
        })
    }

    fn flush_until(&self, stop: &AtomicBool) {
        let mut last = Instant::now();
        while !stop.load(Ordering::Acquire) {
            // Woken early by `drop` (or spuriously: a look more is harmless).
            std::thread::park_timeout(TICK);
            if stop.load(Ordering::Acquire) {
                break;
            }
            let dirty = self.dirty_pages();
            if dirty > self.pages() / 4 || (dirty > 0 && last.elapsed() >= Flusher::EXPIRE) {
                // (A file renamed or gone is skipped; its writers write it
                // back themselves, through their own descriptors.)
                let _ = self.write_back_all();
                last = Instant::now();
            }
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
