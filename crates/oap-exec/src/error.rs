//! Errors. [`ExecError`] is for building an executor; tool failures become
//! [`crate::ToolOutcome`]s whose text comes from the private `ToolError`,
//! written for the model to read (and never containing a secret).

use std::net::IpAddr;
use std::time::Duration;

use crate::policy::Trust;

/// Building an [`crate::Executor`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The policy is unusable (e.g. a `max_result_chars` of 0).
    #[error("invalid execution policy: {0}")]
    Policy(String),
    /// The TLS configuration could not be built, or an extra root
    /// certificate was rejected.
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// Why a tool call failed. The `Display` text is what the model sees.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error("invoke.method {0:?} is not supported (expected GET, POST or stdio)")]
    UnsupportedMethod(String),
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("invoke.auth {0:?} is not supported (expected none, api_key, bearer or oauth2)")]
    UnsupportedAuth(String),
    #[error("invoke.auth_in {0:?} is not supported (expected header or query)")]
    UnsupportedAuthIn(String),
    #[error("no credential for {host}: no credential store is configured")]
    NoCredentialStore { host: String },
    #[error("no credential for {host} in {store}")]
    NoCredential { host: String, store: String },
    #[error("the credential for {host} cannot be sent in a header (invalid characters)")]
    BadCredential { host: String },
    #[error(
        "refusing to send the credential for {host} over plain http for an internet manifest; \
         the endpoint must use https"
    )]
    CleartextCredential { host: String },
    #[error("invoke.headers: {0:?} is not a valid HTTP header")]
    BadHeader(String),
    #[error("invalid arguments: {0}")]
    Arguments(String),
    #[error("could not resolve {host}: {error}")]
    Resolve { host: String, error: String },
    #[error(
        "refused to connect to {host} ({ip}): it is {class}, which {} manifest may not reach",
        .trust.with_article()
    )]
    AddressRefused {
        host: String,
        ip: IpAddr,
        class: &'static str,
        trust: Trust,
    },
    #[error("could not connect to {host}: {error}")]
    Connect { host: String, error: String },
    #[error("TLS with {host} failed: {error}")]
    Tls { host: String, error: String },
    #[error("HTTP exchange with {host} failed: {error}")]
    Http { host: String, error: String },
    #[error("HTTP request to {host} timed out after {}", secs(*after))]
    Timeout { host: String, after: Duration },
    #[error("too many redirects (the limit is {limit})")]
    TooManyRedirects { limit: usize },
    #[error("bad redirect: {0}")]
    BadRedirect(String),
    #[error("HTTP {status} {reason} from {host}{}", excerpt_suffix(excerpt))]
    Status {
        host: String,
        status: u16,
        reason: String,
        excerpt: String,
    },
    #[error(
        "refusing to run {program:?}: command-line tools run only from local manifests \
         (this one is {trust})"
    )]
    StdioNotLocal { program: String, trust: Trust },
    #[error("refusing to run {program:?}: {reason}")]
    ProgramNotAllowed { program: String, reason: String },
    #[error("stdin is {size} bytes; the limit is {limit}")]
    StdinTooLarge { size: usize, limit: usize },
    #[error("could not start {program:?}: {error}")]
    Spawn { program: String, error: String },
    #[error("refused to run {program:?} unconfined: {error}")]
    Sandbox { program: String, error: String },
}

fn excerpt_suffix(excerpt: &str) -> String {
    if excerpt.is_empty() {
        String::new()
    } else {
        format!(": {excerpt}")
    }
}

pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{s:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::AddressClass;

    #[test]
    fn a_refused_address_names_the_trust_with_the_right_article() {
        let refused = |trust| {
            ToolError::AddressRefused {
                host: "h.example".into(),
                ip: IpAddr::from([10, 0, 0, 1]),
                class: AddressClass::Private.describe(),
                trust,
            }
            .to_string()
        };
        assert_eq!(
            refused(Trust::Internet),
            "refused to connect to h.example (10.0.0.1): it is a private-network address, \
             which an internet manifest may not reach"
        );
        assert!(refused(Trust::Lan).ends_with("which a lan manifest may not reach"));
        assert!(refused(Trust::Local).ends_with("which a local manifest may not reach"));
    }
}
