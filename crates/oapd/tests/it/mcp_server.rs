//! `/mcp`: raw JSON-RPC over HTTP against the real daemon. The meta tools
//! answer, and the route sits behind the same guards as every other one:
//! the bearer token, Host and Origin, the body cap, the `mcp_server.enabled`
//! switch; a capability invoked through it runs under the same sandbox as
//! a chat's tool call.

use crate::support;

use crate::support::{Daemon, Response};
use serde_json::{json, Value};

const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");

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

pub(crate) fn call(name: &str, arguments: Value) -> String {
    json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}
    })
    .to_string()
}

pub(crate) fn post(daemon: &Daemon, extra: &[(&str, &str)], body: &str) -> Response {
    post_to(daemon, "/mcp", extra, body)
}

fn post_to(daemon: &Daemon, path: &str, extra: &[(&str, &str)], body: &str) -> Response {
    let mut headers = vec![ACCEPT, JSON, ("MCP-Protocol-Version", "2025-06-18")];
    headers.extend_from_slice(extra);
    daemon.request("POST", path, &headers, body.as_bytes())
}

/// The JSON-RPC `result` of a successful exchange.
pub(crate) fn result(response: &Response) -> Value {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let body = response.json();
    assert!(body.get("error").is_none(), "{body}");
    body["result"].clone()
}

/// The text of a tool result and whether it is an error.
pub(crate) fn tool_text(result: &Value) -> (String, bool) {
    let text = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    (text, result["isError"].as_bool().unwrap_or(false))
}

#[test]
fn initialize_lists_the_meta_tools_and_they_discover_and_invoke() {
    let daemon = support::daemon().start();
    let init = result(&post(&daemon, &[], &initialize()));
    assert_eq!(init["serverInfo"]["name"], "oapd", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");

    let list = result(&post(
        &daemon,
        &[],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
    ));
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["oap_discover", "oap_invoke"], "{list}");
    assert_eq!(
        list["tools"][0]["inputSchema"]["required"],
        json!(["task"]),
        "{list}"
    );

    let found = result(&post(
        &daemon,
        &[],
        &call(
            "oap_discover",
            json!({"task": "count the words in this paragraph", "top_k": 3}),
        ),
    ));
    let capabilities = found["structuredContent"]["capabilities"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"));
    let wc = capabilities
        .iter()
        .find(|c| c["id"] == "local/wc")
        .unwrap_or_else(|| panic!("wc not found: {found}"));
    assert!(
        wc["input_schema"]["properties"]["stdin"].is_object(),
        "{wc}"
    );

    let counted = result(&post(
        &daemon,
        &[],
        &call(
            "oap_invoke",
            json!({"tool": "local/wc", "arguments": {"args": "-w", "stdin": "one two three four five"}}),
        ),
    ));
    let (text, is_error) = tool_text(&counted);
    assert!(!is_error, "{counted}");
    assert_eq!(text.trim(), "5", "{counted}");
}

#[test]
fn unknown_ids_bad_arguments_and_unfitting_tasks_are_answered_plainly() {
    let daemon = support::daemon().start();
    let unknown = result(&post(
        &daemon,
        &[],
        &call("oap_invoke", json!({"tool": "local/nope", "arguments": {}})),
    ));
    let (text, is_error) = tool_text(&unknown);
    assert!(is_error, "{unknown}");
    assert!(
        text.contains("no capability with id \"local/nope\""),
        "{text}"
    );

    // The bridge's argument check: an object where text is expected.
    let bad = result(&post(
        &daemon,
        &[],
        &call(
            "oap_invoke",
            json!({"tool": "local/wc", "arguments": {"stdin": {"text": "one two"}}}),
        ),
    ));
    let (text, is_error) = tool_text(&bad);
    assert!(is_error, "{bad}");
    assert!(text.contains("was not called"), "{text}");

    let nothing = result(&post(
        &daemon,
        &[],
        &call(
            "oap_discover",
            json!({"task": "book me a flight to the moon and pay with bitcoin"}),
        ),
    ));
    let structured = &nothing["structuredContent"];
    assert_eq!(structured["match"], Value::Null, "{nothing}");
    assert_eq!(structured["capabilities"], json!([]), "{nothing}");

    let out_of_range = result(&post(
        &daemon,
        &[],
        &call("oap_discover", json!({"task": "count words", "top_k": 99})),
    ));
    let (text, is_error) = tool_text(&out_of_range);
    assert!(is_error && text.contains("top_k"), "{out_of_range}");
}

#[test]
fn the_bearer_token_guards_mcp() {
    let daemon = support::daemon()
        .server("auth_token", "the-right-token")
        .start_with_auth("the-right-token");
    let none = post(&daemon, &[], &initialize());
    assert_eq!(none.status, 401, "{}", String::from_utf8_lossy(&none.body));
    let wrong = post(
        &daemon,
        &[("Authorization", "Bearer the-wrong-token")],
        &initialize(),
    );
    assert_eq!(wrong.status, 401);
    let right = post(
        &daemon,
        &[("Authorization", "Bearer the-right-token")],
        &initialize(),
    );
    assert_eq!(result(&right)["serverInfo"]["name"], "oapd");
}

/// A perl capability that leaves a file behind when it runs (sandbox off,
/// so the file can land outside a scratch directory).
fn marker_call(marker: &std::path::Path) -> String {
    call(
        "oap_invoke",
        json!({"tool": "local/perl", "arguments": {
            "args": format!("-e 'open my $f, \">\", \"{}\"; print \"ran\"'", marker.display())
        }}),
    )
}

#[test]
fn a_foreign_origin_or_host_is_refused_before_anything_runs() {
    let dir = support::perl_manifest_dir();
    let daemon = support::daemon()
        .yaml(&format!(
            "manifests:\n  dirs: [{:?}]\ntools:\n  sandbox: off\n",
            dir.path()
        ))
        .start();
    let out = tempfile::tempdir().unwrap();

    let marker = out.path().join("origin");
    let refused = post(
        &daemon,
        &[("Origin", "http://attacker.example")],
        &marker_call(&marker),
    );
    assert_eq!(refused.status, 403, "{}", refused.error());
    assert!(!marker.exists(), "the tool ran for a foreign Origin");

    let marker = out.path().join("host");
    let refused = post(
        &daemon,
        &[("Host", "rebound.attacker.example")],
        &marker_call(&marker),
    );
    assert_eq!(refused.status, 403, "{}", refused.error());
    assert!(!marker.exists(), "the tool ran for a foreign Host");

    // The same call from a plain client runs: the refusals above are the
    // guards, not a broken call.
    let marker = out.path().join("plain");
    let ran = result(&post(&daemon, &[], &marker_call(&marker)));
    assert_eq!(tool_text(&ran), ("ran".to_string(), false), "{ran}");
    assert!(marker.exists());
}

#[test]
fn malformed_and_oversized_bodies_are_refused_and_the_daemon_keeps_serving() {
    let daemon = support::daemon()
        .server("max_body_bytes", "4096")
        .server("max_task_bytes", "1000")
        .start();
    let malformed = post(&daemon, &[], "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\"");
    assert_eq!(
        malformed.status,
        400,
        "{}",
        String::from_utf8_lossy(&malformed.body)
    );
    let error = &malformed.json()["error"];
    assert_eq!(error["code"], -32700, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("not JSON"),
        "{error}"
    );

    let huge = call(
        "oap_invoke",
        json!({"tool": "local/wc", "arguments": {"stdin": "word ".repeat(2000)}}),
    );
    let oversized = post(&daemon, &[], &huge);
    assert_eq!(
        oversized.status,
        413,
        "{}",
        String::from_utf8_lossy(&oversized.body)
    );

    assert_eq!(
        result(&post(&daemon, &[], &initialize()))["serverInfo"]["name"],
        "oapd"
    );
    let health = daemon.get("/health");
    assert_eq!(health.status, 200);
}

#[test]
fn mcp_can_be_switched_off_and_takes_only_post() {
    let on = support::daemon().start();
    let get = on.request("GET", "/mcp", &[ACCEPT], b"");
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), Some("POST"));

    let off = support::daemon()
        .yaml("mcp_server:\n  enabled: false\n")
        .start();
    let response = post(&off, &[], &initialize());
    assert_eq!(response.status, 404);
    assert!(
        response.error().contains("mcp_server.enabled"),
        "{}",
        response.error()
    );
    let off_by_env = support::daemon()
        .env("OAP_MCP_SERVER_ENABLED", "false")
        .start();
    assert_eq!(post(&off_by_env, &[], &initialize()).status, 404);
}

fn sandbox_active() -> bool {
    let support = oap_sandbox::Support::probe();
    let ok = support.seccomp && support.filesystem();
    if !ok {
        eprintln!("SKIPPED: the kernel lacks seccomp or Landlock: {support:?}");
    }
    ok
}

/// awk's `system()`, the chat bridge's sandbox attack, sent through
/// `oap_invoke`.
fn awk_system(daemon: &Daemon) -> (String, bool) {
    let answer = result(&post(
        daemon,
        &[],
        &call(
            "oap_invoke",
            json!({"tool": "local/awk", "arguments": {"args": "-v c=id 'BEGIN{system(c)}'"}}),
        ),
    ));
    tool_text(&answer)
}

#[test]
fn an_invoked_tool_is_confined_like_a_chat_tool_call() {
    if !sandbox_active() {
        return;
    }
    // Unconfined, the attack works: the check below can tell.
    let open = support::daemon().yaml("tools:\n  sandbox: off\n").start();
    let (text, _) = awk_system(&open);
    assert!(text.contains("uid="), "unconfined awk: {text}");

    let confined = support::daemon().start();
    let (text, _) = awk_system(&confined);
    assert!(!text.contains("uid="), "a command ran: {text}");
}

#[test]
fn a_task_hint_lists_fitting_capabilities_as_callable_tools() {
    let daemon = support::daemon().start();
    let hinted = "/mcp?task=count+the+words+in+this%20paragraph&top_n=2";
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let listed = result(&post_to(&daemon, hinted, &[], &list));
    let tools = listed["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..2], ["oap_discover", "oap_invoke"], "{listed}");
    assert!(names.len() <= 4, "{listed}");
    let wc = tools
        .iter()
        .find(|t| t["name"] == "oap_wc")
        .unwrap_or_else(|| panic!("wc not listed: {listed}"));
    assert!(wc["inputSchema"]["properties"]["stdin"].is_object(), "{wc}");

    let counted = result(&post_to(
        &daemon,
        hinted,
        &[],
        &call("oap_wc", json!({"args": "-w", "stdin": "one two three"})),
    ));
    let (text, is_error) = tool_text(&counted);
    assert_eq!((text.trim(), is_error), ("3", false), "{counted}");

    // Without the hint the name means nothing, and a bad hint is named.
    let plain = post(&daemon, &[], &call("oap_wc", json!({"stdin": "x"})));
    assert!(
        plain.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"oap_wc\""),
        "{}",
        String::from_utf8_lossy(&plain.body)
    );
    let bad = post_to(&daemon, "/mcp?task=count+words&top_n=11", &[], &list);
    assert!(
        bad.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("top_n"),
        "{}",
        String::from_utf8_lossy(&bad.body)
    );
    // The meta tools alone without a hint.
    let plain_list = result(&post(&daemon, &[], &list));
    assert_eq!(plain_list["tools"].as_array().unwrap().len(), 2);
}
