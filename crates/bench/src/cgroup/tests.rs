use super::*;

const MOUNTS: &str = "\
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
";

#[test]
fn v1_path_is_the_memory_line() {
    let own = "9:name=systemd:/\n4:memory:/a/b\n0::/\n";
    // The directory does not exist here: the error names it.
    let e = probe_v1(MOUNTS, own).unwrap_err();
    assert!(e.contains("/sys/fs/cgroup/memory/a/b"), "{e}");
    let e = probe_v1("cgroup /x cgroup rw,cpu 0 0\n", own).unwrap_err();
    assert_eq!(e, "no memory controller mounted");
    let e = probe_v1(MOUNTS, "0::/\n").unwrap_err();
    assert_eq!(e, "this process has no memory cgroup");
}

#[test]
fn v2_needs_a_mount_and_a_path() {
    assert_eq!(probe_v2("", "0::/\n").unwrap_err(), "not mounted");
    assert_eq!(
        probe_v2(MOUNTS, "4:memory:/a\n").unwrap_err(),
        "this process has no cgroup v2 path"
    );
}

#[test]
fn join_keeps_the_hierarchy_path() {
    assert_eq!(
        join(Path::new("/sys/fs/cgroup/memory"), "/a/b\n"),
        PathBuf::from("/sys/fs/cgroup/memory/a/b")
    );
    assert_eq!(
        join(Path::new("/sys/fs/cgroup"), "/"),
        PathBuf::from("/sys/fs/cgroup/")
    );
}

/// An available cgroup's fields ([`Availability::fields`]).
fn fields(a: &Availability) -> (Version, PathBuf, PathBuf, bool) {
    a.fields()
        .unwrap_or_else(|why| panic!("unavailable: {why}"))
}

/// A fake cgroup v2 hierarchy in a temporary directory: the mount
/// line for it, and a cgroup `rel` with `controllers` available,
/// `subtree` enabled below it and `procs` in it.
fn fake_v2(root: &Path, rel: &str, subtree: &str, procs: &str) -> String {
    let dir = root.join(rel);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    fs::write(dir.join("cgroup.subtree_control"), subtree).unwrap();
    fs::write(dir.join("cgroup.procs"), procs).unwrap();
    // Its parent enabled memory below itself (that is where the
    // controllers come from).
    if let Some(up) = dir.parent() {
        fs::write(up.join("cgroup.subtree_control"), "cpu memory\n").unwrap();
    }
    format!("cgroup2 {} cgroup2 rw,nosuid 0 0\n", root.display())
}

#[test]
fn v2_with_other_processes_in_its_cgroup_moves_into_a_cgroup_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mounts = fake_v2(root, "user.slice/session-1.scope", "", "100\n200\n");
    let plan = probe_v2(&mounts, "0::/user.slice/session-1.scope\n").unwrap();
    let beside = root.join("user.slice");
    assert_eq!(
        plan,
        V2Plan::Own {
            beside: beside.clone()
        }
    );
    let avail = plan.settle(4242).unwrap();
    let own = beside.join("foliocache-bench-4242");
    let (version, parent, home, enable_subtree) = fields(&avail);
    assert_eq!(
        (version, &parent, &home, enable_subtree),
        (Version::V2, &own, &own.join("main"), true)
    );
    // The bench is in the leaf; the others stay where they were.
    assert_eq!(
        fs::read_to_string(home.join("cgroup.procs")).unwrap(),
        "4242"
    );
    assert_eq!(
        fs::read_to_string(root.join("user.slice/session-1.scope/cgroup.procs")).unwrap(),
        "100\n200\n"
    );
    // A run's cgroup: the controller enabled in the cgroup of its own
    // (which holds no process), the limit in the run's.
    let cg = MemCgroup::create(&avail, 64 << 20).unwrap();
    assert_eq!(
        fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
        "+memory"
    );
    assert!(cg.path().starts_with(&own), "{}", cg.path().display());
    assert_eq!(
        fs::read_to_string(cg.path().join("memory.max")).unwrap(),
        (64u64 << 20).to_string()
    );
    assert_eq!(cg.home, own.join("main"), "a run goes back to the leaf");
    // (A fake cgroup's directory holds plain files: rmdir would refuse
    // it, so the test does not drop it.)
    std::mem::forget(cg);
}

#[test]
fn v2_is_used_in_place_where_its_cgroup_holds_no_process_or_is_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mounts = fake_v2(root, "bench.scope", "", "");
    let plan = probe_v2(&mounts, "0::/bench.scope\n").unwrap();
    assert_eq!(
        plan,
        V2Plan::Here {
            parent: root.join("bench.scope"),
            enable_subtree: true
        }
    );
    // Enabled already: nothing to enable.
    let mounts = fake_v2(root, "ready.scope", "memory\n", "100\n");
    let plan = probe_v2(&mounts, "0::/ready.scope\n").unwrap();
    assert_eq!(
        plan,
        V2Plan::Here {
            parent: root.join("ready.scope"),
            enable_subtree: false
        }
    );
    // The root is exempt from the no-internal-process rule.
    fs::write(root.join("cgroup.controllers"), "memory\n").unwrap();
    fs::write(root.join("cgroup.procs"), "1\n").unwrap();
    fs::write(root.join("cgroup.subtree_control"), "").unwrap();
    let plan = probe_v2(&mounts, "0::/\n").unwrap();
    assert!(
        matches!(
            plan,
            V2Plan::Here {
                enable_subtree: true,
                ..
            }
        ),
        "{plan:?}"
    );
}

#[test]
fn v1_limits_in_the_process_cgroup_and_comes_back_there() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fs::create_dir_all(root.join("a")).unwrap();
    fs::write(root.join("a/memory.limit_in_bytes"), "max").unwrap();
    let mounts = format!("cgroup {} cgroup rw,memory 0 0\n", root.display());
    let avail = probe_v1(&mounts, "4:memory:/a\n").unwrap();
    let (version, parent, home, enable_subtree) = fields(&avail);
    assert_eq!(
        (version, &parent, &home, enable_subtree),
        (Version::V1, &root.join("a"), &root.join("a"), false)
    );
}

#[test]
fn stale_cgroups_of_its_own_go_with_their_children() {
    let tmp = tempfile::tempdir().unwrap();
    // No process has pid u32::MAX - 1.
    let dead = tmp.path().join(format!("{PREFIX}{}", u32::MAX - 1));
    fs::create_dir_all(dead.join("main")).unwrap();
    fs::create_dir_all(dead.join(format!("{PREFIX}{}-0", u32::MAX - 1))).unwrap();
    let alive = tmp.path().join(format!("{PREFIX}{}", std::process::id()));
    fs::create_dir_all(alive.join("main")).unwrap();
    remove_stale(tmp.path());
    assert!(!dead.exists());
    assert!(alive.join("main").exists());
    assert!(is_own(&alive) && !is_own(&alive.join("main")));
}
