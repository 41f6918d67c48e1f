//! The bridge's tool runner: oap-exec's executor, configured from the
//! `tool_bridge:` and `tools:` sections.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_discovery::{StoredRecord, Trust};
use oap_exec::{Cidr, CredentialStore, ExecPolicy, Executor};
use oap_manifest::Manifest;
use serde_json::{Map, Value};

use crate::config::Config;
use oap_bridge::{ToolResult, ToolRunner};

/// Runs manifests' tools for the chat loop through `oap_exec`'s
/// executor, with the `tools:` policy (private networks, credentials,
/// sandbox).
pub struct ExecRunner {
    executor: Arc<Executor>,
    /// What the stdio sandbox enforces, for logs and `/health`.
    pub sandbox: SandboxReport,
    /// Calls the tools of MCP servers; `None` when none is configured.
    mcp: Option<oap_mcp::Hub>,
    /// What URL connections depend on, as this executor read it.
    connection_basis: ConnectionBasis,
}

/// What an outgoing connection of the executor (and of the MCP hub, which
/// shares its context) depends on: the address rule, the credential store
/// and the operator's CA certificates, as read when the executor was built.
/// A reload compares the old and new basis to decide whether URL MCP
/// servers reconnect, without reading the files again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionBasis {
    allow_private: Vec<String>,
    credentials: Option<oap_exec::CredentialStore>,
    ca_pem: Option<Vec<u8>>,
}

/// What the stdio sandbox enforces on this machine, for the start-up log
/// and `/health`.
#[derive(Debug, Clone)]
pub struct SandboxReport {
    /// `tools.sandbox`: what to do when a protection is missing.
    pub mode: oap_sandbox::Mode,
    /// The protections this kernel offers (Landlock ABI, seccomp).
    pub support: oap_sandbox::Support,
}

impl SandboxReport {
    /// The report as `/health` shows it.
    pub fn json(&self) -> Value {
        serde_json::json!({
            "mode": self.mode.as_str(),
            "landlock_abi": self.support.landlock_abi,
            "seccomp": self.support.seccomp,
            "active": self.support.active(self.mode),
            "missing": self.support.missing(self.mode),
        })
    }

    /// Under `require`, tools do not run while a protection is missing.
    pub fn blocks_tools(&self) -> bool {
        self.mode == oap_sandbox::Mode::Require
            && (!self.support.filesystem() || !self.support.seccomp)
    }

    /// Loud where a protection is missing: the operator must know that a
    /// steered model reaches further than the documentation says.
    pub fn log(&self) {
        let missing = self.support.missing(self.mode);
        if missing.is_empty() {
            tracing::info!(
                mode = %self.mode,
                landlock_abi = self.support.landlock_abi,
                "stdio tool sandbox: every protection active"
            );
        } else if self.blocks_tools() {
            tracing::error!(
                mode = %self.mode,
                missing = %missing.join("; "),
                "stdio tool sandbox incomplete: local tools will not run (tools.sandbox: require)"
            );
        } else {
            tracing::warn!(
                mode = %self.mode,
                missing = %missing.join("; "),
                "stdio tool sandbox incomplete: local tools run with fewer protections"
            );
        }
    }
}

impl ExecRunner {
    /// The executor `config.tools` describes; fails naming the key at fault
    /// (a bad `tools.allow_private` range, an unreadable credentials file).
    pub fn new(config: &Config) -> anyhow::Result<ExecRunner> {
        let tools = &config.tools;
        let allow_private = tools
            .allow_private
            .iter()
            .map(|range| {
                range
                    .parse::<Cidr>()
                    .map_err(|err| anyhow::anyhow!("tools.allow_private: {range:?}: {}", err.0))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let policy = ExecPolicy {
            http_timeout: Duration::from_secs(config.tool_bridge.http_timeout),
            stdio_timeout: Duration::from_secs(config.tool_bridge.stdio_timeout),
            max_response_bytes: tools.max_response_bytes,
            max_result_chars: tools.max_result_chars,
            allow_private,
            stdio_dirs: tools.stdio_dirs.clone(),
            sandbox: oap_sandbox::Policy {
                mode: tools.sandbox.into(),
                extra_read_paths: tools.sandbox_read_paths.clone(),
                spawn_programs: tools.sandbox_spawn.clone(),
            },
            stdio_limits: oap_exec::StdioLimits {
                max_scratch_bytes: tools.max_scratch_bytes,
                ..oap_exec::StdioLimits::default()
            },
            ..ExecPolicy::default()
        };
        let mut executor = Executor::new(policy).context("tool executor")?;
        let mut connection_basis = ConnectionBasis {
            allow_private: tools.allow_private.clone(),
            ..ConnectionBasis::default()
        };
        if let Some(path) = &tools.credentials_file {
            let store = CredentialStore::load(path)
                .with_context(|| format!("tools.credentials_file {}", path.display()))?;
            tracing::info!(path = %path.display(), domains = store.len(), "credential store loaded");
            connection_basis.credentials = Some(store.clone());
            executor = executor.with_credentials(store);
        }
        if let Some(path) = &tools.ca_file {
            let pem = crate::files::read_ca_file("tools.ca_file", path)?;
            executor = executor
                .with_extra_roots_pem(&pem)
                .with_context(|| format!("tools.ca_file {}", path.display()))?;
            connection_basis.ca_pem = Some(pem);
        }
        let sandbox = SandboxReport {
            mode: tools.sandbox.into(),
            support: executor.sandbox_support().clone(),
        };
        Ok(ExecRunner {
            executor: Arc::new(executor),
            sandbox,
            mcp: None,
            connection_basis,
        })
    }

    /// The executor itself: the schema fetches of local manifests go
    /// through it, under the rules of their calls.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// What this executor's connections depend on (see `ConnectionBasis`).
    pub fn connection_basis(&self) -> &ConnectionBasis {
        &self.connection_basis
    }

    /// Routes MCP servers' tools to `hub`.
    pub fn with_mcp(mut self, hub: oap_mcp::Hub) -> ExecRunner {
        self.mcp = Some(hub);
        self
    }

    /// What the MCP hub needs from this executor: the same address rule
    /// (`tools.allow_private`), credential store and user agent, with limits
    /// fit for long-lived server processes.
    pub fn hub_context(&self) -> oap_mcp::HubContext {
        oap_mcp::HubContext {
            resolver: Arc::new(oap_exec::SystemResolver),
            policy: self.executor.policy().clone(),
            credentials: self.executor.credentials().cloned(),
            tls: Some(self.executor.tls_client_config()),
            stdio_limits: oap_mcp::HubContext::server_limits(),
        }
    }
}

fn exec_trust(trust: Trust) -> oap_exec::Trust {
    match trust {
        Trust::Local => oap_exec::Trust::Local,
        Trust::Lan => oap_exec::Trust::Lan,
        Trust::Internet => oap_exec::Trust::Internet,
    }
}

impl ToolRunner for ExecRunner {
    fn run(
        &self,
        record: Arc<StoredRecord>,
        manifest: Arc<Manifest>,
        arguments: Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send>> {
        let executor = self.executor.clone();
        let trust = record.trust;
        if let Some(binding) = &record.mcp {
            // Only the names travel: the schema stays in the record.
            let (server, tool) = (binding.server.clone(), binding.tool.clone());
            let hub = self.mcp.clone();
            return Box::pin(async move {
                let Some(hub) = hub else {
                    return ToolResult {
                        content: format!(
                            "Error: {tool} is a tool of MCP server {server:?}, which is not configured."
                        ),
                        ok: false,
                    };
                };
                let outcome = hub.call(&server, &tool, arguments, None).await;
                ToolResult {
                    content: outcome.text,
                    ok: !outcome.is_error,
                }
            });
        }
        Box::pin(async move {
            let outcome = executor
                .execute(&manifest, exec_trust(trust), &arguments)
                .await;
            ToolResult {
                content: outcome.content,
                ok: outcome.ok,
            }
        })
    }
}
