//! The tool bridge: Ollama's `/api/chat` with discovered tools injected, the
//! model's calls to them executed, and the loop run until the model answers.
//!
//! The loop produces Ollama chat chunks (JSON objects) for the client, with
//! exactly one `done:true`, last. The surfaces wrap that one stream: NDJSON
//! for `/api/chat`, SSE for `/v1/chat/completions`, or one aggregated JSON
//! for `stream:false`.
//!
//! Ownership of tools is respected: the client's own tools are forwarded
//! next to oapd's, and calls to them are handed back to the client in
//! Ollama's format; only oapd's own tools are executed here.
//!
//! [`run_loop`] takes the request apart into its one [`RequestCtx`]
//! (`context.rs`) and runs `drive`, a short sequence of phases, each a
//! function here that lends the context to the feature acting in it:
//! 1. `plan_round`: the round counted; the tools it offers (none once the
//!    rounds are used up, the client's only in the format round); the
//!    answer fields it carries (`answer.rs`); whether its events are held
//!    (the hooks' `holds_round`, `format`) and whether text that may be a
//!    printed call waits (`printed.rs`); its body (`round.rs`);
//! 2. `send_round`: streamed from Ollama to the client through the hooks'
//!    output phase, or held;
//! 3. `retry_without_tools`: a first round refused with "does not support
//!    tools" starts the request again without oapd's tools
//!    (`capabilities.rs`, the hooks' `tools_withdrawn`);
//! 4. `after_round`: printed calls read (`printed.rs`), the calls split
//!    into oapd's and the client's, the hooks' `after_round`, then
//!    `format` may drop the answer and ask again (`answer.rs`);
//! 5. `release`: held events and held-back text go out unless dropped;
//! 6. `run_ours`: oapd's calls run (a hook's `run_calls` or
//!    [`run_calls`]), the hooks hear each and see the results;
//!    `record_turn` adds the turn and its results to the conversation
//!    for the next round;
//! 7. `remember_mixed`: a turn that also called the client's tools is
//!    remembered for the client's follow-up (`mixed.rs`);
//! 8. `conclude`: the client's `keep_alive` applied if it was left out,
//!    the client's calls and the final chunk sent (the hooks' `finish`).
//!
//! The loop knows no feature: token budgets, meta tools, forcing, URL
//! hygiene and observation take part through the request's [`Hooks`]
//! (`hooks.rs`, assembled in `assembly.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use oap_wire::ToolCall;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

pub use crate::capabilities::{context_window, Capabilities, OLLAMA_DEFAULT_NUM_CTX};
pub use crate::context::{
    ChatContext, ChatOptions, Event, InjectedTool, LoopStats, RequestCtx, ResultHook, ToolResult,
    ToolRunner, ToolsByName,
};
use crate::hooks::{CallReport, Hooks, RoundOutcome, RoundStart};
use crate::payload::Held;
use crate::round::{encode_round, stream_round, Round, RoundError, Sink};

/// Bridge settings from the config.
#[derive(Debug, Clone)]
pub struct BridgeSettings {
    /// `tool_bridge.enabled`: off, chat requests pass through untouched.
    pub enabled: bool,
    /// Tools injected per request unless the request sets `oap_top_k`.
    pub default_top_k: usize,
    /// Model rounds per request unless the request sets `oap_max_rounds`.
    pub max_rounds: u32,
}

/// A client error in the request, answered with 400 before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// Splits the `oap_*` extension fields off a chat request (they must not be
/// forwarded: Ollama ignores unknown fields today, but a future version may
/// not) and validates them.
pub fn take_options(
    request: &mut Map<String, Value>,
    settings: &BridgeSettings,
) -> Result<ChatOptions, RequestError> {
    let flag =
        |request: &mut Map<String, Value>, key: &str, default: bool| match request.remove(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(value)) => Ok(value),
            Some(other) => Err(RequestError(format!(
                "{key}: expected true or false, got {other}"
            ))),
        };
    let discover = flag(request, "oap_discover", true)?;
    let tool_instruction = match request.remove("oap_tool_instruction") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(on),
        Some(other) => {
            return Err(RequestError(format!(
                "oap_tool_instruction: expected true or false, got {other}"
            )))
        }
    };
    let auto_execute = flag(request, "oap_auto_execute", true)?;
    let top_k = match request.remove("oap_top_k") {
        None | Some(Value::Null) => settings.default_top_k,
        Some(value) => match value.as_u64() {
            Some(k @ 1..=20) => k as usize,
            _ => {
                return Err(RequestError(format!(
                    "oap_top_k: expected an integer from 1 to 20, got {value}"
                )))
            }
        },
    };
    let max_rounds = match request.remove("oap_max_rounds") {
        None | Some(Value::Null) => settings.max_rounds,
        Some(value) => match value.as_u64() {
            // Clamped to the operator's cap, as the seed specifies.
            Some(n @ 1..=10) => (n as u32).min(settings.max_rounds),
            _ => {
                return Err(RequestError(format!(
                    "oap_max_rounds: expected an integer from 1 to 10, got {value}"
                )))
            }
        },
    };
    let stream = match request.get("stream") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(stream)) => *stream,
        Some(other) => {
            return Err(RequestError(format!(
                "stream: expected true or false, got {other}"
            )))
        }
    };
    match request.get("model") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) => return Err(RequestError("model is required".into())),
        Some(other) => {
            return Err(RequestError(format!(
                "`model` must be a string, got {other}"
            )))
        }
    }
    match request.get("messages") {
        None | Some(Value::Array(_)) => {}
        Some(_) => return Err(RequestError("messages: expected an array".into())),
    }
    Ok(ChatOptions {
        discover,
        top_k,
        auto_execute,
        max_rounds,
        stream,
        conversation: None,
        tool_instruction,
    })
}

/// The text discovery runs on: the last user message.
pub fn task_of(request: &Map<String, Value>) -> Option<String> {
    request
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
        .get("content")?
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Names of the tools the client sent itself.
pub fn client_tool_names(request: &Map<String, Value>) -> Vec<String> {
    request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the tool loop, sending client-facing Ollama chunks into `out`.
/// Ends with exactly one `done:true` chunk or one `{"error"}` chunk. Stops
/// early (dropping the upstream request and any running tools) when the
/// receiver is gone — a client that disconnected. `held` (the request's
/// images and body-budget share) lives until the loop ends; `hooks` are
/// the request's features, called in their order at every phase.
pub async fn run_loop(
    ctx: Arc<ChatContext>,
    request: Map<String, Value>,
    tools: Vec<InjectedTool>,
    options: ChatOptions,
    mut hooks: Hooks,
    held: Held,
    out: mpsc::Sender<Event>,
) {
    let deadline = ctx.deadline;
    let mut cx = RequestCtx::new(ctx, request, tools, options, held);
    let definitions = hooks.definitions(&mut cx);
    cx.offer(definitions);
    let result = tokio::time::timeout(deadline, drive(&mut cx, &mut hooks, &out)).await;
    if result.is_err() {
        let message = format!(
            "the request took longer than the {}s chat deadline (ollama.chat_deadline)",
            deadline.as_secs()
        );
        fail(&cx, &mut hooks, &out, StatusCode::GATEWAY_TIMEOUT, message).await;
    }
}

/// The rounds of one request, phase after phase (the module docs narrate
/// them); every branch a feature needs is inside its phase.
async fn drive(cx: &mut RequestCtx, hooks: &mut Hooks, out: &mpsc::Sender<Event>) {
    loop {
        let (plan, body) = match plan_round(cx, hooks) {
            Ok(planned) => planned,
            Err(message) => return fail(cx, hooks, out, StatusCode::BAD_REQUEST, message).await,
        };
        let (result, held_events) = send_round(cx, hooks, out, &plan, body).await;
        let round = match result {
            Ok(round) => round,
            Err(RoundError::ClientGone) => return,
            Err(RoundError::Upstream { status, message }) => {
                if retry_without_tools(cx, hooks, status, &message) {
                    continue;
                }
                return fail(cx, hooks, out, status, message).await;
            }
        };
        let mut answered = after_round(cx, hooks, &plan, round).await;
        if answered.ask_again {
            continue;
        }
        if !release(cx, hooks, out, &plan, &mut answered, held_events).await {
            return;
        }
        let Answered {
            outcome:
                RoundOutcome {
                    content,
                    ours,
                    theirs,
                    ..
                },
            thinking,
            done,
            ..
        } = answered;
        if ours.is_empty() || !cx.options.auto_execute || plan.last_round {
            let mut handed_back = theirs;
            if !cx.options.auto_execute {
                handed_back.extend(ours);
            }
            return conclude(cx, hooks, out, &plan, done, handed_back).await;
        }
        let Some(results) = run_ours(cx, hooks, out, &ours).await else {
            return;
        };
        record_turn(cx, content, thinking, &ours, results);
        if !theirs.is_empty() {
            remember_mixed(cx, &theirs);
            return conclude(cx, hooks, out, &plan, done, theirs).await;
        }
        if out.is_closed() {
            return;
        }
    }
}

/// What a round offers and holds, decided before it is sent.
struct RoundPlan {
    /// Rounds are used up: no tools, so the user gets an answer instead of
    /// a dangling tool call.
    last_round: bool,
    /// After this round oapd may run a call and ask again.
    may_continue: bool,
    /// The round's client-facing events wait until it is over.
    holding: bool,
    /// `format` was left out of the round (`answer.rs`).
    formatting: bool,
    /// Content that may be a printed call waits until the round is over.
    hold_printed: bool,
}

/// Phase 1, before a round: what it offers and carries, whether it is
/// held, and its body (an error is the client's: a body that cannot be
/// encoded).
fn plan_round(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
) -> Result<(RoundPlan, Vec<bytes::Bytes>), String> {
    cx.stats.rounds += 1;
    let last_round = cx.stats.rounds > cx.options.max_rounds;
    let offered = offered_tools(cx, last_round);
    let offers_tools = offered.is_some();
    let may_continue =
        cx.ours_offered && cx.options.auto_execute && offers_tools && !cx.answer.format_round();
    let body = encode_round(cx, offered, &cx.answer.for_round(may_continue))?;
    let start = RoundStart {
        number: cx.stats.rounds,
        offers_tools,
        auto_execute: cx.options.auto_execute,
    };
    let formatting = cx.answer.holds(may_continue);
    let holding = hooks.holds_round(cx, &start) || formatting;
    let plan = RoundPlan {
        last_round,
        may_continue,
        holding,
        formatting,
        hold_printed: cx.prints_calls && may_continue,
    };
    Ok((plan, body))
}

/// The tools a round offers: the client's only in the format round, none
/// once the rounds are used up.
fn offered_tools(cx: &RequestCtx, last_round: bool) -> Option<&[Value]> {
    if cx.answer.format_round() {
        (!cx.client_tools.is_empty()).then_some(cx.client_tools.as_slice())
    } else {
        (!cx.offered.is_empty() && !last_round).then_some(cx.offered.as_slice())
    }
}

/// Phase 2, the round: streamed to the client, or its events held back
/// and returned.
async fn send_round(
    cx: &RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    plan: &RoundPlan,
    body: Vec<bytes::Bytes>,
) -> (Result<Round, RoundError>, Vec<Event>) {
    let upstream = &cx.shared.upstream;
    let capabilities = &cx.shared.capabilities;
    // A model seen to start its answers inside thinking is split so from
    // the start; any other learns it from its first lone `</think>`.
    let splitter = if capabilities.thinks_unopened(&cx.model) {
        oap_wire::think::ThinkSplitter::starting_inside()
    } else {
        oap_wire::think::ThinkSplitter::new()
    };
    let (result, held) = if plan.holding {
        let mut sink = Sink::Held(Vec::new());
        let result = stream_round(upstream, body, &mut sink, plan.hold_printed, splitter).await;
        let held = match sink {
            Sink::Held(events) => events,
            Sink::Live { .. } => Vec::new(),
        };
        (result, held)
    } else {
        let mut sink = Sink::Live { cx, hooks, out };
        let result = stream_round(upstream, body, &mut sink, plan.hold_printed, splitter).await;
        (result, Vec::new())
    };
    if result.as_ref().is_ok_and(|round| round.thinks_unopened) {
        capabilities.remember_thinks_unopened(&cx.model);
    }
    (result, held)
}

/// Phase 3, the round failed: a first round refused because the model
/// takes no tools (its capabilities were unknown or stale) is remembered,
/// and the request served as it came, without oapd's tools. True: start
/// again.
fn retry_without_tools(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
    status: StatusCode,
    message: &str,
) -> bool {
    if cx.stats.rounds != 1
        || cx.stats.tools_injected == 0
        || !crate::capabilities::refuses_tools(status, message)
    {
        return false;
    }
    cx.shared.capabilities.remember(&cx.model, false);
    cx.withdraw_tools();
    hooks.tools_withdrawn(cx);
    true
}

/// A round the model answered, after phase 4.
struct Answered {
    /// What the hooks made of the round.
    outcome: RoundOutcome,
    /// The streamed `thinking`, joined.
    thinking: String,
    /// The upstream's final chunk, held back from the client.
    done: Option<Value>,
    /// Text held back as a possible printed call.
    printed_held: Vec<Value>,
    /// That text was a call: it never goes out.
    printed: bool,
    /// `format` dropped the answer: the question is asked again.
    ask_again: bool,
}

/// Phase 4, after a round: calls written as text are read (`printed.rs`),
/// the calls split into oapd's and the client's, the hooks have their
/// say, then `format` may drop the answer (`answer.rs`).
async fn after_round(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
    plan: &RoundPlan,
    round: Round,
) -> Answered {
    let Round {
        mut content,
        thinking,
        mut calls,
        done,
        held,
        ..
    } = round;
    // A block, so the borrow of the hooks ends before they are awaited.
    let (printed, ours, theirs) = {
        let is_ours = |name: &str| cx.injects(name) || hooks.owns(name);
        let printed = plan.may_continue
            && crate::printed::read_calls(
                &mut calls,
                &mut content,
                &thinking,
                cx.prints_calls,
                &is_ours,
            );
        let (ours, theirs): (Vec<ToolCall>, Vec<ToolCall>) =
            calls.into_iter().partition(|call| is_ours(&call.name));
        (printed, ours, theirs)
    };
    let mut outcome = RoundOutcome {
        number: cx.stats.rounds,
        held: plan.holding,
        release_held: true,
        content,
        ours,
        theirs,
    };
    hooks.after_round(cx, &mut outcome).await;
    let ask_again = cx.answer.after_round(
        plan.formatting,
        !outcome.ours.is_empty(),
        !outcome.theirs.is_empty(),
        &mut outcome.release_held,
    );
    Answered {
        outcome,
        thinking,
        done,
        printed_held: held,
        printed,
        ask_again,
    }
}

/// Phase 5: held events go out unless a phase dropped the answer; text
/// held back as a possible printed call goes out unless it was one.
/// False when the client is gone.
async fn release(
    cx: &RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    plan: &RoundPlan,
    answered: &mut Answered,
    held_events: Vec<Event>,
) -> bool {
    let released = !plan.holding || answered.outcome.release_held;
    if plan.holding && released && !hooks.release(cx, out, held_events).await {
        return false;
    }
    let printed_held = std::mem::take(&mut answered.printed_held);
    if !answered.printed && released {
        let held = printed_held.into_iter().map(Event::Chunk).collect();
        return hooks.release(cx, out, held).await;
    }
    true
}

/// Phase 6: oapd's calls run (a hook's runner, else the loop's: bounded
/// parallelism, results in call order), observers hear each call, the
/// hooks see the results. A client that goes away cancels them (dropping
/// the futures kills the tools' process groups and closes their
/// connections): `None`.
async fn run_ours(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    ours: &[ToolCall],
) -> Option<Vec<ToolResult>> {
    let timed = tokio::select! {
        timed = timed_calls(cx, hooks, ours) => timed,
        _ = out.closed() => return None,
    };
    let round = cx.stats.rounds;
    for (call, (result, elapsed)) in ours.iter().zip(&timed) {
        let report = CallReport {
            round,
            name: &call.name,
            result,
            elapsed: *elapsed,
        };
        hooks.call_finished(cx, &report);
    }
    let results: Vec<ToolResult> = timed.into_iter().map(|(result, _)| result).collect();
    hooks.results_seen(cx, &results);
    Some(results)
}

/// The round's calls, each with how long it took (calls a hook runs
/// itself are timed together: each gets the time of the whole batch).
async fn timed_calls(
    cx: &RequestCtx,
    hooks: &mut Hooks,
    ours: &[ToolCall],
) -> Vec<(ToolResult, Duration)> {
    match hooks.run_calls(cx, ours) {
        Some(run) => {
            let started = Instant::now();
            let results = run.await;
            let elapsed = started.elapsed();
            results
                .into_iter()
                .map(|result| (result, elapsed))
                .collect()
        }
        None => run_calls_timed(&cx.shared, &cx.tools_by_name(), ours).await,
    }
}

/// Phase 6, then: the model's turn and the results join the conversation
/// for the next round.
fn record_turn(
    cx: &mut RequestCtx,
    content: String,
    thinking: String,
    ours: &[ToolCall],
    results: Vec<ToolResult>,
) {
    let assistant_calls: Vec<Value> = ours.iter().map(ToolCall::to_ollama).collect();
    let mut assistant = json!({
        "role": "assistant",
        "content": content,
        "tool_calls": assistant_calls,
    });
    if !thinking.is_empty() {
        // The model's reasoning stays with its calls in the next round.
        assistant["thinking"] = Value::from(thinking);
    }
    cx.messages.push(assistant);
    for (call, result) in ours.iter().zip(results) {
        let mut message = json!({
            "role": "tool",
            "content": result.content,
            "tool_name": call.name,
        });
        if let Some(id) = &call.id {
            message["tool_call_id"] = Value::from(id.clone());
        }
        cx.messages.push(message);
    }
}

/// Phase 7: a turn that also called the client's tools. Those go back to
/// the client now, which continues the conversation itself; what oapd
/// added waits for that follow-up (`mixed.rs`).
fn remember_mixed(cx: &RequestCtx, theirs: &[ToolCall]) {
    if let Some(conversation) = &cx.options.conversation {
        cx.shared.mixed_turns.remember(
            conversation,
            theirs,
            cx.messages.get(cx.client_messages..).unwrap_or_default(),
            cx.messages.get(..cx.client_messages).unwrap_or_default(),
            &cx.held.images,
        );
    }
}

/// Phase 8, the request is over: the client's `keep_alive` applied when
/// this round left it out (`answer.rs`), then the client's calls and the
/// final chunk.
async fn conclude(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    plan: &RoundPlan,
    done: Option<Value>,
    handed_back: Vec<ToolCall>,
) {
    cx.answer
        .finish(&cx.shared.upstream, &cx.model, plan.may_continue);
    finish(cx, hooks, out, done, handed_back).await;
}

/// Ends the request with an error (the client's status if nothing went out yet).
async fn fail(
    cx: &RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    status: StatusCode,
    message: String,
) {
    hooks.send(cx, out, Event::error(status, message)).await;
}

/// Runs oapd's calls with bounded parallelism; results in call order.
/// Arguments are checked against the tool's schema first; a call to a
/// name not in `by_name` is a tool error.
pub async fn run_calls(
    ctx: &ChatContext,
    by_name: &ToolsByName<'_>,
    calls: &[ToolCall],
) -> Vec<ToolResult> {
    run_calls_timed(ctx, by_name, calls)
        .await
        .into_iter()
        .map(|(result, _)| result)
        .collect()
}

/// [`run_calls`], each result with how long its call took.
async fn run_calls_timed(
    ctx: &ChatContext,
    by_name: &ToolsByName<'_>,
    calls: &[ToolCall],
) -> Vec<(ToolResult, Duration)> {
    use futures_util::stream::{self, StreamExt};
    type Job = std::pin::Pin<Box<dyn std::future::Future<Output = (ToolResult, Duration)> + Send>>;
    let mut jobs: Vec<Job> = Vec::with_capacity(calls.len());
    for call in calls {
        let injected = by_name.get(call.name.as_str());
        let tool = injected.map(|t| (t.record.clone(), t.manifest.clone()));
        let schema = injected.and_then(|t| t.definition.pointer("/function/parameters").cloned());
        let runner = ctx.runner.clone();
        let call = call.clone();
        let on_result = injected.and_then(|t| t.on_result.clone());
        let job = async move {
            let Some((record, manifest)) = tool else {
                return ToolResult {
                    content: format!("Error: unknown tool '{}'", call.name),
                    ok: false,
                };
            };
            if let Some(error) = &call.arguments_error {
                return ToolResult {
                    content: format!("Error: the arguments for {} were not usable ({error}). Call it again with a JSON object of arguments.", call.name),
                    ok: false,
                };
            }
            let arguments = match schema {
                Some(schema) => match oap_manifest::tool::check_arguments(&schema, &call.arguments)
                {
                    Ok(arguments) => arguments,
                    Err(problems) => {
                        return ToolResult {
                            content: format!(
                            "Error: {} was not called: {}. Fix the arguments and call it again.",
                            call.name,
                            problems.join("; ")
                        ),
                            ok: false,
                        }
                    }
                },
                None => call.arguments.clone(),
            };
            let result = runner.run(record, manifest, arguments.clone()).await;
            if let Some(hook) = on_result {
                hook(&arguments, result.ok);
            }
            result
        };
        jobs.push(Box::pin(async move {
            let started = Instant::now();
            let result = job.await;
            (result, started.elapsed())
        }));
    }
    stream::iter(jobs)
        .buffered(ctx.max_parallel_tools.max(1))
        .collect()
        .await
}

/// Sends the client the calls it owns (if any) and the one final chunk.
async fn finish(
    cx: &mut RequestCtx,
    hooks: &mut Hooks,
    out: &mpsc::Sender<Event>,
    done: Option<Value>,
    handed_back: Vec<ToolCall>,
) {
    let model = cx.model.as_str();
    if !handed_back.is_empty() {
        let calls: Vec<Value> = handed_back
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let mut wire = call.to_ollama();
                wire["function"]["index"] = Value::from(index);
                wire
            })
            .collect();
        let chunk = json!({
            "model": model,
            "created_at": now_rfc3339(),
            "message": {"role": "assistant", "content": "", "tool_calls": calls},
            "done": false,
        });
        if !hooks.send(cx, out, Event::Chunk(chunk)).await {
            return;
        }
    }
    let mut done = done.unwrap_or_else(|| {
        json!({
            "model": model,
            "created_at": now_rfc3339(),
            "message": {"role": "assistant", "content": ""},
            "done": true,
            "done_reason": "stop",
        })
    });
    if let Some(message) = done.get_mut("message").and_then(Value::as_object_mut) {
        // Its text and thinking went out on their own chunk (`round.rs`).
        message.remove("tool_calls");
        message.remove("thinking");
        message.insert("content".into(), Value::from(""));
    }
    done["done"] = Value::Bool(true);
    done["oap_tools_injected"] = Value::from(cx.stats.tools_injected);
    done["oap_round"] = Value::from(cx.stats.rounds);
    hooks.finish(cx, &mut done);
    hooks.send(cx, out, Event::Chunk(done)).await;
}

/// `created_at` in Ollama's format (RFC 3339, UTC, nanoseconds).
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Combines the client-facing chunks into one response, as Ollama does for
/// `stream:false`: content and thinking concatenated, tool calls appended,
/// the final chunk's metadata.
pub fn aggregate(chunks: &[Value]) -> Result<Value, String> {
    let mut content = String::new();
    let mut thinking = String::new();
    let mut tool_calls = Vec::new();
    let mut last = None;
    for chunk in chunks {
        if let Some(error) = chunk.get("error") {
            return Err(error
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string()));
        }
        if let Some(text) = chunk.pointer("/message/content").and_then(Value::as_str) {
            content.push_str(text);
        }
        if let Some(text) = chunk.pointer("/message/thinking").and_then(Value::as_str) {
            thinking.push_str(text);
        }
        if let Some(calls) = chunk
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
        {
            tool_calls.extend(calls.iter().cloned());
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            last = Some(chunk.clone());
        }
    }
    let mut response = last.ok_or_else(|| "the answer ended before it was done".to_string())?;
    let mut message = Map::new();
    message.insert("role".into(), Value::from("assistant"));
    message.insert("content".into(), Value::from(content));
    if !thinking.is_empty() {
        message.insert("thinking".into(), Value::from(thinking));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    response["message"] = Value::Object(message);
    Ok(response)
}

/// Drains the loop's channel (for `stream:false`): the chunks, or the
/// error that ended the loop.
pub async fn collect(mut rx: mpsc::Receiver<Event>) -> Result<Vec<Value>, (StatusCode, String)> {
    let mut chunks = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Chunk(chunk) => chunks.push(chunk),
            Event::Error { status, message } => return Err((status, message)),
        }
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BridgeSettings {
        BridgeSettings {
            enabled: true,
            default_top_k: 3,
            max_rounds: 3,
        }
    }

    fn request(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn extension_fields_are_removed_validated_and_clamped() {
        let mut r = request(
            json!({"model": "m", "messages": [], "oap_top_k": 5, "oap_max_rounds": 9,
            "oap_discover": false, "oap_auto_execute": false, "oap_tool_instruction": false,
            "options": {"num_ctx": 8192}}),
        );
        let options = take_options(&mut r, &settings()).unwrap();
        assert_eq!(
            options,
            ChatOptions {
                discover: false,
                top_k: 5,
                auto_execute: false,
                max_rounds: 3,
                stream: true,
                conversation: None,
                tool_instruction: Some(false),
            }
        );
        assert!(r.keys().all(|k| !k.starts_with("oap_")));
        assert_eq!(r["options"]["num_ctx"], 8192);
    }

    #[test]
    fn bad_extension_fields_are_refused_with_their_name() {
        for (body, needle) in [
            (json!({"model": "m", "oap_top_k": 0}), "oap_top_k"),
            (json!({"model": "m", "oap_top_k": 21}), "oap_top_k"),
            (
                json!({"model": "m", "oap_max_rounds": "2"}),
                "oap_max_rounds",
            ),
            (json!({"model": "m", "oap_discover": "yes"}), "oap_discover"),
            (
                json!({"model": "m", "oap_tool_instruction": 1}),
                "oap_tool_instruction",
            ),
            (json!({"model": "m", "stream": "no"}), "stream"),
            (json!({"messages": []}), "model"),
            (json!({"model": "m", "messages": {}}), "messages"),
        ] {
            let err = take_options(&mut request(body), &settings()).unwrap_err();
            assert!(err.0.contains(needle), "{err}");
        }
    }

    #[test]
    fn the_task_is_the_last_user_message() {
        let r = request(json!({"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "  count the words  "},
            {"role": "tool", "content": "3"}]}));
        assert_eq!(task_of(&r).as_deref(), Some("count the words"));
        assert_eq!(task_of(&request(json!({"model": "m"}))), None);
    }

    #[test]
    fn aggregation_matches_ollama() {
        let chunks = vec![
            json!({"model": "m", "message": {"role": "assistant", "content": "Hel", "thinking": "h"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": "lo"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"index": 0, "name": "x", "arguments": {}}}]}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "eval_count": 7, "oap_round": 2}),
        ];
        let response = aggregate(&chunks).unwrap();
        assert_eq!(response["message"]["content"], "Hello");
        assert_eq!(response["message"]["thinking"], "h");
        assert_eq!(
            response["message"]["tool_calls"][0]["function"]["name"],
            "x"
        );
        assert_eq!(response["eval_count"], 7);
        assert_eq!(response["oap_round"], 2);
        assert!(aggregate(&[json!({"error": "boom"})])
            .unwrap_err()
            .contains("boom"));
        assert!(aggregate(&chunks[..2]).is_err());
    }

    #[test]
    fn a_result_names_its_outcome_in_a_word() {
        let result = |ok: bool, content: &str| ToolResult {
            content: content.into(),
            ok,
        };
        assert_eq!(result(true, "4").outcome(), "ok");
        let timed_out =
            "Error: `wc` timed out after 10s; it and everything it started were killed.";
        assert_eq!(result(false, timed_out).outcome(), "timeout");
        for refused in [
            "Error: oap_wc was not called: text is required. Fix the arguments and call it again.",
            "Error: unknown tool 'x'",
            "Error: refused to connect to h (10.0.0.1): it is a private-network address",
        ] {
            assert_eq!(result(false, refused).outcome(), "refused", "{refused}");
        }
        let failed = "Error: `grep` failed (exit status 2)";
        assert_eq!(result(false, failed).outcome(), "error");
    }

    #[test]
    fn timestamps_look_like_ollamas() {
        let ts = now_rfc3339();
        assert_eq!(ts.len(), 30, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T');
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}
