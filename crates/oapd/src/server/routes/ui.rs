//! `GET /ui`: the operator's status page, compiled into the binary.
//!
//! One hand-written HTML page, its stylesheet and its script (no
//! framework, nothing fetched from elsewhere). The script reads the JSON
//! API the page is served beside and writes every value as text, never as
//! markup: manifest names and descriptions come from the internet. The
//! Content-Security-Policy allows this origin only and no inline script or
//! style, so even a value that slipped into markup could not run.

use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use crate::server::transport::http::{self, Body};

/// What the page may load: this origin only, nothing inline, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The files under `/ui`: path, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "/ui",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "/ui/",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "/ui/app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "/ui/app.css",
        "text/css; charset=utf-8",
        include_str!("ui/app.css"),
    ),
    (
        "/ui/favicon.svg",
        "image/svg+xml",
        include_str!("ui/favicon.svg"),
    ),
];

/// The answer to `GET` on a path under `/ui`: the file with the page's
/// security headers, or a JSON 404 naming the path.
pub fn serve(path: &str) -> Response<Body> {
    let Some((_, content_type, text)) = ASSETS.iter().find(|(name, _, _)| *name == path) else {
        return http::error(
            StatusCode::NOT_FOUND,
            format!("no status page file {path:?} (the page is at /ui)"),
        );
    };
    let mut response = Response::new(http::full(text.as_bytes()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The page is small and changes with the binary: revalidate, never
    // show an old build's script.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(&mut response);
    response
}

/// The headers every `/ui` answer carries, the 401 included.
pub fn secure(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
}

/// The 401 of `/ui` without the token: a Basic challenge, so the browser
/// asks for it (any user name, the token as the password).
pub fn unauthorized() -> Response<Body> {
    let mut response = http::error(
        StatusCode::UNAUTHORIZED,
        "the status page needs server.auth_token: sign in with any user name and the token as the password",
    );
    response.headers_mut().insert(
        "www-authenticate",
        HeaderValue::from_static("Basic realm=\"oapd\", charset=\"UTF-8\""),
    );
    secure(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_runs_nothing_inline() {
        let page = include_str!("ui/index.html");
        assert!(page.contains("<script src=\"/ui/app.js\""), "{page}");
        assert!(!page.contains("<script>"), "inline script");
        assert!(!page.contains("<style"), "inline style");
        assert!(!page.contains(" style="), "inline style attribute");
        let handler = page.match_indices(" on").any(|(at, _)| {
            let rest = page.get(at + 3..).unwrap_or_default();
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && rest.get(name.len()..).is_some_and(|r| r.starts_with('='))
        });
        assert!(!handler, "inline event handler");
        for (path, _, text) in ASSETS {
            // The SVG namespace is a name, not something loaded.
            let text = text.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            assert!(!text.contains("http://"), "{path} loads from elsewhere");
            assert!(!text.contains("https://"), "{path} loads from elsewhere");
        }
    }

    #[test]
    fn the_script_writes_text_not_markup() {
        let script = include_str!("ui/app.js");
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!script.contains(sink), "app.js uses {sink}");
        }
    }
}
