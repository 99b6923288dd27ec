//! Values: `XValue` tables into [`XValue`]s (tensor, quantized tensor and every quant
//! params member), then the checks on the whole value list (ids, sizes, externs, constant
//! references, quant params against their datatype).

use super::{fb, missing, modelled, unreadable, LoadError, LoadLimits, MAX_DIMS};
use crate::xnn::{
    ConstantDataOffset, QuantParams, XValue, XnnDatatype, INVALID_VALUE_ID, VALUE_FLAG_EXTERNAL_INPUT,
    VALUE_FLAG_EXTERNAL_OUTPUT,
};

/// `XNNTensorValue`'s scalars: (datatype, num_dims, constant_buffer_idx, external_id,
/// flags, id_out).
fn tensor_scalars(i: usize, t: fb::XNNTensorValue<'_>) -> Result<(i16, u32, u32, u32, u32, u32), LoadError> {
    use fb::XNNTensorValue as T;
    let f = modelled(t._tab, "XNNTensorValue", i, T::VT_ID_OUT, &[])?;
    let read = || {
        Some((
            f.i16(T::VT_DATATYPE)?,
            f.u32(T::VT_NUM_DIMS)?,
            f.u32(T::VT_CONSTANT_BUFFER_IDX)?,
            f.u32(T::VT_EXTERNAL_ID)?,
            f.u32(T::VT_FLAGS)?,
            f.u32(T::VT_ID_OUT)?,
        ))
    };
    read().ok_or_else(|| unreadable("value", i))
}

fn decode_tensor(i: usize, t: fb::XNNTensorValue<'_>) -> Result<XValue, LoadError> {
    let (raw, num_dims, constant_buffer_idx, external_id, flags, id_out) = tensor_scalars(i, t)?;
    let datatype = match XnnDatatype::from_i16(raw) {
        Some(XnnDatatype::Invalid) | None => return Err(LoadError::BadDatatype { value: i, raw }),
        Some(d) => d,
    };
    if num_dims as usize > MAX_DIMS {
        return Err(LoadError::TooManyDims { value: i, num_dims: num_dims as u64 });
    }
    let dims: Vec<u32> = match t.dims() {
        Some(d) if d.len() > MAX_DIMS => return Err(LoadError::TooManyDims { value: i, num_dims: d.len() as u64 }),
        Some(d) => d.iter().collect(),
        None => Vec::new(),
    };
    if dims.len() != num_dims as usize {
        return Err(LoadError::CountMismatch {
            table: "XNNTensorValue",
            index: i,
            count_field: "num_dims",
            count: num_dims,
            list: "dims",
            len: dims.len(),
        });
    }
    Ok(XValue { datatype, dims, constant_buffer_idx, external_id, flags, id_out, quant: None })
}

pub(super) fn decode_value(i: usize, xv: fb::XValue<'_>) -> Result<XValue, LoadError> {
    modelled(xv._tab, "XValue", i, fb::XValue::VT_XVALUE_UNION, &[])?;
    let type_id = xv.xvalue_union_type().0;
    if type_id == 0 || type_id > fb::XValueUnion::ENUM_MAX {
        return Err(LoadError::UnknownValueType { value: i, type_id });
    }
    if let Some(t) = xv.xvalue_union_as_xnntensor_value() {
        return decode_tensor(i, t);
    }
    if let Some(q) = xv.xvalue_union_as_xnnquantized_tensor_value() {
        use fb::XNNQuantizedTensorValue as Q;
        modelled(q._tab, "XNNQuantizedTensorValue", i, Q::VT_QUANT_PARAMS, &[])?;
        let t = q.tensor_value().ok_or_else(|| missing("XNNQuantizedTensorValue", "tensor_value", i))?;
        let mut v = decode_tensor(i, t)?;
        v.quant = Some(decode_quant(i, q)?);
        return Ok(v);
    }
    // A known type without its table.
    Err(missing("XValue", "xvalue_union", i))
}

/// The quant params member of a quantized tensor value, every field of it.
fn decode_quant(i: usize, q: fb::XNNQuantizedTensorValue<'_>) -> Result<QuantParams, LoadError> {
    let ty = q.quant_params_type().0;
    if ty == 0 || ty > fb::XNNQuantParams::ENUM_MAX {
        return Err(LoadError::BadQuant { value: i, reason: format!("union type {ty} is not a quant params member") });
    }
    let floats = |v: Option<flatbuffers::Vector<'_, f32>>| v.map(|s| s.iter().collect()).unwrap_or_default();
    if let Some(p) = q.quant_params_as_per_tensor_quant() {
        modelled(p._tab, "PerTensorQuant", i, fb::PerTensorQuant::VT_ZERO_POINT, &[])?;
        return Ok(QuantParams::PerTensor { scale: p.scale(), zero_point: p.zero_point() });
    }
    if let Some(p) = q.quant_params_as_per_channel_quant() {
        modelled(p._tab, "PerChannelQuant", i, fb::PerChannelQuant::VT_NUM_SCALES, &[])?;
        return Ok(QuantParams::PerChannel {
            scale: floats(p.scale()),
            channel_dim: p.channel_dim(),
            scale_buffer_idx: p.scale_buffer_idx(),
            num_scales: p.num_scales(),
        });
    }
    if let Some(p) = q.quant_params_as_per_token_dynamic_quant() {
        modelled(p._tab, "PerTokenDynamicQuant", i, fb::PerTokenDynamicQuant::VT_NUM_NONBATCH_DIMS, &[])?;
        return Ok(QuantParams::PerTokenDynamic { num_nonbatch_dims: p.num_nonbatch_dims() });
    }
    if let Some(p) = q.quant_params_as_per_channel_group_quant() {
        // scale_bf16 (slot 10) is deprecated in this schema (see schema/xnnpack.fbs).
        modelled(p._tab, "PerChannelGroupQuant", i, fb::PerChannelGroupQuant::VT_NUM_SCALES, &[(10, "scale_bf16")])?;
        return Ok(QuantParams::PerChannelGroup {
            scale: floats(p.scale()),
            channel_dim: p.channel_dim(),
            group_size: p.group_size(),
            scale_buffer_idx: p.scale_buffer_idx(),
            num_scales: p.num_scales(),
        });
    }
    // A member type without its table.
    Err(missing("XNNQuantizedTensorValue", "quant_params", i))
}

/// Bits per element (packed 4-bit types count 4).
fn elem_bits(d: XnnDatatype) -> u64 {
    use XnnDatatype::*;
    match d {
        Fp32 | Qint32 | Qcint32 | Int32 | Pfp32 => 32,
        Fp16 | Bf16 => 16,
        Qint8 | Quint8 | Qcint8 | Qdint8 | Qpint8 => 8,
        Qcint4 | Qbint4 => 4,
        Invalid => 0,
    }
}

pub(super) fn is_float(d: XnnDatatype) -> bool {
    matches!(d, XnnDatatype::Fp32 | XnnDatatype::Fp16 | XnnDatatype::Bf16)
}

/// Value facts the node checks need, indexed by `id_out`.
pub(super) struct ValueInfo {
    /// `id_out` -> index into `values`.
    by_id: Vec<usize>,
}

impl ValueInfo {
    pub(super) fn index_of(&self, id: u32) -> Option<usize> {
        self.by_id.get(id as usize).copied().filter(|&i| i != usize::MAX)
    }
}

pub(super) fn check_values(
    values: &[XValue],
    constants: &[ConstantDataOffset],
    num_externs: u32,
    limits: &LoadLimits,
) -> Result<ValueInfo, LoadError> {
    let mut by_id = vec![usize::MAX; values.len()];
    // Which external ids are taken; `num_externs` is at most MAX_EXTERNS here.
    let mut externs = vec![false; num_externs as usize];
    let mut total: u64 = 0;
    for (i, v) in values.iter().enumerate() {
        // Ids: a permutation of 0..len, as ExecuTorch assigns them (id_out = position).
        match by_id.get_mut(v.id_out as usize) {
            None => return Err(LoadError::BadValueId { value: i, id_out: v.id_out, reason: "is out of range" }),
            Some(slot) if *slot != usize::MAX => {
                return Err(LoadError::BadValueId { value: i, id_out: v.id_out, reason: "is defined twice" })
            }
            Some(slot) => *slot = i,
        }
        // Size: checked element count against the memory limit.
        let mut count: u64 = 1;
        for &d in &v.dims {
            count = count.checked_mul(d as u64).ok_or(LoadError::SizeOverflow { value: i })?;
        }
        let bits = count.checked_mul(elem_bits(v.datatype)).ok_or(LoadError::SizeOverflow { value: i })?;
        let bytes = bits.div_ceil(8);
        if bytes > limits.max_bytes {
            return Err(LoadError::TooLarge { value: i, bytes, limit: limits.max_bytes });
        }
        total = total.saturating_add(bytes);
        if total > limits.max_bytes {
            return Err(LoadError::TotalTooLarge { bytes: total, limit: limits.max_bytes });
        }
        // Flags and external ids.
        if v.flags & !(VALUE_FLAG_EXTERNAL_INPUT | VALUE_FLAG_EXTERNAL_OUTPUT) != 0 {
            return Err(LoadError::BadValueFlags { value: i, flags: v.flags });
        }
        let ext = |reason| LoadError::BadExternalId { value: i, external_id: v.external_id, flags: v.flags, reason };
        if v.external_id != INVALID_VALUE_ID {
            if v.external_id >= num_externs {
                return Err(ext("is not below num_externs"));
            }
            if std::mem::replace(&mut externs[v.external_id as usize], true) {
                return Err(ext("is used by two values"));
            }
        } else if v.flags != 0 {
            return Err(ext("is invalid on an external value"));
        }
        // Constant reference.
        if v.constant_buffer_idx != 0 {
            let bad = |reason: String| LoadError::BadConstantRef { value: i, idx: v.constant_buffer_idx, reason };
            let Some(c) = constants.get(v.constant_buffer_idx as usize) else {
                return Err(bad(format!("is out of range ({} entries)", constants.len())));
            };
            if v.flags != 0 {
                return Err(bad("is set on an external value".into()));
            }
            if c.size != bytes {
                return Err(bad(format!("entry holds {} bytes, the tensor needs {bytes}", c.size)));
            }
        }
        check_quant(i, v, constants)?;
    }
    Ok(ValueInfo { by_id })
}

fn check_quant(i: usize, v: &XValue, constants: &[ConstantDataOffset]) -> Result<(), LoadError> {
    use XnnDatatype::*;
    let bad = |reason: String| Err(LoadError::BadQuant { value: i, reason });
    let scale_ok = |s: f32| s.is_finite() && s > 0.0;
    match (&v.quant, v.datatype) {
        (None, Qint8 | Quint8 | Qint32 | Qcint8 | Qcint32 | Qcint4 | Qbint4 | Qdint8 | Qpint8) => {
            bad(format!("missing for {}", v.datatype.name()))
        }
        (None, _) => Ok(()),
        (Some(QuantParams::PerTensor { scale, zero_point }), d @ (Qint8 | Quint8 | Qint32)) => {
            // The zero point must be representable, as xnn_define_quantized_tensor_value checks.
            let range = match d {
                Qint8 => -128..=127,
                Quint8 => 0..=255,
                _ => 0..=0,
            };
            if !scale_ok(*scale) {
                bad(format!("scale {scale} is not finite and positive"))
            } else if !range.contains(zero_point) {
                bad(format!("zero_point {zero_point} is outside {range:?} for {}", d.name()))
            } else {
                Ok(())
            }
        }
        (
            Some(QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales }),
            Qcint8 | Qcint32 | Qcint4,
        ) => {
            let Some(&channels) = usize::try_from(*channel_dim).ok().and_then(|c| v.dims.get(c)) else {
                return bad(format!("channel_dim {channel_dim} is outside the {} dims", v.dims.len()));
            };
            if !scale.is_empty() {
                if scale.len() != channels as usize {
                    return bad(format!("{} scales for {channels} channels", scale.len()));
                }
                if let Some(s) = scale.iter().find(|s| !scale_ok(**s)) {
                    return bad(format!("scale {s} is not finite and positive"));
                }
                Ok(())
            } else {
                if *num_scales != channels {
                    return bad(format!("num_scales {num_scales} for {channels} channels"));
                }
                if *scale_buffer_idx == 0 || *scale_buffer_idx as usize >= constants.len() {
                    return bad(format!("scale_buffer_idx {scale_buffer_idx} names no constant entry"));
                }
                Ok(())
            }
        }
        (Some(QuantParams::PerTokenDynamic { num_nonbatch_dims }), Qdint8 | Qpint8) => {
            // xnn_define_dynamically_quantized_tensor_value: at most the tensor's rank.
            if usize::try_from(*num_nonbatch_dims).is_ok_and(|n| n <= v.dims.len()) {
                Ok(())
            } else {
                bad(format!("num_nonbatch_dims {num_nonbatch_dims} is outside 0..={}", v.dims.len()))
            }
        }
        (Some(QuantParams::PerChannelGroup { scale, channel_dim, group_size, scale_buffer_idx, .. }), Qbint4) => {
            if usize::try_from(*channel_dim).ok().and_then(|c| v.dims.get(c)).is_none() {
                return bad(format!("channel_dim {channel_dim} is outside the {} dims", v.dims.len()));
            }
            if *group_size <= 0 {
                return bad(format!("group_size {group_size} is not positive"));
            }
            if let Some(s) = scale.iter().find(|s| !scale_ok(**s)) {
                return bad(format!("scale {s} is not finite and positive"));
            }
            if scale.is_empty() && (*scale_buffer_idx == 0 || *scale_buffer_idx as usize >= constants.len()) {
                return bad(format!("scale_buffer_idx {scale_buffer_idx} names no constant entry"));
            }
            Ok(())
        }
        (Some(q), d) => bad(format!("{} params do not fit {}", q.type_name(), d.name())),
    }
}
