//! "Nothing fits" against the bundled tools with the real model: a tool's
//! own kind of request finds it first, requests no bundled tool serves get
//! no match, and a short request naming one specific word of a tool (`wc`'s
//! "words") is matched although its cosine alone is below the threshold.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oap_discovery::{Engine, EngineConfig, Source};
use oap_embed::{Calibration, Embedder};

use crate::engine::Counting;

pub(crate) fn bundled_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/bundled");
    assert!(
        dir.is_dir(),
        "bundled manifests not found at {}",
        dir.display()
    );
    dir
}

/// A request of each bundled tool's own kind, and the tool.
pub(crate) const OWN_KIND: &[(&str, &str)] = &[
    ("what is 17 times 23", "bc"),
    ("align this text into neat columns", "column"),
    (
        "extract the third field from each line separated by commas",
        "cut",
    ),
    ("what is today's date", "date"),
    ("find the lines containing error in this log", "grep"),
    ("get the name field from this JSON", "jq"),
    ("show me the manual page for tar", "man"),
    ("merge these two lists side by side line by line", "paste"),
    (
        "replace every occurrence of foo with bar in this text",
        "sed",
    ),
    ("convert this text to uppercase", "tr"),
    ("how many words are in this sentence", "wc"),
];

/// Requests no bundled tool serves.
pub(crate) const NO_FIT: &[&str] = &[
    // Shares "table" with `column`: one word is not enough.
    "book a table for two at an italian restaurant tonight",
    "book me a flight to Lisbon next Tuesday",
    "turn on the kitchen lights",
    "what's the weather like in Paris tomorrow",
    "play some jazz in the living room",
    "send an email to my boss saying I'm late",
];

/// The candidates with their score parts, for failure messages.
fn listed(found: &oap_discovery::Discovery) -> Vec<(&str, oap_discovery::ScoreParts)> {
    found
        .candidates
        .iter()
        .map(|c| (c.name.as_str(), c.scores))
        .collect()
}

/// An engine over the bundled tools with these settings and this model.
pub(crate) fn open_bundled(config: EngineConfig, model: Arc<dyn Embedder>) -> Engine {
    let (engine, report) =
        Engine::open(config, vec![Source::Dir(bundled_dir())], Some(model)).expect("engine opens");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    engine
}

/// The bundled tools as the daemon serves them: with their shipped request
/// rows (attached here by name, since the test loads them from a directory
/// rather than from the binary).
fn bundled_engine(data: &Path) -> Engine {
    let mut config = crate::engine::daemon_config(data);
    config.request_rows = Some(bundled_request_rows());
    open_bundled(config, Counting::new())
}

/// The bundled tools' shipped request rows, for any origin.
pub(crate) fn bundled_request_rows() -> Arc<dyn oap_discovery::RequestRows> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/bundled-requests.json");
    let table = oap_discovery::RequestTable::load(&file, oap_discovery::AppliesTo::AnyOrigin)
        .unwrap_or_else(|e| panic!("{e}"));
    Arc::new(table)
}

#[test]
fn a_tools_own_kind_of_request_finds_it_first_and_matches() {
    let data = tempfile::tempdir().unwrap();
    let engine = bundled_engine(data.path());
    for &(query, tool) in OWN_KIND {
        let found = engine.discover(query, 3).unwrap();
        let best = found.best.as_ref().map(|b| (b.name.as_str(), b.score));
        assert_eq!(
            best.map(|b| b.0),
            Some(tool),
            "{query:?}: match {best:?}, candidates {:?}",
            listed(&found)
        );
    }
}

#[test]
fn requests_no_bundled_tool_serves_get_no_match() {
    let data = tempfile::tempdir().unwrap();
    let engine = bundled_engine(data.path());
    for &query in NO_FIT {
        let found = engine.discover(query, 3).unwrap();
        assert!(
            found.best.is_none(),
            "{query:?}: expected no match, got {:?} (threshold {})",
            found.best.map(|b| (b.name, b.scores)),
            found.meta.threshold
        );
        assert!(!found.candidates.is_empty(), "candidates are still listed");
    }
}

/// With the plain model (`embedding.tool_tuning: false`) and the scoring
/// the daemon takes for it, the same behaviours hold: every request of a
/// tool's own kind finds and matches its tool, no no-fit request matches.
#[test]
fn with_the_plain_model_every_pinned_behaviour_holds_too() {
    let model = crate::engine::plain_model();
    assert_eq!(model.calibration(), Calibration::General);
    let data = tempfile::tempdir().unwrap();
    let engine = open_bundled(crate::engine::plain_config(data.path()), model);
    for &(query, tool) in OWN_KIND {
        let found = engine.discover(query, 3).unwrap();
        let matched = found.best.as_ref().map(|b| b.name.as_str());
        assert_eq!(matched, Some(tool), "{query:?}: {:?}", listed(&found));
    }
    for &query in NO_FIT {
        let found = engine.discover(query, 3).unwrap();
        assert!(
            found.best.is_none(),
            "{query:?}: expected no match, got {:?}",
            found.best.map(|b| (b.name, b.scores))
        );
    }
}

/// The answer explains itself: every candidate's `score` is the number the
/// decision compares with `meta.threshold`, so `match` is set exactly when
/// the first candidate's score reaches it, and a candidate `fits` exactly
/// when its own score does. Checked over every request of the shared task
/// set and the no-fit requests above, which land on both sides of the line.
#[test]
fn the_reported_score_and_threshold_decide_the_match() {
    let data = tempfile::tempdir().unwrap();
    let engine = bundled_engine(data.path());
    let tasks_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/discovery-tasks.jsonl");
    let tasks = std::fs::read_to_string(&tasks_file).expect("shared task set");
    let mut queries: Vec<String> = tasks
        .lines()
        .map(|line| {
            let task: serde_json::Value = serde_json::from_str(line).expect("task line");
            task["query"].as_str().expect("query").to_string()
        })
        .collect();
    queries.extend(NO_FIT.iter().map(|q| q.to_string()));
    let (mut matched, mut abstained) = (0, 0);
    for query in &queries {
        let found = engine.discover(query, 5).unwrap();
        let threshold = found.meta.threshold;
        for candidate in &found.candidates {
            assert_eq!(
                candidate.fits,
                candidate.score >= threshold,
                "{query:?}: {} scores {} against {threshold}",
                candidate.id,
                candidate.score
            );
        }
        let first = found.candidates.first().expect("candidates are listed");
        assert_eq!(
            found.best.is_some(),
            first.score >= threshold,
            "{query:?}: first {} scores {} against {threshold}, match {:?}",
            first.id,
            first.score,
            found.best.as_ref().map(|b| &b.id)
        );
        if let Some(best) = &found.best {
            assert_eq!(best.id, first.id);
            matched += 1;
        } else {
            abstained += 1;
        }
    }
    // Both sides of the threshold were exercised.
    assert!(
        matched > 100 && abstained >= NO_FIT.len(),
        "{matched} matched, {abstained} abstained"
    );
}
