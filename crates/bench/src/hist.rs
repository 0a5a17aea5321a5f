//! A latency histogram with log-linear buckets, in nanoseconds.
//!
//! Values under 128 ns have a bucket each; above, every power of two
//! `[2^e, 2^(e+1))` is split into 64 equal buckets, so a bucket is at most
//! 1/64 (1.6 %) of its values wide. Recording is a count of leading zeros,
//! two shifts and an increment: cheap enough for every operation of the
//! fastest engine, and the same cost for every engine. (Kept over the
//! `hdrhistogram` crate, which at the same precision records no faster.)
//!
//! ```text
//!   index:  0 .. 127 | 128 .. 191       | 192 .. 255       | ...
//!   value:  0 .. 127 | 128 .. 255 by 2  | 256 .. 511 by 4  | ...
//! ```

/// Buckets below the first split power of two (one value each).
const LINEAR: usize = 128;
/// Buckets per power of two above [`LINEAR`].
const SUB: usize = 64;
/// log2 of [`LINEAR`].
const LINEAR_BITS: u32 = 7;
const BUCKETS: usize = LINEAR + (64 - LINEAR_BITS as usize) * SUB;

/// Latency counts, mergeable across threads.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("p50", &self.percentile(0.5))
            .field("max", &self.max)
            .finish()
    }
}

fn index(v: u64) -> usize {
    if v < LINEAR as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= LINEAR_BITS
    let m = (v >> (e - 6)) as usize; // top 7 bits: 64..=127
    LINEAR + (e - LINEAR_BITS) as usize * SUB + (m - SUB)
}

/// The lowest value of bucket `i`, and its width.
fn bounds(i: usize) -> (u64, u64) {
    if i < LINEAR {
        return (i as u64, 1);
    }
    let e = ((i - LINEAR) / SUB) as u32 + LINEAR_BITS;
    let m = ((i - LINEAR) % SUB + SUB) as u64;
    (m << (e - 6), 1 << (e - 6))
}

impl Histogram {
    /// An empty histogram, its memory already touched (a histogram made
    /// right before a measurement adds no first-touch page faults to it).
    pub fn new() -> Self {
        let mut counts = Box::new([1; BUCKETS]);
        counts.fill(0);
        Histogram {
            counts,
            total: 0,
            sum: 0,
            max: 0,
        }
    }

    /// Counts one value (nanoseconds).
    #[inline(always)]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.sum += v as u128;
        self.max = self.max.max(v);
    }

    /// Counts `n` values of `v` (nanoseconds): the requests of one batch,
    /// which all took the batch's time.
    #[inline]
    pub fn record_n(&mut self, v: u64, n: u64) {
        self.counts[index(v)] += n;
        self.total += n;
        self.sum += v as u128 * n as u128;
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1): the middle of the bucket that
    /// holds the `ceil(q * n)`-th smallest value; 0 when empty.
    pub fn percentile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = bounds(i);
                return (low + width / 2).min(self.max);
            }
        }
        self.max
    }

    /// The mean value; 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The largest value recorded.
    pub fn max(&self) -> u64 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for v in (0..5000u64).chain([u64::MAX / 3, u64::MAX]) {
            let i = index(v);
            assert!(i >= last && i < BUCKETS, "value {v} index {i}");
            let (low, width) = bounds(i);
            assert!(
                low <= v && v - low < width,
                "value {v} in [{low}, +{width})"
            );
            last = i;
        }
    }

    #[test]
    fn relative_error_is_small() {
        for v in [200u64, 1_000, 12_345, 1_000_000, 987_654_321] {
            let (_, width) = bounds(index(v));
            assert!(width as f64 / v as f64 <= 1.0 / 64.0 + 1e-9);
        }
    }

    #[test]
    fn percentiles_of_a_uniform_range() {
        let mut h = Histogram::new();
        for v in 1..=1000 {
            h.record(v);
        }
        let close = |got: u64, want: f64| (got as f64 - want).abs() / want < 0.02;
        assert!(close(h.percentile(0.5), 500.0), "{}", h.percentile(0.5));
        assert!(close(h.percentile(0.75), 750.0), "{}", h.percentile(0.75));
        assert!(close(h.percentile(0.99), 990.0), "{}", h.percentile(0.99));
        assert_eq!(h.max(), 1000);
        assert!((h.mean() - 500.5).abs() < 1e-9);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(10);
        b.record(10_000);
        b.record(10_000);
        a.merge(&b);
        assert_eq!(a.len(), 3);
        assert_eq!(a.percentile(0.1), 10);
        assert!(a.percentile(0.9) >= 9_900);
        assert_eq!(a.max(), 10_000);
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::new();
        assert_eq!(h.percentile(0.5), 0);
        assert_eq!(h.mean(), 0.0);
    }
}
