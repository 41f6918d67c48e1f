//! One manifest fetch, with every check a document from the internet must
//! pass before it may be stored.
//!
//! Content type: `application/json` and `application/<anything>+json`
//! (e.g. `application/oap+json`) are accepted, with any parameters. Anything
//! else — `text/html` error pages, `text/plain`, a missing type — is refused:
//! a server that does not say it serves JSON is not publishing a manifest on
//! purpose. (`text/json` is not a registered type and is refused too.)

use std::time::Duration;

use oap_exec::{Executor, FetchError, FetchRequest};
use oap_manifest::{InvokeKind, MAX_MANIFEST_BYTES};
use oap_store::Trust;

use crate::request::exec_trust;
pub use crate::request::Validators;
use crate::schema::{attach_schemas, SchemaLimits};
use crate::WELL_KNOWN_PATH;

/// Limits of one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Whole-fetch deadline (resolution, connect, TLS, redirects, body).
    pub timeout: Duration,
    /// Body cap (default: the manifest cap, 64 KiB).
    pub max_bytes: usize,
    /// Limits of each fetch of the manifest's `input.schema` / `output.schema`.
    pub schema: SchemaLimits,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_bytes: MAX_MANIFEST_BYTES,
            schema: SchemaLimits::default(),
        }
    }
}

/// A successful fetch.
#[derive(Debug, Clone)]
pub enum FetchOutcome {
    /// 304: the stored copy is current.
    NotModified,
    /// A valid manifest.
    Fetched {
        /// The document as served (valid UTF-8).
        body: String,
        /// The URL that answered.
        url: String,
        /// This response's `ETag`/`Last-Modified`, for the next conditional fetch.
        validators: Validators,
    },
}

/// Why a fetched document was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestFetchError {
    /// Transport, SSRF, redirect, size or deadline failure.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The server answered with a status other than 200 (or a 304 to a request
    /// that sent no validators).
    #[error("HTTP {status} from {url}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The URL that answered, after redirects.
        url: String,
    },
    /// The response does not declare a JSON media type (see the module docs).
    #[error("{url} is served as {content_type:?}, not JSON (application/json)")]
    ContentType {
        /// The URL that answered, after redirects.
        url: String,
        /// The `Content-Type` header as served, cut to 100 characters (empty if absent).
        content_type: String,
    },
    /// The body is not UTF-8.
    #[error("{url} is not valid UTF-8 (byte {offset})")]
    Utf8 {
        /// The URL that answered, after redirects.
        url: String,
        /// Byte offset where the invalid sequence starts.
        offset: usize,
    },
    /// The body failed `oap_manifest::parse`: bad JSON, over the size or depth
    /// cap, or a validation error.
    #[error("{url} is not a valid manifest: {reason}")]
    Invalid {
        /// The URL that answered, after redirects.
        url: String,
        /// The parser's message, naming the field.
        reason: String,
    },
    /// A valid manifest that asks to run a local command, fetched with less
    /// than local trust.
    #[error(
        "{url} declares invoke.method stdio: a manifest from the network may never run a local command"
    )]
    Stdio {
        /// The URL that answered, after redirects.
        url: String,
    },
}

/// The manifest URL of a normalised domain.
pub fn manifest_url(domain: &str) -> String {
    format!("https://{domain}{WELL_KNOWN_PATH}")
}

/// Whether `content_type` says JSON (see the module docs).
pub fn is_json_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json") && sub.len() > 5)
}

/// Fetches and vets the manifest at `url`. `validators` make the request
/// conditional (pass them only while the stored copy exists). A manifest
/// that names `input.schema` / `output.schema` comes back with them fetched
/// and recorded ([`crate::schema`]).
pub async fn fetch_manifest(
    executor: &Executor,
    url: &str,
    trust: Trust,
    https_only: bool,
    validators: &Validators,
    limits: FetchLimits,
) -> Result<FetchOutcome, ManifestFetchError> {
    fetch_manifest_replacing(executor, url, trust, https_only, validators, limits, None).await
}

/// [`fetch_manifest`], given the stored copy the fetch would replace: its
/// schema records make the schema fetches conditional, so an unchanged
/// schema document costs a 304.
pub async fn fetch_manifest_replacing(
    executor: &Executor,
    url: &str,
    trust: Trust,
    https_only: bool,
    validators: &Validators,
    limits: FetchLimits,
    stored_body: Option<&str>,
) -> Result<FetchOutcome, ManifestFetchError> {
    let mut headers = validators.headers();
    headers.push((
        "accept".to_string(),
        "application/json, application/oap+json;q=0.9".to_string(),
    ));
    let request = FetchRequest {
        url: url.to_string(),
        trust: exec_trust(trust),
        headers,
        max_body_bytes: limits.max_bytes,
        timeout: limits.timeout,
        https_only,
        // A domain's manifest must come from that domain: following a
        // redirect elsewhere would file another host's document under its id.
        same_host_only: true,
    };
    let response = executor.fetch(&request).await?;
    let served_validators = Validators::of(&response);
    let url = response.final_url;
    if response.status == 304 && !validators.is_empty() {
        return Ok(FetchOutcome::NotModified);
    }
    if response.status != 200 {
        return Err(ManifestFetchError::Status {
            status: response.status,
            url,
        });
    }
    let content_type = response
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !is_json_type(&content_type) {
        return Err(ManifestFetchError::ContentType {
            url,
            content_type: content_type.chars().take(100).collect(),
        });
    }
    let body = match String::from_utf8(response.body) {
        Ok(body) => body,
        Err(err) => {
            return Err(ManifestFetchError::Utf8 {
                url,
                offset: err.utf8_error().valid_up_to(),
            })
        }
    };
    let parsed = oap_manifest::parse(body.as_bytes()).map_err(|e| ManifestFetchError::Invalid {
        url: url.clone(),
        reason: e.to_string(),
    })?;
    if parsed.manifest.invoke_kind() == Some(InvokeKind::Stdio) && trust != Trust::Local {
        return Err(ManifestFetchError::Stdio { url });
    }
    // Only once every check passed: a refused manifest costs no schema fetch.
    let body = attach_schemas(executor, body, trust, stored_body, limits.schema).await;
    Ok(FetchOutcome::Fetched {
        body,
        url,
        validators: served_validators,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_types() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/oap+json",
        ] {
            assert!(is_json_type(ok), "{ok}");
        }
        for bad in [
            "",
            "text/html",
            "text/plain",
            "text/json",
            "application/+json",
            "application/jsonx",
        ] {
            assert!(!is_json_type(bad), "{bad}");
        }
    }
}
