//! The crate's modules in layers, as `docs/design.md` ("The modules in
//! layers") draws them: a module names items of the modules in its own
//! layer and those below, never of a layer above, and no import cycle
//! among the modules is longer than three.
//!
//! The story: the cache crate grew into one knot of twelve modules, each
//! naming items of the others through a hub struct, so that no module could
//! be read, tested or changed alone. These tests read the crate's sources
//! and fail on an import that would tie the knot again, and on a method
//! call that would: Rust lets any module add methods to a type and call
//! them without an import, so calls are checked apart (below).
//!
//! A module's imports are the modules it names in a path: `crate::m::...`,
//! `super::m::...` from a submodule, and each name in `use crate::{...}`.
//! Comments are left out. A submodule (`copy/x86.rs`) counts as its parent.
//! The parsing is `test_support::modgraph`'s, which the CLI's and the
//! bench's import-circle tests share.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use test_support::modgraph::{self, cycles, named_after, strip_comments};

/// The layers, lowest first. A module may name modules of its own layer
/// and of the layers below; keep `docs/design.md` in step.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "primitives: locks and atomics, wake-ups, flags, copies, the miss-ratio curve's sample, counters, the error sequence, the writeback pool, shared memory files' mapping and layout",
        &["sync", "kick", "flags", "copy", "mrc", "stats", "errseq", "wbpool", "shm"],
    ),
    (
        "memory and plans: the arena, its 2 MiB hints, readahead's windows, writeback's control, the guardian's segment, the shared cache (a cache of its own in a memory file, for many processes)",
        &["arena", "huge_hints", "readahead", "bdi", "guardian", "shared"],
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

/// Every source file of the crate but `lib.rs`, with its module: a
/// submodule's files (`copy/x86.rs`) count as their parent's.
fn rs_files() -> Vec<(String, std::path::PathBuf)> {
    let src = src();
    modgraph::rust_files(&src)
        .into_iter()
        .filter_map(|p| Some((modgraph::module_of(&src, &p).first()?.clone(), p)))
        .collect()
}

/// The source of every module of the crate but `lib.rs`, by name, with
/// its submodules' sources appended, comments removed.
fn modules() -> BTreeMap<String, String> {
    let mut mods = BTreeMap::new();
    for (module, p) in rs_files() {
        let text = strip_comments(&fs::read_to_string(&p).unwrap());
        mods.entry(module)
            .or_insert_with(String::new)
            .push_str(&text);
    }
    mods
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

// ---------------------------------------------------------------------
// Method calls. Rust lets any module add methods to a type and call them
// without an import, so the import graph above misses those edges: a
// lower module calling a method that a higher one defined on `Mapping`
// is as much a call back up as an import would be. The tests below
// record where each method of the crate's hub types is defined, by
// parsing the sources, and fail on a call from a module to a method of
// one of them defined only in modules of higher layers.

/// The types whose methods are tracked.
const TYPES: &[&str] = &["Mapping", "File", "Cache", "CacheInner"];

/// Method names of the tracked types that other crates' types (the
/// standard library's, `xarray`'s) also have and this crate calls on
/// those: `.pin(` through a receiver the parser cannot type may be the
/// index's (`XArray::pin`), `.id(` a thread's. (A name another type of
/// this crate defines is left out without being listed here.) Calls of
/// these through `self` inside an `impl` of a tracked type, or through
/// a path (`Mapping::id(`), still count.
const COMMON_NAMES: &[&str] = &["id", "pin"];

/// One source file of the crate: its module (a submodule counts as its
/// parent, as for imports), its path under `src/`, and its code with
/// comments removed and the contents of string and character literals
/// blanked (line breaks kept, so offsets give line numbers).
struct SourceFile {
    module: String,
    path: String,
    code: String,
}

fn source_files() -> Vec<SourceFile> {
    let root = src();
    rs_files()
        .into_iter()
        .map(|(module, p)| SourceFile {
            module,
            path: p.strip_prefix(&root).unwrap().display().to_string(),
            code: code_of(&fs::read_to_string(&p).unwrap()),
        })
        .collect()
}

/// `text` with `//` and `/* */` comments removed and the contents of
/// string literals (raw ones too) and character literals replaced by
/// spaces; line breaks are kept.
fn code_of(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                out.push(blank(b[i]));
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && {
            let prev = if i == 0 { ' ' } else { b[i - 1] };
            !(prev.is_alphanumeric() || prev == '_')
        } {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(b[j]));
                j += 1;
            }
            out.push('"');
            i = j;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{7f}'.
            out.push('\'');
            i += 2;
            while i < b.len() && b[i] != '\'' {
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else if c == '\'' && b.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier that starts `s`.
fn ident(s: &str) -> &str {
    let n = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..n]
}

/// The last path segment of a type, without its generics:
/// `crate::filemap::Mapping<'a>` gives `Mapping`.
fn type_name(ty: &str) -> String {
    let ty = ty.trim();
    let ty = ty.split('<').next().unwrap_or("").trim();
    ty.rsplit("::").next().unwrap_or("").trim().to_owned()
}

/// The index of the `}` that closes the `{` at `open`.
fn closing_brace(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// An `impl` block: the type it is for, whether it implements a trait,
/// its body's span in the code, and the methods defined at its top
/// level (name, offset of the name).
struct ImplBlock {
    ty: String,
    of_trait: bool,
    body: std::ops::Range<usize>,
    methods: Vec<(String, usize)>,
}

/// The `impl` blocks of `code`: items whose line starts with `impl`.
fn impl_blocks(code: &str) -> Vec<ImplBlock> {
    let mut out = Vec::new();
    let mut line_start = 0;
    for line in code.split_inclusive('\n') {
        let at = line_start;
        line_start += line.len();
        let trimmed = line.trim_start();
        if !(trimmed.starts_with("impl ") || trimmed.starts_with("impl<")) {
            continue;
        }
        let start = at + (line.len() - trimmed.len()) + "impl".len();
        // The header, to the `{` outside any `<...>` (generics).
        let mut angle = 0i32;
        let mut open = None;
        let mut prev = ' ';
        for (i, c) in code[start..].char_indices() {
            match c {
                '<' => angle += 1,
                '>' if prev != '-' => angle -= 1,
                '{' if angle <= 0 => {
                    open = Some(start + i);
                    break;
                }
                ';' if angle <= 0 => break,
                _ => {}
            }
            prev = c;
        }
        let Some(open) = open else { continue };
        let mut header = &code[start..open];
        // Leading generics: `impl<'a>`.
        if header.trim_start().starts_with('<') {
            let h = header.trim_start();
            let mut depth = 0;
            let mut end = h.len();
            for (i, c) in h.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            header = &h[end..];
        }
        let header = header.split(" where").next().unwrap_or(header);
        let (ty, of_trait) = match header.split_once(" for ") {
            Some((_, ty)) => (type_name(ty), true),
            None => (type_name(header), false),
        };
        let close = closing_brace(code, open);
        let body = open + 1..close;
        let mut methods = Vec::new();
        let mut depth = 0;
        let text = &code[body.clone()];
        for (i, c) in text.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                'f' if depth == 0
                    && text[i..].starts_with("fn ")
                    && (i == 0 || !is_ident(text[..i].chars().last().unwrap())) =>
                {
                    let name = ident(text[i + 3..].trim_start());
                    let off = body.start
                        + i
                        + 3
                        + (text[i + 3..].len() - text[i + 3..].trim_start().len());
                    methods.push((name.to_owned(), off));
                }
                _ => {}
            }
        }
        out.push(ImplBlock {
            ty,
            of_trait,
            body,
            methods,
        });
    }
    out
}

/// Where each method of the tracked types is defined: (type, method) to
/// the modules whose inherent `impl` blocks define it. Trait
/// implementations (`impl Drop for Mapping`) are left out: their methods
/// are called through the trait, and the trait's module is what a caller
/// names.
fn method_homes(files: &[SourceFile]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut homes: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for f in files {
        for b in impl_blocks(&f.code) {
            if b.of_trait || !TYPES.contains(&b.ty.as_str()) {
                continue;
            }
            for (m, _) in b.methods {
                homes
                    .entry((b.ty.clone(), m))
                    .or_default()
                    .insert(f.module.clone());
            }
        }
    }
    homes
}

/// Every `fn NAME` of the crate outside the tracked types' inherent
/// `impl` blocks (free functions, other types' methods, traits): a call
/// `.NAME(` through an unknown receiver may be any of those.
fn other_fns(files: &[SourceFile]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in files {
        let tracked: Vec<usize> = impl_blocks(&f.code)
            .into_iter()
            .filter(|b| !b.of_trait && TYPES.contains(&b.ty.as_str()))
            .flat_map(|b| b.methods.into_iter().map(|(_, off)| off))
            .collect();
        for (i, _) in f.code.match_indices("fn ") {
            if i > 0 && is_ident(f.code[..i].chars().last().unwrap()) {
                continue;
            }
            let rest = &f.code[i + 3..];
            let off = i + 3 + (rest.len() - rest.trim_start().len());
            if !tracked.contains(&off) {
                out.insert(ident(rest.trim_start()).to_owned());
            }
        }
    }
    out
}

/// A call found in the sources: the calling file and line, and the
/// method called (type, name).
struct Call {
    path: String,
    line: usize,
    module: String,
    ty: String,
    name: String,
}

/// The calls of tracked methods in the crate's sources that the parser
/// can attribute: `self.NAME(` and `Self::NAME(` inside an `impl` of a
/// tracked type, `TYPE::NAME(` anywhere, and `.NAME(` through any other
/// receiver when NAME is a method of exactly one tracked type, defined
/// nowhere else in the crate and not in [`COMMON_NAMES`].
fn method_calls(files: &[SourceFile]) -> Vec<Call> {
    let homes = method_homes(files);
    let others = other_fns(files);
    let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (ty, name) in homes.keys() {
        by_name.entry(name).or_default().push(ty);
    }
    let mut out = Vec::new();
    for f in files {
        let blocks = impl_blocks(&f.code);
        let line = |i: usize| f.code[..i].matches('\n').count() + 1;
        let mut push = |i: usize, ty: &str, name: &str| {
            out.push(Call {
                path: f.path.clone(),
                line: line(i),
                module: f.module.clone(),
                ty: ty.to_owned(),
                name: name.to_owned(),
            })
        };
        for (i, _) in f.code.match_indices('(') {
            let before = &f.code[..i];
            let name_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |j| j + 1);
            let name = &before[name_start..];
            if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
                continue;
            }
            let lead = &before[..name_start];
            // The type `self` or `Self` stands for here, if a tracked one.
            let self_ty = || {
                blocks
                    .iter()
                    .filter(|b| b.body.contains(&i))
                    .min_by_key(|b| b.body.len())
                    .map(|b| b.ty.clone())
                    .filter(|t| TYPES.contains(&t.as_str()))
            };
            if let Some(path) = lead.strip_suffix("::") {
                let ty = path
                    .rsplit(|c: char| !is_ident(c))
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let ty = if ty == "Self" {
                    self_ty().unwrap_or_default()
                } else {
                    ty
                };
                if homes.contains_key(&(ty.clone(), name.to_owned())) {
                    push(i, &ty, name);
                }
            } else if let Some(recv) = lead.strip_suffix('.') {
                let is_self = recv.ends_with("self")
                    && !recv[..recv.len() - 4].ends_with(|c: char| is_ident(c) || c == '.');
                if let Some(ty) = self_ty().filter(|_| is_self) {
                    if homes.contains_key(&(ty.clone(), name.to_owned())) {
                        push(i, &ty, name);
                        continue;
                    }
                }
                let Some(tys) = by_name.get(name) else {
                    continue;
                };
                if tys.len() == 1 && !others.contains(name) && !COMMON_NAMES.contains(&name) {
                    push(i, tys[0], name);
                }
            }
        }
    }
    out
}

#[test]
fn the_method_parser_finds_impls_and_calls() {
    let code = code_of(
        "impl<'a> Mapping {\n    pub(crate) fn a(&self) { self.b(); let s = \"}\"; }\n    \
         fn b(&self) {}\n}\nimpl std::fmt::Debug for Mapping {\n    fn fmt(&self) {}\n}\n\
         // impl File { fn c() {} }\nimpl File { fn c(&self) { Mapping::a(x); y.b(); } }\n",
    );
    let blocks = impl_blocks(&code);
    let found: Vec<(&str, bool, Vec<&str>)> = blocks
        .iter()
        .map(|b| {
            (
                b.ty.as_str(),
                b.of_trait,
                b.methods.iter().map(|(m, _)| m.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            ("Mapping", false, vec!["a", "b"]),
            ("Mapping", true, vec!["fmt"]),
            ("File", false, vec!["c"]),
        ]
    );
    let files = [SourceFile {
        module: "m".into(),
        path: "m.rs".into(),
        code,
    }];
    let calls: Vec<(usize, String, String)> = method_calls(&files)
        .into_iter()
        .map(|c| (c.line, c.ty, c.name))
        .collect();
    assert_eq!(
        calls,
        vec![
            (2, "Mapping".to_owned(), "b".to_owned()),
            (9, "Mapping".to_owned(), "a".to_owned()),
            (9, "Mapping".to_owned(), "b".to_owned()),
        ]
    );
}

#[test]
fn no_module_calls_a_method_defined_only_in_a_layer_above_its_own() {
    let files = source_files();
    let homes = method_homes(&files);
    let mut wrong = Vec::new();
    for c in method_calls(&files) {
        let Some(l) = layer_of(&c.module) else {
            continue;
        };
        let defined = &homes[&(c.ty.clone(), c.name.clone())];
        if defined.iter().all(|d| layer_of(d).is_some_and(|ld| ld > l)) {
            wrong.push(format!(
                "{}:{}: {} (layer {l}) calls {}::{}, defined in {:?}",
                c.path, c.line, c.module, c.ty, c.name, defined
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "method calls that go up a layer:\n{}",
        wrong.join("\n")
    );
}

/// The module each type's methods live in, for the types that have one
/// home (`File`'s operations are spread over the handle's layer; the
/// test above keeps their calls downward).
const HOMES: &[(&str, &str)] = &[("Mapping", "filemap"), ("CacheInner", "mm")];

#[test]
fn a_mappings_methods_live_in_filemap_and_cache_inners_in_mm() {
    let files = source_files();
    let mut wrong = Vec::new();
    for f in &files {
        for b in impl_blocks(&f.code) {
            let Some((_, home)) = HOMES.iter().find(|(t, _)| *t == b.ty) else {
                continue;
            };
            if !b.of_trait && f.module != *home {
                let line = f.code[..b.body.start].matches('\n').count() + 1;
                wrong.push(format!("{}:{line}: impl {} outside {home}", f.path, b.ty));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "methods away from their type's home:\n{}",
        wrong.join("\n")
    );
}
