//! Transposes, converts, binary and unary ops (fused clamp included), conv, depthwise conv
//! and linear, against f64 computations on every ISA and pool configuration.

use super::*;

fn permute_naive<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let st = kernels::strides(shape);
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let ost = kernels::strides(&oshape);
    let n = x.len();
    (0..n)
        .map(|o| {
            let mut off = 0;
            for k in 0..perm.len() {
                off += ((o / ost[k]) % oshape[k]) * st[perm[k]];
            }
            x[off]
        })
        .collect()
}

fn permutations(r: usize) -> Vec<Vec<usize>> {
    if r == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(r - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, r - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn transposes_of_every_permutation_are_exact() {
    let shapes: [&[usize]; 5] = [&[70, 45], &[3, 1, 40], &[2, 5, 33, 3], &[1, 8, 6, 6], &[2, 3, 1, 4, 5]];
    let configs = configs();
    for shape in shapes {
        let n: usize = shape.iter().product();
        let x = values(n, 17);
        let xi: Vec<i8> = (0..n).map(|i| i as i8).collect();
        for perm in permutations(shape.len()) {
            let want = permute_naive(&x, shape, &perm);
            let want_i = permute_naive(&xi, shape, &perm);
            for (isa, pool) in &configs {
                let ctx = Ctx { isa: *isa, pool };
                let mut out = vec![0f32; n];
                transpose::transpose(&ctx, View::F32(&x), shape, &perm, ViewMut::F32(&mut out)).unwrap();
                assert_eq!(out, want, "{shape:?} {perm:?} {}", label(*isa, pool));
                let mut oi = vec![0i8; n];
                transpose::transpose(&ctx, View::I8(&xi), shape, &perm, ViewMut::I8(&mut oi)).unwrap();
                assert_eq!(oi, want_i, "int8 {shape:?} {perm:?}");
            }
        }
    }
    // A 6-D case and a large NCHW->NHWC that splits across threads.
    let shape = [2, 3, 2, 4, 3, 5];
    let x = values(shape.iter().product(), 19);
    let perm = [5, 0, 3, 1, 4, 2];
    let shape2 = [1, 96, 56, 56];
    let x2 = values(shape2.iter().product(), 23);
    for (isa, pool) in &configs {
        let ctx = Ctx { isa: *isa, pool };
        let mut out = vec![0f32; x.len()];
        transpose::transpose(&ctx, View::F32(&x), &shape, &perm, ViewMut::F32(&mut out)).unwrap();
        assert_eq!(out, permute_naive(&x, &shape, &perm));
        let mut out2 = vec![0f32; x2.len()];
        transpose::transpose(&ctx, View::F32(&x2), &shape2, &[0, 2, 3, 1], ViewMut::F32(&mut out2)).unwrap();
        assert_eq!(out2, permute_naive(&x2, &shape2, &[0, 2, 3, 1]), "{}", label(*isa, pool));
        // Power-of-two output rows (tiles of 16 rows, several bands of row groups), f32 and int8.
        let shape3 = [64, 32, 24];
        let x3 = values(shape3.iter().product(), 29);
        let mut out3 = vec![0f32; x3.len()];
        transpose::transpose(&ctx, View::F32(&x3), &shape3, &[2, 0, 1], ViewMut::F32(&mut out3)).unwrap();
        assert_eq!(out3, permute_naive(&x3, &shape3, &[2, 0, 1]), "{}", label(*isa, pool));
        let xi3: Vec<i8> = (0..x3.len()).map(|i| (i * 7) as i8).collect();
        let mut oi3 = vec![0i8; x3.len()];
        transpose::transpose(&ctx, View::I8(&xi3), &shape3, &[2, 0, 1], ViewMut::I8(&mut oi3)).unwrap();
        assert_eq!(oi3, permute_naive(&xi3, &shape3, &[2, 0, 1]), "int8 {}", label(*isa, pool));
    }
    let bad = transpose::transpose(
        &Ctx { isa: Isa::SCALAR, pool: &configs[0].1 },
        View::F32(&x),
        &shape,
        &[0, 0, 1, 2, 3, 4],
        ViewMut::F32(&mut vec![0.0; x.len()]),
    );
    assert!(bad.is_err());
}

#[test]
fn converts_are_exact_and_match_half() {
    let mut x = values(10_000, 29);
    x.extend([0.0, -0.0, 1e-40, -1e-40, 65504.0, 65520.0, 1e9, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 3.0e38]);
    let n = x.len();
    let q = Quant { scale: 0.0125, zero_point: 7 };
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        let mut h = vec![f16::ZERO; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::F16(&mut h), None).unwrap();
        let mut b = vec![bf16::ZERO; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::Bf16(&mut b), None).unwrap();
        for i in 0..n {
            assert_eq!(h[i].to_bits(), f16::from_f32(x[i]).to_bits(), "f16 {} {}", x[i], label(*isa, pool));
            assert_eq!(b[i].to_bits(), bf16::from_f32(x[i]).to_bits(), "bf16 {} {}", x[i], label(*isa, pool));
        }
        let mut back = vec![0f32; n];
        kernels::convert::convert(&ctx, View::F16(&h), ViewMut::F32(&mut back), None).unwrap();
        assert!(back.iter().zip(&h).all(|(a, b)| a.to_bits() == b.to_f32().to_bits()));
        kernels::convert::convert(&ctx, View::Bf16(&b), ViewMut::F32(&mut back), None).unwrap();
        assert!(back.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_f32().to_bits()));
        let mut qv = vec![0i8; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::I8(&mut qv), Some(q)).unwrap();
        for i in 0..n {
            let r = (x[i] * (1.0 / q.scale)).round_ties_even() + q.zero_point as f32;
            let want = if r.is_nan() { q.zero_point as i8 } else { r.clamp(-128.0, 127.0) as i8 };
            assert_eq!(qv[i], want, "quantize {}", x[i]);
        }
        kernels::convert::convert(&ctx, View::I8(&qv), ViewMut::F32(&mut back), Some(q)).unwrap();
        for i in 0..n {
            assert_eq!(back[i], (qv[i] as i32 - q.zero_point) as f32 * q.scale);
        }
    }
}

#[test]
fn binary_broadcasting_is_correctly_rounded() {
    use simd::BinOp::*;
    let cases: [(&[usize], &[usize]); 6] = [
        (&[3, 40], &[3, 40]),
        (&[3, 40], &[40]),
        (&[3, 40], &[3, 1]),
        (&[1], &[5, 7]),
        (&[2, 1, 9], &[4, 1]),
        (&[300, 500], &[1]),
    ];
    for (ash, bsh) in cases {
        let a = values(ash.iter().product(), 31);
        let b: Vec<f32> = values(bsh.iter().product(), 37).iter().map(|v| v + 2.5).collect();
        let osh: Vec<usize> = kernels::elementwise::broadcast_dims(ash, bsh).collect::<Option<_>>().unwrap();
        let n: usize = osh.iter().product();
        for op in [Add, Sub, Mul, Div] {
            // Reference: index each operand with broadcasting, compute in f64, round once.
            let r = osh.len();
            let pad =
                |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, r - s.len()).chain(s.iter().copied()).collect() };
            let (pa, pb) = (pad(ash), pad(bsh));
            let (sa, sb, so) = (kernels::strides(&pa), kernels::strides(&pb), kernels::strides(&osh));
            let want: Vec<f32> = (0..n)
                .map(|o| {
                    let (mut ia, mut ib) = (0, 0);
                    for k in 0..r {
                        let i = (o / so[k]) % osh[k];
                        ia += if pa[k] == 1 { 0 } else { i * sa[k] };
                        ib += if pb[k] == 1 { 0 } else { i * sb[k] };
                    }
                    let (x, y) = (a[ia] as f64, b[ib] as f64);
                    (match op {
                        Add => x + y,
                        Sub => x - y,
                        Mul => x * y,
                        Div => x / y,
                    }) as f32
                })
                .collect();
            for (isa, pool) in &configs() {
                let mut out = vec![0f32; n];
                let mut s = Scratch::default();
                let ctx = Ctx { isa: *isa, pool };
                kernels::elementwise::binary(
                    &ctx,
                    op,
                    View::F32(&a),
                    ash,
                    View::F32(&b),
                    bsh,
                    ViewMut::F32(&mut out),
                    &osh,
                    None,
                    &mut s,
                )
                .unwrap();
                assert_eq!(out, want, "{op:?} {ash:?} {bsh:?} {}", label(*isa, pool));
            }
        }
    }
}

#[test]
fn unary_ops_and_fused_clamp() {
    use kernels::elementwise::Unary;
    let x: Vec<f32> = values(5000, 41).iter().map(|v| v.abs() + 0.01).collect();
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        let mut s = Scratch::default();
        let mut out = vec![0f32; x.len()];
        kernels::elementwise::unary(&ctx, Unary::Square, View::F32(&x), ViewMut::F32(&mut out), None, &mut s).unwrap();
        assert!(out.iter().zip(&x).all(|(o, v)| *o == ((*v as f64) * (*v as f64)) as f32));
        kernels::elementwise::unary(&ctx, Unary::Rsqrt, View::F32(&x), ViewMut::F32(&mut out), None, &mut s).unwrap();
        for (o, v) in out.iter().zip(&x) {
            let want = 1.0 / (*v as f64).sqrt();
            assert!(((*o as f64) - want).abs() <= 2.0 * want * 2.0 * U, "rsqrt {v}: {o} vs {want}");
        }
        kernels::elementwise::unary(&ctx, Unary::Copy, View::F32(&x), ViewMut::F32(&mut out), Some((0.1, 0.5)), &mut s)
            .unwrap();
        assert!(out.iter().zip(&x).all(|(o, v)| *o == v.clamp(0.1, 0.5)));
    }
}

#[test]
fn conv_and_depthwise_and_linear_match_f64() {
    use kernels::conv::ConvGeom;
    // Regular grouped conv: 1x6x7x4 NHWC, 2 groups, 3x2 kernel, stride 2x1, dilation 1x2, padding.
    let g = ConvGeom {
        padding: [1, 2, 0, 1],
        kernel: [3, 2],
        stride: [2, 1],
        dilation: [1, 2],
        groups: 2,
        group_in: 2,
        group_out: 3,
        depthwise: false,
    };
    let dw = ConvGeom {
        padding: [1, 1, 1, 1],
        kernel: [3, 3],
        stride: [1, 1],
        dilation: [1, 1],
        groups: 4,
        group_in: 1,
        group_out: 2,
        depthwise: true,
    };
    let ish = [2, 6, 7, 4];
    for geom in [g, dw] {
        check_conv(&geom, &ish, 43);
    }
    // Linear [5, 37] x [11, 37]^T + b.
    let (m, k, n) = (5, 37, 11);
    let xv = values(m * k, 59);
    let w = values(n * k, 61);
    let b = values(n, 67);
    for (isa, pool) in &configs() {
        let mut out = vec![0f32; m * n];
        let mut sc = Scratch::default();
        kernels::linear::fully_connected(
            &Ctx { isa: *isa, pool },
            View::F32(&xv),
            m,
            k,
            View::F32(&w),
            None,
            n,
            false,
            Some(View::F32(&b)),
            ViewMut::F32(&mut out),
            None,
            &mut sc,
        )
        .unwrap();
        for r in 0..m {
            for c in 0..n {
                let terms: Vec<f64> = (0..k).map(|j| xv[r * k + j] as f64 * w[c * k + j] as f64).collect();
                let want = terms.iter().sum::<f64>() + b[c] as f64;
                let mag = terms.iter().map(|t| t.abs()).sum::<f64>() + (b[c] as f64).abs();
                assert!((out[r * n + c] as f64 - want).abs() <= gamma(k + 1) * mag, "linear {r} {c}");
            }
        }
    }
}

/// A product convolution (one group, 1x1 kernel) of 1 to 4 input channels into a multiple of
/// 16 outputs per pixel: the kernels keep each block's filter rows in registers there
/// (`window_stationary`); with and without padding (border pixels with no taps), on rows of
/// fewer and more than 4 pixels.
#[test]
fn one_by_one_convs_of_few_channels_match_f64() {
    use kernels::conv::ConvGeom;
    for (cin, cout, padding, w) in [(1, 16, 0, 9), (2, 32, 1, 5), (3, 96, 0, 11), (4, 48, 1, 3), (3, 16, 0, 2)] {
        let geom = ConvGeom {
            padding: [padding; 4],
            kernel: [1, 1],
            stride: [1, 1],
            dilation: [1, 1],
            groups: 1,
            group_in: cin,
            group_out: cout,
            depthwise: false,
        };
        check_conv(&geom, &[2, 3, w, cin], 71 + cin as u64);
    }
}

/// `geom` on NHWC input `ish` of seeded values, with a bias, on every ISA and pool, its filter
/// packed per call and ahead, against an f64 sum with XNNPACK's filter layouts.
fn check_conv(geom: &kernels::conv::ConvGeom, ish: &[usize], seed: u64) {
    let x = values(ish.iter().product(), seed);
    let osh = geom.output_shape(ish).unwrap();
    let w = values(geom.filter_len().unwrap(), 47);
    let b = values(osh[3], 53);
    let n_out: usize = osh.iter().product();
    // f64 reference with XNNPACK's filter layouts.
    let mut want = vec![0f64; n_out];
    let mut mag = vec![0f64; n_out];
    for i in 0..n_out {
        let (oc, ox, oy, bn) =
            (i % osh[3], (i / osh[3]) % osh[2], (i / (osh[3] * osh[2])) % osh[1], i / (osh[3] * osh[2] * osh[1]));
        let (mut s, mut m) = (b[oc] as f64, (b[oc] as f64).abs());
        for ky in 0..geom.kernel[0] {
            for kx in 0..geom.kernel[1] {
                let iy = (oy * geom.stride[0] + ky * geom.dilation[0]) as isize - geom.padding[0] as isize;
                let ix = (ox * geom.stride[1] + kx * geom.dilation[1]) as isize - geom.padding[3] as isize;
                if iy < 0 || ix < 0 || iy >= ish[1] as isize || ix >= ish[2] as isize {
                    continue;
                }
                let xb = ((bn * ish[1] + iy as usize) * ish[2] + ix as usize) * ish[3];
                let terms: Vec<(f64, f64)> = if geom.depthwise {
                    let c = oc / geom.group_out;
                    vec![(x[xb + c] as f64, w[(ky * geom.kernel[1] + kx) * osh[3] + oc] as f64)]
                } else {
                    let gi = oc / geom.group_out;
                    (0..geom.group_in)
                        .map(|ic| {
                            let wi = ((oc * geom.kernel[0] + ky) * geom.kernel[1] + kx) * geom.group_in + ic;
                            (x[xb + gi * geom.group_in + ic] as f64, w[wi] as f64)
                        })
                        .collect()
                };
                for (a, c) in terms {
                    s += a * c;
                    m += (a * c).abs();
                }
            }
        }
        want[i] = s;
        mag[i] = m;
    }
    // Packed per call, and packed ahead (as the plan does for constant filters).
    let ahead = (!geom.depthwise).then(|| kernels::conv::pack_filter(geom, &w));
    // Each output is the bias plus one product per tap and input channel of its group.
    let terms = geom.kernel[0] * geom.kernel[1] * if geom.depthwise { 1 } else { geom.group_in } + 1;
    for ((isa, pool), packed) in configs().iter().flat_map(|c| [(c, None), (c, ahead.as_deref())]) {
        let mut out = vec![0f32; n_out];
        let mut sc = Scratch::default();
        kernels::conv::conv2d(
            &Ctx { isa: *isa, pool },
            geom,
            View::F32(&x),
            ish,
            View::F32(&w),
            packed,
            Some(View::F32(&b)),
            ViewMut::F32(&mut out),
            &osh,
            None,
            &mut sc,
        )
        .unwrap();
        for i in 0..n_out {
            // A sum of `terms` values in some order: gamma(terms) * sum|terms|.
            assert!((out[i] as f64 - want[i]).abs() <= gamma(terms) * mag[i] + 1e-30, "{geom:?} {i}");
        }
    }
}
