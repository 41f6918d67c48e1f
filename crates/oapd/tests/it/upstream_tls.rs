//! Ollama behind a reverse proxy: an `https://` base URL with a private CA
//! (`ollama.ca_file`) and a credential for the proxy (`ollama.api_key`)
//! sent on every request to Ollama, never logged nor shown by `oapd config`.

use crate::support;

use fake_ollama::{ModelSpec, Script, Turn};
use oap_testkit::upstream::{fake_behind_tls, TlsUpstream};
use serde_json::json;

const API_KEY: &str = "proxy-key-7d1c0f3a9b2e4d6f8a0c";
const TOKEN: &str = "oapd-token-0123456789abcdef0123";

fn script() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .check_host(true)
        .turn(Turn::reply("Four words."))
}

fn config(upstream: &TlsUpstream, ca_file: &std::path::Path) -> String {
    format!(
        "ollama:\n  base_url: {:?}\n  ca_file: {:?}\n",
        upstream.url("localhost"),
        ca_file
    )
}

#[test]
fn chats_and_pass_through_reach_an_https_ollama_with_the_upstream_credential() {
    let upstream = fake_behind_tls(script());
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &upstream.ca_pem).unwrap();
    let yaml = config(&upstream, &ca_file);
    let daemon = support::daemon()
        .yaml(&yaml)
        .env("OAP_OLLAMA_API_KEY", API_KEY)
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .start_with_auth(TOKEN);
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let chat = daemon.request(
        "POST",
        "/api/chat",
        &headers,
        json!({"model": "qwen3:4b", "stream": false,
               "messages": [{"role": "user", "content": "count the words in: a b c d"}]})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(chat.status, 200, "{}", chat.error());
    assert_eq!(chat.json()["message"]["content"], "Four words.");
    let tags = daemon.request("GET", "/api/tags?x=1", &headers, b"");
    assert_eq!(tags.status, 200, "{}", tags.error());

    // Every request that reached Ollama (the capability check, the chat,
    // the pass-through) carried the proxy's credential, not oapd's token.
    let seen = upstream.fake.requests();
    let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    for wanted in ["/api/show", "/api/chat", "/api/tags"] {
        assert!(paths.contains(&wanted), "{paths:?}");
    }
    for request in &seen {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {API_KEY}").as_str()),
            "{} {}",
            request.method,
            request.path
        );
    }

    // Neither the log nor `oapd config` shows the credential.
    assert!(!daemon.log_text().contains(API_KEY));
    let config_path = daemon.dir.path().join("config.yaml");
    let shown = support::oapd()
        .arg("--config")
        .arg(&config_path)
        .arg("config")
        .env("OAP_OLLAMA_API_KEY", API_KEY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout).to_string()
        + &String::from_utf8_lossy(&shown.stderr);
    assert!(shown.status.success(), "{text}");
    assert!(!text.contains(API_KEY), "{text}");
    assert!(text.contains("<redacted>"), "{text}");
}

#[test]
fn an_https_ollama_whose_certificate_is_not_trusted_is_named_in_the_error() {
    let upstream = fake_behind_tls(script());
    let other = oap_testkit::pki::Pki::new(&["localhost"]);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("wrong-ca.pem");
    std::fs::write(&ca_file, &other.ca_pem).unwrap();
    let daemon = support::daemon().yaml(&config(&upstream, &ca_file)).start();
    let response = daemon.get("/api/tags");
    assert_eq!(response.status, 502);
    let error = response.error();
    assert!(
        error.contains(&format!(
            "cannot reach Ollama at {}",
            upstream.url("localhost")
        )),
        "{error}"
    );
    assert!(error.contains("certificate"), "{error}");
    assert!(upstream.fake.requests().is_empty());
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn a_ca_file_without_certificates_stops_start_up_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("empty.pem");
    std::fs::write(&ca_file, "not a certificate\n").unwrap();
    let yaml = format!("ollama:\n  base_url: \"https://localhost:1\"\n  ca_file: {ca_file:?}\n");
    let err = support::daemon()
        .yaml(&yaml)
        .try_start()
        .err()
        .expect("start-up must fail");
    assert!(err.contains("ollama.ca_file"), "{err}");
}
