//! `POST /v1/responses` end to end: the real daemon between a raw HTTP
//! client and the scripted fake Ollama; the bundled `wc` tool runs for real.

use crate::support;

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use oap_bridge::tokens;
use serde_json::{json, Value};

fn daemon_for(upstream: &Upstream) -> Daemon {
    support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n  max_request_bytes: 65536\n",
            upstream.fake.url()
        ))
        .start()
}

const TASK: &str = "count the words in this text: one two three four";

/// The model calls oapd's `wc` on [`TASK`]'s text, then repeats its result.
fn wc_then_echo() -> Script {
    Script::new()
        .model(ModelSpec::new("m"))
        .turn(Turn::tool_call(
            "oap_wc",
            json!({"args": "-w", "stdin": "one two three four"}),
        ))
        .turn(Turn::echo(Echo::LastTool))
}

/// The SSE events of a streamed response, checked to be well formed.
fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').expect("event and data lines");
            let data: Value =
                serde_json::from_str(data.strip_prefix("data: ").expect("data line")).unwrap();
            assert_eq!(event.strip_prefix("event: ").unwrap(), data["type"]);
            data
        })
        .collect()
}

#[test]
fn a_discovered_tool_runs_and_the_answer_is_a_response_object() {
    let upstream = fake(wc_then_echo());
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "input": TASK, "instructions": "Be brief."}).to_string(),
    );
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let body = response.json();
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert!(body["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(
        body["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .trim(),
        "4"
    );
    assert_eq!(
        body["output"].as_array().unwrap().len(),
        1,
        "oapd's call is not handed out"
    );
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    // The cost of oapd's tool definitions: header and response field agree
    // and are exactly the estimate of what was injected (no client tools).
    let header: usize = response
        .header("x-oap-tool-tokens")
        .expect("X-Oap-Tool-Tokens header")
        .parse()
        .unwrap();
    assert!(header > 0);
    assert_eq!(body["oap_tool_tokens"], header, "{body}");
    assert_eq!(
        header,
        tokens::tools_tokens(sent[0]["tools"].as_array().unwrap().iter())
    );
    assert_eq!(body["oap_round"], 2);
    assert_eq!(
        sent[0]["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(sent[0]["messages"][1]["content"], TASK);
}

#[test]
fn streaming_runs_oapds_own_tool_and_the_client_sees_only_the_answer() {
    let upstream = fake(wc_then_echo());
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "stream": true, "input": TASK}).to_string(),
    );
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let events = events(&response.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "response.completed").count(),
        1
    );
    // oapd's own call never leaks out as something the client must answer.
    assert!(
        !kinds.iter().any(|k| k.contains("function_call")),
        "{kinds:?}"
    );
    for event in &events {
        assert_ne!(event["item"]["type"], "function_call", "{event}");
    }
    // The final text: wc's count, echoed by the model in round 2.
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(deltas.trim(), "4");
    let completed = &events.last().unwrap()["response"];
    assert_eq!(completed["status"], "completed");
    let output = completed["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{completed}");
    assert_eq!(output[0]["type"], "message");
    assert_eq!(
        output[0]["content"][0]["text"].as_str().unwrap().trim(),
        "4"
    );
    // The tool ran for real: its result went to the model in round 2.
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    let result = support::last_message(&sent[1]);
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_name"], "oap_wc");
    assert!(
        result["content"].as_str().unwrap().contains('4'),
        "{result}"
    );
    // Token reporting: the header and the final event's response agree.
    let header: usize = response
        .header("x-oap-tool-tokens")
        .expect("X-Oap-Tool-Tokens header")
        .parse()
        .unwrap();
    assert_eq!(completed["oap_tool_tokens"], header, "{completed}");
    assert_eq!(
        header,
        tokens::tools_tokens(sent[0]["tools"].as_array().unwrap().iter())
    );
    assert_eq!(completed["oap_round"], 2);
}

#[test]
fn streaming_hands_back_the_clients_function_call_and_continues_with_its_output() {
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("m"))
            .turn(Turn::chunks(vec![
                Chunk::content("Checking. "),
                Chunk::tool_call("get_weather", json!({"city": "Paris"})),
            ]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_for(&upstream);
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "stream": true, "tools": tools,
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]}]})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let events = events(&response.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert!(kinds.contains(&"response.output_text.delta"));
    assert!(kinds.contains(&"response.function_call_arguments.done"));
    let completed = &events.last().unwrap()["response"];
    let call = completed["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call")
        .expect("the client's call is handed back");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    let call_id = call["call_id"].as_str().unwrap().to_string();
    assert_eq!(
        upstream.fake.chat_requests().len(),
        1,
        "nothing executed by oapd"
    );

    // The client runs its tool and continues with the output.
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "tools": tools, "input": [
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": call_id, "output": "sunny, 21 C"}]})
        .to_string(),
    );
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(
        response.json()["output"][0]["content"][0]["text"],
        "sunny, 21 C"
    );
    let sent = upstream.fake.chat_requests();
    let messages = sent[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(messages[2]["role"], "tool");
}

#[test]
fn bad_requests_and_upstream_failures_come_back_in_openais_error_shape() {
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("m"))
            .turn(Turn::http_error(500, "model runner crashed"))
            .turn(Turn::reply("one two three four five").error_after(2, "lost the GPU")),
    );
    let daemon = daemon_for(&upstream);
    for (body, needle) in [
        ("{not json".to_string(), "invalid JSON"),
        ("[]".to_string(), "JSON object"),
        (json!({"model": "m"}).to_string(), "input"),
        (json!({"input": "hi"}).to_string(), "model"),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}).to_string(),
            "function tools",
        ),
        (
            json!({"model": "m", "input": [{"type": "computer_call"}]}).to_string(),
            "input[0].type",
        ),
        (
            json!({"model": "m", "input": "hi", "oap_top_k": 99}).to_string(),
            "oap_top_k",
        ),
    ] {
        let response = daemon.post_json("/v1/responses", &body);
        assert_eq!(response.status, 400, "{body}");
        let error = &response.json()["error"];
        assert!(
            error["message"].as_str().unwrap().contains(needle),
            "{body}: {error}"
        );
        assert!(error["type"].is_string());
    }
    let huge = json!({"model": "m", "input": "x".repeat(100_000)}).to_string();
    let response = daemon.post_json("/v1/responses", &huge);
    assert_eq!(response.status, 413);
    assert!(response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("limit"));
    assert_eq!(daemon.get("/v1/responses").status, 405);
    assert!(
        upstream.fake.chat_requests().is_empty(),
        "nothing bad reached Ollama"
    );

    // Ollama fails before the first chunk: a real HTTP error.
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "stream": true, "input": "hello", "oap_discover": false}).to_string(),
    );
    assert_eq!(response.status, 500);
    assert!(response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("model runner crashed"));
    // ... and mid-stream: response.failed ends the stream.
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "stream": true, "input": "hello", "oap_discover": false}).to_string(),
    );
    assert_eq!(response.status, 200);
    let events = events(&response.body);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert!(last["response"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("lost the GPU"));
    // The daemon keeps serving.
    assert_eq!(daemon.get("/health").status, 200);
}
