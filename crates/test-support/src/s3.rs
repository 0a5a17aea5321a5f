//! An S3-protocol server on loopback for the end-to-end tests of the
//! object-store crates (`foliocache-object-store`'s `e2e-s3` feature, the
//! mount's `s3` feature): `MOTO_SERVER`, the path of moto's
//! `moto_server` (what the test command installs, from PyPI: it honours
//! `If-Match`), or `S3S_FS`, the path of an `s3s-fs` binary (`cargo
//! install s3s-fs@0.14.1 --locked --features binary`; its GetObject
//! ignores `If-Match`). Either serves a bucket named `bucket`, reached at
//! `http://127.0.0.1:PORT` with access key `AK` and secret key `SK`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The server, killed when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Which server the environment names: (its kind, the binary).
pub fn server_named() -> Option<(&'static str, std::ffi::OsString)> {
    [("moto", "MOTO_SERVER"), ("s3s-fs", "S3S_FS")]
        .into_iter()
        .find_map(|(kind, var)| std::env::var_os(var).map(|bin| (kind, bin)))
}

/// Starts the server `kind` (`bin`) on a free loopback port, with a bucket
/// named `bucket` (s3s-fs: a directory under `root`; moto: created by a
/// PUT); the port once it accepts.
pub fn start(kind: &str, bin: &std::ffi::OsStr, root: &std::path::Path) -> (Server, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin);
    if kind == "moto" {
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    } else {
        std::fs::create_dir_all(root.join("bucket")).unwrap();
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", "AK", "--secret-key", "SK"])
            .arg(root);
    }
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {kind} ({bin:?}): {e}"));
    let server = Server(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{kind} did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    if kind == "moto" {
        create_bucket(port);
    }
    (server, port)
}

/// `PUT /bucket` (moto takes it unsigned): the bucket the test uses.
fn create_bucket(port: u16) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        "PUT /bucket HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "creating the bucket: {answer}"
    );
}
