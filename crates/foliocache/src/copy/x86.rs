//! The x86-64 copy routines and the calibration that chooses among them
//! (the module docs of `copy.rs` say why each may copy shared bytes, and
//! how the choice is made).

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{BULK, LARGE};

mod trial;

/// A copy routine as a function: `(src, dst, len)`.
pub(super) type CopyFn = unsafe fn(*const u8, *mut u8, usize);

/// A copy routine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Routine {
    /// `rep movsb`.
    Movsb = 1,
    /// `copy_nonoverlapping` (not for shared bytes).
    Memcpy = 2,
    /// 32-byte `vmovdqu` loads and stores.
    Avx2 = 3,
    /// 64-byte `vmovdqu64` loads and stores.
    Avx512 = 4,
    /// `movdqu` loads and non-temporal `movntdq` stores (SSE2), past the
    /// CPU caches, then `sfence`.
    Stream = 5,
}

use Routine::*;

/// The routines in the calibration's order of preference (the simpler
/// first).
pub(super) const ROUTINES: [Routine; R] = [Movsb, Memcpy, Avx2, Avx512, Stream];

/// How many routines there are.
const R: usize = 5;

/// The calibration's classes of copy, by index: for 0 to 3, bit 0 set for
/// a destination off its source's alignment within a cache line, bit 1 for
/// a large copy; each as (length, destination offset) timed, into a
/// destination the CPU caches hold (a reader's buffer). Class 4, [`BULK`]:
/// a long copy into memory the caches do not hold (new folios a bulk write
/// fills), timed into a destination flushed first. Classes 5 and 6: small
/// copies from scattered places ([`RANDOM_CLASS`] and the one after it,
/// the destination off alignment), a random reader's hits, which follow no
/// stream the hardware prefetchers could have run ahead of.
const CLASSES: [(usize, usize); C] = [
    (4096, 0),
    (4096, 16),
    (64 << 10, 0),
    (64 << 10, 16),
    (BULK_LEN, 0),
    (4096, 0),
    (4096, 16),
];

/// The bulk class's length.
const BULK_LEN: usize = 256 << 10;

/// How many classes there are (a byte each in [`PLAIN`] and [`SHARED`]).
const C: usize = 7;

/// The class of fresh, long copies ([`super::copy_to_fresh`]).
const BULK_CLASS: usize = 4;

/// The first class of scattered small copies ([`super::copy_hit_from_shared`]
/// of a read that does not continue the thread's last one); the next one is
/// its misaligned twin.
const RANDOM_CLASS: usize = 5;

/// Set in a scattered class's byte of [`SHARED`] (and [`PLAIN`]) while its
/// routine is on trial (`trial.rs`); the byte's routine is then the 4 KiB
/// class's, for the report.
const ON_TRIAL: u64 = 0x80;

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

    /// The routine of discriminant `i` (`movsb`, which every CPU runs, for
    /// anything else).
    fn from_index(i: u32) -> Routine {
        match i {
            2 => Memcpy,
            3 => Avx2,
            4 => Avx512,
            5 => Stream,
            _ => Movsb,
        }
    }
}

/// The chosen routines of [`super::copy`] and of the shared functions: a
/// byte per class (its index in [`CLASSES`]), each a [`Routine`]'s
/// discriminant, with [`ON_TRIAL`] set in a scattered class's while its
/// trial runs; 0 until the calibration has run.
static PLAIN: AtomicU64 = AtomicU64::new(0);
static SHARED: AtomicU64 = AtomicU64::new(0);

/// Copies with the routine chosen for this copy's class: of the shared
/// functions' choices if `SHARED_BYTES`, else of [`super::copy`]'s; of the
/// bulk class if `FRESH` and `len` is [`BULK`] or more; of a scattered
/// class if `RANDOM` and `len` is under [`LARGE`].
///
/// # Safety
/// As [`super::copy`]; if `SHARED_BYTES`, racing accesses as the shared
/// functions allow, else none.
#[inline(always)]
pub(super) unsafe fn copy<const SHARED_BYTES: bool, const FRESH: bool, const RANDOM: bool>(
    src: *const u8,
    dst: *mut u8,
    len: usize,
) {
    let table = if SHARED_BYTES { &SHARED } else { &PLAIN };
    let mut choices = table.load(Relaxed);
    if choices == 0 {
        calibration();
        choices = table.load(Relaxed);
    }
    let misaligned = u32::from((src as usize ^ dst as usize) % 64 != 0);
    let class = if FRESH && len >= BULK {
        BULK_CLASS as u32
    } else if RANDOM && len < LARGE {
        RANDOM_CLASS as u32 + misaligned
    } else {
        misaligned | u32::from(len >= LARGE) << 1
    };
    let byte = (choices >> (8 * class)) & 0xff;
    if RANDOM && byte & ON_TRIAL != 0 {
        // SAFETY: the caller's contract (only the shared functions make
        // random copies, and their contract is the trial's).
        unsafe { trial::copy(class as usize - RANDOM_CLASS, src, dst, len) };
        return;
    }
    let routine = Routine::from_index(byte as u32);
    // SAFETY: the caller's contract is every routine's; the calibration
    // chose an available one, and only shared ones for `SHARED`.
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
/// `$n` vectors a turn (registers `$i`: 256 bytes a turn for both routines;
/// AVX2 with 4 vectors, 128 bytes, copied a 4 KiB source from memory about
/// 35 % slower than `rep movsb` here, with 8 about 5-25 %), then one, then
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
            // between builds with changes elsewhere, `docs/bench.md`.)
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
/// routines). Every byte is loaded once and stored once, forward. Faster
/// only into memory the caches do not hold: about 2x `rep movsb` into a
/// page not touched lately on the Intel host of `docs/bench.md`, 2x slower
/// into a buffer in the caches; the calibration times it on both.
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

/// What the calibration found and chose.
pub(super) struct Calibration {
    /// Best time per copy in nanoseconds, by class and [`ROUTINES`] index;
    /// `None` for a routine the host lacks.
    ns: [[Option<f64>; R]; C],
    plain: [Routine; C],
    shared: [Routine; C],
    took: Duration,
    /// The routine `FOLIOCACHE_COPY` forced, if any (then no trial runs).
    forced: Option<Routine>,
}

static CALIBRATION: OnceLock<Calibration> = OnceLock::new();

/// The calibration, run on the first call (the choices are stored before
/// it returns).
pub(super) fn calibration() -> &'static Calibration {
    CALIBRATION.get_or_init(|| {
        let cal = Calibration::run();
        let trial = cal.forced.is_none();
        PLAIN.store(pack(&cal.plain, trial), Relaxed);
        SHARED.store(pack(&cal.shared, trial), Relaxed);
        cal
    })
}

/// Rounds of the calibration, the first a warm-up.
const ROUNDS: usize = 8;
/// A routine this close to the fastest (as a fraction) counts as fast as
/// it, and the earlier in [`ROUTINES`] wins.
const TIE: f64 = 0.02;

impl Calibration {
    fn run() -> Calibration {
        let start = Instant::now();
        let ns = measure();
        let pick = |c: usize, shared: bool| fastest(&ns[c], TIE, |r| !shared || r.shared());
        // The scattered classes are timed on random hits (`trial.rs`): until
        // then they are reported as the 4 KiB ones.
        let as_timed = |c: usize| {
            if c >= RANDOM_CLASS {
                c - RANDOM_CLASS
            } else {
                c
            }
        };
        let mut plain: [Routine; C] = std::array::from_fn(|c| pick(as_timed(c), false));
        let mut shared: [Routine; C] = std::array::from_fn(|c| pick(as_timed(c), true));
        let forced = forced();
        if let Some(r) = forced {
            plain = [r; C];
            if r.shared() {
                shared = [r; C];
            }
        }
        Calibration {
            ns,
            plain,
            shared,
            took: start.elapsed(),
            forced,
        }
    }

    /// [`super::chosen`]'s answer: the routines the tables hold now.
    pub(super) fn chosen(&self) -> String {
        let mut out = describe_both(SHARED.load(Relaxed), PLAIN.load(Relaxed));
        if let Some(r) = self.forced {
            let _ = write!(out, " (FOLIOCACHE_COPY={})", r.name());
        }
        out
    }

    /// A line per class: each routine's time and rate, and the choices.
    pub(super) fn report(&self) -> String {
        let mut out = format!("copy calibration ({:.2?}): {}\n", self.took, self.chosen());
        for (c, &(len, off)) in CLASSES.iter().enumerate() {
            let _ = write!(out, "  {}:", class_name(c));
            if c >= RANDOM_CLASS {
                let how = match self.forced {
                    Some(r) => format!(" {} (forced; not timed)", r.name()),
                    None => trial::report(c - RANDOM_CLASS),
                };
                let _ = writeln!(out, "{how} [{len} B, dst +{off}, scattered]");
                continue;
            }
            for (i, r) in ROUTINES.iter().enumerate() {
                if let Some(t) = self.ns[c][i] {
                    let gib = len as f64 / t / 1.073_741_824;
                    let _ = write!(out, " {} {t:.0} ns ({gib:.1} GiB/s)", r.name());
                }
            }
            let (shared, plain) = (self.shared[c], self.plain[c]);
            let _ = writeln!(
                out,
                "; chosen {} (plain {}) [{len} B, dst +{off}]",
                shared.name(),
                plain.name()
            );
        }
        out
    }
}

fn class_name(c: usize) -> &'static str {
    [
        "4K",
        "4K dst+16",
        "64K",
        "64K dst+16",
        "bulk",
        "4K random",
        "4K random dst+16",
    ][c]
}

/// The choices of a table packed as [`SHARED`] and [`PLAIN`] hold them:
/// one name if every class has the same routine, else each class's (a
/// scattered class on trial as such).
fn describe(table: u64) -> String {
    let name = |c: usize| {
        let byte = (table >> (8 * c)) & 0xff;
        if byte & ON_TRIAL != 0 {
            "on trial"
        } else {
            Routine::from_index(byte as u32).name()
        }
    };
    if (1..C).all(|c| name(c) == name(0)) {
        return name(0).to_owned();
    }
    let names: Vec<String> = (0..C)
        .map(|c| format!("{} {}", class_name(c), name(c)))
        .collect();
    names.join(", ")
}

/// The routine `FOLIOCACHE_COPY` forces, if it names an available one.
fn forced() -> Option<Routine> {
    let v = std::env::var("FOLIOCACHE_COPY").ok()?;
    match ROUTINES.into_iter().find(|r| r.name() == v) {
        Some(r) if r.available() => Some(r),
        Some(r) => {
            log::warn!(
                "FOLIOCACHE_COPY={v}: this CPU lacks {}; calibrating instead",
                r.name()
            );
            None
        }
        None => {
            log::warn!(
                "FOLIOCACHE_COPY={v}: not movsb, avx2, avx512, stream or memcpy; calibrating \
                 instead"
            );
            None
        }
    }
}

/// Times every available routine on every class: per round, per class,
/// each routine in turn (starting one further each round), between two
/// clock readings; keeps each one's best time per copy. The buffers are
/// written first (their pages faulted in), and round 0 only warms.
///
/// For the four sequential classes of a hit's copy, the run is what a
/// sequential reader's hits do: copies of the class's length walking a 256 KiB source
/// flushed from the CPU caches first (`clflush`; a page cache holds data
/// larger than they are), 64 of 4 KiB or 4 of 64 KiB, each between two
/// locked read-modify-writes of a counter, as a hit's copy sits between
/// taking and dropping its folio's reference (a locked instruction waits
/// for the loads and stores before it, so it decides how much of one copy
/// overlaps the next). The destination stays in the caches, as a reader's
/// buffer reused read after read does: one fixed buffer, page-aligned plus
/// the class's offset. Shorter runs, or runs without the locked pair,
/// ranked the routines otherwise than the reads did, and not the same way
/// from one process to the next; these rank them as the reads do
/// (`docs/bench.md`, "Timing a hit's classes as a stream of hits"). For
/// the bulk class, source and destination are both flushed first, and the
/// run is one copy of their whole length: a bulk write filling memory
/// nothing touched lately. The scattered classes are not timed here: the
/// random hits themselves are (`trial.rs`).
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
    // hold (a hit's) they evict it, and it never won such a class on any
    // host measured (`docs/bench.md`).
    let for_hits: Vec<usize> = avail
        .iter()
        .copied()
        .filter(|&i| ROUTINES[i] != Stream)
        .collect();
    let refs = AtomicU64::new(0);
    let mut ns = [[None; R]; C];
    for round in 0..ROUNDS {
        for (c, &(len, off)) in CLASSES.iter().enumerate().take(RANDOM_CLASS) {
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

/// The earliest routine of [`ROUTINES`] that `ok` allows whose time in
/// `ns` is within `tie` (a fraction) of the fastest such one's (`movsb`
/// if none was timed).
fn fastest(ns: &[Option<f64>; R], tie: f64, ok: impl Fn(Routine) -> bool) -> Routine {
    let time = |i: usize| ns[i].filter(|_| ok(ROUTINES[i]));
    let best = (0..R).filter_map(time).fold(f64::INFINITY, f64::min);
    let i = (0..R).find(|&i| time(i).is_some_and(|t| t <= best * (1.0 + tie)));
    ROUTINES[i.unwrap_or(0)]
}

/// [`super::chosen`]'s answer for these tables: the shared functions'
/// choices, and the plain copy's where they differ.
fn describe_both(shared: u64, plain: u64) -> String {
    let mut out = describe(shared);
    if plain != shared {
        let _ = write!(out, "; plain copy: {}", describe(plain));
    }
    out
}

/// The choices of `t`, a byte per class, as [`PLAIN`] and [`SHARED`] hold
/// them; the scattered classes marked [`ON_TRIAL`] if `trial`.
fn pack(t: &[Routine; C], trial: bool) -> u64 {
    t.iter().enumerate().fold(0, |a, (i, r)| {
        let on_trial = if trial && i >= RANDOM_CLASS {
            ON_TRIAL
        } else {
            0
        };
        a | (*r as u64 | on_trial) << (8 * i)
    })
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

/// Whether scattered class `class` (0: aligned, 1: 16 bytes off) has been
/// decided by its trial.
#[cfg(test)]
pub(super) fn trial_decided(class: usize) -> bool {
    trial::decided(class)
}

/// Every available routine, as `(name, function, may copy shared bytes)`:
/// the tests run each, whatever the calibration chose.
#[cfg(test)]
pub(super) fn candidates() -> Vec<(&'static str, CopyFn, bool)> {
    ROUTINES
        .into_iter()
        .filter(|r| r.available())
        .map(|r| (r.name(), r.func(), r.shared()))
        .collect()
}
