use oap_index::{DocInput, Index, IndexError, IndexWriter, VectorDtype};

use crate::common::write_small;

fn one_doc_writer(id: &str) -> IndexWriter {
    let mut w = IndexWriter::new(8, VectorDtype::F32, br#"{"gen":2}"#.to_vec()).unwrap();
    w.add(DocInput {
        id: id.into(),
        record: b"new".to_vec(),
        ..Default::default()
    })
    .unwrap();
    w
}

#[test]
fn old_mapping_stays_readable_after_rename_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let docs = write_small(&path, VectorDtype::F32);
    let old = Index::open(&path).unwrap();
    let before = old
        .dense_search(&[1.0, 0., 0., 0., 0., 0., 0., 0.], 5)
        .unwrap();

    let stats = one_doc_writer("only").write_atomic(&path).unwrap();
    assert!(stats.dir_synced, "directory fsync path must run");
    assert!(!dir.path().join("index.tmp").exists());

    // The old map still sees the old inode, byte for byte.
    assert_eq!(old.len(), docs.len());
    assert_eq!(old.doc_id(0), Some(docs[0].id.as_str()));
    assert_eq!(old.record(1), Some(&docs[1].record[..]));
    assert_eq!(
        old.dense_search(&[1.0, 0., 0., 0., 0., 0., 0., 0.], 5)
            .unwrap(),
        before
    );
    // A fresh open sees the new file.
    let new = Index::open(&path).unwrap();
    assert_eq!(new.len(), 1);
    assert_eq!(new.doc_id(0), Some("only"));
    assert_eq!(new.meta(), br#"{"gen":2}"#);
}

#[test]
fn failed_write_leaves_old_file_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let docs = write_small(&path, VectorDtype::F32);
    let before = std::fs::read(&path).unwrap();

    // Make the temp path unusable: a directory where the writer wants its file.
    let tmp = dir.path().join("index.tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(tmp.join("keep"), b"x").unwrap();
    match one_doc_writer("only").write_atomic(&path) {
        Err(IndexError::Io { op, path: p, .. }) => {
            assert_eq!(op, "creating");
            assert_eq!(p, tmp);
        }
        other => panic!("expected Io error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(
        tmp.join("keep").exists(),
        "writer must not delete a directory"
    );
    let idx = Index::open(&path).unwrap();
    assert_eq!(idx.len(), docs.len());

    // Once the obstacle is gone, writing works and replaces the file.
    std::fs::remove_dir_all(&tmp).unwrap();
    one_doc_writer("only").write_atomic(&path).unwrap();
    assert_eq!(Index::open(&path).unwrap().len(), 1);
}

#[test]
fn write_into_missing_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/index");
    assert!(matches!(
        one_doc_writer("a").write_atomic(&path),
        Err(IndexError::Io { .. })
    ));
    assert!(one_doc_writer("a")
        .write_atomic(dir.path().join(".."))
        .is_err());
}

#[test]
fn stale_tmp_file_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    std::fs::write(dir.path().join("index.tmp"), vec![0xAB; 100_000]).unwrap();
    one_doc_writer("z").write_atomic(&path).unwrap();
    assert!(!dir.path().join("index.tmp").exists());
    assert_eq!(Index::open(&path).unwrap().doc_id(0), Some("z"));
}
