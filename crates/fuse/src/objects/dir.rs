//! A directory the kernel reads ([`DirRead`], `opendir`'s handle): its
//! entries handed to `readdir` as the store lists them. From a store that
//! lists in pages (object_store's `PaginatedListStore`: S3, GCS, Azure)
//! a page of at most [`ObjectOptions::listing_page`](super::ObjectOptions)
//! keys is asked for at `opendir`, the next one as soon as one arrives,
//! and a reply is sent from what has arrived: the first entries reach the
//! program before the last page does, and what is held is two pages of
//! keys, not the prefix. A listing of at most [`KEPT`] entries is kept
//! whole once read to its end, for the time-to-live, as a listing of a
//! store that answers whole is (`ObjectFs::listing`): lookups in the
//! directory and the next `opendir` are answered from it without a
//! request.
//!
//! A directory shadows an object of its name (the tree's rule,
//! [`super`]): a page's prefixes and objects come in key order (S3's,
//! GCS's and Azure's listings are), where the prefix `a/` follows the
//! object `a` and whatever begins with `a` and a character before `/`
//! (`a.txt`, `a-1`), maybe in a later page. So a file is held back until
//! the listing has passed the key its directory would have: the files
//! held are then prefixes of the last key listed, a few at most. A store
//! whose listing is not in key order (S3 Express One Zone's directory
//! buckets) may list both.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use fuser::{Errno, FileType};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::path::Path;
use object_store::ObjectMeta;
use tokio::task::JoinHandle;

use super::listing::{is_file_name, Listing};
use super::{is_control, store_errno, Entry, ObjectFs};

/// The most entries of a listing read in pages that is kept whole once
/// read to its end: about 16 MiB of names and versions at most, so that
/// a directory of tens of thousands of files is copied (`cp -r`: a lookup
/// of each) without a request for each, while a prefix of millions of
/// keys is held a page at a time.
pub(super) const KEPT: usize = 1 << 16;

/// What lists a store's directories in pages.
pub(super) type Pager = Arc<dyn PaginatedListStore>;

/// A page asked for.
type Asked = JoinHandle<object_store::Result<PaginatedListResult>>;

/// A directory the kernel reads: its entries numbered from 0 (`.`,
/// `..`, then the listing's, the control file left out at the root), an
/// entry's `readdir` offset its number plus one.
pub(super) struct DirRead {
    pub(super) ino: u64,
    pub(super) parent: u64,
    /// The directory's key (the entries' ids are made from it).
    pub(super) key: Path,
    /// The number of `ready`'s first entry.
    pub(super) at: u64,
    /// Entries listed and not yet given.
    pub(super) ready: VecDeque<(String, FileType)>,
    source: Source,
}

/// Where the entries after `ready` come from.
enum Source {
    /// A whole listing, from its entry `next`.
    Whole { listing: Arc<Listing>, next: usize },
    /// The store's pages.
    Pages(Box<Pages>),
}

/// A listing read in pages.
struct Pages {
    /// The page asked for and not yet read (`None`: the last was read).
    asked: Option<Asked>,
    /// Files held back until no directory of their name can follow.
    held: Vec<(String, ObjectMeta)>,
    /// The entries listed so far while at most [`KEPT`] (`None` past it).
    kept: Option<Vec<(String, Entry)>>,
    /// Names left out as not file names.
    skipped: u64,
    /// When the first page was asked for (a kept listing's age).
    since: Instant,
    /// The error a page's request ended in: every later `readdir` of the
    /// handle fails with it (the listing is not silently cut short).
    failed: Option<Errno>,
}

impl Drop for Pages {
    fn drop(&mut self) {
        // A directory closed before its end: the page asked for is not
        // wanted.
        if let Some(asked) = &self.asked {
            asked.abort();
        }
    }
}

/// Whether `file + "/"`, the key a directory named `file` would sort at,
/// comes before `key`: no directory of that name can follow `key` in a
/// listing in key order.
fn passed(file: &str, key: &str) -> bool {
    file.bytes().chain(std::iter::once(b'/')).lt(key.bytes())
}

impl ObjectFs {
    /// Directory `ino` to be read from its start: its kept listing while
    /// fresh, else the store's pages (the first asked for now) or its
    /// whole listing.
    pub(super) fn dir_read(&self, ino: u64) -> Result<DirRead, Errno> {
        let (parent, key, kept) = {
            let nodes = self.nodes.lock();
            let node = nodes.by_ino.get(&ino).ok_or(Errno::ENOENT)?;
            if !matches!(node.entry, Entry::Dir) {
                return Err(Errno::ENOTDIR);
            }
            let kept = match &node.listing {
                Some((at, l)) if self.fresh(*at) => Some(l.clone()),
                _ => None,
            };
            (node.parent, node.key.clone(), kept)
        };
        let source = match (kept, &self.pager) {
            (Some(listing), _) => Source::Whole { listing, next: 0 },
            (None, Some(_)) => Source::Pages(Box::new(Pages {
                asked: Some(self.ask_page(&key, None)),
                held: Vec::new(),
                kept: Some(Vec::new()),
                skipped: 0,
                since: Instant::now(),
                failed: None,
            })),
            (None, None) => Source::Whole {
                listing: self.listing(ino)?,
                next: 0,
            },
        };
        let dots = [(".", FileType::Directory), ("..", FileType::Directory)];
        Ok(DirRead {
            ino,
            parent,
            key,
            at: 0,
            ready: dots.map(|(n, k)| (n.to_owned(), k)).into(),
            source,
        })
    }

    /// Asks the store for the page of `dir`'s listing after `token` (the
    /// first: `None`), on the runtime.
    fn ask_page(&self, dir: &Path, token: Option<String>) -> Asked {
        let pager = self
            .pager
            .clone()
            .expect("asked only of a store with pages");
        let prefix = (!dir.as_ref().is_empty()).then(|| format!("{dir}/"));
        let opts = PaginatedListOptions {
            delimiter: Some("/".into()),
            max_keys: Some(self.listing_page),
            page_token: token,
            ..PaginatedListOptions::default()
        };
        self.runtime
            .spawn(async move { pager.list_paginated(prefix.as_deref(), opts).await })
    }

    /// Lists more of `d` into its `ready` entries: whether there are any
    /// (`false`: the listing has ended). A page that is all held back or
    /// left out is followed by the next.
    pub(super) fn dir_fill(&self, d: &mut DirRead) -> Result<bool, Errno> {
        while d.ready.is_empty() {
            let pages = match &mut d.source {
                Source::Whole { listing, next } => {
                    let from = *next;
                    *next = listing.entries.len().min(from + 1024);
                    for (name, entry) in &listing.entries[from..*next] {
                        if !is_control(d.ino, std::ffi::OsStr::new(name)) {
                            d.ready.push_back((name.clone(), kind(entry)));
                        }
                    }
                    if from == *next {
                        return Ok(false);
                    }
                    continue;
                }
                Source::Pages(pages) => pages,
            };
            if let Some(e) = pages.failed {
                return Err(e);
            }
            let Some(asked) = pages.asked.take() else {
                return Ok(false);
            };
            let page = match self.runtime.block_on(asked) {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => return Err(*pages.failed.insert(store_errno("listing", &d.key, &e))),
                Err(e) => {
                    log::warn!("foliocache-fuse: a listing page of {}: {e}", d.key);
                    return Err(*pages.failed.insert(Errno::EIO));
                }
            };
            if let Some(token) = page.page_token {
                pages.asked = Some(self.ask_page(&d.key, Some(token)));
            }
            self.take_page(d, page.result);
        }
        Ok(true)
    }

    /// `page`'s entries into `d`'s `ready` in key order, files held back
    /// while a directory of their name may follow; at the listing's end
    /// the files still held, and the listing kept if it is small.
    fn take_page(&self, d: &mut DirRead, page: object_store::ListResult) {
        let Source::Pages(pages) = &mut d.source else {
            return;
        };
        let mut listed: Vec<(String, String, Entry)> = Vec::new();
        for p in page.common_prefixes {
            match p.filename().filter(|n| is_file_name(n)) {
                Some(n) => listed.push((format!("{n}/"), n.to_owned(), Entry::Dir)),
                None => pages.skipped += 1,
            }
        }
        for meta in page.objects {
            if meta.location == d.key {
                // The prefix's own marker object.
                continue;
            }
            match meta.location.filename().filter(|n| is_file_name(n)) {
                Some(n) => listed.push((n.to_owned(), n.to_owned(), Entry::File(meta))),
                None => pages.skipped += 1,
            }
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut give = |name: String, entry: Entry, pages: &mut Pages| {
            if let Some(kept) = &mut pages.kept {
                if kept.len() < KEPT {
                    kept.push((name.clone(), entry.clone()));
                } else {
                    pages.kept = None;
                }
            }
            if !is_control(d.ino, std::ffi::OsStr::new(&name)) {
                d.ready.push_back((name, kind(&entry)));
            }
        };
        for (sort_key, name, entry) in listed {
            let mut i = 0;
            while i < pages.held.len() {
                if passed(&pages.held[i].0, &sort_key) {
                    let (n, meta) = pages.held.swap_remove(i);
                    give(n, Entry::File(meta), pages);
                } else {
                    i += 1;
                }
            }
            match entry {
                Entry::Dir => {
                    // It shadows a file of its name.
                    pages.held.retain(|(n, _)| *n != name);
                    give(name, entry, pages);
                }
                Entry::File(meta) => pages.held.push((name, meta)),
            }
        }
        if pages.asked.is_some() {
            return;
        }
        for (n, meta) in std::mem::take(&mut pages.held) {
            give(n, Entry::File(meta), pages);
        }
        self.count_skipped(&d.key, pages.skipped);
        if let Some(mut entries) = pages.kept.take() {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let listing = Arc::new(Listing {
                entries,
                skipped: pages.skipped,
            });
            if let Some(node) = self.nodes.lock().by_ino.get_mut(&d.ino) {
                node.listing = Some((pages.since, listing));
            }
        }
    }
}

/// The file type `readdir` gives for `entry`.
fn kind(entry: &Entry) -> FileType {
    match entry {
        Entry::Dir => FileType::Directory,
        Entry::File(_) => FileType::RegularFile,
    }
}

#[cfg(test)]
mod tests {
    use super::passed;

    #[test]
    fn a_file_is_passed_once_the_listing_is_beyond_its_directorys_key() {
        // Keys between `a` and `a/` in byte order: a directory `a` may
        // still come.
        assert!(!passed("a", "a"));
        assert!(!passed("a", "a-1"));
        assert!(!passed("a", "a.txt"));
        assert!(!passed("a", "a/"));
        assert!(passed("a", "a0"));
        assert!(passed("a", "a/b"));
        assert!(passed("a", "b"));
        assert!(passed("ab", "b/"));
        assert!(!passed("b", "a/"));
    }
}
