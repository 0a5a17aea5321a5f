//! The integration tests of foliocache-capi: one binary, a module a theme
//! (`c_api`: the C programs of `tests/c/` against the built library).

mod c_api;
