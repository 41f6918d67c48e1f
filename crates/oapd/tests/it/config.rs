//! Behaviour of `oapd::config`: defaults, the YAML file, environment overrides,
//! error messages and validation.

use std::path::{Path, PathBuf};

use oapd::harness::{
    Config, ConfigError, DiscoveryMode, EmbeddingWeights, Loaded, LogFormat, UrlPolicy,
    VectorDtype, MAX_CONFIG_FILE_BYTES,
};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn yaml(text: &str) -> Result<Loaded, ConfigError> {
    Config::from_yaml_str(text, env(&[]))
}

fn yaml_env(text: &str, pairs: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    Config::from_yaml_str(text, env(pairs))
}

fn ok(result: Result<Loaded, ConfigError>) -> Config {
    match result {
        Ok(loaded) => loaded.config,
        Err(e) => panic!("expected success, got error: {e}"),
    }
}

fn err(result: Result<Loaded, ConfigError>) -> ConfigError {
    match result {
        Ok(loaded) => panic!("expected an error, got {:?}", loaded.config),
        Err(e) => e,
    }
}

fn write_file(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write test file");
    path
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.example.yaml")
}

const FULL_YAML: &str = r#"
server:
  listen: ["0.0.0.0:9000", "[::1]:9001"]
  max_body_bytes: 2097152
  max_task_bytes: 5000
  request_timeout: 60
  header_read_timeout: 5
  max_connections: 64
  auth_token: "0123456789abcdefXYZ"
  cors_origins: ["https://app.example", "http://localhost:3000"]
index:
  data_dir: /var/lib/oapd
  vector_dtype: i8
  search_threads: 2
embedding:
  enabled: false
  model_dir: /opt/models/minilm
  max_tokens: 128
  batch_size: 8
  threads: 3
manifests:
  bundled: false
  dirs: [/etc/oapd/manifests, /srv/manifests]
discovery:
  default_top_k: 4
  max_top_k: 10
  min_score: 0.35
  mode: lexical
tool_bridge:
  enabled: false
  default_top_k: 6
  max_rounds: 7
  http_timeout: 45
  stdio_timeout: 20
ollama:
  base_url: https://ollama.lan:8443/prefix
log:
  level: "info,oapd=debug"
  format: json
"#;

// --- defaults -----------------------------------------------------------------

#[test]
fn defaults_are_the_documented_values() {
    let c = Config::default();
    assert_eq!(c.server.listen, vec!["127.0.0.1:8300"]);
    assert_eq!(c.server.max_body_bytes, 1024 * 1024);
    assert_eq!(c.server.max_task_bytes, 10_000);
    assert_eq!(c.server.request_timeout, 30);
    assert_eq!(c.server.header_read_timeout, 10);
    assert_eq!(c.server.max_connections, 256);
    assert_eq!(c.server.auth_token, None);
    assert!(c.server.cors_origins.is_empty());
    assert_eq!(c.index.data_dir, PathBuf::from("./data"));
    assert_eq!(c.index.vector_dtype, VectorDtype::F32);
    assert_eq!(c.index.search_threads, None);
    assert!(c.embedding.enabled);
    assert_eq!(
        c.embedding.model_dir,
        PathBuf::from("models/all-MiniLM-L6-v2")
    );
    assert_eq!(c.embedding.max_tokens, 256);
    assert_eq!(c.embedding.batch_size, 16);
    assert_eq!(c.embedding.threads, None);
    assert_eq!(c.embedding.weights, EmbeddingWeights::Bf16);
    assert!(c.embedding.tool_tuning);
    assert!(c.manifests.bundled);
    assert!(c.manifests.dirs.is_empty());
    assert_eq!(c.discovery.default_top_k, 5);
    assert_eq!(c.discovery.max_top_k, 20);
    assert_eq!(c.discovery.min_score, None);
    assert_eq!(c.discovery.mode, DiscoveryMode::Hybrid);
    assert!(c.tool_bridge.enabled);
    assert_eq!(c.tool_bridge.default_top_k, 3);
    assert_eq!(c.tool_bridge.max_rounds, 3);
    assert_eq!(c.tool_bridge.http_timeout, 30);
    assert_eq!(c.tool_bridge.stdio_timeout, 10);
    assert_eq!(c.ollama.base_url, "http://127.0.0.1:11434");
    assert_eq!(c.log.level, "info");
    assert_eq!(c.log.format, LogFormat::Text);
}

#[test]
fn no_file_and_no_env_gives_defaults() {
    let loaded = Config::load(None, env(&[])).expect("defaults load");
    assert_eq!(loaded.config, Config::default());
    assert!(loaded.file.is_none());
    assert!(loaded.env_overrides.is_empty());
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn empty_comment_only_and_null_documents_give_defaults() {
    for text in ["", "\n\n", "# nothing here\n", "~\n", "---\n", "null"] {
        assert_eq!(ok(yaml(text)), Config::default(), "document {text:?}");
    }
}

#[test]
fn empty_sections_give_section_defaults() {
    let c = ok(yaml("server:\ntool_bridge:\nlog: ~\n"));
    assert_eq!(c, Config::default());
}

// --- the file -----------------------------------------------------------------

#[test]
fn full_file_sets_every_key() {
    let c = ok(yaml(FULL_YAML));
    assert_eq!(c.server.listen, vec!["0.0.0.0:9000", "[::1]:9001"]);
    assert_eq!(c.server.max_body_bytes, 2 * 1024 * 1024);
    assert_eq!(c.server.max_task_bytes, 5000);
    assert_eq!(c.server.request_timeout, 60);
    assert_eq!(c.server.header_read_timeout, 5);
    assert_eq!(c.server.max_connections, 64);
    assert_eq!(c.server.auth_token.as_deref(), Some("0123456789abcdefXYZ"));
    assert_eq!(
        c.server.cors_origins,
        vec!["https://app.example", "http://localhost:3000"]
    );
    assert_eq!(c.index.data_dir, PathBuf::from("/var/lib/oapd"));
    assert_eq!(c.index.vector_dtype, VectorDtype::I8);
    assert_eq!(c.index.search_threads, Some(2));
    assert!(!c.embedding.enabled);
    assert_eq!(c.embedding.model_dir, PathBuf::from("/opt/models/minilm"));
    assert_eq!(c.embedding.max_tokens, 128);
    assert_eq!(c.embedding.batch_size, 8);
    assert_eq!(c.embedding.threads, Some(3));
    assert!(!c.manifests.bundled);
    assert_eq!(
        c.manifests.dirs,
        vec![
            PathBuf::from("/etc/oapd/manifests"),
            PathBuf::from("/srv/manifests")
        ]
    );
    assert_eq!(c.discovery.default_top_k, 4);
    assert_eq!(c.discovery.max_top_k, 10);
    assert_eq!(c.discovery.min_score, Some(0.35));
    assert_eq!(c.discovery.mode, DiscoveryMode::Lexical);
    assert!(!c.tool_bridge.enabled);
    assert_eq!(c.tool_bridge.default_top_k, 6);
    assert_eq!(c.tool_bridge.max_rounds, 7);
    assert_eq!(c.tool_bridge.http_timeout, 45);
    assert_eq!(c.tool_bridge.stdio_timeout, 20);
    assert_eq!(c.ollama.base_url, "https://ollama.lan:8443/prefix");
    assert_eq!(
        c.ollama.endpoint("/api/chat"),
        "https://ollama.lan:8443/prefix/api/chat"
    );
    assert_eq!(c.log.level, "info,oapd=debug");
    assert_eq!(c.log.format, LogFormat::Json);
}

#[test]
fn full_file_loads_from_disk_and_reports_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "config.yaml", FULL_YAML.as_bytes());
    let loaded = Config::load(Some(&path), env(&[])).expect("load");
    assert_eq!(loaded.config, ok(yaml(FULL_YAML)));
    assert_eq!(loaded.file.as_deref(), Some(path.as_path()));
}

#[test]
fn partial_file_keeps_other_defaults() {
    let c = ok(yaml("tool_bridge:\n  max_rounds: 5\n"));
    assert_eq!(c.tool_bridge.max_rounds, 5);
    let mut expected = Config::default();
    expected.tool_bridge.max_rounds = 5;
    assert_eq!(c, expected);
}

#[test]
fn strings_that_look_like_numbers_stay_verbatim() {
    let c = ok(yaml(
        "server:\n  auth_token: 00123456789012345\nlog:\n  level: debug\n",
    ));
    assert_eq!(c.server.auth_token.as_deref(), Some("00123456789012345"));
}

#[test]
fn a_single_string_is_a_one_element_list() {
    let c = ok(yaml(
        "server:\n  listen: \"0.0.0.0:8300\"\n  auth_token: a-long-enough-token-1234\nmanifests:\n  dirs: /srv/m\n",
    ));
    assert_eq!(c.server.listen, vec!["0.0.0.0:8300"]);
    assert_eq!(c.manifests.dirs, vec![PathBuf::from("/srv/m")]);
}

#[test]
fn yaml_booleans_and_nulls() {
    let c = ok(yaml(
        "embedding:\n  enabled: no\n  threads: ~\ndiscovery:\n  mode: lexical\nindex:\n  search_threads:\n",
    ));
    assert!(!c.embedding.enabled);
    assert_eq!(c.embedding.threads, None);
    assert_eq!(c.index.search_threads, None);
}

#[test]
fn seed_example_block_parses() {
    // Verbatim from the tool-bridge document.
    let seed = r#"
tool_bridge:
  enabled: true         # Enable /v1/tools and /v1/chat endpoints
  default_top_k: 3      # Default number of manifests to discover per request
  max_rounds: 3         # Maximum tool-call loop iterations
  http_timeout: 30      # Timeout (seconds) for HTTP tool execution
  stdio_timeout: 10     # Timeout (seconds) for stdio tool execution
"#;
    let c = ok(yaml(seed));
    assert_eq!(c, Config::default());
    let c = ok(yaml(&seed.replace("max_rounds: 3", "max_rounds: 5")));
    assert_eq!(c.tool_bridge.max_rounds, 5);
}

#[test]
fn example_file_loads_and_equals_defaults() {
    let loaded = Config::load(Some(&example_path()), env(&[])).expect("example loads");
    assert_eq!(loaded.config, Config::default());
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn example_file_spells_out_every_key() {
    let text = std::fs::read_to_string(example_path()).expect("read example");
    let doc: serde_json::Value = serde_saphyr::from_str(&text).expect("example parses");
    let defaults = serde_json::to_value(Config::default()).expect("serialize");
    let (doc, defaults) = (
        doc.as_object().expect("mapping"),
        defaults.as_object().expect("object"),
    );
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        defaults.keys().collect::<Vec<_>>()
    );
    for (section, keys) in defaults {
        let want: Vec<&String> = keys.as_object().expect("section").keys().collect();
        let have: Vec<&String> = doc[section]
            .as_object()
            .unwrap_or_else(|| panic!("section {section} is not a mapping"))
            .keys()
            .collect();
        assert_eq!(have, want, "keys of section {section}");
    }
    // Every key is documented by a comment somewhere above it.
    assert!(
        text.lines()
            .filter(|l| l.trim_start().starts_with('#'))
            .count()
            > 30
    );
}

#[test]
fn effective_yaml_round_trips_and_redacts_the_token() {
    let mut config = ok(yaml(FULL_YAML));
    let shown = config.effective_yaml();
    assert!(!shown.contains("0123456789abcdefXYZ"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    let back = ok(yaml(&shown));
    config.server.auth_token = Some("<redacted>".to_owned());
    assert_eq!(back, config);

    let defaults = Config::default().effective_yaml();
    assert_eq!(ok(yaml(&defaults)), Config::default(), "{defaults}");
}

#[test]
fn debug_output_hides_the_token() {
    let config = ok(yaml(FULL_YAML));
    let debug = format!("{config:?}");
    assert!(!debug.contains("0123456789abcdefXYZ"));
    assert!(debug.contains("<redacted>"));
}

// --- environment ----------------------------------------------------------------

#[test]
fn env_overrides_the_file() {
    let loaded = yaml_env(
        FULL_YAML,
        &[
            ("OAP_TOOL_BRIDGE_MAX_ROUNDS", "9"),
            ("OAP_INDEX_VECTOR_DTYPE", "f32"),
        ],
    )
    .expect("load");
    assert_eq!(loaded.config.tool_bridge.max_rounds, 9);
    assert_eq!(loaded.config.index.vector_dtype, VectorDtype::F32);
    // Keys not overridden keep the file's values.
    assert_eq!(loaded.config.tool_bridge.http_timeout, 45);
    let overridden: Vec<(&str, &str)> = loaded
        .env_overrides
        .iter()
        .map(|o| (o.var.as_str(), o.key.as_str()))
        .collect();
    assert_eq!(
        overridden,
        vec![
            ("OAP_INDEX_VECTOR_DTYPE", "index.vector_dtype"),
            ("OAP_TOOL_BRIDGE_MAX_ROUNDS", "tool_bridge.max_rounds"),
        ]
    );
}

#[test]
fn env_override_of_a_key_absent_from_the_file_applies() {
    // The reference implementation crashed here: the file has the section but not
    // the key the environment overrides.
    let file = "tool_bridge:\n  enabled: true\n";
    let c = ok(yaml_env(
        file,
        &[
            ("OAP_TOOL_BRIDGE_DEFAULT_TOP_K", "5"),
            ("OAP_TOOL_BRIDGE_STDIO_TIMEOUT", "15"),
        ],
    ));
    assert_eq!(c.tool_bridge.default_top_k, 5);
    assert_eq!(c.tool_bridge.stdio_timeout, 15);
    assert!(c.tool_bridge.enabled);
}

#[test]
fn env_override_applies_when_the_section_is_missing_or_empty() {
    for file in [
        "server:\n  max_connections: 10\n",
        "tool_bridge:\n",
        "tool_bridge: ~\n",
        "",
    ] {
        let c = ok(yaml_env(
            file,
            &[
                ("OAP_TOOL_BRIDGE_MAX_ROUNDS", "4"),
                ("OAP_TOOL_BRIDGE_HTTP_TIMEOUT", "60"),
            ],
        ));
        assert_eq!(c.tool_bridge.max_rounds, 4, "file {file:?}");
        assert_eq!(c.tool_bridge.http_timeout, 60, "file {file:?}");
        assert_eq!(c.tool_bridge.default_top_k, 3, "file {file:?}");
    }
}

#[test]
fn env_applies_without_a_file() {
    let loaded = Config::load(
        None,
        env(&[
            ("OAP_SERVER_LISTEN", "0.0.0.0:8300,[::1]:8300"),
            ("OAP_SERVER_AUTH_TOKEN", "s3cret-token-0123456789"),
        ]),
    )
    .expect("load");
    assert_eq!(
        loaded.config.server.listen,
        vec!["0.0.0.0:8300", "[::1]:8300"]
    );
    assert_eq!(
        loaded.config.server.auth_token.as_deref(),
        Some("s3cret-token-0123456789")
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn env_bool_forms() {
    for (raw, want) in [
        ("true", true),
        ("TRUE", true),
        ("1", true),
        ("yes", true),
        ("Yes", true),
        ("false", false),
        ("False", false),
        ("0", false),
        ("no", false),
        ("NO", false),
    ] {
        let c = ok(yaml_env("", &[("OAP_TOOL_BRIDGE_ENABLED", raw)]));
        assert_eq!(c.tool_bridge.enabled, want, "{raw}");
    }
    for raw in ["", "maybe", "on", "2", " true"] {
        let e = err(yaml_env("", &[("OAP_EMBEDDING_ENABLED", raw)]));
        assert_eq!(
            e.to_string(),
            format!(
                "OAP_EMBEDDING_ENABLED: expected a boolean (true/false/1/0/yes/no), got {raw:?}"
            )
        );
    }
}

#[test]
fn env_integers_parse_strictly() {
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_TOOL_BRIDGE_DEFAULT_TOP_K", "5"),
            ("OAP_SERVER_MAX_BODY_BYTES", "2097152"),
        ],
    ));
    assert_eq!(c.tool_bridge.default_top_k, 5);
    assert_eq!(c.server.max_body_bytes, 2_097_152);

    let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", "x")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_TOOL_BRIDGE_MAX_ROUNDS: expected an integer, got "x""#
    );
    for raw in ["", " 5", "5 ", "+5", "5.0", "0x10", "1_000", "five"] {
        let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", raw)]));
        assert!(
            e.to_string()
                .starts_with("OAP_TOOL_BRIDGE_MAX_ROUNDS: expected an integer, got"),
            "{raw:?}: {e}"
        );
    }
    let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", "-1")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_TOOL_BRIDGE_MAX_ROUNDS: expected a non-negative integer, got "-1""#
    );
    let e = err(yaml_env(
        "",
        &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", "4294967296")],
    ));
    assert_eq!(
        e.to_string(),
        r#"OAP_TOOL_BRIDGE_MAX_ROUNDS: integer out of range (max 4294967295), got "4294967296""#
    );
}

#[test]
fn env_float() {
    let c = ok(yaml_env("", &[("OAP_DISCOVERY_MIN_SCORE", "0.42")]));
    assert_eq!(c.discovery.min_score, Some(0.42));
    let c = ok(yaml_env("", &[("OAP_DISCOVERY_MIN_SCORE", "-1")]));
    assert_eq!(c.discovery.min_score, Some(-1.0));
    // An empty value unsets the optional threshold (the engine's default applies).
    let c = ok(yaml_env(
        "discovery:\n  min_score: 0.5\n",
        &[("OAP_DISCOVERY_MIN_SCORE", "")],
    ));
    assert_eq!(c.discovery.min_score, None);
    for raw in ["NaN", "inf", "abc"] {
        let e = err(yaml_env("", &[("OAP_DISCOVERY_MIN_SCORE", raw)]));
        assert!(
            e.to_string()
                .starts_with("OAP_DISCOVERY_MIN_SCORE: expected a finite number"),
            "{raw}: {e}"
        );
    }
}

#[test]
fn env_lists_are_comma_separated() {
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_SERVER_LISTEN", "0.0.0.0:8300, [::1]:8300"),
            (
                "OAP_SERVER_CORS_ORIGINS",
                "https://a.example,https://b.example",
            ),
            ("OAP_MANIFESTS_DIRS", "/etc/oapd/manifests"),
        ],
    ));
    assert_eq!(c.server.listen, vec!["0.0.0.0:8300", "[::1]:8300"]);
    assert_eq!(
        c.server.cors_origins,
        vec!["https://a.example", "https://b.example"]
    );
    assert_eq!(c.manifests.dirs, vec![PathBuf::from("/etc/oapd/manifests")]);

    // An empty value is an empty list, even over a non-empty file value.
    let c = ok(yaml_env(
        "server:\n  cors_origins: [\"https://a.example\"]\nmanifests:\n  dirs: [/x]\n",
        &[("OAP_SERVER_CORS_ORIGINS", ""), ("OAP_MANIFESTS_DIRS", "")],
    ));
    assert!(c.server.cors_origins.is_empty());
    assert!(c.manifests.dirs.is_empty());

    let e = err(yaml_env("", &[("OAP_MANIFESTS_DIRS", "/a,,/b")]));
    assert!(
        e.to_string()
            .starts_with("OAP_MANIFESTS_DIRS: item 2 of the comma-separated list is empty"),
        "{e}"
    );
}

#[test]
fn env_empty_option_is_none() {
    let file = "server:\n  auth_token: a-long-enough-token-1234\nindex:\n  search_threads: 4\n";
    let c = ok(yaml_env(file, &[]));
    assert_eq!(
        c.server.auth_token.as_deref(),
        Some("a-long-enough-token-1234")
    );
    assert_eq!(c.index.search_threads, Some(4));
    let c = ok(yaml_env(
        file,
        &[
            ("OAP_SERVER_AUTH_TOKEN", ""),
            ("OAP_INDEX_SEARCH_THREADS", ""),
            ("OAP_EMBEDDING_THREADS", "2"),
        ],
    ));
    assert_eq!(c.server.auth_token, None);
    assert_eq!(c.index.search_threads, None);
    assert_eq!(c.embedding.threads, Some(2));
    let e = err(yaml_env("", &[("OAP_EMBEDDING_THREADS", "two")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_EMBEDDING_THREADS: expected an integer, got "two""#
    );
}

#[test]
fn tool_tuning_from_yaml_and_env() {
    let c = ok(yaml_env("embedding:\n  tool_tuning: false\n", &[]));
    assert!(!c.embedding.tool_tuning);
    let c = ok(yaml_env(
        "embedding:\n  tool_tuning: false\n",
        &[("OAP_EMBEDDING_TOOL_TUNING", "true")],
    ));
    assert!(
        c.embedding.tool_tuning,
        "the environment overrides the file"
    );
    let e = err(yaml_env("", &[("OAP_EMBEDDING_TOOL_TUNING", "sometimes")]));
    assert!(
        e.to_string().starts_with("OAP_EMBEDDING_TOOL_TUNING"),
        "error names the variable: {e}"
    );
    let e = err(yaml_env("embedding:\n  tool_tuning: 3\n", &[]));
    assert!(
        e.to_string().contains("embedding.tool_tuning"),
        "error names the key: {e}"
    );
}

#[test]
fn env_enums() {
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_INDEX_VECTOR_DTYPE", "i8"),
            ("OAP_DISCOVERY_MODE", "DENSE"),
            ("OAP_LOG_FORMAT", "json"),
            ("OAP_EMBEDDING_WEIGHTS", "f32"),
        ],
    ));
    assert_eq!(c.embedding.weights, EmbeddingWeights::F32);
    assert_eq!(c.index.vector_dtype, VectorDtype::I8);
    assert_eq!(c.discovery.mode, DiscoveryMode::Dense);
    assert_eq!(c.log.format, LogFormat::Json);
    let e = err(yaml_env("", &[("OAP_INDEX_VECTOR_DTYPE", "f16")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_INDEX_VECTOR_DTYPE: expected one of "f32", "i8", got "f16""#
    );
    let e = err(yaml_env("", &[("OAP_EMBEDDING_WEIGHTS", "f16")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_EMBEDDING_WEIGHTS: expected one of "bf16", "f32", got "f16""#
    );
}

#[test]
fn env_strings_and_paths() {
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_INDEX_DATA_DIR", "/var/lib/oapd"),
            ("OAP_OLLAMA_BASE_URL", "http://10.0.0.2:11434"),
            ("OAP_LOG_LEVEL", "debug"),
        ],
    ));
    assert_eq!(c.index.data_dir, PathBuf::from("/var/lib/oapd"));
    assert_eq!(c.ollama.base_url, "http://10.0.0.2:11434");
    assert_eq!(c.log.level, "debug");
    let c = ok(yaml_env(
        "",
        &[(
            "OAP_INDEX_VECTOR_DONORS",
            "/srv/a/index.oapx,/srv/b/index.oapx",
        )],
    ));
    assert_eq!(
        c.index.vector_donors,
        [
            PathBuf::from("/srv/a/index.oapx"),
            PathBuf::from("/srv/b/index.oapx")
        ]
    );
}

#[test]
fn every_key_is_reachable_from_the_env() {
    let vars = Config::env_vars();
    // server, index, embedding, manifests, discovery, tool_bridge, ollama, tools, log, crawler,
    // experience, mcp, mcp_server, snapshots
    assert_eq!(
        vars.len(),
        17 + 5 + 8 + 2 + 9 + 14 + 6 + 11 + 2 + 17 + 4 + 4 + 1 + 7
    );
    assert!(vars.contains(&(
        "OAP_TOOL_BRIDGE_DEFAULT_TOP_K".to_owned(),
        "tool_bridge.default_top_k".to_owned()
    )));
    // Setting each variable to its default value's environment spelling works.
    let defaults = serde_json::to_value(Config::default()).expect("serialize");
    for (var, key) in vars {
        let (section, field) = key.split_once('.').expect("dotted");
        let raw = match &defaults[section][field] {
            serde_json::Value::Null => String::new(),
            serde_json::Value::Object(map) if map.is_empty() => String::new(),
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().expect("string item").to_owned())
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        let loaded = yaml_env("", &[(var.as_str(), raw.as_str())])
            .unwrap_or_else(|e| panic!("{var}={raw:?}: {e}"));
        assert_eq!(loaded.config, Config::default(), "{var}={raw:?}");
        assert_eq!(loaded.env_overrides.len(), 1);
    }
}

#[test]
fn env_unknown_key_of_a_known_section_is_an_error() {
    let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_MAX_ROUND", "3")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_TOOL_BRIDGE_MAX_ROUND: unknown key "tool_bridge.max_round" (did you mean OAP_TOOL_BRIDGE_MAX_ROUNDS?)"#
    );
    match e {
        ConfigError::Env { var, .. } => assert_eq!(var, "OAP_TOOL_BRIDGE_MAX_ROUND"),
        other => panic!("wrong variant {other:?}"),
    }
    let e = err(yaml_env("", &[("OAP_SERVER_COLOR", "blue")]));
    assert!(
        e.to_string().starts_with(
            r#"OAP_SERVER_COLOR: unknown key "server.color" (keys of server: LISTEN, "#
        ),
        "{e}"
    );
    let e = err(yaml_env("", &[("OAP_LOG", "debug")]));
    assert!(
        e.to_string()
            .starts_with(r#"OAP_LOG: names the section "log" but no key"#),
        "{e}"
    );
    // Keys are upper case in the environment.
    let e = err(yaml_env("", &[("OAP_LOG_level", "debug")]));
    assert!(
        e.to_string().starts_with("OAP_LOG_level: unknown key"),
        "{e}"
    );
}

#[test]
fn env_vars_matching_no_section_are_warnings() {
    let loaded = yaml_env(
        "",
        &[
            ("OAP_FOO", "1"),
            ("OAP_TOOL_BRIGE_MAX_ROUNDS", "4"),
            ("OAP_CONFIG", "/etc/oapd/config.yaml"),
            ("PATH", "/usr/bin"),
            ("oap_server_listen", "garbage"),
        ],
    )
    .expect("load");
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert_eq!(
        loaded.warnings[0],
        "OAP_FOO: ignored, it matches no config section"
    );
    assert_eq!(
        loaded.warnings[1],
        "OAP_TOOL_BRIGE_MAX_ROUNDS: ignored, it matches no config section (did you mean OAP_TOOL_BRIDGE_...?)"
    );
}

#[test]
fn tool_bridge_prefix_is_not_taken_for_a_shorter_section() {
    // "TOOL_BRIDGE" is matched as a whole; there is no "TOOL" section to confuse it.
    let c = ok(yaml_env("", &[("OAP_TOOL_BRIDGE_ENABLED", "no")]));
    assert!(!c.tool_bridge.enabled);
    assert!(c.embedding.enabled);
}

#[test]
fn env_errors_are_reported_in_variable_name_order() {
    let e = err(yaml_env(
        "",
        &[
            ("OAP_TOOL_BRIDGE_MAX_ROUNDS", "x"),
            ("OAP_INDEX_VECTOR_DTYPE", "f16"),
        ],
    ));
    assert!(e.to_string().starts_with("OAP_INDEX_VECTOR_DTYPE:"), "{e}");
}

// --- errors in the file ---------------------------------------------------------

#[test]
fn unknown_key_in_file() {
    let e = err(yaml("tool_bridge:\n  max_round: 3\n"));
    assert_eq!(
        e.to_string(),
        r#"config.yaml: unknown key "tool_bridge.max_round" (did you mean "max_rounds"?) at line 2, column 3"#
    );
    match e {
        ConfigError::UnknownKey {
            key,
            suggestion,
            position,
            ..
        } => {
            assert_eq!(key, "tool_bridge.max_round");
            assert_eq!(suggestion.as_deref(), Some("max_rounds"));
            let p = position.expect("position");
            assert_eq!((p.line, p.column), (2, 3));
        }
        other => panic!("wrong variant {other:?}"),
    }
}

#[test]
fn unknown_section_in_file() {
    let e = err(yaml("tool_brige:\n  max_rounds: 3\n"));
    assert_eq!(
        e.to_string(),
        r#"config.yaml: unknown key "tool_brige" (did you mean "tool_bridge"?) at line 1, column 1"#
    );
    let e = err(yaml("server:\n  listen: []\nzzzzzz: 1\n"));
    assert!(
        e.to_string()
            .starts_with(r#"config.yaml: unknown key "zzzzzz" at line 3"#),
        "{e}"
    );
}

#[test]
fn unknown_key_in_a_file_on_disk_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "config.yaml", b"log:\n  levle: debug\n");
    let e = Config::load(Some(&path), env(&[])).expect_err("unknown key");
    assert_eq!(
        e.to_string(),
        format!(
            r#"{}: unknown key "log.levle" (did you mean "level"?) at line 2, column 3"#,
            path.display()
        )
    );
}

#[test]
fn wrong_types_in_file() {
    let cases: &[(&str, &str)] = &[
        (
            "tool_bridge:\n  max_rounds: three\n",
            r#"config.yaml: tool_bridge.max_rounds: expected an integer, got "three" at line 2, column 15"#,
        ),
        (
            "tool_bridge:\n  max_rounds: 3.5\n",
            r#"config.yaml: tool_bridge.max_rounds: expected an integer, got "3.5""#,
        ),
        (
            "tool_bridge:\n  max_rounds: -2\n",
            r#"config.yaml: tool_bridge.max_rounds: expected a non-negative integer, got "-2""#,
        ),
        (
            "tool_bridge:\n  max_rounds: 99999999999\n",
            r#"config.yaml: tool_bridge.max_rounds: integer out of range (max 4294967295), got "99999999999""#,
        ),
        (
            "tool_bridge:\n  max_rounds:\n",
            "config.yaml: tool_bridge.max_rounds: expected an integer, got an empty value",
        ),
        (
            "tool_bridge:\n  enabled: maybe\n",
            r#"config.yaml: tool_bridge.enabled: expected a boolean (true/false), got "maybe""#,
        ),
        (
            "discovery:\n  min_score: high\n",
            r#"config.yaml: discovery.min_score: expected a number, got "high""#,
        ),
        (
            "index:\n  vector_dtype: f16\n",
            r#"config.yaml: index.vector_dtype: expected one of "f32", "i8", got "f16""#,
        ),
        (
            "embedding:\n  weights: f16\n",
            r#"config.yaml: embedding.weights: expected one of "bf16", "f32", got "f16""#,
        ),
        (
            "discovery:\n  mode: Hybrid\n",
            r#"config.yaml: discovery.mode: expected one of "hybrid", "dense", "lexical", got "Hybrid""#,
        ),
        (
            "tool_bridge: 3\n",
            r#"config.yaml: tool_bridge: expected a mapping, got "3""#,
        ),
        (
            "log:\n  level: [info]\n",
            "config.yaml: log.level: expected a string, got a list",
        ),
        (
            "log:\n  level:\n",
            "config.yaml: log.level: expected a string, got an empty value",
        ),
        (
            "server:\n  listen: 8300\n",
            r#"config.yaml: server.listen: expected a list, got "8300""#,
        ),
        (
            "server:\n  cors_origins: {a: 1}\n",
            "config.yaml: server.cors_origins: expected a list, got a mapping",
        ),
        (
            "index:\n  vector_dtype: [i8]\n",
            "config.yaml: index.vector_dtype: expected a single word, got a list",
        ),
    ];
    for (text, want) in cases {
        let e = err(yaml(text));
        assert!(
            e.to_string().starts_with(want),
            "for {text:?}\n  got:  {e}\n  want: {want}"
        );
        assert!(
            matches!(e, ConfigError::InvalidValue { .. }),
            "{text:?}: {e:?}"
        );
    }
}

#[test]
fn wrong_type_inside_a_list_names_the_index() {
    let e = err(yaml("server:\n  listen: [\"127.0.0.1:1\", [x]]\n"));
    assert!(
        e.to_string()
            .starts_with("config.yaml: server.listen[1]: expected a string"),
        "{e}"
    );
}

#[test]
fn top_level_must_be_a_mapping() {
    let e = err(yaml("- server\n- index\n"));
    assert!(
        e.to_string().starts_with(
            "config.yaml: the top level must be a mapping of sections (server:, index:"
        ),
        "{e}"
    );
    assert!(
        e.to_string().ends_with("got a list at line 1, column 1"),
        "{e}"
    );
    let e = err(yaml("hello\n"));
    assert!(e.to_string().contains("got \"hello\""), "{e}");
}

#[test]
fn duplicate_keys_are_errors() {
    let e = err(yaml("tool_bridge:\n  max_rounds: 3\n  max_rounds: 4\n"));
    assert_eq!(
        e.to_string(),
        "config.yaml: tool_bridge.max_rounds: duplicate key: each key may appear only once at line 3, column 3"
    );
    let e = err(yaml("log:\n  level: info\nlog:\n  format: json\n"));
    assert!(
        e.to_string().starts_with("config.yaml: log: duplicate key"),
        "{e}"
    );
}

#[test]
fn yaml_syntax_errors_carry_line_and_column() {
    let e = err(yaml("tool_bridge:\n\tmax_rounds: 3\n"));
    match &e {
        ConfigError::Syntax {
            position, message, ..
        } => {
            assert!(message.starts_with("YAML syntax error: "), "{message}");
            let p = position.expect("position");
            assert_eq!(p.line, 2, "{e}");
        }
        other => panic!("wrong variant {other:?}"),
    }
    assert!(e.to_string().contains(" at line 2, column "), "{e}");

    let e = err(yaml(
        "server:\n  listen: [\"127.0.0.1:1\"\nlog:\n  level: info\n",
    ));
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
    assert!(e.to_string().contains(" at line "), "{e}");

    let e = err(yaml("log:\n  level: \"info\n"));
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
}

// --- files ------------------------------------------------------------------------

#[test]
fn missing_explicit_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nope.yaml");
    let e = Config::load(Some(&path), env(&[])).expect_err("missing file");
    assert!(matches!(e, ConfigError::Read { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with(&format!("{}: cannot read config file:", path.display())),
        "{e}"
    );
}

#[test]
fn a_directory_is_not_a_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Config::load(Some(dir.path()), env(&[])).expect_err("directory");
    assert!(matches!(e, ConfigError::NotRegularFile { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: the config file is a directory, not a regular file",
            dir.path().display()
        )
    );
}

/// Loads on another thread, so a load that blocks fails the test instead of
/// hanging it.
fn load_within_seconds(path: &Path) -> Result<Loaded, ConfigError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Config::load(Some(&path), env(&[])));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("Config::load blocked on a special file")
}

#[test]
fn a_fifo_or_device_is_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("config.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.expect("mkfifo").success());
    let e = load_within_seconds(&fifo).expect_err("fifo");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: the config file is a FIFO (named pipe), not a regular file",
            fifo.display()
        )
    );
    // A symbolic link is followed to what it names.
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    let e = load_within_seconds(&link).expect_err("link to a fifo");
    assert!(e.to_string().contains("is a FIFO (named pipe)"), "{e}");

    let e = load_within_seconds(Path::new("/dev/zero")).expect_err("device");
    assert_eq!(
        e.to_string(),
        "/dev/zero: the config file is a character device, not a regular file"
    );
}

#[test]
fn huge_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut big = b"# padding\n".repeat((MAX_CONFIG_FILE_BYTES as usize / 10) + 1);
    big.extend_from_slice(b"log:\n  level: info\n");
    assert!(big.len() as u64 > MAX_CONFIG_FILE_BYTES);
    let path = write_file(dir.path(), "config.yaml", &big);
    let e = Config::load(Some(&path), env(&[])).expect_err("too large");
    match &e {
        ConfigError::TooLarge { size, limit, .. } => {
            assert_eq!(*size, Some(big.len() as u64));
            assert_eq!(*limit, MAX_CONFIG_FILE_BYTES);
        }
        other => panic!("wrong variant {other:?}"),
    }
    assert!(e.to_string().contains("too large"), "{e}");

    let text = String::from_utf8(big).expect("ascii");
    assert!(matches!(
        Config::from_yaml_str(&text, env(&[])),
        Err(ConfigError::TooLarge { .. })
    ));

    // Exactly at the limit is fine.
    let mut at_limit = "#".repeat(MAX_CONFIG_FILE_BYTES as usize - 1);
    at_limit.push('\n');
    let path = write_file(dir.path(), "limit.yaml", at_limit.as_bytes());
    assert!(Config::load(Some(&path), env(&[])).is_ok());
}

#[test]
fn non_utf8_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "config.yaml", b"log:\n  level: \xff\xfe\n");
    let e = Config::load(Some(&path), env(&[])).expect_err("not utf-8");
    assert!(
        matches!(e, ConfigError::NotUtf8 { offset: 14, .. }),
        "{e:?}"
    );
}

#[test]
fn utf8_bom_is_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "config.yaml",
        "\u{feff}tool_bridge:\n  max_rounds: 2\n".as_bytes(),
    );
    let c = Config::load(Some(&path), env(&[])).expect("load").config;
    assert_eq!(c.tool_bridge.max_rounds, 2);
}

// --- semantic validation -------------------------------------------------------------

fn problems(e: ConfigError) -> Vec<(String, String, Option<String>)> {
    match e {
        ConfigError::Invalid(problems) => problems
            .into_iter()
            .map(|p| (p.key, p.message, p.env_var))
            .collect(),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

fn single_problem(text: &str) -> (String, String) {
    let found = problems(err(yaml(text)));
    assert_eq!(found.len(), 1, "{text:?}: {found:?}");
    let (key, message, _) = found.into_iter().next().expect("one");
    (key, message)
}

#[test]
fn tool_sandbox_settings() {
    let c = ok(yaml(""));
    assert_eq!(c.tools.sandbox, oapd::harness::SandboxMode::Auto);
    assert_eq!(c.tools.sandbox_spawn, vec!["man".to_string()]);
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_TOOLS_SANDBOX", "Require"),
            ("OAP_TOOLS_SANDBOX_READ_PATHS", "/opt/data, /srv/x"),
            ("OAP_TOOLS_SANDBOX_SPAWN", "man,groff"),
        ],
    ));
    assert_eq!(c.tools.sandbox, oapd::harness::SandboxMode::Require);
    assert_eq!(
        c.tools.sandbox_read_paths,
        vec![PathBuf::from("/opt/data"), PathBuf::from("/srv/x")]
    );
    assert_eq!(c.tools.sandbox_spawn, vec!["man", "groff"]);
    let e = err(yaml_env("", &[("OAP_TOOLS_SANDBOX", "strict")]));
    assert_eq!(
        e.to_string(),
        r#"OAP_TOOLS_SANDBOX: expected one of "auto", "require", "off", got "strict""#
    );
    let (key, msg) = single_problem("tools:\n  sandbox_read_paths: [data]\n");
    assert_eq!(key, "tools.sandbox_read_paths[0]");
    assert!(msg.contains("absolute"), "{msg}");
    let (key, msg) = single_problem("tools:\n  sandbox_spawn: [man, /bin/sh]\n");
    assert_eq!(key, "tools.sandbox_spawn[1]");
    assert!(msg.contains("bare command name"), "{msg}");
}

#[test]
fn tool_bridge_ranges() {
    for (text, key, msg) in [
        (
            "tool_bridge:\n  max_rounds: 0\n",
            "tool_bridge.max_rounds",
            "must be between 1 and 10, got 0",
        ),
        (
            "tool_bridge:\n  max_rounds: 11\n",
            "tool_bridge.max_rounds",
            "must be between 1 and 10, got 11",
        ),
        (
            "tool_bridge:\n  default_top_k: 0\n",
            "tool_bridge.default_top_k",
            "must be between 1 and 20, got 0",
        ),
        (
            "tool_bridge:\n  http_timeout: 0\n",
            "tool_bridge.http_timeout",
            "must be between 1 and 3600, got 0",
        ),
        (
            "tool_bridge:\n  stdio_timeout: 3601\n",
            "tool_bridge.stdio_timeout",
            "must be between 1 and 3600, got 3601",
        ),
    ] {
        assert_eq!(single_problem(text), (key.to_owned(), msg.to_owned()));
    }
    // Boundaries are accepted.
    ok(yaml(
        "tool_bridge:\n  max_rounds: 10\n  default_top_k: 20\n  http_timeout: 3600\n  stdio_timeout: 1\n",
    ));
    ok(yaml("tool_bridge:\n  max_rounds: 1\n  default_top_k: 1\n"));
}

#[test]
fn experience_ranges() {
    for (text, key, msg) in [
        (
            "experience:\n  min_similarity: 1.5\n",
            "experience.min_similarity",
            "must be between 0 and 1, got 1.5",
        ),
        (
            "experience:\n  min_similarity: -0.1\n",
            "experience.min_similarity",
            "must be between 0 and 1, got -0.1",
        ),
        (
            "experience:\n  ttl: 59\n",
            "experience.ttl",
            "must be between 60 and 315360000, got 59",
        ),
        (
            "experience:\n  ttl: 315360001\n",
            "experience.ttl",
            "must be between 60 and 315360000, got 315360001",
        ),
        (
            "experience:\n  max_entries: 0\n",
            "experience.max_entries",
            "must be between 1 and 100000, got 0",
        ),
        (
            "experience:\n  max_entries: 100001\n",
            "experience.max_entries",
            "must be between 1 and 100000, got 100001",
        ),
    ] {
        assert_eq!(single_problem(text), (key.to_owned(), msg.to_owned()));
    }
    assert_eq!(
        single_problem("experience:\n  min_similarity: .nan\n").0,
        "experience.min_similarity"
    );
    // Boundaries are accepted.
    let c = ok(yaml(
        "experience:\n  enabled: true\n  min_similarity: 0\n  ttl: 60\n  max_entries: 1\n",
    ));
    assert_eq!(c.experience.min_similarity, 0.0);
    ok(yaml(
        "experience:\n  min_similarity: 1\n  ttl: 315360000\n  max_entries: 100000\n",
    ));
    let e = err(yaml("experience:\n  enabled: sometimes\n"));
    assert!(
        e.to_string().starts_with(
            r#"config.yaml: experience.enabled: expected a boolean (true/false), got "sometimes""#
        ),
        "{e}"
    );
}

#[test]
fn url_policy_tools_and_only_validated_models_values() {
    let c = ok(yaml(
        "tool_bridge:\n  only_validated_models: true\n  url_policy: remove\n  url_policy_tools:\n    local/grep: \"off\"\n    api.example.com: flag\n",
    ));
    assert!(c.tool_bridge.only_validated_models);
    assert_eq!(c.tool_bridge.url_policy, UrlPolicy::Remove);
    assert_eq!(
        c.tool_bridge.url_policy_tools.get("local/grep"),
        Some(&UrlPolicy::Off)
    );
    assert_eq!(
        c.tool_bridge.url_policy_tools.get("api.example.com"),
        Some(&UrlPolicy::Flag)
    );
    for (text, want) in [
        (
            "tool_bridge:\n  url_policy_tools:\n    local/grep: strip\n",
            r#"config.yaml: tool_bridge.url_policy_tools.local/grep: expected one of "off", "flag", "remove", got "strip""#,
        ),
        (
            "tool_bridge:\n  url_policy_tools: [local/grep]\n",
            "config.yaml: tool_bridge.url_policy_tools: expected a mapping",
        ),
        (
            "tool_bridge:\n  only_validated_models: maybe\n",
            r#"config.yaml: tool_bridge.only_validated_models: expected a boolean (true/false), got "maybe""#,
        ),
    ] {
        let e = err(yaml(text));
        assert!(
            e.to_string().starts_with(want),
            "for {text:?}\n  got:  {e}\n  want: {want}"
        );
    }
    // From the environment: key=value pairs.
    let c = ok(yaml_env(
        "",
        &[
            (
                "OAP_TOOL_BRIDGE_URL_POLICY_TOOLS",
                "local/grep=off, a.example=remove",
            ),
            ("OAP_TOOL_BRIDGE_ONLY_VALIDATED_MODELS", "true"),
        ],
    ));
    assert_eq!(
        c.tool_bridge.url_policy_tools.get("a.example"),
        Some(&UrlPolicy::Remove)
    );
    assert!(c.tool_bridge.only_validated_models);
    for (raw, want) in [
        ("local/grep", "expected key=value pairs"),
        ("=off", "empty key"),
        ("local/grep=strip", r#"got "strip""#),
    ] {
        let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_URL_POLICY_TOOLS", raw)]));
        let text = e.to_string();
        assert!(
            text.starts_with("OAP_TOOL_BRIDGE_URL_POLICY_TOOLS: ") && text.contains(want),
            "{raw}: {text}"
        );
    }
}

#[test]
fn tool_bridge_top_k_must_not_exceed_discovery_max() {
    let found = problems(err(yaml(
        "discovery:\n  max_top_k: 4\n  default_top_k: 2\ntool_bridge:\n  default_top_k: 5\n",
    )));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "tool_bridge.default_top_k");
    assert_eq!(
        found[0].1,
        "is 5 but discovery.max_top_k is 4; it must not exceed it"
    );
    // 21 breaks both rules: both are reported.
    let found = problems(err(yaml("tool_bridge:\n  default_top_k: 21\n")));
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn discovery_ranges() {
    assert_eq!(
        single_problem("discovery:\n  default_top_k: 21\n"),
        (
            "discovery.default_top_k".to_owned(),
            "must be between 1 and 20, got 21".to_owned()
        )
    );
    assert_eq!(
        single_problem("discovery:\n  min_score: .nan\n").0,
        "discovery.min_score"
    );
    let found = problems(err(yaml("discovery:\n  max_top_k: 0\n")));
    assert!(
        found.iter().any(|p| p.0 == "discovery.max_top_k"),
        "{found:?}"
    );
}

#[test]
fn the_start_embedding_limit_is_a_bounded_count() {
    assert_eq!(
        single_problem("index:\n  start_embed_limit: 100000001\n"),
        (
            "index.start_embed_limit".to_owned(),
            "must be between 0 and 100000000, got 100000001".to_owned()
        )
    );
    let message = err(yaml("index:\n  start_embed_limit: many\n")).to_string();
    assert!(message.contains("index.start_embed_limit"), "{message}");
    // 0: never wait for embeddings before ready.
    let config = ok(yaml("index:\n  start_embed_limit: 0\n"));
    assert_eq!(config.index.start_embed_limit, 0);
}

#[test]
fn server_ranges_and_formats() {
    assert_eq!(
        single_problem("server:\n  max_body_bytes: 1023\n  max_task_bytes: 100\n"),
        (
            "server.max_body_bytes".to_owned(),
            "must be between 1024 and 268435456, got 1023".to_owned()
        )
    );
    assert_eq!(
        single_problem("server:\n  max_task_bytes: 2000000\n").0,
        "server.max_task_bytes"
    );
    assert_eq!(
        single_problem("server:\n  request_timeout: 0\n").0,
        "server.request_timeout"
    );
    assert_eq!(
        single_problem("server:\n  header_read_timeout: 4000\n").0,
        "server.header_read_timeout"
    );
    assert_eq!(
        single_problem("server:\n  max_connections: 0\n").0,
        "server.max_connections"
    );
    let (key, msg) =
        single_problem("server:\n  listen: [\"127.0.0.1:8300\", \"localhost:8300\"]\n");
    assert_eq!(key, "server.listen[1]");
    assert!(msg.contains("\"localhost:8300\""), "{msg}");
    assert_eq!(single_problem("server:\n  listen: []\n").0, "server.listen");
    assert_eq!(
        single_problem("server:\n  listen: [\"127.0.0.1:1\", \"127.0.0.1:1\"]\n").0,
        "server.listen[1]"
    );
    assert_eq!(
        single_problem("server:\n  auth_token: \"\"\n").0,
        "server.auth_token"
    );
    assert_eq!(
        single_problem("server:\n  auth_token: \"has spaces in it 12345\"\n").0,
        "server.auth_token"
    );
    assert_eq!(
        single_problem(
            "server:\n  cors_origins: [\"https://ok.example\", \"https://bad.example/\"]\n"
        )
        .0,
        "server.cors_origins[1]"
    );
    ok(yaml("server:\n  cors_origins: [\"*\"]\n"));
    let (key, msg) = single_problem("server:\n  max_connections_per_client: 0\n");
    assert_eq!(key, "server.max_connections_per_client");
    assert_eq!(msg, "must be between 1 and 65536, got 0");
    let (key, msg) = single_problem(
        "server:\n  allowed_hosts: [\"pi.example.org\", \"http://pi.example.org:8300\"]\n",
    );
    assert_eq!(key, "server.allowed_hosts[1]");
    assert!(msg.contains("not a host name"), "{msg}");
}

#[test]
fn allowed_hosts_and_the_per_client_cap() {
    let c = ok(yaml(""));
    assert!(c.server.allowed_hosts.is_empty());
    assert_eq!(c.server.max_connections_per_client, 32);
    let c = ok(yaml(
        "server:\n  allowed_hosts: pi.example.org\n  max_connections_per_client: 8\n",
    ));
    assert_eq!(c.server.allowed_hosts, ["pi.example.org"]);
    assert_eq!(c.server.max_connections_per_client, 8);
    let c = ok(yaml_env(
        "",
        &[
            (
                "OAP_SERVER_ALLOWED_HOSTS",
                "pi.example.org, oapd.lan,10.1.2.3",
            ),
            ("OAP_SERVER_MAX_CONNECTIONS_PER_CLIENT", "64"),
        ],
    ));
    assert_eq!(
        c.server.allowed_hosts,
        ["pi.example.org", "oapd.lan", "10.1.2.3"]
    );
    assert_eq!(c.server.max_connections_per_client, 64);
    let e = err(yaml_env(
        "",
        &[("OAP_SERVER_ALLOWED_HOSTS", "ok.example,*.example")],
    ));
    let text = e.to_string();
    assert!(text.contains("server.allowed_hosts[1]"), "{text}");
    assert!(text.contains("(set by OAP_SERVER_ALLOWED_HOSTS)"), "{text}");
}

#[test]
fn listen_addresses_parse() {
    let c = ok(yaml(
        "server:\n  listen: [\"0.0.0.0:8300\", \"[::1]:8300\", \"[::]:8301\"]\n  auth_token: a-long-enough-token-1234\n",
    ));
    let addrs = c.server.listen_addrs().expect("addresses");
    assert_eq!(addrs.len(), 3);
    assert!(addrs[1].is_ipv6());
}

#[test]
fn ollama_url_must_be_http() {
    for bad in [
        "127.0.0.1:11434",
        "ftp://host",
        "http://",
        "http://host:notaport",
        "http://host/?x=1",
    ] {
        let (key, _) = single_problem(&format!("ollama:\n  base_url: \"{bad}\"\n"));
        assert_eq!(key, "ollama.base_url", "{bad}");
    }
    ok(yaml("ollama:\n  base_url: https://[fd00::2]:11434/\n"));
}

#[test]
fn embedding_index_and_log_checks() {
    assert_eq!(
        single_problem("embedding:\n  max_tokens: 513\n").0,
        "embedding.max_tokens"
    );
    assert_eq!(
        single_problem("embedding:\n  batch_size: 0\n").0,
        "embedding.batch_size"
    );
    assert_eq!(
        single_problem("embedding:\n  threads: 0\n").0,
        "embedding.threads"
    );
    assert_eq!(
        single_problem("index:\n  search_threads: 0\n").0,
        "index.search_threads"
    );
    assert_eq!(
        single_problem("index:\n  data_dir: \"\"\n").0,
        "index.data_dir"
    );
    assert_eq!(single_problem("log:\n  level: verbose\n").0, "log.level");
    ok(yaml("log:\n  level: \"warn,oapd=trace\"\n"));
}

#[test]
fn all_problems_are_reported_together() {
    let e = err(yaml(
        "tool_bridge:\n  max_rounds: 0\n  http_timeout: 0\nollama:\n  base_url: nope\n",
    ));
    let text = e.to_string();
    assert!(text.starts_with("invalid configuration: "), "{text}");
    assert!(text.contains("tool_bridge.max_rounds: must be between 1 and 10, got 0"));
    assert!(text.contains("tool_bridge.http_timeout"));
    assert!(text.contains("ollama.base_url"));
    assert_eq!(problems(e).len(), 3);
}

#[test]
fn problems_from_the_environment_name_the_variable() {
    let e = err(yaml_env("", &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", "50")]));
    assert_eq!(
        e.to_string(),
        "invalid configuration: tool_bridge.max_rounds: must be between 1 and 10, got 50 (set by OAP_TOOL_BRIDGE_MAX_ROUNDS)"
    );
    let e = err(yaml_env(
        "",
        &[("OAP_SERVER_LISTEN", "0.0.0.0:8300,localhost:1")],
    ));
    let found = problems(e);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "server.listen[1]");
    assert_eq!(found[0].2.as_deref(), Some("OAP_SERVER_LISTEN"));
}

#[test]
fn env_can_repair_an_invalid_file_value() {
    // Validation runs on the merged result, not on the file alone.
    let c = ok(yaml_env(
        "tool_bridge:\n  max_rounds: 50\n",
        &[("OAP_TOOL_BRIDGE_MAX_ROUNDS", "5")],
    ));
    assert_eq!(c.tool_bridge.max_rounds, 5);
}

#[test]
fn warnings_for_risky_but_valid_settings() {
    let loaded = yaml("server:\n  listen: [\"0.0.0.0:8300\"]\n").expect("valid");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("auth_token"));

    let loaded = yaml("server:\n  auth_token: short\n").expect("valid");
    assert!(
        loaded.warnings[0].contains("shorter than 16"),
        "{:?}",
        loaded.warnings
    );

    let loaded = yaml("manifests:\n  bundled: false\n").expect("valid");
    assert!(
        loaded.warnings[0].contains("no manifests"),
        "{:?}",
        loaded.warnings
    );

    let loaded = yaml("embedding:\n  enabled: false\n").expect("valid");
    assert!(
        loaded.warnings[0].contains("lexical"),
        "{:?}",
        loaded.warnings
    );
    let loaded =
        yaml("embedding:\n  enabled: false\ndiscovery:\n  mode: lexical\n").expect("valid");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn errors_do_not_echo_the_token() {
    let e = err(yaml(
        "server:\n  auth_token: \"secret with spaces 123456\"\n",
    ));
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[test]
fn crawler_mdns_is_off_by_default_and_set_by_file_or_env() {
    assert!(!ok(yaml("")).crawler.mdns);
    assert!(ok(yaml("crawler:\n  mdns: true\n")).crawler.mdns);
    assert!(
        ok(yaml_env("", &[("OAP_CRAWLER_MDNS", "true")]))
            .crawler
            .mdns
    );
    let e = err(yaml("crawler:\n  mdns: maybe\n"));
    assert!(e.to_string().contains("crawler.mdns"), "{e}");
    let e = err(yaml_env("", &[("OAP_CRAWLER_MDNS", "sometimes")]));
    assert!(e.to_string().contains("OAP_CRAWLER_MDNS"), "{e}");
}

#[test]
fn text_tool_calls_names_model_prefixes() {
    assert_eq!(
        Config::default().tool_bridge.text_tool_calls,
        ["gemma3", "llama3.2"]
    );
    let c = ok(yaml_env(
        "tool_bridge:\n  text_tool_calls: []\n",
        &[("OAP_TOOL_BRIDGE_TEXT_TOOL_CALLS", "gemma3,phi4-mini")],
    ));
    assert_eq!(c.tool_bridge.text_tool_calls, ["gemma3", "phi4-mini"]);
    let (key, msg) = single_problem("tool_bridge:\n  text_tool_calls: [gemma3, 'llama 3']\n");
    assert_eq!(key, "tool_bridge.text_tool_calls[1]");
    assert!(msg.contains("model-name prefix"), "{msg}");
}

#[test]
fn the_recent_requests_and_query_cache_bounds_name_their_key() {
    assert_eq!(
        single_problem("server:\n  recent_requests: 1001\n").0,
        "server.recent_requests"
    );
    assert_eq!(
        single_problem("discovery:\n  query_cache: 65537\n").0,
        "discovery.query_cache"
    );
    let c = ok(yaml(
        "server:\n  recent_requests: 0\ndiscovery:\n  query_cache: 0\n",
    ));
    assert_eq!(c.server.recent_requests, 0);
    assert_eq!(c.discovery.query_cache, 0);
}

#[test]
fn coalesce_queries_is_off_by_default_bounded_and_set_from_the_env() {
    assert_eq!(Config::default().discovery.coalesce_queries, 0);
    let (key, msg) = single_problem("discovery:\n  coalesce_queries: 65\n");
    assert_eq!(key, "discovery.coalesce_queries");
    assert!(msg.contains("64"), "{msg}");
    assert_eq!(
        ok(yaml("discovery:\n  coalesce_queries: 16\n"))
            .discovery
            .coalesce_queries,
        16
    );
    let c = ok(yaml_env("", &[("OAP_DISCOVERY_COALESCE_QUERIES", "4")]));
    assert_eq!(c.discovery.coalesce_queries, 4);
}

#[test]
fn request_generation_is_on_by_default_and_its_settings_are_checked() {
    let d = Config::default().discovery;
    assert!(d.generate_requests);
    assert_eq!(d.generate_model, None);
    assert_eq!(d.generate_per_hour, 30);
    let (key, msg) = single_problem("discovery:\n  generate_per_hour: 0\n");
    assert_eq!(key, "discovery.generate_per_hour");
    assert!(msg.contains("3600"), "{msg}");
    let (key, msg) = single_problem("discovery:\n  generate_model: \"  \"\n");
    assert_eq!(key, "discovery.generate_model");
    assert!(msg.contains("model name"), "{msg}");
    let c = ok(yaml_env(
        "",
        &[
            ("OAP_DISCOVERY_GENERATE_REQUESTS", "false"),
            ("OAP_DISCOVERY_GENERATE_MODEL", "llama3.2:1b"),
        ],
    ));
    assert!(!c.discovery.generate_requests);
    assert_eq!(c.discovery.generate_model.as_deref(), Some("llama3.2:1b"));
}

#[test]
fn the_response_store_bounds_come_from_the_file_or_the_env() {
    let c = ok(yaml_env(
        "",
        &[("OAP_TOOL_BRIDGE_RESPONSE_STORE", r#"{"per_client": 8}"#)],
    ));
    assert_eq!(c.tool_bridge.response_store.per_client, 8);
    assert_eq!(c.tool_bridge.response_store.clients, 64);
    let e = err(yaml_env(
        "",
        &[("OAP_TOOL_BRIDGE_RESPONSE_STORE", r#"{"perclient": 8}"#)],
    ));
    assert!(
        e.to_string()
            .starts_with("OAP_TOOL_BRIDGE_RESPONSE_STORE: expected a JSON object"),
        "{e}"
    );
}
