//! Hand-computed expectations for every op of the interpreter, in every dtype it supports.

use reference::eval::{run, EvalError};
use reference::graph::{Conv2dParams, Dim};
use reference::{ElemType, GraphBuilder, GraphErrorKind, MemoryFormat, QuantParams, Tensor, TensorData, TensorSpec};

const FLOATS: [ElemType; 3] = [ElemType::F32, ElemType::F16, ElemType::Bf16];

fn tensor(dtype: ElemType, shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(shape, dtype, None, v)
}

fn spec(dtype: ElemType, shape: &[usize]) -> TensorSpec {
    TensorSpec::new(dtype, shape)
}

/// Asserts `t` holds exactly `expected` (logical order), bit for bit after rounding the
/// expectation to t's dtype (NaN matches NaN).
fn assert_values(t: &Tensor, expected: &[f64], what: &str) {
    let got = t.values_f64();
    assert_eq!(got.len(), expected.len(), "{what}: length");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let e = reference::dtype::round_f64(t.dtype(), e);
        let same = (g.is_nan() && e.is_nan()) || g.to_bits() == e.to_bits();
        assert!(same, "{what} ({}): element {i}: got {g:e}, expected {e:e}; all {got:?}", t.dtype());
    }
}

/// One-op graph over float inputs of `dtype`.
fn run_unary(dtype: ElemType, x: &[f64], f: impl Fn(&GraphBuilder, reference::T) -> reference::T) -> Tensor {
    let g = GraphBuilder::new();
    let a = g.input("x", spec(dtype, &[x.len()]));
    let y = f(&g, a);
    let graph = g.finish(&[y]).expect("valid graph");
    run(&graph, &[tensor(dtype, &[x.len()], x)]).expect("runs").remove(0)
}

fn run_binary(op: reference::graph::BinaryOp, dtype: ElemType, a: (&[usize], &[f64]), b: (&[usize], &[f64])) -> Tensor {
    let g = GraphBuilder::new();
    let x = g.input("a", spec(dtype, a.0));
    let y = g.input("b", spec(dtype, b.0));
    let z = g.binary(op, x, y);
    let graph = g.finish(&[z]).expect("valid graph");
    run(&graph, &[tensor(dtype, a.0, a.1), tensor(dtype, b.0, b.1)]).expect("runs").remove(0)
}

#[test]
fn binary_ops_broadcast_in_every_float_dtype() {
    use reference::graph::BinaryOp::*;
    let a: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    for dt in FLOATS {
        let row = (&[3usize][..], &[10.0, 20.0, 40.0][..]);
        let add = run_binary(Add, dt, (&[2, 3], a), row);
        assert_eq!(add.shape, vec![2, 3]);
        assert_values(&add, &[11.0, 22.0, 43.0, 14.0, 25.0, 46.0], "add");
        assert_values(&run_binary(Sub, dt, (&[2, 3], a), row), &[-9.0, -18.0, -37.0, -6.0, -15.0, -34.0], "sub");
        assert_values(&run_binary(Mul, dt, (&[2, 3], a), row), &[10.0, 40.0, 120.0, 40.0, 100.0, 240.0], "mul");
        let div = run_binary(Div, dt, (&[2, 3], a), row);
        assert_values(&div, &[0.1, 0.1, 0.075, 0.4, 0.25, 0.15], "div");
        // [2,1] with [1,3] -> [2,3]; a 0-D operand broadcasts everywhere.
        let outer = run_binary(Mul, dt, (&[2, 1], &[2.0, 3.0]), (&[1, 3], &[1.0, 10.0, 100.0]));
        assert_eq!(outer.shape, vec![2, 3]);
        assert_values(&outer, &[2.0, 20.0, 200.0, 3.0, 30.0, 300.0], "outer mul");
        let scalar = run_binary(Add, dt, (&[], &[0.5]), (&[2, 2], &[1.0, 2.0, 3.0, 4.0]));
        assert_eq!(scalar.shape, vec![2, 2]);
        assert_values(&scalar, &[1.5, 2.5, 3.5, 4.5], "scalar add");
        // IEEE specials: signed zeros, division by zero, 0/0.
        let s = run_binary(Div, dt, (&[4], &[1.0, -1.0, 0.0, -0.0]), (&[4], &[0.0, 0.0, 0.0, 1.0]));
        assert_values(&s, &[f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -0.0], "div specials");
        let z = run_binary(Add, dt, (&[2], &[-0.0, -0.0]), (&[2], &[-0.0, 0.0]));
        assert_values(&z, &[-0.0, 0.0], "signed zero add");
    }
    // 1/3 rounds once to each dtype (bits checked directly).
    let third = |dt| run_binary(Div, dt, (&[1], &[1.0]), (&[1], &[3.0])).data.bits(0);
    assert_eq!(third(ElemType::F32), 0x3EAA_AAAB);
    assert_eq!(third(ElemType::F16), 0x3555);
    assert_eq!(third(ElemType::Bf16), 0x3EAB);
    // Per-op rounding in the narrow types: 2048 + 1 is a tie in fp16 (-> 2048, even),
    // 2048 + 3 rounds to 2052; the same at 256 in bf16.
    let f16 = run_binary(Add, ElemType::F16, (&[2], &[2048.0, 2048.0]), (&[2], &[1.0, 3.0]));
    assert_eq!(f16.values_f64(), vec![2048.0, 2052.0]);
    let bf = run_binary(Add, ElemType::Bf16, (&[2], &[256.0, 256.0]), (&[2], &[1.0, 3.0]));
    assert_eq!(bf.values_f64(), vec![256.0, 260.0]);
    let f = run_binary(Add, ElemType::F32, (&[2], &[2048.0, 2048.0]), (&[2], &[1.0, 3.0]));
    assert_eq!(f.values_f64(), vec![2049.0, 2051.0]);
    // fp16 overflow to inf.
    let big = run_binary(Mul, ElemType::F16, (&[1], &[300.0]), (&[1], &[300.0]));
    assert_eq!(big.values_f64(), vec![f64::INFINITY]);
}

#[test]
fn square_and_rsqrt() {
    for dt in FLOATS {
        let sq = run_unary(dt, &[-3.0, 0.5, -0.0, f64::NEG_INFINITY, f64::NAN], |g, x| g.square(x));
        assert_values(&sq, &[9.0, 0.25, 0.0, f64::INFINITY, f64::NAN], "square");
        let rs = run_unary(dt, &[4.0, 0.25, 0.0, -0.0, -1.0, f64::INFINITY, f64::NAN], |g, x| g.rsqrt(x));
        assert_values(&rs, &[0.5, 2.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.0, f64::NAN], "rsqrt");
    }
    let r2 = |dt| run_unary(dt, &[2.0], |g, x| g.rsqrt(x)).data.bits(0);
    assert_eq!(r2(ElemType::F32), 0x3F35_04F3);
    assert_eq!(r2(ElemType::F16), 0x39A8);
    assert_eq!(r2(ElemType::Bf16), 0x3F35);
    // 300^2 overflows fp16 only.
    assert_eq!(run_unary(ElemType::F16, &[300.0], |g, x| g.square(x)).values_f64(), vec![f64::INFINITY]);
    assert_eq!(run_unary(ElemType::Bf16, &[300.0], |g, x| g.square(x)).values_f64(), vec![90112.0]);
    assert_eq!(run_unary(ElemType::F32, &[300.0], |g, x| g.square(x)).values_f64(), vec![90000.0]);
}

#[test]
fn clamp_relu_hardtanh() {
    let x = [-1.0, 0.5, f64::NAN, -0.0, f64::INFINITY, f64::NEG_INFINITY, 3.0];
    for dt in FLOATS {
        let relu = run_unary(dt, &x, |g, x| g.relu(x));
        // NaN passes through; -0 is not below 0 so it stays -0 (std::max keeps its first arg).
        assert_values(&relu, &[0.0, 0.5, f64::NAN, -0.0, f64::INFINITY, 0.0, 3.0], "relu");
        let ht = run_unary(dt, &x, |g, x| g.hardtanh(x, -0.5, 1.0));
        assert_values(&ht, &[-0.5, 0.5, f64::NAN, -0.0, 1.0, -0.5, 1.0], "hardtanh");
        let hi = run_unary(dt, &x, |g, x| g.clamp(x, None, Some(0.25)));
        assert_values(&hi, &[-1.0, 0.25, f64::NAN, -0.0, 0.25, f64::NEG_INFINITY, 0.25], "clamp max");
    }
    // A bound that the dtype cannot hold is rounded like the result: fp16(0.1) = 0x2E66.
    let c = run_unary(ElemType::F16, &[0.0], |g, x| g.clamp(x, Some(0.1), None));
    assert_eq!(c.data.bits(0), 0x2E66);
}

#[test]
fn linear_with_and_without_bias() {
    for dt in FLOATS {
        let g = GraphBuilder::new();
        let x = g.input("x", spec(dt, &[2, 3]));
        let w = g.constant(tensor(dt, &[2, 3], &[1.0, 0.0, -1.0, 0.5, 0.5, 0.5]));
        let b = g.constant(tensor(dt, &[2], &[10.0, -10.0]));
        let y = g.linear(x, w, Some(b));
        let y0 = g.linear(x, w, None);
        let graph = g.finish(&[y, y0]).unwrap();
        let out = run(&graph, &[tensor(dt, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0])]).unwrap();
        assert_eq!(out[0].shape, vec![2, 2]);
        assert_values(&out[0], &[8.0, -7.0, 6.0, -1.0], "linear+bias");
        assert_values(&out[1], &[-2.0, 3.0, -4.0, 9.0], "linear");

        // Leading batch dims are kept: [1, 2, 3] -> [1, 2, 1].
        let g = GraphBuilder::new();
        let x = g.input("x", spec(dt, &[1, 2, 3]));
        let w = g.constant(tensor(dt, &[1, 3], &[1.0, 1.0, 1.0]));
        let y = g.linear(x, w, None);
        let graph = g.finish(&[y]).unwrap();
        let out = run(&graph, &[tensor(dt, &[1, 2, 3], &[1.0, 2.0, 3.0, -1.0, -2.0, -3.5])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 2, 1]);
        assert_values(&out[0], &[6.0, -6.5], "batched linear");
    }
    // One rounding for the whole dot product: 2048 + 1 + 1 = 2050 is exact in fp16, while
    // rounding after each addition would stay at 2048 (ties to even).
    let g = GraphBuilder::new();
    let x = g.input("x", spec(ElemType::F16, &[3]));
    let w = g.constant(tensor(ElemType::F16, &[1, 3], &[1.0, 1.0, 1.0]));
    let y = g.linear(x, w, None);
    let graph = g.finish(&[y]).unwrap();
    let out = run(&graph, &[tensor(ElemType::F16, &[3], &[2048.0, 1.0, 1.0])]).unwrap();
    assert_eq!(out[0].values_f64(), vec![2050.0]);
}

fn conv(dt: ElemType, x: (&[usize], &[f64]), w: (&[usize], &[f64]), b: Option<&[f64]>, p: Conv2dParams) -> Tensor {
    let g = GraphBuilder::new();
    let xi = g.input("x", spec(dt, x.0));
    let wc = g.constant(tensor(dt, w.0, w.1));
    let bc = b.map(|b| g.constant(tensor(dt, &[w.0[0]], b)));
    let y = g.conv2d(xi, wc, bc, p);
    let graph = g.finish(&[y]).unwrap();
    run(&graph, &[tensor(dt, x.0, x.1)]).unwrap().remove(0)
}

#[test]
fn conv2d_stride_padding_dilation_groups_bias() {
    let x9: Vec<f64> = (1..=9).map(f64::from).collect();
    let diag = (&[1usize, 1, 2, 2][..], &[1.0, 0.0, 0.0, 1.0][..]);
    for dt in FLOATS {
        let p = Conv2dParams::default();
        let y = conv(dt, (&[1, 1, 3, 3], &x9), diag, None, p);
        assert_eq!(y.shape, vec![1, 1, 2, 2]);
        assert_values(&y, &[6.0, 8.0, 12.0, 14.0], "conv");
        let y = conv(dt, (&[1, 1, 3, 3], &x9), diag, Some(&[0.5]), p);
        assert_values(&y, &[6.5, 8.5, 12.5, 14.5], "conv+bias");
        // Stride 2, padding 1: output 2x2 reading the padded border as zeros.
        let y = conv(dt, (&[1, 1, 3, 3], &x9), diag, None, Conv2dParams { stride: [2, 2], padding: [1, 1], ..p });
        assert_eq!(y.shape, vec![1, 1, 2, 2]);
        assert_values(&y, &[1.0, 3.0, 7.0, 14.0], "conv stride/pad");
        // Dilation 2: the 2x2 kernel spans 3x3: x[0,0] + x[2,2].
        let y = conv(dt, (&[1, 1, 3, 3], &x9), diag, None, Conv2dParams { dilation: [2, 2], ..p });
        assert_eq!(y.shape, vec![1, 1, 1, 1]);
        assert_values(&y, &[10.0], "conv dilation");
        // Asymmetric stride/padding per axis: stride (1, 2), padding (0, 1).
        let ones = (&[1usize, 1, 1, 2][..], &[1.0, 1.0][..]);
        let y = conv(dt, (&[1, 1, 3, 3], &x9), ones, None, Conv2dParams { stride: [1, 2], padding: [0, 1], ..p });
        assert_eq!(y.shape, vec![1, 1, 3, 2]);
        assert_values(&y, &[1.0, 5.0, 4.0, 11.0, 7.0, 17.0], "conv asymmetric");
        // Depthwise (groups = channels = 2), and groups with 2 channels per group.
        let y = conv(
            dt,
            (&[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            (&[2, 1, 1, 1], &[2.0, 3.0]),
            None,
            Conv2dParams { groups: 2, ..p },
        );
        assert_values(&y, &[2.0, 4.0, 6.0, 8.0, 15.0, 18.0, 21.0, 24.0], "depthwise");
        let y = conv(
            dt,
            (&[1, 4, 1, 1], &[1.0, 2.0, 3.0, 4.0]),
            (&[2, 2, 1, 1], &[1.0, 1.0, 1.0, -1.0]),
            Some(&[0.0, 0.5]),
            Conv2dParams { groups: 2, ..p },
        );
        assert_values(&y, &[3.0, -0.5], "grouped");
        // Batch of 2 with 2 output channels.
        let y = conv(dt, (&[2, 1, 1, 2], &[1.0, 2.0, -1.0, -2.0]), (&[2, 1, 1, 1], &[1.0, 10.0]), None, p);
        assert_eq!(y.shape, vec![2, 2, 1, 2]);
        assert_values(&y, &[1.0, 2.0, 10.0, 20.0, -1.0, -2.0, -10.0, -20.0], "batched conv");
    }
}

#[test]
fn conv2d_channels_last_input_and_output() {
    let g = GraphBuilder::new();
    let x = g.input("x", spec(ElemType::F32, &[1, 2, 2, 2]).channels_last());
    let w = g.constant(tensor(ElemType::F32, &[1, 2, 1, 1], &[1.0, 100.0]));
    let y = g.conv2d(x, w, None, Conv2dParams::default());
    let graph = g.finish(&[y]).unwrap();
    let logical = tensor(ElemType::F32, &[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let xin = logical.to_format(MemoryFormat::ChannelsLast);
    assert_eq!(xin.data, TensorData::F32(vec![1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]));
    let out = run(&graph, &[xin]).unwrap().remove(0);
    assert_eq!(out.format, MemoryFormat::ChannelsLast);
    assert_values(&out, &[501.0, 602.0, 703.0, 804.0], "conv channels_last");
}

#[test]
fn quantize_dequantize() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[7]));
    let q = g.quantize(x, 0.5, 0);
    let d = g.dequantize(q, 0.5, 0);
    let graph = g.finish(&[q, d]).unwrap();
    let xs = [0.25, 0.75, 1.25, -100.0, 100.0, f64::NAN, -0.75];
    let out = run(&graph, &[tensor(ElemType::F32, &[7], &xs)]).unwrap();
    assert_eq!(out[0].quant, Some(QuantParams::new(0.5, 0)));
    assert_eq!(out[0].data, TensorData::Qs8(vec![0, 2, 2, -128, 127, -128, -2]));
    assert_eq!(out[1].dtype(), ElemType::F32);
    assert_values(&out[1], &[0.0, 1.0, 1.0, -64.0, 63.5, -64.0, -1.0], "dequantize");

    // Non-zero zero point, graph input already quantized.
    let qp = QuantParams::new(0.25, -3);
    let g = GraphBuilder::new();
    let x = g.input("q", TensorSpec::qs8(&[3], qp));
    let d = g.dequantize(x, 0.25, -3);
    let graph = g.finish(&[d]).unwrap();
    let out = run(&graph, &[Tensor::qs8(&[3], vec![-3, 127, -128], qp)]).unwrap();
    assert_values(&out[0], &[0.0, 32.5, -31.25], "dequantize zp");
}

#[test]
fn to_copy_dtypes_and_formats() {
    // f32 -> f16/bf16 rounds once; widening is exact.
    let xs = [0.1, 65520.0, 1e-8, -3.0e-5, 1.0 + 2f64.powi(-11)];
    for (to, expect) in [
        (ElemType::F16, vec![0x2E66u32, 0x7C00, 0x0000, 0x81F7, 0x3C00]),
        (ElemType::Bf16, vec![0x3DCD, 0x4780, 0x322C, 0xB7FC, 0x3F80]),
    ] {
        let y = run_unary(ElemType::F32, &xs, |g, x| g.to_dtype(x, to));
        assert_eq!(y.dtype(), to);
        let bits: Vec<u32> = (0..xs.len()).map(|i| y.data.bits(i)).collect();
        assert_eq!(bits, expect, "f32 -> {to}");
    }
    let y = run_unary(ElemType::F16, &[0.1, -65504.0], |g, x| g.to_dtype(x, ElemType::F32));
    assert_eq!(y.values_f64(), vec![half::f16::from_f64(0.1).to_f64(), -65504.0]);
    // bf16 -> f16: 1e5 overflows fp16; 2^-20 becomes an fp16 subnormal (16 * 2^-24).
    let y = run_unary(ElemType::Bf16, &[1e5, 2f64.powi(-20)], |g, x| g.to_dtype(x, ElemType::F16));
    assert_eq!(y.values_f64(), vec![f64::INFINITY, 2f64.powi(-20)]);

    // Format only: same values, NHWC storage.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 2, 2, 2]));
    let y = g.to_format(x, MemoryFormat::ChannelsLast);
    let z = g.to_format(y, MemoryFormat::Contiguous);
    let graph = g.finish(&[y, z]).unwrap();
    let xin = tensor(ElemType::F32, &[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let out = run(&graph, std::slice::from_ref(&xin)).unwrap();
    assert_eq!(out[0].format, MemoryFormat::ChannelsLast);
    assert_eq!(out[0].data, TensorData::F32(vec![1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]));
    assert_eq!(out[1], xin);

    // qs8: format change keeps the ints and quant params; 5-D channels_last_3d.
    let qp = QuantParams::new(0.1, 4);
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::qs8(&[1, 2, 1, 1, 2], qp));
    let y = g.to_format(x, MemoryFormat::ChannelsLast3d);
    let graph = g.finish(&[y]).unwrap();
    let out = run(&graph, &[Tensor::qs8(&[1, 2, 1, 1, 2], vec![1, 2, 3, 4], qp)]).unwrap();
    assert_eq!(out[0].format, MemoryFormat::ChannelsLast3d);
    assert_eq!(out[0].quant, Some(qp));
    assert_eq!(out[0].data, TensorData::Qs8(vec![1, 3, 2, 4]));
}

#[test]
fn reshape_and_permute_in_every_dtype() {
    let qp = QuantParams::new(0.5, 1);
    for dt in ElemType::ALL {
        let mk = |shape: &[usize], v: &[f64]| match dt {
            ElemType::Qs8 => Tensor::qs8(shape, v.iter().map(|&x| x as i8).collect(), qp),
            _ => tensor(dt, shape, v),
        };
        let sp = |shape: &[usize]| match dt {
            ElemType::Qs8 => TensorSpec::qs8(shape, qp),
            _ => spec(dt, shape),
        };
        let raw = |t: &Tensor| (0..t.data.len()).map(|i| t.data.get_f64(i)).collect::<Vec<f64>>();
        let g = GraphBuilder::new();
        let x = g.input("x", sp(&[2, 3]));
        let r = g.reshape(x, &[3, -1]);
        let p = g.permute(x, &[1, 0]);
        let pn = g.permute(x, &[-1, -2]);
        let graph = g.finish(&[r, p, pn]).unwrap();
        let out = run(&graph, &[mk(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]).unwrap();
        assert_eq!(out[0].shape, vec![3, 2]);
        assert_eq!(raw(&out[0]), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "{dt} reshape");
        assert_eq!(out[1].shape, vec![3, 2]);
        assert_eq!(raw(&out[1]), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0], "{dt} permute");
        assert_eq!(out[2], out[1]);
        for o in &out {
            assert_eq!(o.dtype(), dt);
            assert_eq!(o.quant, if dt == ElemType::Qs8 { Some(qp) } else { None });
        }

        // A channels_last input is reshaped and permuted by its logical (NCHW) values.
        let g = GraphBuilder::new();
        let x = g.input("x", sp(&[1, 2, 1, 2]).channels_last());
        let r = g.reshape(x, &[4]);
        let p = g.permute(x, &[0, 2, 3, 1]);
        let graph = g.finish(&[r, p]).unwrap();
        let xin = mk(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]).to_format(MemoryFormat::ChannelsLast);
        let out = run(&graph, &[xin]).unwrap();
        assert_eq!(raw(&out[0]), vec![1.0, 2.0, 3.0, 4.0], "{dt} reshape of channels_last");
        assert_eq!(out[1].shape, vec![1, 1, 2, 2]);
        assert_eq!(raw(&out[1]), vec![1.0, 3.0, 2.0, 4.0], "{dt} NCHW -> NHWC permute");
    }
}

#[test]
fn permute_rank_3_and_reshape_to_0d() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 1, 3]));
    let p = g.permute(x, &[2, 0, 1]);
    let graph = g.finish(&[p]).unwrap();
    let out = run(&graph, &[tensor(ElemType::F32, &[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]).unwrap();
    assert_eq!(out[0].shape, vec![3, 2, 1]);
    assert_eq!(out[0].values_f64(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);

    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 1]));
    let r = g.reshape(x, &[]);
    let graph = g.finish(&[r]).unwrap();
    let out = run(&graph, &[tensor(ElemType::F32, &[1, 1], &[7.0])]).unwrap();
    assert_eq!(out[0].shape, Vec::<usize>::new());
    assert_eq!(out[0].values_f64(), vec![7.0]);
}

#[test]
fn constants_are_values_in_their_format() {
    for dt in FLOATS {
        let g = GraphBuilder::new();
        let c = tensor(dt, &[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]).to_format(MemoryFormat::ChannelsLast);
        let k = g.constant(c.clone());
        let x = g.input("x", spec(dt, &[1, 2, 1, 2]));
        let y = g.add(x, k);
        let graph = g.finish(&[k, y]).unwrap();
        let out = run(&graph, &[tensor(dt, &[1, 2, 1, 2], &[10.0, 20.0, 30.0, 40.0])]).unwrap();
        assert_eq!(out[0], c);
        // add keeps the first operand's (contiguous) format.
        assert_eq!(out[1].format, MemoryFormat::Contiguous);
        assert_values(&out[1], &[11.0, 22.0, 33.0, 44.0], "add constant");
    }
}

#[test]
fn rmsnorm_in_fp16_rounds_per_op() {
    // x * rsqrt(mean(x^2, -1, keepdim) + eps) with every intermediate rounded to fp16.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f16(&[1, 2]));
    let eps = g.scalar_like(1e-9, x); // rounds to 0 in fp16 (below half the smallest subnormal)
    let ms = g.mean(g.square(x), &[-1], true);
    let y = g.mul(x, g.rsqrt(g.add(ms, eps)));
    let graph = g.finish(&[y]).unwrap();
    let out = run(&graph, &[tensor(ElemType::F16, &[1, 2], &[3.0, 4.0])]).unwrap();
    // mean(9, 16) = 12.5; rsqrt(12.5) = 0.28284271 -> fp16 0.282958984375 (0x3487);
    // 3 * that = 0.848876953125 is a tie in fp16 -> 0.8486328125 (even); 4 * that is exact.
    let y0 = half::f16::from_f64(0.8486328125).to_bits();
    let y1 = half::f16::from_f64(1.1318359375).to_bits();
    assert_eq!((out[0].data.bits(0), out[0].data.bits(1)), (y0 as u32, y1 as u32));
    assert_eq!(out[0].shape, vec![1, 2]);
    assert_eq!(graph.nodes[1].spec, TensorSpec::f16(&[]));
}

#[test]
fn bad_inputs_get_typed_errors() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 3]).dynamic(1));
    let y = g.relu(x);
    let graph = g.finish(&[y]).unwrap();
    let ok = tensor(ElemType::F32, &[2, 2], &[1.0, -1.0, 2.0, -2.0]);
    assert_eq!(run(&graph, std::slice::from_ref(&ok)).unwrap()[0].values_f64(), vec![1.0, 0.0, 2.0, 0.0]);
    let kind = |inputs: &[Tensor]| match run(&graph, inputs) {
        Err(EvalError::BadInput(e)) => e.kind,
        other => panic!("expected BadInput, got {other:?}"),
    };
    assert!(matches!(kind(&[]), GraphErrorKind::WrongInputCount { found: 0, .. }));
    assert!(matches!(kind(&[ok.clone(), ok.clone()]), GraphErrorKind::WrongInputCount { found: 2, .. }));
    assert!(matches!(
        kind(&[tensor(ElemType::F16, &[2, 2], &[0.0; 4])]),
        GraphErrorKind::DtypeMismatch { expected: ElemType::F32, found: ElemType::F16 }
    ));
    assert!(matches!(
        kind(&[tensor(ElemType::F32, &[2, 4], &[0.0; 8])]),
        GraphErrorKind::DynamicAboveBound { dim: 1, size: 4, bound: 3 }
    ));
    assert!(matches!(kind(&[tensor(ElemType::F32, &[3, 2], &[0.0; 6])]), GraphErrorKind::ShapeMismatch { .. }));
    assert!(matches!(kind(&[tensor(ElemType::F32, &[2, 0], &[])]), GraphErrorKind::ZeroSizedDim { dim: 1 }));
    let short = Tensor::f32(&[2, 2], vec![0.0; 3]);
    assert!(matches!(kind(&[short]), GraphErrorKind::DataLength { expected: 4, found: 3 }));

    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 1, 1, 2]).channels_last());
    let graph = g.finish(&[x]).unwrap();
    let contiguous = tensor(ElemType::F32, &[1, 1, 1, 2], &[1.0, 2.0]);
    assert!(matches!(
        run(&graph, &[contiguous]),
        Err(EvalError::BadInput(e)) if matches!(e.kind, GraphErrorKind::FormatMismatch { .. })
    ));

    let qp = QuantParams::new(0.5, 0);
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::qs8(&[1], qp));
    let graph = g.finish(&[x]).unwrap();
    let wrong_q = Tensor::qs8(&[1], vec![1], QuantParams::new(0.25, 0));
    assert!(matches!(
        run(&graph, &[wrong_q]),
        Err(EvalError::BadInput(e)) if e.kind == GraphErrorKind::QuantParamsMismatch
    ));

    // Dynamic sizes that pass the input check but make a later op's shapes incompatible.
    let g = GraphBuilder::new();
    let a = g.input("a", TensorSpec { shape: vec![Dim::upto(4)], ..TensorSpec::f32(&[4]) });
    let b = g.input("b", TensorSpec { shape: vec![Dim::upto(4)], ..TensorSpec::f32(&[4]) });
    let c = g.add(a, b);
    let graph = g.finish(&[c]).unwrap();
    let t = |n: usize| tensor(ElemType::F32, &[n], &vec![1.0; n]);
    assert_eq!(run(&graph, &[t(3), t(3)]).unwrap()[0].values_f64(), vec![2.0; 3]);
    assert_eq!(run(&graph, &[t(3), t(1)]).unwrap()[0].values_f64(), vec![2.0; 3]);
    assert!(matches!(
        run(&graph, &[t(3), t(2)]),
        Err(EvalError::BadInput(e)) if matches!(e.kind, GraphErrorKind::NotBroadcastable { .. })
    ));
}

#[test]
fn invalid_graphs_are_rejected_before_running() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2]));
    let y = g.relu(x);
    let mut graph = g.finish(&[y]).unwrap();
    graph.nodes[1].spec = TensorSpec::f16(&[2]);
    let e = run(&graph, &[tensor(ElemType::F32, &[2], &[1.0, 2.0])]).unwrap_err();
    assert!(matches!(&e, EvalError::InvalidGraph(ge) if ge.kind == GraphErrorKind::SpecMismatch && ge.node == 1));
    assert_eq!(e.kind(), &GraphErrorKind::SpecMismatch);

    // An input node missing from `graph.inputs` would have no value at run time.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2]));
    let mut graph = g.finish(&[x]).unwrap();
    graph.inputs.clear();
    let e = run(&graph, &[]).unwrap_err();
    assert!(
        matches!(e, EvalError::InvalidGraph(ge) if matches!(ge.kind, GraphErrorKind::WrongInputCount { found: 0, .. }))
    );
}

/// Every float -> float `to_copy` pair, checked against `half`'s own f32 -> fp16/bf16
/// conversions (a single correct rounding from f32; every source value here is an f32).
#[test]
fn to_copy_every_float_pair_matches_half() {
    let xs = [0.1, 1.0 / 3.0, -65519.0, 70000.0, 1e-6, -3e-8, 2.5e-40, 1.0 + 2f64.powi(-11), -0.0, f64::INFINITY];
    for from in FLOATS {
        let src = tensor(from, &[xs.len()], &xs);
        for to in FLOATS {
            let y = run_unary(from, &xs, |g, x| g.to_dtype(x, to));
            assert_eq!(y.dtype(), to);
            for (i, v) in src.values_f64().into_iter().enumerate() {
                let v32 = v as f32; // exact: every fp16/bf16/f32 value is an f32
                let want = match to {
                    ElemType::F32 => v32.to_bits(),
                    ElemType::F16 => half::f16::from_f32(v32).to_bits() as u32,
                    _ => half::bf16::from_f32(v32).to_bits() as u32,
                };
                assert_eq!(y.data.bits(i), want, "{from} -> {to} of {v:e}");
            }
        }
    }
}

mod per_op_rounding {
    use super::*;
    use proptest::prelude::*;

    /// Any finite or special value of the dtype, as f64.
    fn value(dt: ElemType) -> impl Strategy<Value = f64> {
        any::<u32>().prop_map(move |b| match dt {
            ElemType::F32 => f32::from_bits(b) as f64,
            ElemType::F16 => half::f16::from_bits(b as u16).to_f64(),
            _ => half::bf16::from_bits(b as u16).to_f64(),
        })
    }

    fn case() -> impl Strategy<Value = (ElemType, Vec<f64>, Vec<f64>)> {
        prop::sample::select(FLOATS.to_vec())
            .prop_flat_map(|dt| (Just(dt), prop::collection::vec(value(dt), 16), prop::collection::vec(value(dt), 16)))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// add/sub/mul/div round once per op: equal to the native f32 op (correctly rounded),
        /// and for fp16/bf16 to the f32 op rounded by `half` (f32 has more than 2p + 2 bits, so
        /// that double rounding is innocuous). An independent check of f64-then-round.
        #[test]
        fn binary_ops_match_native_arithmetic((dt, a, b) in case()) {
            use reference::graph::BinaryOp::*;
            for (op, f) in [(Add, (|x, y| x + y) as fn(f32, f32) -> f32), (Sub, |x, y| x - y), (Mul, |x, y| x * y), (Div, |x, y| x / y)] {
                let y = run_binary(op, dt, (&[16], &a), (&[16], &b));
                for i in 0..16 {
                    let r = f(a[i] as f32, b[i] as f32);
                    let want = match dt {
                        ElemType::F32 => r.to_bits(),
                        ElemType::F16 => half::f16::from_f32(r).to_bits() as u32,
                        _ => half::bf16::from_f32(r).to_bits() as u32,
                    };
                    let got = y.data.bits(i);
                    if r.is_nan() {
                        prop_assert!(y.data.get_f64(i).is_nan());
                    } else {
                        prop_assert_eq!(got, want, "{:?} {} {:e} {:e}", op, dt, a[i], b[i]);
                    }
                }
            }
        }
    }
}

#[test]
fn run_all_gives_every_node_in_its_format() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 2, 1, 2]).channels_last());
    let y = g.add(x, x);
    let m = g.mean(y, &[1], false);
    let graph = g.finish(&[m]).unwrap();
    let xin = tensor(ElemType::F32, &[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]).to_format(MemoryFormat::ChannelsLast);
    let all = reference::eval::run_all(&graph, std::slice::from_ref(&xin)).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], xin);
    assert_eq!(all[1].format, MemoryFormat::ChannelsLast);
    assert_eq!(all[1].values_f64(), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(all[2].values_f64(), vec![4.0, 6.0]);
    assert_eq!(all[2], run(&graph, &[xin]).unwrap()[0]);
}
