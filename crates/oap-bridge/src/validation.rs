//! `oapd validate-model`: does this model call tools correctly (streaming
//! and not) and answer a checkable reasoning question? The verdict is kept
//! in a validation store in the state directory, which
//! `tool_bridge.only_validated_models` consults before injecting tools and
//! `GET /v1/validation` lists.
//!
//! Every check is a real `/api/chat` request to the configured Ollama with
//! a fixed, deterministic prompt (`temperature: 0`, `seed`), bounded by a
//! per-check timeout, and judged on the structure of the answer (tool name,
//! argument values and JSON types), never on style.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::BodyExt;
use hyper::{HeaderMap, Method};
use oap_wire::{LineDecoder, ToolCall, ToolCallAccumulator};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::state::{self, StateError};
use crate::upstream::{Upstream, UpstreamError};

/// File name of the store inside `index.data_dir`.
pub const STORE_FILE: &str = "validation.json";
/// Models kept in the store; the oldest verdicts go first.
pub const MAX_RECORDS: usize = 256;
/// The store file is a few kilobytes per model; anything far bigger is not ours.
const MAX_STORE_BYTES: u64 = 4 * 1024 * 1024;
/// Longest answer read from Ollama for one check.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Longest detail kept per check (a rambling model must not bloat the store).
const MAX_DETAIL_BYTES: usize = 400;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's name, as `oapd validate` prints it.
    pub name: String,
    /// Whether the model's answer satisfied the check.
    pub passed: bool,
    /// Wall-clock time of the check, milliseconds.
    pub ms: u64,
    /// Why it failed, or what was seen when it passed.
    pub detail: String,
}

/// One model's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRecord {
    /// Canonical name (`name:tag`).
    pub model: String,
    /// The model's digest from `/api/tags`, when Ollama gave one.
    pub digest: Option<String>,
    /// True when every check passed.
    pub passed: bool,
    /// False when only the quick checks ran.
    pub full_suite: bool,
    /// Every check in the order run.
    pub checks: Vec<CheckResult>,
    /// Total time of the run, milliseconds.
    pub total_ms: u64,
    /// Unix seconds and RFC 3339 of the run.
    pub validated_at: u64,
    /// The run time as RFC 3339, for people.
    pub validated_at_rfc3339: String,
    /// The oapd version that ran the checks (the suite may change).
    pub oapd_version: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    records: Vec<ValidationRecord>,
}

/// `name` with `:latest` added when it has no tag (as Ollama names models).
pub fn canonical_model(name: &str) -> String {
    let name = name.trim();
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

/// The validation store: one JSON file, written atomically, re-read when
/// another process (the `validate-model` command) changed it.
pub struct ValidationStore {
    path: PathBuf,
    cached: Mutex<(Option<SystemTime>, Vec<ValidationRecord>)>,
}

impl ValidationStore {
    /// The store in `data_dir`; nothing is read until asked.
    pub fn in_dir(data_dir: &Path) -> ValidationStore {
        ValidationStore {
            path: data_dir.join(STORE_FILE),
            cached: Mutex::new((None, Vec::new())),
        }
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, newest first. A broken store file is logged and read
    /// as empty (so `only_validated_models` then injects nothing: safe).
    pub fn records(&self) -> Vec<ValidationRecord> {
        let modified = state::modified(&self.path);
        let Ok(mut cached) = self.cached.lock() else {
            return Vec::new();
        };
        if modified.is_none() {
            *cached = (None, Vec::new());
        } else if cached.0 != modified {
            let records = match state::read_json::<StoreFile>(&self.path, MAX_STORE_BYTES) {
                Ok(Some(file)) => file.records,
                Ok(None) => Vec::new(),
                Err(err) => {
                    tracing::error!(error = %err, "validation store unreadable; treating it as empty");
                    Vec::new()
                }
            };
            *cached = (modified, records);
        }
        let mut records = cached.1.clone();
        records.sort_by_key(|r| std::cmp::Reverse(r.validated_at));
        records
    }

    /// The latest record of `model` (`name` means `name:latest`).
    pub fn get(&self, model: &str) -> Option<ValidationRecord> {
        let wanted = canonical_model(model);
        self.records().into_iter().find(|r| r.model == wanted)
    }

    /// Whether `model` has a passing verdict.
    pub fn passed(&self, model: &str) -> bool {
        self.get(model).is_some_and(|r| r.passed)
    }

    /// Records a verdict, replacing the model's previous one and dropping
    /// the oldest beyond [`MAX_RECORDS`].
    pub fn put(&self, record: ValidationRecord) -> Result<(), StateError> {
        let mut records = match state::read_json::<StoreFile>(&self.path, MAX_STORE_BYTES) {
            Ok(Some(file)) => file.records,
            Ok(None) => Vec::new(),
            Err(err) => {
                tracing::warn!(error = %err, "validation store unreadable; starting a new one");
                Vec::new()
            }
        };
        records.retain(|r| r.model != record.model);
        records.push(record);
        records.sort_by_key(|r| std::cmp::Reverse(r.validated_at));
        records.truncate(MAX_RECORDS);
        state::write_json_atomic(
            &self.path,
            &StoreFile {
                version: 1,
                records,
            },
        )?;
        if let Ok(mut cached) = self.cached.lock() {
            cached.0 = None;
        }
        Ok(())
    }
}

/// Why no verdict could be reached (nothing is recorded then: a down
/// Ollama says nothing about the model).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// Ollama could not be asked.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Ollama does not list the model.
    #[error("model {model:?} is not installed in Ollama at {base} (try `ollama pull {model}`)")]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// The Ollama asked.
        base: String,
    },
    /// `/api/tags` answered with an error status.
    #[error("Ollama at {base} answered /api/tags with {status}")]
    Tags {
        /// The Ollama asked.
        base: String,
        /// The HTTP status it answered with.
        status: u16,
    },
    /// `/api/tags` did not answer in time.
    #[error("Ollama at {base} did not list its models within {timeout:?}")]
    TagsTimeout {
        /// The Ollama asked.
        base: String,
        /// How long oapd waited.
        timeout: Duration,
    },
}

/// One check: a request, and a judge of the answer.
struct Check {
    name: &'static str,
    stream: bool,
    messages: Value,
    tools: Value,
    judge: fn(&Answer) -> Result<String, String>,
}

/// What the model answered.
#[derive(Debug, Default)]
pub struct Answer {
    /// The answer's text.
    pub content: String,
    /// The tool calls the model made.
    pub calls: Vec<ToolCall>,
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
        }, "required": ["city", "unit"]}}})
}

fn timer_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "set_timer",
        "description": "Start a countdown timer.",
        "parameters": {"type": "object", "properties": {
            "minutes": {"type": "integer", "description": "Length of the timer in minutes"}
        }, "required": ["minutes"]}}})
}

fn currency_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"},
            "from": {"type": "string", "description": "ISO code, e.g. USD"},
            "to": {"type": "string", "description": "ISO code, e.g. EUR"}
        }, "required": ["amount", "from", "to"]}}})
}

fn reminder_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "create_reminder",
        "description": "Create a reminder.",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "description": "What to remind about"},
            "minutes": {"type": "integer", "description": "In how many minutes"},
            "urgent": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}}
        }, "required": ["text", "minutes", "urgent", "tags"]}}})
}

const WEATHER_TASK: &str =
    "What is the weather in Paris right now, in celsius? Use the get_weather tool.";

fn the_checks(full_suite: bool) -> Vec<Check> {
    let mut checks = vec![
        Check {
            name: "tool_call",
            stream: false,
            messages: json!([{"role": "user", "content": WEATHER_TASK}]),
            tools: json!([weather_tool()]),
            judge: judge_weather,
        },
        Check {
            name: "tool_call_stream",
            stream: true,
            messages: json!([{"role": "user", "content": WEATHER_TASK}]),
            tools: json!([weather_tool()]),
            judge: judge_weather,
        },
        Check {
            name: "reasoning",
            stream: false,
            messages: json!([{"role": "user", "content":
                "I have 3 boxes with 14 apples in each box, and I eat 5 apples. \
                 How many apples are left? Think it through, then give the final number last."}]),
            tools: json!([]),
            judge: judge_reasoning,
        },
    ];
    if full_suite {
        checks.extend([
            Check {
                name: "pick_tool",
                stream: true,
                messages: json!([{"role": "user", "content": "Set a timer for 10 minutes."}]),
                tools: json!([weather_tool(), currency_tool(), timer_tool()]),
                judge: judge_pick_tool,
            },
            Check {
                name: "no_tool",
                stream: true,
                messages: json!([{"role": "user", "content":
                    "What is the capital of France? Answer in one word."}]),
                tools: json!([weather_tool(), currency_tool(), timer_tool()]),
                judge: judge_no_tool,
            },
            Check {
                name: "argument_types",
                stream: false,
                messages: json!([{"role": "user", "content":
                    "Remind me in 15 minutes to call mum. It is urgent; tag it \"family\" and \"phone\"."}]),
                tools: json!([reminder_tool()]),
                judge: judge_argument_types,
            },
        ]);
    }
    checks
}

fn only_call<'a>(answer: &'a Answer, name: &str) -> Result<&'a ToolCall, String> {
    let Some(call) = answer.calls.first() else {
        return Err(format!(
            "no tool call (expected {name}); the model answered: {}",
            clip(&answer.content)
        ));
    };
    if let Some(error) = &call.arguments_error {
        return Err(format!(
            "{} called with unparsable arguments: {error}",
            call.name
        ));
    }
    if call.name != name {
        return Err(format!("called {} instead of {name}", call.name));
    }
    Ok(call)
}

fn judge_weather(answer: &Answer) -> Result<String, String> {
    let call = only_call(answer, "get_weather")?;
    let args = Value::Object(call.arguments.clone());
    let city = call.arguments.get("city").and_then(Value::as_str);
    if !city.is_some_and(|c| c.to_lowercase().contains("paris")) {
        return Err(format!(
            "get_weather arguments {args}: city should be Paris"
        ));
    }
    match call.arguments.get("unit").and_then(Value::as_str) {
        Some(unit) if unit.eq_ignore_ascii_case("celsius") => Ok(format!("get_weather({args})")),
        _ => Err(format!(
            "get_weather arguments {args}: unit should be \"celsius\""
        )),
    }
}

fn judge_reasoning(answer: &Answer) -> Result<String, String> {
    let numbers: Vec<i64> = answer
        .content
        .split(|c: char| !c.is_ascii_digit() && c != '-')
        .filter_map(|s| s.trim_matches('-').parse().ok())
        .collect();
    match numbers.last() {
        Some(37) => Ok("answered 37".into()),
        Some(other) => Err(format!("expected 37, the final number was {other}")),
        None => Err(format!(
            "no number in the answer: {}",
            clip(&answer.content)
        )),
    }
}

fn judge_pick_tool(answer: &Answer) -> Result<String, String> {
    let call = only_call(answer, "set_timer")?;
    match call.arguments.get("minutes") {
        Some(minutes) if minutes.as_f64() == Some(10.0) => Ok("set_timer(minutes=10)".into()),
        other => Err(format!(
            "set_timer minutes should be 10, got {}",
            other
                .map(Value::to_string)
                .unwrap_or_else(|| "nothing".into())
        )),
    }
}

fn judge_no_tool(answer: &Answer) -> Result<String, String> {
    if let Some(call) = answer.calls.first() {
        return Err(format!("called {} where no tool fits", call.name));
    }
    if answer.content.to_lowercase().contains("paris") {
        Ok("answered without a tool".into())
    } else {
        Err(format!(
            "no tool, but the answer lacks Paris: {}",
            clip(&answer.content)
        ))
    }
}

fn judge_argument_types(answer: &Answer) -> Result<String, String> {
    let call = only_call(answer, "create_reminder")?;
    let a = &call.arguments;
    let args = Value::Object(a.clone());
    let mut problems = Vec::new();
    if !a.get("text").is_some_and(Value::is_string) {
        problems.push("text should be a string");
    }
    if a.get("minutes").and_then(Value::as_i64) != Some(15) {
        problems.push("minutes should be the integer 15");
    }
    if a.get("urgent") != Some(&Value::Bool(true)) {
        problems.push("urgent should be the boolean true");
    }
    let tags_ok = a.get("tags").and_then(Value::as_array).is_some_and(|tags| {
        tags.iter().all(Value::is_string) && tags.iter().any(|t| t == "family")
    });
    if !tags_ok {
        problems.push("tags should be an array of strings with \"family\"");
    }
    if problems.is_empty() {
        Ok(format!("create_reminder({args})"))
    } else {
        Err(format!("create_reminder({args}): {}", problems.join("; ")))
    }
}

/// A model's answer as a check's detail: trimmed, quoted, and cut where
/// every text cap cuts (`oap_manifest::clip_bytes`), marked `…` when cut.
fn clip(text: &str) -> String {
    let text = text.trim();
    let cut = oap_manifest::clip_bytes(text, MAX_DETAIL_BYTES);
    if cut.len() == text.len() {
        format!("{text:?}")
    } else {
        format!("{cut:?}…")
    }
}

/// Asks Ollama for the model's digest; also proves Ollama is reachable
/// and the model installed before any check runs.
async fn model_digest(
    upstream: &Upstream,
    model: &str,
    timeout: Duration,
) -> Result<Option<String>, ValidateError> {
    let base = upstream.base_url().to_string();
    let read = async {
        let response = upstream
            .send(
                Method::GET,
                "/api/tags",
                &HeaderMap::new(),
                crate::upstream::full(Vec::new()),
            )
            .await?;
        let status = response.status();
        let bytes = crate::upstream::read_limited(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|source| UpstreamError::Unreachable {
                base: base.clone(),
                source,
            })?;
        Ok::<_, ValidateError>((status, bytes))
    };
    let (status, bytes) =
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| ValidateError::TagsTimeout {
                base: base.clone(),
                timeout,
            })??;
    if !status.is_success() {
        return Err(ValidateError::Tags {
            base,
            status: status.as_u16(),
        });
    }
    let tags: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let wanted = canonical_model(model);
    let entry = tags
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|m| {
            ["name", "model"].iter().any(|key| {
                m.get(*key)
                    .and_then(Value::as_str)
                    .is_some_and(|n| canonical_model(n) == wanted)
            })
        });
    match entry {
        Some(entry) => Ok(entry
            .get("digest")
            .and_then(Value::as_str)
            .map(str::to_string)),
        None => Err(ValidateError::UnknownModel {
            model: model.to_string(),
            base,
        }),
    }
}

/// Runs the checks against `model` and returns the verdict (not yet stored).
pub async fn validate(
    upstream: &Upstream,
    model: &str,
    full_suite: bool,
    check_timeout: Duration,
) -> Result<ValidationRecord, ValidateError> {
    let started = Instant::now();
    let digest = model_digest(upstream, model, check_timeout).await?;
    let mut results = Vec::new();
    for check in the_checks(full_suite) {
        let began = Instant::now();
        let outcome = match tokio::time::timeout(check_timeout, ask(upstream, model, &check)).await
        {
            Ok(Ok(answer)) => (check.judge)(&answer),
            Ok(Err(message)) => Err(message),
            Err(_) => Err(format!(
                "no complete answer within {}s (check timeout)",
                check_timeout.as_secs()
            )),
        };
        let (passed, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        results.push(CheckResult {
            name: check.name.to_string(),
            passed,
            ms: began.elapsed().as_millis() as u64,
            detail,
        });
    }
    Ok(ValidationRecord {
        model: canonical_model(model),
        digest,
        passed: results.iter().all(|c| c.passed),
        full_suite,
        checks: results,
        total_ms: started.elapsed().as_millis() as u64,
        validated_at: state::unix_now(),
        validated_at_rfc3339: crate::tool_loop::now_rfc3339(),
        oapd_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Sends one check's request and reads the answer (NDJSON when streaming).
async fn ask(upstream: &Upstream, model: &str, check: &Check) -> Result<Answer, String> {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    body.insert("messages".into(), check.messages.clone());
    body.insert("stream".into(), Value::Bool(check.stream));
    body.insert("think".into(), Value::Bool(false));
    body.insert("options".into(), json!({"temperature": 0, "seed": 42}));
    if check.tools.as_array().is_some_and(|t| !t.is_empty()) {
        body.insert("tools".into(), check.tools.clone());
    }
    let response = upstream
        .post_json("/api/chat", &Value::Object(body))
        .await
        .map_err(|err| err.to_string())?;
    let status = response.status();
    let mut incoming = response.into_body();
    if !status.is_success() {
        let message = crate::upstream::error_message(incoming).await;
        return Err(format!("Ollama answered {status}: {}", clip(&message)));
    }
    let mut answer = Answer::default();
    let mut calls = ToolCallAccumulator::new();
    let mut absorb = |chunk: &Value, answer: &mut Answer| -> Result<bool, String> {
        if let Some(error) = chunk.get("error") {
            return Err(format!("Ollama reported an error: {error}"));
        }
        calls.push_chunk(chunk);
        if let Some(text) = chunk.pointer("/message/content").and_then(Value::as_str) {
            answer.content.push_str(text);
        }
        Ok(chunk.get("done").and_then(Value::as_bool) == Some(true))
    };
    if !check.stream {
        let bytes = crate::upstream::read_limited(incoming, MAX_ANSWER_BYTES)
            .await
            .map_err(|err| format!("reading the answer failed: {err}"))?;
        let chunk: Value = serde_json::from_slice(&bytes)
            .map_err(|err| format!("the answer is not JSON: {err}"))?;
        absorb(&chunk, &mut answer)?;
    } else {
        let mut decoder = LineDecoder::new(MAX_ANSWER_BYTES);
        let mut done = false;
        let mut read = 0usize;
        while !done {
            let lines = match incoming.frame().await {
                None => {
                    let rest: Vec<Vec<u8>> = decoder.finish().into_iter().collect();
                    if rest.is_empty() {
                        return Err("the stream ended before done:true".into());
                    }
                    rest
                }
                Some(Err(err)) => return Err(format!("the stream broke: {err}")),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        read += data.len();
                        if read > MAX_ANSWER_BYTES {
                            return Err("the answer is too long".into());
                        }
                        decoder
                            .push(&data)
                            .map_err(|err| format!("bad stream: {err}"))?
                    }
                    Err(_) => continue,
                },
            };
            for line in lines {
                let chunk: Value = serde_json::from_slice(&line)
                    .map_err(|_| "a streamed line is not JSON".to_string())?;
                if absorb(&chunk, &mut answer)? {
                    done = true;
                    break;
                }
            }
        }
    }
    answer.calls = calls.finish();
    Ok(answer)
}

/// The report `oapd validate-model` prints.
pub fn render(record: &ValidationRecord) -> String {
    let mut out = format!(
        "model {}{}\n",
        record.model,
        record
            .digest
            .as_deref()
            // Characters, not bytes: the digest is whatever Ollama sent.
            .map(|d| format!(" (digest {})", d.chars().take(12).collect::<String>()))
            .unwrap_or_default()
    );
    for check in &record.checks {
        out.push_str(&format!(
            "  {} {:<17} {:>7} ms  {}\n",
            if check.passed { "PASS" } else { "FAIL" },
            check.name,
            check.ms,
            check.detail
        ));
    }
    let failed = record.checks.iter().filter(|c| !c.passed).count();
    out.push_str(&format!(
        "{}: {} of {} checks passed in {} ms{}\n",
        if record.passed { "PASS" } else { "FAIL" },
        record.checks.len() - failed,
        record.checks.len(),
        record.total_ms,
        if record.full_suite {
            " (full suite)"
        } else {
            ""
        }
    ));
    out
}

/// The bridge's view of the store: whether a model may get oapd's tools.
pub struct ValidationGate {
    /// The verdicts consulted.
    pub store: ValidationStore,
    /// `tool_bridge.only_validated_models`: inject tools only into models
    /// with a passing record.
    pub only_validated_models: bool,
}

impl ValidationGate {
    /// The gate over the store in `data_dir` (`index.data_dir`), closed to
    /// unvalidated models when `only_validated_models` is on.
    pub fn new(data_dir: &Path, only_validated_models: bool) -> ValidationGate {
        ValidationGate {
            store: ValidationStore::in_dir(data_dir),
            only_validated_models,
        }
    }

    /// Whether oapd may inject its tools into a request for `model`.
    pub fn allows(&self, model: &str) -> bool {
        if !self.only_validated_models {
            return true;
        }
        let allowed = self.store.passed(model);
        if !allowed {
            tracing::debug!(%model, "no passing validation: tools not injected");
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_on_a_character_boundary_and_marked() {
        assert_eq!(clip("  short answer \n"), "\"short answer\"");
        let long = "é".repeat(MAX_DETAIL_BYTES);
        let detail = clip(&long);
        let kept = "é".repeat(MAX_DETAIL_BYTES / 2);
        assert_eq!(detail, format!("{kept:?}…"));
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: None,
            index: 0,
            name: name.into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            arguments_error: None,
        }
    }

    fn answer(content: &str, calls: Vec<ToolCall>) -> Answer {
        Answer {
            content: content.into(),
            calls,
        }
    }

    #[test]
    fn a_digest_of_any_characters_is_shortened_without_panicking() {
        let mut record = ValidationRecord {
            model: "m:latest".into(),
            digest: Some("ééééééééééééééé".into()),
            passed: true,
            full_suite: false,
            checks: Vec::new(),
            total_ms: 0,
            validated_at: 0,
            validated_at_rfc3339: String::new(),
            oapd_version: String::new(),
        };
        assert!(render(&record).starts_with("model m:latest (digest éééééééééééé)\n"));
        record.digest = Some("sha256:0123456789abcdef".into());
        assert!(render(&record).starts_with("model m:latest (digest sha256:01234)\n"));
    }

    #[test]
    fn judges_accept_right_and_refuse_wrong() {
        let good = answer(
            "",
            vec![call(
                "get_weather",
                json!({"city": "Paris, FR", "unit": "Celsius"}),
            )],
        );
        assert!(judge_weather(&good).is_ok());
        let wrong_unit = answer(
            "",
            vec![call(
                "get_weather",
                json!({"city": "Paris", "unit": "fahrenheit"}),
            )],
        );
        assert!(judge_weather(&wrong_unit).unwrap_err().contains("unit"));
        assert!(judge_weather(&answer("It is sunny.", vec![]))
            .unwrap_err()
            .contains("no tool call"));
        assert!(judge_reasoning(&answer("42 - 5 = 37", vec![])).is_ok());
        assert!(judge_reasoning(&answer("The answer is 42.", vec![])).is_err());
        assert!(judge_reasoning(&answer("many", vec![])).is_err());
        assert!(judge_no_tool(&answer("Paris.", vec![])).is_ok());
        assert!(judge_no_tool(&answer("", vec![call("set_timer", json!({}))])).is_err());
        assert!(
            judge_pick_tool(&answer("", vec![call("set_timer", json!({"minutes": 10}))])).is_ok()
        );
        assert!(judge_pick_tool(&answer(
            "",
            vec![call("set_timer", json!({"minutes": "10"}))]
        ))
        .is_err());
        let typed = call(
            "create_reminder",
            json!({"text": "call mum", "minutes": 15, "urgent": true, "tags": ["family", "phone"]}),
        );
        assert!(judge_argument_types(&answer("", vec![typed])).is_ok());
        let stringly = call(
            "create_reminder",
            json!({"text": "call mum", "minutes": "15", "urgent": "true", "tags": "family"}),
        );
        let err = judge_argument_types(&answer("", vec![stringly])).unwrap_err();
        assert!(err.contains("minutes") && err.contains("urgent") && err.contains("tags"));
    }

    fn record(model: &str, at: u64, passed: bool) -> ValidationRecord {
        ValidationRecord {
            model: canonical_model(model),
            digest: None,
            passed,
            full_suite: false,
            checks: Vec::new(),
            total_ms: 0,
            validated_at: at,
            validated_at_rfc3339: String::new(),
            oapd_version: "0".into(),
        }
    }

    #[test]
    fn the_store_replaces_bounds_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = ValidationStore::in_dir(dir.path());
        assert!(!store.passed("m"));
        store.put(record("m", 1, false)).unwrap();
        store.put(record("m:latest", 2, true)).unwrap();
        assert!(store.passed("m"));
        assert_eq!(store.records().len(), 1);
        for i in 0..(MAX_RECORDS + 10) {
            store
                .put(record(&format!("x{i}"), 10 + i as u64, true))
                .unwrap();
        }
        let reopened = ValidationStore::in_dir(dir.path());
        let records = reopened.records();
        assert_eq!(records.len(), MAX_RECORDS);
        // The oldest verdicts went first.
        assert!(!reopened.passed("m"));
        assert!(reopened.passed(&format!("x{}", MAX_RECORDS + 9)));
    }

    #[test]
    fn a_corrupt_store_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STORE_FILE), b"{\"records\": [").unwrap();
        let store = ValidationStore::in_dir(dir.path());
        assert!(store.records().is_empty());
        store.put(record("m", 1, true)).unwrap();
        assert!(store.passed("m"));
    }
}
