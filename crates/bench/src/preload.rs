//! A program under the interposer (`libfoliocache_preload.so`, docs/preload.md):
//! the library found beside the `foliocache` binary and the variables it
//! reads. `foliocache run` executes such a command in its place or as its
//! guardian; the bench's `programs` scenario starts `db_bench` with one.
//! Built without the harness (the crate's `harness` feature), so that the
//! operator's binary shares it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::state_path::StateArgs;

/// The library's file name.
const LIBRARY: &str = "libfoliocache_preload.so";

/// The library's variable naming the warm-restart state file.
pub const STATE_VAR: &str = "FOLIOCACHE_PRELOAD_STATE";

/// The library's variable naming the address of its metrics.
pub const METRICS_VAR: &str = "FOLIOCACHE_PRELOAD_METRICS";

/// What runs under the interposer: the library's settings and the
/// program.
#[derive(Debug, Clone)]
pub struct Preload {
    /// The cache's memory (`None`: the library's default).
    pub capacity: Option<u64>,
    /// The directories whose files the cache serves.
    pub dirs: Vec<PathBuf>,
    /// Warm restarts: the state file.
    pub state: StateArgs,
    /// Where the program's process serves its metrics.
    pub metrics: Option<std::net::SocketAddr>,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// Where the library is looked for, relative to the directory of the
/// `foliocache` binary: beside it (a development build: `cargo build
/// --release` puts both in target/release), then where scripts/install.sh
/// puts it (`PREFIX/bin/foliocache`, `PREFIX/lib/foliocache/`).
const SEARCH: [&str; 2] = ["", "../lib/foliocache"];

/// `libfoliocache_preload.so` for the binary `exe` (see `SEARCH`), or an
/// error saying where it was looked for and what to build.
pub fn library_for(exe: &Path) -> Result<PathBuf> {
    let dir = exe
        .parent()
        .context("the foliocache binary has no directory")?;
    let candidates: Vec<PathBuf> = SEARCH.iter().map(|d| dir.join(d).join(LIBRARY)).collect();
    if let Some(lib) = candidates.iter().find(|l| l.is_file()) {
        return Ok(lib.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    bail!(
        "{LIBRARY} is in none of {}: build it with `cargo build --release` at the \
         workspace's root (or `-p foliocache-preload` in the profile this binary was \
         built with), or install both with scripts/install.sh",
        looked.join(", ")
    )
}

/// The variables the program runs with: `LD_PRELOAD` with the library
/// first (before any the environment had), the directories (canonical,
/// `:`-separated), the capacity and the warm-restart state file.
fn environment(args: &Preload, lib: &Path) -> Result<Vec<(&'static str, OsString)>> {
    let mut preload = OsString::from(lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut dirs = OsString::new();
    let mut canonical_dirs = Vec::new();
    for (i, dir) in args.dirs.iter().enumerate() {
        let canonical = dir
            .canonicalize()
            .with_context(|| format!("--dir {}", dir.display()))?;
        if !canonical.is_dir() {
            bail!("--dir {}: not a directory", dir.display());
        }
        if canonical.as_os_str().as_encoded_bytes().contains(&b':') {
            bail!(
                "--dir {}: a path with `:` cannot be passed on",
                canonical.display()
            );
        }
        if i > 0 {
            dirs.push(":");
        }
        dirs.push(&canonical);
        canonical_dirs.push(canonical);
    }
    let mut env = vec![("LD_PRELOAD", preload), ("FOLIOCACHE_PRELOAD_DIRS", dirs)];
    if let Some(bytes) = args.capacity {
        env.push(("FOLIOCACHE_PRELOAD_CAPACITY", bytes.to_string().into()));
    }
    if let Some(state) = args.state.resolve(&canonical_dirs)? {
        env.push((STATE_VAR, state.into()));
    }
    if let Some(addr) = args.metrics {
        env.push((METRICS_VAR, addr.to_string().into()));
    }
    Ok(env)
}

/// A command that runs `args.command` under the library beside this
/// binary, with the library's variables set (and no capacity inherited
/// from the environment when `args` gives none); not started. The bench's
/// `programs` scenario starts `db_bench` with it, `foliocache run` executes
/// it in its place.
///
/// # Errors
/// No library beside this binary (what to build), a directory that
/// cannot be passed on, or no program.
pub fn preloaded(args: &Preload) -> Result<Command> {
    let exe = std::env::current_exe().context("locating the foliocache binary")?;
    let lib = library_for(&exe)?;
    let env = environment(args, &lib)?;
    let (program, rest) = args.command.split_first().context("no program to run")?;
    let mut cmd = Command::new(program);
    cmd.args(rest).envs(env.iter().cloned());
    if args.capacity.is_none() {
        cmd.env_remove("FOLIOCACHE_PRELOAD_CAPACITY");
    }
    // What the options leave unset is not inherited either.
    for var in [STATE_VAR, METRICS_VAR] {
        if env.iter().all(|(n, _)| *n != var) {
            cmd.env_remove(var);
        }
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dirs: Vec<PathBuf>, capacity: Option<u64>) -> Preload {
        Preload {
            capacity,
            dirs,
            state: StateArgs {
                state: None,
                no_state: true,
            },
            metrics: None,
            command: vec!["true".into()],
        }
    }

    #[test]
    fn the_library_is_found_beside_the_binary_or_where_install_puts_it() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let exe = bin.join("foliocache");
        std::fs::create_dir_all(&bin).unwrap();
        let e = library_for(&exe).unwrap_err().to_string();
        assert!(
            e.contains("cargo build --release") && e.contains("scripts/install.sh"),
            "{e}"
        );
        // Installed: PREFIX/bin/foliocache, PREFIX/lib/foliocache/.
        let installed = dir.path().join("lib/foliocache");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::write(installed.join(LIBRARY), b"").unwrap();
        let found = library_for(&exe).unwrap();
        assert_eq!(found.canonicalize().unwrap(), installed.join(LIBRARY));
        // A development build: beside the binary, found first.
        std::fs::write(bin.join(LIBRARY), b"").unwrap();
        assert_eq!(library_for(&exe).unwrap(), bin.join(LIBRARY));
    }

    #[test]
    fn the_environment_names_canonical_dirs_and_the_capacity() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let relative = a.path().join("..").join(a.path().file_name().unwrap());
        let env = environment(
            &args(vec![relative, b.path().into()], Some(1 << 20)),
            Path::new("/lib/x.so"),
        )
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert!(get("LD_PRELOAD")
            .unwrap()
            .to_string_lossy()
            .starts_with("/lib/x.so"));
        let want = format!(
            "{}:{}",
            a.path().canonicalize().unwrap().display(),
            b.path().canonicalize().unwrap().display()
        );
        assert_eq!(
            get("FOLIOCACHE_PRELOAD_DIRS").unwrap(),
            OsString::from(want)
        );
        assert_eq!(get("FOLIOCACHE_PRELOAD_CAPACITY").unwrap(), "1048576");
        let env = environment(&args(vec![b.path().into()], None), Path::new("/x.so")).unwrap();
        assert!(env.iter().all(|(n, _)| *n != "FOLIOCACHE_PRELOAD_CAPACITY"));
    }

    #[test]
    fn the_state_file_is_passed_on_unless_turned_off() {
        let a = tempfile::tempdir().unwrap();
        let mut run = args(vec![a.path().into()], None);
        let env = environment(&run, Path::new("/x.so")).unwrap();
        assert!(env.iter().all(|(n, _)| *n != STATE_VAR), "--no-state");
        run.state = StateArgs {
            state: Some(a.path().join("s.state")),
            no_state: false,
        };
        let env = environment(&run, Path::new("/x.so")).unwrap();
        let state = env.iter().find(|(n, _)| *n == STATE_VAR).map(|(_, v)| v);
        assert_eq!(state, Some(&a.path().join("s.state").into_os_string()));
    }

    #[test]
    fn a_missing_or_plain_file_dir_is_an_error() {
        let a = tempfile::tempdir().unwrap();
        let file = a.path().join("f");
        std::fs::write(&file, b"").unwrap();
        for bad in [a.path().join("missing"), file] {
            let e = environment(&args(vec![bad.clone()], None), Path::new("/x.so")).unwrap_err();
            assert!(
                format!("{e:#}").contains(&bad.display().to_string()),
                "{e:#}"
            );
        }
    }
}
