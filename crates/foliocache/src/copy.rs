//! Copying folio bytes out to a caller's buffer.
//!
//! The bar for a cache hit is a memory copy, so the copy itself matters.
//! Measured on our VMs (AMD EPYC, Zen 4; see `benches/read.rs` and the
//! issue notes): glibc's `memcpy` copies 4 KiB from an aligned source into
//! a page-aligned destination at about 18 GiB/s but into one 8 bytes off at
//! 22-31 GiB/s (its vector loop suffers from 4 KiB aliasing when source and
//! destination share their low address bits), while a plain `rep movsb`
//! (fast with ERMS/FSRM, which the CPU advertises) holds about 29 GiB/s at
//! every destination offset. On an earlier host the misaligned case was the
//! slow one instead. So on x86-64 with ERMS, copies of [`REP_MOVSB_MIN`]
//! bytes or more use `rep movsb` directly, whatever the alignment; shorter
//! ones, other CPUs and other architectures use `copy_nonoverlapping`.

/// Copies from this length up go through `rep movsb` (where it is fast).
pub const REP_MOVSB_MIN: usize = 256;

/// `dst.copy_from_slice(src)` with the read path's copy: what a cache hit
/// costs at the least (benchmarks use it as the floor).
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
    if len >= REP_MOVSB_MIN && erms::fast() {
        // SAFETY: the caller's contract is exactly what `rep movsb` needs:
        // it reads `len` bytes forward from `src` (rsi) and writes `len`
        // bytes forward to `dst` (rdi); the direction flag is clear at
        // every Rust function boundary (SysV ABI).
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags)
            );
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Copies `len` bytes between folio memory and a caller's buffer where
/// another thread may write the folio bytes at the same time (a reader's
/// copy-out of an uptodate folio runs without the folio lock, as in the
/// kernel, so it can meet a writer's copy-in). A racing reader gets some
/// mix of old and new bytes, never anything else. On x86-64 both sides
/// are `rep movsb` for every length (an `asm!` block: its memory accesses
/// are the instruction's, which the hardware defines under races, where a
/// Rust `copy_nonoverlapping` racing a write would be undefined behaviour;
/// FSRM makes short ones fast); elsewhere (and under loom and miri) it is
/// [`copy`].
///
/// # Safety
/// As [`copy`].
#[inline]
pub unsafe fn copy_shared(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        // SAFETY: as in `copy`: `rep movsb` reads `len` bytes forward from
        // `src` and writes `len` bytes forward to `dst`, which the caller
        // guarantees valid and disjoint; the direction flag is clear.
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        copy(src, dst, len)
    };
}

/// Zeroes `len` bytes of folio memory that readers may copy at the same
/// time (see [`copy_shared`]): `rep stosb` on x86-64, `write_bytes`
/// elsewhere.
///
/// # Safety
/// `dst` valid for writes of `len` bytes.
#[inline]
pub unsafe fn zero_shared(dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        // SAFETY: `rep stosb` writes `len` copies of AL (0) forward from
        // `dst`, which the caller guarantees valid; direction flag clear.
        unsafe {
            std::arch::asm!(
                "rep stosb",
                inout("rcx") len => _,
                inout("rdi") dst => _,
                in("al") 0u8,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::write_bytes(dst, 0, len)
    };
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
mod erms {
    use std::sync::atomic::{AtomicU8, Ordering};

    /// 0: not probed yet; 1: slow; 2: fast.
    static STATE: AtomicU8 = AtomicU8::new(0);

    /// Whether the CPU has enhanced `rep movsb` (ERMS, CPUID leaf 7 EBX
    /// bit 9) or fast short `rep movsb` (FSRM, EDX bit 4).
    /// `FOLIOCACHE_COPY=memcpy` in the environment turns it off (to measure
    /// the other path).
    #[inline]
    pub(super) fn fast() -> bool {
        match STATE.load(Ordering::Relaxed) {
            0 => probe(),
            s => s == 2,
        }
    }

    #[cold]
    fn probe() -> bool {
        // SAFETY: CPUID is available on every x86-64 CPU; leaf 7 exists
        // when leaf 0 reports a maximum of 7 or more. (The intrinsics are
        // safe functions since Rust 1.87; the block serves older ones.)
        #[allow(unused_unsafe)]
        let fast = unsafe {
            let max = std::arch::x86_64::__cpuid(0).eax;
            if max < 7 {
                false
            } else {
                let r = std::arch::x86_64::__cpuid_count(7, 0);
                r.ebx & (1 << 9) != 0 || r.edx & (1 << 4) != 0
            }
        };
        let fast = fast && std::env::var_os("FOLIOCACHE_COPY").is_none_or(|v| v != "memcpy");
        STATE.store(if fast { 2 } else { 1 }, Ordering::Relaxed);
        fast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_copy_and_zero_are_exact() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut dst = vec![0xEEu8; 9100];
        for (len, off) in [(0, 0), (1, 3), (100, 8), (255, 1), (4096, 16), (8999, 0)] {
            dst.fill(0xEE);
            // SAFETY: in bounds of distinct vectors.
            unsafe { copy_shared(src.as_ptr(), dst.as_mut_ptr().add(off + 1), len) };
            assert_eq!(&dst[off + 1..off + 1 + len], &src[..len]);
            assert_eq!(dst[off], 0xEE);
            assert_eq!(dst[off + 1 + len], 0xEE);
            // SAFETY: in bounds.
            unsafe { zero_shared(dst.as_mut_ptr().add(off + 1), len) };
            assert!(dst[off + 1..off + 1 + len].iter().all(|&b| b == 0));
            assert_eq!(dst[off + 1 + len], 0xEE, "len {len}");
        }
    }

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; 20_100];
        for len in (0..600).chain([1023, 1024, 4095, 4096, 4097, 8192, 16_384, 19_000]) {
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
                    "len {len}"
                );
                assert_eq!(dst[doff], 0xEE, "no byte before");
                assert_eq!(dst[doff + 1 + len], 0xEE, "no byte after");
            }
        }
    }
}
