//! The tool loop in-process against the real fake-ollama server on a
//! loopback port, with a small recording tool runner and test hooks.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    missing_docs,
    reason = "test code: a failed assumption is a failed test, and tests read their own fixtures whole"
)]

mod answer;
mod errors;
mod hooks;
mod mixed;
mod printed;
mod rounds;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_ollama::{FakeOllama, Script};
use oap_bridge::hooks::Hooks;
use oap_bridge::payload::Held;
use oap_bridge::upstream::Upstream;
use oap_bridge::{
    Capabilities, ChatContext, ChatOptions, Event, InjectedTool, ToolResult, ToolRunner,
};
use oap_discovery::{Origin, StoredRecord, Trust};
use oap_manifest::Manifest;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

/// Runs oapd's tools by recording the call and answering
/// `ran <manifest name> with <arguments>`.
#[derive(Default)]
pub struct Recorder {
    calls: Mutex<Vec<(String, Map<String, Value>)>>,
}

impl Recorder {
    /// Every call so far: manifest name and arguments, in order.
    pub fn calls(&self) -> Vec<(String, Map<String, Value>)> {
        self.calls.lock().unwrap().clone()
    }
}

impl ToolRunner for Recorder {
    fn run(
        &self,
        _record: Arc<StoredRecord>,
        manifest: Arc<Manifest>,
        arguments: Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send>> {
        let content = format!(
            "ran {} with {}",
            manifest.name,
            Value::Object(arguments.clone())
        );
        self.calls
            .lock()
            .unwrap()
            .push((manifest.name.clone(), arguments));
        Box::pin(async move { ToolResult { content, ok: true } })
    }
}

/// One of oapd's tools, `name`, taking a required string `text`.
pub fn tool(name: &str) -> InjectedTool {
    let document = json!({
        "oap": "1.0",
        "name": name,
        "description": format!("The {name} test tool."),
        "invoke": {"method": "GET", "url": "https://example.invalid/tool"},
    });
    let manifest = oap_manifest::parse_value(document.clone())
        .unwrap()
        .manifest;
    InjectedTool {
        name: name.to_string(),
        definition: json!({"type": "function", "function": {
            "name": name,
            "description": format!("The {name} test tool."),
            "parameters": {"type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]}}}),
        record: Arc::new(StoredRecord {
            id: format!("test/{name}"),
            trust: Trust::Local,
            origin: Origin {
                kind: "dir".into(),
                location: "test".into(),
            },
            content_hash: "test".into(),
            manifest: document,
            warnings: Vec::new(),
            unhealthy: None,
            mcp: None,
        }),
        manifest: Arc::new(manifest),
        on_result: None,
    }
}

/// Options of a streamed, auto-executing request discovering 3 tools and
/// allowing `max_rounds` rounds.
pub fn options(max_rounds: u32) -> ChatOptions {
    ChatOptions {
        discover: true,
        top_k: 3,
        auto_execute: true,
        max_rounds,
        stream: true,
        conversation: None,
        tool_instruction: None,
    }
}

/// A chat request for model `m` with one user message.
pub fn request(task: &str) -> Map<String, Value> {
    json!({"model": "m", "messages": [{"role": "user", "content": task}]})
        .as_object()
        .cloned()
        .unwrap()
}

/// The fake on loopback and a loop context pointed at it.
pub struct Bench {
    /// The fake Ollama the loop talks to.
    pub fake: FakeOllama,
    /// Records the tool calls the loop executes.
    pub runner: Arc<Recorder>,
    /// The context every request of the test shares.
    pub ctx: Arc<ChatContext>,
}

impl Bench {
    /// Starts the fake with `script` and points a 5 s head timeout at it.
    pub async fn start(script: Script) -> Bench {
        let fake = FakeOllama::start(script).await.unwrap();
        let upstream = Upstream::new(&fake.url(), Duration::from_secs(5)).unwrap();
        Bench::with_upstream(fake, upstream)
    }

    /// A bench over an upstream the test built itself (e.g. another timeout).
    pub fn with_upstream(fake: FakeOllama, upstream: Upstream) -> Bench {
        let runner = Arc::new(Recorder::default());
        let ctx = Arc::new(ChatContext {
            upstream,
            runner: runner.clone(),
            capabilities: Arc::new(Capabilities::default()),
            deadline: Duration::from_secs(20),
            max_parallel_tools: 2,
            mixed_turns: Default::default(),
            text_tool_calls: vec!["gemma3".into()],
        });
        Bench { fake, runner, ctx }
    }

    /// Runs the loop to its end; every event it sent the client.
    pub async fn run(
        &self,
        request: Map<String, Value>,
        tools: Vec<InjectedTool>,
        options: ChatOptions,
        hooks: Hooks,
    ) -> Vec<Event> {
        let (tx, mut rx) = mpsc::channel(64);
        let task = tokio::spawn(oap_bridge::run_loop(
            self.ctx.clone(),
            request,
            tools,
            options,
            hooks,
            Held::default(),
            tx,
        ));
        let mut events = Vec::new();
        while let Some(event) = rx.recv().await {
            events.push(event);
        }
        task.await.unwrap();
        events
    }
}

/// The chunks, panicking on an error event.
pub fn chunks(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .map(|event| match event {
            Event::Chunk(chunk) => chunk.clone(),
            Event::Error { status, message } => panic!("error event {status}: {message}"),
        })
        .collect()
}

/// The streamed content, concatenated.
pub fn content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c.pointer("/message/content").and_then(Value::as_str))
        .collect()
}

/// Exactly one `done:true`, and it is the last chunk.
pub fn the_final_chunk(chunks: &[Value]) -> &Value {
    let done: Vec<usize> = chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| c["done"] == true)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(done, [chunks.len() - 1], "{chunks:#?}");
    &chunks[chunks.len() - 1]
}

/// Names of the tools a recorded upstream request offered.
pub fn offered(sent: &Value) -> Vec<String> {
    oap_bridge::tool_loop::client_tool_names(sent.as_object().unwrap())
}
