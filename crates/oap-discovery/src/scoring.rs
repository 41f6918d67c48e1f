//! Hybrid scoring: dense cosine plus a calibrated BM25 share.
//!
//! Rank fusion (RRF) throws the scores away, and on this corpus it falls
//! below dense retrieval alone (shared/bench/BASELINES.md). Score fusion
//! keeps a meaning for the number, which the "no fitting capability"
//! threshold needs: the dense part is a cosine in [-1, 1], the lexical part
//! is the BM25 score divided by the best score the query's terms could
//! reach, so it is the share of the query's weight that the document
//! matches, in [0, 1), whatever the query length or corpus size.

use oap_index::{Hit, Index};
use serde::{Deserialize, Serialize};

use crate::query::QueryOptions;

/// BM25 parameters; must match the index crate's scorer.
const BM25_K1: f32 = 1.2;

/// Which retrieval signals are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Dense,
    Lexical,
}

/// Tunables of the fusion; defaults come from the retrieval benchmark
/// (docs/BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Scoring {
    pub mode: Mode,
    /// Weight of the normalised lexical share added to the cosine.
    pub lexical_weight: f32,
    /// Candidates taken from each retriever before fusion, at least.
    pub min_pool: usize,
    /// A best candidate below this fused score is not a match (hybrid).
    pub min_score_hybrid: f32,
    pub min_score_dense: f32,
    pub min_score_lexical: f32,
    /// How a task is turned into retrieval text (see [`crate::query`]).
    pub query: QueryOptions,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring {
            mode: Mode::Hybrid,
            lexical_weight: 0.3,
            min_pool: 32,
            min_score_hybrid: 0.30,
            min_score_dense: 0.28,
            min_score_lexical: 0.15,
            query: QueryOptions::default(),
        }
    }
}

impl Scoring {
    pub fn threshold(&self, mode: Mode) -> f32 {
        match mode {
            Mode::Hybrid => self.min_score_hybrid,
            Mode::Dense => self.min_score_dense,
            Mode::Lexical => self.min_score_lexical,
        }
    }
}

/// The parts of a candidate's score, reported so operators can see why.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScoreParts {
    /// Best weighted cosine over the document's rows (absent in lexical mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense: Option<f32>,
    /// BM25 as a share of the query's attainable BM25.
    pub lexical: f32,
    /// The score results are ranked by.
    pub fused: f32,
}

/// Ranks documents for a query; returns at most `top_k`, best first, ties
/// broken by document number so answers are deterministic.
pub fn rank(
    index: &Index,
    scoring: &Scoring,
    mode: Mode,
    query_vector: Option<&[f32]>,
    terms: &[String],
    top_k: usize,
) -> Vec<(u32, ScoreParts)> {
    let pool = scoring.min_pool.max(top_k * 4);
    let query_vector = match mode {
        Mode::Lexical => None,
        _ => query_vector,
    };
    let mut docs: Vec<u32> = Vec::new();
    if let Some(vector) = query_vector {
        match index.dense_search(vector, pool) {
            Ok(hits) => docs.extend(hits.iter().map(|h: &Hit| h.doc)),
            Err(err) => {
                tracing::error!(error = %err, "dense search failed; using lexical scores only")
            }
        }
    }
    if mode != Mode::Dense {
        docs.extend(
            index
                .lexical_search(terms, pool)
                .iter()
                .map(|h: &Hit| h.doc),
        );
    }
    docs.sort_unstable();
    docs.dedup();
    if docs.is_empty() {
        return Vec::new();
    }

    let dense = query_vector.and_then(|v| index.dense_scores_for(v, &docs).ok());
    let ceiling = attainable_bm25(index, terms);
    let lexical: Vec<f32> = if ceiling > 0.0 {
        index
            .bm25_scores_for(terms, &docs)
            .into_iter()
            .map(|s| (s / ceiling).clamp(0.0, 1.0))
            .collect()
    } else {
        vec![0.0; docs.len()]
    };

    let mut scored: Vec<(u32, ScoreParts)> = docs
        .iter()
        .enumerate()
        .map(|(i, &doc)| {
            let dense = dense.as_ref().and_then(|d| d.get(i).copied());
            let lexical = lexical.get(i).copied().unwrap_or(0.0);
            let fused = match (mode, dense) {
                (Mode::Lexical, _) | (_, None) => lexical,
                (Mode::Dense, Some(d)) => d,
                (Mode::Hybrid, Some(d)) => d + scoring.lexical_weight * lexical,
            };
            (
                doc,
                ScoreParts {
                    dense,
                    lexical,
                    fused,
                },
            )
        })
        .collect();
    scored.sort_by(|a, b| b.1.fused.total_cmp(&a.1.fused).then(a.0.cmp(&b.0)));
    scored.truncate(top_k);
    scored
}

/// An upper bound of the BM25 score the query can reach: every distinct
/// term at saturation, `idf * (k1 + 1)`. Terms the corpus has never seen
/// count with the idf of a term in no document, so a query that is mostly
/// unknown words gets a small lexical share, as it should.
fn attainable_bm25(index: &Index, terms: &[String]) -> f32 {
    let mut distinct: Vec<&String> = terms.iter().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let n = index.len() as f32;
    distinct
        .into_iter()
        .map(|term| {
            let df = index.doc_freq(term) as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            idf * (BM25_K1 + 1.0)
        })
        .sum()
}
