//! `tests/c/calls.c` under the library: every intercepted call and the
//! defined behaviours (stdio, mmap, fork, exec, O_APPEND, threads), then
//! the files it leaves checked through the kernel; and a random exerciser
//! against a model.

use std::path::Path;

use crate::support::{compile, compile_shared, library, pattern, preloaded, Build, BUILDS};

/// `tests/c/calls.c`, built plain and fortified, each run on a fresh
/// directory, with `tests/c/after_fclose.c` loaded after the library (a
/// hook between the real `fclose` and the library's return, for the
/// `fclose`/`fopen` race).
#[test]
fn every_call_and_behaviour() {
    for build in BUILDS {
        every_call_and_behaviour_in(build);
    }
}

fn every_call_and_behaviour_in(build: Build) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = compile("calls", dir.path(), build);
    let shim = compile_shared("after_fclose", dir.path());
    let data = tempfile::tempdir().expect("a temporary directory");
    println!("{build:?}:");
    let mut preload = library().as_os_str().to_owned();
    preload.push(" ");
    preload.push(&shim);
    let out = crate::support::checked(
        preloaded(&exe, data.path())
            .env("LD_PRELOAD", preload)
            .arg(data.path()),
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));

    // Left open and dirty at exit: written back by the exit handler.
    let exit = std::fs::read(data.path().join("exit.bin")).expect("exit.bin");
    assert_eq!(exit.len(), 100_000);
    assert!(exit
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(7, i as u64)));

    // Four threads' disjoint blocks.
    let threads = std::fs::read(data.path().join("threads.bin")).expect("threads.bin");
    assert_eq!(threads.len(), 4 * 64 * 4096);
    assert!(threads
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(6, i as u64)));

    let append = std::fs::read(data.path().join("append.bin")).expect("append.bin");
    assert_eq!(append, b"XbcdefghijkL");
}

/// With no served directory, everything passes through (and the library
/// loads and runs a program untouched).
#[test]
fn nothing_served_without_directories() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = crate::support::checked(
        preloaded("sh", dir.path())
            .env_remove("FOLIOCACHE_PRELOAD_DIRS")
            .args(["-c", "echo hello > \"$0/f\" && cat \"$0/f\""])
            .arg(dir.path()),
    );
    assert_eq!(out.stdout, b"hello\n");
}

/// Only regular files of filesystems that store data are served: with the
/// directories `/proc:/sys` or `/`, files of procfs and sysfs read as
/// without the library (the cache would read them as empty).
#[test]
fn pseudo_filesystems_are_not_served() {
    for dirs in ["/proc:/sys", "/"] {
        let out = crate::support::checked(preloaded("sh", Path::new(dirs)).args([
            "-c",
            "cat /proc/meminfo /proc/self/status /sys/kernel/mm/transparent_hugepage/enabled \
                 2>/dev/null || cat /proc/meminfo /proc/self/status",
        ]));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("MemTotal:"), "{dirs}: {text:?}");
        assert!(text.contains("\nPid:"), "{dirs}: {text:?}");
    }
}

/// `tests/c/exerciser.c`, built plain and fortified: seeded random
/// operations on three files checked
/// against a model, then the files checked through the kernel, under a
/// cache small enough (2 MiB) that reclaim and writeback run throughout.
/// `FOLIOCACHE_PRELOAD_SEEDS` seeds (default 8) of
/// `FOLIOCACHE_PRELOAD_OPS` operations (default 5000).
#[test]
fn random_operations_match_a_model() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exes = BUILDS.map(|b| compile("exerciser", dir.path(), b));
    let seeds: u64 = test_support::env_or("FOLIOCACHE_PRELOAD_SEEDS", 8);
    let ops: u64 = test_support::env_or("FOLIOCACHE_PRELOAD_OPS", 5000);
    for (seed, exe) in (1..=seeds).flat_map(|s| exes.iter().map(move |e| (s, e))) {
        let data = tempfile::tempdir().expect("a temporary directory");
        crate::support::checked(
            preloaded(exe, data.path())
                .env("FOLIOCACHE_PRELOAD_CAPACITY", "2m")
                .arg(data.path())
                .arg(seed.to_string())
                .arg(ops.to_string()),
        );
    }
}

/// `tests/c/raw_syscalls.c`: system calls made by number (`syscall(2)`,
/// as stock fsx makes `copy_file_range`) on served files are served as
/// their functions are, in a process's own cache and in a group's: before
/// the library defined `syscall`, the kernel copied a file the cache had
/// not written back, and fsx found zeros. Then the file through the
/// kernel.
#[test]
fn system_calls_by_number_are_served() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = compile("raw_syscalls", dir.path(), Build::Plain);
    for group in [false, true] {
        let data = tempfile::tempdir().expect("a temporary directory");
        let cache = fc::SharedCache::new(16 << 20).expect("a shared cache");
        let mut cmd = preloaded(&exe, data.path());
        cmd.arg(data.path());
        if group {
            use std::os::fd::AsRawFd;
            cmd.env(
                "FOLIOCACHE_PRELOAD_SHARED",
                format!(
                    "/proc/{}/fd/{}",
                    std::process::id(),
                    cache.memory_file().as_raw_fd()
                ),
            );
        }
        crate::support::checked(&mut cmd);
        cache.write_back_all().expect("the group's writeback");
        let want: Vec<u8> = (0..9000)
            .map(|i| b'a' + (i % 23) as u8)
            .chain(*b"RA")
            .collect();
        let dst = std::fs::read(data.path().join("dst")).expect("dst");
        assert!(
            dst == want,
            "group {group}: dst differs from what was written"
        );
    }
}
