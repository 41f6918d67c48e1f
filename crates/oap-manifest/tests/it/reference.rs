//! Every real manifest under tests/fixtures/reference-manifests must parse
//! (kagi-search must fail on its non-spec `auth: "bot"`), with exactly the
//! expected warnings, and must round-trip losslessly.

use std::collections::BTreeMap;

use crate::common::{reference_dir, reference_files};
use oap_manifest::{parse, ManifestError, Severity};
use serde_json::Value;

fn read_reference(rel: &str) -> Vec<u8> {
    let p = reference_dir().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

const KAGI: &str = "manifest-repo/disabled/kagi-search.json";

/// Expected warning paths per file; every other file must have none.
const EXPECTED_WARNINGS: &[(&str, &[&str])] = &[
    (
        "manifest-repo/alpha-vantage.json",
        &["registration_url", "invoke.auth_url"],
    ),
    (
        "manifest-repo/newsapi-everything.json",
        &["invoke.auth_url"],
    ),
    (
        "manifest-repo/newsapi-top-headlines.json",
        &["invoke.auth_url"],
    ),
    ("manifest-repo/open-meteo.json", &["usage"]),
    ("manifest-repo/serp-shopping.json", &["invoke.auth_url"]),
    ("manifest-repo/spotify-top-tracks-filtered.json", &["usage"]),
    ("manifest-repo/tavily-search.json", &["invoke.auth_url"]),
    ("manifest-repo/wikipedia.json", &["usage"]),
    (
        "oap-dev/alpha-vantage.json",
        &["registration_url", "invoke.auth_url"],
    ),
    (
        "oap-dev/mynewscast.org.json",
        &["geos", "registration_url", "invoke.auth_url"],
    ),
    ("oap-dev/newsapi-everything.json", &["invoke.auth_url"]),
    ("oap-dev/newsapi-top-headlines.json", &["invoke.auth_url"]),
    ("oap-dev/oap-reminder.json", &["usage"]),
    ("oap-dev/open-meteo.json", &["usage"]),
    ("oap-dev/wikipedia.json", &["usage"]),
];

#[test]
fn all_52_reference_manifests_load_as_expected() {
    let files = reference_files();
    assert_eq!(files.len(), 52, "expected 52 reference manifests");
    let expected: BTreeMap<&str, Vec<&str>> = EXPECTED_WARNINGS
        .iter()
        .map(|(f, w)| {
            let mut w = w.to_vec();
            w.sort();
            (*f, w)
        })
        .collect();

    for (rel, bytes) in &files {
        if rel == KAGI {
            match parse(bytes) {
                Err(ManifestError::Invalid(report)) => {
                    let errors: Vec<_> = report.errors().collect();
                    assert_eq!(errors.len(), 1, "{rel}: {report}");
                    assert_eq!(errors[0].path, "invoke.auth");
                    assert_eq!(
                        errors[0].message,
                        "expected one of none, api_key, oauth2, bearer, got \"bot\""
                    );
                }
                other => panic!("{rel}: expected Invalid, got {other:?}"),
            }
            continue;
        }
        let parsed = parse(bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(parsed.warnings.errors().next().is_none());
        assert!(parsed
            .warnings
            .diagnostics
            .iter()
            .all(|d| d.severity == Severity::Warning));
        let mut got: Vec<&str> = parsed
            .warnings
            .diagnostics
            .iter()
            .map(|d| d.path.as_str())
            .collect();
        got.sort();
        let want = expected.get(rel.as_str()).cloned().unwrap_or_default();
        assert_eq!(got, want, "{rel}: warnings were:\n{}", parsed.warnings);
        assert!(parsed.manifest.invoke_kind().is_some(), "{rel}");
    }
}

#[test]
fn reference_warnings_read_well() {
    let p = parse(&read_reference("oap-dev/mynewscast.org.json")).expect("mynewscast");
    let w = p.warnings.find("geos").expect("geos warning");
    assert!(w.message.contains("unknown field kept"), "{w}");
    let w = p
        .warnings
        .find("invoke.auth_url")
        .expect("auth_url warning");
    assert!(w.message.contains("\"api_key\""), "{w}");

    let p = parse(&read_reference("oap-dev/open-meteo.json")).expect("open-meteo");
    let w = p.warnings.find("usage").expect("usage warning");
    assert!(w.message.starts_with("162 characters"), "{w}");
}

#[test]
fn reference_manifests_round_trip_losslessly() {
    for (rel, bytes) in reference_files() {
        if rel == KAGI {
            continue;
        }
        let original: Value = serde_json::from_slice(&bytes).expect("json");
        let parsed = parse(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let back = serde_json::to_value(&parsed.manifest).expect("serialize");
        assert_eq!(back, original, "{rel} did not round-trip");
    }
}

#[test]
fn mynewscast_keeps_unknown_fields_and_parameter_order() {
    let bytes = read_reference("oap-dev/mynewscast.org.json");
    let original: Value = serde_json::from_slice(&bytes).expect("json");
    let m = parse(&bytes).expect("parse").manifest;

    assert_eq!(m.extra["geos"], original["geos"]);
    assert_eq!(
        m.extra["registration_url"],
        "https://mynewscast.org/connect"
    );
    assert_eq!(m.extra.len(), 2);

    let params = m.input_parameters().expect("parameters");
    let want: Vec<&str> = original["input"]["parameters"]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(params.keys().collect::<Vec<_>>(), want);
    assert_eq!(want[..3], ["intent", "geo", "geoScope"]);
    let geo_scope = params.get("geoScope").expect("geoScope");
    assert_eq!(geo_scope.default, Some(Value::from("all")));
    assert_eq!(geo_scope.r#enum.as_ref().map(Vec::len), Some(2));
    assert!(!geo_scope.is_required());
    assert!(params.get("intent").expect("intent").is_required());
    assert_eq!(
        params.get("topics").expect("topics").items,
        Some(serde_json::json!({"type": "string"}))
    );

    // Serialised text uses the JSON names and keeps document order.
    let text = serde_json::to_string(&m).expect("serialize");
    assert!(text.contains("\"type\":\"string\""));
    assert!(text.contains("\"enum\":[\"stories\""));
    let (i, g) = (
        text.find("\"intent\":{").expect("intent"),
        text.find("\"geoScope\":{").expect("geoScope"),
    );
    assert!(i < g);

    let back = serde_json::to_value(&m).expect("to_value");
    assert_eq!(back["geos"], original["geos"]);
    assert_eq!(back["examples"][0]["input"]["intent"], "stories");
    // Absent optional fields are not serialised as null.
    assert!(back.get("usage").is_none());
    assert!(back.get("docs").is_none());
    assert!(back["examples"][0].get("output").is_none());
    assert!(back["invoke"].get("headers").is_none());
    assert!(back["publisher"].get("contact").is_none());
}

#[test]
fn open_library_keeps_invoke_params() {
    let m = parse(&read_reference("manifest-repo/open-library.json"))
        .expect("parse")
        .manifest;
    let params = m.invoke.params.as_ref().expect("invoke.params");
    assert_eq!(params["limit"], 10);
    assert_eq!(
        params["fields"],
        "title,author_name,first_publish_year,subject"
    );
    assert!(m.invoke.extra.is_empty());
    let back = serde_json::to_value(&m).expect("to_value");
    assert_eq!(back["invoke"]["params"]["limit"], 10);
}

#[test]
fn search_fields_grep() {
    let m = parse(&read_reference("oap-dev/grep.json"))
        .expect("parse")
        .manifest;
    let s = m.search_fields();
    assert_eq!(s.name, "grep");
    assert!(s.description.starts_with("Search text for lines matching"));
    assert!(s.tags.is_empty());
    assert_eq!(
        s.usage.as_deref(),
        Some("grep [-E] [-i] [-v] [-c] [-n] PATTERN [FILE...]")
    );
    assert!(s
        .input_description
        .as_deref()
        .is_some_and(|d| d.starts_with("Text to search through")));
    assert!(s
        .output_description
        .as_deref()
        .is_some_and(|d| d.starts_with("Lines from the input")));
    assert!(s.parameters.is_empty());
    assert!(s.example_inputs.is_empty());
    assert!(s.example_descriptions.is_empty());
}

#[test]
fn search_fields_mynewscast() {
    let m = parse(&read_reference("oap-dev/mynewscast.org.json"))
        .expect("parse")
        .manifest;
    let s = m.search_fields();
    assert_eq!(s.name, "mynewscast");
    assert_eq!(
        s.tags,
        [
            "news",
            "civic",
            "government",
            "portland",
            "meetings",
            "health-inspections"
        ]
    );
    assert_eq!(s.usage, None);
    assert_eq!(s.parameters.len(), 14);
    assert_eq!(s.parameters[0].0, "intent");
    assert!(s.parameters[0].1.starts_with("Query type."));
    assert_eq!(s.parameters[13].0, "maxScore");
    assert_eq!(s.example_inputs.len(), 8);
    assert_eq!(
        s.example_inputs[0],
        "intent: stories, geo: portland, daysBack: 7, limit: 10"
    );
    assert_eq!(s.example_inputs[7], "intent: trending");
    assert_eq!(s.example_descriptions.len(), 8);
    assert_eq!(s.example_descriptions[0], "Get current Portland news");
    assert!(s
        .output_description
        .as_deref()
        .is_some_and(|d| d.starts_with("JSON envelope")));
}
