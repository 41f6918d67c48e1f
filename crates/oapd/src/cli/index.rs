//! `oapd discover` and `oapd index`: the index from the command line.

use crate::app::{load_embedder, open_engine};
use crate::config::Config;

/// Prints the manifests that fit `task` (as the HTTP API's JSON with `json`).
pub fn discover(config: &Config, task: &str, top_k: usize, json: bool) -> anyhow::Result<()> {
    let (embedder, _) = load_embedder(config);
    let (engine, _) = open_engine(config, embedder)?;
    let discovery = engine.discover(task, top_k)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&discovery)?);
    } else {
        print!("{}", crate::server::render::discovery(&discovery));
    }
    Ok(())
}

/// Opens (building when needed) the index, or rebuilds it with `force`, and
/// prints one line about it.
pub fn index(config: &Config, force: bool) -> anyhow::Result<()> {
    let (embedder, _) = load_embedder(config);
    let (engine, mut report) = open_engine(config, embedder)?;
    if force {
        report = engine.rebuild_at(true, oap_discovery::Priority::Foreground)?;
    }
    println!(
        "{} manifests, {} rows ({} embedded, index {}), {} problems, {} collisions, {:.0} ms",
        report.docs,
        report.rows,
        report.embedded_rows,
        if report.reused_index {
            "unchanged"
        } else {
            "written"
        },
        report.problems.len(),
        report.collisions.len(),
        report.elapsed_ms
    );
    Ok(())
}
