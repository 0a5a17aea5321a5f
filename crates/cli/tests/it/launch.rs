//! `foliocache run` as a user runs it: without the library beside the
//! binary it says what to build; with it, the program runs under it with
//! the variables set, and its exit status is the launcher's.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// Builds `libfoliocache_preload.so` beside the binary (its target
/// directory and profile).
pub(crate) fn build_library() {
    let out = Path::new(BIN).parent().expect("the binary's directory");
    let profile = match out.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(p) => p,
        None => panic!("no profile in {}", out.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "foliocache-preload", "--profile", profile])
        .env(
            "CARGO_TARGET_DIR",
            out.parent().expect("the target directory"),
        )
        .status()
        .expect("running cargo build");
    assert!(status.success(), "cargo build -p foliocache-preload failed");
}

#[test]
fn run_without_the_library_says_what_to_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("foliocache");
    std::fs::copy(BIN, &copy).expect("copying the binary");
    let out = Command::new(&copy)
        .args(["run", "--dir"])
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .expect("running foliocache run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cargo build --release -p foliocache-preload"),
        "{err}"
    );
}

#[test]
fn run_starts_the_program_under_the_library() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["run", "--capacity", "16M", "--dir"])
        .arg(dir.path())
        .args([
            "--",
            "sh",
            "-c",
            "printf data > \"$1/f\" && cat \"$1/f\" && \
             printf ' %s %s' \"$FOLIOCACHE_PRELOAD_CAPACITY\" \"$LD_PRELOAD\"; exit 7",
            "sh",
        ])
        .arg(dir.path())
        .output()
        .expect("running foliocache run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("data 16777216 "), "{text}");
    assert!(
        text.trim_end().ends_with("libfoliocache_preload.so"),
        "{text}"
    );
    assert_eq!(std::fs::read(dir.path().join("f")).expect("f"), b"data");
}
