//! Validation of a raw JSON document against OAP 1.0 plus the non-spec
//! fields real manifests use (`usage`, `input.parameters`, `invoke.params`).
//!
//! It works on `serde_json::Value` rather than on the typed [`crate::Manifest`]
//! so that a wrong type is reported at its exact location with the actual JSON
//! type, instead of serde's first-error-only message. [`crate::parse`] runs
//! this first and only deserialises documents without errors.
//!
//! `null` for an optional field is treated as "absent" (the Python reference
//! accepts it too); `null` for a required field is an error.

use serde_json::{Map, Value};

use crate::diag::{Diagnostic, Report};
use crate::model::{AuthKind, InvokeKind};

/// Hard cap on `name` length (characters); longer names are refused.
pub const MAX_NAME_CHARS: usize = 200;
/// Hard cap on `description` length (characters); longer ones are refused.
pub const MAX_DESCRIPTION_CHARS: usize = 8000;
/// The spec's description limit; exceeding it is a warning.
pub const SPEC_DESCRIPTION_CHARS: usize = 1000;
/// The OAP specification's `usage` limit; exceeding it is a warning.
pub const SPEC_USAGE_CHARS: usize = 120;

/// Top-level fields this crate models (OAP 1.0 plus upstream's `usage`).
pub const KNOWN_TOP_LEVEL_FIELDS: &[&str] = &[
    "oap",
    "name",
    "description",
    "url",
    "input",
    "output",
    "invoke",
    "publisher",
    "examples",
    "tags",
    "health",
    "docs",
    "version",
    "updated",
    "usage",
];

/// `invoke` fields this crate models (OAP 1.0 plus the non-spec `params`).
pub const KNOWN_INVOKE_FIELDS: &[&str] = &[
    "method",
    "url",
    "auth",
    "auth_url",
    "auth_in",
    "auth_name",
    "headers",
    "streaming",
    "params",
];

/// Parameter types accepted in `input.parameters.*.type`.
pub const PARAMETER_TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object"];

/// Characters refused in a stdio command: anything a shell would interpret.
/// The daemon never runs commands through a shell, but a manifest that needs
/// one is either broken or an injection attempt.
const SHELL_METACHARACTERS: &[char] = &[
    ';', '|', '&', '$', '`', '<', '>', '(', ')', '{', '}', '*', '?', '!', '~', '\'', '"', '\\',
    '[', ']', '#',
];

/// Header names that carry credentials; the spec says secrets do not belong
/// in `invoke.headers` (they would be published in the manifest).
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
];

/// What a string field holds, which decides the control characters it may
/// contain. No field may hold ESC, NUL, DEL or any other C0/C1 control: they
/// are never meaningful in a manifest, and printed raw (a log line, `oapd
/// discover` on a terminal) they rewrite what the reader sees.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Text {
    /// Identifiers and one-line values shown or logged as one token: `name`,
    /// `version`, `updated`, tags, parameter names, `publisher.*`, MIME
    /// types, URLs, commands. A line break there would let the value pass
    /// for a new log record or a new line of output, so none is allowed
    /// (tab neither: it is a control character and never part of a name).
    Line,
    /// Prose the model reads (`description`, `usage`, parameter and example
    /// descriptions): paragraphs and lists are legitimate, so tab, LF and CR
    /// (CRLF files) stay allowed; every other control character is refused.
    Prose,
}

/// The first character `kind` does not allow, as the message naming it:
/// `contains a control character (\u001b) at byte 3`. The escape is the
/// JSON spelling a publisher would find in the file; the position is the
/// 0-based byte offset in the decoded string.
fn control_problem(s: &str, kind: Text) -> Option<String> {
    let (at, c) = s.char_indices().find(|&(_, c)| match kind {
        Text::Line => c.is_control() || c == '\u{2028}' || c == '\u{2029}',
        Text::Prose => c.is_control() && !matches!(c, '\t' | '\n' | '\r'),
    })?;
    let what = if c.is_control() {
        "a control character"
    } else {
        "a line separator"
    };
    Some(format!("contains {what} ({}) at byte {at}", json_escape(c)))
}

/// `c` as JSON writes it inside a string: `\n`, `\r`, `\t`, else `\u00XX`.
fn json_escape(c: char) -> String {
    match c {
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c => format!("\\u{:04x}", u32::from(c)),
    }
}

/// Check a parsed JSON document and return every finding.
///
/// Never fails: a non-object document yields a single error at path "".
pub fn validate(doc: &Value) -> Report {
    let mut v = Validator::default();
    v.document(doc);
    v.report
}

#[derive(Default)]
struct Validator {
    report: Report,
}

/// Quote a string for a message, JSON-escaped and truncated so a hostile
/// 60 KiB value does not flood logs.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 80;
    let mut chars = s.char_indices();
    match chars.nth(MAX) {
        None => Value::String(s.to_string()).to_string(),
        Some((cut, _)) => {
            let mut q = Value::String(s[..cut].to_string()).to_string();
            q.insert(q.len() - 1, '…');
            q
        }
    }
}

/// "number 5", "string \"x\"", "null", "array", "object" ...: the actual type
/// plus the value when it is short enough to be useful.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {}", quote(s)),
        Value::Array(a) => format!("array of {} item{}", a.len(), plural(a.len())),
        Value::Object(_) => "object".to_string(),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Path of `key` under `parent`: `parent.key`, or `parent["odd key"]` when
/// the key is not a plain identifier (so paths stay unambiguous).
pub(crate) fn child(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{}]", Value::String(key.to_string())),
    }
}

/// Path of element `i` under `parent`.
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Present and not null.
fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v),
    }
}

impl Validator {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.report.push(Diagnostic::error(path, message));
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.report.push(Diagnostic::warning(path, message));
    }

    /// Refuses the control characters `kind` does not allow in `s`.
    fn text(&mut self, path: &str, s: &str, kind: Text) {
        if let Some(problem) = control_problem(s, kind) {
            self.error(path, problem);
        }
    }

    /// [`Validator::opt_string`] plus the [`Text`] check.
    fn opt_text<'a>(
        &mut self,
        obj: &'a Map<String, Value>,
        key: &str,
        parent: &str,
        kind: Text,
    ) -> Option<&'a str> {
        let s = self.opt_string(obj, key, parent)?;
        self.text(&child(parent, key), s, kind);
        Some(s)
    }

    fn wrong_type(&mut self, path: &str, expected: &str, got: &Value) {
        self.error(path, format!("expected {expected}, got {}", describe(got)));
    }

    /// Required non-empty string.
    fn req_string<'a>(
        &mut self,
        obj: &'a Map<String, Value>,
        key: &str,
        parent: &str,
    ) -> Option<&'a str> {
        let path = child(parent, key);
        match obj.get(key) {
            None => {
                self.error(path, "required field missing (expected string)");
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.error(path, "must not be empty");
                None
            }
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.wrong_type(&path, "string", other);
                None
            }
        }
    }

    /// Optional string (null = absent).
    fn opt_string<'a>(
        &mut self,
        obj: &'a Map<String, Value>,
        key: &str,
        parent: &str,
    ) -> Option<&'a str> {
        match present(obj, key)? {
            Value::String(s) => Some(s),
            other => {
                self.wrong_type(&child(parent, key), "string", other);
                None
            }
        }
    }

    /// Optional string that must be an absolute http(s) URL.
    fn opt_url(&mut self, obj: &Map<String, Value>, key: &str, parent: &str) {
        if let Some(s) = self.opt_string(obj, key, parent) {
            self.check_http_url(&child(parent, key), s);
        }
    }

    /// `input.schema` / `output.schema`: an absolute http(s) URL, as the
    /// spec has it, or (a warning, not an error) a relative path, which a
    /// manifest of an operator's directory may use for a file beside it;
    /// the daemon reads it from there and never for a fetched manifest.
    fn schema_reference(&mut self, io: &Map<String, Value>, parent: &str) {
        let Some(s) = self.opt_string(io, "schema", parent) else {
            return;
        };
        let path = child(parent, "schema");
        if is_relative_path(s) {
            self.warn(
                &path,
                "a relative path, not a URL: read from the manifest's directory for a \
                 manifest of manifests.dirs, not used for a fetched one",
            );
        } else {
            self.check_http_url(&path, s);
        }
    }

    fn opt_bool(&mut self, obj: &Map<String, Value>, key: &str, parent: &str) {
        if let Some(v) = present(obj, key) {
            if !v.is_boolean() {
                self.wrong_type(&child(parent, key), "boolean", v);
            }
        }
    }

    fn opt_object<'a>(
        &mut self,
        obj: &'a Map<String, Value>,
        key: &str,
        parent: &str,
    ) -> Option<&'a Map<String, Value>> {
        match present(obj, key)? {
            Value::Object(m) => Some(m),
            other => {
                self.wrong_type(&child(parent, key), "object", other);
                None
            }
        }
    }

    fn document(&mut self, doc: &Value) {
        let Some(obj) = doc.as_object() else {
            self.error(
                "",
                format!(
                    "expected a JSON object (the manifest), got {}",
                    describe(doc)
                ),
            );
            return;
        };

        self.oap(obj);

        if let Some(name) = self.req_string(obj, "name", "") {
            self.text("name", name, Text::Line);
            let n = name.chars().count();
            if n > MAX_NAME_CHARS {
                self.error(
                    "name",
                    format!("too long: {n} characters (maximum {MAX_NAME_CHARS})"),
                );
            }
        }

        if let Some(desc) = self.req_string(obj, "description", "") {
            self.text("description", desc, Text::Prose);
            let n = desc.chars().count();
            if n > MAX_DESCRIPTION_CHARS {
                self.error(
                    "description",
                    format!("too long: {n} characters (maximum {MAX_DESCRIPTION_CHARS})"),
                );
            } else if n > SPEC_DESCRIPTION_CHARS {
                self.warn(
                    "description",
                    format!(
                        "{n} characters, over the spec's {SPEC_DESCRIPTION_CHARS}-character limit \
                         (long descriptions dilute the search signal)"
                    ),
                );
            }
        }

        self.opt_url(obj, "url", "");
        self.io_spec(obj, "input", "what this capability needs");
        self.io_spec(obj, "output", "what comes back");

        match obj.get("invoke") {
            None => self.error("invoke", "required field missing (expected object)"),
            Some(Value::Object(inv)) => self.invoke(inv),
            Some(other) => self.wrong_type("invoke", "object", other),
        }

        if let Some(publisher) = self.opt_object(obj, "publisher", "") {
            self.opt_text(publisher, "name", "publisher", Text::Line);
            self.opt_text(publisher, "contact", "publisher", Text::Line);
            self.opt_url(publisher, "url", "publisher");
        }

        self.examples(obj);
        self.tags(obj);

        self.opt_url(obj, "health", "");
        self.opt_url(obj, "docs", "");
        self.opt_text(obj, "version", "", Text::Line);
        if let Some(updated) = self.opt_text(obj, "updated", "", Text::Line) {
            if !is_iso8601(updated) {
                self.warn(
                    "updated",
                    format!(
                        "expected an ISO-8601 date such as \"2026-03-13\" or \
                         \"2026-03-13T00:00:00Z\", got {}",
                        quote(updated)
                    ),
                );
            }
        }
        // A "one-line synopsis", but text for the model like the description:
        // a wrapped line is untidy, not dangerous.
        if let Some(usage) = self.opt_text(obj, "usage", "", Text::Prose) {
            let n = usage.chars().count();
            if n > SPEC_USAGE_CHARS {
                self.warn(
                    "usage",
                    format!(
                        "{n} characters, over the {SPEC_USAGE_CHARS}-character limit for a \
                         one-line synopsis"
                    ),
                );
            }
        }

        for key in obj.keys() {
            if !KNOWN_TOP_LEVEL_FIELDS.contains(&key.as_str()) {
                self.warn(
                    child("", key),
                    "unknown field kept (not in OAP 1.0; passed through unchanged)",
                );
            }
        }
    }

    fn oap(&mut self, obj: &Map<String, Value>) {
        match obj.get("oap") {
            None => self.error("oap", "required field missing (expected string \"1.x\")"),
            Some(Value::Number(n)) => self.error(
                "oap",
                format!("expected string, got number {n} (write it as a string: \"{n}\")"),
            ),
            Some(Value::String(s)) => {
                if !is_v1_version(s) {
                    self.error(
                        "oap",
                        format!("expected a \"1.x\" version string, got {}", quote(s)),
                    );
                }
            }
            Some(other) => self.wrong_type("oap", "string", other),
        }
    }

    fn io_spec(&mut self, obj: &Map<String, Value>, key: &str, what: &str) {
        let Some(io) = self.opt_object(obj, key, "") else {
            if present(obj, key).is_none() {
                self.warn(
                    key,
                    format!("missing; add {key}.description saying {what} (strongly recommended)"),
                );
            }
            return;
        };
        self.opt_text(io, "format", key, Text::Line);
        let desc_path = child(key, "description");
        match self.opt_text(io, "description", key, Text::Prose) {
            Some(d) if d.trim().is_empty() => {
                self.warn(
                    desc_path,
                    format!("empty; describe {what} (strongly recommended)"),
                );
            }
            None if present(io, "description").is_none() => {
                self.warn(
                    desc_path,
                    format!("missing; describe {what} (strongly recommended)"),
                );
            }
            _ => {}
        }
        self.schema_reference(io, key);
        if let Some(v) = present(io, "parameters") {
            self.parameters(&child(key, "parameters"), v);
        }
    }

    fn parameters(&mut self, path: &str, v: &Value) {
        let Value::Object(params) = v else {
            self.wrong_type(path, "object of parameter objects", v);
            return;
        };
        for (name, p) in params {
            let ppath = child(path, name);
            if name.trim().is_empty() {
                self.error(&ppath, "parameter name must not be empty");
            } else if let Some(problem) = control_problem(name, Text::Line) {
                self.error(&ppath, format!("parameter name {problem}"));
            }
            let Value::Object(p) = p else {
                self.wrong_type(&ppath, "object", p);
                continue;
            };
            if let Some(t) = self.opt_string(p, "type", &ppath) {
                if !PARAMETER_TYPES.contains(&t) {
                    self.error(
                        child(&ppath, "type"),
                        format!(
                            "expected one of string, number, integer, boolean, array, object, got {}",
                            quote(t)
                        ),
                    );
                }
            }
            self.opt_text(p, "description", &ppath, Text::Prose);
            self.opt_bool(p, "required", &ppath);
            if let Some(e) = present(p, "enum") {
                if !e.is_array() {
                    self.wrong_type(&child(&ppath, "enum"), "array", e);
                }
            }
            if let Some(items) = present(p, "items") {
                if !(items.is_object() || items.is_boolean()) {
                    self.wrong_type(&child(&ppath, "items"), "object (an item schema)", items);
                }
            }
        }
    }

    fn invoke(&mut self, inv: &Map<String, Value>) {
        const P: &str = "invoke";
        let kind = match self.req_string(inv, "method", P) {
            Some(m) => {
                let k = InvokeKind::parse(m);
                if k.is_none() {
                    self.error(
                        "invoke.method",
                        format!("expected GET, POST or stdio, got {}", quote(m)),
                    );
                }
                k
            }
            None => None,
        };

        if let Some(url) = self.req_string(inv, "url", P) {
            match kind {
                Some(InvokeKind::Get | InvokeKind::Post) => self.check_http_url("invoke.url", url),
                Some(InvokeKind::Stdio) => self.check_command("invoke.url", url),
                None => {}
            }
        }

        let auth = match self.opt_string(inv, "auth", P) {
            Some(a) => {
                let k = AuthKind::parse(a);
                if k.is_none() {
                    self.error(
                        "invoke.auth",
                        format!(
                            "expected one of none, api_key, oauth2, bearer, got {}",
                            quote(a)
                        ),
                    );
                }
                k
            }
            None => None,
        };

        self.opt_url(inv, "auth_url", P);

        let mut in_header = true;
        if let Some(a) = self.opt_string(inv, "auth_in", P) {
            match a {
                "header" => {}
                "query" => in_header = false,
                _ => self.error(
                    "invoke.auth_in",
                    format!("expected header or query, got {}", quote(a)),
                ),
            }
        }

        if let Some(name) = self.opt_string(inv, "auth_name", P) {
            if name.trim().is_empty() {
                self.error("invoke.auth_name", "must not be empty");
            } else if let Some(problem) = control_problem(name, Text::Line) {
                self.error("invoke.auth_name", problem);
            } else if in_header && !is_header_name(name) {
                self.error(
                    "invoke.auth_name",
                    format!("not a valid HTTP header name: {}", quote(name)),
                );
            }
        }

        if let Some(headers) = self.opt_object(inv, "headers", P) {
            for (k, v) in headers {
                let hpath = child("invoke.headers", k);
                if !is_header_name(k) {
                    self.error(
                        &hpath,
                        format!("not a valid HTTP header name: {}", quote(k)),
                    );
                }
                match v {
                    Value::String(s) => {
                        if s.chars().any(|c| c.is_control() && c != '\t') {
                            self.error(
                                &hpath,
                                format!(
                                    "header value contains a control character (CR/LF would \
                                     inject headers): {}",
                                    quote(s)
                                ),
                            );
                        }
                        if SECRET_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                            self.warn(
                                &hpath,
                                "looks like a credential; secrets do not belong in a published \
                                 manifest (use invoke.auth)",
                            );
                        }
                    }
                    other => self.wrong_type(&hpath, "string", other),
                }
            }
        }

        self.opt_bool(inv, "streaming", P);

        if let Some(params) = self.opt_object(inv, "params", P) {
            for (k, v) in params {
                if !(v.is_string() || v.is_number() || v.is_boolean()) {
                    self.wrong_type(
                        &child("invoke.params", k),
                        "string, number or boolean (a static query value)",
                        v,
                    );
                }
            }
        }

        if let Some(a) = auth {
            if a != AuthKind::None && present(inv, "auth_url").is_none() {
                self.warn(
                    "invoke.auth_url",
                    format!("missing; invoke.auth is \"{a}\", so say where users get credentials"),
                );
            }
        }

        for key in inv.keys() {
            if !KNOWN_INVOKE_FIELDS.contains(&key.as_str()) {
                self.warn(child(P, key), "unknown field kept (not in OAP 1.0)");
            }
        }
    }

    fn examples(&mut self, obj: &Map<String, Value>) {
        let Some(v) = present(obj, "examples") else {
            return;
        };
        let Value::Array(items) = v else {
            self.wrong_type("examples", "array of objects", v);
            return;
        };
        for (i, ex) in items.iter().enumerate() {
            let path = index("examples", i);
            let Value::Object(ex) = ex else {
                self.wrong_type(&path, "object", ex);
                continue;
            };
            for key in ["input", "output"] {
                if let Some(v) = present(ex, key) {
                    if !(v.is_string() || v.is_object()) {
                        self.wrong_type(&child(&path, key), "string or object", v);
                    }
                }
            }
            self.opt_text(ex, "description", &path, Text::Prose);
        }
    }

    fn tags(&mut self, obj: &Map<String, Value>) {
        let Some(v) = present(obj, "tags") else {
            return;
        };
        let Value::Array(items) = v else {
            self.wrong_type("tags", "array of strings", v);
            return;
        };
        for (i, t) in items.iter().enumerate() {
            match t {
                Value::String(s) => self.text(&index("tags", i), s, Text::Line),
                other => self.wrong_type(&index("tags", i), "string", other),
            }
        }
    }

    /// GET/POST endpoints and every URL-valued field: absolute http(s) with a
    /// host and no user name or password.
    fn check_http_url(&mut self, path: &str, s: &str) {
        if has_userinfo(s) {
            // Not quoted: the value holds a credential, and this message ends
            // up in logs, lint output and the crawl status.
            self.error(
                path,
                "must not contain a user name or password (\"user:password@\" before the \
                 host; the URL is not repeated because it holds a credential); declare \
                 invoke.auth and let the operator's credentials file supply the secret",
            );
            return;
        }
        if let Some(reason) = http_url_problem(s) {
            self.error(
                path,
                format!(
                    "expected an absolute http(s) URL, got {} ({reason})",
                    quote(s)
                ),
            );
        }
    }

    /// stdio commands: a bare name (looked up on the allowlisted PATH) or an
    /// absolute path, never something that needs a shell to mean anything.
    fn check_command(&mut self, path: &str, s: &str) {
        if let Some(reason) = command_problem(s) {
            self.error(
                path,
                format!(
                    "expected a bare command name or an absolute path, got {} ({reason})",
                    quote(s)
                ),
            );
        }
    }
}

/// Whether `s` carries userinfo (`user@` or `user:password@`) before its
/// host. Read from the raw text first, as a browser would split it (the
/// authority runs to the first `/`, `?`, `#` or `\\`; slashes right after the
/// scheme are skipped), so a URL refused for another reason (a wrong scheme,
/// a control character) is still never echoed; then from the parsed URL,
/// which catches spellings the scan misses.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn has_userinfo(s: &str) -> bool {
    let Some((scheme, after)) = s.split_once(':') else {
        return false;
    };
    let is_scheme = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let special = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    // `mailto:someone@example.com` has no authority; only `scheme://` (or
    // http(s) with any number of slashes, as browsers read it) does.
    if !is_scheme || !(special || after.starts_with("//")) {
        return false;
    }
    let rest = after.trim_start_matches(['/', '\\']);
    let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    if rest[..authority_end].contains('@') {
        return true;
    }
    url::Url::parse(s).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}

/// Why `s` is not an acceptable http(s) URL, or `None` if it is.
/// A relative reference without a scheme, a leading `/`, whitespace or
/// control characters (`schemas/forecast.json`).
fn is_relative_path(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('/')
        && control_problem(s, Text::Line).is_none()
        && !s.chars().any(char::is_whitespace)
        && matches!(
            url::Url::parse(s),
            Err(url::ParseError::RelativeUrlWithoutBase)
        )
}

fn http_url_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("empty".into());
    }
    if let Some(problem) = control_problem(s, Text::Line) {
        return Some(problem);
    }
    if s.chars().any(char::is_whitespace) {
        return Some("contains whitespace".into());
    }
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        // Distinguish a wrong scheme from a relative reference for a better hint.
        return Some(match url::Url::parse(s) {
            Ok(u) if u.scheme() != "http" && u.scheme() != "https" => {
                format!("scheme \"{}\" is not http or https", u.scheme())
            }
            Ok(_) => "must start with http:// or https://".into(),
            Err(url::ParseError::RelativeUrlWithoutBase) => {
                "relative URL; must start with http:// or https://".into()
            }
            Err(e) => e.to_string(),
        });
    }
    match url::Url::parse(s) {
        Err(e) => Some(e.to_string()),
        Ok(u) => match u.host_str() {
            None | Some("") => Some("no host".into()),
            Some(_) => None,
        },
    }
}

/// Why `s` is not an acceptable stdio command, or `None` if it is.
fn command_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("empty".into());
    }
    if let Some(problem) = control_problem(s, Text::Line) {
        return Some(problem);
    }
    if s.chars().any(char::is_whitespace) {
        return Some("contains whitespace; arguments do not belong in invoke.url".into());
    }
    if let Some(c) = s.chars().find(|c| SHELL_METACHARACTERS.contains(c)) {
        return Some(format!("contains shell metacharacter '{c}'"));
    }
    if s.contains('/') {
        if !s.starts_with('/') {
            return Some("relative paths are not allowed".into());
        }
        if s.split('/').any(|c| c == "..") {
            return Some("contains a \"..\" path component".into());
        }
        if s.ends_with('/') {
            return Some("path ends with '/'".into());
        }
    } else {
        if s == "." || s == ".." {
            return Some("not a command name".into());
        }
        if s.starts_with('-') {
            return Some("starts with '-', which would be read as an option".into());
        }
    }
    None
}

/// `1.<digits>` optionally followed by more `.<digits>` (e.g. "1.0", "1.2.3").
fn is_v1_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("1.") else {
        return false;
    };
    rest.split('.')
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// RFC 7230 `token` characters: what a header name may contain.
fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// ISO-8601 calendar date, optionally with a time and zone:
/// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.frac]][Z|±HH[:MM]|±HHMM]`.
/// Dates are range-checked (month length, leap years), so "2026-02-30" fails.
pub(crate) fn is_iso8601(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(range)?;
        if part.iter().all(u8::is_ascii_digit) {
            part.iter()
                .try_fold(0u32, |acc, d| Some(acc * 10 + u32::from(d - b'0')))
        } else {
            None
        }
    };
    let (Some(year), Some(month), Some(day)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return false;
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return false;
    }
    if b.len() == 10 {
        return true;
    }
    if !matches!(b.get(10), Some(b'T' | b't')) {
        return false;
    }
    let (Some(h), Some(m)) = (num(11..13), num(14..16)) else {
        return false;
    };
    if b.get(13) != Some(&b':') || h > 23 || m > 59 {
        return false;
    }
    let mut i = 16;
    if b.get(i) == Some(&b':') {
        match num(i + 1..i + 3) {
            Some(sec) if sec <= 60 => i += 3,
            _ => return false,
        }
        if matches!(b.get(i), Some(b'.' | b',')) {
            let start = i + 1;
            i = start;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == start {
                return false;
            }
        }
    }
    match &b[i..] {
        [] | [b'Z' | b'z'] => true,
        [b'+' | b'-', rest @ ..] => {
            let zone_ok = |hh: &[u8], mm: Option<&[u8]>| {
                let two = |d: &[u8]| -> Option<u32> {
                    if d.len() == 2 && d.iter().all(u8::is_ascii_digit) {
                        Some(u32::from(d[0] - b'0') * 10 + u32::from(d[1] - b'0'))
                    } else {
                        None
                    }
                };
                two(hh).is_some_and(|h| h <= 23)
                    && mm.is_none_or(|m| two(m).is_some_and(|m| m <= 59))
            };
            match rest.len() {
                2 => zone_ok(rest, None),
                4 => zone_ok(&rest[..2], Some(&rest[2..])),
                5 if rest[2] == b':' => zone_ok(&rest[..2], Some(&rest[3..])),
                _ => false,
            }
        }
        _ => false,
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) {
                29
            } else {
                28
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_accepts_common_forms() {
        for ok in [
            "2026-03-13",
            "2026-03-13T00:00:00Z",
            "2026-03-13T00:00Z",
            "2026-03-13T10:20:30.123+02:00",
            "2026-03-13T10:20:30-0500",
            "2026-03-13T10:20:30+05",
            "2024-02-29",
        ] {
            assert!(is_iso8601(ok), "{ok}");
        }
        for bad in [
            "",
            "March 2026",
            "2026-3-13",
            "2026-13-01",
            "2026-02-29",
            "2026-04-31",
            "2026-03-13 00:00:00",
            "2026-03-13T25:00Z",
            "2026-03-13T10:20:30.Z",
            "2026-03-13T10:20:30+5",
            "2026-03-13Tfoo",
            "13/03/2026",
        ] {
            assert!(!is_iso8601(bad), "{bad}");
        }
    }

    #[test]
    fn paths_quote_odd_keys() {
        assert_eq!(child("", "name"), "name");
        assert_eq!(child("input.parameters", "limit"), "input.parameters.limit");
        assert_eq!(
            child("invoke.headers", "X-Api-Version"),
            "invoke.headers.X-Api-Version"
        );
        assert_eq!(
            child("input.parameters", "a.b"),
            "input.parameters[\"a.b\"]"
        );
        assert_eq!(child("", ""), "[\"\"]");
        assert_eq!(index("examples", 2), "examples[2]");
    }

    #[test]
    fn quote_truncates_long_values() {
        let q = quote(&"x".repeat(500));
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with("…\""), "{q}");
        assert_eq!(quote("PUT"), "\"PUT\"");
    }

    #[test]
    fn version_strings() {
        for ok in ["1.0", "1.1", "1.10", "1.0.2"] {
            assert!(is_v1_version(ok), "{ok}");
        }
        for bad in ["1", "1.", "2.0", "1.x", "v1.0", "1.0-beta", " 1.0", "1..0"] {
            assert!(!is_v1_version(bad), "{bad}");
        }
    }

    #[test]
    fn commands() {
        assert_eq!(command_problem("grep"), None);
        assert_eq!(command_problem("/usr/bin/jq"), None);
        assert_eq!(command_problem("python3.12"), None);
        assert!(command_problem("bin/jq").is_some());
        assert!(command_problem("./jq").is_some());
        assert!(command_problem("/usr/../bin/sh").is_some());
        assert!(command_problem("-rf").is_some());
        assert!(command_problem("..").is_some());
        assert!(command_problem("/usr/bin/").is_some());
    }
}
