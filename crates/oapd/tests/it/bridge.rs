//! The Ollama bridge end to end: the real `oapd` binary between a client
//! (raw HTTP over loopback) and the scripted fake Ollama, which speaks
//! Ollama's exact wire format and records what oapd forwarded. Tools are
//! the bundled manifests, executed for real (coreutils `wc`).

use crate::support;

use std::time::Duration;

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn models() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .model(ModelSpec::new("tiny").capabilities(&["completion"]))
        .check_host(true)
}

fn daemon_for(upstream: &Upstream) -> Daemon {
    support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start()
}

/// NDJSON lines of a streamed response.
fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l)
                .unwrap_or_else(|e| panic!("bad line {e}: {}", String::from_utf8_lossy(l)))
        })
        .collect()
}

fn content_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c.pointer("/message/content").and_then(Value::as_str))
        .collect()
}

/// The names of the tools a request forwarded to Ollama offers.
fn offered_tools(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .expect("tools injected")
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect()
}

/// Exactly one `done:true`, and it is the last line.
fn assert_one_final_done(chunks: &[Value]) {
    let done: Vec<usize> = chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| c["done"] == true)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        done,
        vec![chunks.len() - 1],
        "done:true must appear once, last: {chunks:#?}"
    );
}

const WC_TASK: &str = "count the words in this text: one two three four";

#[test]
fn a_discovered_tool_is_executed_and_the_answer_streams_back() {
    let upstream = fake(
        models()
            .turn(Turn::chunks(vec![
                Chunk::content("Let me count. "),
                Chunk::tool_call(
                    "oap_wc",
                    json!({"args": "-w", "stdin": "one two three four"}),
                ),
            ]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": WC_TASK}],
                "options": {"num_ctx": 8192}, "keep_alive": "5m", "think": false})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("application/x-ndjson")
    );
    let chunks = lines(&response.body);
    assert_one_final_done(&chunks);
    let last = chunks.last().unwrap();
    assert_eq!(last["oap_round"], 2);
    assert!(last["oap_tools_injected"].as_u64().unwrap() >= 1);
    // The tool ran for real: wc -w counted four words; the model echoed it.
    assert!(content_of(&chunks).contains('4'), "{chunks:#?}");
    assert!(content_of(&chunks).starts_with("Let me count."));
    // No tool call of oapd's own leaks to the client.
    assert!(chunks
        .iter()
        .all(|c| c.pointer("/message/tool_calls").is_none()));

    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    // Every client field went through unchanged, the extension fields did
    // not; keep_alive waits for the answer (it could unload the model
    // between rounds) and is then set on its own.
    for request in &sent {
        assert_eq!(request["options"]["num_ctx"], 8192);
        assert!(request.get("keep_alive").is_none(), "{request:#}");
        assert_eq!(request["think"], false);
        assert_eq!(request["stream"], true);
    }
    let mut generate = Vec::new();
    for _ in 0..1000 {
        generate = upstream.fake.requests_to("/api/generate");
        if !generate.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(generate.len(), 1, "the client's keep_alive was applied");
    let body = generate[0].body.clone().unwrap();
    assert_eq!(body["keep_alive"], "5m");
    assert_eq!(body["model"], "qwen3:4b");
    let offered = offered_tools(&sent[0]);
    assert!(offered.contains(&"oap_wc"), "{offered:?}");
    // Round two carries the call and its result, with tool_name.
    let messages = sent[1]["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "oap_wc");
    let tool = messages.last().unwrap();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_name"], "oap_wc");
    assert_eq!(tool["content"].as_str().unwrap().trim(), "4");
}

#[test]
fn calls_on_the_final_chunk_string_arguments_and_split_deltas_all_work() {
    let turns = vec![
        // Native path: the call only on the done:true chunk, arguments as a JSON string.
        Turn::chunks(vec![
            Chunk::content("ok"),
            Chunk::done().with_tool_calls(vec![json!({"function": {"index": 0, "name": "oap_wc",
                "arguments": "{\"args\": \"-l\", \"stdin\": \"a\\nb\\nc\\n\"}"}})]),
        ])
        .without_auto_done(),
        Turn::echo(Echo::LastTool),
        // A call streamed in pieces under one index.
        Turn::chunks(vec![
            Chunk::raw_tool_calls(vec![json!({"function": {"index": 0, "name": "oap_wc"}})]),
            Chunk::raw_tool_calls(vec![
                json!({"function": {"index": 0, "arguments": "{\"args\": \"-c\", "}}),
            ]),
            Chunk::raw_tool_calls(vec![
                json!({"function": {"index": 0, "arguments": "\"stdin\": \"hello\"}"}}),
            ]),
        ]),
        Turn::echo(Echo::LastTool),
    ];
    let mut script = models();
    for turn in turns {
        script = script.turn(turn);
    }
    let upstream = fake(script);
    let daemon = daemon_for(&upstream);
    for expected in ["3", "5"] {
        let response = daemon.post_json(
            "/api/chat",
            &json!({"model": "qwen3:4b", "stream": false,
                    "messages": [{"role": "user", "content": WC_TASK}]})
            .to_string(),
        );
        assert_eq!(
            response.status,
            200,
            "{}",
            String::from_utf8_lossy(&response.body)
        );
        let body = response.json();
        assert_eq!(body["done"], true);
        assert_eq!(body["oap_round"], 2);
        assert!(
            body["message"]["content"]
                .as_str()
                .unwrap()
                .contains(expected),
            "{body}"
        );
    }
}

#[test]
fn the_clients_own_tools_are_kept_and_their_calls_handed_back() {
    let upstream = fake(models().turn(Turn::chunks(vec![Chunk::tool_call(
        "HassTurnOn",
        json!({"name": "kitchen light"}),
    )])));
    let daemon = daemon_for(&upstream);
    let client_tool = json!({"type": "function", "function": {"name": "HassTurnOn",
        "description": "Turns on a device", "parameters": {"type": "object",
        "properties": {"name": {"type": "string"}}, "required": ["name"]}}});
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "tools": [client_tool],
                "messages": [{"role": "user", "content": "turn on the kitchen light"}]})
        .to_string(),
    );
    let chunks = lines(&response.body);
    assert_one_final_done(&chunks);
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/message/tool_calls"))
        .collect();
    assert_eq!(
        calls.len(),
        1,
        "the client's call is handed back once: {chunks:#?}"
    );
    assert_eq!(calls[0][0]["function"]["name"], "HassTurnOn");
    assert_eq!(
        calls[0][0]["function"]["arguments"]["name"],
        "kitchen light"
    );
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 1, "nothing was executed by oapd");
    let offered: Vec<&str> = sent[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect();
    assert!(offered.contains(&"HassTurnOn"), "{offered:?}");
}

#[test]
fn models_without_tools_get_the_request_untouched() {
    let upstream = fake(models().turn(Turn::reply("Hi there")));
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "tiny", "messages": [{"role": "user", "content": WC_TASK}],
                "oap_top_k": 2})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    let chunks = lines(&response.body);
    assert_eq!(content_of(&chunks).trim(), "Hi there");
    let sent = upstream.fake.chat_requests();
    assert!(sent[0].get("tools").is_none(), "{:?}", sent[0]);
    assert!(
        sent[0].get("oap_top_k").is_none(),
        "extension fields are never forwarded"
    );
}

#[test]
fn when_rounds_run_out_the_model_answers_without_tools() {
    let call = || Turn::tool_call("oap_wc", json!({"args": "-w", "stdin": "x y"}));
    let upstream = fake(
        models()
            .turn(call())
            .turn(call())
            .turn(Turn::reply("Two words.")),
    );
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "oap_max_rounds": 2,
                "messages": [{"role": "user", "content": WC_TASK}]})
        .to_string(),
    );
    let chunks = lines(&response.body);
    assert_one_final_done(&chunks);
    assert_eq!(content_of(&chunks).trim(), "Two words.");
    assert_eq!(chunks.last().unwrap()["oap_round"], 3);
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 3);
    assert!(
        sent[2].get("tools").is_none(),
        "the last call offers no tools"
    );
}

#[test]
fn upstream_errors_reach_the_client_in_ollamas_shape() {
    let upstream = fake(
        models()
            .turn(
                Turn::reply("one two three four five")
                    .error_after(2, "model runner has unexpectedly stopped"),
            )
            .turn(Turn::http_error(500, "out of memory")),
    );
    let daemon = daemon_for(&upstream);
    let request = json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": "hello"}]})
        .to_string();
    // Mid-stream: the error is the last line of a 200 stream.
    let response = daemon.post_json("/api/chat", &request);
    assert_eq!(response.status, 200);
    let chunks = lines(&response.body);
    assert_eq!(
        chunks.last().unwrap()["error"],
        "model runner has unexpectedly stopped"
    );
    assert!(chunks.iter().all(|c| c["done"] != true));
    // Before the first byte: a real status.
    let response = daemon.post_json("/api/chat", &request);
    assert_eq!(response.status, 500);
    assert_eq!(response.error(), "out of memory");
    // Unknown model: Ollama's 404 passes through.
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
    );
    assert_eq!(response.status, 404);
}

#[test]
fn ollama_down_is_a_clear_502() {
    let port = support::free_port();
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: \"http://127.0.0.1:{port}\"\n"
        ))
        .start();
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
    );
    assert_eq!(response.status, 502);
    assert!(
        response.error().contains("cannot reach Ollama"),
        "{}",
        response.error()
    );
    let response = daemon.get("/api/tags");
    assert_eq!(response.status, 502);
    // The discovery API is unaffected.
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn bad_chat_requests_are_refused_before_anything_is_sent() {
    let upstream = fake(models());
    let daemon = daemon_for(&upstream);
    for (body, needle) in [
        ("{not json", "invalid JSON"),
        ("[1]", "JSON object"),
        (r#"{"messages": []}"#, "model"),
        (r#"{"model": "qwen3:4b", "oap_top_k": 99}"#, "oap_top_k"),
        (
            r#"{"model": "qwen3:4b", "oap_max_rounds": 0}"#,
            "oap_max_rounds",
        ),
        (
            r#"{"model": "qwen3:4b", "oap_auto_execute": "yes"}"#,
            "oap_auto_execute",
        ),
    ] {
        let response = daemon.post_json("/api/chat", body);
        assert_eq!(response.status, 400, "{body}");
        assert!(
            response.error().contains(needle),
            "{body}: {}",
            response.error()
        );
    }
    assert!(upstream.fake.chat_requests().is_empty());
}

#[test]
fn bad_openai_bodies_get_openais_error_shape_and_nothing_is_sent() {
    let upstream = fake(models());
    let daemon = daemon_for(&upstream);
    for (body, needle) in [
        ("{not json", "invalid JSON"),
        ("[1]", "must be a JSON object"),
        ("\"text\"", "must be a JSON object"),
    ] {
        let response = daemon.post_json("/v1/chat/completions", body);
        assert_eq!(response.status, 400, "{body}");
        let error = &response.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    assert!(upstream.fake.chat_requests().is_empty());
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn pass_through_routes_stream_with_the_host_rewritten() {
    let upstream = fake(models());
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .env("OAP_SERVER_ALLOWED_HOSTS", "pi.example.org")
        .start();
    // The fake refuses non-loopback Host headers, as Ollama on loopback does.
    let response = daemon.request("GET", "/api/tags", &[("Host", "pi.example.org")], b"");
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(response.json()["models"].as_array().unwrap().len(), 2);
    assert_eq!(daemon.get("/api/version").json()["version"], "0.32.15");
    let root = daemon.get("/");
    assert_eq!(String::from_utf8_lossy(&root.body), "Ollama is running");
    let pull = daemon.post_json("/api/pull", r#"{"model": "qwen3:4b"}"#);
    let progress = lines(&pull.body);
    assert!(progress.len() > 2);
    assert_eq!(progress.last().unwrap()["status"], "success");
    let show = daemon.post_json("/api/show", r#"{"model": "qwen3:4b"}"#);
    assert!(show.json()["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("tools")));
    let recorded = upstream.fake.requests_to("/api/tags");
    assert_eq!(
        recorded[0].header("host"),
        Some(upstream.fake.addr().to_string().as_str())
    );
}

#[test]
fn v1_tools_returns_definitions_and_registry() {
    let upstream = fake(models());
    let daemon = daemon_for(&upstream);
    let body = daemon
        .post_json(
            "/v1/tools",
            r#"{"task": "count the lines in a file", "top_k": 3}"#,
        )
        .json();
    let tools = body["tools"].as_array().unwrap();
    assert!(!tools.is_empty());
    let name = tools[0]["function"]["name"].as_str().unwrap();
    assert!(name.starts_with("oap_"));
    assert_eq!(
        body["registry"][name]["id"],
        format!("local/{}", &name[4..])
    );
    assert_eq!(daemon.post_json("/v1/tools", r#"{"task": ""}"#).status, 400);
}

/// Processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> usize {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
        .count()
}

#[test]
fn a_client_that_disconnects_cancels_the_running_tool() {
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("sleeper.json"),
        br#"{"oap":"1.0","name":"sleeper","description":"Waits for a number of seconds, then returns. Use to pause or wait.","invoke":{"method":"stdio","url":"sleep"},"input":{"format":"text/plain","description":"Seconds to wait, as the argument."},"output":{"format":"text/plain","description":"Nothing."}}"#,
    )
    .unwrap();
    let marker = "37.25"; // an unusual duration identifies our process
    let upstream = fake(models().turn(Turn::tool_call("oap_sleeper", json!({"args": marker}))));
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmanifests:\n  dirs: [{:?}]\ntool_bridge:\n  stdio_timeout: 60\n",
            upstream.fake.url(),
            manifests.path()
        ))
        .start();
    let body = json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": "wait for a few seconds please"}]}).to_string();
    {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(daemon.addr).unwrap();
        write!(
            stream,
            "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while processes_running(&["sleep", marker]) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the tool never started:\n{}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } // the client hangs up while the tool runs
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while processes_running(&["sleep", marker]) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool's process outlived the client that asked for it"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The daemon is fine and serves the next request.
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn unusable_arguments_become_a_tool_message_the_model_can_fix() {
    let upstream = fake(
        models()
            .turn(Turn::chunks(vec![Chunk::raw_tool_calls(vec![
                json!({"function": {"index": 0, "name": "oap_wc", "arguments": "{\"args\": \"-w\", \"stdin\": "}}),
            ])]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false, "messages": [{"role": "user", "content": WC_TASK}]})
            .to_string(),
    );
    assert_eq!(response.status, 200);
    let body = response.json();
    let content = body["message"]["content"].as_str().unwrap();
    assert!(content.contains("not usable"), "{content}");
    assert!(content.contains("oap_wc"), "{content}");
    assert_eq!(body["oap_round"], 2);
}

#[test]
fn the_chat_deadline_bounds_a_hung_upstream() {
    let upstream = fake(models().turn(Turn::hang()));
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n  chat_deadline: 2\n",
            upstream.fake.url()
        ))
        .start();
    let started = std::time::Instant::now();
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": "hello"}]})
            .to_string(),
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(response.status, 504);
    assert!(
        response.error().contains("deadline"),
        "{}",
        response.error()
    );
}

#[test]
fn an_upstream_that_drops_mid_answer_ends_the_stream_with_an_error() {
    let upstream = fake(models().turn(Turn::reply("one two three four five six").drop_after(2)));
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "messages": [{"role": "user", "content": "hello"}]})
            .to_string(),
    );
    assert_eq!(response.status, 200);
    let chunks = lines(&response.body);
    let last = chunks.last().unwrap();
    assert!(last["error"].as_str().is_some(), "{chunks:#?}");
    assert!(
        chunks.iter().all(|c| c["done"] != true),
        "no done after a broken upstream"
    );
    assert_eq!(daemon.get("/health").status, 200);
}

/// A hand-rolled upstream that answers /api/show, starts a streamed chat
/// answer, then waits to see whether oapd hangs up on it. Only the chat
/// gets that answer: anything else the daemon asks on its own (the model
/// list, for request generation and the status page) gets an empty list,
/// so that no background request holds the upstream open instead.
#[test]
fn a_client_that_disconnects_cancels_the_upstream_request() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::mpsc;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed_tx, closed_rx) = mpsc::channel::<Duration>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let closed_tx = closed_tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                reader.read_line(&mut request_line).unwrap();
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    if header == "\r\n" || header.is_empty() {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                if !request_line.starts_with("POST /api/chat ") {
                    let body = if request_line.contains("/api/show") {
                        r#"{"capabilities":["completion","tools"]}"#
                    } else {
                        r#"{"models":[]}"#
                    };
                    // It closes after answering, and says so: a pooled
                    // connection must not be picked for the chat.
                    write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
                    return;
                }
                let chunk = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n";
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n", chunk.len()).unwrap();
                stream.flush().unwrap();
                // Never finish the answer; see how long until oapd hangs up.
                let started = std::time::Instant::now();
                stream
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let mut buf = [0u8; 64];
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 {
                        let _ = closed_tx.send(started.elapsed());
                        return;
                    }
                }
            });
        }
    });
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: \"http://{addr}\"\n"))
        .start();
    let body =
        json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).to_string();
    {
        use std::io::Write as _;
        let mut client = std::net::TcpStream::connect(daemon.addr).unwrap();
        write!(
            client,
            "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("Hel") {
            let n = client.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "stream ended early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    } // the client hangs up after the first chunk
    let waited = closed_rx
        .recv_timeout(Duration::from_secs(15))
        .expect("oapd kept the upstream request open after its client left");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn several_calls_in_one_turn_come_back_in_call_order_with_their_names() {
    let upstream = fake(
        models()
            .turn(Turn::chunks(vec![Chunk::raw_tool_calls(vec![
                json!({"function": {"index": 0, "name": "oap_wc", "arguments": {"args": "-c", "stdin": "abcdefghij"}}}),
                json!({"function": {"index": 1, "name": "oap_wc", "arguments": {"args": "-w", "stdin": "a b c"}}}),
            ])]))
            .turn(Turn::reply("done")),
    );
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false, "messages": [{"role": "user", "content": WC_TASK}]})
            .to_string(),
    );
    assert_eq!(response.status, 200);
    let sent = upstream.fake.chat_requests();
    let messages = sent[1]["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["content"].as_str().unwrap().trim(), "10");
    assert_eq!(tools[1]["content"].as_str().unwrap().trim(), "3");
    assert!(tools.iter().all(|t| t["tool_name"] == "oap_wc"));
    let assistant = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), 2);
}

#[test]
fn a_model_that_is_not_a_string_is_named_as_such() {
    let upstream = fake(models());
    let daemon = daemon_for(&upstream);
    let messages = json!([{"role": "user", "content": WC_TASK}]);
    for model in [json!(5), json!(["qwen3:4b"]), json!({"name": "qwen3:4b"})] {
        let body = json!({"model": model, "messages": messages}).to_string();
        let ollama = daemon.post_json("/api/chat", &body);
        assert_eq!(ollama.status, 400);
        assert!(
            ollama.error().starts_with("`model` must be a string"),
            "{}",
            ollama.error()
        );
        let openai = daemon.post_json("/v1/chat/completions", &body);
        assert_eq!(openai.status, 400);
        let error = &openai.json()["error"];
        assert_eq!(error["param"], "model");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("'model'") && message.contains("expected a string"),
            "{message}"
        );
    }
    // Absent (or null) is still "required".
    let body = json!({"messages": messages}).to_string();
    assert_eq!(
        daemon.post_json("/api/chat", &body).error(),
        "model is required"
    );
    assert!(upstream.fake.chat_requests().is_empty());
}

#[test]
fn a_request_with_two_asks_gets_a_tool_for_each() {
    // Ranked as one text, this request's top three lack a fitting `wc`
    // (oap-discovery's asks tests check that); ask by ask, both the date
    // and the word count are offered to the model.
    let upstream = fake(models().turn(Turn::reply("It is Friday; seven words.")));
    let daemon = daemon_for(&upstream);
    let task = "What is today's date? Also, how many words are in this sentence";
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    let sent = upstream.fake.chat_requests();
    let offered = offered_tools(&sent[0]);
    assert!(
        offered.contains(&"oap_date") && offered.contains(&"oap_wc"),
        "{offered:?}"
    );
}
