//! The index file read back after a crash or a bad disk: arbitrary bytes,
//! or (first byte odd) a valid file written by the writer from generated
//! documents and then damaged at chosen offsets. Invariants: opening
//! detects damage and never panics or reads out of bounds; an index that
//! opens answers every accessor and search with rows, documents and hits
//! inside the file (hit docs < len, row vectors of the index's dimension).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use oap_index::{DocInput, Index, IndexWriter, RowInput, VectorDtype};

#[derive(Debug)]
enum Input {
    Raw(Vec<u8>),
    Damaged {
        dim: usize,
        dtype: VectorDtype,
        docs: Vec<DocInput>,
        damage: Vec<(u32, u8)>,
        truncate: Option<u32>,
    },
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        if !u.arbitrary::<bool>()? {
            return Ok(Input::Raw(u.arbitrary()?));
        }
        let dim = u.int_in_range(1..=8)?;
        let dtype = if u.arbitrary()? {
            VectorDtype::F32
        } else {
            VectorDtype::I8
        };
        let mut docs = Vec::new();
        for d in 0..u.int_in_range(0..=5)? {
            let mut rows = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                let mut vector = Vec::with_capacity(dim);
                for _ in 0..dim {
                    vector.push(f32::from(u.int_in_range(-100i8..=100)?) / 100.0);
                }
                let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    vector.iter_mut().for_each(|x| *x /= norm);
                }
                rows.push(RowInput {
                    key: u.arbitrary()?,
                    weight: f32::from(u.int_in_range(0u8..=4)?) / 2.0,
                    vector,
                });
            }
            let mut lexical = Vec::new();
            for _ in 0..u.int_in_range(0..=4)? {
                lexical.push((
                    (*u.choose(&["weather", "time", "city", "a"])?).to_string(),
                    1.0,
                ));
            }
            docs.push(DocInput {
                id: format!("doc{d}"),
                record: u.arbitrary()?,
                rows,
                lexical,
            });
        }
        Ok(Input::Damaged {
            dim,
            dtype,
            docs,
            damage: u.arbitrary()?,
            truncate: u.arbitrary()?,
        })
    }
}

fuzz_target!(|input: Input| {
    let path = oap_fuzz::scratch().join("fuzz.idx");
    let bytes = match input {
        Input::Raw(bytes) => bytes,
        Input::Damaged {
            dim,
            dtype,
            docs,
            damage,
            truncate,
        } => {
            let Ok(mut writer) = IndexWriter::new(dim, dtype, b"{}".to_vec()) else {
                return;
            };
            for doc in docs {
                if writer.add(doc).is_err() {
                    return;
                }
            }
            writer.write_atomic(&path).unwrap();
            let mut bytes = std::fs::read(&path).unwrap();
            // The file as written opens.
            check(&path);
            for (at, xor) in damage {
                if !bytes.is_empty() {
                    let at = at as usize % bytes.len();
                    bytes[at] ^= xor;
                }
            }
            if let Some(len) = truncate {
                bytes.truncate(len as usize % (bytes.len() + 1));
            }
            bytes
        }
    };
    std::fs::write(&path, &bytes).unwrap();
    check(&path);
});

fn check(path: &std::path::Path) {
    let Ok(index) = Index::open(path) else { return };
    let len = index.len();
    let dim = index.dim();
    assert!(dim > 0);
    assert!(index.file_len() as usize >= index.meta().len());
    let _ = index.meta_json();
    let mut rows = 0;
    for doc in 0..len as u32 {
        let id = index.doc_id(doc).expect("every doc below len has an id");
        assert_eq!(
            index.find(id).map(|d| index.doc_id(d) == Some(id)),
            Some(true)
        );
        let _ = index.record(doc).expect("every doc below len has a record");
        for row in index.rows_of(doc) {
            assert_eq!(row.vector.len(), dim);
            rows += 1;
        }
    }
    assert!(
        rows <= index.rows(),
        "{rows} rows read, {} in the header",
        index.rows()
    );
    assert!(index.doc_id(len as u32).is_none() && index.record(len as u32).is_none());
    for r in 0..index.rows() {
        let row = index.row_at(r).expect("every row below rows() is readable");
        assert_eq!(row.vector.len(), dim);
    }
    assert!(index.row_at(index.rows()).is_none());
    let query: Vec<f32> = (0..dim).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
    if let Ok(hits) = index.dense_search(&query, 10) {
        assert!(hits.len() <= 10 && hits.iter().all(|h| (h.doc as usize) < len));
    }
    let hits = index.lexical_search(&["weather", "a", "zzz"], 10);
    assert!(hits.len() <= 10 && hits.iter().all(|h| (h.doc as usize) < len));
    let docs: Vec<u32> = (0..len as u32).collect();
    if let Ok(scores) = index.dense_scores_for(&query, &docs) {
        assert_eq!(scores.len(), len);
    }
    assert_eq!(index.bm25_scores_for(&["weather"], &docs).len(), len);
    let _ = index.doc_freq("weather");
    let _ = index.row_keys().count();
}
