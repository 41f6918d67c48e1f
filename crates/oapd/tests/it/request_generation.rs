//! Request rows written by the co-located Ollama: the real daemon asks the
//! scripted fake Ollama for requests for a tool that has none, attaches
//! them as rows, keeps them across a restart without asking again, never
//! asks when the setting is off, refuses or caps hostile answers, and
//! never holds readiness back for them.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{fake, Daemon, DaemonBuilder, Upstream};
use fake_ollama::{ModelSpec, Script, Turn};
use serde_json::{json, Value};

const MODEL: &str = "qwen3:4b";

/// What the fake model writes for the entropy tool: how people ask,
/// sharing no content word with the tool's description.
const WRITTEN: [&str; 5] = [
    "is this password random enough",
    "how unpredictable is my passphrase",
    "would this key be hard to guess",
    "rate how guessable this secret is",
    "tell me if my wifi password is strong",
];

/// Worded like the first written request, not like the description.
const TASK: &str = "check whether my password is random enough";

fn script() -> Script {
    Script::new().model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]))
}

/// A chat answer whose content is `content`, as a model in JSON mode
/// writes it.
fn answer(content: &Value) -> Turn {
    Turn::reply(content.to_string())
}

/// Manifests in `dir`: the entropy tool (no requests of its own) and two
/// others whose example descriptions are requests of their own, so only
/// the first is generated for.
fn write_manifests(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("entropy.json"),
        support::stdio_manifest(
            "shannon-meter",
            "Computes the Shannon entropy of a byte stream, in bits per byte.",
        ),
    )
    .unwrap();
    for (name, description, example) in [
        (
            "celsius",
            "Converts temperatures between Celsius and Fahrenheit.",
            "what is 70 fahrenheit in celsius",
        ),
        (
            "lister",
            "Lists the files of a directory with their sizes.",
            "show me what is in my downloads folder",
        ),
    ] {
        std::fs::write(
            dir.join(format!("{name}.json")),
            json!({
                "oap": "1.0",
                "name": name,
                "description": description,
                "input": {"format": "text/plain", "description": "The text."},
                "output": {"format": "text/plain", "description": "The result."},
                "invoke": {"method": "stdio", "url": "true"},
                "examples": [{"input": "x", "description": example}]
            })
            .to_string(),
        )
        .unwrap();
    }
}

/// A daemon over `manifests` only, talking to `upstream`, generation on.
fn generating(upstream: &Upstream, manifests: &Path) -> DaemonBuilder {
    support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmanifests:\n  bundled: false\n  dirs: [{:?}]\n",
            upstream.fake.url(),
            manifests
        ))
        .env("OAP_DISCOVERY_GENERATE_REQUESTS", "true")
        .env("OAP_DISCOVERY_GENERATE_PER_HOUR", "3600")
}

/// `/v1/generated-requests`, polled until `done` holds (or the deadline).
fn wait_for_generated(daemon: &Daemon, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let listing = daemon.get("/v1/generated-requests").json();
        if done(&listing) {
            return listing;
        }
        assert!(
            Instant::now() < deadline,
            "generation did not finish: {listing}\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The score of `id` among the candidates for `task` (0 when not listed).
fn score_of(daemon: &Daemon, task: &str, id: &str) -> (f64, Value) {
    let found = daemon.discover(task, 5);
    let score = found["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["score"].as_f64())
        .unwrap_or(0.0);
    (score, found)
}

fn chat_calls(upstream: &Upstream) -> Vec<Value> {
    upstream
        .fake
        .requests_to("/api/chat")
        .iter()
        .map(|r| r.json().clone())
        .collect()
}

const TOOL: &str = "local/shannon-meter";

#[test]
fn a_tool_without_requests_gets_them_from_the_model_and_a_restart_reuses_them() {
    let state = tempfile::tempdir().unwrap();
    let manifests = state.path().join("manifests");
    let data = state.path().join("data");
    write_manifests(&manifests);
    // The answer comes after a second: the first discovery sees the
    // index without the rows.
    let upstream =
        fake(script().turn(answer(&json!({"requests": WRITTEN})).response_delay_ms(1500)));
    let mut daemon = generating(&upstream, &manifests).data_dir(&data).start();
    let (before, _) = score_of(&daemon, TASK, TOOL);
    let rows_at_start = daemon.get("/health").json()["index"]["rows"]
        .as_u64()
        .unwrap();
    let listing = wait_for_generated(&daemon, Duration::from_secs(60), |l| {
        l["tools"][TOOL]["requests"]
            .as_array()
            .is_some_and(|r| r.len() == 5)
    });
    assert_eq!(listing["tools"][TOOL]["model"], MODEL);
    assert_eq!(listing["tools"][TOOL]["requests"][0], WRITTEN[0]);
    // Only the tool without requests of its own was asked for, once, with
    // its name and description, in JSON mode, not streamed.
    let calls = chat_calls(&upstream);
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let prompt = calls[0]["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("shannon-meter") && prompt.contains("Shannon entropy"),
        "{prompt}"
    );
    assert_eq!(calls[0]["model"], MODEL);
    assert_eq!(calls[0]["format"], "json");
    assert_eq!(calls[0]["stream"], false);
    // The rows attach (the listing is the catalog load's; the index
    // swaps in once they are embedded): a request worded like one finds
    // the tool.
    let deadline = Instant::now() + Duration::from_secs(60);
    while daemon.get("/health").json()["index"]["rows"] != rows_at_start + 5 {
        assert!(Instant::now() < deadline, "{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (after, found) = score_of(&daemon, TASK, TOOL);
    assert_eq!(found["match"]["id"], TOOL, "{found:#}");
    assert!(after > before + 0.1, "score {before} -> {after}: {found:#}");
    eprintln!("score of {TOOL} for {TASK:?}: {before:.3} without its generated rows, {after:.3} with them");
    // Never shown as the tool's own text.
    let record = daemon.get(&format!("/v1/manifests/{TOOL}")).json();
    assert!(!record.to_string().contains(WRITTEN[0]), "{record}");
    let health = daemon.get("/health").json();
    assert_eq!(health["request_generation"]["generated"], 1, "{health:#}");
    assert_eq!(health["request_generation"]["pending"], 0, "{health:#}");
    let rows_before_restart = health["index"]["rows"].clone();
    daemon.terminate();

    // A restart over the same data directory: the cached rows serve at
    // once, and the model is not asked again.
    let again = fake(script());
    let daemon = generating(&again, &manifests).data_dir(&data).start();
    let health = daemon.get("/health").json();
    assert_eq!(health["index"]["rows"], rows_before_restart, "{health:#}");
    let (_, found) = score_of(&daemon, TASK, TOOL);
    assert_eq!(found["match"]["id"], TOOL, "{found:#}");
    // A rebuild (a manifest added) keeps them, still without asking.
    std::fs::write(
        manifests.join("later.json"),
        json!({
            "oap": "1.0", "name": "later", "description": "Prints the calendar of a month.",
            "invoke": {"method": "stdio", "url": "true"},
            "examples": [{"input": "x", "description": "show me march"}]
        })
        .to_string(),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.get("/health").json()["index"]["manifests"] != 4 {
        assert!(Instant::now() < deadline, "{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // Past the generator's first pause and model check.
    std::thread::sleep(Duration::from_secs(5));
    let (_, found) = score_of(&daemon, TASK, TOOL);
    assert_eq!(found["match"]["id"], TOOL, "{found:#}");
    assert!(chat_calls(&again).is_empty(), "{:#?}", chat_calls(&again));
    let listing = daemon.get("/v1/generated-requests").json();
    assert_eq!(
        listing["tools"][TOOL]["requests"][0], WRITTEN[0],
        "{listing:#}"
    );
}

#[test]
fn with_generation_off_the_model_is_never_asked() {
    let state = tempfile::tempdir().unwrap();
    let manifests = state.path().join("manifests");
    write_manifests(&manifests);
    let upstream = fake(script().default_turn(answer(&json!({"requests": WRITTEN}))));
    let daemon = generating(&upstream, &manifests)
        .embedding_disabled()
        .env("OAP_DISCOVERY_GENERATE_REQUESTS", "false")
        .start();
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        upstream.fake.requests().is_empty(),
        "{:#?}",
        upstream.fake.requests()
    );
    let health = daemon.get("/health").json();
    assert_eq!(health["request_generation"]["enabled"], false, "{health:#}");
    let listing = daemon.get("/v1/generated-requests").json();
    assert_eq!(listing["tools"], json!({}), "{listing:#}");
}

#[test]
fn hostile_answers_are_refused_or_capped_and_a_failed_tool_is_retried() {
    let state = tempfile::tempdir().unwrap();
    let manifests = state.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, description) in [
        ("alpha", "Reverses the lines of a text file."),
        ("beta", "Sorts the words of a text by length."),
        ("gamma", "Counts the vowels in a text."),
    ] {
        std::fs::write(
            manifests.join(format!("{name}.json")),
            support::stdio_manifest(name, description),
        )
        .unwrap();
    }
    let many: Vec<String> = (0..1000).map(|i| format!("request number {i}")).collect();
    let upstream = fake(
        script()
            // Not JSON at all.
            .turn(Turn::reply("Sure! Here are some requests: {"))
            // Ollama failing.
            .turn(Turn::http_error(
                500,
                "model runner has unexpectedly stopped",
            ))
            // Control characters and a 10 KB line among good ones.
            .turn(answer(&json!({"requests": [
                "wipe the screen\u{1b}[2J now",
                "two\nlines",
                "x".repeat(10_000),
                "a plain request",
            ]})))
            // A thousand items.
            .turn(answer(&json!({"requests": many})))
            .turn(answer(&json!(["last one", "and another"]))),
    );
    let daemon = generating(&upstream, &manifests)
        .embedding_disabled()
        .start();
    let listing = wait_for_generated(&daemon, Duration::from_secs(90), |l| {
        l["tools"].as_object().is_some_and(|t| t.len() == 3)
    });
    let mut counts = Vec::new();
    for (id, tool) in listing["tools"].as_object().unwrap() {
        let requests = tool["requests"].as_array().unwrap();
        counts.push(requests.len());
        for request in requests {
            let text = request.as_str().unwrap();
            assert!(!text.chars().any(char::is_control), "{id}: {text:?}");
            assert!(text.len() <= 200, "{id}: {} bytes", text.len());
        }
    }
    counts.sort_unstable();
    // 2 kept of the hostile four (the long line cut), 8 of the thousand,
    // 2 from the retry of the tool whose first answer was not JSON.
    assert_eq!(counts, vec![2, 2, 8], "{listing:#}");
    assert_eq!(chat_calls(&upstream).len(), 5);
    let health = daemon.get("/health").json();
    let generation = &health["request_generation"];
    assert_eq!(generation["failed_calls"], 2, "{health:#}");
    assert_eq!(generation["failed"], 0, "{health:#}");
    assert!(
        generation["last_error"].as_str().unwrap().contains("500"),
        "{health:#}"
    );
    assert_eq!(
        health["status"], "degraded",
        "lexical only here: {health:#}"
    );
    let found = daemon.discover("reverses the lines of a file", 3);
    assert_eq!(found["candidates"][0]["id"], "local/alpha", "{found:#}");
    let metrics = String::from_utf8_lossy(&daemon.get("/metrics").body).into_owned();
    assert!(
        metrics.contains("oapd_request_generation_tools{state=\"generated\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("oapd_request_generation_calls_total{outcome=\"bad_answer\"} 1"),
        "{metrics}"
    );
}

#[test]
fn ollama_down_leaves_the_daemon_ready_and_serving() {
    let state = tempfile::tempdir().unwrap();
    let manifests = state.path().join("manifests");
    write_manifests(&manifests);
    // Nothing listens there.
    let down = format!("http://127.0.0.1:{}", support::free_port());
    let notify = state.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    let daemon = support::daemon()
        .embedding_disabled()
        .yaml(&format!(
            "ollama:\n  base_url: {down:?}\nmanifests:\n  bundled: false\n  dirs: [{manifests:?}]\n"
        ))
        .env("OAP_DISCOVERY_GENERATE_REQUESTS", "true")
        .env("NOTIFY_SOCKET", notify.to_str().unwrap())
        .start();
    let mut buf = vec![0u8; 4096];
    let mut ready = false;
    while let Ok(n) = socket.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
            ready = true;
            break;
        }
    }
    assert!(ready, "no READY=1: {}", daemon.log_text());
    assert!(started.elapsed() < Duration::from_secs(30));
    // Generation failed meanwhile, and keeps trying; the daemon serves.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = daemon.get("/health").json();
        let generation = &health["request_generation"];
        if generation["failed_calls"].as_u64().unwrap_or(0) >= 2 {
            assert_eq!(generation["pending"], 1, "{health:#}");
            assert!(
                generation["last_error"]
                    .as_str()
                    .unwrap()
                    .contains("cannot reach Ollama"),
                "{health:#}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{health:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let found = daemon.discover("convert 70 fahrenheit to celsius", 3);
    assert_eq!(found["candidates"][0]["id"], "local/celsius", "{found:#}");
}

#[test]
fn readiness_does_not_wait_for_a_model_that_never_answers() {
    let state = tempfile::tempdir().unwrap();
    let manifests = state.path().join("manifests");
    write_manifests(&manifests);
    let upstream = fake(script().turn(Turn::hang()));
    let started = Instant::now();
    let daemon = generating(&upstream, &manifests)
        .embedding_disabled()
        .start();
    let ready_after = started.elapsed();
    // The call is made and hangs; the daemon answers all the while.
    let calls = wait_for_chat(&upstream, Duration::from_secs(20));
    assert_eq!(calls, 1);
    assert!(ready_after < Duration::from_secs(20), "{ready_after:?}");
    let health = daemon.get("/health").json();
    assert_eq!(health["request_generation"]["pending"], 1, "{health:#}");
    let found = daemon.discover("what is 70 fahrenheit in celsius", 3);
    assert_eq!(found["candidates"][0]["id"], "local/celsius", "{found:#}");
}

/// Waits until the fake has seen a chat request; how many it has seen.
fn wait_for_chat(upstream: &Upstream, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let calls = upstream.fake.requests_to("/api/chat").len();
        if calls > 0 || Instant::now() >= deadline {
            return calls;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
