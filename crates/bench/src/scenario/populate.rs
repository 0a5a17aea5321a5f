//! `populate`: one thread fills fresh memory with 2 MiB writes, once:
//! through foliocache's batched folio grab (`grab_folios`) and one folio
//! at a time, against a `memset` of anonymous memory and a memfd. Every
//! run gets fresh memory, and its setup is part of its time. See
//! `docs/bench/populate.md`.

use std::time::Duration;

use foliocache::internals::Insert;

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{EngineKind, JobSpec, Rw};
use crate::sys::PAGE;
use crate::targets::{self, bandwidth, writes_alone, Given, Judged, Target};
use crate::units::{fmt_size, fmt_size_approx};
use Role::{Anon, AnonThp, Folio, Kernel, Large, Single};

/// The engines unless `--engine` gives others: [`POPULATE_FOLIO`]
/// (`File::write_at` into a memfile of a new cache), [`POPULATE_SINGLE`]
/// (the same, one folio at a time), [`POPULATE_LARGE`] (2 MiB folios),
/// `anon` (a `memset` of a fresh anonymous mapping), `anon[thp]` (with
/// `MADV_HUGEPAGE`) and `kernel` (a memfd written with `pwrite`).
pub const ENGINES: &[&str] = &[
    POPULATE_FOLIO,
    POPULATE_SINGLE,
    POPULATE_LARGE,
    "anon",
    "anon[thp]",
    "kernel",
];
/// The memory filled (full, and with `--quick`) and the write size.
const POPULATE_SIZE: FullQuick<u64> = FullQuick(3 << 30, 1 << 30);
const POPULATE_BS: u64 = 2 << 20;
/// The pause before each run unless `--settle` says otherwise: a VM may
/// hand memory left free back to its host after a while, and the next
/// first touch of it then costs more; without the pause a run would reuse
/// the pages the run before it freed, still backed, and look faster. The
/// costs measured are in `docs/measurements/2026-11-22-first-touch.md`.
pub const POPULATE_SETTLE: Duration = Duration::from_millis(2000);
/// The foliocache engine the targets judge: `File::write_at` into a
/// memfile, whose writes grab their folios with `grab_folios`, 4 KiB
/// folios and pages, the arena populated as [`POPULATE_MODE_WHY`] says.
pub const POPULATE_FOLIO: &str = "foliocache[huge=off,folio=4k]";
/// The same, its writes creating their folios one at a time
/// (`File::set_write_insert(Insert::Single)`): the only difference.
pub const POPULATE_SINGLE: &str = "foliocache[huge=off,folio=4k,grab=single]";
/// The same as [`POPULATE_FOLIO`] with 2 MiB folios: one folio per write,
/// so batching has nothing to batch.
pub const POPULATE_LARGE: &str = "foliocache[huge=off,folio=2m]";
/// Why the foliocache engines populate their arena as they do, and why
/// 4 KiB folios, as the scenario's description says it: eager population
/// with `MADV_POPULATE_WRITE` keeps the page faults out of the writes,
/// and 4 KiB pages fault in faster than the transparent huge pages the
/// arena asks for by default (the measurements are in
/// `docs/measurements/2026-11-22-first-touch.md`).
pub const POPULATE_MODE_WHY: &str = "huge=off with populate=eager: the arena is faulted in at \
     build as 4 KiB pages with MADV_POPULATE_WRITE (0.9-2.7 GiB/s on this VM, against \
     0.26-0.45 GiB/s for the transparent huge pages the arena asks for by default; anon[thp] \
     shows that cost), and that build is part of the run; folio=4k: a 2 MiB write is 512 \
     folios, which grab_folios creates in one batch and grab=single one at a time (with \
     2 MiB folios, the folio=2m row, a write is one folio either way)";
/// The target of population through `grab_folios`: at most this many
/// times the time of the anonymous memset.
const POPULATE_MAX_TIME_VS_ANON: f64 = 1.05;
/// The targets of batched population over one folio at a time: on the
/// writes alone (the setup, the same arena populate on both sides, left
/// out) in every round, and on whole runs at the median of the rounds.
const POPULATE_MIN_VS_SINGLE_WRITES: f64 = 1.1;
const POPULATE_MIN_VS_SINGLE: f64 = 1.0;

/// The job: memory filled once.
pub const POPULATE: &str = "populate";

/// The engines the table names: the defaults (or engines of the same
/// options), or else the first foliocache engine that grabs in batches
/// and the first that grabs one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// [`POPULATE_FOLIO`].
    Folio,
    /// [`POPULATE_SINGLE`].
    Single,
    /// [`POPULATE_LARGE`].
    Large,
    /// `anon`.
    Anon,
    /// `anon[thp]`.
    AnonThp,
    /// `kernel`.
    Kernel,
}

/// The scenario's ratios and targets: batched population against the
/// anonymous memset (on time) and against one folio at a time (on whole
/// runs, and on the writes alone in every round); then each way of
/// filling memory beside the others.
#[rustfmt::skip]
pub const TARGETS: &[Target<Role>] = &[
    bandwidth(Folio, Anon).at_least(1.0 / POPULATE_MAX_TIME_VS_ANON),
    bandwidth(Folio, Single).at_least(POPULATE_MIN_VS_SINGLE),
    writes_alone(Folio, Single).at_least(POPULATE_MIN_VS_SINGLE_WRITES),
    bandwidth(Large, Anon),
    bandwidth(Folio, Large),
    bandwidth(Folio, AnonThp),
    bandwidth(Folio, Kernel),
    bandwidth(Kernel, Anon),
];

/// The scenario: memory of `--size` (else [`POPULATE_SIZE`]), each run after a pause of
/// `--settle` (else [`POPULATE_SETTLE`]).
///
/// # Errors
/// A built-in engine does not parse.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let size = args.size.unwrap_or(POPULATE_SIZE.get(quick));
    let engines = super::engines_or(args, ENGINES)?;
    // Whole writes of up to 2 MiB, whole pages.
    let bs = POPULATE_BS
        .min(size / PAGE as u64 * PAGE as u64)
        .max(PAGE as u64);
    let size = if size >= bs { size / bs * bs } else { size };
    let capacity = size.div_ceil(2 << 20) * (2 << 20);
    let settle = args.settle.map_or(POPULATE_SETTLE, Duration::from_secs_f64);
    let job = JobSpec {
        cold: true,
        shared: false,
        capacity: Some(args.capacity.unwrap_or(capacity)),
        memory: true,
        settle: Some(settle),
        ..JobSpec::new(Rw::Write, bs, size, engines.clone())
    };
    // An engine of the list by the label of a built-in one, or else by its
    // options (so that `--engine 'foliocache[folio=4k,huge=off]'` is the
    // same engine).
    let find = |want: &str| -> Result<Option<String>, String> {
        let w = super::builtin_engine(want)?;
        Ok(engines
            .iter()
            .find(|e| e.label == w.label)
            .or_else(|| {
                engines
                    .iter()
                    .find(|e| e.kind == w.kind && e.folio == w.folio && e.anon == w.anon)
            })
            .map(|e| e.label.clone()))
    };
    // The targets' engines: the defaults', or else the first foliocache
    // engine that grabs in batches and the first that grabs one at a time.
    let first_folio = |grab: Insert| {
        super::first_label(&engines, |e| {
            e.kind == EngineKind::Foliocache && e.folio.grab == grab
        })
    };
    let folio = find(POPULATE_FOLIO)?.or_else(|| first_folio(Insert::Batched));
    let single = find(POPULATE_SINGLE)?.or_else(|| first_folio(Insert::Single));
    let large = find(POPULATE_LARGE)?.filter(|l| Some(l) != folio.as_ref());
    let anon = find("anon")?;
    let anon_thp = find("anon[thp]")?;
    let kernel = find("kernel")?;
    let label = |role| match role {
        Role::Folio => folio.clone(),
        Role::Single => single.clone(),
        Role::Large => large.clone(),
        Role::Anon => anon.clone(),
        Role::AnonThp => anon_thp.clone(),
        Role::Kernel => kernel.clone(),
    };
    let Judged { ratios, targets } = targets::judge(TARGETS, label, Given::default());
    Ok(Scenario {
        name: "populate".into(),
        description: format!(
            "Batched folio population: one thread fills {} of fresh memory with {} \
             writes, once: {POPULATE_FOLIO} writes into a memfile of a new cache of {} \
             (File::write_at, which grabs its folios with grab_folios; {POPULATE_MODE_WHY}); \
             {POPULATE_SINGLE} is the same with File::set_write_insert(Insert::Single); \
             {POPULATE_LARGE} the same with 2 MiB folios; anon memsets a fresh anonymous \
             mapping (its page faults included), anon[thp] one that asks for transparent huge \
             pages as foliocache's arena does by default; kernel writes a memfd with pwrite. \
             First touch of fresh memory costs 3-13 us a page on this VM: every run gets fresh \
             memory, after a pause of {:.1} s so that the pages the last run freed have gone \
             back to the host, and its setup (mapping, memfd, or the cache's build with its \
             arena's populate) is part of its time. Targets: {POPULATE_FOLIO} in at most \
             {:.2}x the anonymous memset's time (bandwidth at least {:.3}x); and against \
             {POPULATE_SINGLE}, at least {:.1}x on the writes alone (the setup, the same \
             arena populate on both sides, left out) in every round, and at least {:.1}x on \
             whole runs.",
            fmt_size(size),
            fmt_size(bs),
            fmt_size_approx(job.capacity.unwrap_or(capacity)),
            settle.as_secs_f64(),
            POPULATE_MAX_TIME_VS_ANON,
            1.0 / POPULATE_MAX_TIME_VS_ANON,
            POPULATE_MIN_VS_SINGLE_WRITES,
            POPULATE_MIN_VS_SINGLE,
        ),
        jobs: vec![ScenarioJob::new(POPULATE, job)],
        ratios,
        targets,
        detailed: false,
        programs: None,
    })
}
