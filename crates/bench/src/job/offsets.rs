//! The offsets a job thread visits ([`Offsets`]): its job's pattern
//! (sequential or random) and distribution (uniform or zipfian), drawn
//! without allocation in the measured loop, and the same in every run
//! ([`thread_seed`]), so that a run's offsets can be replayed.

use crate::data;
use crate::spec::{Dist, JobSpec};
use crate::zipf::Zipf;

/// The offsets one thread visits: a block cursor that walks and wraps,
/// uniformly random blocks (splitmix64 mapped onto the blocks by a
/// multiply), or zipfian blocks ([`crate::zipf`], from the same
/// splitmix64 bits).
pub(crate) struct Offsets {
    mode: Mode,
    bs: u64,
    blocks: u64,
    next: u64,
}

/// How [`Offsets`] draws.
#[derive(Clone, Copy)]
enum Mode {
    Sequential,
    Uniform,
    Zipf(Zipf),
}

impl Offsets {
    /// Offsets of `bs`-byte blocks among `blocks`: from `start_block` on,
    /// or (`random`) uniformly random from `seed`.
    pub(crate) fn new(random: bool, bs: u64, blocks: u64, start_block: u64, seed: u64) -> Self {
        Offsets {
            mode: if random {
                Mode::Uniform
            } else {
                Mode::Sequential
            },
            bs,
            blocks,
            next: if random { seed } else { start_block % blocks },
        }
    }

    /// The offsets of job thread `j`: `job`'s pattern and distribution,
    /// with the thread's own seed ([`thread_seed`]) and, sharing a file,
    /// its own start.
    pub(crate) fn of_thread(job: &JobSpec, j: usize) -> Self {
        let blocks = job.nblocks();
        // Threads sharing a file start spread over it; each random stream
        // has its own seed.
        let start_block = if job.shared {
            j as u64 * blocks / job.numjobs.max(1) as u64
        } else {
            0
        };
        let mut o = Offsets::new(
            job.rw.is_random(),
            job.bs,
            blocks,
            start_block,
            thread_seed(j),
        );
        if let (true, Dist::Zipf(z)) = (job.rw.is_random(), job.dist) {
            o.mode = Mode::Zipf(z);
        }
        o
    }

    /// The number of blocks it draws from.
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The next block's byte offset.
    #[inline(always)]
    pub(crate) fn next(&mut self) -> u64 {
        match self.mode {
            Mode::Uniform => {
                self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let z = data::mix(self.next);
                (((z as u128 * self.blocks as u128) >> 64) as u64) * self.bs
            }
            Mode::Zipf(zipf) => {
                self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
                zipf.draw(data::mix(self.next)) * self.bs
            }
            Mode::Sequential => {
                let b = self.next;
                self.next = if b + 1 == self.blocks { 0 } else { b + 1 };
                b * self.bs
            }
        }
    }
}

/// The seed of job thread `j`'s random offsets (the same in every run, so
/// the offsets a run read can be replayed: [`crate::lru::replay`]).
pub(crate) fn thread_seed(j: usize) -> u64 {
    0x2545_f491_4f6c_dd1d ^ (j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_walk_and_wrap() {
        let mut o = Offsets::new(false, 4096, 3, 1, 0);
        let got: Vec<u64> = (0..5).map(|_| o.next()).collect();
        assert_eq!(got, [4096, 8192, 0, 4096, 8192]);
    }

    #[test]
    fn random_offsets_are_aligned_in_range_and_spread() {
        let mut o = Offsets::new(true, 4096, 100, 0, 42);
        let mut seen = [false; 100];
        for _ in 0..10_000 {
            let off = o.next();
            assert_eq!(off % 4096, 0);
            assert!(off < 100 * 4096);
            seen[(off / 4096) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every block is visited");
    }
}
