//! Client requests from the LAN: OpenAI chat completions and Responses
//! bodies converted to `/api/chat`, and `/api/chat` answers converted back.
//! Raw bytes go through serde_json first (the daemon's own order); a
//! leading 0xff byte switches to structure-aware JSON so the converters see
//! valid documents of the right shape. Invariants: no panic; every refusal
//! names a field; an accepted request becomes an object with a model,
//! messages and the stream flag.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use oap_wire::openai::{chat_request_to_ollama, ollama_to_chat_completion};
use oap_wire::responses::{chat_to_response, request_to_chat, ResponseHead};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let value = match data.split_first() {
        Some((0xff, rest)) => {
            let mut u = Unstructured::new(rest);
            let Ok(mut map) = oap_fuzz::object(&mut u, 4) else {
                return;
            };
            if u.ratio(3, 4).unwrap_or(true) {
                map.insert("model".into(), Value::from("m"));
            }
            Value::Object(map)
        }
        _ => match serde_json::from_slice::<Value>(data) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    check(chat_request_to_ollama(&value), "chat");
    check(request_to_chat(&value), "responses");
    if let Some(body) = value.as_object() {
        let _ = oap_wire::openai::tool_choice::parse(body);
        let _ = oap_wire::openai::tool_choice::client_tools(body);
    }
    let _ = oap_wire::openai::tool_choice::is_legacy(&value);
    // The same document read as an Ollama answer.
    let completion = ollama_to_chat_completion(&value, "chatcmpl-1", 0);
    assert_eq!(completion["object"], "chat.completion");
    let head = ResponseHead::for_request(&value, "resp_1".into(), 0);
    let _ = chat_to_response(&head, &value);
});

fn check(result: Result<Value, oap_wire::WireError>, what: &str) {
    match result {
        Ok(out) => {
            assert!(
                out.get("model")
                    .and_then(Value::as_str)
                    .is_some_and(|m| !m.trim().is_empty()),
                "{what}: {out}"
            );
            assert!(
                out.get("messages").is_some_and(Value::is_array),
                "{what}: {out}"
            );
            assert!(
                out.get("stream").is_some_and(Value::is_boolean),
                "{what}: {out}"
            );
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let _ = e.to_openai();
        }
    }
}
