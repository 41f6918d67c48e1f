//! `GET/DELETE /v1/experience[/{id}]`: the HTTP side of the experience
//! cache (`oap_bridge::experience`).

use hyper::{Method, Response, StatusCode};
use serde_json::json;

pub use oap_bridge::experience::*;

use crate::server::transport::http::{self, Body};

/// `GET/DELETE /v1/experience[/{id}]`; `rest` is the path after `/v1/experience`.
pub fn route(experience: &Experience, method: &Method, rest: &str) -> Response<Body> {
    let id = rest.trim_start_matches('/');
    match (method, id.is_empty()) {
        (&Method::GET, true) => http::json(StatusCode::OK, &experience.summary()),
        (&Method::DELETE, true) => {
            let deleted = experience.clear();
            http::json(StatusCode::OK, &json!({"deleted": deleted}))
        }
        (&Method::GET, false) => match experience.entry(id) {
            Some(entry) => http::json(StatusCode::OK, &entry),
            None => not_found(id),
        },
        (&Method::DELETE, false) => {
            if experience.delete(id) {
                http::json(StatusCode::OK, &json!({"deleted": id}))
            } else {
                not_found(id)
            }
        }
        _ => {
            let mut response = http::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed; use GET or DELETE",
            );
            response.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static("GET, DELETE"),
            );
            response
        }
    }
}

fn not_found(id: &str) -> Response<Body> {
    http::error(
        StatusCode::NOT_FOUND,
        format!("no experience entry with id {id:?}"),
    )
}

/// Who may delete entries: a request carrying the configured bearer token;
/// otherwise only a loopback client (the operator on the box), never an
/// unauthenticated LAN client (nor one let in by `server.trusted_clients`).
pub fn operator_allowed(carries_token: bool, peer: Option<std::net::SocketAddr>) -> bool {
    carries_token || peer.is_some_and(|p| p.ip().is_loopback())
}

/// `/v1/experience` when the cache is off.
pub fn disabled() -> Response<Body> {
    http::error(
        StatusCode::NOT_FOUND,
        "the experience cache is disabled (experience.enabled: false, or no embedding model)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_operator_may_delete() {
        let lan: std::net::SocketAddr = "192.0.2.10:5000".parse().unwrap();
        let local: std::net::SocketAddr = "[::1]:5000".parse().unwrap();
        assert!(operator_allowed(true, Some(lan)));
        assert!(operator_allowed(false, Some(local)));
        assert!(!operator_allowed(false, Some(lan)));
        assert!(!operator_allowed(false, None));
    }
}
