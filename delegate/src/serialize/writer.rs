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

mod node;
#[cfg(test)]
mod tests;

use super::fb;
use super::header::{align16, XnnHeader};
use crate::xnn::{ConstantDataOffset, QuantParams, XNodeKind, XValue, XnnGraph};
use node::enc_node;

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
        QuantParams::PerTokenDynamic { num_nonbatch_dims } => {
            let t = e.start_table();
            e.slot_i32(fb::PerTokenDynamicQuant::VT_NUM_NONBATCH_DIMS, *num_nonbatch_dims);
            (fb::XNNQuantParams::PerTokenDynamicQuant.0, e.end_table(t))
        }
        QuantParams::PerChannelGroup { scale, channel_dim, group_size, scale_buffer_idx, num_scales } => {
            use fb::PerChannelGroupQuant as T;
            let s = e.f32_vector(scale);
            let t = e.start_table();
            e.slot_u32(T::VT_NUM_SCALES, *num_scales);
            e.slot_u32(T::VT_SCALE_BUFFER_IDX, *scale_buffer_idx);
            e.slot_i32(T::VT_GROUP_SIZE, *group_size);
            e.slot_i32(T::VT_CHANNEL_DIM, *channel_dim);
            e.slot_offset(T::VT_SCALE, s);
            (fb::XNNQuantParams::PerChannelGroupQuant.0, e.end_table(t))
        }
    }
}
