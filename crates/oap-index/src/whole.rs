//! The in-memory writer: every section held until one atomic write. The
//! daemon builds its index with [`crate::StreamWriter`]; this simpler writer
//! is the reference the stream writer's output is compared with, and the
//! quick way for tests and benchmarks to make an index (feature
//! `test-support`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use oap_store::TempName;

use crate::format::{
    layout, Header, Posting, RowMeta, Section, HEADER_LEN, MAX_DIM, MAX_META_LEN, N_SECTIONS,
};
use crate::writer::{check_doc, quantize_into, store_error, term_frequencies};
use crate::{DocInput, IndexError, VectorDtype, WriteStats};

/// Accumulates documents and writes one index file.
///
/// Peak memory: the matrix is held exactly once, already converted to its on-disk
/// dtype (4 B/component for f32, 1 B for i8), and written straight from that buffer,
/// so writing 1M x 384 f32 rows needs ~1.5 GB, not 3 GB. Use [`IndexWriter::reserve`]
/// when the size is known to avoid the transient 2x of `Vec` growth.
/// [`crate::StreamWriter`] writes the same bytes holding only a bounded part
/// of the index in memory.
pub struct IndexWriter {
    dim: usize,
    dtype: VectorDtype,
    meta: Vec<u8>,
    ids: HashSet<String>,
    id_bytes: Vec<u8>,
    id_offsets: Vec<u64>,
    rec_bytes: Vec<u8>,
    rec_offsets: Vec<u64>,
    row_offsets: Vec<u64>,
    row_meta: Vec<RowMeta>,
    vec_f32: Vec<f32>,
    vec_i8: Vec<i8>,
    postings: HashMap<String, Vec<Posting>>,
    n_postings: u64,
    doc_lens: Vec<f32>,
}

impl std::fmt::Debug for IndexWriter {
    // Manual impl: a derived one would print the whole matrix.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexWriter")
            .field("dim", &self.dim)
            .field("dtype", &self.dtype)
            .field("docs", &self.doc_lens.len())
            .field("rows", &self.row_meta.len())
            .field("terms", &self.postings.len())
            .finish()
    }
}

impl IndexWriter {
    /// Starts an empty index of `dim`-dimensional vectors stored as `dtype`.
    /// `meta` is a caller JSON document (model id, weights hash, ...) stored verbatim;
    /// it must parse as JSON and be at most [`MAX_META_LEN`] bytes.
    pub fn new(dim: usize, dtype: VectorDtype, meta: Vec<u8>) -> Result<Self, IndexError> {
        if dim == 0 || dim > MAX_DIM {
            return Err(IndexError::invalid(format!(
                "dim {dim} outside 1..={MAX_DIM}"
            )));
        }
        if meta.len() > MAX_META_LEN {
            return Err(IndexError::TooLarge {
                what: "meta",
                len: meta.len(),
                max: MAX_META_LEN,
            });
        }
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&meta) {
            return Err(IndexError::invalid(format!("meta is not valid JSON: {e}")));
        }
        Ok(IndexWriter {
            dim,
            dtype,
            meta,
            ids: HashSet::new(),
            id_bytes: Vec::new(),
            id_offsets: vec![0],
            rec_bytes: Vec::new(),
            rec_offsets: vec![0],
            row_offsets: vec![0],
            row_meta: Vec::new(),
            vec_f32: Vec::new(),
            vec_i8: Vec::new(),
            postings: HashMap::new(),
            n_postings: 0,
            doc_lens: Vec::new(),
        })
    }

    /// Pre-allocates for `docs` more documents and `rows` more rows.
    pub fn reserve(&mut self, docs: usize, rows: usize) {
        self.ids.reserve(docs);
        self.id_offsets.reserve(docs);
        self.rec_offsets.reserve(docs);
        self.row_offsets.reserve(docs);
        self.doc_lens.reserve(docs);
        self.row_meta.reserve(rows);
        let comps = rows.saturating_mul(self.dim);
        match self.dtype {
            VectorDtype::F32 => self.vec_f32.reserve(comps),
            VectorDtype::I8 => self.vec_i8.reserve(comps),
        }
    }

    /// Documents added so far.
    pub fn len(&self) -> usize {
        self.doc_lens.len()
    }

    /// True if no document was added.
    pub fn is_empty(&self) -> bool {
        self.doc_lens.is_empty()
    }

    /// Rows added so far.
    pub fn rows(&self) -> usize {
        self.row_meta.len()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Storage dtype.
    pub fn dtype(&self) -> VectorDtype {
        self.dtype
    }

    /// Adds a document. Validates everything first, so a rejected document leaves the
    /// writer unchanged. Errors: empty/oversized/duplicate id, oversized record, a row
    /// of the wrong dimension or with a non-finite component, a non-finite or negative
    /// weight, an empty or oversized term.
    pub fn add(&mut self, doc: DocInput) -> Result<(), IndexError> {
        let DocInput {
            id,
            record,
            rows,
            lexical,
        } = doc;
        check_doc(
            self.dim,
            self.doc_lens.len(),
            &self.ids,
            &id,
            &record,
            &rows,
            &lexical,
        )?;

        // All checks passed: mutate.
        let doc_idx = self.doc_lens.len() as u32;
        self.id_bytes.extend_from_slice(id.as_bytes());
        self.id_offsets.push(self.id_bytes.len() as u64);
        self.rec_bytes.extend_from_slice(&record);
        self.rec_offsets.push(self.rec_bytes.len() as u64);
        self.ids.insert(id);

        for row in rows {
            let scale = match self.dtype {
                VectorDtype::F32 => {
                    self.vec_f32.extend_from_slice(&row.vector);
                    1.0
                }
                VectorDtype::I8 => quantize_into(&row.vector, &mut self.vec_i8),
            };
            self.row_meta.push(RowMeta {
                key: row.key,
                weight: row.weight,
                scale,
            });
        }
        self.row_offsets.push(self.row_meta.len() as u64);

        let (tf, doc_len) = term_frequencies(&lexical);
        for (term, f) in tf {
            if f > 0.0 {
                self.postings.entry(term).or_default().push(Posting {
                    doc: doc_idx,
                    tf: f,
                });
                self.n_postings += 1;
            }
        }
        self.doc_lens.push(doc_len);
        Ok(())
    }

    /// Writes the index to `path` atomically with [`oap_store::write_atomic_with`]:
    /// `<path>.tmp` in the same directory, fsync, rename over `<path>`, fsync the
    /// directory. Readers that mapped the old file keep a valid mapping (its inode
    /// lives until unmapped). On failure before the rename the old file is untouched
    /// and the temp file is removed.
    ///
    /// One writer per path at a time: two concurrent writers would share `<path>.tmp`.
    pub fn write_atomic(&self, path: impl AsRef<Path>) -> Result<WriteStats, IndexError> {
        let started = Instant::now();
        let path = path.as_ref();

        // Build the derived sections.
        let n_docs = self.doc_lens.len();
        let mut id_sorted: Vec<u32> = (0..n_docs as u32).collect();
        id_sorted.sort_by(|&a, &b| self.id_bytes_of(a).cmp(self.id_bytes_of(b)));

        let mut terms: Vec<(&String, &Vec<Posting>)> = self.postings.iter().collect();
        terms.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut term_offsets: Vec<u64> = Vec::with_capacity(terms.len() + 1);
        let mut term_bytes: Vec<u8> = Vec::new();
        let mut posting_offsets: Vec<u64> = Vec::with_capacity(terms.len() + 1);
        let mut postings: Vec<Posting> = Vec::with_capacity(self.n_postings as usize);
        term_offsets.push(0);
        posting_offsets.push(0);
        for (t, p) in &terms {
            term_bytes.extend_from_slice(t.as_bytes());
            term_offsets.push(term_bytes.len() as u64);
            postings.extend_from_slice(p);
            posting_offsets.push(postings.len() as u64);
        }
        let avgdl = if n_docs == 0 {
            0.0
        } else {
            self.doc_lens.iter().map(|&x| f64::from(x)).sum::<f64>() / n_docs as f64
        };

        let vectors: &[u8] = match self.dtype {
            VectorDtype::F32 => bytemuck::cast_slice(&self.vec_f32),
            VectorDtype::I8 => bytemuck::cast_slice(&self.vec_i8),
        };
        let mut secs: [&[u8]; N_SECTIONS] = [&[]; N_SECTIONS];
        secs[Section::Meta.idx()] = &self.meta;
        secs[Section::IdOffsets.idx()] = bytemuck::cast_slice(&self.id_offsets);
        secs[Section::IdBytes.idx()] = &self.id_bytes;
        secs[Section::RecOffsets.idx()] = bytemuck::cast_slice(&self.rec_offsets);
        secs[Section::RecBytes.idx()] = &self.rec_bytes;
        secs[Section::IdSorted.idx()] = bytemuck::cast_slice(&id_sorted);
        secs[Section::RowOffsets.idx()] = bytemuck::cast_slice(&self.row_offsets);
        secs[Section::RowMeta.idx()] = bytemuck::cast_slice(&self.row_meta);
        secs[Section::Vectors.idx()] = vectors;
        secs[Section::TermOffsets.idx()] = bytemuck::cast_slice(&term_offsets);
        secs[Section::TermBytes.idx()] = &term_bytes;
        secs[Section::PostingOffsets.idx()] = bytemuck::cast_slice(&posting_offsets);
        secs[Section::Postings.idx()] = bytemuck::cast_slice(&postings);
        secs[Section::DocLens.idx()] = bytemuck::cast_slice(&self.doc_lens);

        let lens = secs.map(|s| s.len() as u64);
        let (mut entries, file_len) =
            layout(&lens).ok_or_else(|| IndexError::invalid("index too large to lay out"))?;
        for (e, s) in entries.iter_mut().zip(secs.iter()) {
            e.crc = crc32fast::hash(s);
        }
        let header = Header {
            dim: self.dim as u32,
            dtype: self.dtype,
            n_docs: n_docs as u64,
            n_rows: self.row_meta.len() as u64,
            n_terms: terms.len() as u64,
            n_postings: postings.len() as u64,
            avgdl,
            file_len,
            sections: entries,
        }
        .encode();

        let written = oap_store::write_atomic_with(path, TempName::Fixed, |file| {
            write_sections(file, &header, &entries, &secs)
        })
        .map_err(store_error)?;
        let dir_synced = written.dir_synced;
        if !dir_synced {
            tracing::warn!(path = %path.display(), "fsync of index directory failed; rename may not be durable");
        }

        let stats = WriteStats {
            path: path.to_path_buf(),
            bytes: file_len,
            docs: n_docs as u32,
            rows: self.row_meta.len() as u64,
            terms: terms.len() as u64,
            postings: postings.len() as u64,
            dir_synced,
            elapsed: started.elapsed(),
        };
        tracing::info!(
            path = %path.display(),
            bytes = stats.bytes,
            docs = stats.docs,
            rows = stats.rows,
            terms = stats.terms,
            elapsed_ms = stats.elapsed.as_millis() as u64,
            "index written"
        );
        Ok(stats)
    }

    fn id_bytes_of(&self, doc: u32) -> &[u8] {
        let d = doc as usize;
        match (self.id_offsets.get(d), self.id_offsets.get(d + 1)) {
            (Some(&s), Some(&e)) => self.id_bytes.get(s as usize..e as usize).unwrap_or(&[]),
            _ => &[],
        }
    }
}

fn write_sections(
    file: &File,
    header: &[u8; HEADER_LEN],
    entries: &[crate::format::SectionEntry; N_SECTIONS],
    secs: &[&[u8]; N_SECTIONS],
) -> std::io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let mut w = BufWriter::with_capacity(1 << 20, file);
    w.write_all(header)?;
    let mut pos = HEADER_LEN as u64;
    for (e, s) in entries.iter().zip(secs.iter()) {
        let pad = e.offset.checked_sub(pos).unwrap_or(u64::MAX) as usize;
        let zeros = ZEROS
            .get(..pad)
            .ok_or_else(|| std::io::Error::other("internal error: section gap >= 64 bytes"))?;
        w.write_all(zeros)?;
        w.write_all(s)?;
        pos = e.offset + e.len;
    }
    w.flush()
}
