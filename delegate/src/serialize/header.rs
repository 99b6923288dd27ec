//! The 32-byte `XH00` header that wraps an XNNPACK flatbuffer (notes 1.7).
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | zero, so the magic sits where a flatbuffer identifier would |
//! | 4 | 4 | magic `XH00` |
//! | 8 | 2 | header length (30) |
//! | 10 | 4 | flatbuffer offset |
//! | 14 | 4 | flatbuffer size |
//! | 18 | 4 | constant-data offset |
//! | 22 | 8 | constant-data size |
//!
//! All little-endian; the 30 bytes are zero-padded to 32.

use super::loader::LoadError;

pub const MAGIC: &[u8; 4] = b"XH00";
/// The length field ExecuTorch writes.
pub const HEADER_LENGTH: u16 = 30;
/// The header padded to the flatbuffer's start.
pub const PADDED_HEADER_SIZE: usize = 32;
/// `CONSTANT_TENSOR_ALIGNMENT`: the flatbuffer is padded to this before constant data.
pub const ALIGNMENT: usize = 16;
/// The smallest flatbuffer the runtime accepts (root offset + identifier).
pub const MIN_FLATBUFFER_SIZE: u32 = 8;

/// The header fields, as read from or written to bytes 0..30.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct XnnHeader {
    pub header_length: u16,
    pub flatbuffer_offset: u32,
    pub flatbuffer_size: u32,
    pub constant_data_offset: u32,
    pub constant_data_size: u64,
}

/// Rounds `n` up to a multiple of [`ALIGNMENT`]; `None` on overflow.
pub fn align16(n: usize) -> Option<usize> {
    n.checked_add(ALIGNMENT - 1).map(|v| v / ALIGNMENT * ALIGNMENT)
}

impl XnnHeader {
    /// The header of a payload whose flatbuffer has `fb_size` bytes (unpadded) followed,
    /// after padding to 16, by `constant_size` bytes.
    pub fn for_sizes(fb_size: u32, constant_size: u64) -> XnnHeader {
        let padded = align16(fb_size as usize).unwrap_or(usize::MAX) as u64;
        XnnHeader {
            header_length: HEADER_LENGTH,
            flatbuffer_offset: PADDED_HEADER_SIZE as u32,
            flatbuffer_size: fb_size,
            constant_data_offset: (PADDED_HEADER_SIZE as u64 + padded) as u32,
            constant_data_size: constant_size,
        }
    }

    /// The 32 bytes of the padded header.
    pub fn to_bytes(&self) -> [u8; PADDED_HEADER_SIZE] {
        let mut b = [0u8; PADDED_HEADER_SIZE];
        b[4..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&self.header_length.to_le_bytes());
        b[10..14].copy_from_slice(&self.flatbuffer_offset.to_le_bytes());
        b[14..18].copy_from_slice(&self.flatbuffer_size.to_le_bytes());
        b[18..22].copy_from_slice(&self.constant_data_offset.to_le_bytes());
        b[22..30].copy_from_slice(&self.constant_data_size.to_le_bytes());
        b
    }

    /// True when `bytes` carries the `XH00` magic at offset 4 (and is long enough to hold a
    /// header); otherwise ExecuTorch treats the blob as a bare flatbuffer.
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.len() >= HEADER_LENGTH as usize && &bytes[4..8] == MAGIC
    }

    /// Parses and bounds-checks the header of `bytes` (which must carry the magic): the
    /// length field, a flatbuffer of at least 8 bytes inside the buffer, and a constant
    /// region inside the buffer that starts at or after the flatbuffer's end. Stricter than
    /// the runtime in one point, like ExecuTorch's Python reader: the length must be 30.
    pub fn parse(bytes: &[u8]) -> Result<XnnHeader, LoadError> {
        if bytes.len() < HEADER_LENGTH as usize {
            return Err(LoadError::Truncated {
                what: "XH00 header",
                need: HEADER_LENGTH as u64,
                have: bytes.len() as u64,
            });
        }
        if &bytes[4..8] != MAGIC {
            return Err(LoadError::BadMagic { offset: 4, found: [bytes[4], bytes[5], bytes[6], bytes[7]] });
        }
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let mut u64b = [0u8; 8];
        u64b.copy_from_slice(&bytes[22..30]);
        let h = XnnHeader {
            header_length: u16_at(8),
            flatbuffer_offset: u32_at(10),
            flatbuffer_size: u32_at(14),
            constant_data_offset: u32_at(18),
            constant_data_size: u64::from_le_bytes(u64b),
        };
        let len = bytes.len() as u64;
        if h.header_length != HEADER_LENGTH {
            return Err(LoadError::Header {
                offset: 8,
                field: "header_length",
                value: h.header_length as u64,
                reason: "must be 30",
            });
        }
        if (h.flatbuffer_offset as u64) < HEADER_LENGTH as u64 {
            return Err(LoadError::Header {
                offset: 10,
                field: "flatbuffer_offset",
                value: h.flatbuffer_offset as u64,
                reason: "overlaps the header",
            });
        }
        if h.flatbuffer_size < MIN_FLATBUFFER_SIZE {
            return Err(LoadError::Header {
                offset: 14,
                field: "flatbuffer_size",
                value: h.flatbuffer_size as u64,
                reason: "below 8 bytes",
            });
        }
        let fb_end = h.flatbuffer_offset as u64 + h.flatbuffer_size as u64;
        if fb_end > len {
            return Err(LoadError::Header {
                offset: 14,
                field: "flatbuffer_size",
                value: h.flatbuffer_size as u64,
                reason: "flatbuffer ends past the buffer",
            });
        }
        if (h.constant_data_offset as u64) < fb_end {
            return Err(LoadError::Header {
                offset: 18,
                field: "constant_data_offset",
                value: h.constant_data_offset as u64,
                reason: "constant data starts inside the flatbuffer",
            });
        }
        let cd_end = (h.constant_data_offset as u64).checked_add(h.constant_data_size);
        if cd_end.is_none_or(|e| e > len) {
            return Err(LoadError::Header {
                offset: 22,
                field: "constant_data_size",
                value: h.constant_data_size,
                reason: "constant data ends past the buffer",
            });
        }
        Ok(h)
    }

    /// The flatbuffer bytes (already bounds-checked by [`XnnHeader::parse`]).
    pub fn flatbuffer<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        let s = self.flatbuffer_offset as usize;
        bytes.get(s..s + self.flatbuffer_size as usize).unwrap_or(&[])
    }

    /// The constant-data bytes (already bounds-checked by [`XnnHeader::parse`]).
    pub fn constant_data<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        let s = self.constant_data_offset as usize;
        bytes.get(s..s + self.constant_data_size as usize).unwrap_or(&[])
    }
}
