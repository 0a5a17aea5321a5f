//! Units: sizes, bandwidths, counts, durations and ratios, parsed from the
//! command line and formatted for the text report. A leaf module: it
//! imports nothing from the crate (the size parser is `foliocache`'s), and
//! every other module may use it.

/// Bytes in a GiB.
pub const GIB: u64 = 1 << 30;

/// Bytes in a GiB, as a float (bandwidths, CPU seconds per GiB).
pub const GIB_F64: f64 = GIB as f64;

/// Parses a size as every front end of the cache does, the interposer's
/// `FOLIOCACHE_PRELOAD_CAPACITY` included: bytes, or a number (a fraction
/// too: `1.5G`) with a binary suffix (`k`, `K`, `KB`, `KiB`, and the same
/// for M, G, T; all powers of 1024), or `B`.
pub use foliocache::parse_size;

/// `4KiB`, `64KiB`, `512MiB`, `1GiB`, `1000B`.
pub fn fmt_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    let mut v = n;
    while i + 1 < UNITS.len() && v >= 1024 && v.is_multiple_of(1024) {
        v /= 1024;
        i += 1;
    }
    if i == 0 && n >= 1024 {
        return format!("{:.1}KiB", n as f64 / 1024.0);
    }
    format!("{v}{}", UNITS[i])
}

/// A size that need not be round: `53.5GiB`.
pub fn fmt_size_approx(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n}B")
    } else {
        format!("{v:.1}{}", units[i])
    }
}

/// Bandwidth with a binary unit: `10.52 GiB/s`.
pub fn fmt_bw(bps: f64) -> String {
    let units = ["B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"];
    let mut v = bps;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", units[i])
}

/// A count with a decimal unit: `2.76M`, `512k`.
pub fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Nanoseconds, scaled: `312ns`, `1.4us`, `2.1ms`.
pub fn fmt_ns(ns: u64) -> String {
    if ns < 10_000 {
        format!("{ns}ns")
    } else if ns < 10_000_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{:.1}ms", ns as f64 / 1e6)
    }
}

/// A ratio with as many decimals as it needs, up to 3: `1.0x`, `1.1x`,
/// `0.952x`.
pub fn fmt_ratio(x: f64) -> String {
    for d in 1..3 {
        let t = format!("{x:.d$}");
        if (t.parse::<f64>().unwrap_or(f64::NAN) - x).abs() < 1e-9 {
            return format!("{t}x");
        }
    }
    format!("{x:.3}x")
}
/// How often each of `pages` is read at `rate` reads/s in all: `4.0 s`,
/// `250 ms`.
pub fn fmt_period(pages: u64, rate: u64) -> String {
    let secs = pages as f64 / rate.max(1) as f64;
    if secs >= 1.0 {
        format!("{secs:.1} s")
    } else {
        format!("{:.0} ms", secs * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(fmt_size(4096), "4KiB");
        assert_eq!(fmt_size(64 << 10), "64KiB");
        assert_eq!(fmt_size(512 << 20), "512MiB");
        assert_eq!(fmt_size(1 << 30), "1GiB");
        assert_eq!(fmt_size(1000), "1000B");
        assert_eq!(fmt_size(1500), "1.5KiB");
    }

    #[test]
    fn rates() {
        assert_eq!(fmt_bw(2.5 * (1u64 << 30) as f64), "2.50 GiB/s");
        assert_eq!(fmt_count(2_760_000.0), "2.76M");
        assert_eq!(fmt_ns(312), "312ns");
        assert_eq!(fmt_ns(14_000), "14.0us");
    }

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512B"), Ok(512));
    }

    #[test]
    fn binary_suffixes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert_eq!(parse_size("8m"), Ok(8 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("3GiB"), Ok(3 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size(" 16 MiB "), Ok(16 << 20));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "k",
            "4x",
            "4kk",
            "-4k",
            "1.5.1G",
            ".5G",
            "G1",
            "4 kilobytes",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn fractions_round_down_to_a_byte() {
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size("2.25MiB"), Ok(9 << 18));
        assert_eq!(parse_size("1.0001k"), Ok(1024));
    }

    #[test]
    fn rejects_overflow() {
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
    }
}
