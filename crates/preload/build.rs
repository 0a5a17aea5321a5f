//! Compiles `c/exec.c`, the bodies of `execl`, `execle` and `execlp`
//! (variadic, which stable Rust cannot define; `src/handoff.rs` exports
//! trampolines to them).

fn main() {
    println!("cargo:rerun-if-changed=c/exec.c");
    cc::Build::new()
        .file("c/exec.c")
        .flag("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("foliocache_preload_exec");
}
