//! `--consume`: every engine does the same work on the bytes each read
//! gives it, as a program that reads data does something with it. The
//! work is [`sum_words`]: the bytes summed as little-endian 8-byte words.
//! The copy engines (`foliocache`, `kernel`, `direct`, `memcpy`, ...) sum
//! the buffer they copied into; `mmap` and `foliocache[pin]` sum the bytes
//! where they lie (the mapping; the cache's folio, borrowed by
//! `File::pin`), which is what zero copy saves. See `docs/bench.md`.

/// The sum of `bytes` as little-endian 8-byte words (a tail of fewer than
/// eight bytes as one zero-padded word), wrapping. A loop the compiler
/// vectorises: about the cost of reading the bytes once.
#[inline]
pub fn sum_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut sum = 0u64;
    for w in words.by_ref() {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        sum = sum.wrapping_add(u64::from_le_bytes(a));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut a = [0u8; 8];
        a[..tail.len()].copy_from_slice(tail);
        sum = sum.wrapping_add(u64::from_le_bytes(a));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_words_and_a_padded_tail() {
        assert_eq!(sum_words(&[]), 0);
        assert_eq!(sum_words(&[1, 0, 0, 0, 0, 0, 0, 0]), 1);
        assert_eq!(sum_words(&[0, 1, 0, 0, 0, 0, 0, 0, 3]), 256 + 3);
        let b: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let want = b.chunks(8).fold(0u64, |s, w| {
            let mut a = [0u8; 8];
            a[..w.len()].copy_from_slice(w);
            s.wrapping_add(u64::from_le_bytes(a))
        });
        assert_eq!(sum_words(&b), want);
        assert_eq!(sum_words(&[0xFF; 16]), u64::MAX.wrapping_mul(2));
    }
}
