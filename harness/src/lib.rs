//! The harness: cases, generators, oracles and the command-line jobs.
//!
//! Generators make [`case`]s, oracles judge them, and the jobs (`fuzz`, `replay`,
//! `inspect`, `gate`, `bench`, `mutants`) are thin drivers over both; so are the cargo-fuzz
//! targets ([`fuzz_targets`]). Every call into the reference, the delegate and real XNNPACK
//! goes through [`engine`].

#![forbid(unsafe_code)]

pub mod args;
pub mod bench;
pub mod case;
pub mod engine;
pub mod fuzz;
pub mod fuzz_targets;
pub mod gate;
pub mod gen;
pub mod inflight;
pub mod inspect;
pub mod interrupt;
pub mod minimize;
pub mod mutants;
pub mod oracle;
pub mod patterns;
pub mod programs;
pub mod replay;
pub mod report;
