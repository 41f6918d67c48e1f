//! Fetching a document (a manifest, a health URL) with the same SSRF rules
//! as tool calls: every hop's host is resolved once, every address checked
//! against the trust table, the connection goes to a checked address, and
//! redirects are re-validated hop by hop. Used by the crawler so there is
//! exactly one implementation of "connect safely".

use std::time::Duration;

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::Method;
use tracing::debug;

use crate::error::ToolError;
use crate::http::{check_url, read_capped};
use crate::policy::Trust;
use crate::Executor;

/// One document request.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Absolute `https://` (or, when `https_only` is false, `http://`) URL.
    pub url: String,
    /// Decides which addresses may be reached (see the crate docs).
    pub trust: Trust,
    /// Extra request headers (e.g. `If-None-Match`).
    pub headers: Vec<(String, String)>,
    /// A body longer than this is refused ([`FetchError::TooLarge`]),
    /// without reading more than one byte past it.
    pub max_body_bytes: usize,
    /// Deadline for everything: resolution, connection, TLS, every redirect
    /// hop, headers and body. A server trickling bytes (slowloris) hits it.
    pub timeout: Duration,
    /// Refuse `http://` on the first request and on every redirect.
    pub https_only: bool,
    /// Refuse redirects to another host.
    pub same_host_only: bool,
}

/// A fetched document.
#[derive(Debug, Clone)]
pub struct FetchResponse {
    /// HTTP status of the final response (304 when a conditional request matched).
    pub status: u16,
    /// Headers of the final response.
    pub headers: HeaderMap,
    /// The whole body (at most `max_body_bytes`).
    pub body: Vec<u8>,
    /// The URL that answered (after redirects).
    pub final_url: String,
    /// Redirect hops followed.
    pub redirects: usize,
}

/// Why a fetch failed; the text names the host and the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FetchError {
    /// The URL (or a request header) is unusable or not https.
    #[error("{0}")]
    BadUrl(String),
    /// The SSRF rule refused an address; nothing was connected to.
    #[error("{0}")]
    AddressRefused(String),
    /// A redirect was refused (limit, scheme, other host, bad target).
    #[error("{0}")]
    Redirect(String),
    /// The whole fetch took longer than its deadline.
    #[error("fetch of {url} timed out after {secs:.1}s")]
    Timeout {
        /// The URL first requested.
        url: String,
        /// The deadline.
        secs: f64,
    },
    /// The body exceeded the cap.
    #[error("body of {url} is larger than the {limit} byte limit")]
    TooLarge {
        /// The URL that answered.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// Resolution, connection, TLS or HTTP failure.
    #[error("{0}")]
    Network(String),
}

impl From<ToolError> for FetchError {
    fn from(e: ToolError) -> Self {
        match e {
            ToolError::AddressRefused { .. } => FetchError::AddressRefused(e.to_string()),
            ToolError::BadUrl { .. } => FetchError::BadUrl(e.to_string()),
            ToolError::TooManyRedirects { .. } | ToolError::BadRedirect(_) => {
                FetchError::Redirect(e.to_string())
            }
            other => FetchError::Network(other.to_string()),
        }
    }
}

impl Executor {
    /// GETs a document under the executor's SSRF policy and TLS roots.
    pub async fn fetch(&self, request: &FetchRequest) -> Result<FetchResponse, FetchError> {
        let shown: String = request.url.chars().take(200).collect();
        match tokio::time::timeout(request.timeout, self.fetch_inner(request)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout {
                url: shown,
                secs: request.timeout.as_secs_f64(),
            }),
        }
    }

    async fn fetch_inner(&self, request: &FetchRequest) -> Result<FetchResponse, FetchError> {
        let mut url = check_url(&request.url)?;
        if request.https_only && url.scheme() != "https" {
            return Err(FetchError::BadUrl(format!(
                "{}: only https is allowed here",
                request.url.chars().take(200).collect::<String>()
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &request.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                return Err(FetchError::BadUrl(format!(
                    "request header {name:?} is not valid"
                )));
            };
            headers.insert(name, value);
        }
        if let Ok(agent) = HeaderValue::from_str(&self.policy.user_agent) {
            headers.entry(header::USER_AGENT).or_insert(agent);
        }
        let first_host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let mut hops = 0usize;
        loop {
            let addrs = self.resolve_checked(request.trust, &url).await?;
            let mut exchange = self
                .exchange(&addrs, &url, &Method::GET, &headers, None)
                .await?;
            let status = exchange.response.status();
            let is_redirect = crate::http::is_redirect(status);
            if is_redirect {
                let location = exchange
                    .response
                    .headers()
                    .get(header::LOCATION)
                    .ok_or_else(|| {
                        FetchError::Redirect(format!("{status} from {url} without a Location"))
                    })?
                    .to_str()
                    .map_err(|_| FetchError::Redirect("the Location header is not text".into()))?
                    .to_string();
                if hops >= self.policy.max_redirects {
                    return Err(FetchError::Redirect(format!(
                        "too many redirects (the limit is {})",
                        self.policy.max_redirects
                    )));
                }
                hops += 1;
                let joined = url
                    .join(&location)
                    .map_err(|e| FetchError::Redirect(format!("bad redirect target: {e}")))?;
                let next = check_url(joined.as_str())
                    .map_err(|e| FetchError::Redirect(format!("bad redirect target: {e}")))?;
                if request.https_only && next.scheme() != "https" {
                    return Err(FetchError::Redirect(format!(
                        "redirect from {url} to {next} leaves https"
                    )));
                }
                let next_host = next.host_str().unwrap_or_default().to_ascii_lowercase();
                if request.same_host_only && next_host != first_host {
                    return Err(FetchError::Redirect(format!(
                        "redirect from {first_host} to another host ({next_host}) is refused"
                    )));
                }
                debug!(%status, from = %url, to = %next, "redirect");
                url = next;
                continue;
            }
            let response_headers = exchange.response.headers().clone();
            let declared = response_headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let too_large = || FetchError::TooLarge {
                url: url.to_string(),
                limit: request.max_body_bytes,
            };
            if declared.is_some_and(|len| len > request.max_body_bytes as u64) {
                return Err(too_large());
            }
            let (body, more) = read_capped(exchange.response.body_mut(), request.max_body_bytes)
                .await
                .map_err(|e| {
                    FetchError::Network(format!(
                        "reading the body from {} failed: {e}",
                        url.host_str().unwrap_or_default()
                    ))
                })?;
            if more {
                return Err(too_large());
            }
            return Ok(FetchResponse {
                status: status.as_u16(),
                headers: response_headers,
                body,
                final_url: url.to_string(),
                redirects: hops,
            });
        }
    }
}
