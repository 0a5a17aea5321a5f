//! Gives `libfoliocache.so` its SONAME, `libfoliocache.so.0`: programs
//! linked against it then need `libfoliocache.so.0`, which a distribution
//! installs as a link to the versioned file (docs/capi.md), so that a
//! later library of an incompatible ABI (`.so.1`) can be installed beside
//! it. The major number is that of the ABI, not of the crate: it changes
//! only when a function or struct changes incompatibly.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfoliocache.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
