use oap_index::{tokenize, DocInput, Index, IndexWriter, VectorDtype};

use crate::common::Rng;

fn lex(terms: &[(&str, f32)]) -> Vec<(String, f32)> {
    terms.iter().map(|(t, w)| (t.to_string(), *w)).collect()
}

/// d0: pdf(3) convert(1) text(1)            dl = 5
/// d1: image(3) convert(1) png(1) convert(1) dl = 6, tf(convert) = 2
/// d2: pdf(1) merge(3)                       dl = 4      avgdl = 5
fn three_docs(dir: &std::path::Path) -> Index {
    let path = dir.join("bm25");
    let mut w = IndexWriter::new(2, VectorDtype::F32, b"{}".to_vec()).unwrap();
    let docs = [
        lex(&[("pdf", 3.0), ("convert", 1.0), ("text", 1.0)]),
        lex(&[
            ("image", 3.0),
            ("convert", 1.0),
            ("png", 1.0),
            ("convert", 1.0),
        ]),
        lex(&[("pdf", 1.0), ("merge", 3.0)]),
    ];
    for (i, l) in docs.into_iter().enumerate() {
        w.add(DocInput {
            id: format!("d{i}"),
            lexical: l,
            ..Default::default()
        })
        .unwrap();
    }
    w.write_atomic(&path).unwrap();
    Index::open(&path).unwrap()
}

#[test]
fn bm25_matches_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let idx = three_docs(dir.path());
    assert_eq!(idx.avgdl(), 5.0);
    assert_eq!(idx.terms(), 6);
    assert_eq!(idx.doc_freq("convert"), 2);
    assert_eq!(idx.doc_freq("nope"), 0);
    // idf(n=2, N=3) = ln(1 + 1.5/2.5) = ln 1.6 = 0.470004
    // d0: 0.470004 * (1*2.2/(1+1.2*1.0) + 3*2.2/(3+1.2*1.0)) = 1.208581
    // d1: 0.470004 * 2*2.2/(2+1.2*(0.25+0.75*6/5))            = 0.611839
    // d2: 0.470004 * 1*2.2/(1+1.2*(0.25+0.75*4/5))            = 0.511885
    let hits = idx.lexical_search(&["convert", "pdf"], 10);
    let want = [(0u32, 1.208_580_8f32), (1, 0.611_839_04), (2, 0.511_885_1)];
    assert_eq!(hits.len(), 3);
    for (h, (d, s)) in hits.iter().zip(want) {
        assert_eq!(h.doc, d);
        assert!((h.score - s).abs() < 1e-5, "{h:?} want {s}");
    }
    // Duplicate and unknown query terms: duplicates count once, unknown ignored.
    let dup = idx.lexical_search(&["pdf", "convert", "pdf", "zzz"], 10);
    assert_eq!(dup, hits);
    // k truncation.
    assert_eq!(
        idx.lexical_search(&["convert", "pdf"], 1),
        hits[..1].to_vec()
    );
    // Rare term: idf(n=1) = ln(1 + 2.5/1.5); d2 tf = 3, dl = 4.
    let merge = idx.lexical_search(&["merge"], 10);
    assert_eq!(merge.len(), 1);
    assert!((merge[0].score - 1.610_316_7).abs() < 1e-5);
    // bm25_scores_for agrees and gives 0 for non-matching / out-of-range docs.
    let s = idx.bm25_scores_for(&["convert", "pdf"], &[2, 0, 1, 9]);
    assert!((s[0] - 0.511_885_1).abs() < 1e-5);
    assert!((s[1] - 1.208_580_8).abs() < 1e-5);
    assert!((s[2] - 0.611_839_04).abs() < 1e-5);
    assert_eq!(s[3], 0.0);
    assert!(idx.lexical_search::<&str>(&[], 10).is_empty());
    // &[String] works too.
    let owned: Vec<String> = vec!["merge".into()];
    assert_eq!(idx.lexical_search(&owned, 3), merge);
}

#[test]
fn term_matches_gives_document_frequency_and_weighted_tf_per_distinct_term() {
    let dir = tempfile::tempdir().unwrap();
    let idx = three_docs(dir.path());
    // d1: convert twice (tf 2, in 2 documents), png once (1 document);
    // duplicates count once, unknown terms and terms d1 lacks are left out.
    let m = idx.term_matches(&["png", "convert", "pdf", "png", "zzz"], 1);
    assert_eq!(m, vec![(2, 2.0), (1, 1.0)]);
    assert_eq!(idx.term_matches(&["merge"], 2), vec![(1, 3.0)]);
    assert!(idx.term_matches(&["merge"], 0).is_empty());
    assert!(idx.term_matches(&["pdf"], 9).is_empty());
}

#[test]
fn sparse_and_dense_accumulation_agree() {
    // A common term hits most docs (dense path), a rare one few (sparse path); both
    // must agree with the per-doc binary-search scorer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acc");
    let mut w = IndexWriter::new(2, VectorDtype::F32, b"{}".to_vec()).unwrap();
    let mut rng = Rng(77);
    let vocab: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    for i in 0..2000 {
        let mut l: Vec<(String, f32)> = (0..8)
            .map(|_| {
                (
                    vocab[(rng.below(300) * rng.below(300) / 300) as usize].clone(),
                    1.0,
                )
            })
            .collect();
        if i % 2 == 0 {
            l.push(("common".into(), 2.0));
        }
        w.add(DocInput {
            id: format!("{i}"),
            lexical: l,
            ..Default::default()
        })
        .unwrap();
    }
    w.write_atomic(&path).unwrap();
    let idx = Index::open(&path).unwrap();
    for q in [vec!["common", "w3"], vec!["w299"], vec!["w1", "w2", "w250"]] {
        let hits = idx.lexical_search(&q, 2000);
        let docs: Vec<u32> = hits.iter().map(|h| h.doc).collect();
        let scores = idx.bm25_scores_for(&q, &docs);
        for (h, s) in hits.iter().zip(scores) {
            assert!((h.score - s).abs() < 1e-5);
        }
        // Sorted desc, ties by doc asc.
        for w in hits.windows(2) {
            assert!(w[0].score > w[1].score || (w[0].score == w[1].score && w[0].doc < w[1].doc));
        }
        // Every doc with a positive score is returned.
        let all: Vec<u32> = (0..2000).collect();
        let n_pos = idx
            .bm25_scores_for(&q, &all)
            .iter()
            .filter(|s| **s > 0.0)
            .count();
        assert_eq!(hits.len(), n_pos);
    }
}

#[test]
fn tokenize_is_applied_identically_at_index_and_query_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tok");
    let mut w = IndexWriter::new(2, VectorDtype::F32, b"{}".to_vec()).unwrap();
    let texts = [
        (
            "pdf-tools",
            "Converts PDF files into plain text; parses scanned pages.",
        ),
        ("img", "Resizing and cropping images quickly."),
    ];
    for (id, desc) in texts {
        let mut l: Vec<(String, f32)> = tokenize(id).into_iter().map(|t| (t, 3.0)).collect();
        l.extend(tokenize(desc).into_iter().map(|t| (t, 1.0)));
        w.add(DocInput {
            id: id.into(),
            lexical: l,
            ..Default::default()
        })
        .unwrap();
    }
    w.write_atomic(&path).unwrap();
    let idx = Index::open(&path).unwrap();
    let hits = idx.lexical_search(&tokenize("convert a pdf file, parsing it"), 5);
    assert_eq!(hits[0].doc, 0);
    let hits = idx.lexical_search(&tokenize("resize an image"), 5);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].doc, 1);
}
