//! The buffered fallback on a filesystem that really refuses O_DIRECT:
//! ramfs, mounted for each test in a directory under CARGO_TARGET_TMPDIR
//! (needs root; skipped otherwise, and a failure under CI=true).
//!
//! A test binary of its own, because it installs a global logger to check
//! the `log::warn!` that the fallback emits.

use crate::common;

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use common::{aligned_from, filled, random_bytes, TempDir, B};
use foliocache_backing::{Backing, DataPath, FileBacking, FileOptions, BLOCK};
use test_support::skip_or_fail;

/// Collects every log record, for the tests to look for their warnings.
struct Capture(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        v.push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

fn logs() -> &'static Capture {
    static LOGGER: OnceLock<&'static Capture> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Trace);
        c
    })
}

fn warnings_about(path: &Path) -> Vec<String> {
    let needle = path.display().to_string();
    logs()
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(l, m)| *l == log::Level::Warn && m.contains(&needle))
        .map(|(_, m)| m.clone())
        .collect()
}

/// A ramfs mounted on a fresh directory, unmounted on drop.
struct Ramfs {
    dir: TempDir,
}

impl Ramfs {
    /// Mounts a ramfs, or returns None after the skip convention when that
    /// is not possible here, or when ramfs takes O_DIRECT after all.
    fn mount(test: &str) -> Option<Ramfs> {
        logs(); // before any open, so no warning is missed
        let dir = TempDir::new(test);
        let out = Command::new("mount")
            .args(["-t", "ramfs", "ramfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
                skip_or_fail(test, format!("cannot mount a ramfs (needs root): {why}"));
                return None;
            }
            Err(e) => {
                skip_or_fail(test, format!("cannot run mount(8): {e}"));
                return None;
            }
        }
        let fs = Ramfs { dir };
        // Probe: the point of these tests is a real refusal.
        let probe = fs.path().join(".probe");
        let r = OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe);
        let _ = fs::remove_file(&probe);
        match r {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Some(fs),
            other => {
                skip_or_fail(test, format!("ramfs did not refuse O_DIRECT: {other:?}"));
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        // Lazy unmount, so a file still open in a failing test does not
        // leave the mount behind; TempDir then removes the directory.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn rw() -> FileOptions {
    FileOptions::new().write(true).create(true)
}

#[test]
fn refused_o_direct_falls_back_to_buffered_with_a_warning() {
    let Some(fs) = Ramfs::mount("refused") else {
        return;
    };
    let path = fs.path().join("f");
    let f = FileBacking::open(&path, &rw()).expect("the fallback opens the file");
    assert!(!f.is_direct());
    assert!(!f.kernel_says_direct().unwrap());
    let info = f.info();
    assert_eq!(info.kind, "file");
    assert_eq!(info.data_path, DataPath::BufferedDontneed);
    assert!(info.note.contains("refused O_DIRECT"), "{info}");
    assert!(info.note.contains("POSIX_FADV_DONTNEED"), "{info}");
    let warned = warnings_about(&path);
    assert_eq!(warned.len(), 1, "one warning per open: {warned:?}");
    assert!(warned[0].contains("refused O_DIRECT"), "{warned:?}");
}

#[test]
fn fallback_reads_and_writes_match_std() {
    let Some(fs) = Ramfs::mount("fallback-rw") else {
        return;
    };
    let path = fs.path().join("f");
    let size = 40 * BLOCK + 333;
    let data = random_bytes(21, size);
    std::fs::write(&path, &data).unwrap();
    let f = FileBacking::open(&path, &rw()).unwrap();
    assert_eq!(f.len().unwrap(), size as u64);
    // Reads at many offsets, crossing and past EOF, into several buffers.
    for off in [0, 1, 7, 39, 40, 41, 50] {
        let (mut a, mut b) = (filled(3 * BLOCK, 0xEE), filled(BLOCK, 0xEE));
        let n = f
            .read_blocks(&mut [a.io_buf_mut(), b.io_buf_mut()], off * B)
            .unwrap();
        let start = (off as usize * BLOCK).min(size);
        let want = &data[start..(start + 4 * BLOCK).min(size)];
        assert_eq!(n, want.len(), "offset block {off}");
        let got: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        assert_eq!(&got[..n], want);
        assert!(got[n..].iter().all(|&x| x == 0), "zeros past EOF");
    }
    // Writes, set_len, sync.
    let w = random_bytes(22, 2 * BLOCK);
    f.write_blocks(&[aligned_from(&w).io_buf()], 45 * B)
        .unwrap();
    assert_eq!(f.len().unwrap(), 47 * B);
    f.sync_data().unwrap();
    f.sync_all().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(&disk[..size], &data[..]);
    assert!(disk[size..45 * BLOCK].iter().all(|&x| x == 0));
    assert_eq!(&disk[45 * BLOCK..], &w[..]);
    f.set_len(10).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), &data[..10]);
}

#[test]
fn fallback_punch_hole_reports_the_filesystem_error() {
    let Some(fs) = Ramfs::mount("fallback-punch") else {
        return;
    };
    let f = FileBacking::open(fs.path().join("f"), &rw()).unwrap();
    f.write_blocks(&[filled(2 * BLOCK, 1).io_buf()], 0).unwrap();
    // ramfs has no fallocate: the error comes through, nothing panics.
    let e = f.punch_hole(0, B).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
}

#[test]
fn create_new_and_truncate_survive_the_second_open() {
    let Some(fs) = Ramfs::mount("fallback-create") else {
        return;
    };
    let path = fs.path().join("f");
    // Linux creates the file before refusing O_DIRECT; the retry must not
    // then fail with EEXIST.
    let f = FileBacking::open(&path, &FileOptions::new().write(true).create_new(true)).unwrap();
    assert!(!f.is_direct());
    f.write_blocks(&[filled(BLOCK, 5).io_buf()], 0).unwrap();
    drop(f);
    let e = FileBacking::open(&path, &FileOptions::new().write(true).create_new(true)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    // O_TRUNC is not applied by the refused open; the retry applies it.
    let f = FileBacking::open(&path, &rw().truncate(true)).unwrap();
    assert_eq!(f.len().unwrap(), 0);
}

#[test]
fn force_buffered_does_not_warn() {
    logs();
    let dir = TempDir::new("no-warn");
    let path = dir.join("f");
    let f = FileBacking::open(&path, &rw().force_buffered(true)).unwrap();
    assert_eq!(f.info().data_path, DataPath::BufferedDontneed);
    assert!(warnings_about(&path).is_empty(), "asked for, so no warning");
}
