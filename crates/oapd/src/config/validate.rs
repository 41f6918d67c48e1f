//! The checks a loaded configuration must pass: ranges, formats and the
//! constraints between keys, one function per section.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use tracing_subscriber::EnvFilter;

use super::text::quote;
use super::{
    Config, ConfigError, DiscoveryConfig, DiscoveryMode, EmbeddingConfig, ExperienceConfig,
    IndexConfig, LogConfig, ManifestsConfig, OllamaConfig, Problem, ServerConfig, ToolBridgeConfig,
    ToolsConfig,
};

impl Config {
    /// Check ranges, formats and cross-key constraints. Returns non-fatal warnings,
    /// or every problem found.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        let mut c = Checker::default();
        server(&mut c, &self.server);
        index(&mut c, &self.index);
        embedding(&mut c, &self.embedding);
        manifests(&mut c, &self.manifests);
        discovery(&mut c, &self.discovery, &self.embedding);
        tool_bridge(&mut c, &self.tool_bridge, &self.discovery);
        experience(&mut c, &self.experience);
        c.range("mcp.init_timeout", self.mcp.init_timeout, 1, 600);
        c.range("mcp.call_timeout", self.mcp.call_timeout, 1, 3_600);
        tools(&mut c, &self.tools);
        ollama(&mut c, &self.ollama, &self.server);
        log(&mut c, &self.log);
        for (key, message) in self.crawler.problems() {
            c.fail(key, message);
        }
        for (key, message) in self.snapshots.problems() {
            c.fail(key, message);
        }

        if c.problems.is_empty() {
            Ok(c.warnings)
        } else {
            Err(ConfigError::Invalid(c.problems))
        }
    }
}

fn server(c: &mut Checker, s: &ServerConfig) {
    if s.listen.is_empty() {
        c.fail("server.listen", "at least one address is required");
    }
    for (i, addr) in s.listen.iter().enumerate() {
        let key = format!("server.listen[{i}]");
        match addr.parse::<SocketAddr>() {
            Err(_) => c.fail(
                key,
                format!(
                    "not an IP:port socket address (e.g. \"0.0.0.0:8300\", \"[::1]:8300\"): {}",
                    quote(addr)
                ),
            ),
            Ok(parsed) => {
                let dup = s.listen[..i]
                    .iter()
                    .any(|o| o.parse::<SocketAddr>().ok() == Some(parsed));
                if dup {
                    c.fail(key, format!("duplicate address {}", quote(addr)));
                }
            }
        }
    }
    c.range(
        "server.max_body_bytes",
        s.max_body_bytes,
        1024,
        256 * 1024 * 1024,
    );
    c.range(
        "server.max_task_bytes",
        s.max_task_bytes,
        1,
        s.max_body_bytes.max(1),
    );
    for (i, range) in s.trusted_clients.iter().enumerate() {
        if range.parse::<oap_exec::Cidr>().is_err() {
            c.fail(
                format!("server.trusted_clients[{i}]"),
                format!("expected an address or CIDR range like 192.168.1.0/24, got {range:?}"),
            );
        }
    }
    c.range("server.request_timeout", s.request_timeout, 1, 3600);
    c.range("server.header_read_timeout", s.header_read_timeout, 1, 3600);
    c.range("server.max_connections", s.max_connections, 1, 65_536);
    c.range(
        "server.max_pending_connections",
        s.max_pending_connections,
        1,
        65_536,
    );
    c.range(
        "server.max_connections_per_client",
        s.max_connections_per_client,
        1,
        65_536,
    );
    c.range("server.shutdown_grace", s.shutdown_grace, 1, 3600);
    c.range(
        "server.recent_requests",
        s.recent_requests,
        0,
        super::MAX_RECENT_REQUESTS,
    );
    if let Some(token) = &s.auth_token {
        if token.is_empty() {
            c.fail(
                "server.auth_token",
                "is empty; remove the key (or set it to null) to disable authentication",
            );
        } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
            c.fail(
                "server.auth_token",
                "may contain only visible ASCII characters (no spaces), as it is sent in an HTTP header",
            );
        } else if token.len() < 16 {
            c.warnings.push(
                "server.auth_token is shorter than 16 characters; use a long random token"
                    .to_owned(),
            );
        }
    } else if s
        .listen
        .iter()
        .filter_map(|a| a.parse::<SocketAddr>().ok())
        .any(|a| !a.ip().is_loopback())
    {
        c.warnings.push(
            "server.listen includes a non-loopback address and server.auth_token is not set: the API is open to the network"
                .to_owned(),
        );
    }
    validate_clients(c, s);
    for (i, origin) in s.cors_origins.iter().enumerate() {
        if origin != "*" {
            if let Err(msg) = check_http_url(origin, true) {
                c.fail(format!("server.cors_origins[{i}]"), msg);
            }
        }
    }
    for (i, host) in s.allowed_hosts.iter().enumerate() {
        if let Err(msg) = check_host_name(host) {
            c.fail(format!("server.allowed_hosts[{i}]"), msg);
        }
    }
}

fn index(c: &mut Checker, ix: &IndexConfig) {
    if ix.data_dir.as_os_str().is_empty() {
        c.fail("index.data_dir", "must not be empty");
    }
    if let Some(n) = ix.search_threads {
        c.range("index.search_threads", n, 1, 1024);
    }
    c.range(
        "index.start_embed_limit",
        ix.start_embed_limit,
        0,
        100_000_000,
    );
}

fn embedding(c: &mut Checker, em: &EmbeddingConfig) {
    if em.model_dir.as_os_str().is_empty() {
        c.fail("embedding.model_dir", "must not be empty");
    }
    c.range("embedding.max_tokens", em.max_tokens, 1, 512);
    c.range("embedding.batch_size", em.batch_size, 1, 1024);
    if let Some(n) = em.threads {
        c.range("embedding.threads", n, 1, 1024);
    }
}

fn manifests(c: &mut Checker, mf: &ManifestsConfig) {
    for (i, dir) in mf.dirs.iter().enumerate() {
        if dir.as_os_str().is_empty() {
            c.fail(format!("manifests.dirs[{i}]"), "must not be empty");
        }
    }
    if !mf.bundled && mf.dirs.is_empty() {
        c.warnings.push(
            "manifests.bundled is false and manifests.dirs is empty: the index will have no manifests"
                .to_owned(),
        );
    }
}

/// `discovery:`, and whether its mode is possible with `embedding:`.
fn discovery(c: &mut Checker, d: &DiscoveryConfig, em: &EmbeddingConfig) {
    c.range("discovery.max_top_k", d.max_top_k, 1, 100);
    c.range(
        "discovery.default_top_k",
        d.default_top_k,
        1,
        d.max_top_k.max(1),
    );
    c.range("discovery.query_cache", d.query_cache, 0, 65_536);
    c.range("discovery.coalesce_queries", d.coalesce_queries, 0, 64);
    c.range("discovery.generate_per_hour", d.generate_per_hour, 1, 3600);
    if let Some(model) = &d.generate_model {
        if model.trim().is_empty() || model.len() > 200 || model.chars().any(char::is_control) {
            c.fail(
                "discovery.generate_model",
                format!(
                    "must be an Ollama model name (1 to 200 characters, no control characters), got {}",
                    quote(model)
                ),
            );
        }
    }
    if let Some(min_score) = d.min_score.filter(|s| !s.is_finite()) {
        c.fail(
            "discovery.min_score",
            format!("must be a finite number, got {min_score}"),
        );
    }
    if !em.enabled && d.mode != DiscoveryMode::Lexical {
        c.warnings.push(format!(
            "discovery.mode is {} but embedding.enabled is false: only lexical ranking is possible",
            d.mode
        ));
    }
}

/// `tool_bridge.response_store`: each bound at least 1 and at most what a
/// board could hold; one client's share no larger than the whole.
fn response_store(c: &mut Checker, store: &oap_bridge::ResponseStoreConfig) {
    const KEY: &str = "tool_bridge.response_store";
    c.range(&format!("{KEY}.per_client"), store.per_client, 1, 10_000);
    c.range(
        &format!("{KEY}.per_client_bytes"),
        store.per_client_bytes,
        1024,
        1 << 30,
    );
    c.range(
        &format!("{KEY}.total_bytes"),
        store.total_bytes,
        1024,
        1 << 30,
    );
    c.range(&format!("{KEY}.clients"), store.clients, 1, 100_000);
    c.range(&format!("{KEY}.max_age"), store.max_age, 1, 7 * 24 * 3600);
    if store.per_client_bytes > store.total_bytes {
        c.fail(
            format!("{KEY}.per_client_bytes"),
            format!(
                "is {} bytes, more than total_bytes ({}): one client could never use it",
                store.per_client_bytes, store.total_bytes
            ),
        );
    }
}

/// `tool_bridge:`; its `default_top_k` is bounded by `discovery.max_top_k`.
fn tool_bridge(c: &mut Checker, tb: &ToolBridgeConfig, d: &DiscoveryConfig) {
    c.range("tool_bridge.default_top_k", tb.default_top_k, 1, 20);
    if tb.default_top_k > d.max_top_k {
        c.fail(
            "tool_bridge.default_top_k",
            format!(
                "is {} but discovery.max_top_k is {}; it must not exceed it",
                tb.default_top_k, d.max_top_k
            ),
        );
    }
    c.range("tool_bridge.max_rounds", tb.max_rounds, 1, 10);
    c.range("tool_bridge.http_timeout", tb.http_timeout, 1, 3600);
    c.range("tool_bridge.stdio_timeout", tb.stdio_timeout, 1, 3600);
    c.range("tool_bridge.stream_keepalive", tb.stream_keepalive, 1, 300);
    response_store(c, &tb.response_store);
    for (i, rule) in tb.force.0.iter().enumerate() {
        if let Err(message) = oap_bridge::forcing::compile(rule) {
            c.fail(format!("tool_bridge.force[{i}].pattern"), message);
        }
        if rule.tool.trim().is_empty() {
            c.fail(
                format!("tool_bridge.force[{i}].tool"),
                "must name a manifest id or tool",
            );
        }
    }
    if tb.tool_token_budget != 0 {
        c.range(
            "tool_bridge.tool_token_budget",
            tb.tool_token_budget,
            50,
            1_000_000,
        );
    }
    if tb.text_tool_calls.len() > 64 {
        c.fail(
            "tool_bridge.text_tool_calls",
            format!("lists {} models; at most 64", tb.text_tool_calls.len()),
        );
    }
    for (i, prefix) in tb.text_tool_calls.iter().enumerate() {
        if prefix.is_empty()
            || prefix.len() > 256
            || prefix
                .chars()
                .any(|ch| ch.is_control() || ch.is_whitespace())
        {
            c.fail(
                format!("tool_bridge.text_tool_calls[{i}]"),
                format!("must be a model-name prefix such as gemma3 (1 to 256 characters, no spaces), got {prefix:?}"),
            );
        }
    }
}

fn experience(c: &mut Checker, ex: &ExperienceConfig) {
    if !(0.0..=1.0).contains(&ex.min_similarity) {
        c.fail(
            "experience.min_similarity",
            format!("must be between 0 and 1, got {}", ex.min_similarity),
        );
    }
    c.range("experience.ttl", ex.ttl, 60, 10 * 365 * 24 * 3600);
    c.range("experience.max_entries", ex.max_entries, 1, 100_000);
}

fn tools(c: &mut Checker, tools: &ToolsConfig) {
    c.range(
        "tools.max_result_chars",
        tools.max_result_chars,
        100,
        10_000_000,
    );
    c.range(
        "tools.max_response_bytes",
        tools.max_response_bytes,
        1024,
        1024 * 1024 * 1024,
    );
    c.range("tools.max_parallel", tools.max_parallel, 1, 64);
    // At least 1 MiB so that ordinary tools have room; at most 16 GiB, which
    // a tmpfs would take from memory.
    c.range(
        "tools.max_scratch_bytes",
        tools.max_scratch_bytes,
        1 << 20,
        16 << 30,
    );
    for (i, range) in tools.allow_private.iter().enumerate() {
        if range.parse::<oap_exec::Cidr>().is_err() {
            c.fail(
                format!("tools.allow_private[{i}]"),
                format!("expected an address or CIDR range like 192.168.1.0/24, got {range:?}"),
            );
        }
    }
    for (i, dir) in tools.stdio_dirs.iter().enumerate() {
        if !dir.is_absolute() {
            c.fail(
                format!("tools.stdio_dirs[{i}]"),
                format!("must be an absolute path, got {}", dir.display()),
            );
        }
    }
    for (i, path) in tools.sandbox_read_paths.iter().enumerate() {
        if !path.is_absolute() {
            c.fail(
                format!("tools.sandbox_read_paths[{i}]"),
                format!("must be an absolute path, got {}", path.display()),
            );
        }
    }
    for (i, name) in tools.sandbox_spawn.iter().enumerate() {
        if name.is_empty() || name.contains('/') || name.chars().any(char::is_control) {
            c.fail(
                format!("tools.sandbox_spawn[{i}]"),
                format!("must be a bare command name such as man, got {name:?}"),
            );
        }
    }
}

/// `ollama:`, and the in-flight body budget (`server.max_inflight_body_bytes`)
/// that must hold the largest single body either side allows.
fn ollama(c: &mut Checker, o: &OllamaConfig, s: &ServerConfig) {
    c.range("ollama.timeout", o.timeout, 1, 3600);
    c.range("ollama.chat_deadline", o.chat_deadline, 1, 3600);
    c.range(
        "ollama.max_request_bytes",
        o.max_request_bytes,
        1024,
        1024 * 1024 * 1024,
    );
    let largest_body = s.max_body_bytes.max(o.max_request_bytes);
    if s.max_inflight_body_bytes < largest_body {
        c.fail(
            "server.max_inflight_body_bytes",
            format!(
                "must be at least the largest single body allowed \
                 (server.max_body_bytes, ollama.max_request_bytes: {largest_body}), got {}",
                s.max_inflight_body_bytes
            ),
        );
    }
    c.range(
        "server.max_inflight_body_bytes",
        s.max_inflight_body_bytes,
        1024 * 1024,
        4095 * 1024 * 1024,
    );
    if let Err(msg) = check_http_url(&o.base_url, false) {
        c.fail("ollama.base_url", msg);
    }
    if let Some(key) = &o.api_key {
        if key.trim().is_empty() || key.chars().any(char::is_control) {
            // The message never repeats the secret.
            c.fail(
                "ollama.api_key",
                "must be a non-empty token without control characters (it is sent as a header)",
            );
        }
    }
    if o.ca_file.is_some() && !o.base_url.to_ascii_lowercase().starts_with("https://") {
        c.fail(
            "ollama.ca_file",
            "is only used with an https:// ollama.base_url",
        );
    }
}

fn log(c: &mut Checker, log: &LogConfig) {
    if let Err(msg) = check_log_level(&log.level) {
        c.fail("log.level", msg);
    }
}

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

impl Checker {
    fn fail(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(key, message));
    }

    fn range<T: PartialOrd + fmt::Display>(&mut self, key: &str, value: T, min: T, max: T) {
        if value < min || value > max {
            self.fail(key, format!("must be between {min} and {max}, got {value}"));
        }
    }
}

/// Check an `http(s)://host[:port][/path]` URL (no query, fragment or credentials).
/// With `origin_only`, no path is allowed either (a CORS origin).
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn check_http_url(url: &str, origin_only: bool) -> Result<(), String> {
    let shown = quote(url);
    let bad = |why: &str| Err(format!("{why}: {shown}"));
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain spaces or control characters");
    }
    let lower = url.to_ascii_lowercase();
    let scheme_len = if lower.starts_with("http://") {
        "http://".len()
    } else if lower.starts_with("https://") {
        "https://".len()
    } else {
        return bad("must start with http:// or https://");
    };
    let rest = &url[scheme_len..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if tail.contains(['?', '#']) {
        return bad("must not contain a query (?) or fragment (#)");
    }
    if origin_only && !tail.is_empty() {
        return bad("an origin has no path (not even a trailing /)");
    }
    if authority.contains('@') {
        return bad("must not contain credentials (user@)");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return bad("unclosed [ in IPv6 host");
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return bad("invalid IPv6 address");
        }
        match after {
            "" => (addr, None),
            p => match p.strip_prefix(':') {
                Some(port) => (addr, Some(port)),
                None => return bad("unexpected text after ]"),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return bad("has no host");
    }
    if !authority.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return bad("invalid host name");
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p > 0);
        if !ok {
            return bad("invalid port");
        }
    }
    Ok(())
}

/// Parses a log filter the way the daemon builds every one (`log.level`
/// and `RUST_LOG`); the error says what is wrong, without the value.
///
/// Refused before the parser sees them: non-ASCII directives (the parser
/// slices them at byte offsets and panics) and field filters
/// (`target[span{field=value}]=level`: as patterns their DFA can take
/// minutes to build; as literal text the same one twice breaks an
/// invariant of the filter library). All three were found by fuzzing.
/// Field values are literal text all the same (`with_regex(false)`), so a
/// filter built here never compiles a pattern.
pub(crate) fn parse_log_filter(directives: &str) -> Result<EnvFilter, String> {
    if let Some(c) = directives.chars().find(|c| !c.is_ascii()) {
        return Err(format!("a filter directive is ASCII, found {c:?}"));
    }
    if directives.contains(['{', '}']) {
        return Err("field filters ({...}) are not supported".to_string());
    }
    EnvFilter::builder()
        .with_regex(false)
        .parse(directives)
        .map_err(|e| e.to_string())
}

fn check_log_level(level: &str) -> Result<(), String> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let trimmed = level.trim();
    if LEVELS.iter().any(|l| l.eq_ignore_ascii_case(trimmed)) {
        return Ok(());
    }
    let hint = "expected trace, debug, info, warn, error, off, or a filter directive such as \"info,oapd=debug\"";
    // A single bare word would be accepted by EnvFilter as a *target* name, silently
    // disabling all other logs: require a real directive (`=` or `,`) otherwise.
    if trimmed.is_empty() || !trimmed.contains(['=', ',']) {
        return Err(format!("{hint}, got {}", quote(level)));
    }
    parse_log_filter(trimmed)
        .map(|_| ())
        .map_err(|e| format!("{hint}; {e}, in {}", quote(level)))
}

/// Checks one `server.allowed_hosts` entry: a DNS name or an IP address,
/// without scheme, port, path or wildcard.
fn check_host_name(entry: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{why}: {entry:?}"));
    if entry.is_empty() {
        return bad("must not be empty");
    }
    let bare = entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .unwrap_or(entry);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if entry.len() > 253 {
        return bad("longer than 253 characters");
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !entry.split('.').all(label_ok) {
        return bad(
            "not a host name (letters, digits, '-' and '.', e.g. \"pi.example.org\"; \
             no scheme, port, path or wildcard)",
        );
    }
    Ok(())
}

/// `server.clients`: names that can be shown and labelled, tokens that can
/// travel in a URL path and tell the clients (and the operator) apart,
/// known scopes.
fn validate_clients(c: &mut Checker, s: &super::ServerConfig) {
    let clients = &s.clients.0;
    let name_chars = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    for (i, client) in clients.iter().enumerate() {
        let key = format!("server.clients[{i}]");
        if client.name.is_empty() || client.name.len() > 64 || !client.name.bytes().all(name_chars)
        {
            c.fail(
                format!("{key}.name"),
                format!(
                    "expected 1 to 64 letters, digits, '-', '_' or '.', got {:?}",
                    client.name
                ),
            );
        } else if clients[..i].iter().any(|other| other.name == client.name) {
            c.fail(
                format!("{key}.name"),
                format!("duplicate client name {:?}", client.name),
            );
        }
        // The token's text is never part of a message.
        let token = &client.token;
        if token.is_empty() {
            c.fail(format!("{key}.token"), "is empty");
        } else if !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
        {
            c.fail(
                format!("{key}.token"),
                "may contain only letters, digits, '-', '_', '.' and '~', as it is carried in a URL path",
            );
        } else if s.auth_token.as_deref() == Some(token.as_str()) {
            c.fail(
                format!("{key}.token"),
                "is server.auth_token: a client needs a token of its own, or it would be the operator",
            );
        } else if clients[..i].iter().any(|other| other.token == *token) {
            c.fail(
                format!("{key}.token"),
                "is another client's token: each client needs its own, to be told apart",
            );
        } else if token.len() < 16 {
            c.warnings.push(format!(
                "{key}.token is shorter than 16 characters; use a long random token"
            ));
        }
        if client.scopes.is_empty() {
            c.fail(
                format!("{key}.scopes"),
                format!(
                    "is empty: a client needs one or more of {}",
                    super::CLIENT_SCOPES.join(", ")
                ),
            );
        }
        for (j, scope) in client.scopes.iter().enumerate() {
            if !super::CLIENT_SCOPES.contains(&scope.as_str()) {
                c.fail(
                    format!("{key}.scopes[{j}]"),
                    format!(
                        "expected one of {}, got {scope:?}",
                        super::CLIENT_SCOPES.join(", ")
                    ),
                );
            }
        }
    }
    if !clients.is_empty() && s.auth_token.is_none() {
        c.warnings.push(
            "server.clients is set but server.auth_token is not: the API is open to every client, \
             and the client tokens only name who called"
                .to_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_checks() {
        for ok in [
            "http://127.0.0.1:11434",
            "https://ollama.local",
            "http://[::1]:11434",
            "http://host/prefix/",
            "HTTP://Host.Example:80",
        ] {
            assert!(check_http_url(ok, false).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1:11434",
            "ftp://x",
            "http://",
            "http://:80",
            "http://h:0",
            "http://h:99999",
            "http://h:x",
            "http://u:p@h",
            "http://h/?q",
            "http://h h",
            "http://[::1",
            "http://[zz]:1",
        ] {
            assert!(check_http_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_http_url("https://app.example", true).is_ok());
        assert!(check_http_url("https://app.example/", true).is_err());
    }

    #[test]
    fn log_level_checks() {
        for ok in ["info", "DEBUG", "off", "info,oapd=debug", "oapd=trace"] {
            assert!(check_log_level(ok).is_ok(), "{ok}");
        }
        for bad in ["", "verbose", "info,oapd=loud"] {
            assert!(check_log_level(bad).is_err(), "{bad}");
        }
        // Found by fuzzing: this made the filter parser panic.
        let err =
            check_log_level("-4|--\u{e4904}[[[r\u{e4904}[[[r([KKKKK'''&'''\u{e4904}[[[r[[KKKK=")
                .unwrap_err();
        assert!(err.contains("a filter directive is ASCII"), "{err}");
        assert!(check_log_level("info,oäpd=debug").is_err());
    }

    #[test]
    fn field_filters_are_refused_and_never_compiled_as_patterns() {
        // Found by fuzzing (`OAP_LOG_LEVEL`): compiled as a regular
        // expression, the field value below (42 `.` among NULs) kept the
        // filter's DFA builder busy for minutes.
        let fuzzed = format!(
            "7|r[[K\r\u{1}\0'\0|\r  \u{11}!mdn{{6=\0\0 \0\0\0\0|{}{}{}'\0*\0\0\0\0\0 =7: .|r[UU}}UU|{}8",
            "\0".repeat(12),
            ".".repeat(42),
            "\0".repeat(50),
            "\0".repeat(7),
        );
        let err = check_log_level(&fuzzed).unwrap_err();
        assert!(err.contains("field filters"), "{err}");
        // The same kind of pattern in a directive that is otherwise valid:
        // a field filter whose value as a pattern (`.*a` and 24 more
        // characters) would need a DFA of 2^24 states.
        let directive = format!("info,oapd[request{{path=.*a{}}}]=debug", ".".repeat(24));
        let err = check_log_level(&directive).unwrap_err();
        assert!(
            err.contains("field filters ({...}) are not supported"),
            "{err}"
        );
        // A span name without fields stays a valid directive.
        assert_eq!(check_log_level("info,oapd[request]=debug"), Ok(()));
        // Found by fuzzing too: the same field filter twice broke an
        // invariant of the filter library (a panic where its debug
        // assertions are on). It is refused like any field filter.
        let twice = "info,[{path=x}]=debug,[{path=x}]=trace";
        assert!(check_log_level(twice).is_err());
        // `RUST_LOG` goes through the same parser.
        assert!(parse_log_filter(&directive).is_err());
    }

    #[test]
    fn allowed_host_entries_are_host_names() {
        for good in [
            "pi.example.org",
            "oapd",
            "my_box.lan",
            "10.0.0.5",
            "::1",
            "[fd00::1]",
        ] {
            assert_eq!(check_host_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "http://pi.example.org",
            "pi.example.org:8300",
            "*.example.org",
            "pi..example",
            "-pi.example",
            "pi.example.org/",
            "pi example",
        ] {
            assert!(check_host_name(bad).is_err(), "{bad}");
        }
    }
}
