//! The IO engines' integration tests, one binary (`cargo test -p foliocache-backing
//! --test it`), a module per engine or theme: see `docs/testing.md`.

mod common;

/// The asynchronous engines (io_uring, the thread pool) and their
/// completions.
mod aio;
/// Writes through the asynchronous engines (`IoEngine::write_all`).
mod aio_write;
/// Aligned buffers and the alignment checks.
mod buf;
/// The buffered fallback where `O_DIRECT` is refused.
mod fallback;
/// `FaultyBacking`: injected errors, short IO, delays.
mod faulty;
/// `FileBacking` over `O_DIRECT` files.
mod file;
/// `MemBacking`, against a `Vec<u8>` model.
mod mem;
