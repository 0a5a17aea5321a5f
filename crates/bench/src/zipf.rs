//! Zipfian block numbers: YCSB's `ZipfianGenerator` (the constant-time
//! method of Gray et al., "Quickly generating billion-record synthetic
//! databases"), with its constants computed once per distribution, so a
//! draw costs one `powf`.
//!
//! Rank 0 is the most popular key. Ranks are not used as block numbers
//! as they are (the hot keys would all sit at the start of the file, one
//! readahead window apart): a multiplicative permutation of the blocks
//! (rank times a multiplier prime to the block count, modulo it) spreads
//! them over the file. Unlike YCSB's `ScrambledZipfianGenerator`, which
//! hashes the rank and so folds several ranks onto one key, this is a
//! bijection: each block keeps exactly its rank's probability.

/// A Zipfian distribution over `n` blocks with exponent `theta`.
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    /// `1 + 0.5^theta`: below it (times `zetan`), rank 1.
    two: f64,
    /// The permutation's multiplier, prime to `n`.
    mult: u64,
}

/// `zeta(n, theta)`: the sum of `1 / i^theta` for `i` in `1..=n`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| (i as f64).powf(-theta)).sum()
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Zipf {
    /// The distribution over `n` blocks (at least 1) with exponent
    /// `theta` (strictly between 0 and 1; YCSB's is 0.99). Computing
    /// `zeta(n, theta)` takes `n` steps, once.
    ///
    /// # Errors
    /// `n` is 0 or `theta` is out of range.
    pub fn new(n: u64, theta: f64) -> Result<Zipf, String> {
        if n == 0 {
            return Err("a zipfian distribution needs at least one block".into());
        }
        if !(theta > 0.0 && theta < 1.0) {
            return Err(format!("zipfian theta {theta}: want 0 < theta < 1"));
        }
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        // For n <= 2 every draw ends at rank 0 or 1, before eta is used.
        let eta = if n > 2 {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        } else {
            0.0
        };
        let mut mult = 0x9e37_79b9_7f4a_7c15 % n;
        while gcd(mult, n) != 1 {
            mult = (mult + 1) % n;
        }
        Ok(Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta,
            two: 1.0 + 0.5f64.powf(theta),
            mult,
        })
    }

    /// The exponent.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The rank drawn for `u`, uniform in `[0, 1)` (0: the most popular).
    #[inline(always)]
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.two {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// The block of rank `rank` (the permutation).
    #[inline(always)]
    pub fn block(&self, rank: u64) -> u64 {
        ((rank as u128 * self.mult as u128) % self.n as u128) as u64
    }

    /// The block drawn from the 64 random bits `bits`.
    #[inline(always)]
    pub fn draw(&self, bits: u64) -> u64 {
        self.block(self.rank(unit(bits)))
    }
}

/// 53 of `bits` as a float uniform in `[0, 1)`.
#[inline(always)]
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::mix;

    /// A seeded stream of draws, splitmix64's steps as [`crate::job`]
    /// takes them.
    struct ZipfStream(Zipf, u64);

    impl ZipfStream {
        fn new(z: Zipf, seed: u64) -> Self {
            ZipfStream(z, seed)
        }

        fn next_block(&mut self) -> u64 {
            self.1 = self.1.wrapping_add(0x9e37_79b9_7f4a_7c15);
            self.0.draw(mix(self.1))
        }
    }

    #[test]
    fn rejects_what_it_cannot_draw() {
        assert!(Zipf::new(0, 0.99).is_err());
        assert!(Zipf::new(10, 1.0).is_err());
        assert!(Zipf::new(10, 0.0).is_err());
        assert!(Zipf::new(10, f64::NAN).is_err());
    }

    #[test]
    fn top_key_share_is_one_over_zeta() {
        let n = 100_000;
        let z = Zipf::new(n, 0.99).unwrap();
        let draws = 1_000_000;
        let mut s = ZipfStream::new(z, 7);
        let top = z.block(0);
        let hits = (0..draws).filter(|_| s.next_block() == top).count();
        let want = 1.0 / zeta(n, 0.99);
        let got = hits as f64 / draws as f64;
        assert!(
            (got - want).abs() < 0.05 * want,
            "top share {got}, want {want}"
        );
        // Rank 1's share is 2^-theta of rank 0's.
        let mut s = ZipfStream::new(z, 8);
        let second = z.block(1);
        let hits1 = (0..draws).filter(|_| s.next_block() == second).count();
        let ratio = hits1 as f64 / hits as f64;
        assert!((ratio - 0.5f64.powf(0.99)).abs() < 0.05, "{ratio}");
    }

    #[test]
    fn the_same_seed_draws_the_same_blocks_in_range() {
        let z = Zipf::new(1000, 0.99).unwrap();
        let a: Vec<u64> = {
            let mut s = ZipfStream::new(z, 42);
            (0..10_000).map(|_| s.next_block()).collect()
        };
        let mut s = ZipfStream::new(z, 42);
        assert!(a.iter().all(|&b| b == s.next_block() && b < 1000));
        let mut other = ZipfStream::new(z, 43);
        assert!(a.iter().any(|&b| b != other.next_block()));
    }

    #[test]
    fn the_permutation_is_a_bijection() {
        for n in [1, 2, 3, 4096, 1000, 65_536, 99_991] {
            let z = Zipf::new(n, 0.5).unwrap();
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let b = z.block(r) as usize;
                assert!(!seen[b], "n {n}: block {b} twice");
                seen[b] = true;
            }
        }
        // Tiny distributions draw in range.
        for n in [1, 2, 3] {
            let mut s = ZipfStream::new(Zipf::new(n, 0.99).unwrap(), 1);
            assert!((0..1000).all(|_| s.next_block() < n));
        }
    }
}
