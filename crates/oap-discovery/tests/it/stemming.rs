//! The lexical side's stemmer against the real model and the reference
//! manifests: a request meets a description that names the same thing with
//! another suffix ("remind" and "reminder"), and an index built with the
//! earlier recipe (the light suffix stripper) is rebuilt, not served with
//! terms that queries no longer produce.

use oap_discovery::{Engine, EngineConfig, Source};
use oap_index::Stemmer;

use crate::engine::{daemon_config, manifest_dir, Counting};

const REMINDER_REQUEST: &str = "remind me tomorrow at 9 to water the plants";

/// The reference manifests, every one of them.
fn reference_manifests() -> tempfile::TempDir {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/reference-manifests/oap-dev");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.len() > 20, "{names:?}");
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    manifest_dir(&names)
}

fn config(data: &std::path::Path, stemmer: Stemmer) -> EngineConfig {
    EngineConfig {
        stemmer,
        ..daemon_config(data)
    }
}

/// The reminder tool's word evidence for the request, and its rank.
fn reminder_evidence(engine: &Engine) -> (usize, f32) {
    let found = engine.discover(REMINDER_REQUEST, 10).unwrap();
    let rank = found
        .candidates
        .iter()
        .position(|c| c.name == "oap-reminder")
        .unwrap_or_else(|| panic!("oap-reminder not among {:?}", found.candidates));
    (rank, found.candidates[rank].scores.lexical)
}

#[test]
fn a_reminder_request_meets_the_reminder_tool_in_words_too() {
    let manifests = reference_manifests();
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = Engine::open(
        daemon_config(data.path()),
        vec![Source::Dir(manifests.path().into())],
        Some(Counting::new()),
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let found = engine.discover(REMINDER_REQUEST, 3).unwrap();
    let best = found.best.as_ref().map(|b| (b.name.as_str(), b.scores));
    assert_eq!(
        best.map(|b| b.0),
        Some("oap-reminder"),
        "{:?}",
        found
            .candidates
            .iter()
            .map(|c| (c.name.as_str(), c.scores))
            .collect::<Vec<_>>()
    );
    let (rank, lexical) = reminder_evidence(&engine);
    assert_eq!(rank, 0);
    assert!(lexical > 0.0, "no word of the request met the tool");
}

#[test]
fn an_index_built_with_the_light_stemmer_is_rebuilt_without_re_embedding() {
    let manifests = reference_manifests();
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];

    // The earlier recipe: "remind" and "reminder" stay two terms.
    let light = Counting::new();
    let (old, report) = Engine::open(
        config(data.path(), Stemmer::Light),
        sources(),
        Some(light.clone()),
    )
    .unwrap();
    assert!(!report.reused_index);
    assert!(light.embedded() > 0);
    let (_, light_lexical) = reminder_evidence(&old);
    drop(old);

    // The default stemmer finds that file built by another recipe: it
    // rebuilds the terms and keeps every vector (the texts are the same).
    let snowball = Counting::new();
    let (engine, report) = Engine::open(
        config(data.path(), Stemmer::Snowball),
        sources(),
        Some(snowball.clone()),
    )
    .unwrap();
    assert!(!report.reused_index, "the light stemmer's index was served");
    assert_eq!(
        snowball.embedded(),
        0,
        "vectors of unchanged texts are reused"
    );
    let (rank, lexical) = reminder_evidence(&engine);
    assert_eq!(rank, 0);
    assert!(
        lexical > light_lexical,
        "snowball {lexical} vs light {light_lexical}"
    );
    drop(engine);

    // Opened again with the same recipe, the file is mapped as it is.
    let (_, report) = Engine::open(
        config(data.path(), Stemmer::Snowball),
        sources(),
        Some(Counting::new()),
    )
    .unwrap();
    assert!(report.reused_index);
}
