//! Building `libfoliocache_preload.so` and C programs, and running
//! programs under the library.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The cache's capacity in the tests' runs.
pub const CAPACITY: &str = "64m";

/// `libfoliocache_preload.so` of this test's target directory and
/// profile, built once (cargo builds no cdylib for its own package's
/// integration tests; when up to date the build is a no-op).
pub fn library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // This executable is <target>/<profile>/deps/it-<hash>.
        let exe = std::env::current_exe().expect("the test's executable");
        let out = exe.ancestors().nth(2).expect("<target>/<profile>");
        let profile = match out.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(p) => p,
            None => panic!("no profile in {}", out.display()),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        checked(
            Command::new(cargo)
                .args([
                    "build",
                    "-p",
                    "foliocache-preload",
                    "--profile",
                    profile,
                    "--manifest-path",
                ])
                .arg(Path::new(MANIFEST_DIR).join("Cargo.toml"))
                .env("CARGO_TARGET_DIR", out.parent().expect("<target>")),
        );
        let lib = out.join("libfoliocache_preload.so");
        assert!(lib.exists(), "{} missing after the build", lib.display());
        lib
    })
}

/// Runs `cmd`; its output, or a panic showing it unless it exits 0.
pub fn checked(cmd: &mut Command) -> Output {
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

/// `program` set to run under the library, serving `dir`.
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_PRELOAD", library())
        .env("FOLIOCACHE_PRELOAD_DIRS", dir)
        .env("FOLIOCACHE_PRELOAD_CAPACITY", CAPACITY);
    cmd
}

/// Compiles `tests/c/<name>.c` into `out_dir`; returns the executable.
pub fn compile(name: &str, out_dir: &Path) -> PathBuf {
    let exe = out_dir.join(name);
    checked(
        Command::new("cc")
            .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread"])
            .arg(
                Path::new(MANIFEST_DIR)
                    .join("tests/c")
                    .join(format!("{name}.c")),
            )
            .arg("-ldl")
            .arg("-o")
            .arg(&exe),
    );
    exe
}

/// Byte `i` of the C programs' test pattern for `seed` (`pat` there).
pub fn pattern(seed: u64, i: u64) -> u8 {
    (i.wrapping_mul(31) + seed * 7 + (i >> 12)) as u8
}
