//! The operator's status page (`/ui`) and the state it reads from
//! `/v1/status`, against the real daemon: a browser is asked for the token
//! with a Basic challenge, gets the page with a strict
//! Content-Security-Policy, and is kept out by the same Host and Origin
//! rules as the API.

use crate::support;

use fake_ollama::{ModelSpec, Script};
use oap_testkit::http::{request_bytes, send_raw_from};
use std::net::IpAddr;

const TOKEN: &str = "status-page-token-0123456789abcdef";

/// `Authorization: Basic` for `user` with `password` (RFC 7617).
fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

fn with_token() -> support::Daemon {
    support::daemon()
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .start_with_auth(TOKEN)
}

#[test]
fn the_test_encoder_matches_rfc_7617() {
    // RFC 7617 §2's example.
    assert_eq!(
        basic("Aladdin", "open sesame"),
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    );
}

#[test]
fn the_page_asks_a_browser_for_the_token_and_the_api_keeps_its_bearer_challenge() {
    let daemon = with_token();
    let page = daemon.get("/ui");
    assert_eq!(page.status, 401);
    assert_eq!(
        page.header("www-authenticate"),
        Some("Basic realm=\"oapd\", charset=\"UTF-8\"")
    );
    assert!(
        page.error().contains("token as the password"),
        "{}",
        page.error()
    );
    let api = daemon.get("/v1/manifests");
    assert_eq!(api.status, 401);
    assert_eq!(api.header("www-authenticate"), Some("Bearer"));

    let wrong = basic("operator", "not-the-token");
    let refused = daemon.request("GET", "/ui", &[("Authorization", &wrong)], b"");
    assert_eq!(refused.status, 401);
    // The token as the user name is not the password.
    let swapped = basic(TOKEN, "x");
    let refused = daemon.request("GET", "/ui", &[("Authorization", &swapped)], b"");
    assert_eq!(refused.status, 401);

    // Any user name, the token as the password: the page, and the API the
    // page reads with the same credentials.
    for user in ["operator", ""] {
        let credentials = basic(user, TOKEN);
        let page = daemon.request("GET", "/ui", &[("Authorization", &credentials)], b"");
        assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert!(String::from_utf8_lossy(&page.body).contains("<script src=\"/ui/app.js\""));
        let manifests = daemon.request(
            "GET",
            "/v1/manifests",
            &[("Authorization", &credentials)],
            b"",
        );
        assert_eq!(manifests.status, 200);
        assert!(!manifests.json().as_array().unwrap().is_empty());
    }
    // The bearer token opens the page as well.
    let bearer = format!("Bearer {TOKEN}");
    let page = daemon.request("GET", "/ui/", &[("Authorization", &bearer)], b"");
    assert_eq!(page.status, 200);
}

#[test]
fn the_page_and_its_files_carry_a_strict_policy() {
    let daemon = support::daemon().start();
    let page = daemon.get("/ui");
    assert_eq!(page.status, 200);
    let csp = page
        .header("content-security-policy")
        .expect("a CSP header");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    for (path, content_type) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let file = daemon.get(path);
        assert_eq!(file.status, 200, "{path}");
        assert_eq!(file.header("content-type"), Some(content_type), "{path}");
        assert_eq!(
            file.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert!(!file.body.is_empty(), "{path}");
    }
    let script = String::from_utf8_lossy(&daemon.get("/ui/app.js").body).into_owned();
    assert!(script.contains("textContent") && !script.contains("innerHTML"));

    // Other paths under /ui are the page's, not Ollama's: a JSON 404.
    assert_eq!(daemon.get("/ui/../health").status, 404);
    let missing = daemon.get("/ui/secret.txt");
    assert_eq!(missing.status, 404);
    assert!(
        missing.error().contains("/ui/secret.txt"),
        "{}",
        missing.error()
    );
    let post = daemon.post_json("/ui", "{}");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET"));
}

#[test]
fn foreign_hosts_and_origins_get_no_page() {
    let daemon = with_token();
    let credentials = basic("operator", TOKEN);
    let rebinding = daemon.request(
        "GET",
        "/ui",
        &[("Host", "evil.example"), ("Authorization", &credentials)],
        b"",
    );
    assert_eq!(rebinding.status, 403);
    assert!(rebinding.error().contains("evil.example"));
    let page_elsewhere = daemon.request(
        "POST",
        "/v1/discover",
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", &credentials),
            ("Content-Type", "text/plain"),
        ],
        br#"{"task": "count the words"}"#,
    );
    assert_eq!(page_elsewhere.status, 403);
    // The page's own origin may POST (the discovery box does).
    let own = format!("http://{}", daemon.addr);
    let discover = daemon.request(
        "POST",
        "/v1/discover",
        &[
            ("Origin", &own),
            ("Authorization", &credentials),
            ("Content-Type", "application/json"),
            ("Sec-Fetch-Site", "same-origin"),
            ("Sec-Fetch-Mode", "cors"),
        ],
        br#"{"task": "how many words are in this sentence"}"#,
    );
    assert_eq!(
        discover.status,
        200,
        "{}",
        String::from_utf8_lossy(&discover.body)
    );
    assert_eq!(discover.json()["match"]["id"], "local/wc");
}

#[test]
fn basic_credentials_another_site_makes_the_browser_send_do_not_count() {
    let daemon = with_token();
    let credentials = basic("operator", TOKEN);
    // An <img> or <script> of another site's page pointing here.
    for site in ["cross-site", "same-site"] {
        let embedded = daemon.request(
            "GET",
            "/v1/manifests",
            &[
                ("Authorization", &credentials),
                ("Sec-Fetch-Site", site),
                ("Sec-Fetch-Mode", "no-cors"),
            ],
            b"",
        );
        assert_eq!(embedded.status, 401, "{site}");
    }
    // A link the operator follows opens the page.
    let link = daemon.request(
        "GET",
        "/ui",
        &[
            ("Authorization", &credentials),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        b"",
    );
    assert_eq!(link.status, 200);
    // The bearer token is no browser's ambient credential.
    let bearer = format!("Bearer {TOKEN}");
    let app = daemon.request(
        "GET",
        "/v1/manifests",
        &[("Authorization", &bearer), ("Sec-Fetch-Site", "cross-site")],
        b"",
    );
    assert_eq!(app.status, 200);
}

#[test]
fn a_trusted_address_sees_the_page_without_credentials() {
    let daemon = support::daemon()
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .env("OAP_SERVER_TRUSTED_CLIENTS", "127.0.0.2/32")
        .start_with_auth(TOKEN);
    let raw = request_bytes("GET", "/ui", &daemon.addr.to_string(), &[], b"");
    let trusted = send_raw_from("127.0.0.2".parse::<IpAddr>().unwrap(), daemon.addr, &raw).unwrap();
    assert_eq!(trusted.status, 200);
    let stranger =
        send_raw_from("127.0.0.3".parse::<IpAddr>().unwrap(), daemon.addr, &raw).unwrap();
    assert_eq!(stranger.status, 401);
    assert!(stranger
        .header("www-authenticate")
        .unwrap()
        .starts_with("Basic"));
}

#[test]
fn status_counts_manifests_by_source_and_lists_ollamas_models() {
    let upstream = support::fake(
        Script::new()
            .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
            .model(ModelSpec::new("tiny").capabilities(&["completion"])),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("haiku.json"),
        support::stdio_manifest("haiku", "Writes a haiku about the input text."),
    )
    .unwrap();
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmanifests:\n  dirs: [{:?}]\n",
            upstream.fake.url(),
            dir.path()
        ))
        .start();
    let status = daemon.get("/v1/status");
    assert_eq!(status.status, 200);
    let status = status.json();
    let by_source = &status["manifests"]["by_source"];
    assert_eq!(by_source["bundled"], 13, "{status}");
    assert_eq!(by_source["dir"], 1, "{status}");
    for empty in ["crawl", "lan", "mcp"] {
        assert_eq!(by_source[empty], 0, "{status}");
    }
    assert_eq!(status["manifests"]["total"], 14);
    let last = &status["last_rebuild"];
    assert_eq!(last["ok"], true, "{status}");
    assert_eq!(last["manifests"], 14, "{status}");
    assert!(last["finished_unix_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(status["ollama"]["reachable"], true, "{status}");
    let names: Vec<&str> = status["ollama"]["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"qwen3:4b"), "{names:?}");

    // A new manifest is indexed: the last rebuild says so.
    std::fs::write(
        dir.path().join("limerick.json"),
        support::stdio_manifest("limerick", "Writes a limerick about the input text."),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = daemon.get("/v1/status").json();
        if status["manifests"]["by_source"]["dir"] == 2 {
            assert_eq!(status["last_rebuild"]["ok"], true, "{status}");
            assert_eq!(status["last_rebuild"]["manifests"], 15, "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not reindexed: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(daemon.post_json("/v1/status", "{}").status, 405);
}

#[test]
fn status_says_when_ollama_does_not_answer() {
    // A loopback port nobody listens on.
    let port = support::free_port();
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: \"http://127.0.0.1:{port}\"\n"
        ))
        .start();
    let status = daemon.get("/v1/status");
    assert_eq!(status.status, 200);
    let ollama = &status.json()["ollama"];
    assert_eq!(ollama["reachable"], false, "{ollama}");
    assert_eq!(ollama["models"], serde_json::json!([]));
    let error = ollama["error"].as_str().unwrap();
    assert!(error.contains(&port.to_string()), "{error}");
}
