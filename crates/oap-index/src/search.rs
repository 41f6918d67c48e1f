//! Dense (simsimd) and lexical (BM25) scoring over a validated [`Index`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::ops::Range;

use simsimd::SpatialSimilarity;

use crate::format::{Posting, RowMeta, Section};
use crate::writer::quantize_into;
use crate::{Hit, Index, IndexError, VectorDtype};

/// BM25 term-frequency saturation.
pub const BM25_K1: f32 = 1.2;
/// BM25 length normalisation.
pub const BM25_B: f32 = 0.75;

/// Total order on hits: higher score first, then lower doc index (determinism).
fn better(a: &Hit, b: &Hit) -> Ordering {
    a.score.total_cmp(&b.score).then_with(|| b.doc.cmp(&a.doc))
}

/// Heap entry ordered so that the *worst* hit is the max (top) of a `BinaryHeap`.
#[derive(Clone, Copy, Debug)]
struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        better(&other.0, &self.0)
    }
}

/// Bounded top-k (min-heap on quality): O(n log k), never sorts all candidates.
/// Because `better` is a strict total order, the kept set is unique, so per-thread
/// heaps merged in any order give the same result as one sequential scan.
#[derive(Debug)]
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, doc: u32, score: f32) {
        if self.k == 0 || score.is_nan() {
            return;
        }
        let hit = Hit { doc, score };
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(mut top) = self.heap.peek_mut() {
            if better(&hit, &top.0) == Ordering::Greater {
                *top = Worst(hit);
            }
        }
    }

    pub(crate) fn merge(&mut self, other: TopK) {
        for w in other.heap {
            self.push(w.0.doc, w.0.score);
        }
    }

    pub(crate) fn into_sorted(self) -> Vec<Hit> {
        let mut v: Vec<Hit> = self.heap.into_iter().map(|w| w.0).collect();
        v.sort_by(|a, b| better(b, a));
        v
    }
}

#[derive(Clone, Copy)]
enum Mat<'a> {
    F32(&'a [f32]),
    I8(&'a [i8]),
}

/// Everything a scan needs, borrowed from the map; `Copy + Sync` so scoped threads
/// can share it.
#[derive(Clone, Copy)]
struct DenseView<'a> {
    dim: usize,
    row_offsets: &'a [u64],
    metas: &'a [RowMeta],
    mat: Mat<'a>,
    q_f32: &'a [f32],
    q_i8: &'a [i8],
    q_scale: f64,
}

impl DenseView<'_> {
    /// `weight * cosine(query, row r)`; `None` only if `r` is out of range.
    #[inline]
    fn row_score(&self, r: usize) -> Option<f32> {
        let m = self.metas.get(r)?;
        let start = r.checked_mul(self.dim)?;
        let end = start.checked_add(self.dim)?;
        let cos = match self.mat {
            Mat::F32(mat) => f32::dot(self.q_f32, mat.get(start..end)?)?,
            Mat::I8(mat) => {
                i8::dot(self.q_i8, mat.get(start..end)?)? * self.q_scale * f64::from(m.scale)
            }
        };
        Some(cos as f32 * m.weight)
    }

    /// Max over the document's rows; `None` for a document without rows.
    #[inline]
    fn doc_score(&self, d: usize) -> Option<f32> {
        let s = *self.row_offsets.get(d)? as usize;
        let e = *self.row_offsets.get(d.checked_add(1)?)? as usize;
        let mut best: Option<f32> = None;
        for r in s..e {
            if let Some(x) = self.row_score(r) {
                if !x.is_nan() && best.is_none_or(|b| x > b) {
                    best = Some(x);
                }
            }
        }
        best
    }

    fn scan(&self, docs: Range<usize>, k: usize) -> TopK {
        let mut top = TopK::new(k);
        for d in docs {
            if let Some(score) = self.doc_score(d) {
                top.push(d as u32, score);
            }
        }
        top
    }
}

impl Index {
    /// Checks the query and returns its i8 quantisation (empty for f32 indexes).
    fn prepare_query(&self, query: &[f32]) -> Result<(Vec<i8>, f64), IndexError> {
        if query.len() != self.dim {
            return Err(IndexError::DimMismatch {
                expected: self.dim,
                got: query.len(),
            });
        }
        if let Some(j) = query.iter().position(|x| !x.is_finite()) {
            return Err(IndexError::invalid(format!(
                "query component {j} is not finite"
            )));
        }
        Ok(match self.dtype() {
            VectorDtype::F32 => (Vec::new(), 1.0),
            VectorDtype::I8 => {
                let mut q = Vec::with_capacity(self.dim);
                let scale = quantize_into(query, &mut q);
                (q, f64::from(scale))
            }
        })
    }

    fn view<'a>(&'a self, query: &'a [f32], q_i8: &'a [i8], q_scale: f64) -> DenseView<'a> {
        DenseView {
            dim: self.dim,
            row_offsets: self.row_offsets(),
            metas: self.row_metas(),
            mat: match self.dtype() {
                VectorDtype::F32 => Mat::F32(self.typed(Section::Vectors)),
                VectorDtype::I8 => Mat::I8(self.typed(Section::Vectors)),
            },
            q_f32: query,
            q_i8,
            q_scale,
        }
    }

    /// Top-`k` documents by `max over rows of weight * cosine(query, row)`.
    ///
    /// `query` must be L2-normalised (as are the stored rows) so the dot product is the
    /// cosine. f32 indexes use simsimd's f32 dot; i8 indexes quantise the query the
    /// same way as rows and use simsimd's i8 dot times both scales. Documents without
    /// rows never appear. Scans of at least [`crate::SearchConfig::parallel_min_rows`]
    /// rows are split across [`crate::SearchConfig::threads`] scoped threads.
    /// Sorted by score desc, then doc asc.
    ///
    /// Errors: [`IndexError::DimMismatch`], or `InvalidInput` for a non-finite query.
    pub fn dense_search(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        let (q_i8, q_scale) = self.prepare_query(query)?;
        let k = k.min(self.len());
        if k == 0 || self.n_rows == 0 {
            return Ok(Vec::new());
        }
        let view = self.view(query, &q_i8, q_scale);
        let n_docs = self.len();
        let threads = self.cfg.threads.max(1);
        if threads == 1 || self.n_rows < self.cfg.parallel_min_rows.max(1) {
            return Ok(view.scan(0..n_docs, k).into_sorted());
        }
        // Split documents so each thread gets ~n_rows / threads rows.
        let offs = self.row_offsets();
        let mut bounds = Vec::with_capacity(threads + 1);
        bounds.push(0usize);
        for t in 1..threads {
            let target = (self.n_rows as u128 * t as u128 / threads as u128) as u64;
            let b = offs.partition_point(|&x| x < target).min(n_docs);
            let last = bounds.last().copied().unwrap_or(0);
            bounds.push(b.max(last));
        }
        bounds.push(n_docs);
        let ranges: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
        let top = std::thread::scope(|s| {
            let mut rest = ranges.iter().skip(1);
            let handles: Vec<_> = rest
                .by_ref()
                .map(|r| {
                    let r = r.clone();
                    s.spawn(move || view.scan(r, k))
                })
                .collect();
            let mut top = view.scan(ranges.first().cloned().unwrap_or(0..0), k);
            for h in handles {
                match h.join() {
                    Ok(t) => top.merge(t),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            top
        });
        Ok(top.into_sorted())
    }

    /// Dense score of each document in `docs` (same definition as
    /// [`Index::dense_search`]); `f32::NEG_INFINITY` for a document without rows or
    /// out of range.
    pub fn dense_scores_for(&self, query: &[f32], docs: &[u32]) -> Result<Vec<f32>, IndexError> {
        let (q_i8, q_scale) = self.prepare_query(query)?;
        let view = self.view(query, &q_i8, q_scale);
        Ok(docs
            .iter()
            .map(|&d| view.doc_score(d as usize).unwrap_or(f32::NEG_INFINITY))
            .collect())
    }

    /// Term id by binary search over the mapped, sorted dictionary.
    fn term_id(&self, term: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.n_terms);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.term_at(mid)?.cmp(term) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Number of documents containing `term` (0 if unknown).
    pub fn doc_freq(&self, term: &str) -> usize {
        self.term_id(term.as_bytes())
            .and_then(|t| self.postings_of(t))
            .map_or(0, <[Posting]>::len)
    }

    /// Distinct known query terms (sorted, so sums run in a fixed order) with their
    /// idf and posting list.
    fn query_terms<S: AsRef<str>>(&self, tokens: &[S]) -> Vec<(f32, &[Posting])> {
        let mut terms: Vec<&str> = tokens.iter().map(AsRef::as_ref).collect();
        terms.sort_unstable();
        terms.dedup();
        let n = f64::from(self.n_docs);
        terms
            .into_iter()
            .filter_map(|t| {
                let list = self.postings_of(self.term_id(t.as_bytes())?)?;
                let df = list.len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                Some((idf as f32, list))
            })
            .collect()
    }

    #[inline]
    fn bm25_part(&self, lens: &[f32], idf: f32, p: &Posting) -> f32 {
        let dl = lens.get(p.doc as usize).copied().unwrap_or(0.0);
        let norm = if self.avgdl > 0.0 {
            1.0 - BM25_B + BM25_B * (f64::from(dl) / self.avgdl) as f32
        } else {
            1.0
        };
        idf * p.tf * (BM25_K1 + 1.0) / (p.tf + BM25_K1 * norm)
    }

    /// BM25 top-`k` for already-tokenized query terms (use [`crate::tokenize`]).
    ///
    /// `k1 = 1.2`, `b = 0.75`, `idf = ln(1 + (N - n + 0.5) / (n + 0.5))`, tf and document
    /// length are the field-weighted sums given to the writer. Duplicate query terms
    /// count once. Only documents matching at least one term are returned.
    pub fn lexical_search<S: AsRef<str>>(&self, query_tokens: &[S], k: usize) -> Vec<Hit> {
        let k = k.min(self.len());
        let terms = self.query_terms(query_tokens);
        if k == 0 || terms.is_empty() {
            return Vec::new();
        }
        let lens = self.doc_lens();
        let total: usize = terms.iter().map(|(_, l)| l.len()).sum();
        let mut top = TopK::new(k);
        // Sparse accumulation for selective queries; a dense array once the postings
        // touch a sizeable fraction of the corpus (cheaper than hashing every posting).
        if total.saturating_mul(16) < self.len() {
            let mut acc: HashMap<u32, f32> = HashMap::with_capacity(total);
            for (idf, list) in &terms {
                for p in *list {
                    *acc.entry(p.doc).or_insert(0.0) += self.bm25_part(lens, *idf, p);
                }
            }
            for (doc, score) in acc {
                top.push(doc, score);
            }
        } else {
            let mut acc = vec![0f32; self.len()];
            let mut hit = vec![false; self.len()];
            for (idf, list) in &terms {
                for p in *list {
                    let part = self.bm25_part(lens, *idf, p);
                    if let (Some(a), Some(h)) =
                        (acc.get_mut(p.doc as usize), hit.get_mut(p.doc as usize))
                    {
                        *a += part;
                        *h = true;
                    }
                }
            }
            for (doc, (score, h)) in acc.into_iter().zip(hit).enumerate() {
                if h {
                    top.push(doc as u32, score);
                }
            }
        }
        top.into_sorted()
    }

    /// The distinct query terms found in `doc`, each as (number of documents
    /// containing the term, the term's field-weighted frequency in `doc`), in
    /// term order. Empty for a document out of range. The raw material of a
    /// lexical measure other than BM25 (one that must not depend on the
    /// collection's size or average document length, say).
    pub fn term_matches<S: AsRef<str>>(&self, query_tokens: &[S], doc: u32) -> Vec<(usize, f32)> {
        let mut terms: Vec<&str> = query_tokens.iter().map(AsRef::as_ref).collect();
        terms.sort_unstable();
        terms.dedup();
        terms
            .into_iter()
            .filter_map(|t| {
                let list = self.postings_of(self.term_id(t.as_bytes())?)?;
                let i = list.binary_search_by_key(&doc, |p| p.doc).ok()?;
                Some((list.len(), list.get(i)?.tf))
            })
            .collect()
    }

    /// BM25 score of each document in `docs` (0 if it matches no term or is out of
    /// range); binary search per (term, doc), O(|terms| * |docs| * log postings).
    pub fn bm25_scores_for<S: AsRef<str>>(&self, query_tokens: &[S], docs: &[u32]) -> Vec<f32> {
        let terms = self.query_terms(query_tokens);
        let lens = self.doc_lens();
        docs.iter()
            .map(|&d| {
                let mut s = 0f32;
                for (idf, list) in &terms {
                    if let Ok(i) = list.binary_search_by_key(&d, |p| p.doc) {
                        if let Some(p) = list.get(i) {
                            s += self.bm25_part(lens, *idf, p);
                        }
                    }
                }
                s
            })
            .collect()
    }
}
