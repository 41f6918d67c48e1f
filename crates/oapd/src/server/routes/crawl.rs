//! The crawler's HTTP endpoints: `GET /v1/crawl/status` and
//! `POST /v1/manifests/register`.

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use oap_crawl::{AddedBy, Crawler};
use serde::Deserialize;

use super::state::Api;
use crate::server::transport::http::{self, Body};

/// `POST /v1/manifests/register` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The domain to add, e.g. `"example.com"`; any JSON so a non-string
    /// gets a 400 naming the field rather than a parse error.
    pub domain: serde_json::Value,
}

/// Seconds to wait for a registered domain's first fetch before answering
/// 202 (the fetch goes on in the background).
pub fn register_wait(config_fetch_timeout: Duration) -> Duration {
    config_fetch_timeout + Duration::from_secs(2)
}

/// The status document of `GET /v1/crawl/status`.
pub fn status_json(crawler: Option<&Crawler>, background: bool) -> serde_json::Value {
    let now = oap_crawl::now_ms();
    let domains: Vec<serde_json::Value> = crawler
        .map(|c| c.status())
        .unwrap_or_default()
        .into_iter()
        .map(|s| {
            let mut v = serde_json::to_value(&s).unwrap_or_default();
            if let Some(obj) = v.as_object_mut() {
                obj.insert(
                    "next_due_in_s".into(),
                    serde_json::json!(s.next_due_ms.saturating_sub(now) as f64 / 1000.0),
                );
            }
            v
        })
        .collect();
    serde_json::json!({
        "enabled": crawler.is_some(),
        "background": background,
        "internet": crawler.is_some_and(|c| c.settings().internet),
        "mdns": crawler.is_some_and(|c| c.settings().lan),
        "domains": domains,
        "lan_refused": crawler.map(|c| c.lan_refusals()).unwrap_or_default(),
    })
}

/// Largest registration body.
pub const MAX_REGISTER_BODY_BYTES: usize = 4096;

/// `POST /v1/manifests/register {"domain": "example.com"}`: operator only.
/// Refused when no `server.auth_token` is configured — without a token any
/// device on the LAN could make the board fetch and index arbitrary
/// domains. Fetches the domain at once and answers with the result (200 or
/// 422), or 202 when the fetch takes longer than the fetch timeout.
pub async fn register(
    api: Arc<Api>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    if api.settings.auth_token.is_none() {
        return http::error(
            StatusCode::FORBIDDEN,
            "registration needs an operator token: set server.auth_token and send it as a bearer token",
        );
    }
    let Some(crawler) = api.crawler.clone() else {
        return http::error(
            StatusCode::NOT_FOUND,
            "the crawler is disabled (crawler.enabled: false)",
        );
    };
    let body = match http::read_body(request.into_body(), MAX_REGISTER_BODY_BYTES).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let parsed: RegisterRequest = match serde_json::from_slice(&body) {
        Ok(parsed) => parsed,
        Err(err) => {
            return http::error(
                StatusCode::BAD_REQUEST,
                format!(
                "request body is not a valid registration ({{\"domain\": \"example.com\"}}): {err}"
            ),
            )
        }
    };
    let Some(raw) = parsed.domain.as_str() else {
        return http::error(StatusCode::BAD_REQUEST, "domain: expected a string");
    };
    let domain = match crawler.add_domain(raw, AddedBy::Register) {
        Ok(domain) => domain,
        Err(err @ oap_crawl::crawler::AddError::Full(_)) => {
            return http::error(StatusCode::CONFLICT, err.to_string())
        }
        Err(err @ oap_crawl::crawler::AddError::InternetDisabled) => {
            return http::error(StatusCode::NOT_FOUND, err.to_string())
        }
        Err(err) => return http::error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    tracing::info!(%domain, "domain registered");
    let task = {
        let crawler = crawler.clone();
        let engine = crate::crawl::metered_sink(&api.engine);
        let domain = domain.clone();
        tokio::spawn(async move {
            crawler.crawl_pass(Some(&[domain]), Some(&engine)).await;
        })
    };
    let finished = tokio::time::timeout(register_wait(api.crawler_fetch_timeout), task)
        .await
        .is_ok();
    let state = crawler.status().into_iter().find(|s| s.domain == domain);
    let result = state.as_ref().and_then(|s| s.last_result.clone());
    match (finished, result) {
        (true, Some(result)) if !result.starts_with("error") => http::json(
            StatusCode::OK,
            &serde_json::json!({"domain": domain, "result": result, "state": state}),
        ),
        (true, Some(result)) => http::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!({
                "error": format!("{domain}: {}", result.trim_start_matches("error: ")),
                "domain": domain,
                "state": state,
            }),
        ),
        _ => http::json(
            StatusCode::ACCEPTED,
            &serde_json::json!({"domain": domain, "result": "queued", "state": state}),
        ),
    }
}
