//! The sample's keys: the number a read's page is known by in the
//! sample, and the stratified hash that draws it (`mrc.rs`, "The
//! sample").

/// Pages in one stratum of the sample: a run of a mapping's pages that
/// the sample draws from as a whole (`key_hash`).
pub(super) const STRATUM_SHIFT: u32 = 6;

/// A number for a new mapping's keys in the sample ([`key_hash`]'s
/// `id`): one no other mapping of this process has had or will have. A
/// mapping's memory address would not do: a file opened after another
/// closed is often given the closed one's address, and the sample then
/// took the new file's first reads for re-reads of the old one's pages
/// (a pass over many files, each read once, predicted most of its reads
/// as hits at 2x). Nor would the file's device and inode: a mapping's
/// folios go with it when its last handle closes (a file kept past its
/// close, `Cache::close_keeping`, keeps its mapping), so a read after
/// the file was opened again misses at every size, and keys that
/// outlived the mapping would count it as a re-read a larger cache hits.
pub(crate) fn mapping_key() -> u64 {
    // (std's atomic under loom too: a loom atomic cannot be a static, and
    // the number orders nothing.)
    #[allow(clippy::disallowed_types)]
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The sample's number for the pages of the file (`dev`, `ino`) in the
/// group's cache ([`key_hash`]'s `id`; `shared/curve.rs`): the file's
/// identity, the same in every process of the group, where a mapping's
/// number ([`mapping_key`]) is one process's. Only a file deleted and its
/// inode number given to a new one shares keys with it.
pub(crate) fn file_key(dev: u64, ino: u64) -> u64 {
    mix(dev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ino ^ 1 << 63)
}

/// The hash a read's key is sampled by, and the key's identity in the
/// sample: mapping `id` ([`mapping_key`]) and page `index`. A key is in the sample at a
/// rate of 1 in 2^`s` when its hash is under `u64::MAX >> s`, so its top
/// bits decide the draw, and they are **stratified**: each run of 64
/// pages of a mapping (aligned) deals its pages the 64 values of the top
/// six bits, in an order of its own (a bijection drawn by the run's
/// hash), and the bits below are the run's hash. So at a rate of 1 in 16
/// every run gives exactly 4 of its pages to the sample and at 1 in 64
/// exactly one, where independent draws (SHARDS's) give each run a
/// binomial count: the keys drawn from any range of a file that is read
/// whole are its share exactly, not within the square root of their
/// count. Each key is still drawn with the rate's probability (the
/// order is uniform over the run's hash), so the sample's counts, scaled,
/// stay unbiased whatever the access pattern; only the spread falls, most
/// where neighbouring pages are alike (a file read uniformly, a hot
/// region). Below 1 in 64 the runs draw independently (the bits below
/// the top six).
#[inline]
pub(crate) fn key_hash(id: u64, index: u64) -> u64 {
    slot_hash(stratum_hash(id, index), index)
}

/// [`key_hash`] of each page `first..=last` of mapping `id`, given to
/// `f` in order: one mix a run of 64 pages, a few instructions a page.
#[inline]
pub(crate) fn key_hashes(id: u64, first: u64, last: u64, mut f: impl FnMut(u64)) {
    let mask = (1 << STRATUM_SHIFT) - 1;
    let mut i = first;
    while i <= last {
        let z = stratum_hash(id, i);
        let end = (i | mask).min(last);
        for j in i..=end {
            f(slot_hash(z, j));
        }
        i = end + 1;
    }
}

/// The hash of the run of 64 pages that page `index` of mapping `id` is
/// in ([`key_hash`]).
#[inline]
fn stratum_hash(id: u64, index: u64) -> u64 {
    mix(id ^ (index >> STRATUM_SHIFT).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// [`key_hash`] of page `index`, given its run's hash `z`.
#[inline]
fn slot_hash(z: u64, index: u64) -> u64 {
    let low = u64::BITS - STRATUM_SHIFT;
    let mask = (1 << STRATUM_SHIFT) - 1;
    // The run's bijection of its slots: j -> ((j ^ x) * m + b) mod 64,
    // m odd, x, m and b from the run's hash.
    let j = index & mask;
    let slot = ((j ^ (z & mask)).wrapping_mul((z >> STRATUM_SHIFT) | 1))
        .wrapping_add(z >> (2 * STRATUM_SHIFT))
        & mask;
    (slot << low) | (z >> STRATUM_SHIFT)
}

/// splitmix64's finalizer: any bit of `z` moves all.
#[inline]
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
