//! The tools a chat request offers the model and what they cost in prompt
//! tokens, with the estimator `bench-tokens` uses (`oap_bridge::tokens`).
//! `cargo xtask bench-mcp` runs it on the requests the fake Ollama
//! recorded, so oapd and a peer proxy are counted the same way.
//!
//! ```text
//! oap-bench request-tokens --request FILE
//! ```
//! FILE holds one `/api/chat` body (JSON); the result is a
//! [`RequestTokensReport`].

use std::path::PathBuf;

use anyhow::{Context, Result};
use oap_bench::report::RequestTokensReport;
use oap_bridge::tokens;
use serde_json::Value;

/// A request body larger than this is refused.
const MAX_REQUEST_BYTES: u64 = 16 << 20;

/// The tools of one chat request and their estimated tokens.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// One `/api/chat` request body (JSON).
    #[arg(long)]
    request: PathBuf,
}

pub fn run(args: Args) -> Result<RequestTokensReport> {
    let size = std::fs::metadata(&args.request)
        .with_context(|| format!("cannot read {}", args.request.display()))?
        .len();
    if size > MAX_REQUEST_BYTES {
        anyhow::bail!(
            "{}: {size} bytes, more than {MAX_REQUEST_BYTES}",
            args.request.display()
        );
    }
    let bytes = std::fs::read(&args.request)
        .with_context(|| format!("cannot read {}", args.request.display()))?;
    let body: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", args.request.display()))?;
    let tools: Vec<Value> = match body.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools.clone(),
        Some(_) => anyhow::bail!("{}: `tools` is not an array", args.request.display()),
    };
    let names = tools
        .iter()
        .map(|t| {
            t.pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    Ok(RequestTokensReport {
        tools: tools.len(),
        tool_tokens: tokens::tools_tokens(tools.iter()),
        tools_json_bytes: tools.iter().map(|t| t.to_string().len()).sum(),
        names,
    })
}
