//! The fake over real sockets: every script feature, the endpoints, the
//! host check, recording and the control endpoints.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fake_ollama::{Chunk, Echo, FakeOllama, ModelSpec, Script, Turn};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn lines(&self) -> Vec<Value> {
        self.body
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    host: &str,
    body: Option<Vec<u8>>,
) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("user-agent", "fake-ollama-test/1");
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

async fn call_with_host(
    addr: SocketAddr,
    method: Method,
    path: &str,
    host: &str,
    body: Option<Value>,
) -> Reply {
    let response = send(
        addr,
        method,
        path,
        host,
        body.map(|b| b.to_string().into_bytes()),
    )
    .await;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Reply {
        status,
        content_type,
        body,
    }
}

async fn call(fake: &FakeOllama, method: Method, path: &str, body: Option<Value>) -> Reply {
    call_with_host(fake.addr(), method, path, "127.0.0.1:11434", body).await
}

async fn chat(fake: &FakeOllama, body: Value) -> Reply {
    call(fake, Method::POST, "/api/chat", Some(body)).await
}

/// The frames of a streamed body with their arrival times, and how it ended.
async fn frames(response: Response<Incoming>) -> (Vec<(Instant, Bytes)>, Result<(), String>) {
    let mut body = response.into_body();
    let mut out = Vec::new();
    loop {
        match body.frame().await {
            None => return (out, Ok(())),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    out.push((Instant::now(), data));
                }
            }
            Some(Err(err)) => return (out, Err(err.to_string())),
        }
    }
}

fn lines_of(frames: &[(Instant, Bytes)]) -> Vec<Value> {
    let all: Vec<u8> = frames.iter().flat_map(|(_, b)| b.to_vec()).collect();
    all.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn models() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").with_capability("thinking"))
        .model(ModelSpec::new("llama3").without_tools())
        .model(ModelSpec::new("nomic-embed-text").capabilities(&["embedding"]))
}

fn message_contents(lines: &[Value]) -> String {
    lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect()
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn basic_endpoints() {
    let fake = FakeOllama::start(models()).await.unwrap();
    let root = call(&fake, Method::GET, "/", None).await;
    assert_eq!(
        (root.status, root.text().as_str()),
        (200, "Ollama is running")
    );
    let head = call(&fake, Method::HEAD, "/", None).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        call(&fake, Method::GET, "/api/version", None).await.json(),
        json!({"version": "0.32.15"})
    );

    let tags = call(&fake, Method::GET, "/api/tags", None).await.json();
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["qwen3:4b", "llama3:latest", "nomic-embed-text:latest"]
    );
    assert_eq!(tags["models"][0]["details"]["format"], json!("gguf"));
    assert_eq!(tags["models"][0]["digest"].as_str().unwrap().len(), 64);

    let show = call(
        &fake,
        Method::POST,
        "/api/show",
        Some(json!({"model": "llama3"})),
    )
    .await
    .json();
    assert_eq!(show["capabilities"], json!(["completion"]));
    assert!(show["model_info"]["general.architecture"].is_string());
    let show = call(
        &fake,
        Method::POST,
        "/api/show",
        Some(json!({"name": "qwen3:4b"})),
    )
    .await
    .json();
    assert_eq!(
        show["capabilities"],
        json!(["completion", "tools", "thinking"])
    );
    let missing = call(
        &fake,
        Method::POST,
        "/api/show",
        Some(json!({"model": "nope"})),
    )
    .await;
    assert_eq!(
        (missing.status, missing.json()),
        (404, json!({"error": "model 'nope' not found"}))
    );

    let v1 = call(&fake, Method::GET, "/v1/models", None).await.json();
    assert_eq!(v1["object"], json!("list"));
    assert_eq!(
        v1["data"][1],
        json!({"id": "llama3:latest", "object": "model", "created": 1_785_585_600, "owned_by": "library"})
    );
    let one = call(&fake, Method::GET, "/v1/models/llama3", None).await;
    assert_eq!(one.json()["id"], json!("llama3:latest"));
    assert_eq!(
        call(&fake, Method::GET, "/v1/models/nope", None)
            .await
            .json()["error"]["type"],
        json!("not_found_error")
    );

    // /api/ps lists the models that have been used.
    assert_eq!(
        call(&fake, Method::GET, "/api/ps", None).await.json(),
        json!({"models": []})
    );
    fake.push_turn(Turn::reply("hi"));
    chat(&fake, json!({"model": "llama3", "messages": user("x")})).await;
    let ps = call(&fake, Method::GET, "/api/ps", None).await.json();
    assert_eq!(ps["models"][0]["name"], json!("llama3:latest"));
    assert!(ps["models"][0]["expires_at"].is_string());
}

#[tokio::test]
async fn a_streamed_reply_ends_with_one_done_line_carrying_metrics() {
    let fake = FakeOllama::start(models().turn(Turn::reply("Hello there, friend.")))
        .await
        .unwrap();
    let reply = chat(&fake, json!({"model": "qwen3:4b", "messages": user("hi")})).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/x-ndjson");
    let lines = reply.lines();
    assert_eq!(lines.len(), 4);
    assert_eq!(message_contents(&lines), "Hello there, friend.");
    assert_eq!(lines.iter().filter(|l| l["done"] == json!(true)).count(), 1);
    let last = lines.last().unwrap();
    assert_eq!(last["done"], json!(true));
    assert_eq!(last["done_reason"], json!("stop"));
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(last[key].is_u64(), "{key} missing");
    }
    for line in &lines {
        assert_eq!(line["model"], json!("qwen3:4b"));
        assert_eq!(line["message"]["role"], json!("assistant"));
        assert!(line["created_at"].as_str().unwrap().ends_with('Z'));
    }
    assert!(lines[0].get("done_reason").is_none() && lines[0].get("eval_count").is_none());
}

fn rich_turn() -> Turn {
    Turn::chunks(vec![
        Chunk::thinking("Let me "),
        Chunk::thinking("think."),
        Chunk::content("Checking "),
        Chunk::tool_call("get_weather", json!({"city": "Paris"})),
        Chunk::content("both."),
        Chunk::raw_tool_calls(vec![
            json!({"id": "call_zzzzzzzz", "function": {"index": 1, "name": "get_time", "arguments": {}}}),
        ]),
        Chunk::done().with("eval_count", json!(99)),
    ])
}

#[tokio::test]
async fn stream_false_aggregates_exactly_like_the_stream() {
    let fake = FakeOllama::start(models().turn(rich_turn()).turn(rich_turn()))
        .await
        .unwrap();
    let streamed = chat(&fake, json!({"model": "qwen3:4b", "messages": user("x")}))
        .await
        .lines();
    let whole = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}),
    )
    .await;
    assert_eq!(whole.content_type, "application/json; charset=utf-8");
    let whole = whole.json();

    let last = streamed.last().unwrap();
    assert_eq!(whole["message"]["content"], json!("Checking both."));
    assert_eq!(whole["message"]["thinking"], json!("Let me think."));
    let calls = whole["message"]["tool_calls"].as_array().unwrap();
    let streamed_calls: Vec<Value> = streamed
        .iter()
        .filter_map(|l| l["message"]["tool_calls"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(calls.len(), 2);
    // Same shapes (generated ids differ between the two requests).
    for (a, b) in calls.iter().zip(&streamed_calls) {
        assert_eq!(a["function"], b["function"]);
    }
    assert_eq!(calls[1]["id"], json!("call_zzzzzzzz"));
    assert_eq!(whole["done"], json!(true));
    assert_eq!(whole["eval_count"], json!(99));
    assert_eq!(whole["eval_count"], last["eval_count"]);
    assert_eq!(whole["done_reason"], last["done_reason"]);
    assert_eq!(whole["model"], last["model"]);
}

#[tokio::test]
async fn tool_call_shapes_rendered_native_string_split_and_several() {
    let fake = FakeOllama::start(
        models()
            // rendered path: a whole call on a done:false chunk
            .turn(Turn::tool_call("get_weather", json!({"city": "Paris"})))
            // native path: every call on the done chunk, one with string arguments
            .turn(Turn::native_tool_calls(vec![
                ("get_weather", json!({"city": "Rome"})),
                ("get_time", json!("{\"tz\": \"UTC\"}")),
            ]))
            // split argument deltas under one function.index (Ollama's streaming shape)
            .turn(Turn::chunks(vec![
                Chunk::raw_tool_calls(vec![
                    json!({"function": {"index": 0, "name": "get_weather"}}),
                ]),
                Chunk::raw_tool_calls(vec![
                    json!({"function": {"index": 0, "arguments": "{\"city\": \"Pa"}}),
                ]),
                Chunk::raw_tool_calls(vec![
                    json!({"function": {"index": 0, "arguments": "ris\"}"}}),
                ]),
            ])),
    )
    .await
    .unwrap();
    let body = json!({"model": "qwen3:4b", "messages": user("x"), "tools": [{"type": "function", "function": {"name": "get_weather"}}]});

    let rendered = chat(&fake, body.clone()).await.lines();
    assert_eq!(rendered.len(), 2);
    assert_eq!(rendered[0]["done"], json!(false));
    let call = &rendered[0]["message"]["tool_calls"][0];
    assert_eq!(
        call["function"],
        json!({"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}})
    );
    let id = call["id"].as_str().unwrap();
    assert!(id.starts_with("call_") && id.len() == 13);
    assert_eq!(rendered[0]["message"]["content"], json!(""));
    assert!(rendered[1]["message"].get("tool_calls").is_none());

    let native = chat(&fake, body.clone()).await.lines();
    assert_eq!(native.len(), 1);
    assert_eq!(native[0]["done"], json!(true));
    let calls = native[0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["function"]["index"], json!(0));
    assert_eq!(
        calls[1]["function"],
        json!({"index": 1, "name": "get_time", "arguments": "{\"tz\": \"UTC\"}"})
    );
    assert_ne!(calls[0]["id"], calls[1]["id"]);

    let split = chat(&fake, body).await.lines();
    assert_eq!(split.len(), 4);
    assert_eq!(
        split[1]["message"]["tool_calls"],
        json!([{"function": {"index": 0, "arguments": "{\"city\": \"Pa"}}])
    );
    let mut acc = oap_wire::ToolCallAccumulator::new();
    split.iter().for_each(|l| acc.push_chunk(l));
    let calls = acc.finish();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        Value::Object(calls[0].arguments.clone()),
        json!({"city": "Paris"})
    );
}

#[tokio::test]
async fn scripted_http_errors_and_capability_checks() {
    let fake = FakeOllama::start(
        models()
            .turn(Turn::http_error(400, "llama3 does not support tools"))
            .turn(Turn::reply("after")),
    )
    .await
    .unwrap();
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()),
        (400, json!({"error": "llama3 does not support tools"}))
    );

    // Tools for a model without the capability: refused, turn not consumed.
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let reply = chat(
        &fake,
        json!({"model": "llama3", "messages": user("x"), "tools": tools}),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()),
        (400, json!({"error": "llama3 does not support tools"}))
    );
    let reply = chat(
        &fake,
        json!({"model": "llama3", "messages": user("x"), "think": true}),
    )
    .await;
    assert_eq!(
        reply.json(),
        json!({"error": "\"llama3\" does not support thinking"})
    );
    let reply = chat(
        &fake,
        json!({"model": "nomic-embed-text", "messages": user("x")}),
    )
    .await;
    assert_eq!(reply.status, 400);
    // An empty tools array is fine, as in Ollama.
    let reply = chat(
        &fake,
        json!({"model": "llama3", "messages": user("x"), "tools": []}),
    )
    .await;
    assert_eq!(message_contents(&reply.lines()), "after");

    let reply = chat(&fake, json!({"model": "mistral", "messages": user("x")})).await;
    assert_eq!(
        (reply.status, reply.json()),
        (404, json!({"error": "model 'mistral' not found"}))
    );

    // With the checks off, anything goes.
    fake.set_script(models().check_capabilities(false).turn(Turn::reply("ok")));
    let reply = chat(
        &fake,
        json!({"model": "llama3", "messages": user("x"), "tools": tools}),
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_mid_stream_error_line_and_its_stream_false_form() {
    let turn =
        Turn::reply("one two three four").error_after(2, "model runner has unexpectedly stopped");
    let fake = FakeOllama::start(models().turn(turn.clone()).turn(turn))
        .await
        .unwrap();
    let reply = chat(&fake, json!({"model": "qwen3:4b", "messages": user("x")})).await;
    assert_eq!(reply.status, 200);
    let lines = reply.lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(message_contents(&lines[..2]), "one two");
    assert_eq!(
        lines[2],
        json!({"error": "model runner has unexpectedly stopped"})
    );
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()),
        (
            500,
            json!({"error": "model runner has unexpectedly stopped"})
        )
    );
}

#[tokio::test]
async fn dropping_the_connection_after_n_chunks() {
    let fake = FakeOllama::start(
        models()
            .turn(Turn::reply("one two three four").drop_after(2))
            .turn(Turn::reply("x").drop_after(0))
            .turn(Turn::reply("x y").drop_after(1))
            .turn(Turn::reply("still alive")),
    )
    .await
    .unwrap();
    let body = json!({"model": "qwen3:4b", "messages": user("x")})
        .to_string()
        .into_bytes();
    let response = send(
        fake.addr(),
        Method::POST,
        "/api/chat",
        "localhost",
        Some(body.clone()),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (got, end) = frames(response).await;
    assert_eq!(message_contents(&lines_of(&got)), "one two");
    assert!(end.is_err(), "the body must end with an error, not cleanly");

    // drop_after 0: no response at all.
    let stream = TcpStream::connect(fake.addr()).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let request = Request::post("/api/chat")
        .header("host", "localhost")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert!(sender.send_request(request).await.is_err());

    // stream:false with a drop: no response either.
    let stream = TcpStream::connect(fake.addr()).await.unwrap();
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let body = json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}).to_string();
    let request = Request::post("/api/chat")
        .header("host", "localhost")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert!(sender.send_request(request).await.is_err());

    let reply = chat(&fake, json!({"model": "qwen3:4b", "messages": user("x")})).await;
    assert_eq!(message_contents(&reply.lines()), "still alive");
}

#[tokio::test]
async fn hanging_turns_do_not_block_other_requests() {
    let fake = FakeOllama::start(
        models()
            .turn(Turn::hang())
            .turn(Turn::reply("a b c").hang_after(1))
            .turn(Turn::reply("served")),
    )
    .await
    .unwrap();
    let addr = fake.addr();
    let body = json!({"model": "qwen3:4b", "messages": user("x")})
        .to_string()
        .into_bytes();
    let hung = tokio::spawn({
        let body = body.clone();
        async move { send(addr, Method::POST, "/api/chat", "localhost", Some(body)).await }
    });
    fake.wait_for_requests("/api/chat", 1, Duration::from_secs(5))
        .await;

    let response = send(addr, Method::POST, "/api/chat", "localhost", Some(body)).await;
    let mut stalled = response.into_body();
    let first = stalled.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"a\""));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stalled.frame())
            .await
            .is_err(),
        "must stall"
    );

    let reply = chat(&fake, json!({"model": "qwen3:4b", "messages": user("x")})).await;
    assert_eq!(message_contents(&reply.lines()), "served");
    assert!(!hung.is_finished());
    let recorded = fake.requests_to("/api/chat");
    assert_eq!(recorded[0].status, None);
    assert_eq!(recorded[2].status, Some(200));
    fake.shutdown().await;
    // Shutting down closes the hung connection.
    let outcome = tokio::time::timeout(Duration::from_secs(5), hung)
        .await
        .unwrap();
    assert!(
        outcome.is_err(),
        "the hung request's client panicked on the closed connection"
    );
}

#[tokio::test]
async fn delays_are_honoured() {
    let fake = FakeOllama::start(
        models()
            .turn(Turn::chunks(vec![
                Chunk::content("a"),
                Chunk::content("b").delay_ms(150),
            ]))
            .turn(Turn::reply("x").response_delay_ms(150))
            .turn(Turn::reply("p q").delay_ms(80)),
    )
    .await
    .unwrap();
    let body = || {
        Some(
            json!({"model": "qwen3:4b", "messages": user("x")})
                .to_string()
                .into_bytes(),
        )
    };
    // Measured from the request, not from the first frame: on a loaded or
    // emulated machine (the arm64 guest in CI) the first frame itself may arrive
    // late, which shortened a first-to-last gap below the delay.
    let sent = Instant::now();
    let response = send(fake.addr(), Method::POST, "/api/chat", "localhost", body()).await;
    let (got, end) = frames(response).await;
    end.unwrap();
    assert!(got.len() >= 2);
    let last = got.last().unwrap().0 - sent;
    assert!(last >= Duration::from_millis(140), "{last:?}");
    assert!(got[0].0 <= got.last().unwrap().0);

    let start = Instant::now();
    let _ = send(fake.addr(), Method::POST, "/api/chat", "localhost", body()).await;
    assert!(start.elapsed() >= Duration::from_millis(140));

    // stream:false waits as long as the whole generation.
    let start = Instant::now();
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}),
    )
    .await;
    assert!(
        start.elapsed() >= Duration::from_millis(230),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(reply.json()["message"]["content"], json!("p q"));
}

#[tokio::test]
async fn echo_turns_reveal_what_was_sent() {
    let fake = FakeOllama::start(
        Script::new()
            .turn(Turn::echo(Echo::LastTool))
            .turn(Turn::echo(Echo::ToolNames))
            .turn(Turn::echo(Echo::LastUser))
            .turn(Turn::echo(Echo::Request))
            .turn(Turn::echo(Echo::Messages)),
    )
    .await
    .unwrap();
    let body = json!({
        "model": "any", "stream": false, "keep_alive": -1, "options": {"num_ctx": 8192},
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {}}}]},
            {"role": "tool", "content": "{\"temp\": 21}", "tool_name": "get_weather"}
        ],
        "tools": [
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "function", "function": {"name": "HassTurnOn"}}
        ]
    });
    let content = |reply: Reply| {
        reply.json()["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(content(chat(&fake, body.clone()).await), "{\"temp\": 21}");
    assert_eq!(
        content(chat(&fake, body.clone()).await),
        "get_weather,HassTurnOn"
    );
    assert_eq!(content(chat(&fake, body.clone()).await), "Weather?");
    let echoed: Value = serde_json::from_str(&content(chat(&fake, body.clone()).await)).unwrap();
    assert_eq!(echoed, body);
    let echoed: Value = serde_json::from_str(&content(chat(&fake, body.clone()).await)).unwrap();
    assert_eq!(echoed, body["messages"]);
}

#[tokio::test]
async fn turns_are_matched_by_model_and_run_out() {
    let fake = FakeOllama::start(
        models()
            .turn(Turn::reply("for llama").for_model("llama3:latest"))
            .turn(Turn::reply("for anyone")),
    )
    .await
    .unwrap();
    let say = |model: &'static str| {
        chat(
            &fake,
            json!({"model": model, "messages": user("x"), "stream": false}),
        )
    };
    assert_eq!(
        say("qwen3:4b").await.json()["message"]["content"],
        json!("for anyone")
    );
    assert_eq!(
        say("llama3").await.json()["message"]["content"],
        json!("for llama")
    );
    let out = say("llama3").await;
    assert_eq!(out.status, 500);
    assert!(out.json()["error"]
        .as_str()
        .unwrap()
        .contains("no scripted turn left"));
    let recorded = fake.requests_to("/api/chat");
    assert_eq!(
        recorded.iter().map(|r| r.turn).collect::<Vec<_>>(),
        vec![Some(1), Some(0), None]
    );

    // A default turn answers whenever the queue is empty.
    fake.set_script(models().default_turn(Turn::echo(Echo::LastUser)));
    assert_eq!(say("llama3").await.json()["message"]["content"], json!("x"));
    assert_eq!(say("llama3").await.json()["message"]["content"], json!("x"));
}

#[tokio::test]
async fn thinking_is_dropped_when_think_is_false_and_empty_messages_load() {
    let turn = Turn::chunks(vec![Chunk::thinking("hmm"), Chunk::content("ok")]);
    let fake = FakeOllama::start(models().turn(turn.clone()).turn(turn))
        .await
        .unwrap();
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false, "think": false}),
    )
    .await
    .json();
    assert!(reply["message"].get("thinking").is_none());
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false, "think": true}),
    )
    .await
    .json();
    assert_eq!(reply["message"]["thinking"], json!("hmm"));

    let load = chat(&fake, json!({"model": "qwen3:4b", "messages": []}))
        .await
        .json();
    assert_eq!(
        (load["done"].clone(), load["done_reason"].clone()),
        (json!(true), json!("load"))
    );
    let unload = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": [], "keep_alive": 0}),
    )
    .await
    .json();
    assert_eq!(unload["done_reason"], json!("unload"));
    assert_eq!(fake.remaining_turns(), 0);
}

#[tokio::test]
async fn the_host_check_is_ollamas_and_switchable() {
    let fake = FakeOllama::start(models()).await.unwrap();
    for host in [
        "localhost:11434",
        "127.0.0.1",
        "[::1]:11434",
        "ollama.local",
        "192.168.1.5:11434",
        "pi.internal",
    ] {
        let reply = call_with_host(fake.addr(), Method::GET, "/api/version", host, None).await;
        assert_eq!(reply.status, 200, "{host}");
    }
    for host in ["example.com", "proxy.example.com:8080", "8.8.8.8"] {
        let reply = call_with_host(fake.addr(), Method::GET, "/api/version", host, None).await;
        assert_eq!(reply.status, 403, "{host}");
        assert!(reply.body.is_empty());
    }
    let recorded = fake.requests();
    assert_eq!(recorded.last().unwrap().status, Some(403));
    assert_eq!(recorded.last().unwrap().header("Host"), Some("8.8.8.8"));

    fake.set_check_host(false);
    let reply = call_with_host(
        fake.addr(),
        Method::GET,
        "/api/version",
        "example.com",
        None,
    )
    .await;
    assert_eq!(reply.status, 200);
    let fake = FakeOllama::start(models().check_host(false)).await.unwrap();
    let reply = call_with_host(fake.addr(), Method::GET, "/api/tags", "example.com", None).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn requests_are_recorded_with_headers_and_bodies() {
    let fake = FakeOllama::start(models().turn(Turn::reply("ok")))
        .await
        .unwrap();
    let body = json!({
        "model": "qwen3:4b", "messages": [{"role": "user", "content": "x", "images": ["iVBORw0KGgo="]}],
        "options": {"num_ctx": 8192, "temperature": 0.1}, "keep_alive": "5m", "think": false,
        "format": {"type": "object"}, "tools": [{"type": "function", "function": {"name": "client_tool"}}]
    });
    chat(&fake, body.clone()).await;
    call(&fake, Method::GET, "/nope", None).await;
    let recorded = fake.requests();
    assert_eq!(recorded.len(), 2);
    let r = &recorded[0];
    assert_eq!(
        (r.seq, r.method.as_str(), r.path.as_str()),
        (0, "POST", "/api/chat")
    );
    assert_eq!(r.body.as_ref(), Some(&body));
    assert_eq!(r.header("user-agent"), Some("fake-ollama-test/1"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.status, Some(200));
    assert_eq!(r.turn, Some(0));
    assert_eq!(fake.chat_requests(), vec![body]);
    assert_eq!(recorded[1].status, Some(404));
    fake.clear_requests();
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn control_endpoints_drive_the_fake_over_http() {
    let fake = FakeOllama::start(Script::new()).await.unwrap();
    let script = json!({
        "models": [{"name": "qwen3:4b"}],
        "turns": [{"reply": "first"}, {"echo": "last_user"}]
    });
    let reply = call(&fake, Method::POST, "/_fake/script", Some(script)).await;
    assert_eq!(reply.json(), json!({"ok": true, "turns": 2}));
    let reply = call(
        &fake,
        Method::POST,
        "/_fake/script",
        Some(json!({"turnz": []})),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(reply.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("invalid script"));

    let reply = call(
        &fake,
        Method::POST,
        "/_fake/turns",
        Some(json!([{"reply": "third"}, {"reply": "fourth"}])),
    )
    .await;
    assert_eq!(reply.json(), json!({"ok": true, "remaining": 4}));
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/_fake/turns",
            Some(json!({"reply": "fifth"}))
        )
        .await
        .json()["remaining"],
        json!(5)
    );
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/_fake/turns",
            Some(json!({"bogus": 1}))
        )
        .await
        .status,
        400
    );

    let say = || {
        chat(
            &fake,
            json!({"model": "qwen3:4b", "messages": user("hello"), "stream": false}),
        )
    };
    assert_eq!(say().await.json()["message"]["content"], json!("first"));
    assert_eq!(say().await.json()["message"]["content"], json!("hello"));
    call(&fake, Method::GET, "/api/tags", None).await;

    let all = call(&fake, Method::GET, "/_fake/requests", None)
        .await
        .json();
    assert_eq!(
        all.as_array().unwrap().len(),
        3,
        "control requests are not recorded"
    );
    let chats = call(
        &fake,
        Method::GET,
        "/_fake/requests?path=%2Fapi%2Fchat",
        None,
    )
    .await
    .json();
    assert_eq!(chats.as_array().unwrap().len(), 2);
    assert_eq!(chats[0]["body"]["messages"][0]["content"], json!("hello"));
    assert_eq!(chats[0]["headers"]["host"], json!("127.0.0.1:11434"));
    assert_eq!(chats[1]["turn"], json!(1));

    let state = call(&fake, Method::GET, "/_fake/state", None).await.json();
    assert_eq!(state["remaining_turns"], json!(3));
    assert_eq!(
        call(&fake, Method::GET, "/_fake/turns", None).await.json(),
        json!({"remaining": 3})
    );

    // reset: requests forgotten, the loaded script's turns re-armed.
    assert_eq!(
        call(&fake, Method::POST, "/_fake/reset", None).await.json(),
        json!({"ok": true, "remaining": 2})
    );
    assert!(fake.requests().is_empty());
    assert_eq!(say().await.json()["message"]["content"], json!("first"));
    assert_eq!(
        call(&fake, Method::DELETE, "/_fake/requests", None)
            .await
            .status,
        200
    );
    assert!(fake.requests().is_empty());
    assert_eq!(
        call(&fake, Method::GET, "/_fake/nope", None).await.status,
        404
    );
    assert_eq!(
        call(&fake, Method::GET, "/_fake/reset", None).await.status,
        405
    );
}

#[tokio::test]
async fn generate_embed_and_embeddings() {
    let fake = FakeOllama::start(Script {
        generate_reply: Some("Once upon a time".into()),
        ..models()
    })
    .await
    .unwrap();
    let lines = call(
        &fake,
        Method::POST,
        "/api/generate",
        Some(json!({"model": "llama3", "prompt": "Tell me"})),
    )
    .await
    .lines();
    assert_eq!(lines.len(), 5);
    let text: String = lines
        .iter()
        .filter_map(|l| l["response"].as_str())
        .collect();
    assert_eq!(text, "Once upon a time");
    assert_eq!(lines[4]["done"], json!(true));
    assert_eq!(lines[4]["context"], json!([1, 2, 3]));
    let whole = call(
        &fake,
        Method::POST,
        "/api/generate",
        Some(json!({"model": "llama3", "prompt": "Tell me", "stream": false})),
    )
    .await
    .json();
    assert_eq!(whole["response"], json!("Once upon a time"));
    assert_eq!(whole["done_reason"], json!("stop"));
    let unload = call(
        &fake,
        Method::POST,
        "/api/generate",
        Some(json!({"model": "llama3", "keep_alive": 0, "prompt": ""})),
    )
    .await
    .json();
    assert_eq!(unload["done_reason"], json!("unload"));

    let embed = call(
        &fake,
        Method::POST,
        "/api/embed",
        Some(json!({"model": "nomic-embed-text", "input": ["a", "b"]})),
    )
    .await
    .json();
    let vectors = embed["embeddings"].as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(vectors[0].as_array().unwrap().len(), 8);
    assert_ne!(vectors[0], vectors[1]);
    assert!(embed["prompt_eval_count"].is_u64());
    let single = call(
        &fake,
        Method::POST,
        "/api/embed",
        Some(json!({"model": "nomic-embed-text", "input": "a"})),
    )
    .await
    .json();
    assert_eq!(single["embeddings"][0], vectors[0]);
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/api/embed",
            Some(json!({"model": "nomic-embed-text", "input": 5}))
        )
        .await
        .status,
        400
    );
    let legacy = call(
        &fake,
        Method::POST,
        "/api/embeddings",
        Some(json!({"model": "nomic-embed-text", "prompt": "a"})),
    )
    .await
    .json();
    assert_eq!(legacy["embedding"].as_array().unwrap().len(), 8);
}

#[tokio::test]
async fn model_management_pull_create_copy_delete_blobs() {
    let fake = FakeOllama::start(models()).await.unwrap();
    let lines = call(
        &fake,
        Method::POST,
        "/api/pull",
        Some(json!({"model": "phi4"})),
    )
    .await
    .lines();
    assert_eq!(
        lines.first().unwrap(),
        &json!({"status": "pulling manifest"})
    );
    assert_eq!(lines.last().unwrap(), &json!({"status": "success"}));
    assert!(lines
        .iter()
        .any(|l| l["completed"] == l["total"] && l["digest"].is_string()));
    let once = call(
        &fake,
        Method::POST,
        "/api/pull",
        Some(json!({"model": "phi5", "stream": false})),
    )
    .await;
    assert_eq!(
        (once.content_type.as_str(), once.json()),
        (
            "application/json; charset=utf-8",
            json!({"status": "success"})
        )
    );
    let tags = call(&fake, Method::GET, "/api/tags", None).await.json();
    assert_eq!(tags["models"].as_array().unwrap().len(), 5);

    let created = call(
        &fake,
        Method::POST,
        "/api/create",
        Some(json!({"model": "mine", "from": "llama3"})),
    )
    .await
    .lines();
    assert_eq!(created.last().unwrap(), &json!({"status": "success"}));
    let show = call(
        &fake,
        Method::POST,
        "/api/show",
        Some(json!({"model": "mine"})),
    )
    .await
    .json();
    assert_eq!(show["capabilities"], json!(["completion"]));

    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/api/copy",
            Some(json!({"source": "mine", "destination": "yours"}))
        )
        .await
        .status,
        200
    );
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/api/copy",
            Some(json!({"source": "ghost", "destination": "x"}))
        )
        .await
        .status,
        404
    );
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/api/copy",
            Some(json!({"source": "mine"}))
        )
        .await
        .status,
        400
    );
    assert_eq!(
        call(
            &fake,
            Method::DELETE,
            "/api/delete",
            Some(json!({"model": "yours"}))
        )
        .await
        .status,
        200
    );
    assert_eq!(
        call(
            &fake,
            Method::DELETE,
            "/api/delete",
            Some(json!({"model": "yours"}))
        )
        .await
        .status,
        404
    );
    assert_eq!(
        call(
            &fake,
            Method::POST,
            "/api/delete",
            Some(json!({"model": "mine"}))
        )
        .await
        .status,
        405
    );

    let data = b"hello blob".to_vec();
    let digest = fake_ollama::render::digest(&data);
    let path = format!("/api/blobs/{digest}");
    assert_eq!(call(&fake, Method::HEAD, &path, None).await.status, 404);
    let response = send(
        fake.addr(),
        Method::POST,
        &path,
        "localhost",
        Some(b"other".to_vec()),
    )
    .await;
    assert_eq!(response.status(), 400);
    let response = send(fake.addr(), Method::POST, &path, "localhost", Some(data)).await;
    assert_eq!(response.status(), 201);
    assert_eq!(call(&fake, Method::HEAD, &path, None).await.status, 200);
    assert_eq!(
        call(&fake, Method::HEAD, "/api/blobs/sha256:xyz", None)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn bad_input_gets_400_and_unknown_routes_404_405() {
    let fake = FakeOllama::start(models().turn(Turn::reply("fine")))
        .await
        .unwrap();
    for (bytes, expect) in [
        (b"{not json".to_vec(), "key must be a string"),
        (b"[1,2]".to_vec(), "request body must be a JSON object"),
        (b"".to_vec(), "missing request body"),
        (br#"{"messages": []}"#.to_vec(), "model is required"),
        (br#"{"model": 5}"#.to_vec(), "model must be a string"),
        (
            br#"{"model": "qwen3:4b", "stream": "yes"}"#.to_vec(),
            "stream must be a boolean",
        ),
        (
            br#"{"model": "qwen3:4b", "messages": {}}"#.to_vec(),
            "messages must be an array",
        ),
    ] {
        let response = send(
            fake.addr(),
            Method::POST,
            "/api/chat",
            "localhost",
            Some(bytes),
        )
        .await;
        assert_eq!(response.status(), 400);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert!(error["error"].as_str().unwrap().contains(expect), "{error}");
    }
    for path in [
        "/api/generate",
        "/api/show",
        "/api/embed",
        "/api/pull",
        "/api/create",
    ] {
        let response = send(
            fake.addr(),
            Method::POST,
            path,
            "localhost",
            Some(b"nope".to_vec()),
        )
        .await;
        assert_eq!(response.status(), 400, "{path}");
    }
    let reply = call(&fake, Method::GET, "/api/unknown", None).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (404, "404 page not found")
    );
    assert_eq!(
        call(&fake, Method::GET, "/api/chat", None).await.status,
        405
    );
    assert_eq!(
        call(&fake, Method::POST, "/api/tags", None).await.status,
        405
    );
    // The turn is still there after all that.
    let reply = chat(
        &fake,
        json!({"model": "qwen3:4b", "messages": user("x"), "stream": false}),
    )
    .await;
    assert_eq!(reply.json()["message"]["content"], json!("fine"));
}

#[tokio::test]
async fn the_binary_prints_its_address_and_serves_the_script() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/example-script.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-ollama"))
        .args(["--script", script, "--port", "0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr: SocketAddr = line.trim().parse().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0);

    let reply = call_with_host(addr, Method::GET, "/api/version", "localhost", None).await;
    assert_eq!(reply.json(), json!({"version": "0.32.15"}));
    let reply = call_with_host(
        addr,
        Method::POST,
        "/api/chat",
        "localhost",
        Some(json!({"model": "qwen3:4b", "messages": user("hi"), "stream": false})),
    )
    .await;
    assert_eq!(
        reply.json()["message"]["content"],
        json!("Hello! How can I help?")
    );
    let reply = call_with_host(addr, Method::GET, "/api/tags", "evil.example", None).await;
    assert_eq!(reply.status, 403);
    let recorded = call_with_host(addr, Method::GET, "/_fake/requests", "localhost", None)
        .await
        .json();
    assert_eq!(recorded.as_array().unwrap().len(), 3);
    child.kill().await.unwrap();

    let bad = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-ollama"))
        .args(["--script", "/nonexistent/script.json"])
        .output()
        .await
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[tokio::test]
async fn an_after_tool_turn_answers_every_tool_result_so_tool_rounds_repeat() {
    let fake = FakeOllama::start(
        models()
            .default_turn(Turn::tool_call("get_forecast", json!({"city": "Oslo"})))
            .after_tool_turn(Turn::echo(Echo::LastTool)),
    )
    .await
    .unwrap();
    let calls = |reply: &Value| reply["message"]["tool_calls"].as_array().map(Vec::len);
    for round in 0..3 {
        let first = chat(
            &fake,
            json!({"model": "llama3", "messages": user("weather?"), "stream": false}),
        )
        .await
        .json();
        assert_eq!(calls(&first), Some(1), "round {round}");
        let mut messages = user("weather?").as_array().unwrap().clone();
        messages.push(first["message"].clone());
        messages.push(json!({"role": "tool", "content": format!("rain {round}")}));
        let second = chat(
            &fake,
            json!({"model": "llama3", "messages": messages, "stream": false}),
        )
        .await
        .json();
        assert_eq!(calls(&second), None, "round {round}");
        assert_eq!(second["message"]["content"], json!(format!("rain {round}")));
    }
}
