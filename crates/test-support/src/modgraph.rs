//! A crate's import graph, read from its sources as text: which modules
//! name which in a path. The cache crate's layering test
//! (`crates/foliocache/tests/it/layering.rs`) draws it by top-level
//! module; the CLI's and the bench's tests draw it by file and fail on
//! any circle ([`assert_no_import_circle`]).
//!
//! A file's imports are the modules it names in a path: `crate::a::b`,
//! `super::a` (from the file's own module: `super::` of `engine/io.rs` is
//! `engine`), `self::a`, and each path of a `use crate::{...}` group;
//! a path names the deepest module of the crate it reaches (`crate::a::F`
//! names `a` where `a::F` is no module). Comments are left out. A parent
//! naming its own submodules (`mod io;`, `io::x`) is not counted: a
//! directory's `mod.rs` declares its parts, which are its own; a part
//! naming its parent (`super::`) is.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted, subdirectories' files in place.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

/// The module of the source file `file` of the crate whose sources are
/// `src`, as its path's names (`engine/io.rs` and `engine/io/mod.rs`:
/// `["engine", "io"]`; `lib.rs` and `main.rs`: none).
pub fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut names: Vec<String> = rel.iter().map(|n| n.to_str().unwrap().to_owned()).collect();
    let root = names.len() == 1 && (names[0] == "lib" || names[0] == "main");
    if root || names.last().is_some_and(|n| n == "mod") {
        names.pop();
    }
    names
}

/// `text` without `//` comments (doc comments included), line by line; a
/// `//` inside a string literal ends the line early, which only loses
/// names, never invents one.
pub fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The path after each `prefix` (`crate::`, `super::`) in `text` (not
/// inside a longer path: `a::crate::` is no `crate::`), as its names up to
/// the item or a `{`; for `prefix{...}`, each path of the group's top
/// level. `crate::{a::X, b::{y, z}, c}` gives `[a, X]`, `[b]`, `[c]`.
pub fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let path = |s: &str| -> Vec<String> {
        let end = s
            .find(|c: char| !(is_ident(c) || c == ':' || c == '*'))
            .unwrap_or(s.len());
        s[..end]
            .split("::")
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(path(rest));
            continue;
        };
        // Only the group's top level: `{a::x, b::{y, z}, c}`.
        let mut depth = 0;
        let mut start = Some(0);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = Some(j + 1),
                c if depth == 0 && !c.is_whitespace() => {
                    if let Some(s) = start.take() {
                        out.push(path(group[s..].trim_start()));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The first name of each path after `prefix` in `text`
/// ([`paths_after`]), past any further `super::`.
pub fn named_after(text: &str, prefix: &str, out: &mut BTreeSet<String>) {
    out.extend(
        paths_after(text, prefix)
            .into_iter()
            .filter_map(|p| p.into_iter().find(|n| n != "super")),
    );
}

/// The import graph of the crate whose sources are `src`, by file: each
/// file's module (`engine::io`; the root is `crate`) and the modules it
/// names (see the module's doc).
pub fn file_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(Vec<String>, String)> = rust_files(src)
        .into_iter()
        .map(|f| {
            let text = strip_comments(&fs::read_to_string(&f).unwrap());
            (module_of(src, &f), text)
        })
        .collect();
    let modules: BTreeSet<&[String]> = files.iter().map(|(m, _)| m.as_slice()).collect();
    let name = |m: &[String]| {
        if m.is_empty() {
            "crate".to_owned()
        } else {
            m.join("::")
        }
    };
    // The deepest module `path` reaches.
    let resolve = |path: &[String]| {
        (0..=path.len())
            .rev()
            .find(|&n| modules.contains(&path[..n]))
            .map(|n| name(&path[..n]))
    };
    let mut graph = BTreeMap::new();
    for (module, text) in &files {
        let parent = &module[..module.len().saturating_sub(1)];
        let mut named = BTreeSet::new();
        let mut add = |base: &[String], path: &[String]| {
            let mut base = base.to_vec();
            let mut path = path;
            while let Some(rest) = path.strip_prefix(&["super".to_owned()]) {
                base.pop();
                path = rest;
            }
            base.extend(path.iter().cloned());
            named.extend(resolve(&base));
        };
        for p in paths_after(text, "crate::") {
            add(&[], &p);
        }
        for p in paths_after(text, "super::") {
            add(parent, &p);
        }
        for p in paths_after(text, "self::") {
            add(module, &p);
        }
        let me = name(module);
        named.remove(&me);
        graph.insert(me, named);
    }
    graph
}

/// The strongly connected components of `graph` (Tarjan), each sorted: a
/// component of more than one module is an import circle.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
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
            for w in self.graph.get(v).into_iter().flatten() {
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

/// Panics, naming them, if the files of the crate whose sources are `src`
/// import each other in a circle ([`file_imports`], [`cycles`]).
pub fn assert_no_import_circle(src: &Path) {
    let graph = file_imports(src);
    assert!(graph.len() > 1, "no source files under {}", src.display());
    let circles: Vec<Vec<String>> = cycles(&graph).into_iter().filter(|c| c.len() > 1).collect();
    assert!(
        circles.is_empty(),
        "import circles among the files of {}: {circles:?}",
        src.display()
    );
}
