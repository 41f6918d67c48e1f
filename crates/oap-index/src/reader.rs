//! Opening, validating and reading a mapped index file.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapOptions};

use crate::format::{
    layout, Header, Posting, RowMeta, Section, HEADER_LEN, MAX_META_LEN, N_SECTIONS, POSTING_LEN,
    ROW_META_LEN,
};
use crate::{IndexError, VectorDtype};

/// Row count above which [`Index::dense_search`] splits the scan across threads by
/// default. Below it, thread spawn/join (~tens of µs) costs more than it saves.
pub const PARALLEL_MIN_ROWS: usize = 32_768;

/// Dense-search tuning knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchConfig {
    /// Threads for a parallel scan (>= 1). Default: `available_parallelism`.
    pub threads: usize,
    /// Scans of at least this many rows use `threads` threads.
    pub parallel_min_rows: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            parallel_min_rows: PARALLEL_MIN_ROWS,
        }
    }
}

/// A read-only, validated, memory-mapped index. `Send + Sync`: share it in an `Arc`
/// and swap the `Arc` when a new file is written; queries never take a lock.
pub struct Index {
    map: Mmap,
    path: PathBuf,
    pub(crate) dim: usize,
    dtype: VectorDtype,
    pub(crate) n_docs: u32,
    pub(crate) n_rows: usize,
    pub(crate) n_terms: usize,
    pub(crate) avgdl: f64,
    /// (start, end) byte range of each section inside `map`, validated at open.
    ranges: [(usize, usize); N_SECTIONS],
    pub(crate) cfg: SearchConfig,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("path", &self.path)
            .field("docs", &self.n_docs)
            .field("rows", &self.n_rows)
            .field("dim", &self.dim)
            .field("dtype", &self.dtype)
            .field("terms", &self.n_terms)
            .field("file_len", &self.map.len())
            .finish()
    }
}

/// One embedding row of a document, dequantised to f32.
#[derive(Clone, Debug, PartialEq)]
pub struct RowRef {
    /// Caller key stored with the row.
    pub key: [u8; 16],
    /// Row weight.
    pub weight: f32,
    /// The vector (exact for f32 indexes; `code * scale` for i8).
    pub vector: Vec<f32>,
}

/// Iterator over a document's rows, see [`Index::rows_of`].
#[derive(Debug)]
pub struct Rows<'a> {
    index: &'a Index,
    next: usize,
    end: usize,
}

impl Iterator for Rows<'_> {
    type Item = RowRef;

    fn next(&mut self) -> Option<RowRef> {
        if self.next >= self.end {
            return None;
        }
        let r = self.next;
        self.next += 1;
        self.index.row_at(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end.saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Rows<'_> {}

/// Bytes between two touches when faulting pages in: the smallest page size
/// of the platforms we build for.
const PAGE_STRIDE: usize = 4096;

/// crc32 of `len` bytes of `file` from `start`, read with positional reads
/// into a small buffer: through the page cache, never into the daemon's
/// mapped memory.
fn crc_of_range(file: &File, start: usize, len: usize) -> io::Result<u32> {
    use std::os::unix::fs::FileExt;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; len.min(CRC_BUFFER)];
    let (mut at, end) = (start as u64, (start + len) as u64);
    while at < end {
        let want = usize::try_from(end - at).map_or(buf.len(), |left| left.min(buf.len()));
        let chunk = &mut buf[..want];
        file.read_exact_at(chunk, at)?;
        hasher.update(chunk);
        at += want as u64;
    }
    Ok(hasher.finalize())
}

/// Read size for [`crc_of_range`].
const CRC_BUFFER: usize = 256 * 1024;

/// Makes a `Corrupt` error for `path`.
fn corrupt(path: &Path, reason: impl Into<String>) -> IndexError {
    IndexError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks a prefix-offset array: starts at 0, never decreases, ends at `total`.
fn check_prefix(name: &str, offs: &[u64], total: u64) -> Result<(), String> {
    if offs.first() != Some(&0) {
        return Err(format!("{name}: first offset is not 0"));
    }
    if let Some(i) = offs.windows(2).position(|w| w[0] > w[1]) {
        return Err(format!("{name}: offset {} decreases", i + 1));
    }
    if offs.last() != Some(&total) {
        return Err(format!(
            "{name}: last offset {:?} does not match length {total}",
            offs.last()
        ));
    }
    Ok(())
}

/// Slices item `i` out of a prefix-offset-addressed blob (None if out of range).
pub(crate) fn blob_item<'a>(offs: &[u64], bytes: &'a [u8], i: usize) -> Option<&'a [u8]> {
    let s = usize::try_from(*offs.get(i)?).ok()?;
    let e = usize::try_from(*offs.get(i.checked_add(1)?)?).ok()?;
    bytes.get(s..e)
}

fn cast<'a, T: bytemuck::AnyBitPattern>(name: &str, b: &'a [u8]) -> Result<&'a [T], String> {
    bytemuck::try_cast_slice(b).map_err(|e| format!("{name}: cannot view as typed slice: {e:?}"))
}

impl Index {
    /// Maps and fully validates the index at `path`.
    ///
    /// Errors: [`IndexError::NotFound`] if the file does not exist,
    /// [`IndexError::Corrupt`] naming the failed check for anything structurally
    /// wrong (bad magic/version, crc mismatch, truncated, inconsistent counts or
    /// offsets, unsorted dictionary...), [`IndexError::Io`] otherwise. Validation reads
    /// every byte once (crc32 runs at several GB/s), so open is O(file size).
    pub fn open(path: impl AsRef<Path>) -> Result<Index, IndexError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                IndexError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                IndexError::io("opening", path, e)
            }
        })?;
        let len = file
            .metadata()
            .map_err(|e| IndexError::io("stat-ing", path, e))?
            .len();
        if len < HEADER_LEN as u64 {
            return Err(corrupt(
                path,
                format!("file is {len} bytes, shorter than the {HEADER_LEN}-byte header"),
            ));
        }
        if usize::try_from(len).is_err() {
            return Err(corrupt(
                path,
                format!("file is {len} bytes, larger than the address space"),
            ));
        }
        // SAFETY: memmap2 requires that the file is not modified or truncated while
        // mapped, or reads become UB/SIGBUS. This crate never modifies an index file in
        // place: writers create `<path>.tmp` and rename it over `<path>`, which leaves
        // the inode we map untouched (it lives until unmapped). Other processes must
        // follow the same rule; the index directory is owned by the daemon.
        //
        // Not populated: the checksums are read from the file, not through the
        // map, so opening a new index while the old one still serves adds only
        // the small sections the content checks walk to the daemon's resident
        // memory, not the whole file (a rebuild at 10,000 manifests held both
        // files resident at once). Queries fault in what they read; the
        // engine touches the vectors once the old index is gone
        // ([`Index::prefault_vectors`]).
        #[allow(unsafe_code)]
        let map = unsafe { MmapOptions::new().map(&file) }
            .map_err(|e| IndexError::io("mapping", path, e))?;
        let index = Self::from_map(map, &file, path).map_err(|reason| corrupt(path, reason))?;
        drop(file);
        tracing::debug!(
            path = %path.display(),
            docs = index.n_docs,
            rows = index.n_rows,
            bytes = len,
            "index opened"
        );
        Ok(index)
    }

    /// Validates `map` (whose checksums are read from `file`, the file it
    /// maps) and builds the index; errors are reasons for `Corrupt`.
    fn from_map(map: Mmap, file: &File, path: &Path) -> Result<Index, String> {
        let h = Header::decode(&map)?;
        let file_len = map.len() as u64;
        if h.file_len != file_len {
            return Err(format!(
                "header says file is {} bytes but it is {file_len} (truncated or extended)",
                h.file_len
            ));
        }
        if h.n_docs >= u64::from(u32::MAX) {
            return Err(format!("document count {} exceeds 2^32 - 2", h.n_docs));
        }
        // Expected lengths of the fixed-size sections, from the counts. Checked math:
        // a hostile header must not overflow us into accepting a small section.
        let too_big = |what: &str| format!("{what} size overflows (absurd counts in header)");
        let docs1 = h.n_docs + 1;
        let dim = u64::from(h.dim);
        let elem = h.dtype.size() as u64;
        let mul = |a: u64, b: u64, what: &str| a.checked_mul(b).ok_or_else(|| too_big(what));
        let mut expect: [Option<u64>; N_SECTIONS] = [None; N_SECTIONS];
        expect[Section::IdOffsets.idx()] = Some(mul(docs1, 8, "id_offsets")?);
        expect[Section::RecOffsets.idx()] = Some(mul(docs1, 8, "record_offsets")?);
        expect[Section::IdSorted.idx()] = Some(mul(h.n_docs, 4, "id_sorted")?);
        expect[Section::RowOffsets.idx()] = Some(mul(docs1, 8, "row_offsets")?);
        expect[Section::RowMeta.idx()] = Some(mul(h.n_rows, ROW_META_LEN, "row_meta")?);
        expect[Section::Vectors.idx()] =
            Some(mul(mul(h.n_rows, dim, "vectors")?, elem, "vectors")?);
        let terms1 = h
            .n_terms
            .checked_add(1)
            .ok_or_else(|| too_big("term_offsets"))?;
        expect[Section::TermOffsets.idx()] = Some(mul(terms1, 8, "term_offsets")?);
        expect[Section::PostingOffsets.idx()] = Some(mul(terms1, 8, "posting_offsets")?);
        expect[Section::Postings.idx()] = Some(mul(h.n_postings, POSTING_LEN, "postings")?);
        expect[Section::DocLens.idx()] = Some(mul(h.n_docs, 4, "doc_lens")?);

        let mut lens = [0u64; N_SECTIONS];
        for s in Section::ALL {
            let entry = h.sections[s.idx()];
            if entry.len > file_len {
                return Err(format!(
                    "section {} length {} exceeds file length {file_len}",
                    s.name(),
                    entry.len
                ));
            }
            if let Some(want) = expect[s.idx()] {
                if entry.len != want {
                    return Err(format!(
                        "section {} is {} bytes, counts in header require {want}",
                        s.name(),
                        entry.len
                    ));
                }
            }
            lens[s.idx()] = entry.len;
        }
        if lens[Section::Meta.idx()] > MAX_META_LEN as u64 {
            return Err(format!(
                "meta is {} bytes (cap {MAX_META_LEN})",
                lens[Section::Meta.idx()]
            ));
        }
        let (canon, canon_len) =
            layout(&lens).ok_or_else(|| "section layout overflows".to_string())?;
        let mut ranges = [(0usize, 0usize); N_SECTIONS];
        let mut prev_end = HEADER_LEN;
        for s in Section::ALL {
            let entry = h.sections[s.idx()];
            let want = canon[s.idx()];
            if entry.offset != want.offset {
                return Err(format!(
                    "section {} at offset {}, expected {}",
                    s.name(),
                    entry.offset,
                    want.offset
                ));
            }
            let start = usize::try_from(entry.offset).map_err(|_| too_big(s.name()))?;
            let end = start
                .checked_add(usize::try_from(entry.len).map_err(|_| too_big(s.name()))?)
                .ok_or_else(|| too_big(s.name()))?;
            let bytes = map.get(start..end).ok_or_else(|| {
                format!(
                    "section {} [{start}, {end}) lies outside the {file_len}-byte file",
                    s.name()
                )
            })?;
            let gap = map
                .get(prev_end..start)
                .ok_or_else(|| format!("section {} overlaps the previous one", s.name()))?;
            if gap.iter().any(|&b| b != 0) {
                return Err(format!("non-zero padding before section {}", s.name()));
            }
            let crc = crc_of_range(file, start, bytes.len())
                .map_err(|e| format!("cannot read section {}: {e}", s.name()))?;
            if crc != entry.crc {
                return Err(format!(
                    "section {} crc mismatch (stored {:#010x}, computed {crc:#010x})",
                    s.name(),
                    entry.crc
                ));
            }
            ranges[s.idx()] = (start, end);
            prev_end = end;
        }
        if canon_len != file_len {
            return Err(format!(
                "sections end at {canon_len} but the file is {file_len} bytes"
            ));
        }

        let index = Index {
            path: path.to_path_buf(),
            dim: h.dim as usize,
            dtype: h.dtype,
            n_docs: h.n_docs as u32,
            n_rows: usize::try_from(h.n_rows).map_err(|_| too_big("rows"))?,
            n_terms: usize::try_from(h.n_terms).map_err(|_| too_big("terms"))?,
            avgdl: h.avgdl,
            ranges,
            cfg: SearchConfig::default(),
            map,
        };
        index.validate_contents(&h)?;
        Ok(index)
    }

    /// Touches every page of the vectors, which every dense query scans, so
    /// that the first queries on a newly opened index do not take the page
    /// faults. Called once the index it replaces is unmapped, so the two are
    /// never resident together.
    pub fn prefault_vectors(&self) {
        let vectors = self.sec(Section::Vectors);
        let touched = vectors
            .iter()
            .step_by(PAGE_STRIDE)
            .fold(0u8, |acc, b| acc ^ b);
        std::hint::black_box(touched);
    }

    /// Content invariants that queries rely on (so they can never index out of range
    /// or binary-search an unsorted array).
    fn validate_contents(&self, h: &Header) -> Result<(), String> {
        let n_docs = self.n_docs as usize;
        serde_json::from_slice::<serde::de::IgnoredAny>(self.sec(Section::Meta))
            .map_err(|e| format!("meta is not valid JSON: {e}"))?;

        // Ids: offsets, UTF-8, and the sorted permutation (strictly ascending ids under
        // the permutation, all entries < n_docs => it is a permutation and ids are unique).
        let id_offs: &[u64] = cast("id_offsets", self.sec(Section::IdOffsets))?;
        let id_bytes = self.sec(Section::IdBytes);
        check_prefix("id_offsets", id_offs, id_bytes.len() as u64)?;
        for i in 0..n_docs {
            let b = blob_item(id_offs, id_bytes, i).ok_or("id_offsets: bad range")?;
            std::str::from_utf8(b).map_err(|_| format!("id of document {i} is not UTF-8"))?;
        }
        let sorted: &[u32] = cast("id_sorted", self.sec(Section::IdSorted))?;
        let mut prev: Option<&[u8]> = None;
        for (i, &d) in sorted.iter().enumerate() {
            let b = blob_item(id_offs, id_bytes, d as usize)
                .ok_or_else(|| format!("id_sorted[{i}] = {d} is out of range"))?;
            if prev.is_some_and(|p| p >= b) {
                return Err(format!("id_sorted is not strictly ascending at {i}"));
            }
            prev = Some(b);
        }

        let rec_offs: &[u64] = cast("record_offsets", self.sec(Section::RecOffsets))?;
        check_prefix(
            "record_offsets",
            rec_offs,
            self.sec(Section::RecBytes).len() as u64,
        )?;

        let row_offs: &[u64] = cast("row_offsets", self.sec(Section::RowOffsets))?;
        check_prefix("row_offsets", row_offs, h.n_rows)?;
        let metas: &[RowMeta] = cast("row_meta", self.sec(Section::RowMeta))?;
        if let Some(r) = metas
            .iter()
            .position(|m| !m.weight.is_finite() || !m.scale.is_finite() || m.scale < 0.0)
        {
            return Err(format!(
                "row_meta[{r}] has a non-finite weight or invalid scale"
            ));
        }
        // Vectors: the length was checked against n_rows * dim; cast to prove alignment.
        match self.dtype {
            VectorDtype::F32 => {
                cast::<f32>("vectors", self.sec(Section::Vectors))?;
            }
            VectorDtype::I8 => {
                cast::<i8>("vectors", self.sec(Section::Vectors))?;
            }
        }

        // Lexical dictionary: strictly ascending non-empty UTF-8 terms.
        let term_offs: &[u64] = cast("term_offsets", self.sec(Section::TermOffsets))?;
        let term_bytes = self.sec(Section::TermBytes);
        check_prefix("term_offsets", term_offs, term_bytes.len() as u64)?;
        let mut prev: Option<&[u8]> = None;
        for t in 0..self.n_terms {
            let b = blob_item(term_offs, term_bytes, t).ok_or("term_offsets: bad range")?;
            if b.is_empty() {
                return Err(format!("term {t} is empty"));
            }
            std::str::from_utf8(b).map_err(|_| format!("term {t} is not UTF-8"))?;
            if prev.is_some_and(|p| p >= b) {
                return Err(format!("term dictionary is not strictly ascending at {t}"));
            }
            prev = Some(b);
        }
        let post_offs: &[u64] = cast("posting_offsets", self.sec(Section::PostingOffsets))?;
        check_prefix("posting_offsets", post_offs, h.n_postings)?;
        let postings: &[Posting] = cast("postings", self.sec(Section::Postings))?;
        for t in 0..self.n_terms {
            let list = self
                .postings_of(t)
                .ok_or_else(|| format!("posting list of term {t} out of range"))?;
            let mut prev_doc: Option<u32> = None;
            for p in list {
                if p.doc >= self.n_docs {
                    return Err(format!(
                        "posting of term {t} names document {} >= {}",
                        p.doc, self.n_docs
                    ));
                }
                if prev_doc.is_some_and(|d| d >= p.doc) {
                    return Err(format!(
                        "posting list of term {t} is not sorted by document"
                    ));
                }
                if !p.tf.is_finite() || p.tf < 0.0 {
                    return Err(format!("posting of term {t} has invalid tf {}", p.tf));
                }
                prev_doc = Some(p.doc);
            }
        }
        debug_assert_eq!(postings.len() as u64, h.n_postings);
        let lens: &[f32] = cast("doc_lens", self.sec(Section::DocLens))?;
        if let Some(d) = lens.iter().position(|l| !l.is_finite() || *l < 0.0) {
            return Err(format!("doc_lens[{d}] is not a finite non-negative number"));
        }
        Ok(())
    }

    // ---- raw section access (all infallible after validation; empty on misuse) ----

    pub(crate) fn sec(&self, s: Section) -> &[u8] {
        let (a, b) = self.ranges[s.idx()];
        self.map.get(a..b).unwrap_or(&[])
    }

    pub(crate) fn typed<T: bytemuck::AnyBitPattern>(&self, s: Section) -> &[T] {
        bytemuck::try_cast_slice(self.sec(s)).unwrap_or(&[])
    }

    pub(crate) fn row_offsets(&self) -> &[u64] {
        self.typed(Section::RowOffsets)
    }

    pub(crate) fn row_metas(&self) -> &[RowMeta] {
        self.typed(Section::RowMeta)
    }

    pub(crate) fn doc_lens(&self) -> &[f32] {
        self.typed(Section::DocLens)
    }

    pub(crate) fn term_at(&self, t: usize) -> Option<&[u8]> {
        blob_item(
            self.typed(Section::TermOffsets),
            self.sec(Section::TermBytes),
            t,
        )
    }

    pub(crate) fn postings_of(&self, t: usize) -> Option<&[Posting]> {
        let offs: &[u64] = self.typed(Section::PostingOffsets);
        let s = usize::try_from(*offs.get(t)?).ok()?;
        let e = usize::try_from(*offs.get(t.checked_add(1)?)?).ok()?;
        self.typed::<Posting>(Section::Postings).get(s..e)
    }

    /// Row range of document `doc` (empty if out of range).
    pub(crate) fn row_range(&self, doc: usize) -> (usize, usize) {
        let offs = self.row_offsets();
        match (offs.get(doc), doc.checked_add(1).and_then(|d| offs.get(d))) {
            (Some(&s), Some(&e)) => (s as usize, e as usize),
            _ => (0, 0),
        }
    }

    /// Keys of all rows in row order; position `r` is the row
    /// [`Index::row_at`] returns. Reads no vectors (a rebuild looks up which
    /// vectors it can reuse without copying them all out first).
    pub fn row_keys(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.row_metas().iter().map(|m| m.key)
    }

    /// Row `r` of the whole index (not of one document), dequantised.
    pub fn row_at(&self, r: usize) -> Option<RowRef> {
        let m = self.row_metas().get(r)?;
        let start = r.checked_mul(self.dim)?;
        let end = start.checked_add(self.dim)?;
        let vector = match self.dtype {
            VectorDtype::F32 => self
                .typed::<f32>(Section::Vectors)
                .get(start..end)?
                .to_vec(),
            VectorDtype::I8 => self
                .typed::<i8>(Section::Vectors)
                .get(start..end)?
                .iter()
                .map(|&q| f32::from(q) * m.scale)
                .collect(),
        };
        Some(RowRef {
            key: m.key,
            weight: m.weight,
            vector,
        })
    }

    // ---- public accessors ----

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.n_docs as usize
    }

    /// True if the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    /// Number of embedding rows (all documents).
    pub fn rows(&self) -> usize {
        self.n_rows
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Matrix storage type.
    pub fn dtype(&self) -> VectorDtype {
        self.dtype
    }

    /// Number of distinct lexical terms.
    pub fn terms(&self) -> usize {
        self.n_terms
    }

    /// BM25 average (weighted) document length.
    pub fn avgdl(&self) -> f64 {
        self.avgdl
    }

    /// The caller's JSON meta blob, verbatim (validated as JSON at open).
    pub fn meta(&self) -> &[u8] {
        self.sec(Section::Meta)
    }

    /// The meta blob parsed as JSON.
    pub fn meta_json(&self) -> Result<serde_json::Value, IndexError> {
        serde_json::from_slice(self.meta()).map_err(|e| corrupt(&self.path, format!("meta: {e}")))
    }

    /// Id of document `doc`; `None` if `doc >= len()`.
    pub fn doc_id(&self, doc: u32) -> Option<&str> {
        let b = blob_item(
            self.typed(Section::IdOffsets),
            self.sec(Section::IdBytes),
            doc as usize,
        )?;
        std::str::from_utf8(b).ok()
    }

    /// Opaque record of document `doc`; `None` if `doc >= len()`.
    pub fn record(&self, doc: u32) -> Option<&[u8]> {
        blob_item(
            self.typed(Section::RecOffsets),
            self.sec(Section::RecBytes),
            doc as usize,
        )
    }

    /// Document index for `id`, by binary search over the stored id-sorted
    /// permutation (O(log n), no allocation).
    pub fn find(&self, id: &str) -> Option<u32> {
        let sorted: &[u32] = self.typed(Section::IdSorted);
        let offs: &[u64] = self.typed(Section::IdOffsets);
        let bytes = self.sec(Section::IdBytes);
        let target = id.as_bytes();
        let (mut lo, mut hi) = (0usize, sorted.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let d = *sorted.get(mid)?;
            let b = blob_item(offs, bytes, d as usize)?;
            match b.cmp(target) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(d),
            }
        }
        None
    }

    /// The embedding rows of `doc` (dequantised), in insertion order; empty if the
    /// document has none or `doc >= len()`. Use the keys to reuse vectors on rebuild.
    pub fn rows_of(&self, doc: u32) -> Rows<'_> {
        let (next, end) = self.row_range(doc as usize);
        Rows {
            index: self,
            next,
            end,
        }
    }

    /// Size of the mapped file in bytes.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Path the index was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Current dense-search configuration.
    pub fn search_config(&self) -> SearchConfig {
        self.cfg
    }

    /// Overrides the dense-search configuration (`threads` is clamped to >= 1).
    pub fn set_search_config(&mut self, cfg: SearchConfig) {
        self.cfg = SearchConfig {
            threads: cfg.threads.max(1),
            parallel_min_rows: cfg.parallel_min_rows,
        };
    }
}
