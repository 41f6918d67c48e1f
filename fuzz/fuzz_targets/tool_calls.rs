//! The tool-call accumulator (Ollama side) and the OpenAI chunk translator
//! fed the same stream of `/api/chat` chunks. Two halves:
//! - model-based: whole calls with distinct indexes, their argument text
//!   cut into fragments and interleaved across chunks, sometimes as objects;
//!   both sides must give back exactly those calls (none lost, none twice);
//! - free-form: any chunk shapes (structure-aware JSON); the caps hold, the
//!   translator emits each call index once and ends the stream once.
#![no_main]

use std::collections::HashSet;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use oap_wire::{ChunkTranslator, StreamEvent, ToolCallAccumulator, MAX_TOOL_CALLS};
use serde_json::{json, Map, Value};

#[derive(Debug)]
struct Call {
    name: String,
    arguments: Map<String, Value>,
    as_object: bool,
    cuts: Vec<u16>,
}

#[derive(Debug)]
enum Input {
    Model {
        calls: Vec<Call>,
        order: Vec<u8>,
        with_ids: bool,
    },
    Free(Vec<Value>),
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        if u.arbitrary()? {
            let n = u.int_in_range(1..=6)?;
            let mut calls = Vec::with_capacity(n);
            for _ in 0..n {
                let mut name: String = u.arbitrary()?;
                if name.trim().is_empty() {
                    name = "f".into();
                }
                calls.push(Call {
                    name,
                    arguments: oap_fuzz::object(u, 2)?,
                    as_object: u.ratio(1, 4)?,
                    cuts: u.arbitrary()?,
                });
            }
            Ok(Input::Model {
                calls,
                order: u.arbitrary()?,
                with_ids: u.arbitrary()?,
            })
        } else {
            let n = u.int_in_range(0..=12)?;
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push(free_chunk(u)?);
            }
            Ok(Input::Free(chunks))
        }
    }
}

/// An `/api/chat` chunk, mostly of the right shape.
fn free_chunk(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    if u.ratio(1, 8)? {
        return oap_fuzz::json(u, 4);
    }
    let mut calls = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let mut function = Map::new();
        if u.arbitrary()? {
            function.insert(
                "index".into(),
                if u.ratio(7, 8)? {
                    Value::from(u.int_in_range(0..=3u64)?)
                } else {
                    oap_fuzz::json(u, 0)?
                },
            );
        }
        if u.arbitrary()? {
            function.insert("name".into(), Value::from(*u.choose(&["f", "g", "", " "])?));
        }
        if u.arbitrary()? {
            let args = match u.int_in_range(0..=3)? {
                0 => Value::Object(oap_fuzz::object(u, 1)?),
                1 => Value::from(
                    *u.choose(&["{", "}", "\"", "{\"x\":", "1", "{}", "\"{}\"", "[1]", ""])?,
                ),
                2 => Value::String(u.arbitrary()?),
                _ => oap_fuzz::json(u, 1)?,
            };
            function.insert(
                if u.ratio(7, 8)? {
                    "arguments"
                } else {
                    "parameters"
                }
                .into(),
                args,
            );
        }
        let mut call = Map::new();
        if u.ratio(1, 3)? {
            call.insert(
                "id".into(),
                Value::from(*u.choose(&["call_a", "call_b", ""])?),
            );
        }
        call.insert("function".into(), Value::Object(function));
        calls.push(Value::Object(call));
    }
    let mut message = Map::new();
    message.insert("role".into(), Value::from("assistant"));
    if u.arbitrary()? {
        message.insert("content".into(), Value::String(u.arbitrary()?));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let done: bool = u.ratio(1, 6)?;
    let mut chunk = json!({"model": "m", "message": message, "done": done});
    if done {
        chunk["done_reason"] = Value::from(*u.choose(&["stop", "length", "tool_calls"])?);
    }
    Ok(chunk)
}

/// The pieces of each call in an interleaving chosen by `order`, each call's
/// own pieces kept in their order.
fn model_chunks(calls: &[Call], order: &[u8], with_ids: bool) -> Vec<Value> {
    let mut queues: Vec<Vec<Value>> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let mut pieces = Vec::new();
            if call.as_object {
                pieces.push(json!({"function": {"index": index, "name": call.name, "arguments": call.arguments}}));
            } else {
                let text = serde_json::to_string(&call.arguments).unwrap();
                let mut cuts: Vec<u16> = call.cuts.clone();
                // Cut on character boundaries only: fragments are JSON strings.
                cuts.retain(|&c| text.is_char_boundary(usize::from(c) % (text.len() + 1)));
                for (i, frag) in oap_fuzz::split(text.as_bytes(), &cuts).into_iter().enumerate() {
                    let frag = std::str::from_utf8(frag).unwrap();
                    pieces.push(if i == 0 {
                        json!({"function": {"index": index, "name": call.name, "arguments": frag}})
                    } else {
                        json!({"function": {"index": index, "arguments": frag}})
                    });
                }
            }
            if with_ids {
                pieces[0]["id"] = Value::from(format!("call_{index}"));
            }
            pieces.reverse();
            pieces
        })
        .collect();
    let mut chunks = Vec::new();
    let mut pick = order.iter().copied().cycle();
    while queues.iter().any(|q| !q.is_empty()) {
        let open: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        let i = open[usize::from(pick.next().unwrap_or(0)) % open.len()];
        let piece = queues[i].pop().unwrap();
        chunks.push(json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [piece]}, "done": false}));
    }
    chunks.push(json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"}));
    chunks
}

/// Calls the translator emitted: (index, id, name, arguments text).
fn emitted(events: &[StreamEvent]) -> Vec<(u64, String, String, String)> {
    let mut out = Vec::new();
    for event in events {
        let StreamEvent::Data(data) = event else {
            continue;
        };
        let Some(calls) = data
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for call in calls {
            out.push((
                call["index"].as_u64().unwrap(),
                call["id"].as_str().unwrap_or_default().to_string(),
                call.pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                call.pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
    }
    out
}

fn run(chunks: &[Value]) -> (Vec<oap_wire::ToolCall>, Vec<StreamEvent>) {
    let mut acc = ToolCallAccumulator::new();
    let mut translator = ChunkTranslator::new("chatcmpl-fuzz", 0, true);
    let mut events = Vec::new();
    for chunk in chunks {
        acc.push_chunk(chunk);
        events.extend(translator.push_events(chunk));
    }
    events.extend(translator.finish_events());
    assert!(translator.is_finished());
    let dones = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Done))
        .count();
    // A stream ends exactly once: with `[DONE]`, or, when Ollama sent an
    // error, with OpenAI's error object and no `[DONE]` (what Ollama's own
    // `/v1` writes when a stream fails midway).
    match events.last() {
        Some(StreamEvent::Done) => assert_eq!(dones, 1, "[DONE] sent {dones} times"),
        Some(StreamEvent::Data(last)) => {
            assert_eq!(dones, 0, "[DONE] before the stream's end: {events:?}");
            assert!(
                last.get("error").is_some(),
                "a stream without [DONE] must end with an error: {last}"
            );
        }
        None => panic!("a finished stream sent nothing"),
    }
    let calls = acc.finish();
    assert!(calls.len() <= MAX_TOOL_CALLS);
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call.index, i);
    }
    let sent = emitted(&events);
    assert!(sent.len() <= MAX_TOOL_CALLS);
    let mut seen = HashSet::new();
    for (index, ..) in &sent {
        assert!(
            seen.insert(*index),
            "call index {index} emitted twice: {sent:?}"
        );
    }
    (calls, events)
}

fuzz_target!(|data: &[u8]| {
    // A stream as Ollama sends it (NDJSON): recorded streams are seeds.
    if data.first() == Some(&b'{') {
        let chunks: Vec<Value> = data
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect();
        run(&chunks);
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    check(input);
});

fn check(input: Input) {
    match input {
        Input::Free(chunks) => {
            run(&chunks);
        }
        Input::Model {
            calls,
            order,
            with_ids,
        } => {
            let chunks = model_chunks(&calls, &order, with_ids);
            let (got, events) = run(&chunks);
            let mut want: Vec<(String, String)> = calls
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        Value::Object(c.arguments.clone()).to_string(),
                    )
                })
                .collect();
            want.sort();
            // Calls come back in the order their first pieces arrived.
            let mut have: Vec<(String, String)> = got
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        Value::Object(c.arguments.clone()).to_string(),
                    )
                })
                .collect();
            have.sort();
            assert_eq!(
                have, want,
                "accumulator lost or changed a call\nchunks {chunks:?}"
            );
            assert!(got.iter().all(|c| c.arguments_error.is_none()));
            let sent = emitted(&events);
            assert!(
                sent.iter().all(|s| !s.1.is_empty()),
                "a call without an id: {sent:?}"
            );
            let mut sent: Vec<(String, String)> = sent
                .into_iter()
                .map(|(_, _, name, args)| {
                    let args: Value = serde_json::from_str(&args).unwrap();
                    (name, args.to_string())
                })
                .collect();
            sent.sort();
            assert_eq!(
                sent, want,
                "translator lost or changed a call\nchunks {chunks:?}"
            );
        }
    }
}
