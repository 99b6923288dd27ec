//! Scalar f64 reference interpreter (to be written: issue 2).
