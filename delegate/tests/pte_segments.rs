//! The `.pte` reader's segment rules, one program each: built with the generated program
//! builder, with or without the `eh00` extended header ExecuTorch inserts after the
//! identifier when some segment holds data (see `serialize::pte`'s module docs).

use std::path::PathBuf;

use delegate::serialize::prog;
use delegate::serialize::pte::{self, PteError, Segment};
use flatbuffers::FlatBufferBuilder;

#[derive(Default)]
struct Spec {
    /// (offset, size) of each `Program.segments` entry.
    segments: Vec<(u64, u64)>,
    /// The segment holding the one XNNPACK delegate's payload, if any.
    delegate_segment: Option<u32>,
    named: Vec<(&'static str, u32)>,
    constant_segment: Option<(u32, Vec<u64>)>,
    mutable_segments: Vec<u32>,
    /// Write the extended header, followed by these segment bytes.
    header: Option<Vec<u8>>,
    /// Overrides the header's `segment_data_size` (default: the segment bytes' length).
    segment_data_size: Option<u64>,
    /// Bytes after the segment data, which the header does not count.
    trailer: usize,
}

fn build(spec: &Spec) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let (name, overload) = (b.create_string("aten::mean"), b.create_string("out"));
    let op = prog::Operator::create(&mut b, &prog::OperatorArgs { name: Some(name), overload: Some(overload) });
    let operators = b.create_vector(&[op]);
    let delegates = spec.delegate_segment.map(|index| {
        let id = b.create_string(pte::XNNPACK_BACKEND_ID);
        let processed = prog::BackendDelegateDataReference::create(
            &mut b,
            &prog::BackendDelegateDataReferenceArgs { location: prog::DataLocation::SEGMENT, index },
        );
        let d = prog::BackendDelegate::create(
            &mut b,
            &prog::BackendDelegateArgs { id: Some(id), processed: Some(processed), compile_specs: None },
        );
        b.create_vector(&[d])
    });
    let plan_name = b.create_string("forward");
    let plan = prog::ExecutionPlan::create(
        &mut b,
        &prog::ExecutionPlanArgs { name: Some(plan_name), operators: Some(operators), delegates },
    );
    let plans = b.create_vector(&[plan]);
    let segs: Vec<_> = spec
        .segments
        .iter()
        .map(|&(offset, size)| prog::DataSegment::create(&mut b, &prog::DataSegmentArgs { offset, size }))
        .collect();
    let segments = b.create_vector(&segs);
    let constant_segment = spec.constant_segment.as_ref().map(|(segment_index, offsets)| {
        let offsets = b.create_vector(offsets);
        prog::SubsegmentOffsets::create(
            &mut b,
            &prog::SubsegmentOffsetsArgs { segment_index: *segment_index, offsets: Some(offsets) },
        )
    });
    let mutable: Vec<_> = spec
        .mutable_segments
        .iter()
        .map(|&segment_index| {
            prog::SubsegmentOffsets::create(&mut b, &prog::SubsegmentOffsetsArgs { segment_index, offsets: None })
        })
        .collect();
    let mutable_data_segments = (!mutable.is_empty()).then(|| b.create_vector(&mutable));
    let named: Vec<_> = spec
        .named
        .iter()
        .map(|&(key, segment_index)| {
            let key = b.create_string(key);
            prog::NamedData::create(&mut b, &prog::NamedDataArgs { key: Some(key), segment_index })
        })
        .collect();
    let named_data = (!named.is_empty()).then(|| b.create_vector(&named));
    let root = prog::Program::create(
        &mut b,
        &prog::ProgramArgs {
            version: 0,
            execution_plan: Some(plans),
            backend_delegate_data: None,
            segments: Some(segments),
            constant_segment,
            mutable_data_segments,
            named_data,
        },
    );
    b.finish(root, Some("ET12"));
    let fb = b.finished_data();
    let Some(data) = &spec.header else { return fb.to_vec() };
    // ExecuTorch's layout: the 32-byte header goes after the identifier, so the root
    // offset grows by 32 (every other offset is relative, and 32 keeps the alignment).
    let root_at = u32::from_le_bytes(fb[..4].try_into().unwrap()) + 32;
    let program_size = (fb.len() + 32) as u64;
    let base = program_size.div_ceil(16) * 16;
    let mut out = root_at.to_le_bytes().to_vec();
    out.extend_from_slice(&fb[4..8]);
    out.extend_from_slice(b"eh00");
    out.extend_from_slice(&32u32.to_le_bytes());
    out.extend_from_slice(&program_size.to_le_bytes());
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&spec.segment_data_size.unwrap_or(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&fb[8..]);
    out.resize(base as usize, 0);
    out.extend_from_slice(data);
    out.resize(out.len() + spec.trailer, 0xAB);
    out
}

fn with_header(segments: Vec<(u64, u64)>, data: usize) -> Spec {
    Spec { segments, header: Some((0..data).map(|i| i as u8).collect()), ..Spec::default() }
}

#[test]
fn a_real_program_without_delegates_reads() {
    let f =
        std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/executorch-1.5.1/f.pte")).unwrap();
    let p = pte::parse(&f).unwrap();
    assert_eq!(p.extended_header, None);
    assert_eq!(p.segments, vec![Segment { index: 0, offset: 0, file_offset: None, size: 0 }]);
    assert!(p.delegates.is_empty());
    assert_eq!(p.operators, vec!["aten::mean.out".to_string()]);
    assert!(pte::xnnpack_payloads(&f).unwrap().is_empty());
}

#[test]
fn without_a_header_segments_must_be_empty() {
    let ok = build(&Spec { segments: vec![(0, 0)], ..Spec::default() });
    assert_eq!(pte::parse(&ok).unwrap().segments, vec![Segment { index: 0, offset: 0, file_offset: None, size: 0 }]);
    let bad = build(&Spec { segments: vec![(0, 0), (0, 5)], ..Spec::default() });
    assert_eq!(pte::parse(&bad).unwrap_err(), PteError::SegmentWithoutBase { index: 1, offset: 0, size: 5 });
}

#[test]
fn without_a_header_no_delegate_is_read_from_a_segment() {
    let bad = build(&Spec { segments: vec![(0, 0)], delegate_segment: Some(0), ..Spec::default() });
    assert_eq!(
        pte::parse(&bad).unwrap_err(),
        PteError::BadDelegate {
            plan: 0,
            delegate: 0,
            reason: "its data is in segment 0, but the file has no extended header (no segment base)".into(),
        }
    );
}

#[test]
fn with_a_header_segments_resolve_to_file_ranges() {
    let spec = Spec { delegate_segment: Some(1), ..with_header(vec![(0, 16), (32, 8)], 40) };
    let bytes = build(&spec);
    let p = pte::parse(&bytes).unwrap();
    let base = p.extended_header.unwrap().segment_base_offset;
    assert_eq!(p.segments[1], Segment { index: 1, offset: 32, file_offset: Some(base + 32), size: 8 });
    assert_eq!(p.delegates[0].bytes, &[32, 33, 34, 35, 36, 37, 38, 39]);
    assert_eq!(p.delegates[0].file_offset, Some(base + 32));
}

#[test]
fn a_segment_outside_the_file_keeps_its_exact_message() {
    let bytes = build(&with_header(vec![(0, 16), (32, 100)], 40));
    let e = pte::parse(&bytes).unwrap_err();
    assert_eq!(e, PteError::SegmentOutOfBounds { index: 1, offset: 32, size: 100, file_len: bytes.len() as u64 });
    assert_eq!(e.to_string(), format!("segment 1 (offset 32, size 100) lies outside the file ({} bytes)", bytes.len()));
    // An offset whose end overflows is outside too.
    let bytes = build(&with_header(vec![(u64::MAX - 4, 16)], 40));
    assert!(matches!(pte::parse(&bytes), Err(PteError::SegmentOutOfBounds { index: 0, .. })));
}

#[test]
fn a_segment_past_the_declared_segment_data_is_refused() {
    // Inside the file (trailing bytes follow) but past the 40 bytes the header declares.
    let bytes = build(&Spec { trailer: 64, ..with_header(vec![(0, 16), (32, 24)], 40) });
    assert_eq!(
        pte::parse(&bytes).unwrap_err(),
        PteError::SegmentOutsideData { index: 1, offset: 32, size: 24, segment_data_size: 40 }
    );
}

#[test]
fn named_data_and_subsegments_name_existing_segments() {
    let spec = Spec { named: vec![("w", 0), ("b", 2)], ..with_header(vec![(0, 16), (32, 8)], 40) };
    assert_eq!(
        pte::parse(&build(&spec)).unwrap_err(),
        PteError::NoSuchSegment { field: "named_data[1] (b)".into(), segment_index: 2, segments: 2 }
    );
    let spec = Spec { constant_segment: Some((3, vec![0, 16])), ..with_header(vec![(0, 16)], 16) };
    assert_eq!(
        pte::parse(&build(&spec)).unwrap_err(),
        PteError::NoSuchSegment { field: "constant_segment".into(), segment_index: 3, segments: 1 }
    );
    // Only the placeholder offset: ExecuTorch loads no constant segment, so any index goes.
    let spec = Spec { constant_segment: Some((3, vec![0])), ..with_header(vec![(0, 16)], 16) };
    assert!(pte::parse(&build(&spec)).is_ok());
    let spec = Spec { mutable_segments: vec![0, 1], ..with_header(vec![(0, 16)], 16) };
    assert_eq!(
        pte::parse(&build(&spec)).unwrap_err(),
        PteError::NoSuchSegment { field: "mutable_data_segments[1]".into(), segment_index: 1, segments: 1 }
    );
    let spec = Spec { named: vec![("w", 0)], ..with_header(vec![(0, 16)], 16) };
    let bytes = build(&spec);
    let p = pte::parse(&bytes).unwrap();
    assert_eq!(p.named_data_bytes("w"), Some(&(0..16u8).collect::<Vec<_>>()[..]));
}
