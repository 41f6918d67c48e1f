//! `previous_response_id` on `/v1/responses`, driven by the official
//! `openai` Python client (installed in target/pyclients by `cargo xtask
//! test`) against the real daemon and the scripted fake Ollama: a
//! continued response has the stored conversation prepended, streamed or
//! not; `store: false` keeps nothing; an unknown, pushed-out or another
//! client's id is a 404 in OpenAI's error shape, which the client raises
//! as `NotFoundError`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{self, fake, Daemon, Upstream};
use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv python with the `openai` package; `None` (the test skips)
/// without it, unless the run requires the Python clients.
fn openai_python() -> Option<PathBuf> {
    let venv = repo().join("target/pyclients");
    let has_openai = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("site-packages/openai").is_dir());
    let python = venv.join("bin/python");
    if python.is_file() && has_openai {
        return Some(python);
    }
    assert!(
        std::env::var("OAPD_REQUIRE_MCP_SERVERS").as_deref() != Ok("1"),
        "the openai Python package is not installed in target/pyclients; `cargo xtask test` installs it"
    );
    eprintln!("skipped: the openai Python package is not installed (run `cargo xtask test`)");
    None
}

fn daemon_for(upstream: &Upstream) -> Daemon {
    support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start()
}

/// Runs `script` with the client's base URL in `OAPD_URL`; its stdout
/// (one JSON document) parsed.
fn run_client(python: &Path, daemon: &Daemon, script: &str) -> Value {
    let output = Command::new(python)
        .args(["-c", script])
        .env("OAPD_URL", format!("http://{}/v1", daemon.addr))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the client failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The model repeats the messages it was sent, so the client can see what
/// a continued response was given.
fn echoing() -> Script {
    Script::new()
        .model(ModelSpec::new("m"))
        .default_turn(Turn::echo(Echo::Messages))
}

const CONTINUE: &str = r#"
import json, os, openai
client = openai.OpenAI(base_url=os.environ["OAPD_URL"], api_key="unused")
first = client.responses.create(model="m", input="My name is Ada.", instructions="Be brief.",
                                extra_body={"oap_discover": False})
second = client.responses.create(model="m", input="What is my name?", previous_response_id=first.id,
                                 extra_body={"oap_discover": False})
events = list(client.responses.create(model="m", input="And again?", previous_response_id=second.id,
                                      stream=True, extra_body={"oap_discover": False}))
third = events[-1].response
print(json.dumps({"first": first.id, "second": second.id, "third": third.id,
                  "second_previous": second.previous_response_id,
                  "second_messages": json.loads(second.output_text),
                  "third_messages": json.loads(third.output[0].content[0].text)}))
"#;

#[test]
fn a_continued_response_gets_the_stored_conversation_streamed_or_not() {
    let Some(python) = openai_python() else {
        return;
    };
    let upstream = fake(echoing());
    let daemon = daemon_for(&upstream);
    let out = run_client(&python, &daemon, CONTINUE);
    assert_eq!(out["second_previous"], out["first"]);
    let first_answer = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My name is Ada."}
    ])
    .to_string();
    // The first response's instructions are not carried over; its input
    // and its answer are, before the new input.
    assert_eq!(
        out["second_messages"],
        json!([
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": first_answer},
            {"role": "user", "content": "What is my name?"}
        ])
    );
    // Chained: the streamed third response continues the second, which
    // continued the first.
    let third = out["third_messages"].as_array().unwrap();
    assert_eq!(third.len(), 5, "{third:?}");
    assert_eq!(third[0]["content"], "My name is Ada.");
    assert_eq!(third[2]["content"], "What is my name?");
    assert_eq!(third[4], json!({"role": "user", "content": "And again?"}));
    // What reached the model is what the client was told.
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1]["messages"], out["second_messages"]);
}

const REFUSED: &str = r#"
import json, os, openai
client = openai.OpenAI(base_url=os.environ["OAPD_URL"], api_key="unused")
out = {}
def refused(name, **extra):
    try:
        client.responses.create(model="m", input="and then?", extra_body={"oap_discover": False}, **extra)
        out[name] = "served"
    except openai.NotFoundError as err:
        out[name] = {"status": err.status_code, "error": err.body}
refused("unknown", previous_response_id="resp_0123456789abcdef")
refused("unknown_streamed", previous_response_id="resp_0123456789abcdef", stream=True)
unkept = client.responses.create(model="m", input="forget me", store=False, extra_body={"oap_discover": False})
out["unkept_store"] = unkept.store
refused("unkept", previous_response_id=unkept.id)
# The oldest of a client's responses are pushed out beyond its last 32.
oldest = client.responses.create(model="m", input="turn 0", extra_body={"oap_discover": False})
for n in range(32):
    newest = client.responses.create(model="m", input=f"turn {n + 1}", extra_body={"oap_discover": False})
refused("pushed_out", previous_response_id=oldest.id)
refused("newest", previous_response_id=newest.id)
# Another client (another credential) cannot continue it.
other = openai.OpenAI(base_url=os.environ["OAPD_URL"], api_key="someone-else")
try:
    other.responses.create(model="m", input="hi", previous_response_id=newest.id, extra_body={"oap_discover": False})
    out["other_client"] = "served"
except openai.NotFoundError as err:
    out["other_client"] = err.status_code
print(json.dumps(out))
"#;

#[test]
fn unknown_unkept_and_pushed_out_ids_are_404_in_openais_shape() {
    let Some(python) = openai_python() else {
        return;
    };
    let upstream = fake(echoing());
    let daemon = daemon_for(&upstream);
    let out = run_client(&python, &daemon, REFUSED);
    for case in ["unknown", "unknown_streamed", "unkept", "pushed_out"] {
        let refused = &out[case];
        assert_eq!(refused["status"], 404, "{case}: {refused}");
        let error = &refused["error"];
        assert_eq!(error["type"], "invalid_request_error", "{case}: {error}");
        assert_eq!(error["param"], "previous_response_id", "{case}: {error}");
        assert_eq!(error["code"], "previous_response_not_found", "{case}");
        assert!(
            error["message"].as_str().unwrap().contains("not found"),
            "{case}: {error}"
        );
    }
    assert_eq!(out["unkept_store"], false);
    assert_eq!(out["newest"], "served");
    assert_eq!(out["other_client"], 404);
    // 1 unkept + 33 kept + the newest continued; no refused one reached
    // the model.
    assert_eq!(upstream.fake.chat_requests().len(), 35);
}

#[test]
fn bad_store_fields_are_named() {
    let upstream = fake(echoing());
    let daemon = daemon_for(&upstream);
    for (field, body) in [
        (
            "previous_response_id",
            json!({"model": "m", "input": "x", "previous_response_id": 7}),
        ),
        ("store", json!({"model": "m", "input": "x", "store": "no"})),
    ] {
        let response = daemon.post_json("/v1/responses", &body.to_string());
        assert_eq!(response.status, 400);
        let error = &response.json()["error"];
        assert_eq!(error["param"], field, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
    // An explicit null is no continuation: served as usual.
    let response = daemon.post_json(
        "/v1/responses",
        &json!({"model": "m", "input": "hello", "stream": false, "oap_discover": false,
                "previous_response_id": null})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    assert_eq!(upstream.fake.chat_requests().len(), 1);
}

/// `tool_bridge.response_store` bounds the store: with one response kept
/// per client, the second pushes the first out (the default keeps 32), and
/// a bound of 0 is refused at start, naming the key.
#[test]
fn the_store_keeps_what_tool_bridge_response_store_allows() {
    let upstream = fake(echoing());
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\ntool_bridge:\n  response_store:\n    per_client: 1\n",
            upstream.fake.url()
        ))
        .start();
    let respond = |input: &str, previous: Option<&str>| {
        let mut body =
            json!({"model": "m", "input": input, "stream": false, "oap_discover": false});
        if let Some(previous) = previous {
            body["previous_response_id"] = json!(previous);
        }
        daemon.post_json("/v1/responses", &body.to_string())
    };
    let first = respond("one", None).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = respond("two", None).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(respond("three", Some(&second)).status, 200);
    let pushed_out = respond("again", Some(&first));
    assert_eq!(
        pushed_out.status,
        404,
        "{}",
        String::from_utf8_lossy(&pushed_out.body)
    );

    let refused = support::daemon()
        .yaml("tool_bridge:\n  response_store:\n    per_client: 0\n    per_client_bytes: 99999999\n    total_bytes: 4096\n")
        .try_start()
        .err()
        .expect("a zero bound is refused");
    assert!(
        refused
            .contains("tool_bridge.response_store.per_client: must be between 1 and 10000, got 0"),
        "{refused}"
    );
    assert!(
        refused.contains("tool_bridge.response_store.per_client_bytes: is 99999999 bytes, more than total_bytes (4096)"),
        "{refused}"
    );
}
