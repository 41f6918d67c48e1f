//! What of a server entry may be shown, and how secrets are taken out of
//! texts that mention it.
//!
//! An entry's strings may pull secrets from the environment
//! (`"url": "https://mcp.example/mcp?key=${env:KEY}"`, `"args":
//! ["--token=${env:TOKEN}"]`) and some of its fields are credentials by
//! nature: a URL's query string and user info, `headers` values, the `env`
//! of a stdio server. The daemon shows servers in `/health`,
//! `/v1/mcp/status`, the status page, `oapd config` and its log, and the
//! errors of connecting often quote the URL or the program. So the parser
//! builds a [`Redaction`] beside the expanded values: the entry's
//! [`location`](Redaction::location) as it may be shown (scheme, host,
//! port and path of a URL with the query replaced, or the program of a
//! stdio server; any part that came from `${env:}` replaced too), and the
//! secret strings that [`scrub`](Redaction::scrub) replaces wherever they
//! appear in a text. The expanded values are still what is used to
//! connect.

use std::fmt;

/// What replaces a secret in everything shown.
pub const REDACTED: &str = "<redacted>";

/// Secrets shorter than this are not searched for in free text: replacing
/// every `1` or `on` would garble every message, and a value that short
/// is no credential. They are still never part of a
/// [`location`](Redaction::location), which is built from the entry's
/// structure rather than by searching.
const MIN_SCRUB_CHARS: usize = 4;

/// The shown form of one server entry and the secrets to take out of texts
/// about it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Redaction {
    location: String,
    /// `(secret, replacement)`, longest secret first, so a whole URL is
    /// replaced before its query string is.
    secrets: Vec<(String, String)>,
}

impl Redaction {
    /// Where the server is, safe to show: `stdio: <program>` or a URL
    /// without its query, any part from `${env:}` replaced by
    /// [`REDACTED`].
    pub fn location(&self) -> &str {
        &self.location
    }

    /// `text` with every secret of the entry replaced (a whole URL by its
    /// shown form, anything else by [`REDACTED`]), for error texts and log
    /// lines that may quote the entry's values.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (secret, replacement) in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), replacement);
            }
        }
        out
    }

    pub(crate) fn new(location: String) -> Self {
        Self {
            location,
            secrets: Vec::new(),
        }
    }

    /// Replace `secret` by `replacement` in scrubbed texts.
    pub(crate) fn add(&mut self, secret: &str, replacement: &str) {
        if secret.chars().count() < MIN_SCRUB_CHARS
            || secret == replacement
            || self.secrets.iter().any(|(s, _)| s == secret)
        {
            return;
        }
        self.secrets
            .push((secret.to_string(), replacement.to_string()));
        self.secrets
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }

    /// Take in what another builder collected (the values expanded while
    /// the entry was read).
    pub(crate) fn extend(&mut self, other: &Redaction) {
        for (secret, replacement) in &other.secrets {
            self.add(secret, replacement);
        }
    }

    /// The secrets of a URL: the whole URL (replaced by `location`), its
    /// query string and each query value, its fragment and its user info.
    pub(crate) fn add_url(&mut self, url: &url::Url, location: &str) {
        self.add(url.as_str(), location);
        // Some libraries quote a URL without its trailing slash.
        self.add(url.as_str().trim_end_matches('/'), location);
        if let Some(query) = url.query() {
            self.add(query, REDACTED);
            for pair in query.split('&') {
                let value = pair.split_once('=').map_or(pair, |(_, v)| v);
                self.add(value, REDACTED);
            }
            // The query as it was decoded, should an error quote it so.
            for (_, value) in url.query_pairs() {
                self.add(&value, REDACTED);
            }
        }
        if let Some(fragment) = url.fragment() {
            self.add(fragment, REDACTED);
        }
        self.add(url.username(), REDACTED);
        if let Some(password) = url.password() {
            self.add(password, REDACTED);
        }
    }
}

impl fmt::Debug for Redaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redaction")
            .field("location", &self.location)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// A URL as written in a configuration (`${env:}` not expanded), for
/// printing the configuration: the query and fragment replaced by
/// [`REDACTED`], user info left out, the rest as written.
pub fn url_text(raw: &str) -> String {
    let (head, has_query) = match raw.find(['?', '#']) {
        Some(at) => (raw.get(..at).unwrap_or(""), true),
        None => (raw, false),
    };
    let (scheme, rest) = head.split_at(head.find("://").map_or(0, |at| at + 3));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let query = if has_query {
        format!("?{REDACTED}")
    } else {
        String::new()
    };
    format!("{scheme}{host}{path}{query}")
}

/// Marks where a `${env:}` reference stood in a raw string (the NUL cannot
/// be in a valid value: expanded strings with one are refused).
pub(crate) const ENV_MARK: char = '\0';

/// `raw` with each `${env:VAR}` replaced by [`ENV_MARK`]; an unterminated
/// reference is left as it is (the expansion refuses it anyway).
pub(crate) fn env_template(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find("${env:") {
        let (before, tail) = rest.split_at(at);
        out.push_str(before);
        match tail.find('}') {
            Some(end) => {
                out.push(ENV_MARK);
                rest = tail.get(end + 1..).unwrap_or("");
            }
            None => {
                rest = tail;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `raw` with each `${env:VAR}` replaced by [`REDACTED`]: how a string that
/// took part of its value from the environment is shown.
pub(crate) fn shown_text(raw: &str) -> String {
    env_template(raw).replace(ENV_MARK, REDACTED)
}

/// A URL as it may be shown: scheme, host, port and path, the query (and
/// fragment) replaced by [`REDACTED`], user info left out, and the host or
/// any path segment that came from `${env:}` in `raw` (the entry's text
/// before expansion) replaced by [`REDACTED`].
pub(crate) fn url_location(url: &url::Url, raw: &str) -> String {
    let template = env_template(raw);
    let after_scheme = template.find("://").map_or(0, |at| at + 3);
    let rest = template.get(after_scheme..).unwrap_or("");
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_end);
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    let raw_path = rest.get(..path_end).unwrap_or("");

    let host = if authority.contains(ENV_MARK) {
        REDACTED.to_string()
    } else {
        let host = url.host_str().unwrap_or("");
        match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        }
    };
    let path = if !raw_path.contains(ENV_MARK) {
        url.path().to_string()
    } else {
        let raw_segments: Vec<&str> = raw_path.trim_start_matches('/').split('/').collect();
        let segments: Vec<&str> = url
            .path_segments()
            .map(Iterator::collect)
            .unwrap_or_default();
        if raw_segments.len() == segments.len() {
            let shown: Vec<&str> = raw_segments
                .iter()
                .zip(&segments)
                .map(|(raw, seg)| {
                    if raw.contains(ENV_MARK) {
                        REDACTED
                    } else {
                        seg
                    }
                })
                .collect();
            format!("/{}", shown.join("/"))
        } else {
            // `..` or `.` segments were folded: which segment is which is
            // no longer known, so the whole path is hidden.
            format!("/{REDACTED}")
        }
    };
    let query = if url.query().is_some() || url.fragment().is_some() {
        format!("?{REDACTED}")
    } else {
        String::new()
    };
    format!("{}://{host}{path}{query}", url.scheme())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(raw: &str, expanded: &str) -> String {
        url_location(&url::Url::parse(expanded).unwrap(), raw)
    }

    #[test]
    fn a_query_string_is_never_shown() {
        assert_eq!(
            location(
                "https://mcp.example/mcp?key=abc",
                "https://mcp.example/mcp?key=abc"
            ),
            "https://mcp.example/mcp?<redacted>"
        );
        assert_eq!(
            location("http://127.0.0.1:9/mcp#frag", "http://127.0.0.1:9/mcp#frag"),
            "http://127.0.0.1:9/mcp?<redacted>"
        );
        assert_eq!(
            location("http://[::1]:9/p", "http://[::1]:9/p"),
            "http://[::1]:9/p"
        );
    }

    #[test]
    fn user_info_is_left_out() {
        assert_eq!(
            location("https://me:pw@mcp.example/", "https://me:pw@mcp.example/"),
            "https://mcp.example/"
        );
    }

    #[test]
    fn parts_from_the_environment_are_replaced() {
        assert_eq!(
            location(
                "https://${env:HOST}:8443/mcp",
                "https://secret-host.example:8443/mcp"
            ),
            "https://<redacted>/mcp"
        );
        assert_eq!(
            location(
                "https://mcp.example/t/${env:TOKEN}/mcp",
                "https://mcp.example/t/hunter2hunter2/mcp"
            ),
            "https://mcp.example/t/<redacted>/mcp"
        );
        assert_eq!(
            location(
                "https://mcp.example/a/../${env:TOKEN}",
                "https://mcp.example/a/../hunter2hunter2"
            ),
            "https://mcp.example/<redacted>"
        );
    }

    #[test]
    fn scrubbing_replaces_the_url_before_its_query() {
        let url = url::Url::parse("http://127.0.0.1:9/mcp?k=hunter2hunter2&x=1").unwrap();
        let mut r = Redaction::new(url_location(&url, url.as_str()));
        r.add_url(&url, &r.location.clone());
        assert_eq!(
            r.scrub("error sending request for url (http://127.0.0.1:9/mcp?k=hunter2hunter2&x=1)"),
            "error sending request for url (http://127.0.0.1:9/mcp?<redacted>)"
        );
        assert_eq!(r.scrub("bad key hunter2hunter2"), "bad key <redacted>");
        // Short values are not searched for: they would garble messages.
        assert_eq!(r.scrub("within 1 s"), "within 1 s");
    }

    #[test]
    fn shown_text_keeps_the_literal_parts() {
        assert_eq!(shown_text("--key=${env:KEY}"), "--key=<redacted>");
        assert_eq!(shown_text("plain"), "plain");
        assert_eq!(env_template("a${env:X}b${env:Y}"), "a\0b\0");
    }

    #[test]
    fn a_configured_url_is_printed_without_query_or_user_info() {
        assert_eq!(
            url_text("http://127.0.0.1:9/mcp?k=${env:KEY}"),
            "http://127.0.0.1:9/mcp?<redacted>"
        );
        assert_eq!(
            url_text("https://me:pw@mcp.example/sse"),
            "https://mcp.example/sse"
        );
        assert_eq!(
            url_text("https://${env:HOST}/mcp"),
            "https://${env:HOST}/mcp"
        );
        assert_eq!(url_text("not a url?x"), "not a url?<redacted>");
    }

    #[test]
    fn debug_shows_no_secret() {
        let mut r = Redaction::new("stdio: server".into());
        r.add("hunter2hunter2", REDACTED);
        assert!(!format!("{r:?}").contains("hunter2"));
    }
}
