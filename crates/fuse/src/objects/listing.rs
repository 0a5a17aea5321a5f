//! Directory listings: a prefix's entries as the store lists them
//! ([`Listing`]), names that are not file names left out and counted,
//! a listing kept for the time-to-live, and the listing of a directory
//! object_store's `LocalFileSystem` cannot list (`list_skipping`).

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use fuser::Errno;
use futures_util::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::ObjectStore;

use super::{store_errno, Entry, ObjectFs};

/// A directory's listing: its entries by name, sorted.
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub(super) entries: Vec<(String, Entry)>,
    /// Names left out as not file names.
    pub(super) skipped: u64,
}

impl Listing {
    /// The listing of a store's answer for the prefix `dir`: directories
    /// shadow objects of the same name; names that are not file names
    /// and the prefix's own marker object are left out.
    pub(super) fn new(dir: &Path, found: object_store::ListResult) -> Listing {
        let mut entries: Vec<(String, Entry)> = Vec::new();
        let mut skipped = 0;
        let mut named = |p: &Path| {
            let n = p.filename().filter(|n| is_file_name(n)).map(str::to_owned);
            skipped += u64::from(n.is_none());
            n
        };
        for p in &found.common_prefixes {
            if let Some(n) = named(p) {
                entries.push((n, Entry::Dir));
            }
        }
        let dirs: std::collections::HashSet<String> =
            entries.iter().map(|(n, _)| n.clone()).collect();
        for meta in found.objects {
            if meta.location == *dir {
                continue;
            }
            if let Some(n) = named(&meta.location).filter(|n| !dirs.contains(n)) {
                entries.push((n, Entry::File(meta)));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        Listing { entries, skipped }
    }

    pub(super) fn get(&self, name: &str) -> Option<&Entry> {
        let i = self
            .entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.entries[i].1)
    }
}

/// Whether `name` is shown as a file name: a valid key part (no `/`, no
/// control character, not `.` or `..`), not empty, and no longer than a
/// file name may be (`NAME_MAX`, 255 bytes; an S3 key part may be longer).
pub(super) fn is_file_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && PathPart::parse(name).is_ok()
}

/// A stable inode number for a listed entry the kernel has not looked
/// up (readdir's `d_ino`): a hash of its key, never the root's.
pub(super) fn listed_ino(key: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() | (1 << 63)
}

impl ObjectFs {
    /// Directory `ino`'s listing: its own if fresh, else the store's.
    pub(super) fn listing(&self, ino: u64) -> Result<Arc<Listing>, Errno> {
        let key = {
            let nodes = self.nodes.lock();
            let node = nodes.by_ino.get(&ino).ok_or(Errno::ENOENT)?;
            if !matches!(node.entry, Entry::Dir) {
                return Err(Errno::ENOTDIR);
            }
            if let Some((at, l)) = &node.listing {
                if self.fresh(*at) {
                    return Ok(l.clone());
                }
            }
            node.key.clone()
        };
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let (found, unparsed) = self
            .runtime
            .block_on(async {
                match self.store.list_with_delimiter(prefix).await {
                    Err(object_store::Error::InvalidPath { .. }) => self.list_skipping(&key).await,
                    r => r.map(|found| (found, 0)),
                }
            })
            .map_err(|e| store_errno("listing", &key, &e))?;
        let mut listing = Listing::new(&key, found);
        listing.skipped += unparsed;
        self.count_skipped(&key, listing.skipped);
        let listing = Arc::new(listing);
        if let Some(node) = self.nodes.lock().by_ino.get_mut(&ino) {
            node.listing = Some((Instant::now(), listing.clone()));
        }
        Ok(listing)
    }

    /// The listing of directory `dir` from the store's listing of every
    /// key under it, the keys the store could not read as paths left out
    /// (how many: the second figure), for a directory whose listing failed
    /// on one: object_store's `LocalFileSystem` fails a whole directory's
    /// listing for one name with a control character (or not UTF-8). It
    /// walks the whole subtree; an empty directory has no key, so is not
    /// shown.
    async fn list_skipping(
        &self,
        dir: &Path,
    ) -> object_store::Result<(object_store::ListResult, u64)> {
        let prefix = (!dir.as_ref().is_empty()).then_some(dir);
        let mut keys = self.store.list(prefix);
        let mut found = object_store::ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let mut dirs = std::collections::BTreeSet::new();
        let mut unparsed = 0;
        while let Some(key) = keys.next().await {
            let meta = match key {
                Ok(meta) => meta,
                Err(object_store::Error::InvalidPath { .. }) => {
                    unparsed += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(mut parts) = meta.location.prefix_match(dir) else {
                continue;
            };
            let under = match (parts.next(), parts.next()) {
                (Some(first), Some(_)) => Some(dir.clone().join(first)),
                (Some(_), None) => None,
                (None, _) => continue,
            };
            drop(parts);
            match under {
                Some(sub) => {
                    dirs.insert(sub);
                }
                None => found.objects.push(meta),
            }
        }
        found.common_prefixes = dirs.into_iter().collect();
        Ok((found, unparsed))
    }

    /// Counts `skipped` names left out of `dir`'s listing; the first time
    /// any are, the log says so (once a mount: a listing is made again at
    /// each time-to-live).
    pub(super) fn count_skipped(&self, dir: &Path, skipped: u64) {
        if skipped == 0 {
            return;
        }
        self.names_skipped.fetch_add(skipped, Ordering::Relaxed);
        if !self.said_skipped.swap(true, Ordering::Relaxed) {
            log::warn!(
                "foliocache-fuse: {skipped} keys under `{dir}` are not file names (a control \
                 character, `.`, `..`, longer than 255 bytes, or not UTF-8): not shown; \
                 `foliocache stat` counts them (said once)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use object_store::ObjectMeta;

    use super::*;

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: Default::default(),
            size: 1,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn a_directory_shadows_an_object_of_its_name_and_bad_names_are_left_out() {
        let dir = Path::from("d");
        let found = object_store::ListResult {
            common_prefixes: vec![Path::from("d/a"), Path::from("d/b")],
            objects: vec![meta("d"), meta("d/a"), meta("d/c"), meta("d/b")],
            extensions: Default::default(),
        };
        let l = Listing::new(&dir, found);
        let names: Vec<_> = l.entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(matches!(l.get("a"), Some(Entry::Dir)));
        assert!(matches!(l.get("c"), Some(Entry::File(_))));
        assert!(l.get("d").is_none());
        assert!(!is_file_name("..") && !is_file_name("") && !is_file_name("a\nb"));
        assert!(is_file_name(&"x".repeat(255)) && !is_file_name(&"x".repeat(256)));
        assert!(is_file_name("a b%2F"));
    }
}
