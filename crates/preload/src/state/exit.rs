//! The end of a process, and an `exec`: every file handed to the kernel,
//! what is left unwritten said, and the figures of [`ENV_STATS`].

use super::*;

/// Opens the cache served (for [`report`]).
pub(super) static OPENS: AtomicUsize = AtomicUsize::new(0);

/// The process whose library state this is: set when the library is
/// loaded and in a child of `fork` (its handler). A process that finds
/// another pid is a child of `vfork` (or of `clone`, `_Fork`), which
/// shares or copies the state without owning it.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Set once this process's end was seen ([`ending_now`]): its line is
/// printed once, however many ways out it takes.
static ENDED: AtomicBool = AtomicBool::new(false);

/// The library is loaded, or this process is a child of `fork`: the
/// state is this process's.
pub(crate) fn forked() {
    OWNER.store(std::process::id(), Ordering::Relaxed);
    ENDED.store(false, Ordering::Relaxed);
}

/// The process ends (`exit`, `_exit`, `_Exit`): its reads are published
/// in the group's figures (atomic stores), and with [`ENV_STATS`] its
/// line is printed ([`report`]), once. Nothing in a child of `vfork`,
/// whose memory is its parent's.
pub(crate) fn ending_now() {
    if OWNER.load(Ordering::Relaxed) != std::process::id() || ENDED.swap(true, Ordering::Relaxed) {
        return;
    }
    inside((), || {
        if let Some(sc) = group_cache() {
            sc.publish_figures();
        }
        Ok(())
    });
    publish_own_reads();
    report();
}

/// With [`ENV_STATS`] set, one line on stderr: the opens served and the
/// figures of the cache that served them: `pid P: N opens served; from
/// its own cache: READS; R reads and W writes (B bytes) on the files`,
/// or `pid P: N opens served; from the group's shared cache (K processes
/// attached, C pages cached, D dirty): READS`, where READS is
/// [`fc::CacheFigures::reads_line`] of this process's reads (bytes read,
/// from memory, from the files; hits and misses in page lookups).
fn report() {
    if passing_through() || std::env::var_os(ENV_STATS).is_none_or(|v| v.is_empty()) {
        return;
    }
    inside((), || {
        let pid = std::process::id();
        let opens = OPENS.load(Ordering::Relaxed);
        let figures = match group_cache() {
            Some(sc) => {
                let s = sc.stats();
                format!(
                    "from the group's shared cache ({} processes attached, {} pages cached, {} \
                     dirty): {}",
                    s.processes,
                    s.cached,
                    s.dirty,
                    fc::CacheFigures::of_process(&s).reads_line()
                )
            }
            None => {
                let s = built_cache().map(Cache::stats).unwrap_or_default();
                format!(
                    "from its own cache: {}; {} reads and {} writes ({} bytes) on the files",
                    fc::CacheFigures::of_cache(&s).reads_line(),
                    s.io_reads,
                    s.io_writes,
                    s.io_write_bytes
                )
            }
        };
        warn(&format!("pid {pid}: {opens} opens served; {figures}"));
        if let Some(line) = built_cache().and_then(crate::warm::progress_line) {
            warn(&format!("pid {}: {line}", std::process::id()));
        }
        Ok(())
    });
}

/// Hands every file to the kernel and turns the library off: at exit and
/// before an `exec`. Each fd's kernel position is set to the program's,
/// then the descriptions go, and the last handle of each file writes it
/// back (as a close does: no `fsync`).
pub(crate) fn hand_all_to_kernel() {
    hand_all(false);
}

/// [`hand_all_to_kernel`] before an `exec`: the group's files whose fds
/// the new program keeps (no close-on-exec) are marked the kernel's for
/// the group ([`mark_group`]), since the program writes them there.
pub(crate) fn hand_all_for_exec() {
    hand_all(true);
}

pub(super) fn hand_all(exec: bool) {
    if passing_through() {
        return;
    }
    inside((), || {
        let taken = TABLE.take(|_, _| true);
        for (fd, d) in &taken {
            sync_position(*fd, d);
            if exec && in_group() && !close_on_exec(*fd) {
                mark_group(d.key, &proc_path(*fd));
            }
        }
        crate::warm::save_at_exit(
            built_cache(),
            taken.iter().filter_map(|(_, d)| d.file.private()),
        );
        // The group's files this process wrote: written back as a close
        // does (what a program outside the group reads next); what the
        // process leaves when killed, the group's launcher writes back.
        for (fd, d) in taken
            .iter()
            .filter(|(_, d)| d.writable && d.file.private().is_none())
        {
            if let Err(e) = writing_back(d.key, || d.file.write_back()) {
                warn(&format!("fd {fd}: writing back {}: {e}", file_name(d.key)));
            }
        }
        drop(taken);
        report_unwritten();
        Ok(())
    });
    pass_through_for_good();
}

/// Once every file is closed (at exit, before an `exec`): if dirty data
/// is left (a writeback failed: a full filesystem), one more try, and
/// what it could not write said on stderr, since it is lost when the
/// process ends.
pub(super) fn report_unwritten() {
    let Some(cache) = built_cache() else {
        return;
    };
    let dirty = cache.stats().dirty_bytes;
    if dirty == 0 {
        return;
    }
    if let Err(e) = cache.sync_all() {
        warn(&format!(
            "pid {}: {dirty} bytes written to files could not be written back ({e}): lost",
            std::process::id()
        ));
    }
}
