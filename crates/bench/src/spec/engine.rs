//! Engines as the command line names them: `name` or `name[options]`
//! ([`EngineSpec::parse`]), the kinds of engine and their options. The
//! engines themselves are in [`crate::engine`].

use backing::aio::EngineKind as IoKind;
use foliocache::internals::Insert;
use foliocache::{Populate, ReadFlags, ReadaheadConfig};

use crate::sys::PAGE;
use crate::units::parse_size;

/// The kinds of engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// This library.
    Foliocache,
    /// Buffered pread/pwrite through the kernel's page cache.
    Kernel,
    /// pread/pwrite on an `O_DIRECT` file descriptor.
    Direct,
    /// preadv2/pwritev2 with `RWF_DONTCACHE` (uncached buffered IO).
    Dontcache,
    /// Copies out of (into) a shared mapping of the file.
    Mmap,
    /// Copies (`copy_from_slice`) out of anonymous memory holding the
    /// file's bytes, read in before the run: the limit of a cached read,
    /// a bare memory copy into the same buffer. Reads only. With
    /// `inplace` and `--consume`, the bytes are summed where they lie
    /// instead: the limit of a zero-copy read.
    Memcpy,
    /// A `memset` of fresh anonymous memory (the populate scenario's
    /// floor: what first touch costs).
    Anon,
    /// Buffered pread/pwrite of the file through a foliocache FUSE mount.
    Fuse,
    /// Buffered pread of a file of zeros through a mount that caches
    /// nothing (`foliocache_fuse::NullFs`): the FUSE crossing alone.
    FuseNull,
    /// tokio's way to read a file: positional reads of a buffered file
    /// through the runtime's blocking pool (`spawn_blocking` of
    /// `FileExt::read_at`), from `tasks=N` tasks on one current-thread
    /// runtime per job thread. Reads only; by name only
    /// ([`EngineKind::BY_NAME_ONLY`]).
    TokioFs,
    /// `foliocache::SharedCache`, the cache the processes of a group
    /// share, over `O_DIRECT` files (`SharedFile::read_at`/`write_at`).
    /// By name only ([`EngineKind::BY_NAME_ONLY`]).
    Shared,
}

impl EngineKind {
    /// Every engine, in the default order.
    pub const ALL: [EngineKind; 9] = [
        EngineKind::Foliocache,
        EngineKind::Kernel,
        EngineKind::Direct,
        EngineKind::Dontcache,
        EngineKind::Mmap,
        EngineKind::Memcpy,
        EngineKind::Anon,
        EngineKind::Fuse,
        EngineKind::FuseNull,
    ];

    /// The engines no scenario runs unless named (`--engine`): not in
    /// [`ALL`](Self::ALL), which a custom job defaults to.
    pub const BY_NAME_ONLY: [EngineKind; 2] = [EngineKind::TokioFs, EngineKind::Shared];

    /// The engine's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Foliocache => "foliocache",
            EngineKind::Kernel => "kernel",
            EngineKind::Direct => "direct",
            EngineKind::Dontcache => "dontcache",
            EngineKind::Mmap => "mmap",
            EngineKind::Memcpy => "memcpy",
            EngineKind::Anon => "anon",
            EngineKind::Fuse => "fuse",
            EngineKind::FuseNull => "fuse-null",
            EngineKind::TokioFs => "tokio-fs",
            EngineKind::Shared => "shared",
        }
    }

    /// Whether the engine runs jobs on data files (every engine but
    /// `anon`, which only populates memory).
    pub fn on_files(self) -> bool {
        self != EngineKind::Anon
    }

    /// Whether the engine serves through a FUSE mount (needs
    /// `/dev/fuse`).
    pub fn fuse(self) -> bool {
        matches!(self, EngineKind::Fuse | EngineKind::FuseNull)
    }

    /// Whether the engine can populate memory (the populate scenario).
    pub fn on_memory(self) -> bool {
        matches!(
            self,
            EngineKind::Foliocache | EngineKind::Kernel | EngineKind::Anon
        )
    }

    /// Whether the engine is warmed before a warm run (its reads are then
    /// memory copies).
    pub fn cached(self) -> bool {
        matches!(
            self,
            EngineKind::Foliocache
                | EngineKind::Kernel
                | EngineKind::Mmap
                | EngineKind::Fuse
                | EngineKind::TokioFs
                | EngineKind::Shared
        )
    }
}

/// Options of the `foliocache` engine, from `foliocache[...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolioOptions {
    /// When the arena is faulted in (`populate=eager|lazy`; eager by
    /// default, and its time is reported beside the run).
    pub populate: Populate,
    /// The largest folio a read may create (`folio=SIZE`; the library's
    /// default, 2 MiB, if absent).
    pub max_folio: Option<u64>,
    /// The readahead window's maximum (`ra=SIZE|kernel|off`; the library's
    /// default, 2 MiB, if absent).
    pub ra: RaWindow,
    /// How readahead windows enter the index (`insert=batched|single`;
    /// batched by default).
    pub insert: Insert,
    /// The engine that runs readahead IO (`io=uring|threads|auto`; auto by
    /// default: io_uring where the kernel allows it).
    pub io: IoKind,
    /// Every read and write is uncached (`dontcache`): `File::read_at_flags`
    /// with [`ReadFlags::DONTCACHE`] from an empty cache, `write_at_flags`
    /// with `WriteFlags::DONTCACHE`.
    pub dontcache: bool,
    /// How writes create the folios they need (`grab=batched|single`;
    /// batched by default): `File::set_write_insert`, so that `write_at`
    /// grabs them with `Mapping::grab_folios` or one at a time with
    /// `grab_folios_single`.
    pub grab: Insert,
    /// Whether the arena asks for transparent huge pages (`huge=on|off`;
    /// on by default, as the library: `CacheBuilder::huge_pages`).
    pub huge: bool,
    /// Reads borrow the cache's bytes (`pin`: `File::pin`) instead of
    /// copying them out: copied from the pin to the buffer, or, with
    /// `--consume`, summed in place.
    pub pin: bool,
    /// The cache has a guardian (`guardian`: `CacheBuilder::guardian` with
    /// `Guardian::Child`): its arena a shared memory file, each dirty page
    /// recorded for the guardian's writeback should the process die.
    pub guardian: bool,
}

impl Default for FolioOptions {
    fn default() -> Self {
        FolioOptions {
            populate: Populate::Eager,
            max_folio: None,
            ra: RaWindow::Default,
            insert: Insert::Batched,
            io: IoKind::Auto,
            dontcache: false,
            grab: Insert::Batched,
            huge: true,
            pin: false,
            guardian: false,
        }
    }
}

impl FolioOptions {
    /// The readahead configuration these options give.
    pub fn readahead(&self) -> ReadaheadConfig {
        let base = match self.ra {
            RaWindow::Default => ReadaheadConfig::default(),
            RaWindow::Kernel => ReadaheadConfig::kernel(),
            RaWindow::Off => ReadaheadConfig::disabled(),
            RaWindow::Pages(n) => ReadaheadConfig::new(n, n),
        };
        base.with_insert(self.insert)
    }

    /// The flags of every read these options give.
    pub fn read_flags(&self) -> ReadFlags {
        if self.dontcache {
            ReadFlags::DONTCACHE
        } else {
            ReadFlags::NONE
        }
    }
}

/// The `ra=` option of the foliocache engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaWindow {
    /// The library's default ([`ReadaheadConfig::default`], 2 MiB).
    Default,
    /// `ra=kernel`: [`ReadaheadConfig::kernel`] (128 KiB windows).
    Kernel,
    /// `ra=off`: [`ReadaheadConfig::disabled`].
    Off,
    /// `ra=SIZE`: windows of up to this many pages (`max_pages` and
    /// `io_pages` both).
    Pages(u64),
}

/// An engine as given on the command line: `name` or `name[opt,opt=v]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSpec {
    /// The text as given, printed and written as the engine's label.
    pub label: String,
    /// Which engine.
    pub kind: EngineKind,
    /// The foliocache engine's options (defaults for other engines).
    pub folio: FolioOptions,
    /// The anon engine's options (defaults for other engines).
    pub anon: AnonOptions,
    /// `memcpy[inplace]`: with `--consume`, each read's bytes are summed
    /// where they lie in the memory holding the file (no lookup, no copy:
    /// what a zero-copy read such as `foliocache[pin]` can at best reach);
    /// without it, they are copied as by `memcpy`.
    pub inplace: bool,
    /// `qd=N` (`foliocache` and `direct` only): each job thread keeps `N`
    /// reads in flight instead of one synchronous read at a time
    /// (`File::read_many` batches of `N`; an io_uring of depth `N` on the
    /// `O_DIRECT` descriptor). `None`: synchronous reads.
    pub qd: Option<usize>,
    /// Async reads from `N` tasks on one current-thread runtime per job
    /// thread: `foliocache[async]` (1 task; `tasks=N` for more:
    /// `File::read_at_async`) and `tokio-fs` (1 task unless `tasks=N`).
    /// `None`: synchronous reads.
    pub tasks: Option<usize>,
}

/// The deepest queue `qd=` takes.
pub const MAX_QD: usize = 1024;

/// The most tasks `tasks=` takes.
pub const MAX_TASKS: usize = 1024;

/// Options of the `anon` engine, from `anon[...]`: the memory of
/// foliocache's arena, for comparison (its arena asks for transparent huge
/// pages, and with `populate=eager` faults them in with
/// `MADV_POPULATE_WRITE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnonOptions {
    /// `thp`: `madvise(MADV_HUGEPAGE)` on the mapping, as the arena does.
    pub thp: bool,
    /// `populate`: `madvise(MADV_POPULATE_WRITE)` over the mapping before
    /// the memset, in the run's setup, as an eager arena does.
    pub populate: bool,
}

impl EngineSpec {
    /// The engine `kind` with no options.
    pub fn plain(kind: EngineKind) -> Self {
        EngineSpec {
            label: kind.name().to_string(),
            kind,
            folio: FolioOptions::default(),
            anon: AnonOptions::default(),
            inplace: false,
            qd: None,
            tasks: if kind == EngineKind::TokioFs {
                Some(1)
            } else {
                None
            },
        }
    }

    /// `memcpy[inplace]`: the limit of a zero-copy read.
    pub fn memcpy_inplace() -> Self {
        EngineSpec {
            label: "memcpy[inplace]".to_string(),
            inplace: true,
            ..EngineSpec::plain(EngineKind::Memcpy)
        }
    }

    /// `foliocache[pin]`: reads that borrow the cache's bytes.
    pub fn pin() -> Self {
        EngineSpec {
            label: "foliocache[pin]".to_string(),
            folio: FolioOptions {
                pin: true,
                ..FolioOptions::default()
            },
            ..EngineSpec::plain(EngineKind::Foliocache)
        }
    }

    /// Whether this engine is warmed before a warm run: a caching kind
    /// ([`EngineKind::cached`]) whose reads are not uncached.
    pub fn cached(&self) -> bool {
        self.kind.cached() && !self.folio.dontcache
    }

    /// Parses `name` or `name[options]`.
    ///
    /// # Errors
    /// An unknown engine, malformed brackets, options on an engine that
    /// takes none (`direct` takes only `qd=N`, `memcpy` only `inplace`),
    /// a `qd=` outside 1..=[`MAX_QD`], or a foliocache option the library
    /// does not support.
    pub fn parse(s: &str) -> Result<EngineSpec, String> {
        let (name, opts) = split_options(s)?;
        let kind = kind_named(name)?;
        let mut spec = EngineSpec {
            label: s.to_string(),
            ..EngineSpec::plain(kind)
        };
        let asynchronous = match opts {
            Some(opts) => spec.set_options(s, opts)?,
            None => false,
        };
        spec.check(s, asynchronous)?;
        Ok(spec)
    }

    /// Sets the options `opts` of engine `s` (its kind's): whether they
    /// ask for async reads.
    fn set_options(&mut self, s: &str, opts: &str) -> Result<bool, String> {
        let kind = self.kind;
        if !matches!(
            kind,
            EngineKind::Foliocache
                | EngineKind::Anon
                | EngineKind::Direct
                | EngineKind::Memcpy
                | EngineKind::TokioFs
        ) {
            if let Some(v) = opts.split(',').find_map(|o| o.trim().strip_prefix("qd=")) {
                parse_qd(kind, v.trim())?;
            }
            return Err(format!(
                "engine `{}` takes no options (got `{s}`)",
                kind.name()
            ));
        }
        if opts.trim().is_empty() {
            return Err(format!("engine `{s}`: empty options"));
        }
        let mut asynchronous = false;
        for opt in opts.split(',').map(str::trim) {
            if let Some(v) = opt.strip_prefix("qd=") {
                self.qd = Some(parse_qd(kind, v.trim())?);
                continue;
            }
            if let Some(v) = opt.strip_prefix("tasks=") {
                self.tasks = Some(parse_tasks(kind, v.trim())?);
                continue;
            }
            let supported = match kind {
                EngineKind::TokioFs => "tasks=N",
                EngineKind::Foliocache if opt == "async" => {
                    asynchronous = true;
                    continue;
                }
                EngineKind::Direct => "qd=N",
                EngineKind::Memcpy if opt == "inplace" => {
                    self.inplace = true;
                    continue;
                }
                EngineKind::Memcpy => "inplace",
                EngineKind::Anon if opt == "thp" => {
                    self.anon.thp = true;
                    continue;
                }
                EngineKind::Anon if opt == "populate" => {
                    self.anon.populate = true;
                    continue;
                }
                EngineKind::Anon => "thp, populate",
                _ => {
                    parse_folio_option(opt, &mut self.folio)?;
                    continue;
                }
            };
            return Err(format!(
                "{} engine: unknown option `{opt}` (supported: {supported})",
                kind.name()
            ));
        }
        Ok(asynchronous)
    }

    /// Refuses the options of engine `s` that do not go together; async
    /// reads on foliocache run one task unless `tasks=` says more.
    fn check(&mut self, s: &str, asynchronous: bool) -> Result<(), String> {
        let folio = &self.folio;
        if folio.pin && (folio.dontcache || self.qd.is_some()) {
            return Err(format!(
                "engine `{s}`: pin borrows cached bytes one read at a time: not with \
                 dontcache or qd="
            ));
        }
        if self.kind == EngineKind::Foliocache && (asynchronous || self.tasks.is_some()) {
            self.tasks = Some(self.tasks.unwrap_or(1));
            if self.qd.is_some() || folio.pin {
                return Err(format!(
                    "engine `{s}`: async reads (async, tasks=N) are one read per task: not \
                     with qd= or pin"
                ));
            }
        }
        if self.qd.is_some() && folio.dontcache {
            return Err(format!(
                "engine `{s}`: qd= and dontcache together are not supported (a batch of \
                 File::read_many reads with the file's default flags)"
            ));
        }
        Ok(())
    }
}

/// `name` and `name[options]`: the name, and the options inside the
/// brackets.
fn split_options(s: &str) -> Result<(&str, Option<&str>), String> {
    let Some(i) = s.find('[') else {
        return Ok((s, None));
    };
    let inner = s[i + 1..].strip_suffix(']').ok_or_else(|| {
        format!("engine `{s}`: options go in brackets at the end, e.g. foliocache[populate=lazy]")
    })?;
    if inner.contains(['[', ']']) {
        return Err(format!("engine `{s}`: nested or repeated brackets"));
    }
    Ok((&s[..i], Some(inner)))
}

/// The engine kind named `name`.
fn kind_named(name: &str) -> Result<EngineKind, String> {
    let mut all = EngineKind::ALL.into_iter().chain(EngineKind::BY_NAME_ONLY);
    all.clone().find(|k| k.name() == name).ok_or_else(|| {
        let names: Vec<_> = all.by_ref().map(|k| k.name()).collect();
        format!("unknown engine `{name}` (available: {})", names.join(", "))
    })
}

/// The tasks of `tasks=v` for an engine of `kind`: 1 to [`MAX_TASKS`], on
/// `foliocache` or `tokio-fs`.
fn parse_tasks(kind: EngineKind, v: &str) -> Result<usize, String> {
    let on = [EngineKind::Foliocache, EngineKind::TokioFs];
    parse_count(kind, ("tasks", v), &on, MAX_TASKS, "the number of tasks")
}

/// The depth of `qd=v` for an engine of `kind`: 1 to [`MAX_QD`], on
/// `foliocache` or `direct`.
fn parse_qd(kind: EngineKind, v: &str) -> Result<usize, String> {
    let on = [EngineKind::Foliocache, EngineKind::Direct];
    parse_count(kind, ("qd", v), &on, MAX_QD, "the queue depth")
}

/// A count option `key=v` of an engine of `kind`: 1 to `max`, taken only
/// by the engines `on`; `what` names it in the error.
fn parse_count(
    kind: EngineKind,
    (key, v): (&str, &str),
    on: &[EngineKind],
    max: usize,
    what: &str,
) -> Result<usize, String> {
    if !on.contains(&kind) {
        let names: Vec<_> = on.iter().map(|k| k.name()).collect();
        return Err(format!(
            "{} engine: {key}= is for {} only",
            kind.name(),
            names.join(" and ")
        ));
    }
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{} engine: {key}={v}: {what} is a whole number from 1 to {max}",
            kind.name()
        )),
    }
}

fn parse_folio_option(opt: &str, folio: &mut FolioOptions) -> Result<(), String> {
    const SUPPORTED: &str = "supported: populate=eager|lazy, folio=SIZE, \
                             insert=batched|single, ra=SIZE|kernel|off, io=uring|threads|auto, \
                             dontcache, grab=batched|single, huge=on|off, pin, guardian, qd=N, \
                             async, tasks=N";
    let (key, value) = match opt.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (opt, None),
    };
    let page = PAGE as u64;
    match (key, value) {
        ("populate", Some("eager")) => folio.populate = Populate::Eager,
        ("populate", Some("lazy")) => folio.populate = Populate::Lazy,
        ("folio", Some(v)) => {
            let bytes = parse_size(v)?;
            if bytes < page {
                return Err(format!("foliocache engine: folio={v}: at least 4k"));
            }
            folio.max_folio = Some(bytes);
        }
        ("insert", Some("batched")) => folio.insert = Insert::Batched,
        ("insert", Some("single")) => folio.insert = Insert::Single,
        ("ra", Some("kernel")) => folio.ra = RaWindow::Kernel,
        ("ra", Some("off")) => folio.ra = RaWindow::Off,
        ("ra", Some(v)) => {
            let bytes = parse_size(v)?;
            if bytes < page || bytes % page != 0 {
                return Err(format!(
                    "foliocache engine: ra={v}: a window is whole 4k pages, at least one \
                     (ra=off turns readahead off)"
                ));
            }
            folio.ra = RaWindow::Pages(bytes / page);
        }
        ("io", Some("uring" | "io_uring")) => folio.io = IoKind::Uring,
        ("io", Some("threads")) => folio.io = IoKind::Threads,
        ("io", Some("auto")) => folio.io = IoKind::Auto,
        ("dontcache", None) => folio.dontcache = true,
        ("pin", None) => folio.pin = true,
        ("guardian", None) => folio.guardian = true,
        ("grab", Some("batched")) => folio.grab = Insert::Batched,
        ("grab", Some("single")) => folio.grab = Insert::Single,
        ("huge", Some("on")) => folio.huge = true,
        ("huge", Some("off")) => folio.huge = false,
        (
            "populate" | "folio" | "insert" | "ra" | "io" | "dontcache" | "grab" | "huge" | "pin"
            | "guardian" | "qd" | "async" | "tasks",
            _,
        ) => {
            return Err(format!(
                "foliocache engine: bad option `{opt}` ({SUPPORTED})"
            ))
        }
        _ => {
            return Err(format!(
            "foliocache engine: option `{opt}` is not supported by the library yet ({SUPPORTED})"
        ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
