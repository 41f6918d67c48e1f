//! `tools.max_parallel` bounds how many of one turn's tool calls run at
//! once: the scripted model calls a slow local tool twice in one turn and
//! the test reads, from the results the model got back, when each call
//! started and ended. Overlap of the two intervals, not their order, is
//! what is asserted.

use crate::support;

use crate::support::fake;
use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::json;

/// Prints its start time, sleeps 700 ms, prints its end time (seconds).
const TIMED_SLEEP: &str =
    "-MTime::HiRes=time,sleep -e 'printf qq(%.3f\\n), time; sleep 0.7; printf qq(%.3f\\n), time'";

/// The (start, end) of each of two calls made in one turn under `yaml`.
fn intervals(yaml: &str) -> Vec<(f64, f64)> {
    let call = json!({"args": TIMED_SLEEP});
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
            .turn(Turn::native_tool_calls(vec![
                ("oap_perl", call.clone()),
                ("oap_perl", call),
            ]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let dir = support::perl_manifest_dir();
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmanifests:\n  dirs: [{:?}]\n{yaml}",
            upstream.fake.url(),
            dir.path()
        ))
        .start();
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false, "oap_top_k": 20,
                "messages": [{"role": "user", "content": "run a perl program"}]})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", response.error());
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2, "one tool round, then the answer");
    let results: Vec<(f64, f64)> = sent[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let text = m["content"].as_str().unwrap_or_default();
            let times: Vec<f64> = text
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect();
            assert_eq!(times.len(), 2, "a start and an end time: {text:?}");
            (times[0], times[1])
        })
        .collect();
    assert_eq!(results.len(), 2, "{}", sent[1]);
    results
}

fn overlap(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0.max(b.0) < a.1.min(b.1)
}

#[test]
fn max_parallel_one_runs_a_turns_calls_one_after_the_other() {
    let runs = intervals("tools:\n  max_parallel: 1\n");
    assert!(!overlap(runs[0], runs[1]), "the calls overlapped: {runs:?}");
}

#[test]
fn max_parallel_two_runs_them_together() {
    let runs = intervals("tools:\n  max_parallel: 2\n");
    assert!(
        overlap(runs[0], runs[1]),
        "the calls did not overlap: {runs:?}"
    );
}
