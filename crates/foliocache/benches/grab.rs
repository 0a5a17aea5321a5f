//! `Mapping::grab_folios` (after the proposed `filemap_grab_folios`: find or
//! create a range's folios in one call) against one folio at a time
//! (`grab_folios_single`): populating an empty file, as a VM monitor fills
//! guest memory, by ranges of 2 MiB (512 pages) at a time.
//!
//! Reproduce: `cargo bench -p foliocache --bench grab`.
//!
//! One iteration populates a fresh, empty 32 MiB file (a `MemBacking`
//! nothing is read from) through a cache of 64 MiB that was faulted in at
//! build, so no first-touch cost is measured; each grabbed folio is marked
//! uptodate and unlocked (what a writer does after filling it), and the
//! file is closed at the end, which gives the folios back. Both variants
//! run in the same process, at two folio sizes: 4 KiB (order 0, the case
//! `filemap_grab_folios` was proposed for: 512 folios per range) and
//! 64 KiB (32 per range).

use std::hint::black_box;
use std::time::Duration;

use backing::{Backing, MemBacking};
use criterion::{Criterion, Throughput};
use foliocache::{Cache, Populate, ReadaheadConfig};

const FILE: u64 = 32 << 20;
const RANGE: u64 = 512;

fn populate(cache: &Cache, single: bool) {
    let mem = MemBacking::new();
    mem.set_len(FILE).unwrap();
    let f = cache.open_backing(mem).unwrap();
    let m = f.mapping();
    let pages = FILE / 4096;
    let mut out = Vec::with_capacity(RANGE as usize);
    let mut index = 0;
    while index < pages {
        let got = if single {
            m.grab_folios_single(index, RANGE, &mut out)
        } else {
            m.grab_folios(index, RANGE, &mut out)
        }
        .unwrap();
        for g in out.drain(..) {
            g.mark_uptodate_unfilled();
            g.unlock();
        }
        index += got;
    }
    black_box(&f);
}

fn bench(c: &mut Criterion) {
    let smoke = std::env::args().any(|a| a == "--test");
    for folio in [4096usize, 64 << 10] {
        let cache = Cache::builder()
            .capacity(64 << 20)
            .max_folio_size(folio)
            .populate(Populate::Eager)
            .readahead(ReadaheadConfig::disabled())
            .build()
            .unwrap();
        let mut g = c.benchmark_group(format!("grab_{}k_folios", folio / 1024));
        g.throughput(Throughput::Bytes(FILE));
        if !smoke {
            g.measurement_time(Duration::from_secs(4));
        }
        g.bench_function("batched", |b| b.iter(|| populate(&cache, false)));
        g.bench_function("single", |b| b.iter(|| populate(&cache, true)));
        g.finish();
    }
}

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
