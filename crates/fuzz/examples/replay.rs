//! Runs fuzz inputs through a target on the stable toolchain, to reproduce
//! a crash or check a corpus by hand:
//!
//! ```text
//! FUZZ_DEBUG=1 cargo run --release -p foliocache-fuzz --example replay -- file_ops INPUT...
//! ```
//!
//! `FUZZ_DEBUG=1` prints the decoded operations before running them.

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    let f: fn(&[u8]) = match target.as_str() {
        "xarray_ops" => foliocache_fuzz::xarray_ops,
        "file_ops" => foliocache_fuzz::file_ops,
        _ => {
            eprintln!("usage: replay xarray_ops|file_ops INPUT...");
            std::process::exit(2);
        }
    };
    for path in args {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        eprintln!("{target}: {path} ({} bytes)", data.len());
        f(&data);
    }
    eprintln!("ok");
}
