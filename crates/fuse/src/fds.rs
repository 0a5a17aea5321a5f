//! The server's descriptors, bounded: a CLOCK over the nodes that hold one
//! of a kind, as the kernel's inode cache holds inodes only while memory
//! allows (`prune_icache_sb`).
//!
//! Every node the kernel remembers could hold two descriptors (its
//! `O_PATH` one and its cached file's backing), and the kernel remembers
//! as many nodes as its own caches hold: with a fixed limit on open
//! descriptors (1,024 by default, the hard limit at most), a tree of
//! 10,000 files made the server's opens fail with `EMFILE`. So each kind is
//! held by at most a budget of nodes: a node's `O_PATH` descriptor is
//! closed when unused and reopened from its parent's by name when needed
//! ([`crate::inode`]); a cached file no handle has open is closed (its
//! dirty data written back, as the kernel's `evict` of an inode does),
//! its data then read again on the next open.
//!
//! The CLOCK: a node that comes to hold a descriptor joins the ring and
//! counts; when the count passes the budget, nodes are taken from the
//! ring's head: one used since it was last passed (its `referenced` flag)
//! goes to the tail with the flag cleared, one that cannot give its
//! descriptor up now (in use, or pinned) goes to the tail or leaves the
//! ring, any other gives it up. A scan passes each node at most twice, so
//! a ring of unreleasable nodes costs one bounded pass, never a loop.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Weak;

use parking_lot::Mutex;

use crate::inode::Inode;

/// Descriptors kept back from the budgets for everything else the server
/// opens: `/dev/fuse` and its clones, the IO engine's rings, the metrics
/// listener, a file opened for one request, the warm state file.
const RESERVED: usize = 256;

/// The least budget of each kind, whatever the limit.
const MIN_BUDGET: usize = 16;

/// What a node did when asked to give its descriptor up.
pub(crate) enum Release {
    /// It closed it (the count goes down).
    Released,
    /// It has none any more (closed by its own path): nothing to count.
    Gone,
    /// It keeps it for now (used since the last pass, or in use): to the
    /// ring's tail.
    Keep,
    /// It keeps it for good (pinned): out of the ring, still counted.
    Leave,
}

/// One kind of descriptor's budget and ring.
pub(crate) struct Clock {
    held: AtomicUsize,
    budget: usize,
    ring: Mutex<VecDeque<Weak<Inode>>>,
}

impl Clock {
    fn new(budget: usize) -> Clock {
        Clock {
            held: AtomicUsize::new(0),
            budget: budget.max(MIN_BUDGET),
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// The nodes holding one now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most held at once (more only while pinned or in use).
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// `node` came to hold one: it joins the ring, and if that passes the
    /// budget, others give theirs up (`release` asks one).
    pub(crate) fn added(&self, node: Weak<Inode>, release: impl FnMut(&Inode) -> Release) {
        let held = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut ring = self.ring.lock();
            ring.push_back(node);
            // Nodes dropped while in the ring leave dead entries: swept
            // when they outnumber the live ones, so the ring stays within
            // twice the nodes holding one.
            if ring.len() > 2 * held + 64 {
                ring.retain(|w| w.strong_count() > 0);
            }
        }
        if held > self.budget {
            self.shrink(release);
        }
    }

    /// A node's descriptor closed by its own path (the node dropped, or
    /// its file taken at unmount): it no longer counts. Its ring entry
    /// goes at the next pass.
    pub(crate) fn removed(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Asks nodes from the ring's head to give theirs up until the count
    /// is within the budget or each node was passed twice. The ring's lock
    /// is not held while a node is asked (its release may write a file
    /// back).
    fn shrink(&self, mut release: impl FnMut(&Inode) -> Release) {
        let mut left = 2 * self.ring.lock().len();
        while left > 0 && self.held.load(Ordering::Relaxed) > self.budget {
            left -= 1;
            let Some(w) = self.ring.lock().pop_front() else {
                return;
            };
            let Some(node) = w.upgrade() else {
                continue;
            };
            match release(&node) {
                Release::Released => self.removed(),
                Release::Gone | Release::Leave => {}
                Release::Keep => self.ring.lock().push_back(w),
            }
        }
    }
}

/// Clears a node's `referenced` flag: true if it was set (the node gets
/// one more pass).
pub(crate) fn second_chance(referenced: &AtomicBool) -> bool {
    referenced.swap(false, Ordering::Relaxed)
}

/// The process's open-file limit now (its soft limit; 1024 if unknown).
fn open_file_limit() -> usize {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| {
            usize::try_from(soft).unwrap_or(usize::MAX)
        })
}

/// Refuses a `max_open` the open-file limit cannot hold beside the
/// [`RESERVED`] descriptors (called after the limit was raised to the hard
/// one): the budgets would be reached only after opens began failing with
/// `EMFILE`.
///
/// # Errors
/// `InvalidInput`, saying the most the limit allows and how to raise it.
pub(crate) fn check_max_open(max_open: Option<usize>) -> std::io::Result<()> {
    let Some(asked) = max_open else {
        return Ok(());
    };
    let limit = open_file_limit();
    let most = limit.saturating_sub(RESERVED);
    if asked <= most {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "--max-open {asked}: the open-file limit is {limit} (the hard limit, which the server \
             raised its soft limit to), of which {RESERVED} are kept for the server's other \
             descriptors: at most {most}; ask for less, or raise the hard limit (`ulimit -Hn`, \
             systemd's LimitNOFILE=)"
        ),
    ))
}

/// The server's two budgets: nodes' `O_PATH` descriptors and cached files.
pub(crate) struct Fds {
    /// Nodes holding their `O_PATH` descriptor.
    pub(crate) paths: Clock,
    /// Nodes holding a cached file (one backing descriptor each).
    pub(crate) files: Clock,
}

impl Fds {
    /// Budgets for `max_open` descriptors in all, or (`None`) for the
    /// process's open-file limit now: half each, less [`RESERVED`].
    pub(crate) fn new(max_open: Option<usize>) -> Fds {
        let total = max_open.unwrap_or_else(|| open_file_limit().saturating_sub(RESERVED));
        let each = total / 2;
        Fds {
            paths: Clock::new(each),
            files: Clock::new(each),
        }
    }
}
