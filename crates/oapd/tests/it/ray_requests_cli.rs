//! `oapd requests generate` with the real binary against the scripted fake
//! Ollama: rows for the tools without requests of their own, in the
//! daemon's cache format, attached by `oapd index`; a second run resumes
//! and asks nothing; a model the endpoint lacks, or no manifests, is
//! refused with a message naming it. An endpoint that fails mid-run (an
//! HTTP 500, a dropped connection) stops the run with a non-zero exit
//! naming the tool and the reason, keeps every row written before it, and
//! a rerun asks only for the rest; a tool whose answers are malformed is
//! given up and counted, and the run goes on.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support;
use fake_ollama::{ModelSpec, Script, Turn};
use serde_json::{json, Value};

const MODEL: &str = "qwen3:4b";

/// What the fake model writes for every tool.
const WRITTEN: [&str; 3] = [
    "is this password random enough",
    "how unpredictable is my passphrase",
    "tell me if my wifi password is strong",
];

fn script() -> Script {
    Script::new()
        .model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]))
        .default_turn(Turn::reply(json!({ "requests": WRITTEN }).to_string()))
}

/// Two tools without requests of their own and one with an example
/// request (which gets none written).
fn write_manifests(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, description) in [
        (
            "shannon-meter",
            "Computes the Shannon entropy of a byte stream.",
        ),
        ("word-counter", "Counts the words of a text."),
    ] {
        std::fs::write(
            dir.join(format!("{name}.json")),
            support::stdio_manifest(name, description),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("celsius.json"),
        json!({
            "oap": "1.0",
            "name": "celsius",
            "description": "Converts temperatures between Celsius and Fahrenheit.",
            "input": {"format": "text/plain", "description": "The text."},
            "output": {"format": "text/plain", "description": "The result."},
            "invoke": {"method": "stdio", "url": "true"},
            "examples": [{"input": "x", "description": "what is 70 fahrenheit in celsius"}]
        })
        .to_string(),
    )
    .unwrap();
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn generate(manifests: &Path, out: &Path, ollama: &str, model: &str) -> Output {
    support::oapd()
        .args(["requests", "generate", "--manifests"])
        .arg(manifests)
        .arg("--out")
        .arg(out)
        .args(["--ollama", ollama, "--model", model, "--concurrency", "2"])
        .output()
        .unwrap()
}

/// `oapd index` over `manifests` with `data_dir`: its summary line.
fn index(manifests: &Path, data_dir: &Path) -> String {
    let output = support::oapd()
        .args(["index"])
        .env("OAP_INDEX_DATA_DIR", data_dir)
        .env("OAP_MANIFESTS_BUNDLED", "false")
        .env("OAP_MANIFESTS_DIRS", manifests)
        .env("OAP_EMBEDDING_MODEL_DIR", support::require_model())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn rows_of(summary: &str) -> usize {
    summary
        .split(" rows")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no row count in {summary:?}"))
}

fn chats(upstream: &support::Upstream) -> usize {
    upstream
        .fake
        .requests()
        .iter()
        .filter(|r| r.path == "/api/chat")
        .count()
}

#[test]
fn rows_are_written_for_tools_without_requests_attached_by_index_and_not_asked_twice() {
    let upstream = support::fake(script());
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    write_manifests(&manifests);
    let data: PathBuf = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let without_rows = rows_of(&index(&manifests, &data));
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::create_dir_all(&data).unwrap();

    let out = data.join("generated-requests.json");
    let ran = generate(&manifests, &out, &upstream.fake.url(), MODEL);
    assert!(ran.status.success(), "{}", text(&ran));
    assert!(
        text(&ran).contains(
            "3 tools: 1 with requests of their own, 0 already written, 2 written now, 0 given up"
        ),
        "{}",
        text(&ran)
    );
    assert_eq!(chats(&upstream), 2);
    let file: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(file["format"], 1);
    let entries = file["entries"].as_array().unwrap();
    let ids: Vec<&str> = entries.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["local/shannon-meter", "local/word-counter"]);
    for entry in entries {
        assert!(
            entry["model"].as_str().unwrap().starts_with(MODEL),
            "{entry}"
        );
        assert_eq!(entry["requests"], json!(WRITTEN));
        assert_eq!(entry["content_hash"].as_str().unwrap().len(), 64, "{entry}");
    }

    // The index in the same data dir attaches each written request as a row.
    let with_rows = rows_of(&index(&manifests, &data));
    assert_eq!(with_rows, without_rows + 2 * WRITTEN.len());

    // A second run finds everything written and asks nothing.
    let again = generate(&manifests, &out, &upstream.fake.url(), MODEL);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("2 already written, 0 written now"),
        "{}",
        text(&again)
    );
    assert_eq!(chats(&upstream), 2);
}

#[test]
fn a_model_the_endpoint_lacks_or_no_manifests_is_refused_by_name() {
    let upstream = support::fake(script());
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    write_manifests(&manifests);
    let out = dir.path().join("rows.json");

    let missing = generate(&manifests, &out, &upstream.fake.url(), "phi4");
    assert!(!missing.status.success());
    assert!(text(&missing).contains("phi4"), "{}", text(&missing));
    assert!(!out.exists());

    let nothing = support::oapd()
        .args(["requests", "generate", "--out"])
        .arg(&out)
        .args(["--ollama", &upstream.fake.url(), "--model", MODEL])
        .output()
        .unwrap();
    assert!(!nothing.status.success());
    assert!(text(&nothing).contains("--manifests"), "{}", text(&nothing));

    let not_a_dir = generate(
        &dir.path().join("absent"),
        &out,
        &upstream.fake.url(),
        MODEL,
    );
    assert!(!not_a_dir.status.success());
    assert!(
        text(&not_a_dir).contains("absent is not a directory"),
        "{}",
        text(&not_a_dir)
    );
    assert_eq!(chats(&upstream), 0);
}

/// Four tools without requests of their own, in the catalog's order.
const FOUR: [&str; 4] = ["alpha-tool", "bravo-tool", "charlie-tool", "delta-tool"];

fn write_four(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for name in FOUR {
        std::fs::write(
            dir.join(format!("{name}.json")),
            support::stdio_manifest(name, &format!("The {name} does one thing well.")),
        )
        .unwrap();
    }
}

fn good() -> Turn {
    Turn::reply(json!({ "requests": WRITTEN }).to_string())
}

/// A fake whose first `ok` chat turns answer well and the next three
/// (every try the command gives one tool) are `failing`; no turn after.
fn failing_after(ok: usize, failing: Turn) -> support::Upstream {
    let mut script =
        Script::new().model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]));
    for _ in 0..ok {
        script = script.turn(good());
    }
    for _ in 0..3 {
        script = script.turn(failing.clone());
    }
    support::fake(script)
}

fn generate_one_at_a_time(manifests: &Path, out: &Path, ollama: &str) -> Output {
    support::oapd()
        .args(["requests", "generate", "--manifests"])
        .arg(manifests)
        .arg("--out")
        .arg(out)
        .args(["--ollama", ollama, "--model", MODEL, "--concurrency", "1"])
        .output()
        .unwrap()
}

fn written_ids(out: &Path) -> Vec<String> {
    let file: Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    file["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_endpoint_failing_mid_run_stops_it_naming_the_tool_keeps_the_rows_and_a_rerun_resumes() {
    for (ok, failing, reason) in [
        (2, Turn::http_error(500, "model runner crashed"), "500"),
        (1, good().drop_after(0), "cannot reach Ollama"),
    ] {
        let upstream = failing_after(ok, failing);
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("manifests");
        write_four(&manifests);
        let out = dir.path().join("rows.json");

        let ran = generate_one_at_a_time(&manifests, &out, &upstream.fake.url());
        let said = text(&ran);
        assert!(!ran.status.success(), "{said}");
        let failed = format!("local/{}", FOUR[ok]);
        assert!(said.contains(&failed) && said.contains(reason), "{said}");
        assert!(said.contains(&format!("{ok} written now")), "{said}");
        assert!(
            said.contains(&format!(
                "stopped with {} of 4 tools left unwritten",
                4 - ok
            )),
            "{said}"
        );
        assert!(said.contains("a rerun continues"), "{said}");
        // What was written before the failure is in the file.
        let expected: Vec<String> = FOUR[..ok].iter().map(|n| format!("local/{n}")).collect();
        assert_eq!(written_ids(&out), expected);
        // Three tries for the failed tool, none for the ones after it.
        assert_eq!(chats(&upstream), ok + 3);

        // The endpoint is back: the rerun asks only for the rest.
        let healthy = support::fake(script());
        let again = generate_one_at_a_time(&manifests, &out, &healthy.fake.url());
        assert!(again.status.success(), "{}", text(&again));
        assert!(
            text(&again).contains(&format!(
                "{ok} already written, {} written now, 0 given up",
                4 - ok
            )),
            "{}",
            text(&again)
        );
        assert_eq!(chats(&healthy), 4 - ok);
        assert_eq!(written_ids(&out).len(), 4);
    }
}

#[test]
fn a_tool_with_malformed_answers_is_given_up_and_counted_and_the_run_goes_on() {
    let script = Script::new()
        .model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]))
        .turn(good())
        .turn(Turn::reply("<html>not the json asked for</html>"))
        .turn(Turn::reply("<html>not the json asked for</html>"))
        .turn(Turn::reply("<html>not the json asked for</html>"))
        .default_turn(good());
    let upstream = support::fake(script);
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    write_four(&manifests);
    let out = dir.path().join("rows.json");

    let ran = generate_one_at_a_time(&manifests, &out, &upstream.fake.url());
    assert!(ran.status.success(), "{}", text(&ran));
    assert!(
        text(&ran).contains("3 written now, 1 given up"),
        "{}",
        text(&ran)
    );
    assert_eq!(
        written_ids(&out),
        ["local/alpha-tool", "local/charlie-tool", "local/delta-tool"]
    );
}
