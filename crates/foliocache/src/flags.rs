//! Per-read flags (the kernel's `RWF_*` for `preadv2`).

use std::fmt;

bitflags::bitflags! {
    /// Flags of one read ([`File::read_at_flags`](crate::File::read_at_flags)),
    /// or a file's defaults ([`File::set_default_flags`](crate::File::set_default_flags)).
    /// Combine with `|`; [`from_bits`](Self::from_bits) refuses unknown bits
    /// (`None`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ReadFlags: u32 {
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
        const DONTCACHE = 1 << 0;
        /// Never wait for IO (the kernel's `RWF_NOWAIT`): copy what is cached
        /// from the offset on and stop at the first byte that is not; a read
        /// whose first byte is not cached fails with
        /// [`WouldBlock`](std::io::ErrorKind::WouldBlock) and starts no IO for
        /// it. A hit on a readahead marker still starts the next window (in the
        /// background).
        const NOWAIT = 1 << 1;
    }
}

impl ReadFlags {
    /// No flags: a normal, cached read.
    pub const NONE: ReadFlags = ReadFlags::empty();
}

impl fmt::Debug for ReadFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_names(self, false, f)
    }
}

/// The `Debug` form of the crate's flag types: the set of the names of the
/// flags set (`{DONTCACHE, NOWAIT}`), lowercased if `lower`; unnamed bits
/// are left out.
pub(crate) fn fmt_names<F: bitflags::Flags>(
    flags: &F,
    lower: bool,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    let mut set = f.debug_set();
    for (name, _) in flags.iter_names() {
        if lower {
            set.entry(&format_args!("{}", name.to_ascii_lowercase()));
        } else {
            set.entry(&format_args!("{name}"));
        }
    }
    set.finish()
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
