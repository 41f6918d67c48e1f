//! Test support: the real `oapd` binary as a child process, and a minimal
//! HTTP/1.1 client over a plain TCP socket (so tests can also send what a
//! well-behaved client library never would).

#![allow(dead_code)]

pub mod exposure;
pub mod netns;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn model_dir() -> PathBuf {
    match std::env::var_os("OAPD_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2"),
    }
}

pub fn require_model() -> PathBuf {
    let dir = model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "real model not found in {}: run `cargo xtask fetch-model` (or set OAPD_MODEL_DIR)",
        dir.display()
    );
    dir
}

pub fn reference_manifest(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/reference-manifests/oap-dev")
        .join(format!("{name}.json"));
    assert!(
        path.is_file(),
        "reference manifest missing: {}",
        path.display()
    );
    path
}

/// A free loopback port (bound and released; the daemon binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The daemon's argv prefix: the binary, behind `OAPD_TEST_RUNNER` when set
/// (`cargo xtask cross --test` runs the aarch64 binary through qemu-user,
/// as the host kernel has no binfmt_misc entry for it).
pub fn oapd_argv() -> Vec<std::ffi::OsString> {
    let binary = std::ffi::OsString::from(env!("CARGO_BIN_EXE_oapd"));
    match std::env::var("OAPD_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => runner
            .split_whitespace()
            .map(std::ffi::OsString::from)
            .chain(std::iter::once(binary))
            .collect(),
        _ => vec![binary],
    }
}

/// The last message of a chat request oapd sent upstream (after a tool
/// ran: its result).
pub fn last_message(request: &serde_json::Value) -> serde_json::Value {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .cloned()
        .unwrap_or_else(|| panic!("no messages in {request}"))
}

pub fn oapd() -> Command {
    let argv = oapd_argv();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    scrub_config_env(&mut command);
    command
}

/// The daemon's configuration comes only from what each test passes: no
/// `OAP_*` variables or `OAPD_CONFIG` from the environment the tests run in.
pub fn scrub_config_env(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OAP_") {
            command.env_remove(key);
        }
    }
    command.env_remove("OAPD_CONFIG");
}

/// A running daemon; killed when dropped.
pub struct Daemon {
    pub child: Child,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

/// Runs with the daemon's pid right after spawning it.
pub type SpawnHook = Box<dyn FnOnce(u32) -> Result<(), String>>;

pub struct DaemonBuilder {
    yaml: String,
    env: Vec<(String, String)>,
    model: bool,
    dir: Option<tempfile::TempDir>,
    port: Option<u16>,
    auth: Option<String>,
    on_spawn: Option<SpawnHook>,
    binary: Option<PathBuf>,
}

impl DaemonBuilder {
    pub fn new() -> Self {
        DaemonBuilder {
            yaml: String::new(),
            env: Vec::new(),
            model: true,
            dir: None,
            port: None,
            auth: None,
            on_spawn: None,
            binary: None,
        }
    }

    /// Called with the daemon's pid right after it is spawned, before it
    /// is ready (to move it into a cgroup, say).
    pub fn on_spawn(mut self, hook: impl FnOnce(u32) -> Result<(), String> + 'static) -> Self {
        self.on_spawn = Some(Box::new(hook));
        self
    }

    /// Start, then wait for readiness sending this bearer token.
    pub fn start_with_auth(mut self, token: &str) -> Daemon {
        self.auth = Some(token.to_string());
        self.start()
    }

    /// Start on `port` (when the test sets the listen address itself).
    pub fn start_on(mut self, port: u16) -> Daemon {
        self.port = Some(port);
        self.start()
    }

    /// Extra YAML appended to the generated config.
    pub fn yaml(mut self, yaml: &str) -> Self {
        self.yaml.push_str(yaml);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn without_model(mut self) -> Self {
        self.model = false;
        self
    }

    /// Run this `oapd` binary instead of the one under test (a benchmark
    /// comparing with an older build).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Reuse a state directory (to test restarts).
    pub fn in_dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    pub fn start(self) -> Daemon {
        let dir = self
            .dir
            .unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        let port = self.port.unwrap_or_else(free_port);
        let model = if self.model {
            require_model()
        } else {
            dir.path().join("no-model-here")
        };
        let config = format!(
            "server:\n  listen: [\"127.0.0.1:{port}\"]\n  header_read_timeout: 2\n\
             index:\n  data_dir: {data:?}\n\
             embedding:\n  model_dir: {model:?}\n{extra}",
            data = dir.path().join("data"),
            extra = self.yaml,
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let log = dir.path().join("oapd.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = match &self.binary {
            Some(binary) => {
                let mut command = Command::new(binary);
                scrub_config_env(&mut command);
                command
            }
            None => oapd(),
        };
        command
            .arg("--config")
            .arg(&config_path)
            .arg("serve")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn oapd");
        if let Some(hook) = self.on_spawn {
            if let Err(err) = hook(child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("after spawning oapd: {err}");
            }
        }
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut daemon = Daemon {
            child,
            addr,
            dir,
            log,
        };
        daemon.wait_ready(self.auth.as_deref());
        daemon
    }
}

impl Daemon {
    pub fn start() -> Daemon {
        DaemonBuilder::new().start()
    }

    fn wait_ready(&mut self, auth: Option<&str>) {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("Authorization", b)])
            .unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("oapd exited early ({status}):\n{}", self.log_text());
            }
            if TcpStream::connect(self.addr).is_ok() {
                // Listening happens before the index is ready; wait for /health.
                if let Ok(response) = self.try_request("GET", "/health", &headers, b"") {
                    if response.status == 200 {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "oapd not ready:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    pub fn post_json(&self, path: &str, body: &str) -> Response {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|err| panic!("{method} {path}: {err}\n{}", self.log_text()))
    }

    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        // A Host given by the caller replaces the daemon's address.
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            head.push_str(&format!("Host: {}\r\n", self.addr));
        }
        head.push_str(&format!(
            "Connection: close\r\nContent-Length: {}\r\n",
            body.len()
        ));
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut raw = head.into_bytes();
        raw.extend_from_slice(body);
        send_raw(self.addr, &raw)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "oapd did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!(
                "response is not JSON ({err}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `error` message of a JSON error response.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field in {}", String::from_utf8_lossy(&self.body)))
            .to_string()
    }
}

/// Writes raw bytes, reads the response to EOF and parses it (chunked
/// bodies are decoded).
pub fn send_raw(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.write_all(raw)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> std::io::Result<Response> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let head = std::str::from_utf8(&buf[..split]).map_err(|_| bad("header not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("no status line"))?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).ok()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// A scripted fake Ollama on its own runtime (its tasks keep running in the
/// background while the test thread blocks on plain sockets).
pub struct Upstream {
    pub fake: fake_ollama::FakeOllama,
    _runtime: tokio::runtime::Runtime,
}

pub fn fake(script: fake_ollama::Script) -> Upstream {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = runtime
        .block_on(fake_ollama::FakeOllama::start(script))
        .expect("fake ollama");
    Upstream {
        fake,
        _runtime: runtime,
    }
}

/// An operator manifest directory holding a `perl` stdio tool: a program
/// that can open sockets, start processes and sleep, for the tests that
/// need a tool to do what the bundled text tools cannot.
pub fn perl_manifest_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("perl.json"),
        serde_json::json!({
            "oap": "1.0",
            "name": "perl",
            "description": "Runs a Perl program given as command-line arguments.",
            "input": {"format": "text/plain", "description": "Perl arguments, e.g. -e CODE"},
            "output": {"format": "text/plain", "description": "what the program prints"},
            "invoke": {"method": "stdio", "url": "perl"}
        })
        .to_string(),
    )
    .unwrap();
    dir
}

/// A minimal valid stdio manifest (`true` as its program), as JSON text.
pub fn stdio_manifest(name: &str, description: &str) -> String {
    serde_json::json!({
        "oap": "1.0",
        "name": name,
        "description": description,
        "input": {"format": "text/plain", "description": "The text."},
        "output": {"format": "text/plain", "description": "The result."},
        "invoke": {"method": "stdio", "url": "true"}
    })
    .to_string()
}
