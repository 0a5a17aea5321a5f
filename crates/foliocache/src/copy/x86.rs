//! The x86-64 copy routines, the choice among them (the module docs of
//! `copy.rs` say why each may copy shared bytes, and by what rule one is
//! chosen), and a timing of each for the benchmarks ([`report`]).

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::Instant;

use super::BULK;

/// A copy routine as a function: `(src, dst, len)`.
pub(super) type CopyFn = unsafe fn(*const u8, *mut u8, usize);

/// A copy routine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Routine {
    /// `rep movsb`.
    Movsb,
    /// `copy_nonoverlapping` (not for shared bytes).
    Memcpy,
    /// 32-byte `vmovdqu` loads and stores.
    Avx2,
    /// 64-byte `vmovdqu64` loads and stores.
    Avx512,
    /// `movdqu` loads and non-temporal `movntdq` stores (SSE2), past the
    /// CPU caches, then `sfence`.
    Stream,
}

use Routine::*;

/// Every routine, in the order the timing report lists them.
pub(super) const ROUTINES: [Routine; R] = [Movsb, Memcpy, Avx2, Avx512, Stream];

/// How many routines there are.
const R: usize = 5;

/// The classes of copy the timing report times, by index: for 0 to 3, bit
/// 0 set for a destination off its source's alignment within a cache
/// line, bit 1 for a large copy; each as (length, destination offset)
/// timed, into a destination the CPU caches hold (a reader's buffer).
/// Class 4, [`BULK`]: a long copy into memory the caches do not hold (new
/// folios a bulk write fills), timed into a destination flushed first.
const CLASSES: [(usize, usize); C] = [
    (4096, 0),
    (4096, 16),
    (64 << 10, 0),
    (64 << 10, 16),
    (BULK_LEN, 0),
];

/// The bulk class's length in the timing report.
const BULK_LEN: usize = 256 << 10;

/// How many classes the timing report times.
const C: usize = 5;

/// The class of fresh, long copies ([`super::copy_to_fresh`]).
const BULK_CLASS: usize = 4;

impl Routine {
    /// The name `FOLIOCACHE_COPY` and [`super::chosen`] use.
    pub(super) fn name(self) -> &'static str {
        match self {
            Movsb => "movsb",
            Memcpy => "memcpy",
            Avx2 => "avx2",
            Avx512 => "avx512",
            Stream => "stream",
        }
    }

    /// Whether the CPU and the OS support it (std's detection checks both).
    pub(super) fn available(self) -> bool {
        match self {
            Movsb | Memcpy | Stream => true,
            Avx2 => std::is_x86_feature_detected!("avx2"),
            Avx512 => std::is_x86_feature_detected!("avx512f"),
        }
    }

    /// Whether it may copy shared bytes (one opaque `asm!` block).
    pub(super) fn shared(self) -> bool {
        self != Memcpy
    }

    /// The routine as a function.
    pub(super) fn func(self) -> CopyFn {
        match self {
            Movsb => movsb,
            Memcpy => memcpy,
            Avx2 => avx2,
            Avx512 => avx512,
            Stream => stream,
        }
    }
}

/// What the choice of routine reads from the CPU: CPUID's, and for the
/// vector routines the OS's support for their register state too.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Features {
    /// ERMS, fast `rep movsb`/`rep stosb` (CPUID leaf 7, EBX bit 9).
    erms: bool,
    /// FSRM, fast short `rep movsb` (CPUID leaf 7, EDX bit 4).
    fsrm: bool,
    /// AVX2, with the OS saving the YMM state.
    avx2: bool,
    /// AVX-512F, with the OS saving the ZMM state.
    avx512: bool,
}

impl Features {
    /// This CPU's.
    fn this() -> Features {
        // (CPUID is a safe intrinsic since Rust 1.87; the block serves older
        // ones.)
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86-64 CPU; leaf 7 exists when
        // leaf 0 reports a maximum of 7 or more.
        let (ebx, edx) = unsafe {
            use std::arch::x86_64::{__cpuid, __cpuid_count};
            if __cpuid(0).eax >= 7 {
                let l7 = __cpuid_count(7, 0);
                (l7.ebx, l7.edx)
            } else {
                (0, 0)
            }
        };
        Features {
            erms: ebx & (1 << 9) != 0,
            fsrm: edx & (1 << 4) != 0,
            avx2: Avx2.available(),
            avx512: Avx512.available(),
        }
    }
}

/// The routines chosen for this process (see the module docs of
/// `copy.rs`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Choice {
    /// The shared functions' routine, bar the bulk class.
    shared: Routine,
    /// The routine of the bulk class (a [`super::copy_to_fresh`] of
    /// [`BULK`] bytes or more).
    bulk: Routine,
    /// [`super::copy`]'s routine (private bytes).
    plain: Routine,
    /// The features that decided `shared`, for [`super::chosen`].
    why: &'static str,
    /// The routine `FOLIOCACHE_COPY` forced, if any.
    forced: Option<Routine>,
}

impl Choice {
    /// The rule of the module docs of `copy.rs`: `rep movsb` where the CPU
    /// has ERMS or FSRM, else the widest vector loop the CPU and the OS
    /// support, else `rep movsb`; `stream` for the bulk class; the plain
    /// copy as the shared ones; then `forced` (an available routine) for
    /// every class it may serve.
    fn new(f: Features, forced: Option<Routine>) -> Choice {
        let (shared, why) = if f.erms {
            (Movsb, "ERMS")
        } else if f.fsrm {
            (Movsb, "FSRM")
        } else if f.avx512 {
            (Avx512, "no ERMS; AVX-512F")
        } else if f.avx2 {
            (Avx2, "no ERMS; AVX2")
        } else {
            (Movsb, "no ERMS, no AVX2")
        };
        let mut c = Choice {
            shared,
            bulk: Stream,
            plain: shared,
            why,
            forced,
        };
        if let Some(r) = forced {
            c.plain = r;
            if r.shared() {
                c.shared = r;
                c.bulk = r;
            }
        }
        c
    }

    /// [`super::chosen`]'s answer: the shared functions' routine (and the
    /// bulk class's if it differs) and why, then the plain copy's if it
    /// differs.
    pub(super) fn describe(&self) -> String {
        let mut out = self.shared.name().to_owned();
        if self.bulk != self.shared {
            let _ = write!(out, ", bulk {}", self.bulk.name());
        }
        match self.forced {
            Some(r) if r.shared() => {
                let _ = write!(out, " (FOLIOCACHE_COPY={})", r.name());
            }
            _ => {
                let _ = write!(out, " ({})", self.why);
            }
        }
        if self.plain != self.shared {
            let _ = write!(out, "; plain copy: {}", self.plain.name());
            if let Some(r) = self.forced {
                let _ = write!(out, " (FOLIOCACHE_COPY={})", r.name());
            }
        }
        out
    }
}

/// The choice for this process, made at the first call.
pub(super) fn choice() -> &'static Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    CHOICE.get_or_init(|| Choice::new(Features::this(), forced()))
}

/// Copies with the routine chosen for this copy: the plain copy's unless
/// `SHARED_BYTES`; else the bulk class's if `FRESH` and `len` is [`BULK`]
/// or more, the shared functions' otherwise.
///
/// # Safety
/// As [`super::copy`]; if `SHARED_BYTES`, racing accesses as the shared
/// functions allow, else none.
#[inline(always)]
pub(super) unsafe fn copy<const SHARED_BYTES: bool, const FRESH: bool>(
    src: *const u8,
    dst: *mut u8,
    len: usize,
) {
    let c = choice();
    let routine = if !SHARED_BYTES {
        c.plain
    } else if FRESH && len >= BULK {
        c.bulk
    } else {
        c.shared
    };
    // SAFETY: the caller's contract is every routine's; the choice is of
    // available ones, and only shared ones for `SHARED_BYTES`.
    unsafe {
        match routine {
            Movsb => movsb(src, dst, len),
            Memcpy => memcpy(src, dst, len),
            Avx2 => avx2(src, dst, len),
            Avx512 => avx512(src, dst, len),
            Stream => stream(src, dst, len),
        }
    }
}

/// `copy_nonoverlapping`: the `memcpy` routine.
///
/// # Safety
/// As [`super::copy`], with no racing access.
unsafe fn memcpy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// `rep movsb`: `len` bytes forward from `src` to `dst`.
///
/// # Safety
/// As [`super::copy`]; racing accesses as the shared functions allow.
#[inline(always)]
unsafe fn movsb(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract is exactly what `rep movsb` needs: it
    // reads `len` bytes forward from `src` (rsi) and writes `len` bytes
    // forward to `dst` (rdi); the direction flag is clear at every Rust
    // function boundary (SysV ABI).
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

/// One step of a vector routine's head or tail: if register `$reg` has the
/// bit of value `$n` set, moves `$n` bytes from `[rsi]` to `[rdi]` and
/// advances both pointers and the count (rcx) by `$n`. Uses rax or the
/// low part of vector register 0.
macro_rules! step {
    ($reg:literal, 1) => {
        step!(@ $reg, 1, "movzx eax, byte ptr [rsi]", "mov byte ptr [rdi], al")
    };
    ($reg:literal, 2) => {
        step!(@ $reg, 2, "movzx eax, word ptr [rsi]", "mov word ptr [rdi], ax")
    };
    ($reg:literal, 4) => {
        step!(@ $reg, 4, "mov eax, dword ptr [rsi]", "mov dword ptr [rdi], eax")
    };
    ($reg:literal, 8) => {
        step!(@ $reg, 8, "mov rax, qword ptr [rsi]", "mov qword ptr [rdi], rax")
    };
    ($reg:literal, 16) => {
        step!(@ $reg, 16, "vmovdqu xmm0, xmmword ptr [rsi]", "vmovdqu xmmword ptr [rdi], xmm0")
    };
    ($reg:literal, 32) => {
        step!(@ $reg, 32, "vmovdqu ymm0, ymmword ptr [rsi]", "vmovdqu ymmword ptr [rdi], ymm0")
    };
    (@ $reg:literal, $n:literal, $load:literal, $store:literal) => {
        concat!(
            "test ", $reg, ", ", $n, "\n",
            "jz 8f\n",
            $load, "\n",
            $store, "\n",
            "add rsi, ", $n, "\n",
            "add rdi, ", $n, "\n",
            "sub rcx, ", $n, "\n",
            "8:\n",
        )
    };
}

/// A vector copy routine's one `asm!` block: from 256 bytes up, head steps
/// of 1, 2, ... bytes until `dst` is aligned to the vector width `$v`
/// (loads stay unaligned: split loads cost less than split stores); then
/// `$n` vectors a turn (registers `$i`: 256 bytes a turn for both routines,
/// AVX2's 8 as AVX-512's 4: a turn of 128 bytes left AVX2's 4 KiB copy
/// from memory well behind `rep movsb`'s: the note "The copy of a hit: a
/// calibration per process" in `docs/measurements/`), then one, then
/// tail steps of the remaining count's bits; `vzeroupper` last. Every byte
/// is loaded once and stored once. `$mov` is the vector move, `$r`/`$w`
/// the register prefix and operand size, `$head`/`$tail` the step sizes.
macro_rules! vector_copy {
    ($src:ident, $dst:ident, $len:ident, $v:literal, $mov:literal, $r:literal, $w:literal,
     $n:literal, [$($i:literal),*], [$($head:tt),*], [$($tail:tt),*]) => {
        std::arch::asm!(
            "cmp rcx, 256",
            "jb 3f",
            $(step!("dil", $head),)*
            // (The loop on a cache line of its own, so its placement is
            // the same in every build: sequential hits' throughput moved
            // between builds with changes elsewhere,
            // the note "Sequential 4 KiB hits: prefetching ahead" in `docs/measurements/`.)
            ".p2align 6",
            "2:",
            concat!("cmp rcx, ", $n, " * ", $v),
            "jb 3f",
            $(concat!($mov, " ", $r, $i, ", ", $w, " ptr [rsi + ", $i, " * ", $v, "]"),)*
            $(concat!($mov, " ", $w, " ptr [rdi + ", $i, " * ", $v, "], ", $r, $i),)*
            concat!("add rsi, ", $n, " * ", $v),
            concat!("add rdi, ", $n, " * ", $v),
            concat!("sub rcx, ", $n, " * ", $v),
            "jmp 2b",
            "3:",
            concat!("cmp rcx, ", $v),
            "jb 4f",
            concat!($mov, " ", $r, "0, ", $w, " ptr [rsi]"),
            concat!($mov, " ", $w, " ptr [rdi], ", $r, "0"),
            concat!("add rsi, ", $v),
            concat!("add rdi, ", $v),
            concat!("sub rcx, ", $v),
            "jmp 3b",
            "4:",
            $(step!("cl", $tail),)*
            "vzeroupper",
            inout("rcx") $len => _,
            inout("rdi") $dst => _,
            inout("rsi") $src => _,
            // Every caller-saved register, vector ones of every width
            // among them, without this function needing the features.
            clobber_abi("C"),
            options(nostack)
        )
    };
}

/// The `avx2` routine: 32-byte `vmovdqu` loads and stores.
///
/// # Safety
/// As [`super::copy`]; racing accesses as the shared functions allow; the
/// CPU has AVX2 ([`Routine::available`]).
unsafe fn avx2(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the block reads `len` bytes forward from `src` (rsi) and
    // writes `len` bytes forward to `dst` (rdi), each once, which the
    // caller guarantees valid and disjoint; the CPU runs its instructions
    // (the caller's contract); it declares every register it changes.
    unsafe {
        vector_copy!(
            src,
            dst,
            len,
            32,
            "vmovdqu",
            "ymm",
            "ymmword",
            8,
            [0, 1, 2, 3, 4, 5, 6, 7],
            [1, 2, 4, 8, 16],
            [16, 8, 4, 2, 1]
        )
    };
}

/// The `avx512` routine: 64-byte `vmovdqu64` loads and stores.
///
/// # Safety
/// As [`super::copy`]; racing accesses as the shared functions allow; the
/// CPU has AVX-512F ([`Routine::available`]).
unsafe fn avx512(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: as `avx2`'s, with AVX-512F.
    unsafe {
        vector_copy!(
            src,
            dst,
            len,
            64,
            "vmovdqu64",
            "zmm",
            "zmmword",
            4,
            [0, 1, 2, 3],
            [1, 2, 4, 8, 16, 32],
            [32, 16, 8, 4, 2, 1]
        )
    };
}

/// The `stream` routine: `rep movsb` up to `dst`'s next 64-byte boundary,
/// then 64 bytes a turn with four `movdqu` loads and four non-temporal
/// `movntdq` stores (SSE2, every x86-64 CPU: a whole cache line written
/// past the caches, without reading it first), `rep movsb` for the tail,
/// and `sfence` last, so the stores are ordered before anything the
/// caller does next (a release that publishes them, as for the other
/// routines). Every byte is loaded once and stored once, forward. It can
/// only be faster into memory the caches do not hold, and is slower into
/// a buffer they hold; the timing report times it on both ([`report`]).
///
/// # Safety
/// As [`super::copy`]; racing accesses as the shared functions allow.
unsafe fn stream(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the block reads `len` bytes forward from `src` (rsi) and
    // writes `len` bytes forward to `dst` (rdi), each once (head: `rdx =
    // min(-dst % 64, len)` bytes by `rep movsb`; then `len / 64` lines,
    // each four 16-byte loads and stores, the stores to 16-byte aligned
    // addresses as `movntdq` needs; then the tail by `rep movsb`), which
    // the caller guarantees valid and disjoint; SSE2 is part of x86-64;
    // the direction flag is clear at every Rust function boundary; it
    // declares every register it changes.
    unsafe {
        std::arch::asm!(
            "mov rdx, rdi",
            "neg rdx",
            "and rdx, 63",
            "cmp rdx, rcx",
            "cmova rdx, rcx",
            "sub rcx, rdx",
            "xchg rcx, rdx",
            "rep movsb",
            "mov rcx, rdx",
            "shr rdx, 6",
            "and rcx, 63",
            "test rdx, rdx",
            "jz 3f",
            "2:",
            "movdqu xmm0, xmmword ptr [rsi]",
            "movdqu xmm1, xmmword ptr [rsi + 16]",
            "movdqu xmm2, xmmword ptr [rsi + 32]",
            "movdqu xmm3, xmmword ptr [rsi + 48]",
            "movntdq xmmword ptr [rdi], xmm0",
            "movntdq xmmword ptr [rdi + 16], xmm1",
            "movntdq xmmword ptr [rdi + 32], xmm2",
            "movntdq xmmword ptr [rdi + 48], xmm3",
            "add rsi, 64",
            "add rdi, 64",
            "dec rdx",
            "jnz 2b",
            "3:",
            "rep movsb",
            "sfence",
            inout("rcx") len => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            out("rdx") _,
            out("xmm0") _,
            out("xmm1") _,
            out("xmm2") _,
            out("xmm3") _,
            options(nostack)
        );
    }
}

/// The routine `FOLIOCACHE_COPY` forces, if it names an available one.
fn forced() -> Option<Routine> {
    let v = std::env::var("FOLIOCACHE_COPY").ok()?;
    match ROUTINES.into_iter().find(|r| r.name() == v) {
        Some(r) if r.available() => Some(r),
        Some(r) => {
            log::warn!(
                "FOLIOCACHE_COPY={v}: this CPU lacks {}; choosing from the CPU's features \
                 instead",
                r.name()
            );
            None
        }
        None => {
            log::warn!(
                "FOLIOCACHE_COPY={v}: not movsb, avx2, avx512, stream or memcpy; choosing from \
                 the CPU's features instead"
            );
            None
        }
    }
}

/// Rounds of [`measure`], the first a warm-up.
const ROUNDS: usize = 8;

/// [`super::time_routines`]'s answer: every available routine timed on every
/// class ([`measure`]), a line per class with each one's best time per
/// copy and its rate, and the routine the choice gives that class.
pub(super) fn report() -> String {
    let start = Instant::now();
    let ns = measure();
    let c = choice();
    let mut out = format!(
        "copy routines timed ({:.2?}); chosen: {}\n",
        start.elapsed(),
        c.describe()
    );
    for (class, &(len, off)) in CLASSES.iter().enumerate() {
        let _ = write!(out, "  {}:", class_name(class));
        for (i, r) in ROUTINES.iter().enumerate() {
            if let Some(t) = ns[class][i] {
                let gib = len as f64 / t / 1.073_741_824;
                let _ = write!(out, " {} {t:.0} ns ({gib:.1} GiB/s)", r.name());
            }
        }
        let shared = if class == BULK_CLASS {
            c.bulk
        } else {
            c.shared
        };
        let _ = writeln!(
            out,
            "; chosen {} (plain {}) [{len} B, dst +{off}]",
            shared.name(),
            c.plain.name()
        );
    }
    out
}

fn class_name(c: usize) -> &'static str {
    ["4K", "4K dst+16", "64K", "64K dst+16", "bulk"][c]
}

/// Times every available routine on every class: per round, per class,
/// each routine in turn (starting one further each round), between two
/// clock readings; keeps each one's best time per copy. The buffers are
/// written first (their pages faulted in), and round 0 only warms.
///
/// For the four classes of a hit's copy, the run is what a sequential
/// reader's hits do: copies of the class's length walking a 256 KiB source
/// flushed from the CPU caches first (`clflush`; a page cache holds data
/// larger than they are), 64 of 4 KiB or 4 of 64 KiB, each between two
/// locked read-modify-writes of a counter, as a hit's copy sits between
/// taking and dropping its folio's reference (a locked instruction waits
/// for the loads and stores before it, so it decides how much of one copy
/// overlaps the next). The destination stays in the caches, as a reader's
/// buffer reused read after read does: one fixed buffer, page-aligned plus
/// the class's offset: timed so, the routines rank as the reads themselves
/// rank them (the note "Timing a hit's copy classes as a stream of hits" in `docs/measurements/`).
/// For the bulk class, source and destination are both
/// flushed first, and the run is one copy of their whole length: a bulk
/// write filling memory nothing touched lately.
fn measure() -> [[Option<f64>; R]; C] {
    /// A hit class's span.
    const STREAM: usize = 256 << 10;
    /// The source: the longest span a class walks.
    const SPAN: usize = if STREAM > BULK_LEN { STREAM } else { BULK_LEN };
    const PAGE: usize = 4096;
    let src: Vec<u8> = (0..SPAN + PAGE).map(|i| i as u8).collect();
    let mut dst = vec![0x5a_u8; BULK_LEN + 2 * PAGE];
    let s = src[src.as_ptr().align_offset(PAGE)..].as_ptr();
    let at = dst.as_ptr().align_offset(PAGE);
    let d = dst[at..].as_mut_ptr();
    let avail: Vec<usize> = (0..R).filter(|&i| ROUTINES[i].available()).collect();
    // `stream` only where its stores can pay: into a destination the caches
    // hold (a hit's) they evict it, and it runs slower there
    // (the note "Bulk writes into fresh memory" in `docs/measurements/`).
    let for_hits: Vec<usize> = avail
        .iter()
        .copied()
        .filter(|&i| ROUTINES[i] != Stream)
        .collect();
    let refs = AtomicU64::new(0);
    let mut ns = [[None; R]; C];
    for round in 0..ROUNDS {
        for (c, &(len, off)) in CLASSES.iter().enumerate() {
            let bulk = c == BULK_CLASS;
            let span = if bulk { len } else { STREAM };
            let reps = span / len;
            let timed = if bulk { &avail } else { &for_hits };
            for k in 0..timed.len() {
                let i = timed[(k + round) % timed.len()];
                let f = ROUTINES[i].func();
                flush(s, span);
                if bulk {
                    flush(d, span);
                }
                let t = Instant::now();
                for rep in 0..reps {
                    if !bulk {
                        refs.fetch_add(1, SeqCst);
                    }
                    // SAFETY: `s + rep * len` has `len` bytes before
                    // `span` <= `SPAN`, `d + off` has `len` bytes inside
                    // `dst`, a distinct buffer; the routine is available;
                    // no other thread sees either buffer.
                    unsafe { f(s.add(rep * len), d.add(off), len) };
                    black_box(d);
                    if !bulk {
                        refs.fetch_sub(1, SeqCst);
                    }
                }
                let per = t.elapsed().as_nanos() as f64 / reps as f64;
                if round > 0 {
                    let best: &mut Option<f64> = &mut ns[c][i];
                    *best = Some(best.map_or(per, |b| b.min(per)));
                }
            }
        }
    }
    black_box(&dst);
    ns
}

/// Evicts `len` bytes from `p` on from every CPU cache, and waits for it:
/// with `clflushopt` where the CPU has it (CPUID leaf 7, EBX bit 23; many
/// in flight at once), else `clflush` (SSE2, every x86-64 CPU; one at a
/// time, several times slower).
fn flush(p: *const u8, len: usize) {
    static OPT: OnceLock<bool> = OnceLock::new();
    // (CPUID is a safe intrinsic since Rust 1.87; the block serves older
    // ones.)
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86-64 CPU; leaf 7 exists when
    // leaf 0 reports a maximum of 7 or more.
    let opt = *OPT.get_or_init(|| unsafe {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 23) != 0
    });
    for line in (0..len).step_by(64) {
        let at = p.wrapping_add(line);
        // SAFETY: CLFLUSHOPT (where CPUID says so) or CLFLUSH of an
        // address inside the caller's buffer: it writes back and evicts the
        // line, changing no byte of memory.
        unsafe {
            if opt {
                std::arch::asm!("clflushopt byte ptr [{}]", in(reg) at, options(nostack, preserves_flags));
            } else {
                std::arch::x86_64::_mm_clflush(at);
            }
        }
    }
    // SAFETY: MFENCE (SSE2) orders the flushes before the loads that
    // follow; it touches no memory.
    unsafe { std::arch::x86_64::_mm_mfence() };
}

/// Every available routine, as `(name, function, may copy shared bytes)`:
/// the tests run each, whatever the choice, and the benchmarks time those
/// that may copy shared bytes ([`super::routines`]).
pub(super) fn candidates() -> Vec<(&'static str, CopyFn, bool)> {
    ROUTINES
        .into_iter()
        .filter(|r| r.available())
        .map(|r| (r.name(), r.func(), r.shared()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn features(erms: bool, fsrm: bool, avx2: bool, avx512: bool) -> Features {
        Features {
            erms,
            fsrm,
            avx2,
            avx512,
        }
    }

    /// The rule of the module docs of `copy.rs`, feature by feature.
    #[test]
    fn the_choice_follows_the_cpu_features() {
        let pick = |f: Features| {
            let c = Choice::new(f, None);
            assert_eq!(c.plain, c.shared, "{f:?}");
            (c.shared, c.bulk, c.describe())
        };
        let all = features(true, true, true, true);
        let erms = "movsb, bulk stream (ERMS)".to_owned();
        assert_eq!(pick(all), (Movsb, Stream, erms));
        let fsrm = features(false, true, true, true);
        let fsrm_only = "movsb, bulk stream (FSRM)".to_owned();
        assert_eq!(pick(fsrm), (Movsb, Stream, fsrm_only));
        let wide = features(false, false, true, true);
        assert_eq!(pick(wide).0, Avx512);
        assert_eq!(pick(features(false, false, true, false)).0, Avx2);
        assert_eq!(pick(features(false, false, false, false)).0, Movsb);
        assert_eq!(pick(features(false, false, false, false)).1, Stream);
        // A pure function of its inputs: the same answer every time.
        assert_eq!(Choice::new(wide, None), Choice::new(wide, None));
        assert_eq!(choice(), choice());
        assert_eq!(
            *choice(),
            Choice::new(Features::this(), choice().forced),
            "the process's choice is the rule's"
        );
    }

    /// `FOLIOCACHE_COPY`'s routine serves every class it may: a shared
    /// one all of them, `memcpy` the plain copy only.
    #[test]
    fn a_forced_routine_overrides_the_features() {
        let erms = features(true, false, true, true);
        for r in [Avx2, Avx512, Stream] {
            let c = Choice::new(erms, Some(r));
            assert_eq!((c.shared, c.bulk, c.plain), (r, r, r));
            assert_eq!(
                c.describe(),
                format!("{} (FOLIOCACHE_COPY={})", r.name(), r.name())
            );
        }
        let c = Choice::new(erms, Some(Memcpy));
        assert_eq!((c.shared, c.bulk, c.plain), (Movsb, Stream, Memcpy));
        assert_eq!(
            c.describe(),
            "movsb, bulk stream (ERMS); plain copy: memcpy (FOLIOCACHE_COPY=memcpy)"
        );
        let c = Choice::new(erms, Some(Movsb));
        assert_eq!((c.shared, c.bulk, c.plain), (Movsb, Movsb, Movsb));
        assert_eq!(c.describe(), "movsb (FOLIOCACHE_COPY=movsb)");
    }
}
