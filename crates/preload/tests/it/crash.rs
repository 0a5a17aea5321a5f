//! What `write(2)` accepted outlives the process (docs/preload.md, "What
//! a program loses"): a writer that dies right after writing 16 MiB,
//! nothing synced, by SIGKILL, `abort`, a fatal signal or `_exit`, leaves
//! every byte in the file once its guardian has written it back, as the
//! kernel's page cache would.

use std::time::{Duration, Instant};

use crate::support::{compile, preloaded, Build};

/// Byte `i` of `killed_writer.c`'s pattern.
fn pat(i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(i >> 12) as u8) | 1
}

#[test]
fn a_writer_that_dies_loses_no_accepted_byte() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("killed_writer", dir.path(), Build::Plain);
    let mib = 16u64;
    let want: Vec<u8> = (0..mib << 20).map(pat).collect();
    for how in ["kill", "abort", "segv", "exit"] {
        let file = dir.path().join(format!("{how}.bin"));
        let status = preloaded(&exe, dir.path())
            .arg(how)
            .arg(&file)
            .arg(mib.to_string())
            .status()
            .expect("running the writer");
        assert!(
            matches!(status.code(), None | Some(0)),
            "{how}: the writer failed before dying: {status}"
        );
        // The guardian writes back once the writer is gone.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = std::fs::read(&file).unwrap_or_default();
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{how}: {} of {} bytes survived, {} of them right",
                got.len(),
                want.len(),
                got.iter().zip(&want).filter(|(a, b)| a == b).count()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A guardian ends by its own exit, status 0, once it has written back:
/// never by a fault. (Its copy of the program's private memory is dropped
/// as it starts; a call it made through the interposer's `_exit` or
/// `syscall` then looked the C library's function up in the dynamic
/// linker's zeroed tables and faulted: every guardian of a preloaded
/// program died by SIGSEGV as it ended.)
#[test]
fn a_guardian_ends_by_exiting_after_its_write_back() {
    let dir = tempfile::tempdir().unwrap();
    let writer = compile("killed_writer", dir.path(), Build::Plain);
    let reaper = compile("reaper", dir.path(), Build::Plain);
    let want: Vec<u8> = (0..1u64 << 20).map(pat).collect();
    for how in ["kill", "exit"] {
        let file = dir.path().join(format!("reaped-{how}.bin"));
        // The reaper returns once the writer and every process it left
        // (its guardian) have ended.
        let out = preloaded(&reaper, dir.path())
            .arg(&writer)
            .arg(how)
            .arg(&file)
            .arg("1")
            .output()
            .expect("running the reaper");
        let lines = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{how}: {lines}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let orphans: Vec<&str> = lines.lines().filter(|l| l.starts_with("orphan")).collect();
        assert!(
            !orphans.is_empty(),
            "{how}: no guardian outlived the writer:\n{lines}"
        );
        assert!(
            orphans.iter().all(|l| *l == "orphan exit 0"),
            "{how}: a guardian did not exit 0:\n{lines}"
        );
        assert!(
            std::fs::read(&file).unwrap() == want,
            "{how}: the guardian did not write the writer's bytes back"
        );
    }
}
