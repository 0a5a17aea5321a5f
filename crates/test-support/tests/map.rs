//! `docs/map.md` held to the code: each row's code column (the second)
//! names where a mechanism lives, and these tests fail when it names
//! something that is not there.
//!
//! The story: the map's rows named `filemap/mod.rs` for functions that had
//! moved into files of their own when `filemap/` was split by mechanism,
//! and five of eleven rows checked by hand were stale. A reader who follows
//! a row must find what it names.
//!
//! The rules, for every row of the table in `docs/map.md`:
//!
//! - every link of the row (`[text](path)`, relative to `docs/`, an
//!   anchor left out) resolves to a file or a folder;
//! - every backticked token of the code column is either
//!   - a file or folder (it holds a `.` or ends in `/`: `tree/`,
//!     `aio/uring.rs`), which must exist under a folder the column links, or
//!   - a Rust name (`grab_folios`, `Cache::memfile`, `ReadQueue`, `TARGETS`),
//!     whose last segment must be defined in a file the column links (or
//!     in a `.rs` file under a folder it links): as `fn NAME` when it is
//!     snake_case, as a `struct`, `enum`, `trait`, `type` or `union` when it
//!     is CamelCase, as a `const` or `static` when it is SCREAMING_CASE;
//!     its other segments (`Cache` of `Cache::memfile`, `copy` of
//!     `copy::time_routines`) must be a type or a module of a crate the
//!     column links into;
//! - any other backticked token in the code column (a command line, a
//!   kernel flag) fails: the code column names our files and our items;
//!   words, the kernel's names and other crates' belong in the concept
//!   column.
//!
//! The concept, tests and benchmark columns are not checked: they hold test
//! names, scenario names and engine specs, whose homes are other tables.
//! Sources are read as text (a definition inside a comment counts: close
//! enough for a map, which must only not send a reader to the wrong file).

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("test-support lives in crates/")
        .to_path_buf()
}

/// The cells of a table row, split at `|` outside backticks.
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut code = false;
    for c in line
        .trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .chars()
    {
        match c {
            '`' => {
                code = !code;
                cur.push(c);
            }
            '|' if !code => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// The spans of `cell` between `open` and the next `close`, each with what
/// follows it.
fn spans<'a>(cell: &'a str, open: &str, close: char) -> Vec<(&'a str, &'a str)> {
    let mut out = Vec::new();
    let mut rest = cell;
    while let Some(i) = rest.find(open) {
        rest = &rest[i + open.len()..];
        let end = rest.find(close).unwrap_or(rest.len());
        let span = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        out.push((span, rest));
    }
    out
}

/// The targets of the markdown links `[text](target)` in `cell`.
fn links(cell: &str) -> Vec<String> {
    spans(cell, "](", ')')
        .into_iter()
        .map(|(t, _)| t.to_string())
        .collect()
}

/// The backticked tokens of `cell`, links' texts left out (`[`x`](...)`
/// is checked as the link).
fn ticked(cell: &str) -> Vec<String> {
    spans(cell, "`", '`')
        .into_iter()
        .filter(|(_, after)| !after.starts_with(']'))
        .map(|(t, _)| t.to_string())
        .collect()
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every `.rs` file at or under `path`.
fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_path_buf());
        }
        return;
    }
    let Ok(entries) = fs::read_dir(path) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        rust_files(&p, out);
    }
}

/// Whether `text` holds `KEYWORD NAME` for one of `keywords`, `NAME` whole.
fn defines(text: &str, keywords: &[&str], name: &str) -> bool {
    keywords.iter().any(|kw| {
        let pat = format!("{kw} {name}");
        text.match_indices(&pat).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + pat.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

/// The keywords that define a name of this case.
fn keywords_for(name: &str) -> &'static [&'static str] {
    if name.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
        if name.chars().all(|c| !c.is_ascii_lowercase()) {
            &["const", "static"]
        } else {
            &["struct", "enum", "trait", "type", "union"]
        }
    } else {
        &["fn"]
    }
}

/// The folder of the crate `path` lies in (the nearest with a
/// `Cargo.toml`), if any.
fn crate_dir(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|a| a.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// Whether `segment` (not the last of a path) is a type or a module of one
/// of the crates `crates`.
fn is_type_or_module(crates: &[PathBuf], segment: &str) -> bool {
    crates.iter().any(|dir| {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        files.iter().any(|f| {
            f.file_stem().is_some_and(|s| s == segment)
                || f.parent()
                    .is_some_and(|p| p.file_name().is_some_and(|n| n == segment))
                || fs::read_to_string(f).is_ok_and(|t| {
                    defines(
                        &t,
                        &["struct", "enum", "trait", "type", "union", "mod"],
                        segment,
                    )
                })
        })
    })
}

/// The paths the links of `cell` name (relative to `docs`), each beside
/// whether it exists.
fn link_paths(docs: &Path, cell: &str) -> Vec<(String, PathBuf, bool)> {
    links(cell)
        .into_iter()
        .map(|target| {
            let path = docs.join(target.split('#').next().unwrap_or(""));
            let exists = path.exists();
            (target, path, exists)
        })
        .collect()
}

/// An error for each link of `cell` that resolves to nothing.
fn dead_links(docs: &Path, cell: &str) -> Vec<String> {
    link_paths(docs, cell)
        .into_iter()
        .filter(|(_, _, exists)| !exists)
        .map(|(target, _, _)| format!("link `{target}` resolves to nothing"))
        .collect()
}

/// What is wrong with one row's code column, `docs` being the folder its
/// links are relative to.
fn check_code_cell(docs: &Path, cell: &str) -> Vec<String> {
    let mut errors = dead_links(docs, cell);
    let linked: Vec<PathBuf> = link_paths(docs, cell)
        .into_iter()
        .filter(|(_, _, exists)| *exists)
        .map(|(_, path, _)| path)
        .collect();
    let folders: Vec<&PathBuf> = linked.iter().filter(|p| p.is_dir()).collect();
    let mut files = Vec::new();
    for p in &linked {
        rust_files(p, &mut files);
    }
    let texts: Vec<String> = files
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .collect();
    let mut crates: Vec<PathBuf> = linked.iter().filter_map(|p| crate_dir(p)).collect();
    crates.dedup();
    for token in ticked(cell) {
        if token.contains('.') || token.ends_with('/') {
            if !folders.iter().any(|d| d.join(&token).exists()) {
                errors.push(format!("`{token}` is under no folder the row links"));
            }
            continue;
        }
        let segments: Vec<&str> = token.split("::").collect();
        if !segments.iter().all(|s| is_ident(s)) {
            errors.push(format!(
                "`{token}` is neither a file nor a Rust name: the code column names our files and items"
            ));
            continue;
        }
        let (last, leading) = segments
            .split_last()
            .expect("split gives one segment at least");
        if !texts.iter().any(|t| defines(t, keywords_for(last), last)) {
            errors.push(format!(
                "`{token}`: no `{} {last}` in the files the row links",
                keywords_for(last).join("`/`")
            ));
        }
        for seg in leading {
            if !is_type_or_module(&crates, seg) {
                errors.push(format!(
                    "`{token}`: `{seg}` is no type or module of the crates the row links"
                ));
            }
        }
    }
    errors
}

/// What is wrong with the map `text`, each error beside its row's concept.
fn check(docs: &Path, text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let mut rows = 0;
    for line in text.lines() {
        if !line.starts_with('|') || line.starts_with("|---") || line.starts_with("| concept") {
            continue;
        }
        rows += 1;
        let cells = cells(line);
        let Some(code) = cells.get(1) else {
            errors.push(format!("a row with no code column: {line}"));
            continue;
        };
        let concept: String = cells[0].chars().take(60).collect();
        let mut found = check_code_cell(docs, code);
        for (i, cell) in cells.iter().enumerate() {
            if i != 1 {
                found.extend(dead_links(docs, cell));
            }
        }
        errors.extend(found.into_iter().map(|e| format!("row \"{concept}\": {e}")));
    }
    if rows == 0 {
        errors.push("no table rows found".to_string());
    }
    errors
}

#[test]
fn every_name_in_the_map_is_defined_where_its_row_says() {
    let docs = root().join("docs");
    let text = fs::read_to_string(docs.join("map.md")).expect("docs/map.md");
    let errors = check(&docs, &text);
    assert!(
        errors.is_empty(),
        "docs/map.md is stale:\n{}",
        errors.join("\n")
    );
}

/// A row that names this very file: `check` is defined here, the others
/// are not, so each stale part of the row gives its error.
#[test]
fn a_stale_row_fails() {
    let docs = root().join("docs");
    let text = "\
| concept | code | tests | benchmark |
|---|---|---|---|
| the map test | [map.rs](../crates/test-support/tests/map.rs) (`check`, `links`) | - | - |
| a moved function | [map.rs](../crates/test-support/tests/map.rs) (`check`, `check_moved_away`) | - | - |
| a type of the wrong kind | [tests/](../crates/test-support/tests/) (`Check`, `map.rs`, `gone.rs`) | - | - |
| a link to nothing | [gone.rs](../crates/test-support/tests/gone.rs), `foliocache run` | [gone/](../crates/test-support/tests/gone/) | - |
";
    let errors = check(&docs, text);
    assert_eq!(errors.len(), 6, "{errors:#?}");
    assert!(
        errors[0].contains("`check_moved_away`: no `fn"),
        "{}",
        errors[0]
    );
    assert!(errors[1].contains("`Check`: no `struct"), "{}", errors[1]);
    assert!(
        errors[2].contains("`gone.rs` is under no folder"),
        "{}",
        errors[2]
    );
    assert!(
        errors[3].contains("link `../crates/test-support/tests/gone.rs` resolves to nothing"),
        "{}",
        errors[3]
    );
    assert!(
        errors[4].contains("`foliocache run` is neither a file nor a Rust name"),
        "{}",
        errors[4]
    );
    assert!(
        errors[5].contains("link `../crates/test-support/tests/gone/` resolves to nothing"),
        "{}",
        errors[5]
    );
}

#[test]
fn a_path_needs_its_type_or_module() {
    let docs = root().join("docs");
    let row = "[map.rs](../crates/test-support/tests/map.rs) (`map::check`, `Nowhere::check`)";
    let errors = check_code_cell(&docs, row);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].contains("`Nowhere` is no type or module"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_bar_inside_backticks_splits_no_cell() {
    assert_eq!(cells("| a | `x | y` | c |"), vec!["a", "`x | y`", "c"]);
}
