//! Lean tool exposure end to end: token accounting, the
//! token budget, meta-tool mode and URL hygiene, with the real `oapd`
//! binary between a raw loopback client and the scripted fake Ollama.

use crate::support;

use crate::support::exposure::{
    daemon_with, discover_then_invoke, models, names, FORCED_TASK, FORCE_YAML, MODEL, WC_TASK,
};
use crate::support::{fake, Daemon};
use fake_ollama::{Chunk, Echo, Turn};
use oap_bridge::tokens;
use serde_json::{json, Value};

fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("json line"))
        .collect()
}

fn content_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c.pointer("/message/content").and_then(Value::as_str))
        .collect()
}

fn chat(daemon: &Daemon, task: &str, extra: Value) -> (support::Response, Vec<Value>) {
    let mut body = json!({"model": MODEL, "messages": [{"role": "user", "content": task}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let response = daemon.post_json("/api/chat", &body.to_string());
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let chunks = lines(&response.body);
    (response, chunks)
}

/// A task several bundled manifests fit (grep, awk, sed, wc, …).
const MULTI_TASK: &str =
    "find the lines containing error in this log and count them: a\nerror 1\nb\nerror 2";

fn oapd_tools(sent: &Value, client: &[&str]) -> Vec<Value> {
    sent["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| {
            let name = t
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            !client.contains(&name)
        })
        .collect()
}

#[test]
fn tool_tokens_are_reported_in_header_done_chunk_and_v1_tools() {
    let upstream = fake(models().default_turn(Turn::reply("ok")));
    let daemon = daemon_with(&upstream, "");
    let client_tool = json!({"type": "function", "function": {"name": "get_time",
        "description": "The time", "parameters": {"type": "object", "properties": {}}}});
    let (response, chunks) = chat(&daemon, WC_TASK, json!({"tools": [client_tool]}));
    let header: usize = response
        .header("x-oap-tool-tokens")
        .expect("X-Oap-Tool-Tokens header")
        .parse()
        .unwrap();
    let done = chunks.last().unwrap();
    assert_eq!(done["oap_tool_tokens"], header);
    let sent = upstream.fake.chat_requests();
    let ours = oapd_tools(&sent[0], &["get_time"]);
    assert!(!ours.is_empty());
    // The figure is exactly the estimate of what oapd injected; the
    // client's tool is forwarded untouched and not counted.
    assert_eq!(header, tokens::tools_tokens(ours.iter()));
    assert!(names(&sent[0]["tools"]).contains(&"get_time".to_string()));
    let client_sent = sent[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "get_time")
        .unwrap();
    assert_eq!(client_sent, &client_tool);
    assert!(daemon.log_text().contains("tool_tokens"));

    // OpenAI surface, non-streaming: header and field on the completion.
    let response = daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": MODEL, "stream": false,
                "messages": [{"role": "user", "content": WC_TASK}]})
        .to_string(),
    );
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("x-oap-tool-tokens"),
        Some(header.to_string().as_str())
    );
    assert_eq!(response.json()["oap_tool_tokens"], header);

    // /v1/tools reports the cost of the definitions it returns.
    let tools = daemon
        .post_json("/v1/tools", &json!({"task": WC_TASK}).to_string())
        .json();
    assert_eq!(
        tools["oap_tool_tokens"],
        tokens::tools_tokens(tools["tools"].as_array().unwrap().iter())
    );
}

/// The injected definitions under a budget, and the full ones.
fn injected_under(budget: usize) -> (Vec<Value>, usize) {
    let upstream = fake(models().default_turn(Turn::reply("ok")));
    let daemon = daemon_with(
        &upstream,
        &format!("tool_bridge:\n  tool_token_budget: {budget}\n"),
    );
    let (response, chunks) = chat(&daemon, MULTI_TASK, json!({"oap_top_k": 5}));
    let sent = upstream.fake.chat_requests();
    let tools = oapd_tools(&sent[0], &[]);
    let reported: usize = response
        .header("x-oap-tool-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(chunks.last().unwrap()["oap_tool_tokens"], reported);
    assert_eq!(reported, tokens::tools_tokens(tools.iter()));
    assert!(reported <= budget, "{reported} > budget {budget}");
    (tools, reported)
}

fn required_of(tool: &Value) -> Vec<String> {
    tool.pointer("/function/parameters/required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn properties_of(tool: &Value) -> Vec<String> {
    tool.pointer("/function/parameters/properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn the_budget_trims_descriptions_then_optional_parameters_then_tools() {
    // Unlimited: what discovery would inject.
    let upstream = fake(models().default_turn(Turn::reply("ok")));
    let daemon = daemon_with(&upstream, "");
    chat(&daemon, MULTI_TASK, json!({"oap_top_k": 5}));
    let full = oapd_tools(&upstream.fake.chat_requests()[0], &[]);
    drop(daemon);
    assert!(
        full.len() >= 2,
        "need several tools: {:?}",
        names(&json!(full))
    );
    let full_tokens = tokens::tools_tokens(full.iter());
    let mut trimmed = full.clone();
    trimmed
        .iter_mut()
        .for_each(oap_bridge::exposure::trim_descriptions);
    let trimmed_tokens = tokens::tools_tokens(trimmed.iter());
    assert!(trimmed_tokens < full_tokens);

    // Stage 1 only: descriptions cut, every tool and parameter kept.
    let (stage1, _) = injected_under(trimmed_tokens);
    assert_eq!(stage1, trimmed);

    // Stage 2: one token less: optional parameters go, lowest-ranked tool
    // first; tools and required parameters all stay.
    let (stage2, _) = injected_under(trimmed_tokens - 1);
    assert_eq!(names(&json!(stage2)), names(&json!(full)));
    for (before, after) in full.iter().zip(&stage2) {
        for required in required_of(before) {
            assert!(
                properties_of(after).contains(&required),
                "required {required} dropped"
            );
        }
    }
    let dropped: Vec<usize> = full
        .iter()
        .zip(&stage2)
        .map(|(b, a)| properties_of(b).len() - properties_of(a).len())
        .collect();
    assert!(dropped.iter().sum::<usize>() > 0, "{dropped:?}");
    let last_touched = dropped.iter().rposition(|&d| d > 0).unwrap();
    let first_touched = dropped.iter().position(|&d| d > 0).unwrap();
    assert!(
        dropped[first_touched..=last_touched].iter().all(|&d| d > 0)
            && (last_touched == full.len() - 1
                || properties_of(&full[last_touched + 1..][0]).len()
                    == required_of(&full[last_touched + 1..][0]).len()),
        "optional parameters must go from the lowest-ranked tool up: {dropped:?}"
    );

    // Stage 3: a budget one tool cannot exceed keeps the best-ranked tools.
    let one = {
        let mut best = trimmed[0].clone();
        oap_bridge::exposure::drop_optional_parameters(&mut best);
        tokens::tool_tokens(&best)
    };
    let (stage3, _) = injected_under(one.max(50));
    assert!(!stage3.is_empty() && stage3.len() < full.len());
    assert_eq!(names(&json!(stage3)), names(&json!(full))[..stage3.len()]);
}

#[test]
fn a_budget_below_any_tool_injects_none_and_the_request_still_works() {
    let (tools, reported) = injected_under(50);
    // Whatever fits in 50 (possibly nothing) and never more.
    assert!(reported <= 50);
    assert_eq!(reported, tokens::tools_tokens(tools.iter()));
}

/// `oapd config` with one environment variable: fails, with this output.
fn config_error(var: &str, value: &str) -> String {
    let out = support::oapd()
        .args(["config"])
        .env(var, value)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{var}={value}: {text}");
    text
}

#[test]
fn a_budget_below_the_minimum_is_a_config_error() {
    let text = config_error("OAP_TOOL_BRIDGE_TOOL_TOKEN_BUDGET", "10");
    assert!(
        text.contains(
            "tool_bridge.tool_token_budget: must be between 50 and 1000000, got 10 (set by OAP_TOOL_BRIDGE_TOOL_TOKEN_BUDGET)"
        ),
        "{text}"
    );
}

#[test]
fn an_unknown_exposure_is_a_config_error() {
    let text = config_error("OAP_TOOL_BRIDGE_EXPOSURE", "lazy");
    assert!(
        text.contains(r#"OAP_TOOL_BRIDGE_EXPOSURE: expected one of "direct", "meta", got "lazy""#),
        "{text}"
    );
}

#[test]
fn meta_mode_offers_two_tools_and_runs_discover_then_invoke() {
    let upstream = fake(discover_then_invoke(
        "count words in text",
        "oap_wc",
        json!({"args": "-w", "stdin": "one two three four"}),
    ));
    let daemon = daemon_with(&upstream, "tool_bridge:\n  exposure: meta\n");
    let (response, chunks) = chat(&daemon, WC_TASK, json!({"oap_max_rounds": 5}));
    let sent = upstream.fake.chat_requests();
    assert_eq!(names(&sent[0]["tools"]), ["oap_discover", "oap_invoke"]);
    let meta_tokens = tokens::tools_tokens(oap_bridge::meta::definitions().iter());
    assert_eq!(
        response.header("x-oap-tool-tokens"),
        Some(meta_tokens.to_string().as_str())
    );
    // Round 2 carries the discovery result: compact tool list with oap_wc.
    let messages = sent[1]["messages"].as_array().unwrap();
    let discovered: Value =
        serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert!(discovered["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "oap_wc" && t["parameters"].is_object()));
    // The invoke ran wc for real; the model echoed its result (4 words).
    let text = content_of(&chunks);
    assert!(text.contains('4'), "{text}");
    assert_eq!(chunks.last().unwrap()["oap_round"], 3);
}

#[test]
fn meta_mode_refuses_undiscovered_unknown_and_malformed_invocations() {
    let upstream = fake(
        models()
            // Invoke before any discovery.
            .turn(Turn::tool_call(
                "oap_invoke",
                json!({"tool": "oap_wc", "arguments": {"stdin": "x"}}),
            ))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_with(&upstream, "tool_bridge:\n  exposure: meta\n");
    let (_, chunks) = chat(&daemon, WC_TASK, json!({}));
    let text = content_of(&chunks);
    assert!(
        text.contains("Error:") && text.contains("oap_discover"),
        "{text}"
    );

    // After discovery: a name it did not return, then bad arguments, then
    // a call that fails argument checking; every one a readable tool error.
    upstream
        .fake
        .set_script(discover_then_invoke("count words", "oap_rm_rf", json!({})));
    let (_, chunks) = chat(&daemon, WC_TASK, json!({"oap_max_rounds": 5}));
    let text = content_of(&chunks);
    assert!(
        text.contains("'oap_rm_rf' was not returned by oap_discover") && text.contains("oap_wc"),
        "{text}"
    );
    upstream.fake.set_script(discover_then_invoke(
        "count words",
        "oap_wc",
        json!("not json"),
    ));
    let (_, chunks) = chat(&daemon, WC_TASK, json!({"oap_max_rounds": 5}));
    assert!(content_of(&chunks).contains("must be a JSON object"));
    upstream.fake.set_script(discover_then_invoke(
        "count words",
        "oap_wc",
        json!({"args": ["-w"], "stdin": {"text": "a b"}}),
    ));
    let (_, chunks) = chat(&daemon, WC_TASK, json!({"oap_max_rounds": 5}));
    let text = content_of(&chunks);
    assert!(
        text.contains("oap_wc was not called")
            && text.contains("argument 'stdin' must be a string"),
        "{text}"
    );
    // An empty discovery task is a tool error too.
    upstream.fake.set_script(
        models()
            .turn(Turn::tool_call("oap_discover", json!({"task": ""})))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let (_, chunks) = chat(&daemon, WC_TASK, json!({}));
    assert!(content_of(&chunks).contains("needs a 'task'"));
    // The daemon keeps serving.
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn invented_urls_are_flagged_or_removed_in_streamed_answers() {
    // The tool result (wc's output) contains no URL; the user's message has one.
    let answer = vec![
        Chunk::content("See https://user.exam"),
        Chunk::content("ple/doc and [this](https://inv"),
        Chunk::content("ented.example/x). Plain http text."),
    ];
    let upstream = fake(models().default_turn(Turn::chunks(answer.clone())));
    let task = "summarise https://user.example/doc and count the words in: one two";
    let daemon = daemon_with(&upstream, "");
    let (_, chunks) = chat(&daemon, task, json!({}));
    assert_eq!(
        content_of(&chunks),
        "See https://user.example/doc and [this](https://invented.example/x) (unverified link). Plain http text."
    );
    assert_eq!(chunks.iter().filter(|c| c["done"] == true).count(), 1);
    assert_eq!(chunks.last().unwrap()["done"], true);

    let daemon = daemon_with(&upstream, "tool_bridge:\n  url_policy: remove\n");
    let (_, chunks) = chat(&daemon, task, json!({}));
    assert_eq!(
        content_of(&chunks),
        "See https://user.example/doc and [this]([link removed]). Plain http text."
    );
    // OpenAI streaming surface too.
    let response = daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": MODEL, "stream": true,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    let body = String::from_utf8_lossy(&response.body);
    let text: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        text,
        "See https://user.example/doc and [this]([link removed]). Plain http text."
    );
    let daemon = daemon_with(&upstream, "tool_bridge:\n  url_policy: off\n");
    let (_, chunks) = chat(&daemon, task, json!({}));
    assert!(content_of(&chunks).contains("(https://invented.example/x)."));
}

#[test]
fn answers_are_left_alone_when_oapd_offered_no_tool() {
    // Nothing of oapd's fits this task, so the request is a plain chat
    // through oapd: the default url_policy (flag) must not touch it.
    let answer = "Penguins are covered at https://penguins.example/facts.";
    let upstream = fake(models().default_turn(Turn::chunks(vec![Chunk::content(answer)])));
    let daemon = daemon_with(&upstream, "");
    let task = "tell me a joke about penguins";
    let (_, chunks) = chat(&daemon, task, json!({}));
    let sent = upstream.fake.chat_requests();
    assert!(
        oapd_tools(&sent[0], &[]).is_empty(),
        "precondition: nothing of oapd's is offered for {task:?}: {}",
        sent[0]["tools"]
    );
    assert_eq!(content_of(&chunks), answer);
    // Same on the OpenAI surface, unstreamed.
    let response = daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": MODEL, "messages": [{"role": "user", "content": task}]}).to_string(),
    );
    let body: Value = serde_json::from_slice(&response.body).expect("json");
    assert_eq!(body["choices"][0]["message"]["content"], answer, "{body}");
}

#[test]
fn urls_a_tool_returned_pass_and_per_tool_overrides_apply() {
    // grep runs for real and returns the line with the URL; the model cites
    // it and invents another. grep's override (remove) beats the global flag.
    let upstream = fake(
        models()
            .turn(Turn::tool_call(
                "oap_grep",
                json!({"args": "docs", "stdin": "docs at https://tool.example/page\nnothing"}),
            ))
            .turn(Turn::reply(
                "Found https://tool.example/page and https://made.up/x",
            )),
    );
    let daemon = daemon_with(
        &upstream,
        "tool_bridge:\n  url_policy: flag\n  url_policy_tools:\n    local/grep: remove\n",
    );
    let task = "find the lines containing docs in this text: docs here\nnothing";
    let (_, chunks) = chat(&daemon, task, json!({}));
    let sent = upstream.fake.chat_requests();
    assert!(names(&sent[0]["tools"]).contains(&"oap_grep".to_string()));
    assert_eq!(
        content_of(&chunks),
        "Found https://tool.example/page and [link removed]"
    );
}

fn system_instruction(sent: &Value) -> Option<String> {
    sent["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .map(str::to_string)
}

#[test]
fn a_forced_tool_is_offered_and_the_model_told_to_call_it() {
    let upstream = fake(
        models()
            .turn(Turn::tool_call("oap_date", json!({"args": "+%Y"})))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let (_, chunks) = chat(&daemon, FORCED_TASK, json!({}));
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(names(&sent[0]["tools"])[0], "oap_date");
    let instruction = system_instruction(&sent[0]).expect("instruction");
    assert!(instruction.contains("oap_date"), "{instruction}");
    // The instruction sits right before the user's message.
    let messages = sent[0]["messages"].as_array().unwrap();
    assert_eq!(messages[messages.len() - 2]["role"], "system");
    // date ran for real (the year), the model echoed it.
    let year = content_of(&chunks);
    assert!(year.trim().starts_with("20"), "{year}");
}

#[test]
fn a_forced_tool_the_model_ignores_is_called_by_the_bridge() {
    let upstream = fake(
        models()
            .turn(Turn::reply("All fine in the kitchen, I guess."))
            // The argument extraction (non-streamed, format = the schema).
            .turn(Turn::reply(r#"{"args": "+%Y"}"#))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let (_, chunks) = chat(&daemon, FORCED_TASK, json!({}));
    let text = content_of(&chunks);
    // The answer given without the tool never reached the client.
    assert!(!text.contains("kitchen"), "{text}");
    assert!(text.trim().starts_with("20"), "{text}");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1]["stream"], false);
    assert!(sent[1]["format"]["properties"].is_object(), "{}", sent[1]);
    let last = sent[2]["messages"].as_array().unwrap();
    let result = last.last().unwrap();
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_name"], "oap_date");
    assert_eq!(chunks.iter().filter(|c| c["done"] == true).count(), 1);
}

#[test]
fn a_forced_tool_whose_arguments_cannot_be_extracted_leaves_the_answer() {
    let upstream = fake(
        models()
            .turn(Turn::reply("All fine in the kitchen."))
            .turn(Turn::reply("sorry, no JSON here")),
    );
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let (_, chunks) = chat(&daemon, FORCED_TASK, json!({}));
    assert_eq!(content_of(&chunks), "All fine in the kitchen.");
    assert_eq!(upstream.fake.chat_requests().len(), 2);
}

#[test]
fn no_force_without_a_match() {
    let upstream = fake(models().default_turn(Turn::reply("ok")));
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let (_, chunks) = chat(&daemon, WC_TASK, json!({}));
    assert_eq!(content_of(&chunks), "ok");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 1);
    assert!(system_instruction(&sent[0]).is_none());
    assert!(!names(&sent[0]["tools"]).contains(&"oap_date".to_string()));
}

#[test]
fn an_invalid_force_pattern_stops_start_up_with_a_clear_error() {
    for (rules, needle) in [
        (
            r#"[{"pattern": "(unclosed", "tool": "local/date"}]"#,
            "tool_bridge.force[0].pattern",
        ),
        (
            r#"[{"pattern": "(\\w{100}){100}", "tool": "local/date"}]"#,
            "tool_bridge.force[0].pattern",
        ),
        (
            r#"[{"pattern": "x", "tool": " "}]"#,
            "tool_bridge.force[0].tool",
        ),
        (r#"{"pattern": "x"}"#, "OAP_TOOL_BRIDGE_FORCE"),
    ] {
        let out = support::oapd()
            .args(["config"])
            .env("OAP_TOOL_BRIDGE_FORCE", rules)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{rules}: {text}");
        assert!(text.contains(needle), "{rules}: {text}");
    }
}

#[test]
fn a_forced_tool_and_its_instruction_go_together_under_a_tight_budget() {
    for budget in [50, 60, 80] {
        let upstream = fake(models().default_turn(Turn::reply("ok")));
        let daemon = daemon_with(
            &upstream,
            &format!("{FORCE_YAML}  tool_token_budget: {budget}\n"),
        );
        let (response, _) = chat(&daemon, FORCED_TASK, json!({"oap_auto_execute": true}));
        let sent = upstream.fake.chat_requests();
        let offered = names(&sent[0]["tools"]).contains(&"oap_date".to_string());
        let instructed = system_instruction(&sent[0]).is_some();
        assert_eq!(offered, instructed, "budget {budget}: {}", sent[0]);
        let reported: usize = response
            .header("x-oap-tool-tokens")
            .unwrap()
            .parse()
            .unwrap();
        assert!(reported <= budget);
    }
}
