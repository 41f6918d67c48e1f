//! MCP servers' tools in the catalog and the index: ids, schemas kept
//! verbatim, caps, a parsed document never passing for one, and unchanged
//! tools not re-embedded.

use std::sync::{Arc, Mutex};

use oap_discovery::{Catalog, Engine, McpToolDoc, McpTools, Source, Trust};
use serde_json::{json, Value};

use crate::engine::{manifest_dir, Counting, CLI};

/// Tool lists as a hub would hold them, changeable between loads.
#[derive(Debug, Default)]
struct Listed(Mutex<Vec<McpToolDoc>>);

impl McpTools for Listed {
    fn mcp_tools(&self) -> Vec<McpToolDoc> {
        self.0.lock().unwrap().clone()
    }
}

fn tool(server: &str, name: &str, description: &str, schema: Value) -> McpToolDoc {
    McpToolDoc {
        server: server.into(),
        name: name.into(),
        title: None,
        description: description.into(),
        content_hash: format!("{server}/{name}/{description}/{schema}"),
        input_schema: schema,
        annotations: Some(json!({"readOnlyHint": true})),
        trust: Trust::Local,
        location: "stdio: test-server".into(),
    }
}

fn weather() -> McpToolDoc {
    tool(
        "weather",
        "get_forecast",
        "Get the weather forecast (temperature, rain, wind) for a city for the next days.",
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "units": {"$ref": "#/$defs/units"}
            },
            "required": ["city"],
            "$defs": {"units": {"enum": ["metric", "imperial"]}}
        }),
    )
}

#[test]
fn an_mcp_tool_is_catalogued_under_its_server_with_its_schema_untouched() {
    let listed = Arc::new(Listed::default());
    listed.0.lock().unwrap().push(weather());
    let catalog = Catalog::load(&[Source::Mcp(listed)]);
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
    let entry = &catalog.entries[0];
    let manifest = entry.manifest().unwrap();
    assert_eq!(entry.id, "mcp/weather/get_forecast");
    assert_eq!(entry.origin.kind, "mcp");
    let binding = entry.mcp.as_ref().expect("an MCP binding");
    assert_eq!(binding.server, "weather");
    assert_eq!(binding.tool, "get_forecast");
    assert_eq!(binding.input_schema, weather().input_schema);
    assert_eq!(binding.annotations, Some(json!({"readOnlyHint": true})));
    // The manifest made for search names the parameters, and its invoke
    // method is one no parsed document may declare.
    assert!(manifest.input.as_ref().is_some_and(|input| input
        .parameters
        .as_ref()
        .is_some_and(|p| p.contains_key("city"))));
    assert_eq!(manifest.invoke.method, "mcp");
    assert_eq!(manifest.invoke_kind(), None);
}

#[test]
fn a_document_declaring_the_mcp_method_is_refused() {
    let document = json!({
        "oap": "1.0",
        "name": "get_forecast",
        "description": "Pretends to be an MCP server's tool.",
        "invoke": {"method": "mcp", "url": "mcp://weather/get_forecast"}
    });
    let error =
        oap_manifest::parse(document.to_string().as_bytes()).expect_err("method mcp is not OAP");
    assert!(error.to_string().contains("invoke.method"), "{error}");
}

#[test]
fn an_oversized_schema_is_reported_and_the_other_tools_still_load() {
    let listed = Arc::new(Listed::default());
    let huge: serde_json::Map<String, Value> = (0..4_000)
        .map(|i| {
            (
                format!("field_{i}"),
                json!({"type": "string", "description": "x".repeat(20)}),
            )
        })
        .collect();
    listed.0.lock().unwrap().extend([
        tool(
            "big",
            "everything",
            "Takes every field.",
            json!({"type": "object", "properties": huge}),
        ),
        weather(),
    ]);
    let catalog = Catalog::load(&[Source::Mcp(listed)]);
    assert_eq!(catalog.entries.len(), 1);
    assert_eq!(catalog.entries[0].id, "mcp/weather/get_forecast");
    assert_eq!(catalog.problems.len(), 1);
    assert!(catalog.problems[0].location.contains("big/everything"));
    assert!(
        catalog.problems[0].message.contains("inputSchema"),
        "{:?}",
        catalog.problems
    );
}

#[test]
fn mcp_tools_are_discovered_beside_manifests_and_unchanged_ones_are_not_re_embedded() {
    let manifests = manifest_dir(CLI);
    let listed = Arc::new(Listed::default());
    listed.0.lock().unwrap().extend([
        weather(),
        tool(
            "notes",
            "create_note",
            "Create a note in the user's notebook with a title and a body.",
            json!({"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}}}),
        ),
    ]);
    let data = tempfile::tempdir().unwrap();
    let sources = vec![
        Source::Dir(manifests.path().into()),
        Source::Mcp(listed.clone()),
    ];
    let first = Counting::new();
    let (engine, report) = Engine::open(
        crate::engine::daemon_config(data.path()),
        sources,
        Some(first.clone()),
    )
    .unwrap();
    assert_eq!(report.docs, CLI.len() + 2);

    let found = engine
        .discover("will it rain in Lisbon tomorrow?", 3)
        .unwrap();
    let best = found.best.expect("the forecast tool fits");
    assert_eq!(best.id, "mcp/weather/get_forecast");
    let record = engine.get(&best.id).unwrap();
    assert_eq!(record.mcp.unwrap().input_schema, weather().input_schema);
    let found = engine
        .discover("count the words in this paragraph", 3)
        .unwrap();
    assert_eq!(found.best.expect("wc fits").id, "local/wc");

    // The server re-lists: one tool changed, one unchanged, one removed.
    {
        let mut tools = listed.0.lock().unwrap();
        tools.retain(|t| t.server == "weather");
        let mut changed = tools[0].clone();
        changed.description.push_str(" Also gives the UV index.");
        changed.content_hash.push_str("+uv");
        *tools = vec![changed];
    }
    let before = first.embedded();
    let report = engine.rebuild(false).unwrap();
    assert_eq!(report.docs, CLI.len() + 1);
    let embedded = first.embedded() - before;
    assert!(
        (1..=3).contains(&embedded),
        "only the changed tool's rows are embedded, not {embedded}"
    );
    assert!(engine.get("mcp/notes/create_note").is_none());
    assert!(
        engine.get("mcp/weather/get_forecast").unwrap().manifest["description"]
            .as_str()
            .unwrap()
            .contains("UV index")
    );
}
