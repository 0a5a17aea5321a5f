//! Compiles `c/exec.c`, the bodies of `execl`, `execle` and `execlp`, and
//! `c/syscall.c`, the body of `syscall` (variadic, which stable Rust
//! cannot define; `src/handoff.rs` and `src/syscall.rs` export trampolines
//! to them).

fn main() {
    println!("cargo:rerun-if-changed=c/exec.c");
    println!("cargo:rerun-if-changed=c/syscall.c");
    cc::Build::new()
        .file("c/exec.c")
        .file("c/syscall.c")
        .flag("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("foliocache_preload_exec");
}
