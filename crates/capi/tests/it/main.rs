//! The integration tests of foliocache-capi: one binary, a module a theme
//! (`c_api`: the C programs of `tests/c/` against the built library;
//! `dist`: the version, SONAME and pkg-config file a distribution ships).

mod c_api;
mod dist;
