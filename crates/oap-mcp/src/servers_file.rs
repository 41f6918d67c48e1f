//! The Claude-Desktop style `mcpServers` file, read verbatim.
//!
//! ```json
//! {"mcpServers": {
//!   "weather": {"command": "uvx", "args": ["mcp-weather"], "env": {"KEY": "${env:WEATHER_KEY}"}},
//!   "search":  {"url": "https://mcp.example/mcp", "headers": {"X-Team": "a"}}
//! }}
//! ```
//!
//! Per server: `command`, `args`, `env`, `cwd` (a local program spoken to
//! over stdin/stdout) or `url`, `headers`, `type` (a remote server:
//! `"http"`/`"streamable-http"` or `"sse"`; a URL whose path ends in `/sse`
//! is legacy SSE too), plus `disabledTools` / `allowedTools` (arrays of tool
//! names). Strings may use `${env:VAR}`; an unset variable is a problem for
//! that server only. Unknown keys are ignored (other programs read the same
//! file).
//!
//! oapd's own keys per server:
//! - `"trust"`: `"internet"` (default), `"lan"` or `"local"` for URL servers:
//!   which addresses the host may resolve to (oap-exec's address rule).
//! - `"sandbox"`: `{"network": bool, "paths": [..]}` for stdio servers
//!   (absent = not confined; an operator-configured server is trusted like a
//!   service they install). When present the server is confined by the
//!   kernel: it reads only system paths, `paths`, its program's directory
//!   and `cwd`, writes only a scratch directory (its `HOME`), and uses the
//!   network only with `"network": true`.
//! - `"start"`: `"eager"` (default: connect at once) or `"lazy"`.
//! - `"timeout_ms"`: the default per-call deadline for this server's tools.
//!
//! Every parsed entry carries a [`Redaction`]: what of it may be shown
//! and which of its strings are secrets (see [`crate::redact`]). The
//! `Debug`, `Display` and `Serialize` forms of [`ServerSpec`] and the
//! `Debug` form of [`Transport`] are built from it, so printing a spec
//! never prints a value that came from `${env:}`, a query string, a header
//! value or a stdio server's environment.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use oap_exec::Trust;
use serde::Serialize;

use crate::redact::{self, Redaction, REDACTED};
use serde_json::{Map, Value};

/// Largest servers file accepted (read it with a capped read).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most servers one file may configure; the rest are reported as problems.
pub const MAX_SERVERS: usize = 64;
/// Longest server name (the name becomes part of `mcp/<server>/<tool>`).
pub const MAX_NAME_CHARS: usize = 64;
/// Most `args`, `env` or `headers` entries per server.
const MAX_ENTRIES: usize = 256;
/// Longest single string after expansion.
const MAX_STRING_CHARS: usize = 16 * 1024;
/// Longest per-server call deadline accepted.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// How a server is reached. Its `Debug` form names no value (the program,
/// arguments, URL, header and environment values may hold secrets); the
/// spec's [`ServerSpec::location`] is what may be shown.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A local program, spoken to over its stdin and stdout.
    Stdio {
        /// The program (a path, or a name looked up in `PATH`).
        command: String,
        /// Its arguments, passed without a shell.
        args: Vec<String>,
        /// Extra environment (beside `PATH`, `HOME`, `LANG`).
        env: BTreeMap<String, String>,
        /// Working directory (default: the daemon's).
        cwd: Option<PathBuf>,
        /// Kernel confinement, when configured.
        sandbox: Option<SandboxSpec>,
    },
    /// A remote server over streamable HTTP (or legacy SSE).
    Http {
        /// The endpoint URL.
        url: url::Url,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// Whether this is the legacy HTTP+SSE transport.
        legacy_sse: bool,
        /// Which addresses the host may resolve to.
        trust: Trust,
    },
}

impl Transport {
    /// `stdio`, `http` or `sse`.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http {
                legacy_sse: true, ..
            } => "sse",
            Transport::Http { .. } => "http",
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Stdio {
                args, env, sandbox, ..
            } => f
                .debug_struct("Stdio")
                .field("args", &args.len())
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("sandbox", &sandbox.as_ref().map(|s| s.network))
                .finish_non_exhaustive(),
            Transport::Http {
                headers,
                legacy_sse,
                trust,
                ..
            } => f
                .debug_struct("Http")
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("legacy_sse", legacy_sse)
                .field("trust", trust)
                .finish_non_exhaustive(),
        }
    }
}

/// The `sandbox` extension of a stdio server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxSpec {
    /// Whether the server may use the network.
    pub network: bool,
    /// Extra paths it may read.
    pub paths: Vec<PathBuf>,
}

/// When a server is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// At once, when the spec is applied.
    #[default]
    Eager,
    /// On the first call that needs it.
    Lazy,
}

/// One configured server. `Debug`, `Display` and `Serialize` show its
/// redacted form only.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// Its name (`[A-Za-z0-9_.-]{1,64}`).
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// When set, only these tools are offered.
    pub allowed_tools: Option<Vec<String>>,
    /// These tools are never offered.
    pub disabled_tools: Vec<String>,
    /// When it starts.
    pub start: Start,
    /// Its default call deadline, when set.
    pub timeout: Option<Duration>,
    /// What of it may be shown; built by the parser.
    redaction: Redaction,
}

impl ServerSpec {
    /// Where the server is, safe to show anywhere: `stdio: <program>` or
    /// the URL without its query, parts from `${env:}` replaced.
    pub fn location(&self) -> &str {
        self.redaction.location()
    }

    /// `text` (an error, a log line) without this entry's secrets.
    pub fn scrub(&self, text: &str) -> String {
        self.redaction.scrub(text)
    }

    /// The entry's redaction, for code that scrubs texts about it later.
    pub fn redaction(&self) -> &Redaction {
        &self.redaction
    }

    /// Whether the allow/deny lists let `tool` through.
    pub fn offers(&self, tool: &str) -> bool {
        if self.disabled_tools.iter().any(|t| t == tool) {
            return false;
        }
        match &self.allowed_tools {
            Some(allowed) => allowed.iter().any(|t| t == tool),
            None => true,
        }
    }
}

impl std::fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSpec")
            .field("name", &self.name)
            .field("location", &self.location())
            .field("transport", &self.transport)
            .field("allowed_tools", &self.allowed_tools)
            .field("disabled_tools", &self.disabled_tools)
            .field("start", &self.start)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl std::fmt::Display for ServerSpec {
    /// `name (transport, location)`, redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {})",
            self.name,
            self.transport.kind(),
            self.location()
        )
    }
}

impl Serialize for ServerSpec {
    /// `{"name", "transport", "location"}`, redacted.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("ServerSpec", 3)?;
        out.serialize_field("name", &self.name)?;
        out.serialize_field("transport", self.transport.kind())?;
        out.serialize_field("location", self.location())?;
        out.end()
    }
}

/// A bad entry: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecProblem {
    /// JSON path, e.g. `mcpServers.weather.args[1]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What a servers file yields: the good servers and every problem.
#[derive(Debug, Clone, Default)]
pub struct ServersFile {
    /// Servers that parsed.
    pub servers: Vec<ServerSpec>,
    /// Entries (or the whole file) that did not, with their path.
    pub problems: Vec<SpecProblem>,
}

/// Parse a servers file. `origin` names the file in problems; `env` looks up
/// `${env:VAR}`. A bad entry is reported and the others still load.
pub fn parse(bytes: &[u8], origin: &str, env: impl Fn(&str) -> Option<String>) -> ServersFile {
    let mut out = ServersFile::default();
    let problem = |path: &str, message: String| SpecProblem {
        path: path.to_string(),
        message,
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        out.problems.push(problem(
            origin,
            format!(
                "the file is {} bytes, more than the {MAX_FILE_BYTES} allowed",
                bytes.len()
            ),
        ));
        return out;
    }
    let root: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            out.problems
                .push(problem(origin, format!("not valid JSON: {e}")));
            return out;
        }
    };
    let Some(servers) = root.get("mcpServers") else {
        out.problems.push(problem(
            origin,
            "no `mcpServers` object at the top level".into(),
        ));
        return out;
    };
    let Some(servers) = servers.as_object() else {
        out.problems
            .push(problem("mcpServers", "must be an object".into()));
        return out;
    };
    for (i, (name, value)) in servers.iter().enumerate() {
        if i >= MAX_SERVERS {
            out.problems.push(problem(
                "mcpServers",
                format!(
                    "{} servers configured, only the first {MAX_SERVERS} are used",
                    servers.len()
                ),
            ));
            break;
        }
        match parse_server_with_env(name, value, &env) {
            Ok(spec) => out.servers.push(spec),
            Err(p) => out.problems.push(p),
        }
    }
    out
}

/// Parse one server entry (the daemon's inline `mcp.servers` map uses the
/// same shape), expanding `${env:VAR}` from the process environment.
pub fn parse_server(name: &str, value: &Value) -> Result<ServerSpec, SpecProblem> {
    parse_server_with_env(name, value, &|var: &str| std::env::var(var).ok())
}

/// Whether `name` is a valid server name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && name != "."
        && name != ".."
}

struct Ctx<'a> {
    base: String,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Every value expanded so far and what shows instead of it.
    expanded: RefCell<Redaction>,
}

impl Ctx<'_> {
    /// A problem at `key`; values expanded so far are scrubbed from the
    /// message (it may quote one, e.g. an unknown `type`).
    fn err(&self, key: &str, message: impl Into<String>) -> SpecProblem {
        let message = self.expanded.borrow().scrub(&message.into());
        SpecProblem {
            path: if key.is_empty() {
                self.base.clone()
            } else if key.starts_with('[') {
                format!("{}{key}", self.base)
            } else {
                format!("{}.{key}", self.base)
            },
            message,
        }
    }

    /// `${env:VAR}` expansion; `$` elsewhere is kept. Each value taken
    /// from the environment, and the whole string it went into, become
    /// secrets of the entry.
    fn expand(&self, key: &str, raw: &str) -> Result<String, SpecProblem> {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(at) = rest.find("${env:") {
            let (before, tail) = rest.split_at(at);
            out.push_str(before);
            let after = tail.get("${env:".len()..).unwrap_or("");
            let Some(end) = after.find('}') else {
                return Err(self.err(key, "unterminated `${env:` reference"));
            };
            let (var, tail) = after.split_at(end);
            if var.is_empty() {
                return Err(self.err(key, "empty variable name in `${env:}`"));
            }
            match (self.env)(var) {
                Some(v) => {
                    self.expanded.borrow_mut().add(&v, REDACTED);
                    out.push_str(&v);
                }
                None => return Err(self.err(key, format!("environment variable {var} is not set"))),
            }
            rest = tail.get(1..).unwrap_or("");
        }
        out.push_str(rest);
        if out.chars().count() > MAX_STRING_CHARS {
            return Err(self.err(key, format!("longer than {MAX_STRING_CHARS} characters")));
        }
        if out.contains('\0') {
            return Err(self.err(key, "contains a NUL character"));
        }
        if raw.contains("${env:") {
            self.expanded
                .borrow_mut()
                .add(&out, &redact::shown_text(raw));
        }
        Ok(out)
    }

    fn string(&self, obj: &Map<String, Value>, key: &str) -> Result<Option<String>, SpecProblem> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => self.expand(key, s).map(Some),
            Some(_) => Err(self.err(key, "must be a string")),
        }
    }

    fn string_list(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        expand: bool,
    ) -> Result<Option<Vec<String>>, SpecProblem> {
        let items = match obj.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(self.err(key, "must be an array of strings")),
        };
        if items.len() > MAX_ENTRIES {
            return Err(self.err(key, format!("more than {MAX_ENTRIES} entries")));
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let at = format!("{key}[{i}]");
            match item {
                Value::String(s) if expand => out.push(self.expand(&at, s)?),
                Value::String(s) => out.push(s.clone()),
                _ => return Err(self.err(&at, "must be a string")),
            }
        }
        Ok(Some(out))
    }

    fn string_map(
        &self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<BTreeMap<String, String>, SpecProblem> {
        let map = match obj.get(key) {
            None | Some(Value::Null) => return Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(self.err(key, "must be an object of strings")),
        };
        if map.len() > MAX_ENTRIES {
            return Err(self.err(key, format!("more than {MAX_ENTRIES} entries")));
        }
        let mut out = BTreeMap::new();
        for (k, v) in map {
            let at = format!("{key}.{k}");
            if k.is_empty() || k.contains(['=', '\0']) {
                return Err(self.err(&at, "invalid name"));
            }
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), self.expand(&at, s)?);
                }
                _ => return Err(self.err(&at, "must be a string")),
            }
        }
        Ok(out)
    }
}

fn parse_server_with_env(
    name: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerSpec, SpecProblem> {
    let cx = Ctx {
        base: format!("mcpServers.{name}"),
        env,
        expanded: RefCell::new(Redaction::default()),
    };
    if !valid_name(name) {
        return Err(cx.err(
            "",
            format!("invalid server name {name:?}: use 1 to {MAX_NAME_CHARS} of A-Z a-z 0-9 _ . -"),
        ));
    }
    let Some(obj) = value.as_object() else {
        return Err(cx.err("", "a server entry must be an object"));
    };
    let command = cx.string(obj, "command")?;
    let url = cx.string(obj, "url")?;
    let kind = cx.string(obj, "type")?;
    let (transport, redaction) = match (command, url) {
        (Some(_), Some(_)) => {
            return Err(cx.err("", "give either `command` or `url`, not both"));
        }
        (None, None) => {
            return Err(cx.err("", "needs `command` (a local program) or `url`"));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(cx.err("command", "is empty"));
            }
            if let Some(k) = kind.as_deref() {
                if k != "stdio" {
                    return Err(cx.err("type", format!("{k:?} does not fit a `command` server")));
                }
            }
            let args = cx.string_list(obj, "args", true)?.unwrap_or_default();
            let env = cx.string_map(obj, "env")?;
            let cwd = cx.string(obj, "cwd")?.map(PathBuf::from);
            if let Some(c) = &cwd {
                if !c.is_absolute() {
                    return Err(cx.err("cwd", "must be an absolute path"));
                }
            }
            let sandbox = match obj.get("sandbox") {
                None | Some(Value::Null) => None,
                Some(Value::Object(s)) => {
                    let network = match s.get("network") {
                        None | Some(Value::Null) => false,
                        Some(Value::Bool(b)) => *b,
                        Some(_) => return Err(cx.err("sandbox.network", "must be true or false")),
                    };
                    let paths = cx
                        .string_list(s, "paths", true)
                        .map_err(|p| SpecProblem {
                            path: p.path.replace(&cx.base, &format!("{}.sandbox", cx.base)),
                            message: p.message,
                        })?
                        .unwrap_or_default();
                    let mut out = Vec::new();
                    for (i, p) in paths.into_iter().enumerate() {
                        let p = PathBuf::from(p);
                        if !p.is_absolute() {
                            return Err(
                                cx.err(&format!("sandbox.paths[{i}]"), "must be an absolute path")
                            );
                        }
                        out.push(p);
                    }
                    Some(SandboxSpec {
                        network,
                        paths: out,
                    })
                }
                Some(_) => return Err(cx.err("sandbox", "must be an object")),
            };
            if obj.contains_key("trust") {
                return Err(cx.err("trust", "applies to `url` servers only"));
            }
            let raw_command = obj.get("command").and_then(Value::as_str).unwrap_or("");
            let mut redaction = Redaction::new(format!(
                "stdio: {}",
                if raw_command.contains("${env:") {
                    redact::shown_text(raw_command)
                } else {
                    command.clone()
                }
            ));
            // A stdio server's environment is where its keys go.
            for value in env.values() {
                redaction.add(value, REDACTED);
            }
            let transport = Transport::Stdio {
                command,
                args,
                env,
                cwd,
                sandbox,
            };
            (transport, redaction)
        }
        (None, Some(raw)) => {
            let url =
                url::Url::parse(&raw).map_err(|e| cx.err("url", format!("not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(cx.err("url", "must be http:// or https://"));
            }
            if url.host_str().is_none_or(str::is_empty) {
                return Err(cx.err("url", "has no host"));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return Err(cx.err(
                    "url",
                    "must not carry credentials; use `headers` or the credential store",
                ));
            }
            let legacy_sse = match kind.as_deref() {
                None => url.path().trim_end_matches('/').ends_with("/sse"),
                Some("sse") => true,
                Some("http" | "streamable-http" | "streamableHttp") => false,
                Some(other) => {
                    return Err(cx.err(
                        "type",
                        format!(
                        "unknown transport {other:?}: use \"http\", \"streamable-http\" or \"sse\""
                    ),
                    ))
                }
            };
            let headers = cx.string_map(obj, "headers")?;
            for k in headers.keys() {
                if hyper::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    return Err(cx.err(&format!("headers.{k}"), "not a valid header name"));
                }
            }
            for (k, v) in &headers {
                if hyper::header::HeaderValue::from_str(v).is_err() {
                    return Err(cx.err(&format!("headers.{k}"), "not a valid header value"));
                }
            }
            let trust = match cx.string(obj, "trust")?.as_deref() {
                None | Some("internet") => Trust::Internet,
                Some("lan") => Trust::Lan,
                Some("local") => Trust::Local,
                Some(other) => {
                    return Err(cx.err(
                        "trust",
                        format!("{other:?}: use \"internet\", \"lan\" or \"local\""),
                    ))
                }
            };
            if obj.contains_key("sandbox") {
                return Err(cx.err("sandbox", "applies to `command` servers only"));
            }
            let raw_url = obj.get("url").and_then(Value::as_str).unwrap_or("");
            let location = redact::url_location(&url, raw_url);
            let mut redaction = Redaction::new(location.clone());
            // First, so the whole URL is replaced by its shown form rather
            // than by the expanded text's.
            redaction.add_url(&url, &location);
            for value in headers.values() {
                redaction.add(value, REDACTED);
                // `Bearer <token>`: an error may quote the token alone.
                if let Some((_, token)) = value.trim().rsplit_once(' ') {
                    redaction.add(token, REDACTED);
                }
            }
            let transport = Transport::Http {
                url,
                headers,
                legacy_sse,
                trust,
            };
            (transport, redaction)
        }
    };
    let allowed_tools = cx.string_list(obj, "allowedTools", false)?;
    let disabled_tools = cx
        .string_list(obj, "disabledTools", false)?
        .unwrap_or_default();
    let start = match cx.string(obj, "start")?.as_deref() {
        None | Some("eager") => Start::Eager,
        Some("lazy") => Start::Lazy,
        Some(other) => return Err(cx.err("start", format!("{other:?}: use \"eager\" or \"lazy\""))),
    };
    let timeout = match obj.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => {
                return Err(cx.err(
                    "timeout_ms",
                    format!("must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS}"),
                ))
            }
        },
    };
    // Everything expanded, `start` and the rest included.
    let mut redaction = redaction;
    redaction.extend(&cx.expanded.borrow());
    Ok(ServerSpec {
        name: name.to_string(),
        transport,
        allowed_tools,
        disabled_tools,
        start,
        timeout,
        redaction,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(var: &str) -> Option<String> {
        (var == "TOKEN").then(|| "s3cret".to_string())
    }

    fn parse_json(v: Value) -> ServersFile {
        parse(v.to_string().as_bytes(), "servers.json", env)
    }

    #[test]
    fn reads_the_claude_desktop_shape() {
        let f = parse_json(json!({"mcpServers": {
            "weather": {"command": "uvx", "args": ["mcp-weather", "--key=${env:TOKEN}"],
                        "env": {"A": "1"}, "cwd": "/tmp", "disabledTools": ["x"],
                        "someOtherClientsKey": true},
            "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"},
                       "trust": "lan", "timeout_ms": 5000, "start": "lazy",
                       "allowedTools": ["search"]},
            "old": {"url": "https://mcp.example.com/sse"},
            "typed": {"url": "https://mcp.example.com/events", "type": "sse"}
        }}));
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        assert_eq!(f.servers.len(), 4);
        let w = &f.servers[0];
        match &w.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
                sandbox,
            } => {
                assert_eq!(command, "uvx");
                assert_eq!(args, &["mcp-weather", "--key=s3cret"]);
                assert_eq!(env.get("A").map(String::as_str), Some("1"));
                assert_eq!(cwd.as_deref(), Some(std::path::Path::new("/tmp")));
                assert!(sandbox.is_none());
            }
            other => panic!("{other:?}"),
        }
        assert!(!w.offers("x") && w.offers("y"));
        let r = &f.servers[1];
        assert_eq!(r.transport.kind(), "http");
        assert!(matches!(
            r.transport,
            Transport::Http {
                trust: Trust::Lan,
                ..
            }
        ));
        assert_eq!(r.start, Start::Lazy);
        assert_eq!(r.timeout, Some(Duration::from_secs(5)));
        assert!(r.offers("search") && !r.offers("other"));
        assert_eq!(f.servers[2].transport.kind(), "sse");
        assert_eq!(f.servers[3].transport.kind(), "sse");
    }

    #[test]
    fn a_bad_entry_is_reported_with_its_path_and_the_rest_load() {
        let f = parse_json(json!({"mcpServers": {
            "good": {"command": "echo"},
            "weather": {"command": "x", "args": ["a", 5]},
            "envless": {"command": "x", "env": {"K": "${env:MISSING}"}},
            "bad name!": {"command": "x"},
            "both": {"command": "x", "url": "http://a/"},
            "scheme": {"url": "ftp://a/"},
            "trusty": {"url": "https://a/", "trust": "everyone"},
            "slow": {"command": "x", "timeout_ms": 0}
        }}));
        assert_eq!(f.servers.len(), 1);
        assert_eq!(f.servers[0].name, "good");
        let paths: Vec<&str> = f.problems.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"mcpServers.weather.args[1]"), "{paths:?}");
        assert!(paths.contains(&"mcpServers.envless.env.K"), "{paths:?}");
        let missing = f
            .problems
            .iter()
            .find(|p| p.path == "mcpServers.envless.env.K")
            .unwrap();
        assert!(missing.message.contains("MISSING"), "{missing}");
        assert!(paths.contains(&"mcpServers.bad name!"));
        assert!(paths.contains(&"mcpServers.trusty.trust"));
        assert!(paths.contains(&"mcpServers.slow.timeout_ms"));
        assert_eq!(f.problems.len(), 7, "{:?}", f.problems);
    }

    #[test]
    fn file_level_problems() {
        assert_eq!(parse(b"{", "f.json", env).problems[0].path, "f.json");
        assert_eq!(parse(b"{}", "f.json", env).problems.len(), 1);
        let big = vec![b' '; (MAX_FILE_BYTES + 1) as usize];
        assert!(parse(&big, "f.json", env).problems[0]
            .message
            .contains("bytes"));
        let many: Map<String, Value> = (0..MAX_SERVERS + 5)
            .map(|i| (format!("s{i}"), json!({"command": "x"})))
            .collect();
        let f = parse_json(json!({ "mcpServers": many }));
        assert_eq!(f.servers.len(), MAX_SERVERS);
        assert_eq!(f.problems.len(), 1);
    }

    /// Every secret of `spec` is absent from its `Debug`, `Display`,
    /// `Serialize` and location forms.
    fn assert_hidden(spec: &ServerSpec, secret: &str) {
        let shown = [
            format!("{spec:?}"),
            spec.to_string(),
            serde_json::to_string(spec).unwrap(),
            spec.location().to_string(),
        ];
        for text in shown {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    fn secret_env(var: &str) -> Option<String> {
        match var {
            "KEY" => Some("k3y-hunter2-k3y".into()),
            "HOST" => Some("secret-host.example".into()),
            "BIN" => Some("/opt/hunter2-bin/server".into()),
            _ => None,
        }
    }

    fn spec_with(value: Value) -> ServerSpec {
        parse_server_with_env("s", &value, &secret_env).unwrap()
    }

    #[test]
    fn a_url_is_shown_without_its_query_and_without_parts_from_the_environment() {
        let spec = spec_with(json!({"url": "http://127.0.0.1:9/mcp?k=${env:KEY}&team=a"}));
        assert_eq!(spec.location(), "http://127.0.0.1:9/mcp?<redacted>");
        assert_hidden(&spec, "hunter2");
        assert_hidden(&spec, "team=a");
        // Still connected with the expanded value.
        match &spec.transport {
            Transport::Http { url, .. } => {
                assert_eq!(url.query(), Some("k=k3y-hunter2-k3y&team=a"))
            }
            other => panic!("{other:?}"),
        }
        // A literal query is a credential as well.
        let spec = spec_with(json!({"url": "https://mcp.example/mcp?api_key=literal-key"}));
        assert_eq!(spec.location(), "https://mcp.example/mcp?<redacted>");
        assert_hidden(&spec, "literal-key");

        let spec = spec_with(json!({"url": "https://${env:HOST}/t/${env:KEY}/mcp"}));
        assert_eq!(spec.location(), "https://<redacted>/t/<redacted>/mcp");
        assert_hidden(&spec, "secret-host");
        assert_hidden(&spec, "hunter2");
    }

    #[test]
    fn error_texts_quoting_the_url_or_values_are_scrubbed() {
        let spec = spec_with(json!({
            "url": "http://127.0.0.1:9/mcp?k=${env:KEY}",
            "headers": {"Authorization": "Bearer literal-bearer-token", "X-Key": "${env:KEY}"}
        }));
        assert_hidden(&spec, "literal-bearer-token");
        let error = "error sending request for url (http://127.0.0.1:9/mcp?k=k3y-hunter2-k3y): \
                     connection refused; sent Bearer literal-bearer-token";
        let scrubbed = spec.scrub(error);
        assert!(!scrubbed.contains("hunter2"), "{scrubbed}");
        assert!(!scrubbed.contains("literal-bearer-token"), "{scrubbed}");
        // What the operator needs to recognise the server stays.
        assert!(
            scrubbed.contains("http://127.0.0.1:9/mcp?<redacted>"),
            "{scrubbed}"
        );
        assert!(scrubbed.contains("connection refused"), "{scrubbed}");
    }

    #[test]
    fn a_stdio_server_shows_its_program_but_no_secret() {
        let spec = spec_with(json!({
            "command": "uvx",
            "args": ["mcp-weather", "--key=${env:KEY}"],
            "env": {"API_KEY": "literal-env-secret", "FROM_ENV": "${env:KEY}"}
        }));
        assert_eq!(spec.location(), "stdio: uvx");
        assert_hidden(&spec, "hunter2");
        assert_hidden(&spec, "literal-env-secret");
        assert_eq!(
            spec.scrub("uvx exited: bad key --key=k3y-hunter2-k3y (env literal-env-secret)"),
            "uvx exited: bad key --key=<redacted> (env <redacted>)"
        );
        let spec = spec_with(json!({"command": "${env:BIN}", "args": ["x"]}));
        assert_eq!(spec.location(), "stdio: <redacted>");
        assert_hidden(&spec, "hunter2");
        assert_eq!(
            spec.scrub("cannot start /opt/hunter2-bin/server: No such file"),
            "cannot start <redacted>: No such file"
        );
    }

    #[test]
    fn a_problem_never_quotes_a_value_from_the_environment() {
        let p = parse_server_with_env(
            "s",
            &json!({"url": "https://mcp.example/", "trust": "${env:KEY}"}),
            &secret_env,
        )
        .unwrap_err();
        assert_eq!(p.path, "mcpServers.s.trust");
        assert!(!p.message.contains("hunter2"), "{p}");
    }

    #[test]
    fn names_are_limited_to_a_safe_charset() {
        assert!(valid_name("a.b-c_D9"));
        for bad in ["", "a/b", "a b", "..", "ü", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn inline_servers_and_sandbox_extension() {
        let spec = parse_server(
            "fs",
            &json!({"command": "/usr/bin/server", "sandbox": {"network": true, "paths": ["/srv"]}}),
        )
        .unwrap();
        match spec.transport {
            Transport::Stdio { sandbox, .. } => assert_eq!(
                sandbox,
                Some(SandboxSpec {
                    network: true,
                    paths: vec![PathBuf::from("/srv")]
                })
            ),
            other => panic!("{other:?}"),
        }
        let p = parse_server(
            "fs",
            &json!({"command": "x", "sandbox": {"paths": ["rel"]}}),
        )
        .unwrap_err();
        assert_eq!(p.path, "mcpServers.fs.sandbox.paths[0]");
        let p = parse_server("w", &json!({"url": "https://u:p@a/"})).unwrap_err();
        assert_eq!(p.path, "mcpServers.w.url");
    }
}
