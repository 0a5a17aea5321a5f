//! What one job is: an IO pattern, the engines it runs on, and what
//! surrounds its runs (a memory limit, a hot reader, a pause).

use std::time::Duration;

use clap::ValueEnum;

use crate::spec::engine::EngineSpec;
use crate::units::fmt_size;
use crate::zipf::Zipf;

/// The kind of IO a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    /// Sequential reads, wrapping at the end of the file.
    Read,
    /// Reads at uniformly random block-aligned offsets.
    Randread,
    /// Sequential writes, wrapping at the end of the file.
    Write,
    /// Writes at uniformly random block-aligned offsets.
    Randwrite,
}

impl Rw {
    /// True for `write` and `randwrite`.
    pub fn is_write(self) -> bool {
        matches!(self, Rw::Write | Rw::Randwrite)
    }

    /// True for `randread` and `randwrite`.
    pub fn is_random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite)
    }

    /// The fio name.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Randread => "randread",
            Rw::Write => "write",
            Rw::Randwrite => "randwrite",
        }
    }
}

/// Where a random job's offsets fall.
#[derive(Debug, Clone, Copy)]
pub enum Dist {
    /// Every block alike.
    Uniform,
    /// Zipfian over the blocks ([`crate::zipf`]).
    Zipf(Zipf),
}

impl Dist {
    /// `uniform`, `zipf 0.99`.
    pub fn name(&self) -> String {
        match self {
            Dist::Uniform => "uniform".into(),
            Dist::Zipf(z) => format!("zipf {}", z.theta()),
        }
    }
}

/// One job: an IO pattern run on each of a list of engines.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The IO pattern.
    pub rw: Rw,
    /// A random job's offsets: uniform unless a scenario says otherwise
    /// (and then named in the title and the records).
    pub dist: Dist,
    /// Name the distribution in the title and the records even when it
    /// is uniform (a scenario whose jobs differ by it).
    pub named_dist: bool,
    /// Bytes per read or write.
    pub bs: u64,
    /// Threads.
    pub numjobs: usize,
    /// Whether the threads share one file (else one file each).
    pub shared: bool,
    /// Each data file's size.
    pub file_size: u64,
    /// Time-based run length, or one pass over the data per thread.
    pub runtime: Option<Duration>,
    /// The engines, in order.
    pub engines: Vec<EngineSpec>,
    /// Every engine starts cold: the files dropped from the page cache, a
    /// fresh foliocache cache (`--cold`, or a scenario that is cold by
    /// itself).
    pub cold: bool,
    /// Timeline intervals per second (1: a point per second; 20: per
    /// 50 ms, with the per-second timeline derived from them).
    pub bins_per_second: u32,
    /// foliocache's capacity for this job, if the scenario sets it (else
    /// `--capacity`, or 1.25x the data).
    pub capacity: Option<u64>,
    /// The engines other than foliocache run with the process in a memory
    /// cgroup limited to this many bytes (the page cache they bring in
    /// counts against it), where the machine allows it.
    pub memory_limit: Option<u64>,
    /// A second reader beside the job: random reads of a hot file, warmed
    /// into the engine's cache first, counting its hits.
    pub hot: Option<HotSpec>,
    /// The job writes into memory, not data files (the populate
    /// scenario): each engine gets fresh memory for every run (see
    /// [`crate::engine`]), whose setup is part of the run, and there is
    /// no sync at the end.
    pub memory: bool,
    /// A pause before each run, after the last run's memory was freed,
    /// so that this VM has handed it back to the host and every run's
    /// first touch costs what fresh memory costs.
    pub settle: Option<Duration>,
    /// The job's bytes per second in all, if it is paced: each thread
    /// sleeps whenever it is ahead of `start + bytes / (pace / numjobs)`
    /// (it looks every millisecond), so that a faster engine runs no
    /// faster than a slower one where that is the comparison (the
    /// uncached scenario's hot reader beside a stream); one that cannot
    /// reach the pace runs as fast as it can.
    pub pace: Option<u64>,
}

/// The hot reader beside a job ([`JobSpec::hot`]): one thread reading a
/// file of its own at random, through the same cache as the job's engine,
/// from before the job starts until it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotSpec {
    /// The hot file's size.
    pub file_size: u64,
    /// Bytes per read.
    pub bs: u64,
    /// Reads per second, in all, on a deadline schedule (0: as fast as it
    /// can).
    pub rate: u64,
}

impl JobSpec {
    /// A job of `rw` in blocks of `bs` on `engines`: one thread, one pass
    /// over one shared file of `file_size`, warm, a timeline point per
    /// second, with no memory limit, hot reader, pause or pace, foliocache at
    /// the bench's capacity. Scenarios change what they need with struct
    /// update syntax.
    pub fn new(rw: Rw, bs: u64, file_size: u64, engines: Vec<EngineSpec>) -> JobSpec {
        JobSpec {
            rw,
            dist: Dist::Uniform,
            named_dist: false,
            bs,
            numjobs: 1,
            shared: true,
            file_size,
            runtime: None,
            engines,
            cold: false,
            bins_per_second: 1,
            capacity: None,
            memory_limit: None,
            hot: None,
            memory: false,
            settle: None,
            pace: None,
        }
    }

    /// Data files the job uses.
    pub fn nfiles(&self) -> usize {
        if self.shared {
            1
        } else {
            self.numjobs
        }
    }

    /// The timeline's interval.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(1) / self.bins_per_second.max(1)
    }

    /// Whole blocks in a data file (reads and writes never pass the last
    /// whole block).
    pub fn nblocks(&self) -> u64 {
        self.file_size / self.bs
    }

    /// The distribution's name, for a random job whose offsets are not
    /// uniform or that names it anyway ([`JobSpec::named_dist`]).
    pub fn dist_name(&self) -> Option<String> {
        match self.dist {
            _ if !self.rw.is_random() => None,
            Dist::Zipf(_) => Some(self.dist.name()),
            Dist::Uniform => self.named_dist.then(|| self.dist.name()),
        }
    }

    /// A short title: `randread bs=4KiB numjobs=2 shared`, `read bs=64KiB
    /// numjobs=1 + hot randread 4KiB`, `randread zipf 0.99 bs=4KiB ...`.
    pub fn title(&self) -> String {
        format!(
            "{}{} bs={} numjobs={}{}{}",
            self.rw.name(),
            self.dist_name().map_or(String::new(), |d| format!(" {d}")),
            fmt_size(self.bs),
            self.numjobs,
            if self.shared && self.numjobs > 1 {
                " shared"
            } else {
                ""
            },
            self.hot.map_or(String::new(), |h| format!(
                " + hot randread {}{}",
                fmt_size(h.bs),
                fmt_rate(h.rate)
            ))
        )
    }
}

/// ` at 16384/s`, or nothing for an unthrottled reader.
fn fmt_rate(rate: u64) -> String {
    if rate == 0 {
        String::new()
    } else {
        format!(" at {rate}/s")
    }
}

/// foliocache's default capacity: 1.25x the data, in whole 2 MiB.
pub fn default_capacity(data: u64) -> u64 {
    const GRAIN: u64 = 2 << 20;
    (data + data / 4).div_ceil(GRAIN) * GRAIN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_a_quarter_more_in_2mib() {
        assert_eq!(default_capacity(512 << 20), 640 << 20);
        assert_eq!(default_capacity(1 << 30), 1280 << 20);
        assert_eq!(default_capacity(1 << 20), 2 << 20);
    }
}
