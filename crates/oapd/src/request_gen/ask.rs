//! One exchange with Ollama: which model writes the requests, the prompt
//! built from a tool's name and description, and the strict reading of
//! the answer. Everything the model says is data: an answer that is not
//! the JSON asked for is refused whole, and each request in it goes
//! through [`oap_discovery::requests::accepted`] (no control characters,
//! cut to its length cap, at most its count).

use std::time::Duration;

use hyper::{HeaderMap, Method};
use oap_bridge::upstream::{self, Upstream};
use serde_json::{json, Value};

/// Requests asked for per tool.
pub const REQUESTS_ASKED: usize = 5;

/// Longest tool name put into the prompt, in characters.
const MAX_PROMPT_NAME: usize = 64;

/// Longest tool description put into the prompt, in characters: enough
/// for what a tool does; a longer one costs the model's time, not quality.
const MAX_PROMPT_DESCRIPTION: usize = 600;

/// Largest chat answer read. Five short requests are a few hundred bytes;
/// a model that runs on past its `num_predict` cannot reach this.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Largest `/api/tags` answer read.
const MAX_TAGS_BYTES: usize = 1024 * 1024;

/// Items of an answer's list looked at: the first ones only, so a list of
/// a million items costs no more than one of this many.
const MAX_ITEMS_READ: usize = 64;

/// Tokens the model may write: five requests need about 150.
const NUM_PREDICT: u32 = 400;

/// How long one generation call may take, answer included. A small model
/// on a 4-core board writes 400 tokens in well under a minute; loading it
/// from an SD card first can take as long again.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the model list may take.
const TAGS_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one exchange gave no requests.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Ollama could not be reached, or the exchange broke off.
    #[error("cannot reach Ollama: {0}")]
    Unreachable(String),
    /// Ollama answered with an error status.
    #[error("Ollama answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// Ollama's error message (cut).
        message: String,
    },
    /// No complete answer in time.
    #[error("no answer from Ollama within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The answer is not what was asked for.
    #[error("the model's answer is not usable: {0}")]
    BadAnswer(String),
    /// No installed model can write the requests.
    #[error("no model to write requests with: {0}")]
    NoModel(String),
}

impl AskError {
    /// The model answered, badly: the tool is tried again later, a few
    /// times at most. Anything else is Ollama's state, not the tool's.
    pub fn is_bad_answer(&self) -> bool {
        matches!(self, AskError::BadAnswer(_))
    }

    /// A short fixed word for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AskError::Unreachable(_) | AskError::Timeout(_) => "unreachable",
            AskError::Status { .. } => "error_status",
            AskError::BadAnswer(_) => "bad_answer",
            AskError::NoModel(_) => "no_model",
        }
    }
}

/// The model that writes, as the cache keys it: its name and, when Ollama
/// lists one, its digest (a model pulled again under the same name is
/// another model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelId {
    /// The name as Ollama lists it (`qwen3:4b`).
    pub name: String,
    /// The digest `/api/tags` gives, when it gives one.
    pub digest: Option<String>,
}

impl ModelId {
    /// `name@digest` (or the name alone): the cache's key for the model.
    pub fn key(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}@{digest}", self.name),
            None => self.name.clone(),
        }
    }

    /// The model's name in a cache key (the part before `@`).
    pub fn name_of_key(key: &str) -> &str {
        key.split('@').next().unwrap_or(key)
    }
}

/// One model `/api/tags` lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Installed {
    /// Its name.
    pub name: String,
    /// Its digest, when listed.
    pub digest: Option<String>,
    /// Whether it can complete text (an embedding model cannot).
    pub completes: bool,
}

/// `name:latest` for a name without a tag, as Ollama names models.
pub fn canonical(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

/// The models of an `/api/tags` answer, in its order.
pub fn installed_models(tags: &Value) -> Vec<Installed> {
    tags.get("models")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|model| {
            let name = model
                .get("name")
                .or_else(|| model.get("model"))
                .and_then(Value::as_str)?
                .to_string();
            if name.is_empty() || name.chars().any(char::is_control) {
                return None;
            }
            let digest = model
                .get("digest")
                .and_then(Value::as_str)
                .filter(|d| {
                    !d.is_empty() && d.chars().all(|c| c.is_ascii_alphanumeric() || c == ':')
                })
                .map(str::to_string);
            // Newer Ollamas list capabilities; without them, an embedding
            // model is known by its name or its BERT family.
            let completes = match model.get("capabilities").and_then(Value::as_array) {
                Some(capabilities) => capabilities
                    .iter()
                    .any(|c| c.as_str() == Some("completion")),
                None => {
                    let family = model
                        .pointer("/details/family")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    !name.to_ascii_lowercase().contains("embed")
                        && !family.to_ascii_lowercase().contains("bert")
                }
            };
            Some(Installed {
                name,
                digest,
                completes,
            })
        })
        .collect()
}

/// The model to write with: the configured one (it must be installed);
/// else an installed model that wrote cached rows (`cached_names`, most
/// used first), so pulling another model does not rewrite them all; else
/// the first installed model that completes text.
pub fn choose_model(
    installed: &[Installed],
    configured: Option<&str>,
    cached_names: &[String],
) -> Result<ModelId, AskError> {
    let id = |model: &Installed| ModelId {
        name: model.name.clone(),
        digest: model.digest.clone(),
    };
    if let Some(configured) = configured {
        let wanted = canonical(configured);
        return installed
            .iter()
            .find(|m| canonical(&m.name) == wanted)
            .map(id)
            .ok_or_else(|| {
                AskError::NoModel(format!(
                    "discovery.generate_model {configured:?} is not installed in Ollama"
                ))
            });
    }
    for name in cached_names {
        let wanted = canonical(name);
        if let Some(model) = installed
            .iter()
            .find(|m| m.completes && canonical(&m.name) == wanted)
        {
            return Ok(id(model));
        }
    }
    installed
        .iter()
        .find(|m| m.completes)
        .map(id)
        .ok_or_else(|| AskError::NoModel("Ollama lists no model that completes text".into()))
}

/// The installed models, from `/api/tags`.
pub async fn list_models(upstream: &Upstream) -> Result<Vec<Installed>, AskError> {
    let exchange = async {
        let response = upstream
            .send(
                Method::GET,
                "/api/tags",
                &HeaderMap::new(),
                upstream::full(Vec::new()),
            )
            .await
            .map_err(|err| AskError::Unreachable(err.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            let message = upstream::error_message(response.into_body()).await;
            return Err(AskError::Status {
                status: status.as_u16(),
                message: cut(&message, 200),
            });
        }
        let bytes = upstream::read_limited(response.into_body(), MAX_TAGS_BYTES)
            .await
            .map_err(|err| AskError::Unreachable(format!("reading /api/tags: {err}")))?;
        let tags: Value = serde_json::from_slice(&bytes)
            .map_err(|err| AskError::Unreachable(format!("/api/tags is not JSON: {err}")))?;
        Ok(installed_models(&tags))
    };
    tokio::time::timeout(TAGS_TIMEOUT, exchange)
        .await
        .unwrap_or(Err(AskError::Timeout(TAGS_TIMEOUT)))
}

/// At most `max` characters of `text`, control characters made spaces.
fn cut(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// The `/api/chat` body asking `model` for requests for the tool `name`
/// that does `description` (both cut to a bound).
pub fn chat_body(model: &str, name: &str, description: &str) -> Value {
    let name = cut(name, MAX_PROMPT_NAME);
    let description = cut(description, MAX_PROMPT_DESCRIPTION);
    let prompt = format!(
        "A tool called \"{name}\" does this: {description}\n\n\
         Write {REQUESTS_ASKED} different requests a user might say or type to an assistant \
         when they need this tool: one short sentence each, in everyday words, the way the \
         user would say it, without naming the tool. Answer with JSON only: \
         {{\"requests\": [\"...\", \"...\"]}}"
    );
    json!({
        "model": model,
        "stream": false,
        "format": "json",
        // A thinking model would think first: slower, and nothing gained
        // for five sentences. `false` is accepted by every model.
        "think": false,
        "options": {"temperature": 0.7, "num_predict": NUM_PREDICT},
        "messages": [
            {"role": "system", "content": "You write example requests for tools. You answer with JSON only."},
            {"role": "user", "content": prompt},
        ],
    })
}

/// Asks `model` for requests for one tool; the accepted ones, best first.
pub async fn ask(
    upstream: &Upstream,
    model: &str,
    name: &str,
    description: &str,
) -> Result<Vec<String>, AskError> {
    let body = chat_body(model, name, description);
    let exchange = async {
        let response = upstream
            .post_json("/api/chat", &body)
            .await
            .map_err(|err| match err {
                upstream::UpstreamError::Timeout(after) => AskError::Timeout(after),
                other => AskError::Unreachable(other.to_string()),
            })?;
        let status = response.status();
        if !status.is_success() {
            let message = upstream::error_message(response.into_body()).await;
            return Err(AskError::Status {
                status: status.as_u16(),
                message: cut(&message, 200),
            });
        }
        let bytes = upstream::read_limited(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|err| {
                AskError::BadAnswer(format!(
                    "unreadable or over {MAX_ANSWER_BYTES} bytes: {err}"
                ))
            })?;
        read_answer(&bytes)
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .unwrap_or(Err(AskError::Timeout(CALL_TIMEOUT)))
}

/// The accepted requests of a non-streamed `/api/chat` answer whose
/// message content is `{"requests": [...]}` or a bare list of strings.
pub fn read_answer(bytes: &[u8]) -> Result<Vec<String>, AskError> {
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|err| AskError::BadAnswer(format!("not a JSON chat answer: {err}")))?;
    let content = answer
        .pointer("/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| AskError::BadAnswer("no message content".into()))?;
    let content: Value = serde_json::from_str(content.trim())
        .map_err(|err| AskError::BadAnswer(format!("the content is not JSON: {err}")))?;
    let items = match &content {
        Value::Array(items) => items,
        Value::Object(fields) => match fields.get("requests") {
            Some(Value::Array(items)) => items,
            _ => {
                // A model may name the list otherwise; one list is taken,
                // several are ambiguous.
                let mut lists = fields.values().filter_map(Value::as_array);
                match (lists.next(), lists.next()) {
                    (Some(items), None) => items,
                    _ => {
                        return Err(AskError::BadAnswer(
                            "the content holds no list of requests".into(),
                        ))
                    }
                }
            }
        },
        _ => {
            return Err(AskError::BadAnswer(
                "the content holds no list of requests".into(),
            ))
        }
    };
    let texts: Vec<String> = items
        .iter()
        .take(MAX_ITEMS_READ)
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let accepted = oap_discovery::requests::accepted(texts);
    if accepted.is_empty() {
        return Err(AskError::BadAnswer(format!(
            "none of its {} items is a usable request",
            items.len()
        )));
    }
    Ok(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content: &str) -> Vec<u8> {
        json!({"model": "m", "message": {"role": "assistant", "content": content}, "done": true})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn requests_are_read_from_the_object_or_a_bare_list() {
        let read = read_answer(&answer(
            r#"{"requests": ["how many words", "count lines"]}"#,
        ));
        assert_eq!(
            read.ok(),
            Some(vec!["how many words".into(), "count lines".into()])
        );
        let read = read_answer(&answer(r#"["one thing", "another"]"#));
        assert_eq!(read.ok(), Some(vec!["one thing".into(), "another".into()]));
        let read = read_answer(&answer(r#"{"examples": ["named otherwise"]}"#));
        assert_eq!(read.ok(), Some(vec!["named otherwise".into()]));
    }

    #[test]
    fn hostile_answers_are_refused_or_capped() {
        assert!(read_answer(b"not json").is_err_and(|e| e.is_bad_answer()));
        assert!(read_answer(&answer("sure! here are some")).is_err_and(|e| e.is_bad_answer()));
        assert!(read_answer(&answer(r#"{"a": ["x"], "b": ["y"]}"#)).is_err());
        assert!(read_answer(&answer(r#"{"requests": [1, 2, null]}"#)).is_err());
        // Control characters refuse the item, not the answer.
        let read = read_answer(&answer(
            &json!({"requests": ["bad\u{1b}[2Jone", "two\nlines", "fine one"]}).to_string(),
        ));
        assert_eq!(read.ok(), Some(vec!["fine one".into()]));
        let long = "word ".repeat(2_000);
        let read = read_answer(&answer(&json!({"requests": [long]}).to_string())).unwrap();
        assert!(read[0].len() <= oap_discovery::requests::MAX_REQUEST_TEXT);
        let many: Vec<String> = (0..1000).map(|i| format!("request number {i}")).collect();
        let read = read_answer(&answer(&json!({"requests": many}).to_string())).unwrap();
        assert_eq!(read.len(), oap_discovery::requests::MAX_REQUEST_ROWS);
    }

    #[test]
    fn the_prompt_is_bounded_and_clean() {
        let body = chat_body(
            "m",
            &"n".repeat(500),
            &format!("desc\u{7}{}", "d".repeat(5000)),
        );
        let prompt = body["messages"][1]["content"].as_str().unwrap();
        assert!(prompt.len() < 1200, "{}", prompt.len());
        assert!(!prompt.contains('\u{7}'));
        assert_eq!(body["stream"], false);
        assert_eq!(body["format"], "json");
    }

    #[test]
    fn the_model_is_the_configured_one_else_a_cached_one_else_the_first_that_completes() {
        let tags = json!({"models": [
            {"name": "nomic-embed-text:latest", "digest": "aa"},
            {"name": "llama3.2:1b", "digest": "bb", "details": {"family": "llama"}},
            {"name": "qwen3:4b", "digest": "cc", "capabilities": ["completion", "tools"]},
        ]});
        let installed = installed_models(&tags);
        assert!(!installed[0].completes);
        let first = choose_model(&installed, None, &[]).unwrap();
        assert_eq!(first.key(), "llama3.2:1b@bb");
        let cached = choose_model(&installed, None, &["qwen3:4b".into()]).unwrap();
        assert_eq!(cached.name, "qwen3:4b");
        let configured = choose_model(&installed, Some("qwen3:4b"), &["llama3.2:1b".into()]);
        assert_eq!(configured.unwrap().name, "qwen3:4b");
        let missing = choose_model(&installed, Some("phi4"), &[]);
        assert!(missing.is_err_and(|e| e.to_string().contains("phi4")));
        assert!(choose_model(&[], None, &[]).is_err());
        assert_eq!(canonical("phi4"), "phi4:latest");
        assert_eq!(canonical("host:5000/ns/m"), "host:5000/ns/m:latest");
    }
}
