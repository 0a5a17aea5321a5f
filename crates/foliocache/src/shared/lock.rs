//! Participants and the locks that survive their holder
//! (docs/design.md, section 13: "Locks that survive their owner").
//!
//! A lock is a `u32` in the segment holding its holder's participant
//! number (0: free). A waiter sleeps on it as a futex for a few
//! milliseconds at a time; each time it wakes with the lock still held it
//! checks that the holder lives (its participant's generation is the one
//! the number names, its pid exists and started when the participant
//! says). A dead holder's lock is taken over with a compare-and-swap, so
//! exactly one waiter gets it, and told so ([`Held::recovered`]): it
//! repairs what the holder may have left half-done. A holder that lives
//! but never lets go (a process stopped in a debugger, or a scribble that
//! names a live process) fails the waiter with `EIO` after [`GIVE_UP`].

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::crash::point;
use super::seg::{Seg, PARTS};

/// How long a waiter sleeps before it checks the holder.
const NAP: Duration = Duration::from_millis(5);
/// How long a waiter waits for a live holder before it fails the call.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(30);

/// Bits of a participant number that hold its index.
const INDEX_BITS: u32 = 10;
const _: () = assert!(PARTS == 1 << INDEX_BITS);

/// Bumped in every child of `fork`: a process's participant number is
/// its own, so a child takes a new one (see [`Me`]).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Forks this process has seen (in a child: its parent's and its own), so
/// that what a process keeps of its participant can tell it is a child's
/// copy.
pub(crate) fn forks() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// Registers the fork handler, once per process.
fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add,
        // which is async-signal-safe and so fine in a child of `fork`.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
}

/// The start time of process `pid` (`/proc/PID/stat` field 22, in clock
/// ticks since boot), `None` if it does not exist.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold anything: the
    // fields after the last ')' are 3, 4, ...
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// Whether participant `part` holds a process that lives (its pid, started
/// when the participant says: a reused pid is another process).
pub(crate) fn lives(part: &super::seg::Part) -> bool {
    let pid = part.pid.load(Ordering::Relaxed);
    pid != 0 && start_time(pid) == Some(part.start.load(Ordering::Relaxed))
}

/// Whether participant number `id` names a process that lives.
pub(crate) fn alive(seg: &Seg, id: u32) -> bool {
    let Some(part) = seg.part(id & (PARTS - 1)) else {
        return false;
    };
    if part.generation.load(Ordering::Acquire) != id >> INDEX_BITS {
        return false;
    }
    lives(part)
}

/// This process's participant number in one segment, taken at first use
/// and again after a `fork`.
pub(crate) struct Me {
    /// `forks << 32 | number`; `u64::MAX` before the first.
    cached: AtomicU64,
}

impl Me {
    pub(crate) fn new() -> Me {
        watch_forks();
        Me {
            cached: AtomicU64::new(u64::MAX),
        }
    }

    /// This process's number if it has one (registered since its last
    /// fork), without registering it.
    pub(crate) fn registered(&self) -> Option<u32> {
        let forks = FORKS.load(Ordering::Relaxed);
        let c = self.cached.load(Ordering::Relaxed);
        (c != u64::MAX && c >> 32 == forks & 0xffff_ffff).then_some(c as u32)
    }

    /// This process's number, registering it if this process has none.
    #[inline]
    pub(crate) fn id(&self, seg: &Seg) -> io::Result<u32> {
        let forks = FORKS.load(Ordering::Relaxed);
        let c = self.cached.load(Ordering::Relaxed);
        if c != u64::MAX && c >> 32 == forks & 0xffff_ffff {
            return Ok(c as u32);
        }
        let id = register(seg)?;
        self.cached.store(
            (forks & 0xffff_ffff) << 32 | u64::from(id),
            Ordering::Relaxed,
        );
        Ok(id)
    }
}

/// Takes a free participant (or one whose process is gone) for this
/// process: its pid and start time, then a new generation.
fn register(seg: &Seg) -> io::Result<u32> {
    let pid = std::process::id();
    let start = start_time(pid).ok_or_else(|| io::Error::other("no /proc/self/stat"))?;
    for pass in 0..2 {
        for i in 0..PARTS {
            let Some(part) = seg.part(i) else { break };
            let old = part.pid.load(Ordering::Relaxed);
            let take = if pass == 0 {
                old == 0
            } else {
                old != 0 && !lives(part)
            };
            if !take
                || part
                    .pid
                    .compare_exchange(old, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            point();
            part.start.store(start, Ordering::Relaxed);
            // Generation 0 is never used, so number 0 means "no one".
            let mut generation = part.generation.load(Ordering::Relaxed).wrapping_add(1)
                & ((1 << (32 - INDEX_BITS)) - 1);
            if generation == 0 {
                generation = 1;
            }
            part.generation.store(generation, Ordering::Release);
            return Ok(generation << INDEX_BITS | i);
        }
    }
    Err(io::Error::other(format!(
        "shared cache: more than {PARTS} processes attached"
    )))
}

/// A lock held; dropping it lets go.
pub(crate) struct Held<'a> {
    word: &'a AtomicU32,
    waiters: &'a AtomicU32,
    /// Taken over from a holder that died: what it guarded may be
    /// half-changed.
    pub(crate) recovered: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.word.store(0, Ordering::Release);
        if self.waiters.load(Ordering::SeqCst) != 0 {
            futex_wake(self.word);
        }
    }
}

/// Takes the lock `word` (with its waiter count `waiters`) for `me`.
pub(crate) fn lock<'a>(
    seg: &Seg,
    word: &'a AtomicU32,
    waiters: &'a AtomicU32,
    me: u32,
) -> io::Result<Held<'a>> {
    for _ in 0..64 {
        if word
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            point();
            return Ok(Held {
                word,
                waiters,
                recovered: false,
            });
        }
        std::hint::spin_loop();
    }
    let began = Instant::now();
    loop {
        let held = word.load(Ordering::Relaxed);
        if held == 0 {
            if word
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Held {
                    word,
                    waiters,
                    recovered: false,
                });
            }
            continue;
        }
        if held == me {
            // Another thread of this process: it lives.
        } else if !alive(seg, held) {
            if word
                .compare_exchange(held, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                seg.header().recoveries.fetch_add(1, Ordering::Relaxed);
                return Ok(Held {
                    word,
                    waiters,
                    recovered: true,
                });
            }
            continue;
        }
        if began.elapsed() > GIVE_UP {
            return Err(io::Error::other(
                "shared cache: a lock's holder has held it too long",
            ));
        }
        waiters.fetch_add(1, Ordering::SeqCst);
        futex_wait(word, held, NAP);
        waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sleeps while `word` holds `seen`, at most `nap`.
fn futex_wait(word: &AtomicU32, seen: u32, nap: Duration) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: nap.as_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared: the word is in a shared mapping) on a
    // valid, aligned u32, with a relative timeout; it only sleeps.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes one sleeper on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; it only wakes.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1) };
}

/// Waits a moment for a page another participant holds (`holder`),
/// `false` once the holder is dead.
pub(crate) fn nap_on_holder(seg: &Seg, holder: u32, spins: &mut u32) -> bool {
    *spins += 1;
    if *spins < 128 {
        std::hint::spin_loop();
        return true;
    }
    if spins.is_multiple_of(64) && !alive(seg, holder) {
        return false;
    }
    std::thread::yield_now();
    true
}
