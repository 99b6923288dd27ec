//! Every rule the loader enforces on framing, the graph, constants and values, one payload
//! each that breaks exactly that rule, and exactly the typed error it must get (nodes are
//! in loader_rules_nodes.rs). A rule whose check is removed fails its row here, including
//! the rules our writer can never break (counts, missing or unknown fields), whose payloads
//! are built slot by slot (`raw`).
//!
//! Over 700 lines as a table on purpose: one row per rule, so a rule without a row is visible.

mod raw;
mod serialize_common;

use delegate::serialize::{load, write, LoadError, LoadLimits, XnnHeader};
use delegate::xnn::*;
use raw::{check, Raw, Row, F};
use serialize_common::*;

fn strict() -> LoadLimits {
    LoadLimits::default()
}

/// `gap_example` changed by `f`, written by our writer.
fn gap(f: impl FnOnce(&mut XnnGraph)) -> Vec<u8> {
    let mut g = gap_example();
    f(&mut g);
    write(&g)
}

fn quantized(f: impl FnOnce(&mut XnnGraph)) -> Vec<u8> {
    let mut g = quantized_example();
    f(&mut g);
    write(&g)
}

fn patched(mut b: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
    b[at..at + bytes.len()].copy_from_slice(bytes);
    b
}

/// A graph with one input value built from `tensor` (id 0) feeding nothing.
fn one_value(value: impl FnOnce(&mut Raw) -> raw::Off) -> Vec<u8> {
    let mut r = Raw::default();
    let v = value(&mut r);
    r.graph(&[v], &[], &[])
}

/// `one_value` with a quantized int8 tensor whose quant params member `ty` is `params`.
fn quant_value(ty: u8, params: impl FnOnce(&mut Raw) -> Option<raw::Off>, extra: &[(u16, F)]) -> Vec<u8> {
    one_value(|r| {
        let t = r.tensor(0, 0, VALUE_FLAG_EXTERNAL_INPUT, &[2, 3], &[(4, F::I16(3))]);
        let p = params(r);
        let mut f = vec![(4, F::Off(t)), (6, F::U8(ty))];
        if let Some(p) = p {
            f.push((8, F::Off(p)));
        }
        f.extend_from_slice(extra);
        let q = r.table(&f);
        r.value(2, Some(q))
    })
}

fn bad_quant(value: usize, reason: &str) -> LoadError {
    LoadError::BadQuant { value, reason: reason.into() }
}

fn framing() -> Vec<Row> {
    let ok = write(&gap_example());
    let len = ok.len() as u64;
    vec![
        (
            "a bare flatbuffer needs 8 bytes",
            vec![0; 5],
            strict(),
            LoadError::Truncated { what: "flatbuffer", need: 8, have: 5 },
        ),
        (
            "the header length is 30",
            patched(ok.clone(), 8, &31u16.to_le_bytes()),
            strict(),
            LoadError::Header { offset: 8, field: "header_length", value: 31, reason: "must be 30" },
        ),
        (
            "the flatbuffer starts after the header",
            patched(ok.clone(), 10, &29u32.to_le_bytes()),
            strict(),
            LoadError::Header { offset: 10, field: "flatbuffer_offset", value: 29, reason: "overlaps the header" },
        ),
        (
            "the flatbuffer has 8 bytes",
            patched(ok.clone(), 14, &7u32.to_le_bytes()),
            strict(),
            LoadError::Header { offset: 14, field: "flatbuffer_size", value: 7, reason: "below 8 bytes" },
        ),
        (
            "the flatbuffer ends inside the buffer",
            patched(ok.clone(), 14, &(len as u32).to_le_bytes()),
            strict(),
            LoadError::Header {
                offset: 14,
                field: "flatbuffer_size",
                value: len,
                reason: "flatbuffer ends past the buffer",
            },
        ),
        (
            "constant data starts after the flatbuffer",
            patched(ok.clone(), 18, &40u32.to_le_bytes()),
            strict(),
            LoadError::Header {
                offset: 18,
                field: "constant_data_offset",
                value: 40,
                reason: "constant data starts inside the flatbuffer",
            },
        ),
        (
            "constant data ends inside the buffer",
            patched(ok.clone(), 22, &1u64.to_le_bytes()),
            strict(),
            LoadError::Header {
                offset: 22,
                field: "constant_data_size",
                value: 1,
                reason: "constant data ends past the buffer",
            },
        ),
        (
            "constant data size does not overflow",
            patched(ok.clone(), 22, &u64::MAX.to_le_bytes()),
            strict(),
            LoadError::Header {
                offset: 22,
                field: "constant_data_size",
                value: u64::MAX,
                reason: "constant data ends past the buffer",
            },
        ),
        (
            "the identifier is XN01 or XN00",
            patched(ok.clone(), 36, b"XN02"),
            strict(),
            LoadError::BadIdentifier { offset: 36, found: *b"XN02" },
        ),
        (
            "the verifier accepts the buffer",
            patched(ok.clone(), 32, &0xFFFF_FFF0u32.to_le_bytes()),
            strict(),
            LoadError::Verify("Range [4294967280, 4294967284) is out of bounds.\n\n".into()),
        ),
        (
            "the verifier's table limit",
            ok.clone(),
            LoadLimits { max_tables: 8, ..strict() },
            LoadError::Verify("Too many tables.\n".into()),
        ),
        (
            "the verifier's depth limit",
            ok.clone(),
            LoadLimits { max_depth: 2, ..strict() },
            LoadError::Verify("Nested table depth limit reached.\n".into()),
        ),
    ]
}

fn graph_rules() -> Vec<Row> {
    let root = |extra: &[(u16, F)]| {
        let mut r = Raw::default();
        let v = [r.input(0, &[2])];
        let extra: Vec<(u16, F)> = extra
            .iter()
            .map(|&(s, f)| match f {
                F::Off(_) => (s, F::Off(r.u32s(&[1, 2]))),
                f => (s, f),
            })
            .collect();
        r.graph(&v, &[], &extra)
    };
    let placeholder = F::Off(flatbuffers::WIPOffset::new(0));
    let missing_list = |slot: u16| {
        let mut r = Raw::default();
        let v = r.input(0, &[2]);
        let (xv, xn, version) = (r.offs(&[v]), r.offs(&[]), r.str("0"));
        let fields = [(4, F::Off(version)), (6, F::Off(xn)), (8, F::Off(xv)), (10, F::U32(1))];
        r.finish(&raw::without(&fields, slot))
    };
    vec![
        (
            "XNNGraph.constant_buffer is deprecated",
            root(&[(16, placeholder)]),
            strict(),
            LoadError::DeprecatedField { table: "XNNGraph", index: 0, field: "constant_buffer" },
        ),
        (
            "XNNGraph.mem_buffer_sizes is deprecated",
            root(&[(18, placeholder)]),
            strict(),
            LoadError::DeprecatedField { table: "XNNGraph", index: 0, field: "mem_buffer_sizes" },
        ),
        (
            "XNNGraph has no field past constant_data",
            root(&[(22, F::U32(5))]),
            strict(),
            LoadError::UnknownField { table: "XNNGraph", index: 0, slot: 22 },
        ),
        (
            "xvalues is present",
            missing_list(8),
            strict(),
            LoadError::MissingField { table: "XNNGraph", field: "xvalues", index: 0 },
        ),
        (
            "xnodes is present",
            missing_list(6),
            strict(),
            LoadError::MissingField { table: "XNNGraph", field: "xnodes", index: 0 },
        ),
        (
            "the value limit",
            write(&gap_example()),
            LoadLimits { max_values: 4, ..strict() },
            LoadError::TooMany { what: "values", count: 5, limit: 4 },
        ),
        (
            "the node limit",
            write(&gap_example()),
            LoadLimits { max_nodes: 3, ..strict() },
            LoadError::TooMany { what: "nodes", count: 4, limit: 3 },
        ),
        ("num_externs is at most 4096", gap(|g| g.num_externs = 4097), strict(), LoadError::TooManyExterns(4097)),
        (
            "input_ids name values",
            gap(|g| g.input_ids = vec![0, 7]),
            strict(),
            LoadError::BadGraphId { field: "input_ids", index: 1, id: 7 },
        ),
        (
            "output_ids name values",
            gap(|g| g.output_ids = vec![9]),
            strict(),
            LoadError::BadGraphId { field: "output_ids", index: 0, id: 9 },
        ),
    ]
}

fn constant_rules() -> Vec<Row> {
    let named = ConstantDataOffset { offset: u64::MAX, size: 1152, named_key: Some("k".into()) };
    let all = |f: &dyn Fn(&mut XnnGraph)| {
        let mut g = all_kinds_example();
        f(&mut g);
        write(&g)
    };
    let region = all_kinds_example().constant_bytes.len() as u64;
    let extra = {
        let mut r = Raw::default();
        let v = [r.input(0, &[2])];
        let c = r.table(&[(4, F::U64(0)), (6, F::U64(0)), (10, F::U32(1))]);
        let consts = r.offs(&[c]);
        r.graph(&v, &[], &[(20, F::Off(consts))])
    };
    vec![
        (
            "ConstantDataOffset has no field past named_key",
            extra,
            strict(),
            LoadError::UnknownField { table: "ConstantDataOffset", index: 0, slot: 10 },
        ),
        (
            "the runtime's limits refuse named-data-store constants",
            all(&|g| g.constant_data[1] = named.clone()),
            strict(),
            LoadError::BadConstant {
                index: 1,
                offset: u64::MAX,
                size: 1152,
                reason:
                    "named-data-store constant (the .pte holds its bytes); load with LoadLimits::lenient to inspect",
            },
        ),
        (
            "a named key needs offset UINT64_MAX",
            all(&|g| g.constant_data[1] = ConstantDataOffset { offset: 0, ..named.clone() }),
            LoadLimits::lenient(),
            LoadError::BadConstant {
                index: 1,
                offset: 0,
                size: 1152,
                reason: "a named key requires offset UINT64_MAX",
            },
        ),
        (
            "offset UINT64_MAX needs a named key",
            all(&|g| g.constant_data[1].offset = u64::MAX),
            LoadLimits::lenient(),
            LoadError::BadConstant {
                index: 1,
                offset: u64::MAX,
                size: 1152,
                reason: "offset UINT64_MAX without a named key",
            },
        ),
        (
            "a constant lies inside the constant region",
            all(&|g| g.constant_data[2].offset = region),
            strict(),
            LoadError::BadConstant { index: 2, offset: region, size: 32, reason: "lies outside the constant region" },
        ),
        (
            "a constant's end does not overflow",
            all(&|g| g.constant_data[2].offset = u64::MAX - 1),
            strict(),
            LoadError::BadConstant {
                index: 2,
                offset: u64::MAX - 1,
                size: 32,
                reason: "lies outside the constant region",
            },
        ),
    ]
}

fn value_decoding_rules() -> Vec<Row> {
    vec![
        (
            "XValue has no field past xvalue_union",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2], &[]);
                r.table(&[(4, F::U8(1)), (6, F::Off(t)), (8, F::U32(1))])
            }),
            strict(),
            LoadError::UnknownField { table: "XValue", index: 0, slot: 8 },
        ),
        (
            "an XValue has a type",
            one_value(|r| r.table(&[])),
            strict(),
            LoadError::UnknownValueType { value: 0, type_id: 0 },
        ),
        (
            // The loader's own MissingField for this case is a second line of defence.
            "a union type comes with its table (the verifier's rule)",
            one_value(|r| r.value(1, None)),
            strict(),
            LoadError::Verify(
                "Exactly one of union discriminant (`xvalue_union`) and value (`xvalue_union_type`) are present.\n\t\
                 while verifying vector element 0 at position 96\n\twhile verifying table field `xvalues` at position 44\n\n"
                    .into(),
            ),
        ),
        (
            "an XValue's type is a union member",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2], &[]);
                r.value(3, Some(t))
            }),
            strict(),
            LoadError::UnknownValueType { value: 0, type_id: 3 },
        ),
        (
            "XNNTensorValue has no field past id_out",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2], &[(18, F::I16(1))]);
                r.value(1, Some(t))
            }),
            strict(),
            LoadError::UnknownField { table: "XNNTensorValue", index: 0, slot: 18 },
        ),
        (
            "XNNQuantizedTensorValue has no field past quant_params",
            quant_value(2, |r| Some(r.table(&[(4, F::F32(0.5))])), &[(10, F::U32(1))]),
            strict(),
            LoadError::UnknownField { table: "XNNQuantizedTensorValue", index: 0, slot: 10 },
        ),
        (
            "a quantized value has its tensor",
            one_value(|r| {
                let p = r.table(&[(4, F::F32(0.5))]);
                let q = r.table(&[(6, F::U8(2)), (8, F::Off(p))]);
                r.value(2, Some(q))
            }),
            strict(),
            LoadError::MissingField { table: "XNNQuantizedTensorValue", field: "tensor_value", index: 0 },
        ),
        (
            "a datatype is not invalid",
            gap(|g| g.values[1].datatype = XnnDatatype::Invalid),
            strict(),
            LoadError::BadDatatype { value: 1, raw: 0 },
        ),
        (
            "a datatype is in the enum",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2], &[(4, F::I16(15))]);
                r.value(1, Some(t))
            }),
            strict(),
            LoadError::BadDatatype { value: 0, raw: 15 },
        ),
        (
            "num_dims is at most 6",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2], &[(6, F::U32(7))]);
                r.value(1, Some(t))
            }),
            strict(),
            LoadError::TooManyDims { value: 0, num_dims: 7 },
        ),
        (
            "the dims list holds at most 6",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[1; 8], &[(6, F::U32(2))]);
                r.value(1, Some(t))
            }),
            strict(),
            LoadError::TooManyDims { value: 0, num_dims: 8 },
        ),
        (
            "num_dims counts the dims",
            one_value(|r| {
                let t = r.tensor(0, 0, 1, &[2, 3], &[(6, F::U32(3))]);
                r.value(1, Some(t))
            }),
            strict(),
            LoadError::CountMismatch {
                table: "XNNTensorValue",
                index: 0,
                count_field: "num_dims",
                count: 3,
                list: "dims",
                len: 2,
            },
        ),
        (
            "a quant params union type is a member",
            quant_value(5, |r| Some(r.table(&[(4, F::F32(0.5))])), &[]),
            strict(),
            bad_quant(0, "union type 5 is not a quant params member"),
        ),
        (
            "a quant params union type is not NONE",
            one_value(|r| {
                let t = r.tensor(0, 0, VALUE_FLAG_EXTERNAL_INPUT, &[2, 3], &[(4, F::I16(3))]);
                let q = r.table(&[(4, F::Off(t))]);
                r.value(2, Some(q))
            }),
            strict(),
            bad_quant(0, "union type 0 is not a quant params member"),
        ),
        (
            "PerTensorQuant has no field past zero_point",
            quant_value(2, |r| Some(r.table(&[(4, F::F32(0.5)), (8, F::U32(1))])), &[]),
            strict(),
            LoadError::UnknownField { table: "PerTensorQuant", index: 0, slot: 8 },
        ),
        (
            "PerChannelQuant has no field past num_scales",
            quant_value(1, |r| Some(r.table(&[(12, F::U32(1))])), &[]),
            strict(),
            LoadError::UnknownField { table: "PerChannelQuant", index: 0, slot: 12 },
        ),
        (
            "PerTokenDynamicQuant has no field past num_nonbatch_dims",
            quant_value(3, |r| Some(r.table(&[(6, F::U32(1))])), &[]),
            strict(),
            LoadError::UnknownField { table: "PerTokenDynamicQuant", index: 0, slot: 6 },
        ),
        (
            "PerChannelGroupQuant has no field past num_scales",
            quant_value(4, |r| Some(r.table(&[(16, F::U32(1))])), &[]),
            strict(),
            LoadError::UnknownField { table: "PerChannelGroupQuant", index: 0, slot: 16 },
        ),
        (
            "PerChannelGroupQuant.scale_bf16 is deprecated",
            quant_value(
                4,
                |r| {
                    let bf16 = r.u16s(&[0x3f80]);
                    Some(r.table(&[(10, F::Off(bf16))]))
                },
                &[],
            ),
            strict(),
            LoadError::DeprecatedField { table: "PerChannelGroupQuant", index: 0, field: "scale_bf16" },
        ),
    ]
}

fn value_rules() -> Vec<Row> {
    let ext = |value, external_id, flags, reason| LoadError::BadExternalId { value, external_id, flags, reason };
    let const_ref = |value, idx, reason: &str| LoadError::BadConstantRef { value, idx, reason: reason.into() };
    let all = |f: &dyn Fn(&mut XnnGraph)| {
        let mut g = all_kinds_example();
        f(&mut g);
        write(&g)
    };
    vec![
        (
            "id_out is below the value count",
            gap(|g| g.values[2].id_out = 9),
            strict(),
            LoadError::BadValueId { value: 2, id_out: 9, reason: "is out of range" },
        ),
        (
            "id_out is unique",
            gap(|g| g.values[2].id_out = 1),
            strict(),
            LoadError::BadValueId { value: 2, id_out: 1, reason: "is defined twice" },
        ),
        (
            "the element count does not overflow",
            gap(|g| g.values[1].dims = vec![u32::MAX; 6]),
            strict(),
            LoadError::SizeOverflow { value: 1 },
        ),
        (
            "the bit count does not overflow",
            gap(|g| g.values[1].dims = vec![u32::MAX, u32::MAX]),
            strict(),
            LoadError::SizeOverflow { value: 1 },
        ),
        (
            "a value fits the memory limit",
            gap(|g| g.values[1].dims = vec![1 << 16, 1 << 16, 1, 1]),
            strict(),
            LoadError::TooLarge { value: 1, bytes: 1 << 34, limit: 1 << 30 },
        ),
        (
            "all values fit the memory limit",
            write(&gap_example()),
            LoadLimits { max_bytes: 700, ..strict() },
            LoadError::TotalTooLarge { bytes: 960, limit: 700 },
        ),
        (
            "flags are EXTERNAL_INPUT and EXTERNAL_OUTPUT only",
            gap(|g| g.values[0].flags = 4),
            strict(),
            LoadError::BadValueFlags { value: 0, flags: 4 },
        ),
        (
            "an external id is below num_externs",
            gap(|g| g.values[4].external_id = 2),
            strict(),
            ext(4, 2, 2, "is not below num_externs"),
        ),
        (
            "an external id names one value",
            gap(|g| g.values[4].external_id = 0),
            strict(),
            ext(4, 0, 2, "is used by two values"),
        ),
        (
            "an external value has an external id",
            gap(|g| g.values[4].external_id = INVALID_VALUE_ID),
            strict(),
            ext(4, INVALID_VALUE_ID, 2, "is invalid on an external value"),
        ),
        (
            "constant_buffer_idx names an entry",
            all(&|g| g.values[3].constant_buffer_idx = 40),
            strict(),
            const_ref(3, 40, "is out of range (6 entries)"),
        ),
        (
            "an external value is not a constant",
            gap(|g| {
                g.constant_data.push(ConstantDataOffset { offset: 0, size: 320, named_key: None });
                g.constant_bytes = vec![0; 320];
                g.values[0].constant_buffer_idx = 1;
            }),
            strict(),
            const_ref(0, 1, "is set on an external value"),
        ),
        (
            "a constant entry holds the tensor's bytes",
            all(&|g| g.values[3].dims = vec![7]),
            strict(),
            const_ref(3, 2, "entry holds 32 bytes, the tensor needs 28"),
        ),
    ]
}

fn quant_rules() -> Vec<Row> {
    let pc = |scale: Vec<f32>, channel_dim, scale_buffer_idx, num_scales| {
        Some(QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales })
    };
    let pcg = |scale: Vec<f32>, channel_dim, group_size, scale_buffer_idx| {
        Some(QuantParams::PerChannelGroup { scale, channel_dim, group_size, scale_buffer_idx, num_scales: 0 })
    };
    let typed = |datatype, quant: Option<QuantParams>, dims: &[u32]| {
        let dims = dims.to_vec();
        quantized(move |g| {
            g.values[1].datatype = datatype;
            g.values[1].dims = dims;
            g.values[1].quant = quant;
        })
    };
    use XnnDatatype::*;
    vec![
        (
            "a quantized datatype has quant params",
            quantized(|g| g.values[1].quant = None),
            strict(),
            bad_quant(1, "missing for xnn_datatype_qint8"),
        ),
        (
            "a per-tensor scale is finite and positive",
            quantized(|g| g.values[1].quant = Some(QuantParams::PerTensor { scale: -0.5, zero_point: 0 })),
            strict(),
            bad_quant(1, "scale -0.5 is not finite and positive"),
        ),
        (
            "a qint8 zero point fits int8",
            quantized(|g| g.values[1].quant = Some(QuantParams::PerTensor { scale: 0.5, zero_point: 128 })),
            strict(),
            bad_quant(1, "zero_point 128 is outside -128..=127 for xnn_datatype_qint8"),
        ),
        (
            "a quint8 zero point fits uint8",
            typed(Quint8, Some(QuantParams::PerTensor { scale: 0.5, zero_point: -1 }), &[1, 4]),
            strict(),
            bad_quant(1, "zero_point -1 is outside 0..=255 for xnn_datatype_quint8"),
        ),
        (
            "a qint32 zero point is 0",
            typed(Qint32, Some(QuantParams::PerTensor { scale: 0.5, zero_point: 1 }), &[1, 4]),
            strict(),
            bad_quant(1, "zero_point 1 is outside 0..=0 for xnn_datatype_qint32"),
        ),
        (
            "a per-channel channel_dim is a dim",
            quantized(|g| g.values[3].quant = pc(vec![0.1; 3], 2, 0, 0)),
            strict(),
            bad_quant(3, "channel_dim 2 is outside the 2 dims"),
        ),
        (
            "inline per-channel scales, one per channel",
            quantized(|g| g.values[3].quant = pc(vec![0.1, 0.2], 0, 0, 0)),
            strict(),
            bad_quant(3, "2 scales for 3 channels"),
        ),
        (
            "inline per-channel scales are finite and positive",
            quantized(|g| g.values[3].quant = pc(vec![0.1, f32::INFINITY, 0.3], 0, 0, 0)),
            strict(),
            bad_quant(3, "scale inf is not finite and positive"),
        ),
        (
            "stored per-channel scales, one per channel",
            quantized(|g| g.values[3].quant = pc(vec![], 0, 1, 2)),
            strict(),
            bad_quant(3, "num_scales 2 for 3 channels"),
        ),
        (
            "stored per-channel scales name a constant entry",
            quantized(|g| g.values[3].quant = pc(vec![], 0, 3, 3)),
            strict(),
            bad_quant(3, "scale_buffer_idx 3 names no constant entry"),
        ),
        (
            "num_nonbatch_dims is within the rank",
            typed(Qdint8, Some(QuantParams::PerTokenDynamic { num_nonbatch_dims: 3 }), &[1, 4]),
            strict(),
            bad_quant(1, "num_nonbatch_dims 3 is outside 0..=2"),
        ),
        (
            "num_nonbatch_dims is not negative",
            typed(Qdint8, Some(QuantParams::PerTokenDynamic { num_nonbatch_dims: -1 }), &[1, 4]),
            strict(),
            bad_quant(1, "num_nonbatch_dims -1 is outside 0..=2"),
        ),
        (
            "a blockwise channel_dim is a dim",
            typed(Qbint4, pcg(vec![0.5], -1, 2, 0), &[1, 4]),
            strict(),
            bad_quant(1, "channel_dim -1 is outside the 2 dims"),
        ),
        (
            "a blockwise group size is positive",
            typed(Qbint4, pcg(vec![0.5], 0, 0, 0), &[1, 4]),
            strict(),
            bad_quant(1, "group_size 0 is not positive"),
        ),
        (
            "blockwise scales are finite and positive",
            typed(Qbint4, pcg(vec![0.5, f32::NAN], 0, 2, 0), &[1, 4]),
            strict(),
            bad_quant(1, "scale NaN is not finite and positive"),
        ),
        (
            "stored blockwise scales name a constant entry",
            typed(Qbint4, pcg(vec![], 0, 2, 0), &[1, 4]),
            strict(),
            bad_quant(1, "scale_buffer_idx 0 names no constant entry"),
        ),
        (
            "quant params fit their datatype",
            quantized(|g| g.values[3].quant = Some(QuantParams::PerTensor { scale: 0.1, zero_point: 0 })),
            strict(),
            bad_quant(3, "PerTensorQuant params do not fit xnn_datatype_qcint8"),
        ),
        (
            "a float value has no quant params",
            gap(|g| g.values[1].quant = Some(QuantParams::PerTokenDynamic { num_nonbatch_dims: 1 })),
            strict(),
            bad_quant(1, "PerTokenDynamicQuant params do not fit xnn_datatype_fp32"),
        ),
    ]
}

#[test]
fn framing_rules() {
    check(framing());
}

#[test]
fn graph_and_constant_rules() {
    check(graph_rules());
    check(constant_rules());
}

#[test]
fn value_rules_each_break_one_rule() {
    check(value_decoding_rules());
    check(value_rules());
    check(quant_rules());
}

#[test]
fn the_header_parser_refuses_short_and_unmarked_buffers() {
    // `load` only parses a header behind the magic; the parser itself is public.
    assert_eq!(XnnHeader::parse(&[0; 12]), Err(LoadError::Truncated { what: "XH00 header", need: 30, have: 12 }));
    assert_eq!(XnnHeader::parse(&[7; 32]), Err(LoadError::BadMagic { offset: 4, found: [7; 4] }));
}

#[test]
fn the_base_payloads_of_the_rows_load() {
    // Each row changes one thing in a payload that loads, so the error is that rule's.
    for g in [gap_example(), all_kinds_example(), quantized_example()] {
        assert_eq!(load(&write(&g), &strict()).as_ref(), Ok(&g));
    }
    assert!(load(&one_value(|r| r.input(0, &[2, 3])), &strict()).is_ok());
    let ok = quant_value(2, |r| Some(r.table(&[(4, F::F32(0.5))])), &[]);
    assert!(load(&ok, &strict()).is_ok());
}
