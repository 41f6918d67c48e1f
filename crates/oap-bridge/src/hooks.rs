//! Per-request hooks: how a feature takes part in the tool loop without
//! the loop knowing it.
//!
//! One trait, one method per phase of a request, each a no-op by default,
//! so a feature implements only the phases it acts in (the shape of
//! pingora's `ProxyHttp` phases and its HTTP module filters). A feature
//! builds its hook per request from its settings, so the hook's own state
//! is per-request and every phase takes `&mut self`; every phase also gets
//! the request's one context, [`RequestCtx`] (`context.rs`), as `&mut`
//! (as `&` while calls run, since they run concurrently). Nothing
//! per-request needs an atomic or a mutex; what outlives the request
//! (metrics, caches) is shared through `Arc`s the hook was built with.
//! The loop calls the hooks of a request in the order of its [`Hooks`]
//! list at every phase; `assembly.rs` builds that list.
//!
//! Phases, in the order a request meets them:
//! 1. tools offered: [`Hook::definitions`] adds tool definitions after the
//!    injected tools, [`Hook::owns`] claims call names as oapd's to run,
//!    [`Hook::tools_withdrawn`] hears that the model takes no tools after all;
//! 2. before a round: [`Hook::holds_round`] keeps the round's client-facing
//!    events back until the round is over;
//! 3. after a round: [`Hook::after_round`] may change the calls that run
//!    and whether held events go out;
//! 4. run calls: [`Hook::run_calls`] runs the round's calls instead of the
//!    loop (the first hook that answers wins);
//! 5. results seen: [`Hook::call_finished`] hears each call's outcome and
//!    duration (observation: metrics, the recent-requests list), then
//!    [`Hook::results_seen`] reads the tool results;
//! 6. output: [`Hook::output`] sees every event on its way to the client,
//!    in the loop's task, in hook order; [`Hook::finish`] annotates the
//!    final chunk.

use std::time::Duration;

use futures_util::future::BoxFuture;
use oap_wire::ToolCall;
use serde_json::Value;
use tokio::sync::mpsc;

pub use crate::context::ToolsByName;
use crate::context::{Event, RequestCtx, ToolResult};

/// A round about to be sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundStart {
    /// 1 for the first round.
    pub number: u32,
    /// Whether the round offers tools (false for a request without any and
    /// for the final tool-less round).
    pub offers_tools: bool,
    /// Whether oapd runs its calls (`oap_auto_execute`).
    pub auto_execute: bool,
}

/// A round the model has answered, before its calls run.
#[derive(Debug)]
pub struct RoundOutcome {
    /// 1 for the first round.
    pub number: u32,
    /// Whether a hook held the round's client-facing events back.
    pub held: bool,
    /// Whether those held events go to the client (a hook that drops the
    /// model's answer clears it).
    pub release_held: bool,
    /// The answer's text, as it goes into the conversation.
    pub content: String,
    /// Calls oapd runs: to injected tools or names a hook owns.
    pub ours: Vec<ToolCall>,
    /// Calls to the client's own tools, handed back to it.
    pub theirs: Vec<ToolCall>,
}

/// One of oapd's calls, run: what [`Hook::call_finished`] hears.
#[derive(Debug, Clone, Copy)]
pub struct CallReport<'a> {
    /// The round the call was made in, 1 for the first.
    pub round: u32,
    /// The name the model called.
    pub name: &'a str,
    /// What it came to.
    pub result: &'a ToolResult,
    /// How long it ran (calls a hook runs itself are timed together: each
    /// gets the time of the whole batch).
    pub elapsed: Duration,
}

/// One feature's part in one request. Every method is a no-op by default.
pub trait Hook: Send {
    /// Tool definitions offered after the injected tools.
    fn definitions(&mut self, _cx: &mut RequestCtx) -> Vec<Value> {
        Vec::new()
    }

    /// Whether a call with this name is oapd's to run (beyond the injected
    /// tools); such calls go to [`Hook::run_calls`]. A question, asked of
    /// every hook for every call, so it takes `&self`.
    fn owns(&self, _name: &str) -> bool {
        false
    }

    /// The model does not take tools: the request goes on with the
    /// client's tools only.
    fn tools_withdrawn(&mut self, _cx: &mut RequestCtx) {}

    /// Whether the round's client-facing events wait until it is over.
    fn holds_round(&mut self, _cx: &mut RequestCtx, _round: &RoundStart) -> bool {
        false
    }

    /// Called when a round is over, before any call runs.
    fn after_round<'a>(
        &'a mut self,
        _cx: &'a mut RequestCtx,
        _round: &'a mut RoundOutcome,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Runs the round's calls itself (all of them, results in call order),
    /// or `None` to leave them to the loop.
    fn run_calls<'a>(
        &'a mut self,
        _cx: &'a RequestCtx,
        _calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        None
    }

    /// One of oapd's calls is over: its name, outcome and duration. For
    /// observers; called for every call of a round, in call order, before
    /// [`Hook::results_seen`].
    fn call_finished(&mut self, _cx: &mut RequestCtx, _report: &CallReport<'_>) {}

    /// The results of the calls oapd ran in a round.
    fn results_seen(&mut self, _cx: &mut RequestCtx, _results: &[ToolResult]) {}

    /// What goes to the client instead of `event`, in order (nothing drops
    /// it). Every event passes every hook's output phase, in hook order,
    /// the moment it goes out (held events when they are released).
    fn output(&mut self, _cx: &RequestCtx, event: Event) -> Vec<Event> {
        vec![event]
    }

    /// Annotates the one final `done` chunk.
    fn finish(&mut self, _cx: &mut RequestCtx, _done: &mut Value) {}
}

/// The hooks of one request, in the order they run at every phase.
#[derive(Default)]
pub struct Hooks(Vec<Box<dyn Hook>>);

impl Hooks {
    /// The hooks in the order they will run.
    pub fn new(hooks: Vec<Box<dyn Hook>>) -> Hooks {
        Hooks(hooks)
    }

    /// Appends a hook; it runs after the ones already present.
    pub fn push(&mut self, hook: Box<dyn Hook>) {
        self.0.push(hook);
    }

    /// Number of hooks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no hook is installed (the loop then runs unchanged).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn definitions(&mut self, cx: &mut RequestCtx) -> Vec<Value> {
        self.0
            .iter_mut()
            .flat_map(|hook| hook.definitions(cx))
            .collect()
    }

    pub(crate) fn owns(&self, name: &str) -> bool {
        self.0.iter().any(|hook| hook.owns(name))
    }

    pub(crate) fn tools_withdrawn(&mut self, cx: &mut RequestCtx) {
        self.0.iter_mut().for_each(|hook| hook.tools_withdrawn(cx));
    }

    /// Every hook is asked (each may keep state about what it asked for).
    pub(crate) fn holds_round(&mut self, cx: &mut RequestCtx, round: &RoundStart) -> bool {
        let mut held = false;
        for hook in &mut self.0 {
            held |= hook.holds_round(cx, round);
        }
        held
    }

    pub(crate) async fn after_round(&mut self, cx: &mut RequestCtx, round: &mut RoundOutcome) {
        for hook in &mut self.0 {
            hook.after_round(cx, round).await;
        }
    }

    pub(crate) fn run_calls<'a>(
        &'a mut self,
        cx: &'a RequestCtx,
        calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        self.0.iter_mut().find_map(|hook| hook.run_calls(cx, calls))
    }

    pub(crate) fn call_finished(&mut self, cx: &mut RequestCtx, report: &CallReport<'_>) {
        self.0
            .iter_mut()
            .for_each(|hook| hook.call_finished(cx, report));
    }

    pub(crate) fn results_seen(&mut self, cx: &mut RequestCtx, results: &[ToolResult]) {
        self.0
            .iter_mut()
            .for_each(|hook| hook.results_seen(cx, results));
    }

    pub(crate) fn finish(&mut self, cx: &mut RequestCtx, done: &mut Value) {
        self.0.iter_mut().for_each(|hook| hook.finish(cx, done));
    }

    /// Sends `event` to the client through every hook's output phase, in
    /// hook order; false when the client is gone.
    pub(crate) async fn send(
        &mut self,
        cx: &RequestCtx,
        out: &mpsc::Sender<Event>,
        event: Event,
    ) -> bool {
        let mut events = vec![event];
        for hook in &mut self.0 {
            events = events
                .into_iter()
                .flat_map(|event| hook.output(cx, event))
                .collect();
        }
        for event in events {
            if out.send(event).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Sends events held back during a round; false when the client is gone.
    pub(crate) async fn release(
        &mut self,
        cx: &RequestCtx,
        out: &mpsc::Sender<Event>,
        held: Vec<Event>,
    ) -> bool {
        for event in held {
            if !self.send(cx, out, event).await {
                return false;
            }
        }
        true
    }
}
