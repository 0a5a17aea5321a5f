//! Named caches (`SharedCache::host`, `SharedCache::attach_named`): a
//! process attaches by name and shares the host's pages; the host passes
//! the memory file only to its own user, serves root and its group's
//! members as members (`member.rs`), and tells the others why; a name
//! served already is refused, a stale socket replaced; a client neither
//! hangs on a peer that never reads nor trusts a host that answers
//! wrongly.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};

use foliocache::SharedCache;
use test_support::TempPath;

use super::{fork, open, wait};

fn socket(dir: &tempfile::TempDir) -> String {
    dir.path().join("cache.sock").to_str().unwrap().to_owned()
}

/// Whether the test runs as root (the credential tests change a child's
/// user); said once when not.
pub(super) fn root(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("{test}: skipped, needs root to run a child as another user");
    }
    root
}

#[test]
fn a_hosted_cache_is_attached_by_name_and_shares_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let name = socket(&dir);
    let t = TempPath::new("shared-named");
    let cache = SharedCache::new(64 * 4096).unwrap();
    let host = cache.host(&name, None).unwrap();
    assert_eq!(host.path().to_str(), Some(name.as_str()));
    let mode = std::fs::metadata(host.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let f = open(&cache, &t.path, false);
    f.write_at(b"written by the host, not yet on disk", 0)
        .unwrap();
    // Another process attaches by name and reads the host's unsaved bytes.
    let path = t.path.clone();
    let child = fork(move || {
        let other = SharedCache::attach_named(&name).unwrap();
        let g = open(&other, &path, false);
        let mut buf = [0; 36];
        g.read_at(&mut buf, 0).unwrap() == 36
            && &buf == b"written by the host, not yet on disk"
            && g.write_at(b"WRITTEN", 0).is_ok()
    });
    assert_eq!(wait(child), 0);
    let mut buf = [0; 7];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"WRITTEN");
    assert_eq!(
        std::fs::metadata(&t.path).unwrap().len(),
        0,
        "nothing written back yet"
    );
    // A second host under the name is refused while the first answers.
    let again = SharedCache::new(4096).unwrap();
    let e = again.host(host.path().to_str().unwrap(), None).unwrap_err();
    assert!(e.to_string().contains("served"), "{e}");
    // Gone with its host; the cache lives on in its processes.
    let sock = host.path().to_owned();
    drop(host);
    assert!(!sock.exists());
    let e = SharedCache::attach_named(sock.to_str().unwrap()).unwrap_err();
    assert!(e.to_string().contains("cache serve"), "{e}");
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"WRITTEN");
}

#[test]
fn a_stale_socket_is_replaced_and_bad_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let name = socket(&dir);
    // A host that died leaves its socket; nothing answers it.
    drop(UnixListener::bind(&name).unwrap());
    let cache = SharedCache::new(4096).unwrap();
    let host = cache.host(&name, None).unwrap();
    assert!(SharedCache::attach_named(&name).is_ok());
    drop(host);
    // Not a socket: left alone.
    std::fs::write(&name, b"data").unwrap();
    let e = cache.host(&name, None).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&name).unwrap(), b"data");
    for bad in ["", ".hidden", "a b", "x".repeat(65).as_str(), "dir/"] {
        let e = SharedCache::socket_path(bad).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}: {e}");
    }
    let p = SharedCache::socket_path("pg-main_1.x").unwrap();
    assert!(p.ends_with("pg-main_1.x"), "{}", p.display());
}

#[test]
fn a_stranger_is_refused_with_a_reason_and_a_member_never_given_the_memory_file() {
    if !root("named: credentials") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let name = socket(&dir);
    let cache = SharedCache::new(16 * 4096).unwrap();
    let group = 43_210;
    let host = cache.host(&name, Some(group)).unwrap();
    let meta = std::fs::metadata(host.path()).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), group);
    let memfd = rustix::fs::fstat(cache.memory_file()).unwrap();
    // No process of another user maps the cache (a member included).
    assert_eq!(memfd.st_mode & 0o777, 0o600);
    // The socket's mode is the first gate; here it is opened wide so that
    // the host's own check is what refuses.
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let as_user = |groups: &'static [libc::gid_t], name: String| {
        fork(move || {
            // SAFETY: plain system calls changing this child's credentials.
            unsafe {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(65_534) != 0
                    || libc::setuid(65_534) != 0
                {
                    return false;
                }
            }
            match SharedCache::attach_named(&name) {
                Ok(_) => false,
                Err(e) if groups.contains(&43_210) => SharedCache::member_only(&e),
                Err(e) => {
                    e.kind() == std::io::ErrorKind::PermissionDenied
                        && !SharedCache::member_only(&e)
                        && e.to_string().contains("uid 65534 is not the cache's owner")
                }
            }
        })
    };
    assert_eq!(wait(as_user(&[], name.clone())), 0, "a stranger refused");
    assert_eq!(
        wait(as_user(&[43_210], name.clone())),
        0,
        "a member, unmapped"
    );
    drop(host);
}

#[test]
fn a_peer_that_never_reads_holds_no_one_up_and_a_wrong_host_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let name = socket(&dir);
    let cache = SharedCache::new(4096).unwrap();
    let host = cache.host(&name, None).unwrap();
    // Peers that connect and never read, nor close.
    let idle: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&name).unwrap())
        .collect();
    assert!(SharedCache::attach_named(&name).is_ok());
    drop(idle);
    drop(host);
    // A "host" answering with a descriptor that is no cache, with
    // several, with none, with nothing: each an error, none a cache.
    let answers: [(&[u8], usize); 4] = [(b"ok\n", 1), (b"ok\n", 3), (b"ok\n", 0), (b"", 0)];
    for (said, fds) in answers {
        let listener = UnixListener::bind(&name).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let null = std::fs::File::open("/dev/null").unwrap();
            let fds: Vec<_> = (0..fds).map(|_| std::os::fd::AsFd::as_fd(&null)).collect();
            if fds.is_empty() {
                conn.write_all(said).unwrap();
            } else {
                let mut space =
                    [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
                let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
                assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
                rustix::net::sendmsg(
                    &conn,
                    &[std::io::IoSlice::new(said)],
                    &mut control,
                    rustix::net::SendFlags::empty(),
                )
                .unwrap();
            }
        });
        let e = SharedCache::attach_named(&name).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
            ) || e.to_string().contains("not sealed"),
            "{said:?} with {fds} descriptors: {e}"
        );
        server.join().unwrap();
        std::fs::remove_file(&name).unwrap();
    }
}
