//! Seeded input data (to be written: issue 2).
