//! What the workspace's tests share (a dev-dependency, never published).
//!
//! - **The skip-or-fail rule** ([`skip_or_fail`], [`under_ci`]): a test
//!   that needs something this machine may lack (io_uring, `RWF_DONTCACHE`,
//!   root, FUSE, fio, `cmp`) prints why it skips and passes on a laptop,
//!   and fails under `CI=true`, where the test command installs everything.
//! - **Test data and knobs** ([`nonzero_bytes`], [`random_bytes`],
//!   [`env_or`], [`proptest_cases`]); **temporary files** on the target's
//!   filesystem, where `O_DIRECT` works ([`TempPath`]).
//! - **A size-limited tmpfs** ([`Tmpfs`]), for a full filesystem.
//! - **Re-running the test binary** on one test in a child process
//!   ([`test_path`], [`rerun_test`]); **other programs**: run and checked
//!   ([`run_checked`]), and a workspace `cdylib` built for a test
//!   ([`build_cdylib`]).
//! - **xfstests' `fsstress` and `fsx`** ([`xfstests_program`]), built
//!   from `third_party/xfstests` for the tests that run them.
//! - **The xarray's reference model** ([`model`]), shared by the xarray's
//!   proptest model and the fuzz target.
//! - **A file mapped read-only** ([`mapped`]): its bytes in place, and
//!   its pages in the kernel's page cache (`mincore`).
//! - **A crate's import graph** ([`modgraph`]), read from its sources: the
//!   cache crate's layering test, and the CLI's and the bench's test that
//!   no files import each other in a circle.
//! - **The test cache** (`cache`, with the `cache` feature): one builder
//!   for every test that builds a cache, and files over memory, fault
//!   injection or the disk.
//! - **Crash states** (`crash`, with the `cache` feature): what a power
//!   cut could leave of a file, built from a `backing::RecordingBacking`'s
//!   log, and the check that each keeps what every acknowledged sync
//!   promised.
//!
//! `docs/testing.md` describes how the tests are organised.

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

#[cfg(feature = "cache")]
pub mod cache;
#[cfg(feature = "cache")]
pub mod crash;
pub mod mapped;
pub mod model;
pub mod modgraph;
pub mod s3;

/// Whether the tests run under CI (`CI=true`), where a missing kernel
/// feature or tool fails the test instead of skipping it.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The skip convention for a test that cannot run here: panics under
/// `CI=true` (where everything must be there), and otherwise prints
/// "`test`: skipped: `reason`" straight to stderr (so the test harness
/// does not swallow it) and returns, for the test to return.
#[track_caller]
pub fn skip_or_fail(test: &str, reason: impl Display) {
    if under_ci() {
        panic!("{test}: cannot run, and every test must run under CI=true: {reason}");
    }
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {reason}");
}

/// Whether a test that needs `what` may go on: `true` where `why_not`
/// (the reason `what` cannot be had here) is `None`; else the test is
/// skipped as [`skip_or_fail`] says, with "`what` is unavailable: `why`".
#[track_caller]
pub fn available(test: &str, what: &str, why_not: Option<impl Display>) -> bool {
    match why_not {
        None => true,
        Some(why) => {
            skip_or_fail(test, format!("{what} is unavailable: {why}"));
            false
        }
    }
}

/// The environment variable `name` parsed as a `T`, or `default` when it
/// is unset or does not parse (the tests' knobs: durations, operation
/// counts, seeds).
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `PROPTEST_CASES` if set, else `default`: the property tests pick small
/// defaults so they run in seconds, and a longer run raises them.
pub fn proptest_cases(default: u32) -> u32 {
    env_or("PROPTEST_CASES", default)
}

/// `len` random bytes, none of them zero (so a zero in a result is never
/// data), from `seed`.
pub fn nonzero_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen_range(1..=255u8)).collect()
}

/// `len` random bytes from `seed` (zeros included).
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The running test's temporary directory: `tmp` in its target directory
/// (cargo's `CARGO_TARGET_TMPDIR`), on the target's filesystem rather than
/// a `tmpfs` `/tmp` that may refuse `O_DIRECT`; the system's temporary
/// directory if this executable is not where cargo puts tests
/// (`<target>/<profile>/deps/`).
pub fn target_tmpdir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let target = exe.as_deref().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps").then_some(deps.parent()?.parent()?)
    });
    match target {
        Some(t) => t.join("tmp"),
        None => std::env::temp_dir(),
    }
}

/// A path in [`target_tmpdir`] that does not exist yet, unique in the
/// process; whatever is there is removed on drop.
#[derive(Debug)]
pub struct TempPath {
    /// Where.
    pub path: PathBuf,
}

impl TempPath {
    /// A fresh path named after `tag`.
    pub fn new(tag: &str) -> TempPath {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = target_tmpdir().join("foliocache-tests");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let path = dir.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        TempPath { path }
    }

    /// A fresh path holding `data`, written and synced with `std::fs`.
    pub fn with_data(tag: &str, data: &[u8]) -> TempPath {
        let t = TempPath::new(tag);
        std::fs::write(&t.path, data)
            .unwrap_or_else(|e| panic!("writing {}: {e}", t.path.display()));
        std::fs::File::open(&t.path)
            .and_then(|f| f.sync_all())
            .unwrap_or_else(|e| panic!("syncing {}: {e}", t.path.display()));
        t
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The name the test harness gives the test function `name` of the module
/// whose `module_path!()` is `module`: the module path without the crate's
/// name (`write::durability::child_reports_a_file`), as `--exact` wants it
/// when a test re-runs its own binary on one test in a child process.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// A tmpfs mounted for a test (a filesystem that fills up: `size`
/// bounds it), unmounted when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    /// The mount point.
    pub path: PathBuf,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=`: `1m`, `64k`) on `at`, which is
    /// created; or `None` when it cannot be mounted (not root: skipped, or
    /// failed under CI, saying why, for `test`).
    pub fn mount(at: &Path, size: &str, test: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).expect("a mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs {
                path: at.to_path_buf(),
            }),
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr).into_owned();
                skip_or_fail(test, format!("mounting a tmpfs (needs root): {why}"));
                None
            }
            Err(e) => {
                skip_or_fail(test, format!("mount: {e}"));
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy, so that a file a failing test left open does not keep it.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// A command that runs this test binary again on the one test `name` of
/// the module whose `module_path!()` is `module` ([`test_path`]), on one
/// thread, its output not captured: for a test whose part runs in a
/// child process of its own (told its part by an environment variable
/// the caller sets), away from the other tests of the binary.
pub fn rerun_test(module: &str, name: &str) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test's executable");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        test_path(module, name).as_str(),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// A crash test's writer, killed mid-write: runs the test `name` of
/// `module` again ([`rerun_test`]) with `env` set to `value`, reads its
/// stdout until it prints `WRITING` (its transaction under way), kills it,
/// and returns the last `COMMITTED n` it printed before (0 if none).
/// Panics if the child exits before it is killed.
pub fn kill_mid_write(
    module: &str,
    name: &str,
    env: &str,
    value: impl AsRef<std::ffi::OsStr>,
) -> u64 {
    use std::io::BufRead;
    let mut child = rerun_test(module, name)
        .env(env, value)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("re-running the test binary");
    let mut committed = 0;
    let out = child.stdout.take().expect("the child's stdout");
    for line in std::io::BufReader::new(out).lines() {
        let line = line.expect("a line from the child");
        if let Some(n) = line.strip_prefix("COMMITTED ") {
            committed = n.parse().expect("COMMITTED and a number");
        }
        if line == "WRITING" {
            break;
        }
    }
    child.kill().expect("killing the writer");
    let status = child.wait().expect("waiting for the writer");
    assert!(
        !status.success(),
        "the writer was killed, not done: {status}"
    );
    committed
}

/// Runs `cmd`; its output, or a panic showing the command, its status and
/// its output unless it exits 0.
pub fn run_checked(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether the ELF file at `path` has a section named `section`
/// (`readelf -S`): an installed file's `.debug_info`, say.
pub fn elf_has_section(path: &std::path::Path, section: &str) -> bool {
    let out = run_checked(
        std::process::Command::new("readelf")
            .args(["-S", "--wide"])
            .arg(path),
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .any(|w| w == section)
}

/// The shared object `file` of the workspace package `package` (a
/// `cdylib`), built in the running test's target directory and profile
/// (cargo builds no `cdylib` for its package's own integration tests; up
/// to date, the build is a no-op). `manifest_dir` is the package's
/// `CARGO_MANIFEST_DIR`. Returns the object's path.
pub fn build_cdylib(manifest_dir: &str, package: &str, file: &str) -> std::path::PathBuf {
    use std::path::Path;
    // This executable is <target>/<profile>/deps/<test>-<hash>.
    let exe = std::env::current_exe().expect("the test's executable");
    let out = exe
        .ancestors()
        .nth(2)
        .expect("the test runs from <target>/<profile>/deps");
    let profile = match out.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(p) => p,
        None => panic!("no profile directory in {}", out.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_checked(
        std::process::Command::new(cargo)
            .args([
                "build",
                "-p",
                package,
                "--profile",
                profile,
                "--manifest-path",
            ])
            .arg(Path::new(manifest_dir).join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", out.parent().expect("<target>")),
    );
    let lib = out.join(file);
    assert!(
        lib.exists(),
        "{} missing after the build (a --target build? this expects the host's layout)",
        lib.display()
    );
    lib
}

/// xfstests' `fsstress` or `fsx` (`name`), built from the workspace's copy
/// (`third_party/xfstests/build.sh`) into [`target_tmpdir`]`/xfstests`
/// the first time a test asks, and again when its sources change; `None`,
/// after [`skip_or_fail`] for `test`, where it cannot be built (no C
/// compiler, or no `<xfs/xfs.h>`: Debian's `xfslibs-dev`, which the test
/// command installs).
pub fn xfstests_program(test: &str, name: &str) -> Option<PathBuf> {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/xfstests/build.sh");
    let out = target_tmpdir().join("xfstests");
    let held = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let built = std::process::Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output();
    drop(held);
    match built {
        Ok(o) if o.status.success() => Some(out.join(name)),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).into_owned();
            skip_or_fail(test, format!("building xfstests' {name}: {why}"));
            None
        }
        Err(e) => {
            skip_or_fail(test, format!("running {}: {e}", script.display()));
            None
        }
    }
}
