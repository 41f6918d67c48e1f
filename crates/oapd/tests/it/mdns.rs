//! LAN discovery (`crawler.mdns`) end to end, only inside network
//! namespaces this test creates: namespace A holds a LAN device
//! (`oap_testkit::mdns_device`, run in a child of this test binary) that
//! serves manifests over plain HTTP on 10.77.0.1 and advertises them over mDNS,
//! good and hostile; namespace B holds the daemon, listening on 127.0.0.1
//! inside B. A veth pair joins them, created directly inside the two
//! namespaces: no interface in the host namespace, no multicast on the host's
//! network. The test talks to the daemon from threads that entered B.
//!
//! Needs root and `ip` (iproute2); otherwise it prints SKIP and returns.

use crate::support;
use oap_testkit::mdns_device as responder;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Response};
use fake_ollama::{Chunk, Echo, FakeOllama, ModelSpec, Script, Turn};
use oap_testkit::netns::{run, Netns};

/// Set in the environment of the responder child (this test binary re-run).
const RESPONDER_ENV: &str = "OAPD_TEST_MDNS_RESPONDER";
const DAEMON_PORT: u16 = 18300;
const DEVICE_PORT: u16 = 8080;
const TOKEN: &str = "mdns-test-token-0123456789abcdef";

/// The responder child's entry point: a no-op unless this process was
/// started as the responder (see [`Lab::start_responder`]).
#[test]
fn zz_responder_child_entry() {
    if let Ok(address) = std::env::var(RESPONDER_ENV) {
        let address = address.parse().expect("responder address");
        responder::run(address, DEVICE_PORT);
        std::process::exit(0);
    }
}

/// Two namespaces joined by a veth pair, and the processes run in them.
/// Dropping it kills the processes, then deletes the namespaces.
struct Lab {
    children: Vec<Child>,
    daemon: Option<Daemon>,
    a: Netns,
    b: Netns,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.daemon = None;
        // The namespaces go with the fields: deleting a namespace deletes
        // the veth end inside it (and its peer).
    }
}

impl Lab {
    /// The lab, or why it cannot be built here (then the test is skipped).
    fn new() -> Result<Lab, String> {
        // From here on the namespaces' Drop guards clean up whatever was created.
        let lab = Lab {
            children: Vec::new(),
            daemon: None,
            a: Netns::new("oapd-mdns-a")?,
            b: Netns::new("oapd-mdns-b")?,
        };
        let (a, b) = (lab.a.name(), lab.b.name());
        // The pair is created inside the namespaces: never on the host.
        let steps: &[&[&str]] = &[
            &[
                "ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb",
                "netns", b,
            ],
            &["ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", "va"],
            &["ip", "-n", b, "addr", "add", "10.77.0.2/24", "dev", "vb"],
            &["ip", "-n", a, "link", "set", "lo", "up"],
            &["ip", "-n", b, "link", "set", "lo", "up"],
            &["ip", "-n", a, "link", "set", "va", "up"],
            &["ip", "-n", b, "link", "set", "vb", "up"],
            &["ip", "-n", a, "route", "add", "224.0.0.0/4", "dev", "va"],
            &["ip", "-n", b, "route", "add", "224.0.0.0/4", "dev", "vb"],
        ];
        for step in steps {
            run(step)?;
        }
        Ok(lab)
    }

    /// Starts the LAN device in A; returns its stdin and a channel of its
    /// stdout lines, after it printed READY.
    fn start_responder(&mut self) -> (ChildStdin, mpsc::Receiver<String>) {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new("ip")
            .args(["netns", "exec", self.a.name()])
            .arg(exe)
            .args(["--exact", "mdns::zz_responder_child_entry", "--nocapture"])
            .env(RESPONDER_ENV, "10.77.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the responder");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        self.children.push(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        wait_line(&rx, "READY");
        (stdin, rx)
    }

    /// Starts the daemon in B with `crawler.mdns: true` and `ollama_url`.
    fn start_daemon(&mut self, ollama_url: &str) {
        let daemon = support::daemon()
            .in_netns(self.b.name())
            .listen(&[&format!("127.0.0.1:{DAEMON_PORT}")])
            .server("auth_token", &format!("{TOKEN:?}"))
            .yaml(&format!(
                "ollama:\n  base_url: {ollama_url:?}\n\
                 crawler:\n  mdns: true\n  fetch_timeout: 3\n  retry_base: 1\n  max_failures: 2\n  watch_interval: 1\n"
            ))
            .start_with_auth(TOKEN);
        self.daemon = Some(daemon);
    }

    fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("the daemon is started")
    }

    fn log(&self) -> String {
        self.daemon().log_text()
    }

    /// One request to the daemon, from a thread inside namespace B.
    fn try_request(&self, method: &str, path: &str, body: &[u8]) -> std::io::Result<Response> {
        let bearer = format!("Bearer {TOKEN}");
        self.daemon().try_request(
            method,
            path,
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
            ],
            body,
        )
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> Response {
        self.try_request(method, path, body)
            .unwrap_or_else(|err| panic!("{method} {path}: {err}\n{}", self.log()))
    }

    fn get_json(&self, path: &str) -> serde_json::Value {
        let response = self.request("GET", path, b"");
        assert_eq!(
            response.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&response.body)
        );
        response.json()
    }

    /// Waits up to 60 s for `check` on the daemon; panics with the log.
    fn wait_for(&self, what: &str, mut check: impl FnMut(&Lab) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Threads of the daemon named like the mDNS browser's.
    fn mdns_threads(&self) -> usize {
        let pid = self.daemon().pid();
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "mDNS_daemon")
                    })
                    .count()
            })
            .unwrap_or(0)
    }
}

fn wait_line(rx: &mpsc::Receiver<String>, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.trim() == wanted => return,
            Ok(_) => continue,
            Err(err) => panic!("responder never printed {wanted}: {err}"),
        }
    }
}

fn manifest<'a>(list: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    list.as_array()?.iter().find(|m| m["id"] == id)
}

fn domain<'a>(status: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    status["domains"]
        .as_array()?
        .iter()
        .find(|d| d["domain"] == key)
}

const GOOD_ID: &str = "greenhouse-sensor.local/greenhouse-sensor";

#[test]
fn lan_manifests_come_and_go_inside_network_namespaces() {
    if std::env::var_os(RESPONDER_ENV).is_some() {
        return;
    }
    let mut lab = match Lab::new() {
        Ok(lab) => lab,
        Err(why) => {
            println!("SKIP lan_manifests_come_and_go_inside_network_namespaces: {why}");
            return;
        }
    };
    // The scripted Ollama listens inside B (its socket is bound from a
    // thread in B; the runtime's workers serve it from anywhere).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let script = Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .turn(Turn::chunks(vec![Chunk::tool_call(
            "oap_greenhouse_sensor",
            serde_json::json!({"zone": "north"}),
        )]))
        .turn(Turn::echo(Echo::LastTool));
    let ollama = lab.b.inside(move || {
        handle
            .block_on(FakeOllama::start(script))
            .expect("fake ollama")
    });
    lab.start_daemon(&ollama.url());
    lab.wait_for("one mDNS browser thread", |lab| lab.mdns_threads() == 1);
    let (mut responder, lines) = lab.start_responder();

    // The good device: indexed with lan trust under <instance>.local.
    lab.wait_for("the LAN manifest in /v1/manifests", |lab| {
        manifest(&lab.get_json("/v1/manifests"), GOOD_ID).is_some()
    });
    let list = lab.get_json("/v1/manifests");
    let good = manifest(&list, GOOD_ID).unwrap();
    assert_eq!(good["trust"], "lan", "{good}");
    let detail = lab.get_json(&format!("/v1/manifests/{GOOD_ID}"));
    assert_eq!(detail["trust"], "lan", "{detail}");

    let found = lab.request(
        "POST",
        "/v1/discover",
        br#"{"task": "how warm is it in the greenhouse right now?"}"#,
    );
    assert_eq!(found.status, 200);
    let found = found.json();
    assert_eq!(found["match"]["id"], GOOD_ID, "{found}");
    assert_eq!(found["match"]["trust"], "lan", "{found}");
    assert_eq!(
        found["match"]["invoke"]["url"], "http://10.77.0.1:8080/invoke",
        "{found}"
    );

    let status = lab.get_json("/v1/crawl/status");
    assert_eq!(status["mdns"], true, "{status}");
    assert_eq!(status["internet"], false, "{status}");
    let entry = domain(&status, "greenhouse-sensor.local").expect("listed in the status");
    assert_eq!(entry["trust"], "lan");
    assert_eq!(entry["added_by"], "mdns");
    assert_eq!(entry["url"], "http://10.77.0.1:8080/.well-known/oap.json");
    assert_eq!(entry["manifest_id"], GOOD_ID);
    assert_eq!(entry["mdns_name"], "Greenhouse Sensor._oap._tcp.local.");
    assert_eq!(entry["txt_hint"]["state"], "not_checked", "{entry}");

    // Its tool runs through the bridge: the daemon calls the device's
    // invoke URL on 10.77.0.1 (a private address lan trust may reach).
    let chat = lab.request(
        "POST",
        "/api/chat",
        serde_json::json!({
            "model": "qwen3:4b",
            "messages": [{"role": "user", "content": "How warm is the greenhouse right now?"}],
            "stream": false
        })
        .to_string()
        .as_bytes(),
    );
    assert_eq!(chat.status, 200, "{}", String::from_utf8_lossy(&chat.body));
    let chat = chat.json();
    let content = chat["message"]["content"].as_str().unwrap_or_default();
    assert!(content.contains("23.5"), "{chat}\n{}", lab.log());
    drop(runtime);

    // Hostile advertisers: refused with the reason, nothing indexed.
    lab.wait_for("the four hostile advertisements refused", |lab| {
        lab.get_json("/v1/crawl/status")["lan_refused"]
            .as_array()
            .is_some_and(|r| r.len() >= 4)
    });
    let status = lab.get_json("/v1/crawl/status");
    let refused = status["lan_refused"].as_array().unwrap();
    let reason = |name: &str| -> String {
        refused
            .iter()
            .find(|r| r["name"] == format!("{name}._oap._tcp.local."))
            .and_then(|r| r["reason"].as_str())
            .unwrap_or_else(|| panic!("{name} not refused: {status}"))
            .to_string()
    };
    assert_eq!(
        reason("No Slash"),
        "TXT path \"oap.json\": must start with /"
    );
    assert!(reason("Loopback Box").contains("127.0.0.1 is a loopback address"));
    assert!(reason("Metadata Box").contains("169.254.169.254 is a link-local address"));
    assert!(reason("Huge Txt").contains("the cap is 1024"));
    for key in [
        "no-slash.local",
        "loopback-box.local",
        "metadata-box.local",
        "huge-txt.local",
    ] {
        assert!(domain(&status, key).is_none(), "{key} tracked: {status}");
    }
    let log = lab.log();
    assert!(log.contains("LAN service refused"), "{log}");

    // A manifest declaring stdio: fetched, refused, never indexed; after
    // max_failures (2) the target is dropped, the reason kept.
    lab.wait_for("the stdio manifest refused and dropped", |lab| {
        let status = lab.get_json("/v1/crawl/status");
        domain(&status, "sneaky-stdio.local").is_none()
            && status["lan_refused"].as_array().is_some_and(|r| {
                r.iter().any(|r| {
                    r["name"] == "Sneaky Stdio._oap._tcp.local."
                        && r["reason"].as_str().is_some_and(|s| {
                            s.contains("removed after 2 consecutive failures")
                                && s.contains("declares invoke.method stdio")
                        })
                })
            })
    });
    assert!(
        lab.log().contains("declares invoke.method stdio"),
        "{}",
        lab.log()
    );
    let list = lab.get_json("/v1/manifests");
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|m| !m["id"].as_str().unwrap_or("").starts_with("sneaky-stdio")),
        "{list}"
    );

    // Only LAN crawling runs: registering an internet domain is refused.
    let response = lab.request(
        "POST",
        "/v1/manifests/register",
        br#"{"domain": "example.com"}"#,
    );
    assert_eq!(response.status, 404);
    assert!(response.error().contains("crawler.enabled: false"));

    // A reload replaces the browser: still exactly one mDNS thread, and
    // the LAN manifest stays indexed.
    let pid = lab.daemon().pid().to_string();
    run(&["kill", "-HUP", &pid]).unwrap();
    lab.wait_for("the reload", |lab| lab.log().contains("reload done"));
    lab.wait_for("the old mDNS browser gone", |lab| lab.mdns_threads() == 1);
    assert!(manifest(&lab.get_json("/v1/manifests"), GOOD_ID).is_some());

    // The device says goodbye: its manifest leaves the index.
    writeln!(responder, "unregister").unwrap();
    wait_line(&lines, "UNREGISTERED");
    lab.wait_for("the LAN manifest gone after the goodbye", |lab| {
        manifest(&lab.get_json("/v1/manifests"), GOOD_ID).is_none()
    });
    let status = lab.get_json("/v1/crawl/status");
    assert!(
        domain(&status, "greenhouse-sensor.local").is_none(),
        "{status}"
    );
    let found = lab
        .request(
            "POST",
            "/v1/discover",
            br#"{"task": "how warm is it in the greenhouse right now?"}"#,
        )
        .json();
    assert_ne!(found["match"]["id"], GOOD_ID, "{found}");

    // A flooding advertiser (80 services): at most 64 LAN targets are
    // tracked, the rest refused with the reason; the daemon keeps serving.
    writeln!(responder, "flood").unwrap();
    wait_line(&lines, "FLOODING");
    lab.wait_for("the LAN cap to refuse the flood", |lab| {
        lab.get_json("/v1/crawl/status")["lan_refused"]
            .as_array()
            .is_some_and(|r| {
                r.iter().any(|r| {
                    r["reason"]
                        .as_str()
                        .is_some_and(|s| s.contains("already tracking 64 LAN services"))
                })
            })
    });
    let status = lab.get_json("/v1/crawl/status");
    let lan = status["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["trust"] == "lan")
        .count();
    // 64 slots; the stdio target may still hold one until it is dropped.
    assert!((63..=64).contains(&lan), "{lan} LAN targets: {status}");
    assert!(
        status["lan_refused"].as_array().unwrap().len() <= 32,
        "{status}"
    );
    // The accepted ones are indexed (never more than the cap); the daemon
    // kept serving throughout.
    lab.wait_for("the flood's accepted manifests indexed", |lab| {
        let list = lab.get_json("/v1/manifests");
        let lan = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["trust"] == "lan")
            .count();
        assert!(lan <= 64, "{lan} LAN manifests");
        lan >= 63
    });
    assert_eq!(lab.request("GET", "/health", b"").status, 200);
}

/// With `crawler.mdns` off (the default) no browser runs and LAN manifests
/// left by an earlier run with it on leave the index; internet ones stay.
/// Runs in the host namespace: nothing here sends multicast.
#[test]
fn mdns_off_removes_lan_manifests_left_from_before() {
    if std::env::var_os(RESPONDER_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crawled = dir.path().join("data/crawled");
    std::fs::create_dir_all(&crawled).unwrap();
    let envelope = |host: &str, trust: &str, name: &str| {
        serde_json::json!({
            "host": host,
            "url": format!("http://10.0.0.9/{name}.json"),
            "trust": trust,
            "fetched_at_unix": 1,
            "body": serde_json::json!({
                "oap": "1.0",
                "name": name,
                "description": format!("{name} does things"),
                "invoke": {"method": "GET", "url": "http://10.0.0.9/run"}
            }).to_string(),
        })
        .to_string()
    };
    std::fs::write(
        crawled.join("old-hub.local.json"),
        envelope("old-hub.local", "lan", "old-hub"),
    )
    .unwrap();
    std::fs::write(
        crawled.join("example.org.json"),
        envelope("example.org", "internet", "web-thing"),
    )
    .unwrap();
    let state = serde_json::json!({"domains": {"old-hub.local": {
        "domain": "old-hub.local", "added_by": "mdns", "trust": "lan",
        "url": "http://10.0.0.9/old-hub.json", "next_due_ms": 0,
        "mdns_name": "Old Hub._oap._tcp.local."
    }}});
    std::fs::write(dir.path().join("data/crawl-state.json"), state.to_string()).unwrap();

    let daemon = support::daemon()
        .without_model()
        .in_dir(dir)
        .yaml("crawler:\n  watch_interval: 1\n")
        .start();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = daemon.get("/v1/manifests").json();
        if manifest(&list, "old-hub.local/old-hub").is_none() {
            assert!(manifest(&list, "example.org/web-thing").is_some(), "{list}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "LAN manifest still indexed:\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!crawled.join("old-hub.local.json").exists());
    assert!(crawled.join("example.org.json").exists());
    let state = std::fs::read_to_string(daemon.dir.path().join("data/crawl-state.json")).unwrap();
    assert!(!state.contains("old-hub"), "{state}");
    let status = daemon.get("/v1/crawl/status").json();
    assert_eq!(status["enabled"], false, "{status}");
    assert_eq!(status["mdns"], false, "{status}");
    assert!(!daemon.log_text().contains("mDNS) browsing"));
}
