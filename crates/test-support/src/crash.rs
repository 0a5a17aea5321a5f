//! Crash states: what a power cut could leave of a file, built from the
//! log of a [`RecordingBacking`], and the check that each keeps what the
//! program above was promised (after CrashMonkey and ALICE).
//!
//! # What a power cut is taken to leave
//! The log is cut at every point between two changes that reached the
//! backing (every prefix). At each, the file is what the last logged
//! sync made durable, plus some of the changes logged since:
//! - **data** at [`BLOCK`] granularity: each block of each unsynced write
//!   is there or not, independently of the others (a multi-block write
//!   may be torn at block boundaries, and unsynced writes may reach the
//!   disk in any order; a block written twice keeps the later write's
//!   bytes if that one reached the disk). A block is never torn inside
//!   (a device's atomic write unit is at least 4 KiB);
//! - **metadata** in order, as a filesystem's journal commits it: some
//!   prefix of the unsynced size changes (a write's extension of the
//!   file, `set_len`), holes and shifts. A block past the size that
//!   applies is lost (there is no stale data past end of file).
//!
//! `sync_data` (`fdatasync`) and `sync_all` (`fsync`) both make every
//! change before them durable, size changes and holes included: Linux's
//! `fdatasync` flushes the metadata needed to read the data back, and a
//! size change is such metadata (`fdatasync(2)`); nothing else
//! (timestamps) is modelled.
//!
//! At a cut, the states checked ([`Explore`]): all unsynced changes
//! dropped; all kept; all kept but one write's data; all data kept with
//! each prefix of the metadata; no data with all metadata; and
//! [`Explore::random`] random subsets of the data blocks with a random
//! metadata prefix. Identical states at one cut are checked once.
//!
//! # What each state must keep
//! The program notes what it does in the same log ([`Program`]): that an
//! operation making version `v` of the file begins, that a sync of
//! version `v` returned `Ok`. At a cut, `lo` is the last version a sync
//! acknowledged (the initial contents are durable) and `hi` the last one
//! begun. Then:
//! - every byte below the state's size holds the value it had in one of
//!   the versions `lo..=hi` (past a version's size, a byte is 0). So no
//!   byte a sync acknowledged is lost unless a later operation changed
//!   it, and no byte holds what the program never wrote;
//! - the size is between the least and the largest of those versions'
//!   sizes, the largest rounded up to a [`BLOCK`]. Between: writeback
//!   extends the file a run at a time, as the kernel's does (ext4 moves
//!   the size on disk with the pages written back). Rounded up: a cache
//!   over `O_DIRECT` writes the last block whole, which extends the file
//!   to the block's end until it cuts it back (the bytes past the
//!   program's size are then zeros, by the check on bytes above);
//! - a `sync_all` acknowledged was an `fsync` of the backing
//!   ([`Recorded::Sync`] with `all`) after it began.

use std::fmt;

use backing::{Backing, Recorded, RecordingBacking, BLOCK};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const B: usize = BLOCK;

/// What the program does, noted in the log (`version * 4 + kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// An operation making version `v` begins.
    Begin(usize),
    /// A sync begins.
    SyncBegin,
    /// A `sync_data` (`all == false`) or `sync_all` of version `v`
    /// returned `Ok`.
    Acked { version: usize, all: bool },
}

impl Note {
    fn encode(self) -> u64 {
        match self {
            Note::Begin(v) => v as u64 * 4,
            Note::SyncBegin => 1,
            Note::Acked { version, all } => version as u64 * 4 + 2 + u64::from(all),
        }
    }

    fn decode(n: u64) -> Note {
        let v = (n / 4) as usize;
        match n % 4 {
            0 => Note::Begin(v),
            1 => Note::SyncBegin,
            k => Note::Acked {
                version: v,
                all: k == 3,
            },
        }
    }
}

/// The file as the program sees it, version by version, and the notes that
/// place its operations in a [`RecordingBacking`]'s log.
#[derive(Debug, Clone)]
pub struct Program {
    versions: Vec<Vec<u8>>,
}

impl Program {
    /// A program whose file holds `initial` (version 0, durable).
    pub fn new(initial: Vec<u8>) -> Program {
        Program {
            versions: vec![initial],
        }
    }

    /// The file now.
    pub fn image(&self) -> &[u8] {
        self.versions.last().map_or(&[][..], |v| &v[..])
    }

    /// The number of the current version.
    pub fn version(&self) -> usize {
        self.versions.len() - 1
    }

    /// Before an operation that makes the file `image`: notes it in `rec`.
    pub fn begin<B: Backing>(&mut self, rec: &RecordingBacking<B>, image: Vec<u8>) {
        self.versions.push(image);
        rec.note(Note::Begin(self.version()).encode());
    }

    /// Before a sync: notes it in `rec`.
    pub fn sync_begins<B: Backing>(&self, rec: &RecordingBacking<B>) {
        rec.note(Note::SyncBegin.encode());
    }

    /// After a `sync_data` (`all == false`) or `sync_all` returned `Ok`:
    /// notes in `rec` that the current version is acknowledged.
    pub fn acked<B: Backing>(&self, rec: &RecordingBacking<B>, all: bool) {
        rec.note(
            Note::Acked {
                version: self.version(),
                all,
            }
            .encode(),
        );
    }

    /// Byte `i` of version `v` (0 past its size).
    fn byte(&self, v: usize, i: usize) -> u8 {
        self.versions[v].get(i).copied().unwrap_or(0)
    }

    /// Whether `bytes` at `start` equal version `v` there (zeros past its
    /// size).
    fn same(&self, v: usize, start: usize, bytes: &[u8]) -> bool {
        let ver = &self.versions[v];
        let n = ver.len().saturating_sub(start).min(bytes.len());
        bytes[n..].iter().all(|&b| b == 0) && (n == 0 || bytes[..n] == ver[start..start + n])
    }
}

/// How many crash states to build at each cut.
#[derive(Debug, Clone, Copy)]
pub struct Explore {
    /// Random subsets of the unsynced data, each with a random prefix of
    /// the unsynced metadata, besides the fixed ones.
    pub random: usize,
    /// The seed of those.
    pub seed: u64,
}

/// What [`check`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// Cuts of the log.
    pub cuts: u64,
    /// Distinct crash states checked (at each cut).
    pub states: u64,
}

impl std::ops::AddAssign for Checked {
    fn add_assign(&mut self, o: Checked) {
        self.cuts += o.cuts;
        self.states += o.states;
    }
}

/// A crash state that lost what the program was promised.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The cut: entries of the log before it.
    pub cut: usize,
    /// What is wrong.
    pub what: String,
    /// The unsynced changes at the cut, and which of them the state kept.
    pub state: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash after log entry {}: {}\n  state: {}",
            self.cut, self.what, self.state
        )
    }
}

/// What one crash state keeps of the unsynced changes.
struct Keep {
    /// Per data block of the unsynced writes, in log order.
    data: Vec<bool>,
    /// How many of the unsynced metadata changes (one per unsynced entry).
    meta: usize,
}

/// Applies `e` to `file` (whose length is its size), keeping the data
/// blocks of a write for which `keep_block` says so, and its metadata if
/// `meta`.
fn apply(file: &mut Vec<u8>, e: &Recorded, meta: bool, mut keep_block: impl FnMut() -> bool) {
    match e {
        Recorded::Write { offset, data } => {
            let off = *offset as usize;
            if meta && off + data.len() > file.len() {
                file.resize(off + data.len(), 0);
            }
            for (j, block) in data.chunks(B).enumerate() {
                let start = off + j * B;
                if keep_block() && start < file.len() {
                    let n = (file.len() - start).min(block.len());
                    file[start..start + n].copy_from_slice(&block[..n]);
                }
            }
        }
        _ if !meta => {}
        Recorded::SetLen(len) => file.resize(*len as usize, 0),
        Recorded::PunchHole { offset, len } => {
            let end = (*offset + *len).min(file.len() as u64) as usize;
            let start = (*offset as usize).min(end);
            file[start..end].fill(0);
        }
        Recorded::Collapse { offset, len } => {
            let (o, l) = (*offset as usize, *len as usize);
            if o + l < file.len() {
                file.drain(o..o + l);
            }
        }
        Recorded::Insert { offset, len } => {
            let (o, l) = (*offset as usize, *len as usize);
            if o < file.len() {
                file.splice(o..o, std::iter::repeat_n(0, l));
            }
        }
        _ => {}
    }
}

/// The data blocks of the unsynced entries.
fn data_blocks(pending: &[&Recorded]) -> usize {
    pending
        .iter()
        .map(|e| match e {
            Recorded::Write { data, .. } => data.len().div_ceil(B),
            _ => 0,
        })
        .sum()
}

/// The crash states to build at a cut with `pending` unsynced entries.
fn keeps(pending: &[&Recorded], explore: &Explore, rng: &mut StdRng) -> Vec<Keep> {
    let d = data_blocks(pending);
    let n = pending.len();
    let mut out = vec![
        Keep {
            data: vec![false; d],
            meta: 0,
        },
        Keep {
            data: vec![true; d],
            meta: n,
        },
        Keep {
            data: vec![false; d],
            meta: n,
        },
    ];
    // All but one write's data.
    let mut first = 0;
    for e in pending {
        if let Recorded::Write { data, .. } = e {
            let k = data.len().div_ceil(B);
            let mut data = vec![true; d];
            data[first..first + k].fill(false);
            out.push(Keep { data, meta: n });
            first += k;
        }
    }
    // All the data, each prefix of the metadata.
    out.extend((0..n).map(|meta| Keep {
        data: vec![true; d],
        meta,
    }));
    out.extend((0..explore.random).map(|_| Keep {
        data: (0..d).map(|_| rng.gen_bool(0.5)).collect(),
        meta: rng.gen_range(0..=n),
    }));
    out
}

/// A cheap hash of a state, to check each distinct one once per cut.
fn hash(file: &[u8]) -> u64 {
    let mut h = file.len() as u64;
    for c in file.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h
}

/// Checks `file`, a crash state, against versions `lo..=hi` of `program`.
fn check_state(program: &Program, lo: usize, hi: usize, file: &[u8]) -> Result<(), String> {
    let size = file.len();
    let sizes: Vec<usize> = (lo..=hi).map(|v| program.versions[v].len()).collect();
    let least = sizes.iter().copied().min().unwrap_or(0);
    let most = sizes
        .iter()
        .map(|s| s.next_multiple_of(B))
        .max()
        .unwrap_or(0);
    if !(least..=most).contains(&size) {
        return Err(format!(
            "size {size}, outside versions {lo}..={hi}'s sizes {sizes:?} (the largest rounded \
             up to a block)"
        ));
    }
    for (b, block) in file.chunks(B).enumerate() {
        let start = b * B;
        if (lo..=hi).rev().any(|v| program.same(v, start, block)) {
            continue;
        }
        // Not one version's block: a block written back in the middle of
        // an operation mixes two; each byte must still be one of them.
        for (j, &got) in block.iter().enumerate() {
            let i = start + j;
            if !(lo..=hi).any(|v| program.byte(v, i) == got) {
                let want: Vec<u8> = (lo..=hi).map(|v| program.byte(v, i)).collect();
                return Err(format!(
                    "byte {i} is {got:#04x}, but versions {lo}..={hi} (the last acknowledged \
                     by a sync, and those begun after it) hold {want:02x?} there"
                ));
            }
        }
    }
    Ok(())
}

/// The crash state that `keep` makes of `pending` over a durable file of
/// `durable_len` bytes, for a violation's report.
fn describe(pending: &[&Recorded], keep: &Keep, durable_len: usize) -> String {
    let kept: Vec<String> = pending
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "{e:?}{}",
                if i < keep.meta { "" } else { " (meta dropped)" }
            )
        })
        .collect();
    let blocks: String = keep
        .data
        .iter()
        .map(|&k| if k { '1' } else { '0' })
        .collect();
    format!("durable size {durable_len}; unsynced {kept:?}; their data blocks kept: {blocks}")
}

/// Builds the crash states of `log` (as [`Explore`] says) and checks each
/// against `program` (see the module docs). Returns how many it checked,
/// or the first that lost what a sync acknowledged, held bytes nobody
/// wrote, or had a size the program never saw.
///
/// # Errors
/// The first [`Violation`]; also one for a [`Recorded::Failed`] entry
/// (the file is unknown past it) or a `sync_all` acknowledged without an
/// `fsync` of the backing.
pub fn check(program: &Program, log: &[Recorded], explore: &Explore) -> Result<Checked, Violation> {
    let mut rng = StdRng::seed_from_u64(explore.seed);
    let mut durable = program.versions[0].clone();
    let mut pending: Vec<&Recorded> = Vec::new();
    let (mut lo, mut hi) = (0, 0);
    // The last sync of the backing, and whether it was an fsync, since
    // the program's last sync began.
    let mut synced: Option<bool> = None;
    let mut checked = Checked::default();
    let mut seen = std::collections::HashSet::new();
    let violation = |cut: usize, what: String, state: String| Violation { cut, what, state };
    let mut cut = |cut: usize, pending: &[&Recorded], durable: &[u8], lo, hi| {
        checked.cuts += 1;
        seen.clear();
        for keep in keeps(pending, explore, &mut rng) {
            let mut file = durable.to_vec();
            let mut blocks = keep.data.iter();
            for (i, e) in pending.iter().enumerate() {
                apply(&mut file, e, i < keep.meta, || {
                    blocks.next().copied().unwrap_or(false)
                });
            }
            if !seen.insert(hash(&file)) {
                continue;
            }
            checked.states += 1;
            if let Err(what) = check_state(program, lo, hi, &file) {
                return Err(violation(
                    cut,
                    what,
                    describe(pending, &keep, durable.len()),
                ));
            }
        }
        Ok(())
    };
    // What the last cut saw: a cut where neither the unsynced changes,
    // the durable state nor the versions changed is not checked again.
    let mut last = None;
    let mut syncs = 0;
    let mut cut = |i: usize, pending: &[&Recorded], durable: &[u8], lo, hi, syncs| {
        let key = (pending.len(), syncs, lo, hi);
        if last == Some(key) {
            return Ok(());
        }
        last = Some(key);
        cut(i, pending, durable, lo, hi)
    };
    for (i, e) in log.iter().enumerate() {
        match e {
            Recorded::Note(n) => match Note::decode(*n) {
                Note::Begin(v) => hi = hi.max(v),
                Note::SyncBegin => synced = None,
                Note::Acked { version, all } => {
                    if all && synced != Some(true) {
                        return Err(violation(
                            i,
                            "a sync_all returned Ok without an fsync (sync_all) of the backing \
                             after it began"
                                .into(),
                            String::new(),
                        ));
                    }
                    lo = lo.max(version);
                }
            },
            Recorded::Failed => {
                return Err(violation(
                    i,
                    "the backing failed a call: the file is unknown from here".into(),
                    String::new(),
                ))
            }
            Recorded::Read { .. } => {}
            Recorded::Sync { all } => {
                cut(i, &pending, &durable, lo, hi, syncs)?;
                for e in pending.drain(..) {
                    apply(&mut durable, e, true, || true);
                }
                syncs += 1;
                synced = Some(synced.unwrap_or(false) || *all);
            }
            _ => {
                cut(i, &pending, &durable, lo, hi, syncs)?;
                pending.push(e);
            }
        }
    }
    cut(log.len(), &pending, &durable, lo, hi, syncs)?;
    Ok(checked)
}
