//! Who a request is: the operator (`server.auth_token`), a named client
//! (`server.clients`), or neither.
//!
//! Both kinds of token come as a bearer token or as the password of HTTP
//! Basic credentials (any user name); a client token may also lead the
//! path, `/c/<token>/api/tags`, for programs that can only be given a base
//! URL (Home Assistant's Ollama integration has no header field, and the
//! `ollama` Python client drops a URL's user info). The router strips that
//! prefix before anything else reads the path, so the token reaches no
//! log, record, metric label or upstream request.
//!
//! Basic exists for the status page: a browser cannot add a bearer header
//! to a navigation, but it asks for Basic credentials natively on a 401
//! with `WWW-Authenticate: Basic` and then sends them with the page's
//! same-origin requests. Because a browser also attaches them to requests
//! other sites make it send, Basic credentials count only on requests the
//! browser marks as its own (`Sec-Fetch-Site` absent, `same-origin` or
//! `none`) or as a plain top-level navigation; cross-site requests that
//! can change anything carry an `Origin` and are refused by the guard
//! before this runs. Every comparison runs in constant time, and a client
//! token is compared with every client's, so neither a token nor which
//! client holds it shows in response timing.

use std::fmt;
use std::sync::Arc;

use hyper::header::AUTHORIZATION;
use hyper::{HeaderMap, Method};

/// The path segment that introduces a client token: `/c/<token>/...`.
pub const CLIENT_PREFIX: &str = "/c/";

/// A route family a client token may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The chat routes (oapd's bridged ones and Ollama's `/api/generate`
    /// and `/v1/completions`), `/mcp`, `/v1/discover` and `/v1/tools`.
    Chat,
    /// Every other route oapd forwards to Ollama: `/api/tags`, `/api/show`,
    /// `/api/version`, `/api/pull`, `/v1/models`...
    Passthrough,
}

impl Scope {
    /// The scope named `name` in `server.clients[].scopes`.
    pub fn from_name(name: &str) -> Option<Scope> {
        match name {
            "chat" => Some(Scope::Chat),
            "passthrough" => Some(Scope::Passthrough),
            _ => None,
        }
    }

    /// Its name in the config.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Chat => "chat",
            Scope::Passthrough => "passthrough",
        }
    }
}

/// A `server.clients` entry as the server checks it. `Debug` leaves the
/// token out.
pub struct Client {
    /// What logs, records, metrics and the status page show.
    pub name: Arc<str>,
    token: String,
    scopes: Vec<Scope>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client named `name` holding `token` and opening `scopes`.
    pub fn new(name: &str, token: &str, scopes: Vec<Scope>) -> Client {
        Client {
            name: Arc::from(name),
            token: token.to_owned(),
            scopes,
        }
    }

    /// Whether its token opens routes of `scope`.
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// Its scopes' names, for messages and the status page.
    pub fn scope_names(&self) -> Vec<&'static str> {
        self.scopes.iter().map(|scope| scope.name()).collect()
    }
}

/// Whether `headers` carry `token`: `Authorization: Bearer <token>`, or
/// `Authorization: Basic` with `token` as the password where the browser
/// rules above allow it.
pub fn carries_token(headers: &HeaderMap, method: &Method, token: &str) -> bool {
    presented_secret(headers, method).is_some_and(|given| same_bytes(token.as_bytes(), &given))
}

/// The client whose token `headers` carry, as bearer or Basic password.
pub fn client_in_headers(
    headers: &HeaderMap,
    method: &Method,
    clients: &[Arc<Client>],
) -> Option<Arc<Client>> {
    presented_secret(headers, method).and_then(|given| client_with_token(clients, &given))
}

/// The client holding `token`. Every client's token is compared, in
/// constant time, whichever matches.
pub fn client_with_token(clients: &[Arc<Client>], token: &[u8]) -> Option<Arc<Client>> {
    let mut found = None;
    for client in clients {
        if same_bytes(client.token.as_bytes(), token) {
            found = Some(client.clone());
        }
    }
    found
}

/// `(token, rest)` of a path that starts with `/c/<token>`; `rest` is the
/// path the request routes by (`/` when nothing follows the token).
pub fn split_client_prefix(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix(CLIENT_PREFIX)?;
    Some(match after.find('/') {
        // `find` returns a char boundary: the split cannot panic.
        Some(slash) => after.split_at(slash),
        None => (after, "/"),
    })
}

/// The path a request routes by: without a `/c/<token>` prefix.
pub fn routed_path(path: &str) -> &str {
    split_client_prefix(path).map_or(path, |(_, rest)| rest)
}

/// The secret of the `Authorization` header: a bearer token, or a Basic
/// password where the browser rules allow it.
fn presented_secret(headers: &HeaderMap, method: &Method) -> Option<Vec<u8>> {
    let value = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())?;
    let (scheme, credentials) = value.trim().split_once(' ')?;
    // Scheme names are case-insensitive (RFC 9110 §11.1).
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(credentials.trim().as_bytes().to_vec());
    }
    if scheme.eq_ignore_ascii_case("basic") && browser_may_send_basic(headers, method) {
        return basic_password(credentials.trim());
    }
    None
}

/// Whether Basic credentials on this request are the operator's own use of
/// the daemon rather than another site's page borrowing them.
fn browser_may_send_basic(headers: &HeaderMap, method: &Method) -> bool {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
    };
    match header("sec-fetch-site").as_deref() {
        None | Some("same-origin" | "none") => true,
        // A link from elsewhere may open a page: what it shows goes to the
        // operator, not to the linking site.
        Some(_) => {
            header("sec-fetch-mode").as_deref() == Some("navigate")
                && matches!(*method, Method::GET | Method::HEAD)
        }
    }
}

/// The password of Basic credentials (`base64(user ":" password)`, RFC
/// 7617); `None` when they are not that shape.
fn basic_password(encoded: &str) -> Option<Vec<u8>> {
    let decoded = base64_decode(encoded)?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    decoded.get(colon + 1..).map(<[u8]>::to_vec)
}

/// Standard base64 with optional padding; `None` for anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let body = text.trim_end_matches('=');
    if text.len() - body.len() > 2 || body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    let (mut acc, mut bits) = (0u32, 0u32);
    for byte in body.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Equal bytes, compared without an early exit, so the token cannot be
/// guessed byte by byte from response timing.
fn same_bytes(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len()
        && expected
            .iter()
            .zip(given)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    const TOKEN: &str = "s3cret-token";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn base64_decodes_the_standard_alphabet_with_or_without_padding() {
        assert_eq!(
            base64_decode("b3BlcmF0b3I6czNjcmV0").unwrap(),
            b"operator:s3cret"
        );
        assert_eq!(base64_decode("YTpi").unwrap(), b"a:b");
        assert_eq!(base64_decode("YTpiYw==").unwrap(), b"a:bc");
        assert_eq!(base64_decode("YTpiYw").unwrap(), b"a:bc");
        assert_eq!(base64_decode("").unwrap(), b"");
        for bad in ["YTpi!", "Y", "YTpiY===", "YT pi", "YTpi\u{e9}"] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn bearer_and_basic_carry_the_token() {
        let get = Method::GET;
        let bearer = headers(&[("authorization", "Bearer s3cret-token")]);
        assert!(carries_token(&bearer, &get, TOKEN));
        let lower = headers(&[("authorization", "bearer  s3cret-token ")]);
        assert!(carries_token(&lower, &get, TOKEN));
        // "anyone:s3cret-token" and ":s3cret-token"
        let basic = headers(&[("authorization", "Basic YW55b25lOnMzY3JldC10b2tlbg==")]);
        assert!(carries_token(&basic, &get, TOKEN));
        let no_user = headers(&[("authorization", "basic OnMzY3JldC10b2tlbg==")]);
        assert!(carries_token(&no_user, &Method::POST, TOKEN));
        // "s3cret-token:x": the token as the user name is not the password.
        let as_user = headers(&[("authorization", "Basic czNjcmV0LXRva2VuOng=")]);
        assert!(!carries_token(&as_user, &get, TOKEN));
        // "anyone:s3cret-tokem"
        let wrong = headers(&[("authorization", "Basic YW55b25lOnMzY3JldC10b2tlbQ==")]);
        assert!(!carries_token(&wrong, &get, TOKEN));
        for junk in ["Basic", "Basic !!!", "Digest abc", "s3cret-token", ""] {
            assert!(
                !carries_token(&headers(&[("authorization", junk)]), &get, TOKEN),
                "{junk}"
            );
        }
        assert!(!carries_token(&HeaderMap::new(), &get, TOKEN));
    }

    #[test]
    fn basic_counts_only_where_the_browser_sends_it_for_the_operator() {
        let basic = ("authorization", "Basic YW55b25lOnMzY3JldC10b2tlbg==");
        let with = |extra: &[(&'static str, &str)]| {
            let mut pairs = vec![basic];
            pairs.extend_from_slice(extra);
            headers(&pairs)
        };
        let get = Method::GET;
        assert!(carries_token(
            &with(&[("sec-fetch-site", "same-origin")]),
            &get,
            TOKEN
        ));
        assert!(carries_token(
            &with(&[("sec-fetch-site", "none")]),
            &get,
            TOKEN
        ));
        let link = [
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ];
        assert!(carries_token(&with(&link), &get, TOKEN));
        assert!(!carries_token(&with(&link), &Method::POST, TOKEN));
        for site in ["cross-site", "same-site"] {
            let embedded = [("sec-fetch-site", site), ("sec-fetch-mode", "no-cors")];
            assert!(!carries_token(&with(&embedded), &get, TOKEN), "{site}");
        }
        // The bearer scheme is not a browser's ambient credential.
        let bearer = headers(&[
            ("authorization", "Bearer s3cret-token"),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(carries_token(&bearer, &get, TOKEN));
    }

    #[test]
    fn the_client_prefix_is_split_off_and_the_rest_routes() {
        assert_eq!(
            split_client_prefix("/c/tok-1/api/tags"),
            Some(("tok-1", "/api/tags"))
        );
        assert_eq!(split_client_prefix("/c/tok-1"), Some(("tok-1", "/")));
        assert_eq!(split_client_prefix("/c/tok-1/"), Some(("tok-1", "/")));
        assert_eq!(split_client_prefix("/c/"), Some(("", "/")));
        assert_eq!(split_client_prefix("/c"), None);
        assert_eq!(split_client_prefix("/api/c/tok"), None);
        assert_eq!(
            routed_path("/c/x/v1/chat/completions"),
            "/v1/chat/completions"
        );
        assert_eq!(routed_path("/api/tags"), "/api/tags");
    }

    #[test]
    fn a_client_is_found_by_its_token_in_either_scheme() {
        let clients = [
            Arc::new(Client::new("ha", "ha-token-0123456789", vec![Scope::Chat])),
            Arc::new(Client::new(
                "cli",
                "cli-token-012345678",
                vec![Scope::Passthrough],
            )),
        ];
        let found = client_with_token(&clients, b"cli-token-012345678").unwrap();
        assert_eq!(&*found.name, "cli");
        assert!(client_with_token(&clients, b"cli-token-01234567").is_none());
        let bearer = headers(&[("authorization", "Bearer ha-token-0123456789")]);
        let found = client_in_headers(&bearer, &Method::POST, &clients).unwrap();
        assert_eq!(&*found.name, "ha");
        // "ha:ha-token-0123456789", as a URL's user info becomes.
        let basic = headers(&[("authorization", "Basic aGE6aGEtdG9rZW4tMDEyMzQ1Njc4OQ==")]);
        assert_eq!(
            &*client_in_headers(&basic, &Method::GET, &clients)
                .unwrap()
                .name,
            "ha"
        );
        assert!(!format!("{:?}", clients[0]).contains("ha-token"));
    }
}
