//! The loadable extension from the programs it is for: the `sqlite3`
//! shell (`.load`, a `vfs=` URI, the VFS made the default) and Debian's
//! Python (`load_extension`), each writing a database through the VFS that
//! the plain `sqlite3` then reads back.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use test_support::{run_checked, skip_or_fail};

/// The extension, built once in this test's target directory and profile.
fn extension() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        test_support::build_cdylib(
            env!("CARGO_MANIFEST_DIR"),
            "foliocache-sqlite-ext",
            "libfoliocache_sqlite_ext.so",
        )
    })
}

fn installed(program: &str, test: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        skip_or_fail(test, format!("{program} is not installed"));
    }
    found
}

/// Runs `sqlite3 -batch :memory:` with `script` on its input; its output.
fn shell(script: &str, env: &[(&str, &str)]) -> String {
    let mut child = Command::new("sqlite3")
        .args(["-batch", ":memory:"])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sqlite3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "sqlite3: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// What the plain `sqlite3` (the `unix` VFS) reads of `db`.
fn read_back(db: &Path, sql: &str) -> String {
    let out = run_checked(Command::new("sqlite3").arg(db).arg(sql));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_shell_loads_it_and_opens_a_database_through_it() {
    if !installed(
        "sqlite3",
        "the_shell_loads_it_and_opens_a_database_through_it",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shell.db");
    let out = shell(
        &format!(
            ".load {}\n.open file:{}?vfs=foliocache\n.vfsinfo\n\
             CREATE TABLE t(x); INSERT INTO t SELECT value FROM generate_series(1, 1000);\n\
             SELECT sum(x) FROM t;\n",
            extension().display(),
            db.display()
        ),
        &[],
    );
    assert!(out.contains("vfs.zName      = \"foliocache\""), "{out}");
    assert!(out.contains("500500"), "{out}");
    assert_eq!(read_back(&db, "SELECT sum(x) FROM t"), "500500");
}

#[test]
fn the_shell_makes_it_the_default_when_asked() {
    if !installed("sqlite3", "the_shell_makes_it_the_default_when_asked") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("default.db");
    let out = shell(
        &format!(
            ".load {}\n.open {}\n.vfsinfo\nCREATE TABLE t(x); INSERT INTO t VALUES (7);\n",
            extension().display(),
            db.display()
        ),
        &[
            ("FOLIOCACHE_SQLITE_DEFAULT", "1"),
            ("FOLIOCACHE_SQLITE_CAPACITY", "1.5M"),
        ],
    );
    assert!(out.contains("vfs.zName      = \"foliocache\""), "{out}");
    assert_eq!(read_back(&db, "SELECT x FROM t"), "7");
}

#[test]
fn a_bad_capacity_fails_the_load_with_its_reason() {
    if !installed("sqlite3", "a_bad_capacity_fails_the_load_with_its_reason") {
        return;
    }
    let out = Command::new("sqlite3")
        .args([
            "-batch",
            ":memory:",
            &format!(".load {}", extension().display()),
        ])
        .env("FOLIOCACHE_SQLITE_CAPACITY", "lots")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FOLIOCACHE_SQLITE_CAPACITY") && err.contains("not a size"),
        "{err}"
    );
}

#[test]
fn python_loads_it_and_writes_through_it() {
    // Debian's Python: built with loadable extensions, over the system's
    // libsqlite3 (a Python built without them cannot load any).
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        skip_or_fail(
            "python_loads_it_and_writes_through_it",
            "no /usr/bin/python3",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("python.db");
    let script = format!(
        r#"
import sqlite3
loader = sqlite3.connect(":memory:")
loader.enable_load_extension(True)
loader.load_extension({lib:?})
con = sqlite3.connect("file:{db}?vfs=foliocache", uri=True)
con.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
con.executemany("INSERT INTO t VALUES (?, ?)", [(i, "v%d" % i) for i in range(5000)])
con.commit()
print(con.execute("SELECT count(*), max(k) FROM t").fetchone())
con.close()
"#,
        lib = extension().display().to_string(),
        db = db.display()
    );
    let out = run_checked(Command::new(python).arg("-c").arg(script));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(5000, 4999)");
    assert_eq!(read_back(&db, "SELECT count(*) FROM t"), "5000");
}
