//! A board subscribed to a signed snapshot, with the real binary and the
//! real model: a snapshot built by `oapd snapshot build` from test
//! manifests is served over HTTPS (test CA) on loopback, the board pulls
//! it, finds its tools and a chat through the fake Ollama calls one. Then
//! hostile snapshots are served as new versions, each refused with its
//! reason while the running index keeps serving, and a snapshot whose file
//! fails its hash after download leaves the previous one installed.
//!
//! The download itself, against a host written byte by byte: a board
//! killed (SIGKILL) while a file larger than one 4 MiB piece stalls
//! mid-piece resumes after restart from the bytes it staged (`Range` from
//! there, only the rest sent); a host that ignores `Range` gets the file
//! fetched again whole. The installed snapshot's tools count as their own
//! source (`/v1/status`, `/health`), and a board that has none installed
//! yet does not warn about the snapshot index it lacks.
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

/// Polls `check` until it holds; the deadline only bounds a failing run
/// (generous: a loaded CI machine embeds and rebuilds slowly).
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(180);
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

/// What the raw snapshot server does with a request for a file.
#[derive(Debug, Clone, PartialEq)]
enum Serving {
    /// `Range` honoured (206 with the asked slice).
    Honest,
    /// As `Honest`, except that a piece of `file` spanning byte `at` is
    /// sent up to that byte and then the connection hangs, as a link that
    /// died mid-file.
    StallAt { file: String, at: usize },
    /// `Range` ignored: 200 with the whole file, always.
    IgnoreRange,
}

/// One file request the raw server answered.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    range: Option<String>,
    status: u16,
    body_bytes: usize,
}

#[derive(Default)]
struct RawState {
    files: Served,
    serving: Option<Serving>,
    seen: Vec<Seen>,
}

/// A snapshot host on loopback HTTPS written byte by byte (the test CA),
/// so it can stop mid-body or ignore `Range` as real servers do.
struct RawWeb {
    runtime: tokio::runtime::Runtime,
    port: u16,
    state: Arc<Mutex<RawState>>,
    ca_file: PathBuf,
}

impl RawWeb {
    fn start(dir: &Path) -> RawWeb {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let pki = Pki::new(&["127.0.0.1"]);
        let ca_file = dir.join("raw-ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).unwrap();
        let state: Arc<Mutex<RawState>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = state.clone();
        runtime.spawn(server::serve_tls_raw(
            listener,
            pki.server.clone(),
            move |tls, head| raw_answer(shared.clone(), tls, head),
        ));
        RawWeb {
            runtime,
            port,
            state,
            ca_file,
        }
    }

    fn serve(&self, files: Served, serving: Serving) {
        let mut state = self.state.lock().unwrap();
        state.files = files;
        state.serving = Some(serving);
    }

    fn set_serving(&self, serving: Serving) {
        self.state.lock().unwrap().serving = Some(serving);
    }

    fn base(&self) -> String {
        format!("https://127.0.0.1:{}/snap/", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// A board subscribed to this host, checking every second, with its
    /// index in `data_dir` (kept across its restarts).
    fn board_yaml(&self, public_key: &str) -> String {
        format!(
            "snapshots:\n  url: {:?}\n  public_keys: [{:?}]\n  interval: 1\n  fetch_timeout: 120\n  allow_private: [\"127.0.0.0/8\"]\n  ca_file: {:?}\n",
            self.base(),
            public_key,
            self.ca_file,
        )
    }
}

async fn raw_answer(
    state: Arc<Mutex<RawState>>,
    mut tls: server::TlsStream,
    head: server::RequestHead,
) {
    use tokio::io::AsyncWriteExt;
    let (bytes, serving) = {
        let state = state.lock().unwrap();
        let bytes = head
            .path
            .strip_prefix("/snap/")
            .and_then(|name| state.files.get(name))
            .cloned();
        (bytes, state.serving.clone().unwrap_or(Serving::Honest))
    };
    let Some(bytes) = bytes else {
        server::write_response(&mut tls, "404 Not Found", &[], b"").await;
        let _ = tls.shutdown().await;
        return;
    };
    let range = head.header("range").map(str::to_owned);
    let record = |status: u16, body_bytes: usize| {
        state.lock().unwrap().seen.push(Seen {
            path: head.path.clone(),
            range: range.clone(),
            status,
            body_bytes,
        });
    };
    let asked = range.as_deref().and_then(|r| {
        let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
        Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
    });
    let Some((start, end)) = asked.filter(|_| serving != Serving::IgnoreRange) else {
        record(200, bytes.len());
        server::write_response(&mut tls, "200 OK", &[], &bytes).await;
        let _ = tls.shutdown().await;
        return;
    };
    let end = end.min(bytes.len() - 1);
    let content_range = (
        "content-range",
        format!("bytes {start}-{end}/{}", bytes.len()),
    );
    if let Serving::StallAt { file, at } = &serving {
        if head.path.ends_with(&format!("/{file}")) && (start..=end).contains(at) {
            // The whole slice announced, part of it sent, then silence:
            // the board waits on a link that no longer carries anything.
            let head_text = format!(
                "HTTP/1.1 206 Partial Content\r\nconnection: close\r\ncontent-length: {}\r\ncontent-range: {}\r\n\r\n",
                end + 1 - start,
                content_range.1
            );
            let _ = tls.write_all(head_text.as_bytes()).await;
            let _ = tls.write_all(&bytes[start..*at]).await;
            let _ = tls.flush().await;
            record(206, at - start);
            std::future::pending::<()>().await;
        }
    }
    record(206, end + 1 - start);
    server::write_response(
        &mut tls,
        "206 Partial Content",
        &[content_range],
        &bytes[start..=end],
    )
    .await;
    let _ = tls.shutdown().await;
}

/// Bytes that do not repeat in any short period (a file of its own).
fn filler(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// The snapshot the kit builds, plus a listed file larger than one
/// download piece (4 MiB), re-signed as version 30: a download of it
/// spans several requests, so a cut leaves whole pieces staged.
fn snapshot_with_a_large_file(dir: &Path, big_len: usize) -> (Served, String) {
    let (published, public_key) = build_snapshot(dir, "https://127.0.0.1:9/tides");
    let mut files = read_dir(&published);
    let big = filler(big_len);
    let entry = json!({"path": "large.bin", "bytes": big.len(), "sha256": hex_sha256(&big)});
    files.insert("large.bin".into(), big);
    let key = oap_snapshot::SigningKey::from_file(&dir.join("keys/snapshot.key"), None).unwrap();
    let files = resigned(&files, &key, |l| {
        l["version"] = json!(30);
        l["files"].as_array_mut().unwrap().push(entry);
    });
    (files, public_key)
}

/// 4 MiB: the piece the board asks for at most (`snapshots::fetch`).
const PIECE: usize = 4 << 20;

#[test]
fn a_download_cut_by_a_killed_board_resumes_from_the_staged_bytes_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let web = RawWeb::start(dir.path());
    let big_len = PIECE + (PIECE / 4);
    let (files, public_key) = snapshot_with_a_large_file(dir.path(), big_len);
    // The first piece arrives whole; the second stops 1,000 bytes in.
    let stall_at = PIECE + 1000;
    web.serve(
        files,
        Serving::StallAt {
            file: "large.bin".into(),
            at: stall_at,
        },
    );
    let staged = data.path().join("snapshots/staging/large.bin");
    let mut first = support::daemon()
        .data_dir(data.path())
        .yaml(&web.board_yaml(&public_key))
        .start();
    wait_for("the first piece staged and the second stalled", || {
        let stalled = web
            .seen()
            .iter()
            .any(|s| s.path.ends_with("/large.bin") && s.body_bytes == stall_at - PIECE);
        stalled && std::fs::metadata(&staged).is_ok_and(|m| m.len() >= PIECE as u64)
    });
    // Power cut: SIGKILL, nothing of the daemon runs after it.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(std::fs::metadata(&staged).unwrap().len(), PIECE as u64);
    let before_restart = web.seen().len();

    web.set_serving(Serving::Honest);
    let second = support::daemon()
        .data_dir(data.path())
        .yaml(&web.board_yaml(&public_key))
        .start();
    wait_for("the snapshot installed after the restart", || {
        snapshot_health(&second)["version"] == 30
    });
    let asked: Vec<Seen> = web.seen()[before_restart..]
        .iter()
        .filter(|s| s.path.ends_with("/large.bin"))
        .cloned()
        .collect();
    let first_ask = asked.first().expect("the large file asked for again");
    assert!(
        first_ask
            .range
            .as_deref()
            .is_some_and(|r| r.starts_with(&format!("bytes={PIECE}-"))),
        "the restarted board did not resume from the staged {PIECE} bytes: {asked:?}"
    );
    let sent: usize = asked.iter().map(|s| s.body_bytes).sum();
    assert_eq!(sent, big_len - PIECE, "{asked:?}");
    assert!(second.log_text().contains("snapshot download resumed"));
    let installed = std::fs::read(data.path().join("snapshots/current/large.bin")).unwrap();
    assert_eq!(installed.len(), big_len);
    drop(web.runtime);
}

#[test]
fn a_server_that_ignores_range_gets_the_file_whole_and_the_snapshot_counts_as_its_own_source() {
    let dir = tempfile::tempdir().unwrap();
    let web = RawWeb::start(dir.path());
    let big_len = PIECE + (PIECE / 4);
    let (files, public_key) = snapshot_with_a_large_file(dir.path(), big_len);
    let expected = files["large.bin"].clone();
    web.serve(files, Serving::IgnoreRange);
    let data = tempfile::tempdir().unwrap();
    let board = support::daemon()
        .data_dir(data.path())
        .yaml(&web.board_yaml(&public_key))
        .start();
    wait_for("the snapshot installed", || {
        snapshot_health(&board)["version"] == 30
    });
    let asked: Vec<Seen> = web
        .seen()
        .into_iter()
        .filter(|s| s.path.ends_with("/large.bin"))
        .collect();
    // A piece asked for, the whole file answered (more than the piece:
    // refused unread past the cap), then the file asked for whole.
    assert!(
        asked
            .first()
            .is_some_and(|s| s.range.is_some() && s.status == 200),
        "{asked:?}"
    );
    assert!(
        asked.iter().any(|s| s.range.is_none()),
        "never asked for the whole file: {asked:?}"
    );
    let installed = std::fs::read(data.path().join("snapshots/current/large.bin")).unwrap();
    assert!(installed == expected, "the installed file differs");
    // This host sends no validators, so every later check fetches the
    // same listing again: the installed one, not a replay.
    let listings_then = web
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/snapshot.json"))
        .count();
    wait_for("two more checks of the listing", || {
        web.seen()
            .iter()
            .filter(|s| s.path.ends_with("/snapshot.json"))
            .count()
            >= listings_then + 2
    });

    // What the board says of it, each claim checked and all reported.
    let mut wrong = Vec::new();
    let status = board.get("/v1/status").json();
    let by_source = &status["manifests"]["by_source"];
    // Its tools are a source of their own, not the crawler's.
    if by_source["snapshot"] != 2 || by_source["crawl"] != 0 {
        wrong.push(format!("/v1/status by_source: {by_source}"));
    }
    let health = board.get("/health").json();
    if health["snapshot"]["tools"] != 2 {
        wrong.push(format!("/health snapshot: {}", health["snapshot"]));
    }
    // The install's own files are not taken for tools.
    if health["load_problems"] != 0 {
        wrong.push(format!(
            "/health load_problems: {}",
            health["load_problems"]
        ));
    }
    // Before the first install the snapshot's index did not exist yet:
    // expected, so not a warning at every rebuild.
    let log = board.log_text();
    if let Some(line) = log.lines().find(|l| l.contains("vector donor skipped")) {
        wrong.push(format!("log: {line}"));
    }
    if !health["snapshot"]["last_error"].is_null() {
        wrong.push(format!("/health snapshot: {}", health["snapshot"]));
    }
    let metrics = String::from_utf8(board.get("/metrics").body).unwrap();
    if metrics.contains("oapd_snapshot_pulls_total{outcome=\"replayed\"}") {
        wrong.push("the installed listing, fetched again, was counted as replayed".into());
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    drop(web.runtime);
}
