//! Finding the test servers and driving a hub until a condition holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oap_exec::{ExecPolicy, Resolver, SystemResolver};
use oap_mcp::servers_file::parse_server;
use oap_mcp::{Hub, HubContext, HubSettings, ServerSpec, ServerStatus};
use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn script(name: &str) -> String {
    repo().join("tests/mcp").join(name).display().to_string()
}

/// Whether a test may run: when `what` is missing, skip with a reason, or
/// fail when `OAPD_REQUIRE_MCP_SERVERS=1` (as `cargo xtask test` sets).
pub fn available(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("OAPD_REQUIRE_MCP_SERVERS").as_deref() == Ok("1") {
        panic!("{what} is not installed; `cargo xtask test` installs it");
    }
    eprintln!("skipped: {what} is not installed (run `cargo xtask test` to install it)");
    false
}

/// The venv python with the MCP SDK, when installed.
pub fn sdk_python() -> Option<String> {
    let venv = repo().join("target/pyclients");
    let python = venv.join("bin/python");
    let has_sdk = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .any(|d| d.path().join("site-packages/mcp").is_dir());
    (python.is_file() && has_sdk).then(|| python.display().to_string())
}

/// Any python3 (the hostile server needs no packages).
pub fn python3() -> String {
    sdk_python().unwrap_or_else(|| "python3".into())
}

pub fn everything_bin() -> Option<String> {
    let p = repo().join("target/mcp-node/node_modules/.bin/mcp-server-everything");
    p.exists().then(|| p.display().to_string())
}

pub fn settings() -> HubSettings {
    HubSettings {
        init_timeout: Duration::from_secs(20),
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(2),
        stop_grace: Duration::from_secs(1),
        ..HubSettings::default()
    }
}

pub fn context(resolver: Arc<dyn Resolver>) -> HubContext {
    HubContext {
        resolver,
        policy: ExecPolicy::default(),
        credentials: None,
        tls: None,
        stdio_limits: HubContext::server_limits(),
    }
}

pub fn hub() -> Hub {
    hub_with(settings())
}

/// A hub with `settings` and the system resolver.
pub fn hub_with(settings: HubSettings) -> Hub {
    Hub::new(settings, context(Arc::new(SystemResolver)))
}

pub fn spec(name: &str, value: Value) -> ServerSpec {
    parse_server(name, &value).unwrap()
}

pub fn hostile(name: &str, mode: &str, markers: &Path) -> ServerSpec {
    spec(
        name,
        serde_json::json!({"command": python3(),
            "args": [script("hostile_server.py"), mode, markers.display().to_string()]}),
    )
}

pub fn status(hub: &Hub, name: &str) -> ServerStatus {
    hub.status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name}"))
}

/// How long the SDK's stdio server may take to answer `initialize`:
/// importing the SDK (pydantic building its models) takes about 2 s
/// natively and half a minute under an emulator (the arm64 test guest's
/// TCG), past [`settings`]' init timeout.
pub const SDK_START: Duration = Duration::from_secs(120);

/// Poll until `cond` holds for server `name` (generous deadline: this
/// waits for processes to start, it measures nothing).
pub async fn wait_until(
    hub: &Hub,
    name: &str,
    what: &str,
    cond: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    wait_until_within(hub, name, what, Duration::from_secs(60), cond).await
}

/// [`wait_until`] with a deadline of `within`.
pub async fn wait_until_within(
    hub: &Hub,
    name: &str,
    what: &str,
    within: Duration,
    cond: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    let deadline = Instant::now() + within;
    loop {
        let s = status(hub, name);
        if cond(&s) {
            return s;
        }
        if Instant::now() > deadline {
            panic!("server {name} never got {what}: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.is_empty() {
                return text;
            }
        }
        if Instant::now() > deadline {
            panic!("{} never appeared", path.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a process is gone (or a zombie nobody has reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

pub async fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !process_gone(pid) {
        if Instant::now() > deadline {
            panic!("process {pid} still runs");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
