//! Every path oapd does not serve itself is Ollama's: it reaches the fake
//! Ollama with its method, query string, headers and body, after the same
//! token, Host and Origin checks as oapd's own routes, and Ollama's answer
//! (a 404 included) comes back as Ollama sent it.

use crate::support;

use fake_ollama::{ModelSpec, Script};
use serde_json::{json, Value};

const TOKEN: &str = "pass-through-token-0123456789abcdef";

fn script() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .model(ModelSpec::new("all-minilm").capabilities(&["embedding"]))
        .check_host(true)
}

#[test]
fn paths_oapd_does_not_serve_reach_ollama_with_their_query_and_answer() {
    let upstream = support::fake(script());
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .start_with_auth(TOKEN);
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("Authorization", bearer.as_str())];

    // Without the token nothing reaches Ollama.
    let refused = daemon.request("GET", "/api/me?x=1", &[], b"");
    assert_eq!(refused.status, 401);
    assert!(upstream.fake.requests_to("/api/me").is_empty());

    // An arbitrary path: Ollama's own 404, relayed as Ollama sent it.
    let response = daemon.request("GET", "/api/me?x=1&next=%2Fhome", &auth, b"");
    assert_eq!(response.status, 404);
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "404 page not found"
    );
    let seen = upstream.fake.requests_to("/api/me");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].query.as_deref(), Some("x=1&next=%2Fhome"));
    assert_eq!(
        seen[0].header("authorization"),
        None,
        "oapd's token stays with oapd"
    );
    assert_eq!(
        seen[0].header("host"),
        Some(upstream.fake.addr().to_string().as_str())
    );

    // A model Ollama's OpenAI layer does not know: its 404, in its shape.
    let response = daemon.request("GET", "/v1/models/nope?verbose=1", &auth, b"");
    assert_eq!(response.status, 404);
    assert!(response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nope"));
    assert_eq!(
        upstream.fake.requests_to("/v1/models/nope")[0]
            .query
            .as_deref(),
        Some("verbose=1")
    );

    // OpenAI's embeddings and legacy completions, body and all.
    let embeddings = daemon.request(
        "POST",
        "/v1/embeddings",
        &[auth[0], ("Content-Type", "application/json")],
        json!({"model": "all-minilm", "input": ["one", "two"]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(embeddings.status, 200, "{}", embeddings.error());
    let data = embeddings.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    let completion = daemon.request(
        "POST",
        "/v1/completions",
        &[auth[0], ("Content-Type", "application/json")],
        br#"{"model": "qwen3:4b", "prompt": "Say hi"}"#,
    );
    assert_eq!(completion.status, 200, "{}", completion.error());
    assert_eq!(completion.json()["object"], "text_completion");
    assert_eq!(
        upstream.fake.requests_to("/v1/completions")[0].json()["prompt"],
        "Say hi"
    );

    // A method Ollama does not take on a route it has: its 405.
    let response = daemon.request("DELETE", "/api/tags", &auth, b"");
    assert_eq!(response.status, 405);

    // oapd's own routes stay oapd's.
    let manifests = daemon.request("GET", "/v1/manifests", &auth, b"");
    assert_eq!(manifests.status, 200);
    assert!(manifests.json().as_array().is_some_and(|m| !m.is_empty()));
    let wrong = daemon.request("GET", "/v1/discover", &auth, b"");
    assert_eq!(wrong.status, 405);
    for path in ["/v1/manifests", "/v1/discover", "/health"] {
        assert!(upstream.fake.requests_to(path).is_empty(), "{path}");
    }
}

#[test]
fn a_page_cannot_reach_ollama_through_a_pass_through_path() {
    let upstream = support::fake(script());
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();
    let foreign_host = daemon.request("GET", "/api/me", &[("Host", "evil.example")], b"");
    assert_eq!(foreign_host.status, 403);
    let foreign_origin = daemon.request(
        "POST",
        "/v1/embeddings",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        br#"{"model": "all-minilm", "input": "x"}"#,
    );
    assert_eq!(foreign_origin.status, 403);
    assert!(
        upstream.fake.requests().is_empty(),
        "{:?}",
        upstream.fake.requests()
    );
    let fine: Value = daemon
        .post_json("/v1/embeddings", r#"{"model": "all-minilm", "input": "x"}"#)
        .json();
    assert_eq!(fine["object"], "list");
}
