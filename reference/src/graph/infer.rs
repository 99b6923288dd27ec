//! Shape and dtype inference: what each op produces, one function per op. The single
//! definition of every node's spec (validation, the builder and concrete specs call it).

use super::dims::{broadcast, mean_axes_mask, normalize_dims};
use super::spec::check_quant;
use super::{check_spec, Conv2dParams, Dim, GraphErrorKind, Op, TensorSpec, MAX_RANK};
use crate::dtype::{ElemType, MemoryFormat, QuantParams};
use crate::tensor::Tensor;

use GraphErrorKind as E;

/// Shape and dtype inference for one op: the single definition of what it produces.
pub fn infer(op: &Op, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    for s in inputs {
        check_spec(s)?;
    }
    infer_from_valid(op, inputs)
}

/// [`infer`] for inputs known to pass [`check_spec`] (earlier nodes of a graph being
/// validated: each passed it, as an input or as the output of this function).
pub(crate) fn infer_from_valid(op: &Op, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    let out = match op {
        // Input specs are given, not inferred; `Graph::validate` checks them with `check_spec`.
        Op::Input { .. } => Err(E::WrongInputCount { expected: "0 (inputs are not inferred)".into(), found: 0 }),
        Op::Constant { tensor } => constant(tensor, inputs),
        Op::Mean { dims, keepdim, dtype } => mean(dims, *keepdim, *dtype, inputs),
        Op::AdaptiveAvgPool2d { output_size } => adaptive_avg_pool2d(*output_size, inputs),
        Op::Conv2d(p) => conv2d(p, inputs),
        Op::Binary(_) => binary(inputs),
        Op::Square | Op::Rsqrt => unary_float(inputs),
        Op::Clamp { min, max } => clamp(*min, *max, inputs),
        Op::Linear => linear(inputs),
        Op::Quantize(q) => quantize(*q, inputs),
        Op::Dequantize(q) => dequantize(*q, inputs),
        Op::ToCopy { dtype, format } => to_copy(*dtype, *format, inputs),
        Op::Reshape { shape } => reshape(shape, inputs),
        Op::Permute { perm } => permute(perm, inputs),
    }?;
    check_spec(&out)?;
    Ok(out)
}

fn want_inputs(inputs: &[&TensorSpec], lo: usize, hi: usize) -> Result<(), GraphErrorKind> {
    if inputs.len() < lo || inputs.len() > hi {
        let expected = if lo == hi { lo.to_string() } else { format!("{lo} to {hi}") };
        return Err(E::WrongInputCount { expected, found: inputs.len() });
    }
    Ok(())
}

fn want_float(s: &TensorSpec) -> Result<(), GraphErrorKind> {
    if s.dtype.is_float() {
        Ok(())
    } else {
        Err(E::UnsupportedDtype { dtype: s.dtype })
    }
}

fn same_dtype(a: &TensorSpec, b: &TensorSpec) -> Result<(), GraphErrorKind> {
    if a.dtype != b.dtype {
        return Err(E::DtypeMismatch { expected: a.dtype, found: b.dtype });
    }
    Ok(())
}

fn keep_format(first: &TensorSpec, rank: usize) -> MemoryFormat {
    if first.format.required_rank() == Some(rank) {
        first.format
    } else {
        MemoryFormat::Contiguous
    }
}

/// The spec of its tensor, whose data must fill its shape.
fn constant(tensor: &Tensor, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 0, 0)?;
    let s = TensorSpec::of(tensor);
    check_spec(&s)?;
    if tensor.data.len() != tensor.numel() {
        return Err(E::DataLength { expected: tensor.numel(), found: tensor.data.len() });
    }
    Ok(s)
}

/// `mean.dim`: the reduced dims dropped (or kept as 1 with `keepdim`), float only; the
/// output has `dtype` when given (a float).
/// Output size [1, 1] of a rank-3 or rank-4 float input: the spec of the H/W mean, keepdim.
fn adaptive_avg_pool2d(output_size: [usize; 2], inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    let x = inputs[0];
    want_float(x)?;
    if !matches!(x.rank(), 3 | 4) {
        return Err(E::RankMismatch { expected: "3 or 4".into(), found: x.rank() });
    }
    if output_size != [1, 1] {
        return Err(E::PoolOutputSize { output_size });
    }
    mean(&[-1, -2], true, None, inputs)
}

fn mean(
    dims: &[i64],
    keepdim: bool,
    dtype: Option<ElemType>,
    inputs: &[&TensorSpec],
) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    let x = inputs[0];
    want_float(x)?;
    if let Some(d) = dtype {
        if !d.is_float() {
            return Err(E::UnsupportedDtype { dtype: d });
        }
    }
    let axes = mean_axes_mask(dims, x.rank())?;
    let mut shape = Vec::with_capacity(x.rank());
    for (i, d) in x.shape.iter().enumerate() {
        if axes & (1 << i) != 0 {
            if keepdim {
                shape.push(Dim::fixed(1));
            }
        } else {
            shape.push(*d);
        }
    }
    let format = if keepdim { keep_format(x, shape.len()) } else { MemoryFormat::Contiguous };
    Ok(TensorSpec { shape, dtype: dtype.unwrap_or(x.dtype), quant: None, format })
}

/// 2-D convolution: x [N, C, H, W], w [O, C / groups, kh, kw], optional b [O]; output
/// [N, O, (H + 2 pad - dil (k - 1) - 1) / stride + 1, (same for W)].
fn conv2d(p: &Conv2dParams, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 2, 3)?;
    let (x, w) = (inputs[0], inputs[1]);
    want_float(x)?;
    same_dtype(x, w)?;
    if x.rank() != 4 {
        return Err(E::RankMismatch { expected: "4".into(), found: x.rank() });
    }
    if w.rank() != 4 {
        return Err(E::RankMismatch { expected: "4 (weight)".into(), found: w.rank() });
    }
    if w.is_dynamic() || x.shape[1].dynamic {
        return Err(E::DynamicUnsupported { what: "conv channels and weights".into() });
    }
    if p.groups == 0 || p.stride.contains(&0) || p.dilation.contains(&0) {
        return Err(E::BadConvParams { reason: format!("groups, stride and dilation must be >= 1: {p:?}") });
    }
    let (c, o) = (x.shape[1].size, w.shape[0].size);
    if c % p.groups != 0 {
        return Err(E::ConvGroupMismatch { what: "input channels".into(), channels: c, groups: p.groups });
    }
    if o % p.groups != 0 {
        return Err(E::ConvGroupMismatch { what: "output channels".into(), channels: o, groups: p.groups });
    }
    if w.shape[1].size * p.groups != c {
        return Err(E::ConvChannelMismatch { input_channels: c, weight_channels: w.shape[1].size, groups: p.groups });
    }
    if let Some(b) = inputs.get(2) {
        same_dtype(x, b)?;
        if b.max_shape() != [o] {
            return Err(E::ShapeMismatch { expected: vec![o], found: b.max_shape() });
        }
    }
    let mut shape = vec![x.shape[0], Dim::fixed(o)];
    for k in 0..2 {
        let (inp, ker) = (x.shape[2 + k], w.shape[2 + k].size);
        let span = p.dilation[k].checked_mul(ker - 1).and_then(|v| v.checked_add(1));
        let padded = inp.size.checked_add(2usize.saturating_mul(p.padding[k]));
        match (span, padded) {
            (Some(span), Some(padded)) if padded >= span => {
                shape.push(Dim { size: (padded - span) / p.stride[k] + 1, dynamic: inp.dynamic })
            }
            _ => return Err(E::BadConvParams { reason: format!("kernel larger than padded input in dim {}", 2 + k) }),
        }
    }
    Ok(TensorSpec { shape, dtype: x.dtype, quant: None, format: keep_format(x, 4) })
}

/// Elementwise add/sub/mul/div: equal float dtypes, broadcast shapes; the format of the
/// operand of the output's rank (the first when both are).
fn binary(inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 2, 2)?;
    let (a, b) = (inputs[0], inputs[1]);
    want_float(a)?;
    same_dtype(a, b)?;
    let shape = broadcast(&a.shape, &b.shape)?;
    let format = if a.rank() == shape.len() { keep_format(a, shape.len()) } else { keep_format(b, shape.len()) };
    Ok(TensorSpec { shape, dtype: a.dtype, quant: None, format })
}

/// square and rsqrt: the input's spec, float only.
fn unary_float(inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    want_float(inputs[0])?;
    Ok(inputs[0].clone())
}

/// clamp: the input's spec, float only; at least one bound, no NaN bound, min <= max.
fn clamp(min: Option<f32>, max: Option<f32>, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    want_float(inputs[0])?;
    let bad = min.is_some_and(f32::is_nan)
        || max.is_some_and(f32::is_nan)
        || matches!((min, max), (Some(a), Some(b)) if a > b)
        || (min.is_none() && max.is_none());
    if bad {
        return Err(E::BadClamp { min, max });
    }
    Ok(inputs[0].clone())
}

/// linear: x [..., K], w [N, K], optional b [N]; output [..., N], contiguous.
fn linear(inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 2, 3)?;
    let (x, w) = (inputs[0], inputs[1]);
    want_float(x)?;
    same_dtype(x, w)?;
    if x.rank() == 0 {
        return Err(E::RankMismatch { expected: "1 to 6".into(), found: 0 });
    }
    if w.rank() != 2 {
        return Err(E::RankMismatch { expected: "2 (weight)".into(), found: w.rank() });
    }
    let k = *x.shape.last().unwrap_or(&Dim::fixed(1));
    if k.dynamic || w.is_dynamic() {
        return Err(E::DynamicUnsupported { what: "linear in_features and weights".into() });
    }
    if w.shape[1].size != k.size {
        return Err(E::ShapeMismatch { expected: vec![w.shape[0].size, k.size], found: w.max_shape() });
    }
    let n = w.shape[0].size;
    if let Some(b) = inputs.get(2) {
        same_dtype(x, b)?;
        if b.max_shape() != [n] {
            return Err(E::ShapeMismatch { expected: vec![n], found: b.max_shape() });
        }
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().unwrap_or(&mut Dim::fixed(1)) = Dim::fixed(n);
    Ok(TensorSpec { shape, dtype: x.dtype, quant: None, format: MemoryFormat::Contiguous })
}

/// quantize_per_tensor: fp32 in, qs8 with `q` out, same shape and format.
fn quantize(q: QuantParams, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    check_quant(q)?;
    if inputs[0].dtype != ElemType::F32 {
        return Err(E::DtypeMismatch { expected: ElemType::F32, found: inputs[0].dtype });
    }
    Ok(TensorSpec { dtype: ElemType::Qs8, quant: Some(q), ..inputs[0].clone() })
}

/// dequantize_per_tensor: qs8 with exactly `q` in, fp32 out, same shape and format.
fn dequantize(q: QuantParams, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    check_quant(q)?;
    let x = inputs[0];
    if x.dtype != ElemType::Qs8 {
        return Err(E::DtypeMismatch { expected: ElemType::Qs8, found: x.dtype });
    }
    if x.quant != Some(q) {
        return Err(E::QuantParamsMismatch);
    }
    Ok(TensorSpec { dtype: ElemType::F32, quant: None, ..x.clone() })
}

/// _to_copy: another float dtype (never between float and qs8) and/or another memory
/// format of the input's rank.
fn to_copy(
    dtype: Option<ElemType>,
    format: Option<MemoryFormat>,
    inputs: &[&TensorSpec],
) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    let x = inputs[0];
    let dt = dtype.unwrap_or(x.dtype);
    if dt.is_float() != x.dtype.is_float() {
        // Changing between float and qs8 is quantize/dequantize, not a copy.
        return Err(E::UnsupportedDtype { dtype: dt });
    }
    let fmt = format.unwrap_or(x.format);
    if let Some(r) = fmt.required_rank() {
        if r != x.rank() {
            return Err(E::FormatRankMismatch { format: fmt, rank: x.rank() });
        }
    }
    Ok(TensorSpec { dtype: dt, format: fmt, ..x.clone() })
}

/// view_copy: the same element count, at most one -1 (inferred), static input; contiguous.
fn reshape(shape: &[i64], inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    let x = inputs[0];
    if x.is_dynamic() {
        return Err(E::DynamicUnsupported { what: "reshape".into() });
    }
    let n = x.max_numel();
    let bad = || E::BadReshape { from: x.max_shape(), to: shape.to_vec() };
    if shape.len() > MAX_RANK {
        return Err(E::RankTooHigh { rank: shape.len() });
    }
    let infer_at: Vec<usize> = shape.iter().enumerate().filter(|(_, &s)| s == -1).map(|(i, _)| i).collect();
    if infer_at.len() > 1 || shape.iter().any(|&s| s == 0 || s < -1) {
        return Err(bad());
    }
    let known = shape.iter().filter(|&&s| s > 0).try_fold(1usize, |a, &s| a.checked_mul(s as usize)).ok_or_else(bad)?;
    let mut dims: Vec<usize> = shape.iter().map(|&s| s.max(0) as usize).collect();
    if let Some(&i) = infer_at.first() {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(bad());
        }
        dims[i] = n / known;
    } else if known != n {
        return Err(bad());
    }
    Ok(TensorSpec { shape: dims.into_iter().map(Dim::fixed).collect(), format: MemoryFormat::Contiguous, ..x.clone() })
}

/// permute_copy: a permutation of every dim (negatives count from the end); contiguous.
fn permute(perm: &[i64], inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    want_inputs(inputs, 1, 1)?;
    let x = inputs[0];
    let bad = || E::BadPermute { perm: perm.to_vec(), rank: x.rank() };
    let p = normalize_dims(perm, x.rank()).map_err(|_| bad())?;
    if p.len() != x.rank() {
        return Err(bad());
    }
    Ok(TensorSpec { shape: p.iter().map(|&i| x.shape[i]).collect(), format: MemoryFormat::Contiguous, ..x.clone() })
}
