//! The `/v1/tools` registry shape.

use serde_json::{json, Map, Value};

use super::convert::to_tool;
use super::naming::assign_tool_names;
use crate::model::Manifest;

/// One value of the `/v1/tools` response's `registry` map (keyed by tool
/// name): `{"tool", "domain", "id", "manifest"}`.
///
/// `domain` is the reference's field name and carries the index id (a
/// domain such as `fingerstring.com` for crawled manifests, `local/<slug>`
/// for local ones), so clients written for the reference keep working; `id`
/// repeats it under our name. `manifest` is the full manifest JSON.
pub fn registry_entry(id: &str, manifest: &Manifest, tool: &Value) -> Value {
    json!({
        "tool": tool,
        "domain": id,
        "id": id,
        "manifest": serde_json::to_value(manifest).unwrap_or(Value::Null),
    })
}

/// The `tools` list and the `registry` map of a `/v1/tools` response for
/// `(id, manifest)` pairs in ranking order, with names from
/// [`assign_tool_names`] (avoiding `reserved`).
pub fn tools_and_registry(
    manifests: &[(&str, &Manifest)],
    reserved: &[&str],
) -> (Vec<Value>, Map<String, Value>) {
    let names = assign_tool_names(manifests, reserved);
    let mut tools = Vec::with_capacity(manifests.len());
    let mut registry = Map::new();
    for ((id, manifest), name) in manifests.iter().zip(names) {
        let tool = to_tool(manifest, &name);
        registry.insert(name, registry_entry(id, manifest, &tool));
        tools.push(tool);
    }
    (tools, registry)
}
