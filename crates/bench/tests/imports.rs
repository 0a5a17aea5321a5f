//! The bench harness's files in layers: no file names (through
//! `crate::`, `super::` or `self::`) a file that names it back, directly
//! or through others (`test_support::modgraph`). The harness was three
//! knots: the engines and the list of their IO types (each engine naming
//! the list, the list naming each engine), `report` and `targets`, and
//! scenarios naming helpers inside other scenarios. Now the engines' registry
//! (`engine/mod.rs`) names the engines and they name what is under them;
//! what several scenarios share is in `scenario/rounds.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use test_support::modgraph::{self, assert_no_import_circle};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_files_of_the_bench_import_each_other_in_a_circle() {
    assert_no_import_circle(&src());
}

/// No scenario names another scenario: what several share is in a module
/// of its own, not inside one of them. `embedded` (what `redb` and
/// `sqlite` share), `traces` (what `advisor` and `policy` replay) and
/// `rounds` are such modules; the registry
/// (`scenario/mod.rs`, `crate::scenario`) names every scenario.
#[test]
fn no_scenario_names_another() {
    const SHARED: [&str; 4] = ["embedded", "rounds", "tests", "traces"];
    let graph = modgraph::file_imports(&src());
    let scenario = |m: &str| -> Option<String> {
        let rest = m.strip_prefix("scenario::")?;
        let top = rest.split("::").next()?;
        (!SHARED.contains(&top)).then(|| top.to_owned())
    };
    let mut wrong = BTreeSet::new();
    for (m, uses) in &graph {
        let Some(from) = scenario(m) else { continue };
        for u in uses {
            if scenario(u).is_some_and(|to| to != from) {
                wrong.insert(format!("{m} names {u}"));
            }
        }
    }
    assert!(wrong.is_empty(), "scenarios naming others: {wrong:?}");
}

/// The check fails where it should: two files naming each other, and a
/// child naming its parent that names it back through `crate::`.
#[test]
fn a_circle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir(src.join("a")).unwrap();
    fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    fs::write(
        src.join("a/mod.rs"),
        "mod c;\nuse crate::a::c::X; // crate::b\n",
    )
    .unwrap();
    fs::write(
        src.join("a/c.rs"),
        "pub struct X;\nuse super::super::b::Y;\n",
    )
    .unwrap();
    fs::write(
        src.join("b.rs"),
        "pub struct Y;\nuse crate::{a::{self, c}, b};\n",
    )
    .unwrap();
    let graph = modgraph::file_imports(src);
    let names = |m: &str| -> Vec<&str> { graph[m].iter().map(String::as_str).collect() };
    assert_eq!(names("a"), ["a::c"]);
    assert_eq!(names("a::c"), ["b"]);
    assert_eq!(names("b"), ["a"]);
    assert_eq!(names("crate"), Vec::<&str>::new());
    let circles: Vec<_> = modgraph::cycles(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    assert_eq!(circles, [["a", "a::c", "b"]]);
    let e = std::panic::catch_unwind(|| assert_no_import_circle(src)).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains(r#"["a", "a::c", "b"]"#), "{msg}");
}
