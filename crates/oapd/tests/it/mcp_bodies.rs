//! `/mcp` bodies an MCP client cannot mean: each is answered with a
//! JSON-RPC 2.0 error object (`application/json`, the code JSON-RPC
//! defines for the problem, a message naming it), never rmcp's plain
//! text, and the daemon goes on serving good requests.

use crate::support;

use serde_json::{json, Value};

const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const VERSION: (&str, &str) = ("MCP-Protocol-Version", "2025-06-18");

fn initialize() -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "oapd-tests", "version": "1"}
        }
    })
    .to_string()
}

/// Asserts the answer is a JSON-RPC error object with `code`, `status`
/// and `id`, whose message contains `names`.
fn assert_error(
    what: &str,
    response: &support::Response,
    status: u16,
    code: i64,
    id: Value,
    names: &str,
) {
    let text = String::from_utf8_lossy(&response.body);
    assert_eq!(response.status, status, "{what}: {text}");
    assert!(
        response
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{what}: {:?} {text}",
        response.header("content-type")
    );
    let body: Value =
        serde_json::from_slice(&response.body).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    assert_eq!(body["jsonrpc"], "2.0", "{what}: {body}");
    assert_eq!(body["id"], id, "{what}: {body}");
    assert_eq!(body["error"]["code"], code, "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(names),
        "{what}: {message:?} lacks {names:?}"
    );
}

#[test]
fn each_bad_body_gets_its_json_rpc_error_and_good_requests_still_work() {
    let daemon = support::daemon().without_model().start();
    let post =
        |headers: &[(&str, &str)], body: &[u8]| daemon.request("POST", "/mcp", headers, body);
    let json_headers = [ACCEPT, JSON, VERSION];

    // Not JSON: -32700.
    for (what, body) in [
        (
            "truncated",
            &b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\""[..],
        ),
        ("garbage", b"\x00\xffnot json at all"),
        ("empty", b""),
        ("two values", b"{} {}"),
    ] {
        let response = post(&json_headers, body);
        assert_error(what, &response, 400, -32700, Value::Null, "not JSON");
    }

    // JSON not declared as JSON (what a page may send without a
    // preflight): -32600, 415 as rmcp answers it.
    for content_type in [
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
    ] {
        let response = post(
            &[ACCEPT, VERSION, ("Content-Type", content_type)],
            initialize().as_bytes(),
        );
        assert_error(
            content_type,
            &response,
            415,
            -32600,
            Value::Null,
            "Content-Type must be application/json",
        );
    }
    let response = post(&[ACCEPT, VERSION], initialize().as_bytes());
    assert_error(
        "no Content-Type",
        &response,
        415,
        -32600,
        Value::Null,
        "got none",
    );

    // JSON that is not a JSON-RPC 2.0 message: -32600.
    let batch = format!("[{}]", initialize());
    for (what, body, names) in [
        ("batch", batch.as_str(), "batch"),
        ("empty batch", "[]", "batch"),
        ("string", r#""initialize""#, "got a string"),
        ("number", "42", "got a number"),
        ("null", "null", "got null"),
        (
            "no jsonrpc",
            r#"{"id": 1, "method": "ping"}"#,
            r#""jsonrpc" must be "2.0""#,
        ),
        (
            "jsonrpc 1.0",
            r#"{"jsonrpc": "1.0", "id": 1, "method": "ping"}"#,
            r#""jsonrpc" must be "2.0""#,
        ),
        (
            "no method",
            r#"{"jsonrpc": "2.0", "id": 1}"#,
            "neither \"method\"",
        ),
        (
            "object id",
            r#"{"jsonrpc": "2.0", "id": {}, "method": "ping"}"#,
            "\"id\" must be a string or a number",
        ),
        (
            "numeric method",
            r#"{"jsonrpc": "2.0", "id": 1, "method": 7}"#,
            "\"method\" must be a string",
        ),
    ] {
        let response = post(&json_headers, body.as_bytes());
        assert_error(what, &response, 400, -32600, Value::Null, names);
    }

    // A message rmcp takes but cannot serve (tools/call without a tool
    // name) keeps rmcp's own JSON-RPC error, with the request's id.
    let response = post(
        &json_headers,
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"arguments": {}}})
            .to_string()
            .as_bytes(),
    );
    assert_error(
        "tools/call without a name",
        &response,
        200,
        -32601,
        json!(7),
        "tools/call",
    );

    // What rmcp itself refuses comes as a JSON-RPC object too: an Accept
    // without JSON and SSE.
    let response = post(&[JSON, VERSION], initialize().as_bytes());
    assert_error(
        "no Accept",
        &response,
        406,
        -32600,
        Value::Null,
        "Not Acceptable",
    );

    // A good request is served as before.
    let init = post(&json_headers, initialize().as_bytes());
    assert_eq!(init.status, 200, "{}", String::from_utf8_lossy(&init.body));
    assert_eq!(init.json()["result"]["serverInfo"]["name"], "oapd");
    let list = post(
        &json_headers,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["result"]["tools"][0]["name"], "oap_discover");
    // A notification is accepted with an empty 202.
    let note = post(
        &json_headers,
        br#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
    );
    assert_eq!(note.status, 202, "{}", String::from_utf8_lossy(&note.body));
}
