//! Request bodies and memory: the bodies in flight across all connections
//! are capped (`server.max_inflight_body_bytes`), a body over what is left
//! is answered 503 with `Retry-After` (not a dropped connection), and a
//! burst of large image chats cannot push the daemon past a memory limit
//! it would be killed at.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{fake, Upstream};
use fake_ollama::{ModelSpec, Script, Turn};
use oap_testkit::Response;
use serde_json::Value;

const MODEL: &str = "llava:7b";

fn models() -> Script {
    Script::new()
        .model(ModelSpec::new(MODEL).capabilities(&["completion", "tools", "vision"]))
        .check_host(false)
        .default_turn(Turn::reply("a picture"))
}

/// A chat of about `bytes` bytes: one user message with one base64 image.
fn image_chat(path: &str, bytes: usize) -> Vec<u8> {
    let (head, tail) = if path == "/v1/chat/completions" {
        (
            format!(
                "{{\"model\":\"{MODEL}\",\"stream\":false,\"messages\":[{{\"role\":\"user\",\
                 \"content\":[{{\"type\":\"text\",\"text\":\"what is this?\"}},\
                 {{\"type\":\"image_url\",\"image_url\":{{\"url\":\"data:image/png;base64,"
            ),
            "\"}}]}]}",
        )
    } else {
        (
            format!(
                "{{\"model\":\"{MODEL}\",\"stream\":false,\"messages\":[{{\"role\":\"user\",\
                 \"content\":\"what is this?\",\"images\":[\""
            ),
            "\"]}]}",
        )
    };
    let image = bytes.saturating_sub(head.len() + tail.len()) / 4 * 4;
    let mut body = Vec::with_capacity(head.len() + image + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.extend(
        (0..image)
            .map(|i| b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 61]),
    );
    body.extend_from_slice(tail.as_bytes());
    body
}

/// One answer, or how the connection broke.
/// POSTs `body` on a fresh connection, writing it all before reading.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> std::io::Result<Response> {
    oap_testkit::http::post_json_within(addr, path, body, Duration::from_secs(120))
}

fn wait_for_chats(upstream: &Upstream, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while upstream.fake.requests_to("/api/chat").len() < count {
        assert!(Instant::now() < deadline, "the chat never reached Ollama");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_body_over_the_remaining_budget_gets_503_with_retry_after_until_the_first_chat_ends() {
    // The first chat's model takes 3 s; its body holds 1.5 of the 3 MiB
    // budget all that time.
    let upstream = fake(models().turn(Turn::reply("a slow picture").response_delay_ms(3_000)));
    let daemon = support::daemon()
        .without_model()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .env("OAP_SERVER_MAX_INFLIGHT_BODY_BYTES", "3145728")
        .env("OAP_OLLAMA_MAX_REQUEST_BYTES", "2097152")
        .start();
    let addr = daemon.addr;
    let body = Arc::new(image_chat("/api/chat", 1_800_000));
    let first = {
        let body = body.clone();
        std::thread::spawn(move || post(addr, "/api/chat", &body))
    };
    wait_for_chats(&upstream, 1);

    for path in ["/api/chat", "/v1/chat/completions", "/v1/responses"] {
        let busy = post(addr, path, &image_chat(path, 1_800_000))
            .unwrap_or_else(|err| panic!("{path}: connection broke instead of a 503: {err}"));
        assert_eq!(
            busy.status,
            503,
            "{path}: {}",
            String::from_utf8_lossy(&busy.body)
        );
        assert_eq!(busy.header("retry-after"), Some("5"), "{path}");
        let error: Value = serde_json::from_slice(&busy.body).expect("JSON error");
        let message = error["error"]
            .as_str()
            .or_else(|| error["error"]["message"].as_str())
            .unwrap_or_default();
        assert!(
            message.contains("server.max_inflight_body_bytes"),
            "{path}: {error}"
        );
    }
    // Small bodies still fit next to the big one.
    let small = daemon.post_json("/v1/discover", "{\"task\": \"count words\"}");
    assert_eq!(small.status, 200, "{}", small.error());

    let first = first.join().unwrap().expect("the first chat's connection");
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    // Its share came back with the end of its chat.
    let again = post(addr, "/api/chat", &body).expect("connection");
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    // The image reached Ollama whole and unchanged.
    let chats = upstream.fake.requests_to("/api/chat");
    let sent: Value = serde_json::from_slice(&body).unwrap();
    let received = chats.last().unwrap().json();
    assert_eq!(
        received["messages"][0]["images"],
        sent["messages"][0]["images"]
    );
}

#[test]
fn a_single_body_larger_than_the_whole_budget_is_refused_by_config() {
    let out = support::oapd()
        .env("OAP_SERVER_MAX_INFLIGHT_BODY_BYTES", "1048576")
        .arg("config")
        .output()
        .expect("run oapd config");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("server.max_inflight_body_bytes")
            && stderr.contains("ollama.max_request_bytes"),
        "{stderr}"
    );
}

/// A memory cgroup this test made; removed on drop (after the daemon in it
/// is gone: fields drop in order, so keep the daemon before it).
struct Cgroup {
    dir: PathBuf,
    events: &'static str,
}

impl Cgroup {
    /// A fresh memory cgroup limited to `limit` bytes, or why there is none.
    fn create(limit: u64) -> Result<Cgroup, String> {
        let name = format!("oapd-memory-test-{}", std::process::id());
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").exists() {
            // cgroup v2: a child of our own cgroup (if memory is delegated
            // there) or of the root.
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
                })
                .map(|p| root.join(p.trim_start_matches('/')));
            let mut reasons = Vec::new();
            for parent in own.into_iter().chain([root.to_path_buf()]) {
                let control = parent.join("cgroup.subtree_control");
                let enabled = std::fs::read_to_string(&control)
                    .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
                if !enabled && std::fs::write(&control, "+memory").is_err() {
                    reasons.push(format!("memory not enabled in {}", control.display()));
                    continue;
                }
                let dir = parent.join(&name);
                if let Err(err) = std::fs::create_dir(&dir) {
                    reasons.push(format!("cannot create {}: {err}", dir.display()));
                    continue;
                }
                let cgroup = Cgroup {
                    dir,
                    events: "memory.events",
                };
                std::fs::write(cgroup.dir.join("memory.max"), limit.to_string())
                    .map_err(|err| format!("cannot write memory.max: {err}"))?;
                let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
                return Ok(cgroup);
            }
            return Err(reasons.join("; "));
        }
        let v1 = root.join("memory");
        if !v1.join("memory.limit_in_bytes").exists() {
            return Err("no cgroup v2 memory controller and no cgroup v1 memory hierarchy".into());
        }
        let dir = v1.join(&name);
        std::fs::create_dir(&dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        let cgroup = Cgroup {
            dir,
            events: "memory.oom_control",
        };
        std::fs::write(cgroup.dir.join("memory.limit_in_bytes"), limit.to_string())
            .map_err(|err| format!("cannot write memory.limit_in_bytes: {err}"))?;
        let _ = std::fs::write(
            cgroup.dir.join("memory.memsw.limit_in_bytes"),
            limit.to_string(),
        );
        Ok(cgroup)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Processes the kernel's OOM killer killed in this cgroup.
    fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(self.events))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ").map(str::trim).map(String::from))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    fn peak_bytes(&self) -> Option<u64> {
        ["memory.peak", "memory.max_usage_in_bytes"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|s| s.trim().parse().ok())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The daemon was killed and reaped before; its exit may take the
        // kernel a moment to account.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

#[test]
fn sixteen_concurrent_30_mb_image_chats_in_a_512_mib_cgroup_leave_the_daemon_serving() {
    let cgroup = match Cgroup::create(512 * 1024 * 1024) {
        Ok(cgroup) => cgroup,
        Err(reason) => {
            println!("skipped: no writable memory cgroup ({reason})");
            return;
        }
    };
    // Each model answer takes 3 s, so the bodies that got in are all held
    // at once.
    let upstream = fake(models().default_turn(Turn::reply("a picture").response_delay_ms(3_000)));
    let procs = cgroup.procs();
    // The built-in defaults, model included: what a board runs.
    let mut daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .on_spawn(move |pid| {
            std::fs::write(&procs, pid.to_string())
                .map_err(|err| format!("cannot move oapd into {}: {err}", procs.display()))
        })
        .start();
    let addr = daemon.addr;
    let body = Arc::new(image_chat("/api/chat", 30_000_000));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || post(addr, "/api/chat", &body))
        })
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();

    let status = daemon.child.try_wait().expect("try_wait");
    assert!(
        status.is_none(),
        "oapd died ({status:?}); OOM kills in its cgroup: {}\n{}",
        cgroup.oom_kills(),
        daemon.log_text()
    );
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ran in the cgroup");
    let (mut ok, mut busy) = (0, 0);
    for answer in &answers {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|err| panic!("a connection broke instead of an answer: {err}"));
        match (answer.status, answer.header("retry-after")) {
            (200, _) => ok += 1,
            (503, Some(_)) => busy += 1,
            (status, _) => panic!(
                "unexpected {status}: {}",
                String::from_utf8_lossy(&answer.body)
            ),
        }
    }
    println!(
        "16 x 30 MB: {ok} answered, {busy} told to retry; cgroup peak {:?} bytes",
        cgroup.peak_bytes()
    );
    assert!(ok >= 1, "no chat got through");
    assert!(
        busy >= 1,
        "16 x 30 MB held at once should not fit the default budget"
    );
    let health = daemon.get("/health");
    assert_eq!(health.status, 200);
    // The budget came back: a large chat is served again.
    let again = post(addr, "/api/chat", &body).expect("connection");
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    let _ = daemon.terminate();
    drop(daemon);
    drop(cgroup);
}

/// oapd's resident memory, MB.
fn rss_mb(pid: u32) -> f64 {
    oap_testkit::rss::rss_hwm_mb(pid)
        .expect("read the daemon's /proc status")
        .0
}

#[test]
fn after_a_burst_of_large_image_chats_resident_memory_returns_to_idle() {
    // Each model answer takes a second, so the eight bodies are in flight
    // together, as in a burst.
    let upstream = fake(models().default_turn(Turn::reply("a picture").response_delay_ms(1_000)));
    let daemon = support::daemon()
        .without_model()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();
    let addr = daemon.addr;
    let pid = daemon.pid();

    // Idle: after one small chat, so the upstream connection, the pools
    // and the caches a chat needs exist.
    let warm_up = post(addr, "/api/chat", &image_chat("/api/chat", 4096)).expect("connection");
    assert_eq!(
        warm_up.status,
        200,
        "{}",
        String::from_utf8_lossy(&warm_up.body)
    );
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_mb(pid);

    // 8 x 16 MB fits the default in-flight budget (160 MiB): all admitted.
    let body = Arc::new(image_chat("/api/chat", 16_000_000));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || post(addr, "/api/chat", &body))
        })
        .collect();
    for client in clients {
        let answer = client.join().unwrap().expect("connection");
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    let after_burst = rss_mb(pid);

    // Freed memory may take a moment to go back (the trim runs when the
    // last body's share is returned); what is kept for good (a buffer the
    // size of a body per pooled upstream connection, or an allocator
    // arena's free memory) is ~16 MB per body, far over the bound.
    let bound = idle + (idle * 0.25).max(20.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut settled = rss_mb(pid);
    while settled > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        settled = rss_mb(pid);
    }
    println!(
        "8 x 16 MB: idle {idle:.1} MB, right after {after_burst:.1} MB, settled {settled:.1} MB \
         (bound {bound:.1} MB)"
    );
    assert!(
        settled <= bound,
        "resident memory stayed at {settled:.1} MB after the burst (idle {idle:.1} MB, \
         right after the burst {after_burst:.1} MB, bound {bound:.1} MB)"
    );
    let health = daemon.get("/health");
    assert_eq!(health.status, 200);
}
