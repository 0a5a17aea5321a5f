//! `foliocache mount --object-store URL MOUNTPOINT`: the options that are
//! a directory's mount's refused, the object store served
//! (`foliocache_fuse::serve_objects`), and the lines `foliocache stat`
//! prints for such a mount: its reads as the store counts them (from
//! memory, from the disk tier, from the store), not the inner cache's
//! hit ratio, which counts every byte a GET brought in as a hit when it
//! is copied out.

use std::path::Path;

use anyhow::{bail, Context, Result};
use foliocache_fuse::MountOptions;

use super::MountArgs;

/// `on` or `off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("`{s}`: on or off")),
    }
}

/// With `--object-store`, refuses the options that are a directory's
/// mount's, saying why.
pub fn check_objects(a: &MountArgs) -> Result<()> {
    let Some(url) = &a.object_store else {
        return Ok(());
    };
    let refused = [
        (
            a.cache.is_some(),
            "--cache (a named cache holds files of a directory)",
        ),
        (a.dontcache, "--dontcache"),
        (
            a.max_open.is_some(),
            "--max-open (an object store needs no descriptors)",
        ),
        (
            a.state.state.is_some(),
            "--state (use --disk-tier to restart warm)",
        ),
    ];
    if let Some((_, opt)) = refused.iter().find(|(set, _)| *set) {
        bail!("{opt} is not for a mount of an object store ({url}): leave it out");
    }
    Ok(())
}

/// Serves `url` at `mountpoint` in this process (`--foreground`);
/// `ready` is called once it is mounted.
pub fn serve_objects(
    a: &MountArgs,
    url: &str,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: fn(),
) -> Result<()> {
    let mut objects = foliocache_fuse::ObjectOptions::default();
    if let Some(ttl) = a.metadata_ttl {
        objects.ttl = ttl;
    }
    if let Some(on) = a.kernel_cache {
        objects.kernel_cache = on;
    }
    objects.store_latency = std::time::Duration::from_millis(a.store_latency.unwrap_or(0));
    objects.store_bandwidth = a.store_bandwidth.unwrap_or(0);
    if let (Some(path), Some(size)) = (&a.disk_tier, a.disk_tier_size) {
        let tier = foliocache_object_store::DiskTier::open(path, size)
            .with_context(|| format!("the disk tier {}", path.display()))?;
        objects.disk_tier = Some(std::sync::Arc::new(tier));
    }
    foliocache_fuse::serve_objects(url, mountpoint, opts, &objects, ready)
        .with_context(|| format!("serving {url} at {}", mountpoint.display()))
}

/// `stat`'s line of an object store's mount's reads, from the control
/// file's `object_store` object: served from memory, from the disk tier,
/// from the store; `None` for a directory's mount.
pub fn reads_line(o: &serde_json::Value) -> Option<String> {
    o["url"].as_str()?;
    let n = |k: &str| o[k].as_u64().unwrap_or(0);
    let (hits, misses) = (n("hits"), n("misses"));
    let ratio = if hits + misses == 0 {
        0.0
    } else {
        hits as f64 * 100.0 / (hits + misses) as f64
    };
    let tier = match o["disk_tier"]["hits"].as_u64() {
        Some(h) => format!("{h} 64 KiB chunks from the disk tier, "),
        None => String::new(),
    };
    let kernel = if o["kernel_cache"].as_bool() == Some(true) {
        " (the rest were the kernel's page cache's)"
    } else {
        ""
    };
    Some(format!(
        "reads: {hits} from memory, {misses} not in memory (hit ratio {ratio:.1} %): {tier}{} \
         GETs ({:.1} MiB) from the store; {} read requests from the kernel{kernel}",
        n("remote_gets"),
        n("remote_get_bytes") as f64 / (1u64 << 20) as f64,
        n("read_requests"),
    ))
}

/// `stat`'s lines of an object store's mount's tiers' curves, from the
/// control file's `object_store.tier_curves`: for each tier, the hit
/// ratio and the store's GETs predicted at each multiple of its size
/// (`n/k`: not known yet; `-`: not the tier's to say). None for a
/// directory's mount.
pub fn tier_lines(o: &serde_json::Value) -> Vec<String> {
    let mut lines = Vec::new();
    for (tier, what) in [("memory", "memory tier"), ("disk", "disk tier")] {
        let Some(points) = o["tier_curves"][tier].as_array() else {
            continue;
        };
        let cell = |p: &serde_json::Value, k: &str, f: &dyn Fn(f64) -> String, none: &str| {
            p[k].as_f64().map_or_else(|| none.to_string(), f)
        };
        let ratios: Vec<String> = points
            .iter()
            .map(|p| format!("{}x", p["capacity_ratio"].as_f64().unwrap_or(0.0)))
            .collect();
        let hits: Vec<String> = points
            .iter()
            .map(|p| cell(p, "hit_ratio", &|h| format!("{:.1} %", 100.0 * h), "n/k"))
            .collect();
        let gets: Vec<String> = points
            .iter()
            .map(|p| cell(p, "remote_gets", &|g| format!("{g:.0}"), "-"))
            .collect();
        lines.push(format!(
            "{what} predicted at {}: hit ratio {}; GETs {}",
            ratios.join(" "),
            hits.join(" "),
            gets.join(" ")
        ));
    }
    lines
}

/// `stat`'s line of an object store's mount (`foliocache mount
/// --object-store`): its requests and its tiers, or `None` for a
/// directory's mount.
pub fn object_store_line(o: &serde_json::Value) -> Option<String> {
    let url = o["url"].as_str()?;
    let n = |k: &str| o[k].as_u64().unwrap_or(0);
    let disk = &o["disk_tier"];
    let tier = match disk["slots"].as_u64() {
        Some(slots) => format!(
            "; disk tier: {} hits, {} misses, {} writes, {} slots",
            disk["hits"].as_u64().unwrap_or(0),
            disk["misses"].as_u64().unwrap_or(0),
            disk["writes"].as_u64().unwrap_or(0),
            slots
        ),
        None => String::new(),
    };
    let skipped = match n("names_skipped") {
        0 => String::new(),
        k => format!("; {k} keys not shown (not file names)"),
    };
    Some(format!(
        "object store {url}: {} GETs ({:.1} MiB, {} failed), {} HEADs, {} stale versions, \
         {} objects tracked{tier}{skipped}",
        n("remote_gets"),
        n("remote_get_bytes") as f64 / (1u64 << 20) as f64,
        n("remote_get_errors"),
        n("remote_heads"),
        n("stale_versions"),
        n("objects"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tiers_curve_is_a_line() {
        let o = serde_json::json!({
            "url": "s3://b",
            "tier_curves": {
                "memory": [
                    {"capacity_ratio": 0.5, "hit_ratio": 0.25, "remote_gets": null},
                    {"capacity_ratio": 1.0, "hit_ratio": 0.5, "remote_gets": null},
                    {"capacity_ratio": 2.0, "hit_ratio": null, "remote_gets": null},
                ],
                "disk": [{"capacity_ratio": 2.0, "hit_ratio": 0.75, "remote_gets": 12.4}],
            },
        });
        let lines = tier_lines(&o);
        assert_eq!(
            lines,
            [
                "memory tier predicted at 0.5x 1x 2x: hit ratio 25.0 % 50.0 % n/k; GETs - - -",
                "disk tier predicted at 2x: hit ratio 75.0 %; GETs 12",
            ]
        );
        assert!(tier_lines(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn an_object_mounts_reads_are_the_stores_figures() {
        let o = serde_json::json!({
            "url": "s3://b", "hits": 3, "misses": 1, "remote_gets": 2,
            "remote_get_bytes": 2u64 << 20, "read_requests": 9, "kernel_cache": true,
            "disk_tier": {"hits": 5, "misses": 0, "writes": 1, "slots": 8},
        });
        let line = reads_line(&o).unwrap();
        assert!(
            line.contains("3 from memory, 1 not in memory (hit ratio 75.0 %)"),
            "{line}"
        );
        assert!(
            line.contains("5 64 KiB chunks from the disk tier"),
            "{line}"
        );
        assert!(line.contains("2 GETs (2.0 MiB)"), "{line}");
        assert!(
            line.contains("9 read requests from the kernel (the rest"),
            "{line}"
        );
        assert_eq!(reads_line(&serde_json::json!(null)), None);
        assert_eq!(parse_on_off("OFF"), Ok(false));
        assert!(parse_on_off("maybe").is_err());
    }
}
