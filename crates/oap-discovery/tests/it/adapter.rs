//! The query adapter inside the engine, with the real model: it changes
//! query vectors exactly as its formula says, never touches the index, and
//! an adapter of another model is refused with the vectors left alone.

use std::sync::Arc;

use oap_discovery::{query, Engine, QueryAdapter, Source};
use oap_embed::Embedder;

use crate::engine::{manifest_dir, Counting, CLI};

const HALF_ONE: [u8; 2] = 0x3c00u16.to_le_bytes(); // 1.0 as f16
const HALF_HALF: [u8; 2] = 0x3800u16.to_le_bytes(); // 0.5 as f16

/// A rank-1 adapter `q + 0.5 * q[1] * e0`: U = e0, V = 0.5 e1.
fn adapter_file(dir: &std::path::Path, model: &str, dim: usize) -> std::path::PathBuf {
    let mut bytes = b"OAPQADP1".to_vec();
    bytes.extend((dim as u32).to_le_bytes());
    bytes.extend(1u32.to_le_bytes());
    bytes.extend((model.len() as u32).to_le_bytes());
    bytes.extend(model.as_bytes());
    for i in 0..dim {
        bytes.extend(if i == 0 { HALF_ONE } else { [0, 0] });
    }
    for i in 0..dim {
        bytes.extend(if i == 1 { HALF_HALF } else { [0, 0] });
    }
    let path = dir.join("test.oqa");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn model_hash(id: &str) -> String {
    id.rsplit_once('@').unwrap().1.to_string()
}

#[test]
fn an_adapter_changes_query_vectors_as_its_formula_says_and_not_the_index() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let model = Counting::new();
    let sources = vec![Source::Dir(manifests.path().to_path_buf())];
    let task = "count the words in a file";

    let (plain, _) = Engine::open(
        crate::engine::daemon_config(data.path()),
        sources.clone(),
        Some(model.clone()),
    )
    .unwrap();
    let raw = plain.query_vector(task).unwrap().unwrap();
    assert!(plain.query_adapter().is_none());
    drop(plain);

    let file = adapter_file(data.path(), &model_hash(model.model_id()), model.dim());
    let adapter = QueryAdapter::load(&file).unwrap();
    let mut config = crate::engine::daemon_config(data.path());
    config.query_adapter = Some(Arc::new(adapter));
    let before = model.embedded();
    let (adapted, report) = Engine::open(config, sources, Some(model.clone())).unwrap();
    assert!(
        report.reused_index,
        "the adapter must not rebuild the index"
    );
    assert_eq!(model.embedded(), before, "no manifest re-embedded");
    assert_eq!(adapted.query_adapter().unwrap().rank(), 1);

    let got = adapted.query_vector(task).unwrap().unwrap();
    // Expected: normalise(q + 0.5 q[1] e0), computed here independently.
    let direct = model.embed_one(&query::views(task).dense).unwrap();
    assert_eq!(direct, raw);
    let mut want = direct.clone();
    want[0] += 0.5 * direct[1];
    let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
    want.iter_mut().for_each(|x| *x /= norm);
    assert_ne!(got, raw, "the adapter changed nothing");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{g} != {w}");
    }
    // Discovery still answers through the adapted vector.
    assert_eq!(adapted.discover(task, 3).unwrap().candidates[0].name, "wc");
}

#[test]
fn an_adapter_of_another_model_is_dropped_and_vectors_stay_as_they_were() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let model = Counting::new();
    let file = adapter_file(data.path(), "0000000000000000", model.dim());
    let mut config = crate::engine::daemon_config(data.path());
    config.query_adapter = Some(Arc::new(QueryAdapter::load(&file).unwrap()));
    let (engine, _) = Engine::open(
        config,
        vec![Source::Dir(manifests.path().to_path_buf())],
        Some(model.clone()),
    )
    .unwrap();
    assert!(engine.query_adapter().is_none());
    let task = "count the words in a file";
    let direct = model.embed_one(&query::views(task).dense).unwrap();
    assert_eq!(engine.query_vector(task).unwrap().unwrap(), direct);
}

#[test]
fn a_missing_or_malformed_adapter_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.oqa");
    let err = QueryAdapter::load(&missing).unwrap_err().to_string();
    assert!(err.contains("absent.oqa"), "{err}");
    let short = dir.path().join("short.oqa");
    std::fs::write(&short, b"OAPQADP1\x80\x01\x00\x00").unwrap();
    let err = QueryAdapter::load(&short).unwrap_err().to_string();
    assert!(
        err.contains("short.oqa") && err.contains("truncated"),
        "{err}"
    );
}
