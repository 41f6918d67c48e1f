//! Where the real embedding model and the repository's fixtures are.

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The real model: `OAPD_MODEL_DIR`, else `models/all-MiniLM-L6-v2`.
pub fn model_dir() -> PathBuf {
    match std::env::var_os("OAPD_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("models/all-MiniLM-L6-v2"),
    }
}

/// [`model_dir`], failing (never skipping) when the model is absent.
pub fn require_model() -> PathBuf {
    let dir = model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "real model not found in {}: run `cargo xtask fetch-model` (or set OAPD_MODEL_DIR)",
        dir.display()
    );
    dir
}

/// A reference manifest of tests/fixtures (oap-dev's set) by name.
pub fn reference_manifest(name: &str) -> PathBuf {
    let path = workspace_root()
        .join("tests/fixtures/reference-manifests/oap-dev")
        .join(format!("{name}.json"));
    assert!(
        path.is_file(),
        "reference manifest missing: {}",
        path.display()
    );
    path
}
