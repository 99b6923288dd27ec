//! Untrusted payload bytes -> `XnnGraph`.
//!
//! Three stages, each of which can only fail with a typed [`LoadError`]:
//! 1. framing: the `XH00` header and its bounds (or, without the magic, the whole blob as a
//!    bare flatbuffer, as ExecuTorch's runtime does), then the identifier `XN01`/`XN00`;
//! 2. the flatbuffers verifier, with bounded depth, table count and apparent size;
//! 3. semantic validation of the decoded graph: the checks `xnn_define_*` and ExecuTorch's
//!    compiler would make, so that the runtime can trust what it receives (ids defined
//!    before use, ranks, element counts against a memory limit, permutations, reduction
//!    axes, dtypes along each node, quant params, externs, flags, constant ranges).
//!
//! Nothing is allocated from an unchecked size field: every vector built here is bounded by
//! a verified flatbuffer vector (so by the input length) or by a checked limit.

use super::fb;
use super::header::XnnHeader;
use crate::xnn::{
    node_type_name, ConstantDataOffset, ConvNode, QuantParams, XNode, XNodeKind, XValue, XnnDatatype, XnnGraph,
    INVALID_VALUE_ID, MAX_EXTERNS, NODE_TYPE_NAMES, VALUE_FLAG_EXTERNAL_INPUT, VALUE_FLAG_EXTERNAL_OUTPUT,
};

/// `XNN_MAX_TENSOR_DIMS`.
pub const MAX_DIMS: usize = 6;

/// Limits applied while loading untrusted bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadLimits {
    /// Largest tensor footprint accepted, per value and summed over all values (bytes).
    pub max_bytes: u64,
    pub max_values: usize,
    pub max_nodes: usize,
    /// Flatbuffers verifier: nesting depth and number of tables.
    pub max_depth: usize,
    pub max_tables: usize,
    /// Accept constants that live in a `.pte` named data store (`offset == u64::MAX` plus a
    /// key), as every real ExecuTorch payload has. Off for the runtime, which cannot
    /// resolve them; on for inspection ([`LoadLimits::lenient`]).
    pub allow_named_constants: bool,
    /// How many `XNodeUnion` members this runtime knows (ids above are "Unhandled node
    /// type"); all of them by default. [`LoadLimits::old_runtime`] models a runtime built
    /// before `XNNStaticMean` was appended (notes 6-B11).
    pub known_node_types: u8,
}

impl Default for LoadLimits {
    fn default() -> Self {
        LoadLimits {
            max_bytes: 1 << 30,
            max_values: 1 << 20,
            max_nodes: 1 << 20,
            max_depth: 64,
            max_tables: 1 << 20,
            allow_named_constants: false,
            known_node_types: NODE_TYPE_NAMES.len() as u8,
        }
    }
}

impl LoadLimits {
    /// Default limits, with named (`.pte` data store) constants accepted.
    pub fn lenient() -> LoadLimits {
        LoadLimits { allow_named_constants: true, ..LoadLimits::default() }
    }

    /// A runtime built before the static-mean change: it knows every member up to
    /// `XNNCos` and fails cleanly on `XNNStaticMean`.
    pub fn old_runtime() -> LoadLimits {
        let known = crate::xnn::node_type_id("XNNStaticMean").map_or(NODE_TYPE_NAMES.len() as u8, |id| id - 1);
        LoadLimits { known_node_types: known, ..LoadLimits::default() }
    }
}

/// Why a payload was refused. Offsets are byte offsets into the payload; `node` and
/// `value` are indices into `xnodes` / `xvalues`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated { what: &'static str, need: u64, have: u64 },
    #[error("bad magic at offset {offset}: {found:?}")]
    BadMagic { offset: usize, found: [u8; 4] },
    #[error("header field {field} at offset {offset} = {value}: {reason}")]
    Header { offset: usize, field: &'static str, value: u64, reason: &'static str },
    #[error("flatbuffer identifier at offset {offset} is {found:?}, expected XN01 or XN00")]
    BadIdentifier { offset: usize, found: [u8; 4] },
    #[error("flatbuffer verification failed: {0}")]
    Verify(String),
    #[error("{table}.{field} is missing (index {index})")]
    MissingField { table: &'static str, field: &'static str, index: usize },
    #[error("{what}: {count} exceeds the limit {limit}")]
    TooMany { what: &'static str, count: u64, limit: u64 },
    #[error("num_externs = {0} exceeds 4096")]
    TooManyExterns(u32),
    #[error("value {value}: datatype {raw} is not valid")]
    BadDatatype { value: usize, raw: i16 },
    #[error("value {value}: {num_dims} dims exceed 6")]
    TooManyDims { value: usize, num_dims: u64 },
    #[error("{table} {index}: num_dims field {num_dims} but the list holds {len}")]
    DimsMismatch { table: &'static str, index: usize, num_dims: u32, len: usize },
    #[error("value {value}: element count overflows")]
    SizeOverflow { value: usize },
    #[error("value {value}: {bytes} bytes exceed the limit {limit}")]
    TooLarge { value: usize, bytes: u64, limit: u64 },
    #[error("values need {bytes} bytes in total, over the limit {limit}")]
    TotalTooLarge { bytes: u64, limit: u64 },
    #[error("value {value}: flags {flags:#x} outside EXTERNAL_INPUT|EXTERNAL_OUTPUT")]
    BadValueFlags { value: usize, flags: u32 },
    #[error("value {value}: external_id {external_id} (flags {flags:#x}) {reason}")]
    BadExternalId { value: usize, external_id: u32, flags: u32, reason: &'static str },
    #[error("value {value}: id_out {id_out} {reason}")]
    BadValueId { value: usize, id_out: u32, reason: &'static str },
    #[error("value {value}: quant params {reason}")]
    BadQuant { value: usize, reason: String },
    #[error("value {value}: constant_buffer_idx {idx} {reason}")]
    BadConstantRef { value: usize, idx: u32, reason: String },
    #[error("constant_data[{index}] (offset {offset}, size {size}): {reason}")]
    BadConstant { index: usize, offset: u64, size: u64, reason: &'static str },
    #[error("{field}[{index}] = {id} names no value")]
    BadGraphId { field: &'static str, index: usize, id: u32 },
    #[error("node {node}: union type 0 (NONE)")]
    NoneNode { node: usize },
    #[error("node {node}: union type id {type_id} is not in this schema (unhandled node type)")]
    UnknownNodeType { node: usize, type_id: u8 },
    #[error("node {node} ({node_type}): {field} = {id} names no value")]
    UndefinedId { node: usize, node_type: &'static str, field: &'static str, id: u32 },
    #[error("node {node} ({node_type}): {field} = {id} is read before any node defines it")]
    UseBeforeDef { node: usize, node_type: &'static str, field: &'static str, id: u32 },
    #[error("node {node} ({node_type}): {field} = {id} is already defined (input, constant or earlier output)")]
    Redefined { node: usize, node_type: &'static str, field: &'static str, id: u32 },
    #[error("node {node} ({node_type}): {field}: {reason}")]
    BadNode { node: usize, node_type: &'static str, field: &'static str, reason: String },
    #[error("node {node} ({node_type}): {field} has dtype {found}, expected {expected}")]
    DtypeMismatch {
        node: usize,
        node_type: &'static str,
        field: &'static str,
        expected: &'static str,
        found: &'static str,
    },
}

/// A decoded payload with its framing, for inspection.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// `None` for a bare flatbuffer (legacy path).
    pub header: Option<XnnHeader>,
    /// `XN01` or `XN00`.
    pub identifier: String,
    pub graph: XnnGraph,
}

/// Loads a payload with `limits`; see the module docs for what is checked.
pub fn load(bytes: &[u8], limits: &LoadLimits) -> Result<XnnGraph, LoadError> {
    decode_framed(bytes, limits).map(|(_, _, graph)| graph)
}

/// [`load`] with [`LoadLimits::lenient`]: accepts real ExecuTorch payloads whose constants
/// live in the `.pte` named data store.
pub fn load_lenient(bytes: &[u8]) -> Result<XnnGraph, LoadError> {
    load(bytes, &LoadLimits::lenient())
}

/// [`load`], also returning the header and identifier.
pub fn decode(bytes: &[u8], limits: &LoadLimits) -> Result<Decoded, LoadError> {
    let (header, ident, graph) = decode_framed(bytes, limits)?;
    Ok(Decoded { header, identifier: String::from_utf8_lossy(&ident).into_owned(), graph })
}

/// [`decode`]'s work: the header (if any), the identifier's bytes and the graph.
fn decode_framed(bytes: &[u8], limits: &LoadLimits) -> Result<(Option<XnnHeader>, [u8; 4], XnnGraph), LoadError> {
    let (header, fb_bytes, constants, fb_base) = if XnnHeader::has_magic(bytes) {
        let h = XnnHeader::parse(bytes)?;
        (Some(h), h.flatbuffer(bytes), h.constant_data(bytes), h.flatbuffer_offset as usize)
    } else {
        (None, bytes, &[][..], 0usize)
    };
    if fb_bytes.len() < 8 {
        return Err(LoadError::Truncated { what: "flatbuffer", need: 8, have: fb_bytes.len() as u64 });
    }
    let ident = [fb_bytes[4], fb_bytes[5], fb_bytes[6], fb_bytes[7]];
    if &ident != b"XN01" && &ident != b"XN00" {
        return Err(LoadError::BadIdentifier { offset: fb_base + 4, found: ident });
    }
    let opts = flatbuffers::VerifierOptions {
        max_depth: limits.max_depth,
        max_tables: limits.max_tables,
        max_apparent_size: 1 << 31,
        ignore_missing_null_terminator: false,
    };
    let root = fb::root_as_xnngraph_with_opts(&opts, fb_bytes).map_err(|e| LoadError::Verify(e.to_string()))?;
    let graph = decode_graph(root, constants, limits)?;
    Ok((header, ident, graph))
}

fn decode_graph(root: fb::XNNGraph<'_>, constants: &[u8], limits: &LoadLimits) -> Result<XnnGraph, LoadError> {
    let xvalues = root.xvalues().ok_or(LoadError::MissingField { table: "XNNGraph", field: "xvalues", index: 0 })?;
    let xnodes = root.xnodes().ok_or(LoadError::MissingField { table: "XNNGraph", field: "xnodes", index: 0 })?;
    if xvalues.len() > limits.max_values {
        return Err(LoadError::TooMany {
            what: "values",
            count: xvalues.len() as u64,
            limit: limits.max_values as u64,
        });
    }
    if xnodes.len() > limits.max_nodes {
        return Err(LoadError::TooMany { what: "nodes", count: xnodes.len() as u64, limit: limits.max_nodes as u64 });
    }
    let num_externs = root.num_externs();
    if num_externs > MAX_EXTERNS {
        return Err(LoadError::TooManyExterns(num_externs));
    }

    let constant_data = decode_constants(root, constants.len() as u64, limits)?;

    let mut values = Vec::with_capacity(xvalues.len());
    for (i, xv) in xvalues.iter().enumerate() {
        values.push(decode_value(i, xv)?);
    }
    let info = check_values(&values, &constant_data, num_externs, limits)?;

    let list = |v: Option<flatbuffers::Vector<'_, u32>>, field: &'static str| -> Result<Vec<u32>, LoadError> {
        let ids: Vec<u32> = v.map(|v| v.iter().collect()).unwrap_or_default();
        for (index, &id) in ids.iter().enumerate() {
            if info.index_of(id).is_none() {
                return Err(LoadError::BadGraphId { field, index, id });
            }
        }
        Ok(ids)
    };
    let input_ids = list(root.input_ids(), "input_ids")?;
    let output_ids = list(root.output_ids(), "output_ids")?;

    let mut nodes = Vec::with_capacity(xnodes.len());
    let mut flow = Flow::new(&values, &info);
    for (i, xn) in xnodes.iter().enumerate() {
        let node = decode_node(i, xn, limits.known_node_types)?;
        check_node(i, &node, xn, &values, &info, &mut flow)?;
        nodes.push(node);
    }

    Ok(XnnGraph {
        version: root.version().unwrap_or("").to_string(),
        nodes,
        values,
        num_externs,
        input_ids,
        output_ids,
        constant_data,
        constant_bytes: constants.to_vec(),
    })
}

fn decode_constants(
    root: fb::XNNGraph<'_>,
    region: u64,
    limits: &LoadLimits,
) -> Result<Vec<ConstantDataOffset>, LoadError> {
    let Some(list) = root.constant_data() else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(list.len());
    for (index, c) in list.iter().enumerate() {
        let (offset, size) = (c.offset(), c.size());
        // Present-but-empty keys (ExecuTorch's reserved entry) are kept as `Some("")`.
        let named_key = c.named_key();
        let key = named_key.filter(|k| !k.is_empty());
        let bad = |reason| LoadError::BadConstant { index, offset, size, reason };
        match key {
            Some(_) => {
                if !limits.allow_named_constants {
                    return Err(bad("named-data-store constant (the .pte holds its bytes); load with LoadLimits::lenient to inspect"));
                }
                if offset != u64::MAX {
                    return Err(bad("a named key requires offset UINT64_MAX"));
                }
            }
            None => {
                if offset == u64::MAX {
                    return Err(bad("offset UINT64_MAX without a named key"));
                }
                if offset.checked_add(size).is_none_or(|end| end > region) {
                    return Err(bad("lies outside the constant region"));
                }
            }
        }
        out.push(ConstantDataOffset { offset, size, named_key: named_key.map(str::to_string) });
    }
    Ok(out)
}

fn missing(table: &'static str, field: &'static str, index: usize) -> LoadError {
    LoadError::MissingField { table, field, index }
}

/// Safe reads of one verified table's scalar fields: the vtable is located once, where
/// each generated accessor locates it again for every field, and every read is a
/// bounds-checked slice read. The verifier has
/// already checked each field's bounds, so a read failing here (`None`) would be a
/// verifier bug; callers still turn it into a typed error, never a panic.
#[derive(Clone, Copy)]
struct Fields<'a> {
    buf: &'a [u8],
    /// The table's position in `buf`.
    loc: usize,
    /// Its vtable's bytes: `[length, object size, field offsets...]`.
    vt: &'a [u8],
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

impl<'a> Fields<'a> {
    fn of(t: flatbuffers::Table<'a>) -> Option<Fields<'a>> {
        let (buf, loc) = (t.buf(), t.loc());
        // The table starts with a signed offset back to its vtable.
        let soffset = le_u32(buf, loc)? as i32;
        let vt_loc = usize::try_from((loc as i64).checked_sub(i64::from(soffset))?).ok()?;
        let len = le_u16(buf, vt_loc)? as usize;
        Some(Fields { buf, loc, vt: buf.get(vt_loc..vt_loc.checked_add(len)?)? })
    }

    /// The field of vtable slot `slot` (the generated `VT_*` constant), or `None` when the
    /// table omits it (a slot past the vtable's end or a zero entry: the schema default).
    fn at(&self, slot: u16) -> Option<usize> {
        match le_u16(self.vt, slot as usize) {
            None | Some(0) => None,
            Some(o) => self.loc.checked_add(o as usize),
        }
    }

    /// A `uint` field whose schema default is 0 (every one in this schema).
    fn u32(&self, slot: u16) -> Option<u32> {
        match self.at(slot) {
            None => Some(0),
            Some(at) => le_u32(self.buf, at),
        }
    }

    /// A `short` field whose schema default is 0.
    fn i16(&self, slot: u16) -> Option<i16> {
        match self.at(slot) {
            None => Some(0),
            Some(at) => le_u16(self.buf, at).map(|x| x as i16),
        }
    }
}

/// The error for a verified table that [`Fields`] could not read (never expected).
fn unreadable(table: &'static str, index: usize) -> LoadError {
    LoadError::Verify(format!("{table} {index}: a verified table could not be read"))
}

/// `XNNTensorValue`'s scalars: (datatype, num_dims, constant_buffer_idx, external_id,
/// flags, id_out).
fn tensor_scalars(t: fb::XNNTensorValue<'_>) -> Option<(i16, u32, u32, u32, u32, u32)> {
    use fb::XNNTensorValue as T;
    let f = Fields::of(t._tab)?;
    Some((
        f.i16(T::VT_DATATYPE)?,
        f.u32(T::VT_NUM_DIMS)?,
        f.u32(T::VT_CONSTANT_BUFFER_IDX)?,
        f.u32(T::VT_EXTERNAL_ID)?,
        f.u32(T::VT_FLAGS)?,
        f.u32(T::VT_ID_OUT)?,
    ))
}

fn decode_tensor(i: usize, t: fb::XNNTensorValue<'_>) -> Result<XValue, LoadError> {
    let (raw, num_dims, constant_buffer_idx, external_id, flags, id_out) =
        tensor_scalars(t).ok_or_else(|| unreadable("value", i))?;
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
        return Err(LoadError::DimsMismatch { table: "value", index: i, num_dims, len: dims.len() });
    }
    Ok(XValue { datatype, dims, constant_buffer_idx, external_id, flags, id_out, quant: None })
}

fn decode_value(i: usize, xv: fb::XValue<'_>) -> Result<XValue, LoadError> {
    if let Some(t) = xv.xvalue_union_as_xnntensor_value() {
        return decode_tensor(i, t);
    }
    if let Some(q) = xv.xvalue_union_as_xnnquantized_tensor_value() {
        let t = q.tensor_value().ok_or_else(|| missing("XNNQuantizedTensorValue", "tensor_value", i))?;
        let mut v = decode_tensor(i, t)?;
        let quant = if let Some(p) = q.quant_params_as_per_tensor_quant() {
            QuantParams::PerTensor { scale: p.scale(), zero_point: p.zero_point() }
        } else if let Some(p) = q.quant_params_as_per_channel_quant() {
            QuantParams::PerChannel {
                scale: p.scale().map(|s| s.iter().collect()).unwrap_or_default(),
                channel_dim: p.channel_dim(),
                scale_buffer_idx: p.scale_buffer_idx(),
                num_scales: p.num_scales(),
            }
        } else {
            let ty = q.quant_params_type().0;
            if ty == 0 || ty > fb::XNNQuantParams::ENUM_MAX {
                return Err(LoadError::BadQuant {
                    value: i,
                    reason: format!("union type {ty} is not a quant params member"),
                });
            }
            if q.quant_params().is_none() {
                return Err(missing("XNNQuantizedTensorValue", "quant_params", i));
            }
            QuantParams::Other { type_id: ty }
        };
        v.quant = Some(quant);
        return Ok(v);
    }
    // Type NONE, a type beyond the schema, or a known type without its table.
    Err(missing("XValue", "xvalue_union", i))
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

fn is_float(d: XnnDatatype) -> bool {
    matches!(d, XnnDatatype::Fp32 | XnnDatatype::Fp16 | XnnDatatype::Bf16)
}

/// Value facts the node checks need, indexed by `id_out`.
struct ValueInfo {
    /// `id_out` -> index into `values`.
    by_id: Vec<usize>,
}

impl ValueInfo {
    fn index_of(&self, id: u32) -> Option<usize> {
        self.by_id.get(id as usize).copied().filter(|&i| i != usize::MAX)
    }
}

fn check_values(
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
        // Dynamic and blockwise members are kept by type id only; their datatype must be
        // one of the types those schemes quantize.
        (Some(QuantParams::Other { .. }), Qdint8 | Qpint8 | Qbint4) => Ok(()),
        (Some(q), d) => bad(format!("{} params do not fit {}", quant_name(q), d.name())),
    }
}

fn quant_name(q: &QuantParams) -> &'static str {
    match q {
        QuantParams::PerTensor { .. } => "PerTensorQuant",
        QuantParams::PerChannel { .. } => "PerChannelQuant",
        QuantParams::Other { .. } => "other",
    }
}

fn decode_node(i: usize, xn: fb::XNode<'_>, known_node_types: u8) -> Result<XNode, LoadError> {
    use XNodeKind::*;
    let type_id = xn.xnode_union_type().0;
    if type_id == 0 {
        return Err(LoadError::NoneNode { node: i });
    }
    if type_id as usize > NODE_TYPE_NAMES.len() || type_id > known_node_types {
        return Err(LoadError::UnknownNodeType { node: i, type_id });
    }
    let Some(table) = xn.xnode_union() else {
        return Err(missing("XNode", "xnode_union", i));
    };
    // The union's table, of the member `type_id` names (what each generated
    // `xnode_union_as_*` returns once the type matches), read field by field.
    let f = Fields::of(table).ok_or_else(|| unreadable("node", i))?;
    let n1 = || {
        use fb::_XNNNode1x1 as T;
        Some((f.u32(T::VT_INPUT_ID)?, f.u32(T::VT_OUTPUT_ID)?, f.u32(T::VT_FLAGS)?))
    };
    let n2 = || {
        use fb::_XNNNode2x1 as T;
        Some((f.u32(T::VT_INPUT1_ID)?, f.u32(T::VT_INPUT2_ID)?, f.u32(T::VT_OUTPUT_ID)?, f.u32(T::VT_FLAGS)?))
    };
    let conv = || {
        use fb::_XNNNodeConv as T;
        Some(ConvNode {
            padding_top: f.u32(T::VT_PADDING_TOP)?,
            padding_right: f.u32(T::VT_PADDING_RIGHT)?,
            padding_bottom: f.u32(T::VT_PADDING_BOTTOM)?,
            padding_left: f.u32(T::VT_PADDING_LEFT)?,
            kernel_height: f.u32(T::VT_KERNEL_HEIGHT)?,
            kernel_width: f.u32(T::VT_KERNEL_WIDTH)?,
            subsampling_height: f.u32(T::VT_SUBSAMPLING_HEIGHT)?,
            subsampling_width: f.u32(T::VT_SUBSAMPLING_WIDTH)?,
            dilation_height: f.u32(T::VT_DILATION_HEIGHT)?,
            dilation_width: f.u32(T::VT_DILATION_WIDTH)?,
            group_input_channels: f.u32(T::VT_GROUP_INPUT_CHANNELS)?,
            group_output_channels: f.u32(T::VT_GROUP_OUTPUT_CHANNELS)?,
            groups: f.u32(T::VT_GROUPS)?,
            adjustment_height: f.u32(T::VT_ADJUSTMENT_HEIGHT)?,
            adjustment_width: f.u32(T::VT_ADJUSTMENT_WIDTH)?,
            input1_id: f.u32(T::VT_INPUT1_ID)?,
            filter_id: f.u32(T::VT_FILTER_ID)?,
            bias_id: f.u32(T::VT_BIAS_ID)?,
            output_id: f.u32(T::VT_OUTPUT_ID)?,
            flags: f.u32(T::VT_FLAGS)?,
        })
    };
    use crate::xnn::node_type as nt;
    let kind = match type_id {
        nt::ADD => n2().map(|(input1_id, input2_id, output_id, flags)| Add { input1_id, input2_id, output_id, flags }),
        nt::SUBTRACT => {
            n2().map(|(input1_id, input2_id, output_id, flags)| Subtract { input1_id, input2_id, output_id, flags })
        }
        nt::MULTIPLY => {
            n2().map(|(input1_id, input2_id, output_id, flags)| Multiply { input1_id, input2_id, output_id, flags })
        }
        nt::DIV => n2().map(|(input1_id, input2_id, output_id, flags)| Div { input1_id, input2_id, output_id, flags }),
        nt::FULLY_CONNECTED => {
            use fb::XNNFullyConnected as T;
            (|| {
                Some(FullyConnected {
                    input1_id: f.u32(T::VT_INPUT1_ID)?,
                    filter_id: f.u32(T::VT_FILTER_ID)?,
                    bias_id: f.u32(T::VT_BIAS_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::CLAMP => n1().map(|(input_id, output_id, flags)| Clamp { input_id, output_id, flags }),
        nt::SQUARE => n1().map(|(input_id, output_id, flags)| Square { input_id, output_id, flags }),
        nt::RECIPROCAL_SQUARE_ROOT => {
            n1().map(|(input_id, output_id, flags)| ReciprocalSquareRoot { input_id, output_id, flags })
        }
        nt::CONVERT => n1().map(|(input_id, output_id, flags)| Convert { input_id, output_id, flags }),
        nt::COPY => n1().map(|(input_id, output_id, flags)| Copy { input_id, output_id, flags }),
        nt::GLOBAL_AVG_POOLING_2D => {
            n1().map(|(input_id, output_id, flags)| GlobalAvgPooling2d { input_id, output_id, flags })
        }
        nt::STATIC_TRANSPOSE => match xn.xnode_union_as_xnnstatic_transpose() {
            Some(t) => {
                let perm = t.perm().ok_or_else(|| missing("XNNStaticTranspose", "perm", i))?;
                if perm.len() > MAX_DIMS || perm.len() != t.num_dims() as usize {
                    return Err(LoadError::DimsMismatch {
                        table: "XNNStaticTranspose node",
                        index: i,
                        num_dims: t.num_dims(),
                        len: perm.len(),
                    });
                }
                Some(StaticTranspose {
                    perm: perm.iter().collect(),
                    input_id: t.input_id(),
                    output_id: t.output_id(),
                    flags: t.flags(),
                })
            }
            None => None,
        },
        nt::STATIC_RESHAPE => match xn.xnode_union_as_xnnstatic_reshape() {
            Some(t) => {
                let shape = t.new_shape().ok_or_else(|| missing("XNNStaticReshape", "new_shape", i))?;
                if shape.len() > MAX_DIMS || shape.len() != t.num_dims() as usize {
                    return Err(LoadError::DimsMismatch {
                        table: "XNNStaticReshape node",
                        index: i,
                        num_dims: t.num_dims(),
                        len: shape.len(),
                    });
                }
                Some(StaticReshape {
                    new_shape: shape.iter().collect(),
                    input_id: t.input_id(),
                    output_id: t.output_id(),
                    flags: t.flags(),
                })
            }
            None => None,
        },
        nt::STATIC_MEAN => match xn.xnode_union_as_xnnstatic_mean() {
            Some(t) => {
                let axes = t.reduction_axes().ok_or_else(|| missing("_XNNStaticReduce", "reduction_axes", i))?;
                if axes.len() > MAX_DIMS || axes.len() != t.num_reduction_axes() as usize {
                    return Err(LoadError::DimsMismatch {
                        table: "XNNStaticMean node",
                        index: i,
                        num_dims: t.num_reduction_axes(),
                        len: axes.len(),
                    });
                }
                Some(StaticMean {
                    reduction_axes: axes.iter().collect(),
                    input_id: t.input_id(),
                    output_id: t.output_id(),
                    flags: t.flags(),
                })
            }
            None => None,
        },
        nt::CONV_2D => conv().map(Conv2d),
        nt::DEPTHWISE_CONV_2D => conv().map(DepthwiseConv2d),
        _ => Some(Other { type_id }),
    };
    // `None`: a read failed in the member's table, present and of type `type_id` as
    // checked above (never expected after verification).
    let kind = kind.ok_or_else(|| unreadable("node", i))?;
    let output_min_max = xn.output_min_max().map(|m| (m.output_min(), m.output_max()));
    if let Some((lo, hi)) = output_min_max {
        // NaN bounds are incomparable, so they are refused too.
        if !matches!(lo.partial_cmp(&hi), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)) {
            return Err(LoadError::BadNode {
                node: i,
                node_type: kind.type_name(),
                field: "output_min_max",
                reason: format!("min {lo} is not at most max {hi}"),
            });
        }
    }
    Ok(XNode { kind, debug_handle: xn.debug_handle(), output_min_max })
}

/// A node's reads or writes: (schema field name, value id), at most five (the most any
/// member has), kept inline because every node of every payload builds two.
#[derive(Clone, Copy, Default)]
struct Ids {
    len: usize,
    items: [(&'static str, u32); 5],
}

impl Ids {
    fn of(items: &[(&'static str, u32)]) -> Ids {
        let mut ids = Ids::default();
        for &(f, id) in items {
            ids.push(f, id);
        }
        ids
    }

    fn push(&mut self, field: &'static str, id: u32) {
        self.items[self.len] = (field, id);
        self.len += 1;
    }

    fn as_slice(&self) -> &[(&'static str, u32)] {
        &self.items[..self.len]
    }
}

/// (reads, writes) of a node, with the schema's field names; optional ids
/// (`XNN_INVALID_VALUE_ID`) are left out.
fn node_io(kind: &XNodeKind, xn: fb::XNode<'_>) -> (Ids, Ids) {
    use XNodeKind::*;
    let opt = |v: &mut Ids, f: &'static str, id: u32| {
        if id != INVALID_VALUE_ID {
            v.push(f, id)
        }
    };
    match kind {
        Add { input1_id, input2_id, output_id, .. }
        | Subtract { input1_id, input2_id, output_id, .. }
        | Multiply { input1_id, input2_id, output_id, .. }
        | Div { input1_id, input2_id, output_id, .. } => {
            (Ids::of(&[("input1_id", *input1_id), ("input2_id", *input2_id)]), Ids::of(&[("output_id", *output_id)]))
        }
        FullyConnected { input1_id, filter_id, bias_id, output_id, .. } => {
            let mut r = Ids::of(&[("input1_id", *input1_id), ("filter_id", *filter_id)]);
            opt(&mut r, "bias_id", *bias_id);
            (r, Ids::of(&[("output_id", *output_id)]))
        }
        Clamp { input_id, output_id, .. }
        | Square { input_id, output_id, .. }
        | ReciprocalSquareRoot { input_id, output_id, .. }
        | Convert { input_id, output_id, .. }
        | Copy { input_id, output_id, .. }
        | GlobalAvgPooling2d { input_id, output_id, .. }
        | StaticTranspose { input_id, output_id, .. }
        | StaticReshape { input_id, output_id, .. }
        | StaticMean { input_id, output_id, .. } => {
            (Ids::of(&[("input_id", *input_id)]), Ids::of(&[("output_id", *output_id)]))
        }
        Conv2d(c) | DepthwiseConv2d(c) => {
            let mut r = Ids::of(&[("input1_id", c.input1_id), ("filter_id", c.filter_id)]);
            opt(&mut r, "bias_id", c.bias_id);
            (r, Ids::of(&[("output_id", c.output_id)]))
        }
        Other { .. } => other_io(xn),
    }
}

/// Reads and writes of the union members kept as `Other`, from their schema tables.
fn other_io(xn: fb::XNode<'_>) -> (Ids, Ids) {
    let one = |t: Option<fb::_XNNNode1x1<'_>>| {
        t.map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())])))
    };
    let two = |t: Option<fb::_XNNNode2x1<'_>>| {
        t.map(|t| {
            (
                Ids::of(&[("input1_id", t.input1_id()), ("input2_id", t.input2_id())]),
                Ids::of(&[("output_id", t.output_id())]),
            )
        })
    };
    let pool = |t: Option<fb::_XNNPooling2D<'_>>| {
        t.map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())])))
    };
    let cat = |t: Option<fb::_XNNCat<'_>>, n: usize| {
        t.map(|t| {
            let all = [
                ("input1_id", t.input1_id()),
                ("input2_id", t.input2_id()),
                ("input3_id", t.input3_id()),
                ("input4_id", t.input4_id()),
                ("input5_id", t.input5_id()),
            ];
            (Ids::of(&all[..n]), Ids::of(&[("output_id", t.output_id())]))
        })
    };
    let conv = |t: Option<fb::_XNNNodeConv<'_>>| {
        t.map(|c| {
            let mut r = Ids::of(&[("input1_id", c.input1_id()), ("filter_id", c.filter_id())]);
            if c.bias_id() != INVALID_VALUE_ID {
                r.push("bias_id", c.bias_id());
            }
            (r, Ids::of(&[("output_id", c.output_id())]))
        })
    };
    let io = match node_type_name(xn.xnode_union_type().0).unwrap_or("") {
        "XNNSoftmax" => one(xn.xnode_union_as_xnnsoftmax()),
        "XNNSigmoid" => one(xn.xnode_union_as_xnnsigmoid()),
        "XNNFloor" => one(xn.xnode_union_as_xnnfloor()),
        "XNNSquareRoot" => one(xn.xnode_union_as_xnnsquare_root()),
        "XNNCeiling" => one(xn.xnode_union_as_xnnceiling()),
        "XNNHardswish" => one(xn.xnode_union_as_xnnhardswish()),
        "XNNNegate" => one(xn.xnode_union_as_xnnnegate()),
        "XNNAbs" => one(xn.xnode_union_as_xnnabs()),
        "XNNLog" => one(xn.xnode_union_as_xnnlog()),
        "XNNGelu" => one(xn.xnode_union_as_xnngelu()),
        "XNNTanh" => one(xn.xnode_union_as_xnntanh()),
        "XNNExp" => one(xn.xnode_union_as_xnnexp()),
        "XNNSin" => one(xn.xnode_union_as_xnnsin()),
        "XNNCos" => one(xn.xnode_union_as_xnncos()),
        "XNNMinimum" => two(xn.xnode_union_as_xnnminimum()),
        "XNNMaximum" => two(xn.xnode_union_as_xnnmaximum()),
        "XNNPReLU" => two(xn.xnode_union_as_xnnpre_lu()),
        "XNNBatchMatrixMultiply" => two(xn.xnode_union_as_xnnbatch_matrix_multiply()),
        "XNNAvgPooling2d" => pool(xn.xnode_union_as_xnnavg_pooling_2d()),
        "XNNMaxPooling2d" => pool(xn.xnode_union_as_xnnmax_pooling_2d()),
        "XNNConcatenate2" => cat(xn.xnode_union_as_xnnconcatenate_2(), 2),
        "XNNConcatenate3" => cat(xn.xnode_union_as_xnnconcatenate_3(), 3),
        "XNNConcatenate4" => cat(xn.xnode_union_as_xnnconcatenate_4(), 4),
        "XNNConcatenate5" => cat(xn.xnode_union_as_xnnconcatenate_5(), 5),
        "XNNConvTranspose2d" => conv(xn.xnode_union_as_xnnconv_transpose_2d()),
        "XNNStaticResizeBilinear2D" => xn
            .xnode_union_as_xnnstatic_resize_bilinear_2_d()
            .map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())]))),
        "XNNStaticConstantPad" => xn
            .xnode_union_as_xnnstatic_constant_pad()
            .map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())]))),
        "XNNStaticSlice" => xn
            .xnode_union_as_xnnstatic_slice()
            .map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())]))),
        "XNNLeakyReLU" => xn
            .xnode_union_as_xnnleaky_re_lu()
            .map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())]))),
        "XNNELU" => xn
            .xnode_union_as_xnnelu()
            .map(|t| (Ids::of(&[("input_id", t.input_id())]), Ids::of(&[("output_id", t.output_id())]))),
        "XNNArgMaxPooling2d" => xn.xnode_union_as_xnnarg_max_pooling_2d().map(|t| {
            (
                Ids::of(&[("input_id", t.input_id())]),
                Ids::of(&[("output_value_id", t.output_value_id()), ("output_index_id", t.output_index_id())]),
            )
        }),
        "XNNScaledDotProductAttention" => xn.xnode_union_as_xnnscaled_dot_product_attention().map(|t| {
            let mut r = Ids::of(&[
                ("query_id", t.query_id()),
                ("key_id", t.key_id()),
                ("value_id", t.value_id()),
                ("scale_id", t.scale_id()),
            ]);
            if t.mask_id() != INVALID_VALUE_ID {
                r.push("mask_id", t.mask_id());
            }
            (r, Ids::of(&[("output_id", t.output_id())]))
        }),
        _ => None,
    };
    io.unwrap_or_default()
}

/// Which values hold data at the current node: external inputs, constants, and outputs of
/// earlier nodes.
struct Flow {
    ready: Vec<bool>,
}

impl Flow {
    fn new(values: &[XValue], info: &ValueInfo) -> Flow {
        let mut ready = vec![false; values.len()];
        for v in values {
            if v.flags & VALUE_FLAG_EXTERNAL_INPUT != 0 || v.constant_buffer_idx != 0 {
                if let Some(i) = info.index_of(v.id_out) {
                    ready[i] = true;
                }
            }
        }
        Flow { ready }
    }
}

fn check_node(
    i: usize,
    node: &XNode,
    xn: fb::XNode<'_>,
    values: &[XValue],
    info: &ValueInfo,
    flow: &mut Flow,
) -> Result<(), LoadError> {
    let node_type = node.kind.type_name();
    let (reads, writes) = node_io(&node.kind, xn);
    let val = |field: &'static str, id: u32| -> Result<usize, LoadError> {
        info.index_of(id).ok_or(LoadError::UndefinedId { node: i, node_type, field, id })
    };
    for &(field, id) in reads.as_slice() {
        let vi = val(field, id)?;
        if !flow.ready[vi] {
            return Err(LoadError::UseBeforeDef { node: i, node_type, field, id });
        }
    }
    for &(field, id) in writes.as_slice() {
        let vi = val(field, id)?;
        if flow.ready[vi] {
            return Err(LoadError::Redefined { node: i, node_type, field, id });
        }
        flow.ready[vi] = true;
    }
    let v = |id: u32| &values[info.index_of(id).unwrap_or(0)];
    let bad = |field: &'static str, reason: String| Err(LoadError::BadNode { node: i, node_type, field, reason });
    let same = |field: &'static str, a: u32, b: u32| -> Result<(), LoadError> {
        let (ea, eb) = (v(a).datatype, v(b).datatype);
        if ea != eb {
            return Err(LoadError::DtypeMismatch { node: i, node_type, field, expected: ea.name(), found: eb.name() });
        }
        Ok(())
    };
    use XNodeKind::*;
    match &node.kind {
        Add { input1_id, input2_id, output_id, .. }
        | Subtract { input1_id, input2_id, output_id, .. }
        | Multiply { input1_id, input2_id, output_id, .. }
        | Div { input1_id, input2_id, output_id, .. } => {
            same("input2_id", *input1_id, *input2_id)?;
            same("output_id", *input1_id, *output_id)?;
        }
        Clamp { input_id, output_id, .. }
        | Square { input_id, output_id, .. }
        | ReciprocalSquareRoot { input_id, output_id, .. }
        | Copy { input_id, output_id, .. }
        | StaticReshape { input_id, output_id, .. } => same("output_id", *input_id, *output_id)?,
        Convert { .. } | Other { .. } => {}
        GlobalAvgPooling2d { input_id, output_id, .. } => {
            same("output_id", *input_id, *output_id)?;
            let (ri, ro) = (v(*input_id).dims.len(), v(*output_id).dims.len());
            if ri != 4 || ro != 4 {
                return bad(
                    "input_id",
                    format!("global average pooling needs 4-D NHWC input and output, got ranks {ri} and {ro}"),
                );
            }
        }
        StaticTranspose { perm, input_id, output_id, .. } => {
            same("output_id", *input_id, *output_id)?;
            let (din, dout) = (&v(*input_id).dims, &v(*output_id).dims);
            if perm.len() != din.len() {
                return bad("perm", format!("{} entries for a rank-{} input", perm.len(), din.len()));
            }
            let mut seen = [false; MAX_DIMS];
            for &p in perm {
                match seen.get_mut(p as usize).filter(|_| (p as usize) < perm.len()) {
                    Some(s) if !*s => *s = true,
                    _ => return bad("perm", format!("{perm:?} is not a permutation of 0..{}", perm.len())),
                }
            }
            let expect: Vec<u32> = perm.iter().map(|&p| din[p as usize]).collect();
            if &expect != dout {
                return bad(
                    "output_id",
                    format!("output dims {dout:?} are not the input dims {din:?} permuted by {perm:?}"),
                );
            }
        }
        StaticMean { reduction_axes, input_id, output_id, flags } => {
            same("output_id", *input_id, *output_id)?;
            let (rin, rout) = (v(*input_id).dims.len(), v(*output_id).dims.len());
            if reduction_axes.is_empty() {
                return bad("reduction_axes", "is empty".into());
            }
            if reduction_axes.windows(2).any(|w| w[0] >= w[1]) {
                return bad("reduction_axes", format!("{reduction_axes:?} are not strictly ascending"));
            }
            if reduction_axes.iter().any(|&a| a as usize >= rin) {
                return bad("reduction_axes", format!("{reduction_axes:?} out of range for rank {rin}"));
            }
            let keep = flags & crate::xnn::FLAG_KEEP_DIMS != 0;
            let want = if keep { rin } else { rin - reduction_axes.len() };
            // ExecuTorch serializes a 0-D tensor as [1] (notes 1.8), so a full reduction
            // without keep_dims has a [1] output.
            let scalar_as_1 = want == 0 && v(*output_id).dims == [1];
            if rout != want && !scalar_as_1 {
                return bad("output_id", format!("rank {rout}, expected {want} (keep_dims {keep})"));
            }
        }
        FullyConnected { input1_id, filter_id, output_id, .. } => {
            check_weighted(i, node_type, v(*input1_id), v(*output_id))?;
            if v(*filter_id).dims.len() != 2 {
                return bad("filter_id", format!("filter rank {} is not 2", v(*filter_id).dims.len()));
            }
        }
        Conv2d(c) | DepthwiseConv2d(c) => {
            check_weighted(i, node_type, v(c.input1_id), v(c.output_id))?;
            for (field, id) in [("input1_id", c.input1_id), ("filter_id", c.filter_id), ("output_id", c.output_id)] {
                if v(id).dims.len() != 4 {
                    return bad(field, format!("rank {} is not 4", v(id).dims.len()));
                }
            }
        }
    }
    Ok(())
}

/// Convolution / fully connected: the output has the input's dtype, except that a
/// dynamically quantized input produces a float output.
fn check_weighted(node: usize, node_type: &'static str, input: &XValue, output: &XValue) -> Result<(), LoadError> {
    let ok = input.datatype == output.datatype || (input.datatype == XnnDatatype::Qdint8 && is_float(output.datatype));
    if ok {
        Ok(())
    } else {
        Err(LoadError::DtypeMismatch {
            node,
            node_type,
            field: "output_id",
            expected: input.datatype.name(),
            found: output.datatype.name(),
        })
    }
}
