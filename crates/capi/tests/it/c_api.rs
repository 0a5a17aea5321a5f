//! The C API as C uses it: each program of `tests/c/` is compiled with
//! `cc` against `include/foliocache.h` and the `libfoliocache.so` of this
//! test's profile, and run on an empty temporary directory; it must exit
//! 0. A C++ program checks that the header declares C linkage.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub(crate) const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// `libfoliocache.so` of this test's target directory and profile, built
/// once, with the link `libfoliocache.so.0` (its SONAME, which programs
/// linked against it load) beside it.
pub(crate) fn library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = test_support::build_cdylib(MANIFEST_DIR, "foliocache-capi", "libfoliocache.so");
        let soname = lib.with_file_name("libfoliocache.so.0");
        match std::fs::remove_file(&soname) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing {}: {e}", soname.display()),
        }
        std::os::unix::fs::symlink("libfoliocache.so", &soname)
            .unwrap_or_else(|e| panic!("linking {}: {e}", soname.display()));
        lib
    })
    .clone()
}

/// The directory holding [`library`].
fn library_dir() -> PathBuf {
    library()
        .parent()
        .expect("the profile directory")
        .to_path_buf()
}

use test_support::run_checked as run;

/// Compiles `source` with `compiler` and `flags` against the header and
/// the library, into `exe`.
fn compile(compiler: &str, flags: &[&str], source: &Path, exe: &Path, lib_dir: &Path) {
    run(Command::new(compiler)
        .args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-pthread", "-I"])
        .arg(Path::new(MANIFEST_DIR).join("include"))
        .arg(source)
        .arg("-L")
        .arg(lib_dir)
        .args(["-lfoliocache", "-o"])
        .arg(exe));
}

/// The compilations of each C program: plain, and as distributions build
/// packages (optimized, with glibc's fortified calls).
const FLAG_SETS: [(&str, &[&str]); 2] = [
    ("plain", &["-std=c99"]),
    ("fortified", &["-std=c99", "-O2", "-D_FORTIFY_SOURCE=2"]),
];

#[test]
fn c_programs_pass() {
    let lib_dir = library_dir();
    let sources: Vec<PathBuf> = std::fs::read_dir(Path::new(MANIFEST_DIR).join("tests/c"))
        .expect("tests/c")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    assert!(!sources.is_empty(), "no C test programs in tests/c");
    let build = tempfile::tempdir().expect("a temporary directory");
    for source in &sources {
        let stem = source.file_stem().expect("a file name");
        for (tag, flags) in FLAG_SETS {
            let exe = build.path().join(stem).with_extension(tag);
            compile("cc", flags, source, &exe, &lib_dir);
            let data = tempfile::tempdir().expect("a temporary directory");
            let out = run(Command::new(&exe)
                .arg(data.path())
                .env("LD_LIBRARY_PATH", &lib_dir));
            print!(
                "{} ({tag}): {}",
                source.display(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

#[test]
fn the_header_declares_c_linkage_for_cpp() {
    let lib_dir = library_dir();
    let build = tempfile::tempdir().expect("a temporary directory");
    let source = build.path().join("linkage.cpp");
    std::fs::write(
        &source,
        "#include \"foliocache.h\"\n\
         #include <cerrno>\n\
         int main() { return fc_size(-1) == -1 && errno == EBADF && *fc_last_error() ? 0 : 1; }\n",
    )
    .expect("writing the C++ source");
    let exe = build.path().join("linkage");
    compile("c++", &["-std=c++11"], &source, &exe, &lib_dir);
    run(Command::new(&exe).env("LD_LIBRARY_PATH", &lib_dir));
}
