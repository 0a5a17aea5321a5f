//! Copying folio bytes out to a caller's buffer.
//!
//! The bar for a cache hit is a memory copy, so the copy itself matters.
//! On x86-64, copies of [`CHOSEN_MIN`] bytes or more go through one of
//! these routines:
//! - `movsb`: `rep movsb`;
//! - `avx2`: a loop of 32-byte `vmovdqu` loads and stores, where the CPU
//!   and the OS support AVX2;
//! - `avx512`: a loop of 64-byte `vmovdqu64` loads and stores, where they
//!   support AVX-512F;
//! - `memcpy`: `copy_nonoverlapping` (glibc's `memcpy`), for [`copy`] only,
//!   never for shared bytes (below);
//! - `stream`: 16-byte `movdqu` loads and non-temporal `movntdq` stores,
//!   which write whole cache lines to memory without reading them first.
//!
//! Which one serves a copy is chosen once per process, at the first copy,
//! from the CPU's features alone ([`chosen`] names it and why), as the
//! kernel's alternatives and glibc's resolvers choose their copies:
//! - where the CPU has ERMS or FSRM, `rep movsb` for every copy of shared
//!   bytes: those features mark `rep movsb` as fast (ERMS for long
//!   copies, FSRM for short ones too), which is why the kernel's
//!   `copy_user_generic` and `memcpy` use `rep movsb` on CPUs with FSRM
//!   (and did with ERMS: `copy_user_enhanced_fast_string`, `memcpy_erms`);
//! - without them, the widest vector loop the CPU and the OS support
//!   (`avx512`, then `avx2`): a `rep movsb` without the fast-string
//!   promise may be far slower than a loop of wide loads and stores;
//!   else `movsb`;
//! - the *bulk* class, a [`copy_to_fresh`] of [`BULK`] bytes or more (new
//!   folios that a bulk write fills: memory nothing touched lately):
//!   `stream` on every CPU, since a store to a line the caches do not
//!   hold first reads it (read for ownership) and a non-temporal store
//!   writes the whole line without, which is why glibc's `memcpy` turns
//!   to non-temporal stores above a size too (`stream` is slower into
//!   memory the caches hold, so only this class uses it);
//! - [`copy`] (private bytes): the shared copies' routine.
//!
//! Timing the routines inside each process instead (a calibration at the
//! first build, trials of random hits) chose differently from one process
//! to the next on one host, with noise deciding: a choice that flips is no
//! choice. So timing is left to the benchmarks: [`time_routines`] times
//! every routine on the classes of copy a hit and a bulk write make, and
//! [`routines`] hands them out to be timed side by side (figures:
//! the note "The copy routine" in `docs/measurements/`).
//! `FOLIOCACHE_COPY=movsb|avx2|avx512|stream|memcpy` in the environment
//! forces one routine for every class (`memcpy` forces it for [`copy`]
//! only: the shared functions keep the features' choice); a routine the
//! host lacks, or another value, is ignored with a warning. Shorter
//! copies, other architectures, loom and Miri use `copy_nonoverlapping` in
//! [`copy`].
//!
//! # Copies that race: the shared functions
//! A reader copies an uptodate folio out without the folio lock, so it can
//! meet a writer copying into (or zeroing) the same bytes under the lock.
//! A plain copy (`copy_nonoverlapping`, `write_bytes`) racing a write is a
//! data race, undefined behaviour whatever bytes it would give. So bytes
//! that may be accessed by two threads at once, one of them writing
//! (*shared* bytes: folio memory), are accessed only through this module's
//! shared functions: [`copy_from_shared`] (out of them, into a buffer of the
//! caller's own), [`copy_to_shared`] (into them; [`copy_to_fresh`] into
//! memory a write has just allocated), [`zero_shared`], and
//! [`copy_shared`] (either way: both sides treated as shared). Each is
//! defined as **one relaxed atomic access per shared byte**: a relaxed
//! `AtomicU8` load per byte read from shared memory, a relaxed `AtomicU8`
//! store per byte written to it; the caller's own side is plain. Racing
//! atomic accesses are defined: a byte read sees a byte that was written
//! there (the old one or a new one), never anything else; a range may mix
//! old and new bytes, as a read racing a write does in the kernel's page
//! cache.
//!
//! Why bytes and not words: racing atomic accesses must have the same size
//! when one of them writes (mixed-size loads may race each other, a store
//! may not race an access of another size). A reader's range and a
//! writer's start and end at any byte of a folio, so a word-wise copy would
//! cut the same bytes into words on one side and single bytes (its unaligned
//! head or tail) on the other. One byte is the only size every range agrees
//! on.
//!
//! Two kinds of implementation, one per build, so every racing access of a
//! build is of the same kind:
//! - x86-64 (not loom, not Miri): the `movsb`, `avx2`, `avx512` and
//!   `stream` routines (and `rep stosb` for [`zero_shared`]), each **one**
//!   `asm!` block. To the compiler a block is opaque (no `nomem`, no `readonly`):
//!   it may read and write what the pointers reach, as the byte loop would.
//!   To the CPU, a load or store of any width (1 to 8 bytes in general
//!   registers, 16, 32 or 64 in vector ones, in whatever pieces and order
//!   its microcode picks for `rep movsb`) is, byte by byte, what the
//!   definition asks: x86 promises
//!   a wide or unaligned access no atomicity as a whole (it may be carried
//!   out as several accesses, and a racing store may leave some of its
//!   bytes old and others new), but it never tears a byte: each byte a
//!   load covers is read as a byte some store wrote there, each byte a
//!   store covers is written whole with its value, and no byte outside
//!   the operand is written (there is no read-modify-write of neighbouring
//!   bytes). A wide access is therefore a set of one-byte relaxed accesses,
//!   which is all the definition requires (a copy's bytes never had to be
//!   one atomic unit). Each routine loads every source byte once and
//!   stores every destination byte once, forward (no overlapping head or
//!   tail stores that would write a byte twice). `stream`'s non-temporal
//!   stores are weakly ordered among themselves, which relaxed accesses
//!   allow, and its closing `sfence` orders them before every later store
//!   of the thread, so a release that follows (the folio's unlock)
//!   publishes them as it does the other routines' stores. So each is a valid
//!   implementation of "one relaxed atomic byte access per byte", of each
//!   of the shared functions, and the routines may race one another and
//!   `rep stosb`: a process may use different ones for different classes
//!   of copy (and threads of one process always agree, since the choice is
//!   made once). `copy_nonoverlapping` is not such a block (the compiler
//!   may assume nothing races its bytes), so `memcpy` is never used for
//!   shared bytes.
//! - everywhere else, and under loom and Miri: the byte loop itself
//!   (`copy_bytes`, `zero_bytes_atomic`), which Miri's data race detector
//!   checks as atomics (the tests race copies on three threads). It moves a
//!   byte per access, slower than `memcpy`: the price of being defined
//!   there; x86-64 is the target the benchmarks measure.
//!
//! The atomic loads go through `&AtomicU8` made from the source pointer.
//! For [`copy_from_shared`] that is folio memory (writable). For
//! [`copy_shared`] it may also be a caller's `&[u8]` (a write's data,
//! perhaps a constant in read-only memory): a load mutates nothing, and a
//! relaxed atomic load of one byte works on read-only pages (see
//! [`std::sync::atomic`], "atomic accesses to read-only memory"); Tree
//! Borrows (what `scripts/miri.sh` checks) accepts such a reference, Stacked
//! Borrows rejects making it. [`copy_to_shared`] reads its source plainly,
//! which raises no such question: it is the precise function for a
//! write's copy-in, as [`copy_from_shared`] is for a read's copy-out.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Copies from this length up go through the chosen routine (see the
/// module docs of `copy.rs`); [`copy`] copies shorter ones with
/// `copy_nonoverlapping`.
pub const CHOSEN_MIN: usize = 256;

/// A [`copy_to_fresh`] from this length up is of the bulk class (see the
/// module docs of `copy.rs`); shorter ones copy as [`copy_to_shared`] does.
pub const BULK: usize = 64 << 10;

/// The routines chosen for this process, and why: the shared functions'
/// (with the bulk class's if it differs) and the CPU features or the
/// `FOLIOCACHE_COPY` that chose it; then [`copy`]'s own if it differs,
/// e.g. `movsb (ERMS)`. Chooses first if nothing has yet.
pub fn chosen() -> String {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    return x86::choice().describe();
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    "byte loop (shared), memcpy (plain)".to_owned()
}

/// Times every copy routine this CPU has on the classes of copy a hit and
/// a bulk write make, a few milliseconds: a line per class with each
/// routine's best time per copy and its rate, and the routine chosen for
/// it. For benchmarks and tools: the cache never calls it (the choice
/// does not depend on timing). Empty off x86-64 and under loom and Miri.
pub fn time_routines() -> String {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    return x86::report();
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    String::new()
}

/// A copy routine as a function: `(src, dst, len)`.
pub type CopyFn = unsafe fn(*const u8, *mut u8, usize);

/// Every copy routine this CPU has that may copy shared bytes, by the
/// names `FOLIOCACHE_COPY` takes (`movsb`, `avx2`, `avx512`, `stream`),
/// whatever the choice: for benchmarks that time them side by side. Each
/// has [`copy_shared`]'s contract. Empty off x86-64 and under loom and
/// Miri.
pub fn routines() -> Vec<(&'static str, CopyFn)> {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    return x86::candidates()
        .into_iter()
        .filter(|&(_, _, shared)| shared)
        .map(|(name, f, _)| (name, f))
        .collect();
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    Vec::new()
}

/// `dst.copy_from_slice(src)` with [`copy`]: what a cache hit costs at the
/// least (benchmarks use it as the floor). Its routine is the one chosen
/// for private bytes: the shared copies' unless `FOLIOCACHE_COPY=memcpy`.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does.
pub fn copy_from_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_from_slice: lengths differ");
    // SAFETY: both slices are valid for `len` bytes, and a `&mut` slice
    // cannot overlap a `&` one.
    unsafe { copy(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
}

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst`
/// for writes of `len` bytes, the two ranges disjoint.
#[inline]
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    if len >= CHOSEN_MIN {
        // SAFETY: the caller's contract is the chosen routine's; nothing
        // races a plain copy (the caller's contract).
        unsafe { x86::copy::<false, false>(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Copies `len` bytes where either side may be shared bytes (see the
/// module docs of `copy.rs`): one relaxed atomic byte load from `src` and one
/// relaxed atomic byte store to `dst` per byte, so a copy racing a write
/// of the same bytes gets some mix of old and new bytes, never anything
/// else. The chosen `asm!` routine on x86-64; the byte-atomic loop elsewhere and under
/// loom and Miri. Where one side is known to be the caller's own buffer,
/// [`copy_from_shared`] and [`copy_to_shared`] say so and spare it the
/// atomics.
///
/// # Safety
/// As [`copy`]: `src` valid for reads and `dst` for writes of `len` bytes,
/// the two ranges disjoint. Any other access that may run at the same
/// time on these bytes is one of this module's shared functions
/// ([`copy_shared`], [`copy_from_shared`], [`copy_to_shared`],
/// [`zero_shared`]) on its shared side, or a plain read of bytes that
/// nothing writes meanwhile (reads never race each other).
#[inline]
pub unsafe fn copy_shared(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, with both sides shared.
    unsafe { shared_copy::<true, true, false>(src, dst, len) };
}

/// Copies `len` bytes out of shared bytes (a reader's copy-out of an
/// uptodate folio, which a writer may copy into meanwhile) into the
/// caller's own buffer: a relaxed atomic byte load per byte of `src`,
/// plain stores to `dst`; the chosen `asm!` routine on x86-64.
///
/// # Safety
/// As [`copy`], and: `src`'s bytes may be written meanwhile only by this
/// module's shared functions ([`copy_shared`], [`copy_to_shared`],
/// [`zero_shared`]); nothing else accesses `dst`'s bytes meanwhile.
#[inline]
pub unsafe fn copy_from_shared(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, with `src` shared and `dst` private.
    unsafe { shared_copy::<true, false, false>(src, dst, len) };
}

/// Copies `len` bytes from the caller's own buffer into shared bytes (a
/// writer's copy-in to a locked folio, which readers may copy out
/// meanwhile): plain loads from `src`, a relaxed atomic byte store per
/// byte of `dst`; the chosen `asm!` routine on x86-64.
///
/// # Safety
/// As [`copy`], and: `dst`'s bytes may be read or written meanwhile only
/// by this module's shared functions ([`copy_shared`],
/// [`copy_from_shared`], [`copy_to_shared`], [`zero_shared`]); nothing
/// writes `src`'s bytes meanwhile.
#[inline]
pub unsafe fn copy_to_shared(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, with `src` private and `dst` shared.
    unsafe { shared_copy::<false, true, false>(src, dst, len) };
}

/// [`copy_to_shared`] into memory that nothing has touched lately: the
/// folios a write has just allocated and fills whole (a bulk load, a VM's
/// memory being populated). From [`BULK`] bytes up it copies with the bulk
/// class's routine (see the module docs of `copy.rs`); shorter copies as
/// [`copy_to_shared`]. Correct whatever the memory holds: the choice is
/// only about speed.
///
/// # Safety
/// As [`copy_to_shared`].
#[inline]
pub unsafe fn copy_to_fresh(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, with `src` private and `dst` shared.
    unsafe { shared_copy::<false, true, true>(src, dst, len) };
}

/// Zeroes `len` shared bytes (of a locked folio, which readers may copy
/// out meanwhile, see [`copy_shared`]): one relaxed atomic byte store of 0
/// per byte; `rep stosb` on x86-64, the byte-atomic loop elsewhere.
///
/// # Safety
/// `dst` valid for writes of `len` bytes; any other access that may run at
/// the same time on them is one of this module's shared functions too.
#[inline]
pub unsafe fn zero_shared(dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    // SAFETY: `rep stosb` writes `len` copies of AL (0) forward from
    // `dst`, which the caller guarantees valid; the direction flag is clear
    // at every Rust function boundary (SysV ABI). Racing it is defined
    // (the module docs).
    unsafe {
        std::arch::asm!(
            "rep stosb",
            inout("rcx") len => _,
            inout("rdi") dst => _,
            in("al") 0u8,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        zero_bytes_atomic(dst, len)
    };
}

/// The shared copies: the chosen `asm!` routine on x86-64 (each of which
/// is each of them, see the module docs; of the bulk class if `FRESH`),
/// [`copy_bytes`] with these sides atomic elsewhere.
///
/// # Safety
/// As [`copy`], with concurrent accesses only as the public function
/// that calls this allows.
#[inline(always)]
unsafe fn shared_copy<const ATOMIC_SRC: bool, const ATOMIC_DST: bool, const FRESH: bool>(
    src: *const u8,
    dst: *mut u8,
    len: usize,
) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    // SAFETY: the caller's contract is the routine's; racing it is
    // defined (the module docs).
    unsafe {
        x86::copy::<true, FRESH>(src, dst, len)
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        copy_bytes::<ATOMIC_SRC, ATOMIC_DST>(src, dst, len)
    };
}

/// The byte at `p` as an atomic (std's, also under loom: folio memory is
/// not a loom object, and loom does not model it).
///
/// # Safety
/// `p` valid for reads (and for writes, if the result is stored to) for
/// `'a`; every write racing an access through it is an atomic one-byte
/// access too.
#[inline(always)]
unsafe fn atomic_byte<'a>(p: *const u8) -> &'a AtomicU8 {
    // SAFETY: `AtomicU8` has the size, alignment and bit validity of `u8`,
    // and the caller guarantees the byte valid for what it does with it.
    unsafe { &*p.cast::<AtomicU8>() }
}

/// The shared copies as their definition: per byte, in order, a load from
/// `src` (a relaxed `AtomicU8` load if `ATOMIC_SRC`, else plain) and a
/// store to `dst` (a relaxed `AtomicU8` store if `ATOMIC_DST`).
///
/// # Safety
/// As [`copy`]; bytes of a side that is not atomic are not accessed by
/// anyone else meanwhile, and every write racing an atomic side is one of
/// this module's shared functions.
#[cfg_attr(all(target_arch = "x86_64", not(loom), not(miri)), allow(dead_code))]
unsafe fn copy_bytes<const ATOMIC_SRC: bool, const ATOMIC_DST: bool>(
    src: *const u8,
    dst: *mut u8,
    len: usize,
) {
    for i in 0..len {
        // SAFETY: `i < len`: inside both ranges, `src` readable, `dst`
        // writable (the caller's contract); a side accessed plainly is not
        // raced, and the writes racing an atomic side are single-byte
        // atomics (the caller's contract).
        unsafe {
            let (s, d) = (src.add(i), dst.add(i));
            let b = if ATOMIC_SRC {
                atomic_byte(s).load(Relaxed)
            } else {
                s.read()
            };
            if ATOMIC_DST {
                atomic_byte(d).store(b, Relaxed);
            } else {
                d.write(b);
            }
        }
    }
}

/// [`zero_shared`] as its definition: a relaxed `AtomicU8` store of 0 per
/// byte.
///
/// # Safety
/// As [`zero_shared`].
#[cfg_attr(all(target_arch = "x86_64", not(loom), not(miri)), allow(dead_code))]
unsafe fn zero_bytes_atomic(dst: *mut u8, len: usize) {
    for i in 0..len {
        // SAFETY: `i < len`: inside the caller's writable range; racing
        // accesses are single-byte atomics (the caller's contract).
        unsafe { atomic_byte(dst.add(i)).store(0, Relaxed) };
    }
}

/// Asks for the cache line at `p` to be brought in (a hint: no access,
/// never faults, any address).
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    // SAFETY: PREFETCHT0 is architecturally not a memory access: it cannot
    // fault, write, or observe memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    let _ = p;
}

#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
mod x86;

/// Runs `f` on `len` bytes of this thread's buffer for reads copied out of
/// the cache (a reply built from them, then the buffer reused by the next
/// read: no allocation per read); on a fresh buffer where the thread's is
/// in use (`f` of an outer call reads again) or being destroyed (a call
/// from a destructor or an atexit handler). `CachedFile::read_with`.
pub(crate) fn with_thread_buffer<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut f = Some(f);
    let mut run = |buf: &mut Vec<u8>| {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        f.take().map(|f| f(&mut buf[..len]))
    };
    let done = BUF.try_with(|b| b.try_borrow_mut().ok().and_then(|mut b| run(&mut b)));
    match done {
        Ok(Some(r)) => r,
        // `f` did not run on the thread's buffer: it runs now.
        _ => match run(&mut Vec::new()) {
            Some(r) => r,
            None => unreachable!("`f` ran on the thread's buffer and gave its result"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Copy = unsafe fn(*const u8, *mut u8, usize);
    type Zero = unsafe fn(*mut u8, usize);

    /// Shared functions as a writer and a reader use them: (copy in, zero,
    /// copy out). The public ones, the byte loops they are off x86-64 and
    /// under Miri, and on x86-64 every routine the host has that may copy
    /// shared bytes, whatever the choice: so all are tested on every build
    /// that has them.
    fn shared_fns() -> Vec<(Copy, Zero, Copy)> {
        // (Mutated only where the routines exist.)
        #[allow(unused_mut)]
        let mut fns: Vec<(Copy, Zero, Copy)> = vec![
            (copy_shared, zero_shared, copy_shared),
            (copy_to_shared, zero_shared, copy_from_shared),
            (copy_to_fresh, zero_shared, copy_from_shared),
            (
                copy_bytes::<true, true>,
                zero_bytes_atomic,
                copy_bytes::<true, true>,
            ),
            (
                copy_bytes::<false, true>,
                zero_bytes_atomic,
                copy_bytes::<true, false>,
            ),
        ];
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        for (_, f, shared) in x86::candidates() {
            if shared {
                fns.push((f, zero_shared, f));
            }
        }
        fns
    }

    /// The plain copies: [`copy`], and on x86-64 every routine the host
    /// has (`memcpy` among them).
    fn plain_fns() -> Vec<(&'static str, Copy)> {
        // (Mutated only where the routines exist.)
        #[allow(unused_mut)]
        let mut fns: Vec<(&'static str, Copy)> = vec![("copy", copy)];
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        fns.extend(x86::candidates().into_iter().map(|(name, f, _)| (name, f)));
        fns
    }

    /// Small under Miri (which runs ~1000x slower), real sizes otherwise.
    const fn sized(native: usize, miri: usize) -> usize {
        if cfg!(miri) {
            miri
        } else {
            native
        }
    }

    #[test]
    fn shared_copies_and_zero_are_exact() {
        let n = sized(20_000, 300);
        let src: Vec<u8> = (0..n as u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut dst = vec![0xEEu8; n + 100];
        let cases = [(0, 0), (1, 3), (100, 8), (255, 1), (n / 2, 16), (n - 1, 0)];
        for (copy_in, zero, copy_out) in shared_fns() {
            for copy in [copy_in, copy_out] {
                for (len, off) in cases {
                    dst.fill(0xEE);
                    // SAFETY: in bounds of distinct vectors; no other thread.
                    unsafe { copy(src.as_ptr(), dst.as_mut_ptr().add(off + 1), len) };
                    assert_eq!(&dst[off + 1..off + 1 + len], &src[..len]);
                    assert_eq!(dst[off], 0xEE);
                    assert_eq!(dst[off + 1 + len], 0xEE);
                    // SAFETY: in bounds; no other thread.
                    unsafe { zero(dst.as_mut_ptr().add(off + 1), len) };
                    assert!(dst[off + 1..off + 1 + len].iter().all(|&b| b == 0));
                    assert_eq!(dst[off + 1 + len], 0xEE, "len {len}");
                }
            }
        }
    }

    #[test]
    fn copies_in_read_read_only_memory() {
        // A write's data may be a constant, in read-only pages: the copies
        // in only load from it (atomically for `copy_shared`, which Tree
        // Borrows accepts through a shared borrow; see the module docs).
        static SRC: &[u8] = b"read-only bytes of a write";
        for (copy_in, _, _) in shared_fns() {
            let mut dst = [0u8; 26];
            // SAFETY: `SRC` is readable for its length, `dst` writable and
            // distinct; no other thread.
            unsafe { copy_in(SRC.as_ptr(), dst.as_mut_ptr(), SRC.len()) };
            assert_eq!(&dst[..], SRC);
        }
    }

    /// Three threads on one shared buffer: a writer copying `0x11` into
    /// `[3, n - 2)`, another zeroing then copying `0x22` into `[0, n / 2 +
    /// 5)` (ranges that start and end inside each other's words), and a
    /// reader copying the whole buffer out, which must see every byte as
    /// the old `0xAA` or one of the writers' values. Under Miri the data
    /// race detector checks that none of it is a data race.
    fn race((copy_in, zero, copy_out): (Copy, Zero, Copy)) {
        let (n, rounds) = (sized(4096, 40), sized(200, 3));
        let shared: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0xAA)).collect();
        // Derived from `&[AtomicU8]`: writable through a shared borrow.
        let at = |i: usize| shared.as_ptr().cast::<u8>().cast_mut().wrapping_add(i);
        let ones = vec![0x11u8; n];
        let twos = vec![0x22u8; n];
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..rounds {
                    // SAFETY: `[3, n - 2)` is inside `shared`; `ones` is a
                    // distinct buffer nobody writes; the other threads
                    // access `shared` with the shared functions only.
                    unsafe { copy_in(ones.as_ptr(), at(3), n - 5) };
                }
            });
            s.spawn(|| {
                for _ in 0..rounds {
                    // SAFETY: as above, for `[0, n / 2 + 5)`.
                    unsafe { zero(at(0), n / 2 + 5) };
                    // SAFETY: as above.
                    unsafe { copy_in(twos.as_ptr(), at(0), n / 2 + 5) };
                }
            });
            s.spawn(|| {
                let mut out = vec![0u8; n];
                for _ in 0..rounds {
                    // SAFETY: all of `shared` into this thread's buffer.
                    unsafe { copy_out(at(0), out.as_mut_ptr(), n) };
                    let bad = out.iter().position(|b| ![0xAA, 0x11, 0x22, 0].contains(b));
                    assert_eq!(bad, None, "a byte neither old nor new: {out:x?}");
                }
            });
        });
        // The joins order the threads' stores before these loads.
        let end: Vec<u8> = shared.iter().map(|b| b.load(Relaxed)).collect();
        assert_eq!(end[n - 1], 0xAA, "past both writers");
        assert!(end[3..n - 2].iter().all(|&b| b == 0x11 || b == 0x22));
    }

    #[test]
    fn racing_shared_copies_see_old_or_new_bytes() {
        for fns in shared_fns() {
            race(fns);
        }
    }

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; 20_100];
        let lens: Vec<usize> = if cfg!(miri) {
            (0..20).chain([255, 256, 257, 4097]).collect()
        } else {
            (0..600)
                .chain([1023, 1024, 4095, 4096, 4097, 8192, 16_384, 19_000])
                .collect()
        };
        for (name, copy) in plain_fns() {
            for &len in &lens {
                for (so, doff) in [(0, 0), (0, 8), (1, 0), (3, 17), (4096, 16), (7, 64)] {
                    if so + len > src.len() || doff + len + 2 > dst.len() {
                        continue;
                    }
                    dst.fill(0xEE);
                    // SAFETY: both ranges are in bounds of distinct vectors.
                    unsafe { copy(src.as_ptr().add(so), dst.as_mut_ptr().add(doff + 1), len) };
                    assert_eq!(
                        &dst[doff + 1..doff + 1 + len],
                        &src[so..so + len],
                        "{name} len {len}"
                    );
                    assert_eq!(dst[doff], 0xEE, "{name}: no byte before");
                    assert_eq!(dst[doff + 1 + len], 0xEE, "{name}: no byte after");
                }
            }
        }
    }

    #[test]
    fn names_its_choice_and_times_every_routine() {
        let chosen = chosen();
        assert!(!chosen.is_empty());
        let report = time_routines();
        eprintln!("{report}");
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        {
            assert!(report.contains(&chosen), "{chosen:?} not in {report}");
            for (name, _) in routines() {
                assert!(
                    report.contains(&format!(" {name} ")),
                    "{name} not in {report}"
                );
            }
        }
    }

    /// The choice is made once and is the same every time it is asked
    /// for, as many times and from as many threads as ask.
    #[test]
    fn the_choice_is_stable() {
        let first = chosen();
        let others: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(chosen)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            others.iter().all(|c| *c == first),
            "{first:?} then {others:?}"
        );
        assert_eq!(chosen(), first);
    }
}
