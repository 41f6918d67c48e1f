//! Arithmetic said in words finds the calculator among the bundled tools,
//! and matches it: the number and operator words are replaced by the
//! expression's shape, as inline data is.

use oap_discovery::query;

use crate::abstention::open_bundled;
use crate::engine::{daemon_config, plain_config, plain_model, Counting};

const SPOKEN: &[&str] = &[
    "what is fifteen percent of eighty",
    "hey, what's twelve times thirty four",
    "what's the square root of one hundred and forty four",
    "what is half of a hundred and twenty",
    "nine squared minus seven",
];

fn assert_bc_matches(engine: &oap_discovery::Engine) {
    for &request in SPOKEN {
        let found = engine.discover(request, 3).unwrap();
        let listed: Vec<_> = found
            .candidates
            .iter()
            .map(|c| (c.name.as_str(), c.scores))
            .collect();
        assert_eq!(found.candidates[0].name, "bc", "{request:?}: {listed:?}");
        assert_eq!(
            found.best.as_ref().map(|b| b.name.as_str()),
            Some("bc"),
            "{request:?}: nothing fits (threshold {}): {listed:?}",
            found.meta.threshold
        );
    }
}

#[test]
fn arithmetic_said_in_words_finds_and_matches_bc() {
    let data = tempfile::tempdir().unwrap();
    let engine = open_bundled(daemon_config(data.path()), Counting::new());
    assert_bc_matches(&engine);
}

#[test]
fn with_the_plain_model_too() {
    let data = tempfile::tempdir().unwrap();
    let engine = open_bundled(plain_config(data.path()), plain_model());
    assert_bc_matches(&engine);
}

#[test]
fn the_spoken_expression_is_cut_out_of_both_views() {
    let views = query::views("what is fifteen percent of eighty");
    assert_eq!(views.shapes, [query::DataShape::Arithmetic]);
    for view in [&views.dense, &views.lexical] {
        for word in ["fifteen", "percent", "eighty"] {
            assert!(!view.contains(word), "{word} in {view:?}");
        }
        assert!(
            view.contains(query::DataShape::Arithmetic.words()),
            "{view:?}"
        );
    }
    // Nothing left but the data: the shape is the whole query.
    let views = query::views("twelve times thirty-four");
    assert_eq!(views.dense, query::DataShape::Arithmetic.words());
    // "three times a day" is no arithmetic: it stays as it is.
    let views = query::views("take the pills three times a day");
    assert!(views.shapes.is_empty());
    assert_eq!(views.dense, "take the pills three times a day");
}
