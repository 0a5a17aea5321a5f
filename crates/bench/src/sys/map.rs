//! Memory mappings: a shared file mapping ([`Mmap`], `memmap2` under an
//! unsafe contract: nothing else may change the file meanwhile), fresh
//! anonymous memory ([`AnonMap`]), what both read through ([`Mapping`]),
//! how much of them the kernel maps with 2 MiB entries, and the page
//! cache's residency of a file (`mincore`).

use std::fs::File;
use std::io;
use std::ops::Range;

use memmap2::{Advice, MmapOptions};

use super::PAGE;

/// The bytes of a mapping: read-only or writable.
enum Bytes {
    Read(memmap2::Mmap),
    Write(memmap2::MmapMut),
}

/// A mapping made here and unmapped on drop: what [`Mmap`] and
/// [`AnonMap`] share (they dereference to it). Through `&Mapping` the bytes
/// can only be read ([`copy_out`](Self::copy_out)) or advised on without
/// changing them, so it is `Sync`; writing takes the owner's `&mut` (its
/// `copy_in` or `fill`), so no copy can race a write of this process.
/// Changes from outside the process are excluded by [`Mmap::new`]'s
/// contract (an anonymous private mapping has none).
pub struct Mapping {
    bytes: Bytes,
}

impl Mapping {
    /// The mapping's bytes.
    #[inline]
    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Read(m) => m,
            Bytes::Write(m) => m,
        }
    }

    /// The `n` bytes at `off`, writable.
    ///
    /// # Errors
    /// `PermissionDenied` for a mapping made read-only; `UnexpectedEof` if
    /// the range leaves the mapping.
    #[inline]
    fn bytes_mut(&mut self, off: usize, n: usize) -> io::Result<&mut [u8]> {
        match &mut self.bytes {
            Bytes::Read(_) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "copy into a read-only mapping",
            )),
            Bytes::Write(m) => {
                let range = Self::range(m.len(), off, n)?;
                Ok(&mut m[range])
            }
        }
    }

    /// `off..off + n`, if it lies inside a mapping of `len` bytes;
    /// `UnexpectedEof` otherwise.
    #[inline]
    fn range(len: usize, off: usize, n: usize) -> io::Result<Range<usize>> {
        match off.checked_add(n) {
            Some(end) if end <= len => Ok(off..end),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "access past the end of the mapping",
            )),
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the mapping (a plain
    /// `memcpy`).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        let bytes = self.bytes();
        dst.copy_from_slice(&bytes[Self::range(bytes.len(), off, dst.len())?]);
        Ok(())
    }

    /// The `n` bytes at `off`, in place (what `--consume` sums for mmap).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn slice(&self, off: usize, n: usize) -> io::Result<&[u8]> {
        let bytes = self.bytes();
        Ok(&bytes[Self::range(bytes.len(), off, n)?])
    }

    /// `madvise(2)` over the whole mapping, for advice that changes no
    /// contents (populate, huge pages).
    fn advise(&self, advice: Advice) -> io::Result<()> {
        match &self.bytes {
            Bytes::Read(m) => m.advise(advice),
            Bytes::Write(m) => m.advise(advice),
        }
    }

    /// How many of the mapping's pages are in the kernel's page cache
    /// (`mincore`), and how many pages it has.
    ///
    /// # Errors
    /// The OS error of `mincore(2)`.
    pub fn resident_pages(&self) -> io::Result<(usize, usize)> {
        let bytes = self.bytes();
        mincore(bytes.as_ptr(), bytes.len())
    }
}

/// Bytes of `maps` that the kernel maps with 2 MiB page-table entries
/// now, and bytes mapped, summed over them (one reading of
/// `/proc/self/smaps` for all): a file's pages held in the page cache's
/// 2 MiB folios are mapped so (`FilePmdMapped`), an anonymous mapping's
/// transparent huge pages too (`AnonHugePages`). A read of such memory
/// takes no TLB miss per 4 KiB page.
///
/// # Errors
/// Reading `/proc/self/smaps`.
pub fn huge_mapped_all<'a>(maps: impl IntoIterator<Item = &'a Mapping>) -> io::Result<(u64, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(maps.into_iter().fold((0, 0), |(huge, mapped), m| {
        let bytes = m.bytes();
        let start = bytes.as_ptr() as u64;
        let len = bytes.len() as u64;
        (
            huge + huge_mapped_in(&smaps, start, start + len),
            mapped + len,
        )
    }))
}

/// Bytes that `smaps` (the text of `/proc/<pid>/smaps`) counts as mapped
/// by 2 MiB entries (`FilePmdMapped`, `AnonHugePages`) in the areas that
/// overlap `start..end`.
fn huge_mapped_in(smaps: &str, start: u64, end: u64) -> u64 {
    let mut inside = false;
    let mut total = 0;
    for line in smaps.lines() {
        let area = line
            .split_once(' ')
            .and_then(|(range, _)| range.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            });
        if let Some((a, b)) = area {
            inside = a < end && start < b;
            continue;
        }
        if !inside {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key == "FilePmdMapped" || key == "AnonHugePages" {
            let kb = value.trim().trim_end_matches("kB").trim();
            total += kb.parse::<u64>().unwrap_or(0) * 1024;
        }
    }
    total
}

/// How many pages of the mapping at `ptr` (`len` bytes) are resident, and
/// how many pages it has. A raw `libc::mincore`: neither `rustix`, `nix`
/// nor `memmap2` wraps it. Private: the callers pass only a whole mapping
/// they own.
fn mincore(ptr: *const u8, len: usize) -> io::Result<(usize, usize)> {
    let pages = len.div_ceil(PAGE);
    let mut vec = vec![0u8; pages];
    // SAFETY: `ptr`/`len` is a live, page-aligned mapping of the caller's
    // (borrowed for the call) and `vec` has one byte per page of it; mincore
    // reads none of the mapping's contents and writes only `vec`.
    let r = unsafe { libc::mincore(ptr.cast_mut().cast(), len, vec.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((vec.iter().filter(|&&b| b & 1 != 0).count(), pages))
}

/// A `MAP_SHARED` mapping of the start of a file, read-only or read-write.
///
/// Copies out go through `&self` ([`Mapping::copy_out`], by `Deref`), so
/// several threads may read one mapping at once; [`copy_in`](Self::copy_in)
/// takes `&mut self`, so a thread writing a mapping owns it for the time of
/// the copy and nothing of this process reads or writes it meanwhile (the
/// bench gives each writing thread its own mapping: the `mmap` engine's
/// `threads`, `engine::mmap`). What
/// other processes and descriptors may do to the file is
/// [`new`](Self::new)'s contract. (A copy in through a shared borrow, the
/// race this type once allowed, does not compile; the crate is a binary, so
/// the test `writes_take_the_mapping_exclusively` pins the signatures
/// instead of a `compile_fail` doc test.)
pub struct Mmap {
    map: Mapping,
}

impl Mmap {
    /// Maps the first `len` bytes of `file` (`MAP_SHARED`), writable if
    /// `write`.
    ///
    /// # Safety
    /// For as long as the returned `Mmap` lives, the first `len` bytes of
    /// `file` change only through this `Mmap`'s own
    /// [`copy_in`](Self::copy_in), and the file keeps at least `len` bytes:
    /// nothing else, in this process or another, writes them (`write(2)`,
    /// `pwrite`, an `O_DIRECT` write, `fallocate`, another writable mapping
    /// of the file, including another `Mmap`) or truncates the file. This
    /// is `memmap2::MmapOptions::map`'s contract: the mapping is a `&[u8]`
    /// (`copy_out` is a `memcpy`), so a change made elsewhere while one
    /// runs is a data race, undefined behaviour, and a page past a shrunken
    /// end faults (`SIGBUS`).
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0 or past the file's end (its pages would
    /// fault); the OS error of `fstat(2)` or `mmap(2)`.
    pub unsafe fn new(file: &File, len: usize, write: bool) -> io::Result<Mmap> {
        nonempty(len)?;
        if file.metadata()?.len() < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping past the end of the file",
            ));
        }
        let opts = MmapOptions::new().len(len).clone();
        let bytes = if write {
            // SAFETY: the caller keeps this function's contract, which is
            // `map_mut`'s: nothing else changes or truncates the file's
            // first `len` bytes while the mapping lives.
            Bytes::Write(unsafe { opts.map_mut(file) }?)
        } else {
            // SAFETY: as above, `map`'s contract.
            Bytes::Read(unsafe { opts.map(file) }?)
        };
        Ok(Mmap {
            map: Mapping { bytes },
        })
    }

    /// Copies `src` into the mapping at `off`.
    ///
    /// # Errors
    /// `PermissionDenied` for a mapping made read-only; `UnexpectedEof` if
    /// the range leaves the mapping.
    #[inline]
    pub fn copy_in(&mut self, off: usize, src: &[u8]) -> io::Result<()> {
        self.map.bytes_mut(off, src.len())?.copy_from_slice(src);
        Ok(())
    }

    /// Faults every page in (`MADV_POPULATE_READ`/`_WRITE`, or a read of a
    /// byte per page where the kernel lacks those), so the measurement
    /// copies instead of taking page faults.
    pub fn prefault(&self, write: bool) {
        let advice = match self.map.bytes {
            Bytes::Write(_) if write => Advice::PopulateWrite,
            _ => Advice::PopulateRead,
        };
        if self.map.advise(advice).is_ok() {
            return;
        }
        let bytes = self.map.bytes();
        let sum = (0..bytes.len())
            .step_by(PAGE)
            .fold(0u8, |sum, off| sum ^ bytes[off]);
        std::hint::black_box(sum);
    }

    /// Turns the kernel's readahead off for faults in the mapping
    /// (`MADV_RANDOM`: `do_sync_mmap_readahead` then reads only the page
    /// that faulted).
    ///
    /// # Errors
    /// The OS error of `madvise(2)`.
    pub fn advise_random(&self) -> io::Result<()> {
        self.map.advise(Advice::Random)
    }

    /// Writes the mapping's dirty pages back to the file and waits for
    /// them (`msync(MS_SYNC)`; a read-only mapping has none).
    ///
    /// # Errors
    /// The OS error of `msync(2)`.
    pub fn sync(&self) -> io::Result<()> {
        match &self.map.bytes {
            Bytes::Read(_) => Ok(()),
            Bytes::Write(m) => m.flush(),
        }
    }
}

impl std::ops::Deref for Mmap {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.map
    }
}

/// A private anonymous mapping (`MAP_PRIVATE | MAP_ANONYMOUS`), left
/// untouched at creation: its pages are faulted in by the first write to
/// each (the `anon` engine of the populate scenario, which measures exactly
/// that). Reads go through `&self` ([`Mapping::copy_out`], by `Deref`);
/// [`fill`](Self::fill) takes `&mut self`, so a writing thread owns the
/// mapping (the bench gives each writing thread its own). Nothing outside
/// this value can change private anonymous memory, so making one is safe.
pub struct AnonMap {
    map: Mapping,
}

impl AnonMap {
    /// Maps `len` bytes of fresh anonymous memory (nothing faulted in).
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0; the OS error of `mmap(2)`.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        nonempty(len)?;
        let bytes = Bytes::Write(MmapOptions::new().len(len).map_anon()?);
        Ok(AnonMap {
            map: Mapping { bytes },
        })
    }

    /// `madvise(MADV_HUGEPAGE)` over the mapping: transparent huge pages
    /// where the kernel's policy allows them (as foliocache's arena asks).
    ///
    /// # Errors
    /// The OS error of `madvise(2)`.
    pub fn advise_huge_pages(&self) -> io::Result<()> {
        self.map.advise(Advice::HugePage)
    }

    /// Faults every page in, writable (`MADV_POPULATE_WRITE`, Linux 5.14),
    /// as foliocache's eager arena does.
    ///
    /// # Errors
    /// The OS error of `madvise(2)` (`EINVAL` before 5.14).
    pub fn populate_write(&self) -> io::Result<()> {
        let mut tries = 0;
        loop {
            tries += 1;
            let Err(e) = self.map.advise(Advice::PopulateWrite) else {
                return Ok(());
            };
            if tries >= 8
                || !matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                )
            {
                return Err(e);
            }
        }
    }

    /// Sets `n` bytes at `off` to `byte` (a `memset`, taking the page
    /// faults of pages not touched before).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn fill(&mut self, off: usize, n: usize, byte: u8) -> io::Result<()> {
        self.map.bytes_mut(off, n)?.fill(byte);
        Ok(())
    }

    /// Fills the mapping with `file`'s first bytes, as many as the mapping
    /// holds (the `memcpy` engine's copy of a data file).
    ///
    /// # Errors
    /// The file's read error; `UnexpectedEof` if the file is shorter than
    /// the mapping.
    pub fn load(&mut self, file: &File) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let len = self.map.bytes().len();
        file.read_exact_at(self.map.bytes_mut(0, len)?, 0)
    }
}

impl std::ops::Deref for AnonMap {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.map
    }
}

/// `InvalidInput` for an empty mapping.
fn nonempty(len: usize) -> io::Result<()> {
    if len == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
    }
    Ok(())
}

/// Pages of `file`'s first `len` bytes in the kernel page cache, and the
/// number of pages (maps the file without touching it, asks `mincore`).
///
/// # Errors
/// The OS errors of `mmap(2)` and `mincore(2)`.
pub fn resident_pages(file: &File, len: u64) -> io::Result<(usize, usize)> {
    let len = usize::try_from(len).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    nonempty(len)?;
    // A raw mapping (no `&[u8]` over it, so no contract): mapped and dropped
    // here without a read of its bytes (mincore reads none), so what others
    // do to the file meanwhile does not matter.
    let map = MmapOptions::new().len(len).map_raw_read_only(file)?;
    mincore(map.as_ptr(), map.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_mapped_counts_the_areas_of_the_range_only() {
        let smaps = "\
7f0000000000-7f0000400000 r--s 00000000 fe:01 42 /tmp/data
Size:               4096 kB
FilePmdMapped:      2048 kB
AnonHugePages:         0 kB
7f0000400000-7f0000600000 r--s 00400000 fe:01 42 /tmp/data
FilePmdMapped:      2048 kB
7f0000600000-7f0000800000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
FilePmdMapped:         0 kB
";
        let base = 0x7f00_0000_0000;
        assert_eq!(huge_mapped_in(smaps, base, base + (4 << 20)), 2 << 20);
        assert_eq!(huge_mapped_in(smaps, base, base + (6 << 20)), 4 << 20);
        assert_eq!(
            huge_mapped_in(smaps, base + (6 << 20), base + (8 << 20)),
            2 << 20
        );
        assert_eq!(huge_mapped_in(smaps, base + (8 << 20), base + (9 << 20)), 0);
        // Not an area header: a key whose value is not a number.
        assert_eq!(huge_mapped_in("VmFlags: rd sh mr\n", 0, u64::MAX), 0);
    }

    #[test]
    fn a_mapping_reports_its_huge_entries() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(1 << 20).unwrap();
        // SAFETY: a file of this test's own, which nothing else writes or
        // truncates while the mapping lives.
        let m = unsafe { Mmap::new(&f, 1 << 20, false) }.unwrap();
        m.prefault(false);
        let (huge, len) = huge_mapped_all([&*m]).unwrap();
        assert_eq!(len, 1 << 20);
        // (1 MiB cannot hold a 2 MiB entry.)
        assert_eq!(huge, 0);
    }

    #[test]
    fn writes_take_the_mapping_exclusively() {
        // Compiles only while the writes take `&mut`: through `&Mmap` or
        // `&AnonMap` (which threads share) nothing can write.
        let _: fn(&mut Mmap, usize, &[u8]) -> io::Result<()> = Mmap::copy_in;
        let _: fn(&mut AnonMap, usize, usize, u8) -> io::Result<()> = AnonMap::fill;
        fn shared_reads<T: Sync>() {}
        shared_reads::<Mapping>();
    }

    #[test]
    fn mmap_copies_and_refuses_what_it_cannot_do() {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[7u8; 2 * PAGE]).unwrap();
        // SAFETY: a fresh unnamed file that only this test reaches.
        let mut m = unsafe { Mmap::new(&f, 2 * PAGE, true) }.unwrap();
        m.copy_in(PAGE - 1, b"ab").unwrap();
        let mut out = [0u8; 4];
        m.copy_out(PAGE - 2, &mut out).unwrap();
        assert_eq!(out, [7, b'a', b'b', 7]);
        assert!(m.copy_out(2 * PAGE - 1, &mut out).is_err(), "past the end");
        assert!(m.copy_in(usize::MAX, b"x").is_err(), "overflowing offset");
        drop(m);
        // SAFETY: as above (and `m`, which wrote the file, is gone).
        let mut ro = unsafe { Mmap::new(&f, PAGE, false) }.unwrap();
        assert_eq!(
            ro.copy_in(0, b"x").unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        // SAFETY: as above.
        let past = unsafe { Mmap::new(&f, 3 * PAGE, false) };
        assert_eq!(
            past.err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
        let mut a = AnonMap::new(PAGE).unwrap();
        a.fill(10, 3, 9).unwrap();
        a.copy_out(9, &mut out).unwrap();
        assert_eq!(out, [0, 9, 9, 9]);
    }
}
