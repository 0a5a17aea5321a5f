//! A directory of many keys through the object mount, listed in pages
//! (`ObjectFs::paged`) from an in-process store that lists as S3 does
//! and counts the pages it serves: the first entries reach the program
//! before the last page is asked for, a directory shadows an object of
//! its name across pages, a small listing is kept for the time-to-live
//! and a large one is not. And `ls -f` of a million keys measured
//! (ignored; docs/testing.md).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path as FsPath;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use foliocache_fuse::{ObjectFs, ObjectOptions};
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use crate::mount::fuse_ok;
use crate::objects::{cache, options, Mounted};

/// A store of a few given keys and `n` made ones, `{dir}/o{i:07}` (made
/// as they are listed, none held), each object's bytes its key's. It
/// lists as S3 does: in key order, in pages of at most `max_keys` keys
/// and common prefixes, the next page after a token; and counts the
/// pages it served.
#[derive(Debug)]
struct Keys {
    set: Set,
    pages: AtomicU64,
}

/// The keys of a [`Keys`].
#[derive(Clone, Debug)]
struct Set {
    given: Arc<Vec<String>>,
    dir: Arc<str>,
    n: u64,
}

impl Set {
    fn made(&self, i: u64) -> String {
        format!("{}/o{i:07}", self.dir)
    }

    fn has(&self, key: &str) -> bool {
        let made = key
            .strip_prefix(&format!("{}/o", self.dir))
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| i < self.n && self.made(i) == key);
        made || self.given.binary_search_by(|k| k.as_str().cmp(key)).is_ok()
    }

    /// The keys after `after`, in order.
    fn after(self, after: &str) -> impl Iterator<Item = String> + 'static {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.made(mid).as_str() <= after {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let g = self.given.partition_point(|k| k.as_str() <= after);
        let given = self.given.clone();
        let mut given = (g..given.len()).map(move |i| given[i].clone()).peekable();
        let n = self.n;
        let mut made = (lo..n).map(move |i| self.made(i)).peekable();
        std::iter::from_fn(move || match (made.peek(), given.peek()) {
            (Some(m), Some(g)) if g < m => given.next(),
            (Some(_), _) => made.next(),
            (None, _) => given.next(),
        })
    }
}

impl Keys {
    fn new(mut given: Vec<String>, dir: &str, n: u64) -> Arc<Keys> {
        given.sort();
        Arc::new(Keys {
            set: Set {
                given: Arc::new(given),
                dir: dir.into(),
                n,
            },
            pages: AtomicU64::new(0),
        })
    }

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: Default::default(),
            size: key.len() as u64,
            e_tag: Some("1".into()),
            version: None,
        }
    }

    /// One page of the keys under `prefix` (ending in `/`, or empty)
    /// after `token`, keys under a further `/` rolled into common
    /// prefixes.
    fn page(&self, prefix: &str, token: Option<String>, max: usize) -> PaginatedListResult {
        let mut rolled = token.clone().filter(|t| t.ends_with('/'));
        let mut result = ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let (mut count, mut last, mut next) = (0, None, None);
        for key in self.set.clone().after(token.as_deref().unwrap_or(prefix)) {
            if !key.starts_with(prefix) {
                break;
            }
            if rolled.as_ref().is_some_and(|r| key.starts_with(r.as_str())) {
                continue;
            }
            if count == max {
                next = last;
                break;
            }
            count += 1;
            match key[prefix.len()..].find('/') {
                Some(i) => {
                    let cp = key[..prefix.len() + i + 1].to_owned();
                    result.common_prefixes.push(Path::from(cp.as_str()));
                    rolled = Some(cp.clone());
                    last = Some(cp);
                }
                None => {
                    result.objects.push(Keys::meta(&key));
                    last = Some(key);
                }
            }
        }
        PaginatedListResult {
            result,
            page_token: next,
        }
    }
}

impl std::fmt::Display for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} made under {})", self.set.n, self.set.dir)
    }
}

#[async_trait]
impl PaginatedListStore for Keys {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        assert_eq!(opts.delimiter.as_deref(), Some("/"));
        self.pages.fetch_add(1, Ordering::Relaxed);
        Ok(self.page(
            prefix.unwrap_or(""),
            opts.page_token,
            opts.max_keys.unwrap_or(1000),
        ))
    }
}

/// What a store that is not written to answers.
fn read_only<T>(operation: &str) -> Result<T> {
    Err(object_store::Error::NotImplemented {
        operation: operation.into(),
        implementer: "Keys".into(),
    })
}

#[async_trait]
impl ObjectStore for Keys {
    async fn put_opts(&self, _: &Path, _: PutPayload, _: PutOptions) -> Result<PutResult> {
        read_only("put")
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        read_only("put_multipart")
    }

    async fn get_opts(&self, location: &Path, o: GetOptions) -> Result<GetResult> {
        let key = location.as_ref();
        if !self.set.has(key) {
            return Err(object_store::Error::NotFound {
                path: key.into(),
                source: "no such key".into(),
            });
        }
        let size = key.len() as u64;
        let range = match o.range {
            Some(GetRange::Bounded(r)) => r.start.min(size)..r.end.min(size),
            Some(GetRange::Offset(at)) => at.min(size)..size,
            Some(GetRange::Suffix(n)) => size.saturating_sub(n)..size,
            None => 0..size,
        };
        let bytes =
            Bytes::copy_from_slice(&key.as_bytes()[range.start as usize..range.end as usize]);
        let payload = if o.head {
            stream::empty().boxed()
        } else {
            stream::once(async move { Ok(bytes) }).boxed()
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta: Keys::meta(key),
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        stream::once(async { read_only("delete") }).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let under = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        let found = self.set.clone().after(&under);
        stream::iter(found.take_while(move |k| k.starts_with(&under)))
            .map(|k| Ok(Keys::meta(&k)))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        // Page after page, as object_store's S3 client answers it.
        let under = prefix.map(|p| format!("{p}/"));
        let mut whole = ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let mut token = None;
        loop {
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                page_token: token,
                ..Default::default()
            };
            let page = self.list_paginated(under.as_deref(), opts).await?;
            whole.common_prefixes.extend(page.result.common_prefixes);
            whole.objects.extend(page.result.objects);
            token = page.page_token;
            if token.is_none() {
                return Ok(whole);
            }
        }
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> Result<()> {
        read_only("copy")
    }
}

/// `store` mounted, listed in pages of `page` keys (or whole), with a
/// time-to-live of a minute.
fn mounted(store: &Arc<Keys>, page: usize, paged: bool) -> Mounted {
    let mut opts = options(Duration::from_secs(60));
    opts.listing_page = page;
    mount_with(store, &opts, paged)
}

fn mount_with(store: &Arc<Keys>, opts: &ObjectOptions, paged: bool) -> Mounted {
    let fs = if paged {
        ObjectFs::paged(store.clone(), Path::default(), cache(), opts)
    } else {
        ObjectFs::new(store.clone(), Path::default(), cache(), opts)
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    Mounted::serve(tmp, Default::default(), fs.expect("the tree"), "keys://")
}

/// Every name in directory `p`, in the order listed.
fn listed(p: &FsPath) -> Vec<String> {
    fs::read_dir(p)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", p.display()))
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect()
}

#[test]
fn the_first_entries_come_before_the_last_page_is_asked_for() {
    if !fuse_ok("the_first_entries_come_before_the_last_page_is_asked_for") {
        return;
    }
    // 50,000 keys in 500 pages of 100; the first reply (the kernel's
    // buffer: a few thousand names at most) needs a few dozen.
    let n = 50_000;
    let store = Keys::new(Vec::new(), "big", n);
    let m = mounted(&store, 100, true);
    let mut dir = fs::read_dir(m.p("big")).expect("opendir");
    let first = dir.next().expect("an entry").expect("readdir");
    let served = store.pages.load(Ordering::Relaxed);
    assert!(
        served < 100,
        "{served} of 500 pages asked for before the first entry"
    );
    assert!(first.file_name().to_string_lossy().starts_with('o'));
    let rest = dir.count() as u64;
    assert_eq!(1 + rest, n, "every key listed once");
    // All of it listed: each page asked for once.
    assert_eq!(store.pages.load(Ordering::Relaxed), 500);

    // Whole (`ObjectFs::new`): every page before the first entry.
    let whole = Keys::new(Vec::new(), "big", n);
    let w = mounted(&whole, 100, false);
    let mut dir = fs::read_dir(w.p("big")).expect("opendir");
    dir.next().expect("an entry").expect("readdir");
    // (`list_with_delimiter`'s pages are S3's 1,000 keys.)
    assert_eq!(whole.pages.load(Ordering::Relaxed), n / 1000);
}

#[test]
fn a_directory_shadows_an_object_of_its_name_across_pages() {
    if !fuse_ok("a_directory_shadows_an_object_of_its_name_across_pages") {
        return;
    }
    // In key order: `d/a`, `d/a-1`, `d/a.txt`, then the prefix `d/a/`
    // (`-` and `.` sort before `/`): pages of 2 split them.
    let given = [
        "d/a", "d/a-1", "d/a.txt", "d/a/x", "d/a/y", "d/b", "d/b0", "d/c/z",
    ];
    let store = Keys::new(given.map(String::from).to_vec(), "d/many", 30);
    let m = mounted(&store, 2, true);
    let mut names = listed(&m.p("d"));
    assert_eq!(names.len(), 7, "{names:?}");
    names.sort();
    assert_eq!(names, ["a", "a-1", "a.txt", "b", "b0", "c", "many"]);
    assert!(m.p("d/a").is_dir(), "the directory shadows the object");
    assert_eq!(listed(&m.p("d/a")).len(), 2);
    assert_eq!(fs::read(m.p("d/a.txt")).expect("read"), b"d/a.txt");
    assert_eq!(
        fs::read(m.p("d/many/o0000029")).expect("read"),
        b"d/many/o0000029"
    );
    assert_eq!(listed(&m.p("d/many")).len(), 30);
}

#[test]
fn a_small_listing_is_kept_for_the_ttl_and_a_large_one_is_not() {
    if !fuse_ok("a_small_listing_is_kept_for_the_ttl_and_a_large_one_is_not") {
        return;
    }
    let store = Keys::new(vec!["small/x".into(), "small/y".into()], "large", 70_000);
    let m = mounted(&store, 1000, true);
    assert_eq!(listed(&m.p("small")).len(), 2);
    assert_eq!(listed(&m.p("large")).len(), 70_000);
    let pages = store.pages.load(Ordering::Relaxed);
    // Within the time-to-live: the small one from what was kept (its
    // lookups too), the large one (over 65,536 entries) from the store.
    assert_eq!(listed(&m.p("small")).len(), 2);
    assert_eq!(fs::read(m.p("small/y")).expect("read"), b"small/y");
    assert_eq!(store.pages.load(Ordering::Relaxed), pages);
    assert_eq!(listed(&m.p("large")).len(), 70_000);
    assert_eq!(store.pages.load(Ordering::Relaxed), pages + 70);
}

/// The peak resident memory of this process since it was last reset,
/// in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// `ls -f` of a directory of `FOLIOCACHE_LISTING_KEYS` keys (default a
/// million) through the mount, in pages, whole, or (where
/// `FOLIOCACHE_LISTING_WAY` does not say which) both: when its
/// first line came, when it ended, and this process's peak resident
/// memory (the mount's server; the store makes its keys as they are
/// listed) over the listing. It asserts only that every key was listed;
/// the figures are printed (docs/measurements/).
#[test]
#[ignore = "a measurement: cargo test --release -p foliocache-fuse --test it listing::measure -- --ignored --nocapture"]
fn measure_ls_of_a_million_keys() {
    if !fuse_ok("measure_ls_of_a_million_keys") {
        return;
    }
    let n: u64 = std::env::var("FOLIOCACHE_LISTING_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // `paged`, `whole` or both (in that order): one a process, for a peak
    // of its own.
    let ways = std::env::var("FOLIOCACHE_LISTING_WAY").unwrap_or_default();
    for paged in [true, false] {
        if ways.is_empty() || ways == if paged { "paged" } else { "whole" } {
            let store = Keys::new(Vec::new(), "many", n);
            let m = mounted(&store, 1000, paged);
            fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
            let base = peak_kib();
            let t = Instant::now();
            let mut ls = Command::new("ls")
                .args(["-f", "-1"])
                .arg(m.p("many"))
                .stdout(Stdio::piped())
                .spawn()
                .expect("ls");
            let mut lines = BufReader::new(ls.stdout.take().expect("stdout")).lines();
            lines.next().expect("a line").expect("read");
            let first = t.elapsed();
            let rest = lines.count() as u64;
            assert!(ls.wait().expect("ls").success());
            let all = t.elapsed();
            // `.` and `..` besides the keys.
            assert_eq!(1 + rest, n + 2);
            println!(
                "{} of {n} keys: first entry {:.3} s, all {:.2} s, pages {}, \
                 peak RSS {} MiB (at the start {} MiB)",
                if paged { "in pages" } else { "whole" },
                first.as_secs_f64(),
                all.as_secs_f64(),
                store.pages.load(Ordering::Relaxed),
                peak_kib() >> 10,
                base >> 10
            );
        }
    }
}
