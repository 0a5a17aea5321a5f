//! fio through the mount, with verification: sequential and random
//! writes by several jobs into files fio preallocates, with `pwrite` and
//! with fio's `mmap` engine (stores through shared mappings), each read
//! back and checked
//! (`--verify=crc32c`). Skipped (with the reason printed) where FUSE or
//! fio is missing (`apt-get install fio`), a failure under `CI=true`.

use std::fs;
use std::process::Command;

use foliocache_fuse::MountOptions;

use crate::programs::{ready, stdout_of};

#[test]
fn fio_writes_verify_through_the_mount() {
    if !ready("fio_writes_verify_through_the_mount", "fio", "fio") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&backing).expect("mkdir");
    fs::create_dir(&mnt).expect("mkdir");
    // A cache smaller than the data, so reclaim and writeback run.
    let session =
        foliocache_fuse::spawn(&backing, &mnt, &MountOptions::new(16 << 20)).expect("mount");
    for (engine, rw, bs) in [
        ("psync", "write", "64k"),
        ("psync", "randwrite", "4k"),
        ("psync", "randwrite", "16k"),
        ("mmap", "write", "64k"),
        ("mmap", "randwrite", "4k"),
    ] {
        stdout_of(
            Command::new("fio")
                .arg(format!("--name=v-{engine}-{rw}-{bs}"))
                .arg(format!("--directory={}", mnt.display()))
                .args([
                    &format!("--rw={rw}"),
                    &format!("--bs={bs}"),
                    &format!("--ioengine={engine}"),
                    "--size=12M",
                    "--numjobs=3",
                    // fio preallocates each file (fallocate mode 0).
                    "--fallocate=native",
                    "--verify=crc32c",
                    "--verify_fatal=1",
                    "--verify_state_save=0",
                    "--group_reporting",
                ]),
        );
    }
    session.umount_and_join().expect("unmount");
}
