//! One test per validation rule: exact path plus a message substring.

use crate::common::grep_stdio as stdio;
use oap_manifest::{validate, Report, Severity};
use serde_json::{json, Value};

/// A clean HTTP manifest: zero diagnostics.
fn http() -> Value {
    json!({
        "oap": "1.0",
        "name": "Summarize",
        "description": "Accepts any text and returns a concise summary.",
        "input": {"format": "text/plain", "description": "The text to summarize."},
        "output": {"format": "text/plain", "description": "A concise summary."},
        "invoke": {
            "method": "POST",
            "url": "https://summarize.example.com/api/v1/summarize",
            "auth": "api_key",
            "auth_name": "X-Api-Key",
            "auth_url": "https://summarize.example.com/developers"
        }
    })
}

/// Set `doc[a][b]...` (creating objects as needed) to `v`.
fn set(mut doc: Value, path: &[&str], v: Value) -> Value {
    let mut cur = &mut doc;
    let (last, parents) = path.split_last().expect("non-empty path");
    for p in parents {
        let obj = cur.as_object_mut().expect("object on the way");
        cur = obj.entry(p.to_string()).or_insert_with(|| json!({}));
    }
    cur.as_object_mut()
        .expect("object parent")
        .insert(last.to_string(), v);
    doc
}

fn remove(mut doc: Value, path: &[&str]) -> Value {
    let (last, parents) = path.split_last().expect("non-empty path");
    let mut cur = &mut doc;
    for p in parents {
        cur = cur.get_mut(*p).expect("parent exists");
    }
    cur.as_object_mut().expect("object").remove(*last);
    doc
}

#[track_caller]
fn has(report: &Report, severity: Severity, path: &str, needle: &str) {
    let found = report
        .diagnostics
        .iter()
        .any(|d| d.severity == severity && d.path == path && d.message.contains(needle));
    assert!(
        found,
        "expected {severity} at {path:?} containing {needle:?}; report:\n{report}"
    );
}

#[track_caller]
fn error(doc: &Value, path: &str, needle: &str) {
    has(&validate(doc), Severity::Error, path, needle);
}

#[track_caller]
fn warning(doc: &Value, path: &str, needle: &str) {
    let r = validate(doc);
    has(&r, Severity::Warning, path, needle);
    assert!(!r.has_errors(), "warning-only case produced errors:\n{r}");
}

#[track_caller]
fn clean(doc: &Value) {
    let r = validate(doc);
    assert!(r.is_empty(), "expected no diagnostics, got:\n{r}");
}

/// Every control character: C0, DEL and C1.
fn control_characters() -> impl Iterator<Item = char> {
    (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32)
}

/// The escape a lint message shows for `c` (its JSON spelling).
fn escape(c: char) -> String {
    match c {
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c => format!("\\u{:04x}", u32::from(c)),
    }
}

// ---------- baselines ----------

#[test]
fn baselines_are_clean() {
    clean(&http());
    clean(&stdio());
}

// ---------- errors ----------

#[test]
fn document_must_be_an_object() {
    error(&json!([]), "", "expected a JSON object");
    error(&json!("x"), "", "got string \"x\"");
    error(&json!(null), "", "got null");
    assert_eq!(validate(&json!(3)).diagnostics.len(), 1);
}

#[test]
fn required_fields_missing() {
    for f in ["oap", "name", "description", "invoke"] {
        let r = validate(&remove(http(), &[f]));
        has(&r, Severity::Error, f, "required field missing");
    }
    error(&remove(http(), &["invoke"]), "invoke", "expected object");
    error(&remove(http(), &["name"]), "name", "expected string");
}

#[test]
fn required_fields_wrong_type() {
    error(
        &set(http(), &["name"], json!(5)),
        "name",
        "expected string, got number 5",
    );
    error(
        &set(http(), &["description"], json!(5)),
        "description",
        "expected string, got number 5",
    );
    error(
        &set(http(), &["description"], json!(null)),
        "description",
        "got null",
    );
    error(
        &set(http(), &["oap"], json!(true)),
        "oap",
        "expected string, got boolean true",
    );
    error(
        &set(http(), &["invoke"], json!("x")),
        "invoke",
        "expected object, got string \"x\"",
    );
    error(
        &set(http(), &["invoke"], json!([1, 2])),
        "invoke",
        "got array of 2 items",
    );
}

#[test]
fn required_strings_not_empty() {
    error(
        &set(http(), &["name"], json!("")),
        "name",
        "must not be empty",
    );
    error(
        &set(http(), &["name"], json!("   ")),
        "name",
        "must not be empty",
    );
    error(
        &set(http(), &["description"], json!("")),
        "description",
        "must not be empty",
    );
    error(&set(http(), &["oap"], json!("")), "oap", "1.x");
}

#[test]
fn oap_version_must_be_1x() {
    error(
        &set(http(), &["oap"], json!("2.0")),
        "oap",
        "expected a \"1.x\" version string, got \"2.0\"",
    );
    error(&set(http(), &["oap"], json!("1")), "oap", "got \"1\"");
    error(
        &set(http(), &["oap"], json!(1.0)),
        "oap",
        "expected string, got number 1.0",
    );
    clean(&set(http(), &["oap"], json!("1.1")));
}

#[test]
fn invoke_method() {
    let r = validate(&set(http(), &["invoke", "method"], json!("PUT")));
    let d = r.find("invoke.method").expect("diagnostic");
    assert_eq!(
        d.to_string(),
        "invoke.method: expected GET, POST or stdio, got \"PUT\""
    );
    assert_eq!(d.severity, Severity::Error);
    error(
        &remove(http(), &["invoke", "method"]),
        "invoke.method",
        "required field missing",
    );
    error(
        &set(http(), &["invoke", "method"], json!(1)),
        "invoke.method",
        "expected string",
    );
    for ok in ["get", "Post", "GET"] {
        clean(&set(http(), &["invoke", "method"], json!(ok)));
    }
    clean(&set(stdio(), &["invoke", "method"], json!("STDIO")));
}

#[test]
fn invoke_url_required() {
    error(
        &remove(http(), &["invoke", "url"]),
        "invoke.url",
        "required field missing",
    );
    error(
        &set(http(), &["invoke", "url"], json!("")),
        "invoke.url",
        "must not be empty",
    );
    error(
        &set(stdio(), &["invoke", "url"], json!("")),
        "invoke.url",
        "must not be empty",
    );
}

#[test]
fn http_invoke_url_must_be_absolute_http() {
    let cases = [
        ("/api/v1", "relative URL"),
        ("summarize.example.com/api", "relative URL"),
        ("ftp://example.com/x", "scheme \"ftp\""),
        ("file:///etc/passwd", "scheme \"file\""),
        ("https:example.com", "must start with http:// or https://"),
        ("https://", "got \"https://\""),
        ("https://exa mple.com/", "contains whitespace"),
        (
            "http://example.com/\n",
            "contains a control character (\\n) at byte 19",
        ),
        ("grep", "relative URL"),
    ];
    for (url, needle) in cases {
        let doc = set(http(), &["invoke", "url"], json!(url));
        error(&doc, "invoke.url", "expected an absolute http(s) URL");
        error(&doc, "invoke.url", needle);
    }
    clean(&set(
        http(),
        &["invoke", "url"],
        json!("http://localhost:8305/api"),
    ));
    clean(&set(
        http(),
        &["invoke", "url"],
        json!("https://api.open-meteo.com/v1/forecast?temperature_unit=fahrenheit"),
    ));
}

#[test]
fn stdio_invoke_url_must_be_a_safe_command() {
    let cases = [
        ("grep -i", "contains whitespace"),
        ("grep\tx", "contains a control character (\\t) at byte 4"),
        ("grep\n", "contains a control character (\\n) at byte 4"),
        ("ls;rm", "shell metacharacter ';'"),
        ("a|b", "shell metacharacter '|'"),
        ("a&b", "shell metacharacter '&'"),
        ("$HOME", "shell metacharacter '$'"),
        ("`id`", "shell metacharacter '`'"),
        ("a>b", "shell metacharacter '>'"),
        ("a<b", "shell metacharacter '<'"),
        ("$(id)", "shell metacharacter '$'"),
        ("{a}", "shell metacharacter '{'"),
        ("gr*p", "shell metacharacter '*'"),
        ("gre?", "shell metacharacter '?'"),
        ("!1", "shell metacharacter '!'"),
        ("~/bin/x", "shell metacharacter '~'"),
        ("'grep'", "shell metacharacter '''"),
        ("\"grep\"", "shell metacharacter '\"'"),
        ("bin/grep", "relative paths are not allowed"),
        ("./grep", "relative paths are not allowed"),
        ("/usr/bin/../../bin/sh", "\"..\" path component"),
        ("..", "not a command name"),
        ("-rf", "starts with '-'"),
        ("https://example.com/x", "relative paths are not allowed"),
    ];
    for (cmd, needle) in cases {
        let doc = set(stdio(), &["invoke", "url"], json!(cmd));
        error(
            &doc,
            "invoke.url",
            "expected a bare command name or an absolute path",
        );
        error(&doc, "invoke.url", needle);
    }
    for ok in [
        "grep",
        "/usr/bin/grep",
        "python3.12",
        "x86_64-linux-gnu-gcc",
    ] {
        clean(&set(stdio(), &["invoke", "url"], json!(ok)));
    }
}

#[test]
fn invoke_auth_values() {
    error(
        &set(http(), &["invoke", "auth"], json!("bot")),
        "invoke.auth",
        "expected one of none, api_key, oauth2, bearer, got \"bot\"",
    );
    error(
        &set(http(), &["invoke", "auth"], json!("Bearer")),
        "invoke.auth",
        "got \"Bearer\"",
    );
    error(
        &set(http(), &["invoke", "auth"], json!(1)),
        "invoke.auth",
        "expected string",
    );
    for ok in ["none", "api_key", "oauth2", "bearer"] {
        clean(&set(http(), &["invoke", "auth"], json!(ok)));
    }
}

#[test]
fn invoke_auth_in_values() {
    error(
        &set(http(), &["invoke", "auth_in"], json!("cookie")),
        "invoke.auth_in",
        "expected header or query, got \"cookie\"",
    );
    clean(&set(http(), &["invoke", "auth_in"], json!("query")));
    clean(&set(http(), &["invoke", "auth_in"], json!("header")));
}

#[test]
fn invoke_auth_name() {
    error(
        &set(http(), &["invoke", "auth_name"], json!(7)),
        "invoke.auth_name",
        "expected string, got number 7",
    );
    error(
        &set(http(), &["invoke", "auth_name"], json!("")),
        "invoke.auth_name",
        "must not be empty",
    );
    error(
        &set(http(), &["invoke", "auth_name"], json!("X Api Key")),
        "invoke.auth_name",
        "not a valid HTTP header name",
    );
    // Query parameter names are not header tokens.
    let doc = set(http(), &["invoke", "auth_in"], json!("query"));
    clean(&set(doc, &["invoke", "auth_name"], json!("api key")));
}

#[test]
fn invoke_headers_object_of_strings() {
    error(
        &set(http(), &["invoke", "headers"], json!(["a"])),
        "invoke.headers",
        "expected object, got array",
    );
    error(
        &set(http(), &["invoke", "headers"], json!({"X-Version": 2})),
        "invoke.headers.X-Version",
        "expected string, got number 2",
    );
    error(
        &set(
            http(),
            &["invoke", "headers"],
            json!({"X-Evil": "a\r\nHost: x"}),
        ),
        "invoke.headers.X-Evil",
        "control character",
    );
    error(
        &set(http(), &["invoke", "headers"], json!({"Bad Name": "a"})),
        "invoke.headers[\"Bad Name\"]",
        "not a valid HTTP header name",
    );
    clean(&set(
        http(),
        &["invoke", "headers"],
        json!({"Notion-Version": "2022-06-28"}),
    ));
}

#[test]
fn invoke_streaming_bool() {
    error(
        &set(http(), &["invoke", "streaming"], json!("yes")),
        "invoke.streaming",
        "expected boolean, got string \"yes\"",
    );
    clean(&set(http(), &["invoke", "streaming"], json!(true)));
}

#[test]
fn invoke_params_scalars() {
    error(
        &set(http(), &["invoke", "params"], json!("a=b")),
        "invoke.params",
        "expected object",
    );
    error(
        &set(http(), &["invoke", "params"], json!({"fields": ["a"]})),
        "invoke.params.fields",
        "expected string, number or boolean",
    );
    clean(&set(
        http(),
        &["invoke", "params"],
        json!({"limit": 10, "q": "x", "f": true}),
    ));
}

#[test]
fn url_fields_must_be_absolute_http() {
    let fields: &[&[&str]] = &[
        &["url"],
        &["docs"],
        &["health"],
        &["invoke", "auth_url"],
        &["publisher", "url"],
        &["input", "schema"],
        &["output", "schema"],
    ];
    for path in fields {
        let dotted = path.join(".");
        let doc = set(http(), path, json!("not a url"));
        error(
            &doc,
            &dotted,
            "expected an absolute http(s) URL, got \"not a url\"",
        );
        let doc = set(http(), path, json!("mailto:a@example.com"));
        error(&doc, &dotted, "scheme \"mailto\"");
        let doc = set(http(), path, json!(42));
        error(&doc, &dotted, "expected string, got number 42");
        clean(&set(http(), path, json!("https://example.com/x")));
    }
}

#[test]
fn tags_array_of_strings() {
    error(
        &set(http(), &["tags"], json!("a,b")),
        "tags",
        "expected array of strings, got string",
    );
    error(
        &set(http(), &["tags"], json!(["a", 3])),
        "tags[1]",
        "expected string, got number 3",
    );
    clean(&set(http(), &["tags"], json!(["search", "text"])));
}

#[test]
fn examples_array_of_objects() {
    error(
        &set(http(), &["examples"], json!({})),
        "examples",
        "expected array of objects, got object",
    );
    error(
        &set(http(), &["examples"], json!(["x"])),
        "examples[0]",
        "expected object, got string",
    );
    let doc = set(
        http(),
        &["examples"],
        json!([
            {"input": "text", "output": "sum"},
            {"input": {"q": 1}},
            {"input": 5, "output": [1], "description": false}
        ]),
    );
    error(
        &doc,
        "examples[2].input",
        "expected string or object, got number 5",
    );
    error(
        &doc,
        "examples[2].output",
        "expected string or object, got array",
    );
    error(
        &doc,
        "examples[2].description",
        "expected string, got boolean false",
    );
    assert_eq!(validate(&doc).error_count(), 3);
}

#[test]
fn blocks_must_be_objects() {
    for f in ["input", "output", "publisher"] {
        error(
            &set(http(), &[f], json!("text/plain")),
            f,
            "expected object, got string",
        );
    }
}

#[test]
fn input_parameters() {
    error(
        &set(http(), &["input", "parameters"], json!(["q"])),
        "input.parameters",
        "expected object of parameter objects, got array",
    );
    error(
        &set(http(), &["input", "parameters"], json!({"q": "string"})),
        "input.parameters.q",
        "expected object, got string",
    );
    let doc = set(
        http(),
        &["input", "parameters"],
        json!({
            "limit": {"type": "int", "required": "no", "enum": "a", "items": "string", "description": 3},
            "ok": {"type": "integer", "required": false, "enum": [1, 2], "default": 1}
        }),
    );
    error(
        &doc,
        "input.parameters.limit.type",
        "expected one of string, number, integer, boolean, array, object, got \"int\"",
    );
    error(
        &doc,
        "input.parameters.limit.required",
        "expected boolean, got string \"no\"",
    );
    error(
        &doc,
        "input.parameters.limit.enum",
        "expected array, got string \"a\"",
    );
    error(
        &doc,
        "input.parameters.limit.items",
        "expected object (an item schema)",
    );
    error(
        &doc,
        "input.parameters.limit.description",
        "expected string, got number 3",
    );
    assert_eq!(validate(&doc).error_count(), 5);
    error(
        &set(
            http(),
            &["input", "parameters"],
            json!({"": {"type": "string"}}),
        ),
        "input.parameters[\"\"]",
        "must not be empty",
    );
    error(
        &set(
            http(),
            &["output", "parameters"],
            json!({"x": {"type": "date"}}),
        ),
        "output.parameters.x.type",
        "got \"date\"",
    );
}

#[test]
fn optional_string_fields_wrong_type() {
    let fields: &[&[&str]] = &[
        &["version"],
        &["updated"],
        &["usage"],
        &["input", "format"],
        &["input", "description"],
        &["output", "format"],
        &["publisher", "name"],
        &["publisher", "contact"],
    ];
    for path in fields {
        error(
            &set(http(), path, json!(5)),
            &path.join("."),
            "expected string, got number 5",
        );
    }
}

#[test]
fn name_length_cap() {
    clean(&set(http(), &["name"], json!("n".repeat(200))));
    error(
        &set(http(), &["name"], json!("n".repeat(201))),
        "name",
        "too long: 201 characters (maximum 200)",
    );
    // Characters, not bytes.
    clean(&set(http(), &["name"], json!("é".repeat(200))));
}

#[test]
fn description_hard_cap() {
    let r = validate(&set(http(), &["description"], json!("d".repeat(8001))));
    has(
        &r,
        Severity::Error,
        "description",
        "too long: 8001 characters (maximum 8000)",
    );
    assert_eq!(
        r.warning_count(),
        0,
        "hard cap replaces the spec warning:\n{r}"
    );
}

#[test]
fn null_optional_fields_count_as_absent() {
    let doc = set(http(), &["docs"], Value::Null);
    let doc = set(doc, &["invoke", "streaming"], Value::Null);
    clean(&doc);
}

#[test]
fn all_errors_are_reported_at_once() {
    let doc = json!({"oap": "2", "name": 1, "invoke": {"method": "PUT"}});
    let r = validate(&doc);
    for p in ["oap", "name", "description", "invoke.method", "invoke.url"] {
        assert!(r.errors().any(|d| d.path == p), "missing {p}:\n{r}");
    }
}

// ---------- warnings ----------

#[test]
fn description_over_spec_limit_warns() {
    clean(&set(http(), &["description"], json!("d".repeat(1000))));
    warning(
        &set(http(), &["description"], json!("d".repeat(1001))),
        "description",
        "1001 characters, over the spec's 1000-character limit",
    );
}

#[test]
fn missing_input_or_description_warns() {
    warning(&remove(http(), &["input"]), "input", "missing");
    warning(
        &remove(http(), &["input", "description"]),
        "input.description",
        "missing",
    );
    warning(
        &set(http(), &["input", "description"], json!(" ")),
        "input.description",
        "empty",
    );
}

#[test]
fn missing_output_or_description_warns() {
    warning(&remove(http(), &["output"]), "output", "missing");
    warning(
        &remove(http(), &["output", "description"]),
        "output.description",
        "missing",
    );
}

#[test]
fn long_usage_warns() {
    clean(&set(http(), &["usage"], json!("u".repeat(120))));
    warning(
        &set(http(), &["usage"], json!("u".repeat(121))),
        "usage",
        "121 characters, over the 120-character limit",
    );
}

#[test]
fn updated_not_iso8601_warns() {
    warning(
        &set(http(), &["updated"], json!("March 13, 2026")),
        "updated",
        "expected an ISO-8601 date",
    );
    warning(
        &set(http(), &["updated"], json!("2026-02-30")),
        "updated",
        "got \"2026-02-30\"",
    );
    clean(&set(http(), &["updated"], json!("2026-03-13T00:00:00Z")));
    clean(&set(http(), &["updated"], json!("2026-03-13")));
}

#[test]
fn unknown_top_level_field_warns() {
    warning(
        &set(http(), &["registration_url"], json!("https://x.example/")),
        "registration_url",
        "unknown field kept",
    );
    warning(
        &set(http(), &["odd key"], json!(1)),
        "[\"odd key\"]",
        "unknown field kept",
    );
}

#[test]
fn unknown_invoke_field_warns() {
    warning(
        &set(http(), &["invoke", "auth_nmae"], json!("x")),
        "invoke.auth_nmae",
        "unknown field kept",
    );
}

#[test]
fn auth_without_auth_url_warns() {
    let doc = remove(http(), &["invoke", "auth_url"]);
    warning(&doc, "invoke.auth_url", "invoke.auth is \"api_key\"");
    let doc = set(doc, &["invoke", "auth"], json!("bearer"));
    warning(&doc, "invoke.auth_url", "\"bearer\"");
    clean(&set(doc.clone(), &["invoke", "auth"], json!("none")));
    clean(&remove(doc, &["invoke", "auth"]));
}

#[test]
fn secret_looking_header_warns() {
    warning(
        &set(
            http(),
            &["invoke", "headers"],
            json!({"Authorization": "Bearer abc"}),
        ),
        "invoke.headers.Authorization",
        "secrets do not belong",
    );
}

#[test]
fn stdio_has_no_warning() {
    clean(&stdio());
    clean(&set(stdio(), &["invoke", "url"], json!("/usr/bin/jq")));
}

#[test]
fn diagnostic_display_and_report() {
    let r = validate(&json!({"oap": "1.0"}));
    assert!(r.has_errors());
    let first = r.errors().next().expect("an error");
    assert_eq!(
        first.to_string(),
        format!("{}: {}", first.path, first.message)
    );
    let whole = validate(&json!([]));
    assert_eq!(
        whole.diagnostics[0].to_string(),
        whole.diagnostics[0].message,
        "empty path prints the message only"
    );
    assert!(r
        .to_string()
        .lines()
        .all(|l| l.starts_with("error: ") || l.starts_with("warning: ")));
}

// ---------- control characters and credentials ----------

#[test]
fn one_line_fields_refuse_every_control_character() {
    type Base = fn() -> Value;
    let url = "https://example.com/x";
    let fields: &[(Base, &[&str], &str)] = &[
        (http, &["name"], "abc"),
        (http, &["version"], "abc"),
        (http, &["updated"], "2026-03-13"),
        (http, &["publisher", "name"], "abc"),
        (http, &["publisher", "contact"], "abc"),
        (http, &["input", "format"], "text/plain"),
        (http, &["invoke", "url"], url),
        (http, &["invoke", "auth_url"], url),
        (http, &["url"], url),
        (http, &["health"], url),
        (http, &["docs"], url),
        (http, &["publisher", "url"], url),
        (http, &["output", "schema"], url),
        (stdio, &["invoke", "url"], "grep"),
    ];
    for (base, field, ok) in fields {
        let path = field.join(".");
        clean(&set(base(), field, json!(ok)));
        for c in control_characters() {
            let value = format!("{}{c}[31m forged", &ok[..3]);
            let doc = set(base(), field, json!(value));
            error(
                &doc,
                &path,
                &format!("contains a control character ({}) at byte 3", escape(c)),
            );
        }
    }
    for sep in ['\u{2028}', '\u{2029}'] {
        error(
            &set(http(), &["name"], json!(format!("ab{sep}c"))),
            "name",
            &format!("contains a line separator ({}) at byte 2", escape(sep)),
        );
    }
}

#[test]
fn a_forged_log_line_in_a_name_is_refused_and_never_echoed_raw() {
    let doc = set(
        http(),
        &["name"],
        json!("abc\r\n2026-01-01T00:00:00Z  INFO oapd: forged\u{1b}[0m"),
    );
    let report = validate(&doc);
    let d = report.find("name").expect("a name error");
    assert!(d.is_error());
    assert_eq!(d.message, "contains a control character (\\r) at byte 3");
    assert!(!report.to_string().contains(['\r', '\n', '\u{1b}']));
}

#[test]
fn tags_and_parameter_names_refuse_control_characters() {
    error(
        &set(http(), &["tags"], json!(["text", "ok\u{1b}[2J"])),
        "tags[1]",
        "contains a control character (\\u001b) at byte 2",
    );
    error(
        &set(
            http(),
            &["input", "parameters"],
            json!({"q\nx": {"type": "string"}}),
        ),
        "input.parameters[\"q\\nx\"]",
        "parameter name contains a control character (\\n) at byte 1",
    );
    let doc = set(http(), &["invoke", "auth_in"], json!("query"));
    error(
        &set(doc, &["invoke", "auth_name"], json!("key\u{7f}")),
        "invoke.auth_name",
        "contains a control character (\\u007f) at byte 3",
    );
}

#[test]
fn prose_fields_keep_line_breaks_and_tabs_but_refuse_other_controls() {
    let prose: &[&[&str]] = &[
        &["description"],
        &["usage"],
        &["input", "description"],
        &["output", "description"],
    ];
    for field in prose {
        let path = field.join(".");
        let doc = set(http(), field, json!("First line.\r\n\tSecond line.\n"));
        assert!(!validate(&doc).has_errors(), "{path}: {}", validate(&doc));
        for c in control_characters().filter(|c| !matches!(c, '\t' | '\n' | '\r')) {
            let doc = set(http(), field, json!(format!("Line\n{c}[31m")));
            error(
                &doc,
                &path,
                &format!("contains a control character ({}) at byte 5", escape(c)),
            );
        }
    }
    error(
        &set(
            http(),
            &["input", "parameters"],
            json!({"q": {"type": "string", "description": "a\u{1b}b"}}),
        ),
        "input.parameters.q.description",
        "contains a control character (\\u001b) at byte 1",
    );
    error(
        &set(
            http(),
            &["examples"],
            json!([{"input": "x", "description": "a\u{0}b"}]),
        ),
        "examples[0].description",
        "contains a control character (\\u0000) at byte 1",
    );
}

#[test]
fn urls_with_a_user_name_or_password_are_refused_without_echoing_them() {
    let fields: &[&[&str]] = &[
        &["invoke", "url"],
        &["invoke", "auth_url"],
        &["url"],
        &["health"],
        &["docs"],
        &["publisher", "url"],
        &["input", "schema"],
    ];
    let urls = [
        "http://user:s3cr3tpw@example.com/api",
        "https://s3cr3tpw@example.com/",
        "https://user:s3cr3tpw@example.com",
        "HTTPS://user:s3cr3tpw@example.com:8443/x?y=1",
        "http:///user:s3cr3tpw@example.com/",
        "https://a:s3cr3tpw@b@example.com/",
        "https://user:s3cr3tpw@example.com/\n",
        "ftp://user:s3cr3tpw@example.com/",
        "https://user:s3cr3tpw@exa mple.com/",
    ];
    for field in fields {
        let path = field.join(".");
        for url in urls {
            let report = validate(&set(http(), field, json!(url)));
            has(
                &report,
                Severity::Error,
                &path,
                "must not contain a user name or password",
            );
            assert!(!report.to_string().contains("s3cr3tpw"), "{report}");
        }
    }
    // An '@' after the host is not userinfo.
    for ok in [
        "https://example.com/@someone",
        "https://example.com/x?mail=a@b.example",
        "https://example.com/#a@b",
    ] {
        clean(&set(http(), &["invoke", "url"], json!(ok)));
    }
}
