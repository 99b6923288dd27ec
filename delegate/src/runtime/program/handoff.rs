//! Tensors handed between program slots and delegate segments: storage types, dim orders,
//! views and buffers, and the typed errors of a checked input.

use super::super::kernels::View;
use super::super::plan::Owned;
use super::super::RuntimeError;
use reference::{ElemType, GraphErrorKind, MemoryFormat, Tensor, TensorData, TensorSpec};

pub(super) fn storage_type(dt: ElemType) -> super::super::plan::Dt {
    use super::super::plan::Dt;
    match dt {
        ElemType::F32 => Dt::F32,
        ElemType::F16 => Dt::F16,
        ElemType::Bf16 => Dt::Bf16,
        ElemType::Qs8 => Dt::I8,
    }
}

/// Order in which a slot's dims are handed to a segment: NHWC only where the lowering treats
/// the slot as NHWC (`slot_is_nhwc`). An "ambiguous" channels_last slot (C == 1 or H == W == 1,
/// also contiguous) is handed off with NCHW dims, as ExecuTorch does; both orders share bytes.
pub(super) fn handoff_order(spec: &TensorSpec, rank: usize) -> Vec<usize> {
    if crate::lower::slot_is_nhwc(spec) {
        dim_order(spec.format, rank)
    } else {
        (0..rank).collect()
    }
}

/// Physical order of a tensor's logical dims in `format` (identity where it does not apply).
pub(super) fn dim_order(format: MemoryFormat, rank: usize) -> Vec<usize> {
    if format.required_rank() == Some(rank) {
        format.dim_order(rank)
    } else {
        (0..rank).collect()
    }
}

/// `0..n` for the ranks a segment value can have (at most 6).
pub(super) const IDENTITY: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

pub(super) fn view_of(t: &Tensor) -> View<'_> {
    match &t.data {
        TensorData::F32(v) => View::F32(v),
        TensorData::F16(v) => View::F16(v),
        TensorData::Bf16(v) => View::Bf16(v),
        TensorData::Qs8(v) => View::I8(v),
    }
}

/// A tensor's buffer as a segment output buffer (no copy).
pub(super) fn owned_of(data: TensorData) -> Owned {
    match data {
        TensorData::F32(v) => Owned::F32(v),
        TensorData::F16(v) => Owned::F16(v),
        TensorData::Bf16(v) => Owned::Bf16(v),
        TensorData::Qs8(v) => Owned::I8(v),
    }
}

/// A segment output buffer as the data of a tensor of type `dt` (no copy); `None` when the
/// buffer holds another type.
pub(super) fn tensor_data(o: Owned, dt: ElemType) -> Option<TensorData> {
    match (o, dt) {
        (Owned::F32(v), ElemType::F32) => Some(TensorData::F32(v)),
        (Owned::F16(v), ElemType::F16) => Some(TensorData::F16(v)),
        (Owned::Bf16(v), ElemType::Bf16) => Some(TensorData::Bf16(v)),
        (Owned::I8(v), ElemType::Qs8) => Some(TensorData::Qs8(v)),
        _ => None,
    }
}

/// Maps a checked input's error to the runtime's typed input errors.
pub(super) fn input_error(index: usize, kind: GraphErrorKind) -> RuntimeError {
    match kind {
        GraphErrorKind::DtypeMismatch { expected, found } => RuntimeError::InputDtype { index, expected, found },
        GraphErrorKind::FormatMismatch { expected, found } => RuntimeError::InputFormat { index, expected, found },
        kind => RuntimeError::BadInput { index, kind },
    }
}
