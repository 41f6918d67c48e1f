//! HTTP execution against loopback servers. Host names are resolved by a
//! stub resolver; every connection attempt is logged and anything but
//! loopback is refused by the test guard, so no traffic leaves the machine.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use oap_exec::{CredentialStore, ExecPolicy, Trust};
use serde_json::{json, Value};

fn policy() -> ExecPolicy {
    ExecPolicy {
        http_timeout: Duration::from_secs(5),
        ..ExecPolicy::default()
    }
}

fn store(dir: &tempfile::TempDir, yaml: &str) -> CredentialStore {
    let path = dir.path().join("credentials.yaml");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(yaml.as_bytes()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    CredentialStore::load(&path).unwrap()
}

fn get_manifest(url: &str, extra_invoke: &str) -> oap_manifest::Manifest {
    manifest(&format!(
        r#"{{"oap":"1.0","name":"t","description":"test tool",
        "input":{{"format":"application/json","description":"x",
                 "parameters":{{"q":{{"type":"string","description":"q"}}}}}},
        "output":{{"format":"application/json","description":"x"}},
        "invoke":{{"method":"GET","url":"{url}"{extra_invoke}}}}}"#
    ))
}

fn post_manifest(url: &str, input_format: &str, extra_invoke: &str) -> oap_manifest::Manifest {
    manifest(&format!(
        r#"{{"oap":"1.0","name":"t","description":"test tool",
        "input":{{"format":"{input_format}","description":"x"}},
        "output":{{"format":"application/json","description":"x"}},
        "invoke":{{"method":"POST","url":"{url}"{extra_invoke}}}}}"#
    ))
}

#[tokio::test]
async fn get_merges_baked_query_static_params_and_arguments() {
    let server = serve(|_| response(200, r#"{"temp": 61.2}"#)).await;
    let (exec, connects) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let url = format!(
        "http://a.test:{}/v1/forecast?temperature_unit=fahrenheit&wind_speed_unit=mph",
        server.port()
    );
    let m = get_manifest(&url, r#","params":{"limit":10,"fields":"title,author"}"#);
    let out = exec
        .execute(
            &m,
            Trust::Local,
            &args(
                json!({"latitude": 45.52, "longitude": -122.68, "daily": ["a", "b"], "limit": 3}),
            ),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.content, r#"{"temp": 61.2}"#);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/v1/forecast");
    assert_eq!(
        r.query_pairs(),
        vec![
            ("temperature_unit".into(), "fahrenheit".into()),
            ("wind_speed_unit".into(), "mph".into()),
            ("fields".into(), "title,author".into()),
            ("latitude".into(), "45.52".into()),
            ("longitude".into(), "-122.68".into()),
            ("daily".into(), "a".into()),
            ("daily".into(), "b".into()),
            ("limit".into(), "3".into()),
        ]
    );
    assert_eq!(r.header("accept").as_deref(), Some("application/json"));
    assert_eq!(r.header("host"), Some(format!("a.test:{}", server.port())));
    assert!(r.header("user-agent").unwrap().starts_with("oapd/"));
    assert!(r.header("content-type").is_none());
    assert!(r.body.is_empty());
    assert_eq!(connects.all(), vec![server.addr]);
}

#[tokio::test]
async fn post_sends_json_body_and_static_params_in_query() {
    let server = serve(|_| response(200, "created")).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let url = format!("http://a.test:{}/api?v=2", server.port());
    let m = post_manifest(&url, "application/json", r#","params":{"mode":"fast"}"#);
    let a = args(json!({"to": "x@example.com", "count": 2, "tags": ["a"], "nested": {"k": true}}));
    let out = exec.execute(&m, Trust::Local, &a).await;
    assert!(out.ok, "{out:?}");
    let r = &server.requests()[0];
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(r.header("accept").as_deref(), Some("application/json"));
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body, Value::Object(a));
    assert_eq!(
        r.query_pairs(),
        vec![("v".into(), "2".into()), ("mode".into(), "fast".into())]
    );
}

#[tokio::test]
async fn post_text_plain_sends_raw_input() {
    let server = serve(|r| response(200, format!("got {} bytes", r.body.len()))).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = post_manifest(
        &format!("http://a.test:{}/summarize", server.port()),
        "text/plain",
        "",
    );
    let text = "Line one.\nLine \"two\" & {three}";
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"input": text})))
        .await;
    assert!(out.ok, "{out:?}");
    let r = &server.requests()[0];
    assert_eq!(r.header("content-type").as_deref(), Some("text/plain"));
    assert_eq!(std::str::from_utf8(&r.body).unwrap(), text);
    // Another key name still works: the first string argument is the text.
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"text": "hello"})))
        .await;
    assert!(out.ok);
    assert_eq!(&server.requests()[1].body[..], b"hello");
}

#[tokio::test]
async fn text_plain_get_appends_encoded_path_segment() {
    let server = serve(|_| response(200, "summary")).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = manifest(&format!(
        r#"{{"oap":"1.0","name":"wikipedia","description":"Wikipedia summaries",
        "input":{{"format":"text/plain","description":"The article title"}},
        "output":{{"format":"application/json","description":"x"}},
        "invoke":{{"method":"GET","url":"http://a.test:{}/api/rest_v1/page/summary/"}}}}"#,
        server.port()
    ));
    for (input, target) in [
        ("Ada_Lovelace", "/api/rest_v1/page/summary/Ada_Lovelace"),
        (
            "Who? #1 50%",
            "/api/rest_v1/page/summary/Who%3F%20%231%2050%25",
        ),
        ("us/97201", "/api/rest_v1/page/summary/us/97201"),
    ] {
        let out = exec
            .execute(&m, Trust::Local, &args(json!({ "input": input })))
            .await;
        assert!(out.ok, "{out:?}");
        assert_eq!(server.requests().last().unwrap().target, target);
    }
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"input": "../../admin"})))
        .await;
    assert!(!out.ok);
    assert!(out.content.contains("`.` or `..`"), "{}", out.content);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn manifest_headers_merge_but_cannot_override_protected_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(|_| response(200, "ok")).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let exec = exec.with_credentials(store(&dir, "a.test:\n  token: TOKEN-A\n"));
    let m = get_manifest(
        &format!("http://a.test:{}/x", server.port()),
        r#","auth":"bearer","auth_url":"https://a.test/keys",
           "headers":{"X-Api-Version":"2024-01","Host":"evil.test","Content-Length":"5",
                      "Connection":"upgrade","Transfer-Encoding":"chunked",
                      "Authorization":"Bearer FROM-MANIFEST","Accept":"application/vnd.x+json"}"#,
    );
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert!(out.ok, "{out:?}");
    let r = &server.requests()[0];
    assert_eq!(r.header("x-api-version").as_deref(), Some("2024-01"));
    assert_eq!(r.header("host"), Some(format!("a.test:{}", server.port())));
    assert_eq!(r.header("authorization").as_deref(), Some("Bearer TOKEN-A"));
    assert_eq!(
        r.header("accept").as_deref(),
        Some("application/vnd.x+json")
    );
    assert!(r.header("transfer-encoding").is_none());
    assert_ne!(r.header("connection").as_deref(), Some("upgrade"));
    assert!(out.detail.unwrap().contains("ignored"));
}

#[tokio::test]
async fn credentials_are_placed_per_auth_auth_in_and_auth_name() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(|_| response(200, "ok")).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let exec = exec.with_credentials(store(&dir, "a.test:\n  key: SECRET-K\n"));
    let url = format!("http://a.test:{}/x", server.port());
    let au = r#","auth_url":"https://a.test/keys""#;
    type Check = Box<dyn Fn(&Recorded) -> bool>;
    let cases: Vec<(String, Check)> = vec![
        (
            format!(r#","auth":"bearer"{au}"#),
            Box::new(|r| r.header("authorization").as_deref() == Some("Bearer SECRET-K")),
        ),
        (
            format!(r#","auth":"oauth2"{au}"#),
            Box::new(|r| r.header("authorization").as_deref() == Some("Bearer SECRET-K")),
        ),
        (
            format!(r#","auth":"bearer","auth_name":"X-Token"{au}"#),
            Box::new(|r| {
                r.header("x-token").as_deref() == Some("Bearer SECRET-K")
                    && r.header("authorization").is_none()
            }),
        ),
        (
            format!(r#","auth":"api_key"{au}"#),
            Box::new(|r| r.header("x-api-key").as_deref() == Some("SECRET-K")),
        ),
        (
            format!(r#","auth":"api_key","auth_in":"header","auth_name":"X-Subscription"{au}"#),
            Box::new(|r| r.header("x-subscription").as_deref() == Some("SECRET-K")),
        ),
        (
            format!(r#","auth":"api_key","auth_in":"query","auth_name":"apikey"{au}"#),
            Box::new(|r| {
                r.query_pairs()
                    == vec![
                        ("q".to_string(), "x".to_string()),
                        ("apikey".to_string(), "SECRET-K".to_string()),
                    ]
                    && r.header("x-api-key").is_none()
            }),
        ),
        (
            format!(r#","auth":"bearer","auth_in":"query"{au}"#),
            Box::new(|r| {
                r.query_pairs()
                    .contains(&("access_token".into(), "SECRET-K".into()))
            }),
        ),
    ];
    for (i, (invoke, check)) in cases.iter().enumerate() {
        let m = get_manifest(&url, invoke);
        // The model tries to set the credential parameter itself: dropped.
        let out = exec
            .execute(
                &m,
                Trust::Local,
                &args(json!({"q": "x", "apikey": "FROM-MODEL"})),
            )
            .await;
        assert!(out.ok, "case {i}: {out:?}");
        let r = &server.requests()[i];
        assert!(check(r), "case {i}: {r:?}");
        assert!(!out.detail.unwrap_or_default().contains("SECRET-K"));
    }
}

#[tokio::test]
async fn missing_credential_is_a_clear_error_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(|_| response(200, "ok")).await;
    let resolver = StubResolver::new(&[("a.test", &["127.0.0.1"]), ("b.test", &["127.0.0.1"])]);
    let (exec, connects) = executor(policy(), resolver);
    let m_b = get_manifest(
        &format!("http://b.test:{}/x", server.port()),
        r#","auth":"api_key","auth_url":"https://b.test/keys""#,
    );
    // No store at all.
    let out = exec
        .execute(&m_b, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert!(!out.ok);
    assert_eq!(
        out.content,
        "Error: no credential for b.test: no credential store is configured"
    );
    // A store with a credential for another host only.
    let exec = exec.with_credentials(store(&dir, "a.test:\n  key: SECRET-A\n"));
    let out = exec
        .execute(&m_b, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert!(!out.ok);
    let path = dir.path().join("credentials.yaml");
    assert_eq!(
        out.content,
        format!("Error: no credential for b.test in {}", path.display())
    );
    assert!(server.requests().is_empty());
    assert!(connects.all().is_empty());
}

#[tokio::test]
async fn internet_manifest_never_sends_a_credential_over_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(|_| response(200, "ok")).await;
    let p = ExecPolicy {
        allow_private: vec!["127.0.0.0/8".parse().unwrap()],
        ..policy()
    };
    let (exec, connects) = executor(p, StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let exec = exec.with_credentials(store(&dir, "a.test:\n  token: T\n"));
    let m = get_manifest(
        &format!("http://a.test:{}/x", server.port()),
        r#","auth":"bearer","auth_url":"https://a.test/keys""#,
    );
    let out = exec
        .execute(&m, Trust::Internet, &args(json!({"q": "x"})))
        .await;
    assert!(!out.ok);
    assert!(out.content.contains("over plain http"), "{}", out.content);
    assert!(connects.all().is_empty());
    // Without auth the same internet manifest may use http.
    let m = get_manifest(&format!("http://a.test:{}/x", server.port()), "");
    assert!(
        exec.execute(&m, Trust::Internet, &args(json!({"q": "x"})))
            .await
            .ok
    );
}

#[tokio::test]
async fn credential_is_dropped_on_cross_host_redirect() {
    let dir = tempfile::tempdir().unwrap();
    let b = serve(|_| response(200, "landed on b")).await;
    let b_port = b.port();
    let a = serve(move |r| {
        if r.path == "/same" {
            redirect(307, "/final")
        } else if r.path == "/final" {
            response(200, "final on a")
        } else {
            // Echo the secret into the Location, as a hostile server might.
            let secret = r
                .query_pairs()
                .into_iter()
                .find(|(k, _)| k == "apikey")
                .map(|(_, v)| v)
                .unwrap_or_default();
            redirect(
                302,
                &format!("http://b.test:{b_port}/landing?leak={secret}&x=1"),
            )
        }
    })
    .await;
    let resolver = StubResolver::new(&[("a.test", &["127.0.0.1"]), ("b.test", &["127.0.0.1"])]);
    let (exec, connects) = executor(policy(), resolver);
    let exec = exec.with_credentials(store(&dir, "a.test:\n  key: SECRET-A\n"));
    for invoke in [
        r#","auth":"bearer","auth_url":"https://a.test/k""#,
        r#","auth":"api_key","auth_in":"query","auth_name":"apikey","auth_url":"https://a.test/k""#,
    ] {
        let m = get_manifest(&format!("http://a.test:{}/start", a.port()), invoke);
        let out = exec
            .execute(&m, Trust::Local, &args(json!({"q": "x"})))
            .await;
        assert!(out.ok, "{out:?}");
        assert_eq!(out.content, "landed on b");
    }
    let a_reqs = a.requests();
    assert_eq!(
        a_reqs[0].header("authorization").as_deref(),
        Some("Bearer SECRET-A")
    );
    assert!(a_reqs[1]
        .query_pairs()
        .contains(&("apikey".into(), "SECRET-A".into())));
    for r in b.requests() {
        assert!(r.header("authorization").is_none(), "{r:?}");
        assert!(!r.target.contains("SECRET-A"), "{r:?}");
    }
    assert_eq!(
        b.requests()[1].query_pairs(),
        vec![("x".to_string(), "1".to_string())]
    );
    assert_eq!(connects.all().len(), 4);

    // A same-origin redirect keeps the credential.
    let m = get_manifest(
        &format!("http://a.test:{}/same", a.port()),
        r#","auth":"bearer","auth_url":"https://a.test/k""#,
    );
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert_eq!(out.content, "final on a");
    let last = a.requests().last().unwrap().clone();
    assert_eq!(last.path, "/final");
    assert_eq!(
        last.header("authorization").as_deref(),
        Some("Bearer SECRET-A")
    );
}

#[tokio::test]
async fn redirect_to_private_or_metadata_address_is_refused() {
    let server = serve(|r| match r.path.as_str() {
        "/to-internal" => redirect(302, "http://internal.test/admin"),
        "/to-metadata" => redirect(301, "http://169.254.169.254/latest/meta-data/"),
        "/to-file" => redirect(302, "file:///etc/passwd"),
        _ => response(200, "ok"),
    })
    .await;
    let p = ExecPolicy {
        allow_private: vec!["127.0.0.1/32".parse().unwrap()],
        ..policy()
    };
    let resolver =
        StubResolver::new(&[("a.test", &["127.0.0.1"]), ("internal.test", &["10.0.0.5"])]);
    let (exec, connects) = executor(p, resolver.clone());
    let base = format!("http://a.test:{}", server.port());
    let m = get_manifest(&format!("{base}/to-internal"), "");
    let out = exec.execute(&m, Trust::Internet, &args(json!({}))).await;
    assert!(!out.ok);
    assert!(
        out.content.contains(
            "refused to connect to internal.test (10.0.0.5): it is a private-network address"
        ),
        "{}",
        out.content
    );
    let m = get_manifest(&format!("{base}/to-metadata"), "");
    let out = exec.execute(&m, Trust::Internet, &args(json!({}))).await;
    assert!(out.content.contains("169.254.169.254"), "{}", out.content);
    assert!(out.content.contains("link-local"), "{}", out.content);
    let m = get_manifest(&format!("{base}/to-file"), "");
    let out = exec.execute(&m, Trust::Internet, &args(json!({}))).await;
    assert!(out.content.contains("bad redirect"), "{}", out.content);
    // Only the three first hops connected, all to the test server.
    assert_eq!(connects.all(), vec![server.addr; 3]);
    // The literal metadata address never went through the resolver.
    assert_eq!(
        resolver.queries(),
        ["a.test", "internal.test", "a.test", "a.test"]
    );
}

#[tokio::test]
async fn echoed_secrets_are_redacted_from_what_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(|r| {
        let auth = r.header("authorization").unwrap_or_default();
        if r.path == "/fail" {
            response(401, format!("bad token {auth}"))
        } else {
            response(
                200,
                format!("you sent {auth}; q={}", r.query.clone().unwrap_or_default()),
            )
        }
    })
    .await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let exec = exec.with_credentials(store(&dir, "a.test:\n  token: TOKEN/SECRET+1\n"));
    let m = get_manifest(
        &format!("http://a.test:{}/ok", server.port()),
        r#","auth":"bearer","auth_url":"https://a.test/k""#,
    );
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert_eq!(out.content, "you sent Bearer [redacted]; q=q=x");
    let m = get_manifest(
        &format!("http://a.test:{}/ok", server.port()),
        r#","auth":"api_key","auth_in":"query","auth_name":"k","auth_url":"https://a.test/k""#,
    );
    let out = exec
        .execute(&m, Trust::Local, &args(json!({"q": "x"})))
        .await;
    assert_eq!(out.content, "you sent ; q=q=x&k=[redacted]");
    let m = get_manifest(
        &format!("http://a.test:{}/fail", server.port()),
        r#","auth":"bearer","auth_url":"https://a.test/k""#,
    );
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert_eq!(
        out.content,
        "Error: HTTP 401 Unauthorized from a.test: bad token Bearer [redacted]"
    );
}

#[tokio::test]
async fn see_other_after_post_continues_as_get_without_body() {
    let server = serve(|r| match r.path.as_str() {
        "/submit" => redirect(303, "/result?id=7"),
        _ => response(200, format!("{} {} {}", r.method, r.target, r.body.len())),
    })
    .await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = post_manifest(
        &format!("http://a.test:{}/submit", server.port()),
        "application/json",
        "",
    );
    let out = exec.execute(&m, Trust::Local, &args(json!({"a": 1}))).await;
    assert_eq!(out.content, "GET /result?id=7 0");
    let reqs = server.requests();
    assert_eq!(reqs[0].method, "POST");
    assert!(reqs[1].header("content-type").is_none());
}

#[tokio::test]
async fn redirect_loop_stops_at_the_limit() {
    let server = serve(|r| redirect(302, &format!("{}x", r.path))).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = get_manifest(&format!("http://a.test:{}/loop", server.port()), "");
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert!(!out.ok);
    assert_eq!(out.content, "Error: too many redirects (the limit is 3)");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn ssrf_refusals_happen_before_any_connection() {
    let targets: &[(&str, &str)] = &[
        ("private.test", "10.0.0.5"),
        ("meta.test", "169.254.169.254"),
        ("cgnat.test", "100.64.1.1"),
        ("mapped.test", "::ffff:192.168.1.1"),
        ("loop.test", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        ("zero.test", "0.0.0.0"),
        ("v6loop.test", "::1"),
        ("ula.test", "fd00::5"),
        ("linklocal6.test", "fe80::1"),
        ("nat64.test", "64:ff9b::a00:5"),
        ("doc.test", "192.0.2.1"),
        ("multicast.test", "224.0.0.251"),
        ("broadcast.test", "255.255.255.255"),
    ];
    let mut entries: Vec<(&str, &[&str])> = targets
        .iter()
        .map(|(h, ip)| (*h, std::slice::from_ref(ip)))
        .collect();
    // One public and one private answer: refused as a whole.
    entries.push(("mixed.test", &["93.184.215.14", "10.1.2.3"]));
    let resolver = StubResolver::new(&entries);
    let (exec, connects) = executor(policy(), resolver.clone());
    let hosts: Vec<&str> = entries.iter().map(|(h, _)| *h).collect();
    for host in &hosts {
        // (A LAN manifest may reach mixed.test's public and private answers;
        // the public one is never tried, not even against the guard.)
        let trusts: &[Trust] = if *host == "mixed.test" {
            &[Trust::Internet]
        } else {
            &[Trust::Internet, Trust::Lan]
        };
        for &trust in trusts {
            let m = get_manifest(&format!("http://{host}:8080/x"), "");
            let out = exec.execute(&m, trust, &args(json!({}))).await;
            let lan_ok = matches!(
                *host,
                "private.test" | "mapped.test" | "ula.test" | "nat64.test"
            );
            if trust == Trust::Lan && lan_ok {
                // Allowed by policy; the test guard then stops the connect.
                assert!(
                    out.content.contains("could not connect"),
                    "{host}: {}",
                    out.content
                );
            } else {
                assert!(!out.ok);
                assert!(
                    out.content.contains("refused to connect"),
                    "{host} {trust}: {}",
                    out.content
                );
            }
        }
    }
    // Only the LAN-permitted private addresses reached the guard.
    let attempted: Vec<String> = connects.all().iter().map(|a| a.ip().to_string()).collect();
    assert_eq!(
        attempted,
        [
            "10.0.0.5",
            "::ffff:192.168.1.1",
            "fd00::5",
            "64:ff9b::a00:5"
        ]
    );

    // IP literals never reach the resolver and are checked the same way.
    let before = resolver.queries().len();
    for url in [
        "http://127.0.0.1:9/x",
        "http://[::1]:9/x",
        "http://2130706433:9/x",
        "http://0x7f.1:9/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:10.0.0.1]/x",
        "http://[fe80::1]/x",
        "http://0.0.0.0:9/x",
    ] {
        let m = get_manifest(url, "");
        let out = exec.execute(&m, Trust::Internet, &args(json!({}))).await;
        assert!(
            out.content.contains("refused to connect"),
            "{url}: {}",
            out.content
        );
    }
    assert_eq!(resolver.queries().len(), before);
    assert_eq!(connects.all().len(), 4);
}

#[tokio::test]
async fn local_trust_reaches_loopback_services() {
    let server = serve(|_| response(200, "local ok")).await;
    let (exec, _) = executor(
        policy(),
        StubResolver::new(&[("localhost", &["127.0.0.1"])]),
    );
    let m = get_manifest(&format!("http://localhost:{}/api", server.port()), "");
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert_eq!(out.content, "local ok");
    let out = exec.execute(&m, Trust::Lan, &args(json!({}))).await;
    assert!(out.content.contains("loopback"), "{}", out.content);
}

#[tokio::test]
async fn silent_server_times_out() {
    let (addr, accepted) = serve_silent().await;
    let p = ExecPolicy {
        http_timeout: Duration::from_secs(1),
        ..policy()
    };
    let (exec, _) = executor(p, StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = get_manifest(&format!("http://a.test:{}/x", addr.port()), "");
    let started = Instant::now();
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert!(!out.ok);
    assert_eq!(
        out.content,
        "Error: HTTP request to a.test timed out after 1s"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(*accepted.lock().unwrap(), 1);
}

#[tokio::test]
async fn fifty_megabyte_response_is_capped_quickly() {
    let total = 50 * 1024 * 1024;
    let (addr, written) = serve_flood(total).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = get_manifest(&format!("http://a.test:{}/big", addr.port()), "");
    let started = Instant::now();
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    let elapsed = started.elapsed();
    assert!(out.ok, "{}", &out.content[..200.min(out.content.len())]);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // 16,000 characters for the model, and a note about what was cut.
    assert!(out.content.starts_with(&"a".repeat(16_000)));
    assert!(
        out.content.contains("[truncated: "),
        "{}",
        &out.content[16_000..]
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = *written.lock().unwrap();
    assert!(sent < total, "the server could write all {sent} bytes");
}

#[tokio::test]
async fn response_cap_note_and_result_truncation() {
    let server = serve(|_| response(200, "x".repeat(3000))).await;
    let p = ExecPolicy {
        max_response_bytes: 2048,
        max_result_chars: 5000,
        ..policy()
    };
    let (exec, _) = executor(p, StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = get_manifest(&format!("http://a.test:{}/x", server.port()), "");
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert!(out.ok);
    assert_eq!(
        out.content,
        format!("{}\n[response truncated at 2048 bytes]", "x".repeat(2048))
    );
    let p = ExecPolicy {
        max_result_chars: 100,
        ..policy()
    };
    let (exec, _) = executor(p, StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert_eq!(
        out.content,
        format!("{}\n[truncated: 2900 more characters]", "x".repeat(100))
    );
}

#[tokio::test]
async fn server_error_reports_status_and_body_excerpt() {
    let server = serve(|_| response(500, format!("database exploded {}", "!".repeat(2000)))).await;
    let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
    let m = get_manifest(&format!("http://a.test:{}/x", server.port()), "");
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert!(!out.ok);
    assert!(
        out.content.starts_with(
            "Error: HTTP 500 Internal Server Error from a.test: database exploded !!!"
        ),
        "{}",
        out.content
    );
    assert!(out.content.len() < 700);
    let server = serve(|_| response(404, "")).await;
    let m = get_manifest(&format!("http://a.test:{}/x", server.port()), "");
    let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
    assert_eq!(out.content, "Error: HTTP 404 Not Found from a.test");
}

#[tokio::test]
async fn unresolvable_host_is_an_error() {
    let (exec, connects) = executor(policy(), StubResolver::new(&[]));
    let m = get_manifest("http://nowhere.test/x", "");
    let out = exec.execute(&m, Trust::Internet, &args(json!({}))).await;
    assert!(
        out.content
            .starts_with("Error: could not resolve nowhere.test"),
        "{}",
        out.content
    );
    assert!(connects.all().is_empty());
}

mod tls {
    use super::*;

    /// A test CA and a certificate for a.test.
    fn pki() -> (String, Arc<rustls::ServerConfig>) {
        let pki = Pki::new(&["a.test"]);
        (pki.ca_pem, pki.server)
    }

    #[tokio::test]
    async fn https_verifies_the_original_host_name() {
        let (ca_pem, config) = pki();
        let server = serve_tls(|_| response(200, "secure hello"), config).await;
        let resolver = StubResolver::new(&[("a.test", &["127.0.0.1"]), ("b.test", &["127.0.0.1"])]);
        let (exec, connects) = executor(policy(), resolver);
        let exec = exec.with_extra_roots_pem(ca_pem.as_bytes()).unwrap();
        let m = get_manifest(&format!("https://a.test:{}/x", server.port()), "");
        let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
        assert!(out.ok, "{out:?}");
        assert_eq!(out.content, "secure hello");
        // Same address, other name: the certificate does not match.
        let m = get_manifest(&format!("https://b.test:{}/x", server.port()), "");
        let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
        assert!(!out.ok);
        assert!(
            out.content.starts_with("Error: TLS with b.test failed"),
            "{}",
            out.content
        );
        assert_eq!(connects.all().len(), 2);
        assert_eq!(server.requests().len(), 1);
    }

    #[tokio::test]
    async fn https_rejects_an_unknown_ca() {
        let (_, config) = pki();
        let server = serve_tls(|_| response(200, "x"), config).await;
        let (exec, _) = executor(policy(), StubResolver::new(&[("a.test", &["127.0.0.1"])]));
        let m = get_manifest(&format!("https://a.test:{}/x", server.port()), "");
        let out = exec.execute(&m, Trust::Local, &args(json!({}))).await;
        assert!(
            out.content.contains("TLS with a.test failed"),
            "{}",
            out.content
        );
    }
}
