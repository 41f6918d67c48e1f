//! Vector donors: an index built elsewhere (a signed snapshot, a shard of
//! a distributed build) gives its vectors to a build for the same texts,
//! so the board embeds only what the donor lacks, and the vectors it
//! takes are the donor's, bit for bit.

use std::path::Path;

use oap_discovery::engine::INDEX_FILE;
use oap_discovery::{Engine, EngineConfig, Source};

use crate::engine::{daemon_config, manifest_dir, Counting};

fn rows_of(index_file: &Path, id: &str) -> Vec<oap_index::RowRef> {
    let index = oap_index::Index::open(index_file).unwrap();
    let doc = (0..index.len() as u32)
        .find(|&doc| index.doc_id(doc) == Some(id))
        .unwrap_or_else(|| panic!("{id} not in {}", index_file.display()));
    index.rows_of(doc).collect()
}

fn with_donors(data: &Path, donors: Vec<std::path::PathBuf>) -> EngineConfig {
    EngineConfig {
        vector_donors: donors,
        ..daemon_config(data)
    }
}

#[test]
fn a_build_takes_the_donors_vectors_and_embeds_only_what_they_lack() {
    // The donor: three tools, embedded elsewhere.
    let donor_manifests = manifest_dir(&["grep", "wc", "jq"]);
    let donor_data = tempfile::tempdir().unwrap();
    let (_, donor_report) = Engine::open(
        daemon_config(donor_data.path()),
        vec![Source::Dir(donor_manifests.path().into())],
        Some(Counting::new()),
    )
    .unwrap();
    let donor_file = donor_data.path().join(INDEX_FILE);

    // The board: the same three and one more.
    let board_manifests = manifest_dir(&["grep", "wc", "jq", "date"]);
    let board_data = tempfile::tempdir().unwrap();
    let embedder = Counting::new();
    let (engine, report) = Engine::open(
        with_donors(board_data.path(), vec![donor_file.clone()]),
        vec![Source::Dir(board_manifests.path().into())],
        Some(embedder.clone()),
    )
    .unwrap();
    assert_eq!(report.reused_rows, donor_report.rows, "{report:?}");
    assert_eq!(
        embedder.embedded(),
        report.rows - donor_report.rows,
        "{report:?}"
    );
    assert!(embedder.embedded() > 0, "date's rows are embedded here");
    for id in ["local/grep", "local/wc", "local/jq"] {
        let taken = rows_of(&board_data.path().join(INDEX_FILE), id);
        let given = rows_of(&donor_file, id);
        assert_eq!(taken.len(), given.len(), "{id}");
        for (taken, given) in taken.iter().zip(&given) {
            assert_eq!(taken.key, given.key, "{id}");
            assert_eq!(
                taken.vector, given.vector,
                "{id}: the donor's vector, bit for bit"
            );
        }
    }
    let found = engine
        .discover("count the words in this paragraph", 3)
        .unwrap();
    assert_eq!(found.candidates[0].name, "wc", "{found:?}");
}

#[test]
fn a_donor_of_another_model_or_one_that_cannot_be_opened_gives_nothing() {
    let manifests = manifest_dir(&["grep", "wc"]);
    let sources = || vec![Source::Dir(manifests.path().into())];
    let other_data = tempfile::tempdir().unwrap();
    let other = Counting::renamed("another-model@0000");
    Engine::open(daemon_config(other_data.path()), sources(), Some(other)).unwrap();
    let broken = tempfile::tempdir().unwrap();
    let broken_file = broken.path().join(INDEX_FILE);
    std::fs::write(&broken_file, b"not an index").unwrap();

    let data = tempfile::tempdir().unwrap();
    let embedder = Counting::new();
    let donors = vec![
        other_data.path().join(INDEX_FILE),
        broken_file,
        broken.path().join("missing.oapx"),
    ];
    let (_, report) = Engine::open(
        with_donors(data.path(), donors),
        sources(),
        Some(embedder.clone()),
    )
    .unwrap();
    assert_eq!(
        report.reused_rows, 0,
        "another model's vectors are never taken"
    );
    assert_eq!(embedder.embedded(), report.rows);
}
