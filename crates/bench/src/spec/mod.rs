//! The typed description of a bench run: engines ([`engine`]) and jobs
//! ([`job`]), built by the command line and the scenarios and run by
//! [`crate::bench`].

pub mod engine;
pub mod job;

pub use engine::{EngineKind, EngineSpec};
pub use job::{default_capacity, Dist, HotSpec, JobSpec, Rw};
