//! xfstests' fsstress and fsx (built from `third_party/xfstests`) under
//! `foliocache run`: fsstress's forked workers leave the tree ext4 leaves
//! for the same seed, byte for byte, and stock fsx (`copy_file_range`
//! through `syscall()`, mapped reads and writes, every `fallocate` mode)
//! finishes A-OK, at the smallest capacity and at the default, with the
//! group from the first fork and with `--shared`.
//!
//! The test command's sizes are small (a run of each takes seconds); the
//! full ones are the same tests with `FOLIOCACHE_FSSTRESS_OPS=5000
//! FOLIOCACHE_FSSTRESS_SEEDS=3 FOLIOCACHE_FSX_OPS=100000` (docs/testing.md,
//! "Stress programs").

use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Output};

use test_support::{env_or, xfstests_program};

use crate::launch::build_library;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// The launches tried: `--shared` or not, at 8M (the smallest table:
/// 127 files) and at the default capacity.
const WAYS: [(bool, Option<&str>); 4] = [
    (false, Some("8M")),
    (true, Some("8M")),
    (false, None),
    (true, None),
];

/// `foliocache run [--shared] [--capacity C] --no-state --dir DIR --`,
/// the program to follow.
fn launch(shared: bool, capacity: Option<&str>, dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run")
        .args(shared.then_some("--shared"))
        .args(capacity.map(|c| ["--capacity", c]).into_iter().flatten())
        .args(["--no-state", "--dir"])
        .arg(dir)
        .arg("--");
    c
}

/// Output's stderr, lossy.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `fsstress -p 8 -n OPS -s SEED -d DIR` run alone (on ext4) and under
/// each of [`WAYS`]: the same tree every time, and nothing on stderr that
/// the ext4 run did not print. The story: at `--capacity 8M` the tree
/// differed from ext4's in every run (`copy_file_range` copied nothing
/// after `fstat` said 0 of a file whose slot had been recycled) and the
/// interposer printed some 76,000 lines.
#[test]
fn fsstress_leaves_the_tree_ext4_leaves() {
    let Some(fsstress) = xfstests_program("fsstress_leaves_the_tree_ext4_leaves", "fsstress")
    else {
        return;
    };
    build_library();
    let ops: u64 = env_or("FOLIOCACHE_FSSTRESS_OPS", 300);
    let seeds: u64 = env_or("FOLIOCACHE_FSSTRESS_SEEDS", 1);
    for seed in 1..=seeds {
        let args = |dir: &Path| {
            let mut a = vec!["-p".into(), "8".into(), "-n".into(), ops.to_string()];
            a.extend(["-s".into(), seed.to_string(), "-d".into()]);
            a.push(dir.display().to_string());
            a
        };
        let ext4 = tempfile::tempdir().expect("tempdir");
        let alone = Command::new(&fsstress)
            .args(args(ext4.path()))
            .output()
            .expect("running fsstress");
        assert!(alone.status.success(), "fsstress alone: {}", stderr(&alone));
        let want = tree(ext4.path());
        for (shared, capacity) in WAYS {
            let dir = tempfile::tempdir().expect("tempdir");
            let out = launch(shared, capacity, dir.path())
                .arg(&fsstress)
                .args(args(dir.path()))
                .output()
                .expect("running foliocache run");
            let way = format!("seed {seed}, {ops} ops, shared {shared}, capacity {capacity:?}");
            assert!(out.status.success(), "{way}: {}", stderr(&out));
            assert_eq!(stderr(&out), stderr(&alone), "{way}: stderr");
            same_tree(&want, &tree(dir.path()), &way);
        }
    }
}

/// Four stock fsx processes (`fsx -N OPS -S SEED FILE`, each on a file
/// of its own in the served directory, their logs elsewhere) in one
/// launch, under each of [`WAYS`]: each ends "A-OK". The story: fsx's
/// `copy_file_range`, made through `syscall()`, went to the kernel, which
/// copied bytes the cache had not written back: all four failed within
/// 13 to 191 operations.
#[test]
fn stock_fsx_passes() {
    let Some(fsx) = xfstests_program("stock_fsx_passes", "fsx") else {
        return;
    };
    build_library();
    let ops: u64 = env_or("FOLIOCACHE_FSX_OPS", 3000);
    const FOUR: &str = r#"
fsx=$1 dir=$2 logs=$3 ops=$4
pids=
for i in 1 2 3 4; do
  "$fsx" -N "$ops" -S "$i" -P "$logs" "$dir/f$i" >"$logs/out$i" 2>&1 &
  pids="$pids $!"
done
failed=0
for pid in $pids; do wait "$pid" || failed=$((failed + 1)); done
echo "$failed failed"
"#;
    for (shared, capacity) in WAYS {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = tempfile::tempdir().expect("tempdir");
        let out = launch(shared, capacity, dir.path())
            .args(["sh", "-c", FOUR, "sh"])
            .arg(&fsx)
            .arg(dir.path())
            .arg(logs.path())
            .arg(ops.to_string())
            .output()
            .expect("running foliocache run");
        let way = format!("{ops} ops, shared {shared}, capacity {capacity:?}");
        let outputs: String = (1..=4)
            .map(|i| {
                let text = std::fs::read_to_string(logs.path().join(format!("out{i}")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                format!(
                    "--- fsx {i}\n{}\n",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout) == "0 failed\n",
            "{way}: {}{}\n{outputs}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
        for i in 1..=4 {
            let text = std::fs::read_to_string(logs.path().join(format!("out{i}"))).expect("out");
            assert!(
                text.contains(&format!("All {ops} operations completed A-OK!")),
                "{way}: fsx {i}:\n{outputs}"
            );
        }
        assert_eq!(stderr(&out), "", "{way}: stderr");
    }
}

/// One line per entry under `root`, sorted by path: its type, mode,
/// owner, link count, size and a hash of its bytes (a file), its target
/// (a link) or its device number (a device). Extended attributes are
/// not compared: the interposer leaves them to the kernel.
fn tree(root: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("a directory entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let name = path.strip_prefix(root).expect("under root").display();
            let ft = meta.file_type();
            let what = if ft.is_dir() {
                todo.push(path.clone());
                "dir".to_string()
            } else if ft.is_symlink() {
                let to = std::fs::read_link(&path).expect("readlink");
                format!("link to {}", to.display())
            } else if ft.is_file() {
                format!("file {} bytes, hash {:016x}", meta.len(), hash_of(&path))
            } else if ft.is_char_device() || ft.is_block_device() {
                format!("device {:x}", meta.rdev())
            } else {
                "other".to_string()
            };
            lines.push(format!(
                "{name}: {what}, mode {:o}, owner {}:{}, links {}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.nlink()
            ));
        }
    }
    lines.sort();
    lines
}

/// A hash of the file's bytes.
fn hash_of(path: &Path) -> u64 {
    let mut file = std::fs::File::open(path).expect("open");
    let mut hasher = std::hash::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).expect("read");
        if n == 0 {
            return hasher.finish();
        }
        hasher.write(&buf[..n]);
    }
}

/// Fails with the entries that differ, the first 20 each way.
fn same_tree(want: &[String], got: &[String], way: &str) {
    if want == got {
        return;
    }
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).take(20).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).take(20).collect();
    panic!(
        "{way}: the tree differs from ext4's ({} entries against {})\n\
         ext4's, not here:\n{missing:#?}\nhere, not ext4's:\n{extra:#?}",
        got.len(),
        want.len()
    );
}
