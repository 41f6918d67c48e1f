//! `server.clients`: named tokens for programs that can only be given a
//! base URL. The token rides in the path (`/c/<token>/api/tags`) or as a
//! bearer or Basic password; it opens its scopes' route families and never
//! the operator's; it reaches neither Ollama nor any record, metric, log
//! line or page, which show the client's name instead. The real binary,
//! the fake Ollama recording what arrives.

use crate::support::{self, fake, Daemon, Upstream};

use fake_ollama::{ModelSpec, Script, Turn};
use oap_testkit::http::{request_bytes, send_raw_from};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const OPERATOR: &str = "client-tokens-operator-0123456789";
/// Home Assistant's token: chat and Ollama's other routes.
const HA_TOKEN: &str = "ha-Token_0123456789.abcdef~xyz";
/// A client that may only chat.
const CHAT_TOKEN: &str = "chat-only-token-0123456789";
/// A client that may only use Ollama's other routes.
const LIST_TOKEN: &str = "list-only-token-0123456789";

fn script() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .default_turn(Turn::reply("the light is on"))
}

fn clients_yaml() -> String {
    format!(
        "\n    - {{name: home-assistant, token: {HA_TOKEN:?}, scopes: [chat, passthrough]}}\
         \n    - {{name: chatter, token: {CHAT_TOKEN:?}, scopes: [chat]}}\
         \n    - {{name: lister, token: {LIST_TOKEN:?}, scopes: [passthrough]}}"
    )
}

fn daemon_with_clients(upstream: &Upstream, rust_log: &str) -> Daemon {
    support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .server("auth_token", &format!("{OPERATOR:?}"))
        .server("clients", &clients_yaml())
        .env("RUST_LOG", rust_log)
        .start_with_auth(OPERATOR)
}

fn operator() -> String {
    format!("Bearer {OPERATOR}")
}

fn chat_body() -> Vec<u8> {
    json!({"model": "qwen3:4b", "stream": false,
           "messages": [{"role": "user", "content": "turn on the kitchen light"}]})
    .to_string()
    .into_bytes()
}

fn post_json(daemon: &Daemon, path: &str, headers: &[(&str, &str)]) -> support::Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    daemon.request("POST", path, &all, &chat_body())
}

/// `/v1/requests` once it lists a request of `client` (an entry is made
/// just after its answer ends).
fn requests_listing(daemon: &Daemon, client: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = daemon.request(
            "GET",
            "/v1/requests",
            &[("Authorization", &operator())],
            b"",
        );
        assert_eq!(response.status, 200, "{}", response.error());
        let body = response.json();
        if body["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["client"] == client)
        {
            return body.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no request of {client}: {body:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_path_prefix_carries_the_client_token_which_goes_no_further_than_oapd() {
    let upstream = fake(script());
    let mut daemon = daemon_with_clients(&upstream, "debug");
    let prefix = format!("/c/{HA_TOKEN}");

    // What Home Assistant's integration calls, under its base URL.
    let tags = daemon.request("GET", &format!("{prefix}/api/tags"), &[], b"");
    assert_eq!(tags.status, 200, "{}", tags.error());
    assert_eq!(tags.json()["models"][0]["name"], "qwen3:4b");
    let version = daemon.request("GET", &format!("{prefix}/api/version?x=1"), &[], b"");
    assert_eq!(version.status, 200, "{}", version.error());
    let show = daemon.request(
        "POST",
        &format!("{prefix}/api/show"),
        &[("Content-Type", "application/json")],
        br#"{"model": "qwen3:4b"}"#,
    );
    assert_eq!(show.status, 200, "{}", show.error());
    let chat = post_json(&daemon, &format!("{prefix}/api/chat"), &[]);
    assert_eq!(chat.status, 200, "{}", chat.error());
    assert_eq!(chat.json()["message"]["content"], "the light is on");
    // Nothing after the token: Ollama's root.
    let root = daemon.request("GET", &prefix, &[], b"");
    assert_eq!(root.status, 200, "{}", root.error());

    // Ollama saw the paths without the prefix, and nowhere the token.
    let seen = upstream.fake.requests();
    let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    for path in ["/api/tags", "/api/version", "/api/show", "/api/chat", "/"] {
        assert!(paths.contains(&path), "{path} not forwarded: {paths:?}");
    }
    assert_eq!(
        upstream.fake.requests_to("/api/version")[0]
            .query
            .as_deref(),
        Some("x=1")
    );
    let upstream_text = serde_json::to_string(&seen).unwrap();
    assert!(!upstream_text.contains(HA_TOKEN), "{upstream_text}");

    // The record of the chat names the client, never the token.
    let listing = requests_listing(&daemon, "home-assistant");
    assert!(!listing.contains(HA_TOKEN), "{listing}");

    // /metrics counts by name.
    let metrics = daemon.request("GET", "/metrics", &[("Authorization", &operator())], b"");
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("oapd_client_requests_total{client=\"home-assistant\"}"))
        .unwrap_or_else(|| panic!("no client counter: {text}"));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 5.0, "{line}");
    assert!(!text.contains(HA_TOKEN), "{text}");

    // The status page's table: names, scopes, use; no token.
    let clients = daemon.request("GET", "/v1/clients", &[("Authorization", &operator())], b"");
    assert_eq!(clients.status, 200, "{}", clients.error());
    let body = clients.json();
    let ha = body["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "home-assistant")
        .cloned()
        .unwrap_or_else(|| panic!("{body:#}"));
    assert_eq!(ha["scopes"], json!(["chat", "passthrough"]));
    assert!(ha["requests"].as_u64().unwrap() >= 5, "{ha}");
    assert!(ha["last_used_unix_ms"].as_u64().unwrap() > 0, "{ha}");
    let unused = &body["clients"][1];
    assert_eq!(unused["name"], "chatter");
    assert_eq!(unused["requests"], 0);
    assert_eq!(unused["last_used_unix_ms"], Value::Null);
    assert!(!body.to_string().contains("token"), "{body}");
    for page in ["/ui", "/ui/app.js", "/v1/status", "/health"] {
        let answer = daemon.request("GET", page, &[("Authorization", &operator())], b"");
        assert_eq!(answer.status, 200, "{page}: {}", answer.error());
        let text = String::from_utf8_lossy(&answer.body);
        assert!(!text.contains(HA_TOKEN), "{page}: {text}");
    }

    // The debug log tells each request's path and client, never the token.
    daemon.terminate();
    let log = daemon.log_text();
    assert!(log.contains("home-assistant"), "{log}");
    assert!(log.contains("/api/tags"), "{log}");
    assert!(!log.contains(HA_TOKEN), "the token is in the log:\n{log}");
}

#[test]
fn bearer_and_basic_carry_a_client_token_too() {
    let upstream = fake(script());
    let daemon = daemon_with_clients(&upstream, "info");
    let bearer = format!("Bearer {HA_TOKEN}");
    let answer = daemon.request("GET", "/api/tags", &[("Authorization", &bearer)], b"");
    assert_eq!(answer.status, 200, "{}", answer.error());
    // A URL's user info `http://ha:<token>@board:8300`, as HTTP clients
    // send it: Basic credentials with the token as the password.
    let basic = format!("Basic {}", base64(format!("ha:{HA_TOKEN}").as_bytes()));
    let answer = daemon.request("GET", "/api/tags", &[("Authorization", &basic)], b"");
    assert_eq!(answer.status, 200, "{}", answer.error());
    // The user name does not matter; a wrong password does.
    let wrong = format!("Basic {}", base64(format!("ha:{HA_TOKEN}x").as_bytes()));
    let answer = daemon.request("GET", "/api/tags", &[("Authorization", &wrong)], b"");
    assert_eq!(answer.status, 401);
    // The header went no further than oapd.
    for seen in upstream.fake.requests_to("/api/tags") {
        assert_eq!(seen.header("authorization"), None);
    }
}

#[test]
fn a_client_token_opens_its_scopes_route_families_and_never_the_operators() {
    let upstream = fake(script());
    let daemon = daemon_with_clients(&upstream, "info");
    let chatter = format!("/c/{CHAT_TOKEN}");
    let lister = format!("/c/{LIST_TOKEN}");

    // chat: the chat routes, Ollama's generate, discovery.
    let chat = post_json(&daemon, &format!("{chatter}/api/chat"), &[]);
    assert_eq!(chat.status, 200, "{}", chat.error());
    let generate = daemon.request(
        "POST",
        &format!("{chatter}/api/generate"),
        &[("Content-Type", "application/json")],
        br#"{"model": "qwen3:4b", "prompt": "hello", "stream": false}"#,
    );
    assert_eq!(generate.status, 200, "{}", generate.error());
    let discover = daemon.request(
        "POST",
        &format!("{chatter}/v1/discover"),
        &[("Content-Type", "application/json")],
        br#"{"task": "count the words in a text"}"#,
    );
    assert_eq!(discover.status, 200, "{}", discover.error());
    // ... but not Ollama's other routes.
    let tags = daemon.request("GET", &format!("{chatter}/api/tags"), &[], b"");
    assert_eq!(tags.status, 403);
    assert!(tags.error().contains("chatter"), "{}", tags.error());
    assert!(tags.error().contains("passthrough"), "{}", tags.error());
    assert!(upstream.fake.requests_to("/api/tags").is_empty());

    // passthrough: Ollama's other routes, not the chats.
    let tags = daemon.request("GET", &format!("{lister}/api/tags"), &[], b"");
    assert_eq!(tags.status, 200, "{}", tags.error());
    let models = daemon.request("GET", &format!("{lister}/v1/models"), &[], b"");
    assert_eq!(models.status, 200, "{}", models.error());
    let chats_before = upstream.fake.requests_to("/api/chat").len();
    for path in [
        "/api/chat",
        "/v1/chat/completions",
        "/v1/chat",
        "/v1/responses",
    ] {
        let refused = post_json(&daemon, &format!("{lister}{path}"), &[]);
        assert_eq!(refused.status, 403, "{path}");
        assert!(refused.error().contains("\"chat\""), "{}", refused.error());
    }
    assert_eq!(upstream.fake.requests_to("/api/chat").len(), chats_before);

    // Operator routes: no client token opens them, whatever its scopes.
    let register = daemon.request(
        "POST",
        &format!("/c/{HA_TOKEN}/v1/manifests/register"),
        &[("Content-Type", "application/json")],
        br#"{"url": "http://127.0.0.1:9/.well-known/oap.json"}"#,
    );
    assert_eq!(register.status, 403, "{}", register.error());
    assert!(
        register.error().contains("server.auth_token"),
        "{}",
        register.error()
    );
    let bearer = format!("Bearer {HA_TOKEN}");
    let register = daemon.request(
        "POST",
        "/v1/manifests/register",
        &[
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
        ],
        br#"{"url": "http://127.0.0.1:9/.well-known/oap.json"}"#,
    );
    assert_eq!(register.status, 403, "{}", register.error());
    for (method, path) in [
        ("GET", "/v1/requests"),
        ("GET", "/metrics"),
        ("GET", "/v1/clients"),
        ("GET", "/health"),
        ("GET", "/ui"),
        ("GET", "/v1/manifests"),
        ("GET", "/v1/status"),
        ("DELETE", "/v1/experience"),
    ] {
        let refused = daemon.request(method, &format!("/c/{HA_TOKEN}{path}"), &[], b"");
        assert_eq!(refused.status, 403, "{method} {path}: {}", refused.error());
        assert!(
            refused.error().contains("server.auth_token"),
            "{}",
            refused.error()
        );
    }
    // The operator's token still opens them.
    let listing = daemon.request(
        "GET",
        "/v1/requests",
        &[("Authorization", &operator())],
        b"",
    );
    assert_eq!(listing.status, 200);
}

#[test]
fn a_wrong_prefix_is_401_saying_so_and_reaches_nothing() {
    let upstream = fake(script());
    let daemon = daemon_with_clients(&upstream, "info");
    for path in [
        "/c/not-a-client-token-0123456/api/tags",
        "/c//api/tags",
        "/c/",
        // The operator's token is no client token.
        &format!("/c/{OPERATOR}/api/tags"),
    ] {
        let answer = daemon.request("GET", path, &[], b"");
        assert_eq!(answer.status, 401, "{path}");
        assert!(answer.error().contains("/c/<token>"), "{}", answer.error());
    }
    // Even with the operator's token in the header: the URL is wrong.
    let answer = daemon.request(
        "GET",
        "/c/not-a-client-token-0123456/api/tags",
        &[("Authorization", &operator())],
        b"",
    );
    assert_eq!(answer.status, 401);
    assert!(upstream.fake.requests_to("/api/tags").is_empty());
    // A wrong bearer token is 401 as before.
    let wrong = daemon.request("GET", "/api/tags", &[("Authorization", "Bearer nope")], b"");
    assert_eq!(wrong.status, 401);

    // Without an operator token the API is open, but a wrong prefix is
    // still a wrong URL.
    let open = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .server("clients", &clients_yaml())
        .start();
    let answer = open.request("GET", "/c/not-a-client-token-0123456/api/tags", &[], b"");
    assert_eq!(answer.status, 401);
    let answer = open.request("GET", &format!("/c/{HA_TOKEN}/api/tags"), &[], b"");
    assert_eq!(answer.status, 200, "{}", answer.error());
}

#[test]
fn a_trusted_address_still_works_beside_client_tokens() {
    let upstream = fake(script());
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .server("auth_token", &format!("{OPERATOR:?}"))
        .server("clients", &clients_yaml())
        .server("trusted_clients", "['127.0.0.2/32']")
        .start_with_auth(OPERATOR);
    let from = |ip: &str, path: &str| {
        let raw = request_bytes("GET", path, &daemon.addr.to_string(), &[], b"");
        send_raw_from(ip.parse::<IpAddr>().unwrap(), daemon.addr, &raw).unwrap()
    };
    assert_eq!(from("127.0.0.2", "/v1/manifests").status, 200);
    assert_eq!(from("127.0.0.2", "/api/tags").status, 200);
    assert_eq!(from("127.0.0.3", "/v1/manifests").status, 401);
    // A client token from anywhere is that client, with its scopes.
    let listed = from("127.0.0.3", &format!("/c/{LIST_TOKEN}/api/tags"));
    assert_eq!(listed.status, 200, "{}", listed.error());
    assert_eq!(
        from("127.0.0.2", &format!("/c/{LIST_TOKEN}/v1/manifests")).status,
        403
    );
}

#[test]
fn client_entries_are_checked_naming_the_key_and_never_printed() {
    for (clients, key, says) in [
        (
            "[{name: ha, token: 'has a space 0123456789', scopes: [chat]}]",
            "server.clients[0].token",
            "URL path",
        ),
        (
            "[{name: ha, token: a-long-enough-token-0123, scopes: [chatting]}]",
            "server.clients[0].scopes[0]",
            "chat, passthrough",
        ),
        (
            "[{name: 'h a', token: a-long-enough-token-0123, scopes: [chat]}]",
            "server.clients[0].name",
            "letters",
        ),
        (
            "[{name: a, token: a-long-enough-token-0123, scopes: [chat]}, \
              {name: b, token: a-long-enough-token-0123, scopes: [chat]}]",
            "server.clients[1].token",
            "another client",
        ),
        (
            &format!("[{{name: a, token: {OPERATOR}, scopes: [chat]}}]"),
            "server.clients[0].token",
            "server.auth_token",
        ),
    ] {
        let err = support::daemon()
            .server("auth_token", &format!("{OPERATOR:?}"))
            .server("clients", clients)
            .try_start()
            .err()
            .unwrap_or_else(|| panic!("{clients} must be refused"));
        assert!(err.contains(key), "{key}: {err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(!err.contains("a-long-enough-token-0123"), "{err}");
        assert!(!err.contains("has a space"), "{err}");
    }

    // `oapd config` shows the clients by name, the tokens redacted; so
    // does the environment's JSON form.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "server:\n  auth_token: {OPERATOR:?}\n  clients:{}\n",
            clients_yaml()
        ),
    )
    .unwrap();
    let output = support::oapd()
        .args(["config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(shown.contains("home-assistant"), "{shown}");
    for token in [HA_TOKEN, CHAT_TOKEN, LIST_TOKEN, OPERATOR] {
        assert!(!shown.contains(token), "{shown}");
    }
    let output = support::oapd()
        .arg("config")
        .env(
            "OAP_SERVER_CLIENTS",
            json!([{"name": "from-env", "token": HA_TOKEN, "scopes": ["chat"]}]).to_string(),
        )
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(shown.contains("from-env"), "{shown}");
    assert!(!shown.contains(HA_TOKEN), "{shown}");
    // A malformed value is refused without echoing it.
    let output = support::oapd()
        .arg("config")
        .env(
            "OAP_SERVER_CLIENTS",
            format!("[{{\"name\": \"x\", \"token\": {HA_TOKEN:?}"),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(err.contains("OAP_SERVER_CLIENTS"), "{err}");
    assert!(!err.contains(HA_TOKEN), "{err}");
}

/// Standard base64 with padding (RFC 4648), for Basic credentials.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
