//! Tool definitions from stored manifests: where a discovered, remembered
//! or forced manifest becomes a tool the model is offered, and the source
//! of tools for a task that the meta tools and the experience cache ask.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use oap_discovery::{Discovery, Engine, StoredRecord};
use oap_manifest::Manifest;

use crate::context::InjectedTool;

/// Finds the tools for a task (the daemon: the experience cache, else
/// discovery). `reserved` are names the tools must not take.
pub trait ToolSource: Send + Sync {
    /// Up to `top_k` tools for `task`, none named in `reserved`, best first;
    /// empty when nothing fits.
    fn tools_for_task(
        &self,
        task: String,
        top_k: usize,
        reserved: Vec<String>,
    ) -> BoxFuture<'_, Vec<InjectedTool>>;
}

/// The stored manifest decoded, or `None` (logged) when it does not decode.
fn decode(record: &StoredRecord) -> Option<Manifest> {
    match serde_json::from_value(record.manifest.clone()) {
        Ok(manifest) => Some(manifest),
        Err(err) => {
            tracing::error!(id = %record.id, error = %err, "stored manifest does not decode");
            None
        }
    }
}

/// The tool definition the model is offered for `record`: an MCP server's
/// tool keeps its own `inputSchema`, untouched; a manifest's is built from
/// the manifest.
pub fn definition(record: &StoredRecord, manifest: &Manifest, name: &str) -> serde_json::Value {
    match &record.mcp {
        Some(binding) => serde_json::json!({
            "type": "function",
            "function": {
                "name": name,
                "description": manifest.description,
                "parameters": binding.input_schema,
            }
        }),
        None => oap_manifest::tool::to_tool(manifest, name),
    }
}

/// One stored record as a tool, named so as not to clash with `reserved`.
pub fn from_record(record: StoredRecord, reserved: &[String]) -> Option<InjectedTool> {
    let manifest = decode(&record)?;
    let reserved: Vec<&str> = reserved.iter().map(String::as_str).collect();
    let name = oap_manifest::tool::assign_tool_names(&[(record.id.as_str(), &manifest)], &reserved)
        .pop()?;
    Some(InjectedTool {
        definition: definition(&record, &manifest, &name),
        name,
        record: Arc::new(record),
        manifest: Arc::new(manifest),
        on_result: None,
    })
}

/// The discovered candidates that fit, as tools.
pub fn from_discovery(
    engine: &Engine,
    discovery: &Discovery,
    reserved: Vec<String>,
) -> Vec<InjectedTool> {
    // Only candidates that would count as a match are injected: a small
    // model is better served by no tool than by an unrelated one.
    let scoring = &engine.config().scoring;
    let mode = discovery.meta.mode;
    let mut picked: Vec<(Arc<StoredRecord>, Manifest)> = Vec::new();
    for candidate in discovery
        .candidates
        .iter()
        .filter(|c| scoring.accepts(mode, &c.scores))
    {
        let Some(record) = engine.get(&candidate.id) else {
            continue;
        };
        let Some(manifest) = decode(&record) else {
            continue;
        };
        picked.push((Arc::new(record), manifest));
    }
    let named: Vec<(&str, &Manifest)> = picked.iter().map(|(r, m)| (r.id.as_str(), m)).collect();
    let reserved: Vec<&str> = reserved.iter().map(String::as_str).collect();
    let names = oap_manifest::tool::assign_tool_names(&named, &reserved);
    picked
        .into_iter()
        .zip(names)
        .map(|((record, manifest), name)| InjectedTool {
            definition: definition(&record, &manifest, &name),
            name,
            record,
            manifest: Arc::new(manifest),
            on_result: None,
        })
        .collect()
}
