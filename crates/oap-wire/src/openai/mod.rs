//! The OpenAI Chat Completions wire format and its translation to and from
//! Ollama's `/api/chat`, following Ollama's own `/v1` layer
//! (`openai/openai.go`, `middleware/openai.go`, v0.32.6+ stream format).
//!
//! - [`chat_request_to_ollama`]: a `/v1/chat/completions` body to an
//!   `/api/chat` body.
//! - [`ollama_to_chat_completion`]: a non-streamed `/api/chat` answer to a
//!   `chat.completion` object.
//! - [`ChunkTranslator`]: streamed `/api/chat` chunks to SSE events.
//! - [`openai_error`]: the error shape.
//!
//! Where this differs from Ollama's `/v1` (all deliberate):
//! - a message whose content is an array of parts becomes *one* Ollama
//!   message (text parts joined with `\n`, images in `images`), not one
//!   message per part;
//! - `temperature`/`top_p` are not forced to 1.0 when absent unless
//!   [`RequestOptions::openai_sampling_defaults`] asks for it, so the
//!   model's own defaults apply;
//! - the Ollama-native fields `options`, `keep_alive`, `think` and `format`
//!   are honoured when a client sends them (the OpenAI fields win);
//! - tool calls split into argument fragments under one `function.index`
//!   are joined before they are emitted, so each OpenAI call stays whole.

mod error;
mod request;
mod response;
mod stream;
pub mod tool_choice;

pub use error::{openai_error, openai_error_from_ollama, WireError};
pub use request::{chat_request_to_ollama, chat_request_to_ollama_with, RequestOptions};
pub use response::{finish_reason, new_completion_id, new_tool_call_id, ollama_to_chat_completion};
pub use stream::{ChunkTranslator, StreamEvent};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn convert(req: Value) -> Value {
        chat_request_to_ollama(&req).unwrap()
    }

    #[test]
    fn a_conversation_with_tool_calls_round_trips() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
        let mut messages = vec![json!({"role": "user", "content": "Weather in Paris and Rome?"})];
        let first = convert(json!({"model": "m", "messages": messages, "tools": tools}));
        assert_eq!(
            first["messages"],
            json!([{"role": "user", "content": "Weather in Paris and Rome?"}])
        );

        // Ollama answers with two calls (no ids: the translation makes them).
        let answer = json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
            {"function": {"index": 1, "name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}}
        ]}, "done": true, "done_reason": "stop"});
        let completion = ollama_to_chat_completion(&answer, "chatcmpl-1", 1);
        let assistant = completion["choices"][0]["message"].clone();
        let ids: Vec<String> = assistant["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        assert_ne!(ids[0], ids[1]);

        // The client sends the calls back with the results, results in reverse order.
        messages.push(assistant);
        messages.push(json!({"role": "tool", "tool_call_id": ids[1], "content": "{\"temp\":25}"}));
        messages.push(json!({"role": "tool", "tool_call_id": ids[0], "content": "{\"temp\":19}"}));
        let second = convert(json!({"model": "m", "messages": messages, "tools": tools}));
        let back = second["messages"].as_array().unwrap();
        assert_eq!(back.len(), 4);
        let calls = back[1]["tool_calls"].as_array().unwrap();
        for (call, original) in calls
            .iter()
            .zip(answer["message"]["tool_calls"].as_array().unwrap())
        {
            assert_eq!(call["function"]["name"], original["function"]["name"]);
            assert_eq!(
                call["function"]["arguments"],
                original["function"]["arguments"]
            );
        }
        assert_eq!(calls[0]["id"], json!(ids[0]));
        assert_eq!(
            back[2],
            json!({"role": "tool", "content": "{\"temp\":25}", "tool_name": "get_weather", "tool_call_id": ids[1]})
        );
        assert_eq!(back[3]["tool_name"], json!("get_weather"));
        assert_eq!(second["tools"], tools);
    }
}
