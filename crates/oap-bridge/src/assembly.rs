//! Where a request's hooks are assembled, in one place: the exposure
//! settings (`exposure.rs`) applied to the discovered tools, and the
//! features that take part in the request built in the order every phase
//! calls them (`hooks.rs`). The daemon calls [`prepare`] once per chat
//! request, appends its own observer hook, and hands tools and hooks to
//! the loop (`tool_loop::run_loop`). The tool-listing instruction
//! (`guide.rs`) is added here too, inside the tool-token budget.

use std::sync::Arc;

use oap_discovery::Engine;
use serde_json::{Map, Value};

use crate::context::{ChatOptions, InjectedTool};
use crate::exposure::{client_tool_tokens, fit_budget, ExposureSettings, TokenReport};
use crate::hooks::Hooks;
use crate::settings::{ToolExposure, UrlPolicy};
use crate::tokens;
use crate::tools::ToolSource;

/// What [`prepare`] made of a request.
pub struct Prepared {
    /// The request's features, in the order the loop calls them.
    pub hooks: Hooks,
    /// Estimated tokens of everything oapd offers (tools or meta-tools).
    pub tool_tokens: usize,
    /// Estimated tokens of the client's own tools (never trimmed).
    pub client_tool_tokens: usize,
    /// Whether oapd offers the meta-tools.
    pub meta: bool,
}

/// Applies the exposure settings to one request's discovered tools
/// (`None`: nothing of oapd's is offered): forcing, budget fitting or meta
/// mode, token accounting and the URL policy. `engine` supplies a forced
/// tool discovery did not find; `source` answers `oap_discover`.
pub fn prepare(
    settings: &ExposureSettings,
    engine: &Engine,
    source: Arc<dyn ToolSource>,
    tools: Option<Vec<InjectedTool>>,
    chat: &mut Map<String, Value>,
    options: &ChatOptions,
) -> (Vec<InjectedTool>, Prepared) {
    let client_tool_tokens = client_tool_tokens(chat);
    let Some(mut tools) = tools else {
        return (
            Vec::new(),
            Prepared {
                hooks: Hooks::new(vec![Box::new(TokenReport::new(0))]),
                tool_tokens: 0,
                client_tool_tokens,
                meta: false,
            },
        );
    };
    let mut forced = crate::forcing::apply_force(&settings.force, engine, &mut tools, chat);
    let (tools, tool_tokens, meta) = if settings.exposure == ToolExposure::Meta {
        let meta = crate::meta::MetaSession::new(
            source,
            options.top_k,
            crate::tool_loop::client_tool_names(chat),
        );
        let tokens = tokens::tools_tokens(
            crate::meta::definitions()
                .iter()
                .chain(tools.iter().map(|t| &t.definition)),
        );
        (tools, tokens, Some(meta))
    } else {
        // The instruction is counted in the budget: the tools get what it
        // leaves (it shrinks with them, so this is an upper bound).
        let guided = options.tool_instruction == Some(true) && !tools.is_empty();
        let reserved = if guided {
            crate::guide::tokens(&crate::guide::instruction(&tools))
        } else {
            0
        };
        let budget = match settings.tool_token_budget {
            0 => 0,
            budget => budget.saturating_sub(reserved).max(1),
        };
        let (tools, fitting) = fit_budget(tools, budget);
        if fitting.tokens_after != fitting.tokens_before {
            tracing::info!(
                budget = settings.tool_token_budget,
                tokens_before = fitting.tokens_before,
                tokens_after = fitting.tokens_after,
                optional_parameters_dropped = fitting.optional_parameters_dropped,
                tools_dropped = fitting.tools_dropped,
                "tools fitted to the token budget"
            );
        }
        let mut offered_tokens = fitting.tokens_after;
        if guided && !tools.is_empty() {
            let instruction = crate::guide::instruction(&tools);
            crate::guide::insert(chat, &instruction);
            offered_tokens += crate::guide::tokens(&instruction);
        }
        (tools, offered_tokens, None)
    };
    if let Some(lost) = forced
        .as_ref()
        .filter(|f| !tools.iter().any(|t| t.name == f.name))
    {
        tracing::warn!(tool = %lost.name, budget = settings.tool_token_budget,
            "the forced tool does not fit the token budget; not forced");
        lost.withdraw(chat);
        forced = None;
    }
    // The policy guards answers built on what oapd's tools could have
    // fed the model; a request where oapd offered nothing is a plain
    // chat through oapd and its answer is left alone.
    let offered_nothing = tools.is_empty() && meta.is_none();
    let url_policy = if offered_nothing {
        UrlPolicy::Off
    } else {
        settings.url_policy_for(&tools)
    };
    let is_meta = meta.is_some();
    // The order of the hooks is the order every phase calls them in:
    // 1. forcing: holds the first round and, after it, has the forced tool
    //    called (before any other hook sees the round's calls);
    // 2. meta-tools: offers oap_discover/oap_invoke, owns and runs the calls;
    // 3. URL policy: reads the results of whatever ran, filters the output
    //    (the last filter, so it sees the text as the client will);
    // 4. token report: stamps oap_tool_tokens on the final chunk.
    let mut hooks = Hooks::default();
    if let Some(forced) = forced {
        hooks.push(Box::new(crate::forcing::ForceHook::new(forced)));
    }
    if let Some(meta) = meta {
        hooks.push(Box::new(meta));
    }
    if url_policy != UrlPolicy::Off {
        hooks.push(Box::new(crate::sanitize::UrlGuard::new(url_policy, chat)));
    }
    hooks.push(Box::new(TokenReport::new(tool_tokens)));
    (
        tools,
        Prepared {
            hooks,
            tool_tokens,
            client_tool_tokens,
            meta: is_meta,
        },
    )
}
