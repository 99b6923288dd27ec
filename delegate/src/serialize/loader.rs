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
//! a verified flatbuffer vector (so by the input length) or by a checked limit. Nothing is
//! dropped either: every field of every table is decoded into the graph, and a table that
//! sets a field the graph cannot hold (a deprecated field, or a vtable slot past the
//! schema's last field, as a newer writer would make) is refused, so what loads writes
//! back field for field. Values are decoded in [`value`], nodes in [`node`].

mod node;
mod value;

use super::fb;
use super::header::XnnHeader;
use crate::xnn::{ConstantDataOffset, XnnGraph, MAX_EXTERNS, NODE_TYPE_NAMES};
use node::{check_node, decode_node, Flow};
use value::{check_values, decode_value};

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
    #[error("{table} {index}: {count_field} = {count} but {list} holds {len} entries")]
    CountMismatch {
        table: &'static str,
        index: usize,
        count_field: &'static str,
        count: u32,
        list: &'static str,
        len: usize,
    },
    #[error("{table} {index}: vtable slot {slot} lies past the schema's last field (this loader would drop it)")]
    UnknownField { table: &'static str, index: usize, slot: u16 },
    #[error("{table} {index}: deprecated field {field} is set (this loader would drop it)")]
    DeprecatedField { table: &'static str, index: usize, field: &'static str },
    #[error("value {value}: union type {type_id} is not an XValueUnion member")]
    UnknownValueType { value: usize, type_id: u8 },
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
    use fb::XNNGraph as T;
    // constant_buffer and mem_buffer_sizes (deprecated, slots 16 and 18): the runtime
    // schema's pre-constant_data path, which ExecuTorch's export no longer writes.
    modelled(root._tab, "XNNGraph", 0, T::VT_CONSTANT_DATA, &[(16, "constant_buffer"), (18, "mem_buffer_sizes")])?;
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
        check_node(i, &node, &values, &info, &mut flow)?;
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
        modelled(c._tab, "ConstantDataOffset", index, fb::ConstantDataOffset::VT_NAMED_KEY, &[])?;
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

    /// A `float` field whose schema default is 0.0.
    fn f32(&self, slot: u16) -> Option<f32> {
        self.u32(slot).map(f32::from_bits)
    }

    /// The first vtable slot past `last` that holds a field, if any (entries of zero
    /// mean "absent"; an odd trailing byte holds no entry).
    fn slot_past(&self, last: u16) -> Option<u16> {
        let entries = self.vt.len() / 2;
        (last as usize / 2 + 1..entries)
            .find(|&k| matches!(le_u16(self.vt, 2 * k), Some(o) if o != 0))
            .map(|k| 2 * k as u16)
    }
}

/// The fields of table `t` (the `index`-th of its kind), after checking that it sets no
/// field the graph cannot hold: none past `last` (the schema's last field slot) and none of
/// the schema's `deprecated` (slot, name) fields.
fn modelled<'a>(
    t: flatbuffers::Table<'a>,
    table: &'static str,
    index: usize,
    last: u16,
    deprecated: &[(u16, &'static str)],
) -> Result<Fields<'a>, LoadError> {
    let f = Fields::of(t).ok_or_else(|| unreadable(table, index))?;
    if let Some(slot) = f.slot_past(last) {
        return Err(LoadError::UnknownField { table, index, slot });
    }
    if let Some(&(_, field)) = deprecated.iter().find(|(slot, _)| f.at(*slot).is_some()) {
        return Err(LoadError::DeprecatedField { table, index, field });
    }
    Ok(f)
}

/// The error for a verified table that [`Fields`] could not read (never expected).
fn unreadable(table: &'static str, index: usize) -> LoadError {
    LoadError::Verify(format!("{table} {index}: a verified table could not be read"))
}
