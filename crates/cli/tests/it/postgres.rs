//! PostgreSQL started as servers are: `foliocache run -- pg_ctl start`
//! (pg_ctl forks the server into the background and exits), pgbench's
//! clients and a client counting its acknowledged commits, then
//! `kill -9` of the server: the next start finds every acknowledged
//! commit, and each launcher lives until its server has stopped.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use test_support::skip_or_fail;

use crate::launch::build_library;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");
const TEST: &str = "a_killed_server_keeps_every_acknowledged_commit";

/// Debian's PostgreSQL programs (`/usr/lib/postgresql/VERSION/bin`, the
/// newest), if installed.
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|b| b.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// Where the test runs PostgreSQL, and as whom: PostgreSQL refuses to
/// run as root, so as root the programs run as the package's `postgres`
/// user, from a directory it can reach with the `foliocache` binary and
/// its library linked into it.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    foliocache: PathBuf,
    user: Option<&'static str>,
}

impl Cluster {
    /// A program of PostgreSQL's (or any path) as the cluster's user.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn pg(&self, program: &str) -> Command {
        let mut c = self.command(self.bin.join(program));
        if ["psql", "pgbench", "pg_isready"].contains(&program) {
            c.arg("-h").arg(&self.dir);
        }
        c
    }

    /// `foliocache run --no-state --dir DIR -- pg_ctl start -w`: the
    /// launcher, left running once pg_ctl has returned. Returns once
    /// pg_ctl said "server started" (it saw the server ready and exits),
    /// not merely once the server answers: a server stopped while pg_ctl
    /// still waits (it reads `postmaster.pid` every 100 ms) is one that
    /// died before it saw it ready, and pg_ctl then says "could not start
    /// server" and exits 1, on ext4 as under the launcher.
    fn start(&self) -> Child {
        let err = std::fs::File::create(self.dir.join("launcher.err")).expect("stderr file");
        let out = std::fs::File::create(self.dir.join("launcher.out")).expect("stdout file");
        let options = format!(
            "-c listen_addresses= -c unix_socket_directories={}",
            self.dir.display()
        );
        let mut launcher = self
            .command(&self.foliocache)
            .args(["run", "--no-state", "--dir"])
            .arg(&self.dir)
            .arg("--")
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-o", &options, "start"])
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("starting foliocache run");
        let since = Instant::now();
        let started = || {
            std::fs::read_to_string(self.dir.join("launcher.out"))
                .is_ok_and(|out| out.contains("server started"))
        };
        while !started() {
            if launcher.try_wait().expect("try_wait").is_some()
                || since.elapsed() > Duration::from_secs(60)
            {
                launcher.kill().ok();
                panic!("the server did not start: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            self.pg("pg_isready")
                .arg("-q")
                .status()
                .expect("pg_isready")
                .success(),
            "pg_ctl said the server started, pg_isready not: {}",
            self.log()
        );
        launcher
    }

    /// SQL's one-line answer (`psql -At -c`).
    fn query(&self, sql: &str) -> String {
        let out = self
            .pg("psql")
            .args(["-X", "-At", "-c", sql, "postgres"])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The server's log and the launcher's stderr, for a failure.
    fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!(
            "--- log\n{}\n--- launcher\n{}{}",
            read("log"),
            read("launcher.out"),
            read("launcher.err")
        )
    }

    /// The postmaster's pid (`postmaster.pid`'s first line).
    fn postmaster(&self) -> i32 {
        let text = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).expect("pid file");
        text.lines()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("a pid")
    }
}

/// Waits for the launcher to end (a minute at most: then it is killed
/// and the test fails), and checks it exited 0 with nothing of ours on
/// stderr.
fn ended(cluster: &Cluster, mut launcher: Child, what: &str) {
    let since = Instant::now();
    loop {
        if let Some(status) = launcher.try_wait().expect("try_wait") {
            assert!(
                status.success(),
                "{what}: the launcher: {status}\n{}",
                cluster.log()
            );
            // pg_ctl's own lines ("another server might be running",
            // after the kill, as on ext4) may be there; none of ours.
            let err = std::fs::read_to_string(cluster.dir.join("launcher.err")).unwrap_or_default();
            assert!(
                !err.contains("foliocache"),
                "{what}: the launcher's stderr: {err}"
            );
            return;
        }
        if since.elapsed() > Duration::from_secs(60) {
            launcher.kill().ok();
            panic!("{what}: the launcher did not end\n{}", cluster.log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The story: `foliocache run -- pg_ctl start` returned at once, and the
/// launcher (the guardian and the group's flusher) ended with pg_ctl,
/// leaving the server serving from the group's cache with nothing to
/// write back a killed process's pages. Now: the server is started under
/// `run` (pg_ctl returns, the launcher stays), pgbench runs TPC-B
/// clients, and a client inserts numbered rows one commit each, counting
/// the commits acknowledged; after 1,000 the postmaster is sent SIGKILL.
/// The launcher ends once the server's last process has; the next start
/// (under `run` again, crash recovery from the WAL) finds every
/// acknowledged row; `pg_ctl stop` then ends the second launcher, which
/// had lived until then.
///
/// (The test once failed with pg_ctl's "could not start server" after the
/// second start, the server up: it went on to stop the server as soon as
/// the server answered, while `pg_ctl start -w` was still between two of
/// its looks at `postmaster.pid`; pg_ctl then found its server gone and
/// said it could not start it. It now waits for pg_ctl's "server
/// started".)
#[test]
fn a_killed_server_keeps_every_acknowledged_commit() {
    let Some(bin) = postgres_bin() else {
        skip_or_fail(TEST, "PostgreSQL (Debian's postgresql) is not installed");
        return;
    };
    build_library();
    let top = tempfile::tempdir().expect("tempdir");
    let Some(cluster) = cluster(bin, top.path()) else {
        return;
    };
    let init = cluster
        .pg("initdb")
        .arg("-D")
        .arg(cluster.dir.join("data"))
        .args(["-A", "trust"])
        .output()
        .expect("initdb");
    assert!(
        init.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&init.stderr)
    );

    let mut launcher = cluster.start();
    cluster.query("create table acks (id int primary key)");
    let pgbench = cluster
        .pg("pgbench")
        .args(["-i", "-q", "-s", "1", "postgres"])
        .output()
        .expect("pgbench -i");
    assert!(
        pgbench.status.success(),
        "{}",
        String::from_utf8_lossy(&pgbench.stderr)
    );
    let mut load = cluster
        .pg("pgbench")
        .args(["-c", "2", "-j", "2", "-T", "600", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pgbench");
    assert!(
        launcher.try_wait().expect("try_wait").is_none(),
        "the launcher ended while its server served\n{}",
        cluster.log()
    );
    let acked = insert_until_killed(&cluster, 1000);
    ended(&cluster, launcher, "after the kill");
    load.kill().ok();
    load.wait().expect("pgbench");

    let mut launcher = cluster.start();
    let kept = cluster.query(&format!("select count(*) from acks where id <= {acked}"));
    assert_eq!(
        kept,
        acked.to_string(),
        "acknowledged rows after the restart\n{}",
        cluster.log()
    );
    assert!(
        launcher.try_wait().expect("try_wait").is_none(),
        "the launcher ended before its server stopped\n{}",
        cluster.log()
    );
    let stop = cluster
        .pg("pg_ctl")
        .arg("-D")
        .arg(cluster.dir.join("data"))
        .args(["-w", "stop"])
        .output()
        .expect("pg_ctl stop");
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    ended(&cluster, launcher, "after pg_ctl stop");
}

/// The cluster's directory in `top`, reachable by PostgreSQL's user;
/// `None` (after [`skip_or_fail`]) where that user is missing.
fn cluster(bin: PathBuf, top: &Path) -> Option<Cluster> {
    use std::os::unix::fs::PermissionsExt;
    let dir = top.join("pg");
    std::fs::create_dir(&dir).expect("mkdir");
    let exe = Path::new(BIN);
    let lib = exe.with_file_name("libfoliocache_preload.so");
    let binaries = top.join("bin");
    std::fs::create_dir(&binaries).expect("mkdir");
    for from in [exe, lib.as_path()] {
        let to = binaries.join(from.file_name().expect("a name"));
        if std::fs::hard_link(from, &to).is_err() {
            std::fs::copy(from, &to).expect("copying the binary");
        }
    }
    let mut cluster = Cluster {
        bin,
        dir,
        foliocache: binaries.join("foliocache"),
        user: None,
    };
    if nix::unistd::geteuid().is_root() {
        let Ok(Some(user)) = nix::unistd::User::from_name("postgres") else {
            skip_or_fail(TEST, "running as root, and there is no postgres user");
            return None;
        };
        for d in [top, binaries.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        std::os::unix::fs::chown(
            &cluster.dir,
            Some(user.uid.as_raw()),
            Some(user.gid.as_raw()),
        )
        .expect("chown");
        cluster.user = Some("postgres");
    }
    Some(cluster)
}

/// One `psql` session inserting rows 1, 2, ... one commit each, its
/// acknowledgements ("INSERT 0 1") counted as they come; once `before`
/// have come, the postmaster is sent SIGKILL. Returns the rows
/// acknowledged (the session's last ones may be, up to the kill).
fn insert_until_killed(cluster: &Cluster, before: u64) -> u64 {
    let mut psql = cluster
        .pg("psql")
        .args(["-X", "postgres"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    let mut stdin = psql.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        for id in 1..=1_000_000u64 {
            if writeln!(stdin, "insert into acks values ({id});").is_err() {
                return;
            }
        }
    });
    let mut acked = 0u64;
    let mut killed = false;
    for line in BufReader::new(psql.stdout.take().expect("stdout")).lines() {
        let Ok(line) = line else { break };
        if line == "INSERT 0 1" {
            acked += 1;
        }
        if acked == before && !killed {
            kill(Pid::from_raw(cluster.postmaster()), Signal::SIGKILL).expect("kill -9");
            killed = true;
        }
    }
    psql.kill().ok();
    psql.wait().expect("psql");
    feeder.join().expect("the feeder");
    assert!(killed, "psql stopped after {acked} rows\n{}", cluster.log());
    acked
}
