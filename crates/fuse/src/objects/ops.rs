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

use foliocache_object_store::CacheHint;
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use object_store::path::{Path, PathPart};
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use parking_lot::Mutex;

use super::dir::DirRead;
use super::listing::listed_ino;
use super::{is_control, store_errno, Entry, ObjectFs, MAX_IO, NODE_ATTR_TTL, ROOT};
use crate::control::{self, CONTROL_INO};

/// An open file, directory or control file.
pub(super) enum Open {
    /// The object's key and the version opened (shared with each read).
    File(Arc<(Path, ObjectMeta)>),
    /// A directory read in turn (a `readdir` waits for the one before).
    Dir(Arc<Mutex<DirRead>>),
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
        let from_start = range.start == 0;
        let mut opts = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: meta.e_tag.clone(),
            ..GetOptions::default()
        };
        if from_start {
            // A file read from its start is most often read whole (`cat`,
            // `cp`, a model's loader): its prefetch starts now, not after
            // three round trips (docs/object-store.md, "Cold reads").
            opts.extensions.insert(CacheHint::Sequential);
        }
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

    /// Adds `d`'s entries from the one numbered `offset` to `reply` until
    /// it is full or the listing ends, listing more of it as needed (a
    /// page at a time). An error says whether entries were added before
    /// it.
    fn give_entries(
        &self,
        d: &mut DirRead,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), (Errno, bool)> {
        if offset < d.at {
            // Read again from the start (`rewinddir`, a seek back).
            *d = self.dir_read(d.ino).map_err(|e| (e, false))?;
        }
        while d.at < offset {
            if d.ready.is_empty() && !self.dir_fill(d).map_err(|e| (e, false))? {
                return Ok(());
            }
            d.ready.pop_front();
            d.at += 1;
        }
        let mut added = false;
        loop {
            if d.ready.is_empty() && !self.dir_fill(d).map_err(|e| (e, added))? {
                return Ok(());
            }
            // The ids of the entries this reply carries only: a node's if
            // the kernel knows it, else one from its key.
            let nodes = self.nodes.lock();
            while let Some((name, kind)) = d.ready.front() {
                let id = match name.as_str() {
                    "." => d.ino,
                    ".." => d.parent,
                    _ => match nodes.by_name.get(&(d.ino, name.clone())) {
                        Some(&known) => known,
                        // A valid part (the listing gives only those).
                        None => listed_ino(
                            &d.key
                                .clone()
                                .join(PathPart::parse(name).unwrap_or_default()),
                        ),
                    },
                };
                if reply.add(INodeNo(id), d.at + 1, *kind, name) {
                    return Ok(());
                }
                added = true;
                d.ready.pop_front();
                d.at += 1;
            }
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
        self.lookup_requests.fetch_add(1, Ordering::Relaxed);
        match self.lookup_entry(parent.0, name) {
            // The name for the time-to-live, the node's attributes longer.
            Ok(attr) => reply.entry_with_ttls(&NODE_ATTR_TTL, &self.ttl, &attr, Generation(0)),
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
        self.getattr_requests.fetch_add(1, Ordering::Relaxed);
        match self.current(ino.0) {
            Ok(entry) => reply.attr(&NODE_ATTR_TTL, &self.attr(ino.0, &entry)),
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
        self.open_requests.fetch_add(1, Ordering::Relaxed);
        match self.current(ino.0) {
            Ok(Entry::File(meta)) => {
                // The version the node is, told to the cache, so that the
                // first read of a name a listing found sends its GET at
                // once, not a HEAD first (one round trip to the first
                // byte). A failure only leaves that HEAD to the read.
                let _rt = self.runtime.enter();
                let _ = self.store.track(&key, meta.clone());
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
        // Nothing is ever written: nothing to flush. ENOSYS tells the
        // kernel so (`fuse_flush` sets `no_flush`), and no later `close`
        // of the mount's files waits for a request.
        reply.error(Errno::ENOSYS);
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
        match self.dir_read(ino.0) {
            Ok(d) => {
                let fh = self.add_handle(Open::Dir(Arc::new(Mutex::new(d))));
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
        let dir = match self.handles.lock().open.get(&fh.0) {
            Some(Open::Dir(d)) => d.clone(),
            _ => return reply.error(Errno::EBADF),
        };
        let mut d = dir.lock();
        match self.give_entries(&mut d, offset, &mut reply) {
            // An error after some entries: those, and the error next time.
            Ok(()) | Err((_, true)) => reply.ok(),
            Err((e, false)) => reply.error(e),
        }
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
