//! fio through the mount, with verification: sequential and random
//! writes by several jobs, each read back and checked (`--verify=crc32c`).
//! Skipped (with the reason printed) where FUSE is missing (a failure
//! under `CI=true`) or fio is not installed (`apt-get install fio`).

use std::fs;
use std::process::Command;

use foliocache_fuse::MountOptions;
use test_support::skip_or_fail;

fn skip_reason() -> Option<(String, bool)> {
    if let Some(why) = foliocache_fuse::unavailable() {
        return Some((why, true));
    }
    let fio = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fio").exists()));
    if !fio {
        return Some(("no fio on PATH (apt-get install fio)".into(), false));
    }
    None
}

#[test]
fn fio_writes_verify_through_the_mount() {
    if let Some((why, fuse)) = skip_reason() {
        // Under CI the test command installs fio and fuse3: a missing one
        // is a failure there.
        let _ = fuse;
        return skip_or_fail("fio_writes_verify_through_the_mount", why);
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&backing).expect("mkdir");
    fs::create_dir(&mnt).expect("mkdir");
    // A cache smaller than the data, so reclaim and writeback run.
    let session =
        foliocache_fuse::spawn(&backing, &mnt, &MountOptions::new(16 << 20)).expect("mount");
    for (rw, bs) in [("write", "64k"), ("randwrite", "4k"), ("randwrite", "16k")] {
        let out = Command::new("fio")
            .arg(format!("--name=v-{rw}-{bs}"))
            .arg(format!("--directory={}", mnt.display()))
            .args([
                &format!("--rw={rw}"),
                &format!("--bs={bs}"),
                "--size=12M",
                "--numjobs=3",
                "--ioengine=psync",
                "--fallocate=none",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--verify_state_save=0",
                "--group_reporting",
            ])
            .output()
            .expect("run fio");
        assert!(
            out.status.success(),
            "fio {rw} {bs} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    session.umount_and_join().expect("unmount");
}
