//! The cache of recent query embeddings: a repeated query text does not run
//! the encoder again, the cache stays within its bound, and 0 turns it off.

use std::sync::Arc;

use oap_discovery::{Engine, Source};
use oap_embed::Embedder;

use crate::engine::{manifest_dir, Counting, CLI};

fn engine_with(
    cache: usize,
    model: Arc<Counting>,
) -> (Engine, tempfile::TempDir, tempfile::TempDir) {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let mut config = crate::engine::daemon_config(data.path());
    config.query_cache = cache;
    let (engine, _) = Engine::open(
        config,
        vec![Source::Dir(manifests.path().into())],
        Some(model),
    )
    .unwrap();
    (engine, manifests, data)
}

#[test]
fn a_repeated_query_skips_the_encoder_and_finds_the_same() {
    let model = Counting::new();
    let (engine, _m, _d) = engine_with(256, model.clone());
    let before = model.embedded();
    let first = engine
        .discover("count the words in this paragraph", 3)
        .unwrap();
    assert_eq!(model.embedded(), before + 1, "the first query is embedded");
    let second = engine
        .discover("count the words in this paragraph", 3)
        .unwrap();
    assert_eq!(
        model.embedded(),
        before + 1,
        "the repeat comes from the cache"
    );
    assert_eq!(
        first.best.as_ref().map(|b| &b.id),
        second.best.as_ref().map(|b| &b.id)
    );
    let scores = |d: &oap_discovery::Discovery| {
        d.candidates
            .iter()
            .map(|c| (c.id.clone(), c.score))
            .collect::<Vec<_>>()
    };
    assert_eq!(scores(&first), scores(&second), "same vector, same ranking");
    // The vector handed out for the experience lookup is the cached one too.
    let vector = engine
        .query_vector("count the words in this paragraph")
        .unwrap()
        .unwrap();
    assert_eq!(model.embedded(), before + 1);
    assert_eq!(vector.len(), model.dim());
    // Another text is embedded.
    engine.discover("what is 17 times 23?", 3).unwrap();
    assert_eq!(model.embedded(), before + 2);
}

#[test]
fn the_cache_evicts_within_its_bound() {
    let model = Counting::new();
    let (engine, _m, _d) = engine_with(2, model.clone());
    let before = model.embedded();
    let tasks = [
        "count words",
        "sort lines",
        "what time is it",
        "compute 2+2",
    ];
    for t in tasks {
        engine.discover(t, 1).unwrap();
    }
    assert_eq!(model.embedded(), before + 4);
    // Two entries at most: of the four texts at least two were evicted, so
    // asking for all four again embeds at least two of them.
    let mid = model.embedded();
    for t in tasks {
        engine.discover(t, 1).unwrap();
    }
    assert!(
        model.embedded() - mid >= 2,
        "only {} of 4 re-embedded with room for 2",
        model.embedded() - mid
    );
}

#[test]
fn zero_disables_the_cache() {
    let model = Counting::new();
    let (engine, _m, _d) = engine_with(0, model.clone());
    let before = model.embedded();
    for _ in 0..3 {
        engine
            .discover("count the words in this paragraph", 3)
            .unwrap();
    }
    assert_eq!(model.embedded(), before + 3);
}
