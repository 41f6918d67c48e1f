//! Tool calls assembled from the pieces a model sends them in: the one
//! merger behind both [`crate::ToolCallAccumulator`] (Ollama's side, whole
//! calls at the end of a round) and the OpenAI stream translation (each call
//! emitted whole as soon as its arguments parse).
//!
//! Ollama's rendered path sends each call whole; its native path sends all
//! calls on the final chunk; some models stream a call in pieces (name first,
//! argument fragments after) under one `function.index`. The rules:
//! - a piece with a `function.index` joins the latest call with that index
//!   that has not been emitted, unless it carries a name and that call is
//!   already whole (then it is a new call);
//! - a nameless piece without an index continues the latest open call;
//! - the id and the name come from the first piece that has one;
//! - argument strings are concatenated, argument objects merged;
//! - at most [`MAX_TOOL_CALLS`] calls per answer and
//!   [`MAX_ARGUMENT_BYTES`] of argument text per call are kept.

use serde_json::{Map, Value};

/// Most calls one answer may make; pieces starting further calls are dropped.
pub const MAX_TOOL_CALLS: usize = 128;

/// Most bytes of argument text one call may gather from its pieces; a call
/// that would grow past it keeps what it had and reports the overflow.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// One call being assembled.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    wire_index: Option<u64>,
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    object: Option<Map<String, Value>>,
    text: String,
    overflow: bool,
    emitted: bool,
}

impl Partial {
    /// Whole: a name and arguments that form a JSON object.
    fn whole(&self) -> bool {
        if self.name.is_empty() || self.overflow {
            return false;
        }
        let text = self.text.trim();
        if text.is_empty() {
            self.object.is_some()
        } else {
            serde_json::from_str::<Map<String, Value>>(text).is_ok()
        }
    }

    /// Nothing worth a call: neither a name nor argument text.
    fn blank(&self) -> bool {
        self.name.is_empty() && self.text.trim().is_empty()
    }

    /// The arguments as an object, with the reason when the model's
    /// arguments were not one (the object is then what could be kept).
    pub(crate) fn arguments(&self) -> (Map<String, Value>, Option<String>) {
        let mut arguments = self.object.clone().unwrap_or_default();
        if self.overflow {
            return (
                arguments,
                Some(format!(
                    "arguments are longer than {MAX_ARGUMENT_BYTES} bytes"
                )),
            );
        }
        let text = self.text.trim();
        if text.is_empty() {
            return (arguments, None);
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(object)) => {
                arguments.extend(object);
                (arguments, None)
            }
            // A model that double-encodes: "\"{\\\"a\\\":1}\"".
            Ok(Value::String(inner)) => match serde_json::from_str::<Map<String, Value>>(&inner) {
                Ok(object) => {
                    arguments.extend(object);
                    (arguments, None)
                }
                Err(err) => (
                    arguments,
                    Some(format!("arguments are not a JSON object: {err}")),
                ),
            },
            Ok(other) => (
                arguments,
                Some(format!("arguments must be a JSON object, got {other}")),
            ),
            Err(err) => (
                arguments,
                Some(format!("arguments are not valid JSON: {err}")),
            ),
        }
    }

    /// The arguments as OpenAI's JSON string; text that is not a JSON
    /// object is handed over as the model wrote it.
    pub(crate) fn arguments_json(&self) -> String {
        let (object, error) = self.arguments();
        let text = self.text.trim();
        if error.is_none() || self.object.is_some() || text.is_empty() {
            Value::Object(object).to_string()
        } else {
            text.to_string()
        }
    }

    fn absorb(&mut self, id: Option<&str>, name: &str, arguments: Option<&Value>) {
        if self.id.is_none() {
            self.id = id.filter(|id| !id.is_empty()).map(str::to_string);
        }
        if self.name.is_empty() {
            self.name = name.to_string();
        }
        match arguments {
            Some(Value::Object(object)) => self
                .object
                .get_or_insert_with(Map::new)
                .extend(object.iter().map(|(k, v)| (k.clone(), v.clone()))),
            Some(Value::String(fragment)) if !self.overflow => {
                if self.text.len() + fragment.len() > MAX_ARGUMENT_BYTES {
                    self.overflow = true;
                } else {
                    self.text.push_str(fragment);
                }
            }
            _ => {}
        }
    }
}

/// The calls of one answer, in the order they first appeared.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    calls: Vec<Partial>,
}

impl Calls {
    /// Merges one entry of a `tool_calls` array (anything but an object is
    /// ignored); returns the position of the call it went to.
    pub(crate) fn push(&mut self, call: &Value) -> Option<usize> {
        if !call.is_object() {
            return None;
        }
        let function = call
            .get("function")
            .filter(|f| f.is_object())
            .unwrap_or(call);
        let wire_index = function
            .get("index")
            .or_else(|| call.get("index"))
            .and_then(Value::as_u64);
        let name = function.get("name").and_then(Value::as_str).unwrap_or("");
        let id = call.get("id").and_then(Value::as_str);
        // Ollama's parser accepts "parameters" for "arguments"; so do we.
        let arguments = function
            .get("arguments")
            .or_else(|| function.get("parameters"));

        let open = |p: &Partial| !p.emitted;
        let existing = match wire_index {
            Some(index) => self
                .calls
                .iter()
                .rposition(|p| open(p) && p.wire_index == Some(index))
                .filter(|&pos| name.is_empty() || !self.calls[pos].whole()),
            None if name.is_empty() => self.calls.iter().rposition(open),
            None => None,
        };
        let pos = match existing {
            Some(pos) => pos,
            None if self.calls.len() >= MAX_TOOL_CALLS => return None,
            None => {
                self.calls.push(Partial {
                    wire_index,
                    ..Partial::default()
                });
                self.calls.len() - 1
            }
        };
        self.calls[pos].absorb(id, name, arguments);
        Some(pos)
    }

    /// The call at `pos` if it is whole and not emitted yet; it counts as
    /// emitted from now on.
    pub(crate) fn emit_if_whole(&mut self, pos: usize) -> Option<&Partial> {
        let call = self.calls.get_mut(pos)?;
        if call.emitted || !call.whole() {
            return None;
        }
        call.emitted = true;
        Some(call)
    }

    /// Every call not emitted yet, whole or not, except blank ones; all
    /// count as emitted from now on.
    pub(crate) fn emit_rest(&mut self) -> Vec<&Partial> {
        self.calls
            .iter_mut()
            .filter(|call| !call.emitted && !call.blank())
            .map(|call| {
                call.emitted = true;
                &*call
            })
            .collect()
    }

    /// Every call so far except blank ones, in order of first appearance.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Partial> {
        self.calls.iter().filter(|call| !call.blank())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.all().next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(pieces: &[Value]) -> Calls {
        let mut calls = Calls::default();
        for piece in pieces {
            calls.push(piece);
        }
        calls
    }

    #[test]
    fn the_first_id_and_name_win() {
        let c = calls(&[
            json!({"id": "", "function": {"index": 0, "name": "f", "arguments": "{\"a\":"}}),
            json!({"id": "call_2", "function": {"index": 0, "name": "g", "arguments": "1}"}}),
        ]);
        let all: Vec<&Partial> = c.all().collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "f");
        assert_eq!(all[0].id.as_deref(), Some("call_2"));
        assert_eq!(Value::Object(all[0].arguments().0), json!({"a": 1}));
    }

    #[test]
    fn a_nameless_piece_without_index_continues_the_open_call() {
        let c = calls(&[
            json!({"function": {"name": "f", "arguments": "{\"a\": "}}),
            json!({"function": {"arguments": "2}"}}),
        ]);
        let all: Vec<&Partial> = c.all().collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].arguments_json(), "{\"a\":2}");
    }

    #[test]
    fn emitted_calls_take_no_more_pieces() {
        let mut c = Calls::default();
        let pos = c
            .push(&json!({"function": {"index": 0, "name": "f", "arguments": {}}}))
            .unwrap();
        assert!(c.emit_if_whole(pos).is_some());
        assert!(c.emit_if_whole(pos).is_none(), "emitted once");
        let next = c
            .push(&json!({"function": {"index": 0, "arguments": "{\"x\": 1}"}}))
            .unwrap();
        assert_ne!(next, pos);
        assert_eq!(c.emit_rest().len(), 1);
        assert!(c.emit_rest().is_empty());
    }

    #[test]
    fn blank_pieces_make_no_call() {
        let c = calls(&[
            json!({"function": {"index": 3, "arguments": "  "}}),
            json!("nope"),
            json!(42),
        ]);
        assert!(c.is_empty());
    }

    #[test]
    fn the_number_of_calls_is_capped() {
        let pieces: Vec<Value> = (0..MAX_TOOL_CALLS + 5)
            .map(|i| json!({"function": {"index": i, "name": "f", "arguments": {}}}))
            .collect();
        assert_eq!(calls(&pieces).all().count(), MAX_TOOL_CALLS);
    }

    #[test]
    fn argument_text_is_capped_and_the_overflow_reported() {
        let big = "x".repeat(MAX_ARGUMENT_BYTES / 2 + 1);
        let c = calls(&[
            json!({"function": {"index": 0, "name": "f", "arguments": "{\"a\": \""}}),
            json!({"function": {"index": 0, "arguments": big}}),
            json!({"function": {"index": 0, "arguments": big}}),
            json!({"function": {"index": 0, "arguments": "\"}"}}),
        ]);
        let all: Vec<&Partial> = c.all().collect();
        assert_eq!(all.len(), 1);
        assert!(all[0].text.len() <= MAX_ARGUMENT_BYTES);
        let (_, error) = all[0].arguments();
        assert!(error.unwrap().contains("longer than"));
    }
}
