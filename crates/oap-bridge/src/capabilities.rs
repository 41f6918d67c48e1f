//! Which models take tools, and the context window they run with, from
//! Ollama's `/api/show`, cached across requests. The loop asks before the
//! first round; a model that answers "does not support tools" anyway
//! corrects the cache (the capability retry, `tool_loop.rs`).
//!
//! It also remembers the models whose answers start inside thinking: a
//! template that opens `<think>` in the prompt leaves only `</think>` in
//! the answer, and the first such answer teaches the bridge to split the
//! next ones from their start (`oap_wire::think`, `round.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::{json, Value};

use crate::upstream::{Upstream, UpstreamError};

/// How long a model's capabilities are trusted before `/api/show` is asked again.
const CAPABILITY_TTL: Duration = Duration::from_secs(300);

/// Which models can take tools, from `/api/show`, cached.
#[derive(Default)]
pub struct Capabilities {
    cache: Mutex<HashMap<String, (bool, Instant)>>,
    /// The context window `/api/show` implies per model ([`context_window`]).
    windows: Mutex<HashMap<String, u64>>,
    /// `details.parameter_size` from `/api/show` per model (`"3.2B"`).
    sizes: Mutex<HashMap<String, String>>,
    /// Models whose answers start inside thinking (they close `</think>`
    /// without opening it), at most [`MAX_REMEMBERED_THINKERS`].
    thinks_unopened: Mutex<HashSet<String>>,
}

/// Most models remembered as starting their answers inside thinking: only
/// models Ollama answered for get in, so a few suffice; the cap keeps a
/// stream of odd model names from growing the set.
const MAX_REMEMBERED_THINKERS: usize = 256;

/// Ollama's context window when neither the request nor the model's
/// Modelfile sets `num_ctx`.
pub const OLLAMA_DEFAULT_NUM_CTX: u64 = 4096;

/// The context window Ollama runs `model` with when the request sets no
/// `num_ctx`, from its `/api/show` answer: the Modelfile's `num_ctx`
/// parameter, else Ollama's default, never more than the model's own
/// `model_info.*.context_length`.
pub fn context_window(show: &Value) -> u64 {
    let configured = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .rev()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        });
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)
        .and_then(|info| {
            info.iter()
                .find(|(key, _)| key.ends_with(".context_length"))
                .and_then(|(_, value)| value.as_u64())
        });
    let window = configured.unwrap_or(OLLAMA_DEFAULT_NUM_CTX);
    trained.map_or(window, |trained| window.min(trained))
}

impl Capabilities {
    /// Whether `model` supports tools. Unknown (older Ollama without a
    /// capabilities list) counts as yes; a 400 "does not support tools"
    /// later corrects the cache.
    pub async fn supports_tools(
        &self,
        upstream: &Upstream,
        model: &str,
    ) -> Result<bool, UpstreamError> {
        if let Some(known) = self.cached(model) {
            return Ok(known);
        }
        let (status, body) = upstream
            .post_json_read("/api/show", &json!({"model": model}), 4 * 1024 * 1024)
            .await?;
        let supports = if status.is_success() {
            if let Ok(mut windows) = self.windows.lock() {
                windows.insert(model.to_string(), context_window(&body));
            }
            if let (Ok(mut sizes), Some(size)) = (
                self.sizes.lock(),
                body.pointer("/details/parameter_size")
                    .and_then(Value::as_str),
            ) {
                sizes.insert(model.to_string(), size.to_string());
            }
            match body.get("capabilities").and_then(Value::as_array) {
                Some(caps) => caps.iter().any(|c| c == "tools"),
                None => true,
            }
        } else {
            // Unknown model: let the chat request itself fail with Ollama's 404.
            return Ok(false);
        };
        self.remember(model, supports);
        Ok(supports)
    }

    /// The context window learnt from `model`'s `/api/show` (after
    /// [`Capabilities::supports_tools`] asked), if known.
    pub fn window(&self, model: &str) -> Option<u64> {
        self.windows.lock().ok()?.get(model).copied()
    }

    /// The model's size as `/api/show` wrote it (`"3.2B"`), if known.
    pub fn parameter_size(&self, model: &str) -> Option<String> {
        self.sizes.lock().ok()?.get(model).cloned()
    }

    fn cached(&self, model: &str) -> Option<bool> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(model)
            .filter(|(_, at)| at.elapsed() < CAPABILITY_TTL)
            .map(|(supports, _)| *supports)
    }

    /// Whether `model`'s answers were seen to start inside thinking.
    pub fn thinks_unopened(&self, model: &str) -> bool {
        self.thinks_unopened
            .lock()
            .is_ok_and(|models| models.contains(model))
    }

    /// Records that `model` closed `</think>` without opening it.
    pub fn remember_thinks_unopened(&self, model: &str) {
        if let Ok(mut models) = self.thinks_unopened.lock() {
            if models.len() < MAX_REMEMBERED_THINKERS {
                models.insert(model.to_string());
            }
        }
    }

    /// Records whether `model` accepts tools, trusted for `CAPABILITY_TTL`;
    /// the loop calls it when Ollama says "does not support tools".
    pub fn remember(&self, model: &str, supports: bool) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(model.to_string(), (supports, Instant::now()));
        }
    }
}

/// Whether Ollama refused a round because the model takes no tools.
pub fn refuses_tools(status: StatusCode, message: &str) -> bool {
    status == StatusCode::BAD_REQUEST && message.contains("does not support tools")
}

#[cfg(test)]
mod window_tests {
    use super::{context_window, OLLAMA_DEFAULT_NUM_CTX};
    use serde_json::json;

    #[test]
    fn the_window_is_the_modelfile_num_ctx_or_the_default_within_the_trained_length() {
        let show = |parameters: &str, trained: u64| {
            json!({"parameters": parameters,
                   "model_info": {"general.architecture": "qwen3", "qwen3.context_length": trained}})
        };
        assert_eq!(
            context_window(&show("stop \"<|im_end|>\"", 40_960)),
            OLLAMA_DEFAULT_NUM_CTX
        );
        assert_eq!(
            context_window(&show("num_ctx 16384\nstop \"x\"", 40_960)),
            16_384
        );
        assert_eq!(context_window(&show("num_ctx 16384", 2048)), 2048);
        assert_eq!(context_window(&show("", 1024)), 1024);
        assert_eq!(context_window(&json!({})), OLLAMA_DEFAULT_NUM_CTX);
    }
}
