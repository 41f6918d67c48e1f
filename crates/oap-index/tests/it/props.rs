//! Property tests of search against a plain model: dense and BM25 scores
//! computed from the documents as written, and top-k selection against a
//! full sort of every document's score (score desc, then doc asc).

use oap_index::{
    DocInput, Hit, Index, IndexWriter, RowInput, SearchConfig, VectorDtype, BM25_B, BM25_K1,
};
use proptest::prelude::*;

const TERMS: &[&str] = &["weather", "time", "city", "news", "stock", "zip"];

#[derive(Debug, Clone)]
struct Doc {
    rows: Vec<(f32, Vec<f32>)>,
    lexical: Vec<(usize, f32)>,
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.into_iter().map(|x| x / n).collect()
    } else {
        let mut e = vec![0.0; v.len()];
        e[0] = 1.0;
        e
    }
}

fn corpus(dim: usize) -> impl Strategy<Value = Vec<Doc>> {
    let row =
        (0.0f32..=2.0, prop::collection::vec(-1.0f32..=1.0, dim)).prop_map(|(w, v)| (w, unit(v)));
    let doc = (
        prop::collection::vec(row, 0..4),
        prop::collection::vec(
            (
                0..TERMS.len(),
                prop_oneof![Just(1.0f32), Just(0.5), Just(2.0)],
            ),
            0..6,
        ),
    )
        .prop_map(|(rows, lexical)| Doc { rows, lexical });
    prop::collection::vec(doc, 0..24)
}

fn build(dim: usize, docs: &[Doc]) -> (tempfile::TempDir, Index) {
    let mut w = IndexWriter::new(dim, VectorDtype::F32, b"{}".to_vec()).unwrap();
    for (i, d) in docs.iter().enumerate() {
        w.add(DocInput {
            id: format!("doc{i}"),
            record: Vec::new(),
            rows: d
                .rows
                .iter()
                .map(|(weight, v)| RowInput {
                    key: [0; 16],
                    weight: *weight,
                    vector: v.clone(),
                })
                .collect(),
            lexical: d
                .lexical
                .iter()
                .map(|(t, wt)| (TERMS[*t].to_string(), *wt))
                .collect(),
        })
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("props.idx");
    w.write_atomic(&path).unwrap();
    let index = Index::open(&path).unwrap();
    (dir, index)
}

/// Every candidate sorted the way search promises, cut to k.
fn sorted_top(mut all: Vec<Hit>, k: usize) -> Vec<Hit> {
    all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)));
    all.truncate(k);
    all
}

fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() <= 1e-4 * (1.0 + b.abs())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn dense_top_k_is_the_sorted_prefix_of_the_model_scores(
        (dim, docs, query, k) in (1usize..6).prop_flat_map(|dim| (
            Just(dim),
            corpus(dim),
            prop::collection::vec(-1.0f32..=1.0, dim).prop_map(unit),
            0usize..30,
        ))
    ) {
        let (_dir, mut index) = build(dim, &docs);
        let all: Vec<u32> = (0..docs.len() as u32).collect();
        let scores = index.dense_scores_for(&query, &all).unwrap();
        // Each score is the best weighted cosine of the document's rows.
        for (d, doc) in docs.iter().enumerate() {
            let model = doc.rows.iter()
                .map(|(w, v)| f64::from(*w) * v.iter().zip(&query).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>())
                .fold(None, |best: Option<f64>, x| Some(best.map_or(x, |b| b.max(x))));
            match model {
                None => prop_assert_eq!(scores[d], f32::NEG_INFINITY),
                Some(m) => prop_assert!(close(scores[d], m), "doc {}: {} vs model {}", d, scores[d], m),
            }
        }
        let candidates: Vec<Hit> = scores.iter().enumerate()
            .filter(|(_, s)| s.is_finite())
            .map(|(d, s)| Hit { doc: d as u32, score: *s })
            .collect();
        let want = sorted_top(candidates, k);
        prop_assert_eq!(&index.dense_search(&query, k).unwrap(), &want);
        // The parallel scan selects the same hits.
        index.set_search_config(SearchConfig { threads: 3, parallel_min_rows: 1 });
        prop_assert_eq!(&index.dense_search(&query, k).unwrap(), &want);
    }

    #[test]
    fn bm25_scores_follow_the_formula_and_top_k_is_their_sorted_prefix(
        docs in corpus(1),
        query in prop::collection::vec(0..TERMS.len() + 1, 0..5),
        k in 0usize..30,
    ) {
        let (_dir, index) = build(1, &docs);
        let tokens: Vec<&str> = query.iter().map(|&t| TERMS.get(t).copied().unwrap_or("absent")).collect();
        let all: Vec<u32> = (0..docs.len() as u32).collect();
        let scores = index.bm25_scores_for(&tokens, &all);
        // The model: tf and length are summed field weights, duplicate query
        // terms count once, idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
        let n = docs.len() as f64;
        let tf = |d: &Doc, t: usize| d.lexical.iter().filter(|(x, _)| *x == t).map(|(_, w)| f64::from(*w)).sum::<f64>();
        let len = |d: &Doc| d.lexical.iter().map(|(_, w)| f64::from(*w)).sum::<f64>();
        let avgdl = if docs.is_empty() { 0.0 } else { docs.iter().map(len).sum::<f64>() / n };
        let mut terms: Vec<usize> = query.iter().copied().filter(|&t| t < TERMS.len()).collect();
        terms.sort_unstable();
        terms.dedup();
        let mut matched = vec![false; docs.len()];
        for (d, doc) in docs.iter().enumerate() {
            let mut model = 0.0;
            for &t in &terms {
                let df = docs.iter().filter(|x| tf(x, t) > 0.0).count() as f64;
                let f = tf(doc, t);
                if df == 0.0 || f == 0.0 {
                    continue;
                }
                matched[d] = true;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let norm = if avgdl > 0.0 { 1.0 - f64::from(BM25_B) + f64::from(BM25_B) * len(doc) / avgdl } else { 1.0 };
                model += idf * f * (f64::from(BM25_K1) + 1.0) / (f + f64::from(BM25_K1) * norm);
            }
            prop_assert!(close(scores[d], model), "doc {}: {} vs model {}", d, scores[d], model);
        }
        let candidates: Vec<Hit> = scores.iter().enumerate()
            .filter(|(d, _)| matched[*d])
            .map(|(d, s)| Hit { doc: d as u32, score: *s })
            .collect();
        prop_assert_eq!(index.lexical_search(&tokens, k), sorted_top(candidates, k));
    }
}
