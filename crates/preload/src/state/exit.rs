//! The end of a process, and an `exec`: every file handed to the kernel,
//! what is left unwritten said, and the figures of [`ENV_STATS`].

use super::*;

/// Opens the cache served (for [`report`]).
pub(super) static OPENS: AtomicUsize = AtomicUsize::new(0);

/// With [`ENV_STATS`] set, one line on stderr: the opens served and the
/// cache's figures.
pub(crate) fn report() {
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
                    "{} hits, {} misses (pages) from the group's shared cache ({} processes, \
                     {} pages cached, {} dirty)",
                    s.hits, s.misses, s.processes, s.cached, s.dirty
                )
            }
            None => {
                let s = built_cache().map(Cache::stats).unwrap_or_default();
                format!(
                    "{} hits, {} misses; {} reads ({} bytes) and {} writes ({} bytes) on the \
                     files",
                    s.hits, s.misses, s.io_reads, s.io_bytes, s.io_writes, s.io_write_bytes
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
            taken.iter().filter_map(|(_, d)| d.file.local()),
        );
        // The group's files this process wrote: written back as a close
        // does (what a program outside the group reads next); what the
        // process leaves when killed, the group's launcher writes back.
        for (fd, d) in taken
            .iter()
            .filter(|(_, d)| d.writable && d.file.local().is_none())
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
