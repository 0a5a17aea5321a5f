//! `EngineSpec::parse`: the names, the options of each engine, and the
//! errors of what it refuses.

use super::*;

#[test]
fn pin_is_an_option_of_foliocache_alone_and_one_read_at_a_time() {
    let e = EngineSpec::parse("foliocache[pin]").unwrap();
    assert!(e.folio.pin && e.kind == EngineKind::Foliocache);
    assert_eq!(e, EngineSpec::pin());
    assert!(e.folio.mode().pin);
    assert!(!EngineSpec::parse("foliocache").unwrap().folio.mode().pin);
    for bad in ["foliocache[pin,dontcache]", "foliocache[pin,qd=4]"] {
        let err = EngineSpec::parse(bad).unwrap_err();
        assert!(err.contains("one read at a time"), "{bad}: {err}");
    }
    assert!(EngineSpec::parse("foliocache[pin=1]")
        .unwrap_err()
        .contains("bad option"));
    assert!(EngineSpec::parse("mmap[pin]")
        .unwrap_err()
        .contains("takes no options"));
}

#[test]
fn inplace_is_an_option_of_memcpy_alone() {
    let e = EngineSpec::parse("memcpy[inplace]").unwrap();
    assert!(e.inplace && e.kind == EngineKind::Memcpy);
    assert_eq!(e, EngineSpec::memcpy_inplace());
    assert!(!EngineSpec::parse("memcpy").unwrap().inplace);
    let err = EngineSpec::parse("memcpy[pin]").unwrap_err();
    assert!(
        err.contains("unknown option `pin` (supported: inplace)"),
        "{err}"
    );
    let err = EngineSpec::parse("memcpy[qd=4]").unwrap_err();
    assert!(
        err.contains("qd= is for foliocache and direct only"),
        "{err}"
    );
    for other in ["mmap[inplace]", "kernel[inplace]"] {
        let err = EngineSpec::parse(other).unwrap_err();
        assert!(err.contains("takes no options"), "{other}: {err}");
    }
    assert!(EngineSpec::parse("foliocache[inplace]")
        .unwrap_err()
        .contains("option `inplace` is not supported"));
}

#[test]
fn plain_names() {
    for k in EngineKind::ALL {
        let s = EngineSpec::parse(k.name()).unwrap();
        assert_eq!(s, EngineSpec::plain(k));
    }
}

#[test]
fn label_is_kept_as_given() {
    let s = EngineSpec::parse("foliocache[populate=lazy,folio=64k]").unwrap();
    assert_eq!(s.label, "foliocache[populate=lazy,folio=64k]");
    assert_eq!(s.kind, EngineKind::Foliocache);
    assert_eq!(s.folio.populate, Populate::Lazy);
    assert_eq!(s.folio.max_folio, Some(64 << 10));
}

#[test]
fn readahead_options() {
    let s = EngineSpec::parse("foliocache[insert=single]").unwrap();
    assert_eq!(s.label, "foliocache[insert=single]");
    assert_eq!(s.folio.insert, Insert::Single);
    assert_eq!(
        s.folio.readahead(),
        ReadaheadConfig::default().with_insert(Insert::Single)
    );
    assert_eq!(s.folio.io, IoKind::Auto);

    let s = EngineSpec::parse("foliocache[insert=batched,ra=kernel,io=uring]").unwrap();
    assert_eq!(s.folio.readahead(), ReadaheadConfig::kernel());
    assert_eq!(s.folio.io, IoKind::Uring);

    let s = EngineSpec::parse("foliocache[ra=off, io=threads]").unwrap();
    assert_eq!(s.label, "foliocache[ra=off, io=threads]");
    assert_eq!(s.folio.readahead(), ReadaheadConfig::disabled());
    assert_eq!(s.folio.io, IoKind::Threads);

    let s = EngineSpec::parse("foliocache[ra=512k,insert=single]").unwrap();
    let ra = s.folio.readahead();
    assert_eq!(
        (ra.max_pages, ra.io_pages, ra.insert()),
        (128, 128, Insert::Single)
    );
    let ra = EngineSpec::parse("foliocache[ra=2m]")
        .unwrap()
        .folio
        .readahead();
    assert_eq!((ra.max_pages, ra.io_pages), (512, 512));

    // The defaults are the library's.
    assert_eq!(
        EngineSpec::plain(EngineKind::Foliocache).folio.readahead(),
        ReadaheadConfig::default()
    );
}

#[test]
fn bad_option_values_are_errors() {
    for bad in [
        "foliocache[populate=sometimes]",
        "foliocache[folio=1]",
        "foliocache[insert=sometimes]",
        "foliocache[insert]",
        "foliocache[ra=1]",
        "foliocache[ra=0]",
        "foliocache[ra=6000]",
        "foliocache[ra=lots]",
        "foliocache[ra]",
        "foliocache[io=spdk]",
        "foliocache[io]",
    ] {
        let e = EngineSpec::parse(bad).unwrap_err();
        assert!(
            !e.contains("not supported by the library yet"),
            "{bad}: {e}"
        );
    }
    let e = EngineSpec::parse("foliocache[io=spdk]").unwrap_err();
    assert!(e.contains("bad option `io=spdk`"), "{e}");
    assert!(e.contains("io=uring|threads|auto"), "{e}");
}

#[test]
fn dontcache_is_an_option() {
    let s = EngineSpec::parse("foliocache[dontcache]").unwrap();
    assert_eq!(s.label, "foliocache[dontcache]");
    assert!(s.folio.dontcache);
    assert_eq!(s.folio.read_flags(), ReadFlags::DONTCACHE);
    assert!(!s.cached(), "an uncached engine is not warmed");
    let s = EngineSpec::parse("foliocache[populate=lazy, dontcache,ra=kernel]").unwrap();
    assert!(s.folio.dontcache);
    assert_eq!(s.folio.populate, Populate::Lazy);
    assert_eq!(s.folio.readahead(), ReadaheadConfig::kernel());
    let plain = EngineSpec::plain(EngineKind::Foliocache);
    assert_eq!(plain.folio.read_flags(), ReadFlags::NONE);
    assert!(plain.cached());
    let e = EngineSpec::parse("foliocache[dontcache=yes]").unwrap_err();
    assert!(e.contains("bad option `dontcache=yes`"), "{e}");
}

#[test]
fn grab_and_anon_options() {
    let s = EngineSpec::parse("foliocache[grab=single]").unwrap();
    assert_eq!(s.folio.grab, Insert::Single);
    let s = EngineSpec::parse("foliocache[grab=batched,populate=lazy]").unwrap();
    assert_eq!(s.folio.grab, Insert::Batched);
    assert_eq!(s.folio.populate, Populate::Lazy);
    let plain = EngineSpec::plain(EngineKind::Foliocache);
    assert_eq!(
        (plain.folio.grab, plain.folio.huge),
        (Insert::Batched, true)
    );
    assert!(EngineSpec::parse("foliocache[grab=some]")
        .unwrap_err()
        .contains("bad option `grab=some`"));
    let s = EngineSpec::parse("foliocache[huge=off,folio=4k,grab=single]").unwrap();
    assert_eq!(s.label, "foliocache[huge=off,folio=4k,grab=single]");
    assert!(!s.folio.huge);
    assert_eq!(s.folio.max_folio, Some(4096));
    assert_eq!(s.folio.grab, Insert::Single);
    assert!(EngineSpec::parse("foliocache[huge=on]").unwrap().folio.huge);
    for bad in ["foliocache[huge]", "foliocache[huge=no]"] {
        let e = EngineSpec::parse(bad).unwrap_err();
        assert!(e.contains("bad option") && e.contains("huge=on|off"), "{e}");
    }
    let s = EngineSpec::parse("anon[thp,populate]").unwrap();
    assert_eq!(s.kind, EngineKind::Anon);
    assert_eq!(
        s.anon,
        AnonOptions {
            thp: true,
            populate: true
        }
    );
    assert!(EngineSpec::parse("anon[huge]")
        .unwrap_err()
        .contains("supported: thp, populate"));
    let s = EngineSpec::parse("foliocache[dontcache]").unwrap();
    assert!(s.folio.mode().dontcache_writes);
}

#[test]
fn unsupported_options_are_errors() {
    for bad in ["foliocache[writeback]", "foliocache[populate=lazy,nowait]"] {
        let e = EngineSpec::parse(bad).unwrap_err();
        assert!(e.contains("not supported by the library yet"), "{e}");
        assert!(
            e.contains(
                "insert=batched|single, ra=SIZE|kernel|off, io=uring|threads|auto, dontcache"
            ),
            "{e}"
        );
    }
    assert!(EngineSpec::parse("kernel[x]")
        .unwrap_err()
        .contains("takes no options"));
    assert!(EngineSpec::parse("kernel[insert=single]")
        .unwrap_err()
        .contains("takes no options"));
}

#[test]
fn qd_option() {
    for (text, kind, depth) in [
        ("foliocache[qd=32]", EngineKind::Foliocache, 32),
        ("direct[qd=32]", EngineKind::Direct, 32),
        ("direct[qd=1]", EngineKind::Direct, 1),
        ("foliocache[ra=off, qd=1024]", EngineKind::Foliocache, 1024),
    ] {
        let s = EngineSpec::parse(text).unwrap();
        assert_eq!((s.label.as_str(), s.kind, s.qd), (text, kind, Some(depth)));
    }
    assert_eq!(
        EngineSpec::parse("foliocache[ra=off, qd=1024]")
            .unwrap()
            .folio
            .readahead(),
        ReadaheadConfig::disabled()
    );
    assert_eq!(EngineSpec::parse("direct").unwrap().qd, None);
    assert_eq!(EngineSpec::plain(EngineKind::Foliocache).qd, None);
    for bad in [
        "foliocache[qd=0]",
        "foliocache[qd=1025]",
        "direct[qd=-1]",
        "direct[qd=lots]",
        "direct[qd=]",
        "direct[qd=99999999999999999999999]",
    ] {
        let e = EngineSpec::parse(bad).unwrap_err();
        assert!(e.contains("a whole number from 1 to 1024"), "{bad}: {e}");
    }
    for bad in ["kernel[qd=32]", "mmap[qd=4]", "anon[qd=2]", "fuse[qd=8]"] {
        let e = EngineSpec::parse(bad).unwrap_err();
        assert!(
            e.contains("qd= is for foliocache and direct only"),
            "{bad}: {e}"
        );
    }
    let e = EngineSpec::parse("foliocache[qd]").unwrap_err();
    assert!(e.contains("bad option `qd`") && e.contains("qd=N"), "{e}");
    let e = EngineSpec::parse("direct[populate=lazy]").unwrap_err();
    assert!(e.contains("supported: qd=N"), "{e}");
    let e = EngineSpec::parse("foliocache[qd=4,dontcache]").unwrap_err();
    assert!(e.contains("not supported"), "{e}");
}

#[test]
fn malformed_specs_are_errors() {
    for bad in [
        "",
        "kern",
        "foliocache[",
        "foliocache[]",
        "foliocache[populate=lazy",
        "foliocache[a]b",
        "foliocache[[a]]",
    ] {
        assert!(EngineSpec::parse(bad).is_err(), "{bad:?} parsed");
    }
    let e = EngineSpec::parse("nope").unwrap_err();
    assert!(e.contains("available: foliocache, kernel, direct, dontcache, mmap"));
}

#[test]
fn async_engines_take_tasks() {
    for (text, tasks) in [
        ("foliocache[async]", 1),
        ("foliocache[async,tasks=32]", 32),
        ("foliocache[tasks=4]", 4),
        ("tokio-fs", 1),
        ("tokio-fs[tasks=8]", 8),
    ] {
        let s = EngineSpec::parse(text).unwrap();
        assert_eq!(s.tasks, Some(tasks), "{text}");
        assert_eq!(s.qd, None, "{text}");
    }
    assert_eq!(EngineSpec::parse("foliocache").unwrap().tasks, None);
    for (text, why) in [
        ("foliocache[async,qd=4]", "not with qd= or pin"),
        ("foliocache[async,pin]", "not with qd= or pin"),
        ("foliocache[tasks=0]", "from 1 to 1024"),
        ("tokio-fs[tasks=2000]", "from 1 to 1024"),
        ("tokio-fs[qd=2]", "qd= is for foliocache and direct only"),
        ("tokio-fs[async]", "unknown option `async`"),
        ("kernel[tasks=2]", "takes no options"),
        (
            "direct[tasks=2]",
            "tasks= is for foliocache and tokio-fs only",
        ),
    ] {
        let err = EngineSpec::parse(text).unwrap_err();
        assert!(err.contains(why), "{text}: {err}");
    }
    // By name only: not among the engines a custom job defaults to.
    assert!(!EngineKind::ALL.contains(&EngineKind::TokioFs));
}
