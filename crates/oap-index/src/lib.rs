//! `oap-index`: one memory-mapped, checksummed file holding everything discovery needs
//! to rank documents for a query — opaque records, per-document embedding rows
//! (f32 or int8), and BM25 postings.
//!
//! The crate knows nothing about manifests: a document is an id, opaque record bytes,
//! 0..n embedding rows (each with a caller key and weight) and a weighted token list.
//!
//! * `IndexWriter` (feature `test-support`: tests and benchmarks) collects documents in memory (one copy of the matrix, already in
//!   its on-disk dtype) and `IndexWriter::write_atomic` writes `<path>.tmp`, fsyncs,
//!   renames over `<path>` and fsyncs the directory (`oap-store`'s atomic write), so
//!   readers see either the old or the new file and a mapped old file stays valid.
//! * [`StreamWriter`] writes the same file from a stream of documents with bounded
//!   memory: records, vectors and postings go to temporary files next to the index as
//!   documents arrive (postings as sorted runs, merged at the end), and the file is
//!   assembled from them through the same atomic write.
//! * [`Index::open`] maps the file and validates every byte of it (header crc, section
//!   crcs, offsets, counts, sort orders) before any query runs, so queries can rely on
//!   the invariants and a torn or hostile file becomes [`IndexError::Corrupt`].
//! * [`Index::dense_search`] scans the mapped matrix with simsimd kernels, in parallel
//!   above [`SearchConfig::parallel_min_rows`]; [`Index::lexical_search`] is BM25 over
//!   the mapped dictionary. See `format.rs` for the byte layout.
//!
//! # Architecture
//!
//! One checksummed, memory-mapped file: ids, opaque records, per-document
//! embedding rows (f32 or int8 with a per-row scale), BM25 postings and a JSON
//! meta blob. Dense search is a SIMD scan (simsimd) with a bounded heap,
//! split over threads for large matrices; a document scores as the best of its
//! weighted rows. The lexical tokenizer lives here so index and query time
//! tokenise identically; it stems with Snowball English by default
//! (`Stemmer::Light`, the earlier suffix stripper, stays selectable, and the
//! engine's choice is part of the index fingerprint).
//!
//! **Architecture Invariant.** This crate knows nothing about manifests. A
//! file is never modified in place: a new index is written through
//! `oap_store::write_atomic`, so readers holding the old mapping keep valid
//! data. Two writers produce the same bytes (a test compares them over
//! generated documents): `IndexWriter` holds the whole index in memory, and
//! `StreamWriter`, which rebuilds use, holds a few bytes per document (ids,
//! offset tables, row metadata, lengths), the vocabulary and a posting buffer
//! capped in bytes; records and vectors go to temporary files next to the
//! index (`<index>.tmp.records`, `.tmp.vectors`) as documents arrive, postings
//! to `<index>.tmp.postings` as runs sorted by term, merged in term order into
//! the final file. Its temporary files are removed however the writer ends
//! (finished, failed, dropped half way); a crash leaves them under fixed
//! names, which the next writer takes over. `Index::open` checks the header, every section checksum and every
//! offset with checked arithmetic; a torn or hostile file is
//! `IndexError::Corrupt`, never a panic. The checksums are read from the file
//! (positional reads), not through the map, and the map is not populated, so
//! opening a new index while the old one serves adds to resident memory only
//! the small sections the content checks walk; `prefault_vectors`, called by
//! the engine once the old index is unmapped, brings in the vectors every
//! dense query scans. Results are deterministic (ties by
//! document number).
//!
//! File layout (format v1, little-endian): a 640-byte header (magic
//! `OAPINDEX`, version, dim, dtype, counts, a table of 14 sections with offset,
//! length and crc32, header crc), then the sections, each 64-byte aligned:
//! meta, id offsets/bytes, record offsets/bytes, id-sorted permutation, row
//! offsets, row meta (key, weight, scale), vectors, term offsets/bytes,
//! posting offsets, postings (doc, tf), document lengths.

#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(target_endian = "big")]
compile_error!(
    "oap-index maps little-endian data straight from disk; big-endian targets are not supported"
);

mod error;
mod format;
mod reader;
mod search;
mod stream;
mod tokenize;
#[cfg(any(test, feature = "test-support"))]
mod whole;
mod writer;

pub use error::IndexError;
pub use format::{MAX_DIM, MAX_ID_LEN, MAX_META_LEN, MAX_RECORD_LEN, MAX_TERM_LEN};
pub use reader::{Index, RowRef, Rows, SearchConfig, PARALLEL_MIN_ROWS};
pub use search::{BM25_B, BM25_K1};
pub use stream::{StreamWriter, DEFAULT_POSTING_BUFFER};
pub use tokenize::{
    is_stopword, stem, tokenize, tokenize_with, Stemmer, UnknownStemmer, MAX_TOKEN_CHARS,
};
#[cfg(any(test, feature = "test-support"))]
pub use whole::IndexWriter;
pub use writer::{DocInput, RowInput, WriteStats};

/// Storage type of the vector matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorDtype {
    /// 4 bytes per component, exact.
    F32,
    /// 1 byte per component plus a per-row f32 scale (symmetric, scale = max|x| / 127).
    /// 4x smaller and faster to scan; ranking is close to f32 but not identical.
    I8,
}

impl VectorDtype {
    /// Bytes per vector component.
    pub fn size(self) -> usize {
        match self {
            VectorDtype::F32 => 4,
            VectorDtype::I8 => 1,
        }
    }

    pub(crate) fn code(self) -> u32 {
        match self {
            VectorDtype::F32 => 0,
            VectorDtype::I8 => 1,
        }
    }

    pub(crate) fn from_code(c: u32) -> Option<Self> {
        match c {
            0 => Some(VectorDtype::F32),
            1 => Some(VectorDtype::I8),
            _ => None,
        }
    }
}

/// A scored document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    /// Document index (0..len), usable with [`Index::doc_id`] / [`Index::record`].
    pub doc: u32,
    /// Score (dense: weighted cosine; lexical: BM25).
    pub score: f32,
}
