//! A board subscribed to a signed snapshot, with the real binary and the
//! real model: a snapshot built by `oapd snapshot build` from test
//! manifests is served over HTTPS (test CA) on loopback, the board pulls
//! it, finds its tools and a chat through the fake Ollama calls one. Then
//! hostile snapshots are served as new versions, each refused with its
//! reason while the running index keeps serving, and a snapshot whose file
//! fails its hash after download leaves the previous one installed.
//!
//! The board reaches the loopback server only through the operator's
//! allowance (`snapshots.allow_private: [127.0.0.0/8]`), as crawler tests
//! do; no traffic leaves loopback.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_ollama::{Echo, ModelSpec, Script, Turn};
use oap_testkit::pki::Pki;
use oap_testkit::server::{self, HttpResponse, Recorded, TestServer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support;

/// What the snapshot server serves under `/snap/`: file name → bytes.
type Served = HashMap<String, Vec<u8>>;

const TIDE_ANSWER: &str = "high tide at 06:12, low tide at 12:30";

struct Web {
    runtime: tokio::runtime::Runtime,
    server: TestServer,
    served: Arc<Mutex<Served>>,
    ca_file: PathBuf,
}

impl Web {
    fn start(dir: &Path) -> Web {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let pki = Pki::new(&["127.0.0.1"]);
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).unwrap();
        let served: Arc<Mutex<Served>> = Arc::default();
        let state = served.clone();
        let server = runtime.block_on(server::serve_tls(
            move |request: &Recorded| answer(&state.lock().unwrap(), request),
            pki.server.clone(),
        ));
        Web {
            runtime,
            server,
            served,
            ca_file,
        }
    }

    fn serve(&self, files: Served) {
        *self.served.lock().unwrap() = files;
    }

    fn base(&self) -> String {
        format!("https://127.0.0.1:{}/snap/", self.server.port())
    }

    /// Paths asked for since request number `from`.
    fn paths_since(&self, from: usize) -> Vec<String> {
        self.server.requests()[from..]
            .iter()
            .map(|r| r.path.clone())
            .collect()
    }
}

/// The snapshot files with ETag and `Range`, and the tide tool's endpoint.
fn answer(served: &Served, request: &Recorded) -> HttpResponse {
    if request.path == "/tides" {
        return hyper::Response::builder()
            .header("content-type", "text/plain")
            .body(http_body_util::Full::new(bytes::Bytes::from(TIDE_ANSWER)))
            .unwrap();
    }
    let Some(bytes) = request
        .path
        .strip_prefix("/snap/")
        .and_then(|name| served.get(name))
    else {
        return server::response(404, "not here");
    };
    let etag = format!("\"{}\"", hex_sha256(bytes));
    if request.header("if-none-match").as_deref() == Some(etag.as_str()) {
        return server::response(304, "");
    }
    let builder = hyper::Response::builder().header("etag", &etag);
    let Some(range) = request.header("range") else {
        return builder
            .body(http_body_util::Full::new(bytes::Bytes::from(bytes.clone())))
            .unwrap();
    };
    let (start, end) = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()))
        .unwrap();
    if start >= bytes.len() {
        return hyper::Response::builder()
            .status(416)
            .header("content-range", format!("bytes */{}", bytes.len()))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
    }
    let end = end.min(bytes.len() - 1);
    builder
        .status(206)
        .header(
            "content-range",
            format!("bytes {start}-{end}/{}", bytes.len()),
        )
        .body(http_body_util::Full::new(bytes::Bytes::from(
            bytes[start..=end].to_vec(),
        )))
        .unwrap()
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A snapshot directory's files as served.
fn read_dir(dir: &Path) -> Served {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect()
}

/// `good` with its listing edited and signed again by `key`.
fn resigned(
    good: &Served,
    key: &oap_snapshot::SigningKey,
    edit: impl FnOnce(&mut Value),
) -> Served {
    let mut files = good.clone();
    let mut listing: Value = serde_json::from_slice(&files["snapshot.json"]).unwrap();
    edit(&mut listing);
    let bytes = serde_json::to_vec_pretty(&listing).unwrap();
    let signature = key.sign(&bytes, "test variant").unwrap();
    files.insert("snapshot.json".into(), bytes);
    files.insert("snapshot.json.minisig".into(), signature.into_bytes());
    files
}

/// Builds the builder's snapshot of two HTTP tools with `oapd snapshot build`.
fn build_snapshot(dir: &Path, tide_url: &str) -> (PathBuf, String) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("tides.json"),
        json!({
            "oap": "1.0",
            "name": "tide-tables",
            "description": "Tide tables: the times of high and low tide in a harbour today.",
            "input": {"format": "text/plain", "description": "The harbour's name."},
            "output": {"format": "text/plain", "description": "High and low tide times."},
            "invoke": {"method": "GET", "url": tide_url}
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        manifests.join("ferries.json"),
        json!({
            "oap": "1.0",
            "name": "ferry-departures",
            "description": "Ferry departures from a port: the next boats and their destinations.",
            "invoke": {"method": "GET", "url": "https://ferries.example/next"}
        })
        .to_string(),
    )
    .unwrap();
    let config = dir.join("builder.yaml");
    std::fs::write(
        &config,
        format!(
            "index:\n  data_dir: {:?}\nembedding:\n  model_dir: {:?}\nmanifests:\n  bundled: false\n  dirs: [{:?}]\n",
            dir.join("builder-data"),
            support::require_model(),
            manifests
        ),
    )
    .unwrap();
    let keys = dir.join("keys");
    let run = |args: &[&str]| {
        let output = support::oapd()
            .arg("--config")
            .arg(&config)
            .arg("snapshot")
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(&["keygen", "--out", keys.to_str().unwrap()]);
    let out = dir.join("published");
    run(&[
        "build",
        "--key",
        keys.join("snapshot.key").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--version",
        "10",
    ]);
    let public = std::fs::read_to_string(keys.join("snapshot.pub")).unwrap();
    (out, public.lines().last().unwrap().to_owned())
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn snapshot_health(board: &support::Daemon) -> Value {
    board.get("/health").json()["snapshot"].clone()
}

fn found_ids(board: &support::Daemon, task: &str) -> Vec<String> {
    board.discover(task, 3)["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect()
}

const TIDE_TASK: &str = "when is high tide in the harbour today";

#[test]
fn a_board_pulls_a_signed_snapshot_uses_its_tools_and_refuses_every_hostile_one() {
    let dir = tempfile::tempdir().unwrap();
    let web = Web::start(dir.path());
    let tide_url = format!("https://127.0.0.1:{}/tides", web.server.port());
    let (published, public_key) = build_snapshot(dir.path(), &tide_url);
    let good = read_dir(&published);
    web.serve(good.clone());

    let upstream = support::fake(
        Script::new()
            .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
            .turn(Turn::tool_call(
                "oap_tide_tables",
                json!({"input": "Harbour"}),
            ))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let board = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nsnapshots:\n  url: {:?}\n  public_keys: [{:?}]\n  interval: 1\n  fetch_timeout: 10\n  allow_private: [\"127.0.0.0/8\"]\n  ca_file: {:?}\ntools:\n  allow_private: [\"127.0.0.0/8\"]\n  ca_file: {:?}\n",
            upstream.fake.url(),
            web.base(),
            public_key,
            web.ca_file,
            web.ca_file,
        ))
        .start();

    wait_for("the snapshot installed", || {
        snapshot_health(&board)["version"] == 10
    });
    let health = snapshot_health(&board);
    assert_eq!(health["last_outcome"], "installed", "{health}");
    assert!(
        health["key_id"].as_str().is_some_and(|k| k.len() == 16),
        "{health}"
    );
    assert!(
        health["model"].as_str().is_some_and(|m| !m.is_empty()),
        "{health}"
    );
    assert!(health["installed_at"].is_string(), "{health}");
    wait_for("the snapshot's tools in the index", || {
        found_ids(&board, TIDE_TASK)
            .first()
            .is_some_and(|id| id.contains("tide-tables"))
    });
    // The builder's vectors were reused: the rebuild that took the
    // snapshot in embedded nothing.
    let log = board.log_text();
    let installed_line = log
        .lines()
        .find(|l| l.contains("index rebuilt") && l.contains("snapshot installed"))
        .unwrap_or_else(|| panic!("no rebuild line for the snapshot in:\n{log}"));
    assert!(installed_line.contains("embedded=0"), "{installed_line}");

    // A chat through the fake Ollama calls the snapshot's tool over HTTPS.
    let chat = board.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false,
                "messages": [{"role": "user", "content": TIDE_TASK}]})
        .to_string(),
    );
    assert_eq!(chat.status, 200, "{}", String::from_utf8_lossy(&chat.body));
    let answered: Value = chat.json();
    assert!(
        answered["message"]["content"]
            .as_str()
            .is_some_and(|c| c.contains(TIDE_ANSWER)),
        "{answered}"
    );
    assert!(web.server.requests().iter().any(|r| r.path == "/tides"));

    // Hostile snapshots, each a new version (the replay an older one).
    let key =
        oap_snapshot::SigningKey::from_file(&dir.path().join("keys/snapshot.key"), None).unwrap();
    let mut bad_signature = resigned(&good, &key, |l| l["version"] = json!(11));
    let mut altered = bad_signature["snapshot.json"].clone();
    let at = altered.iter().position(|b| *b == b'1').unwrap();
    altered[at] = b'2';
    bad_signature.insert("snapshot.json".into(), altered);
    let mut truncated = resigned(&good, &key, |l| l["version"] = json!(12));
    let index = truncated["index.oapx"].clone();
    truncated.insert("index.oapx".into(), index[..index.len() / 2].to_vec());
    let other_model = resigned(&good, &key, |l| {
        l["version"] = json!(13);
        l["model_id"] = json!("another-encoder");
    });
    let climbing_out = resigned(&good, &key, |l| {
        l["version"] = json!(14);
        l["files"]
            .as_array_mut()
            .unwrap()
            .push(json!({"path": "../x", "bytes": 1, "sha256": "0".repeat(64)}));
    });
    let absolute = resigned(&good, &key, |l| {
        l["version"] = json!(15);
        l["files"]
            .as_array_mut()
            .unwrap()
            .push(json!({"path": "/etc/x", "bytes": 1, "sha256": "0".repeat(64)}));
    });
    let huge = resigned(&good, &key, |l| {
        l["version"] = json!(16);
        l["files"][0]["bytes"] = json!(10u64 << 30);
    });
    let replayed = resigned(&good, &key, |l| l["version"] = json!(9));
    let cases: Vec<(&str, Served, &str)> = vec![
        ("bad signature", bad_signature, "signature"),
        ("truncated file", truncated, "size"),
        ("wrong model id", other_model, "model"),
        ("listing naming ../x", climbing_out, "path"),
        ("listing naming an absolute path", absolute, "path"),
        ("10 GB claimed", huge, "too_large"),
        ("replayed older version", replayed, "replayed"),
    ];
    let mut failed = snapshot_health(&board)["pulls_failed"].as_u64().unwrap();
    for (what, files, reason) in cases {
        let requests_before = web.server.requests().len();
        web.serve(files);
        wait_for(what, || {
            snapshot_health(&board)["pulls_failed"].as_u64() == Some(failed + 1)
        });
        failed += 1;
        let health = snapshot_health(&board);
        assert_eq!(health["last_outcome"], reason, "{what}: {health}");
        assert!(health["last_error"].is_string(), "{what}: {health}");
        assert_eq!(health["version"], 10, "{what}: {health}");
        assert!(
            found_ids(&board, TIDE_TASK)
                .first()
                .is_some_and(|id| id.contains("tide-tables")),
            "{what}: the running index changed"
        );
        if reason != "size" {
            // Refused on the listing: no file of it was asked for.
            let files: Vec<String> = web
                .paths_since(requests_before)
                .into_iter()
                .filter(|p| !p.ends_with("snapshot.json") && !p.ends_with(".minisig"))
                .collect();
            assert!(files.is_empty(), "{what}: fetched {files:?}");
        }
    }

    // Rollback: a newer snapshot whose file fails its hash only after the
    // download leaves the installed one serving.
    let mut bad_hash = resigned(&good, &key, |l| l["version"] = json!(20));
    let mut index = bad_hash["index.oapx"].clone();
    let last = index.len() - 1;
    index[last] ^= 0xff;
    bad_hash.insert("index.oapx".into(), index);
    let requests_before = web.server.requests().len();
    web.serve(bad_hash);
    wait_for("the altered file refused", || {
        snapshot_health(&board)["pulls_failed"].as_u64() == Some(failed + 1)
    });
    let health = snapshot_health(&board);
    assert_eq!(health["last_outcome"], "hash", "{health}");
    assert_eq!(health["version"], 10, "{health}");
    assert!(
        web.paths_since(requests_before)
            .iter()
            .any(|p| p.ends_with("index.oapx")),
        "the file was downloaded before it was refused"
    );
    assert!(found_ids(&board, TIDE_TASK)
        .first()
        .is_some_and(|id| id.contains("tide-tables")));

    let metrics = String::from_utf8(board.get("/metrics").body).unwrap();
    assert!(metrics.contains("oapd_snapshot_version 10"), "{metrics}");
    for reason in [
        "signature",
        "size",
        "model",
        "too_large",
        "replayed",
        "hash",
    ] {
        assert!(
            metrics.contains(&format!(
                "oapd_snapshot_pulls_total{{outcome=\"{reason}\"}} 1"
            )),
            "{reason}: {metrics}"
        );
    }
    assert!(
        metrics.contains("oapd_snapshot_pulls_total{outcome=\"path\"} 2"),
        "{metrics}"
    );
    drop(web.runtime);
}

#[test]
fn a_board_without_a_snapshot_url_has_no_task_no_file_and_a_null_snapshot() {
    let data = tempfile::tempdir().unwrap();
    let board = support::daemon().data_dir(data.path()).start();
    let health = board.get("/health").json();
    assert!(health["snapshot"].is_null(), "{health}");
    assert!(!data.path().join("snapshots").exists());
    assert!(!board.log_text().contains("snapshot subscription"));
    let metrics = String::from_utf8(board.get("/metrics").body).unwrap();
    assert!(!metrics.contains("oapd_snapshot_pulls_total{"), "{metrics}");
}
