//! The bench's data: pseudo-random content that any block can be checked
//! against, and the data files made of it.
//!
//! Content is a function of a seed and the byte offset: the 8-byte word at
//! offset `8k` is `mix(seed + k * golden)` (splitmix64's finaliser), little
//! endian. So it is not zeros (a filesystem or a cache cannot shortcut it),
//! it differs at every position (a block read from the wrong offset does
//! not match), and a reader can check any block it reads without keeping a
//! copy of the file ([`fill`], [`Generator`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The seed of every data file's original content.
pub const FILE_SEED: u64 = 0x2545_f491_4f6c_dd1d;

/// splitmix64's finaliser: a bijection of `u64` that scatters bits.
#[inline(always)]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline(always)]
fn word(seed: u64, k: u64) -> u64 {
    mix(seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

/// Fills `buf` with the content of seed `seed` at byte offset `off`.
pub fn fill(seed: u64, off: u64, buf: &mut [u8]) {
    let mut pos = off;
    let mut rest = &mut buf[..];
    // A partial first word.
    let head = ((8 - pos % 8) % 8) as usize;
    if head > 0 {
        let n = head.min(rest.len());
        let w = word(seed, pos / 8).to_le_bytes();
        let from = (pos % 8) as usize;
        rest[..n].copy_from_slice(&w[from..from + n]);
        rest = &mut rest[n..];
        pos += n as u64;
    }
    let mut chunks = rest.chunks_exact_mut(8);
    let mut k = pos / 8;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, k).to_le_bytes());
        k += 1;
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&word(seed, k).to_le_bytes()[..n]);
    }
}

/// Checks blocks against the generator, with a scratch buffer made once.
pub struct Generator {
    scratch: Vec<u8>,
}

impl Generator {
    /// A checker for blocks of up to `len` bytes.
    pub fn new(len: usize) -> Self {
        Generator {
            scratch: vec![0; len],
        }
    }

    /// Checks that `got` is the content of seed `seed` at `off`.
    ///
    /// # Errors
    /// `InvalidData` naming the first differing byte's file offset.
    pub fn check(&mut self, seed: u64, off: u64, got: &[u8]) -> io::Result<()> {
        if self.scratch.len() < got.len() {
            self.scratch.resize(got.len(), 0);
        }
        let want = &mut self.scratch[..got.len()];
        fill(seed, off, want);
        match got.iter().zip(want.iter()).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "verify: wrong data at file offset {} (block at {off}): got {:#04x}, want {:#04x}",
                    off + i as u64,
                    got[i],
                    want[i]
                ),
            )),
        }
    }
}

/// The data files of one bench run, in one directory, made on first use
/// and reused by every engine after that.
pub struct DataSet {
    dir: PathBuf,
    /// `(size, index) -> path` of the files made so far.
    files: Vec<(u64, usize, PathBuf)>,
    /// Remove the files at drop (a `--dir` given without `--keep`).
    remove: bool,
    /// Reuse a file a kept earlier run made ([`DataSet::reuse`]).
    reuse: bool,
}

impl DataSet {
    /// Data files in `dir` (which must exist); removed at drop if `remove`.
    pub fn new(dir: PathBuf, remove: bool) -> Self {
        DataSet {
            dir,
            files: Vec::new(),
            remove,
            reuse: false,
        }
    }

    /// Reuses a file an earlier run made and kept (`--dir` with
    /// `--keep`) where it is still what this run would write: its marker
    /// ([`marker`]) names its size and seed, its size is right, and a few
    /// blocks spread over it hold the generator's content. A job that
    /// writes a file removes its marker first, so a file written over is
    /// never reused.
    pub fn reuse(mut self, reuse: bool) -> Self {
        self.reuse = reuse;
        self
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `count` files of `size` bytes each, made now if this run has not
    /// made them yet (or reused, [`DataSet::reuse`]); `write`: the job
    /// will write them.
    ///
    /// # Errors
    /// Any IO error making a file.
    pub fn files(&mut self, size: u64, count: usize, write: bool) -> Result<Vec<PathBuf>> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let path = self.dir.join(format!("foliocache-bench-{size}-{i}.bin"));
            let made = self.files.iter().any(|(s, j, _)| *s == size && *j == i);
            if made {
                // Made (or reused) earlier in this run.
            } else if self.reuse && reusable(&path, size) {
                eprintln!(
                    "data: reused {} ({}): its marker, size and sampled blocks match",
                    path.display(),
                    crate::units::fmt_size(size)
                );
                self.files.push((size, i, path.clone()));
            } else {
                let _ = fs::remove_file(marker(&path));
                let t = create_file(&path, size)
                    .with_context(|| format!("creating data file {}", path.display()))?;
                fs::write(marker(&path), marker_text(size))
                    .with_context(|| format!("writing {}", marker(&path).display()))?;
                eprintln!(
                    "data: wrote {} ({}) in {:.2} s (pseudo-random, synced)",
                    path.display(),
                    crate::units::fmt_size(size),
                    t.as_secs_f64()
                );
                self.files.push((size, i, path.clone()));
            }
            if write {
                // Written over: no longer what the marker says.
                match fs::remove_file(marker(&path)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(e)
                            .with_context(|| format!("removing {}", marker(&path).display()))
                    }
                    _ => {}
                }
            }
            out.push(path);
        }
        Ok(out)
    }
}

impl Drop for DataSet {
    fn drop(&mut self) {
        if self.remove {
            for (_, _, p) in &self.files {
                let _ = fs::remove_file(p);
                let _ = fs::remove_file(marker(p));
            }
        }
    }
}

/// The marker beside a data file that says what it holds:
/// `foliocache-bench-SIZE-I.bin.ok`.
fn marker(path: &Path) -> PathBuf {
    let mut m = path.as_os_str().to_owned();
    m.push(".ok");
    PathBuf::from(m)
}

/// What the marker of a file of `size` bytes of [`FILE_SEED`] content
/// says.
fn marker_text(size: u64) -> String {
    format!("foliocache bench data: size {size}, seed {FILE_SEED:#x}\n")
}

/// Blocks of a reused file checked against the generator.
const SAMPLES: u64 = 8;
const SAMPLE_BYTES: u64 = 4096;

/// Whether the file at `path` can be reused as `size` bytes of
/// [`FILE_SEED`] content: its marker says so, its size is right, and
/// [`SAMPLES`] blocks spread over it (the first and the last among them)
/// match the generator.
fn reusable(path: &Path, size: u64) -> bool {
    use std::os::unix::fs::FileExt;
    if fs::read_to_string(marker(path)).ok().as_deref() != Some(marker_text(size).as_str()) {
        return false;
    }
    let Ok(f) = File::open(path) else {
        return false;
    };
    if f.metadata().map(|m| m.len()).ok() != Some(size) {
        return false;
    }
    let len = SAMPLE_BYTES.min(size);
    let mut got = vec![0u8; len as usize];
    let mut gen = Generator::new(len as usize);
    (0..SAMPLES).all(|k| {
        let off = (size - len) / (SAMPLES - 1) * k;
        f.read_exact_at(&mut got, off).is_ok() && gen.check(FILE_SEED, off, &got).is_ok()
    })
}

/// Writes `size` bytes of [`FILE_SEED`] content to `path` and syncs it.
fn create_file(path: &Path, size: u64) -> Result<Duration> {
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(chunk.len() as u64) as usize;
        fill(FILE_SEED, off, &mut chunk[..n]);
        f.write_all(&chunk[..n])?;
        off += n as u64;
    }
    f.sync_all()?;
    Ok(t.elapsed())
}

/// What a file holds after write runs, block by block: the seed of each
/// block's content, for `--verify` of writes.
pub struct FileModel {
    bs: u64,
    seeds: Vec<u64>,
    size: u64,
}

impl FileModel {
    /// A file of `size` bytes holding the original content, in blocks of
    /// `bs`.
    pub fn new(size: u64, bs: u64) -> Self {
        FileModel {
            bs,
            seeds: vec![FILE_SEED; size.div_ceil(bs) as usize],
            size,
        }
    }

    /// Records that the blocks marked in `written` now hold seed `seed`.
    pub fn record(&mut self, written: &[bool], seed: u64) {
        for (s, &w) in self.seeds.iter_mut().zip(written) {
            if w {
                *s = seed;
            }
        }
    }

    /// Reads the whole file (buffered) and checks every block.
    ///
    /// # Errors
    /// An IO error, or the first block whose content is wrong.
    pub fn check(&self, path: &Path) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        if len != self.size {
            bail!(
                "verify: {} is {len} bytes, want {}",
                path.display(),
                self.size
            );
        }
        let mut buf = vec![0u8; self.bs as usize];
        let mut gen = Generator::new(buf.len());
        for (b, &seed) in self.seeds.iter().enumerate() {
            let off = b as u64 * self.bs;
            let n = (self.size - off).min(self.bs) as usize;
            f.read_exact_at(&mut buf[..n], off)?;
            gen.check(seed, off, &buf[..n])
                .with_context(|| format!("verifying {} after writes", path.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mtime(p: &Path) -> std::time::SystemTime {
        fs::metadata(p).unwrap().modified().unwrap()
    }

    /// Sets `p`'s mtime an hour back, so a rewrite would show.
    fn age(p: &Path) -> std::time::SystemTime {
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        mtime(p)
    }

    #[test]
    fn a_kept_file_is_reused_and_a_wrong_one_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let size = 64 << 10;
        let p = DataSet::new(d.clone(), false)
            .files(size, 1, false)
            .unwrap()[0]
            .clone();
        // A later run with --dir and --keep (`reuse`), whose job writes
        // the file or not: true if it wrote the file again (its mtime,
        // set an hour back first, changed).
        let rewrites = |reuse: bool, write: bool| {
            let t = age(&p);
            let again = DataSet::new(d.clone(), false)
                .reuse(reuse)
                .files(size, 1, write)
                .unwrap();
            assert_eq!(again, std::slice::from_ref(&p));
            assert_eq!(fs::metadata(&p).unwrap().len(), size);
            mtime(&p) != t
        };
        assert!(!rewrites(true, false), "kept and reused");
        assert!(rewrites(false, false), "without --keep, written again");
        // A file of the wrong size is rewritten to the right one.
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(size / 2)
            .unwrap();
        assert!(rewrites(true, false), "the wrong size");
        // A sampled block that does not match.
        std::os::unix::fs::FileExt::write_all_at(
            &File::options().write(true).open(&p).unwrap(),
            b"x",
            0,
        )
        .unwrap();
        assert!(rewrites(true, false), "the wrong content");
        // A job that writes the file takes its marker: the next run
        // writes it again.
        assert!(!rewrites(true, true));
        assert!(rewrites(true, false), "written over by a job");
        // A dropped set that removes its files removes their markers.
        {
            let mut set = DataSet::new(d.clone(), true).reuse(true);
            set.files(size, 1, false).unwrap();
        }
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            0,
            "the file and its marker removed"
        );
    }

    #[test]
    fn content_is_not_zeros_and_depends_on_position() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(FILE_SEED, 0, &mut a);
        fill(FILE_SEED, 4096, &mut b);
        assert!(a.iter().filter(|&&x| x == 0).count() < 64);
        assert_ne!(a, b);
    }

    #[test]
    fn any_offset_and_length_agree_with_the_whole() {
        let mut whole = vec![0u8; 1000];
        fill(7, 0, &mut whole);
        for off in [0usize, 1, 3, 7, 8, 9, 15, 500, 993] {
            for len in [0usize, 1, 2, 7, 8, 9, 17, 1000 - off] {
                let len = len.min(1000 - off);
                let mut part = vec![0u8; len];
                fill(7, off as u64, &mut part);
                assert_eq!(part, whole[off..off + len], "off {off} len {len}");
            }
        }
    }

    #[test]
    fn check_finds_the_first_wrong_byte() {
        let mut buf = vec![0u8; 4096];
        fill(FILE_SEED, 8192, &mut buf);
        let mut g = Generator::new(4096);
        g.check(FILE_SEED, 8192, &buf).unwrap();
        assert!(g.check(FILE_SEED, 4096, &buf).is_err());
        buf[100] ^= 1;
        let e = g.check(FILE_SEED, 8192, &buf).unwrap_err().to_string();
        assert!(e.contains("offset 8292"), "{e}");
    }

    #[test]
    fn model_tracks_written_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        create_file(&path, 3 * 4096 + 100).unwrap();
        let mut m = FileModel::new(3 * 4096 + 100, 4096);
        m.check(&path).unwrap();
        // Write block 1 with another seed, through the filesystem.
        let mut blk = vec![0u8; 4096];
        fill(99, 4096, &mut blk);
        std::os::unix::fs::FileExt::write_all_at(
            &OpenOptions::new().write(true).open(&path).unwrap(),
            &blk,
            4096,
        )
        .unwrap();
        assert!(m.check(&path).is_err());
        m.record(&[false, true, false, false], 99);
        m.check(&path).unwrap();
    }
}
