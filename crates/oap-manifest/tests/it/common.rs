//! What the manifest suites share: the reference manifests of
//! tests/fixtures and a clean stdio manifest.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// `<repo>/tests/fixtures/reference-manifests`, where `<repo>` is two levels above
/// this crate. Panics (fails the test) if it is missing: no silent skip.
pub fn reference_dir() -> PathBuf {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reference-manifests");
    assert!(
        dir.is_dir(),
        "reference manifests not found at {} (expected <repo>/tests/fixtures/reference-manifests); \
         these tests need the shared spec directory",
        dir.display()
    );
    dir
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "json") {
            let rel = p
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read(&p).expect("read manifest")));
        }
    }
}

/// Every reference manifest as `(path relative to the directory, bytes)`,
/// in path order.
pub fn reference_files() -> Vec<(String, Vec<u8>)> {
    let root = reference_dir();
    let mut out = Vec::new();
    collect(&root, &root, &mut out);
    out
}

/// A clean stdio manifest (`grep`): zero diagnostics (no stdio warning by
/// design).
pub fn grep_stdio() -> Value {
    json!({
        "oap": "1.0",
        "name": "grep",
        "description": "Searches text for lines matching a pattern.",
        "input": {"format": "text/plain", "description": "Text on stdin."},
        "output": {"format": "text/plain", "description": "Matching lines."},
        "invoke": {"method": "stdio", "url": "grep"}
    })
}
