//! The token check: `server.auth_token` as a bearer token, or as the
//! password of HTTP Basic credentials (any user name).
//!
//! Basic exists for the status page: a browser cannot add a bearer header
//! to a navigation, but it asks for Basic credentials natively on a 401
//! with `WWW-Authenticate: Basic` and then sends them with the page's
//! same-origin requests. Because a browser also attaches them to requests
//! other sites make it send, Basic credentials count only on requests the
//! browser marks as its own (`Sec-Fetch-Site` absent, `same-origin` or
//! `none`) or as a plain top-level navigation; cross-site requests that
//! can change anything carry an `Origin` and are refused by the guard
//! before this runs. Both schemes compare in constant time.

use hyper::header::AUTHORIZATION;
use hyper::{HeaderMap, Method};

/// Whether `headers` carry `token`: `Authorization: Bearer <token>`, or
/// `Authorization: Basic` with `token` as the password where the browser
/// rules above allow it.
pub fn carries_token(headers: &HeaderMap, method: &Method, token: &str) -> bool {
    let Some(value) = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, credentials)) = value.trim().split_once(' ') else {
        return false;
    };
    // Scheme names are case-insensitive (RFC 9110 §11.1).
    if scheme.eq_ignore_ascii_case("bearer") {
        return same_bytes(token.as_bytes(), credentials.trim().as_bytes());
    }
    if scheme.eq_ignore_ascii_case("basic") && browser_may_send_basic(headers, method) {
        return basic_password(credentials.trim())
            .is_some_and(|password| same_bytes(token.as_bytes(), &password));
    }
    false
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
}
