//! On-disk layout: constants, the fixed header and the section table.
//!
//! ```text
//! offset  size  field
//! 0       8     magic "OAPINDEX"
//! 8       4     format version (u32, currently 1)
//! 12      4     header length (u32, 640)
//! 16      4     flags (u32, 0; reserved)
//! 20      4     dim (u32, 1..=65536)
//! 24      4     dtype (u32: 0 = f32, 1 = i8)
//! 28      4     section count (u32, 14)
//! 32      8     n_docs (u64, < 2^32)
//! 40      8     n_rows (u64)
//! 48      8     n_terms (u64)
//! 56      8     n_postings (u64)
//! 64      8     avgdl (f64, BM25 average weighted document length)
//! 72      8     file length (u64, must equal the real file length)
//! 80      48    reserved (zero)
//! 128     448   section table: 14 x { kind u32, reserved u32, offset u64, len u64, crc32 u32, reserved u32 }
//! 576     60    reserved (zero)
//! 636     4     crc32 of bytes [0, 636)
//! ```
//!
//! Sections follow in the fixed order of [`Section::ALL`], each starting at the next
//! 64-byte boundary after the previous one (the first at 640); the gaps are zero bytes
//! and the file ends exactly at the end of the last section. All integers are
//! little-endian. Because every section is 64-byte aligned and the map is page aligned,
//! typed slices are cast straight out of the map with `bytemuck` (no copy).

use crate::VectorDtype;

/// File magic.
pub(crate) const MAGIC: [u8; 8] = *b"OAPINDEX";
/// Format version written by this build; `open` rejects anything else.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Total header length, including the section table and header crc.
pub(crate) const HEADER_LEN: usize = 640;
/// Alignment of every section start.
pub(crate) const SECTION_ALIGN: u64 = 64;
/// Where the section table starts.
const SECTION_TABLE_OFF: usize = 128;
/// Size of one section-table entry.
const SECTION_ENTRY_LEN: usize = 32;
/// Where the header crc lives (last 4 bytes of the header).
const HEADER_CRC_OFF: usize = HEADER_LEN - 4;

/// Largest accepted vector dimension (bounds arithmetic, rejects absurd headers).
pub const MAX_DIM: usize = 65_536;
/// Cap on a document id, in bytes.
pub const MAX_ID_LEN: usize = 1024;
/// Cap on an opaque record, in bytes.
pub const MAX_RECORD_LEN: usize = 1 << 20;
/// Cap on the JSON meta blob, in bytes.
pub const MAX_META_LEN: usize = 1 << 20;
/// Cap on one lexical term, in bytes.
pub const MAX_TERM_LEN: usize = 256;

/// Sections in file order. The discriminant is the `kind` stored in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Section {
    /// Caller JSON blob.
    Meta = 0,
    /// (n_docs + 1) x u64 prefix offsets into `IdBytes`.
    IdOffsets = 1,
    /// Concatenated UTF-8 ids.
    IdBytes = 2,
    /// (n_docs + 1) x u64 prefix offsets into `RecBytes`.
    RecOffsets = 3,
    /// Concatenated opaque records.
    RecBytes = 4,
    /// n_docs x u32: doc indices ordered by id (byte order), for `find`.
    IdSorted = 5,
    /// (n_docs + 1) x u64: first row of each document; last entry = n_rows.
    RowOffsets = 6,
    /// n_rows x RowMeta {key [u8;16], weight f32, scale f32}.
    RowMeta = 7,
    /// n_rows x dim x (f32 | i8), row-major.
    Vectors = 8,
    /// (n_terms + 1) x u64 prefix offsets into `TermBytes`.
    TermOffsets = 9,
    /// Concatenated UTF-8 terms, strictly ascending in byte order.
    TermBytes = 10,
    /// (n_terms + 1) x u64 prefix offsets (in postings) into `Postings`.
    PostingOffsets = 11,
    /// n_postings x Posting {doc u32, tf f32}; per term, doc strictly ascending.
    Postings = 12,
    /// n_docs x f32 weighted document length for BM25.
    DocLens = 13,
}

/// Number of sections.
pub(crate) const N_SECTIONS: usize = 14;

impl Section {
    pub(crate) const ALL: [Section; N_SECTIONS] = [
        Section::Meta,
        Section::IdOffsets,
        Section::IdBytes,
        Section::RecOffsets,
        Section::RecBytes,
        Section::IdSorted,
        Section::RowOffsets,
        Section::RowMeta,
        Section::Vectors,
        Section::TermOffsets,
        Section::TermBytes,
        Section::PostingOffsets,
        Section::Postings,
        Section::DocLens,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Section::Meta => "meta",
            Section::IdOffsets => "id_offsets",
            Section::IdBytes => "id_bytes",
            Section::RecOffsets => "record_offsets",
            Section::RecBytes => "record_bytes",
            Section::IdSorted => "id_sorted",
            Section::RowOffsets => "row_offsets",
            Section::RowMeta => "row_meta",
            Section::Vectors => "vectors",
            Section::TermOffsets => "term_offsets",
            Section::TermBytes => "term_bytes",
            Section::PostingOffsets => "posting_offsets",
            Section::Postings => "postings",
            Section::DocLens => "doc_lens",
        }
    }

    pub(crate) fn idx(self) -> usize {
        self as usize
    }
}

/// Per-row metadata stored next to the matrix.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(crate) struct RowMeta {
    /// Caller key (hash of the embedded text), for vector reuse on rebuild.
    pub key: [u8; 16],
    /// Row weight multiplied into the cosine.
    pub weight: f32,
    /// Dequantisation scale (i8); 1.0 for f32 rows.
    pub scale: f32,
}

/// Size of [`RowMeta`] on disk.
pub(crate) const ROW_META_LEN: u64 = 24;

/// One BM25 posting.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(crate) struct Posting {
    /// Document index.
    pub doc: u32,
    /// Field-weighted term frequency (sum of token weights), hence f32.
    pub tf: f32,
}

/// Size of [`Posting`] on disk.
pub(crate) const POSTING_LEN: u64 = 8;

/// One entry of the section table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SectionEntry {
    pub offset: u64,
    pub len: u64,
    pub crc: u32,
}

/// Decoded header.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Header {
    pub dim: u32,
    pub dtype: VectorDtype,
    pub n_docs: u64,
    pub n_rows: u64,
    pub n_terms: u64,
    pub n_postings: u64,
    pub avgdl: f64,
    pub file_len: u64,
    pub sections: [SectionEntry; N_SECTIONS],
}

/// Rounds `x` up to the section alignment; `None` on overflow.
pub(crate) fn align_up(x: u64) -> Option<u64> {
    x.checked_add(SECTION_ALIGN - 1)
        .map(|v| v & !(SECTION_ALIGN - 1))
}

/// Lays sections out back to back from the end of the header; returns the entries
/// (crc left 0) and the total file length. Shared by writer and reader so both agree
/// on the one canonical layout.
pub(crate) fn layout(lens: &[u64; N_SECTIONS]) -> Option<([SectionEntry; N_SECTIONS], u64)> {
    let mut out = [SectionEntry::default(); N_SECTIONS];
    let mut pos = HEADER_LEN as u64;
    for (entry, &len) in out.iter_mut().zip(lens.iter()) {
        let off = align_up(pos)?;
        entry.offset = off;
        entry.len = len;
        pos = off.checked_add(len)?;
    }
    Some((out, pos))
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    if let Some(dst) = buf.get_mut(at..at + 4) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    if let Some(dst) = buf.get_mut(at..at + 8) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = buf.get(at..at + 4) {
        b.copy_from_slice(src);
    }
    u32::from_le_bytes(b)
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(src) = buf.get(at..at + 8) {
        b.copy_from_slice(src);
    }
    u64::from_le_bytes(b)
}

impl Header {
    /// Serialises the header, computing the header crc.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, HEADER_LEN as u32);
        put_u32(&mut b, 16, 0);
        put_u32(&mut b, 20, self.dim);
        put_u32(&mut b, 24, self.dtype.code());
        put_u32(&mut b, 28, N_SECTIONS as u32);
        put_u64(&mut b, 32, self.n_docs);
        put_u64(&mut b, 40, self.n_rows);
        put_u64(&mut b, 48, self.n_terms);
        put_u64(&mut b, 56, self.n_postings);
        put_u64(&mut b, 64, self.avgdl.to_bits());
        put_u64(&mut b, 72, self.file_len);
        for (i, s) in self.sections.iter().enumerate() {
            let at = SECTION_TABLE_OFF + i * SECTION_ENTRY_LEN;
            put_u32(&mut b, at, i as u32);
            put_u64(&mut b, at + 8, s.offset);
            put_u64(&mut b, at + 16, s.len);
            put_u32(&mut b, at + 24, s.crc);
        }
        let crc = crc32fast::hash(&b[..HEADER_CRC_OFF]);
        put_u32(&mut b, HEADER_CRC_OFF, crc);
        b
    }

    /// Parses and checks the header: magic, version, header crc, constants and the
    /// section table's kinds. Counts and offsets are *not* trusted here; the reader
    /// bounds-checks them against the file. Errors are human-readable reasons.
    pub(crate) fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HEADER_LEN {
            return Err(format!(
                "file is {} bytes, shorter than the {HEADER_LEN}-byte header",
                b.len()
            ));
        }
        if b.get(..8) != Some(&MAGIC[..]) {
            return Err("bad magic (not an oap-index file)".into());
        }
        let version = get_u32(b, 8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported format version {version} (this build reads {FORMAT_VERSION})"
            ));
        }
        let stored_crc = get_u32(b, HEADER_CRC_OFF);
        let crc = crc32fast::hash(b.get(..HEADER_CRC_OFF).unwrap_or(&[]));
        if crc != stored_crc {
            return Err(format!(
                "header crc mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"
            ));
        }
        let header_len = get_u32(b, 12);
        if header_len as usize != HEADER_LEN {
            return Err(format!("header length {header_len}, expected {HEADER_LEN}"));
        }
        let flags = get_u32(b, 16);
        if flags != 0 {
            return Err(format!("unknown header flags {flags:#x}"));
        }
        let dim = get_u32(b, 20);
        if dim == 0 || dim as usize > MAX_DIM {
            return Err(format!("dim {dim} outside 1..={MAX_DIM}"));
        }
        let dtype_code = get_u32(b, 24);
        let dtype = VectorDtype::from_code(dtype_code)
            .ok_or_else(|| format!("unknown vector dtype code {dtype_code}"))?;
        let n_sections = get_u32(b, 28);
        if n_sections as usize != N_SECTIONS {
            return Err(format!("section count {n_sections}, expected {N_SECTIONS}"));
        }
        let mut sections = [SectionEntry::default(); N_SECTIONS];
        for (i, s) in sections.iter_mut().enumerate() {
            let at = SECTION_TABLE_OFF + i * SECTION_ENTRY_LEN;
            let kind = get_u32(b, at);
            if kind as usize != i {
                return Err(format!("section table slot {i} has kind {kind}"));
            }
            s.offset = get_u64(b, at + 8);
            s.len = get_u64(b, at + 16);
            s.crc = get_u32(b, at + 24);
        }
        let avgdl = f64::from_bits(get_u64(b, 64));
        if !avgdl.is_finite() || avgdl < 0.0 {
            return Err(format!("avgdl {avgdl} is not a finite non-negative number"));
        }
        Ok(Header {
            dim,
            dtype,
            n_docs: get_u64(b, 32),
            n_rows: get_u64(b, 40),
            n_terms: get_u64(b, 48),
            n_postings: get_u64(b, 56),
            avgdl,
            file_len: get_u64(b, 72),
            sections,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let lens = [3, 16, 5, 16, 0, 4, 16, 24, 16, 8, 0, 8, 0, 4];
        let (sections, file_len) = layout(&lens).unwrap_or_else(|| panic!("layout"));
        let h = Header {
            dim: 4,
            dtype: VectorDtype::I8,
            n_docs: 1,
            n_rows: 1,
            n_terms: 0,
            n_postings: 0,
            avgdl: 2.5,
            file_len,
            sections,
        };
        let enc = h.encode();
        assert_eq!(Header::decode(&enc), Ok(h));
        for s in sections {
            assert_eq!(s.offset % SECTION_ALIGN, 0);
        }
    }

    #[test]
    fn struct_sizes_match_constants() {
        assert_eq!(std::mem::size_of::<RowMeta>() as u64, ROW_META_LEN);
        assert_eq!(std::mem::size_of::<Posting>() as u64, POSTING_LEN);
    }
}
