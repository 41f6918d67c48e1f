//! `input.schema` by URL end to end: the real daemon crawls a manifest
//! whose input is described only by an OpenAPI document, from an HTTPS
//! server in this process on loopback (test CA; `crawler.hosts` maps the
//! fake domain to 127.0.0.1, `crawler.allow_private` lets internet trust
//! reach it), and the scripted fake Ollama receives the operation's
//! parameters as the tool's. A second manifest, whose document has no
//! operation for its call, keeps the fallback and says why in
//! `/v1/manifests`. No traffic leaves loopback.

use std::time::{Duration, Instant};

use fake_ollama::{ModelSpec, Script, Turn};
use oap_testkit::pki::Pki;
use oap_testkit::server::{serve_tls_raw, write_response};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::support::{self, fake, Upstream};

struct Web {
    _runtime: tokio::runtime::Runtime,
    port: u16,
    _dir: tempfile::TempDir,
    ca_file: std::path::PathBuf,
}

fn web() -> Web {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = Pki::new(&["forecast.test", "climate.test"]);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(serve_tls_raw(listener, pki.server.clone(), move |mut tls, head| async move {
        let base = format!("https://{}:{port}", head.host);
        let body = match head.path.as_str() {
            "/.well-known/oap.json" => json!({
                "oap": "1.0",
                "name": if head.host == "forecast.test" { "Forecast" } else { "Climate" },
                "description": if head.host == "forecast.test" {
                    "Daily weather forecast: the high and low temperatures for the next days."
                } else {
                    "Historical climate records: average rainfall and sunshine by month."
                },
                "input": {"format": "application/json", "description": "The request.",
                          "schema": format!("{base}/openapi.json")},
                "output": {"format": "application/json", "description": "The forecast.",
                           "schema": format!("{base}/openapi.json")},
                "invoke": {"method": "GET", "url": format!("{base}/v1/forecast")}
            }),
            "/openapi.json" if head.host == "forecast.test" => json!({
                "openapi": "3.0.3",
                "servers": [{"url": "/v1"}],
                "paths": {"/forecast": {"get": {
                    "parameters": [
                        {"name": "days", "in": "query", "required": true,
                         "description": "How many days ahead", "schema": {"$ref": "#/components/schemas/Days"}},
                        {"name": "city", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"content": {"application/json": {"schema": {
                        "type": "object", "properties": {"high": {"type": "number"}, "low": {"type": "number"}}}}}}}
                }}},
                "components": {"schemas": {"Days": {"type": "integer", "minimum": 1, "maximum": 7}}}
            }),
            // Describes other paths only.
            "/openapi.json" => json!({"openapi": "3.0.3", "paths": {"/v1/history": {"get": {}}}}),
            _ => Value::Null,
        };
        let status = if body.is_null() { "404 Not Found" } else { "200 OK" };
        let headers = [("content-type", "application/json".to_string())];
        write_response(&mut tls, status, &headers, body.to_string().as_bytes()).await;
        let _ = tls.shutdown().await;
    }));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    Web {
        _runtime: runtime,
        port,
        _dir: dir,
        ca_file,
    }
}

fn upstream() -> Upstream {
    fake(
        Script::new()
            .model(ModelSpec::new("m").capabilities(&["completion", "tools"]))
            .default_turn(Turn::reply("ok")),
    )
}

#[test]
fn the_model_gets_the_parameters_of_the_openapi_operation_the_manifest_names() {
    let web = web();
    let upstream = upstream();
    let forecast = format!("forecast.test:{}", web.port);
    let climate = format!("climate.test:{}", web.port);
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\ncrawler:\n  enabled: true\n  seeds: [{forecast:?}, {climate:?}]\n  \
             ca_file: {:?}\n  allow_private: [\"127.0.0.0/8\"]\n  \
             hosts: [\"forecast.test=127.0.0.1\", \"climate.test=127.0.0.1\"]\n  fetch_timeout: 5\n",
            upstream.fake.url(),
            web.ca_file
        ))
        .start();

    // The crawl runs in the background after start.
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let list: Value = daemon.get("/v1/manifests").json();
        let ours: Vec<Value> = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["trust"] == "internet")
            .cloned()
            .collect();
        if ours.len() == 2 {
            break ours;
        }
        assert!(Instant::now() < deadline, "not crawled: {list}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let forecast_entry = listed.iter().find(|m| m["name"] == "Forecast").unwrap();
    assert!(
        forecast_entry.get("schema_errors").is_none(),
        "{forecast_entry}"
    );
    let climate_entry = listed.iter().find(|m| m["name"] == "Climate").unwrap();
    assert_eq!(
        climate_entry["schema_errors"],
        json!([
            format!("input.schema: the OpenAPI document has no GET operation for https://{climate}/v1/forecast"),
            "output.schema: the OpenAPI document has no GET operation for https://".to_string()
                + &climate + "/v1/forecast"
        ])
    );

    let body = json!({"model": "m", "stream": false,
        "messages": [{"role": "user", "content": "What is the weather forecast high and low for the next 3 days?"}]});
    let response = daemon.post_json("/api/chat", &body.to_string());
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let sent = upstream.fake.chat_requests();
    let tools = sent[0]["tools"].as_array().expect("tools offered");
    let tool = tools
        .iter()
        .find(|t| t["function"]["name"] == "oap_forecast")
        .unwrap_or_else(|| panic!("oap_forecast not offered: {tools:?}"));
    assert_eq!(
        tool["function"]["parameters"],
        json!({"type": "object", "properties": {
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "How many days ahead"},
            "city": {"type": "string"}
        }, "required": ["days"]})
    );
    assert!(
        tool["function"]["description"]
            .as_str()
            .unwrap()
            .ends_with("\nReturns: {high, low}"),
        "{tool}"
    );
    // The climate tool, if offered, has the fallback parameter.
    if let Some(climate_tool) = tools
        .iter()
        .find(|t| t["function"]["name"] == "oap_climate")
    {
        assert_eq!(
            climate_tool["function"]["parameters"]["required"],
            json!(["data"])
        );
    }
}
