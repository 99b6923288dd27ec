//! Threaded SIMD runtime executing loaded payloads plus portable ops. (issue 5)
