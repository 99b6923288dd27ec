//! The harness: cases, generators, oracles and the command-line jobs.
