//! `XnnGraph` -> payload bytes: the `XH00` header, the `XN01` flatbuffer padded to 16, then
//! the constant region.
//!
//! Deterministic by construction: tables are built in one fixed walk of the graph, there is
//! no hash map anywhere, and scalars equal to their schema default are omitted, as flatc
//! does. The encoder ([`Enc`]) makes the same bytes as the flatbuffers builder driven by
//! the generated `create` functions (a unit test compares the two on 2,000 random graphs)
//! with about half its instructions: the fuzz job writes each segment three times. Objects
//! are created in the order flatc's JSON parser creates them for the JSON ExecuTorch feeds
//! it, so the bytes are ExecuTorch's own: the tests rewrite every real ExecuTorch 1.5.1
//! payload byte for byte, and match flatc 25.12.19 on our schema's JSON.

use super::fb;
use super::header::{align16, XnnHeader};
use crate::xnn::{ConstantDataOffset, QuantParams, XNode, XNodeKind, XValue, XnnGraph};

/// Serializes `graph` into an ExecuTorch XNNPACK delegate payload.
pub fn write(graph: &XnnGraph) -> Vec<u8> {
    let enc = encode(graph, estimate(graph));
    let fb = enc.bytes();
    let header = XnnHeader::for_sizes(fb.len() as u32, graph.constant_bytes.len() as u64);
    let padded = align16(fb.len()).unwrap_or(fb.len());
    let mut out = Vec::with_capacity(32 + padded + graph.constant_bytes.len());
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(fb);
    out.resize(32 + padded, 0);
    out.extend_from_slice(&graph.constant_bytes);
    out
}

/// The bare `XN01` flatbuffer of `graph` (no header, no constant data).
pub fn write_flatbuffer(graph: &XnnGraph) -> Vec<u8> {
    encode(graph, estimate(graph)).bytes().to_vec()
}

/// More bytes than a graph usually takes, so the encoder's buffer rarely grows.
fn estimate(graph: &XnnGraph) -> usize {
    128 + graph.version.len() + 80 * graph.nodes.len() + 96 * graph.values.len() + 48 * graph.constant_data.len()
}

/// Encodes `graph` with [`Enc`] (starting with `capacity` bytes), making exactly the calls
/// the generated `create` functions make on a `FlatBufferBuilder`, in the same order (see
/// [`builder_reference`], the same walk through the generated API, which the tests compare
/// byte for byte).
fn encode(graph: &XnnGraph, capacity: usize) -> Enc {
    let mut e = Enc::with_capacity(capacity);
    let version = e.string(&graph.version);

    // Objects are created in the order flatc meets them in ExecuTorch's JSON (children
    // before parents, fields in declaration order), so the layout matches flatc's.
    let mut offsets = Vec::with_capacity(graph.nodes.len().max(graph.values.len()).max(graph.constant_data.len()));
    offsets.extend(graph.nodes.iter().map(|n| enc_node(&mut e, n)));
    let xnodes = e.offset_vector(&offsets);

    offsets.clear();
    enc_values(&mut e, graph, &mut offsets);
    let xvalues = e.offset_vector(&offsets);

    let input_ids = e.u32_vector(&graph.input_ids);
    let output_ids = e.u32_vector(&graph.output_ids);
    offsets.clear();
    offsets.extend(graph.constant_data.iter().map(|c| enc_constant(&mut e, c)));
    let constant_data = e.offset_vector(&offsets);

    // XNNGraph, fields in the generated `create` order (largest first, last field first).
    let t = e.start_table();
    e.slot_offset(20, constant_data);
    e.slot_offset(14, output_ids);
    e.slot_offset(12, input_ids);
    e.slot_u32(10, graph.num_externs);
    e.slot_offset(8, xvalues);
    e.slot_offset(6, xnodes);
    e.slot_offset(4, version);
    let root = e.end_table(t);
    e.finish(root, fb::XNNGRAPH_IDENTIFIER);
    e
}

/// Vtable entries the largest table here needs: `_XNNNodeConv`'s 22, rounded up.
const MAX_VT_ENTRIES: usize = 24;

/// A vtable's bytes `[length, object size, field offsets...]` (little-endian u16s),
/// zero-padded to the longest vtable: two vtables have the same bytes exactly when these
/// are equal (the length is the first entry, so vtables of different lengths differ too).
type VtBytes = [u8; 2 * MAX_VT_ENTRIES];

/// A flatbuffer encoder that produces the same bytes as `flatbuffers::FlatBufferBuilder`
/// (25.12.19) for the same sequence of calls, with less work per field: the generated
/// `create` functions spend ~1,000 instructions per table in the builder's generic
/// machinery, which dominated writing a payload.
///
/// Like the builder it writes back to front into a zeroed buffer: the bytes written so far
/// are `buf[head..]`, and a position is what the builder calls a reverse location, the
/// number of bytes from an object's first byte to the end of the buffer. Everything before
/// `head` is still zero (nothing is ever written there and taken back: a duplicate vtable
/// is found before it would be written), so padding is only a move of `head`.
/// The rules it copies from the builder:
/// - a scalar of size `s` and alignment `a` is preceded by zero padding so that the used
///   length after it is a multiple of `a`; `min_align` keeps the largest alignment used,
///   which `finish` pads the whole buffer to;
/// - a table field is written only when it differs from its default (`!=`, so `-0.0`
///   equals a `0.0` default and is omitted), offsets always;
/// - a uoffset field holds the distance from itself to its target;
/// - `end_table` writes the soffset, then a vtable `[len, object size, field offsets]`
///   (zero for absent fields), unless a byte-identical vtable was already written, which
///   is then shared (the builder searches every vtable written so far).
struct Enc {
    buf: Vec<u8>,
    head: usize,
    min_align: usize,
    /// Position of every vtable written, the first 8 of its bytes (which tell most
    /// vtables apart in one comparison), and all of them.
    vtables: Vec<(usize, u64, VtBytes)>,
    /// Position of each field of the table under construction, by vtable entry
    /// (slot / 2); 0 for a field not written (no field ends at position 0).
    field_at: [usize; MAX_VT_ENTRIES],
    /// Entries the vtable of the table under construction needs: at least the two
    /// header entries, and up to the last field written.
    entries: usize,
}

/// Zero bytes needed before `len` more bytes so that `used + len` is a multiple of `align`
/// (the builder's `padding_bytes`).
fn padding(used: usize, len: usize, align: usize) -> usize {
    (!(used + len)).wrapping_add(1) & (align - 1)
}

impl Enc {
    fn with_capacity(n: usize) -> Enc {
        Enc {
            buf: vec![0; n],
            head: n,
            min_align: 1,
            vtables: Vec::with_capacity(16),
            field_at: [0; MAX_VT_ENTRIES],
            entries: 2,
        }
    }

    /// The finished flatbuffer.
    fn bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Bytes written so far (the builder's `used_space`).
    fn used(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Makes room for at least `n` more bytes, keeping what was written at the end.
    #[inline]
    fn reserve(&mut self, n: usize) {
        if self.head < n {
            self.grow(n);
        }
    }

    /// [`Enc::reserve`]'s rare case, kept out of line so that every push stays small.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        let used = self.used();
        let len = (2 * self.buf.len()).max(used + n).max(64);
        let mut grown = vec![0; len];
        grown[len - used..].copy_from_slice(&self.buf[self.head..]);
        self.buf = grown;
        self.head = len - used;
    }

    /// The builder's `align`: pads so that `len` more bytes end aligned to `align`, and
    /// makes room for those bytes too.
    fn align(&mut self, len: usize, align: usize) {
        self.min_align = self.min_align.max(align);
        let pad = padding(self.used(), len, align);
        self.reserve(pad + len);
        self.head -= pad;
    }

    /// Writes `bytes` at the front, with no alignment; room must have been made.
    fn put(&mut self, bytes: &[u8]) {
        self.head -= bytes.len();
        self.buf[self.head..self.head + bytes.len()].copy_from_slice(bytes);
    }

    /// Pushes the little-endian bytes of a scalar of alignment `N`; returns its position.
    fn push<const N: usize>(&mut self, le: [u8; N]) -> usize {
        self.align(N, N);
        self.put(&le);
        self.used()
    }

    /// A uoffset to the object at position `target`, written as a scalar.
    fn push_offset(&mut self, target: usize) -> usize {
        self.align(4, 4);
        let at = self.used() + 4;
        self.put(&((at - target) as u32).to_le_bytes());
        at
    }

    fn string(&mut self, s: &str) -> usize {
        self.align(s.len() + 1, 4);
        self.put(&[0]);
        self.put(s.as_bytes());
        self.push((s.len() as u32).to_le_bytes())
    }

    /// Room for `n` four-byte elements, aligned, as the builder's `create_vector` makes it.
    fn vector_body(&mut self, n: usize) -> &mut [u8] {
        self.align(n * 4, 4);
        self.head -= n * 4;
        &mut self.buf[self.head..self.head + n * 4]
    }

    fn u32_vector(&mut self, items: &[u32]) -> usize {
        for (out, x) in self.vector_body(items.len()).chunks_exact_mut(4).zip(items) {
            out.copy_from_slice(&x.to_le_bytes());
        }
        self.push((items.len() as u32).to_le_bytes())
    }

    fn f32_vector(&mut self, items: &[f32]) -> usize {
        for (out, x) in self.vector_body(items.len()).chunks_exact_mut(4).zip(items) {
            out.copy_from_slice(&x.to_bits().to_le_bytes());
        }
        self.push((items.len() as u32).to_le_bytes())
    }

    /// A vector of uoffsets to the objects at `targets` (element `i` points at `targets[i]`).
    fn offset_vector(&mut self, targets: &[usize]) -> usize {
        // Element `i` lies at position `end - 4 * i`, `end` being the first one's.
        let end = self.used() + padding(self.used(), targets.len() * 4, 4) + targets.len() * 4;
        for (i, (out, &t)) in self.vector_body(targets.len()).chunks_exact_mut(4).zip(targets).enumerate() {
            out.copy_from_slice(&((end - 4 * i - t) as u32).to_le_bytes());
        }
        self.push((targets.len() as u32).to_le_bytes())
    }

    fn start_table(&mut self) -> usize {
        self.used()
    }

    fn field<const N: usize>(&mut self, slot: u16, le: [u8; N]) {
        let at = self.push(le);
        self.mark(slot, at);
    }

    /// Records that the field of vtable slot `slot` (a byte offset: entry `slot / 2`)
    /// ends at position `at`.
    fn mark(&mut self, slot: u16, at: usize) {
        let k = slot as usize / 2;
        self.field_at[k] = at;
        self.entries = self.entries.max(k + 1);
    }

    fn slot_u32(&mut self, slot: u16, x: u32) {
        if x != 0 {
            self.field(slot, x.to_le_bytes());
        }
    }

    fn slot_i32(&mut self, slot: u16, x: i32) {
        if x != 0 {
            self.field(slot, x.to_le_bytes());
        }
    }

    fn slot_u64(&mut self, slot: u16, x: u64) {
        if x != 0 {
            self.field(slot, x.to_le_bytes());
        }
    }

    fn slot_f32(&mut self, slot: u16, x: f32) {
        if x != 0.0 {
            self.field(slot, x.to_bits().to_le_bytes());
        }
    }

    fn slot_i16(&mut self, slot: u16, x: i16) {
        if x != 0 {
            self.field(slot, x.to_le_bytes());
        }
    }

    fn slot_u8(&mut self, slot: u16, x: u8) {
        if x != 0 {
            self.field(slot, [x]);
        }
    }

    fn slot_offset(&mut self, slot: u16, target: usize) {
        let at = self.push_offset(target);
        self.mark(slot, at);
    }

    /// The builder's `end_table` / `write_vtable`; returns the table's position.
    fn end_table(&mut self, start: usize) -> usize {
        let obj = self.push(0xF0F0_F0F0u32.to_le_bytes());
        let n = self.entries;
        let mut vt: VtBytes = [0; 2 * MAX_VT_ENTRIES];
        vt[0..2].copy_from_slice(&(2 * n as u16).to_le_bytes());
        vt[2..4].copy_from_slice(&((obj - start) as u16).to_le_bytes());
        for k in 2..n {
            let at = std::mem::take(&mut self.field_at[k]);
            if at != 0 {
                vt[2 * k..2 * k + 2].copy_from_slice(&((obj - at) as u16).to_le_bytes());
            }
        }
        self.entries = 2;
        // Vtables are unique, so the search order does not change the result; newest first
        // finds the vtable of the kind of table being written (nodes, then values, then
        // constants) in a step or two.
        let first = u64::from_le_bytes([vt[0], vt[1], vt[2], vt[3], vt[4], vt[5], vt[6], vt[7]]);
        let found = self.vtables.iter().rev().find(|(_, f, v)| *f == first && *v == vt).map(|&(pos, _, _)| pos);
        let vt_pos = match found {
            Some(pos) => pos,
            None => {
                self.reserve(2 * n);
                self.put(&vt[..2 * n]);
                let pos = self.used();
                self.vtables.push((pos, first, vt));
                pos
            }
        };
        let soffset = vt_pos as i32 - obj as i32;
        let at = self.buf.len() - obj;
        self.buf[at..at + 4].copy_from_slice(&soffset.to_le_bytes());
        obj
    }

    /// The builder's `finish` with a file identifier, no size prefix.
    fn finish(&mut self, root: usize, identifier: &str) {
        self.vtables.clear();
        let align = self.min_align;
        self.align(8, align);
        self.put(identifier.as_bytes());
        self.push_offset(root);
    }
}

/// Encodes the values in [`value_order`], pushing each one's position onto `offsets`.
fn enc_values(e: &mut Enc, graph: &XnnGraph, offsets: &mut Vec<usize>) {
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::HashOrderValueIds) {
        offsets.extend(value_order(graph).into_iter().map(|i| enc_value(e, &graph.values[i])));
        return;
    }
    // The graph's own order, without building the index list.
    offsets.extend(graph.values.iter().map(|v| enc_value(e, v)));
}

/// The order in which values are emitted: their order in the graph (ExecuTorch's
/// first-definition order). Only the tests and the seeded bug build the list; the writer
/// walks the values directly.
#[cfg(any(test, feature = "mutants"))]
fn value_order(graph: &XnnGraph) -> Vec<usize> {
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::HashOrderValueIds) {
        // Seeded bug: a per-process randomly seeded hash map decides the order, so two
        // processes emit different bytes for the same graph.
        let map: std::collections::HashMap<u32, usize> =
            graph.values.iter().enumerate().map(|(i, v)| (v.id_out, i)).collect();
        return map.into_values().collect();
    }
    (0..graph.values.len()).collect()
}

/// The wire union type id of a node kind.
fn wire_type_id(kind: &XNodeKind) -> u8 {
    let id = kind.type_id();
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::StaticMeanMidUnion) {
        // Seeded bug: XNNStaticMean declared right after XNNStaticTranspose (id 5), so it
        // takes id 6 and every later member shifts up by one.
        let mean = crate::xnn::node_type_id("XNNStaticMean").unwrap_or(u8::MAX);
        return if id == mean {
            6
        } else if id >= 6 && id < mean {
            id + 1
        } else {
            id
        };
    }
    id
}

fn enc_constant(e: &mut Enc, c: &ConstantDataOffset) -> usize {
    // A key is written exactly when present, empty included: ExecuTorch's reserved entry 0
    // carries a present-but-empty key (flatc writes empty strings), which the lowering
    // mirrors as `Some("")`.
    let key = c.named_key.as_deref().map(|k| e.string(k));
    let t = e.start_table();
    e.slot_u64(6, c.size);
    e.slot_u64(4, c.offset);
    if let Some(k) = key {
        e.slot_offset(8, k);
    }
    e.end_table(t)
}

fn enc_tensor(e: &mut Enc, v: &XValue) -> usize {
    let dims = e.u32_vector(&v.dims);
    let t = e.start_table();
    e.slot_u32(16, v.id_out);
    e.slot_u32(14, v.flags);
    e.slot_u32(12, v.external_id);
    e.slot_u32(10, v.constant_buffer_idx);
    e.slot_offset(8, dims);
    e.slot_u32(6, v.dims.len() as u32);
    e.slot_i16(4, v.datatype as i16);
    e.end_table(t)
}

fn enc_value(e: &mut Enc, v: &XValue) -> usize {
    let (ty, off) = match &v.quant {
        None => (fb::XValueUnion::XNNTensorValue, enc_tensor(e, v)),
        Some(q) => {
            let tensor = enc_tensor(e, v);
            let (qty, qoff) = enc_quant(e, q);
            let t = e.start_table();
            if qty != 0 {
                e.slot_offset(8, qoff);
            }
            e.slot_offset(4, tensor);
            e.slot_u8(6, qty);
            (fb::XValueUnion::XNNQuantizedTensorValue, e.end_table(t))
        }
    };
    let t = e.start_table();
    e.slot_offset(6, off);
    e.slot_u8(4, ty.0);
    e.end_table(t)
}

/// The quant params table and its union type id.
fn enc_quant(e: &mut Enc, q: &QuantParams) -> (u8, usize) {
    match q {
        QuantParams::PerTensor { scale, zero_point } => {
            let t = e.start_table();
            e.slot_i32(6, *zero_point);
            e.slot_f32(4, *scale);
            (fb::XNNQuantParams::PerTensorQuant.0, e.end_table(t))
        }
        QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales } => {
            let s = e.f32_vector(scale);
            let t = e.start_table();
            e.slot_u32(10, *num_scales);
            e.slot_u32(8, *scale_buffer_idx);
            e.slot_i32(6, *channel_dim);
            e.slot_offset(4, s);
            (fb::XNNQuantParams::PerChannelQuant.0, e.end_table(t))
        }
        // Another member kept only by its type id: an empty table of that type.
        QuantParams::Other { type_id } => {
            let t = e.start_table();
            (*type_id, e.end_table(t))
        }
    }
}

/// `_XNNNode1x1` (input_id 4, output_id 6, flags 8) and the tables laid out like it.
fn enc_1x1(e: &mut Enc, input_id: u32, output_id: u32, flags: u32) -> usize {
    let t = e.start_table();
    e.slot_u32(8, flags);
    e.slot_u32(6, output_id);
    e.slot_u32(4, input_id);
    e.end_table(t)
}

/// `XNNStaticTranspose`, `XNNStaticReshape` and `_XNNStaticReduce`: a count (4), a list
/// (6), input_id 8, output_id 10, flags 12.
fn enc_list_node(e: &mut Enc, list: &[u32], input_id: u32, output_id: u32, flags: u32) -> usize {
    let l = e.u32_vector(list);
    let t = e.start_table();
    e.slot_u32(12, flags);
    e.slot_u32(10, output_id);
    e.slot_u32(8, input_id);
    e.slot_offset(6, l);
    e.slot_u32(4, list.len() as u32);
    e.end_table(t)
}

fn enc_node(e: &mut Enc, n: &XNode) -> usize {
    use XNodeKind::*;
    let payload = match &n.kind {
        Add { input1_id, input2_id, output_id, flags }
        | Subtract { input1_id, input2_id, output_id, flags }
        | Multiply { input1_id, input2_id, output_id, flags }
        | Div { input1_id, input2_id, output_id, flags } => {
            // _XNNNode2x1: input1_id 4, input2_id 6, output_id 8, flags 10.
            let t = e.start_table();
            e.slot_u32(10, *flags);
            e.slot_u32(8, *output_id);
            e.slot_u32(6, *input2_id);
            e.slot_u32(4, *input1_id);
            e.end_table(t)
        }
        FullyConnected { input1_id, filter_id, bias_id, output_id, flags } => {
            let t = e.start_table();
            e.slot_u32(12, *flags);
            e.slot_u32(10, *output_id);
            e.slot_u32(8, *bias_id);
            e.slot_u32(6, *filter_id);
            e.slot_u32(4, *input1_id);
            e.end_table(t)
        }
        Clamp { input_id, output_id, flags }
        | Square { input_id, output_id, flags }
        | ReciprocalSquareRoot { input_id, output_id, flags }
        | Convert { input_id, output_id, flags }
        | Copy { input_id, output_id, flags }
        | GlobalAvgPooling2d { input_id, output_id, flags } => enc_1x1(e, *input_id, *output_id, *flags),
        StaticTranspose { perm: list, input_id, output_id, flags }
        | StaticReshape { new_shape: list, input_id, output_id, flags }
        | StaticMean { reduction_axes: list, input_id, output_id, flags } => {
            enc_list_node(e, list, *input_id, *output_id, *flags)
        }
        Conv2d(c) | DepthwiseConv2d(c) => {
            // _XNNNodeConv: fields 4 (padding_top) to 42 (flags), two bytes apart.
            let t = e.start_table();
            e.slot_u32(42, c.flags);
            e.slot_u32(40, c.output_id);
            e.slot_u32(38, c.bias_id);
            e.slot_u32(36, c.filter_id);
            e.slot_u32(34, c.input1_id);
            e.slot_u32(32, c.adjustment_width);
            e.slot_u32(30, c.adjustment_height);
            e.slot_u32(28, c.groups);
            e.slot_u32(26, c.group_output_channels);
            e.slot_u32(24, c.group_input_channels);
            e.slot_u32(22, c.dilation_width);
            e.slot_u32(20, c.dilation_height);
            e.slot_u32(18, c.subsampling_width);
            e.slot_u32(16, c.subsampling_height);
            e.slot_u32(14, c.kernel_width);
            e.slot_u32(12, c.kernel_height);
            e.slot_u32(10, c.padding_left);
            e.slot_u32(8, c.padding_bottom);
            e.slot_u32(6, c.padding_right);
            e.slot_u32(4, c.padding_top);
            e.end_table(t)
        }
        // A member kept only by its type id: an empty table of that type (every field at
        // its default), which decodes back to the same `Other`.
        Other { .. } => {
            let t = e.start_table();
            e.end_table(t)
        }
    };
    let mm = n.output_min_max.map(|(lo, hi)| {
        let t = e.start_table();
        e.slot_f32(6, hi);
        e.slot_f32(4, lo);
        e.end_table(t)
    });
    let type_id = wire_type_id(&n.kind);
    // XNode: xnode_union_type 4, xnode_union 6, debug_handle 8, output_min_max 10.
    let t = e.start_table();
    if let Some(m) = mm {
        e.slot_offset(10, m);
    }
    e.slot_u32(8, n.debug_handle);
    // Type NONE has no value (the verifier requires both or neither).
    if type_id != 0 {
        e.slot_offset(6, payload);
    }
    e.slot_u8(4, type_id);
    e.end_table(t)
}

/// The same walk through the generated `FlatBufferBuilder` API, as the writer was before
/// [`Enc`]: the tests check that both produce the same bytes.
#[cfg(test)]
mod builder_reference {
    use super::*;
    use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

    pub fn write_flatbuffer(graph: &XnnGraph) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(1024);
        let version = b.create_string(&graph.version);
        let nodes: Vec<_> = graph.nodes.iter().map(|n| write_node(&mut b, n)).collect();
        let xnodes = b.create_vector(&nodes);
        let values: Vec<_> = value_order(graph).iter().map(|&i| write_value(&mut b, &graph.values[i])).collect();
        let xvalues = b.create_vector(&values);
        let input_ids = b.create_vector(&graph.input_ids);
        let output_ids = b.create_vector(&graph.output_ids);
        let constants: Vec<_> = graph.constant_data.iter().map(|c| write_constant(&mut b, c)).collect();
        let constant_data = b.create_vector(&constants);
        let root = fb::XNNGraph::create(
            &mut b,
            &fb::XNNGraphArgs {
                version: Some(version),
                xnodes: Some(xnodes),
                xvalues: Some(xvalues),
                num_externs: graph.num_externs,
                input_ids: Some(input_ids),
                output_ids: Some(output_ids),
                constant_data: Some(constant_data),
            },
        );
        b.finish(root, Some(fb::XNNGRAPH_IDENTIFIER));
        b.finished_data().to_vec()
    }

    fn write_constant<'a>(
        b: &mut FlatBufferBuilder<'a>,
        c: &ConstantDataOffset,
    ) -> WIPOffset<fb::ConstantDataOffset<'a>> {
        // A key is written exactly when present, empty included: ExecuTorch's reserved entry 0
        // carries a present-but-empty key (flatc writes empty strings), which the lowering
        // mirrors as `Some("")`.
        let key = c.named_key.as_deref().map(|k| b.create_string(k));
        fb::ConstantDataOffset::create(
            b,
            &fb::ConstantDataOffsetArgs { offset: c.offset, size: c.size, named_key: key },
        )
    }

    fn write_tensor<'a>(b: &mut FlatBufferBuilder<'a>, v: &XValue) -> WIPOffset<fb::XNNTensorValue<'a>> {
        let dims = b.create_vector(&v.dims);
        fb::XNNTensorValue::create(
            b,
            &fb::XNNTensorValueArgs {
                datatype: fb::XNNDatatype(v.datatype as i16),
                num_dims: v.dims.len() as u32,
                dims: Some(dims),
                constant_buffer_idx: v.constant_buffer_idx,
                external_id: v.external_id,
                flags: v.flags,
                id_out: v.id_out,
            },
        )
    }

    fn write_value<'a>(b: &mut FlatBufferBuilder<'a>, v: &XValue) -> WIPOffset<fb::XValue<'a>> {
        let (ty, off): (fb::XValueUnion, WIPOffset<UnionWIPOffset>) = match &v.quant {
            None => (fb::XValueUnion::XNNTensorValue, write_tensor(b, v).as_union_value()),
            Some(q) => {
                let tensor = write_tensor(b, v);
                let (qty, qoff) = write_quant(b, q);
                let qt = fb::XNNQuantizedTensorValue::create(
                    b,
                    &fb::XNNQuantizedTensorValueArgs {
                        tensor_value: Some(tensor),
                        quant_params_type: qty,
                        quant_params: (qty.0 != 0).then_some(qoff),
                    },
                );
                (fb::XValueUnion::XNNQuantizedTensorValue, qt.as_union_value())
            }
        };
        fb::XValue::create(b, &fb::XValueArgs { xvalue_union_type: ty, xvalue_union: Some(off) })
    }

    fn write_quant<'a>(
        b: &mut FlatBufferBuilder<'a>,
        q: &QuantParams,
    ) -> (fb::XNNQuantParams, WIPOffset<UnionWIPOffset>) {
        match q {
            QuantParams::PerTensor { scale, zero_point } => (
                fb::XNNQuantParams::PerTensorQuant,
                fb::PerTensorQuant::create(b, &fb::PerTensorQuantArgs { scale: *scale, zero_point: *zero_point })
                    .as_union_value(),
            ),
            QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales } => {
                let s = b.create_vector(scale);
                let t = fb::PerChannelQuant::create(
                    b,
                    &fb::PerChannelQuantArgs {
                        scale: Some(s),
                        channel_dim: *channel_dim,
                        scale_buffer_idx: *scale_buffer_idx,
                        num_scales: *num_scales,
                    },
                );
                (fb::XNNQuantParams::PerChannelQuant, t.as_union_value())
            }
            // Another member kept only by its type id: an empty table of that type.
            QuantParams::Other { type_id } => (fb::XNNQuantParams(*type_id), empty_table(b)),
        }
    }

    fn empty_table(b: &mut FlatBufferBuilder<'_>) -> WIPOffset<UnionWIPOffset> {
        let start = b.start_table();
        let t: WIPOffset<flatbuffers::TableFinishedWIPOffset> = b.end_table(start);
        WIPOffset::new(t.value())
    }

    fn node1x1(b: &mut FlatBufferBuilder<'_>, input_id: u32, output_id: u32, flags: u32) -> WIPOffset<UnionWIPOffset> {
        fb::_XNNNode1x1::create(b, &fb::_XNNNode1x1Args { input_id, output_id, flags }).as_union_value()
    }

    fn node2x1(
        b: &mut FlatBufferBuilder<'_>,
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    ) -> WIPOffset<UnionWIPOffset> {
        fb::_XNNNode2x1::create(b, &fb::_XNNNode2x1Args { input1_id, input2_id, output_id, flags }).as_union_value()
    }

    fn write_node<'a>(b: &mut FlatBufferBuilder<'a>, n: &XNode) -> WIPOffset<fb::XNode<'a>> {
        use XNodeKind::*;
        let payload = match &n.kind {
            Add { input1_id, input2_id, output_id, flags }
            | Subtract { input1_id, input2_id, output_id, flags }
            | Multiply { input1_id, input2_id, output_id, flags }
            | Div { input1_id, input2_id, output_id, flags } => node2x1(b, *input1_id, *input2_id, *output_id, *flags),
            FullyConnected { input1_id, filter_id, bias_id, output_id, flags } => fb::XNNFullyConnected::create(
                b,
                &fb::XNNFullyConnectedArgs {
                    input1_id: *input1_id,
                    filter_id: *filter_id,
                    bias_id: *bias_id,
                    output_id: *output_id,
                    flags: *flags,
                },
            )
            .as_union_value(),
            Clamp { input_id, output_id, flags }
            | Square { input_id, output_id, flags }
            | ReciprocalSquareRoot { input_id, output_id, flags }
            | Convert { input_id, output_id, flags }
            | Copy { input_id, output_id, flags }
            | GlobalAvgPooling2d { input_id, output_id, flags } => node1x1(b, *input_id, *output_id, *flags),
            StaticTranspose { perm, input_id, output_id, flags } => {
                let p = b.create_vector(perm);
                fb::XNNStaticTranspose::create(
                    b,
                    &fb::XNNStaticTransposeArgs {
                        num_dims: perm.len() as u32,
                        perm: Some(p),
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
            StaticReshape { new_shape, input_id, output_id, flags } => {
                let s = b.create_vector(new_shape);
                fb::XNNStaticReshape::create(
                    b,
                    &fb::XNNStaticReshapeArgs {
                        num_dims: new_shape.len() as u32,
                        new_shape: Some(s),
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
            Conv2d(c) | DepthwiseConv2d(c) => fb::_XNNNodeConv::create(
                b,
                &fb::_XNNNodeConvArgs {
                    padding_top: c.padding_top,
                    padding_right: c.padding_right,
                    padding_bottom: c.padding_bottom,
                    padding_left: c.padding_left,
                    kernel_height: c.kernel_height,
                    kernel_width: c.kernel_width,
                    subsampling_height: c.subsampling_height,
                    subsampling_width: c.subsampling_width,
                    dilation_height: c.dilation_height,
                    dilation_width: c.dilation_width,
                    group_input_channels: c.group_input_channels,
                    group_output_channels: c.group_output_channels,
                    groups: c.groups,
                    adjustment_height: c.adjustment_height,
                    adjustment_width: c.adjustment_width,
                    input1_id: c.input1_id,
                    filter_id: c.filter_id,
                    bias_id: c.bias_id,
                    output_id: c.output_id,
                    flags: c.flags,
                },
            )
            .as_union_value(),
            StaticMean { reduction_axes, input_id, output_id, flags } => {
                let a = b.create_vector(reduction_axes);
                fb::_XNNStaticReduce::create(
                    b,
                    &fb::_XNNStaticReduceArgs {
                        num_reduction_axes: reduction_axes.len() as u32,
                        reduction_axes: Some(a),
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
            // A member kept only by its type id: an empty table of that type (every field at
            // its default), which decodes back to the same `Other`.
            Other { .. } => empty_table(b),
        };
        let mm = n.output_min_max.map(|(output_min, output_max)| {
            fb::OutputMinMax::create(b, &fb::OutputMinMaxArgs { output_min, output_max })
        });
        let type_id = wire_type_id(&n.kind);
        fb::XNode::create(
            b,
            &fb::XNodeArgs {
                xnode_union_type: fb::XNodeUnion(type_id),
                // Type NONE has no value (the verifier requires both or neither).
                xnode_union: (type_id != 0).then_some(payload),
                debug_handle: n.debug_handle,
                output_min_max: mm,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xnn::{ConvNode, XnnDatatype};

    /// A small deterministic generator (xorshift), so the cases need no extra dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        /// Mostly small ids, sometimes 0 (the default, omitted) or the invalid id.
        fn id(&mut self) -> u32 {
            match self.below(8) {
                0 => 0,
                1 => u32::MAX,
                2 => self.next() as u32,
                _ => self.below(40) as u32,
            }
        }
        fn f32(&mut self) -> f32 {
            match self.below(8) {
                0 => 0.0,
                1 => -0.0,
                2 => f32::NAN,
                3 => f32::INFINITY,
                4 => f32::NEG_INFINITY,
                _ => f32::from_bits(self.next() as u32),
            }
        }
        fn list(&mut self) -> Vec<u32> {
            (0..self.below(7)).map(|_| self.id()).collect()
        }
    }

    fn random_graph(r: &mut Rng) -> XnnGraph {
        let mut g = XnnGraph {
            version: ["", "0", "1.5.1-xyz"][r.below(3) as usize].to_string(),
            num_externs: r.id(),
            ..Default::default()
        };
        for _ in 0..r.below(12) {
            let (a, b, c, f) = (r.id(), r.id(), r.id(), r.id());
            let conv = ConvNode {
                padding_top: r.id(),
                padding_right: r.id(),
                padding_bottom: r.id(),
                padding_left: r.id(),
                kernel_height: r.id(),
                kernel_width: r.id(),
                subsampling_height: r.id(),
                subsampling_width: r.id(),
                dilation_height: r.id(),
                dilation_width: r.id(),
                group_input_channels: r.id(),
                group_output_channels: r.id(),
                groups: r.id(),
                adjustment_height: r.id(),
                adjustment_width: r.id(),
                input1_id: a,
                filter_id: b,
                bias_id: c,
                output_id: f,
                flags: r.id(),
            };
            let kind = match r.below(18) {
                0 => XNodeKind::Add { input1_id: a, input2_id: b, output_id: c, flags: f },
                1 => XNodeKind::Subtract { input1_id: a, input2_id: b, output_id: c, flags: f },
                2 => XNodeKind::Multiply { input1_id: a, input2_id: b, output_id: c, flags: f },
                3 => XNodeKind::Div { input1_id: a, input2_id: b, output_id: c, flags: f },
                4 => XNodeKind::FullyConnected { input1_id: a, filter_id: b, bias_id: c, output_id: f, flags: r.id() },
                5 => XNodeKind::Clamp { input_id: a, output_id: b, flags: c },
                6 => XNodeKind::Square { input_id: a, output_id: b, flags: c },
                7 => XNodeKind::ReciprocalSquareRoot { input_id: a, output_id: b, flags: c },
                8 => XNodeKind::Convert { input_id: a, output_id: b, flags: c },
                9 => XNodeKind::Copy { input_id: a, output_id: b, flags: c },
                10 => XNodeKind::GlobalAvgPooling2d { input_id: a, output_id: b, flags: c },
                11 => XNodeKind::StaticTranspose { perm: r.list(), input_id: a, output_id: b, flags: c },
                12 => XNodeKind::StaticReshape { new_shape: r.list(), input_id: a, output_id: b, flags: c },
                13 => XNodeKind::StaticMean { reduction_axes: r.list(), input_id: a, output_id: b, flags: c },
                14 => XNodeKind::Conv2d(conv),
                15 => XNodeKind::DepthwiseConv2d(conv),
                16 => XNodeKind::Other { type_id: r.below(49) as u8 },
                _ => XNodeKind::Other { type_id: 3 },
            };
            let output_min_max = (r.below(2) == 0).then(|| (r.f32(), r.f32()));
            g.nodes.push(XNode { kind, debug_handle: r.id(), output_min_max });
        }
        for _ in 0..r.below(16) {
            let quant = match r.below(5) {
                0 | 1 => None,
                2 => Some(QuantParams::PerTensor { scale: r.f32(), zero_point: r.id() as i32 }),
                3 => Some(QuantParams::PerChannel {
                    scale: (0..r.below(5)).map(|_| r.f32()).collect(),
                    channel_dim: r.id() as i32,
                    scale_buffer_idx: r.id(),
                    num_scales: r.id(),
                }),
                _ => Some(QuantParams::Other { type_id: r.below(8) as u8 }),
            };
            let datatype = XnnDatatype::from_i16(r.below(15) as i16).unwrap();
            g.values.push(XValue {
                datatype,
                dims: r.list(),
                constant_buffer_idx: r.id(),
                external_id: r.id(),
                flags: r.id(),
                id_out: r.id(),
                quant,
            });
        }
        g.input_ids = r.list();
        g.output_ids = r.list();
        for _ in 0..r.below(5) {
            let offset = if r.below(3) == 0 { u64::MAX } else { r.next() % 100_000 };
            let named_key = match r.below(3) {
                0 => None,
                1 => Some(String::new()),
                _ => Some(format!("key-{}", r.below(1000))),
            };
            g.constant_data.push(ConstantDataOffset { offset, size: r.next() % 3, named_key });
        }
        g.constant_bytes = (0..r.below(40)).map(|_| r.next() as u8).collect();
        g
    }

    #[test]
    fn encoder_matches_the_flatbuffers_builder_byte_for_byte() {
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..2000 {
            let g = random_graph(&mut r);
            let want = builder_reference::write_flatbuffer(&g);
            let got = write_flatbuffer(&g);
            // Starting from an empty buffer, the encoder grows many times on the way and
            // must still make the same bytes.
            assert_eq!(encode(&g, 0).bytes(), &got[..], "case {case}: growing from an empty buffer");
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                got == want,
                "case {case}: differs at byte {first:?} ({} vs {} bytes)\n{g:?}",
                got.len(),
                want.len()
            );
            // The payload is the same flatbuffer behind the header, padded, then the constants.
            let payload = write(&g);
            assert_eq!(&payload[32..32 + want.len()], &want[..], "case {case}");
            assert_eq!(&payload[payload.len() - g.constant_bytes.len()..], &g.constant_bytes[..], "case {case}");
        }
    }

    #[test]
    fn encoder_matches_the_builder_on_an_empty_graph() {
        let g = XnnGraph::default();
        assert_eq!(write_flatbuffer(&g), builder_reference::write_flatbuffer(&g));
    }
}
