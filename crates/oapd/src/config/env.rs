//! Environment overrides: the key table (which drives the overrides, the
//! suggestions and the completeness tests), typed parsing of `OAP_*` values,
//! and applying them onto a [`Config`].

use std::collections::BTreeMap;
use std::path::PathBuf;

// The bridge's own enums are named from their crate, not through
// `bridge.rs`: that module implements this one's `EnvValue` for the
// bridge's types, so this one naming it back would close a cycle.
use oap_bridge::{ToolExposure, UrlPolicy};

use super::text::{closest, levenshtein, one_of, quote};
use super::{
    Config, ConfigError, DiscoveryMode, EmbeddingModel, EmbeddingWeights, EnvOverride, LogFormat,
    Named, SandboxMode, VectorDtype,
};

/// Prefix of every environment variable that configures `oapd`.
pub const ENV_PREFIX: &str = "OAP_";

/// `OAP_*` variables that are not config keys (they are read elsewhere:
/// `OAP_CONFIG` is the config file's old variable, taken by the command line
/// with its own deprecation warning) and are therefore skipped here.
pub const NON_CONFIG_ENV_VARS: &[&str] = &["OAP_CONFIG"];

macro_rules! config_keys {
    ($($section:ident { $($key:ident),* $(,)? })*) => {
        /// Every section and its keys, in declaration order.
        pub(super) const SECTIONS: &[(&str, &[&str])] = &[
            $( (stringify!($section), &[ $(stringify!($key)),* ]) ),*
        ];

        /// Parse `raw` into `config.<section>.<key>`. `None` if the key does not exist.
        fn set_from_env(
            config: &mut Config,
            section: &str,
            key: &str,
            raw: &str,
        ) -> Option<Result<(), String>> {
            match (section, key) {
                $($(
                    (stringify!($section), stringify!($key)) => {
                        Some(parse_into(&mut config.$section.$key, raw))
                    }
                )*)*
                _ => None,
            }
        }
    };
}

config_keys! {
    server {
        listen, max_body_bytes, max_inflight_body_bytes, max_task_bytes, request_timeout,
        header_read_timeout, max_connections, max_pending_connections, max_connections_per_client,
        auth_token, cors_origins, clients, allowed_hosts, shutdown_grace, trusted_clients,
        recent_requests,
        log_content,
    }
    index { data_dir, vector_dtype, search_threads, start_embed_limit, vector_donors }
    embedding { enabled, model, model_dir, max_tokens, batch_size, threads, weights, tool_tuning }
    manifests { bundled, dirs }
    discovery {
        default_top_k, max_top_k, min_score, mode, query_cache, coalesce_queries,
        generate_requests, generate_model, generate_per_hour,
    }
    tool_bridge {
        enabled, default_top_k, max_rounds, http_timeout, stdio_timeout, only_validated_models,
        tool_token_budget, exposure, url_policy, url_policy_tools, force, stream_keepalive,
        text_tool_calls, response_store,
    }
    ollama { base_url, timeout, chat_deadline, max_request_bytes, ca_file, api_key }
    tools {
        credentials_file, ca_file, allow_private, stdio_dirs, max_result_chars, max_response_bytes,
        max_parallel, sandbox, sandbox_read_paths, sandbox_spawn, max_scratch_bytes,
    }
    log { level, format }
    crawler {
        enabled, seeds, seeds_file, interval, jitter, retry_base, max_failures, fetch_timeout,
        round_timeout, concurrency, max_domains, ca_file, allow_private, hosts, watch_interval,
        check_txt, mdns,
    }
    experience { enabled, min_similarity, ttl, max_entries }
    mcp { servers_file, servers, init_timeout, call_timeout }
    mcp_server { enabled }
    snapshots { url, public_keys, interval, max_bytes, fetch_timeout, allow_private, ca_file }
}

/// Environment variable name for a key: `("tool_bridge", "max_rounds")` →
/// `OAP_TOOL_BRIDGE_MAX_ROUNDS`.
pub fn env_var_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}_{}",
        section.to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

/// A config value that can be parsed from an environment variable.
pub(super) trait EnvValue: Sized {
    fn parse_env(raw: &str) -> Result<Self, String>;
}

fn parse_into<T: EnvValue>(slot: &mut T, raw: &str) -> Result<(), String> {
    *slot = T::parse_env(raw)?;
    Ok(())
}

impl EnvValue for bool {
    fn parse_env(raw: &str) -> Result<Self, String> {
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(format!(
                "expected a boolean (true/false/1/0/yes/no), got {}",
                quote(raw)
            )),
        }
    }
}

/// Strict unsigned decimal: ASCII digits only, no sign, no spaces, no `_`, no `0x`.
fn parse_uint(raw: &str, max: u64) -> Result<u64, String> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        let negative = raw
            .strip_prefix('-')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        return Err(if negative {
            format!("expected a non-negative integer, got {}", quote(raw))
        } else {
            format!("expected an integer, got {}", quote(raw))
        });
    }
    match raw.parse::<u64>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!(
            "integer out of range (max {max}), got {}",
            quote(raw)
        )),
    }
}

macro_rules! env_uint {
    ($($t:ty),*) => {$(
        impl EnvValue for $t {
            fn parse_env(raw: &str) -> Result<Self, String> {
                let v = parse_uint(raw, <$t>::MAX as u64)?;
                <$t>::try_from(v).map_err(|_| {
                    format!("integer out of range (max {}), got {}", <$t>::MAX, quote(raw))
                })
            }
        }
    )*};
}
env_uint!(u32, u64, usize);

impl EnvValue for f32 {
    fn parse_env(raw: &str) -> Result<Self, String> {
        match raw.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("expected a finite number, got {}", quote(raw))),
        }
    }
}

impl EnvValue for String {
    fn parse_env(raw: &str) -> Result<Self, String> {
        Ok(raw.to_owned())
    }
}

impl EnvValue for PathBuf {
    fn parse_env(raw: &str) -> Result<Self, String> {
        Ok(PathBuf::from(raw))
    }
}

/// An empty value means `None`.
impl<T: EnvValue> EnvValue for Option<T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            Ok(None)
        } else {
            T::parse_env(raw).map(Some)
        }
    }
}

/// Comma-separated; items are trimmed; an empty (or all-blank) value is an empty list.
impl<T: EnvValue> EnvValue for Vec<T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(Vec::new());
        }
        raw.split(',')
            .enumerate()
            .map(|(i, item)| {
                let item = item.trim();
                if item.is_empty() {
                    Err(format!(
                        "item {} of the comma-separated list is empty, in {}",
                        i + 1,
                        quote(raw)
                    ))
                } else {
                    T::parse_env(item)
                }
            })
            .collect()
    }
}

macro_rules! env_named {
    ($($t:ty),*) => {$(
        /// Case-insensitive in the environment.
        impl EnvValue for $t {
            fn parse_env(raw: &str) -> Result<Self, String> {
                <$t as Named>::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(raw))
                    .ok_or_else(|| format!(
                        "expected one of {}, got {}",
                        one_of(<$t as Named>::ALL.iter().map(|v| v.name())),
                        quote(raw)
                    ))
            }
        }
    )*};
}
env_named!(
    VectorDtype,
    EmbeddingModel,
    EmbeddingWeights,
    DiscoveryMode,
    LogFormat,
    ToolExposure,
    UrlPolicy,
    SandboxMode
);

/// `key=value` pairs, comma-separated (e.g. `OAP_TOOL_BRIDGE_URL_POLICY_TOOLS=a.example=off`):
/// the key is everything before the last `=`.
impl<T: EnvValue> EnvValue for BTreeMap<String, T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        let mut map = BTreeMap::new();
        for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.rsplit_once('=') else {
                return Err(format!("expected key=value pairs, got {}", quote(item)));
            };
            if key.trim().is_empty() {
                return Err(format!("empty key in {}", quote(item)));
            }
            map.insert(key.trim().to_string(), T::parse_env(value.trim())?);
        }
        Ok(map)
    }
}

/// A JSON object of servers, as in a servers file's `mcpServers`
/// (`OAP_MCP_SERVERS='{"time": {"command": "uvx", "args": ["mcp-server-time"]}}'`).
impl EnvValue for super::McpServers {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(Self::default());
        }
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(serde_json::Value::Object(map)) => Ok(Self(map)),
            Ok(_) => Err("expected a JSON object of servers keyed by name".into()),
            Err(err) => Err(format!(
                "expected a JSON object of servers keyed by name: {err}"
            )),
        }
    }
}

/// A JSON array of clients, as the YAML list
/// (`OAP_SERVER_CLIENTS='[{"name": "home-assistant", "token": "...", "scopes": ["chat"]}]'`).
impl EnvValue for super::ClientList {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(Self::default());
        }
        // The value holds tokens: the error names the problem, never the text.
        serde_json::from_str(raw).map_err(|err| {
            let problem = match err.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Io => "not JSON",
                serde_json::error::Category::Eof => "JSON that ends early",
                serde_json::error::Category::Data => "a value of the wrong shape",
            };
            format!(
                "expected a JSON array of {{\"name\", \"token\", \"scopes\"}} objects; \
                 found {problem} at column {}",
                err.column()
            )
        })
    }
}

/// The process environment's `OAP_*` variables, for [`Config::load`]. Values that are
/// not valid Unicode are converted lossily (and will then fail validation if the key
/// needs a number, a boolean, ...), instead of panicking like `std::env::vars`.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            name.starts_with(ENV_PREFIX)
                .then(|| (name, value.to_string_lossy().into_owned()))
        })
        .collect()
}

impl Config {
    /// Every config key as `(environment variable, dotted key)`, in file order,
    /// e.g. `("OAP_TOOL_BRIDGE_MAX_ROUNDS", "tool_bridge.max_rounds")`.
    pub fn env_vars() -> Vec<(String, String)> {
        SECTIONS
            .iter()
            .flat_map(|(section, keys)| {
                keys.iter()
                    .map(move |key| (env_var_name(section, key), format!("{section}.{key}")))
            })
            .collect()
    }
}

/// Find the section an `OAP_` variable belongs to: the longest section whose upper-case
/// name is followed by `_` (or ends the name). Returns the section and the key part.
fn match_section(rest: &str) -> Option<(&'static str, &'static [&'static str], Option<&str>)> {
    SECTIONS
        .iter()
        .filter_map(|&(section, keys)| {
            let upper = section.to_ascii_uppercase();
            if rest == upper {
                Some((section, keys, None))
            } else {
                rest.strip_prefix(upper.as_str())
                    .and_then(|r| r.strip_prefix('_'))
                    .map(|key| (section, keys, Some(key)))
            }
        })
        .max_by_key(|(section, _, _)| section.len())
}

pub(super) fn apply_env<I>(
    config: &mut Config,
    env: I,
    warnings: &mut Vec<String>,
) -> Result<Vec<EnvOverride>, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect();
    // Deterministic order (and error reporting); stable, so a repeated name's last
    // value wins.
    vars.sort_by(|a, b| a.0.cmp(&b.0));

    let mut overrides: Vec<EnvOverride> = Vec::new();
    for (var, raw) in vars {
        if NON_CONFIG_ENV_VARS.contains(&var.as_str()) {
            continue;
        }
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let Some((section, keys, key_part)) = match_section(rest) else {
            warnings.push(format!(
                "{var}: ignored, it matches no config section{}",
                section_hint(rest)
            ));
            continue;
        };
        let key_upper = key_part.unwrap_or("");
        let Some(&key) = keys.iter().find(|k| k.to_ascii_uppercase() == key_upper) else {
            let key_lower = key_upper.to_ascii_lowercase();
            let hint = match closest(&key_lower, keys.iter().copied()) {
                Some(k) => format!(" (did you mean {}?)", env_var_name(section, k)),
                None => format!(
                    " (keys of {section}: {})",
                    keys.iter()
                        .map(|k| k.to_ascii_uppercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let what = if key_part.is_none() {
                format!("names the section \"{section}\" but no key")
            } else {
                format!("unknown key \"{section}.{key_lower}\"")
            };
            return Err(ConfigError::Env {
                var,
                message: format!("{what}{hint}"),
            });
        };
        match set_from_env(config, section, key, &raw) {
            Some(Ok(())) => {}
            Some(Err(message)) => return Err(ConfigError::Env { var, message }),
            // Unreachable: `key` comes from the same table as `set_from_env`.
            None => {
                return Err(ConfigError::Env {
                    var,
                    message: format!("internal error: no setter for {section}.{key}"),
                })
            }
        }
        let key_path = format!("{section}.{key}");
        overrides.retain(|o| o.var != var);
        overrides.push(EnvOverride { var, key: key_path });
    }
    Ok(overrides)
}

/// ` (did you mean OAP_TOOL_BRIDGE_...?)` for a near-miss section name.
fn section_hint(rest: &str) -> String {
    let mut best: Option<(usize, &str)> = None;
    for (section, _) in SECTIONS {
        let upper = section.to_ascii_uppercase();
        // Compare the section name with the variable's head of the same length, one
        // shorter and one longer (a dropped or doubled letter).
        for n in [upper.len() - 1, upper.len(), upper.len() + 1] {
            let Some(head) = rest.get(..n.min(rest.len())) else {
                continue;
            };
            let d = levenshtein(head, &upper);
            let limit = if upper.len() < 6 { 1 } else { 2 };
            if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, section));
            }
        }
    }
    best.map(|(_, s)| {
        format!(
            " (did you mean {ENV_PREFIX}{}_...?)",
            s.to_ascii_uppercase()
        )
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_table_matches_the_structs() {
        let value = serde_json::to_value(Config::default()).expect("serialize defaults");
        let object = value.as_object().expect("top level is an object");
        let sections: Vec<&str> = object.keys().map(String::as_str).collect();
        let table: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
        assert_eq!(sections, table, "section list out of sync with Config");
        for (section, keys) in SECTIONS {
            let fields: Vec<&str> = object[*section]
                .as_object()
                .expect("section is an object")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(&fields, keys, "key list of {section} out of sync");
        }
    }

    #[test]
    fn every_key_has_an_env_setter() {
        for (section, keys) in SECTIONS {
            for key in *keys {
                let mut c = Config::default();
                assert!(
                    set_from_env(&mut c, section, key, "").is_some(),
                    "{section}.{key} has no setter"
                );
            }
        }
    }

    #[test]
    fn section_matching_prefers_the_longest_section() {
        let (s, _, k) = match_section("TOOL_BRIDGE_MAX_ROUNDS").expect("match");
        assert_eq!((s, k), ("tool_bridge", Some("MAX_ROUNDS")));
        let (s, _, k) = match_section("LOG").expect("match");
        assert_eq!((s, k), ("log", None));
        assert!(match_section("TOOL_MAX").is_none());
        assert!(match_section("LOGGING_LEVEL").is_none());
    }
}
