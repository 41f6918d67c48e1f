//! The client's `format` and `keep_alive`: they belong to the round that
//! answers, which a round offering oapd's tools may not be.
//!
//! - `format` (grammar-constrained decoding) can keep the model from
//!   calling a tool, so it is left out of such rounds and their events are
//!   held back; when one answers without calling any tool, its answer is
//!   dropped and the question asked once more with `format` and without
//!   oapd's tools (the client's stay offered): the format round.
//! - `keep_alive` (say 0) would unload the model between rounds, so it is
//!   left out of such rounds too; when one of them turns out to be the
//!   last, the client's value is applied to the model afterwards with an
//!   empty `/api/generate`, Ollama's way to set it alone.
//!
//! The loop calls [`AnswerFields`] at three phases: planning a round
//! ([`AnswerFields::for_round`], [`AnswerFields::holds`]), after the round
//! ([`AnswerFields::after_round`]) and when the request is over
//! ([`AnswerFields::finish`]).

use serde_json::{json, Map, Value};

use crate::upstream::Upstream;

/// The answer fields a request came with, and whether the loop is asking
/// for the formatted answer again.
#[derive(Debug, Default)]
pub struct AnswerFields {
    format: Option<Value>,
    keep_alive: Option<Value>,
    /// The next round asks again with `format` and without oapd's tools.
    format_round: bool,
}

impl AnswerFields {
    /// Takes `format` and `keep_alive` out of `request` (`null` counts as absent).
    pub fn take(request: &mut Map<String, Value>) -> AnswerFields {
        AnswerFields {
            format: request.remove("format").filter(|v| !v.is_null()),
            keep_alive: request.remove("keep_alive").filter(|v| !v.is_null()),
            format_round: false,
        }
    }

    /// Whether this round is the format round (oapd's tools not offered).
    pub fn format_round(&self) -> bool {
        self.format_round
    }

    /// The fields the round's body carries: both when the round answers
    /// for sure, none when oapd may run a call and ask again.
    pub fn for_round(&self, may_continue: bool) -> Vec<(&'static str, &Value)> {
        if may_continue {
            return Vec::new();
        }
        [("format", &self.format), ("keep_alive", &self.keep_alive)]
            .into_iter()
            .filter_map(|(key, value)| value.as_ref().map(|v| (key, v)))
            .collect()
    }

    /// Whether the round's events wait until it is over: `format` was
    /// left out of it, so its text may not be what the client asked for.
    pub fn holds(&self, may_continue: bool) -> bool {
        self.format.is_some() && may_continue
    }

    /// After a round [`AnswerFields::holds`] held: an answer without a
    /// call to the client's tools is unformatted text, so it is dropped
    /// (`release_held` cleared); when no call of oapd's runs either, the
    /// question is asked again (true: the next round is the format round).
    pub fn after_round(
        &mut self,
        held_for_format: bool,
        ours_called: bool,
        theirs_called: bool,
        release_held: &mut bool,
    ) -> bool {
        if !held_for_format || theirs_called {
            return false;
        }
        *release_held = false;
        if !ours_called {
            self.format_round = true;
        }
        !ours_called
    }

    /// The request is over after a round that left `keep_alive` out
    /// (`may_continue`): the client's value is applied to `model` now.
    pub fn finish(&self, upstream: &Upstream, model: &str, may_continue: bool) {
        if let Some(keep_alive) = self.keep_alive.as_ref().filter(|_| may_continue) {
            apply_keep_alive(upstream, model, keep_alive);
        }
    }
}

/// Applies the client's `keep_alive` to `model` once the loop is over (it
/// was left out of the last round, which might not have been the last):
/// an empty `/api/generate`, which only sets how long the model stays
/// loaded. In the background: the client does not wait for it.
fn apply_keep_alive(upstream: &Upstream, model: &str, keep_alive: &Value) {
    let upstream = upstream.clone();
    let body = json!({"model": model, "keep_alive": keep_alive, "stream": false});
    let model = model.to_string();
    tokio::spawn(async move {
        match upstream
            .post_json_read("/api/generate", &body, 64 * 1024)
            .await
        {
            Ok((status, _)) if status.is_success() => {}
            Ok((status, _)) => {
                tracing::warn!(model = %model, %status, "Ollama refused the client's keep_alive")
            }
            Err(err) => {
                tracing::warn!(model = %model, error = %err, "the client's keep_alive did not reach Ollama")
            }
        }
    });
}
