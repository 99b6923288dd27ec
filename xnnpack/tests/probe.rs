//! The start-up probe against the real library: it accepts this build's enum values and
//! refuses the library when one is wrong.

use xnnpack::{lib_dir, Codes, LoadError, ProbeError, Xnnpack};

#[test]
fn the_probe_accepts_this_build() {
    let Some(x) = xnnpack::for_test("the_probe_accepts_this_build") else { return };
    assert_eq!(*x.codes(), Codes::HEADER);
}

/// Opening the library with one enum value changed must fail in the probe, naming the value.
fn refused_with(codes: Codes) -> ProbeError {
    let (dir, how) = lib_dir();
    match Xnnpack::open(&dir, &how, codes) {
        Err(LoadError::Probe(e)) => e,
        Err(e) => panic!("expected a probe failure, got {e}"),
        Ok(_) => panic!("the probe accepted {codes:?}"),
    }
}

#[test]
fn the_probe_rejects_a_wrong_enum_value() {
    if xnnpack::for_test("the_probe_rejects_a_wrong_enum_value").is_none() {
        return;
    }
    // xnn_reduce_sum (0) where the mean (2) is expected: the row sums 10 and 26 come out.
    let e = refused_with(Codes { reduce_mean: 0, ..Codes::HEADER });
    match &e {
        ProbeError::Mismatch { what, expected, got } => {
            assert!(what.starts_with("xnn_reduce_mean = 0"), "{what}");
            assert_eq!(expected, &[2.5, 6.5]);
            assert_eq!(got, &[10.0, 26.0]);
        }
        other => panic!("{other}"),
    }
    // xnn_reduce_sum_squared (1).
    assert!(matches!(refused_with(Codes { reduce_mean: 1, ..Codes::HEADER }), ProbeError::Mismatch { .. }));
    // A unary code one off (square_root, 18, for square, 19), a binary one swapped, clamp one off.
    let e = refused_with(Codes { unary_square: 18, ..Codes::HEADER });
    assert!(e.to_string().contains("xnn_unary_square = 18"), "{e}");
    let e = refused_with(Codes { binary_add: 1, binary_subtract: 0, ..Codes::HEADER });
    assert!(e.to_string().contains("xnn_binary_add = 1"), "{e}");
    let e = refused_with(Codes { unary_clamp: 3, ..Codes::HEADER });
    assert!(e.to_string().contains("xnn_unary_clamp = 3"), "{e}");
    let e = refused_with(Codes { unary_rsqrt: 18, ..Codes::HEADER });
    assert!(e.to_string().contains("xnn_unary_reciprocal_square_root = 18"), "{e}");
}

#[test]
fn a_missing_library_is_a_typed_error_naming_the_file() {
    let dir = std::env::temp_dir().join("xnnpack-probe-test-empty");
    std::fs::create_dir_all(&dir).unwrap();
    let e = Xnnpack::open(&dir, "a test folder", Codes::HEADER).unwrap_err();
    assert!(matches!(&e, LoadError::NotFound { file, .. } if *file == xnnpack::XNNPACK_FILE), "{e}");
    assert!(e.to_string().contains("libexecutorch_backend_xnnpack.so not found in"), "{e}");
    assert!(e.to_string().contains("scripts/fetch-xnnpack.sh"), "{e}");
    // A file that is not a shared object: the loader's message, with the path.
    std::fs::write(dir.join(xnnpack::XNNPACK_FILE), b"not an ELF file").unwrap();
    std::fs::write(dir.join(xnnpack::THREADPOOL_FILE), b"not an ELF file").unwrap();
    let e = Xnnpack::open(&dir, "a test folder", Codes::HEADER).unwrap_err();
    assert!(matches!(&e, LoadError::Open { path, .. } if path.ends_with(xnnpack::THREADPOOL_FILE)), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_library_without_a_needed_symbol_is_a_typed_error_naming_it() {
    let Some(x) = xnnpack::for_test("a_library_without_a_needed_symbol_is_a_typed_error_naming_it") else { return };
    // pthreadpool's library standing in for XNNPACK's: it loads, but has no xnn_* symbol.
    let dir = std::env::temp_dir().join(format!("xnnpack-probe-test-symbol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = x.dir().join(xnnpack::THREADPOOL_FILE);
    std::fs::copy(&pool, dir.join(xnnpack::THREADPOOL_FILE)).unwrap();
    std::fs::copy(&pool, dir.join(xnnpack::XNNPACK_FILE)).unwrap();
    let e = Xnnpack::open(&dir, "a test folder", Codes::HEADER).unwrap_err();
    match &e {
        LoadError::Symbol { file, symbol, .. } => {
            assert!(file.ends_with(xnnpack::XNNPACK_FILE));
            assert_eq!(*symbol, "xnn_initialize");
        }
        other => panic!("{other}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
