//! The Ollama tool bridge as a library: the tool loop and the features that
//! make it work for small models, without any HTTP serving (the daemon
//! parses requests, asks for each request's hooks and encodes the loop's
//! events for its clients).
//!
//! # One `/api/chat` request with a tool call, phase by phase
//!
//! 1. The daemon splits off the `oap_*` fields (`tool_loop::take_options`),
//!    discovers tools (`tools`, `experience`) and calls
//!    `assembly::prepare`: the exposure settings applied (`exposure`:
//!    budget fitting; `forcing`; `meta`) and the request's [`Hooks`]
//!    built in the order every phase calls them. It adds its own observer
//!    hook last and calls [`run_loop`].
//! 2. [`run_loop`] takes the request apart into its one [`RequestCtx`]
//!    (`context`): the fields forwarded every round, the conversation, the
//!    client's and oapd's tools, `format`/`keep_alive` (`answer`), the
//!    round count. The hooks add their definitions (`Hook::definitions`).
//!    Everything per request lives there or in the request's own hooks,
//!    lent to each phase as `&mut`; only cross-request state (caches,
//!    metrics, mixed turns) sits behind `Arc`s in [`ChatContext`].
//! 3. `tool_loop`'s `drive` runs the rounds, each a sequence of phases:
//!    plan the round (offered tools, answer fields, held or not: the hooks'
//!    `holds_round`, `format`, printed calls), send it (`round`: streamed
//!    to the client through every hook's `output`, or held), retry once
//!    without oapd's tools when the model "does not support tools"
//!    (`capabilities`), read what came back (printed calls, `printed`;
//!    oapd's calls split from the client's; the hooks' `after_round`;
//!    `format` may ask again), release held text, run oapd's calls (a
//!    hook's `run_calls` or the runner; `call_finished`, `results_seen`)
//!    and add them to the conversation. The model's call to an injected
//!    tool thus runs here, and the next round asks the model again with
//!    the result.
//! 4. A round without oapd's calls (or the last one) concludes: the
//!    client's `keep_alive` applied if it was held back (`answer`), a turn
//!    that also called the client's tools remembered for its follow-up
//!    (`mixed`), the client's calls and the one final chunk sent (the
//!    hooks' `finish`). The daemon encodes the events as NDJSON, SSE or
//!    one JSON answer.
//!
//! # Modules
//!
//! - `tool_loop` (the phases and `drive`; it knows no feature), `round`
//!   (one upstream round), `context` (the per-request context and the
//!   shared one), `hooks` (the one trait through which features take part:
//!   phases in `hooks.rs`'s docs), `assembly` (the hook list, in one place).
//! - Loop phases with their own module: `answer` (`format`, `keep_alive`),
//!   `printed` (calls written as text or into thinking), `mixed` (a turn
//!   calling oapd's and the client's tools), `capabilities` (which models
//!   take tools, their context window).
//! - Features as hooks: `forcing` (`ForceHook`), `meta` (`MetaSession`),
//!   `sanitize` (`UrlGuard`), `exposure` (budget fitting, `TokenReport`),
//!   `experience` (the cache behind the tool source), `validation` (the
//!   `oapd validate-model` checks and the gate).
//! - `upstream` and `connect` (the Ollama client), `payload` (chat bodies
//!   without copies), `tools` (tool definitions from stored manifests),
//!   `tokens`, `state`, `settings` (each feature's settings type).
//!
//! Modules depend one way only, without cycles: `connect` ← `upstream` ←
//! `context` ← `hooks` ← `round` ← `tool_loop`; the features use
//! `context`, `hooks` and `tool_loop`'s helpers, never the other way
//! round; `assembly`, on top, is the one module that knows them all.

pub mod answer;
pub mod assembly;
pub mod capabilities;
pub mod connect;
pub mod context;
pub mod experience;
pub mod exposure;
pub mod forcing;
pub mod guide;
pub mod hooks;
pub mod meta;
pub mod mixed;
pub mod payload;
pub mod printed;
mod round;
pub mod sanitize;
pub mod settings;
pub mod state;
pub mod tokens;
pub mod tool_loop;
pub mod tools;
pub mod upstream;
pub mod validation;

pub use capabilities::Capabilities;
pub use context::{
    ChatContext, ChatOptions, Event, InjectedTool, LoopStats, RequestCtx, ToolResult, ToolRunner,
};
pub use hooks::{CallReport, Hook, Hooks, RoundOutcome, RoundStart, ToolsByName};
pub use settings::{
    ExperienceConfig, ForceRule, ForceRules, ResponseStoreConfig, ToolBridgeConfig, ToolExposure,
    UrlPolicy,
};
pub use tool_loop::{aggregate, collect, run_loop};
