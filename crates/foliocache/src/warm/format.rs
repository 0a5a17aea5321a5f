//! The state file of a warm restart: which byte ranges of which files a
//! cache held, most recently used first, and each file's identity when
//! they were saved. A list of ranges, not the data: a few bytes per
//! range, so a cache of millions of pages saves in a file of kilobytes.
//!
//! ```text
//!   magic "FCWARM\0\0"   version: u32   page size: u32
//!   files: u32           ranges: u32
//!   per file:  dev u64, ino u64, size u64, mtime ns i64, ctime ns i64,
//!              path length u32, path bytes
//!   per range: file u32, first page u64, pages u32   (most recent first)
//!   checksum: u64, FNV-1a 64 of every byte before it
//! ```
//!
//! All integers little-endian. Decoding checks every length against
//! what is left before it allocates, so any input, truncated, corrupt
//! or hostile, gives an error and never a panic or a huge allocation.

use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

pub use crate::loaded::Identity;

/// The first bytes of a state file.
pub(crate) const MAGIC: &[u8; 8] = b"FCWARM\0\0";
/// The format this code writes and reads.
pub(crate) const VERSION: u32 = 1;
/// The page size the ranges count in.
const PAGE: u64 = 4096;
/// The longest path a state file may name (Linux's `PATH_MAX`).
const MAX_PATH: usize = 4096;
/// Bytes of one file's fixed fields (without its path).
const FILE_BYTES: usize = 8 * 5 + 4;
/// Bytes of one range.
const RANGE_BYTES: usize = 4 + 8 + 4;
/// Bytes of the header.
const HEADER_BYTES: usize = 8 + 4 * 4;

/// One file of a state file: where to open it and what it must still be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedFile {
    /// Its absolute path when saved.
    pub path: PathBuf,
    /// Its identity when saved.
    pub identity: Identity,
}

/// A run of cached pages of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedRange {
    /// The file, an index into [`State::files`].
    pub file: u32,
    /// The first page (of 4 KiB).
    pub first: u64,
    /// Pages in the run (at least one).
    pub pages: u32,
}

/// A decoded state file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The files the ranges name.
    pub files: Vec<SavedFile>,
    /// The ranges, most recently used first.
    pub ranges: Vec<SavedRange>,
}

/// Why a state file could not be read: each means a cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// It does not start with the state file's magic: not a state file.
    NotAStateFile,
    /// Written by another version of foliocache.
    Version {
        /// The version the file says.
        found: u32,
    },
    /// It ends before its contents do (a crash while it was written, or a
    /// copy cut short).
    Truncated,
    /// Its checksum does not match its bytes (corrupt).
    Checksum,
    /// A field is out of bounds: what it is.
    Invalid(&'static str),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotAStateFile => write!(f, "not a foliocache state file (bad magic)"),
            StateError::Version { found } => write!(
                f,
                "state file version {found}, this foliocache reads version {VERSION}"
            ),
            StateError::Truncated => write!(f, "state file truncated"),
            StateError::Checksum => write!(f, "state file corrupt (checksum mismatch)"),
            StateError::Invalid(what) => write!(f, "state file invalid: {what}"),
        }
    }
}

impl std::error::Error for StateError {}

/// FNV-1a, 64 bits: a checksum against torn and corrupt files, not
/// against forgery (the file is the user's own, in the user's directory).
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl State {
    /// The state file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let paths: usize = self.files.iter().map(|f| f.path.as_os_str().len()).sum();
        let mut out = Vec::with_capacity(
            HEADER_BYTES
                + self.files.len() * FILE_BYTES
                + paths
                + self.ranges.len() * RANGE_BYTES
                + 8,
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(PAGE as u32).to_le_bytes());
        out.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        for f in &self.files {
            let id = &f.identity;
            for v in [id.dev, id.ino, id.size] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&id.mtime_ns.to_le_bytes());
            out.extend_from_slice(&id.ctime_ns.to_le_bytes());
            let p = f.path.as_os_str().as_bytes();
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
            out.extend_from_slice(p);
        }
        for r in &self.ranges {
            out.extend_from_slice(&r.file.to_le_bytes());
            out.extend_from_slice(&r.first.to_le_bytes());
            out.extend_from_slice(&r.pages.to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Decodes a state file's bytes.
    ///
    /// # Errors
    /// A [`StateError`] saying what is wrong: never a panic, whatever the
    /// bytes.
    pub fn decode(bytes: &[u8]) -> Result<State, StateError> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(StateError::NotAStateFile);
        }
        let mut r = Reader {
            bytes,
            at: MAGIC.len(),
        };
        let version = r.u32()?;
        if version != VERSION {
            return Err(StateError::Version { found: version });
        }
        if bytes.len() < HEADER_BYTES + 8 {
            return Err(StateError::Truncated);
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        let sum = u64::from_le_bytes(sum.try_into().map_err(|_| StateError::Truncated)?);
        if checksum(body) != sum {
            // A file cut short fails here too: say so when its fields run
            // past its end.
            let mut whole = Reader {
                bytes,
                at: MAGIC.len() + 4,
            };
            return Err(match State::parse(&mut whole) {
                Err(StateError::Truncated) => StateError::Truncated,
                _ => StateError::Checksum,
            });
        }
        let mut r = Reader {
            bytes: body,
            at: MAGIC.len() + 4,
        };
        State::parse(&mut r)
    }

    /// The fields after the magic and version, to the end of `r`.
    fn parse(r: &mut Reader<'_>) -> Result<State, StateError> {
        if u64::from(r.u32()?) != PAGE {
            return Err(StateError::Invalid("page size"));
        }
        let (files, ranges) = (r.u32()? as usize, r.u32()? as usize);
        if files > r.left() / FILE_BYTES || ranges > r.left() / RANGE_BYTES {
            return Err(StateError::Truncated);
        }
        let mut state = State {
            files: Vec::with_capacity(files),
            ranges: Vec::with_capacity(ranges),
        };
        for _ in 0..files {
            let identity = Identity {
                dev: r.u64()?,
                ino: r.u64()?,
                size: r.u64()?,
                mtime_ns: r.u64()? as i64,
                ctime_ns: r.u64()? as i64,
            };
            let len = r.u32()? as usize;
            if len == 0 || len > MAX_PATH {
                return Err(StateError::Invalid("path length"));
            }
            let path = PathBuf::from(std::ffi::OsString::from_vec(r.take(len)?.to_vec()));
            if !path.is_absolute() || path.as_os_str().as_bytes().contains(&0) {
                return Err(StateError::Invalid("path"));
            }
            state.files.push(SavedFile { path, identity });
        }
        for _ in 0..ranges {
            let range = SavedRange {
                file: r.u32()?,
                first: r.u64()?,
                pages: r.u32()?,
            };
            if range.file as usize >= files {
                return Err(StateError::Invalid("range names no file"));
            }
            let end = range.first.checked_add(u64::from(range.pages));
            if range.pages == 0 || end.is_none_or(|e| e > u64::MAX / PAGE) {
                return Err(StateError::Invalid("range bounds"));
            }
            state.ranges.push(range);
        }
        if r.left() != 0 {
            return Err(StateError::Invalid("bytes after the ranges"));
        }
        Ok(state)
    }
}

/// A cursor over a state file's bytes; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if n > self.left() {
            return Err(StateError::Truncated);
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, StateError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, StateError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}
