//! `foliocache mount --object-store URL MOUNTPOINT` as a user runs it: a
//! directory of objects (`file://`) mounted read-only by the built
//! binary, read by real programs (`cat`, `cp -r`), its figures scraped,
//! writes refused, and a second mount over the same disk tier serving
//! what the first left there. Skipped where FUSE is missing, unless
//! `CI=true`.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};

use crate::mount::{fuse_dirs, http_get, is_mounted, spawn_mounted, stat_cmd, stop, Dirs};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// Starts `foliocache mount --object-store file://BACKING MNT
/// --foreground` with `extra` options and waits for it to be up.
fn start(d: &Dirs, extra: &[&str]) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("mount")
        .arg("--object-store")
        .arg(format!("file://{}", d.backing.display()))
        .arg(&d.mnt)
        .arg("--foreground")
        .args(extra);
    spawn_mounted(&mut cmd, &d.mnt)
}

/// The sample of `name` with `labels` (`{tier="disk"}`, or empty) in
/// Prometheus text, 0 where absent.
fn sample(text: &str, name: &str, labels: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(labels)?
                .strip_prefix(' ')
        })
        .map_or(0, |v| v.parse().expect("an integer sample"))
}

/// The output of `program args`, which must succeed.
fn run(program: &str, args: &[&Path]) -> Vec<u8> {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn an_object_store_mounted_read_only_restarts_warm_from_its_disk_tier() {
    let Some(d) = fuse_dirs("an_object_store_mounted_read_only_restarts_warm_from_its_disk_tier")
    else {
        return;
    };
    let big: Vec<u8> = (0..12_000_000u32).map(|i| (i ^ (i >> 11)) as u8).collect();
    fs::create_dir_all(d.backing.join("logs/2026")).expect("mkdir");
    fs::write(d.backing.join("big"), &big).expect("write");
    fs::write(d.backing.join("logs/2026/a.log"), b"one\ntwo\n").expect("write");
    let tier = d.backing.parent().expect("tmp").join("tier");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let opts = [
        "--capacity",
        "4M",
        "--disk-tier",
        tier.to_str().expect("utf-8"),
        "--disk-tier-size",
        "64M",
        "--metrics",
        &addr,
        // Every pass a request to the server (the kernel's pages would
        // serve the second and third: nothing missed, nothing admitted).
        "--kernel-cache",
        "off",
    ];

    let mut child = start(&d, &opts);
    // Three passes of a file three times the memory: the second and
    // third miss in memory and admit its chunks to the disk tier.
    for _ in 0..3 {
        assert!(run("cat", &[&d.mnt.join("big")]) == big, "big's bytes");
    }
    let copy = d.backing.parent().expect("tmp").join("copy");
    run("cp", &[Path::new("-r"), &d.mnt.join("logs"), &copy]);
    assert_eq!(
        fs::read(copy.join("2026/a.log")).expect("copied"),
        b"one\ntwo\n"
    );
    let (status, first) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        sample(&first, "foliocache_object_store_disk_writes_total", "") > 0,
        "{first}"
    );
    assert_eq!(
        sample(&first, "foliocache_capacity_bytes", ""),
        4 << 20,
        "{first}"
    );
    // Read-only: a write is refused, the objects untouched.
    for r in [
        fs::write(d.mnt.join("big"), b"x"),
        fs::write(d.mnt.join("new"), b"x"),
        fs::remove_file(d.mnt.join("logs/2026/a.log")),
    ] {
        assert_eq!(r.expect_err("read-only").raw_os_error(), Some(libc::EROFS));
    }
    // `foliocache stat`: the cache's figures and the store's; no
    // figures per file on a read-only mount.
    let (code, text, err) = stat_cmd(&[&d.mnt]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains("object store file://") && text.contains("disk tier:"),
        "{text}"
    );
    // The reads as the store counts them: not the inner cache's ratio,
    // which counts each byte a GET brought as a hit when copied out.
    assert!(
        text.contains("not in memory (hit ratio") && text.contains("chunks from the disk tier"),
        "{text}"
    );
    assert!(!text.contains("backing reads"), "{text}");
    let (code, _, err) = stat_cmd(&[&d.mnt, &d.mnt.join("big")]);
    assert!(code != Some(0) && err.contains("read-only mount"), "{err}");
    stop(&mut child);
    assert!(!is_mounted(&d.mnt));

    // A new mount over the same tier: the bytes come from disk, a few
    // GETs (the chunks the tier did not admit) at most.
    let mut child = start(&d, &opts);
    assert!(
        run("cat", &[&d.mnt.join("big")]) == big,
        "big's bytes after the restart"
    );
    let (_, second) = http_get(&addr, "/metrics");
    let disk_hits = sample(
        &second,
        "foliocache_object_store_hits_total",
        "{tier=\"disk\"}",
    );
    let gets = sample(&second, "foliocache_object_store_remote_gets_total", "");
    let first_gets = sample(&first, "foliocache_object_store_remote_gets_total", "");
    assert!(disk_hits > 0, "{second}");
    assert!(
        gets * 4 < first_gets,
        "GETs after the restart {gets}, before {first_gets}"
    );
    stop(&mut child);
}

#[test]
fn a_mount_of_an_object_store_refuses_what_is_a_directorys() {
    let d = crate::mount::dirs();
    let url = format!("file://{}", d.backing.display());
    let cases: [(&[&str], &str); 5] = [
        (&["BACKING"], "give no BACKING_DIR"),
        (&["--cache", "x"], "--cache"),
        (&["--state", "/tmp/s", "--capacity", "4M"], "--state"),
        (&["--dontcache", "--capacity", "4M"], "--dontcache"),
        (
            &["--capacity", "4M", "--object-store-missing"],
            "unexpected argument",
        ),
    ];
    for (extra, says) in cases {
        let mut cmd = Command::new(BIN);
        cmd.arg("mount").arg("--object-store").arg(&url);
        for a in extra {
            match *a {
                "BACKING" => cmd.arg(&d.backing).arg(&d.mnt).args(["--capacity", "4M"]),
                a => cmd.arg(a),
            };
        }
        if !extra.contains(&"BACKING") {
            cmd.arg(&d.mnt);
        }
        let out = cmd.arg("--foreground").output().expect("mount");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{extra:?}: {err}"
        );
    }
    let refused = |args: &[&std::ffi::OsStr], says: &str| {
        let out = Command::new(BIN).args(args).output().expect("mount");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let (b, m) = (d.backing.as_os_str(), d.mnt.as_os_str());
    refused(
        &[
            os("mount"),
            os("--metadata-ttl"),
            os("1"),
            b,
            m,
            os("--capacity"),
            os("4M"),
        ],
        "--object-store",
    );
    // The usage names the mount point as such, not as a BACKING_DIR.
    refused(
        &[
            os("mount"),
            os("--object-store"),
            std::ffi::OsStr::new(&url),
        ],
        "--object-store <URL> --capacity <SIZE> <MOUNTPOINT>",
    );
    // memory:// would mount an empty store of the server's own.
    refused(
        &[
            os("mount"),
            os("--object-store"),
            os("memory:///"),
            m,
            os("--capacity"),
            os("4M"),
            os("--foreground"),
        ],
        "nothing to mount",
    );
    assert!(!is_mounted(&d.mnt));
}

/// `foliocache mount --object-store s3://...` from the default build,
/// against an S3-protocol server on loopback (`test_support::s3`), its
/// keys and region read from the AWS profile's files.
mod s3 {
    use super::*;
    use object_store::path::Path as Key;
    use object_store::ObjectStoreExt;
    use test_support::s3::{server_named, start};

    #[test]
    fn a_bucket_is_mounted_from_the_default_build() {
        let test = "a_bucket_is_mounted_from_the_default_build";
        let Some(d) = fuse_dirs(test) else {
            return;
        };
        let Some((kind, bin)) = server_named() else {
            test_support::skip_or_fail(test, "neither MOTO_SERVER nor S3S_FS names an S3 server");
            return;
        };
        let root = d.backing.parent().expect("tmp").join("s3");
        fs::create_dir(&root).expect("mkdir");
        let (_server, port) = start(kind, &bin, &root);
        let endpoint = format!("http://127.0.0.1:{port}");
        let config = [
            ("aws_endpoint", endpoint.clone()),
            ("aws_allow_http", "true".into()),
            ("aws_region", "us-east-1".into()),
            ("aws_access_key_id", "AK".into()),
            ("aws_secret_access_key", "SK".into()),
        ]
        .map(|(k, v)| (k.to_string(), v));
        let (client, _) = foliocache_fuse::store_for_url("s3://bucket", config).expect("client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i ^ (i >> 9)) as u8).collect();
        for (key, data) in [("pre/big", big.clone()), ("pre/d/a#1", b"hash".to_vec())] {
            runtime
                .block_on(client.put(&Key::parse(key).expect("a key"), data.into()))
                .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        }
        // Keys and region from the profile's files; only plain HTTP from
        // the environment.
        let aws = d.backing.parent().expect("tmp").join("aws");
        fs::create_dir(&aws).expect("mkdir");
        fs::write(
            aws.join("credentials"),
            "[test]\naws_access_key_id = AK\naws_secret_access_key = SK\n",
        )
        .expect("credentials");
        fs::write(
            aws.join("config"),
            format!("[profile test]\nregion = us-east-1\nendpoint_url = {endpoint}\n"),
        )
        .expect("config");
        let mut cmd = Command::new(BIN);
        cmd.args(["mount", "--object-store", "s3://bucket/pre"])
            .arg(&d.mnt)
            .args(["--capacity", "8M", "--foreground"])
            .env("AWS_PROFILE", "test")
            .env("AWS_SHARED_CREDENTIALS_FILE", aws.join("credentials"))
            .env("AWS_CONFIG_FILE", aws.join("config"))
            .env("AWS_ALLOW_HTTP", "true");
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
            if !["AWS_PROFILE", "AWS_ALLOW_HTTP"].contains(&k.as_str()) && !k.ends_with("_FILE") {
                cmd.env_remove(k);
            }
        }
        let mut child = spawn_mounted(&mut cmd, &d.mnt);
        assert!(run("cat", &[&d.mnt.join("big")]) == big, "big's bytes");
        // S3 serves a key with `#` (only file:// hides NAME#DIGITS).
        assert_eq!(fs::read(d.mnt.join("d/a#1")).expect("a#1"), b"hash");
        let (code, text, err) = stat_cmd(&[&d.mnt]);
        assert_eq!(code, Some(0), "{text}{err}");
        assert!(text.contains("object store s3://bucket/pre"), "{text}");
        stop(&mut child);
        assert!(!is_mounted(&d.mnt));
    }
}
