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

/// A manifest of `manifests.dirs` whose input is described by `schema`.
fn local_manifest(name: &str, description: &str, schema: &str, invoke: &str) -> String {
    json!({
        "oap": "1.0",
        "name": name,
        "description": description,
        "input": {"format": "application/json", "description": "The request.", "schema": schema},
        "output": {"format": "application/json", "description": "The answer."},
        "invoke": {"method": "GET", "url": invoke}
    })
    .to_string()
}

fn json_schema(field: &str, kind: &str) -> Value {
    json!({"type": "object",
           "properties": {field: {"type": kind, "description": format!("The {field}")},
                          "city": {"type": "string"}},
           "required": [field]})
}

/// The operator's entries of `/v1/manifests` once `name` has a schema
/// error recorded (the background resolution after start has then run
/// and the index been rebuilt with it).
fn wait_for_schema_error(daemon: &oap_testkit::Daemon, name: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list: Value = daemon.get("/v1/manifests").json();
        let local: Vec<Value> = list.as_array().unwrap().to_vec();
        if local
            .iter()
            .any(|m| m["name"] == name && m.get("schema_errors").is_some())
        {
            return local;
        }
        assert!(Instant::now() < deadline, "schemas not resolved: {list}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn offered_parameters(
    daemon: &oap_testkit::Daemon,
    upstream: &Upstream,
    task: &str,
    tool: &str,
) -> Value {
    let before = upstream.fake.chat_requests().len();
    let body = json!({"model": "m", "stream": false,
        "messages": [{"role": "user", "content": task}]});
    let response = daemon.post_json("/api/chat", &body.to_string());
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let sent = upstream.fake.chat_requests();
    let tools = sent[before]["tools"]
        .as_array()
        .expect("tools offered")
        .clone();
    tools
        .iter()
        .find(|t| t["function"]["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} not offered: {tools:?}"))["function"]["parameters"]
        .clone()
}

/// The operator's own manifests get their schemas too: by URL (a plain
/// HTTP server on loopback, which local trust may reach), or as a file in
/// their directory. A schema server that is down, a path out of the
/// directory (`..` or a symbolic link) leave the fallback with the reason.
/// The fetched schema is stored: neither a rebuild nor a restart fetches
/// it again.
#[test]
fn local_manifests_get_their_schemas_by_url_or_file_and_keep_them_across_rebuilds_and_restarts() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(oap_testkit::server::serve(|request| {
        match request.path.as_str() {
            "/forecast.schema.json" => {
                oap_testkit::server::response(200, json_schema("days", "integer").to_string())
            }
            _ => oap_testkit::server::response(404, "not found"),
        }
    }));
    let origin = format!("http://127.0.0.1:{}", server.port());
    // A port nobody listens on: the schema server is down.
    let down = support::free_port();

    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("manifests");
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    std::fs::write(
        dir.join("schemas/pollen.json"),
        json_schema("level", "number").to_string(),
    )
    .unwrap();
    // Outside the manifest directory: never read.
    std::fs::write(
        root.path().join("secret.json"),
        json_schema("secret", "string").to_string(),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        root.path().join("secret.json"),
        dir.join("schemas/link.json"),
    )
    .unwrap();
    let manifests = [
        (
            "forecast.json",
            "Forecast",
            "Daily weather forecast: the high and low temperatures for the next days.",
            format!("{origin}/forecast.schema.json"),
        ),
        (
            "tides.json",
            "Tides",
            "Tide tables: high and low water times at a harbour.",
            format!("http://127.0.0.1:{down}/tides.schema.json"),
        ),
        (
            "pollen.json",
            "Pollen",
            "Pollen count: how much tree and grass pollen is in the air today.",
            "schemas/pollen.json".to_string(),
        ),
        (
            "parent.json",
            "Parent",
            "Reads a schema from the parent directory.",
            "../secret.json".to_string(),
        ),
        (
            "link.json",
            "Link",
            "Reads a schema through a symbolic link.",
            "schemas/link.json".to_string(),
        ),
    ];
    for (file, name, description, schema) in &manifests {
        std::fs::write(
            dir.join(file),
            local_manifest(name, description, schema, &format!("{origin}/v1/{file}")),
        )
        .unwrap();
    }
    let data = root.path().join("data");
    let upstream = upstream();
    let yaml = format!(
        "ollama:\n  base_url: {:?}\nmanifests:\n  bundled: false\n  dirs: [{dir:?}]\n\
         crawler:\n  watch_interval: 1\n",
        upstream.fake.url()
    );
    let schema_fetches = || {
        server
            .requests()
            .iter()
            .filter(|r| r.path == "/forecast.schema.json")
            .count()
    };

    let daemon = support::daemon().yaml(&yaml).data_dir(&data).start();
    let listed = wait_for_schema_error(&daemon, "Tides");
    let entry = |name: &str| {
        listed
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"))
            .clone()
    };
    assert!(
        entry("Forecast").get("schema_errors").is_none(),
        "{listed:?}"
    );
    assert!(entry("Pollen").get("schema_errors").is_none(), "{listed:?}");
    let tides = entry("Tides")["schema_errors"].to_string();
    assert!(
        tides.contains("input.schema: could not connect to 127.0.0.1"),
        "{tides}"
    );
    let parent = entry("Parent")["schema_errors"].to_string();
    assert!(
        parent.contains("is not inside the manifest's directory"),
        "{parent}"
    );
    let link = entry("Link")["schema_errors"].to_string();
    assert!(
        link.contains("resolves outside the manifest's directory"),
        "{link}"
    );

    let typed = |field: &str, kind: &str| {
        json!({"type": "object", "properties": {
            field: {"type": kind, "description": format!("The {field}")},
            "city": {"type": "string"}
        }, "required": [field]})
    };
    let forecast_task = "What is the weather forecast high and low for the next 3 days?";
    assert_eq!(
        offered_parameters(&daemon, &upstream, forecast_task, "oap_forecast"),
        typed("days", "integer")
    );
    assert_eq!(
        offered_parameters(
            &daemon,
            &upstream,
            "How much grass pollen is in the air today?",
            "oap_pollen"
        ),
        typed("level", "number")
    );
    // The down server's manifest keeps the fallback parameter.
    assert_eq!(
        offered_parameters(
            &daemon,
            &upstream,
            "When is high water at the harbour? tide tables",
            "oap_tides"
        )["required"],
        json!(["data"])
    );
    assert_eq!(schema_fetches(), 1);

    // `oapd manifest lint` resolves a file's references as the daemon does.
    let lint = |file: &str| {
        let output = support::oapd()
            .args(["manifest", "lint"])
            .arg(dir.join(file))
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let tides_lint = lint("tides.json");
    assert!(
        tides_lint.contains("input.schema")
            && tides_lint.contains("the tool has the fallback parameters"),
        "{tides_lint}"
    );
    assert!(lint("parent.json").contains("is not inside the manifest's directory"));
    let pollen_lint = lint("pollen.json");
    assert!(
        pollen_lint.contains("a relative path") && !pollen_lint.contains("fallback"),
        "{pollen_lint}"
    );
    let fetched_by_lint = 1;
    assert!(lint("forecast.json").ends_with(": ok\n"));
    let schema_fetches = || schema_fetches() - fetched_by_lint;

    // A new file makes the watch rebuild: the stored schema is used as is.
    let sunrise = json!({"oap": "1.0", "name": "Sunrise", "description": "Sunrise and sunset times.",
        "invoke": {"method": "GET", "url": format!("{origin}/v1/sun")}});
    std::fs::write(dir.join("zz-new.json"), sunrise.to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !daemon
        .get("/v1/manifests")
        .json()
        .to_string()
        .contains("Sunrise")
    {
        assert!(
            Instant::now() < deadline,
            "the new manifest was not indexed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        schema_fetches(),
        1,
        "the schema was fetched again on a rebuild"
    );
    drop(daemon);

    // A restart starts from the stored copy: typed at once, no fetch.
    let daemon = support::daemon().yaml(&yaml).data_dir(&data).start();
    assert_eq!(
        offered_parameters(&daemon, &upstream, forecast_task, "oap_forecast"),
        typed("days", "integer")
    );
    assert_eq!(
        schema_fetches(),
        1,
        "the schema was fetched again after a restart"
    );
}
