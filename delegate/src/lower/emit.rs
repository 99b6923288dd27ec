//! The node visitors: one delegate's post-pass subgraph to an [`XnnGraph`] exactly as
//! ExecuTorch serializes it. Value ids are assigned at first definition, in graph order
//! and each visitor's own definition order (GAP and the generic one-input helper: output
//! first; binary: in1, in2, out; copy and quantize: in, out; dequantize: out, in; conv:
//! in, filter, out, bias; linear: in, filter, bias, out). External ids: inputs first,
//! then outputs; implicit q/dq forward their input's id; NHWC-tagged values carry NHWC
//! dims; constants go to the payload's constant region.

use super::layout::{Kind, PGraph};
use super::partition::is_gap;
use super::{LowerError, LowerOptions};
use crate::mutants::{is_active, Mutant};
use crate::xnn::{
    ConstantDataOffset, ConvNode, QuantParams as XQuant, XNode, XNodeKind, XValue, XnnDatatype, XnnGraph,
    FLAG_KEEP_DIMS, INVALID_VALUE_ID, PERM_NCHW_TO_NHWC, PERM_NHWC_TO_NCHW, VALUE_FLAG_EXTERNAL_INPUT,
    VALUE_FLAG_EXTERNAL_OUTPUT,
};
use reference::graph::{mean_axes, normalize_dims, Graph, Op};
use reference::{ElemType, MemoryFormat, Tensor, TensorData};
use std::borrow::Cow;

/// How a constant is laid out in the payload.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Role {
    /// As the value's layout tag says (NHWC-permuted when tagged).
    Plain,
    /// Conv filter OIHW -> OHWI.
    Filter,
    /// Depthwise filter: N and C swapped, then NHWC: [1, kh, kw, O].
    DwFilter,
    /// Fully-connected weight [N, K], as is.
    Weight,
    /// fp32 bias, as is.
    Bias,
    /// qs8 conv/linear bias: int32 at scale s_in * s_w.
    QBias(f32),
}

impl Role {
    fn key(self) -> u64 {
        match self {
            Role::Plain => 0,
            Role::Filter => 1,
            Role::DwFilter => 2,
            Role::Weight => 3,
            Role::Bias => 4,
            Role::QBias(s) => 5 | ((s.to_bits() as u64) << 8),
        }
    }
    fn static_weight(self) -> bool {
        !matches!(self, Role::Plain)
    }
}

#[derive(Clone, Copy)]
struct NodeIds {
    /// Id of the value defined for the node as [`Role::Plain`] (`INVALID_VALUE_ID` until
    /// defined).
    plain: u32,
    /// External output id of an output root that takes one directly (`INVALID_VALUE_ID`
    /// for none).
    ext_out: u32,
    /// The implicit quantize reading the node, if any (see `storage`).
    implicit_quant: Option<usize>,
}

struct Emitter<'a> {
    pg: &'a PGraph<'a>,
    g: &'a Graph,
    xg: XnnGraph,
    /// What the visitors track per subgraph node, indexed by node (one table rather than
    /// three: nearly every value is plain, so flat tables beat maps).
    per_node: Vec<NodeIds>,
    /// Ids of the values defined in other roles (weights, biases): (node, role key, id).
    role_ids: Vec<(usize, u64, u32)>,
}

fn unsupported(pg: &PGraph, g: &Graph, i: usize, reason: impl Into<String>) -> LowerError {
    let node = pg.graph_node(i).unwrap_or(usize::MAX);
    let op = pg.op(i, g).map_or("inserted node", |o| o.name()).to_string();
    LowerError::Unsupported { node, op, reason: reason.into() }
}

fn layout_error(pg: &PGraph, i: usize, reason: impl Into<String>) -> LowerError {
    LowerError::InternalLayout { node: pg.graph_node(i).unwrap_or(usize::MAX), reason: reason.into() }
}

fn xdtype(dt: ElemType) -> XnnDatatype {
    match dt {
        ElemType::F32 => XnnDatatype::Fp32,
        ElemType::F16 => XnnDatatype::Fp16,
        ElemType::Bf16 => XnnDatatype::Bf16,
        ElemType::Qs8 => XnnDatatype::Qint8,
    }
}

/// Appends the elements of `v` (logical row-major order) to `out` through `enc`: as they
/// are, or, with `nhwc = Some([n, c, h, w])`, permuted from NCHW to NHWC order (what
/// `Tensor::to_format(ChannelsLast)` computes, without building the permuted tensor).
fn append<T: Copy, const B: usize>(out: &mut Vec<u8>, v: &[T], nhwc: Option<[usize; 4]>, enc: impl Fn(T) -> [u8; B]) {
    // The region is sized once and filled element by element, with no capacity check
    // per element.
    let start = out.len();
    out.resize(start + v.len() * B, 0);
    let mut dst = out[start..].chunks_exact_mut(B);
    match nhwc {
        None => {
            for (d, &x) in dst.zip(v) {
                d.copy_from_slice(&enc(x));
            }
        }
        Some([n, c, h, w]) => {
            for ni in 0..n {
                for hi in 0..h {
                    for wi in 0..w {
                        for ci in 0..c {
                            if let Some(d) = dst.next() {
                                d.copy_from_slice(&enc(v[((ni * c + ci) * h + hi) * w + wi]));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Appends the payload bytes of a constant's data (contiguous), little-endian: permuted to
/// NHWC when `nhwc` gives its [N, C, H, W] sizes, fp16 widened to fp32 when `widen`
/// (static weights are stored fp32, ExecuTorch's `fp32_static_weights`).
fn append_data(out: &mut Vec<u8>, data: &TensorData, nhwc: Option<[usize; 4]>, widen: bool) {
    match data {
        TensorData::F32(v) => append(out, v, nhwc, |x| x.to_le_bytes()),
        TensorData::F16(v) if widen => append(out, v, nhwc, |x| x.to_f32().to_le_bytes()),
        TensorData::F16(v) => append(out, v, nhwc, |x| x.to_bits().to_le_bytes()),
        TensorData::Bf16(v) => append(out, v, nhwc, |x| x.to_bits().to_le_bytes()),
        TensorData::Qs8(v) => append(out, v, nhwc, |x| [x as u8]),
    }
}

impl<'a> Emitter<'a> {
    fn tag_nhwc(&self, i: usize) -> bool {
        let r = self.pg.resolve(i, self.g);
        self.pg.nodes[r].tag.is_nhwc() && self.pg.nodes[r].spec.rank() == 4
    }

    /// Datatype and quant params of a value: qs8 values, and values feeding an implicit
    /// quantize (`QuantParams.from_outputs`), are qint8.
    fn storage(&self, root: usize) -> (XnnDatatype, Option<XQuant>) {
        let spec = &self.pg.nodes[root].spec;
        if spec.dtype == ElemType::Qs8 {
            let q = spec.quant.map(|q| XQuant::PerTensor { scale: q.scale, zero_point: q.zero_point });
            return (XnnDatatype::Qint8, q);
        }
        if let Some(q) = self.per_node[root].implicit_quant.and_then(|k| self.pg.qparams(k, self.g)) {
            return (XnnDatatype::Qint8, Some(XQuant::PerTensor { scale: q.scale, zero_point: q.zero_point }));
        }
        (xdtype(spec.dtype), None)
    }

    /// Registers the constant whose bytes `write` appends, sharing the entry of an
    /// identical earlier constant. The bytes are written in place (after padding the
    /// region to 16) and dropped again, padding included, when an earlier entry has them.
    fn add_constant(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> u32 {
        let before = self.xg.constant_bytes.len();
        let start = before.next_multiple_of(16);
        self.xg.constant_bytes.resize(start, 0);
        write(&mut self.xg.constant_bytes);
        let (all, bytes) = self.xg.constant_bytes.split_at(start);
        for (k, c) in self.xg.constant_data.iter().enumerate().skip(1) {
            let (o, s) = (c.offset as usize, c.size as usize);
            if s == bytes.len() && all.get(o..o + s) == Some(bytes) {
                self.xg.constant_bytes.truncate(before);
                return k as u32;
            }
        }
        let size = bytes.len() as u64;
        self.xg.constant_data.push(ConstantDataOffset { offset: start as u64, size, named_key: None });
        (self.xg.constant_data.len() - 1) as u32
    }

    /// Defines the value `i` stands for (once), returning its id.
    fn define(&mut self, i: usize, role: Role) -> Result<u32, LowerError> {
        let root = self.pg.resolve(i, self.g);
        if let Some(id) = self.defined(root, role) {
            return Ok(id);
        }
        let node = &self.pg.nodes[root];
        let spec = &node.spec;
        let (mut datatype, mut quant) = self.storage(root);
        let nhwc = self.tag_nhwc(root);
        let dim = |k: usize| spec.shape[k].size as u32;
        let rank = spec.rank();
        let dims: Vec<u32> = match role {
            Role::Filter if rank == 4 => PERM_NCHW_TO_NHWC.iter().map(|&p| dim(p as usize)).collect(),
            Role::DwFilter if rank == 4 => vec![1, dim(2), dim(3), dim(0)],
            _ if rank == 0 => vec![1],
            _ if nhwc => PERM_NCHW_TO_NHWC.iter().map(|&p| dim(p as usize)).collect(),
            _ => spec.shape.iter().map(|d| d.size as u32).collect(),
        };
        let mut constant_buffer_idx = 0;
        if let Kind::Param { node: c } = node.kind {
            let Op::Constant { tensor } = &self.g.nodes[c].op else {
                return Err(LowerError::Internal { reason: format!("param {c} is not a constant") });
            };
            // Logical (contiguous) data, copied only when the constant is stored otherwise.
            let t: Cow<'_, Tensor> = match tensor.format {
                MemoryFormat::Contiguous => Cow::Borrowed(tensor),
                _ => Cow::Owned(tensor.to_contiguous()),
            };
            match role {
                Role::QBias(scale) => {
                    datatype = XnnDatatype::Qint32;
                    quant = Some(XQuant::PerTensor { scale, zero_point: 0 });
                    let vals = t.values_f64();
                    constant_buffer_idx = self.add_constant(|out| {
                        out.reserve(vals.len() * 4);
                        for &b in &vals {
                            let q = (b / scale as f64).round_ties_even().clamp(i32::MIN as f64, i32::MAX as f64) as i32;
                            out.extend_from_slice(&q.to_le_bytes());
                        }
                    });
                }
                _ => {
                    let widen = role.static_weight();
                    if widen && spec.dtype == ElemType::F16 {
                        datatype = XnnDatatype::Fp32;
                    }
                    let s = &t.shape;
                    // The [N, C, H, W] sizes to permute to NHWC by, if the role reorders.
                    let nchw = match role {
                        Role::Filter | Role::Plain if s.len() == 4 && (role == Role::Filter || nhwc) => {
                            Some([s[0], s[1], s[2], s[3]])
                        }
                        // Swapping N with the size-1 C keeps the element order.
                        Role::DwFilter if s.len() == 4 => Some([1, s[0], s[2], s[3]]),
                        _ => None,
                    };
                    if nchw.is_some_and(|d| d.iter().product::<usize>() != t.data.len()) {
                        return Err(LowerError::Internal {
                            reason: format!("constant {c}: {} elements for shape {s:?}", t.data.len()),
                        });
                    }
                    constant_buffer_idx = self.add_constant(|out| append_data(out, &t.data, nchw, widen));
                }
            }
        }
        let (external_id, flags) = match node.kind {
            Kind::Placeholder { ext, .. } => (ext as u32, VALUE_FLAG_EXTERNAL_INPUT),
            _ => match self.per_node[root].ext_out {
                INVALID_VALUE_ID => (INVALID_VALUE_ID, 0),
                e => (e, VALUE_FLAG_EXTERNAL_OUTPUT),
            },
        };
        let id = self.xg.values.len() as u32;
        self.xg.values.push(XValue { datatype, dims, constant_buffer_idx, external_id, flags, id_out: id, quant });
        if flags == VALUE_FLAG_EXTERNAL_INPUT {
            self.xg.input_ids.push(id);
        } else if flags == VALUE_FLAG_EXTERNAL_OUTPUT {
            self.xg.output_ids.push(id);
        }
        match role {
            Role::Plain => self.per_node[root].plain = id,
            _ => self.role_ids.push((root, role.key(), id)),
        }
        Ok(id)
    }

    /// The id of the value already defined for `root` in `role`, if any.
    fn defined(&self, root: usize, role: Role) -> Option<u32> {
        match role {
            Role::Plain => Some(self.per_node[root].plain).filter(|&id| id != INVALID_VALUE_ID),
            _ => {
                let key = role.key();
                self.role_ids.iter().find(|&&(r, k, _)| r == root && k == key).map(|&(_, _, id)| id)
            }
        }
    }

    fn push(&mut self, i: usize, kind: XNodeKind, output_min_max: Option<(f32, f32)>) {
        let debug_handle = self.pg.nodes[i].debug_handle;
        let output_min_max = output_min_max.or(self.pg.nodes[i].fused);
        self.xg.nodes.push(XNode { kind, debug_handle, output_min_max });
    }

    /// Agnostic ops: every input in the node's own layout.
    fn check_same_layout(&self, i: usize) -> Result<(), LowerError> {
        let me = self.tag_nhwc(i);
        for &x in &self.pg.nodes[i].inputs {
            if self.tag_nhwc(x) != me {
                return Err(layout_error(
                    self.pg,
                    i,
                    format!(
                        "{} is tagged {} but reads a {} input",
                        self.pg.op(i, self.g).map_or("inserted node", |o| o.name()),
                        if me { "NHWC" } else { "NCHW" },
                        if me { "NCHW" } else { "NHWC" }
                    ),
                ));
            }
        }
        Ok(())
    }

    fn unary(&mut self, i: usize, make: fn(u32, u32) -> XNodeKind, mm: Option<(f32, f32)>) -> Result<(), LowerError> {
        self.check_same_layout(i)?;
        let out = self.define(i, Role::Plain)?;
        let inp = self.define(self.pg.nodes[i].inputs[0], Role::Plain)?;
        self.push(i, make(inp, out), mm);
        Ok(())
    }

    fn copy(&mut self, i: usize) -> Result<(), LowerError> {
        let x = self.pg.nodes[i].inputs[0];
        let to_nhwc = self.pg.nodes[i].tag.is_nhwc();
        let inp = self.define(x, Role::Plain)?;
        let out = self.define(i, Role::Plain)?;
        let from_nhwc = self.tag_nhwc(x);
        let kind = if from_nhwc == to_nhwc || self.pg.nodes[i].spec.rank() != 4 {
            // Same layout on both sides (kept only when the removal pass could not drop
            // it): a plain copy, never a transpose over the wrong axes.
            XNodeKind::Copy { input_id: inp, output_id: out, flags: 0 }
        } else {
            let perm = if to_nhwc { PERM_NCHW_TO_NHWC } else { PERM_NHWC_TO_NCHW };
            XNodeKind::StaticTranspose { perm: perm.to_vec(), input_id: inp, output_id: out, flags: 0 }
        };
        self.push(i, kind, None);
        Ok(())
    }

    fn visit(&mut self, i: usize) -> Result<(), LowerError> {
        let (pg, g) = (self.pg, self.g);
        let n = &pg.nodes[i];
        if n.implicit && (pg.is_quant(i, g) || pg.is_dequant(i, g)) {
            return Ok(());
        }
        match n.kind {
            Kind::Placeholder { .. } | Kind::Param { .. } => return Ok(()),
            Kind::Copy { .. } => return self.copy(i),
            Kind::Quant(_) => {
                let inp = self.define(n.inputs[0], Role::Plain)?;
                let out = self.define(i, Role::Plain)?;
                self.push(i, XNodeKind::Convert { input_id: inp, output_id: out, flags: 0 }, None);
                return Ok(());
            }
            Kind::Dequant(_) => {
                let out = self.define(i, Role::Plain)?;
                let inp = self.define(n.inputs[0], Role::Plain)?;
                self.push(i, XNodeKind::Convert { input_id: inp, output_id: out, flags: 0 }, None);
                return Ok(());
            }
            Kind::Op { .. } => {}
        }
        let op = pg.op(i, g).ok_or_else(|| LowerError::Internal { reason: "op node without op".into() })?;
        match op {
            Op::Input { .. } | Op::Constant { .. } => Ok(()),
            Op::AdaptiveAvgPool2d { .. } => {
                Err(unsupported(pg, g, i, "adaptive_avg_pool2d reaches the visitors only as its mean.dim"))
            }
            Op::Quantize(_) => {
                self.check_same_layout(i)?;
                let inp = self.define(n.inputs[0], Role::Plain)?;
                let out = self.define(i, Role::Plain)?;
                self.push(i, XNodeKind::Convert { input_id: inp, output_id: out, flags: 0 }, None);
                Ok(())
            }
            Op::Dequantize(_) => {
                self.check_same_layout(i)?;
                let out = self.define(i, Role::Plain)?;
                let inp = self.define(n.inputs[0], Role::Plain)?;
                self.push(i, XNodeKind::Convert { input_id: inp, output_id: out, flags: 0 }, None);
                Ok(())
            }
            Op::Binary(b) => {
                self.check_same_layout(i)?;
                let a = self.define(n.inputs[0], Role::Plain)?;
                let c = self.define(n.inputs[1], Role::Plain)?;
                let out = self.define(i, Role::Plain)?;
                let (input1_id, input2_id, output_id, flags) = (a, c, out, 0);
                let kind = match b {
                    reference::graph::BinaryOp::Add => XNodeKind::Add { input1_id, input2_id, output_id, flags },
                    reference::graph::BinaryOp::Sub => XNodeKind::Subtract { input1_id, input2_id, output_id, flags },
                    reference::graph::BinaryOp::Mul => XNodeKind::Multiply { input1_id, input2_id, output_id, flags },
                    reference::graph::BinaryOp::Div => XNodeKind::Div { input1_id, input2_id, output_id, flags },
                };
                self.push(i, kind, None);
                Ok(())
            }
            Op::Square => {
                self.unary(i, |input_id, output_id| XNodeKind::Square { input_id, output_id, flags: 0 }, None)
            }
            Op::Rsqrt => self.unary(
                i,
                |input_id, output_id| XNodeKind::ReciprocalSquareRoot { input_id, output_id, flags: 0 },
                None,
            ),
            Op::Clamp { min, max } => {
                let mm = (min.unwrap_or(f32::NEG_INFINITY), max.unwrap_or(f32::INFINITY));
                self.unary(i, |input_id, output_id| XNodeKind::Clamp { input_id, output_id, flags: 0 }, Some(mm))
            }
            Op::ToCopy { .. } => {
                if pg.is_format_copy(i, g) {
                    return self.copy(i);
                }
                self.check_same_layout(i)?;
                let inp = self.define(n.inputs[0], Role::Plain)?;
                let out = self.define(i, Role::Plain)?;
                self.push(i, XNodeKind::Convert { input_id: inp, output_id: out, flags: 0 }, None);
                Ok(())
            }
            Op::Reshape { .. } => {
                if self.tag_nhwc(n.inputs[0]) {
                    return Err(layout_error(pg, i, "view_copy needs an NCHW input but was handed an NHWC one"));
                }
                let out = self.define(i, Role::Plain)?;
                let inp = self.define(n.inputs[0], Role::Plain)?;
                let new_shape = n.spec.max_shape().iter().map(|&d| d as u32).collect();
                self.push(i, XNodeKind::StaticReshape { new_shape, input_id: inp, output_id: out, flags: 0 }, None);
                Ok(())
            }
            Op::Permute { perm } => {
                self.check_same_layout(i)?;
                let x = n.inputs[0];
                let rank = pg.nodes[x].spec.rank();
                let p = normalize_dims(perm, rank).map_err(|e| unsupported(pg, g, i, e.to_string()))?;
                let perm: Vec<u32> = if self.tag_nhwc(x) && rank == 4 {
                    // Physical NHWC in and out: q[i] = nhwc_inv[p[nhwc[i]]].
                    let inv = [0usize, 3, 1, 2];
                    PERM_NCHW_TO_NHWC.iter().map(|&d| inv[p[d as usize]] as u32).collect()
                } else {
                    p.iter().map(|&d| d as u32).collect()
                };
                let out = self.define(i, Role::Plain)?;
                let inp = self.define(x, Role::Plain)?;
                self.push(i, XNodeKind::StaticTranspose { perm, input_id: inp, output_id: out, flags: 0 }, None);
                Ok(())
            }
            Op::Conv2d(p) => self.conv(i, *p),
            Op::Linear => self.linear(i),
            Op::Mean { dims, keepdim, dtype } => {
                if dtype.is_some() {
                    // The visitor's own check (op_mean_dim.py, ExecuTorch 1.5.1).
                    return Err(unsupported(pg, g, i, "XNNPACK does not support mean.dim with dtype"));
                }
                let x = n.inputs[0];
                let gap = is_gap(op, &n.spec) && !is_active(Mutant::GapAsStaticMean);
                if gap {
                    if !self.tag_nhwc(x) {
                        return Err(layout_error(pg, i, "global average pooling needs an NHWC input"));
                    }
                    let out = self.define(i, Role::Plain)?;
                    let inp = self.define(x, Role::Plain)?;
                    let kind = XNodeKind::GlobalAvgPooling2d { input_id: inp, output_id: out, flags: FLAG_KEEP_DIMS };
                    self.push(i, kind, None);
                    return Ok(());
                }
                let rank = pg.nodes[x].spec.rank();
                let mut axes: Vec<u32> = if is_active(Mutant::NegativeDimsNotNormalized) && !dims.is_empty() {
                    dims.iter().map(|&d| d as u32).collect()
                } else if is_active(Mutant::EmptyDimsNotExpanded) && dims.is_empty() {
                    Vec::new()
                } else {
                    mean_axes(dims, rank)
                        .map_err(|e| unsupported(pg, g, i, e.to_string()))?
                        .iter()
                        .map(|&a| a as u32)
                        .collect()
                };
                if n.nhwc_mean {
                    if !self.tag_nhwc(x) {
                        return Err(layout_error(pg, i, "NHWC-aware mean lost its NHWC input"));
                    }
                    // NCHW axis -> its position in [N, H, W, C].
                    let pos = [0u32, 3, 1, 2];
                    axes = axes.iter().map(|&a| pos.get(a as usize).copied().unwrap_or(a)).collect();
                    axes.sort_unstable();
                } else if self.tag_nhwc(x) && !is_active(Mutant::NhwcIntoStaticMean) {
                    return Err(layout_error(
                        pg,
                        i,
                        "internal layout error: mean.dim reduces NCHW dims but its input is NHWC-tagged",
                    ));
                }
                let out = self.define(i, Role::Plain)?;
                let inp = self.define(x, Role::Plain)?;
                let flags = if *keepdim || is_active(Mutant::KeepdimIgnored) { FLAG_KEEP_DIMS } else { 0 };
                let kind = XNodeKind::StaticMean { reduction_axes: axes, input_id: inp, output_id: out, flags };
                self.push(i, kind, None);
                Ok(())
            }
        }
    }

    /// Scale of a value as serialized (its PerTensor quant params), if quantized.
    fn value_scale(&self, id: u32) -> Option<f32> {
        match self.xg.values.get(id as usize).and_then(|v| v.quant.as_ref()) {
            Some(XQuant::PerTensor { scale, .. }) => Some(*scale),
            _ => None,
        }
    }

    fn bias_role(&self, in_id: u32, w_id: u32) -> Role {
        match (self.value_scale(in_id), self.value_scale(w_id)) {
            (Some(a), Some(b)) => Role::QBias((a as f64 * b as f64) as f32),
            _ => Role::Bias,
        }
    }

    fn conv(&mut self, i: usize, p: reference::graph::Conv2dParams) -> Result<(), LowerError> {
        let (pg, g) = (self.pg, self.g);
        let n = &pg.nodes[i];
        let (x, w) = (n.inputs[0], n.inputs[1]);
        if !self.tag_nhwc(x) {
            return Err(layout_error(pg, i, "convolution needs an NHWC input"));
        }
        let wroot = pg.resolve(w, g);
        if !pg.is_param(wroot) {
            return Err(unsupported(pg, g, i, "convolution weight is not a constant"));
        }
        let ws = pg.nodes[wroot].spec.max_shape();
        let (o, gic, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        let groups = p.groups.max(1);
        let goc = o / groups;
        let depthwise = gic == 1;
        let in_id = self.define(x, Role::Plain)?;
        let w_id = self.define(w, if depthwise { Role::DwFilter } else { Role::Filter })?;
        let out = self.define(i, Role::Plain)?;
        let bias_id = match n.inputs.get(2) {
            Some(&b) => {
                let role = self.bias_role(in_id, w_id);
                self.define(b, role)?
            }
            None => INVALID_VALUE_ID,
        };
        let c = ConvNode {
            padding_top: p.padding[0] as u32,
            padding_right: p.padding[1] as u32,
            padding_bottom: p.padding[0] as u32,
            padding_left: p.padding[1] as u32,
            kernel_height: kh as u32,
            kernel_width: kw as u32,
            subsampling_height: p.stride[0] as u32,
            subsampling_width: p.stride[1] as u32,
            dilation_height: p.dilation[0] as u32,
            dilation_width: p.dilation[1] as u32,
            group_input_channels: gic as u32,
            group_output_channels: goc as u32,
            groups: groups as u32,
            adjustment_height: 0,
            adjustment_width: 0,
            input1_id: in_id,
            filter_id: w_id,
            bias_id,
            output_id: out,
            flags: 0,
        };
        let kind = if depthwise { XNodeKind::DepthwiseConv2d(c) } else { XNodeKind::Conv2d(c) };
        self.push(i, kind, None);
        Ok(())
    }

    fn linear(&mut self, i: usize) -> Result<(), LowerError> {
        let (pg, g) = (self.pg, self.g);
        let n = &pg.nodes[i];
        let (x, w) = (n.inputs[0], n.inputs[1]);
        if self.tag_nhwc(x) {
            return Err(layout_error(pg, i, "linear needs an NCHW input but was handed an NHWC one"));
        }
        if !pg.is_param(pg.resolve(w, g)) {
            return Err(unsupported(pg, g, i, "linear weight is not a constant"));
        }
        let in_id = self.define(x, Role::Plain)?;
        let w_id = self.define(w, Role::Weight)?;
        let bias_id = match n.inputs.get(2) {
            Some(&b) => {
                let role = self.bias_role(in_id, w_id);
                self.define(b, role)?
            }
            None => INVALID_VALUE_ID,
        };
        let out = self.define(i, Role::Plain)?;
        let kind = XNodeKind::FullyConnected { input1_id: in_id, filter_id: w_id, bias_id, output_id: out, flags: 0 };
        self.push(i, kind, None);
        Ok(())
    }
}

/// Serializes one delegate's post-pass subgraph.
pub fn emit(pg: &PGraph, g: &Graph, _opts: &LowerOptions) -> Result<XnnGraph, LowerError> {
    let num_inputs = pg.num_inputs;
    let none = NodeIds { plain: INVALID_VALUE_ID, ext_out: INVALID_VALUE_ID, implicit_quant: None };
    let mut per_node = vec![none; pg.nodes.len()];
    // Outputs whose value is an input, a constant, or an earlier output get their own
    // value through an XNNCopy (ExecuTorch refuses such pass-throughs).
    let mut needs_copy = Vec::new();
    for (k, &o) in pg.outputs.iter().enumerate() {
        if pg.actual_nhwc(o, g) != pg.out_nhwc.get(k).copied().unwrap_or(false) {
            return Err(layout_error(pg, o, "a delegate output would leave in the wrong layout"));
        }
        let root = pg.resolve(o, g);
        let is_in = matches!(pg.nodes[root].kind, Kind::Placeholder { .. } | Kind::Param { .. });
        if is_in || per_node[root].ext_out != INVALID_VALUE_ID {
            needs_copy.push((k, root));
        } else {
            per_node[root].ext_out = (num_inputs + k) as u32;
        }
    }
    // Sized for the most this delegate can define (a value per node, plus a copy per
    // output), so the lists do not grow one push at a time.
    let most = pg.nodes.len() + pg.outputs.len();
    let params = pg.nodes.iter().filter(|n| matches!(n.kind, Kind::Param { .. }));
    let mut constant_data = Vec::with_capacity(1 + params.clone().count());
    // At most four bytes per element (fp32, or int32 biases) and 16 of alignment each.
    let constant_bytes = Vec::with_capacity(params.map(|n| 16 + 4 * n.spec.max_numel()).sum());
    constant_data.push(ConstantDataOffset { offset: 0, size: 0, named_key: Some(String::new()) });
    let xg = XnnGraph {
        version: "0".into(),
        num_externs: (num_inputs + pg.outputs.len()) as u32,
        nodes: Vec::with_capacity(most),
        values: Vec::with_capacity(most),
        input_ids: Vec::with_capacity(num_inputs),
        output_ids: Vec::with_capacity(pg.outputs.len()),
        constant_data,
        constant_bytes,
    };
    // A value feeding an implicit quantize is stored as qint8 with that quantize's params
    // (`QuantParams.from_outputs`): the first such live quantize in node order.
    for (k, n) in pg.nodes.iter().enumerate() {
        if let Some(&root) = n.inputs.first() {
            let quantizes = n.alive && n.implicit && pg.is_quant(k, g) && pg.qparams(k, g).is_some();
            if quantizes && per_node[root].implicit_quant.is_none() {
                per_node[root].implicit_quant = Some(k);
            }
        }
    }
    let mut e = Emitter { pg, g, xg, per_node, role_ids: Vec::new() };
    for &i in &pg.order {
        if pg.nodes[i].alive {
            e.visit(i)?;
        }
    }
    for (k, root) in needs_copy {
        let inp = e.define(root, Role::Plain)?;
        let src = e.xg.values[inp as usize].clone();
        let id = e.xg.values.len() as u32;
        e.xg.values.push(XValue {
            constant_buffer_idx: 0,
            external_id: (num_inputs + k) as u32,
            flags: VALUE_FLAG_EXTERNAL_OUTPUT,
            id_out: id,
            ..src
        });
        e.xg.output_ids.push(id);
        e.xg.nodes.push(XNode {
            kind: XNodeKind::Copy { input_id: inp, output_id: id, flags: 0 },
            debug_handle: crate::xnn::DEFAULT_DEBUG_HANDLE,
            output_min_max: None,
        });
    }
    Ok(e.xg)
}
