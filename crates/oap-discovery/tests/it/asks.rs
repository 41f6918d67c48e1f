//! A request with several asks, against the bundled tools with the real
//! model: each ask's tool is listed and matched, the asks are embedded
//! in one batch and remembered by the query cache, and a request with one
//! ask is ranked as before.

use std::sync::Arc;

use oap_discovery::Engine;

use crate::abstention::open_bundled;
use crate::engine::Counting;

fn engine(data: &std::path::Path, split_asks: bool) -> (Engine, Arc<Counting>) {
    let model = Counting::new();
    let mut config = crate::engine::daemon_config(data);
    config.scoring.query.split_asks = split_asks;
    // The bundled tools as the daemon serves them, request rows included.
    config.request_rows = Some(crate::abstention::bundled_request_rows());
    (open_bundled(config, model.clone()), model)
}

/// Requests with two asks whose tools, ranked as one text, are not both
/// listed as fitting in the top three (`without_splitting_...` checks).
const TWO_ASKS: [(&str, [&str; 2]); 2] = [
    (
        "What is today's date? Also, how many words are in this sentence",
        ["date", "wc"],
    ),
    // "... and then replace every occurrence of foo with bar" served
    // here until the Snowball stemmer let "replace" meet sed's
    // "replacement": ranked as one text it now lists sed too.
    (
        "align this text into neat columns and then find the lines containing error",
        ["column", "grep"],
    ),
];

fn fits_in_top(engine: &Engine, found: &oap_discovery::Discovery, tool: &str) -> bool {
    let scoring = &engine.config().scoring;
    found
        .candidates
        .iter()
        .any(|c| c.name == tool && scoring.accepts(found.meta.mode, &c.scores))
}

fn names(found: &oap_discovery::Discovery) -> Vec<&str> {
    found.candidates.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn each_ask_of_a_request_gets_its_fitting_tool_listed_and_matched() {
    let data = tempfile::tempdir().unwrap();
    let (engine, model) = engine(data.path(), true);
    for (request, tools) in TWO_ASKS {
        let before = model.embedded();
        let found = engine.discover(request, 3).unwrap();
        assert_eq!(
            found.meta.asks.len(),
            2,
            "{request:?}: {:?}",
            found.meta.asks
        );
        assert_eq!(
            model.embedded() - before,
            3,
            "{request:?}: the request and its two asks, embedded once each"
        );
        for tool in tools {
            assert!(
                fits_in_top(&engine, &found, tool),
                "{request:?}: {tool} not listed as fitting among {:?}",
                names(&found)
            );
        }
        assert!(found.best.is_some(), "{request:?}: no match");

        // The same request again: every vector from the query cache.
        let before = model.embedded();
        let again = engine.discover(request, 3).unwrap();
        assert_eq!(model.embedded(), before, "{request:?}: embedded again");
        assert_eq!(names(&again), names(&found));
    }
}

#[test]
fn without_splitting_the_second_ask_is_crowded_out() {
    // What the split is for: ranked as one text by the plain encoder, each
    // of these requests lacks one of its two tools among the fitting top
    // three (checked so the test above means something).
    let data = tempfile::tempdir().unwrap();
    let mut config = crate::engine::plain_config(data.path());
    config.scoring.query.split_asks = false;
    let engine = open_bundled(config, crate::engine::plain_model());
    for (request, tools) in TWO_ASKS {
        let found = engine.discover(request, 3).unwrap();
        assert!(found.meta.asks.is_empty());
        assert!(
            !tools.iter().all(|tool| fits_in_top(&engine, &found, tool)),
            "{request:?}: both fit without the split: {:?}; pick a request that needs it",
            names(&found)
        );
    }
}

#[test]
fn a_request_with_one_ask_is_ranked_as_before() {
    let split = tempfile::tempdir().unwrap();
    let whole = tempfile::tempdir().unwrap();
    let (with, _) = engine(split.path(), true);
    let (without, _) = engine(whole.path(), false);
    for request in [
        "find the lines containing error and warning in this log",
        "I'm looking at a log file. Can you find the lines with error for me?",
        "book a table for two at an italian restaurant tonight",
    ] {
        let a = with.discover(request, 5).unwrap();
        let b = without.discover(request, 5).unwrap();
        assert!(a.meta.asks.is_empty(), "{request:?}: {:?}", a.meta.asks);
        assert_eq!(names(&a), names(&b), "{request:?}");
        assert_eq!(
            a.best.map(|c| c.name),
            b.best.map(|c| c.name),
            "{request:?}"
        );
    }
}
