//! The per-op configs: whether a node may go to XNNPACK, and the reason when not.

use crate::lower::LowerOptions;
use crate::mutants::{is_active, Mutant};
use crate::LoweringMode;
use reference::graph::{mean_axes, normalize_dims, Graph, NodeId, Op, TensorSpec};
use reference::{ElemType, MemoryFormat};

pub(crate) fn is_op(op: &Op) -> bool {
    !matches!(op, Op::Input { .. } | Op::Constant { .. })
}

/// `is_global_avg_pool_mean` as merged: keepdim first, rank from the mean's own output,
/// dims normalizing to {2, 3}; bf16 never takes GAP.
pub fn is_gap(op: &Op, out: &TensorSpec) -> bool {
    let Op::Mean { dims, keepdim, .. } = op else { return false };
    if !*keepdim || out.rank() != 4 {
        return false;
    }
    let bf16_gap = is_active(Mutant::Bf16TakesGap);
    if out.dtype == ElemType::Bf16 && !bf16_gap {
        return false;
    }
    match normalize_dims(dims, 4) {
        Ok(mut d) => {
            d.sort_unstable();
            d == [2, 3]
        }
        Err(_) => false,
    }
}

pub(super) fn allowed(dt: ElemType, opts: &LowerOptions) -> bool {
    matches!(dt, ElemType::F32 | ElemType::F16) || (dt == ElemType::Bf16 && opts.enable_bf16)
}

pub(super) fn dtype_list(opts: &LowerOptions) -> &'static str {
    if opts.enable_bf16 {
        "fp32, fp16, bf16"
    } else {
        "fp32, fp16"
    }
}

/// ExecuTorch's `check_common_constraints`: every tensor input has an allowed dtype equal
/// to the first input's, and so has the output.
pub(super) fn common(g: &Graph, id: NodeId, opts: &LowerOptions) -> Result<(), String> {
    let n = &g.nodes[id];
    let name = n.op.name();
    let specs = n.inputs.iter().map(|&i| &g.nodes[i].spec).chain(std::iter::once(&n.spec));
    for s in specs.clone() {
        if s.format == MemoryFormat::ChannelsLast3d {
            return Err(format!("{name}: channels_last_3d tensors are not supported by the delegate"));
        }
    }
    if matches!(n.op, Op::Quantize(_) | Op::Dequantize(_)) {
        return Ok(());
    }
    let first = n.inputs.first().map(|&i| g.nodes[i].spec.dtype);
    for &i in &n.inputs {
        let dt = g.nodes[i].spec.dtype;
        if !allowed(dt, opts) {
            return Err(format!("{name}: input dtype {dt} not supported (the delegate takes {})", dtype_list(opts)));
        }
        if Some(dt) != first {
            return Err(format!("{name}: inputs have different dtypes"));
        }
    }
    if !allowed(n.spec.dtype, opts) {
        return Err(format!(
            "{name}: output dtype {} not supported (the delegate takes {})",
            n.spec.dtype,
            dtype_list(opts)
        ));
    }
    Ok(())
}

pub(super) fn is_const(g: &Graph, i: NodeId) -> bool {
    matches!(g.nodes[i].op, Op::Constant { .. })
}

/// A weight XNNPACK can take: a constant, or the dequantize of a qs8 constant (the latter
/// only inside a static-quant group, checked after grouping).
pub(super) fn static_weight(g: &Graph, i: NodeId) -> bool {
    is_const(g, i)
        || matches!(g.nodes[i].op, Op::Dequantize(_)) && g.nodes[i].inputs.first().is_some_and(|&c| is_const(g, c))
}

/// `MeanDimConfig`'s reason for a `dtype=` argument (ExecuTorch 1.5.1, word for word).
pub const DTYPE_REASON: &str = "mean.dim does not support dtype";

/// The per-op config: `Ok` if the node may be delegated, else the reason it stays outside.
pub fn check(g: &Graph, id: NodeId, opts: &LowerOptions) -> Result<(), String> {
    let n = &g.nodes[id];
    let in0 = n.inputs.first().map(|&i| &g.nodes[i].spec);
    match &n.op {
        Op::Input { .. } | Op::Constant { .. } => Err("not an op".into()),
        // `lower` decomposes it first (`decompose`): the partitioner sees its mean.dim.
        Op::AdaptiveAvgPool2d { .. } => {
            Err("adaptive_avg_pool2d: not decomposed to mean.dim before partitioning".into())
        }
        Op::Mean { dims, keepdim, dtype } => {
            common(g, id, opts)?;
            let x = in0.ok_or("mean.dim: no input")?;
            match opts.mode {
                LoweringMode::Main => {
                    // MeanDimConfig before the change (ExecuTorch 1.5.1), its checks in its
                    // order and its reasons word for word; the bf16 rule is ours (ExecuTorch
                    // has none: with enable_bf16 a bf16 GAP reaches a kernel that lacks bf16).
                    if x.rank() != 4 {
                        return Err(format!(
                            "mean.dim only supports averaging 4D tensors, got tensor of rank {}",
                            x.rank()
                        ));
                    }
                    if dtype.is_some() {
                        return Err(DTYPE_REASON.into());
                    }
                    let mut d = normalize_dims(dims, 4).map_err(|e| format!("mean.dim has invalid dims: {e}"))?;
                    d.sort_unstable();
                    if d != [2, 3] {
                        return Err(
                            "mean.dim only supports averaging 4D tensors across the innermost dimensions".into()
                        );
                    }
                    if !keepdim {
                        return Err("mean.dim only supports keepdim=True".into());
                    }
                    if x.dtype == ElemType::Bf16 {
                        return Err("mean.dim: bf16 has no global average pooling kernel".into());
                    }
                    Ok(())
                }
                LoweringMode::StaticMean | LoweringMode::NhwcAware => {
                    let skip_dtype = is_active(Mutant::NoDtypeArgCheck);
                    // The change keeps main's dtype check and its reason (the seed quotes no
                    // other); the rank rule is the change's, its wording ours.
                    if dtype.is_some() && !skip_dtype {
                        return Err(DTYPE_REASON.into());
                    }
                    if x.rank() == 0 || x.rank() > reference::graph::MAX_RANK {
                        return Err(format!("mean.dim: input rank {} outside 1 to 6", x.rank()));
                    }
                    mean_axes(dims, x.rank()).map_err(|e| format!("mean.dim has invalid dims: {e}"))?;
                    if is_active(Mutant::SizeCutoff8192)
                        && !x.is_dynamic()
                        && !n.spec.is_dynamic()
                        && x.max_numel() < 8192
                        && n.spec.max_numel() > 1
                        && !is_gap(&n.op, &n.spec)
                    {
                        // The first revision's reason, as the review quotes it (SEED:L171).
                        return Err("mean.dim needs at least 8192 input elements".into());
                    }
                    Ok(())
                }
            }
        }
        Op::Conv2d(_) => {
            common(g, id, opts)?;
            if n.spec.dtype == ElemType::Bf16 {
                return Err("convolution: bf16 not supported by XNNPACK".into());
            }
            if !static_weight(g, n.inputs[1]) {
                return Err("convolution: weight must be a constant".into());
            }
            if let Some(&b) = n.inputs.get(2) {
                if !is_const(g, b) {
                    return Err("convolution: bias must be a constant".into());
                }
            }
            Ok(())
        }
        Op::Linear => {
            common(g, id, opts)?;
            if n.spec.dtype == ElemType::Bf16 {
                return Err("linear: bf16 not supported by XNNPACK".into());
            }
            if !static_weight(g, n.inputs[1]) {
                return Err("linear: weight must be a constant".into());
            }
            if let Some(&b) = n.inputs.get(2) {
                if !is_const(g, b) {
                    return Err("linear: bias must be a constant".into());
                }
            }
            Ok(())
        }
        // A 0-D value is rank 1 in a payload, where a permute of no dims has no transpose
        // (the loader rejects `perm: []` for a rank-1 value): it stays outside, an identity
        // (random graphs found it: a mean over every dim, then `permute([])`).
        Op::Permute { perm } if perm.is_empty() => Err("permute_copy: a 0-D permute is an identity".into()),
        Op::Binary(_) | Op::Square | Op::Rsqrt | Op::Clamp { .. } | Op::Reshape { .. } | Op::Permute { .. } => {
            common(g, id, opts)
        }
        Op::Quantize(_) | Op::Dequantize(_) => common(g, id, opts),
        Op::ToCopy { .. } => {
            common(g, id, opts)?;
            let x = in0.ok_or("_to_copy: no input")?;
            let (from, to) = (x.dtype, n.spec.dtype);
            let format_change = x.format != n.spec.format;
            if from != to {
                if format_change {
                    return Err("_to_copy: changing dtype and memory format together is not supported".into());
                }
                let ok = matches!(
                    (from, to),
                    (ElemType::F32, ElemType::F16)
                        | (ElemType::F16, ElemType::F32)
                        | (ElemType::F32, ElemType::Bf16)
                        | (ElemType::Bf16, ElemType::F32)
                );
                if !ok {
                    return Err(format!("_to_copy: XNNPACK has no direct {from} to {to} convert"));
                }
            }
            Ok(())
        }
    }
}
