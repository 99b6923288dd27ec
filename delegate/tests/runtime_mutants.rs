//! Each runtime mutant, activated alone, makes a check of the kind the kernel tests use fail;
//! with no mutant active the same checks pass. One test: the active mutant is process-wide.
#![cfg(feature = "mutants")]

use delegate::mutants::{set_active, Mutant};
use delegate::runtime::kernels::{convert, mean, transpose, Ctx, Quant, Scratch, View, ViewMut};
use delegate::runtime::pool::Pool;
use delegate::runtime::simd::Isa;
use delegate::runtime::ThreadPolicy;
use half::f16;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Each check returns true when the runtime behaved correctly.
type Check = Box<dyn Fn() -> bool>;

fn checks() -> Vec<(&'static str, Check)> {
    let simd = Isa::avx512().or_else(Isa::avx2).unwrap_or(Isa::SCALAR);
    vec![
        (
            "integer mean exact up to the scale",
            Box::new(move || {
                let x: Vec<f32> = (0..4 * 100).map(|i| (i % 7 + 1) as f32).collect();
                let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
                let mut out = vec![0f32; 4];
                mean::mean_f32(&Ctx { isa: simd, pool: &pool }, &x, &[4, 100], &[1], &mut out).unwrap();
                (0..4).all(|r| {
                    let w: f64 = x[r * 100..(r + 1) * 100].iter().map(|&v| v as f64).sum::<f64>() / 100.0;
                    (out[r] as f64 - w).abs() <= 2.0 * U * w
                })
            }),
        ),
        (
            "two-thread split covers every output",
            Box::new(move || {
                let x: Vec<f32> = (0..64 * 1024).map(|i| (i % 5) as f32).collect();
                let pool = Pool::new(2, ThreadPolicy::CostModel).unwrap();
                let mut out = vec![-1f32; 64];
                mean::mean_f32(&Ctx { isa: simd, pool: &pool }, &x, &[64, 1024], &[1], &mut out).unwrap();
                (0..64).all(|r| {
                    let w: f64 = x[r * 1024..(r + 1) * 1024].iter().map(|&v| v as f64).sum::<f64>() / 1024.0;
                    (out[r] as f64 - w).abs() <= 2.0 * U * w
                })
            }),
        ),
        (
            "three-thread split of a few outputs covers every row and column",
            Box::new(move || {
                // 2 outputs, fewer than 3 threads: each output's rows are split. Reduced dims
                // 0 and 2 (1001 rows of 70) and a single row of 70,001 columns.
                let pool = Pool::new(3, ThreadPolicy::CostModel).unwrap();
                let ok = |shape: &[usize], axes: &[usize], outs: usize| {
                    let n: usize = shape.iter().product();
                    let x: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
                    let mut out = vec![-1f32; outs];
                    mean::mean_f32(&Ctx { isa: simd, pool: &pool }, &x, shape, axes, &mut out).unwrap();
                    let count = (n / outs) as f64;
                    let want = |o: usize| -> f64 {
                        let sum: f64 = match outs {
                            2 => (0..n).filter(|i| i / 70 % 2 == o).map(|i| x[i] as f64).sum(),
                            _ => x.iter().map(|&v| v as f64).sum(),
                        };
                        sum / count
                    };
                    (0..outs).all(|o| (out[o] as f64 - want(o)).abs() <= 2.0 * count * U * want(o))
                };
                ok(&[1001, 2, 70], &[0, 2], 2) && ok(&[70_001], &[0], 1)
            }),
        ),
        (
            "bf16 conversion rounds to nearest even",
            Box::new(move || {
                let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
                // 1 + 0.75 ulp rounds up, a truncation keeps 1.
                let x = [1.0f32 + 0.75 * 2f32.powi(-7); 300];
                let mut out = [half::bf16::ZERO; 300];
                convert::convert(&Ctx { isa: simd, pool: &pool }, View::F32(&x), ViewMut::Bf16(&mut out), None)
                    .unwrap();
                out.iter().all(|v| v.to_f32() == 1.0 + 2f32.powi(-7))
            }),
        ),
        (
            "a transpose that keeps the innermost dim moves its rows",
            Box::new(move || {
                // [2, 3, 4] by [1, 0, 2]: rows of 4 stay contiguous, their order changes.
                let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
                let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
                let mut out = vec![0f32; 24];
                let ctx = Ctx { isa: simd, pool: &pool };
                transpose::transpose(&ctx, View::F32(&x), &[2, 3, 4], &[1, 0, 2], ViewMut::F32(&mut out)).unwrap();
                (0..24).all(|o| {
                    let (j, i, k) = (o / 8, o / 4 % 2, o % 4);
                    out[o] == x[i * 12 + j * 4 + k]
                })
            }),
        ),
        (
            "NaN propagates",
            Box::new(move || {
                let mut x = vec![1f32; 100];
                x[3] = f32::NAN;
                let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
                let mut out = [0f32];
                mean::mean_f32(&Ctx { isa: simd, pool: &pool }, &x, &[100], &[0], &mut out).unwrap();
                out[0].is_nan()
            }),
        ),
        (
            "qs8 ties round to even",
            Box::new(|| {
                let q = Quant { scale: 1.0, zero_point: 0 };
                mean::requantize(5, 2, q, 0.5, q) == 2
            }),
        ),
        (
            "fp16 mean accumulates in f32",
            Box::new(move || {
                let x: Vec<f16> = (0..4096).map(|i| f16::from_f32(1.0 + (i % 3) as f32 * 0.001)).collect();
                let exact: f64 = x.iter().map(|v| v.to_f64()).sum::<f64>() / 4096.0;
                let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
                let mut out = [f16::ZERO];
                let mut s = Scratch::default();
                mean::mean(
                    &Ctx { isa: simd, pool: &pool },
                    View::F16(&x),
                    &[4096],
                    &[0],
                    ViewMut::F16(&mut out),
                    None,
                    &mut s,
                )
                .unwrap();
                (out[0].to_f64() - exact).abs() <= 2f64.powi(-11) + 4096.0 * U * 1.01
            }),
        ),
    ]
}

#[test]
fn every_runtime_mutant_is_caught_and_none_is_a_false_alarm() {
    set_active(None);
    for (name, check) in checks() {
        assert!(check(), "{name} fails with no mutant active");
    }
    let simd_available = Isa::avx2().is_some();
    for m in [
        Mutant::WrongDivisor,
        Mutant::DropSimdTail,
        Mutant::ThreadSplitLastChunk,
        Mutant::SimdNanDropped,
        Mutant::Qs8RoundHalfAway,
        Mutant::Fp16AccumulateInFp16,
        Mutant::MeanSplitThreePlus,
        Mutant::Bf16Truncates,
        Mutant::PermuteKeepsInnermost,
    ] {
        if !simd_available && matches!(m, Mutant::DropSimdTail | Mutant::SimdNanDropped) {
            continue; // these live in the SIMD paths only
        }
        set_active(Some(m));
        let caught: Vec<&str> = checks().into_iter().filter(|(_, c)| !c()).map(|(n, _)| n).collect();
        set_active(None);
        assert!(!caught.is_empty(), "{m:?} is not caught by any runtime check");
    }
}
