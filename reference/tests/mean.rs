//! `mean.dim` exactly as PyTorch: shapes, dims lists, specials, the dtype argument, memory
//! formats; and properties checked with proptest.

use proptest::prelude::*;
use reference::eval::run;
use reference::{ElemType, GraphBuilder, MemoryFormat, Tensor, TensorSpec};

fn tensor(dtype: ElemType, shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(shape, dtype, None, v)
}

/// Runs `mean(x, dims, keepdim, dtype)` on `x`.
fn mean_of(x: &Tensor, dims: &[i64], keepdim: bool, dtype: Option<ElemType>) -> Tensor {
    let g = GraphBuilder::new();
    let i = g.input("x", TensorSpec::of(x));
    let m = match dtype {
        Some(d) => g.mean_dtype(i, dims, keepdim, d),
        None => g.mean(i, dims, keepdim),
    };
    let graph = g.finish(&[m]).expect("valid mean");
    run(&graph, std::slice::from_ref(x)).expect("runs").remove(0)
}

fn iota(n: usize) -> Vec<f64> {
    (0..n).map(|i| i as f64).collect()
}

#[test]
fn shapes_for_keepdim_negative_and_empty_dims() {
    let x = tensor(ElemType::F32, &[2, 3, 4], &iota(24));
    let cases: &[(&[i64], bool, &[usize])] = &[
        (&[1], false, &[2, 4]),
        (&[1], true, &[2, 1, 4]),
        (&[-1], false, &[2, 3]),
        (&[-1, 0], false, &[3]),
        (&[0, -1], true, &[1, 3, 1]),
        (&[2, 1, 0], false, &[]),
        (&[], false, &[]),
        (&[], true, &[1, 1, 1]),
    ];
    for &(dims, keepdim, shape) in cases {
        let m = mean_of(&x, dims, keepdim, None);
        assert_eq!(m.shape, shape, "dims {dims:?} keepdim {keepdim}");
    }
}

#[test]
fn values_hand_computed_in_every_float_dtype() {
    for dt in [ElemType::F32, ElemType::F16, ElemType::Bf16] {
        // x[i][j][k] = 12 i + 4 j + k.
        let x = tensor(dt, &[2, 3, 4], &iota(24));
        assert_eq!(mean_of(&x, &[-1], false, None).values_f64(), vec![1.5, 5.5, 9.5, 13.5, 17.5, 21.5]);
        assert_eq!(mean_of(&x, &[1], true, None).values_f64(), vec![4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]);
        assert_eq!(mean_of(&x, &[0, 2], false, None).values_f64(), vec![7.5, 11.5, 15.5]);
        assert_eq!(mean_of(&x, &[], false, None).values_f64(), vec![11.5]);
        assert_eq!(mean_of(&x, &[], false, None).dtype(), dt);
        // 1/3 rounds once to the output dtype.
        let third = mean_of(&tensor(dt, &[3], &[1.0, 0.0, 0.0]), &[0], false, None);
        assert_eq!(third.values_f64(), vec![reference::dtype::round_f64(dt, 1.0 / 3.0)]);
        // Negative zeros: the mean of -0s is -0 (IEEE sum), of -0 and +0 is +0.
        let z = mean_of(&tensor(dt, &[2, 2], &[-0.0, -0.0, -0.0, 0.0]), &[1], false, None);
        assert_eq!(z.values_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), vec![(-0.0f64).to_bits(), 0]);
    }
    // One rounding for the whole mean in fp16: (2048 + 1 + 1 + 0) / 4 = 512.5, while an fp16
    // running sum would lose both ones (ties to even) and give 512.
    let x = tensor(ElemType::F16, &[4], &[2048.0, 1.0, 1.0, 0.0]);
    assert_eq!(mean_of(&x, &[0], false, None).values_f64(), vec![512.5]);
    // Compensated accumulation: 2^60 + 1 - 2^60 is exactly 1 (a plain f64 sum loses the 1).
    for dt in [ElemType::F32, ElemType::Bf16] {
        let x = tensor(dt, &[3], &[2f64.powi(60), 1.0, -(2f64.powi(60))]);
        let m = mean_of(&x, &[0], false, None);
        assert_eq!(m.values_f64(), vec![reference::dtype::round_f64(dt, 1.0 / 3.0)], "{dt}");
    }
    // No intermediate overflow: the mean of two fp16 maxima is the maximum.
    let x = tensor(ElemType::F16, &[2], &[65504.0, 65504.0]);
    assert_eq!(mean_of(&x, &[0], false, None).values_f64(), vec![65504.0]);
}

#[test]
fn nan_and_inf_propagate_per_output() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    for dt in [ElemType::F32, ElemType::F16, ElemType::Bf16] {
        let x = tensor(dt, &[5, 2], &[1.0, 3.0, nan, 1.0, inf, 1.0, inf, -inf, -inf, -inf]);
        let m = mean_of(&x, &[1], false, None).values_f64();
        assert_eq!(m[0], 2.0);
        assert!(m[1].is_nan());
        assert_eq!(m[2], inf);
        assert!(m[3].is_nan(), "inf + -inf is NaN");
        assert_eq!(m[4], -inf);
        let all = mean_of(&x, &[], false, None).values_f64();
        assert!(all[0].is_nan());
    }
}

#[test]
fn dtype_argument_casts_before_reducing() {
    // fp16 inputs reduced in f32: the exact fp16 values, no fp16 rounding of the result.
    let x = tensor(ElemType::F16, &[2], &[0.1, 0.2]);
    let (a, b) = (half::f16::from_f64(0.1).to_f64(), half::f16::from_f64(0.2).to_f64());
    let m32 = mean_of(&x, &[0], false, Some(ElemType::F32));
    assert_eq!(m32.dtype(), ElemType::F32);
    assert_eq!(m32.values_f64(), vec![(a + b) / 2.0]); // 0.14996337890625, exact in f32
    assert_eq!(m32.values_f64(), vec![0.14996337890625]);
    // Without the argument the same mean is rounded to fp16: 1228.5 * 2^-13 is a tie -> 1228.
    let m16 = mean_of(&x, &[0], false, None);
    assert_eq!(m16.values_f64(), vec![1228.0 * 2f64.powi(-13)]);
    // bf16 -> f32 likewise.
    let x = tensor(ElemType::Bf16, &[3], &[1.0, 2.0, 2.0]);
    let m = mean_of(&x, &[0], false, Some(ElemType::F32));
    assert_eq!(m.values_f64(), vec![(5.0f64 / 3.0) as f32 as f64]);
    // f32 -> fp16 casts each input first: 70000 becomes inf before the mean, although the
    // f32 mean (35000) would fit in fp16.
    let x = tensor(ElemType::F32, &[2], &[70000.0, 0.0]);
    assert_eq!(mean_of(&x, &[0], false, Some(ElemType::F16)).values_f64(), vec![f64::INFINITY]);
    // f32 -> bf16: 1 + 2^-9 rounds to 1 in bf16 before averaging with 1 + 2^-7.
    let x = tensor(ElemType::F32, &[2], &[1.0 + 2f64.powi(-9), 1.0 + 2f64.powi(-7)]);
    let m = mean_of(&x, &[0], false, Some(ElemType::Bf16));
    assert_eq!(m.dtype(), ElemType::Bf16);
    // Cast first: mean(1, 1 + 2^-7) = 1 + 2^-8, a tie in bf16 -> 1. Averaging in f32 first
    // would give 1 + 2^-8 + 2^-10 -> 1 + 2^-7.
    assert_eq!(m.values_f64(), vec![1.0]);
}

#[test]
fn zero_d_and_formats() {
    let x = tensor(ElemType::F32, &[], &[2.5]);
    for dims in [&[][..], &[0], &[-1]] {
        let m = mean_of(&x, dims, false, None);
        assert_eq!(m.shape, Vec::<usize>::new());
        assert_eq!(m.values_f64(), vec![2.5]);
    }
    // Global average pool over a channels_last input keeps channels_last with keepdim.
    let logical = tensor(ElemType::F32, &[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]);
    let cl = logical.to_format(MemoryFormat::ChannelsLast);
    let m = mean_of(&cl, &[-1, -2], true, None);
    assert_eq!(m.format, MemoryFormat::ChannelsLast);
    assert_eq!(m.shape, vec![1, 2, 1, 1]);
    assert_eq!(m.values_f64(), vec![2.5, 25.0]);
    let m = mean_of(&cl, &[1], false, None);
    assert_eq!(m.format, MemoryFormat::Contiguous);
    assert_eq!(m.values_f64(), vec![5.5, 11.0, 16.5, 22.0]);
}

// ----------------------------------------------------------------------------------------
// Properties.
// ----------------------------------------------------------------------------------------

/// A shape of rank 1..=4 with dims 1..=4, f32 values with mixed magnitudes and signs.
fn shaped_values() -> impl Strategy<Value = (Vec<usize>, Vec<f64>)> {
    prop::collection::vec(1usize..=4, 1..=4).prop_flat_map(|shape| {
        let n: usize = shape.iter().product();
        let value = (-1000i32..=1000, -6i32..=6).prop_map(|(m, e)| (m as f64 / 7.0 * 2f64.powi(e)) as f32 as f64);
        (Just(shape), prop::collection::vec(value, n))
    })
}

/// A subset of the dims of a rank-`rank` tensor, each written positive or negative.
fn dims_of(rank: usize) -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec((any::<bool>(), any::<bool>()), rank).prop_map(move |picks| {
        picks
            .iter()
            .enumerate()
            .filter(|(_, (take, _))| *take)
            .map(|(d, (_, neg))| if *neg { d as i64 - rank as i64 } else { d as i64 })
            .collect()
    })
}

/// Independent f64 mean over one axis (keepdim), plain loops.
fn mean_axis_f64(shape: &[usize], v: &[f64], axis: usize) -> Vec<f64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out = vec![0.0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let s: f64 = (0..n).map(|k| v[(o * n + k) * inner + i]).sum();
            out[o * inner + i] = s / n as f64;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mean_over_dims_equals_repeated_single_dim_means(
        (shape, v, dims) in shaped_values().prop_flat_map(|(s, v)| { let r = s.len(); (Just(s), Just(v), dims_of(r)) })
    ) {
        let rank = shape.len();
        let x = tensor(ElemType::F32, &shape, &v);
        let got = mean_of(&x, &dims, true, None).values_f64();
        let axes: Vec<usize> = if dims.is_empty() {
            (0..rank).collect()
        } else {
            dims.iter().map(|&d| d.rem_euclid(rank as i64) as usize).collect()
        };
        let (mut s, mut e) = (shape.clone(), v.clone());
        for &a in &axes {
            e = mean_axis_f64(&s, &e, a);
            s[a] = 1;
        }
        prop_assert_eq!(got.len(), e.len());
        let scale = v.iter().map(|x| x.abs()).fold(0.0, f64::max);
        for (g, e) in got.iter().zip(&e) {
            // One f32 rounding of the f64 value, up to f64 noise in the nested sums.
            let tol = (e.abs() * f32::EPSILON as f64 / 2.0) + scale * 1e-12;
            prop_assert!((g - e).abs() <= tol, "got {} expected {} (tol {})", g, e, tol);
        }
    }

    #[test]
    fn mean_of_a_constant_tensor_is_that_constant(
        shape in prop::collection::vec(1usize..=5, 0..=5),
        c in -1.0e4f64..1.0e4,
        dt in prop::sample::select(vec![ElemType::F32, ElemType::F16, ElemType::Bf16]),
        keepdim in any::<bool>(),
        pick in any::<u64>(),
    ) {
        let n: usize = shape.iter().product();
        let x = tensor(dt, &shape, &vec![c; n]);
        let c = x.values_f64()[0];
        let rank = shape.len();
        let dims: Vec<i64> = (0..rank).filter(|d| pick >> d & 1 == 1).map(|d| d as i64).collect();
        let m = mean_of(&x, &dims, keepdim, None);
        prop_assert!(m.values_f64().iter().all(|&v| v.to_bits() == c.to_bits()), "{:?} vs {}", m.values_f64(), c);
    }

    #[test]
    fn keepdim_changes_only_the_shape((shape, v) in shaped_values(), pick in any::<u64>()) {
        let rank = shape.len();
        let dims: Vec<i64> = (0..rank).filter(|d| pick >> d & 1 == 1).map(|d| d as i64 - (pick >> 8 & 1) as i64 * rank as i64).collect();
        let x = tensor(ElemType::F32, &shape, &v);
        let k = mean_of(&x, &dims, true, None);
        let n = mean_of(&x, &dims, false, None);
        prop_assert_eq!(k.values_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        n.values_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        let reduced: Vec<usize> = if dims.is_empty() { (0..rank).collect() }
            else { dims.iter().map(|&d| d.rem_euclid(rank as i64) as usize).collect() };
        let squeezed: Vec<usize> = k.shape.iter().enumerate().filter(|(i, _)| !reduced.contains(i)).map(|(_, &s)| s).collect();
        prop_assert_eq!(squeezed, n.shape.clone());
        prop_assert!(reduced.iter().all(|&d| k.shape[d] == 1));
        prop_assert_eq!(k.shape.len(), rank);
    }

    #[test]
    fn channels_last_input_gives_the_same_values(
        shape in prop::collection::vec(1usize..=3, 4..=5),
        seed in any::<u64>(),
        pick in any::<u64>(),
        keepdim in any::<bool>(),
        dt in prop::sample::select(vec![ElemType::F32, ElemType::F16, ElemType::Bf16]),
    ) {
        let rank = shape.len();
        let spec = TensorSpec::new(dt, &shape);
        let x = reference::data::generate(&spec, seed, &reference::data::DataOptions::default());
        let xl = x.to_format(if rank == 4 { MemoryFormat::ChannelsLast } else { MemoryFormat::ChannelsLast3d });
        prop_assert_ne!(xl.format, MemoryFormat::Contiguous);
        let dims: Vec<i64> = (0..rank).filter(|d| pick >> d & 1 == 1).map(|d| d as i64).collect();
        // A small graph mixing elementwise ops, mean and a permute.
        let eval = |t: &Tensor| {
            let g = GraphBuilder::new();
            let i = g.input("x", TensorSpec::of(t));
            let y = g.mul(g.add(i, i), i);
            let m = g.mean(y, &dims, keepdim);
            let p = g.permute(i, &(0..rank as i64).rev().collect::<Vec<_>>());
            let graph = g.finish(&[y, m, p]).unwrap();
            run(&graph, std::slice::from_ref(t)).unwrap()
        };
        let (a, b) = (eval(&x), eval(&xl));
        for (a, b) in a.iter().zip(&b) {
            prop_assert_eq!(&a.shape, &b.shape);
            prop_assert_eq!(a.values_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            b.values_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        prop_assert_eq!(b[0].format, xl.format); // elementwise keeps the input's format
    }
}
