//! Building `libfoliocache_preload.so` and C programs, and running
//! programs under the library.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The cache's capacity in the tests' runs.
pub const CAPACITY: &str = "64m";

/// `libfoliocache_preload.so` of this test's target directory and
/// profile, built once.
pub fn library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        test_support::build_cdylib(
            MANIFEST_DIR,
            "foliocache-preload",
            "libfoliocache_preload.so",
        )
    })
}

pub use test_support::run_checked as checked;

/// `program` set to run under the library, serving `dir`.
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_PRELOAD", library())
        .env("FOLIOCACHE_PRELOAD_DIRS", dir)
        .env("FOLIOCACHE_PRELOAD_CAPACITY", CAPACITY);
    cmd
}

/// How a C test program is compiled.
#[derive(Clone, Copy, Debug)]
pub enum Build {
    /// `-O1`.
    Plain,
    /// `-O2 -D_FORTIFY_SOURCE=2`, as most distributions build packages:
    /// reads into buffers of known size call `__read_chk`,
    /// `__pread64_chk`, opens `__open_2`.
    Fortified,
}

/// Both builds, for the tests that run a program each way.
pub const BUILDS: [Build; 2] = [Build::Plain, Build::Fortified];

/// Compiles `tests/c/<name>.c` into `out_dir` as `build` says; returns
/// the executable.
pub fn compile(name: &str, out_dir: &Path, build: Build) -> PathBuf {
    let exe = out_dir.join(format!("{name}-{build:?}"));
    let flags: &[&str] = match build {
        Build::Plain => &["-O1"],
        Build::Fortified => &["-O2", "-D_FORTIFY_SOURCE=2"],
    };
    cc(name, &[&["-pthread"], flags].concat(), &exe);
    exe
}

/// Compiles `tests/c/<name>.c` into `out_dir` as a shared object (to load
/// with `LD_PRELOAD` after the library); returns its path.
pub fn compile_shared(name: &str, out_dir: &Path) -> PathBuf {
    let so = out_dir.join(format!("{name}.so"));
    cc(name, &["-O1", "-shared", "-fPIC"], &so);
    so
}

/// `cc` on `tests/c/<name>.c` with warnings as errors and `flags`, into
/// `out`.
fn cc(name: &str, flags: &[&str], out: &Path) {
    checked(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .args(flags)
            .arg(
                Path::new(MANIFEST_DIR)
                    .join("tests/c")
                    .join(format!("{name}.c")),
            )
            .arg("-ldl")
            .arg("-o")
            .arg(out),
    );
}

/// Byte `i` of the C programs' test pattern for `seed` (`pat` there).
pub fn pattern(seed: u64, i: u64) -> u8 {
    (i.wrapping_mul(31) + seed * 7 + (i >> 12)) as u8
}
