//! Payloads our writer cannot make: tables built slot by slot with the flatbuffers builder,
//! so a test can set a count that disagrees with its list, leave out a required field, set
//! a deprecated field or one past the schema's last, or give a union a type id of its own.
#![allow(dead_code)]

use delegate::serialize::{load, LoadError, LoadLimits};
use delegate::xnn::{VALUE_FLAG_EXTERNAL_INPUT, VALUE_FLAG_EXTERNAL_OUTPUT};
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

pub type Off = WIPOffset<UnionWIPOffset>;

/// One loader rule: its name, a payload that breaks exactly it, the limits it loads under,
/// and the typed error it must get.
pub type Row = (&'static str, Vec<u8>, LoadLimits, LoadError);

/// Loads every row's payload and expects exactly its error (with a message); lists every
/// row that got anything else.
pub fn check(rows: Vec<Row>) {
    let n = rows.len();
    let mut wrong = vec![];
    for (rule, bytes, limits, want) in rows {
        match load(&bytes, &limits) {
            Err(e) if e == want => assert!(!e.to_string().is_empty()),
            other => wrong.push(format!("{rule}:\n  want {want:?}\n  got  {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{} of {n} rules:\n{}", wrong.len(), wrong.join("\n"));
}

/// One field: vtable slot and value.
#[derive(Clone, Copy)]
pub enum F {
    U8(u8),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    U64(u64),
    Off(Off),
}

pub struct Raw {
    pub b: FlatBufferBuilder<'static>,
}

impl Default for Raw {
    fn default() -> Self {
        Raw { b: FlatBufferBuilder::new() }
    }
}

impl Raw {
    /// A table holding exactly `fields` (defaults included: every slot listed is written).
    pub fn table(&mut self, fields: &[(u16, F)]) -> Off {
        let start = self.b.start_table();
        for &(slot, f) in fields {
            match f {
                F::U8(x) => self.b.push_slot_always(slot, x),
                F::I16(x) => self.b.push_slot_always(slot, x),
                F::U32(x) => self.b.push_slot_always(slot, x),
                F::I32(x) => self.b.push_slot_always(slot, x),
                F::F32(x) => self.b.push_slot_always(slot, x),
                F::U64(x) => self.b.push_slot_always(slot, x),
                F::Off(x) => self.b.push_slot_always(slot, x),
            }
        }
        WIPOffset::new(self.b.end_table(start).value())
    }

    pub fn u32s(&mut self, v: &[u32]) -> Off {
        WIPOffset::new(self.b.create_vector(v).value())
    }

    pub fn u16s(&mut self, v: &[u16]) -> Off {
        WIPOffset::new(self.b.create_vector(v).value())
    }

    pub fn f32s(&mut self, v: &[f32]) -> Off {
        WIPOffset::new(self.b.create_vector(v).value())
    }

    pub fn offs(&mut self, v: &[Off]) -> Off {
        WIPOffset::new(self.b.create_vector(v).value())
    }

    pub fn str(&mut self, s: &str) -> Off {
        WIPOffset::new(self.b.create_string(s).value())
    }

    /// `XNNTensorValue` (fp32 unless `extra` says otherwise; later slots win).
    pub fn tensor(&mut self, id: u32, ext: u32, flags: u32, dims: &[u32], extra: &[(u16, F)]) -> Off {
        let d = self.u32s(dims);
        let mut fields = vec![
            (4, F::I16(1)),
            (6, F::U32(dims.len() as u32)),
            (8, F::Off(d)),
            (12, F::U32(ext)),
            (14, F::U32(flags)),
            (16, F::U32(id)),
        ];
        for &(slot, f) in extra {
            fields.retain(|(s, _)| *s != slot);
            fields.push((slot, f));
        }
        self.table(&fields)
    }

    /// `XValue` of union type `ty` (1 tensor, 2 quantized tensor).
    pub fn value(&mut self, ty: u8, v: Option<Off>) -> Off {
        let mut f = vec![(4, F::U8(ty))];
        if let Some(v) = v {
            f.push((6, F::Off(v)));
        }
        self.table(&f)
    }

    pub fn input(&mut self, id: u32, dims: &[u32]) -> Off {
        let t = self.tensor(id, id, VALUE_FLAG_EXTERNAL_INPUT, dims, &[]);
        self.value(1, Some(t))
    }

    pub fn output(&mut self, id: u32, dims: &[u32]) -> Off {
        let t = self.tensor(id, id, VALUE_FLAG_EXTERNAL_OUTPUT, dims, &[]);
        self.value(1, Some(t))
    }

    /// `XNode` with union type `ty` and `payload`.
    pub fn node(&mut self, ty: u8, payload: Option<Off>, extra: &[(u16, F)]) -> Off {
        let mut f = vec![(4, F::U8(ty))];
        if let Some(p) = payload {
            f.push((6, F::Off(p)));
        }
        f.push((8, F::U32(1)));
        f.extend_from_slice(extra);
        self.table(&f)
    }

    /// `_XNNNode1x1`.
    pub fn n1x1(&mut self, input: u32, output: u32) -> Off {
        self.table(&[(4, F::U32(input)), (6, F::U32(output))])
    }

    /// The root `XNNGraph` with `values`, `nodes` and the reserved constant entry, `num_externs`
    /// the number of values, plus `extra` root fields; finished with identifier XN01.
    pub fn graph(mut self, values: &[Off], nodes: &[Off], extra: &[(u16, F)]) -> Vec<u8> {
        let version = self.str("0");
        let xnodes = self.offs(nodes);
        let xvalues = self.offs(values);
        let key = self.str("");
        let reserved = self.table(&[(8, F::Off(key))]);
        let constants = self.offs(&[reserved]);
        let mut f = vec![
            (4, F::Off(version)),
            (6, F::Off(xnodes)),
            (8, F::Off(xvalues)),
            (10, F::U32(values.len() as u32)),
            (20, F::Off(constants)),
        ];
        for &(slot, x) in extra {
            f.retain(|(s, _)| *s != slot);
            f.push((slot, x));
        }
        self.finish(&f)
    }

    /// Finishes a root table of exactly `fields`.
    pub fn finish(mut self, fields: &[(u16, F)]) -> Vec<u8> {
        let root = self.table(fields);
        self.b.finish(root, Some("XN01"));
        self.b.finished_data().to_vec()
    }
}

/// A root with the given fields, with `F::Off` values left out.
pub fn without(fields: &[(u16, F)], slot: u16) -> Vec<(u16, F)> {
    fields.iter().copied().filter(|(s, _)| *s != slot).collect()
}

/// `input [2, 3] -> node -> output [2, 3]`: a graph around one node built by `node`.
pub fn unary(node: impl FnOnce(&mut Raw) -> Off) -> Vec<u8> {
    let mut r = Raw::default();
    let values = [r.input(0, &[2, 3]), r.output(1, &[2, 3])];
    let n = node(&mut r);
    r.graph(&values, &[n], &[])
}

/// `unary` with a Negate (1x1) node whose table is `payload`.
pub fn negate(payload: impl FnOnce(&mut Raw) -> Off, extra: &[(u16, F)]) -> Vec<u8> {
    unary(|r| {
        let p = payload(r);
        r.node(delegate::xnn::node_type::NEGATE, Some(p), extra)
    })
}
