//! Writing an index from a stream of documents with bounded memory.
//!
//! `IndexWriter` (feature `test-support`) holds every section in memory until it writes; at
//! 10,000 manifests that is the records, the matrix and the postings twice
//! over. [`StreamWriter`] writes the large sections as documents arrive into
//! temporary files next to the index (`<index>.tmp.records`, `.tmp.vectors`,
//! `.tmp.postings`) and keeps only what is a few bytes per document (ids and
//! the offset tables, row metadata, document lengths) and the vocabulary.
//! Postings are buffered up to a byte cap, sorted by term and spilled as a
//! run; [`StreamWriter::finish`] merges the runs in term order straight into
//! the final file, copies the other spilled sections and writes the header
//! last, all through the same atomic write as `IndexWriter`. The
//! file is byte for byte the one `IndexWriter` writes for the same documents.
//!
//! The temporary files are removed when the writer is dropped: after
//! `finish`, on an error, or when the caller gives up half way. A crash
//! leaves them behind under fixed names, and the next writer for the same
//! path truncates and then removes them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use oap_store::TempName;

use crate::format::{
    layout, Header, Posting, RowMeta, Section, HEADER_LEN, MAX_META_LEN, N_SECTIONS, POSTING_LEN,
};
use crate::writer::{check_doc, quantize_into, store_error, term_frequencies};
use crate::{DocInput, IndexError, VectorDtype, WriteStats};

/// Default cap on the postings buffered in memory before they are sorted and
/// spilled as one run (4 MiB, about 350,000 postings).
pub const DEFAULT_POSTING_BUFFER: usize = 4 << 20;

/// Buffer of each temporary file's writer.
const SPILL_BUF: usize = 256 << 10;

/// Bytes read at once when a spilled section is copied into the index.
const COPY_CHUNK: usize = 1 << 20;

/// Bytes read at once from each run while merging.
const RUN_CHUNK: usize = 64 << 10;

/// One spilled posting: the writer's term number (first-occurrence order),
/// the document and its field-weighted term frequency.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct RunEntry {
    term: u32,
    doc: u32,
    tf: f32,
}

const RUN_ENTRY_LEN: usize = std::mem::size_of::<RunEntry>();

/// A temporary file written front to back; removed when dropped.
struct Spill {
    path: PathBuf,
    out: BufWriter<File>,
    len: u64,
}

impl Spill {
    fn create(path: PathBuf) -> Result<Spill, IndexError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| IndexError::io("creating", &path, e))?;
        Ok(Spill {
            out: BufWriter::with_capacity(SPILL_BUF, file),
            path,
            len: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), IndexError> {
        self.out
            .write_all(bytes)
            .map_err(|e| IndexError::io("writing", &self.path, e))?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Flushes the buffer; the file can then be read with positional reads.
    fn flush(&mut self) -> Result<&File, IndexError> {
        self.out
            .flush()
            .map_err(|e| IndexError::io("writing", &self.path, e))?;
        Ok(self.out.get_ref())
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_file(&self.path) {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %err, "cannot remove temporary index file");
            }
        }
    }
}

/// Writes one index file from documents added one at a time, holding only a
/// bounded part of it in memory (see the module documentation).
///
/// In memory: ids, the offset tables and document lengths (about 30 bytes
/// per document plus its id), 24 bytes of metadata per row, the vocabulary,
/// and at most the posting buffer (see [`StreamWriter::with_posting_buffer`]).
/// Records, vectors and postings go to disk.
pub struct StreamWriter {
    path: PathBuf,
    dim: usize,
    dtype: VectorDtype,
    meta: Vec<u8>,
    ids: HashSet<String>,
    id_bytes: Vec<u8>,
    id_offsets: Vec<u64>,
    rec_offsets: Vec<u64>,
    records: Spill,
    row_offsets: Vec<u64>,
    row_meta: Vec<RowMeta>,
    vectors: Spill,
    quantized: Vec<i8>,
    term_ids: HashMap<String, u32>,
    term_names: Vec<String>,
    term_counts: Vec<u64>,
    pending: Vec<RunEntry>,
    posting_buffer: usize,
    postings: Spill,
    /// Spilled runs: (first byte, entries).
    runs: Vec<(u64, u64)>,
    n_postings: u64,
    doc_lens: Vec<f32>,
    /// A write to a temporary file failed: the spilled sections may be torn.
    failed: bool,
    #[cfg(test)]
    fail_after: Option<Section>,
}

impl std::fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWriter")
            .field("path", &self.path)
            .field("dim", &self.dim)
            .field("dtype", &self.dtype)
            .field("docs", &self.doc_lens.len())
            .field("rows", &self.row_meta.len())
            .field("terms", &self.term_names.len())
            .field("runs", &self.runs.len())
            .finish()
    }
}

/// `<dir>/<file name>.tmp.<what>`.
fn spill_path(path: &Path, what: &str) -> Result<PathBuf, IndexError> {
    let name = path
        .file_name()
        .ok_or_else(|| IndexError::invalid(format!("{} has no file name", path.display())))?;
    let mut name = name.to_os_string();
    name.push(".tmp.");
    name.push(what);
    Ok(path.with_file_name(name))
}

impl StreamWriter {
    /// Starts an index of `dim`-dimensional vectors stored as `dtype`, to be
    /// written to `path` by [`StreamWriter::finish`]. Creates the temporary
    /// files next to `path` now (its directory must exist). `meta` as for
    /// `IndexWriter::new`: JSON, at most [`crate::MAX_META_LEN`] bytes.
    ///
    /// One writer per path at a time: two would share the temporary files.
    pub fn create(
        path: impl AsRef<Path>,
        dim: usize,
        dtype: VectorDtype,
        meta: Vec<u8>,
    ) -> Result<Self, IndexError> {
        let path = path.as_ref();
        if dim == 0 || dim > crate::MAX_DIM {
            return Err(IndexError::invalid(format!(
                "dim {dim} outside 1..={}",
                crate::MAX_DIM
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
        // Each one removes itself again if a later one cannot be created.
        let records = Spill::create(spill_path(path, "records")?)?;
        let vectors = Spill::create(spill_path(path, "vectors")?)?;
        let postings = Spill::create(spill_path(path, "postings")?)?;
        Ok(StreamWriter {
            path: path.to_path_buf(),
            dim,
            dtype,
            meta,
            ids: HashSet::new(),
            id_bytes: Vec::new(),
            id_offsets: vec![0],
            rec_offsets: vec![0],
            records,
            row_offsets: vec![0],
            row_meta: Vec::new(),
            vectors,
            quantized: Vec::new(),
            term_ids: HashMap::new(),
            term_names: Vec::new(),
            term_counts: Vec::new(),
            pending: Vec::new(),
            posting_buffer: DEFAULT_POSTING_BUFFER,
            postings,
            runs: Vec::new(),
            n_postings: 0,
            doc_lens: Vec::new(),
            failed: false,
            #[cfg(test)]
            fail_after: None,
        })
    }

    /// Sets the cap on postings buffered in memory, in bytes (at least one
    /// posting's worth); a smaller cap spills more, shorter runs.
    pub fn with_posting_buffer(mut self, bytes: usize) -> Self {
        self.posting_buffer = bytes.max(RUN_ENTRY_LEN);
        self
    }

    /// Bytes of postings buffered in memory right now (never above the cap,
    /// which is also the buffer's allocation).
    pub fn buffered_posting_bytes(&self) -> usize {
        self.pending.len() * RUN_ENTRY_LEN
    }

    /// Sorted runs of postings spilled to disk so far.
    pub fn spilled_runs(&self) -> usize {
        self.runs.len()
    }

    /// The temporary files this writer uses (they exist until it is dropped).
    pub fn temp_files(&self) -> [&Path; 3] {
        [&self.records.path, &self.vectors.path, &self.postings.path]
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

    /// Adds a document, with the checks of `IndexWriter::add`: a
    /// rejected document leaves the writer unchanged. A failed write to a
    /// temporary file (disk full) fails this and every later call.
    pub fn add(&mut self, doc: DocInput) -> Result<(), IndexError> {
        if self.failed {
            return Err(IndexError::invalid(
                "an earlier write to the index's temporary files failed",
            ));
        }
        check_doc(
            self.dim,
            self.doc_lens.len(),
            &self.ids,
            &doc.id,
            &doc.record,
            &doc.rows,
            &doc.lexical,
        )?;
        let result = self.append(doc);
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn append(&mut self, doc: DocInput) -> Result<(), IndexError> {
        let DocInput {
            id,
            record,
            rows,
            lexical,
        } = doc;
        let doc_idx = self.doc_lens.len() as u32;
        self.records.write(&record)?;
        self.rec_offsets.push(self.records.len);
        self.id_bytes.extend_from_slice(id.as_bytes());
        self.id_offsets.push(self.id_bytes.len() as u64);
        self.ids.insert(id);

        for row in rows {
            let scale = match self.dtype {
                VectorDtype::F32 => {
                    self.vectors.write(bytemuck::cast_slice(&row.vector))?;
                    1.0
                }
                VectorDtype::I8 => {
                    self.quantized.clear();
                    let scale = quantize_into(&row.vector, &mut self.quantized);
                    self.vectors.write(bytemuck::cast_slice(&self.quantized))?;
                    scale
                }
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
                let t = match self.term_ids.get(term.as_str()) {
                    Some(&t) => t,
                    None => {
                        let t = u32::try_from(self.term_names.len())
                            .map_err(|_| IndexError::invalid("more than 2^32 distinct terms"))?;
                        self.term_ids.insert(term.clone(), t);
                        self.term_names.push(term);
                        self.term_counts.push(0);
                        t
                    }
                };
                if let Some(count) = self.term_counts.get_mut(t as usize) {
                    *count += 1;
                }
                // Spilled before it would grow past the cap (a document's
                // postings may straddle two runs; the merge orders them).
                let cap = self.posting_buffer / RUN_ENTRY_LEN;
                if self.pending.len() >= cap {
                    self.spill_run()?;
                }
                if self.pending.capacity() == 0 {
                    self.pending.reserve_exact(cap);
                }
                self.pending.push(RunEntry {
                    term: t,
                    doc: doc_idx,
                    tf: f,
                });
                self.n_postings += 1;
            }
        }
        self.doc_lens.push(doc_len);
        Ok(())
    }

    /// Sorts the buffered postings by term (bytes), then document, and
    /// appends them to the postings file as one run.
    fn spill_run(&mut self) -> Result<(), IndexError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let names = &self.term_names;
        let name = |t: u32| names.get(t as usize).map_or(&[][..], |n| n.as_bytes());
        // In place (no merge buffer); (term, document) pairs are unique.
        self.pending
            .sort_unstable_by(|a, b| name(a.term).cmp(name(b.term)).then(a.doc.cmp(&b.doc)));
        let start = self.postings.len;
        self.postings.write(bytemuck::cast_slice(&self.pending))?;
        self.runs.push((start, self.pending.len() as u64));
        self.pending.clear();
        Ok(())
    }

    /// Assembles the index file from the spilled sections and writes it to
    /// the path given to [`StreamWriter::create`] atomically, as
    /// `IndexWriter::write_atomic` does (`<path>.tmp`, fsync,
    /// rename, directory fsync). The temporary files are removed whether it
    /// succeeds or not; on failure the old index is untouched.
    pub fn finish(mut self) -> Result<WriteStats, IndexError> {
        let started = Instant::now();
        if self.failed {
            return Err(IndexError::invalid(
                "an earlier write to the index's temporary files failed",
            ));
        }
        self.spill_run()?;
        self.records.flush()?;
        self.vectors.flush()?;
        self.postings.flush()?;

        let n_docs = self.doc_lens.len();
        let mut id_sorted: Vec<u32> = (0..n_docs as u32).collect();
        id_sorted.sort_by(|&a, &b| {
            id_of(&self.id_bytes, &self.id_offsets, a).cmp(id_of(
                &self.id_bytes,
                &self.id_offsets,
                b,
            ))
        });

        // The dictionary in byte order, and each term's place in it.
        let names = &self.term_names;
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_by(|&a, &b| {
            let name = |t: u32| names.get(t as usize).map_or(&[][..], |n| n.as_bytes());
            name(a).cmp(name(b))
        });
        let mut rank = vec![0u32; names.len()];
        let mut term_offsets: Vec<u64> = Vec::with_capacity(names.len() + 1);
        let mut term_bytes: Vec<u8> = Vec::new();
        let mut posting_offsets: Vec<u64> = Vec::with_capacity(names.len() + 1);
        term_offsets.push(0);
        posting_offsets.push(0);
        let mut postings_so_far = 0u64;
        for (r, &t) in order.iter().enumerate() {
            if let Some(slot) = rank.get_mut(t as usize) {
                *slot = r as u32;
            }
            term_bytes.extend_from_slice(names.get(t as usize).map_or(&[][..], |n| n.as_bytes()));
            term_offsets.push(term_bytes.len() as u64);
            postings_so_far += self.term_counts.get(t as usize).copied().unwrap_or(0);
            posting_offsets.push(postings_so_far);
        }
        let avgdl = if n_docs == 0 {
            0.0
        } else {
            self.doc_lens.iter().map(|&x| f64::from(x)).sum::<f64>() / n_docs as f64
        };

        let postings_len = self
            .n_postings
            .checked_mul(POSTING_LEN)
            .ok_or_else(|| IndexError::invalid("index too large to lay out"))?;
        let mut memory: [&[u8]; N_SECTIONS] = [&[]; N_SECTIONS];
        memory[Section::Meta.idx()] = &self.meta;
        memory[Section::IdOffsets.idx()] = bytemuck::cast_slice(&self.id_offsets);
        memory[Section::IdBytes.idx()] = &self.id_bytes;
        memory[Section::RecOffsets.idx()] = bytemuck::cast_slice(&self.rec_offsets);
        memory[Section::IdSorted.idx()] = bytemuck::cast_slice(&id_sorted);
        memory[Section::RowOffsets.idx()] = bytemuck::cast_slice(&self.row_offsets);
        memory[Section::RowMeta.idx()] = bytemuck::cast_slice(&self.row_meta);
        memory[Section::TermOffsets.idx()] = bytemuck::cast_slice(&term_offsets);
        memory[Section::TermBytes.idx()] = &term_bytes;
        memory[Section::PostingOffsets.idx()] = bytemuck::cast_slice(&posting_offsets);
        memory[Section::DocLens.idx()] = bytemuck::cast_slice(&self.doc_lens);
        let mut lens = memory.map(|s| s.len() as u64);
        lens[Section::RecBytes.idx()] = self.records.len;
        lens[Section::Vectors.idx()] = self.vectors.len;
        lens[Section::Postings.idx()] = postings_len;
        let (entries, file_len) =
            layout(&lens).ok_or_else(|| IndexError::invalid("index too large to lay out"))?;

        let sources = Sources {
            memory: &memory,
            records: self.records.out.get_ref(),
            vectors: self.vectors.out.get_ref(),
            postings: self.postings.out.get_ref(),
            runs: &self.runs,
            rank: &rank,
            n_postings: self.n_postings,
            #[cfg(test)]
            fail_after: self.fail_after,
        };
        let mut crcs = [0u32; N_SECTIONS];
        let header = |crcs: &[u32; N_SECTIONS]| {
            let mut sections = entries;
            for (e, crc) in sections.iter_mut().zip(crcs.iter()) {
                e.crc = *crc;
            }
            Header {
                dim: self.dim as u32,
                dtype: self.dtype,
                n_docs: n_docs as u64,
                n_rows: self.row_meta.len() as u64,
                n_terms: names.len() as u64,
                n_postings: self.n_postings,
                avgdl,
                file_len,
                sections,
            }
            .encode()
        };
        let path = self.path.clone();
        let written = oap_store::write_atomic_with(&path, TempName::Fixed, |file| {
            // The header goes last, once every section's crc is known.
            file.write_all(&[0u8; HEADER_LEN])?;
            let mut pos = HEADER_LEN as u64;
            {
                let mut w = BufWriter::with_capacity(1 << 20, &*file);
                for (i, e) in entries.iter().enumerate() {
                    write_zeros(&mut w, e.offset.checked_sub(pos))?;
                    crcs[i] = sources.write_section(i, e.len, &mut w)?;
                    pos = e.offset + e.len;
                }
                w.flush()?;
            }
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&header(&crcs))
        })
        .map_err(store_error)?;
        let dir_synced = written.dir_synced;
        if !dir_synced {
            tracing::warn!(path = %path.display(), "fsync of index directory failed; rename may not be durable");
        }
        let stats = WriteStats {
            path: path.clone(),
            bytes: file_len,
            docs: n_docs as u32,
            rows: self.row_meta.len() as u64,
            terms: names.len() as u64,
            postings: self.n_postings,
            dir_synced,
            elapsed: started.elapsed(),
        };
        tracing::info!(
            path = %path.display(),
            bytes = stats.bytes,
            docs = stats.docs,
            rows = stats.rows,
            terms = stats.terms,
            runs = self.runs.len(),
            elapsed_ms = stats.elapsed.as_millis() as u64,
            "index written from a stream"
        );
        Ok(stats)
    }
}

fn id_of<'a>(bytes: &'a [u8], offsets: &[u64], doc: u32) -> &'a [u8] {
    let d = doc as usize;
    match (offsets.get(d), offsets.get(d + 1)) {
        (Some(&s), Some(&e)) => bytes.get(s as usize..e as usize).unwrap_or(&[]),
        _ => &[],
    }
}

fn write_zeros(w: &mut impl Write, pad: Option<u64>) -> io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let zeros = pad
        .and_then(|pad| ZEROS.get(..pad as usize))
        .ok_or_else(|| io::Error::other("internal error: section gap >= 64 bytes"))?;
    w.write_all(zeros)
}

/// Where each section's bytes come from while the file is assembled.
struct Sources<'a> {
    memory: &'a [&'a [u8]; N_SECTIONS],
    records: &'a File,
    vectors: &'a File,
    postings: &'a File,
    runs: &'a [(u64, u64)],
    rank: &'a [u32],
    n_postings: u64,
    #[cfg(test)]
    fail_after: Option<Section>,
}

impl Sources<'_> {
    /// Writes section `i` (`len` bytes) and returns its crc32.
    fn write_section(&self, i: usize, len: u64, w: &mut impl Write) -> io::Result<u32> {
        let mut crc = crc32fast::Hasher::new();
        if i == Section::RecBytes.idx() {
            copy_spilled(self.records, len, w, &mut crc)?;
        } else if i == Section::Vectors.idx() {
            copy_spilled(self.vectors, len, w, &mut crc)?;
        } else if i == Section::Postings.idx() {
            self.merge_postings(w, &mut crc)?;
        } else {
            let bytes = self.memory.get(i).copied().unwrap_or(&[]);
            crc.update(bytes);
            w.write_all(bytes)?;
        }
        #[cfg(test)]
        if self.fail_after.is_some_and(|s| s.idx() == i) {
            return Err(io::Error::other("injected failure"));
        }
        Ok(crc.finalize())
    }

    /// Merges the sorted runs into the postings section: term order, then
    /// document order (a term's documents in one run precede those in the
    /// next, which were added later).
    fn merge_postings(&self, w: &mut impl Write, crc: &mut crc32fast::Hasher) -> io::Result<()> {
        let mut readers: Vec<RunReader> = self
            .runs
            .iter()
            .map(|&(start, entries)| RunReader::new(start, entries))
            .collect();
        let mut heap = BinaryHeap::with_capacity(readers.len());
        let rank_of = |t: u32| {
            self.rank
                .get(t as usize)
                .copied()
                .ok_or_else(|| io::Error::other("internal error: posting of an unknown term"))
        };
        for (run, reader) in readers.iter_mut().enumerate() {
            if let Some(e) = reader.next(self.postings)? {
                heap.push(Reverse((rank_of(e.term)?, e.doc, run, e.tf.to_bits())));
            }
        }
        let mut written = 0u64;
        while let Some(Reverse((_, doc, run, tf))) = heap.pop() {
            let posting = Posting {
                doc,
                tf: f32::from_bits(tf),
            };
            let bytes = bytemuck::bytes_of(&posting);
            crc.update(bytes);
            w.write_all(bytes)?;
            written += 1;
            if let Some(reader) = readers.get_mut(run) {
                if let Some(e) = reader.next(self.postings)? {
                    heap.push(Reverse((rank_of(e.term)?, e.doc, run, e.tf.to_bits())));
                }
            }
        }
        if written != self.n_postings {
            return Err(io::Error::other(format!(
                "internal error: merged {written} postings, expected {}",
                self.n_postings
            )));
        }
        Ok(())
    }
}

/// Copies `len` bytes from the start of a spilled file.
fn copy_spilled(
    file: &File,
    len: u64,
    w: &mut impl Write,
    crc: &mut crc32fast::Hasher,
) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let n = COPY_CHUNK.min((len - at) as usize);
        let chunk = buf
            .get_mut(..n)
            .ok_or_else(|| io::Error::other("internal error: copy buffer"))?;
        file.read_exact_at(chunk, at)?;
        crc.update(chunk);
        w.write_all(chunk)?;
        at += n as u64;
    }
    Ok(())
}

/// Reads one spilled run entry by entry through a small buffer.
struct RunReader {
    next: u64,
    end: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl RunReader {
    fn new(start: u64, entries: u64) -> Self {
        RunReader {
            next: start,
            end: start + entries * RUN_ENTRY_LEN as u64,
            buf: Vec::new(),
            pos: 0,
        }
    }

    fn next(&mut self, file: &File) -> io::Result<Option<RunEntry>> {
        if self.pos >= self.buf.len() {
            if self.next >= self.end {
                return Ok(None);
            }
            let want =
                (RUN_CHUNK / RUN_ENTRY_LEN * RUN_ENTRY_LEN).min((self.end - self.next) as usize);
            self.buf.resize(want, 0);
            file.read_exact_at(&mut self.buf, self.next)?;
            self.next += want as u64;
            self.pos = 0;
        }
        let bytes = self
            .buf
            .get(self.pos..self.pos + RUN_ENTRY_LEN)
            .ok_or_else(|| io::Error::other("internal error: torn run entry"))?;
        self.pos += RUN_ENTRY_LEN;
        Ok(Some(bytemuck::pod_read_unaligned(bytes)))
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests compare whole small files they wrote themselves"
)]
mod tests {
    use super::*;
    use crate::{Index, IndexWriter, RowInput};

    /// A small deterministic generator (no dependency for one test module).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn unit(&mut self) -> f32 {
            (self.below(2001) as f32 - 1000.0) / 1000.0
        }
    }

    const WORDS: &[&str] = &[
        "weather",
        "forecast",
        "paris",
        "convert",
        "currency",
        "euro",
        "dollar",
        "translate",
        "german",
        "flight",
        "berlin",
        "lisbon",
        "count",
        "word",
        "stock",
        "price",
        "email",
        "light",
        "room",
        "temperature",
        "zeta",
        "alpha",
        "ä",
        "straße",
        "日本",
    ];

    fn docs(seed: u64, n: usize, dim: usize) -> Vec<DocInput> {
        let mut rng = Lcg(seed);
        (0..n)
            .map(|i| {
                let rows = (0..rng.below(4))
                    .map(|r| RowInput {
                        key: [
                            (i % 251) as u8,
                            r as u8,
                            7,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            1,
                        ],
                        weight: [1.0, 0.5, 0.0][rng.below(3) as usize],
                        vector: (0..dim).map(|_| rng.unit()).collect(),
                    })
                    .collect();
                let lexical = (0..rng.below(40))
                    .map(|_| {
                        let word = WORDS[rng.below(WORDS.len() as u64) as usize];
                        let weight = [3.0, 1.0, 0.5, 0.25, 0.0][rng.below(5) as usize];
                        (word.to_string(), weight)
                    })
                    .collect();
                let record_len = rng.below(300) as usize;
                DocInput {
                    // Ids not in insertion order, so the id permutation is exercised.
                    id: format!("host{}/tool-{i}", rng.below(1000)),
                    record: (0..record_len).map(|b| (b * 31 + i) as u8).collect(),
                    rows,
                    lexical,
                }
            })
            .collect()
    }

    fn write_both(
        dir: &Path,
        docs: &[DocInput],
        dim: usize,
        dtype: VectorDtype,
        buffer: usize,
    ) -> (Vec<u8>, Vec<u8>, usize) {
        let meta = br#"{"model":"test"}"#.to_vec();
        let whole_path = dir.join("whole.oapx");
        let mut whole = IndexWriter::new(dim, dtype, meta.clone()).unwrap();
        for d in docs {
            whole.add(d.clone()).unwrap();
        }
        whole.write_atomic(&whole_path).unwrap();

        let stream_path = dir.join("stream.oapx");
        let mut stream = StreamWriter::create(&stream_path, dim, dtype, meta)
            .unwrap()
            .with_posting_buffer(buffer);
        for d in docs {
            stream.add(d.clone()).unwrap();
            assert!(stream.buffered_posting_bytes() <= buffer.max(RUN_ENTRY_LEN));
        }
        let runs = stream.spilled_runs();
        let stats = stream.finish().unwrap();
        assert_eq!(stats.docs as usize, docs.len());
        (
            std::fs::read(&whole_path).unwrap(),
            std::fs::read(&stream_path).unwrap(),
            runs,
        )
    }

    fn dir_listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn stream_writes_the_same_bytes_as_the_whole_writer() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..24u64 {
            let n = [0usize, 1, 2, 17, 150][seed as usize % 5];
            let dim = [1usize, 3, 8][seed as usize % 3];
            let dtype = if seed % 2 == 0 {
                VectorDtype::F32
            } else {
                VectorDtype::I8
            };
            // From one posting per run (every document spills) to one run.
            let buffer = [RUN_ENTRY_LEN, 100, 4096, DEFAULT_POSTING_BUFFER][seed as usize % 4];
            let docs = docs(seed, n, dim);
            let (whole, stream, runs) = write_both(dir.path(), &docs, dim, dtype, buffer);
            assert_eq!(
                whole, stream,
                "seed {seed}: {n} docs, dim {dim}, {dtype:?}, buffer {buffer}"
            );
            if n == 150 && buffer == 100 {
                assert!(
                    runs > 10,
                    "seed {seed}: a small buffer spills many runs, got {runs}"
                );
            }
            Index::open(dir.path().join("stream.oapx")).unwrap();
            assert_eq!(dir_listing(dir.path()), ["stream.oapx", "whole.oapx"]);
        }
    }

    #[test]
    fn a_document_rejected_midway_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let docs = docs(7, 30, 4);
        let path = dir.path().join("midway.oapx");
        let meta = br#"{"model":"test"}"#.to_vec();
        let mut w = StreamWriter::create(&path, 4, VectorDtype::F32, meta).unwrap();
        for d in &docs[..15] {
            w.add(d.clone()).unwrap();
        }
        let mut bad = docs[15].clone();
        bad.rows.push(RowInput {
            key: [0; 16],
            weight: 1.0,
            vector: vec![f32::NAN; 4],
        });
        assert!(w.add(bad).is_err());
        let dup = docs[0].clone();
        assert!(matches!(w.add(dup), Err(IndexError::DuplicateId { .. })));
        for d in &docs[15..] {
            w.add(d.clone()).unwrap();
        }
        w.finish().unwrap();
        let (whole, stream, _) = write_both(dir.path(), &docs, 4, VectorDtype::F32, 64);
        assert!(whole == stream);
        assert!(
            std::fs::read(&path).unwrap() == whole,
            "the rejected documents left a trace"
        );
    }

    #[test]
    fn a_failure_while_assembling_keeps_the_old_index_and_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.oapx");
        let old_docs = docs(1, 20, 4);
        let mut old = IndexWriter::new(4, VectorDtype::F32, b"{}".to_vec()).unwrap();
        for d in &old_docs {
            old.add(d.clone()).unwrap();
        }
        old.write_atomic(&path).unwrap();
        let before = std::fs::read(&path).unwrap();

        for section in [
            Section::Meta,
            Section::RecBytes,
            Section::Vectors,
            Section::Postings,
            Section::DocLens,
        ] {
            let mut w = StreamWriter::create(&path, 4, VectorDtype::F32, b"{}".to_vec())
                .unwrap()
                .with_posting_buffer(64);
            for d in docs(2, 40, 4) {
                w.add(d).unwrap();
            }
            assert!(w.spilled_runs() > 1);
            for temp in w.temp_files() {
                assert!(temp.exists(), "{} exists while writing", temp.display());
            }
            w.fail_after = Some(section);
            let err = w.finish().unwrap_err();
            assert!(err.to_string().contains("injected failure"), "{err}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                before,
                "after a failure in {}",
                section.name()
            );
            assert_eq!(
                dir_listing(dir.path()),
                ["index.oapx"],
                "after a failure in {}",
                section.name()
            );
            assert_eq!(Index::open(&path).unwrap().len(), old_docs.len());
        }
    }

    #[test]
    fn a_writer_given_up_half_way_removes_its_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.oapx");
        // Left-overs of a crashed writer are taken over and removed too.
        std::fs::write(dir.path().join("index.oapx.tmp.postings"), b"stale").unwrap();
        let mut w = StreamWriter::create(&path, 2, VectorDtype::I8, b"{}".to_vec()).unwrap();
        for d in docs(3, 10, 2) {
            w.add(d).unwrap();
        }
        drop(w);
        assert!(dir_listing(dir.path()).is_empty());
    }

    #[test]
    fn bad_settings_are_refused_before_any_file_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.oapx");
        assert!(StreamWriter::create(&path, 0, VectorDtype::F32, b"{}".to_vec()).is_err());
        assert!(StreamWriter::create(&path, 4, VectorDtype::F32, b"not json".to_vec()).is_err());
        let missing = dir.path().join("missing/index.oapx");
        match StreamWriter::create(&missing, 4, VectorDtype::F32, b"{}".to_vec()) {
            Err(IndexError::Io { op: "creating", .. }) => {}
            other => panic!("expected a creating error, got {other:?}"),
        }
        assert!(dir_listing(dir.path()).is_empty());
    }
}
