//! The Ollama tool bridge as a library: the tool loop and the features that
//! make it work for small models, without any HTTP serving (the daemon
//! parses requests, builds each request's hooks and encodes the loop's
//! events for its clients).
//!
//! - `tool_loop`: rounds against Ollama (`round`), ownership of calls, the
//!   final tool-less round, the deadline; it knows no feature. `context`
//!   holds the one per-request context every phase is lent as `&mut`.
//! - `hooks`: the one trait through which features take part. A hook is
//!   built per request by its feature from its settings (`Send + Sync`);
//!   the loop calls a request's hooks in list order at each phase, every
//!   phase a no-op by default: tools offered (`definitions`, `owns`,
//!   `tools_withdrawn`), before a round (`holds_round`), after a round
//!   (`after_round`: change the calls, drop the held answer), run calls
//!   (`run_calls`: the first hook that answers runs them), results seen
//!   (`call_finished` per call with its duration, then `results_seen`), output (`output` on every event to the
//!   client, `finish` on the final chunk). `assembly::prepare` builds the
//!   list and documents its order.
//! - Features: `forcing` (`ForceHook`), `meta` (`MetaSession`),
//!   `sanitize` (`UrlGuard`), `exposure` (budget fitting, `TokenReport`),
//!   `experience` (the cache behind the tool source), `validation` (the
//!   `oapd validate-model` checks and the gate).
//! - `mixed` (a turn calling oapd's and the client's tools: oapd's part
//!   spliced into the client's follow-up), `printed` (calls written as
//!   text or into thinking).
//! - `upstream` (the Ollama client), `payload` (chat bodies without copies),
//!   `tools` (tool definitions from stored manifests), `tokens`, `state`,
//!   `settings` (each feature's settings type).

pub mod assembly;
pub mod capabilities;
pub mod connect;
pub mod context;
pub mod experience;
pub mod exposure;
pub mod forcing;
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
    ExperienceConfig, ForceRule, ForceRules, ToolBridgeConfig, ToolExposure, UrlPolicy,
};
pub use tool_loop::{aggregate, collect, run_loop};
