//! Requests a web page can make a browser send are refused before anything
//! runs: a Host that is neither an IP literal nor a name of this machine
//! (DNS rebinding; the same on every listener, see `rebinding.rs`) and an
//! Origin that is neither allowed nor the request's own
//! (cross-site "simple" requests, which need no CORS preflight). Every
//! route family is tried against the real daemon in front of the scripted
//! fake Ollama; a refused request must leave the fake untouched.

use crate::support;

use std::net::SocketAddr;

use crate::support::{fake, send_raw, Daemon, DaemonBuilder, Response, Upstream};
use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::json;

const CHAT: &str = r#"{"model": "qwen3:4b", "stream": false, "messages": [{"role": "user", "content": "count the words in this text: one two three four"}]}"#;

/// One request per route family: discovery, tools, both chat dialects, the
/// Responses API, Ollama pass-through, manifests, experience, health, and a
/// CORS preflight.
const ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/v1/discover", r#"{"task": "count the words"}"#),
    ("POST", "/v1/tools", r#"{"task": "count the words"}"#),
    ("POST", "/api/chat", CHAT),
    ("POST", "/v1/chat/completions", CHAT),
    (
        "POST",
        "/v1/responses",
        r#"{"model": "qwen3:4b", "input": "count the words in this text: one two"}"#,
    ),
    ("GET", "/api/tags", ""),
    ("GET", "/v1/manifests", ""),
    ("GET", "/v1/manifests/local/wc", ""),
    ("GET", "/v1/experience", ""),
    ("DELETE", "/v1/experience", ""),
    ("GET", "/health", ""),
    ("OPTIONS", "/api/chat", ""),
];

/// A model whose first answer calls the bundled `wc` tool: any chat that
/// got through would run it.
fn tool_calling_model() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .check_host(true)
        .turn(Turn::tool_call(
            "oap_wc",
            json!({"args": "-w", "stdin": "one two three four"}),
        ))
        .turn(Turn::echo(Echo::LastTool))
}

fn daemon_for(upstream: &Upstream, extra_yaml: &str) -> DaemonBuilder {
    support::daemon().yaml(&format!(
        "ollama:\n  base_url: {:?}\nexperience:\n  enabled: true\n{extra_yaml}",
        upstream.fake.url()
    ))
}

/// A raw HTTP/1.1 request with exactly the given headers (no Host unless
/// listed) and a Content-Length.
fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    send_raw(addr, raw.as_bytes()).unwrap_or_else(|err| panic!("{method} {path}: {err}"))
}

fn host(daemon: &Daemon) -> String {
    daemon.addr.to_string()
}

fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string()
}

#[test]
fn a_foreign_host_is_refused_on_every_route() {
    let upstream = fake(tool_calling_model());
    let daemon = daemon_for(&upstream, "").start();
    for (method, path, body) in ROUTES {
        for hostile in [
            "evil.example",
            "evil.example:8300",
            "localhost.evil.example",
        ] {
            let response = raw_request(
                daemon.addr,
                method,
                path,
                &[("Host", hostile), ("Content-Type", "application/json")],
                body,
            );
            assert_eq!(response.status, 403, "{method} {path} Host {hostile}");
            let error = response.error();
            assert!(error.contains(hostile), "{method} {path}: {error}");
            assert!(error.contains("server.allowed_hosts"), "{error}");
            assert!(response.header("access-control-allow-origin").is_none());
        }
    }
    // An absolute-form target names the host too, whatever Host says.
    let response = raw_request(
        daemon.addr,
        "GET",
        "http://evil.example/api/tags",
        &[("Host", "localhost")],
        "",
    );
    assert_eq!(response.status, 403);
    assert!(
        upstream.fake.requests().is_empty(),
        "refused requests reached Ollama: {:?}",
        upstream.fake.requests()
    );
    assert_eq!(upstream.fake.remaining_turns(), 2, "no chat turn was taken");
}

#[test]
fn a_cross_site_simple_post_runs_nothing() {
    let upstream = fake(tool_calling_model());
    let daemon = daemon_for(&upstream, "").start();
    let own = host(&daemon);
    for origin in ["http://evil.example", "null", "https://127.0.0.1:1"] {
        for (method, path, body) in ROUTES {
            // text/plain: what a page may POST anywhere without a preflight.
            let response = raw_request(
                daemon.addr,
                method,
                path,
                &[
                    ("Host", &own),
                    ("Origin", origin),
                    ("Content-Type", "text/plain;charset=UTF-8"),
                ],
                body,
            );
            assert_eq!(response.status, 403, "{method} {path} Origin {origin}");
            let error = response.error();
            assert!(error.contains(origin), "{error}");
            assert!(error.contains("server.cors_origins"), "{error}");
        }
    }
    assert!(upstream.fake.requests().is_empty());
    assert_eq!(upstream.fake.remaining_turns(), 2);

    // The same text/plain POST without an Origin (curl, Python clients,
    // Home Assistant) is served: the chat runs the tool.
    let response = raw_request(
        daemon.addr,
        "POST",
        "/api/chat",
        &[("Host", &own), ("Content-Type", "text/plain")],
        CHAT,
    );
    assert_eq!(response.status, 200, "{}", daemon.log_text());
    assert!(
        response.json()["message"]["content"]
            .as_str()
            .unwrap()
            .contains('4'),
        "{}",
        response.json()
    );
    assert_eq!(upstream.fake.chat_requests().len(), 2, "the tool ran");
}

#[test]
fn same_origin_and_listed_origins_are_served() {
    let upstream = fake(tool_calling_model());
    let daemon = daemon_for(&upstream, "")
        .env("OAP_SERVER_CORS_ORIGINS", "https://app.example")
        .start();
    let own = host(&daemon);
    // A page served by the daemon itself: its origin is http://<Host>.
    let same = raw_request(
        daemon.addr,
        "POST",
        "/v1/discover",
        &[("Host", &own), ("Origin", &format!("http://{own}"))],
        r#"{"task": "count the words"}"#,
    );
    assert_eq!(same.status, 200, "{}", String::from_utf8_lossy(&same.body));
    let local = format!("localhost:{}", daemon.addr.port());
    let same = raw_request(
        daemon.addr,
        "GET",
        "/health",
        &[("Host", &local), ("Origin", &format!("http://{local}"))],
        "",
    );
    assert_eq!(same.status, 200);
    // Another port of the same host is another origin.
    let other = raw_request(
        daemon.addr,
        "GET",
        "/health",
        &[("Host", &local), ("Origin", "http://localhost:1")],
        "",
    );
    assert_eq!(other.status, 403);
    // A listed origin gets its CORS headers, preflight included.
    for method in ["OPTIONS", "GET"] {
        let listed = raw_request(
            daemon.addr,
            method,
            "/v1/manifests",
            &[("Host", &own), ("Origin", "https://app.example")],
            "",
        );
        assert!(listed.status == 200 || listed.status == 204, "{method}");
        assert_eq!(
            listed.header("access-control-allow-origin"),
            Some("https://app.example")
        );
    }
}

#[test]
fn names_of_this_machine_and_allowed_hosts_are_served() {
    let upstream = fake(tool_calling_model());
    let daemon = daemon_for(&upstream, "")
        .env("OAP_SERVER_ALLOWED_HOSTS", "pi.example.org, oapd.example")
        .start();
    let hostname = machine_hostname();
    let with_port = format!("{hostname}:{}", daemon.addr.port());
    for name in [
        "localhost:8300",
        "localhost",
        "127.0.0.1",
        "127.0.0.1:8300",
        "[::1]",
        "[::1]:8300",
        "192.168.1.20:8300",
        "203.0.113.9:8300",
        "oapd.local",
        "oapd.local:8300",
        "box.internal",
        "app.localhost",
        hostname.as_str(),
        with_port.as_str(),
        "pi.example.org",
        "PI.example.org:8300",
        "oapd.example",
    ] {
        let response = raw_request(daemon.addr, "GET", "/health", &[("Host", name)], "");
        assert_eq!(
            response.status,
            200,
            "Host {name}: {}",
            String::from_utf8_lossy(&response.body)
        );
    }
    let response = raw_request(
        daemon.addr,
        "GET",
        "/health",
        &[("Host", "sub.pi.example.org")],
        "",
    );
    assert_eq!(response.status, 403);
}

#[test]
fn ollama_gets_its_own_host_whatever_the_client_sent() {
    let upstream = fake(tool_calling_model());
    let daemon = daemon_for(&upstream, "")
        .env("OAP_SERVER_ALLOWED_HOSTS", "pi.example.org")
        .start();
    let ollama_host = upstream.fake.addr().to_string();
    for client_host in ["pi.example.org:8300", "oapd.local", "localhost"] {
        upstream.fake.clear_requests();
        let tags = raw_request(
            daemon.addr,
            "GET",
            "/api/tags",
            &[("Host", client_host)],
            "",
        );
        assert_eq!(tags.status, 200, "{}", String::from_utf8_lossy(&tags.body));
        let recorded = upstream.fake.requests_to("/api/tags");
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].header("host"), Some(ollama_host.as_str()));
    }
    // A chat (tool round and all): every request oapd made upstream.
    upstream.fake.clear_requests();
    let chat = raw_request(
        daemon.addr,
        "POST",
        "/api/chat",
        &[("Host", "pi.example.org")],
        CHAT,
    );
    assert_eq!(chat.status, 200, "{}", String::from_utf8_lossy(&chat.body));
    let recorded = upstream.fake.requests();
    assert!(recorded.iter().any(|r| r.path == "/api/chat"));
    for request in &recorded {
        assert_eq!(
            request.header("host"),
            Some(ollama_host.as_str()),
            "{} {}",
            request.method,
            request.path
        );
    }
}

#[test]
fn a_missing_or_repeated_host_is_a_bad_request() {
    let daemon = support::daemon().without_model().start();
    let missing = raw_request(daemon.addr, "GET", "/health", &[], "");
    assert_eq!(missing.status, 400);
    assert!(missing.error().contains("Host"), "{}", missing.error());
    let repeated = raw_request(
        daemon.addr,
        "GET",
        "/health",
        &[("Host", "localhost"), ("Host", "evil.example")],
        "",
    );
    assert_eq!(repeated.status, 400);
    assert!(repeated.error().contains("more than one Host"));
    // HTTP/1.0 needs no Host.
    let old = send_raw(daemon.addr, b"GET /health HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(old.status, 200);
}

#[test]
fn allowed_hosts_entries_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = support::oapd()
        .arg("config")
        .env(
            "OAP_SERVER_ALLOWED_HOSTS",
            "pi.example.org,http://evil.example",
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("server.allowed_hosts[1]"), "{stderr}");
    assert!(stderr.contains("OAP_SERVER_ALLOWED_HOSTS"), "{stderr}");
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    const TOKEN: &str = "a-long-enough-test-token";
    let daemon = support::daemon()
        .without_model()
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .start_with_auth(TOKEN);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let value = format!("{scheme} {TOKEN}");
        let response = daemon.request("GET", "/v1/manifests", &[("Authorization", &value)], b"");
        assert_eq!(response.status, 200, "{value}");
    }
    for wrong in [
        format!("Bearer {TOKEN}x"),
        format!("Basic {TOKEN}"),
        format!("Bearer{TOKEN}"),
        "bearer".to_owned(),
        String::new(),
    ] {
        let response = daemon.request("GET", "/v1/manifests", &[("Authorization", &wrong)], b"");
        assert_eq!(response.status, 401, "{wrong:?}");
    }
}
