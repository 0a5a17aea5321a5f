//! Per-read flags (the kernel's `RWF_*` for `preadv2`).

/// Flags of one read ([`File::read_at_flags`](crate::File::read_at_flags)),
/// or a file's defaults ([`File::set_default_flags`](crate::File::set_default_flags)).
/// Combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadFlags(u32);

impl ReadFlags {
    /// No flags: a normal, cached read.
    pub const NONE: ReadFlags = ReadFlags(0);
    /// Uncached (the kernel's `RWF_DONTCACHE`): read through the cache, but
    /// the folios this read creates (and the readahead windows it starts)
    /// are *dropbehind*: they are never marked accessed nor activated, and
    /// an uncached read that copies one through to its end (or to end of
    /// file) removes it, leaving no shadow, unless it is dirty, under
    /// writeback or locked by another thread at that moment. A cached read
    /// of a dropbehind folio claims it: it stays (the kernel would drop it
    /// at the uncached read's end). Folios that were cached before stay cached, and are
    /// marked accessed as by any read. Readahead folios an uncached stream
    /// never reaches stay flagged until read or reclaimed, so the cache
    /// holds about one readahead window of an uncached stream.
    pub const DONTCACHE: ReadFlags = ReadFlags(1 << 0);
    /// Never wait for IO (the kernel's `RWF_NOWAIT`): copy what is cached
    /// from the offset on and stop at the first byte that is not; a read
    /// whose first byte is not cached fails with
    /// [`WouldBlock`](std::io::ErrorKind::WouldBlock) and starts no IO for
    /// it. A hit on a readahead marker still starts the next window (in the
    /// background).
    pub const NOWAIT: ReadFlags = ReadFlags(1 << 1);

    const ALL: u32 = 0b11;

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits; `None` if an unknown bit is set.
    pub const fn from_bits(bits: u32) -> Option<ReadFlags> {
        if bits & !Self::ALL == 0 {
            Some(ReadFlags(bits))
        } else {
            None
        }
    }

    /// Are all of `other`'s flags set in `self`?
    pub const fn contains(self, other: ReadFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub const fn union(self, other: ReadFlags) -> ReadFlags {
        ReadFlags(self.0 | other.0)
    }

    /// `self` without `other`'s flags.
    pub const fn difference(self, other: ReadFlags) -> ReadFlags {
        ReadFlags(self.0 & !other.0)
    }

    /// True when no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for ReadFlags {
    type Output = ReadFlags;
    fn bitor(self, rhs: ReadFlags) -> ReadFlags {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for ReadFlags {
    fn bitor_assign(&mut self, rhs: ReadFlags) {
        *self = self.union(rhs);
    }
}

impl std::fmt::Debug for ReadFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut set = f.debug_set();
        if self.contains(Self::DONTCACHE) {
            set.entry(&format_args!("DONTCACHE"));
        }
        if self.contains(Self::NOWAIT) {
            set.entry(&format_args!("NOWAIT"));
        }
        set.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_reject_unknown_bits() {
        let f = ReadFlags::DONTCACHE | ReadFlags::NOWAIT;
        assert!(f.contains(ReadFlags::DONTCACHE) && f.contains(ReadFlags::NOWAIT));
        assert_eq!(f.difference(ReadFlags::NOWAIT), ReadFlags::DONTCACHE);
        assert_eq!(ReadFlags::from_bits(f.bits()), Some(f));
        assert_eq!(ReadFlags::from_bits(1 << 7), None);
        assert!(ReadFlags::NONE.is_empty());
        assert_eq!(format!("{f:?}"), "{DONTCACHE, NOWAIT}");
    }
}
