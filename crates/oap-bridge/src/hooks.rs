//! Per-request hooks: how a feature takes part in the tool loop without
//! the loop knowing it.
//!
//! One trait, one method per phase of a request, each a no-op by default,
//! so a feature implements only the phases it acts in (the shape of
//! pingora's `ProxyHttp` phases and its HTTP module filters). A feature
//! builds its hook per request from its settings; the loop calls the hooks
//! of a request in the order of its [`Hooks`] list at every phase.
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
//! 6. output: [`Hook::output_filter`] gives a filter every event passes
//!    on its way to the client; [`Hook::finish`] annotates the final chunk.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use oap_wire::ToolCall;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::tool_loop::{ChatContext, Event, InjectedTool, ToolResult};

/// The tools oapd injected into a request, by name.
pub type ToolsByName<'a> = HashMap<&'a str, &'a InjectedTool>;

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

/// Sees every event on its way to the client, in order.
pub trait OutputFilter: Send {
    /// What goes out instead of `event`, in order (nothing drops it).
    fn filter(&mut self, event: Event) -> Vec<Event>;
}

/// One feature's part in one request. Every method is a no-op by default.
pub trait Hook: Send + Sync {
    /// Tool definitions offered after the injected tools.
    fn definitions(&self) -> Vec<Value> {
        Vec::new()
    }

    /// Whether a call with this name is oapd's to run (beyond the injected
    /// tools); such calls go to [`Hook::run_calls`].
    fn owns(&self, _name: &str) -> bool {
        false
    }

    /// The model does not take tools: the request goes on with the
    /// client's tools only.
    fn tools_withdrawn(&self) {}

    /// Whether the round's client-facing events wait until it is over.
    fn holds_round(&self, _round: &RoundStart) -> bool {
        false
    }

    /// Called when a round is over, before any call runs.
    fn after_round<'a>(
        &'a self,
        _ctx: &'a ChatContext,
        _model: &'a str,
        _round: &'a mut RoundOutcome,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Runs the round's calls itself (all of them, results in call order),
    /// or `None` to leave them to the loop.
    fn run_calls<'a>(
        &'a self,
        _ctx: &'a ChatContext,
        _tools: &'a ToolsByName<'a>,
        _calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        None
    }

    /// One of oapd's calls is over: its name, outcome and duration. For
    /// observers; called for every call of a round, in call order, before
    /// [`Hook::results_seen`].
    fn call_finished(&self, _report: &CallReport<'_>) {}

    /// The results of the calls oapd ran in a round.
    fn results_seen(&self, _results: &[ToolResult]) {}

    /// A filter for everything the request sends the client.
    fn output_filter(&self) -> Option<Box<dyn OutputFilter>> {
        None
    }

    /// Annotates the one final `done` chunk.
    fn finish(&self, _done: &mut Value) {}
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

    pub(crate) fn definitions(&self) -> Vec<Value> {
        self.0.iter().flat_map(|hook| hook.definitions()).collect()
    }

    pub(crate) fn owns(&self, name: &str) -> bool {
        self.0.iter().any(|hook| hook.owns(name))
    }

    pub(crate) fn tools_withdrawn(&self) {
        self.0.iter().for_each(|hook| hook.tools_withdrawn());
    }

    /// Every hook is asked (each may keep state about what it asked for).
    pub(crate) fn holds_round(&self, round: &RoundStart) -> bool {
        let mut held = false;
        for hook in &self.0 {
            held |= hook.holds_round(round);
        }
        held
    }

    pub(crate) async fn after_round(
        &self,
        ctx: &ChatContext,
        model: &str,
        round: &mut RoundOutcome,
    ) {
        for hook in &self.0 {
            hook.after_round(ctx, model, round).await;
        }
    }

    pub(crate) fn run_calls<'a>(
        &'a self,
        ctx: &'a ChatContext,
        tools: &'a ToolsByName<'a>,
        calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        self.0
            .iter()
            .find_map(|hook| hook.run_calls(ctx, tools, calls))
    }

    pub(crate) fn call_finished(&self, report: &CallReport<'_>) {
        self.0.iter().for_each(|hook| hook.call_finished(report));
    }

    pub(crate) fn results_seen(&self, results: &[ToolResult]) {
        self.0.iter().for_each(|hook| hook.results_seen(results));
    }

    pub(crate) fn finish(&self, done: &mut Value) {
        self.0.iter().for_each(|hook| hook.finish(done));
    }

    /// `out` behind the hooks' output filters, chained in hook order: a
    /// task forwards events through them in order and ends (closing the
    /// loop's side) when the client goes away. `out` itself when no hook
    /// filters.
    pub(crate) fn filter_output(&self, out: mpsc::Sender<Event>) -> mpsc::Sender<Event> {
        let mut filters: Vec<Box<dyn OutputFilter>> = self
            .0
            .iter()
            .filter_map(|hook| hook.output_filter())
            .collect();
        if filters.is_empty() {
            return out;
        }
        let (tx, mut rx) = mpsc::channel::<Event>(16);
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = rx.recv() => event,
                    _ = out.closed() => return,
                };
                let Some(event) = event else {
                    return;
                };
                let mut events = vec![event];
                for filter in filters.iter_mut() {
                    events = events
                        .into_iter()
                        .flat_map(|event| filter.filter(event))
                        .collect();
                }
                for event in events {
                    if out.send(event).await.is_err() {
                        return;
                    }
                }
            }
        });
        tx
    }
}
