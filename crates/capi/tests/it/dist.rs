//! What a distribution ships: the version the header declares, the
//! shared object's SONAME, and the pkg-config file `install.sh` installs,
//! each checked against Cargo's version of the crate.

use std::path::Path;
use std::process::Command;

use super::c_api::{library, MANIFEST_DIR};
use test_support::run_checked as run;

/// The value of `#define NAME value` in the header.
fn header_define(header: &str, name: &str) -> Option<String> {
    header.lines().find_map(|line| {
        let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
        rest.starts_with(' ').then(|| rest.trim().to_string())
    })
}

#[test]
fn the_header_version_is_cargos() {
    let header = std::fs::read_to_string(Path::new(MANIFEST_DIR).join("include/foliocache.h"))
        .expect("reading the header");
    for (name, cargo) in [
        ("FOLIOCACHE_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("FOLIOCACHE_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("FOLIOCACHE_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        assert_eq!(
            header_define(&header, name).as_deref(),
            Some(cargo),
            "{name} in include/foliocache.h"
        );
    }
}

/// A little-endian integer of `N` bytes at `at` in `elf`.
fn le<const N: usize>(elf: &[u8], at: usize) -> u64 {
    let bytes: [u8; N] = elf[at..at + N].try_into().expect("in the file");
    let mut wide = [0u8; 8];
    wide[..N].copy_from_slice(&bytes);
    u64::from_le_bytes(wide)
}

/// The `DT_SONAME` of a 64-bit little-endian ELF shared object, read from
/// its `SHT_DYNAMIC` section and the string table that section links.
fn soname(elf: &[u8]) -> Option<String> {
    const SHT_DYNAMIC: u64 = 6;
    const DT_NULL: u64 = 0;
    const DT_SONAME: u64 = 14;
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "a 64-bit little-endian ELF");
    let shoff = le::<8>(elf, 0x28) as usize;
    let shentsize = le::<2>(elf, 0x3a) as usize;
    let shnum = le::<2>(elf, 0x3c) as usize;
    let section = |i: usize| shoff + i * shentsize;
    let dynamic = (0..shnum).find(|&i| le::<4>(elf, section(i) + 4) == SHT_DYNAMIC)?;
    let (offset, size) = (
        le::<8>(elf, section(dynamic) + 0x18) as usize,
        le::<8>(elf, section(dynamic) + 0x20) as usize,
    );
    let strtab = le::<8>(
        elf,
        section(le::<4>(elf, section(dynamic) + 0x28) as usize) + 0x18,
    );
    (offset..offset + size)
        .step_by(16)
        .map(|e| (le::<8>(elf, e), le::<8>(elf, e + 8)))
        .take_while(|&(tag, _)| tag != DT_NULL)
        .find(|&(tag, _)| tag == DT_SONAME)
        .map(|(_, name)| {
            let start = (strtab + name) as usize;
            let len = elf[start..].iter().position(|&b| b == 0).expect("a NUL");
            String::from_utf8_lossy(&elf[start..start + len]).into_owned()
        })
}

#[test]
fn the_shared_object_is_libfoliocache_so_0() {
    let elf = std::fs::read(library()).expect("reading libfoliocache.so");
    assert_eq!(soname(&elf).as_deref(), Some("libfoliocache.so.0"));
}

/// The `Key: value` fields of a pkg-config file.
fn pc_field<'a>(pc: &'a str, key: &str) -> Option<&'a str> {
    pc.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// `install.sh` into a temporary prefix, then a C program built with the
/// flags `pkg-config` gives for `foliocache` and run against the
/// installed library (found through its SONAME link).
#[test]
fn install_sh_installs_what_pkg_config_finds() {
    let prefix = tempfile::tempdir().expect("a temporary directory");
    let prefix = prefix.path();
    run(Command::new(Path::new(MANIFEST_DIR).join("install.sh"))
        .arg(prefix)
        .env("LIB", library()));
    let lib = prefix.join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let pc = std::fs::read_to_string(lib.join("pkgconfig/foliocache.pc")).expect("foliocache.pc");
    assert_eq!(pc_field(&pc, "Name"), Some("foliocache"));
    assert_eq!(pc_field(&pc, "Version"), Some(version));
    assert_eq!(pc_field(&pc, "Libs"), Some("-L${libdir} -lfoliocache"));
    assert_eq!(pc_field(&pc, "Cflags"), Some("-I${includedir}"));
    assert!(
        pc.contains(&format!("prefix={}\n", prefix.display())),
        "{pc}"
    );
    assert!(!pc.contains('@'), "an unfilled placeholder: {pc}");
    for name in [
        format!("libfoliocache.so.{version}"),
        "libfoliocache.so.0".into(),
    ] {
        assert!(lib.join(&name).exists(), "{name} installed");
    }
    assert_eq!(
        std::fs::read_link(lib.join("libfoliocache.so.0")).expect("a link"),
        Path::new(&format!("libfoliocache.so.{version}"))
    );
    if let Err(e) = Command::new("pkg-config").arg("--version").output() {
        return test_support::skip_or_fail(module_path!(), format!("no pkg-config: {e}"));
    }
    let pkg_config = |arg: &str| {
        let out = run(Command::new("pkg-config")
            .args([arg, "foliocache"])
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig")));
        String::from_utf8(out.stdout).expect("UTF-8 from pkg-config")
    };
    assert_eq!(pkg_config("--modversion").trim(), version);
    let (flags, libs) = (pkg_config("--cflags"), pkg_config("--libs"));
    let build = tempfile::tempdir().expect("a temporary directory");
    let source = build.path().join("installed.c");
    std::fs::write(
        &source,
        "#include <foliocache.h>\n\
         #include <stdio.h>\n\
         #include <string.h>\n\
         int main(void) {\n\
             char want[32];\n\
             snprintf(want, sizeof want, \"%d.%d.%d\", FOLIOCACHE_VERSION_MAJOR,\n\
                      FOLIOCACHE_VERSION_MINOR, FOLIOCACHE_VERSION_PATCH);\n\
             return strcmp(fc_version(), want) != 0;\n\
         }\n",
    )
    .expect("writing the C source");
    let exe = build.path().join("installed");
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror"])
        .args(flags.split_whitespace())
        .arg(&source)
        .args(libs.split_whitespace())
        .arg("-o")
        .arg(&exe));
    run(Command::new(&exe).env("LD_LIBRARY_PATH", &lib));
}

/// `install.sh` strips the library as a package's is: the build's symbol
/// table (and its debug information, in a build made with it:
/// docs/releasing.md) is not installed; with `SPLIT_DEBUG=1` what
/// stripping drops is kept beside, linked.
#[test]
fn install_sh_strips_and_splits_the_library() {
    let prefix = tempfile::tempdir().expect("a temporary directory");
    run(Command::new(Path::new(MANIFEST_DIR).join("install.sh"))
        .arg(prefix.path())
        .env("LIB", library()));
    let version = env!("CARGO_PKG_VERSION");
    let installed = prefix
        .path()
        .join(format!("lib/libfoliocache.so.{version}"));
    let built_debug = test_support::elf_has_section(&library(), ".debug_info");
    assert!(
        test_support::elf_has_section(&library(), ".symtab"),
        "the build has its symbols"
    );
    for section in [".symtab", ".debug_info"] {
        assert!(
            !test_support::elf_has_section(&installed, section),
            "installed with {section}"
        );
    }
    // With SPLIT_DEBUG=1, what stripping drops goes beside, linked.
    let split = tempfile::tempdir().expect("a temporary directory");
    run(Command::new(Path::new(MANIFEST_DIR).join("install.sh"))
        .arg(split.path())
        .env("LIB", library())
        .env("SPLIT_DEBUG", "1"));
    let so = split.path().join(format!("lib/libfoliocache.so.{version}"));
    let debug = split
        .path()
        .join(format!("lib/debug/libfoliocache.so.{version}.debug"));
    for section in [".symtab", ".debug_info"] {
        assert!(
            !test_support::elf_has_section(&so, section),
            "split: installed with {section}"
        );
    }
    assert!(
        test_support::elf_has_section(&so, ".gnu_debuglink"),
        "split: no debuglink"
    );
    assert!(
        test_support::elf_has_section(&debug, ".symtab"),
        "split: no symbols in the debug file"
    );
    assert_eq!(
        test_support::elf_has_section(&debug, ".debug_info"),
        built_debug,
        "split: the debug file holds the build's debug information"
    );
}
