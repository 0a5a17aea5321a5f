//! The crate's modules in layers, as `docs/design.md` ("The modules in
//! layers") draws them: a module names items of the modules in its own
//! layer and those below, never of a layer above, and no import cycle
//! among the modules is longer than three.
//!
//! The story: the cache crate grew into one knot of twelve modules, each
//! naming items of the others through a hub struct, so that no module could
//! be read, tested or changed alone. These tests read the crate's sources
//! and fail on an import that would tie the knot again.
//!
//! A module's imports are the modules it names in a path: `crate::m::...`,
//! `super::m::...` from a submodule, and each name in `use crate::{...}`.
//! Comments are left out. A submodule (`copy/x86.rs`) counts as its parent.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The layers, lowest first. A module may name modules of its own layer
/// and of the layers below; keep `docs/design.md` in step.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "primitives: locks and atomics, wake-ups, flags, copies, counters, the error sequence, the writeback pool",
        &["sync", "kick", "flags", "copy", "stats", "errseq", "wbpool"],
    ),
    (
        "memory and plans: the arena, its 2 MiB hints, readahead's windows, writeback's control",
        &["arena", "huge_hints", "readahead", "bdi"],
    ),
    ("folios: descriptors, references, locks, and the cache's memory", &["folio"]),
    ("the LRU lists and the workingset's shadows", &["lru", "workingset"]),
    (
        "mappings, allocation and reclaim: the kernel's filemap, page_alloc and vmscan",
        &["filemap", "mm", "vmscan"],
    ),
    ("what works on mappings: writeback, memory pressure, truncation", &["writeback", "pressure", "truncate", "loaded"]),
    ("the cache, which builds and ties the parts", &["cache"]),
    ("the handle and its operations", &["file", "write", "shift", "read_many", "future"]),
    ("warm restarts: the state file, its save and its loader", &["warm"]),
    ("what reads the cache from outside: its metrics", &["metrics"]),
];

/// The longest import cycle allowed (the kernel's own `mm/` has
/// `filemap` -> the page allocator -> `vmscan` -> `filemap`).
const MAX_CYCLE: usize = 3;

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source of every module of the crate but `lib.rs`, by name, with
/// its submodules' sources appended, comments removed.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut String) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push_str(&strip_comments(&fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut mods = BTreeMap::new();
    for e in fs::read_dir(src()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
        if name == "lib" {
            continue;
        }
        let mut text = String::new();
        if p.is_dir() {
            walk(&p, &mut text);
        } else if p.extension().is_some_and(|e| e == "rs") {
            text = strip_comments(&fs::read_to_string(&p).unwrap());
        } else {
            continue;
        }
        mods.entry(name).or_insert_with(String::new).push_str(&text);
    }
    mods
}

/// `text` without `//` comments (doc comments included), line by line; a
/// `//` inside a string literal ends the line early, which only loses
/// names, never invents one.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers that follow `prefix` in `text`, and for `prefix{`, each
/// first segment of the group's paths.
fn named_after(text: &str, prefix: &str, out: &mut BTreeSet<String>) {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices(prefix) {
        let rest = &text[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Only the group's top level: `{a::x, b::{y, z}, c}` names a, b, c.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && depth == 0 && !c.is_whitespace() => {
                        out.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
}

/// Each module's imports among the crate's modules.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    mods.iter()
        .map(|(name, text)| {
            let mut named = BTreeSet::new();
            named_after(text, "crate::", &mut named);
            named_after(text, "super::", &mut named);
            named.retain(|m| m != name && mods.contains_key(m));
            (name.clone(), named)
        })
        .collect()
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// The strongly connected components of the import graph (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    comp.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                comp.sort();
                self.out.push(comp);
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn the_parser_finds_paths_and_use_groups() {
    let mut named = BTreeSet::new();
    named_after(
        "use crate::{a::X, b::{y, z}, c};\nlet v = crate::d::f(); crate::e::G",
        "crate::",
        &mut named,
    );
    let want: BTreeSet<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(named, want);
    assert_eq!(strip_comments("x // crate::y\n/// crate::z\nw"), "x \n\nw");
}

#[test]
fn every_module_is_in_exactly_one_layer() {
    let graph = imports();
    for m in graph.keys() {
        let n = LAYERS
            .iter()
            .filter(|(_, ms)| ms.contains(&m.as_str()))
            .count();
        assert_eq!(
            n, 1,
            "module `{m}` is in {n} layers of LAYERS (and docs/design.md)"
        );
    }
    for (_, ms) in LAYERS {
        for m in *ms {
            assert!(
                graph.contains_key(*m),
                "LAYERS names `{m}`, which is no module of src/"
            );
        }
    }
}

#[test]
fn no_module_names_a_module_of_a_layer_above_its_own() {
    let graph = imports();
    let mut wrong = Vec::new();
    for (m, uses) in &graph {
        let Some(l) = layer_of(m) else { continue };
        for u in uses {
            if layer_of(u).is_some_and(|lu| lu > l) {
                wrong.push(format!(
                    "{m} (layer {l}) names {u} (layer {})",
                    layer_of(u).unwrap()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that go up a layer:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_import_cycle_is_longer_than_three_modules() {
    let graph = imports();
    let long: Vec<_> = cycles(&graph)
        .into_iter()
        .filter(|c| c.len() > MAX_CYCLE)
        .collect();
    assert!(
        long.is_empty(),
        "import cycles of more than {MAX_CYCLE} modules: {long:?}"
    );
}
