//! The crawler in the real binary: `oapd crawl --once`, registration,
//! `/v1/crawl/status`, the directory watch, and kill -9 during a crawl.
//! The HTTPS server (test CA) runs in this process on loopback; the daemon
//! reaches it through `crawler.hosts` (static name → 127.0.0.1) with
//! `crawler.allow_private: [127.0.0.0/8]`. No traffic leaves loopback.

use crate::support;
use oap_testkit::manifest_web as web;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::oapd;

struct Web {
    _runtime: tokio::runtime::Runtime,
    server: web::Server,
    ca_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn web() -> Web {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = web::pki();
    let server = runtime.block_on(web::serve(pki.server.clone()));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    Web {
        _runtime: runtime,
        server,
        ca_file,
        _dir: dir,
    }
}

/// The `crawler:` YAML reaching the test server.
fn crawler_yaml(web: &Web, enabled: bool, seeds: &[&str]) -> String {
    let hosts: Vec<String> = web::HOSTS
        .iter()
        .map(|h| format!("\"{h}=127.0.0.1\""))
        .collect();
    let seeds: Vec<String> = seeds
        .iter()
        .map(|s| format!("\"{}\"", web.server.domain(s)))
        .collect();
    format!(
        "crawler:\n  enabled: {enabled}\n  seeds: [{}]\n  ca_file: {:?}\n  allow_private: [\"127.0.0.0/8\"]\n  hosts: [{}]\n  fetch_timeout: 3\n  watch_interval: 1\n",
        seeds.join(", "),
        web.ca_file,
        hosts.join(", ")
    )
}

const TOKEN: &str = "crawl-test-token-0123456789";

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon crawling the test server, with an operator token (needed to
/// register domains).
fn operator_daemon(web: &Web) -> support::Daemon {
    support::daemon()
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .yaml(&crawler_yaml(web, true, &[]))
        .start_with_auth(TOKEN)
}

fn operator_headers(auth: &str) -> [(&'static str, &str); 2] {
    [
        ("Authorization", auth),
        ("Content-Type", "application/json"),
    ]
}

#[test]
fn register_fetches_indexes_and_reports_status() {
    let web = web();
    let daemon = operator_daemon(&web);
    let auth = format!("Bearer {TOKEN}");
    let headers = operator_headers(&auth);
    let register =
        |body: &str| daemon.request("POST", "/v1/manifests/register", &headers, body.as_bytes());

    // Without the token: refused before anything is fetched.
    let response = daemon.post_json("/v1/manifests/register", r#"{"domain":"good.test"}"#);
    assert_eq!(response.status, 401);

    // Bad input, each with a reason.
    let response = register("{not json");
    assert_eq!(response.status, 400);
    assert!(response.error().contains("not a valid registration"));
    let response = register(r#"{"domain": 7}"#);
    assert_eq!(response.status, 400);
    assert_eq!(response.error(), "domain: expected a string");
    let response = register(r#"{"domain": "169.254.169.254"}"#);
    assert_eq!(response.status, 400);
    assert!(
        response.error().contains("an IP address is not a domain"),
        "{}",
        response.error()
    );
    let response = register(r#"{"domain": "https://good.test/x"}"#);
    assert_eq!(response.status, 400);
    let response = register(&format!(r#"{{"domain": "{}"}}"#, "a".repeat(10_000)));
    assert_eq!(response.status, 413);
    let response = register(r#"{"domain": "good.test", "extra": 1}"#);
    assert_eq!(response.status, 400);
    assert_eq!(web.server.requests.lock().unwrap().len(), 0);

    // A good domain: fetched at once, indexed with internet trust, and the
    // crawler's rebuild is counted in the metrics.
    let rebuilds_before = ok_rebuilds(&daemon, &headers);
    let domain = web.server.domain("good.test");
    let response = register(&format!(r#"{{"domain": "{domain}"}}"#));
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let body = response.json();
    assert_eq!(body["result"], "updated");
    assert_eq!(ok_rebuilds(&daemon, &headers), rebuilds_before + 1);
    let id = format!("{domain}/weather-now");
    assert_eq!(body["state"]["manifest_id"], id.as_str());

    let record = daemon.request("GET", &format!("/v1/manifests/{id}"), &headers, b"");
    assert_eq!(record.status, 200);
    assert_eq!(record.json()["trust"], "internet");
    let found = daemon
        .request(
            "POST",
            "/v1/discover",
            &headers,
            br#"{"task": "what is the weather forecast in Paris", "top_k": 3}"#,
        )
        .json();
    assert_eq!(found["candidates"][0]["id"], id.as_str(), "{found}");
    assert_eq!(found["candidates"][0]["trust"], "internet");
    assert_eq!(found["candidates"][0]["domain"], domain.as_str());

    // A hostile one: 422 naming the problem; nothing indexed.
    let before = daemon.request("GET", "/v1/manifests", &headers, b"").json();
    let html = web.server.domain("html.test");
    let response = register(&format!(r#"{{"domain": "{html}"}}"#));
    assert_eq!(response.status, 422);
    assert!(
        response.error().contains("not JSON"),
        "{}",
        response.error()
    );
    let stdio = web.server.domain("stdio.test");
    let response = register(&format!(r#"{{"domain": "{stdio}"}}"#));
    assert_eq!(response.status, 422);
    assert!(response.error().contains("may never run a local command"));
    assert_eq!(
        daemon.request("GET", "/v1/manifests", &headers, b"").json(),
        before
    );

    // Status: every domain, its last result and when it is due.
    let status = daemon
        .request("GET", "/v1/crawl/status", &headers, b"")
        .json();
    assert_eq!(status["enabled"], true);
    let domains = status["domains"].as_array().unwrap();
    assert_eq!(domains.len(), 3);
    let good = domains
        .iter()
        .find(|d| d["domain"] == domain.as_str())
        .unwrap();
    assert_eq!(good["last_result"], "updated");
    assert_eq!(good["added_by"], "register");
    assert!(good["next_due_in_s"].as_f64().unwrap() > 3600.0);
    let bad = domains
        .iter()
        .find(|d| d["domain"] == html.as_str())
        .unwrap();
    assert_eq!(bad["consecutive_failures"], 1);
    let response = daemon.request("POST", "/v1/crawl/status", &headers, b"");
    assert_eq!(response.status, 405);
}

/// `oapd_index_rebuilds_total{result="ok"}` from `/metrics` (0 before the first).
fn ok_rebuilds(daemon: &support::Daemon, headers: &[(&str, &str)]) -> u64 {
    let metrics = daemon.request("GET", "/metrics", headers, b"");
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(r#"oapd_index_rebuilds_total{result="ok"} "#))
        .map_or(0, |value| value.trim().parse().unwrap())
}

#[test]
fn registration_is_refused_without_an_operator_token() {
    let web = web();
    let daemon = support::daemon()
        .without_model()
        .yaml(&crawler_yaml(&web, true, &[]))
        .start();
    let response = daemon.post_json("/v1/manifests/register", r#"{"domain":"good.test"}"#);
    assert_eq!(response.status, 403);
    assert!(response.error().contains("server.auth_token"));
    assert_eq!(web.server.requests.lock().unwrap().len(), 0);
    // Crawler off: the status says so.
    let off = support::daemon().without_model().start();
    assert_eq!(off.get("/v1/crawl/status").json()["enabled"], false);
}

fn write_config(dir: &Path, web: &Web) -> std::path::PathBuf {
    let config = format!(
        "index:\n  data_dir: {:?}\nembedding:\n  enabled: false\ndiscovery:\n  mode: lexical\n{}",
        dir.join("data"),
        crawler_yaml(web, false, &[])
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    path
}

#[test]
fn crawl_once_from_the_command_line() {
    let web = web();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &web);
    let good = web.server.domain("good.test");
    let output = oapd()
        .arg("--config")
        .arg(&config)
        .args(["crawl", "--once", &good])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("{good}: updated ({good}/weather-now)")),
        "{stdout}"
    );

    let output = oapd()
        .arg("--config")
        .arg(&config)
        .args(["discover", "--json", "weather forecast"])
        .output()
        .unwrap();
    let found: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(found["candidates"][0]["id"], format!("{good}/weather-now"));

    // A failing domain: non-zero exit, reason printed, earlier manifest kept.
    let huge = web.server.domain("huge.test");
    let output = oapd()
        .arg("--config")
        .arg(&config)
        .args(["crawl", "--once", &huge])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("larger than the 65536 byte limit"),
        "{stdout}"
    );
    assert!(stdout.contains("index: 14 manifests"), "{stdout}");

    // Not a domain: refused before anything happens.
    let output = oapd()
        .arg("--config")
        .arg(&config)
        .args(["crawl", "--once", "10.0.0.1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("an IP address is not a domain"));
}

/// kill -9 while a crawl is in flight: what was already indexed is there
/// after a restart.
#[test]
fn kill_9_during_a_crawl_loses_nothing_already_indexed() {
    let web = web();
    let mut daemon = support::daemon()
        .without_model()
        .yaml(&crawler_yaml(&web, true, &["good.test", "second.test"]))
        .start();
    let good_id = format!("{}/weather-now", web.server.domain("good.test"));
    wait_for("the seeds to be indexed", || {
        let list = daemon.get("/v1/manifests").json();
        list.as_array()
            .unwrap()
            .iter()
            .filter(|m| m["trust"] == "internet")
            .count()
            == 2
    });
    // Killed right after indexing, then again while a slow domain is
    // being fetched.
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);

    let mut daemon = support::daemon()
        .without_model()
        .yaml(&crawler_yaml(
            &web,
            true,
            &["slow.test", "good.test", "second.test"],
        ))
        .in_dir(dir)
        .start();
    assert_eq!(
        daemon.get(&format!("/v1/manifests/{good_id}")).status,
        200,
        "indexed manifest lost across a restart"
    );
    wait_for("the slow fetch to start", || {
        web.server.hits("slow.test") > 0
    });
    let pid = daemon.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    let _ = daemon.child.wait();
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);

    let daemon = support::daemon()
        .without_model()
        .yaml(&crawler_yaml(&web, false, &[]))
        .in_dir(dir)
        .start();
    let list = daemon.get("/v1/manifests").json();
    let crawled: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["trust"] == "internet")
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(crawled.len(), 2, "{list}");
    assert!(crawled.contains(&good_id.as_str()));
}

#[test]
fn the_directory_watch_picks_up_added_changed_and_removed_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let daemon = support::daemon()
        .without_model()
        .yaml(&format!(
            "manifests:\n  bundled: false\n  dirs: [{manifests:?}]\ncrawler:\n  watch_interval: 1\n"
        ))
        .start();
    let ids = || -> Vec<String> {
        daemon
            .get("/v1/manifests")
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(ids().is_empty());
    let file = manifests.join("tide.json");
    std::fs::write(
        &file,
        web::manifest("Tide Tables", "High and low tide times"),
    )
    .unwrap();
    wait_for("the new manifest", || {
        ids() == vec!["local/tide-tables".to_string()]
    });

    std::fs::write(
        &file,
        web::manifest("Tide Tables", "Tide times, now with moon phases"),
    )
    .unwrap();
    wait_for("the changed manifest", || {
        daemon.get("/v1/manifests/local/tide-tables").json()["manifest"]["description"]
            == "Tide times, now with moon phases"
    });
    // A broken file does not take the valid one down.
    std::fs::write(manifests.join("broken.json"), b"{ nope").unwrap();
    std::fs::remove_file(&file).unwrap();
    wait_for("the removal", || ids().is_empty());
    assert_eq!(daemon.get("/health").status, 200);
}

/// A registration whose fetch outlasts the wait (fetch timeout + 2 s) is
/// answered 202 "queued" and finishes in the background: two registrations
/// of a slow domain at once run one pass after the other (3 s each, the
/// fetch timeout), so the second waits ~6 s.
#[test]
fn a_registration_that_outlasts_the_wait_is_accepted_and_finishes_later() {
    let web = web();
    let daemon = operator_daemon(&web);
    let auth = format!("Bearer {TOKEN}");
    let headers = operator_headers(&auth);
    let slow = web.server.domain("slow.test");
    let body = format!(r#"{{"domain": "{slow}"}}"#);
    let responses: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    daemon.request("POST", "/v1/manifests/register", &headers, body.as_bytes())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 422),
        "{statuses:?}"
    );
    let queued = responses
        .iter()
        .find(|r| r.status == 202)
        .unwrap_or_else(|| panic!("no registration was queued: {statuses:?}"));
    let queued = queued.json();
    assert_eq!(queued["result"], "queued");
    assert_eq!(queued["domain"], slow.as_str());

    // The queued pass finishes in the background and records its failure.
    wait_for("the queued fetch to finish", || {
        let status = daemon
            .request("GET", "/v1/crawl/status", &headers, b"")
            .json();
        status["domains"].as_array().is_some_and(|domains| {
            domains.iter().any(|d| {
                d["domain"] == slow.as_str() && d["consecutive_failures"].as_u64() >= Some(2)
            })
        })
    });
    // Nothing was indexed from it, and the daemon still serves.
    let listed = daemon.request("GET", "/v1/manifests", &headers, b"").json();
    assert!(!listed.to_string().contains("slow.test"), "{listed}");
    assert_eq!(daemon.request("GET", "/health", &headers, b"").status, 200);
}
