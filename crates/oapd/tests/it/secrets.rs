//! Secrets in MCP server entries are used, never shown: values that came
//! from `${env:}` (in a URL, a program, its arguments, its environment, a
//! header), a URL's query string and header values appear nowhere a
//! server is shown — `/health`, `/v1/mcp/status`, `/ui`, `/metrics`,
//! `/v1/status`, `oapd config`, the log — not even in the error of a
//! failed start. A `server.trusted_clients` address sees counts and
//! states only; the operator (the token) sees where each server is,
//! redacted.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use oap_testkit::http::{request_bytes, send_raw_from};
use serde_json::Value;

use crate::support::{self, Daemon};

/// Put into the daemon's environment and referenced as `${env:...}`.
const SECRET: &str = "env-secret-7d1f0b9e4c2a";
/// Written literally into the entries, where it is a credential by place.
const LITERAL: &str = "literal-credential-5e8a1c";
const TOKEN: &str = "secrets-operator-token-0123456789ab";
const TRUSTED: &str = "127.0.0.2";

/// Three servers that cannot start: a URL server on a loopback port where
/// nothing listens (its query from the environment), a stdio server whose
/// program, arguments and environment carry the secret, and a URL server
/// with literal credentials in its query and headers.
fn section(port: u16) -> String {
    format!(
        "mcp:\n  servers:\n    remote:\n      url: \"http://127.0.0.1:{port}/mcp?k=${{env:MCP_TEST_SECRET}}\"\n      \
         trust: local\n      headers: {{Authorization: \"Bearer ${{env:MCP_TEST_SECRET}}\"}}\n    \
         tool:\n      command: \"/nonexistent-oapd-test/${{env:MCP_TEST_SECRET}}/server\"\n      \
         args: [\"--key=${{env:MCP_TEST_SECRET}}\"]\n      env: {{API_KEY: \"${{env:MCP_TEST_SECRET}}\"}}\n    \
         literal:\n      url: \"http://127.0.0.1:{port}/sse?api_key={LITERAL}\"\n      trust: local\n      \
         headers: {{X-Api-Key: \"{LITERAL}-header\"}}\n"
    )
}

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "the secret is in {what}: {text}");
    assert!(
        !text.contains(LITERAL),
        "a literal credential is in {what}: {text}"
    );
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn as_operator(daemon: &Daemon, path: &str) -> support::Response {
    let response = daemon.request("GET", path, &[("Authorization", &bearer())], b"");
    assert_eq!(
        response.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&response.body)
    );
    response
}

fn as_trusted(daemon: &Daemon, path: &str) -> support::Response {
    let raw = request_bytes("GET", path, &daemon.addr.to_string(), &[], b"");
    let response = send_raw_from(TRUSTED.parse::<IpAddr>().unwrap(), daemon.addr, &raw).unwrap();
    assert_eq!(
        response.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&response.body)
    );
    response
}

fn text(response: &support::Response) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

/// Each server's status entry once every one of them has failed to start
/// at least once (an error is recorded), as the operator sees it.
fn wait_failed(daemon: &Daemon) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = as_operator(daemon, "/v1/mcp/status").json();
        let servers = status["servers"].as_array().cloned().unwrap_or_default();
        if servers.len() == 3 && servers.iter().all(|s| !s["last_error"].is_null()) {
            return servers;
        }
        assert!(
            Instant::now() < deadline,
            "the servers never failed: {status}\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn server<'a>(servers: &'a [Value], name: &str) -> &'a Value {
    servers
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {servers:?}"))
}

#[test]
fn secrets_of_mcp_entries_appear_nowhere_and_a_trusted_client_sees_counts_only() {
    let port = support::free_port();
    let daemon = support::daemon()
        .env("MCP_TEST_SECRET", SECRET)
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .env("OAP_SERVER_TRUSTED_CLIENTS", &format!("{TRUSTED}/32"))
        .yaml(&section(port))
        .start_with_auth(TOKEN);
    let servers = wait_failed(&daemon);

    // The operator sees where each server is and why it failed, redacted.
    assert_eq!(
        server(&servers, "remote")["location"],
        format!("http://127.0.0.1:{port}/mcp?<redacted>")
    );
    assert_eq!(
        server(&servers, "tool")["location"],
        "stdio: /nonexistent-oapd-test/<redacted>/server"
    );
    assert_eq!(
        server(&servers, "literal")["location"],
        format!("http://127.0.0.1:{port}/sse?<redacted>")
    );
    let error = server(&servers, "tool")["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("/nonexistent-oapd-test/<redacted>/server"),
        "the error still names the program: {error}"
    );
    let health = as_operator(&daemon, "/health");
    assert!(
        text(&health).contains(&format!("http://127.0.0.1:{port}/mcp?<redacted>")),
        "{}",
        text(&health)
    );
    for path in [
        "/health",
        "/v1/mcp/status",
        "/ui",
        "/metrics",
        "/v1/status",
        "/v1/manifests",
    ] {
        assert_hidden(path, &text(&as_operator(&daemon, path)));
    }

    // A trusted address: counts and states, no location, program or error.
    let health = as_trusted(&daemon, "/health").json();
    assert_eq!(health["mcp"]["servers"], 3, "{health}");
    let states: u64 = health["mcp"]["states"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(states, 3, "{health}");
    let mcp_status = as_trusted(&daemon, "/v1/mcp/status").json();
    assert_eq!(
        mcp_status["servers"].as_array().unwrap().len(),
        3,
        "{mcp_status}"
    );
    for (path, shown) in [
        ("/health", health.to_string()),
        ("/v1/mcp/status", mcp_status.to_string()),
    ] {
        assert_hidden(path, &shown);
        for hidden in [
            "127.0.0.1",
            "nonexistent",
            "location",
            "last_error",
            "<redacted>",
        ] {
            assert!(
                !shown.contains(hidden),
                "{hidden} shown to a trusted client at {path}: {shown}"
            );
        }
    }

    // The log has the failures, without the secrets.
    let log = daemon.log_text();
    assert!(log.contains("MCP server did not start"), "{log}");
    assert_hidden("the log", &log);
}

#[test]
fn oapd_config_prints_the_entries_without_their_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let port = support::free_port();
    std::fs::write(&config, section(port)).unwrap();
    let output = support::oapd()
        .env("MCP_TEST_SECRET", SECRET)
        .arg("--config")
        .arg(&config)
        .arg("config")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_hidden("oapd config", &stdout);
    assert_hidden(
        "oapd config's log",
        &String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        stdout.contains(&format!("http://127.0.0.1:{port}/mcp?<redacted>")),
        "{stdout}"
    );
    assert!(
        stdout.contains("stdio: /nonexistent-oapd-test/<redacted>/server"),
        "{stdout}"
    );
}
