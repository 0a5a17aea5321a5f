//! The metrics server under abuse (issue 66): a thousand idle
//! connections, a 100 MB header, slow clients, and a process out of
//! descriptors. The server runs in a child process (this test binary,
//! running [`served_process`]) so that its threads, memory and
//! descriptors are its own and the tests that run beside these do not
//! move them; the tests are its clients.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use super::{HEAD_TIMEOUT, MAX_CONNECTIONS};
use crate::metrics::{register, serve};
use crate::Cache;

/// Names the data file of the served process's cache; set only for it.
const CHILD_ENV: &str = "FOLIOCACHE_METRICS_SERVED";
/// The served process's soft `RLIMIT_NOFILE`, when set.
const NOFILE_ENV: &str = "FOLIOCACHE_METRICS_NOFILE";
/// Opens each line of the served process's protocol.
const MARK: &str = "@@ ";
/// Generous: a deadline no healthy run comes near.
const PATIENCE: Duration = Duration::from_secs(60);

/// The served process, seen from a test: its address, and a line protocol
/// on its stdin and stdout (see [`served_process`]).
struct Served {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
    /// Its threads before it started serving.
    threads_before: u64,
    _data: test_support::TempPath,
}

impl Served {
    fn start(nofile: Option<u64>) -> Served {
        let data = test_support::TempPath::with_data("metrics-served", &[5u8; 64 << 10]);
        let module = module_path!().split_once("::").unwrap().1;
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            &format!("{module}::served_process"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &data.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        if let Some(n) = nofile {
            cmd.env(NOFILE_ENV, n.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut served = Served {
            child,
            stdin,
            stdout,
            addr: "127.0.0.1:0".parse().unwrap(),
            threads_before: 0,
            _data: data,
        };
        let first = served.reply();
        let (addr, threads) = first.split_once(' ').unwrap();
        served.addr = addr.parse().unwrap();
        served.threads_before = threads.parse().unwrap();
        served
    }

    /// The next protocol line (`@@ ...`), skipping the test harness's own.
    fn reply(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the served process ended");
            // The harness's `test ... ` may open the line.
            if let Some((_, r)) = line.trim_end().split_once(MARK) {
                return r.to_string();
            }
        }
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.reply()
    }

    fn number(&mut self, command: &str) -> u64 {
        let r = self.ask(command);
        r.parse().unwrap_or_else(|_| panic!("{command}: {r}"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of /proc/self/status, in its own unit (kB for memory).
fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
}

/// The process that serves for the tests above: a cache, its metrics
/// served on loopback, and commands on stdin, one a line, each answered
/// with a line `@@ ...` on stdout: `threads`, `rss` (kB), `peak` (kB, the
/// peak since the last `reset`), `reset`, `fds`, `open` (the cache opens
/// and reads its data file), `hog` (opens /dev/null until the process is
/// out of descriptors), `unhog`, `quit`.
#[test]
#[ignore = "the served process of the tests in this module, started by them"]
fn served_process() {
    let Some(data) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    if let Some(n) = std::env::var(NOFILE_ENV).ok().and_then(|n| n.parse().ok()) {
        let hard = getrlimit(Resource::Nofile).maximum;
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(n),
                maximum: hard,
            },
        )
        .unwrap();
    }
    let cache = Cache::builder().capacity(4 << 20).build().unwrap();
    let mut registry = Registry::default();
    register(&cache, &mut registry);
    let threads = status_field("Threads");
    let server = serve("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    println!("{MARK}{} {threads}", server.local_addr());
    let mut hogs = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let reply = match line.unwrap().as_str() {
            "threads" => status_field("Threads").to_string(),
            "rss" => status_field("VmRSS").to_string(),
            "peak" => status_field("VmHWM").to_string(),
            "reset" => {
                // Resets VmHWM to the present RSS (proc(5), clear_refs).
                std::fs::write("/proc/self/clear_refs", "5").unwrap();
                "ok".into()
            }
            "fds" => std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .count()
                .to_string(),
            "open" => {
                let opened = cache.open_options().read(true).open(&data);
                match opened.and_then(|f| f.read_at(&mut [0u8; 4096], 0)) {
                    Ok(4096) => "ok".into(),
                    Ok(n) => format!("short read {n}"),
                    Err(e) => format!("error {e}"),
                }
            }
            "hog" => {
                while let Ok(f) = std::fs::File::open("/dev/null") {
                    hogs.push(f);
                }
                hogs.len().to_string()
            }
            "unhog" => {
                hogs.clear();
                "ok".into()
            }
            "quit" => break,
            other => format!("unknown command {other}"),
        };
        println!("{MARK}{reply}");
    }
    drop(server);
}

/// Raises this process's soft `RLIMIT_NOFILE` to the hard limit, for the
/// clients' connections; returns it.
fn raise_nofile() -> u64 {
    let lim = getrlimit(Resource::Nofile);
    let hard = lim.maximum.unwrap_or(1 << 20);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: lim.maximum,
        },
    )
    .unwrap();
    hard
}

/// Sends `request` on a new connection and reads the answer to its end
/// (the requests are HTTP/1.0: the server closes after answering).
fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        panic!("{request:?}: {e} after {:?}", String::from_utf8_lossy(&out));
    }
    String::from_utf8(out).unwrap()
}

/// A scrape; panics unless it is answered with the metrics.
fn scrape(addr: SocketAddr) {
    let out = exchange(addr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(
        out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"),
        "{out}"
    );
    assert!(out.contains("foliocache_hits_total 0"), "{out}");
}

#[test]
fn a_thousand_idle_connections_take_no_thread_and_scrapes_go_on() {
    let hard = raise_nofile();
    let conns = 1000.min(hard.saturating_sub(200) as usize);
    let mut served = Served::start(None);
    let addr = served.addr;
    scrape(addr);
    let fds = served.number("fds");
    let mut idle = Vec::with_capacity(conns);
    while idle.len() < conns {
        for _ in 0..100.min(conns - idle.len()) {
            idle.push(TcpStream::connect(addr).unwrap());
        }
        scrape(addr);
    }
    let threads = served.number("threads");
    assert_eq!(
        threads,
        served.threads_before + 1,
        "{conns} idle connections: {threads} threads, {} before serving",
        served.threads_before
    );
    let fds_now = served.number("fds");
    assert!(
        fds_now <= fds + MAX_CONNECTIONS as u64,
        "{conns} idle connections: {fds_now} descriptors, {fds} before"
    );
    drop(idle);
    scrape(addr);
}

/// Writes a request head with a header of `size` bytes, in chunks,
/// until the server answers or closes; the answer.
fn send_big_header(addr: SocketAddr, size: usize) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut reader = s.try_clone().unwrap();
    // Reads to the end: the answer, then the close.
    let read = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    let chunk = vec![b'a'; 64 << 10];
    let mut sent = 0;
    let mut ok = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ")
        .is_ok();
    while ok && sent < size && !read.is_finished() {
        ok = s.write_all(&chunk).is_ok();
        sent += chunk.len();
    }
    if ok && sent >= size {
        let _ = s.write_all(b"\r\n\r\n");
    }
    let _ = s.shutdown(Shutdown::Write);
    read.join().unwrap()
}

#[test]
fn a_100_mb_header_is_answered_431_in_bounded_memory() {
    let mut served = Served::start(None);
    let addr = served.addr;
    scrape(addr);
    served.ask("reset");
    let rss = served.number("rss");
    let answer = send_big_header(addr, 100 << 20);
    let peak = served.number("peak");
    assert!(
        peak <= rss + 4096,
        "RSS {rss} kB before a 100 MB header, peak {peak} kB while it was sent"
    );
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "a 100 MB header answered {:?}",
        answer.lines().next()
    );
    scrape(addr);
}

#[test]
fn slow_and_silent_clients_are_cut_at_the_idle_timeout() {
    let served = Served::start(None);
    let addr = served.addr;
    let silent = TcpStream::connect(addr).unwrap();
    let slow = TcpStream::connect(addr).unwrap();
    let cut = |mut s: TcpStream| {
        std::thread::spawn(move || {
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let start = Instant::now();
            let mut buf = [0u8; 512];
            // EOF or a reset: closed (an answer would be a failure too).
            let r = s.read(&mut buf);
            (
                start.elapsed(),
                r.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned()),
            )
        })
    };
    let silent_cut = cut(silent);
    let mut writer = slow.try_clone().unwrap();
    let slow_cut = cut(slow);
    // A head that would take 120 s at a byte a second.
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: {}\r\n\r\n",
        "a".repeat(80)
    );
    for b in head.bytes() {
        if slow_cut.is_finished() || writer.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    for (what, t) in [("silent", silent_cut), ("slow", slow_cut)] {
        let (after, read) = t.join().unwrap();
        assert!(
            after < PATIENCE,
            "the {what} client was not cut in {after:?}"
        );
        if let Ok(got) = read {
            assert!(got.is_empty(), "the {what} client was answered {got:?}");
        }
    }
    scrape(addr);
}

#[test]
fn out_of_descriptors_the_cache_opens_and_the_server_accepts_again() {
    raise_nofile();
    let mut served = Served::start(Some(128));
    let addr = served.addr;
    let idle: Vec<_> = (0..300)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    scrape(addr);
    assert_eq!(
        served.ask("open"),
        "ok",
        "300 idle connections under ulimit -n 128"
    );
    // Out of descriptors for a moment: the server's accepts fail.
    let hogged = served.number("hog");
    assert!(hogged > 0);
    let mut waiting = TcpStream::connect(addr).unwrap();
    waiting.set_read_timeout(Some(PATIENCE)).unwrap();
    waiting.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(served.ask("unhog"), "ok");
    let mut out = String::new();
    waiting.read_to_string(&mut out).unwrap();
    assert!(out.contains(" 200 "), "after EMFILE: {out:?}");
    assert_eq!(served.ask("open"), "ok");
    drop(idle);
    scrape(addr);
}

/// Reads one response from a kept-alive connection: its head, and its
/// body (of its Content-Length; none for a `HEAD`).
fn response(r: &mut BufReader<TcpStream>, head_only: bool) -> (String, String) {
    let mut head = String::new();
    loop {
        let n = r.read_line(&mut head).unwrap();
        assert!(n > 0, "closed in a response's head: {head:?}");
        if head.ends_with("\r\n\r\n") {
            break;
        }
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let mut body = vec![0u8; if head_only { 0 } else { len }];
    r.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn a_kept_alive_connection_is_answered_get_head_and_errors_in_turn() {
    let server = serve("127.0.0.1:0".parse().unwrap(), Registry::default()).unwrap();
    let s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut ask = |req: &str, head_only: bool| {
        w.write_all(req.as_bytes()).unwrap();
        response(&mut r, head_only)
    };
    let (head, body) = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert_eq!(body, "# EOF\n");
    let (head, _) = ask("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Had the HEAD's answer a body, this would read it as a status line.
    let (head, _) = ask("DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let (head, _) = ask("GET /other HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[test]
fn dropping_the_server_closes_its_idle_connections_and_returns_at_once() {
    let server = serve("127.0.0.1:0".parse().unwrap(), Registry::default()).unwrap();
    let addr = server.local_addr();
    let mut open: Vec<_> = (0..10).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut partial = TcpStream::connect(addr).unwrap();
    partial.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    open.push(partial);
    // Answered after them: they were accepted before it.
    let out = exchange(addr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(out.contains(" 200 "), "{out}");
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(server);
        done.send(()).unwrap();
    });
    // Well within the head timeout, which would have closed them anyway.
    dropped
        .recv_timeout(HEAD_TIMEOUT / 2)
        .expect("dropping the server waited for its connections");
    for mut s in open {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        match s.read(&mut [0u8; 64]) {
            Ok(n) => assert_eq!(n, 0, "a connection was answered"),
            Err(e) => assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "a connection outlived the server"
            ),
        }
    }
}
