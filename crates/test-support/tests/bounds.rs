//! The workspace's size bounds, as `docs/testing.md` ("Bounds") states
//! them, over every crate's non-test sources (`crates/*/src/**/*.rs`,
//! `#[cfg(test)]` modules inside them included):
//!
//! - no file over [`MAX_FILE_LINES`] lines ([`MAX_CLI_FILE_LINES`] in the
//!   CLI and the bench harness, whose files are commands, scenarios and
//!   engines a reader takes one at a time): a file is one mechanism;
//! - no function over [`MAX_FN_LINES`] lines, from its `fn` line to its
//!   closing brace: a longer one is several steps that want names.
//!
//! Tests (`tests/`), benches and examples are not bound: a test file is a
//! list of cases, not a mechanism.
//!
//! The sources are read as text: comments, string and character literals
//! are skipped so that a brace inside them does not count, and a function
//! is the `fn` keyword followed by a name, up to the brace that closes its
//! body.

use std::fs;
use std::path::{Path, PathBuf};

use test_support::modgraph::rust_files;

/// The most lines a source file may have.
const MAX_FILE_LINES: usize = 1200;
/// The most lines a source file of the CLI and of the bench harness
/// (`crates/cli/src`, `crates/bench/src`) may have.
const MAX_CLI_FILE_LINES: usize = 700;
/// The crates (by directory) whose files have [`MAX_CLI_FILE_LINES`].
const CLI_CRATES: [&str; 2] = ["cli", "bench"];
/// The most lines a function may span.
const MAX_FN_LINES: usize = 100;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives in crates/")
        .to_path_buf()
}

/// The non-test source files of every crate, with the file bound each has.
fn sources() -> Vec<(PathBuf, usize)> {
    let mut crates: Vec<PathBuf> = fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    let mut out = Vec::new();
    for krate in crates {
        let bound = if krate
            .file_name()
            .is_some_and(|n| CLI_CRATES.iter().any(|c| n == *c))
        {
            MAX_CLI_FILE_LINES
        } else {
            MAX_FILE_LINES
        };
        let files = rust_files(&krate.join("src"));
        out.extend(files.into_iter().map(|f| (f, bound)));
    }
    assert!(
        out.len() > 50,
        "found only {} source files under {:?}",
        out.len(),
        crates_dir()
    );
    out
}

/// `text` with comments, string and character literals blanked (their
/// newlines kept, so that line numbers stay true).
fn code_only(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    // Copies `b[from..to]` as blanks, keeping newlines.
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        out.extend(
            b[from..to]
                .iter()
                .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
        );
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c == b'/' && next == Some(b'*') {
            // Block comments nest in Rust.
            let (mut j, mut depth) = (i + 2, 1);
            while j < b.len() && depth > 0 {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(b, i) {
            blank(&mut out, i, end);
            i = end;
        } else if c == b'"' {
            // A string, or a byte string `b"..."` whose `b` was copied.
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == b'\'' {
            // A character literal (`'x'`, `'\n'`, `'\u{..}'`, `'{'`) or a
            // lifetime (`'a`), which is left as it is.
            let end = if next == Some(b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 2 + ch_len)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Where a raw string starting at `i` (`r"`, `r#"`, `br#"`, ...) ends.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let start = match (b[i], b.get(i + 1)) {
        (b'r', _) if !prev_ident => i + 1,
        (b'b', Some(b'r')) if !prev_ident => i + 2,
        _ => return None,
    };
    let hashes = b[start..].iter().take_while(|&&c| c == b'#').count();
    if b.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = start + hashes + 1;
    b[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| body + p + close.len())
}

/// Each function in `code` (as [`code_only`] leaves it): its name, first
/// line and number of lines.
fn functions(code: &[u8]) -> Vec<(String, usize, usize)> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let line_at = |pos: usize| code[..pos].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..].windows(3).position(|w| w == b"fn ") {
        let at = i + p;
        i = at + 3;
        if at > 0 && ident(code[at - 1]) {
            continue;
        }
        let name_start = i + code[i..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        let name_len = code[name_start..].iter().take_while(|&&c| ident(c)).count();
        if name_len == 0 {
            continue; // `fn(u8) -> u8`, a pointer type
        }
        let name = String::from_utf8_lossy(&code[name_start..name_start + name_len]).into_owned();
        // The body's opening brace: the first `{` outside the signature's
        // parentheses and brackets; a `;` there first means no body.
        let mut depth = 0i32;
        let mut j = name_start + name_len;
        let mut open = None;
        while j < code.len() {
            match code[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    open = Some(j);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else { continue };
        let mut braces = 0i32;
        let mut close = None;
        for (k, &c) in code[open..].iter().enumerate() {
            match c {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        close = Some(open + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let close = close.unwrap_or_else(|| panic!("unbalanced braces after `fn {name}`"));
        let first = line_at(at);
        out.push((name, first, line_at(close) - first + 1));
    }
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(crates_dir().parent().unwrap())
        .unwrap_or(p)
        .display()
        .to_string()
}

#[test]
fn no_source_file_is_over_its_bound() {
    let over: Vec<String> = sources()
        .into_iter()
        .filter_map(|(path, bound)| {
            let lines = fs::read_to_string(&path).unwrap().lines().count();
            (lines > bound).then(|| format!("{}: {lines} lines (bound {bound})", relative(&path)))
        })
        .collect();
    assert!(
        over.is_empty(),
        "files over their bound, one mechanism a file:\n{}",
        over.join("\n")
    );
}

#[test]
fn no_function_is_over_its_bound() {
    let mut over = Vec::new();
    for (path, _) in sources() {
        let code = code_only(&fs::read_to_string(&path).unwrap());
        for (name, line, len) in functions(&code) {
            if len > MAX_FN_LINES {
                over.push(format!(
                    "{}:{line}: fn {name}: {len} lines",
                    relative(&path)
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions over {MAX_FN_LINES} lines, several steps that want names:\n{}",
        over.join("\n")
    );
}

/// The scanner itself: what it must and must not take for a function.
#[test]
fn the_scanner_finds_bodies_and_skips_literals() {
    let src = r##"
// fn in_comment() { }
/* fn in_block() { /* nested */ } */
fn one() {
    let s = "fn in_string() { {";
    let r = r#"fn in_raw() { "{" "#;
    let c = '{';
    let b = b"{";
    let f: fn(u8) -> u8 = |x| x;
}
fn two<'a>(x: &'a [u8; 2]) -> &'a u8 where u8: Copy { &x[0] }
trait T { fn decl(&self); fn with_default(&self) {
} }
"##;
    let found = functions(&code_only(src));
    let names: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|(n, l, len)| (n.as_str(), *l, *len))
        .collect();
    assert_eq!(
        names,
        [("one", 4, 7), ("two", 11, 1), ("with_default", 12, 2)]
    );
}
