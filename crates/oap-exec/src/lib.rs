//! Executes OAP manifests as tools, safely.
//!
//! oapd runs tools described by documents from the internet on a board in
//! someone's home network, so this crate is mostly a list of refusals.
//! [`Executor::execute`] takes a validated [`Manifest`], the [`Trust`] level
//! of where it came from and the model's arguments, and returns a
//! [`ToolOutcome`]: text for the model (never a panic, never an unbounded
//! string) plus a flag and a log detail.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use oap_exec::{CredentialStore, ExecPolicy, Executor, Trust};
//!
//! let exec = Executor::new(ExecPolicy::default())?
//!     .with_credentials(CredentialStore::load("/etc/oapd/credentials.yaml")?);
//! let manifest = oap_manifest::parse(br#"{"oap": "1.0", "name": "wc",
//!   "description": "Counts lines, words and bytes of text on stdin.",
//!   "invoke": {"method": "stdio", "url": "wc"}}"#)?.manifest;
//! let arguments = serde_json::json!({"args": "-l", "stdin": "a\nb\n"});
//! let outcome = exec
//!     .execute(&manifest, Trust::Local, arguments.as_object().unwrap())
//!     .await;
//! assert!(outcome.ok);
//! assert_eq!(outcome.content.trim(), "2");
//! # Ok(()) }
//! ```
//!
//! # HTTP (`GET`, `POST`)
//!
//! The request follows the spec's "Constructing a Request":
//! - method and URL from `invoke`; `Content-Type` from `input.format`,
//!   `Accept` from `output.format`;
//! - GET: arguments become query parameters, merged key by key over the
//!   query already in `invoke.url` (open-meteo bakes units in) and over the
//!   non-spec static `invoke.params`; arrays repeat the key;
//! - GET with `text/*` input, no `input.parameters`, a URL path ending in
//!   `/` and exactly one scalar argument: the value is appended to the path
//!   (Wikipedia, dictionary, country-info). It is split at `/` (zip-lookup
//!   takes `us/97201`), each piece percent-encoded (`?`, `#`, `%`, `\`
//!   stay in the path), `.` and `..` refused;
//! - POST: the arguments as a JSON object body; for `text/*` input the raw
//!   text of the `input` (or first string) argument; for
//!   `application/x-www-form-urlencoded` a form. `invoke.params` and a query
//!   credential go to the query string, never into the body;
//! - `invoke.headers` are merged, except `Host`, `Content-Length`,
//!   `Transfer-Encoding`, hop-by-hop headers, `Expect`, and the header that
//!   carries the credential: those are ignored (and logged);
//! - one deadline ([`ExecPolicy::http_timeout`]) covers the whole call,
//!   every hop included; the body is read up to
//!   [`ExecPolicy::max_response_bytes`] and the connection dropped there;
//!   non-2xx is a tool error with the status and the start of the body;
//! - redirects (301/302/303/307/308) are followed by hand, at most
//!   [`ExecPolicy::max_redirects`], each hop re-checked (scheme, address).
//!   303, and 301/302 after a POST, continue as GET without a body.
//!
//! # Credentials
//!
//! A [`CredentialStore`] maps exact host names to a secret. A manifest with
//! `auth` gets the secret filed under its URL's host, placed per `auth`
//! (`bearer`/`oauth2`: `Bearer <token>`; `api_key`: the raw key), `auth_in`
//! (header or query) and `auth_name` (defaults `Authorization`, `X-API-Key`;
//! `access_token` for a bearer token in the query). The secret is bound to
//! that origin (host and port, and never sent from https down to http): a
//! redirect elsewhere continues without it, and any query value equal to the
//! secret is stripped from the new URL. A missing credential is a tool
//! error naming the host and the store; nothing is sent. An internet
//! manifest's credential is never sent over plain http. A secret (of six or
//! more characters) that a server echoes back, raw or URL-encoded, is
//! replaced by `[redacted]` in what the model and the logs see.
//!
//! # Address policy (SSRF)
//!
//! Every hop's host is resolved **once** through the [`Resolver`]; every
//! address returned must pass, otherwise the call is refused before any
//! connection; the connection goes to those checked addresses (no second
//! lookup, so no DNS rebinding). IP literals (including forms such as
//! `http://2130706433/`) and names like `localhost` go through the same
//! check. IPv4-mapped, NAT64 (`64:ff9b::/96`) and 6to4 addresses are judged
//! by the IPv4 address they embed.
//!
//! | destination ([`AddressClass`]) | `Local` | `Lan` | `Internet` |
//! |---|---|---|---|
//! | public unicast | yes | yes | yes |
//! | private: 10/8, 172.16/12, 192.168/16, fc00::/7 | yes | yes | no |
//! | loopback: 127/8, ::1 | yes | no | no |
//! | link-local: 169.254/16 (cloud metadata), fe80::/10 | yes | no | no |
//! | CGNAT 100.64/10 | yes | no | no |
//! | multicast, broadcast, unspecified (0/8, ::) | yes | no | no |
//! | documentation, benchmarking, reserved | yes | no | no |
//! | stdio tools | yes | **refused** | **refused** |
//!
//! `Local` manifests come from the operator (bundled or an operator
//! directory) and may call local services such as `localhost:8305`. An
//! [`ExecPolicy::allow_private`] entry makes a range reachable for every
//! trust level (e.g. `192.168.1.20/32` for one LAN device an internet
//! manifest may call, or `127.0.0.0/8` in tests).
//!
//! # stdio
//!
//! Only for [`Trust::Local`]. The command (`invoke.url`, a bare name looked
//! up in order, or an absolute path; never arguments) must resolve,
//! symlinks followed, to a regular executable file inside
//! [`ExecPolicy::stdio_dirs`]. No shell: argv comes from the `args`
//! argument, split by quote-aware rules with no expansion ([`split_words`])
//! or given as a JSON array; `stdin` (bounded) is written and closed. The
//! child gets its own process group, an environment of only `PATH`, `LANG`,
//! `HOME`/`TMPDIR` (a fresh temporary working directory, removed afterwards)
//! and `TZ` if set, the [`StdioLimits`] rlimits, no core dumps, and
//! `PR_SET_PDEATHSIG(SIGKILL)`. stdout and stderr are read concurrently and
//! capped; hitting a cap, the deadline, or the command's own exit kills the
//! whole process group. Exit status 0, or 1 with an empty stderr (grep's "no
//! match"), is success; anything else is an error quoting stderr.
//!
//! A process that leaves the group (`setsid`) escapes `killpg`; run the
//! daemon under systemd with `KillMode=control-group` as the backstop.
//! `PR_SET_PDEATHSIG` fires when the *thread* that spawned the child exits;
//! [`Executor::execute`] spawns from the calling task's runtime worker, which
//! lives as long as the runtime, so do not drive it from a short-lived thread
//! (e.g. a `spawn_blocking` closure calling `block_on`).
//!
//! # Architecture
//!
//! Executes one manifest as a tool. HTTP: request built per the OAP
//! specification ("Constructing a Request"), every resolved address checked
//! against the trust table before the connection goes to that exact address
//! (no DNS rebinding), redirects re-validated hop by hop, credentials from an
//! operator-owned 0600 store sent only to their own origin, response bytes and
//! result characters capped. stdio: only for `local` trust; argv split without
//! any expansion, executable resolved inside allow-listed directories, cleared
//! environment, fresh working directory, rlimits, own process group killed
//! with SIGKILL at the deadline or when the call is dropped, and the kernel
//! sandbox of `oap-sandbox` applied between fork and exec. `Executor::fetch`
//! (`fetch.rs`) is the same connect path for documents rather than tools (the
//! crawler's manifests and health URLs).
//!
//! | destination | local | lan | internet |
//! |---|---|---|---|
//! | public | yes | yes | yes |
//! | private ranges | yes | yes | no |
//! | loopback, link-local (metadata), CGNAT, multicast, reserved | yes | no | no |
//! | stdio command | yes | refused | refused |
//!
//! `tools.allow_private` opens a range for every trust level.
//!
//! **Architecture Invariant.** Every failure is a tool result the model can
//! read (`Error: ...`), never a panic or a 500. Nothing connects before the
//! address check, and the check is the executor's, not the caller's: a caller
//! cannot run a `lan` or `internet` manifest as a local command.

#![warn(missing_docs)]

mod credentials;
mod error;
mod fetch;
mod http;
mod policy;
mod resolve;
mod stdio;
mod words;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oap_manifest::{InvokeKind, Manifest};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{Map, Value};
use tracing::{debug, info, warn};

pub use credentials::{Credential, CredentialError, CredentialStore, MAX_CREDENTIALS_FILE_BYTES};
pub use error::ExecError;
pub use fetch::{FetchError, FetchRequest, FetchResponse};
pub use policy::{
    classify, trust_permits, AddressClass, AddressRefusal, Cidr, CidrError, ExecPolicy,
    StdioLimits, Trust,
};
pub use resolve::{BoxFuture, Resolver, SystemResolver};
pub use stdio::{confine_command, limit_command};
pub use words::{split_words, WordsError};

use error::ToolError;

/// The tracing target of every log line that carries content: a model's
/// arguments (a stdio tool's argv, an HTTP tool's URL and query string) or
/// a tool's output. Such lines are debug only and cut to
/// [`CONTENT_LOG_CHARS`]; the daemon turns the target off unless the
/// operator opts in (`server.log_content`). Lines of any other target never
/// carry content.
pub const CONTENT_LOG_TARGET: &str = "oap_content";

/// Characters of a content value a debug line shows.
pub const CONTENT_LOG_CHARS: usize = 256;

/// `text` cut to [`CONTENT_LOG_CHARS`] characters, for a content line.
pub fn content_excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let mut excerpt: String = chars.by_ref().take(CONTENT_LOG_CHARS).collect();
    if chars.next().is_some() {
        excerpt.push_str("[...]");
    }
    excerpt
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// What the model sees: the response or command output, or
    /// `Error: ...`; at most [`ExecPolicy::max_result_chars`] characters plus
    /// a `[truncated: N more characters]` note.
    pub content: String,
    /// Whether the call succeeded (2xx; exit status 0, or 1 with no stderr).
    pub ok: bool,
    /// Wall time of the call.
    pub elapsed: Duration,
    /// For logs: what was requested or run and how it ended. Never holds a
    /// secret.
    pub detail: Option<String>,
}

/// Internal result of a runner before truncation and timing.
pub(crate) struct Reply {
    pub(crate) ok: bool,
    pub(crate) content: String,
    pub(crate) detail: Option<String>,
}

/// Called with every address right before a TCP connection to it is
/// attempted; an `Err` skips the address. For audit logs and tests.
pub type ConnectObserver = Arc<dyn Fn(SocketAddr) -> std::io::Result<()> + Send + Sync>;

/// Runs tools. Cheap to share behind an `Arc`; holds no connections (every
/// call opens its own, to the address it checked).
pub struct Executor {
    pub(crate) policy: ExecPolicy,
    pub(crate) credentials: Option<CredentialStore>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) connect_observer: Option<ConnectObserver>,
    extra_roots: Vec<CertificateDer<'static>>,
    /// What the kernel offers the stdio sandbox, probed once.
    pub(crate) sandbox_support: oap_sandbox::Support,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("policy", &self.policy)
            .field("credentials", &self.credentials)
            .field("extra_roots", &self.extra_roots.len())
            .finish_non_exhaustive()
    }
}

/// The TLS client configuration of every outbound client: rustls with ring,
/// the compiled-in Mozilla roots plus `extra`, HTTP/1.1.
pub fn tls_config(
    extra: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, ExecError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra {
        roots
            .add(cert.clone())
            .map_err(|e| ExecError::Tls(format!("extra root certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ExecError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Executor {
    /// An executor with the system resolver, the compiled-in Mozilla roots
    /// and no credentials.
    pub fn new(policy: ExecPolicy) -> Result<Self, ExecError> {
        if policy.max_response_bytes == 0 || policy.max_result_chars == 0 {
            return Err(ExecError::Policy(
                "max_response_bytes and max_result_chars must be positive".into(),
            ));
        }
        if let Some(d) = policy.stdio_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(ExecError::Policy(format!(
                "stdio_dirs must be absolute paths, got {}",
                d.display()
            )));
        }
        Ok(Self {
            policy,
            credentials: None,
            resolver: Arc::new(SystemResolver),
            tls: tls_config(&[])?,
            connect_observer: None,
            extra_roots: Vec::new(),
            sandbox_support: oap_sandbox::Support::probe(),
        })
    }

    /// What the kernel offers the stdio sandbox (for logs and `/health`).
    pub fn sandbox_support(&self) -> &oap_sandbox::Support {
        &self.sandbox_support
    }

    /// Assume `support` instead of what the kernel offers: a protection it
    /// marks missing is not used. Tests take the fallbacks a less
    /// privileged daemon takes this way (e.g. the watched scratch cap).
    pub fn with_sandbox_support(mut self, support: oap_sandbox::Support) -> Self {
        self.sandbox_support = support;
        self
    }

    /// Use these credentials for manifests with `auth`.
    pub fn with_credentials(mut self, store: CredentialStore) -> Self {
        self.credentials = Some(store);
        self
    }

    /// Resolve host names with `resolver` instead of the system resolver.
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Trust these PEM certificates as roots in addition to the Mozilla set
    /// (for private endpoints with their own CA).
    pub fn with_extra_roots_pem(mut self, pem: &[u8]) -> Result<Self, ExecError> {
        let mut added = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| ExecError::Tls(format!("extra root PEM: {e}")))?;
            self.extra_roots.push(cert);
            added += 1;
        }
        if added == 0 {
            return Err(ExecError::Tls("extra root PEM holds no certificate".into()));
        }
        self.tls = tls_config(&self.extra_roots)?;
        Ok(self)
    }

    /// Call `observer` before every connection attempt.
    pub fn with_connect_observer(mut self, observer: ConnectObserver) -> Self {
        self.connect_observer = Some(observer);
        self
    }

    /// The policy in force.
    pub fn policy(&self) -> &ExecPolicy {
        &self.policy
    }

    /// The TLS client configuration of HTTP tools (Mozilla roots plus any
    /// extra roots), for other clients that must trust the same CAs.
    pub fn tls_client_config(&self) -> Arc<rustls::ClientConfig> {
        self.tls.clone()
    }

    /// The credential store, if any.
    pub fn credentials(&self) -> Option<&CredentialStore> {
        self.credentials.as_ref()
    }

    /// Run one tool call. Never panics on input; every failure is an
    /// outcome with `ok == false` and an `Error: ...` content.
    pub async fn execute(
        &self,
        manifest: &Manifest,
        trust: Trust,
        arguments: &Map<String, Value>,
    ) -> ToolOutcome {
        let started = Instant::now();
        let result = match manifest.invoke_kind() {
            Some(InvokeKind::Stdio) => self.run_stdio(manifest, trust, arguments).await,
            Some(InvokeKind::Get | InvokeKind::Post) => {
                self.run_http(manifest, trust, arguments).await
            }
            None => Err(ToolError::UnsupportedMethod(manifest.invoke.method.clone())),
        };
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => Reply {
                ok: false,
                content: format!("Error: {e}"),
                detail: Some(e.to_string()),
            },
        };
        let elapsed = started.elapsed();
        let content = truncate_chars(reply.content, self.policy.max_result_chars);
        // The detail names the argv or URL the model's arguments made, and
        // may quote the tool's answer: content, for debug lines only.
        if reply.ok {
            info!(tool = %manifest.name, %trust, elapsed_ms = elapsed.as_millis() as u64,
                  "tool call succeeded");
        } else {
            warn!(tool = %manifest.name, %trust, elapsed_ms = elapsed.as_millis() as u64,
                  "tool call failed");
        }
        debug!(target: CONTENT_LOG_TARGET, tool = %manifest.name,
               detail = %content_excerpt(reply.detail.as_deref().unwrap_or("")), "tool call");
        ToolOutcome {
            content,
            ok: reply.ok,
            elapsed,
            detail: reply.detail,
        }
    }
}

/// Cut `text` to `max` characters, with a note saying how much was cut.
pub fn truncate_chars(text: String, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text;
    }
    let cut = text
        .char_indices()
        .nth(max)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let mut out = text;
    out.truncate(cut);
    out.push_str(&format!("\n[truncated: {} more characters]", total - max));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_note() {
        assert_eq!(truncate_chars("abc".into(), 3), "abc");
        assert_eq!(
            truncate_chars("héllo wörld".into(), 5),
            "héllo\n[truncated: 6 more characters]"
        );
    }

    #[test]
    fn execute_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let exec = Executor::new(ExecPolicy::default()).unwrap();
        let manifest = oap_manifest::parse(
            br#"{"oap":"1.0","name":"wc","description":"Counts lines.",
                "invoke":{"method":"stdio","url":"wc"}}"#,
        )
        .unwrap()
        .manifest;
        let arguments = Map::new();
        let fut = exec.execute(&manifest, Trust::Local, &arguments);
        assert_send(&fut);
    }

    #[test]
    fn policy_validation() {
        let p = ExecPolicy {
            max_result_chars: 0,
            ..ExecPolicy::default()
        };
        assert!(Executor::new(p).is_err());
        let p = ExecPolicy {
            stdio_dirs: vec!["bin".into()],
            ..ExecPolicy::default()
        };
        assert!(Executor::new(p).is_err());
        assert!(Executor::new(ExecPolicy::default())
            .unwrap()
            .with_extra_roots_pem(b"not pem")
            .is_err());
    }
}
