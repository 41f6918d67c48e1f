//! A fetched manifest's `input.schema` / `output.schema`: fetched with the
//! manifest, under its trust, from a TLS server on loopback that fake
//! domains resolve to (the stub resolver), with every connection recorded.
//! Each case checks what the manifest records and so what its tool offers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oap_crawl::{fetch_manifest, fetch_manifest_replacing, FetchLimits, FetchOutcome, Validators};
use oap_manifest::tool::schema_doc::{schema_errors, RESOLVED_SCHEMA_KEY};
use oap_manifest::{parameter_source, tool_parameters, ParameterSource};
use oap_store::Trust;
use oap_testkit::manifest_web::{executor, Pki, StubResolver};
use oap_testkit::server::{serve_tls_raw, write_response};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const PLAIN: &str = "{ \"oap\": \"1.0\", \"name\": \"Plain\", \"description\": \"As served.\",\n  \"invoke\": {\"method\": \"GET\", \"url\": \"https://api.example.org/p\"} }";

const FIFTY_MB: usize = 50 * 1024 * 1024;

/// `(path, if-none-match)` of one request.
type Seen = (String, Option<String>);

struct Web {
    port: u16,
    /// `(path, if-none-match)` of every request.
    requests: Arc<Mutex<Vec<Seen>>>,
    /// Bytes of the 50 MB schema written before the client stopped reading.
    huge_written: Arc<AtomicUsize>,
    /// Set when the server stopped writing it.
    huge_done: Arc<AtomicBool>,
    pki: Pki,
}

impl Web {
    fn url(&self, path: &str) -> String {
        format!("https://api.test:{}{path}", self.port)
    }

    fn hits(&self, path: &str) -> Vec<Option<String>> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, inm)| inm.clone())
            .collect()
    }
}

fn weather_schema() -> Value {
    json!({"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "units": {"$ref": "#/$defs/Units"}},
        "$defs": {"Units": {"type": "string", "enum": ["metric", "imperial"]}}})
}

fn openapi(port: u16) -> Value {
    json!({"openapi": "3.1.0",
        "servers": [{"url": format!("https://api.test:{port}/v1")}],
        "paths": {"/forecast": {"get": {
            "parameters": [{"name": "days", "in": "query", "required": true, "schema": {"type": "integer"}}],
            "responses": {"200": {"content": {"application/json": {"schema": {
                "type": "object", "properties": {"high": {"type": "number"}, "low": {"type": "number"}}}}}}}}}}})
}

/// A manifest naming `schema` for its input (and `output` for its output).
fn manifest(invoke_url: &str, schema: &str, output: Option<&str>) -> String {
    let mut doc = json!({"oap": "1.0", "name": "Weather", "description": "Current weather for a city.",
        "input": {"format": "application/json", "description": "A city.", "schema": schema},
        "invoke": {"method": "GET", "url": invoke_url}});
    if let Some(output) = output {
        doc["output"] =
            json!({"format": "application/json", "description": "The forecast.", "schema": output});
    }
    doc.to_string()
}

async fn web() -> Web {
    let pki = Pki::new(&["api.test", "inside.test"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let huge_written = Arc::new(AtomicUsize::new(0));
    let huge_done = Arc::new(AtomicBool::new(false));
    let (r, h, d) = (requests.clone(), huge_written.clone(), huge_done.clone());
    tokio::spawn(serve_tls_raw(
        listener,
        pki.server.clone(),
        move |mut tls, head| {
            let (r, h, d) = (r.clone(), h.clone(), d.clone());
            async move {
                let inm = head.header("if-none-match").map(str::to_string);
                r.lock().unwrap().push((head.path.clone(), inm.clone()));
                let json =
                    |body: String| (vec![("content-type", "application/json".to_string())], body);
                let base = format!("https://api.test:{port}");
                let (headers, body) = match head.path.as_str() {
                    "/schema.json" if inm.as_deref() == Some("\"s1\"") => {
                        write_response(&mut tls, "304 Not Modified", &[], b"").await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                    "/schema.json" => {
                        let (mut headers, body) = json(weather_schema().to_string());
                        headers.push(("etag", "\"s1\"".to_string()));
                        (headers, body)
                    }
                    "/openapi.json" => json(openapi(port).to_string()),
                    "/to-private" => {
                        let to = format!("https://inside.test:{port}/schema.json");
                        write_response(&mut tls, "302 Found", &[("location", to)], b"").await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                    "/huge.json" => {
                        let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {FIFTY_MB}\r\n\r\n{{\"type\":\"object\",\"description\":\""
                    );
                        let _ = tls.write_all(head.as_bytes()).await;
                        let chunk = vec![b'x'; 64 * 1024];
                        let mut sent = 0;
                        while sent < FIFTY_MB {
                            if tls.write_all(&chunk).await.is_err() {
                                break;
                            }
                            sent += chunk.len();
                            h.store(sent, Ordering::SeqCst);
                        }
                        d.store(true, Ordering::SeqCst);
                        return;
                    }
                    "/m/plain" => json(PLAIN.to_string()),
                    "/m/jsonschema" => json(manifest(
                        "https://api.example.org/weather",
                        &format!("{base}/schema.json"),
                        None,
                    )),
                    "/m/openapi" => json(manifest(
                        &format!("{base}/v1/forecast"),
                        &format!("{base}/openapi.json"),
                        Some(&format!("{base}/openapi.json")),
                    )),
                    "/m/no-operation" => json(manifest(
                        &format!("{base}/v1/climate"),
                        &format!("{base}/openapi.json"),
                        None,
                    )),
                    "/m/private" => json(manifest(
                        "https://api.example.org/weather",
                        &format!("{base}/to-private"),
                        None,
                    )),
                    "/m/huge" => json(manifest(
                        "https://api.example.org/weather",
                        &format!("{base}/huge.json"),
                        None,
                    )),
                    "/m/forged" => {
                        let mut doc: Value = serde_json::from_str(&manifest(
                            "https://api.example.org/weather",
                            "https://api.example.org/schema.json",
                            None,
                        ))
                        .unwrap();
                        doc["input"].as_object_mut().unwrap().remove("schema");
                        doc["input"][RESOLVED_SCHEMA_KEY] = json!({"url": "x",
                        "parameters": json!({"type": "object", "properties": {"forged": {"type": "string"}}}).to_string()});
                        json(doc.to_string())
                    }
                    _ => (vec![], String::new()),
                };
                let status = if body.is_empty() {
                    "404 Not Found"
                } else {
                    "200 OK"
                };
                write_response(&mut tls, status, &headers, body.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        },
    ));
    Web {
        port,
        requests,
        huge_written,
        huge_done,
        pki,
    }
}

struct Client {
    executor: Arc<oap_exec::Executor>,
    connects: Arc<Mutex<Vec<SocketAddr>>>,
    resolver: Arc<StubResolver>,
}

fn client(web: &Web) -> Client {
    let resolver =
        StubResolver::new(&[("api.test", &["127.0.0.1"]), ("inside.test", &["10.9.8.7"])]);
    // Loopback is allowed (the test server lives there); 10.0.0.0/8 is not.
    let (executor, connects) = executor(resolver.clone(), &web.pki.ca_pem, &["127.0.0.0/8"]);
    Client {
        executor,
        connects,
        resolver,
    }
}

async fn fetch(c: &Client, url: &str, stored: Option<&str>) -> (String, oap_manifest::Manifest) {
    let outcome = fetch_manifest_replacing(
        &c.executor,
        url,
        Trust::Internet,
        true,
        &Validators::default(),
        FetchLimits::default(),
        stored,
    )
    .await
    .unwrap();
    let FetchOutcome::Fetched { body, .. } = outcome else {
        panic!("not fetched: {outcome:?}");
    };
    // What the crawler stores must load like any manifest.
    let manifest = oap_manifest::parse(body.as_bytes()).unwrap().manifest;
    (body, manifest)
}

#[tokio::test]
async fn a_json_schema_url_gives_the_tool_its_fields_and_a_refetch_is_conditional() {
    let web = web().await;
    let c = client(&web);
    let (body, m) = fetch(&c, &web.url("/m/jsonschema"), None).await;
    assert_eq!(parameter_source(&m), ParameterSource::FetchedSchema);
    assert_eq!(
        tool_parameters(&m),
        json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "units": {"type": "string", "enum": ["metric", "imperial"]}},
            "required": ["city"]})
    );
    assert!(schema_errors(&m).is_empty());
    assert_eq!(web.hits("/schema.json"), [None]);

    // The manifest changed (a 200): the schema is asked for again with the
    // stored copy's validator, the server says 304, and the record stays.
    let (_, again) = fetch(&c, &web.url("/m/jsonschema"), Some(&body)).await;
    assert_eq!(web.hits("/schema.json"), [None, Some("\"s1\"".to_string())]);
    assert_eq!(tool_parameters(&again), tool_parameters(&m));
    // Without a stored copy, nothing is conditional.
    fetch(&c, &web.url("/m/jsonschema"), None).await;
    assert_eq!(web.hits("/schema.json").last(), Some(&None));
}

#[tokio::test]
async fn an_openapi_url_gives_the_matching_operation_and_the_result_fields() {
    let web = web().await;
    let c = client(&web);
    let (_, m) = fetch(&c, &web.url("/m/openapi"), None).await;
    assert_eq!(
        tool_parameters(&m),
        json!({"type": "object", "properties": {"days": {"type": "integer"}}, "required": ["days"]})
    );
    let tool = oap_manifest::to_tool(&m, "oap_weather");
    assert_eq!(
        tool["function"]["description"],
        "Current weather for a city.\nReturns: {high, low}"
    );
    // Input and output name the same document: fetched once.
    assert_eq!(web.hits("/openapi.json").len(), 1);

    let (_, m) = fetch(&c, &web.url("/m/no-operation"), None).await;
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    assert_eq!(
        schema_errors(&m),
        [format!(
            "input.schema: the OpenAPI document has no GET operation for https://api.test:{}/v1/climate",
            web.port
        )]
    );
}

/// A schema URL redirecting to a private address: refused by the address
/// guard after resolution and before any connection, like a manifest's.
#[tokio::test]
async fn a_schema_redirecting_to_a_private_address_is_refused_without_connecting() {
    let web = web().await;
    let c = client(&web);
    let (_, m) = fetch(&c, &web.url("/m/private"), None).await;
    let errors = schema_errors(&m);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("refused to connect") && errors[0].contains("10.9.8.7"),
        "{errors:?}"
    );
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    // inside.test was resolved (the redirect was followed that far) ...
    assert!(c.resolver.queries().iter().any(|q| q == "inside.test"));
    // ... and never connected to: every connection went to loopback.
    let connects = c.connects.lock().unwrap();
    assert!(!connects.is_empty());
    assert!(
        connects.iter().all(|a| a.ip().is_loopback()),
        "connections: {connects:?}"
    );
    assert!(web.hits("/schema.json").is_empty());
}

#[tokio::test]
async fn a_fifty_megabyte_schema_is_refused_at_the_cap_without_reading_it_all() {
    let web = web().await;
    let c = client(&web);
    let (_, m) = fetch(&c, &web.url("/m/huge"), None).await;
    assert_eq!(
        schema_errors(&m),
        [format!(
            "input.schema: body of https://api.test:{}/huge.json is larger than the 1048576 byte limit",
            web.port
        )]
    );
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    // The server stops once the client hangs up: far short of 50 MB (what
    // it wrote is the cap plus what the socket buffers held).
    // (Waiting for the server's write loop to end is not a timing
    // assertion: it ends as soon as a write fails.)
    while !web.huge_done.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let written = web.huge_written.load(Ordering::SeqCst);
    assert!(written < 16 * 1024 * 1024, "server wrote {written} bytes");
}

#[tokio::test]
async fn a_record_written_by_the_publisher_is_dropped() {
    let web = web().await;
    let c = client(&web);
    let (body, m) = fetch(&c, &web.url("/m/forged"), None).await;
    assert!(!body.contains("forged"), "{body}");
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    // A manifest without a schema URL or a record is stored as served.
    let FetchOutcome::Fetched { body, .. } = fetch_manifest(
        &c.executor,
        &web.url("/openapi.json").replace("openapi.json", "m/plain"),
        Trust::Internet,
        true,
        &Validators::default(),
        FetchLimits::default(),
    )
    .await
    .unwrap() else {
        panic!("not fetched")
    };
    assert_eq!(body, PLAIN);
}
