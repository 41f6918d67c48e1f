//! End-to-end tests of the `oapd` binary: real process, real model, real
//! index file, real HTTP over loopback sockets.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::send_raw;

#[test]
fn serves_discovery_from_the_bundled_manifests() {
    let daemon = support::daemon().start();

    let health = daemon.get("/health");
    assert_eq!(health.status, 200);
    let health = health.json();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["model"]["loaded"], true);
    assert_eq!(health["index"]["manifests"], 13);
    assert_eq!(health["retrieval"], "hybrid");

    let response = daemon.post_json(
        "/v1/discover",
        r#"{"task": "count the words in this paragraph", "top_k": 3}"#,
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json();
    assert_eq!(body["task"], "count the words in this paragraph");
    assert_eq!(body["match"]["id"], "local/wc");
    assert_eq!(body["match"]["name"], "wc");
    let candidates = body["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 3);
    for candidate in candidates {
        for field in [
            "id",
            "domain",
            "name",
            "description",
            "invoke",
            "score",
            "trust",
        ] {
            assert!(
                !candidate[field].is_null(),
                "candidate lacks {field}: {candidate}"
            );
        }
    }
    assert_eq!(candidates[0]["invoke"]["method"], "stdio");
    assert!(body["meta"]["total_ms"].as_f64().unwrap() > 0.0);

    assert!(
        body["meta"].get("asks").is_none(),
        "one ask: {}",
        body["meta"]
    );

    // top_k defaults to discovery.default_top_k (5).
    let body = daemon
        .post_json("/v1/discover", r#"{"task": "search a log for errors"}"#)
        .json();
    assert_eq!(body["candidates"].as_array().unwrap().len(), 5);

    // Two asks: both are reported, and each ask's tool is listed.
    let body = daemon
        .post_json(
            "/v1/discover",
            r#"{"task": "What is today's date? Also, how many words are in this sentence", "top_k": 3}"#,
        )
        .json();
    assert_eq!(
        body["meta"]["asks"],
        serde_json::json!([
            "What is today's date?",
            "how many words are in this sentence"
        ])
    );
    let names: Vec<&str> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"date") && names.contains(&"wc"),
        "{names:?}"
    );
}

#[test]
fn manifests_are_listed_and_fetched_by_id() {
    let daemon = support::daemon().start();
    let list = daemon.get("/v1/manifests").json();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 13);
    assert!(ids.contains(&"local/grep"));

    for path in ["/v1/manifests/local/grep", "/v1/manifests/local%2Fgrep"] {
        let response = daemon.get(path);
        assert_eq!(response.status, 200, "{path}");
        let record = response.json();
        assert_eq!(record["id"], "local/grep");
        assert_eq!(record["trust"], "local");
        assert_eq!(record["origin"]["location"], "bundled:grep.json");
        assert_eq!(record["manifest"]["invoke"]["url"], "grep");
    }

    let missing = daemon.get("/v1/manifests/local/nope");
    assert_eq!(missing.status, 404);
    assert!(missing.error().contains("local/nope"));
}

#[test]
fn bad_requests_get_clear_json_errors_and_the_daemon_keeps_serving() {
    let daemon = support::daemon()
        .env("OAP_SERVER_MAX_BODY_BYTES", "65536")
        .start();
    let before = daemon.get("/v1/manifests").body;

    let cases: &[(&str, u16, &str)] = &[
        (
            r#"{"task": "count words""#,
            400,
            "not a valid discover request",
        ),
        ("not json at all", 400, "not a valid discover request"),
        ("", 400, "not a valid discover request"),
        (r#"{"top_k": 3}"#, 400, "missing field `task`"),
        (
            r#"{"task": 42}"#,
            400,
            "task: expected a string, got a number",
        ),
        (r#"{"task": "   "}"#, 400, "task: must not be empty"),
        (
            r#"{"task": "count", "top_k": 0}"#,
            400,
            "top_k: expected an integer from 1 to 20",
        ),
        (r#"{"task": "count", "top_k": 21}"#, 400, "top_k"),
        (r#"{"task": "count", "top_k": "3"}"#, 400, "top_k"),
        (r#"{"task": "count", "top_k": 2.5}"#, 400, "top_k"),
        (r#"[1, 2, 3]"#, 400, "not a valid discover request"),
    ];
    for (body, status, needle) in cases {
        let response = daemon.post_json("/v1/discover", body);
        assert_eq!(response.status, *status, "body {body:?}");
        let error = response.error();
        assert!(
            error.contains(needle),
            "body {body:?}: error {error:?} lacks {needle:?}"
        );
    }

    // A task of 10 kB or more is refused; just under is fine.
    let long_task = "count the words ".repeat(700);
    assert!(long_task.len() >= 10_000);
    let body = serde_json::json!({ "task": long_task }).to_string();
    let response = daemon.post_json("/v1/discover", &body);
    assert_eq!(response.status, 400);
    assert!(response.error().contains("too long"));
    let ok_task = "count the words ".repeat(600);
    let body = serde_json::json!({ "task": ok_task }).to_string();
    assert_eq!(daemon.post_json("/v1/discover", &body).status, 200);

    // Bodies over server.max_body_bytes: refused by the declared length...
    let huge = vec![b'a'; 100_000];
    let response = daemon.request("POST", "/v1/discover", &[], &huge);
    assert_eq!(response.status, 413);
    assert!(response.error().contains("65536"));
    // ...and while streaming a chunked body that has no declared length.
    let mut raw = format!(
        "POST /v1/discover HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
        daemon.addr
    )
    .into_bytes();
    for _ in 0..20 {
        raw.extend_from_slice(format!("{:x}\r\n", 8192).as_bytes());
        raw.extend_from_slice(&[b' '; 8192]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let response = send_raw(daemon.addr, &raw).expect("chunked request");
    assert_eq!(response.status, 413);

    // Wrong methods and unknown paths.
    let response = daemon.get("/v1/discover");
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("POST"));
    assert_eq!(
        daemon.request("DELETE", "/v1/manifests", &[], b"").status,
        405
    );
    // A path oapd does not serve is Ollama's: with no Ollama listening,
    // the client is told so.
    let response = daemon.get("/v2/anything");
    assert_eq!(response.status, 502);
    assert!(
        response.error().contains("cannot reach Ollama"),
        "{}",
        response.error()
    );

    // Garbage that is not HTTP at all.
    let _ = send_raw(daemon.addr, b"\x00\x01\x02 hello\r\n\r\n");

    // Nothing was lost, and the daemon still answers.
    assert_eq!(daemon.get("/v1/manifests").body, before);
    let body = daemon
        .post_json("/v1/discover", r#"{"task": "count the words"}"#)
        .json();
    assert_eq!(body["match"]["id"], "local/wc");
}

#[test]
fn a_bearer_token_guards_every_endpoint() {
    let token = "s3cret-token-for-tests-0123456789";
    let daemon = support::daemon()
        .env("OAP_SERVER_AUTH_TOKEN", token)
        .start_with_auth(token);
    for (headers, status) in [
        (vec![], 401),
        (vec![("Authorization", "Bearer wrong")], 401),
        (vec![("Authorization", "Basic czNjcmV0")], 401),
        (
            vec![("Authorization", format!("Bearer {token}x").leak() as &str)],
            401,
        ),
        (
            vec![("Authorization", format!("Bearer {token}").leak() as &str)],
            200,
        ),
    ] {
        let response = daemon.request("GET", "/v1/manifests", &headers, b"");
        assert_eq!(response.status, status, "{headers:?}");
        if status == 401 {
            assert_eq!(response.header("www-authenticate"), Some("Bearer"));
            assert!(response.error().contains("bearer token"));
        }
    }
    let auth = [("Authorization", format!("Bearer {token}").leak() as &str)];
    let response = daemon.request("POST", "/v1/discover", &auth, br#"{"task": "count words"}"#);
    assert_eq!(response.status, 200);
    assert_eq!(daemon.get("/health").status, 401);
}

#[test]
fn without_the_model_the_daemon_serves_lexical_results_and_says_so() {
    let daemon = support::daemon().without_model().start();
    let health = daemon.get("/health").json();
    assert_eq!(health["status"], "degraded");
    assert!(
        health["reason"]
            .as_str()
            .is_some_and(|r| r.contains("embedding model is not loaded")),
        "{health}"
    );
    assert_eq!(health["model"]["loaded"], false);
    assert!(health["model"]["error"]
        .as_str()
        .unwrap()
        .contains("no-model-here"));
    assert!(health["retrieval"]
        .as_str()
        .unwrap()
        .contains("lexical only"));
    let body = daemon
        .post_json(
            "/v1/discover",
            r#"{"task": "count lines, words and characters"}"#,
        )
        .json();
    assert_eq!(body["meta"]["mode"], "lexical");
    assert_eq!(body["candidates"][0]["id"], "local/wc");
    assert!(daemon.log_text().contains("EMBEDDING MODEL NOT LOADED"));
}

#[test]
fn operator_manifests_override_bundled_ones_and_bad_files_are_skipped() {
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("grep.json"),
        br#"{"oap":"1.0","name":"grep","description":"Operator's grep: searches the house log book.","invoke":{"method":"stdio","url":"/usr/local/bin/housegrep"}}"#,
    )
    .unwrap();
    std::fs::copy(
        support::reference_manifest("earthquake"),
        manifests.path().join("earthquake.json"),
    )
    .unwrap();
    std::fs::write(manifests.path().join("bad.json"), b"{ this is not json").unwrap();
    let daemon = support::daemon()
        .yaml(&format!("manifests:\n  dirs: [{:?}]\n", manifests.path()))
        .start();
    let health = daemon.get("/health").json();
    assert_eq!(health["index"]["manifests"], 14);
    assert_eq!(health["load_problems"], 1);
    assert_eq!(health["collisions"], 1);
    let grep = daemon.get("/v1/manifests/local/grep").json();
    assert_eq!(
        grep["manifest"]["invoke"]["url"],
        "/usr/local/bin/housegrep"
    );
    let body = daemon
        .post_json(
            "/v1/discover",
            r#"{"task": "any earthquakes near Tokyo this week?"}"#,
        )
        .json();
    assert_eq!(body["match"]["id"], "local/usgs-earthquake");
    let log = daemon.log_text();
    assert!(
        log.contains("bad.json"),
        "the skipped file is named in the log"
    );
}

#[test]
fn environment_overrides_the_config_file() {
    let port = support::free_port();
    let daemon = support::daemon()
        .env("OAP_SERVER_LISTEN", &format!("127.0.0.1:{port}"))
        .env("OAP_DISCOVERY_DEFAULT_TOP_K", "2")
        .start_on(port);
    let body = daemon
        .post_json("/v1/discover", r#"{"task": "sort lines of text"}"#)
        .json();
    assert_eq!(body["candidates"].as_array().unwrap().len(), 2);
}

#[test]
fn a_bad_config_stops_start_up_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "tool_bridge:\n  max_round: 3\n").unwrap();
    let output = support::oapd()
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tool_bridge.max_round"), "{stderr}");

    let output = support::oapd()
        .env("OAP_TOOL_BRIDGE_MAX_ROUNDS", "three")
        .arg("config")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("OAP_TOOL_BRIDGE_MAX_ROUNDS"), "{stderr}");
}

#[test]
fn a_restart_reuses_the_index_file() {
    let daemon = support::daemon().start();
    let first = daemon.get("/v1/manifests").body;
    let mut daemon = daemon;
    let status = daemon.terminate();
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
    assert!(daemon.log_text().contains("SIGTERM received"));
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);

    let daemon = support::daemon().in_dir(dir).start();
    assert_eq!(daemon.get("/v1/manifests").body, first);
    assert!(
        daemon.log_text().contains("reused_index=true"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn slow_clients_do_not_hold_the_server() {
    let daemon = support::daemon().start();
    // A client that sends half a header and stalls (slowloris).
    let mut slow = TcpStream::connect(daemon.addr).unwrap();
    slow.write_all(b"POST /v1/discover HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Others are served meanwhile.
    let body = daemon
        .post_json("/v1/discover", r#"{"task": "count words"}"#)
        .json();
    assert_eq!(body["match"]["id"], "local/wc");
    // The stalled connection is closed after header_read_timeout (2 s).
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "slow client was not cut off"
    );
}

#[test]
fn concurrent_requests_are_all_answered() {
    let daemon = support::daemon().start();
    let addr = daemon.addr;
    let tasks = [
        "count the words",
        "search for lines with errors",
        "what is 2+2",
        "what day is it",
    ];
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let task = tasks[i % tasks.len()];
            std::thread::spawn(move || {
                let body = serde_json::json!({ "task": task }).to_string();
                let raw = format!(
                    "POST /v1/discover HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                send_raw(addr, raw.as_bytes()).expect("response").status
            })
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().unwrap(), 200);
    }
}

#[test]
fn manifest_lint_reports_located_errors_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        br#"{"oap":"1.0","name":"x","description":"d","invoke":{"method":"PUT","url":"https://example.com"}}"#,
    )
    .unwrap();
    let good = support::reference_manifest("grep");
    let output = lint(&[&good, &bad]);
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!(
            "{}: error: invoke.method: expected GET, POST or stdio, got \"PUT\"",
            bad.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("grep.json: ok"), "{stdout}");

    let output = lint(&[&good]);
    assert!(output.status.success());
}

/// `oapd manifest lint PATHS...`.
fn lint(paths: &[&std::path::Path]) -> std::process::Output {
    support::oapd()
        .args(["manifest", "lint"])
        .args(paths)
        .output()
        .unwrap()
}

/// A local manifest whose fields are `(key, JSON value)` over a clean base.
fn manifest_json(name: &str, url: &str, extra: &[(&str, serde_json::Value)]) -> String {
    let mut doc = serde_json::json!({
        "oap": "1.0",
        "name": name,
        "description": "Fetches the weather forecast for a city.",
        "input": {"format": "text/plain", "description": "A city name."},
        "output": {"format": "application/json", "description": "The forecast."},
        "invoke": {"method": "GET", "url": url}
    });
    for (key, value) in extra {
        doc[*key] = value.clone();
    }
    doc.to_string()
}

const FORGED_RECORD: &str = "2026-01-01T00:00:00.000000Z  INFO oapd: forged";

#[test]
fn manifest_lint_refuses_control_characters_and_passwords_in_urls() {
    let dir = tempfile::tempdir().unwrap();
    // The file name is printed too: it cannot break the one-line format either.
    let control = dir.path().join("control\r\nforged\u{1b}[31m.json");
    let name = format!("evil\u{1b}[31m\r\n{FORGED_RECORD}");
    std::fs::write(
        &control,
        manifest_json(&name, "https://api.example.com/w", &[]),
    )
    .unwrap();
    let userinfo = dir.path().join("userinfo.json");
    std::fs::write(
        &userinfo,
        manifest_json(
            "leaky",
            "https://api.example.com/w",
            &[("docs", "http://admin:s3cr3tpw@docs.example.com/".into())],
        ),
    )
    .unwrap();
    let output = lint(&[&control, &userinfo]);
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!(
            "{}/control\\r\\nforged\\u{{1b}}[31m.json: error: name: contains a control \
             character (\\u001b) at byte 4\n",
            dir.path().display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{}: error: docs: must not contain a user name or password",
            userinfo.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cr3tpw"), "{stdout}");
    assert!(!stdout.contains(['\u{1b}', '\r']), "{stdout:?}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
}

#[test]
fn bad_manifests_in_a_directory_are_skipped_without_forging_logs_or_showing_passwords() {
    let manifests = tempfile::tempdir().unwrap();
    let write =
        |file: &str, json: String| std::fs::write(manifests.path().join(file), json).unwrap();
    write(
        "good.json",
        manifest_json("weather-here", "https://api.example.com/weather", &[]),
    );
    // The file name reaches the log as the record's location, the name as
    // the reason the manifest was skipped.
    write(
        &format!("bad\r\n{FORGED_RECORD} file\u{1b}[31m.json"),
        manifest_json(
            &format!("evil\u{1b}[31m\r\n{FORGED_RECORD} name"),
            "https://api.example.com/evil",
            &[],
        ),
    );
    write(
        "leaky.json",
        manifest_json(
            "leaky",
            "https://api:s3cr3tpw@api.example.com/leak",
            &[("health", "https://api:s3cr3tpw@api.example.com/up".into())],
        ),
    );
    let daemon = support::daemon()
        .yaml(&format!("manifests:\n  dirs: [{:?}]\n", manifests.path()))
        .start();

    // The others are served; the refused ones are nowhere.
    let list = daemon.get("/v1/manifests");
    assert_eq!(list.status, 200);
    let ids: Vec<String> = list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 14, "{ids:?}");
    assert!(ids.contains(&"local/weather-here".to_string()), "{ids:?}");
    assert!(!ids
        .iter()
        .any(|id| id.contains("leaky") || id.contains("evil")));
    assert_eq!(daemon.get("/v1/manifests/local/leaky").status, 404);
    let tools = daemon.post_json(
        "/v1/tools",
        r#"{"task": "what is the weather forecast", "top_k": 20}"#,
    );
    assert_eq!(tools.status, 200);
    assert!(!String::from_utf8_lossy(&tools.body).contains("s3cr3tpw"));
    assert!(!String::from_utf8_lossy(&list.body).contains("s3cr3tpw"));

    let log = daemon.log_text();
    assert!(!log.contains("s3cr3tpw"), "{log}");
    assert!(!log.contains(['\r', '\u{1b}']), "{log:?}");
    assert!(
        !log.lines().any(|line| line.starts_with("2026-01-01")),
        "a record was forged:\n{log}"
    );
    let skipped: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("manifest skipped"))
        .collect();
    assert_eq!(skipped.len(), 2, "{log}");
    let leaky = skipped
        .iter()
        .find(|line| line.contains("leaky.json"))
        .expect("leaky.json skipped");
    assert!(
        leaky.contains("invoke.url: must not contain a user name or password")
            && leaky.contains("health: must not contain a user name or password"),
        "{leaky}"
    );
    let bad = skipped
        .iter()
        .find(|line| !line.contains("leaky.json"))
        .unwrap();
    assert!(
        bad.contains(&format!(r"bad\r\n{FORGED_RECORD} file\u{{1b}}[31m.json")),
        "{bad}"
    );
    assert!(
        bad.contains(r"\n  name: contains a control character (\u001b) at byte 4"),
        "{bad}"
    );
}

#[test]
fn a_fifo_as_config_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    for spelling in ["--config", "OAPD_CONFIG"] {
        let mut command = support::oapd();
        if spelling == "--config" {
            command.arg("--config").arg(&fifo);
        } else {
            command.env("OAPD_CONFIG", &fifo);
        }
        let output = output_within(command.arg("config"), "`oapd config`");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{spelling}");
        assert!(
            stderr.contains(&format!(
                "{}: the config file is a FIFO (named pipe), not a regular file",
                fifo.display()
            )),
            "{spelling}: {stderr}"
        );
    }

    // The same for a manifest given to lint.
    let output = output_within(
        support::oapd().args(["manifest", "lint"]).arg(&fifo),
        "`oapd manifest lint`",
    );
    assert!(!output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "{}: error: cannot read: it is a FIFO (named pipe), not a regular file\n",
            fifo.display()
        )
    );
}

/// Runs `command` to completion, failing (and killing it) if it takes more
/// than 20 s: what it runs must not block.
fn output_within(command: &mut std::process::Command, what: &str) -> std::process::Output {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("{what} blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn discover_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let output = support::oapd()
        .env("OAP_INDEX_DATA_DIR", dir.path())
        .env("OAP_EMBEDDING_MODEL_DIR", support::require_model())
        .args([
            "discover",
            "--json",
            "--top-k",
            "2",
            "how many lines are in this text",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(body["match"]["id"], "local/wc");
    assert_eq!(body["candidates"].as_array().unwrap().len(), 2);

    let output = support::oapd()
        .env("OAP_INDEX_DATA_DIR", dir.path())
        .env("OAP_EMBEDDING_MODEL_DIR", support::require_model())
        .args(["discover", "how many lines are in this text"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("match: wc (local/wc)"), "{stdout}");
}

#[test]
fn cors_allows_only_configured_origins_and_preflights_need_no_token() {
    let token = "cors-test-token-0123456789abcdef";
    let daemon = support::daemon()
        .env("OAP_SERVER_CORS_ORIGINS", "http://webui.local:3000")
        .env("OAP_SERVER_AUTH_TOKEN", token)
        .start_with_auth(token);
    let preflight = daemon.request(
        "OPTIONS",
        "/api/chat",
        &[
            ("Origin", "http://webui.local:3000"),
            ("Access-Control-Request-Method", "POST"),
        ],
        b"",
    );
    assert_eq!(preflight.status, 204);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("http://webui.local:3000")
    );
    assert!(preflight
        .header("access-control-allow-headers")
        .unwrap()
        .contains("Authorization"));
    let bearer = format!("Bearer {token}");
    let allowed = daemon.request(
        "GET",
        "/v1/manifests",
        &[
            ("Origin", "http://webui.local:3000"),
            ("Authorization", &bearer),
        ],
        b"",
    );
    assert_eq!(allowed.status, 200);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://webui.local:3000")
    );
    let other = daemon.request(
        "GET",
        "/v1/manifests",
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", &bearer),
        ],
        b"",
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
}

#[test]
fn the_old_config_variable_is_read_with_a_deprecation_warning() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.yaml");
    let new = dir.path().join("new.yaml");
    std::fs::write(&old, "server:\n  listen: [\"127.0.0.1:18991\"]\n").unwrap();
    std::fs::write(&new, "server:\n  listen: [\"127.0.0.1:18992\"]\n").unwrap();

    // Only the old name: its file is read, and the operator is told to rename it.
    let mut command = support::oapd();
    command.env("OAP_CONFIG", &old).arg("config");
    let output = output_within(&mut command, "`oapd config`");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("127.0.0.1:18991"), "{stdout}");
    assert!(
        stderr.contains("OAP_CONFIG is deprecated: read it as OAPD_CONFIG"),
        "{stderr}"
    );

    // Both names, different files: the current name wins, the old one is named as ignored.
    let mut command = support::oapd();
    command
        .env("OAP_CONFIG", &old)
        .env("OAPD_CONFIG", &new)
        .arg("config");
    let output = output_within(&mut command, "`oapd config`");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("127.0.0.1:18992"), "{stdout}");
    assert!(!stdout.contains("127.0.0.1:18991"), "{stdout}");
    assert!(
        stderr.contains("OAP_CONFIG ignored: OAPD_CONFIG is set and names another file"),
        "{stderr}"
    );
}

#[test]
fn tool_tuning_is_on_by_default_and_shows_in_the_model_id_and_threshold() {
    let task = r#"{"task": "merge these two lists side by side line by line", "top_k": 3}"#;
    let tuned = support::daemon().start();
    let health = tuned.get("/health").json();
    let tuned_id = health["model"]["id"].as_str().unwrap().to_string();
    assert!(tuned_id.contains("+tools."), "on by default: {tuned_id}");
    let found = tuned.post_json("/v1/discover", task).json();
    drop(tuned);

    let plain = support::daemon()
        .env("OAP_EMBEDDING_TOOL_TUNING", "false")
        .start();
    let health = plain.get("/health").json();
    let plain_id = health["model"]["id"].as_str().unwrap();
    assert!(!plain_id.contains("+tools"), "{plain_id}");
    // The same files: the digest after the `@` is the same.
    assert_eq!(
        tuned_id.rsplit('@').next(),
        plain_id.rsplit('@').next(),
        "{tuned_id} vs {plain_id}"
    );
    let plain_found = plain.post_json("/v1/discover", task).json();
    assert_eq!(found["match"]["name"], "paste", "{found}");
    assert_eq!(plain_found["match"]["name"], "paste", "{plain_found}");
    // Each model's own calibrated threshold is in effect (since request
    // rows the two calibrations share the hybrid threshold, and differ in
    // how much words weigh in the rank).
    let (tuned_threshold, plain_threshold) = (
        found["meta"]["threshold"].as_f64().unwrap(),
        plain_found["meta"]["threshold"].as_f64().unwrap(),
    );
    let calibrated = |scoring: oap_discovery::Scoring| f64::from(scoring.min_score_hybrid);
    assert!(
        (tuned_threshold - calibrated(oap_discovery::Scoring::tool_tuned())).abs() < 1e-6,
        "tuned threshold {tuned_threshold}"
    );
    assert!(
        (plain_threshold - calibrated(oap_discovery::Scoring::default())).abs() < 1e-6,
        "plain threshold {plain_threshold}"
    );
    assert_ne!(
        found["candidates"][0]["score"], plain_found["candidates"][0]["score"],
        "the tuned encoder scores differently"
    );
}

/// The tuning asked for on weights it was not trained from is not merged,
/// and the thresholds follow the weights that loaded: the plain model's,
/// not the tuned encoder's higher ones.
#[test]
fn tool_tuning_on_other_weights_keeps_the_plain_thresholds() {
    let task = r#"{"task": "merge these two lists side by side line by line", "top_k": 3}"#;
    let model = support::require_model().canonicalize().unwrap();
    let other = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::os::unix::fs::symlink(model.join(file), other.path().join(file)).unwrap();
    }
    // One bit of the last weight flipped: same shapes, other content.
    let mut weights = std::fs::read(model.join("model.safetensors")).unwrap();
    let last = weights.len() - 7;
    weights[last] ^= 0x01;
    std::fs::write(other.path().join("model.safetensors"), weights).unwrap();

    let plain = support::daemon()
        .env("OAP_EMBEDDING_TOOL_TUNING", "false")
        .start();
    let plain_found = plain.post_json("/v1/discover", task).json();
    drop(plain);
    // On by default: asked for without saying so.
    let asked = support::daemon().model_dir(other.path()).start();
    let health = asked.get("/health").json();
    let id = health["model"]["id"].as_str().unwrap();
    assert!(!id.contains("+tools"), "not merged: {id}");
    let found = asked.post_json("/v1/discover", task).json();
    assert_eq!(
        found["meta"]["threshold"], plain_found["meta"]["threshold"],
        "{found}"
    );
}
