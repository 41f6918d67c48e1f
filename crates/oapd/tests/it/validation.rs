//! `oapd validate-model` end to end: the real binary against the scripted
//! fake Ollama playing good and bad models, the store it writes, and the
//! daemon's `only_validated_models` gate and `/v1/validation` endpoints.

use crate::support;

use std::process::Output;

use crate::support::fake;
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn weather(city: &str, unit: &str) -> Turn {
    Turn::tool_call("get_weather", json!({"city": city, "unit": unit}))
}

/// A model that answers every check of the full suite correctly.
fn good_turns(model: &str) -> Vec<Turn> {
    vec![
        weather("Paris", "celsius"),
        weather("Paris", "celsius"),
        Turn::reply("3 boxes of 14 make 42; 42 - 5 = 37"),
        Turn::tool_call("set_timer", json!({"minutes": 10})),
        Turn::reply("Paris."),
        Turn::tool_call(
            "create_reminder",
            json!({"text": "call mum", "minutes": 15, "urgent": true, "tags": ["family", "phone"]}),
        ),
    ]
    .into_iter()
    .map(|t| t.for_model(model))
    .collect()
}

fn script_with(models: &[&str], turns: Vec<Turn>) -> Script {
    let mut script = Script::new();
    for model in models {
        script = script.model(ModelSpec::new(*model));
    }
    for turn in turns {
        script = script.turn(turn);
    }
    script
}

/// Runs `oapd validate-model` with a config pointing at `base_url` and
/// keeping its state in `data_dir`.
fn validate(base_url: &str, data_dir: &std::path::Path, args: &[&str]) -> Output {
    let config = data_dir.parent().unwrap().join("validate.yaml");
    std::fs::write(
        &config,
        format!("ollama:\n  base_url: {base_url:?}\nindex:\n  data_dir: {data_dir:?}\n"),
    )
    .unwrap();
    support::oapd()
        .arg("--config")
        .arg(&config)
        .arg("validate-model")
        .args(args)
        .output()
        .expect("run oapd validate-model")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn store(data_dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(data_dir.join("validation.json")).unwrap()).unwrap()
}

#[test]
fn a_good_model_passes_is_recorded_and_then_gets_tools_while_others_pass_through() {
    let mut turns = good_turns("good");
    // The bridge requests after validation: the validated model echoes the
    // tools it was offered, the unvalidated one just answers.
    turns.push(Turn::echo(Echo::ToolNames).for_model("good"));
    turns.push(Turn::reply("no tools here").for_model("other"));
    let upstream = fake(script_with(&["good", "other"], turns));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let output = validate(
        &upstream.fake.url(),
        &data,
        &["--model", "good", "--full-suite"],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    for check in [
        "tool_call ",
        "tool_call_stream",
        "reasoning",
        "pick_tool",
        "no_tool",
        "argument_types",
    ] {
        assert!(report.contains(&format!("PASS {check}")), "{report}");
    }
    assert!(report.contains("PASS: 6 of 6 checks passed"), "{report}");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 6);
    assert_eq!(sent[0]["stream"], false);
    assert_eq!(sent[1]["stream"], true);
    assert!(sent[2].get("tools").is_none(), "reasoning offers no tools");

    let stored = store(&data);
    let record = &stored["records"][0];
    assert_eq!(record["model"], "good:latest");
    assert_eq!(record["passed"], true);
    assert_eq!(record["full_suite"], true);
    assert!(record["digest"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(record["checks"].as_array().unwrap().len(), 6);
    assert!(record["checks"][0]["ms"].is_u64());
    assert_eq!(record["oapd_version"], env!("CARGO_PKG_VERSION"));

    // The daemon, on the same state directory, with the gate on.
    let daemon = support::daemon()
        .in_dir(dir)
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\ntool_bridge:\n  only_validated_models: true\n",
            upstream.fake.url()
        ))
        .start();
    let task = "count the words in this text: one two three";
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "good", "stream": false,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", daemon.log_text());
    let answer = response.json();
    assert!(
        answer["message"]["content"]
            .as_str()
            .unwrap()
            .contains("oap_wc"),
        "the validated model was offered oapd's tools: {answer}"
    );
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "other", "stream": false,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["message"]["content"], "no tools here");
    let sent = upstream.fake.chat_requests();
    let last = sent.last().unwrap();
    assert_eq!(last["model"], "other");
    assert!(
        last.get("tools").is_none(),
        "the unvalidated model's request passed through untouched: {last}"
    );

    // The store over HTTP.
    let listed = daemon.get("/v1/validation").json();
    assert_eq!(listed["only_validated_models"], true);
    assert_eq!(listed["records"][0]["model"], "good:latest");
    let one = daemon.get("/v1/validation/good:latest");
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["passed"], true);
    assert_eq!(daemon.get("/v1/validation/good").json()["passed"], true);
    let missing = daemon.get("/v1/validation/other");
    assert_eq!(missing.status, 404);
    assert!(missing.error().contains("validate-model"));
    let wrong_method = daemon.request("DELETE", "/v1/validation", &[], b"");
    assert_eq!(wrong_method.status, 405);
}

#[test]
fn without_the_gate_every_model_gets_tools() {
    let upstream = fake(script_with(
        &["other"],
        vec![Turn::echo(Echo::ToolNames).for_model("other")],
    ));
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "other", "stream": false,
                "messages": [{"role": "user", "content": "count the words in: a b c"}]})
        .to_string(),
    );
    assert!(response.json()["message"]["content"]
        .as_str()
        .unwrap()
        .contains("oap_wc"));
}

/// Runs the basic suite against a model scripted with `turns` and returns
/// (exit code, report, stored record).
fn run_bad(turns: Vec<Turn>, args: &[&str]) -> (Option<i32>, String, Value) {
    let turns = turns.into_iter().map(|t| t.for_model("bad")).collect();
    let upstream = fake(script_with(&["bad"], turns));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut all = vec!["--model", "bad"];
    all.extend_from_slice(args);
    let output = validate(&upstream.fake.url(), &data, &all);
    let report = text(&output);
    let stored = store(&data);
    (output.status.code(), report, stored["records"][0].clone())
}

fn check<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {record}"))
}

#[test]
fn a_model_that_never_calls_tools_fails() {
    let (code, report, record) = run_bad(
        vec![
            Turn::reply("It is sunny in Paris."),
            Turn::reply("It is sunny in Paris."),
            Turn::reply("37"),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("FAIL tool_call "), "{report}");
    assert!(report.contains("PASS reasoning"), "{report}");
    assert!(report.contains("FAIL: 1 of 3 checks passed"), "{report}");
    assert_eq!(record["passed"], false);
    assert!(check(&record, "tool_call")["detail"]
        .as_str()
        .unwrap()
        .contains("no tool call"));
}

#[test]
fn wrong_arguments_fail_with_the_argument_named() {
    let (code, report, record) = run_bad(
        vec![
            weather("Paris", "fahrenheit"),
            Turn::tool_call("get_weather", json!({"location": "Paris"})),
            Turn::reply("37"),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{report}");
    assert!(check(&record, "tool_call")["detail"]
        .as_str()
        .unwrap()
        .contains("unit"));
    assert!(check(&record, "tool_call_stream")["detail"]
        .as_str()
        .unwrap()
        .contains("city"));
}

#[test]
fn a_wrong_reasoning_answer_fails() {
    let (code, report, record) = run_bad(
        vec![
            weather("Paris", "celsius"),
            weather("Paris", "celsius"),
            Turn::reply("That makes 42 apples."),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(check(&record, "tool_call")["passed"], true);
    assert_eq!(check(&record, "reasoning")["passed"], false);
    assert!(report.contains("expected 37"), "{report}");
}

#[test]
fn misbehaviour_only_when_streaming_is_caught() {
    // Non-streaming is fine; streamed, the call's arguments arrive as a
    // broken JSON string split over chunks.
    let (code, report, record) = run_bad(
        vec![
            weather("Paris", "celsius"),
            Turn::chunks(vec![
                Chunk::raw_tool_calls(vec![
                    json!({"function": {"index": 0, "name": "get_weather"}}),
                ]),
                Chunk::raw_tool_calls(vec![
                    json!({"function": {"index": 0, "arguments": "{\"city\": \"Par"}}),
                ]),
            ]),
            Turn::reply("37"),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(check(&record, "tool_call")["passed"], true);
    let stream = check(&record, "tool_call_stream");
    assert_eq!(stream["passed"], false);
    assert!(
        stream["detail"].as_str().unwrap().contains("unparsable"),
        "{stream}"
    );
}

#[test]
fn a_hung_model_fails_within_the_check_timeout_and_a_dropped_stream_is_named() {
    let (code, report, record) = run_bad(
        vec![
            Turn::hang(),
            weather("Paris", "celsius").drop_after(0),
            Turn::reply("37").error_after(0, "model runner crashed"),
        ],
        &["--timeout", "2"],
    );
    assert_eq!(code, Some(1), "{report}");
    assert!(check(&record, "tool_call")["detail"]
        .as_str()
        .unwrap()
        .contains("within 2s"));
    assert_eq!(check(&record, "tool_call_stream")["passed"], false);
    assert!(check(&record, "reasoning")["detail"]
        .as_str()
        .unwrap()
        .contains("model runner crashed"));
}

#[test]
fn an_unreachable_ollama_or_unknown_model_gives_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A loopback port with nothing listening.
    let port = support::free_port();
    let output = validate(
        &format!("http://127.0.0.1:{port}"),
        &data,
        &["--model", "m"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("cannot reach Ollama"),
        "{}",
        text(&output)
    );
    assert!(!data.join("validation.json").exists(), "nothing recorded");

    let upstream = fake(script_with(&["installed"], Vec::new()));
    let output = validate(&upstream.fake.url(), &data, &["--model", "missing"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("not installed"), "{}", text(&output));
    assert!(!data.join("validation.json").exists());

    let output = validate(
        &upstream.fake.url(),
        &data,
        &["--model", "m", "--timeout", "0"],
    );
    assert_eq!(output.status.code(), Some(2), "a zero timeout is refused");
}

#[test]
fn a_stored_failed_verdict_keeps_tools_away_under_the_gate() {
    // The model fails validation; afterwards it echoes the tools it is
    // offered, so an injected tool would show in its answer.
    let mut turns: Vec<Turn> = vec![
        Turn::reply("It is sunny in Paris."),
        Turn::reply("It is sunny in Paris."),
        Turn::reply("37"),
    ];
    turns.push(Turn::echo(Echo::ToolNames));
    let turns = turns.into_iter().map(|t| t.for_model("bad")).collect();
    let upstream = fake(script_with(&["bad"], turns));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = validate(&upstream.fake.url(), &data, &["--model", "bad"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert_eq!(store(&data)["records"][0]["passed"], false);

    let daemon = support::daemon()
        .in_dir(dir)
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\ntool_bridge:\n  only_validated_models: true\n",
            upstream.fake.url()
        ))
        .start();
    assert_eq!(daemon.get("/v1/validation/bad").json()["passed"], false);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "bad", "stream": false,
                "messages": [{"role": "user", "content": "count the words in this text: one two three"}]})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", daemon.log_text());
    assert_eq!(
        response.json()["message"]["content"],
        "",
        "no tools were offered to the failed model"
    );
    let sent = upstream.fake.chat_requests();
    let last = sent.last().unwrap();
    assert_eq!(last["model"], "bad");
    assert!(
        last.get("tools").is_none(),
        "the request passed through untouched: {last}"
    );
}
