use oap_index::{DocInput, Hit, Index, IndexWriter, RowInput, SearchConfig, VectorDtype};

use crate::common::{dot, normalize, Rng};

struct Corpus {
    /// Per doc: (weight, vector) rows.
    docs: Vec<Vec<(f32, Vec<f32>)>>,
}

/// Random corpus: `n_docs` docs with `rows_per_doc(i)` rows each.
fn random_corpus(n_docs: usize, dim: usize, seed: u64, multi: bool) -> Corpus {
    let mut rng = Rng(seed);
    let docs = (0..n_docs)
        .map(|i| {
            let n = if multi { i % 4 } else { 1 };
            (0..n)
                .map(|_| {
                    let w = if multi {
                        0.5 + rng.below(3) as f32 * 0.25
                    } else {
                        1.0
                    };
                    (w, rng.unit_vec(dim))
                })
                .collect()
        })
        .collect();
    Corpus { docs }
}

fn build(c: &Corpus, dim: usize, dtype: VectorDtype, dir: &std::path::Path) -> Index {
    let mut w = IndexWriter::new(dim, dtype, b"{}".to_vec()).unwrap();
    for (i, rows) in c.docs.iter().enumerate() {
        w.add(DocInput {
            id: format!("d{i}"),
            rows: rows
                .iter()
                .map(|(wt, v)| RowInput {
                    key: [i as u8; 16],
                    weight: *wt,
                    vector: v.clone(),
                })
                .collect(),
            ..Default::default()
        })
        .unwrap();
    }
    let path = dir.join(format!("dense-{dtype:?}"));
    w.write_atomic(&path).unwrap();
    Index::open(&path).unwrap()
}

/// Exact f32 brute force: full sort by (score desc, doc asc).
fn brute(c: &Corpus, q: &[f32], k: usize) -> Vec<Hit> {
    let mut all: Vec<Hit> = c
        .docs
        .iter()
        .enumerate()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(i, rows)| Hit {
            doc: i as u32,
            score: rows
                .iter()
                .map(|(w, v)| w * dot(q, v))
                .fold(f32::NEG_INFINITY, f32::max),
        })
        .collect();
    all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)));
    all.truncate(k);
    all
}

fn assert_same(got: &[Hit], want: &[Hit], tol: f32) {
    assert_eq!(got.len(), want.len());
    let gd: Vec<u32> = got.iter().map(|h| h.doc).collect();
    let wd: Vec<u32> = want.iter().map(|h| h.doc).collect();
    assert_eq!(gd, wd);
    for (g, w) in got.iter().zip(want) {
        assert!((g.score - w.score).abs() <= tol, "{g:?} vs {w:?}");
    }
}

#[test]
fn f32_topk_matches_brute_force_single_and_parallel() {
    let dir = tempfile::tempdir().unwrap();
    for multi in [false, true] {
        let c = random_corpus(3000, 48, 11 + multi as u64, multi);
        let mut idx = build(&c, 48, VectorDtype::F32, dir.path());
        let mut rng = Rng(99);
        for _ in 0..10 {
            let q = rng.unit_vec(48);
            for k in [1, 10, 57] {
                let want = brute(&c, &q, k);
                for threads in [1, 2, 3, 7] {
                    idx.set_search_config(SearchConfig {
                        threads,
                        parallel_min_rows: 1,
                    });
                    let got = idx.dense_search(&q, k).unwrap();
                    assert_same(&got, &want, 1e-5);
                }
            }
        }
        // k larger than the number of docs with rows.
        let q = rng.unit_vec(48);
        let got = idx.dense_search(&q, 100_000).unwrap();
        assert_eq!(got.len(), brute(&c, &q, usize::MAX).len());
        assert!(idx.dense_search(&q, 0).unwrap().is_empty());
    }
}

#[test]
fn i8_top1_and_recall_against_exact_f32() {
    let dim = 384;
    let dir = tempfile::tempdir().unwrap();
    let c = random_corpus(2000, dim, 3, false);
    let mut idx = build(&c, dim, VectorDtype::I8, dir.path());
    let mut rng = Rng(1234);
    let mut recall_sum = 0.0;
    let n_q = 30;
    for qi in 0..n_q {
        // Planted query: a noisy copy of one document, so top-1 is well defined.
        let target = rng.below(c.docs.len() as u64) as usize;
        let noise = rng.unit_vec(dim);
        let q = normalize(
            c.docs[target][0]
                .1
                .iter()
                .zip(&noise)
                .map(|(a, b)| a + 0.6 * b)
                .collect(),
        );
        let want = brute(&c, &q, 10);
        idx.set_search_config(SearchConfig {
            threads: 1 + qi % 2,
            parallel_min_rows: 1,
        });
        let got = idx.dense_search(&q, 10).unwrap();
        assert_eq!(got[0].doc, want[0].doc, "top-1 differs for query {qi}");
        assert!((got[0].score - want[0].score).abs() < 0.01);
        // Recall@10 on a pure random query (the hard case: flat score distribution).
        let rq = rng.unit_vec(dim);
        let want = brute(&c, &rq, 10);
        let got = idx.dense_search(&rq, 10).unwrap();
        let hits = got
            .iter()
            .filter(|h| want.iter().any(|w| w.doc == h.doc))
            .count();
        recall_sum += hits as f64 / 10.0;
    }
    let recall = recall_sum / n_q as f64;
    eprintln!("i8 recall@10 vs exact f32 on random queries: {recall:.3}");
    assert!(recall >= 0.9, "i8 recall@10 = {recall}");
}

fn basis(dim: usize, i: usize) -> Vec<f32> {
    let mut v = vec![0.0; dim];
    v[i] = 1.0;
    v
}

#[test]
fn multi_row_max_and_weights() {
    for dtype in [VectorDtype::F32, VectorDtype::I8] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mr");
        let mut w = IndexWriter::new(4, dtype, b"{}".to_vec()).unwrap();
        let row = |v: Vec<f32>, weight: f32| RowInput {
            key: [7; 16],
            weight,
            vector: v,
        };
        let docs = vec![
            // 0: A
            vec![row(basis(4, 0), 1.0), row(basis(4, 1), 0.5)],
            // 1: B
            vec![row(basis(4, 1), 0.8)],
            // 2: C (no rows)
            vec![],
            // 3: D
            vec![row(basis(4, 2), 2.0), row(basis(4, 1), 0.1)],
            // 4: E, identical to B -> tie broken by doc index
            vec![row(basis(4, 1), 0.8)],
        ];
        for (i, rows) in docs.into_iter().enumerate() {
            w.add(DocInput {
                id: format!("{i}"),
                rows,
                ..Default::default()
            })
            .unwrap();
        }
        w.write_atomic(&path).unwrap();
        let idx = Index::open(&path).unwrap();
        let tol = if dtype == VectorDtype::F32 {
            1e-6
        } else {
            1e-2
        };

        let hits = idx.dense_search(&basis(4, 1), 10).unwrap();
        let docs: Vec<u32> = hits.iter().map(|h| h.doc).collect();
        assert_eq!(docs, vec![1, 4, 0, 3], "{dtype:?}");
        for (h, s) in hits.iter().zip([0.8, 0.8, 0.5, 0.1]) {
            assert!((h.score - s).abs() < tol, "{h:?} want {s}");
        }

        let s = std::f32::consts::FRAC_1_SQRT_2;
        let q = normalize(vec![1.0, 1.0, 0.0, 0.0]);
        let hits = idx.dense_search(&q, 2).unwrap();
        assert_eq!(hits.iter().map(|h| h.doc).collect::<Vec<_>>(), vec![0, 1]);
        assert!((hits[0].score - s).abs() < tol);
        assert!((hits[1].score - 0.8 * s).abs() < tol);

        let scores = idx.dense_scores_for(&q, &[0, 2, 3]).unwrap();
        assert!((scores[0] - s).abs() < tol);
        assert_eq!(scores[1], f32::NEG_INFINITY);
        assert!((scores[2] - 0.1 * s).abs() < tol);

        // Query validation.
        assert!(matches!(
            idx.dense_search(&[1.0; 3], 1),
            Err(oap_index::IndexError::DimMismatch {
                expected: 4,
                got: 3
            })
        ));
        assert!(idx.dense_search(&[f32::NAN, 0.0, 0.0, 0.0], 1).is_err());
    }
}

#[test]
fn results_are_deterministic_under_ties() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ties");
    let mut w = IndexWriter::new(2, VectorDtype::F32, b"{}".to_vec()).unwrap();
    for i in 0..100 {
        w.add(DocInput {
            id: format!("{i:03}"),
            rows: vec![RowInput {
                key: [0; 16],
                weight: 1.0,
                vector: vec![1.0, 0.0],
            }],
            ..Default::default()
        })
        .unwrap();
    }
    w.write_atomic(&path).unwrap();
    let mut idx = Index::open(&path).unwrap();
    for threads in [1, 2, 4] {
        idx.set_search_config(SearchConfig {
            threads,
            parallel_min_rows: 1,
        });
        let hits = idx.dense_search(&[1.0, 0.0], 5).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.doc).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
    }
}

/// Resident bytes of this process's mappings of `path` (`/proc/self/smaps`).
fn resident_bytes_of(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut in_mapping = false;
    let mut kb = 0u64;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            in_mapping = line.trim_end().ends_with(name);
        } else if in_mapping && first == "Rss:" {
            kb += line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    kb * 1024
}

/// Opening checks every byte but leaves the vectors out of the process's
/// resident memory (a rebuild opens the new index while the old one still
/// serves); `prefault_vectors` then brings them in.
#[test]
fn open_leaves_the_vectors_unmapped_until_prefaulted() {
    let dir = tempfile::tempdir().unwrap();
    let (n_docs, dim) = (4_000, 256);
    let index = build(
        &random_corpus(n_docs, dim, 7, false),
        dim,
        VectorDtype::F32,
        dir.path(),
    );
    let path = dir.path().join("dense-F32");
    let vectors = (n_docs * dim * 4) as u64;
    let file = std::fs::metadata(&path).unwrap().len();
    assert!(vectors * 10 > file * 9, "the vectors are most of the file");
    let before = resident_bytes_of(&path);
    assert!(
        before < vectors / 4,
        "{before} bytes resident after open, the vectors are {vectors}"
    );
    index.prefault_vectors();
    let after = resident_bytes_of(&path);
    assert!(
        after >= vectors,
        "{after} bytes resident after prefaulting {vectors} bytes of vectors"
    );
    // Still the same index: searching works and finds a stored vector first.
    let q = index.row_at(0).unwrap().vector;
    assert_eq!(index.dense_search(&q, 1).unwrap()[0].doc, 0);
}
