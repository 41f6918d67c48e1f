//! Hybrid scoring: dense cosine plus a calibrated amount of BM25 evidence.
//!
//! Rank fusion (RRF) throws the scores away, and on this corpus it falls
//! below dense retrieval alone (bench/BASELINES.md). Score fusion
//! keeps a meaning for the number, which the "no fitting capability"
//! threshold needs: the dense part is a cosine in [-1, 1]; the lexical part
//! is the BM25 score measured in units of one perfectly specific query term
//! (a term found in no other document, matched at saturation), capped.
//!
//! Why that unit rather than a share of what the query could reach: a share
//! rewards short queries and punishes long ones. "get the count from: {...}"
//! leaves the single term "get", and a document matching only "get" had
//! 77 % of the attainable score, enough to outrank the right tool; a long
//! request whose one rare term ("PostgreSQL") matches got a few percent. In
//! absolute units the first is worth ~0.3 terms and the second ~0.8,
//! whatever the query length, and the corpus size is accounted for by the
//! idf of the unit.

use oap_embed::Calibration;
use oap_index::{Hit, Index, BM25_K1};
use serde::{Deserialize, Serialize};

use crate::query::QueryOptions;

/// Lexical evidence is capped at this many perfectly specific terms, so
/// that a long query repeating the words of one document cannot outweigh
/// the embedding without bound.
pub const MAX_LEXICAL: f32 = 2.0;

/// How much word evidence counts towards "a capability fits" in hybrid
/// mode: the abstention score is the best candidate's cosine plus this
/// weight times its [`abstention_evidence`], capped at
/// [`ABSTENTION_MAX_LEXICAL`]. Fitted on tuning data only (the shared task
/// set and the tuning splits of the held-out corpora) with
/// `bench/fit_abstention.py`; docs/BENCHMARKS.md has the figures.
pub const ABSTENTION_LEXICAL_WEIGHT: f32 = 0.15;

/// Word evidence beyond this adds nothing to the abstention score: one
/// shared rare word is evidence that the query is about the capability, a
/// query repeating its words is not more so.
pub const ABSTENTION_MAX_LEXICAL: f32 = 0.6;

/// multilingual-e5-small's hybrid "nothing fits" threshold
/// ([`Scoring::multilingual_e5`]).
const E5_MIN_SCORE_HYBRID: f32 = 0.86;
/// Its dense threshold.
const E5_MIN_SCORE_DENSE: f32 = 0.84;

/// Which retrieval signals are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Cosine plus weighted BM25 evidence (the default).
    Hybrid,
    /// Cosine only.
    Dense,
    /// BM25 only; what the engine falls back to without an embedding model.
    Lexical,
}

/// Tunables of the fusion; defaults come from the retrieval benchmark
/// (docs/BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Scoring {
    /// The mode queries run in when a model is loaded.
    pub mode: Mode,
    /// Weight of the lexical evidence added to the cosine.
    pub lexical_weight: f32,
    /// Candidates taken from each retriever before fusion, at least.
    pub min_pool: usize,
    /// A best candidate below this fused score is not a match (hybrid).
    pub min_score_hybrid: f32,
    /// A best candidate below this cosine is not a match (dense).
    pub min_score_dense: f32,
    /// In lexical mode the score is the capped evidence (0..=MAX_LEXICAL).
    pub min_score_lexical: f32,
    /// Candidates whose first embedded row has at least this cosine with
    /// the first row of a better-ranked candidate are listed after the
    /// distinct ones: the same capability published several times would
    /// otherwise fill the whole candidate list. Above 1.0 turns this off.
    pub duplicate_similarity: f32,
    /// The same, for candidates whose ids are the same words once numbers
    /// are ignored (`weather-2` and `weather-7`: variants or versions of one
    /// capability); their descriptions may differ more. Above 1.0 turns
    /// this off.
    pub variant_similarity: f32,
    /// Weight of the lexical evidence in the hybrid abstention score
    /// ([`ABSTENTION_LEXICAL_WEIGHT`]; 0 compares the cosine alone).
    pub abstention_lexical_weight: f32,
    /// How a task is turned into retrieval text (see [`crate::query`]).
    pub query: QueryOptions,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring {
            mode: Mode::Hybrid,
            lexical_weight: 0.25,
            min_pool: 32,
            min_score_hybrid: 0.30,
            min_score_dense: 0.28,
            min_score_lexical: 0.20,
            duplicate_similarity: 0.95,
            variant_similarity: 0.80,
            abstention_lexical_weight: ABSTENTION_LEXICAL_WEIGHT,
            query: QueryOptions::default(),
        }
    }
}

impl Scoring {
    /// The defaults for an encoder with the tool-retrieval tuning
    /// (`oap-embed-candle`'s `tool_tuning`, the daemon's default). Its
    /// training keeps unrelated request/tool pairs at the plain model's
    /// cosines while a request's own tool gains on its neighbours, so its
    /// cosines rank better on their own and words weigh less in the fused
    /// rank (0.2). The thresholds were refitted with request rows in the
    /// index (docs/BENCHMARKS.md, "The decision"): a spoken request is
    /// closer to a tool's spoken request rows than to its description,
    /// whether the tool fits or not, so at the earlier 0.27 most no-fit
    /// spoken requests matched. 0.30, with request rows weighing 0.7,
    /// gave the largest mean of (no-fit abstained − fitting abstained)
    /// over the tuning halves of the spoken set and BFCL's relevance
    /// catalogs and the shared set; the dense threshold moved with it.
    pub fn tool_tuned() -> Self {
        Scoring {
            lexical_weight: 0.2,
            min_score_hybrid: 0.30,
            min_score_dense: 0.28,
            ..Scoring::default()
        }
    }

    /// The defaults for multilingual-e5-small with its prompts. Its cosines
    /// sit in a narrow high band (a request and an unrelated tool still
    /// score about 0.75, two unrelated tool descriptions about 0.85), so
    /// its thresholds are far above MiniLM's. The hybrid one was fitted on
    /// tuning data only (`bench/fit_abstention.py --from 0.74` over the
    /// shared task set and the tuning halves of ha-intents and nestful,
    /// daemon rule cosine + 0.15 × min(evidence, 0.6)): 0.86 starts the
    /// plateau where 42 % of the no-fit tuning requests are abstained on
    /// and 1.6 % of the fitting ones; past it each further no-fit caught
    /// costs one to two percent of the fitting ones. The dense one is
    /// 0.02 lower, as for the other encoders. The duplicate and variant
    /// cosines are raised with the scale, not fitted.
    pub fn multilingual_e5() -> Self {
        Scoring {
            min_score_hybrid: E5_MIN_SCORE_HYBRID,
            min_score_dense: E5_MIN_SCORE_DENSE,
            duplicate_similarity: 0.98,
            variant_similarity: 0.93,
            ..Scoring::default()
        }
    }

    /// The defaults for an encoder of this calibration: what the daemon
    /// takes for the model that actually loaded.
    pub fn calibrated(calibration: Calibration) -> Self {
        match calibration {
            Calibration::General => Scoring::default(),
            Calibration::ToolTuned => Scoring::tool_tuned(),
            Calibration::MultilingualE5 => Scoring::multilingual_e5(),
        }
    }

    /// The "no fitting capability" threshold configured for `mode`.
    pub fn threshold(&self, mode: Mode) -> f32 {
        match mode {
            Mode::Hybrid => self.min_score_hybrid,
            Mode::Dense => self.min_score_dense,
            Mode::Lexical => self.min_score_lexical,
        }
    }

    /// The number the "no fitting capability" threshold is compared with:
    /// the best candidate's cosine whenever there is one (in hybrid mode
    /// plus a little of its lexical evidence, capped), its lexical evidence
    /// otherwise. Lexical evidence helps to order candidates that are all
    /// plausible, but it is poor evidence that any of them fits: "play a
    /// song" shares words with a playlist API, "translate" with `tr`. On
    /// the reference task set the cosine separates negatives from positives
    /// far better than the fused score (AUROC 0.95 against 0.91); a capped
    /// share of the words keeps that and lets "how many words are in this
    /// sentence" (cosine 0.26 with `wc`, one specific word) through
    /// (docs/BENCHMARKS.md).
    pub fn decision_score(&self, mode: Mode, parts: &ScoreParts) -> f32 {
        match (mode, parts.dense) {
            (_, None) => parts.lexical,
            (Mode::Hybrid, Some(dense)) => {
                dense
                    + self.abstention_lexical_weight
                        * parts.evidence.clamp(0.0, ABSTENTION_MAX_LEXICAL)
            }
            (_, Some(dense)) => dense,
        }
    }

    /// The threshold [`Scoring::decision_score`] is compared with for a
    /// candidate scored in `mode`: the mode's own, or the lexical one when
    /// dense scoring failed for this query (the score is then in lexical
    /// units).
    pub fn decision_threshold(&self, mode: Mode, parts: &ScoreParts) -> f32 {
        match (mode, parts.dense) {
            (_, None) => self.min_score_lexical,
            (mode, Some(_)) => self.threshold(mode),
        }
    }

    /// Whether a candidate, scored in `mode`, fits: its decision score
    /// reaches the decision threshold. One number against one threshold,
    /// both reported with every answer.
    pub fn accepts(&self, mode: Mode, parts: &ScoreParts) -> bool {
        self.decision_score(mode, parts) >= self.decision_threshold(mode, parts)
    }
}

/// The parts of a candidate's score, reported so operators can see why.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScoreParts {
    /// Best weighted cosine over the document's rows (absent in lexical mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense: Option<f32>,
    /// BM25 in units of one perfectly specific query term, capped at
    /// [`MAX_LEXICAL`].
    pub lexical: f32,
    /// The score results are ranked by.
    pub fused: f32,
    /// The word evidence the hybrid abstention score counts
    /// ([`abstention_evidence`]): unlike `lexical`, the same for a document
    /// whatever else the catalog holds, as long as the query's words are not
    /// in the other documents. Internal, not reported.
    #[serde(skip)]
    pub evidence: f32,
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
    let unit = specific_term_bm25(index);
    let lexical: Vec<f32> = index
        .bm25_scores_for(terms, &docs)
        .into_iter()
        .map(|s| (s / unit).clamp(0.0, MAX_LEXICAL))
        .collect();

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
                    evidence: 0.0,
                },
            )
        })
        .collect();
    scored.sort_by(|a, b| b.1.fused.total_cmp(&a.1.fused).then(a.0.cmp(&b.0)));
    if scoring.duplicate_similarity <= 1.0 || scoring.variant_similarity <= 1.0 {
        demote_near_duplicates(index, scoring, &mut scored, top_k);
    }
    scored.truncate(top_k);
    for (doc, parts) in &mut scored {
        parts.evidence = abstention_evidence(index, terms, *doc);
    }
    scored
}

/// The word evidence that `doc` is what the query asks for, for the
/// "nothing fits" decision: the sum over the query's distinct words found in
/// the document of `rarity * tf / (tf + k1)`, capped at [`MAX_LEXICAL`].
///
/// `rarity` is the word's idf relative to the idf of a word found in one
/// document of the same catalog, so a word only this document has counts 1
/// in a catalog of 13 manifests and in one of 10,000 (BM25's own idf, and
/// the `lexical` unit, grow with the catalog: such a word is worth 0.67
/// units among 13 manifests and 0.89 among 10,000). Words in more documents
/// count less (in 2 of 13: 0.77). `tf / (tf + k1)` is BM25's saturation
/// without its length normalisation, which depends on the catalog's
/// average document length: a word in the name (weight 3) counts 0.71, in
/// the description once 0.45, approaching 1 with more mentions. So adding
/// manifests that share none of the query's words changes nothing, and
/// the score stays bounded the same way at any size.
pub fn abstention_evidence(index: &Index, terms: &[String], doc: u32) -> f32 {
    let n = index.len().max(1) as f32;
    let idf = |df: f32| (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
    // Positive for n >= 1: ln(1 + (n - 0.5) / 1.5) >= ln(4 / 3).
    let one_document = idf(1.0);
    index
        .term_matches(terms, doc)
        .into_iter()
        .map(|(df, tf)| {
            let rarity = (idf(df as f32) / one_document).clamp(0.0, 1.0);
            rarity * tf / (tf + BM25_K1)
        })
        .sum::<f32>()
        .min(MAX_LEXICAL)
}

/// The BM25 score of one perfectly specific term: the idf of a term in no
/// document (the largest idf the corpus can give) at tf saturation,
/// `idf * (k1 + 1)`. Never 0 (`ln(1 + (n + 0.5) / 0.5) >= ln 2`).
fn specific_term_bm25(index: &Index) -> f32 {
    let n = index.len() as f32;
    (1.0 + (n + 0.5) / 0.5).ln() * (BM25_K1 + 1.0)
}

/// Stable partition of the best candidates: the first `top_k` distinct ones
/// keep their order, near duplicates of a better candidate follow them.
/// The best candidate never moves, so the match and its threshold are
/// unaffected. Only the first few candidates are compared: the answer
/// lists `top_k`, and each comparison reads a vector from the index.
fn demote_near_duplicates(
    index: &Index,
    scoring: &Scoring,
    scored: &mut Vec<(u32, ScoreParts)>,
    top_k: usize,
) {
    struct Kept {
        vector: Vec<f32>,
        name: String,
    }
    let window = scored.len().min(top_k.saturating_mul(4).max(top_k + 8));
    let mut kept: Vec<(usize, Kept)> = Vec::new();
    let mut demoted: Vec<usize> = Vec::new();
    for (i, (doc, _)) in scored.iter().enumerate().take(window) {
        if kept.len() >= top_k {
            break;
        }
        let this = Kept {
            vector: index
                .rows_of(*doc)
                .next()
                .map(|row| row.vector)
                .unwrap_or_default(),
            name: index.doc_id(*doc).map(name_words).unwrap_or_default(),
        };
        // Without a vector there is nothing to compare: such a candidate
        // is always kept.
        let duplicate = !this.vector.is_empty()
            && kept.iter().any(|(_, other)| {
                let cosine = dot(&this.vector, &other.vector);
                cosine >= scoring.duplicate_similarity
                    || (cosine >= scoring.variant_similarity
                        && !this.name.is_empty()
                        && this.name == other.name)
            });
        if duplicate {
            demoted.push(i);
        } else {
            kept.push((i, this));
        }
    }
    let Some(examined) = kept
        .iter()
        .map(|(i, _)| *i)
        .chain(demoted.iter().copied())
        .max()
        .map(|i| i + 1)
    else {
        return;
    };
    if demoted.is_empty() {
        return;
    }
    // Order: kept ones, then the demoted ones, then everything not examined.
    let mut order: Vec<usize> = kept.iter().map(|(i, _)| *i).collect();
    order.extend(demoted);
    order.extend(examined..scored.len());
    let mut slots: Vec<Option<(u32, ScoreParts)>> = scored.drain(..).map(Some).collect();
    scored.extend(order.into_iter().filter_map(|i| slots.get_mut(i)?.take()));
}

/// An id as its words without numbers: `local/weather-2` and
/// `local/weather-7` both become `local weather`.
fn name_words(id: &str) -> String {
    id.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Rows are stored L2-normalised, so the dot product is the cosine.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oap_index::{DocInput, IndexWriter, RowInput, VectorDtype};

    /// A unit vector in 4 dimensions.
    fn unit(v: [f32; 4]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    /// An index of `(id, vector, text)` documents, one row each.
    fn index(docs: &[(&str, [f32; 4], &str)]) -> (tempfile::TempDir, Index) {
        let owned: Vec<(String, [f32; 4], String)> = docs
            .iter()
            .map(|(id, v, t)| (id.to_string(), *v, t.to_string()))
            .collect();
        owned_index(&owned)
    }

    /// [`index`] for owned strings.
    fn owned_index(docs: &[(String, [f32; 4], String)]) -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut writer = IndexWriter::new(4, VectorDtype::F32, b"{}".to_vec()).expect("writer");
        for (id, vector, text) in docs {
            writer
                .add(DocInput {
                    id: id.to_string(),
                    record: Vec::new(),
                    rows: vec![RowInput {
                        key: [0; 16],
                        weight: 1.0,
                        vector: unit(*vector),
                    }],
                    lexical: oap_index::tokenize(text)
                        .into_iter()
                        .map(|t| (t, 1.0))
                        .collect(),
                })
                .expect("add");
        }
        let path = dir.path().join("i.oapx");
        writer.write_atomic(&path).expect("write");
        let index = Index::open(&path).expect("open");
        (dir, index)
    }

    fn terms(text: &str) -> Vec<String> {
        oap_index::tokenize(text)
    }

    fn ids(index: &Index, ranked: &[(u32, ScoreParts)]) -> Vec<String> {
        ranked
            .iter()
            .map(|(doc, _)| index.doc_id(*doc).unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn lexical_evidence_does_not_grow_with_a_short_query() {
        let (_dir, index) = index(&[
            (
                "a",
                [1.0, 0.0, 0.0, 0.0],
                "get playlists from the music service",
            ),
            ("b", [0.0, 1.0, 0.0, 0.0], "register a postgresql server"),
            (
                "c",
                [0.0, 0.0, 1.0, 0.0],
                "list the servers of an environment",
            ),
            ("d", [0.0, 0.0, 0.0, 1.0], "get the weather"),
        ]);
        let scoring = Scoring::default();
        // One common word matched is little evidence...
        let short = rank(&index, &scoring, Mode::Lexical, None, &terms("get"), 4);
        let common = short[0].1.lexical;
        // ...and a rare word in a long query is more, however long the query.
        let long = terms("could you please register my new postgresql thing for me today");
        let long = rank(&index, &scoring, Mode::Lexical, None, &long, 4);
        assert_eq!(ids(&index, &long)[0], "b");
        assert!(
            long[0].1.lexical > common,
            "{} vs {common}",
            long[0].1.lexical
        );
        assert!(long.iter().all(|(_, p)| p.lexical <= MAX_LEXICAL));
    }

    #[test]
    fn hybrid_adds_weighted_lexical_evidence_to_the_cosine() {
        let (_dir, index) = index(&[
            ("a", [1.0, 0.0, 0.0, 0.0], "alpha"),
            ("b", [0.0, 1.0, 0.0, 0.0], "beta"),
        ]);
        let scoring = Scoring::default();
        let q = unit([1.0, 0.2, 0.0, 0.0]);
        let ranked = rank(&index, &scoring, Mode::Hybrid, Some(&q), &terms("beta"), 2);
        for (_, parts) in &ranked {
            let dense = parts.dense.expect("dense part");
            let want = dense + scoring.lexical_weight * parts.lexical;
            assert!((parts.fused - want).abs() < 1e-6);
        }
        let dense = rank(&index, &scoring, Mode::Dense, Some(&q), &terms("beta"), 2);
        assert_eq!(ids(&index, &dense), ["a", "b"]);
        assert!(dense.iter().all(|(_, p)| Some(p.fused) == p.dense));
    }

    #[test]
    fn near_duplicates_follow_the_distinct_candidates() {
        let (_dir, index) = index(&[
            ("local/weather-1", [1.0, 0.0, 0.0, 0.0], "x"),
            ("local/forecast", [1.0, 0.01, 0.0, 0.0], "x"),
            ("local/weather-2", [1.0, 0.5, 0.0, 0.0], "x"),
            ("local/news", [1.0, 0.6, 0.1, 0.0], "x"),
            ("local/stocks", [1.0, 0.9, 0.5, 0.0], "x"),
        ]);
        let q = unit([1.0, 0.0, 0.0, 0.0]);
        let off = Scoring {
            duplicate_similarity: 2.0,
            variant_similarity: 2.0,
            ..Scoring::default()
        };
        let plain = rank(&index, &off, Mode::Dense, Some(&q), &[], 3);
        assert_eq!(
            ids(&index, &plain),
            ["local/weather-1", "local/forecast", "local/weather-2"]
        );
        // `forecast` is a near copy of `weather-1` (cosine > 0.99): demoted.
        // `weather-2` has the same name words and a cosine of 0.89: demoted
        // as a variant, although it is no near copy.
        let ranked = rank(&index, &Scoring::default(), Mode::Dense, Some(&q), &[], 3);
        assert_eq!(
            ids(&index, &ranked),
            ["local/weather-1", "local/news", "local/stocks"]
        );
        // With a larger answer the demoted ones come back, after the others.
        let ranked = rank(&index, &Scoring::default(), Mode::Dense, Some(&q), &[], 5);
        assert_eq!(
            ids(&index, &ranked),
            [
                "local/weather-1",
                "local/news",
                "local/stocks",
                "local/forecast",
                "local/weather-2"
            ]
        );
    }

    #[test]
    fn names_without_numbers() {
        assert_eq!(
            name_words("local/get-current-weather-21"),
            "local get current weather"
        );
        assert_eq!(name_words("local/v2-api"), "local v2 api");
        assert_eq!(name_words("local/42"), "local");
    }

    /// A word made of letters only, different for every `i`.
    fn synthetic_word(mut i: usize) -> String {
        let mut word = String::from("syn");
        loop {
            word.push(char::from(b'a' + (i % 26) as u8));
            i /= 26;
            if i == 0 {
                return word;
            }
        }
    }

    #[test]
    fn abstention_does_not_depend_on_how_many_unrelated_manifests_there_are() {
        let small: Vec<(String, [f32; 4], String)> = vec![
            (
                "wc".into(),
                [1.0, 0.0, 0.0, 0.0],
                "count the words, lines and characters of a text".into(),
            ),
            (
                "grep".into(),
                [0.0, 1.0, 0.0, 0.0],
                "print the lines matching a pattern".into(),
            ),
            (
                "date".into(),
                [0.0, 0.0, 1.0, 0.0],
                "print or set the system date and time".into(),
            ),
        ];
        // The same three plus 3,000 documents sharing no word with them (and
        // longer, so the average document length changes too), whose vectors
        // are orthogonal to the query's.
        let mut large = small.clone();
        for i in 0..3000 {
            let text = (0..12)
                .map(|k| synthetic_word(i * 12 + k))
                .collect::<Vec<_>>()
                .join(" ");
            large.push((format!("synthetic-{i}"), [0.0, 1.0, 1.0, 0.0], text));
        }
        let (_a, small_index) = owned_index(&small);
        let (_b, large_index) = owned_index(&large);
        let scoring = Scoring::default();
        let terms = terms("how many words are in this sentence");
        // The query's cosine with `wc`, swept across the threshold: the
        // decision must be the same in both catalogs at every cosine.
        let mut decisions = 0;
        let mut lexical_moved = false;
        for step in 0..=60 {
            let cosine = scoring.min_score_hybrid - 0.15 + 0.005 * step as f32;
            let q = [cosine, 0.0, 0.0, (1.0 - cosine * cosine).sqrt()];
            let best = |index: &Index| {
                let ranked = rank(index, &scoring, Mode::Hybrid, Some(&q), &terms, 3);
                assert_eq!(ids(index, &ranked)[0], "wc");
                ranked[0].1
            };
            let (a, b) = (best(&small_index), best(&large_index));
            assert!((a.dense.unwrap_or(0.0) - cosine).abs() < 1e-4);
            assert!(a.evidence > 0.0, "the query shares a word with wc");
            // BM25's own unit does move with the catalog's size...
            lexical_moved |= (a.lexical - b.lexical).abs() > 0.05;
            // ...the evidence the decision counts does not.
            assert!((a.evidence - b.evidence).abs() < 1e-6, "{a:?} vs {b:?}");
            assert_eq!(
                scoring.accepts(Mode::Hybrid, &a),
                scoring.accepts(Mode::Hybrid, &b),
                "cosine {cosine}: {a:?} vs {b:?}"
            );
            decisions += scoring.accepts(Mode::Hybrid, &a) as usize;
        }
        assert!(lexical_moved, "the catalogs must differ in BM25 units");
        // The sweep crosses the threshold: both decisions were seen.
        assert!(decisions > 0 && decisions < 61, "{decisions}");
    }

    #[test]
    fn abstention_uses_the_cosine_when_there_is_one() {
        let scoring = Scoring::default();
        // Words lift a cosine by at most weight * cap, however many match.
        let lift = ABSTENTION_LEXICAL_WEIGHT * ABSTENTION_MAX_LEXICAL;
        let strong_words = ScoreParts {
            dense: Some(scoring.min_score_hybrid - lift - 0.01),
            lexical: MAX_LEXICAL,
            fused: 1.0,
            evidence: MAX_LEXICAL,
        };
        assert!(!scoring.accepts(Mode::Hybrid, &strong_words));
        // One specific word is enough to lift a cosine just below the
        // threshold, in hybrid mode only.
        let one_word = ScoreParts {
            dense: Some(scoring.min_score_hybrid - 0.03),
            lexical: 0.5,
            fused: 0.5,
            evidence: 0.5,
        };
        assert!(scoring.accepts(Mode::Hybrid, &one_word));
        let dense_only = Scoring {
            min_score_dense: scoring.min_score_hybrid,
            ..scoring.clone()
        };
        assert!(!dense_only.accepts(Mode::Dense, &one_word));
        let cosine_only = Scoring {
            abstention_lexical_weight: 0.0,
            ..scoring.clone()
        };
        assert!(!cosine_only.accepts(Mode::Hybrid, &one_word));
        let fits = ScoreParts {
            dense: Some(scoring.min_score_hybrid + 0.01),
            lexical: 0.0,
            fused: scoring.min_score_hybrid + 0.01,
            evidence: 0.0,
        };
        assert!(scoring.accepts(Mode::Hybrid, &fits));
        let lexical_only = ScoreParts {
            dense: None,
            lexical: scoring.min_score_lexical,
            fused: scoring.min_score_lexical,
            evidence: scoring.min_score_lexical,
        };
        assert!(scoring.accepts(Mode::Lexical, &lexical_only));
        assert!(scoring.accepts(Mode::Hybrid, &lexical_only));
    }
}
