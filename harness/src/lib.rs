//! The harness: cases, generators, oracles and the command-line jobs.
//!
//! Generators make [`case`]s, oracles judge them, and the jobs (`fuzz`, `replay`,
//! `inspect`, `gate`, `bench`, `mutants`) are thin drivers over both.

pub mod bench;
pub mod fuzz;
pub mod gate;
pub mod inspect;
pub mod mutants;
pub mod programs;
pub mod replay;
