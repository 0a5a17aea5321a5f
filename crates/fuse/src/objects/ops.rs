//! The FUSE requests of an [`ObjectFs`]: lookups and attributes, the
//! open handles (files pinned to the version opened, directories'
//! listings, the control file), reads (ranged GETs through the cache),
//! directory reads; every write refused (`EROFS`: the mount is
//! read-only).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use object_store::path::{Path, PathPart};
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use parking_lot::Mutex;

use super::listing::{listed_ino, Listing};
use super::{is_control, store_errno, Entry, ObjectFs, MAX_IO, ROOT};
use crate::control::{self, CONTROL_INO};

/// An open file, directory or control file.
pub(super) enum Open {
    /// The object's key and the version opened (shared with each read).
    File(Arc<(Path, ObjectMeta)>),
    Dir {
        ino: u64,
        parent: u64,
        listing: Arc<Listing>,
    },
    Control(Arc<Mutex<control::Session>>),
}

/// The open handles by number.
pub(super) struct Handles {
    pub(super) open: HashMap<u64, Open>,
    pub(super) next: u64,
}

impl ObjectFs {
    /// `range` of the version `meta` names of object `key`.
    fn read_range(
        &self,
        key: &Path,
        meta: &ObjectMeta,
        range: Range<u64>,
    ) -> Result<bytes::Bytes, Errno> {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: meta.e_tag.clone(),
            ..GetOptions::default()
        };
        let got = self.runtime.block_on(async {
            let found = self.store.get_opts(key, opts).await?;
            found.bytes().await
        });
        match got {
            // One piece (a read is at most MAX_IO, a stream's pieces up to
            // 4 MiB): the bytes copied out of the cache, not again.
            Ok(b) => Ok(b),
            // The version opened is gone: the open file is stale.
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::NotModified { .. }
                | object_store::Error::NotFound { .. },
            ) => Err(Errno::ESTALE),
            Err(e) => Err(store_errno("GET", key, &e)),
        }
    }

    pub(super) fn add_handle(&self, open: Open) -> FileHandle {
        let mut h = self.handles.lock();
        let fh = h.next;
        h.next += 1;
        h.open.insert(fh, open);
        FileHandle(fh)
    }
}

impl Filesystem for ObjectFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Shared mappings of the direct-IO files (Linux 6.6 and later);
        // the mount is read-only, so they are never dirty.
        let mmap = config
            .add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok();
        self.shared_mmap.store(mmap, Ordering::Relaxed);
        // Requests of up to MAX_IO (`max_pages` follows the larger of the
        // two), readahead as large as the kernel allows.
        let _ = config.set_max_write(MAX_IO);
        if let Err(most) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(most);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if is_control(parent.0, name) {
            return reply.entry(&self.ttl, &control::attr(self.owner), Generation(0));
        }
        match self.lookup_entry(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut nodes = self.nodes.lock();
        let Some(node) = nodes.by_ino.get_mut(&ino.0) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(nlookup);
        if node.lookups > 0 || ino.0 == ROOT {
            return;
        }
        let (parent, name) = (node.parent, node.name.clone());
        nodes.by_ino.remove(&ino.0);
        let k = (parent, name);
        if nodes.by_name.get(&k) == Some(&ino.0) {
            nodes.by_name.remove(&k);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == CONTROL_INO {
            return reply.attr(&self.ttl, &control::attr(self.owner));
        }
        match self.current(ino.0) {
            Ok(entry) => reply.attr(&self.ttl, &self.attr(ino.0, &entry)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) {
            return reply.error(Errno::EROFS);
        }
        if ino.0 == CONTROL_INO {
            let fh = self.add_handle(Open::Control(Arc::default()));
            return reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
        }
        let key = match self.nodes.lock().by_ino.get(&ino.0) {
            Some(n) if matches!(n.entry, Entry::Dir) => return reply.error(Errno::EISDIR),
            Some(n) => n.key.clone(),
            None => return reply.error(Errno::ENOENT),
        };
        match self.current(ino.0) {
            Ok(Entry::File(meta)) => {
                let fh = self.add_handle(Open::File(Arc::new((key, meta))));
                // The node is one version: what the kernel kept of it is
                // still its bytes (`fuse_finish_open` keeps the pages).
                let flags = if self.kernel_cache {
                    FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::FOPEN_DIRECT_IO
                };
                reply.opened(fh, flags);
            }
            Ok(Entry::Dir) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // The handle's table is let go before the read (or the answer).
        let opened = match self.handles.lock().open.get(&fh.0) {
            Some(Open::File(opened)) => Ok(opened.clone()),
            Some(Open::Control(session)) => Err(session.clone()),
            _ => return reply.error(Errno::EBADF),
        };
        let (key, meta) = match &opened {
            Ok(opened) => (&opened.0, &opened.1),
            Err(session) => {
                let data = session
                    .lock()
                    .read(offset, size as usize, |paths| self.stats_json(paths));
                return reply.data(&data);
            }
        };
        self.read_requests.fetch_add(1, Ordering::Relaxed);
        let end = offset.saturating_add(u64::from(size)).min(meta.size);
        if offset >= end {
            return reply.data(&[]);
        }
        match self.read_range(key, meta, offset..end) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is ever written: nothing to flush.
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // No extended attributes: ENOSYS tells the kernel to stop asking
        // (`fuse_getxattr` remembers it).
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.lock().open.remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let parent = match self.nodes.lock().by_ino.get(&ino.0) {
            Some(n) => n.parent,
            None => return reply.error(Errno::ENOENT),
        };
        match self.listing(ino.0) {
            Ok(listing) => {
                let fh = self.add_handle(Open::Dir {
                    ino: ino.0,
                    parent,
                    listing,
                });
                reply.opened(fh, FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let (ino, parent, listing) = match self.handles.lock().open.get(&fh.0) {
            Some(Open::Dir {
                ino,
                parent,
                listing,
            }) => (*ino, *parent, listing.clone()),
            _ => return reply.error(Errno::EBADF),
        };
        let dots = [
            (FileType::Directory, ".", Some(ino)),
            (FileType::Directory, "..", Some(parent)),
        ];
        let hidden = |n: &str| is_control(ino, OsStr::new(n));
        let entries = listing
            .entries
            .iter()
            .filter(|(n, _)| !hidden(n))
            .map(|(n, e)| match e {
                Entry::Dir => (FileType::Directory, n.as_str(), None),
                Entry::File(_) => (FileType::RegularFile, n.as_str(), None),
            });
        // The ids of the entries this reply carries only (a listing is
        // read in many replies): a node's if the kernel knows it, else
        // one from its key.
        let nodes = self.nodes.lock();
        let dir = nodes.by_ino.get(&ino).map(|n| &n.key);
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (kind, name, id)) in dots.into_iter().chain(entries).enumerate().skip(start) {
            let id = id.unwrap_or_else(|| match nodes.by_name.get(&(ino, name.to_owned())) {
                Some(&known) => known,
                // A valid part (the listing keeps only those).
                None => listed_ino(
                    &dir.cloned()
                        .unwrap_or_default()
                        .join(PathPart::parse(name).unwrap_or_default()),
                ),
            });
            if reply.add(INodeNo(id), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.handles.lock().open.remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // No sizes to give (a store has no capacity); names up to S3's
        // key length are longer than any file name here.
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096);
    }
}
