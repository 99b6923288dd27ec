//! Every invalid graph gets its typed error naming the node, never a panic.

use proptest::prelude::*;
use reference::data::{generate_inputs, DataOptions};
use reference::graph::{Conv2dParams, Dim, ErrorClass, Node, Op};
use reference::{
    ElemType, Graph, GraphBuilder, GraphError, GraphErrorKind, MemoryFormat, QuantParams, Tensor, TensorSpec, T,
};

fn f32s(shape: &[usize]) -> TensorSpec {
    TensorSpec::f32(shape)
}

/// Builds with `f` and returns the error `finish` reports.
fn build_err(f: impl FnOnce(&GraphBuilder) -> T) -> GraphError {
    let g = GraphBuilder::new();
    let out = f(&g);
    g.finish(&[out]).expect_err("graph should be rejected")
}

fn kind(f: impl FnOnce(&GraphBuilder) -> T) -> GraphErrorKind {
    build_err(f).kind
}

#[test]
fn dims_lists() {
    let x = || f32s(&[2, 3, 4]);
    assert_eq!(kind(|g| g.mean(g.input("x", x()), &[3], true)), GraphErrorKind::DimOutOfRange { dim: 3, rank: 3 });
    assert_eq!(kind(|g| g.mean(g.input("x", x()), &[-4], true)), GraphErrorKind::DimOutOfRange { dim: -4, rank: 3 });
    assert_eq!(kind(|g| g.mean(g.input("x", x()), &[1, -2], false)), GraphErrorKind::RepeatedDim { dim: 1 });
    assert_eq!(kind(|g| g.mean(g.scalar(1.0), &[1], false)), GraphErrorKind::DimOutOfRange { dim: 1, rank: 0 });
    assert_eq!(kind(|g| g.mean(g.scalar(1.0), &[0, -1], false)), GraphErrorKind::RepeatedDim { dim: 0 });
    let bad_perm = |p: &'static [i64]| kind(move |g| g.permute(g.input("x", f32s(&[2, 3])), p));
    for p in [&[0, 0][..], &[0], &[0, 2], &[1, 0, 2], &[-3, 0]] {
        assert!(matches!(bad_perm(p), GraphErrorKind::BadPermute { rank: 2, .. }), "{p:?}");
    }
}

#[test]
fn ranks() {
    assert_eq!(kind(|g| g.input("x", f32s(&[1; 7]))), GraphErrorKind::RankTooHigh { rank: 7 });
    assert_eq!(
        kind(|g| g.reshape(g.input("x", f32s(&[2])), &[2, 1, 1, 1, 1, 1, 1])),
        GraphErrorKind::RankTooHigh { rank: 7 }
    );
    // Rank 6 is fine.
    let g = GraphBuilder::new();
    let x = g.input("x", f32s(&[1, 2, 1, 2, 1, 2]));
    let m = g.mean(x, &[-1, 1], true);
    assert!(g.finish(&[m]).is_ok());
    let conv3 = kind(|g| {
        let w = g.constant(Tensor::f32(&[1, 1, 1, 1], vec![1.0]));
        g.conv2d(g.input("x", f32s(&[1, 2, 2])), w, None, Conv2dParams::default())
    });
    assert!(matches!(conv3, GraphErrorKind::RankMismatch { found: 3, .. }));
    let lin_w = kind(|g| g.linear(g.input("x", f32s(&[2, 3])), g.constant(Tensor::f32(&[3], vec![0.0; 3])), None));
    assert!(matches!(lin_w, GraphErrorKind::RankMismatch { found: 1, .. }));
    let lin_x = kind(|g| g.linear(g.scalar(1.0), g.constant(Tensor::f32(&[1, 1], vec![0.0])), None));
    assert!(matches!(lin_x, GraphErrorKind::RankMismatch { found: 0, .. }));
}

#[test]
fn dtypes() {
    let e = kind(|g| g.add(g.input("a", f32s(&[2])), g.input("b", TensorSpec::f16(&[2]))));
    assert_eq!(e, GraphErrorKind::DtypeMismatch { expected: ElemType::F32, found: ElemType::F16 });
    let e = kind(|g| g.quantize(g.input("a", TensorSpec::f16(&[2])), 0.5, 0));
    assert_eq!(e, GraphErrorKind::DtypeMismatch { expected: ElemType::F32, found: ElemType::F16 });
    let e = kind(|g| g.dequantize(g.input("a", f32s(&[2])), 0.5, 0));
    assert_eq!(e, GraphErrorKind::DtypeMismatch { expected: ElemType::Qs8, found: ElemType::F32 });
    let e = kind(|g| {
        let w = g.constant(Tensor::from_f64(&[1, 2], ElemType::Bf16, None, &[1.0, 1.0]));
        g.linear(g.input("x", f32s(&[2])), w, None)
    });
    assert_eq!(e, GraphErrorKind::DtypeMismatch { expected: ElemType::F32, found: ElemType::Bf16 });
    let q = QuantParams::new(0.5, 0);
    let qs8 = || TensorSpec::qs8(&[2], q);
    assert_eq!(kind(|g| g.square(g.input("q", qs8()))), GraphErrorKind::UnsupportedDtype { dtype: ElemType::Qs8 });
    assert_eq!(
        kind(|g| g.mean(g.input("q", qs8()), &[], false)),
        GraphErrorKind::UnsupportedDtype { dtype: ElemType::Qs8 }
    );
    assert_eq!(
        kind(|g| g.mean_dtype(g.input("x", f32s(&[2])), &[], false, ElemType::Qs8)),
        GraphErrorKind::UnsupportedDtype { dtype: ElemType::Qs8 }
    );
    assert_eq!(
        kind(|g| g.to_dtype(g.input("x", f32s(&[2])), ElemType::Qs8)),
        GraphErrorKind::UnsupportedDtype { dtype: ElemType::Qs8 }
    );
    assert_eq!(
        kind(|g| g.add(g.input("q", qs8()), g.input("r", qs8()))),
        GraphErrorKind::UnsupportedDtype { dtype: ElemType::Qs8 }
    );
}

#[test]
fn quant_params() {
    let x = || f32s(&[2]);
    for s in [0.0, -1.0, f32::NAN, f32::INFINITY, -0.0] {
        let e = kind(|g| g.quantize(g.input("x", x()), s, 0));
        assert!(matches!(e, GraphErrorKind::BadQuantScale { .. }), "scale {s}: {e:?}");
        let e = kind(|g| g.input("q", TensorSpec::qs8(&[2], QuantParams::new(s, 0))));
        assert!(matches!(e, GraphErrorKind::BadQuantScale { .. }));
    }
    assert_eq!(kind(|g| g.quantize(g.input("x", x()), 0.5, 128)), GraphErrorKind::BadZeroPoint { zero_point: 128 });
    assert_eq!(kind(|g| g.quantize(g.input("x", x()), 0.5, -129)), GraphErrorKind::BadZeroPoint { zero_point: -129 });
    // Edges of int8 are fine.
    for zp in [-128, 127] {
        let g = GraphBuilder::new();
        let q = g.quantize(g.input("x", x()), 0.5, zp);
        assert!(g.finish(&[q]).is_ok());
    }
    let e = kind(|g| g.dequantize(g.quantize(g.input("x", x()), 0.5, 0), 0.25, 0));
    assert_eq!(e, GraphErrorKind::QuantParamsMismatch);
    let e = kind(|g| g.input("x", TensorSpec { quant: Some(QuantParams::new(1.0, 0)), ..x() }));
    assert_eq!(e, GraphErrorKind::QuantParamsMismatch);
    let e = kind(|g| g.input("x", TensorSpec { quant: None, ..TensorSpec::qs8(&[2], QuantParams::new(1.0, 0)) }));
    assert_eq!(e, GraphErrorKind::QuantParamsMismatch);
    assert_eq!(e.class(), ErrorClass::Quant);
}

fn conv_err(x: &[usize], w: &[usize], bias: Option<usize>, p: Conv2dParams) -> GraphErrorKind {
    kind(|g| {
        let n: usize = w.iter().product();
        let wc = g.constant(Tensor::f32(w, vec![1.0; n]));
        let b = bias.map(|o| g.constant(Tensor::f32(&[o], vec![0.0; o])));
        g.conv2d(g.input("x", f32s(x)), wc, b, p)
    })
}

#[test]
fn conv_params() {
    let p = Conv2dParams::default();
    assert_eq!(
        conv_err(&[1, 3, 4, 4], &[4, 2, 1, 1], None, p),
        GraphErrorKind::ConvChannelMismatch { input_channels: 3, weight_channels: 2, groups: 1 }
    );
    assert_eq!(
        conv_err(&[1, 4, 4, 4], &[4, 1, 1, 1], None, Conv2dParams { groups: 2, ..p }),
        GraphErrorKind::ConvChannelMismatch { input_channels: 4, weight_channels: 1, groups: 2 }
    );
    assert!(matches!(
        conv_err(&[1, 3, 4, 4], &[4, 1, 1, 1], None, Conv2dParams { groups: 2, ..p }),
        GraphErrorKind::ConvGroupMismatch { channels: 3, groups: 2, .. }
    ));
    assert!(matches!(
        conv_err(&[1, 4, 4, 4], &[3, 2, 1, 1], None, Conv2dParams { groups: 2, ..p }),
        GraphErrorKind::ConvGroupMismatch { channels: 3, groups: 2, .. }
    ));
    for bad in
        [Conv2dParams { groups: 0, ..p }, Conv2dParams { stride: [1, 0], ..p }, Conv2dParams { dilation: [0, 1], ..p }]
    {
        assert!(matches!(conv_err(&[1, 2, 4, 4], &[2, 2, 1, 1], None, bad), GraphErrorKind::BadConvParams { .. }));
    }
    // Kernel larger than the padded input; with padding it fits.
    assert!(matches!(conv_err(&[1, 1, 2, 2], &[1, 1, 3, 3], None, p), GraphErrorKind::BadConvParams { .. }));
    assert!(matches!(
        conv_err(&[1, 1, 2, 2], &[1, 1, 3, 5], None, Conv2dParams { padding: [1, 1], ..p }),
        GraphErrorKind::BadConvParams { .. }
    ));
    assert!(matches!(
        conv_err(&[1, 1, 3, 3], &[1, 1, 2, 2], None, Conv2dParams { dilation: [3, 1], ..p }),
        GraphErrorKind::BadConvParams { .. }
    ));
    assert_eq!(
        conv_err(&[1, 2, 4, 4], &[3, 2, 1, 1], Some(2), p),
        GraphErrorKind::ShapeMismatch { expected: vec![3], found: vec![2] }
    );
}

#[test]
fn shapes() {
    let e = kind(|g| g.add(g.input("a", f32s(&[2, 3])), g.input("b", f32s(&[4]))));
    assert_eq!(e, GraphErrorKind::NotBroadcastable { a: vec![2, 3], b: vec![4] });
    let e = kind(|g| g.mul(g.input("a", f32s(&[2, 1, 3])), g.input("b", f32s(&[2, 2]))));
    assert!(matches!(e, GraphErrorKind::NotBroadcastable { .. }));
    let e = kind(|g| g.linear(g.input("x", f32s(&[2, 3])), g.constant(Tensor::f32(&[4, 2], vec![0.0; 8])), None));
    assert!(matches!(e, GraphErrorKind::ShapeMismatch { .. }));
    let e = kind(|g| {
        let w = g.constant(Tensor::f32(&[4, 3], vec![0.0; 12]));
        g.linear(g.input("x", f32s(&[2, 3])), w, Some(g.constant(Tensor::f32(&[3], vec![0.0; 3]))))
    });
    assert_eq!(e, GraphErrorKind::ShapeMismatch { expected: vec![4], found: vec![3] });
    let reshape = |to: &'static [i64]| kind(move |g| g.reshape(g.input("x", f32s(&[2, 3])), to));
    for to in [&[4, -1][..], &[-1, -1], &[0, 6], &[-2, 3], &[5]] {
        assert!(matches!(reshape(to), GraphErrorKind::BadReshape { .. }), "{to:?}");
    }
    assert_eq!(kind(|g| g.input("x", f32s(&[2, 0]))), GraphErrorKind::ZeroSizedDim { dim: 1 });
    assert!(matches!(kind(|g| g.input("x", f32s(&[1 << 15, 1 << 15]))), GraphErrorKind::TooLarge { .. }));
    // Broadcasting that would exceed the element limit.
    let e = kind(|g| g.add(g.input("a", f32s(&[1 << 14, 1])), g.input("b", f32s(&[1 << 15]))));
    assert!(matches!(e, GraphErrorKind::TooLarge { .. }));
    let e = kind(|g| g.constant(Tensor::f32(&[2, 2], vec![1.0; 3])));
    assert_eq!(e, GraphErrorKind::DataLength { expected: 4, found: 3 });
}

#[test]
fn formats() {
    let e = kind(|g| g.input("x", f32s(&[2, 3, 4]).with_format(MemoryFormat::ChannelsLast)));
    assert_eq!(e, GraphErrorKind::FormatRankMismatch { format: MemoryFormat::ChannelsLast, rank: 3 });
    let e = kind(|g| g.to_format(g.input("x", f32s(&[1, 2, 3, 4])), MemoryFormat::ChannelsLast3d));
    assert_eq!(e, GraphErrorKind::FormatRankMismatch { format: MemoryFormat::ChannelsLast3d, rank: 4 });
    let e = kind(|g| g.constant(Tensor { format: MemoryFormat::ChannelsLast, ..Tensor::f32(&[2], vec![1.0, 2.0]) }));
    assert!(matches!(e, GraphErrorKind::FormatRankMismatch { .. }));
    // FormatMismatch comes from binding a tensor of the wrong format (see ops.rs).
    let spec = f32s(&[1, 1, 1, 1]).channels_last();
    assert_eq!(
        spec.check_tensor(&Tensor::f32(&[1, 1, 1, 1], vec![0.0])),
        Err(GraphErrorKind::FormatMismatch { expected: MemoryFormat::ChannelsLast, found: MemoryFormat::Contiguous })
    );
}

#[test]
fn dynamic_dims() {
    let dynx = || f32s(&[2, 8]).dynamic(1);
    let e = kind(|g| g.reshape(g.input("x", dynx()), &[-1]));
    assert!(matches!(e, GraphErrorKind::DynamicUnsupported { .. }));
    let e = kind(|g| g.linear(g.input("x", dynx()), g.constant(Tensor::f32(&[1, 8], vec![0.0; 8])), None));
    assert!(matches!(e, GraphErrorKind::DynamicUnsupported { .. }));
    let e = kind(|g| {
        let w = g.constant(Tensor::f32(&[1, 2, 1, 1], vec![0.0; 2]));
        g.conv2d(g.input("x", f32s(&[1, 2, 3, 3]).dynamic(1)), w, None, Conv2dParams::default())
    });
    assert!(matches!(e, GraphErrorKind::DynamicUnsupported { .. }));
    assert_eq!(e.class(), ErrorClass::Dynamic);

    // Above the bound at run time, through `concrete_specs` and through `check_inputs`.
    let g = GraphBuilder::new();
    let x = g.input("x", dynx());
    let m = g.mean(x, &[-1], false);
    let graph = g.finish(&[m]).unwrap();
    let specs = graph.concrete_specs(&[vec![2, 5]]).unwrap();
    assert_eq!(specs[1].max_shape(), vec![2]);
    let e = graph.concrete_specs(&[vec![2, 9]]).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::DynamicAboveBound { dim: 1, size: 9, bound: 8 });
    assert_eq!(e.node, 0);
    let e = graph.check_inputs(&[Tensor::f32(&[2, 9], vec![0.0; 18])]).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::DynamicAboveBound { dim: 1, size: 9, bound: 8 });
    // A dynamic conv spatial size resolves at run time.
    let g = GraphBuilder::new();
    let x = g.input("x", f32s(&[1, 1, 6, 6]).dynamic(2));
    let w = g.constant(Tensor::f32(&[1, 1, 3, 3], vec![1.0; 9]));
    let y = g.conv2d(x, w, None, Conv2dParams::default());
    let graph = g.finish(&[y]).unwrap();
    assert_eq!(graph.nodes[2].spec.shape[2], Dim::upto(4));
    assert_eq!(graph.concrete_specs(&[vec![1, 1, 4, 6]]).unwrap()[2].max_shape(), vec![1, 1, 2, 4]);
    let e = graph.concrete_specs(&[vec![1, 1, 2, 6]]).unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::BadConvParams { .. }));
}

#[test]
fn clamp_and_structure() {
    let x = || f32s(&[2]);
    assert!(matches!(kind(|g| g.clamp(g.input("x", x()), None, None)), GraphErrorKind::BadClamp { .. }));
    assert!(matches!(kind(|g| g.hardtanh(g.input("x", x()), 1.0, -1.0)), GraphErrorKind::BadClamp { .. }));
    assert!(matches!(kind(|g| g.clamp(g.input("x", x()), Some(f32::NAN), None)), GraphErrorKind::BadClamp { .. }));
    // Unknown handles: a value from another builder, or one not yet defined.
    let e = build_err(|g| g.add(g.input("x", x()), T(7)));
    assert_eq!(e.kind, GraphErrorKind::UnknownNode { id: 7 });
    assert_eq!((e.node, e.op.as_str()), (1, "add"));
    let g = GraphBuilder::new();
    assert_eq!(g.finish(&[]).unwrap_err().kind, GraphErrorKind::NoOutputs);
    let g = GraphBuilder::new();
    let _ = g.input("x", x());
    assert_eq!(g.finish(&[T(3)]).unwrap_err().kind, GraphErrorKind::UnknownNode { id: 3 });

    // Hand-made graphs: wrong input counts, forward references, non-input graph inputs.
    let input = Node { op: Op::Input { name: "x".into() }, inputs: vec![], spec: x() };
    let relu = |ins: Vec<usize>| Node { op: Op::Clamp { min: Some(0.0), max: None }, inputs: ins, spec: x() };
    let graph = |nodes: Vec<Node>, inputs: Vec<usize>| Graph { nodes, inputs, outputs: vec![0] };
    let e = graph(vec![input.clone(), relu(vec![0, 0])], vec![0]).validate().unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::WrongInputCount { found: 2, .. }));
    assert_eq!(e.node, 1);
    let e = graph(vec![input.clone(), relu(vec![1])], vec![0]).validate().unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::UnknownNode { id: 1 });
    let e = graph(vec![input.clone(), relu(vec![0])], vec![1]).validate().unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::WrongInputCount { .. }));
    let e = graph(vec![input.clone()], vec![0, 0]).validate().unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::WrongInputCount { found: 2, .. }));
    let e = graph(vec![Node { inputs: vec![0], ..input.clone() }], vec![0]).validate().unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::UnknownNode { .. } | GraphErrorKind::WrongInputCount { .. }));
    let mut bad = graph(vec![input.clone(), relu(vec![0])], vec![0]);
    bad.nodes[1].spec = f32s(&[3]);
    assert_eq!(bad.validate().unwrap_err().kind, GraphErrorKind::SpecMismatch);
    let e = graph(vec![input, relu(vec![0])], vec![0]).check_inputs(&[]).unwrap_err();
    assert!(matches!(e.kind, GraphErrorKind::WrongInputCount { found: 0, .. }));
}

#[test]
fn errors_name_the_node_and_op() {
    let g = GraphBuilder::new();
    let x = g.input("x", f32s(&[2, 3]));
    let y = g.relu(x);
    let bad = g.mean(y, &[5], false);
    let later = g.add(bad, g.input("z", f32s(&[9]))); // a later error is not the one reported
    let e = g.finish(&[later]).unwrap_err();
    assert_eq!((e.node, e.op.as_str()), (2, "mean.dim"));
    assert_eq!(e.to_string(), "node 2 (mean.dim): dim 5 out of range for rank 2");
}

// ----------------------------------------------------------------------------------------
// Arbitrary builder calls never panic; whatever builds also runs without panicking.
// ----------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Call {
    Input(Vec<usize>, ElemType, bool, i32, bool),
    Constant(Vec<usize>, ElemType),
    Mean(usize, Vec<i64>, bool, Option<ElemType>),
    Conv(usize, usize, Option<usize>, Conv2dParams),
    Binary(u8, usize, usize),
    Square(usize),
    Rsqrt(usize),
    Clamp(usize, Option<f32>, Option<f32>),
    Linear(usize, usize, Option<usize>),
    Quantize(usize, f32, i32),
    Dequantize(usize, f32, i32),
    ToCopy(usize, Option<ElemType>, Option<MemoryFormat>),
    Reshape(usize, Vec<i64>),
    Permute(usize, Vec<i64>),
}

/// Mostly fp32, so that more random graphs type-check and get run.
fn elem() -> impl Strategy<Value = ElemType> {
    prop_oneof![4 => Just(ElemType::F32), 1 => Just(ElemType::F16), 1 => Just(ElemType::Bf16), 1 => Just(ElemType::Qs8)]
}

fn call() -> impl Strategy<Value = Call> {
    // Handles below 40 pick an existing value (modulo); 40.. is a raw, usually unknown id.
    let h = prop_oneof![19 => 0usize..40, 1 => 40usize..44];
    let dim = prop_oneof![12 => 1usize..4, 1 => Just(0usize)];
    let shape = prop_oneof![12 => prop::collection::vec(dim.clone(), 0..=5), 1 => prop::collection::vec(dim, 6..=7)];
    let dims = prop::collection::vec(-8i64..8, 0..5);
    let bound = prop::option::of(prop::sample::select(vec![0.0f32, -1.0, 1.0, 6.0, f32::NAN, f32::INFINITY]));
    let scale = prop::sample::select(vec![0.5f32, 0.0, -1.0, f32::NAN, 1e-3]);
    let zp = -130i32..130;
    let params = (0usize..3, 0usize..3, 0usize..3, 0usize..3).prop_map(|(s, p, d, g)| Conv2dParams {
        stride: [s, s.max(1)],
        padding: [p, 0],
        dilation: [d.max(1), d],
        groups: g,
    });
    let fmt = prop::option::of(prop::sample::select(vec![
        MemoryFormat::Contiguous,
        MemoryFormat::ChannelsLast,
        MemoryFormat::ChannelsLast3d,
    ]));
    prop_oneof![
        (shape.clone(), elem(), any::<bool>(), zp.clone(), any::<bool>())
            .prop_map(|(s, e, d, z, c)| Call::Input(s, e, d, z, c)),
        (shape, elem()).prop_map(|(s, e)| Call::Constant(s, e)),
        (h.clone(), dims.clone(), any::<bool>(), prop::option::of(elem()))
            .prop_map(|(x, d, k, t)| Call::Mean(x, d, k, t)),
        (h.clone(), h.clone(), prop::option::of(h.clone()), params).prop_map(|(x, w, b, p)| Call::Conv(x, w, b, p)),
        (0u8..4, h.clone(), h.clone()).prop_map(|(o, a, b)| Call::Binary(o, a, b)),
        h.clone().prop_map(Call::Square),
        h.clone().prop_map(Call::Rsqrt),
        (h.clone(), bound.clone(), bound).prop_map(|(x, a, b)| Call::Clamp(x, a, b)),
        (h.clone(), h.clone(), prop::option::of(h.clone())).prop_map(|(x, w, b)| Call::Linear(x, w, b)),
        (h.clone(), scale.clone(), zp.clone()).prop_map(|(x, s, z)| Call::Quantize(x, s, z)),
        (h.clone(), scale, zp).prop_map(|(x, s, z)| Call::Dequantize(x, s, z)),
        (h.clone(), prop::option::of(elem()), fmt).prop_map(|(x, d, f)| Call::ToCopy(x, d, f)),
        (h.clone(), dims.clone()).prop_map(|(x, d)| Call::Reshape(x, d)),
        (h, dims).prop_map(|(x, d)| Call::Permute(x, d)),
    ]
}

fn apply(g: &GraphBuilder, c: &Call, made: &mut Vec<T>) {
    let t = |i: usize| if i < 40 && !made.is_empty() { made[i % made.len()] } else { T(i) };
    let out = match c {
        Call::Input(s, e, dynamic, zp, cl) => {
            let mut spec = TensorSpec::new(*e, s);
            if *e == ElemType::Qs8 {
                spec.quant = Some(QuantParams::new(0.5, *zp));
            }
            if *dynamic {
                spec = spec.dynamic(0);
            }
            // Mostly only where the format fits the rank (otherwise FormatRankMismatch).
            if *cl && (matches!(s.len(), 4 | 5) || zp % 8 == 0) {
                spec = spec.channels_last();
            }
            g.input("x", spec)
        }
        Call::Constant(s, e) => {
            let q = (*e == ElemType::Qs8).then(|| QuantParams::new(0.5, 0));
            let n = s.iter().product::<usize>();
            g.constant(Tensor::from_f64(s, *e, q, &(0..n).map(|i| i as f64 - 2.0).collect::<Vec<_>>()))
        }
        Call::Mean(x, d, k, None) => g.mean(t(*x), d, *k),
        Call::Mean(x, d, k, Some(dt)) => g.mean_dtype(t(*x), d, *k, *dt),
        Call::Conv(x, w, b, p) => g.conv2d(t(*x), t(*w), b.map(t), *p),
        Call::Binary(o, a, b) => match o {
            0 => g.add(t(*a), t(*b)),
            1 => g.sub(t(*a), t(*b)),
            2 => g.mul(t(*a), t(*b)),
            _ => g.div(t(*a), t(*b)),
        },
        Call::Square(x) => g.square(t(*x)),
        Call::Rsqrt(x) => g.rsqrt(t(*x)),
        Call::Clamp(x, a, b) => g.clamp(t(*x), *a, *b),
        Call::Linear(x, w, b) => g.linear(t(*x), t(*w), b.map(t)),
        Call::Quantize(x, s, z) => g.quantize(t(*x), *s, *z),
        Call::Dequantize(x, s, z) => g.dequantize(t(*x), *s, *z),
        Call::ToCopy(x, d, f) => g.push_to_copy(t(*x), *d, *f),
        Call::Reshape(x, d) => g.reshape(t(*x), d),
        Call::Permute(x, d) => g.permute(t(*x), d),
    };
    made.push(out);
}

/// `to_copy` with both arguments optional, through the public builder calls.
trait ToCopyExt {
    fn push_to_copy(&self, x: T, d: Option<ElemType>, f: Option<MemoryFormat>) -> T;
}

impl ToCopyExt for GraphBuilder {
    fn push_to_copy(&self, x: T, d: Option<ElemType>, f: Option<MemoryFormat>) -> T {
        match (d, f) {
            (Some(d), Some(f)) => self.to_format(self.to_dtype(x, d), f),
            (Some(d), None) => self.to_dtype(x, d),
            (None, Some(f)) => self.to_format(x, f),
            (None, None) => self.to_dtype(x, ElemType::F32),
        }
    }
}

/// Replays `calls` on a fresh builder; returns it with the handle of every call.
fn replay(calls: &[&Call]) -> (GraphBuilder, Vec<T>) {
    let g = GraphBuilder::new();
    let mut made = Vec::new();
    for c in calls {
        apply(&g, c, &mut made);
    }
    (g, made)
}

/// A built graph must validate and run on generated inputs, giving outputs of its specs.
fn check_runs(graph: &Graph, seed: u64, specials: bool) -> Result<(), TestCaseError> {
    prop_assert!(graph.validate().is_ok());
    let opts = DataOptions { specials, ..DataOptions::default() };
    let inputs = generate_inputs(graph, &[], seed, &opts);
    let outs = reference::eval::run(graph, &inputs);
    let outs = outs.map_err(|e| TestCaseError::fail(format!("valid graph failed to run: {e}")))?;
    prop_assert_eq!(outs.len(), graph.outputs.len());
    for (o, &id) in outs.iter().zip(&graph.outputs) {
        let spec = &graph.nodes[id].spec;
        prop_assert_eq!(TensorSpec::of(o), spec.concretize(&spec.max_shape()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Raw sequences (most hit an error somewhere), then the same calls with every call that
    /// makes the graph invalid dropped, so deep valid graphs get built and run too.
    #[test]
    fn arbitrary_builder_calls_never_panic(
        first in (prop::collection::vec(1usize..4, 0..=5), elem(), any::<bool>(), -128i32..128, any::<bool>())
            .prop_map(|(s, e, d, z, c)| Call::Input(s, e, d, z, c)),
        calls in prop::collection::vec(call(), 0..12),
        outs in prop::collection::vec(0usize..40, 0..4),
        seed in any::<u64>(),
        specials in any::<bool>(),
    ) {
        let all: Vec<&Call> = std::iter::once(&first).chain(&calls).collect();
        let (g, made) = replay(&all);
        // Mostly the last values made (the interesting ones), sometimes none (NoOutputs).
        let pick = |made: &[T]| -> Vec<T> { outs.iter().map(|&i| made[made.len() - 1 - i % made.len().min(3)]).collect() };
        match g.finish(&pick(&made)) {
            Ok(graph) => check_runs(&graph, seed, specials)?,
            Err(e) => {
                // Every error is typed and printable.
                prop_assert!(!e.to_string().is_empty());
                let _ = e.kind.class();
            }
        }

        let mut kept = vec![&first];
        let (g, made) = replay(&kept);
        if g.finish(&made).is_err() {
            return Ok(()); // the first input itself is invalid: nothing to build on
        }
        for c in &calls {
            kept.push(c);
            let (g, made) = replay(&kept);
            if g.finish(&[*made.last().unwrap()]).is_err() {
                kept.pop();
            }
        }
        let (g, made) = replay(&kept);
        let mut outputs = pick(&made);
        outputs.push(*made.last().unwrap());
        match g.finish(&outputs) {
            Ok(graph) => check_runs(&graph, seed, specials)?,
            Err(e) => prop_assert!(false, "graph of kept calls rejected: {}", e),
        }
    }
}

// ----------------------------------------------------------------------------------------
// Hand-made (e.g. deserialized) graphs: validate and run never panic on any structure.
// ----------------------------------------------------------------------------------------

fn any_op() -> impl Strategy<Value = Op> {
    let dims = prop::collection::vec(-7i64..7, 0..4);
    let q = (prop::sample::select(vec![0.5f32, 0.0, f32::NAN]), -130i32..130).prop_map(|(s, z)| QuantParams::new(s, z));
    prop_oneof![
        Just(Op::Input { name: "x".into() }),
        (prop::collection::vec(1usize..3, 0..4), elem()).prop_map(|(s, e)| {
            let n = s.iter().product::<usize>();
            let q = (e == ElemType::Qs8).then(|| QuantParams::new(0.5, 0));
            Op::Constant { tensor: Tensor::from_f64(&s, e, q, &vec![1.5; n]) }
        }),
        (dims.clone(), any::<bool>(), prop::option::of(elem())).prop_map(|(d, k, t)| Op::Mean {
            dims: d,
            keepdim: k,
            dtype: t
        }),
        (0usize..3, 0usize..2, 1usize..3).prop_map(|(s, p, g)| Op::Conv2d(Conv2dParams {
            stride: [s, 1],
            padding: [p, p],
            dilation: [1, 1],
            groups: g
        })),
        prop::sample::select(vec![
            reference::graph::BinaryOp::Add,
            reference::graph::BinaryOp::Sub,
            reference::graph::BinaryOp::Mul,
            reference::graph::BinaryOp::Div
        ])
        .prop_map(Op::Binary),
        Just(Op::Square),
        Just(Op::Rsqrt),
        Just(Op::Clamp { min: Some(0.0), max: None }),
        Just(Op::Linear),
        q.clone().prop_map(Op::Quantize),
        q.prop_map(Op::Dequantize),
        (prop::option::of(elem()), prop::option::of(Just(MemoryFormat::ChannelsLast)))
            .prop_map(|(d, f)| Op::ToCopy { dtype: d, format: f }),
        dims.clone().prop_map(|s| Op::Reshape { shape: s }),
        dims.prop_map(|p| Op::Permute { perm: p }),
    ]
}

fn any_spec() -> impl Strategy<Value = TensorSpec> {
    (prop::collection::vec(1usize..3, 0..5), elem(), any::<bool>(), any::<bool>()).prop_map(|(s, e, d, cl)| {
        let mut spec = TensorSpec::new(e, &s);
        if e == ElemType::Qs8 {
            spec.quant = Some(QuantParams::new(0.5, 1));
        }
        if d {
            spec = spec.dynamic(0);
        }
        if cl && s.len() == 4 {
            spec = spec.channels_last();
        }
        spec
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn hand_made_graphs_never_panic(
        nodes in prop::collection::vec((any_op(), prop::collection::vec(0usize..12, 1..4), any_spec(), any::<u8>()), 1..10),
        shuffle in any::<u64>(),
        outputs in prop::collection::vec(0usize..12, 0..3),
        seed in any::<u64>(),
    ) {
        let n = nodes.len();
        let outputs = outputs.iter().map(|&o| if shuffle % 17 == 0 { o } else { o % n }).collect();
        let mut graph = Graph { nodes: vec![], inputs: vec![], outputs };
        for (k, (op, raw_inputs, spec, mode)) in nodes.into_iter().enumerate() {
            // Mostly start from a graph input, so that later nodes have something to use.
            let op = if k == 0 && mode % 9 != 0 { Op::Input { name: "x".into() } } else { op };
            // Mostly well-formed references to earlier nodes, sometimes anything.
            let arity = match op {
                Op::Input { .. } | Op::Constant { .. } => 0,
                Op::Binary(_) => 2,
                Op::Conv2d(_) | Op::Linear => 2 + (mode as usize / 16) % 2,
                _ => 1,
            };
            let inputs: Vec<usize> = if mode % 9 == 0 {
                raw_inputs
            } else if k == 0 {
                vec![]
            } else {
                raw_inputs.iter().cycle().take(arity).map(|&i| i % k).collect()
            };
            // Mostly the inferred spec (so validation gets further), sometimes a random one.
            let spec = if matches!(op, Op::Input { .. }) || mode % 7 == 0 || inputs.iter().any(|&i| i >= k) {
                spec
            } else {
                let ins: Vec<&TensorSpec> = inputs.iter().map(|&i| &graph.nodes[i].spec).collect();
                reference::graph::infer(&op, &ins).unwrap_or(spec)
            };
            if matches!(op, Op::Input { .. }) && mode % 11 != 0 {
                graph.inputs.push(k);
            }
            graph.nodes.push(Node { op, inputs, spec });
        }
        if shuffle % 3 == 0 && graph.inputs.len() > 1 {
            graph.inputs.swap(0, 1);
        }
        if shuffle % 13 == 0 {
            if let Some(&first) = graph.inputs.first() {
                graph.inputs.push(first);
            }
        }
        let valid = graph.validate();
        let inputs = generate_inputs(&graph, &[], seed, &DataOptions { specials: shuffle % 2 == 0, ..DataOptions::default() });
        let result = reference::eval::run(&graph, &inputs);
        match valid {
            Ok(()) => {
                let outs = result.map_err(|e| TestCaseError::fail(format!("valid graph failed: {e}")))?;
                prop_assert_eq!(outs.len(), graph.outputs.len());
                let _ = reference::eval::run_all(&graph, &inputs).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Err(e) => {
                let is_invalid = matches!(&result, Err(reference::eval::EvalError::InvalidGraph(_)));
                prop_assert!(is_invalid, "validate said {} but run gave {:?}", e, result.map(|o| o.len()));
            }
        }
        // Arbitrary (mismatched) inputs give a typed error, not a panic.
        let wrong = vec![Tensor::f32(&[2, 2], vec![0.0; 4]); (shuffle % 3) as usize];
        let _ = reference::eval::run(&graph, &wrong);
    }
}
