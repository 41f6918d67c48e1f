//! Mixed turns: one model turn that calls both oapd's tools and the
//! client's.
//!
//! oapd runs its calls at once and hands the client only the client's
//! calls (the client cannot run oapd's). The client then sends the
//! conversation back with its own results, and that follow-up carries
//! nothing of oapd's call: the model would not see oapd's result and would
//! likely call its tool again, a side effect twice.
//!
//! So when the loop hands back such a turn it remembers what it added to
//! the conversation (its earlier rounds, its calls of that turn and their
//! results), keyed by a digest of the conversation as the client sent it
//! plus the client's calls of that turn, which is what the client echoes
//! back. When a request's messages contain an assistant message whose
//! digest is remembered, oapd's part is spliced back in before the model
//! sees it: the rounds before that turn, oapd's calls next to the client's
//! in that assistant message, and oapd's results right after it. Nothing
//! runs again.
//!
//! The key covers the model, every message before the turn (role, content,
//! calls, images by their bytes) and the client's calls (names and
//! arguments, not the ids some clients drop), so a remembered turn cannot
//! be spliced into another conversation. Images are hashed only when the
//! rest matches (or a turn is remembered), so a chat with a large image
//! pays nothing for this otherwise. Entries are bounded in count,
//! bytes (each and together) and age, process-wide; a turn too large to
//! remember is handed back as before, only without the splice.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use oap_wire::ToolCall;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::payload::Images;

/// Most turns remembered at once (the oldest goes first).
const MAX_ENTRIES: usize = 256;
/// Most bytes of one remembered turn (its messages as JSON).
const MAX_ENTRY_BYTES: usize = 1024 * 1024;
/// Most bytes of all remembered turns together.
const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;
/// How long a turn waits for the client's follow-up.
const TTL: Duration = Duration::from_secs(15 * 60);

/// The digest of a request's conversation as the client sent it (before
/// oapd added anything), the key prefix of a turn the loop may remember.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversation([u8; 32]);

struct Entry {
    key: [u8; 32],
    /// The digest of the images before the turn ([`images_digest`]).
    images: [u8; 32],
    at: Instant,
    bytes: usize,
    /// What the loop added, in order; the last assistant message holds
    /// oapd's calls of the handed-back turn, the messages after it their
    /// results.
    added: Vec<Value>,
}

/// The remembered mixed turns of the whole process.
#[derive(Default)]
pub struct MixedTurns {
    entries: Mutex<Vec<Entry>>,
}

impl MixedTurns {
    /// Takes a request as the client sent it: splices oapd's part of any
    /// remembered turn back into `chat["messages"]` and returns the digest
    /// of the conversation as sent, for [`MixedTurns::remember`].
    pub fn enter(&self, chat: &mut Map<String, Value>, images: &Images) -> Option<Conversation> {
        let model = chat.get("model").and_then(Value::as_str)?.to_string();
        let Some(Value::Array(messages)) = chat.get_mut("messages") else {
            return None;
        };
        let mut hasher = Sha256::new();
        field(&mut hasher, model.as_bytes());
        let mut splices: Vec<(usize, Vec<Value>)> = Vec::new();
        let any_remembered = self.entries.lock().map(|e| !e.is_empty()).unwrap_or(false);
        for (index, message) in messages.iter().enumerate() {
            if any_remembered {
                if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
                    if message.get("role").and_then(Value::as_str) == Some("assistant")
                        && !calls.is_empty()
                    {
                        let prefix = hasher.clone().finalize().into();
                        let key = turn_key(&prefix, calls.iter().filter_map(wire_call));
                        let before = messages.get(..index).unwrap_or_default();
                        if let Some(added) = self.lookup(&key, || images_digest(before, images)) {
                            splices.push((index, added));
                        }
                    }
                }
            }
            field(&mut hasher, &canonical_message(message));
        }
        // Back to front, so earlier indexes stay valid.
        for (index, added) in splices.into_iter().rev() {
            splice(messages, index, added);
        }
        Some(Conversation(hasher.finalize().into()))
    }

    /// Remembers what the loop added to `conversation` (`added`: its
    /// earlier rounds, then the assistant message with oapd's calls of the
    /// turn and their results) under the client's calls of that turn;
    /// `sent` are the messages the loop began with (their images, in
    /// order, are the conversation's).
    pub fn remember(
        &self,
        conversation: &Conversation,
        theirs: &[ToolCall],
        added: &[Value],
        sent: &[Value],
        images: &Images,
    ) {
        let bytes = added
            .iter()
            .map(|m| serde_json::to_vec(m).map(|v| v.len()).unwrap_or(usize::MAX))
            .fold(0usize, usize::saturating_add);
        if bytes > MAX_ENTRY_BYTES {
            tracing::warn!(
                bytes,
                "a turn that called oapd's and the client's tools is too large to remember; \
                 the client's follow-up will not carry oapd's result"
            );
            return;
        }
        let key = turn_key(
            &conversation.0,
            theirs.iter().map(|c| (c.name.clone(), c.arguments.clone())),
        );
        let images = images_digest(sent, images);
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        entries.retain(|e| e.at.elapsed() < TTL && e.key != key);
        let mut total: usize = entries.iter().map(|e| e.bytes).sum();
        while !entries.is_empty()
            && (entries.len() >= MAX_ENTRIES || total + bytes > MAX_TOTAL_BYTES)
        {
            total -= entries.remove(0).bytes;
        }
        entries.push(Entry {
            key,
            images,
            at: Instant::now(),
            bytes,
            added: added.to_vec(),
        });
    }

    /// Number of turns remembered now (expired ones included until the
    /// next change).
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// True when no turn is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lookup(&self, key: &[u8; 32], images: impl FnOnce() -> [u8; 32]) -> Option<Vec<Value>> {
        let (expected, added) = {
            let entries = self.entries.lock().ok()?;
            let entry = entries
                .iter()
                .find(|e| &e.key == key && e.at.elapsed() < TTL)?;
            (entry.images, entry.added.clone())
        };
        (images() == expected).then_some(added)
    }
}

/// Replaces the client's assistant message at `index` with oapd's earlier
/// rounds, the message with oapd's calls before the client's, and oapd's
/// results.
fn splice(messages: &mut Vec<Value>, index: usize, added: Vec<Value>) {
    let Some(last_assistant) = added
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    else {
        return;
    };
    let mut added = added;
    let results = added.split_off(last_assistant + 1);
    let Some(ours) = added.pop() else {
        return;
    };
    let earlier = added;
    let mut assistant = messages[index].clone();
    let mut calls: Vec<Value> = ours
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(theirs) = assistant.get("tool_calls").and_then(Value::as_array) {
        calls.extend(theirs.iter().cloned());
    }
    assistant["tool_calls"] = Value::Array(calls);
    let mut replacement = earlier;
    replacement.push(assistant);
    replacement.extend(results);
    messages.splice(index..=index, replacement);
}

/// A length-prefixed field, so no two sequences of fields hash alike.
fn field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

fn turn_key(
    prefix: &[u8; 32],
    calls: impl Iterator<Item = (String, Map<String, Value>)>,
) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(prefix);
    for (name, arguments) in calls {
        field(&mut hasher, name.as_bytes());
        field(&mut hasher, canonical(&Value::Object(arguments)).as_bytes());
    }
    hasher.finalize().into()
}

/// A call as a client echoes it in Ollama's shape: name and arguments (an
/// object, or the JSON text of one).
fn wire_call(call: &Value) -> Option<(String, Map<String, Value>)> {
    let function = call.get("function")?;
    let name = function.get("name")?.as_str()?.to_string();
    let arguments = match function.get("arguments") {
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(Value::String(text)) => match serde_json::from_str(text) {
            Ok(Value::Object(arguments)) => arguments,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    Some((name, arguments))
}

/// The images of `messages` in order, by their bytes (a placeholder's by
/// the image it stands for).
fn images_digest(messages: &[Value], images: &Images) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for image in messages
        .iter()
        .filter_map(|m| m.get("images").and_then(Value::as_array))
        .flatten()
    {
        match images.literal(image) {
            Some(literal) => field(&mut hasher, literal),
            None => field(&mut hasher, canonical(image).as_bytes()),
        }
    }
    hasher.finalize().into()
}

/// What of a message the text key covers: role, content, calls (name and
/// arguments) and the number of images (their bytes are in
/// [`images_digest`]). Fields clients drop or add on the way back (ids,
/// indexes, `thinking`, `tool_name`) are left out.
fn canonical_message(message: &Value) -> Vec<u8> {
    let text = |key: &str| {
        message
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let calls: Vec<Value> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(wire_call)
        .map(|(name, arguments)| Value::Array(vec![Value::from(name), Value::Object(arguments)]))
        .collect();
    let pictures = message
        .get("images")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let normal = serde_json::json!([text("role"), text("content"), calls, pictures]);
    canonical(&normal).into_bytes()
}

/// JSON with object keys sorted at every depth (the request keeps the
/// client's key order; two clients may order the same arguments apart).
fn canonical(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    if let Some(inner) = map.get(key) {
                        write(inner, out);
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(messages: Value) -> Map<String, Value> {
        json!({"model": "m", "messages": messages})
            .as_object()
            .cloned()
            .unwrap()
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: None,
            index: 0,
            name: name.into(),
            arguments: arguments.as_object().cloned().unwrap(),
            arguments_error: None,
        }
    }

    fn ours() -> Vec<Value> {
        vec![
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "function": {"index": 0, "name": "oap_wc", "arguments": {"args": "-w"}}}]}),
            json!({"role": "tool", "content": "4", "tool_name": "oap_wc"}),
        ]
    }

    #[test]
    fn the_follow_up_gets_oapds_call_and_result_spliced_in() {
        let turns = MixedTurns::default();
        let user = json!([{"role": "user", "content": "count and light"}]);
        let conversation = turns
            .enter(&mut chat(user.clone()), &Images::default())
            .unwrap();
        turns.remember(
            &conversation,
            &[call("light", json!({"room": "hall", "on": true}))],
            &ours(),
            user.as_array().unwrap(),
            &Images::default(),
        );
        // The client echoes its call (keys in another order, no id) and its result.
        let mut follow = chat(json!([
            {"role": "user", "content": "count and light"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "light", "arguments": {"on": true, "room": "hall"}}}]},
            {"role": "tool", "content": "done", "tool_name": "light"}]));
        turns.enter(&mut follow, &Images::default()).unwrap();
        let messages = follow["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4, "{messages:#?}");
        let names: Vec<&str> = messages[1]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["oap_wc", "light"]);
        assert_eq!(messages[2]["content"], "4");
        assert_eq!(messages[3]["content"], "done");
    }

    #[test]
    fn another_conversation_or_other_calls_get_nothing() {
        let turns = MixedTurns::default();
        let conversation = turns
            .enter(
                &mut chat(json!([{"role": "user", "content": "a"}])),
                &Images::default(),
            )
            .unwrap();
        turns.remember(
            &conversation,
            &[call("light", json!({"on": true}))],
            &ours(),
            &[json!({"role": "user", "content": "a"})],
            &Images::default(),
        );
        for follow in [
            // Another user message before the same call.
            json!([{"role": "user", "content": "b"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "light", "arguments": {"on": true}}}]},
                {"role": "tool", "content": "done"}]),
            // Other arguments.
            json!([{"role": "user", "content": "a"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "light", "arguments": {"on": false}}}]},
                {"role": "tool", "content": "done"}]),
        ] {
            let mut request = chat(follow.clone());
            turns.enter(&mut request, &Images::default());
            assert_eq!(request["messages"], follow);
        }
    }

    #[test]
    fn the_same_words_about_another_image_get_nothing() {
        let turns = MixedTurns::default();
        let parse = |image: &str, follow: bool| {
            let mut messages =
                vec![json!({"role": "user", "content": "what is it?", "images": [image]})];
            if follow {
                messages.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "light", "arguments": {}}}]}));
                messages.push(json!({"role": "tool", "content": "done"}));
            }
            let body = serde_json::to_vec(&json!({"model": "m", "messages": messages})).unwrap();
            crate::payload::parse_chat(&bytes::Bytes::from(body)).unwrap()
        };
        let (mut first, images) = parse("QUJD", false);
        let conversation = turns.enter(&mut first, &images).unwrap();
        let sent = first["messages"].as_array().unwrap().clone();
        turns.remember(
            &conversation,
            &[call("light", json!({}))],
            &ours(),
            &sent,
            &images,
        );
        let (mut other, images) = parse("QUJE", true);
        turns.enter(&mut other, &images);
        assert_eq!(other["messages"].as_array().unwrap().len(), 3);
        let (mut same, images) = parse("QUJD", true);
        turns.enter(&mut same, &images);
        assert_eq!(same["messages"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn entries_are_bounded() {
        let turns = MixedTurns::default();
        for i in 0..(MAX_ENTRIES + 10) {
            let conversation = turns
                .enter(
                    &mut chat(json!([{"role": "user", "content": i.to_string()}])),
                    &Images::default(),
                )
                .unwrap();
            turns.remember(
                &conversation,
                &[call("light", json!({}))],
                &ours(),
                &[],
                &Images::default(),
            );
        }
        assert_eq!(turns.len(), MAX_ENTRIES);
        let big = vec![json!({"role": "tool", "content": "x".repeat(MAX_ENTRY_BYTES)})];
        let conversation = turns
            .enter(&mut chat(json!([])), &Images::default())
            .unwrap();
        turns.remember(
            &conversation,
            &[call("light", json!({}))],
            &big,
            &[],
            &Images::default(),
        );
        assert_eq!(turns.len(), MAX_ENTRIES);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        assert_eq!(
            canonical(&json!({"b": [{"d": 1, "c": "x"}], "a": null})),
            r#"{"a":null,"b":[{"c":"x","d":1}]}"#
        );
    }
}
