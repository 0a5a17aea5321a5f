//! libFuzzer target: [`foliocache_fuzz::xarray_ops`] (see its docs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| foliocache_fuzz::xarray_ops(data));
