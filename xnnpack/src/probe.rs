//! The start-up probe: computes known results through the loaded build with the enum values
//! the compiler will use, and refuses the library when one disagrees.
//!
//! No header ships in the wheel, so the enum values are the public header's (operators in
//! [`Codes`], datatypes in [`crate::Datatype`]); a build whose enums moved (XNNPACK has inserted
//! members into `enum xnn_unary_operator` before) would silently compute something else. Each
//! value is checked by a subgraph whose result tells it apart from its neighbours: the mean
//! operator against the sum (`[1..4]` averages to 2.5, sums to 10), each binary and unary
//! operator on inputs where add, subtract, multiply, divide, square, square root, reciprocal
//! square root and clamp all differ, `XNN_FLAG_KEEP_DIMS` by the output's rank, and each
//! datatype by converting known fp32 values to its bits (fp16, bf16, qint8) or by a quantized
//! fully connected node whose integer result depends on reading qint8, qint32, qcint8 and
//! qcint32 data as such. Every probe graph goes through [`crate::compile`], the same path as
//! a payload.

use crate::compile::{compile, Segment};
use crate::Xnnpack;
use delegate::runtime::kernels::View;
use delegate::runtime::plan::Owned;
use delegate::xnn::{
    ConstantDataOffset, QuantParams, XNode, XNodeKind, XValue, XnnDatatype, XnnGraph, FLAG_KEEP_DIMS, INVALID_VALUE_ID,
    VALUE_FLAG_EXTERNAL_INPUT, VALUE_FLAG_EXTERNAL_OUTPUT,
};

/// The operator enum values the compiler passes, as in XNNPACK's `include/xnnpack.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codes {
    /// `xnn_reduce_mean` of `enum xnn_reduce_operator`.
    pub reduce_mean: i32,
    /// `enum xnn_binary_operator`.
    pub binary_add: i32,
    pub binary_subtract: i32,
    pub binary_multiply: i32,
    pub binary_divide: i32,
    /// `enum xnn_unary_operator`.
    pub unary_clamp: i32,
    pub unary_square: i32,
    pub unary_rsqrt: i32,
}

impl Codes {
    /// The header's values (reduce: sum 0, sum_squared 1, mean 2; binary: add, subtract,
    /// multiply, divide from 0; unary: abs 0, approxgelu, bankers_rounding, ceiling, clamp 4,
    /// ..., reciprocal_square_root 15, ..., square 19).
    pub const HEADER: Codes = Codes {
        reduce_mean: 2,
        binary_add: 0,
        binary_subtract: 1,
        binary_multiply: 2,
        binary_divide: 3,
        unary_clamp: 4,
        unary_square: 19,
        unary_rsqrt: 15,
    };
}

/// A probe that came out wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProbeError {
    #[error("{what}: expected {expected:?}, computed {got:?}")]
    Mismatch { what: String, expected: Vec<f64>, got: Vec<f64> },
    #[error("{what}: {refusal}")]
    Refused { what: String, refusal: String },
}

/// A probe graph under construction.
#[derive(Default)]
struct Probe {
    g: XnnGraph,
    inputs: u32,
}

impl Probe {
    fn new() -> Probe {
        let mut p = Probe::default();
        // Constant buffer 0 means "no data".
        p.g.constant_data.push(ConstantDataOffset { offset: 0, size: 0, named_key: None });
        p
    }

    fn value(&mut self, datatype: XnnDatatype, dims: &[u32], quant: Option<QuantParams>, role: Role) -> u32 {
        let id = self.g.values.len() as u32;
        let (external_id, flags, constant_buffer_idx) = match role {
            Role::Input => {
                self.inputs += 1;
                (self.inputs - 1, VALUE_FLAG_EXTERNAL_INPUT, 0)
            }
            Role::Output => (self.g.num_externs, VALUE_FLAG_EXTERNAL_OUTPUT, 0),
            Role::Const(bytes) => {
                let offset = self.g.constant_bytes.len().next_multiple_of(16);
                self.g.constant_bytes.resize(offset, 0);
                self.g.constant_bytes.extend_from_slice(&bytes);
                self.g.constant_data.push(ConstantDataOffset {
                    offset: offset as u64,
                    size: bytes.len() as u64,
                    named_key: None,
                });
                (INVALID_VALUE_ID, 0, self.g.constant_data.len() as u32 - 1)
            }
        };
        if external_id != INVALID_VALUE_ID {
            self.g.num_externs += 1;
        }
        self.g.values.push(XValue {
            datatype,
            dims: dims.to_vec(),
            constant_buffer_idx,
            external_id,
            flags,
            id_out: id,
            quant,
        });
        id
    }

    fn node(&mut self, kind: XNodeKind, output_min_max: Option<(f32, f32)>) {
        self.g.nodes.push(XNode { kind, debug_handle: 0, output_min_max });
    }

    /// Compiles and runs on one thread: the outputs and their dims.
    fn run(self, x: &Xnnpack, what: &str, inputs: &[(View, &[usize])]) -> Result<Vec<(Owned, Vec<usize>)>, ProbeError> {
        let refused = |r: crate::Refusal| ProbeError::Refused { what: what.to_string(), refusal: r.to_string() };
        let pool = x.pool(1).map_err(refused)?;
        let mut seg: Segment = compile(x, &self.g, inputs.len(), &pool, 0).map_err(refused)?;
        Ok(seg.run(inputs, &mut []).map_err(refused)?.into_iter().map(|o| (o.data, o.dims)).collect())
    }
}

enum Role {
    Input,
    Output,
    Const(Vec<u8>),
}

fn as_f64(o: &Owned) -> Vec<f64> {
    match o {
        Owned::F32(v) => v.iter().map(|&x| x as f64).collect(),
        Owned::F16(v) => v.iter().map(|x| x.to_bits() as f64).collect(),
        Owned::Bf16(v) => v.iter().map(|x| x.to_bits() as f64).collect(),
        Owned::I8(v) => v.iter().map(|&x| x as f64).collect(),
        Owned::I32(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

/// Equal within `rel` (relative), element by element, with the same length.
fn expect(what: &str, expected: &[f64], got: &[f64], rel: f64) -> Result<(), ProbeError> {
    let close = expected.len() == got.len()
        && expected.iter().zip(got).all(|(&e, &g)| (e - g).abs() <= rel * e.abs().max(f64::MIN_POSITIVE));
    if close {
        Ok(())
    } else {
        Err(ProbeError::Mismatch { what: what.to_string(), expected: expected.to_vec(), got: got.to_vec() })
    }
}

fn first(what: &str, mut outs: Vec<(Owned, Vec<usize>)>) -> Result<(Owned, Vec<usize>), ProbeError> {
    if outs.len() != 1 {
        return Err(ProbeError::Mismatch {
            what: format!("{what}: output count"),
            expected: vec![1.0],
            got: vec![outs.len() as f64],
        });
    }
    Ok(outs.remove(0))
}

/// A static mean over the last axis of [[1,2,3,4],[5,6,7,8]], with and without keep dims.
fn probe_mean(x: &Xnnpack) -> Result<(), ProbeError> {
    let data: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    for keep in [true, false] {
        let what =
            format!("xnn_reduce_mean = {}, XNN_FLAG_KEEP_DIMS = {FLAG_KEEP_DIMS:#x} ({keep})", x.codes().reduce_mean);
        let mut p = Probe::new();
        let i = p.value(XnnDatatype::Fp32, &[2, 4], None, Role::Input);
        let o = p.value(XnnDatatype::Fp32, if keep { &[2, 1] } else { &[2] }, None, Role::Output);
        let flags = if keep { FLAG_KEEP_DIMS } else { 0 };
        p.node(XNodeKind::StaticMean { reduction_axes: vec![1], input_id: i, output_id: o, flags }, None);
        let (out, dims) = first(&what, p.run(x, &what, &[(View::F32(&data), &[2, 4])])?)?;
        expect(&what, &[2.5, 6.5], &as_f64(&out), 0.0)?;
        let want: &[f64] = if keep { &[2.0, 1.0] } else { &[2.0] };
        expect(&format!("{what}: output dims"), want, &dims.iter().map(|&d| d as f64).collect::<Vec<_>>(), 0.0)?;
    }
    Ok(())
}

/// Each binary operator on a = [6, -3], b = [2, 4], and each unary one on [4, 0.25] (clamp
/// to [0.5, 1] on [-1, 0.75, 2]).
fn probe_elementwise(x: &Xnnpack) -> Result<(), ProbeError> {
    let c = *x.codes();
    let (a, b) = ([6.0f32, -3.0], [2.0f32, 4.0]);
    type Make = fn(u32, u32, u32) -> XNodeKind;
    let binary: [(&str, i32, Make, [f64; 2]); 4] = [
        (
            "xnn_binary_add",
            c.binary_add,
            |i, j, o| XNodeKind::Add { input1_id: i, input2_id: j, output_id: o, flags: 0 },
            [8.0, 1.0],
        ),
        (
            "xnn_binary_subtract",
            c.binary_subtract,
            |i, j, o| XNodeKind::Subtract { input1_id: i, input2_id: j, output_id: o, flags: 0 },
            [4.0, -7.0],
        ),
        (
            "xnn_binary_multiply",
            c.binary_multiply,
            |i, j, o| XNodeKind::Multiply { input1_id: i, input2_id: j, output_id: o, flags: 0 },
            [12.0, -12.0],
        ),
        (
            "xnn_binary_divide",
            c.binary_divide,
            |i, j, o| XNodeKind::Div { input1_id: i, input2_id: j, output_id: o, flags: 0 },
            [3.0, -0.75],
        ),
    ];
    for (name, code, make, want) in binary {
        let what = format!("{name} = {code}");
        let mut p = Probe::new();
        let i = p.value(XnnDatatype::Fp32, &[2], None, Role::Input);
        let j = p.value(XnnDatatype::Fp32, &[2], None, Role::Input);
        let o = p.value(XnnDatatype::Fp32, &[2], None, Role::Output);
        p.node(make(i, j, o), None);
        let (out, _) = first(&what, p.run(x, &what, &[(View::F32(&a), &[2]), (View::F32(&b), &[2])])?)?;
        expect(&what, &want, &as_f64(&out), 0.0)?;
    }
    type MakeU = fn(u32, u32) -> XNodeKind;
    type UnaryProbe = (&'static str, i32, MakeU, Vec<f32>, Vec<f64>);
    let unary: [UnaryProbe; 3] = [
        (
            "xnn_unary_square",
            c.unary_square,
            |i, o| XNodeKind::Square { input_id: i, output_id: o, flags: 0 },
            vec![4.0, 0.25],
            vec![16.0, 0.0625],
        ),
        (
            "xnn_unary_reciprocal_square_root",
            c.unary_rsqrt,
            |i, o| XNodeKind::ReciprocalSquareRoot { input_id: i, output_id: o, flags: 0 },
            vec![4.0, 0.25],
            vec![0.5, 2.0],
        ),
        (
            "xnn_unary_clamp",
            c.unary_clamp,
            |i, o| XNodeKind::Clamp { input_id: i, output_id: o, flags: 0 },
            vec![-1.0, 0.75, 2.0],
            vec![0.5, 0.75, 1.0],
        ),
    ];
    for (name, code, make, input, want) in unary {
        let what = format!("{name} = {code}");
        let n = input.len();
        let mut p = Probe::new();
        let i = p.value(XnnDatatype::Fp32, &[n as u32], None, Role::Input);
        let o = p.value(XnnDatatype::Fp32, &[n as u32], None, Role::Output);
        p.node(make(i, o), Some((0.5, 1.0)).filter(|_| name == "xnn_unary_clamp"));
        let (out, _) = first(&what, p.run(x, &what, &[(View::F32(&input), &[n])])?)?;
        // rsqrt may be computed to a few ulps; every other candidate is far off.
        expect(&what, &want, &as_f64(&out), 1e-5)?;
    }
    Ok(())
}

/// fp32 [1.5, -2, 0.1] converted to fp16, bf16 and qint8 (scale 0.5, zero point 1): the bits.
fn probe_converts(x: &Xnnpack) -> Result<(), ProbeError> {
    let input = [1.5f32, -2.0, 0.1];
    let cases: [(XnnDatatype, Option<QuantParams>, [f64; 3]); 3] = [
        (XnnDatatype::Fp16, None, [0x3E00 as f64, 0xC000 as f64, 0x2E66 as f64]),
        (XnnDatatype::Bf16, None, [0x3FC0 as f64, 0xC000 as f64, 0x3DCD as f64]),
        (XnnDatatype::Qint8, Some(QuantParams::PerTensor { scale: 0.5, zero_point: 1 }), [4.0, -3.0, 1.0]),
    ];
    for (dt, quant, want) in cases {
        let what = format!("{} = {} (fp32 -> it)", dt.name(), crate::compile::datatype(dt).map_or(0, |d| d as i32));
        let mut p = Probe::new();
        let i = p.value(XnnDatatype::Fp32, &[3], None, Role::Input);
        let o = p.value(dt, &[3], quant, Role::Output);
        p.node(XNodeKind::Convert { input_id: i, output_id: o, flags: 0 }, None);
        let (out, _) = first(&what, p.run(x, &what, &[(View::F32(&input), &[3])])?)?;
        expect(&what, &want, &as_f64(&out), 0.0)?;
    }
    Ok(())
}

/// A quantized fully connected node, per tensor (qint8 filter, qint32 bias) and per channel
/// (qcint8 filter, qcint32 bias): input [1, 2] (scale 1), filter [2, 3] at scale 0.5 (1, 1.5),
/// bias 2 at scale 0.5 (1); 1 + 3 + 1 = 5, quantized at scale 0.5 to 10.
fn probe_quantized(x: &Xnnpack) -> Result<(), ProbeError> {
    let per_tensor = |s: f32| Some(QuantParams::PerTensor { scale: s, zero_point: 0 });
    let per_channel =
        |s: f32| Some(QuantParams::PerChannel { scale: vec![s], channel_dim: 0, scale_buffer_idx: 0, num_scales: 1 });
    for channelwise in [false, true] {
        let (wdt, bdt, q): (_, _, &dyn Fn(f32) -> Option<QuantParams>) = if channelwise {
            (XnnDatatype::Qcint8, XnnDatatype::Qcint32, &per_channel)
        } else {
            (XnnDatatype::Qint8, XnnDatatype::Qint32, &per_tensor)
        };
        let what = format!("{} and {} (a quantized fully connected)", wdt.name(), bdt.name());
        let mut p = Probe::new();
        let i = p.value(XnnDatatype::Qint8, &[1, 2], per_tensor(1.0), Role::Input);
        let w = p.value(wdt, &[1, 2], q(0.5), Role::Const(vec![2, 3]));
        let b = p.value(bdt, &[1], q(0.5), Role::Const(2i32.to_le_bytes().to_vec()));
        let o = p.value(XnnDatatype::Qint8, &[1, 1], per_tensor(0.5), Role::Output);
        p.node(XNodeKind::FullyConnected { input1_id: i, filter_id: w, bias_id: b, output_id: o, flags: 0 }, None);
        let (out, _) = first(&what, p.run(x, &what, &[(View::I8(&[1, 2]), &[1, 2])])?)?;
        expect(&what, &[10.0], &as_f64(&out), 0.0)?;
    }
    Ok(())
}

/// Runs every probe with the library's codes.
pub fn check(x: &Xnnpack) -> Result<(), ProbeError> {
    probe_mean(x)?;
    probe_elementwise(x)?;
    probe_converts(x)?;
    probe_quantized(x)
}
