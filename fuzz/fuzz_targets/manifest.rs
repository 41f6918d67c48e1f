//! A manifest from the network: parse + validate + tool conversion.
//! Invariants: the 64 KiB and depth-32 caps hold for every input; a manifest
//! that parses serialises to JSON that parses back to the same manifest; the
//! tool made from it has a capped name, an object schema, and its arguments
//! check accepts what it normalised.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_manifest::{ManifestError, MAX_JSON_DEPTH, MAX_MANIFEST_BYTES, MAX_TOOL_NAME_CHARS};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let parsed = oap_manifest::parse(data);
    if data.len() > MAX_MANIFEST_BYTES {
        assert!(
            matches!(parsed, Err(ManifestError::TooLarge { .. })),
            "over the cap"
        );
        return;
    }
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(ManifestError::TooDeep { max, .. }) => {
            assert_eq!(max, MAX_JSON_DEPTH);
            return;
        }
        Err(e) => {
            // Every refusal names its problem.
            assert!(!e.to_string().is_empty());
            assert!(!e.report().is_empty());
            return;
        }
    };
    assert!(
        depth_of(&serde_json::from_slice::<Value>(strip_bom(data)).unwrap()) <= MAX_JSON_DEPTH + 1
    );
    let manifest = &parsed.manifest;

    // parse -> serialise -> parse is stable.
    let text = serde_json::to_vec(manifest).unwrap();
    let again = match oap_manifest::parse(&text) {
        Ok(again) => again,
        Err(e) => panic!(
            "re-parse of a serialised manifest failed: {e}\n{}",
            String::from_utf8_lossy(&text)
        ),
    };
    assert_eq!(&again.manifest, manifest, "round trip changed the manifest");

    // Tool conversion.
    let name = oap_manifest::tool_name(&manifest.name);
    assert!(
        name.chars().count() <= MAX_TOOL_NAME_CHARS,
        "tool name over the cap: {name}"
    );
    let tool = oap_manifest::to_tool(manifest, &name);
    let params = oap_manifest::tool_parameters(manifest);
    assert_eq!(
        params.get("type").and_then(Value::as_str),
        Some("object"),
        "{params}"
    );
    let (tools, registry) = oap_manifest::tools_and_registry(&[("fuzz.example", manifest)], &[]);
    assert_eq!(tools.len(), 1);
    assert_eq!(registry.len(), 1);
    let _ = manifest.search_fields();
    let _ = oap_manifest::render_compact(&serde_json::to_value(manifest).unwrap());

    // Empty arguments: checking is total and normalising is idempotent.
    let check = oap_manifest::inspect_arguments(&tool, &serde_json::Map::new());
    if check.problems.is_empty() {
        let again = oap_manifest::inspect_arguments(&tool, &check.arguments);
        assert!(again.problems.is_empty(), "{:?}", again.problems);
    }
});

fn strip_bom(data: &[u8]) -> &[u8] {
    data.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(data)
}

fn depth_of(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}
