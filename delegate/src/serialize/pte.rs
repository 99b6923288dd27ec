//! ExecuTorch `.pte` program files: the `ET12` program flatbuffer, the `eh00` extended
//! header, the segment table, and the XNNPACK delegate payloads they hold.
//!
//! File layout: bytes 0..4 root offset, 4..8 identifier `ET12`, 8..40 the extended header
//! (`eh00`, length, program_size, segment_base_offset, segment_data_size; little-endian),
//! the program flatbuffer up to `program_size`, then the segments at
//! `segment_base_offset + DataSegment.offset`. The program is walked with the verified
//! accessors generated from `schema/program.fbs`; every segment range is bounds-checked.
//!
//! Segment rules, as ExecuTorch writes and reads them (`exir/_serialize/_program.py`,
//! `runtime/executor/program.cpp`):
//! - the extended header is written only when some segment holds data; without it the
//!   program is the whole file and there is no segment base, so its segments must be empty
//!   (a program whose only data is empty still lists its empty constant segment at offset
//!   0) and nothing may be loaded from one (a delegate stored in a segment is an error);
//! - with it, segment `i` lies at `segment_base_offset + offset` and must end inside the
//!   file and inside the `segment_data_size` bytes of segment data the header declares;
//! - named data and the constant segment name segments that exist.

use super::prog;
use crate::xnn::XnnGraph;

/// The backend id of ExecuTorch's XNNPACK delegate.
pub const XNNPACK_BACKEND_ID: &str = "XnnpackBackend";
pub const EXTENDED_HEADER_MAGIC: &[u8; 4] = b"eh00";
/// The smallest extended header (without `segment_data_size`).
const MIN_EXTENDED_HEADER_LENGTH: u32 = 24;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PteError {
    #[error("not a .pte file: {0}")]
    NotPte(String),
    #[error("extended header field {field} = {value}: {reason}")]
    ExtendedHeader { field: &'static str, value: u64, reason: &'static str },
    #[error("program flatbuffer verification failed: {0}")]
    Verify(String),
    #[error("segment {index} (offset {offset}, size {size}) lies outside the file ({file_len} bytes)")]
    SegmentOutOfBounds { index: usize, offset: u64, size: u64, file_len: u64 },
    #[error(
        "segment {index} (offset {offset}, size {size}) runs past the segment data \
         ({segment_data_size} bytes from the segment base)"
    )]
    SegmentOutsideData { index: usize, offset: u64, size: u64, segment_data_size: u64 },
    #[error(
        "segment {index} (offset {offset}, size {size}) holds data, but the file has no extended header, \
         so no segment base: nothing can be loaded from it"
    )]
    SegmentWithoutBase { index: usize, offset: u64, size: u64 },
    #[error("{field} names segment {segment_index}, but the program has {segments} segments")]
    NoSuchSegment { field: String, segment_index: u32, segments: usize },
    #[error("execution plan {plan} delegate {delegate}: {reason}")]
    BadDelegate { plan: usize, delegate: usize, reason: String },
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("constant_data[{index}] key {key}: {reason}")]
    NamedData { index: usize, key: String, reason: String },
}

/// The `eh00` extended header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExtendedHeader {
    pub length: u32,
    pub program_size: u64,
    pub segment_base_offset: u64,
    /// Absent in headers shorter than 32 bytes (older writers).
    pub segment_data_size: Option<u64>,
}

/// One `Program.segments` entry, resolved to a file range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Segment {
    pub index: usize,
    /// `DataSegment.offset`, relative to the segment base.
    pub offset: u64,
    /// Where its bytes start in the file; `None` without an extended header (no segment
    /// base, and the segment is empty).
    pub file_offset: Option<u64>,
    pub size: u64,
}

impl Segment {
    /// The segment's bytes in `file` (empty for an empty segment without a base).
    pub fn bytes<'a>(&self, file: &'a [u8]) -> Option<&'a [u8]> {
        match self.file_offset {
            Some(o) => file.get(usize::try_from(o).ok()?..usize::try_from(o.checked_add(self.size)?).ok()?),
            None => (self.size == 0).then_some(&[][..]),
        }
    }
}

/// Where a delegate's processed bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DataLocation {
    Inline,
    Segment,
}

/// One `BackendDelegate` of an execution plan, with its bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Delegate<'a> {
    pub plan: String,
    pub plan_index: usize,
    pub delegate_index: usize,
    pub backend_id: String,
    pub location: DataLocation,
    /// Index into `Program.segments` (SEGMENT) or `backend_delegate_data` (INLINE).
    pub index: u32,
    /// File offset of the bytes (SEGMENT only).
    pub file_offset: Option<u64>,
    #[serde(skip)]
    pub bytes: &'a [u8],
}

/// One entry of the named data store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NamedData {
    pub key: String,
    pub segment_index: u32,
}

/// What the reader found in a `.pte` file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PteFile<'a> {
    pub extended_header: Option<ExtendedHeader>,
    pub segments: Vec<Segment>,
    pub delegates: Vec<Delegate<'a>>,
    pub named_data: Vec<NamedData>,
    /// Operators of every plan, as `name.overload`.
    pub operators: Vec<String>,
    /// The whole file, for segment lookups.
    #[serde(skip)]
    pub file: &'a [u8],
}

impl<'a> PteFile<'a> {
    /// The XNNPACK delegates, in plan then delegate order.
    pub fn xnnpack(&self) -> impl Iterator<Item = &Delegate<'a>> {
        self.delegates.iter().filter(|d| d.backend_id == XNNPACK_BACKEND_ID)
    }

    /// The bytes the named data store holds under `key` (a whole segment).
    pub fn named_data_bytes(&self, key: &str) -> Option<&'a [u8]> {
        let n = self.named_data.iter().find(|n| n.key == key)?;
        self.segments.get(n.segment_index as usize)?.bytes(self.file)
    }

    /// `graph` (a payload of this file) with every named-data-store constant copied into
    /// its own constant region (16-byte aligned, offset entries with an empty key, as
    /// ExecuTorch's offset path writes them), so that the strict loader and our runtime can
    /// use real ExecuTorch payloads.
    pub fn inline_named_constants(&self, graph: &XnnGraph) -> Result<XnnGraph, PteError> {
        let mut g = graph.clone();
        for (i, c) in g.constant_data.iter_mut().enumerate() {
            let Some(key) = c.named_key.as_deref().filter(|k| !k.is_empty()) else { continue };
            let data = self.named_data_bytes(key).ok_or_else(|| PteError::NamedData {
                index: i,
                key: key.to_string(),
                reason: "is not in the named data store".into(),
            })?;
            let size =
                usize::try_from(c.size).ok().filter(|&n| n <= data.len()).ok_or_else(|| PteError::NamedData {
                    index: i,
                    key: key.to_string(),
                    reason: format!("needs {} bytes, the segment holds {}", c.size, data.len()),
                })?;
            while !g.constant_bytes.len().is_multiple_of(16) {
                g.constant_bytes.push(0);
            }
            c.offset = g.constant_bytes.len() as u64;
            c.named_key = Some(String::new());
            g.constant_bytes.extend_from_slice(&data[..size]);
        }
        Ok(g)
    }
}

/// True when `bytes` carries the program identifier `ET12` at 4..8.
pub fn is_pte(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[4..8] == b"ET12"
}

fn read_u32(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

fn read_u64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Parses and bounds-checks the extended header, `None` when the magic is absent.
pub fn extended_header(bytes: &[u8]) -> Result<Option<ExtendedHeader>, PteError> {
    if bytes.len() < 8 + MIN_EXTENDED_HEADER_LENGTH as usize || &bytes[8..12] != EXTENDED_HEADER_MAGIC {
        return Ok(None);
    }
    let length = read_u32(bytes, 12);
    let bad = |field, value, reason| Err(PteError::ExtendedHeader { field, value, reason });
    if length < MIN_EXTENDED_HEADER_LENGTH {
        return bad("length", length as u64, "below 24 bytes");
    }
    if 8 + length as u64 > bytes.len() as u64 {
        return bad("length", length as u64, "runs past the file");
    }
    let program_size = read_u64(bytes, 16);
    let segment_base_offset = read_u64(bytes, 24);
    let segment_data_size = if length >= 32 { Some(read_u64(bytes, 32)) } else { None };
    let len = bytes.len() as u64;
    if program_size > len || program_size < 8 + length as u64 {
        return bad("program_size", program_size, "outside the file or inside the header");
    }
    if segment_base_offset < program_size || segment_base_offset > len {
        return bad("segment_base_offset", segment_base_offset, "before the program's end or past the file");
    }
    if let Some(s) = segment_data_size {
        if segment_base_offset.checked_add(s).is_none_or(|e| e > len) {
            return bad("segment_data_size", s, "runs past the file");
        }
    }
    Ok(Some(ExtendedHeader { length, program_size, segment_base_offset, segment_data_size }))
}

/// Reads a `.pte` file: extended header, segment table, every delegate with its bytes,
/// the named data store keys and the operator names.
pub fn parse(bytes: &[u8]) -> Result<PteFile<'_>, PteError> {
    if !is_pte(bytes) {
        let found = bytes.get(4..8).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        return Err(PteError::NotPte(format!("identifier {found:?} is not ET12")));
    }
    let eh = extended_header(bytes)?;
    let program_bytes = match eh {
        Some(h) => &bytes[..h.program_size as usize],
        None => bytes,
    };
    let opts = flatbuffers::VerifierOptions { max_depth: 64, max_tables: 1 << 20, ..Default::default() };
    let program = prog::root_as_program_with_opts(&opts, program_bytes).map_err(|e| PteError::Verify(e.to_string()))?;

    let segments = segments_of(&program, eh, bytes.len() as u64)?;
    let no_segment =
        |field: String, segment_index: u32| PteError::NoSuchSegment { field, segment_index, segments: segments.len() };
    // ExecuTorch loads the constant segment when it has more than the placeholder offset.
    if let Some(cs) = program.constant_segment() {
        if cs.offsets().is_some_and(|o| o.len() > 1) && cs.segment_index() as usize >= segments.len() {
            return Err(no_segment("constant_segment".into(), cs.segment_index()));
        }
    }
    for (k, m) in program.mutable_data_segments().iter().flatten().enumerate() {
        if m.segment_index() as usize >= segments.len() {
            return Err(no_segment(format!("mutable_data_segments[{k}]"), m.segment_index()));
        }
    }

    let mut delegates = Vec::new();
    let mut operators = Vec::new();
    let plans = program.execution_plan().ok_or(PteError::Missing("Program.execution_plan"))?;
    for (pi, plan) in plans.iter().enumerate() {
        let plan_name = plan.name().unwrap_or("").to_string();
        for op in plan.operators().iter().flatten() {
            let (n, o) = (op.name().unwrap_or(""), op.overload().unwrap_or(""));
            operators.push(if o.is_empty() { n.to_string() } else { format!("{n}.{o}") });
        }
        for (di, d) in plan.delegates().iter().flatten().enumerate() {
            let bad = |reason: String| PteError::BadDelegate { plan: pi, delegate: di, reason };
            let processed = d.processed().ok_or_else(|| bad("no processed data reference".into()))?;
            let index = processed.index();
            let (location, file_offset, data) = match processed.location() {
                prog::DataLocation::SEGMENT => {
                    let seg =
                        segments.get(index as usize).ok_or_else(|| bad(format!("segment {index} does not exist")))?;
                    let Some(at) = seg.file_offset else {
                        return Err(bad(format!(
                            "its data is in segment {index}, but the file has no extended header (no segment base)"
                        )));
                    };
                    let data = seg.bytes(bytes).ok_or_else(|| bad(format!("segment {index} is unreadable")))?;
                    (DataLocation::Segment, Some(at), data)
                }
                prog::DataLocation::INLINE => {
                    let inline = program
                        .backend_delegate_data()
                        .and_then(|v| ((index as usize) < v.len()).then(|| v.get(index as usize)))
                        .ok_or_else(|| bad(format!("inline data {index} does not exist")))?;
                    (DataLocation::Inline, None, inline.data().map(|v| v.bytes()).unwrap_or(&[]))
                }
                other => return Err(bad(format!("unknown data location {}", other.0))),
            };
            delegates.push(Delegate {
                plan: plan_name.clone(),
                plan_index: pi,
                delegate_index: di,
                backend_id: d.id().unwrap_or("").to_string(),
                location,
                index,
                file_offset,
                bytes: data,
            });
        }
    }

    let mut named_data = Vec::new();
    for (k, n) in program.named_data().iter().flatten().enumerate() {
        let key = n.key().unwrap_or("").to_string();
        if n.segment_index() as usize >= segments.len() {
            return Err(no_segment(format!("named_data[{k}] ({key})"), n.segment_index()));
        }
        named_data.push(NamedData { key, segment_index: n.segment_index() });
    }
    Ok(PteFile { extended_header: eh, segments, delegates, named_data, operators, file: bytes })
}

/// `Program.segments`, each checked against the segment rules (see the module docs).
fn segments_of(
    program: &prog::Program<'_>,
    eh: Option<ExtendedHeader>,
    file_len: u64,
) -> Result<Vec<Segment>, PteError> {
    let mut segments = Vec::new();
    for (index, s) in program.segments().iter().flatten().enumerate() {
        let (offset, size) = (s.offset(), s.size());
        let Some(h) = eh else {
            if size != 0 {
                return Err(PteError::SegmentWithoutBase { index, offset, size });
            }
            segments.push(Segment { index, offset, file_offset: None, size });
            continue;
        };
        let start = h.segment_base_offset.checked_add(offset);
        match start.and_then(|o| o.checked_add(size).map(|e| (o, e))) {
            Some((o, end)) if end <= file_len => {
                if let Some(data) = h.segment_data_size {
                    if offset.checked_add(size).is_none_or(|e| e > data) {
                        return Err(PteError::SegmentOutsideData { index, offset, size, segment_data_size: data });
                    }
                }
                segments.push(Segment { index, offset, file_offset: Some(o), size });
            }
            _ => return Err(PteError::SegmentOutOfBounds { index, offset, size, file_len }),
        }
    }
    Ok(segments)
}

/// The bytes of every XNNPACK delegate payload in a `.pte` file, in plan then delegate order.
pub fn xnnpack_payloads(bytes: &[u8]) -> Result<Vec<&[u8]>, PteError> {
    Ok(parse(bytes)?.xnnpack().map(|d| d.bytes).collect())
}
