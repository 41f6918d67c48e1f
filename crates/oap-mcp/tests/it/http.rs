//! URL servers: the SDK's echo server over streamable HTTP on loopback, and
//! the address rule refusing a name that resolves to loopback.

use std::path::Path;
use std::sync::Arc;

use oap_mcp::{Hub, State};
use oap_testkit::resolver::StubResolver;
use oap_testkit::script_server::ScriptServer;
use serde_json::{json, Map};

use crate::common::*;

/// The SDK echo server over streamable HTTP (`mode` "http") or legacy SSE
/// ("sse"); killed on drop.
fn echo_server(python: &str, mode: &str) -> ScriptServer {
    ScriptServer::start(python, Path::new(&script("echo_server.py")), &[mode])
}

#[tokio::test]
async fn streamable_http_on_loopback_with_local_trust() {
    let Some(python) = sdk_python() else {
        available("the MCP Python SDK (target/pyclients)", false);
        return;
    };
    let server = echo_server(&python, "http");
    let hub = hub();
    hub.apply(vec![spec(
        "web",
        json!({"url": format!("http://127.0.0.1:{}/mcp", server.port), "trust": "local",
               "headers": {"X-Team": "tests"}}),
    )]);
    let s = wait_until(&hub, "web", "ready", |s| {
        s.state == State::Ready || s.restarts > 20
    })
    .await;
    assert_eq!(s.state, State::Ready, "{s:?}");
    assert_eq!(s.transport, "http");
    assert!(hub.tools().iter().any(|t| t.name == "echo"));
    let mut arguments = Map::new();
    arguments.insert("text".into(), json!("over http"));
    let out = hub.call("web", "echo", arguments, None).await;
    assert_eq!(out.text, "echo: over http", "{out:?}");
    assert!(!out.is_error);
    hub.shutdown().await;
}

/// The echo server over TLS with a certificate from a fresh test CA.
fn https_server(python: &str) -> (ScriptServer, oap_testkit::pki::Pki) {
    let pki = oap_testkit::pki::Pki::new(&["127.0.0.1"]);
    let server = ScriptServer::start_tls(python, Path::new(&script("echo_server.py")), &pki);
    (server, pki)
}

#[tokio::test]
async fn streamable_http_over_tls_trusts_the_operators_ca() {
    let Some(python) = sdk_python() else {
        available("the MCP Python SDK (target/pyclients)", false);
        return;
    };
    let (server, pki) = https_server(&python);
    // The TLS configuration the daemon hands the hub: the HTTP tools'
    // executor with the operator's CA file added.
    let executor = oap_exec::Executor::new(oap_exec::ExecPolicy::default())
        .unwrap()
        .with_extra_roots_pem(pki.ca_pem.as_bytes())
        .unwrap();
    let mut ctx = context(Arc::new(oap_exec::SystemResolver));
    ctx.tls = Some(executor.tls_client_config());
    let hub = Hub::new(settings(), ctx);
    hub.apply(vec![spec(
        "secure",
        json!({"url": format!("https://127.0.0.1:{}/mcp", server.port), "trust": "local"}),
    )]);
    let s = wait_until(&hub, "secure", "ready", |s| {
        s.state == State::Ready || s.restarts > 20
    })
    .await;
    assert_eq!(s.state, State::Ready, "{s:?}");
    let mut arguments = Map::new();
    arguments.insert("text".into(), json!("over tls"));
    let out = hub.call("secure", "echo", arguments, None).await;
    assert_eq!(out.text, "echo: over tls", "{out:?}");
    assert!(!out.is_error);
    hub.shutdown().await;
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_fails_the_server_with_a_tls_error() {
    let Some(python) = sdk_python() else {
        available("the MCP Python SDK (target/pyclients)", false);
        return;
    };
    let (server, _pki) = https_server(&python);
    // Only the built-in Mozilla roots: the test CA is not among them.
    let hub = hub();
    hub.apply(vec![spec(
        "secure",
        json!({"url": format!("https://127.0.0.1:{}/mcp", server.port), "trust": "local"}),
    )]);
    // A TLS failure is retried with backoff (the operator may fix the
    // certificate); the error says why meanwhile.
    // (The first attempts may find the server not listening yet.)
    let s = wait_until(&hub, "secure", "a certificate error", |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("UnknownIssuer"))
    })
    .await;
    assert_ne!(s.state, State::Ready, "{s:?}");
    assert_eq!(
        s.last_error.as_deref(),
        Some("initialize failed: TLS with 127.0.0.1: invalid peer certificate: UnknownIssuer")
    );
    assert!(hub.tools().iter().all(|t| t.server != "secure"));
    hub.shutdown().await;
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_without_connecting() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let resolver = StubResolver::loopback(&["mcp.example.test"]);
    let hub = Hub::new(settings(), context(resolver.clone()));
    hub.apply(vec![spec(
        "remote",
        json!({"url": format!("http://mcp.example.test:{port}/mcp")}),
    )]);
    let s = wait_until(&hub, "remote", "failed", |s| s.state == State::Failed).await;
    let error = s.last_error.unwrap();
    assert!(
        error.contains("127.0.0.1") && error.contains("an internet"),
        "{error}"
    );
    assert!(resolver.queries().contains(&"mcp.example.test".to_string()));
    // Nothing ever connected.
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    let out = hub.call("remote", "echo", Map::new(), None).await;
    assert!(out.is_error && out.text.contains("not ready"), "{out:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn legacy_sse_on_loopback_with_local_trust() {
    let Some(python) = sdk_python() else {
        available("the MCP Python SDK (target/pyclients)", false);
        return;
    };
    let server = echo_server(&python, "sse");
    let hub = hub();
    hub.apply(vec![spec(
        "old",
        json!({"url": format!("http://127.0.0.1:{}/sse", server.port), "trust": "local"}),
    )]);
    let s = wait_until(&hub, "old", "ready", |s| {
        s.state == State::Ready || s.restarts > 20
    })
    .await;
    assert_eq!(s.state, State::Ready, "{s:?}");
    assert_eq!(s.transport, "sse");
    let mut arguments = Map::new();
    arguments.insert("text".into(), json!("over sse"));
    let out = hub.call("old", "echo", arguments, None).await;
    assert_eq!(out.text, "echo: over sse", "{out:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn a_legacy_sse_name_resolving_to_loopback_is_refused_without_connecting() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let resolver = StubResolver::loopback(&["old.example.test"]);
    let hub = Hub::new(settings(), context(resolver.clone()));
    hub.apply(vec![spec(
        "old",
        json!({"url": format!("http://old.example.test:{port}/sse")}),
    )]);
    let s = wait_until(&hub, "old", "failed", |s| s.state == State::Failed).await;
    assert_eq!(s.transport, "sse");
    assert!(s.last_error.unwrap().contains("127.0.0.1"));
    assert_eq!(resolver.queries(), ["old.example.test"]);
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn spec_headers_and_the_stored_bearer_reach_the_server() {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials.yaml");
    std::fs::write(
        &creds,
        "mcp.example.test:\n  token: \"t0ken\"\nother.example.test:\n  token: \"nope\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(String::from_utf8_lossy(&head).to_lowercase());
        let _ = sock
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
    });
    let mut ctx = context(StubResolver::loopback(&["mcp.example.test"]));
    ctx.credentials = Some(oap_exec::CredentialStore::load(&creds).unwrap());
    let hub = Hub::new(settings(), ctx);
    hub.apply(vec![spec(
        "web",
        json!({"url": format!("http://mcp.example.test:{port}/mcp"), "trust": "local",
               "headers": {"X-Team": "tests"}}),
    )]);
    let head = tokio::time::timeout(std::time::Duration::from_secs(60), rx)
        .await
        .unwrap()
        .unwrap();
    assert!(head.starts_with("post /mcp http/1.1"), "{head}");
    assert!(head.contains("x-team: tests"), "{head}");
    assert!(head.contains("authorization: bearer t0ken"), "{head}");
    assert!(
        head.contains(&format!("host: mcp.example.test:{port}")),
        "{head}"
    );
    let s = wait_until(&hub, "web", "an error", |s| s.last_error.is_some()).await;
    assert!(
        s.last_error.unwrap().contains("503"),
        "the status names the HTTP failure"
    );
    hub.shutdown().await;
}
