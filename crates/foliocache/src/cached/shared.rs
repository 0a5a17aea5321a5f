//! The group's file ([`SharedFile`]) as a [`CachedFile`]: each method is
//! `SharedFile`'s own (`shared/`), the flags the group's cache does not
//! take dropped, and what it lacks said in the type (no curve).

use std::io;
use std::os::fd::AsFd;

use rustix::fs::FallocateFlags;

use super::{page_range, CacheFigures, CachedFile};
use crate::flags::ReadFlags;
use crate::mrc::HitRatioCurve;
use crate::readahead::Advice;
use crate::shared::SharedFile;
use crate::workingset::CacheStat;
use crate::write::WriteFlags;

/// `fallocate(2)` with `mode` on the file itself, under the group's inode
/// lock ([`SharedFile::change_file`]: written back and dropped from the
/// cache first, sized from the file after).
fn fallocate(f: &SharedFile, mode: FallocateFlags, offset: u64, len: u64) -> io::Result<()> {
    f.change_file(|file| Ok(rustix::fs::fallocate(file.as_fd(), mode, offset, len)?))
}

impl CachedFile for SharedFile {
    #[inline]
    fn len(&self) -> io::Result<u64> {
        SharedFile::len(self)
    }

    fn is_writable(&self) -> bool {
        SharedFile::is_writable(self)
    }

    /// A hit, or one load: the group's cache takes no flags.
    #[inline]
    fn read_at_flags(&self, buf: &mut [u8], offset: u64, _: ReadFlags) -> io::Result<usize> {
        SharedFile::read_at(self, buf, offset)
    }

    /// `DONTCACHE` data stays in the group's cache, as others of the
    /// group may read it next.
    #[inline]
    fn write_at_flags(&self, buf: &[u8], offset: u64, _: WriteFlags) -> io::Result<usize> {
        SharedFile::write_at(self, buf, offset)
    }

    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        SharedFile::append(self, buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        SharedFile::set_len(self, len)
    }

    fn write_back(&self) -> io::Result<()> {
        SharedFile::write_back(self).map(drop)
    }

    fn sync_data(&self) -> io::Result<()> {
        SharedFile::sync_data(self)
    }

    fn sync_all(&self) -> io::Result<()> {
        SharedFile::sync_all(self)
    }

    fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        let mode = if keep_size {
            FallocateFlags::KEEP_SIZE
        } else {
            FallocateFlags::empty()
        };
        fallocate(self, mode, offset, len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        fallocate(self, mode, offset, len)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        fallocate(self, FallocateFlags::COLLAPSE_RANGE, offset, len)
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        fallocate(self, FallocateFlags::INSERT_RANGE, offset, len)
    }

    /// The group's cache takes no advice (its readahead follows
    /// sequential misses on its own).
    fn advise(&self, _: u64, _: u64, _: Advice) -> io::Result<()> {
        Ok(())
    }

    fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat> {
        let (first, last) = page_range(offset, len)?;
        let (cached, dirty) = self.pages_in(first, last)?;
        Ok(CacheStat {
            cached,
            dirty,
            ..CacheStat::default()
        })
    }

    fn hit_ratio_curve(&self) -> Option<HitRatioCurve> {
        None
    }

    fn figures(&self) -> CacheFigures {
        CacheFigures::of_process(&self.cache().stats())
    }
}
