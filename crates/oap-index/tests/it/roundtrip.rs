use oap_index::{DocInput, Index, IndexError, IndexWriter, RowInput, VectorDtype};

use crate::common::{meta, small_corpus, Rng};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn index_is_send_sync() {
    assert_send_sync::<Index>();
}

fn check_round_trip(dtype: VectorDtype) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.oapi");
    let (w, docs) = small_corpus(dtype, 8, 7);
    let stats = w.write_atomic(&path).unwrap();
    assert!(stats.dir_synced);
    assert_eq!(stats.docs as usize, docs.len());
    assert!(!dir.path().join("index.oapi.tmp").exists());

    let idx = Index::open(&path).unwrap();
    assert_eq!(idx.len(), docs.len());
    assert_eq!(idx.dim(), 8);
    assert_eq!(idx.dtype(), dtype);
    assert_eq!(idx.rows(), docs.iter().map(|d| d.rows.len()).sum::<usize>());
    assert_eq!(idx.meta(), &meta()[..]);
    assert_eq!(idx.meta_json().unwrap()["model"], "test-model");
    assert_eq!(idx.file_len(), std::fs::metadata(&path).unwrap().len());
    assert_eq!(idx.file_len(), stats.bytes);

    for (i, d) in docs.iter().enumerate() {
        let i = i as u32;
        assert_eq!(idx.doc_id(i), Some(d.id.as_str()));
        assert_eq!(idx.record(i), Some(&d.record[..]));
        assert_eq!(idx.find(&d.id), Some(i));
        let rows: Vec<_> = idx.rows_of(i).collect();
        assert_eq!(rows.len(), d.rows.len());
        assert_eq!(idx.rows_of(i).len(), d.rows.len());
        for (got, want) in rows.iter().zip(&d.rows) {
            assert_eq!(got.key, want.key);
            assert_eq!(got.weight, want.weight);
            match dtype {
                VectorDtype::F32 => assert_eq!(got.vector, want.vector),
                VectorDtype::I8 => {
                    let max = want.vector.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let tol = max / 127.0 * 0.5 + 1e-6;
                    for (a, b) in got.vector.iter().zip(&want.vector) {
                        assert!((a - b).abs() <= tol, "{a} vs {b} (tol {tol})");
                    }
                }
            }
        }
    }
    // The whole-index row view agrees with the per-document one.
    let per_doc: Vec<_> = (0..docs.len() as u32)
        .flat_map(|i| idx.rows_of(i))
        .collect();
    let keys: Vec<_> = idx.row_keys().collect();
    assert_eq!(keys.len(), idx.rows());
    for (r, row) in per_doc.iter().enumerate() {
        assert_eq!(keys[r], row.key);
        assert_eq!(idx.row_at(r).as_ref(), Some(row));
    }
    assert_eq!(idx.row_at(idx.rows()), None);

    let n = docs.len() as u32;
    assert_eq!(idx.doc_id(n), None);
    assert_eq!(idx.record(n), None);
    assert_eq!(idx.rows_of(n).count(), 0);
    assert_eq!(idx.find("nope"), None);
    assert_eq!(idx.find(""), None);
    assert_eq!(idx.find("tool-1"), None);
}

#[test]
fn round_trip_f32() {
    check_round_trip(VectorDtype::F32);
}

#[test]
fn round_trip_i8() {
    check_round_trip(VectorDtype::I8);
}

#[test]
fn find_on_many_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i");
    let mut w = IndexWriter::new(2, VectorDtype::F32, b"{}".to_vec()).unwrap();
    let mut rng = Rng(5);
    let mut ids = Vec::new();
    for i in 0..500 {
        let id = format!("{:x}/{}", rng.next_u64(), "é".repeat(i % 3));
        ids.push(id.clone());
        w.add(DocInput {
            id,
            ..Default::default()
        })
        .unwrap();
    }
    w.write_atomic(&path).unwrap();
    let idx = Index::open(&path).unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(idx.find(id), Some(i as u32));
        assert_eq!(idx.find(&format!("{id}x")), None);
    }
}

#[test]
fn empty_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty");
    let w = IndexWriter::new(16, VectorDtype::I8, b"null".to_vec()).unwrap();
    assert!(w.is_empty());
    w.write_atomic(&path).unwrap();
    let idx = Index::open(&path).unwrap();
    assert!(idx.is_empty());
    assert_eq!(idx.rows(), 0);
    assert_eq!(idx.terms(), 0);
    assert_eq!(idx.dense_search(&[0.25; 16], 10).unwrap(), vec![]);
    assert_eq!(idx.lexical_search(&["x"], 10), vec![]);
    assert_eq!(idx.find("a"), None);
    assert_eq!(idx.doc_id(0), None);
    assert_eq!(idx.meta(), b"null");
}

#[test]
fn docs_without_rows_or_terms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse");
    let mut w = IndexWriter::new(3, VectorDtype::F32, b"{}".to_vec()).unwrap();
    w.add(DocInput {
        id: "a".into(),
        ..Default::default()
    })
    .unwrap();
    w.add(DocInput {
        id: "b".into(),
        rows: vec![RowInput {
            key: [1; 16],
            weight: 1.0,
            vector: vec![1.0, 0.0, 0.0],
        }],
        ..Default::default()
    })
    .unwrap();
    w.write_atomic(&path).unwrap();
    let idx = Index::open(&path).unwrap();
    let hits = idx.dense_search(&[1.0, 0.0, 0.0], 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].doc, 1);
    assert_eq!(
        idx.dense_scores_for(&[1.0, 0.0, 0.0], &[0, 1, 9]).unwrap(),
        vec![f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY]
    );
    assert!(idx.lexical_search(&["a"], 3).is_empty());
}

#[test]
fn not_found() {
    let dir = tempfile::tempdir().unwrap();
    match Index::open(dir.path().join("missing")) {
        Err(IndexError::NotFound { path }) => assert!(path.ends_with("missing")),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[test]
fn writer_rejects_bad_input_and_stays_unchanged() {
    let row = |v: Vec<f32>, w: f32| RowInput {
        key: [0; 16],
        weight: w,
        vector: v,
    };
    assert!(matches!(
        IndexWriter::new(0, VectorDtype::F32, b"{}".to_vec()),
        Err(IndexError::InvalidInput { .. })
    ));
    assert!(matches!(
        IndexWriter::new(4, VectorDtype::F32, b"{not json".to_vec()),
        Err(IndexError::InvalidInput { .. })
    ));
    assert!(matches!(
        IndexWriter::new(4, VectorDtype::F32, vec![b' '; oap_index::MAX_META_LEN + 1]),
        Err(IndexError::TooLarge { what: "meta", .. })
    ));
    let mut w = IndexWriter::new(4, VectorDtype::F32, b"{}".to_vec()).unwrap();
    w.add(DocInput {
        id: "x".into(),
        ..Default::default()
    })
    .unwrap();
    let cases: Vec<(DocInput, &str)> = vec![
        (
            DocInput {
                id: "x".into(),
                ..Default::default()
            },
            "duplicate",
        ),
        (DocInput::default(), "empty"),
        (
            DocInput {
                id: "i".repeat(oap_index::MAX_ID_LEN + 1),
                ..Default::default()
            },
            "above the cap",
        ),
        (
            DocInput {
                id: "r".into(),
                record: vec![0; oap_index::MAX_RECORD_LEN + 1],
                ..Default::default()
            },
            "record",
        ),
        (
            DocInput {
                id: "d".into(),
                rows: vec![row(vec![1.0; 3], 1.0)],
                ..Default::default()
            },
            "dimension mismatch",
        ),
        (
            DocInput {
                id: "n".into(),
                rows: vec![row(vec![1.0, f32::NAN, 0.0, 0.0], 1.0)],
                ..Default::default()
            },
            "not finite",
        ),
        (
            DocInput {
                id: "w".into(),
                rows: vec![row(vec![1.0, 0.0, 0.0, 0.0], -1.0)],
                ..Default::default()
            },
            "weight",
        ),
        (
            DocInput {
                id: "t".into(),
                lexical: vec![(String::new(), 1.0)],
                ..Default::default()
            },
            "empty lexical term",
        ),
        (
            DocInput {
                id: "t2".into(),
                lexical: vec![("ok".into(), f32::INFINITY)],
                ..Default::default()
            },
            "weight",
        ),
        (
            DocInput {
                id: "t3".into(),
                lexical: vec![("x".repeat(oap_index::MAX_TERM_LEN + 1), 1.0)],
                ..Default::default()
            },
            "term",
        ),
    ];
    for (doc, needle) in cases {
        let err = w.add(doc).unwrap_err();
        assert!(
            err.to_string().contains(needle),
            "error {err} should mention {needle}"
        );
    }
    assert_eq!(w.len(), 1);
    assert_eq!(w.rows(), 0);
}
