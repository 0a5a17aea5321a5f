//! What several scenarios replay: the advisor's generated workloads
//! ([`Workload`]) and the reads of `db_bench readrandom` recorded with
//! strace ([`dbtrace`]); the `advisor` and `policy` scenarios use both.

pub mod dbtrace;

/// A trace's reads, in capacities (pages of C).
pub(crate) const TRACE_CAPACITIES: u64 = 96;

/// The page size the traces read in.
pub(crate) const PAGE: u64 = 4096;

/// A workload: its name and how it picks the page of each read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Workload {
    /// Zipf of this exponent over 4 C of pages.
    Zipf(f64),
    /// A loop over 1.1 C of pages, in order.
    Loop,
    /// A scan that never comes back, every other read; the others
    /// uniform over a hot set of half C.
    ScanHot,
}

impl Workload {
    pub(crate) fn name(self) -> String {
        match self {
            Workload::Zipf(s) => format!("zipf {s} over 4C"),
            Workload::Loop => "loop over 1.1C".into(),
            Workload::ScanHot => "scan + hot C/2".into(),
        }
    }

    /// The trace's pages, for C of `c` pages: the same every run (a fixed
    /// seed), and its file's size in pages.
    pub(crate) fn trace(self, c: u64) -> (Vec<u64>, u64) {
        let len = TRACE_CAPACITIES * c;
        // Draws: splitmix64 of a counter (the bench's own mixer).
        let mut n = 0u64;
        let mut draw = move || {
            n += 1;
            crate::data::mix(n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        };
        match self {
            Workload::Zipf(s) => {
                let n = 4 * c;
                // The law's cumulative weights; a draw is a binary search.
                let cdf: Vec<f64> = (1..=n)
                    .scan(0.0, |acc, i| {
                        *acc += (i as f64).powf(-s);
                        Some(*acc)
                    })
                    .collect();
                let total = cdf[cdf.len() - 1];
                // Ranks spread over the file (a bijection: rank times a
                // multiplier prime to n).
                let trace = (0..len)
                    .map(|_| {
                        let u = (draw() >> 11) as f64 / (1u64 << 53) as f64 * total;
                        let rank = cdf.partition_point(|&w| w < u) as u64;
                        rank.min(n - 1) * 2_654_435_761 % n
                    })
                    .collect();
                (trace, n)
            }
            Workload::Loop => {
                let n = c * 11 / 10;
                ((0..len).map(|i| i % n).collect(), n)
            }
            Workload::ScanHot => {
                let hot = c / 2;
                let trace = (0..len)
                    .map(|i| {
                        if i % 2 == 0 {
                            draw() % hot
                        } else {
                            hot + i / 2
                        }
                    })
                    .collect();
                (trace, hot + len / 2 + 1)
            }
        }
    }
}
