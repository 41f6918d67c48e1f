//! What the daemon tells about itself: request ids in answers, logs and
//! requests to Ollama; `GET /metrics` after real traffic, parsed as
//! Prometheus exposition; `GET /v1/requests`; and no content in the logs
//! unless the operator asks for it. The real binary, the fake Ollama, real
//! tools (`wc`, and an HTTP tool on a loopback server of the test's own).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, fake, Daemon, Upstream};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

const TOKEN: &str = "observability-token";

fn models() -> Script {
    Script::new().model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
}

/// A model that calls `oap_wc` once, then repeats its result.
fn wc_script() -> Script {
    models()
        .turn(Turn::chunks(vec![Chunk::tool_call(
            "oap_wc",
            json!({"args": "-w", "stdin": "one two three four"}),
        )]))
        .turn(Turn::echo(Echo::LastTool))
}

fn daemon_for(upstream: &Upstream, server_yaml: &[(&str, &str)]) -> Daemon {
    let mut builder =
        support::daemon().yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()));
    for (key, value) in server_yaml {
        builder = builder.server(key, value);
    }
    builder.start()
}

fn chat(daemon: &Daemon, task: &str, headers: &[(&str, &str)]) -> support::Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    daemon.request(
        "POST",
        "/api/chat",
        &all,
        json!({"model": "qwen3:4b", "stream": false,
               "messages": [{"role": "user", "content": task}]})
        .to_string()
        .as_bytes(),
    )
}

fn is_generated_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A secret no log line could hold by chance.
fn secret() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("hunter2-{nanos:09}{}", std::process::id())
}

#[test]
fn every_answer_carries_a_request_id_the_clients_when_usable() {
    // A small body cap, so the refused body fits in the socket's buffer:
    // the daemon answers 413 without reading it, and a body larger than the
    // buffer would make the client's write fail before it reads the answer.
    let daemon = support::daemon()
        .server("auth_token", &format!("{TOKEN:?}"))
        .server("max_body_bytes", "4096")
        .server("max_task_bytes", "1024")
        .start_with_auth(TOKEN);
    let bearer = format!("Bearer {TOKEN}");
    let auth = ("Authorization", bearer.as_str());
    // Errors too: 401 without the token, 404, 405, 413.
    let refused = daemon.get("/health");
    assert_eq!(refused.status, 401);
    let generated = refused.header("x-request-id").expect("an id on a 401");
    assert!(is_generated_id(generated), "{generated:?}");
    let missing = daemon.request("GET", "/v1/manifests/no-such-id", &[auth], b"");
    assert_eq!(missing.status, 404);
    assert!(is_generated_id(missing.header("x-request-id").unwrap()));
    let wrong_method = daemon.request("DELETE", "/health", &[auth], b"");
    assert_eq!(wrong_method.status, 405);
    assert!(is_generated_id(
        wrong_method.header("x-request-id").unwrap()
    ));
    let large = vec![b'x'; 16 * 1024];
    let too_large = daemon.request("POST", "/v1/discover", &[auth], &large);
    assert_eq!(too_large.status, 413);
    assert!(is_generated_id(too_large.header("x-request-id").unwrap()));
    // Two requests, two ids.
    let other = daemon.get("/health");
    assert_ne!(other.header("x-request-id"), Some(generated));

    // The client's own id comes back unchanged.
    let given = "trace-7f3a:client/42";
    let echoed = daemon.request("GET", "/health", &[auth, ("X-Request-Id", given)], b"");
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.header("x-request-id"), Some(given));
    // Unusable ones are replaced: a space, too long, not ASCII.
    let long = "a".repeat(129);
    for bad in ["with space", long.as_str(), "caf\u{e9}"] {
        let answer = daemon.request("GET", "/health", &[auth, ("X-Request-Id", bad)], b"");
        assert_eq!(answer.status, 200);
        let id = answer.header("x-request-id").unwrap();
        assert!(is_generated_id(id), "{bad:?} gave {id:?}");
    }
    let longest = "b".repeat(128);
    let answer = daemon.request(
        "GET",
        "/health",
        &[auth, ("X-Request-Id", longest.as_str())],
        b"",
    );
    assert_eq!(answer.header("x-request-id"), Some(longest.as_str()));
}

#[test]
fn a_bridged_chat_logs_its_request_id_and_sends_it_to_ollama() {
    let upstream = fake(wc_script());
    let daemon = daemon_for(&upstream, &[]);
    let id = "chat-request-0001";
    let response = chat(
        &daemon,
        "count the words in this text: one two three four",
        &[("X-Request-Id", id)],
    );
    assert_eq!(response.status, 200, "{}", response.error());
    assert_eq!(response.header("x-request-id"), Some(id));
    // Every request oapd made for it carries the id: /api/show and both rounds.
    let sent = upstream.fake.requests();
    let chats: Vec<_> = sent.iter().filter(|r| r.path == "/api/chat").collect();
    assert_eq!(chats.len(), 2);
    for request in sent
        .iter()
        .filter(|r| r.path == "/api/chat" || r.path == "/api/show")
    {
        assert_eq!(request.header("x-request-id"), Some(id), "{}", request.path);
    }
    // The tool ran in the loop's own task, and its log line has the id.
    let log = daemon.log_text();
    let tagged = |needle: &str| {
        log.lines()
            .any(|line| line.contains(needle) && line.contains(&format!("request_id={id}")))
    };
    assert!(tagged("tool call succeeded"), "{log}");
    assert!(tagged("tools offered"), "{log}");
}

/// One sample of an exposition: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A small parser of the text exposition format: `# TYPE`/`# HELP`/`# UNIT`
/// lines, `# EOF`, and samples `name{label="value",...} number`. Fails the
/// test on anything else.
fn parse_exposition(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
    let mut samples = Vec::new();
    let mut types = BTreeMap::new();
    let mut saw_eof = false;
    for line in text.lines() {
        assert!(!saw_eof, "text after # EOF: {line:?}");
        if line == "# EOF" {
            saw_eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "info", "unknown"].contains(&kind),
                "{line}"
            );
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line:?}");
        let (name, rest) = match line.find(['{', ' ']) {
            Some(at) => line.split_at(at),
            None => panic!("no value: {line:?}"),
        };
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
            "bad metric name in {line:?}"
        );
        let mut labels = BTreeMap::new();
        let rest = if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let mut end = None;
            loop {
                let start = match chars.peek() {
                    Some(&(_, '}')) => {
                        end = Some(chars.next().unwrap().0);
                        break;
                    }
                    Some(&(i, _)) => i,
                    None => break,
                };
                let eq = inner[start..].find('=').expect("label=") + start;
                let key = &inner[start..eq];
                assert!(
                    key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                    "bad label name {key:?} in {line:?}"
                );
                while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                    chars.next();
                }
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    match chars.next().expect("unterminated label value").1 {
                        '\\' => match chars.next().unwrap().1 {
                            'n' => value.push('\n'),
                            other => value.push(other),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(key.to_string(), value);
                if chars.peek().map(|&(_, c)| c) == Some(',') {
                    chars.next();
                }
            }
            let end = end.unwrap_or_else(|| panic!("unterminated labels: {line:?}"));
            &inner[end + 1..]
        } else {
            rest
        };
        let value = rest.trim();
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    assert!(saw_eof, "no # EOF");
    (samples, types)
}

fn scrape(daemon: &Daemon, auth: &[(&str, &str)]) -> Vec<Sample> {
    let response = daemon.request("GET", "/metrics", auth, b"");
    assert_eq!(response.status, 200, "{}", response.error());
    assert!(response
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = String::from_utf8(response.body.clone()).unwrap();
    let (samples, types) = parse_exposition(&text);
    // Every sample belongs to a declared family.
    for sample in &samples {
        let family = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| sample.name.strip_suffix(suffix))
            .filter(|base| types.contains_key(*base))
            .unwrap_or(&sample.name);
        assert!(types.contains_key(family), "undeclared {}", sample.name);
    }
    samples
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// `/v1/requests` once the request with `id` is in it (the entry is made
/// when the loop has let go of it, just after the answer).
fn recent_with(daemon: &Daemon, auth: &[(&str, &str)], id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = daemon.request("GET", "/v1/requests", auth, b"");
        assert_eq!(response.status, 200, "{}", response.error());
        let body = response.json();
        if body["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == id)
        {
            return body;
        }
        assert!(Instant::now() < deadline, "{id} never listed: {body:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn metrics_count_a_discovery_and_a_bridged_chat_with_a_tool_call() {
    let upstream = fake(wc_script());
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .server("auth_token", &format!("{TOKEN:?}"))
        .start_with_auth(TOKEN);
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("Authorization", bearer.as_str())];
    // Same rules as the API: no token, no metrics.
    assert_eq!(daemon.get("/metrics").status, 401);
    let before = scrape(&daemon, &auth);
    assert_eq!(
        value(&before, "oapd_tool_calls_total", &[("tool", "oap_wc")]),
        0.0
    );

    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend_from_slice(&auth);
    let discovered = daemon.request(
        "POST",
        "/v1/discover",
        &headers,
        br#"{"task": "count the words in this paragraph"}"#,
    );
    assert_eq!(discovered.status, 200);
    let abstained = daemon.request(
        "POST",
        "/v1/discover",
        &headers,
        br#"{"task": "zqxv wvut plok"}"#,
    );
    assert_eq!(abstained.status, 200);
    let answer = chat(
        &daemon,
        "count the words in this text: one two three four",
        &auth,
    );
    assert_eq!(answer.status, 200, "{}", answer.error());
    // Paths clients make up are counted under one route name.
    let passed = daemon.request("GET", "/made-up/path-1234?x=1", &auth, b"");
    assert_eq!(passed.status, 404);
    let id = answer.header("x-request-id").unwrap().to_string();
    recent_with(&daemon, &auth, &id);

    let after = scrape(&daemon, &auth);
    let get = |name: &str, labels: &[(&str, &str)]| value(&after, name, labels);
    assert_eq!(
        get(
            "oapd_http_requests_total",
            &[("route", "/v1/discover"), ("status", "200")]
        ),
        2.0
    );
    assert_eq!(
        get(
            "oapd_http_requests_total",
            &[("route", "/api/chat"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        get(
            "oapd_http_requests_total",
            &[("route", "/metrics"), ("status", "401")]
        ),
        1.0
    );
    assert_eq!(
        get(
            "oapd_http_requests_total",
            &[("route", "ollama"), ("status", "404")]
        ),
        1.0
    );
    assert!(
        after
            .iter()
            .all(|s| s.labels.values().all(|v| !v.contains("made-up"))),
        "a raw path became a label value"
    );
    assert_eq!(
        get(
            "oapd_discovery_duration_seconds_count",
            &[("source", "api")]
        ),
        2.0
    );
    assert_eq!(
        get("oapd_discovery_abstentions_total", &[("source", "api")]),
        1.0
    );
    assert_eq!(
        get(
            "oapd_discovery_duration_seconds_count",
            &[("source", "chat")]
        ),
        1.0
    );
    assert_eq!(
        get(
            "oapd_tool_calls_total",
            &[("tool", "oap_wc"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        get(
            "oapd_tool_call_duration_seconds_count",
            &[("tool", "oap_wc")]
        ),
        1.0
    );
    assert!(get("oapd_tool_call_duration_seconds_sum", &[("tool", "oap_wc")]) > 0.0);
    assert_eq!(get("oapd_chat_rounds_count", &[]), 1.0);
    assert_eq!(get("oapd_chat_rounds_sum", &[]), 2.0);
    assert_eq!(get("oapd_chat_tools_injected_count", &[]), 1.0);
    assert!(get("oapd_chat_tools_injected_sum", &[]) >= 1.0);
    assert_eq!(
        get(
            "oapd_upstream_request_duration_seconds_count",
            &[("endpoint", "chat")]
        ),
        2.0
    );
    assert_eq!(
        get(
            "oapd_upstream_errors_total",
            &[("endpoint", "other"), ("kind", "status_4xx")]
        ),
        1.0
    );
    assert!(get("oapd_index_manifests", &[]) > 0.0);
    assert!(get("oapd_index_size_bytes", &[]) > 0.0);
    assert!(get("oapd_process_resident_memory_bytes", &[]) > 1_000_000.0);
    assert_eq!(
        get("oapd_inflight_body_capacity_bytes", &[]),
        160.0 * 1024.0 * 1024.0
    );
    // Histogram buckets are cumulative and end in +Inf = count.
    let buckets: Vec<&Sample> = after
        .iter()
        .filter(|s| {
            s.name == "oapd_tool_call_duration_seconds_bucket"
                && s.labels.get("tool").map(String::as_str) == Some("oap_wc")
        })
        .collect();
    assert!(buckets.windows(2).all(|w| w[0].value <= w[1].value));
    assert_eq!(buckets.last().unwrap().labels["le"], "+Inf");
    assert_eq!(buckets.last().unwrap().value, 1.0);
}

const RECORD_KEYS: [&str; 9] = [
    "duration_ms",
    "error",
    "id",
    "model",
    "rounds",
    "route",
    "started_unix_ms",
    "status",
    "tools_injected",
];

#[test]
fn recent_requests_show_rounds_and_calls_without_content() {
    let secret = secret();
    let upstream = fake(
        models()
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_wc",
                json!({"args": "-w", "stdin": format!("one two {secret}")}),
            )]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_for(&upstream, &[]);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let answer = chat(
        &daemon,
        &format!("count the words in this text: one two {secret}"),
        &[],
    );
    assert_eq!(answer.status, 200, "{}", answer.error());
    let id = answer.header("x-request-id").unwrap().to_string();
    let body = recent_with(&daemon, &[], &id);
    let text = body.to_string();
    assert!(!text.contains(&secret), "content in /v1/requests: {text}");
    let entry = &body["requests"][0];
    let mut keys: Vec<&str> = entry
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, RECORD_KEYS, "{entry:#}");
    assert_eq!(entry["id"], id.as_str());
    assert_eq!(entry["route"], "/api/chat");
    assert_eq!(entry["model"], "qwen3:4b");
    assert_eq!(entry["status"], 200);
    assert!(entry["error"].is_null());
    let at = entry["started_unix_ms"].as_u64().unwrap();
    assert!(
        at + 1000 >= started && at < started + 60_000,
        "{at} vs {started}"
    );
    assert!(entry["duration_ms"].as_f64().unwrap() > 0.0);
    let injected: Vec<&str> = entry["tools_injected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(injected.contains(&"oap_wc"), "{injected:?}");
    let rounds = entry["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{entry:#}");
    assert_eq!(rounds[0]["number"], 1);
    assert_eq!(rounds[1]["number"], 2);
    let call = &rounds[0]["calls"][0];
    let mut call_keys: Vec<&str> = call
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    call_keys.sort_unstable();
    assert_eq!(call_keys, ["duration_ms", "name", "outcome"]);
    assert_eq!(call["name"], "oap_wc");
    assert_eq!(call["outcome"], "ok");
    assert!(call["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(rounds[0]["duration_ms"].as_f64().unwrap() >= call["duration_ms"].as_f64().unwrap());
    assert_eq!(rounds[1]["calls"], json!([]));

    // A call to the client's own tool is listed as handed back.
    upstream
        .fake
        .set_script(models().turn(Turn::chunks(vec![Chunk::tool_call(
            "get_weather",
            json!({"city": "Paris"}),
        )])));
    let client_tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather of a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}}}]);
    let answer = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false, "tools": client_tools,
                "messages": [{"role": "user", "content": "weather in Paris?"}]})
        .to_string(),
    );
    assert_eq!(answer.status, 200, "{}", answer.error());
    let id = answer.header("x-request-id").unwrap().to_string();
    let body = recent_with(&daemon, &[], &id);
    let newest = &body["requests"][0];
    assert_eq!(newest["id"], id.as_str(), "newest first");
    assert_eq!(
        newest["rounds"][0]["calls"],
        json!([{"name": "get_weather", "outcome": "client", "duration_ms": 0.0}])
    );
}

#[test]
fn the_list_of_recent_requests_is_bounded_and_can_be_turned_off() {
    let upstream = fake(models());
    let daemon = daemon_for(&upstream, &[("recent_requests", "2")]);
    let mut ids = Vec::new();
    for n in 0..3 {
        upstream.fake.push_turn(Turn::reply("hello"));
        let answer = chat(&daemon, &format!("say hello, number {n}"), &[]);
        assert_eq!(answer.status, 200, "{}", answer.error());
        ids.push(answer.header("x-request-id").unwrap().to_string());
        recent_with(&daemon, &[], &ids[n]);
    }
    let body = daemon.get("/v1/requests").json();
    let listed: Vec<&str> = body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);

    let off = daemon_for(&upstream, &[("recent_requests", "0")]);
    let response = off.get("/v1/requests");
    assert_eq!(response.status, 404);
    assert!(response.error().contains("server.recent_requests"));
}

#[test]
fn with_log_content_an_entry_has_a_short_preview_of_the_messages() {
    let upstream = fake(models().turn(Turn::reply("hello")));
    let daemon = daemon_for(&upstream, &[("log_content", "true")]);
    let long = "word ".repeat(300);
    let answer = chat(&daemon, &format!("say hello {long}"), &[]);
    assert_eq!(answer.status, 200, "{}", answer.error());
    let id = answer.header("x-request-id").unwrap().to_string();
    let body = recent_with(&daemon, &[], &id);
    let preview = body["requests"][0]["messages_preview"].as_str().unwrap();
    assert!(preview.contains("say hello word"), "{preview}");
    assert_eq!(preview.chars().count(), 512);
}

/// A loopback HTTP server that answers every request with a short text
/// and remembers the request lines.
fn http_tool_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            record.lock().unwrap().push(line.trim_end().to_string());
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
            }
            let body = "a word that was looked up";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

/// An operator directory with an HTTP GET tool on `port`.
fn lookup_manifest_dir(port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("word-lookup.json"),
        json!({
            "oap": "1.0",
            "name": "word-lookup",
            "description": "Looks up the dictionary definition of an English word and returns its meaning.",
            "input": {"format": "application/json", "description": "The word to define.",
                      "parameters": {"word": {"type": "string", "description": "the word", "required": true}}},
            "output": {"format": "text/plain", "description": "The definition."},
            "invoke": {"method": "GET", "url": format!("http://127.0.0.1:{port}/define")}
        })
        .to_string(),
    )
    .unwrap();
    dir
}

/// Runs a stdio call (`wc`) and an HTTP call (a GET with a query string)
/// whose arguments, and the user's messages, hold `secret`; returns the
/// daemon's log.
fn chats_with_a_secret(secret: &str, rust_log: &str, log_content: bool) -> String {
    let (port, seen) = http_tool_server();
    let dir = lookup_manifest_dir(port);
    let upstream = fake(
        models()
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_wc",
                json!({"args": "-w", "stdin": format!("one two {secret}")}),
            )]))
            .turn(Turn::echo(Echo::LastTool))
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_word_lookup",
                json!({"word": secret}),
            )]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let mut builder = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmanifests:\n  dirs: [{:?}]\n",
            upstream.fake.url(),
            dir.path()
        ))
        .env("RUST_LOG", rust_log);
    if log_content {
        builder = builder.server("log_content", "true");
    }
    let daemon = builder.start();
    let answer = chat(
        &daemon,
        &format!("count the words in this text: one two {secret}"),
        &[],
    );
    assert_eq!(answer.status, 200, "{}", answer.error());
    let answer = chat(
        &daemon,
        &format!("look up the dictionary definition of the word {secret}"),
        &[],
    );
    assert_eq!(answer.status, 200, "{}", answer.error());
    // Both tools ran with the secret in their arguments.
    let sent = upstream.fake.chat_requests();
    let results: Vec<String> = sent
        .iter()
        .map(support::last_message)
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(results.len(), 2, "{sent:#?}");
    assert_eq!(results[0].trim(), "3");
    let lines = seen.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("/define?word=") && l.contains(secret)),
        "{lines:?}"
    );
    let mut daemon = daemon;
    daemon.terminate();
    daemon.log_text()
}

#[test]
fn no_message_argument_or_result_reaches_the_log_unless_the_operator_asks() {
    let secret = secret();
    for level in ["info", "debug"] {
        let log = chats_with_a_secret(&secret, level, false);
        assert!(
            log.contains("tool call succeeded"),
            "the calls were logged at {level}: {log}"
        );
        assert!(
            !log.contains(&secret),
            "content in the log at RUST_LOG={level}:\n{log}"
        );
    }
    // The operator's opt-in shows it at debug: the test can see a leak.
    let log = chats_with_a_secret(&secret, "debug", true);
    assert!(log.contains(&secret), "{log}");
    assert!(log.contains("oap_content"), "{log}");
}
