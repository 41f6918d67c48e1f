//! parse(): limits, JSON errors, error rendering, typed access, helpers.

use crate::common::grep_stdio as minimal;
use oap_manifest::{
    content_hash, lint_text, parse, slug, AuthIn, AuthKind, InvokeKind, ManifestError, Severity,
    MAX_JSON_DEPTH, MAX_MANIFEST_BYTES,
};
use serde_json::{json, Value};

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).expect("serialize")
}

#[test]
fn parses_minimal_without_warnings() {
    let p = parse(&bytes(&minimal())).expect("parse");
    assert!(p.warnings.is_empty(), "{}", p.warnings);
    assert_eq!(p.manifest.name, "grep");
    assert_eq!(p.manifest.invoke_kind(), Some(InvokeKind::Stdio));
    assert!(p.manifest.extra.is_empty());
}

#[test]
fn malformed_json_reports_line_and_column() {
    let text = "{\n  \"oap\": \"1.0\",\n  \"name\": ,\n}";
    match parse(text.as_bytes()) {
        Err(ManifestError::Json {
            line,
            column,
            message,
        }) => {
            assert_eq!((line, column), (3, 11));
            assert!(!message.contains("at line"), "{message}");
            assert!(!message.is_empty());
        }
        other => panic!("expected Json error, got {other:?}"),
    }
    let err = parse(b"{\"oap\": \"1.0\"} trailing").expect_err("trailing characters");
    assert!(
        matches!(err, ManifestError::Json { line: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("invalid JSON at line 1, column "),
        "{err}"
    );

    let err = parse(b"").expect_err("empty");
    assert!(matches!(err, ManifestError::Json { .. }), "{err:?}");

    let err = parse(b"{\"name\": \"\xff\"}").expect_err("bad utf-8");
    assert!(
        matches!(err, ManifestError::Json { line: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn oversize_input_is_refused() {
    let mut doc = minimal();
    doc["padding"] = json!("x".repeat(MAX_MANIFEST_BYTES));
    let b = bytes(&doc);
    match parse(&b) {
        Err(ManifestError::TooLarge { size, max }) => {
            assert_eq!(size, b.len());
            assert_eq!(max, 64 * 1024);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // Refused before parsing: even garbage of that size gives TooLarge.
    let err = parse(&vec![b'{'; MAX_MANIFEST_BYTES + 1]).expect_err("too large");
    assert!(
        err.to_string().contains("over the 65536-byte limit"),
        "{err}"
    );
}

#[test]
fn input_at_the_size_limit_is_accepted() {
    let mut b = bytes(&minimal());
    b.resize(MAX_MANIFEST_BYTES, b' ');
    assert_eq!(b.len(), MAX_MANIFEST_BYTES);
    parse(&b).expect("exactly at the limit");
}

fn nested(levels: usize) -> String {
    // Top-level object is level 1, so the extra field adds `levels - 1`.
    let mut doc = bytes(&minimal());
    doc.pop(); // '}'
    let mut s = String::from_utf8(doc).expect("utf8");
    s.push_str(",\n\"deep\": ");
    s.push_str(&"[".repeat(levels - 1));
    s.push_str(&"]".repeat(levels - 1));
    s.push('}');
    s
}

#[test]
fn over_deep_input_is_refused() {
    let ok = parse(nested(MAX_JSON_DEPTH).as_bytes()).expect("at depth limit");
    assert!(ok.warnings.find("deep").is_some());

    match parse(nested(MAX_JSON_DEPTH + 1).as_bytes()) {
        Err(ManifestError::TooDeep { max, line, column }) => {
            assert_eq!(max, 32);
            assert_eq!(line, 18, "the `deep` line");
            assert!(column > 8);
        }
        other => panic!("expected TooDeep, got {other:?}"),
    }
    // Far deeper than serde_json's own recursion limit: still our clean error.
    let err = parse("[".repeat(10_000).as_bytes()).expect_err("deep");
    assert!(
        matches!(
            err,
            ManifestError::TooDeep {
                line: 1,
                column: 33,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("nested deeper than 32 levels"),
        "{err}"
    );
}

#[test]
fn brackets_inside_strings_do_not_count_as_depth() {
    let mut doc = minimal();
    doc["description"] = json!(format!("{} text", "[{".repeat(100)));
    parse(&bytes(&doc)).expect("brackets in strings are fine");
}

#[test]
fn invalid_manifest_lists_every_error() {
    let mut doc = minimal();
    doc["oap"] = json!("2.0");
    doc["invoke"]["method"] = json!("PUT");
    doc["bonus"] = json!(1);
    let err = parse(&bytes(&doc)).expect_err("invalid");
    let text = err.to_string();
    assert!(text.starts_with("invalid manifest: 2 errors"), "{text}");
    assert!(
        text.contains("\n  oap: expected a \"1.x\" version string, got \"2.0\""),
        "{text}"
    );
    assert!(
        text.contains("\n  invoke.method: expected GET, POST or stdio, got \"PUT\""),
        "{text}"
    );
    assert!(
        !text.contains("bonus"),
        "warnings are not part of the error text"
    );
    let ManifestError::Invalid(report) = &err else {
        panic!("expected Invalid");
    };
    assert_eq!(report.error_count(), 2);
    assert_eq!(report.warning_count(), 1, "the full report keeps warnings");

    let mut one = minimal();
    one["name"] = json!(5);
    let text = parse(&bytes(&one)).expect_err("invalid").to_string();
    assert!(text.starts_with("invalid manifest: 1 error\n"), "{text}");
}

#[test]
fn lint_text_format() {
    let mut doc = minimal();
    doc["invoke"]["method"] = json!("PUT");
    doc["usage"] = json!("u".repeat(130));
    let err = parse(&bytes(&doc)).expect_err("invalid");
    let text = lint_text("grep.json", &err.report());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "grep.json: error: invoke.method: expected GET, POST or stdio, got \"PUT\"",
            "grep.json: warning: usage: 130 characters, over the 120-character limit for a one-line synopsis",
        ]
    );
    assert!(text.ends_with('\n'));

    let err = parse(b"{").expect_err("json");
    let text = lint_text("x.json", &err.report());
    assert!(
        text.starts_with("x.json: error: invalid JSON at line 1, column 1"),
        "{text}"
    );

    assert_eq!(
        lint_text("ok.json", &parse(&bytes(&minimal())).expect("ok").warnings),
        ""
    );
}

#[test]
fn parse_returns_only_warnings() {
    let mut doc = minimal();
    doc.as_object_mut().expect("object").remove("output");
    let p = parse(&bytes(&doc)).expect("parse");
    assert_eq!(p.warnings.diagnostics.len(), 1);
    assert_eq!(p.warnings.diagnostics[0].severity, Severity::Warning);
    assert_eq!(p.warnings.diagnostics[0].path, "output");
    assert!(p.manifest.output.is_none());
}

#[test]
fn utf8_bom_is_tolerated_with_a_warning() {
    let mut b = b"\xEF\xBB\xBF".to_vec();
    b.extend(bytes(&minimal()));
    let p = parse(&b).expect("bom");
    let w = p.warnings.find("").expect("bom warning");
    assert!(w.message.contains("byte order mark"));
}

#[test]
fn examples_with_string_and_object_inputs() {
    let mut doc = minimal();
    doc["examples"] = json!([
        {"input": "echo 'hello world' | grep hello", "output": "hello world", "description": "Simple match"},
        {"input": {"pattern": "err", "flags": ["-i", "-n"], "opts": {"max": 3}}, "output": {"count": 2}},
        {"description": "   "},
        {"input": "", "x-note": "kept"}
    ]);
    let m = parse(&bytes(&doc)).expect("parse").manifest;
    assert_eq!(m.examples.len(), 4);
    assert_eq!(
        m.examples[0].input,
        Some(json!("echo 'hello world' | grep hello"))
    );
    assert!(m.examples[1].input.as_ref().is_some_and(Value::is_object));
    assert_eq!(m.examples[1].output, Some(json!({"count": 2})));
    assert_eq!(m.examples[3].extra["x-note"], "kept");

    let s = m.search_fields();
    assert_eq!(
        s.example_inputs,
        [
            "echo 'hello world' | grep hello",
            "pattern: err, flags: [-i, -n], opts: {max: 3}"
        ]
    );
    assert_eq!(s.example_descriptions, ["Simple match"]);
}

#[test]
fn unknown_fields_round_trip_without_added_nulls() {
    let mut doc = minimal();
    doc["x-custom"] = json!({"a": [1, null]});
    doc["invoke"]["x-inv"] = json!(true);
    doc["input"]["x-in"] = json!("y");
    doc["publisher"] = json!({"name": "me", "x-pub": 1});
    // null optional fields are treated as absent (and not written back)
    for f in ["docs", "tags", "examples", "usage"] {
        doc[f] = Value::Null;
    }
    doc["input"]["parameters"] = Value::Null;
    let p = parse(&bytes(&doc)).expect("parse");
    assert!(p.manifest.tags.is_empty() && p.manifest.examples.is_empty());
    let back = serde_json::to_value(&p.manifest).expect("to_value");
    for f in ["docs", "tags", "examples", "usage"] {
        doc.as_object_mut().expect("object").remove(f);
    }
    doc["input"]
        .as_object_mut()
        .expect("object")
        .remove("parameters");
    assert_eq!(back, doc);
}

/// Found by the `manifest` fuzz target: a number with more digits than an
/// f64 holds (here a 121-digit integer in an example) was parsed one unit
/// in the last place off, so writing the manifest back (the index stores
/// it as JSON) and reading it again gave another number. Parsing is
/// correctly rounded now (serde_json's `float_roundtrip`).
#[test]
fn long_numbers_survive_a_round_trip_unchanged() {
    let long = format!("{}0", "1".repeat(120));
    for number in [
        long.as_str(),
        "0.30000000000000004441",
        "2.2250738585072011e-308",
    ] {
        let mut text = bytes(&minimal());
        let doc = String::from_utf8(text.clone()).expect("utf-8");
        let with_example = doc.replacen(
            "{",
            &format!("{{\"examples\": [{{\"input\": {{\"limit\": {number}}}}}],"),
            1,
        );
        text = with_example.into_bytes();
        let first = parse(&text).expect("parse").manifest;
        let again = parse(&serde_json::to_vec(&first).expect("serialise"))
            .expect("re-parse")
            .manifest;
        assert_eq!(again, first, "{number}");
        let parsed: f64 = number.parse().expect("a number");
        assert_eq!(
            first.examples[0].input.as_ref().expect("input")["limit"].as_f64(),
            Some(parsed),
            "{number} is read as the nearest f64"
        );
    }
}

#[test]
fn invoke_kind_and_auth_helpers() {
    assert_eq!(InvokeKind::parse("get"), Some(InvokeKind::Get));
    assert_eq!(InvokeKind::parse("PoSt"), Some(InvokeKind::Post));
    assert_eq!(InvokeKind::parse("Stdio"), Some(InvokeKind::Stdio));
    assert_eq!(InvokeKind::parse("PUT"), None);
    assert_eq!("GET".parse::<InvokeKind>(), Ok(InvokeKind::Get));
    assert!("put".parse::<InvokeKind>().is_err());
    assert_eq!(InvokeKind::Stdio.to_string(), "stdio");
    assert!(InvokeKind::Get.is_http() && !InvokeKind::Stdio.is_http());

    let mut doc = minimal();
    doc["invoke"] = json!({"method": "get", "url": "https://api.example.com/x", "auth": "bearer"});
    let m = parse(&bytes(&doc)).expect("parse").manifest;
    assert_eq!(m.invoke_kind(), Some(InvokeKind::Get));
    assert_eq!(m.invoke.method, "get", "method is kept as written");
    assert_eq!(m.invoke.auth_kind(), Some(AuthKind::Bearer));
    assert_eq!(m.invoke.auth_location(), Some(AuthIn::Header));
    assert_eq!(m.invoke.auth_param_name(), Some("Authorization"));

    doc["invoke"]["auth"] = json!("api_key");
    doc["invoke"]["auth_in"] = json!("query");
    let m = parse(&bytes(&doc)).expect("parse").manifest;
    assert_eq!(m.invoke.auth_location(), Some(AuthIn::Query));
    assert_eq!(m.invoke.auth_param_name(), Some("X-API-Key"));

    doc["invoke"]["auth_name"] = json!("apikey");
    let m = parse(&bytes(&doc)).expect("parse").manifest;
    assert_eq!(m.invoke.auth_param_name(), Some("apikey"));

    let m = parse(&bytes(&minimal())).expect("parse").manifest;
    assert_eq!(m.invoke.auth_kind(), Some(AuthKind::None));
    assert_eq!(m.invoke.auth_param_name(), None);
}

#[test]
fn slug_cases() {
    assert_eq!(slug("Fingerstring Reminders"), "fingerstring-reminders");
    assert_eq!(slug("usgs-earthquake"), "usgs-earthquake");
    assert_eq!(slug("Ünïcode Tool"), "n-code-tool");
    assert_eq!(slug("!!!"), "unnamed");
    assert_eq!(slug(""), "unnamed");
    assert_eq!(
        slug("myNewscast Meeting Processor"),
        "mynewscast-meeting-processor"
    );
    assert_eq!(slug("  --oap__email--  "), "oap-email");
    assert_eq!(slug("mynewscast.org"), "mynewscast-org");
    assert_eq!(slug("GPT-4o v2"), "gpt-4o-v2");
}

#[test]
fn content_hash_is_sha256_hex_of_raw_bytes() {
    assert_eq!(
        content_hash(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        content_hash(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Formatting changes are changes.
    assert_ne!(content_hash(b"{\"a\":1}"), content_hash(b"{\"a\": 1}"));
}

/// Validation and typed decoding must agree: whatever value any field gets,
/// `parse_value` either succeeds or reports located errors, and never falls
/// back to the generic "could not decode" diagnostic.
#[test]
fn validation_covers_everything_decoding_needs() {
    let full = json!({
        "oap": "1.0",
        "name": "full",
        "description": "Every field.",
        "url": "https://example.com/",
        "input": {
            "format": "application/json",
            "description": "in",
            "schema": "https://example.com/in.json",
            "parameters": {"q": {"type": "string", "description": "d", "required": true,
                                  "enum": ["a"], "default": "a", "items": {"type": "string"}}}
        },
        "output": {"format": "application/json", "description": "out", "schema": "https://example.com/out.json"},
        "invoke": {"method": "GET", "url": "https://example.com/api", "auth": "bearer",
                   "auth_url": "https://example.com/keys", "auth_in": "header", "auth_name": "Authorization",
                   "headers": {"X-V": "1"}, "streaming": false, "params": {"k": "v"}},
        "publisher": {"name": "p", "contact": "p@example.com", "url": "https://example.com/"},
        "examples": [{"input": "x", "output": {"y": 1}, "description": "e"}],
        "tags": ["t"],
        "health": "https://example.com/health",
        "docs": "https://example.com/docs",
        "version": "1.0.0",
        "updated": "2026-03-13",
        "usage": "full [ARGS]"
    });
    oap_manifest::parse_value(full.clone()).expect("full manifest is valid");

    fn paths(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    prefix.push(k.clone());
                    out.push(prefix.clone());
                    paths(c, prefix, out);
                    prefix.pop();
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    prefix.push(i.to_string());
                    out.push(prefix.clone());
                    paths(c, prefix, out);
                    prefix.pop();
                }
            }
            _ => {}
        }
    }
    let mut all = Vec::new();
    paths(&full, &mut Vec::new(), &mut all);
    let replacements = [
        Value::Null,
        json!(true),
        json!(7),
        json!(-1.5),
        json!(""),
        json!("GET"),
        json!([]),
        json!(["s", 1]),
        json!({}),
        json!({"k": null}),
    ];
    let mut checked = 0;
    for path in &all {
        for r in &replacements {
            let mut doc = full.clone();
            let mut cur = &mut doc;
            for seg in path {
                cur = match cur {
                    Value::Array(a) => &mut a[seg.parse::<usize>().expect("index")],
                    other => &mut other[seg.as_str()],
                };
            }
            *cur = r.clone();
            if let Err(ManifestError::Invalid(report)) = oap_manifest::parse_value(doc) {
                assert!(
                    report.has_errors(),
                    "{path:?} = {r}: Invalid without errors"
                );
                assert!(
                    !report.to_string().contains("could not decode"),
                    "{path:?} = {r}: validation missed a decode failure:\n{report}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 400, "{checked}");
}
