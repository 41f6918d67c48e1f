//! The real `oapd` binary as a child process.
//!
//! [`DaemonBuilder`] writes a config into a fresh state directory, starts
//! `oapd serve` with it (configured only by what the caller passes: no
//! `OAP_*` variables from the environment), and waits until `/health`
//! answers 200. By default the daemon listens on `127.0.0.1:0`: the kernel
//! picks a free port and the daemon reports it in its log line
//! `listening address=…`, which is where [`Daemon::addr`] comes from (no
//! race with other processes taking a "free" port first).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::http::{request_bytes, send_raw, Response};

/// How long a daemon may take to become ready by default (a cold model
/// load on a busy machine).
const READY_WITHIN: Duration = Duration::from_secs(120);

/// The argv prefix that runs `binary`: behind `OAPD_TEST_RUNNER` when set
/// (e.g. `qemu-aarch64-static -L /usr/aarch64-linux-gnu` to run an aarch64
/// binary on a host without a binfmt_misc entry for it).
pub fn argv(binary: impl AsRef<Path>) -> Vec<OsString> {
    let binary = binary.as_ref().as_os_str().to_owned();
    match std::env::var("OAPD_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => runner
            .split_whitespace()
            .map(OsString::from)
            .chain(std::iter::once(binary))
            .collect(),
        _ => vec![binary],
    }
}

/// `binary` (through the runner, see [`argv`]) as a command configured
/// only by what the caller passes.
pub fn command(binary: impl AsRef<Path>) -> Command {
    let argv = argv(binary);
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

/// A free loopback port (bound and released: another process may take it
/// before the caller binds it). Only for what must name a port before a
/// daemon exists: a port where nothing listens, a socket-activation test.
pub fn free_port() -> u16 {
    try_free_port().expect("free port")
}

/// [`free_port`], with the error.
pub fn try_free_port() -> std::io::Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
}

/// The addresses of the `listening` lines in a daemon's log (text or
/// JSON format), in order.
pub fn listening_addresses(log: &str) -> Vec<SocketAddr> {
    log.lines()
        .filter(|line| line.contains("listening"))
        .filter_map(|line| {
            let rest = line
                .split_once("address=")
                .or_else(|| line.split_once("\"address\":\""))?
                .1;
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '"')
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}

/// A running daemon; killed when dropped.
pub struct Daemon {
    /// The daemon process (killed on drop).
    pub child: Child,
    /// The first address it listens on (where requests go).
    pub addr: SocketAddr,
    /// Every address it listens on.
    pub addrs: Vec<SocketAddr>,
    /// Its scratch directory: config, index, state and log.
    pub dir: tempfile::TempDir,
    /// Where its stderr goes; read with `log_text`.
    pub log: PathBuf,
    /// The network namespace it runs in (requests are sent from inside).
    pub netns: Option<String>,
    /// How long it may take to become ready.
    pub ready_within: Duration,
}

/// Runs with the daemon's pid right after spawning it.
pub type SpawnHook = Box<dyn FnOnce(u32) -> Result<(), String>>;

/// What the generated config says about the embedding model.
enum Model {
    /// The real model ([`crate::model::require_model`]).
    Real,
    /// A model directory the caller names.
    Dir(PathBuf),
    /// A model directory that does not exist (lexical-only discovery).
    Missing,
    /// `embedding.enabled: false`.
    Disabled,
}

/// How to start a daemon: binary, config, environment; `start` runs it.
pub struct DaemonBuilder {
    binary: PathBuf,
    yaml: String,
    server_yaml: String,
    env: Vec<(String, String)>,
    env_removed: Vec<String>,
    header_read_timeout: Option<u64>,
    model: Model,
    dir: Option<tempfile::TempDir>,
    listen: Option<Vec<String>>,
    auth: Option<String>,
    on_spawn: Option<SpawnHook>,
    netns: Option<String>,
    ready_within: Duration,
    ready_poll: Duration,
    data_dir: Option<PathBuf>,
}

impl DaemonBuilder {
    /// A daemon running `binary` (oapd's own tests pass
    /// `env!("CARGO_BIN_EXE_oapd")`; a benchmark may pass an older build).
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        DaemonBuilder {
            binary: binary.into(),
            yaml: String::new(),
            server_yaml: String::new(),
            // Request generation talks to Ollama in the background, at its
            // own times: a test's scripted upstream (or a real Ollama on
            // the developer's machine) would get calls the test did not
            // make. The tests of generation turn it on with `env`.
            env: vec![(
                "OAP_DISCOVERY_GENERATE_REQUESTS".to_string(),
                "false".to_string(),
            )],
            env_removed: Vec::new(),
            header_read_timeout: Some(2),
            model: Model::Real,
            dir: None,
            listen: None,
            auth: None,
            on_spawn: None,
            netns: None,
            ready_within: READY_WITHIN,
            ready_poll: Duration::from_millis(50),
            data_dir: None,
        }
    }

    /// How often readiness is polled (default 50 ms; a start-up benchmark
    /// polls more often, see [`Self::try_start_timed`]).
    pub fn ready_poll(mut self, every: Duration) -> Self {
        self.ready_poll = every;
        self
    }

    /// `index.data_dir` outside the state directory (a benchmark's cached
    /// index; default `<state dir>/data`).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// The embedding model in `dir` (default: the real model of this
    /// checkout, [`crate::model::require_model`]).
    pub fn model_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.model = Model::Dir(dir.into());
        self
    }

    /// How long the daemon may take to become ready (default 120 s).
    pub fn ready_within(mut self, limit: Duration) -> Self {
        self.ready_within = limit;
        self
    }

    /// Called with the daemon's pid right after it is spawned, before it
    /// is ready (to move it into a cgroup, say).
    pub fn on_spawn(mut self, hook: impl FnOnce(u32) -> Result<(), String> + 'static) -> Self {
        self.on_spawn = Some(Box::new(hook));
        self
    }

    /// Wait for readiness sending this bearer token.
    pub fn auth(mut self, token: &str) -> Self {
        self.auth = Some(token.to_string());
        self
    }

    /// Start, then wait for readiness sending this bearer token.
    pub fn start_with_auth(self, token: &str) -> Daemon {
        self.auth(token).start()
    }

    /// Start on 127.0.0.1:`port` (when the test names the address itself,
    /// e.g. through `OAP_SERVER_LISTEN`).
    pub fn start_on(self, port: u16) -> Daemon {
        self.listen(&[&format!("127.0.0.1:{port}")]).start()
    }

    /// `server.listen` (default `["127.0.0.1:0"]`). Requests go to the
    /// first address; a port 0 is read back from the daemon's log.
    pub fn listen(mut self, addresses: &[&str]) -> Self {
        self.listen = Some(addresses.iter().map(|a| a.to_string()).collect());
        self
    }

    /// A `server` key (`"auth_token"`, `"\"t\""`): other sections go
    /// through [`Self::yaml`], which cannot repeat the `server` section.
    pub fn server(mut self, key: &str, value: &str) -> Self {
        self.server_yaml.push_str(&format!("  {key}: {value}\n"));
        self
    }

    /// Extra YAML appended to the generated config.
    pub fn yaml(mut self, yaml: &str) -> Self {
        self.yaml.push_str(yaml);
        self
    }

    /// Sets an environment variable for the daemon.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Removes `key` from the daemon's environment (`OAP_*` and
    /// `OAPD_CONFIG` always are).
    pub fn env_remove(mut self, key: &str) -> Self {
        self.env_removed.push(key.into());
        self
    }

    /// Keeps the daemon's own `server.header_read_timeout` (tests set 2 s
    /// so a stalled client is cut quickly; a benchmark measures the
    /// default).
    pub fn default_header_read_timeout(mut self) -> Self {
        self.header_read_timeout = None;
        self
    }

    /// A model directory that does not exist: discovery is lexical only.
    pub fn without_model(mut self) -> Self {
        self.model = Model::Missing;
        self
    }

    /// `embedding.enabled: false`.
    pub fn embedding_disabled(mut self) -> Self {
        self.model = Model::Disabled;
        self
    }

    /// Reuse a state directory (to test restarts).
    pub fn in_dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Run the daemon inside the network namespace `ns` (see
    /// [`crate::netns`]); requests are then sent from inside it too.
    pub fn in_netns(mut self, ns: &str) -> Self {
        self.netns = Some(ns.to_string());
        self
    }

    /// Starts the daemon and waits until `/health` answers 200.
    pub fn start(self) -> Daemon {
        self.try_start().unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`Self::start`], with what went wrong as an error (for benchmark
    /// drivers) instead of a panic.
    pub fn try_start(self) -> Result<Daemon, String> {
        self.try_start_timed().map(|(daemon, _)| daemon)
    }

    /// [`Self::try_start`], also returning the time from spawning the
    /// daemon to its first `200` from `/health` (start-up benchmarks).
    pub fn try_start_timed(self) -> Result<(Daemon, Duration), String> {
        let auth = self.auth.clone();
        let poll = self.ready_poll;
        let started = Instant::now();
        let mut daemon = self.try_spawn()?;
        daemon.try_wait_ready_every(auth.as_deref(), poll)?;
        Ok((daemon, started.elapsed()))
    }

    /// Starts the daemon and waits only until it reports where it listens
    /// (for tests of what happens before it is ready).
    pub fn spawn(self) -> Daemon {
        self.try_spawn().unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`Self::spawn`], with what went wrong as an error.
    pub fn try_spawn(self) -> Result<Daemon, String> {
        let dir = match self.dir {
            Some(dir) => dir,
            None => tempfile::tempdir().map_err(|e| format!("state directory: {e}"))?,
        };
        let listen = self
            .listen
            .unwrap_or_else(|| vec!["127.0.0.1:0".to_string()]);
        let embedding = match self.model {
            Model::Real => format!("  model_dir: {:?}\n", crate::model::require_model()),
            Model::Dir(path) => format!("  model_dir: {path:?}\n"),
            Model::Missing => format!("  model_dir: {:?}\n", dir.path().join("no-model-here")),
            Model::Disabled => "  enabled: false\n".to_string(),
        };
        let header_read_timeout = self
            .header_read_timeout
            .map(|s| format!("  header_read_timeout: {s}\n"))
            .unwrap_or_default();
        let config = format!(
            "server:\n  listen: {listen:?}\n{header_read_timeout}{server}\
             index:\n  data_dir: {data:?}\n\
             embedding:\n{embedding}{extra}",
            server = self.server_yaml,
            data = self.data_dir.unwrap_or_else(|| dir.path().join("data")),
            extra = self.yaml,
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).map_err(|e| format!("write the config: {e}"))?;
        let log = dir.path().join("oapd.log");
        let log_file = std::fs::File::create(&log).map_err(|e| format!("log file: {e}"))?;
        let mut command = match &self.netns {
            Some(ns) => {
                let mut command = crate::netns_command(ns, &argv(&self.binary));
                scrub_config_env(&mut command);
                command
            }
            None => command(&self.binary),
        };
        command
            .arg("--config")
            .arg(&config_path)
            .arg("serve")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        for key in &self.env_removed {
            command.env_remove(key);
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
        if let Some(hook) = self.on_spawn {
            if let Err(err) = hook(child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("after spawning oapd: {err}"));
            }
        }
        let configured: Vec<SocketAddr> = listen.iter().filter_map(|a| a.parse().ok()).collect();
        let mut daemon = Daemon {
            child,
            addr: configured
                .first()
                .copied()
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            addrs: configured.clone(),
            dir,
            log,
            netns: self.netns,
            ready_within: self.ready_within,
        };
        if configured.len() != listen.len() || configured.iter().any(|a| a.port() == 0) {
            daemon.wait_listening(listen.len())?;
        }
        Ok(daemon)
    }
}

impl Daemon {
    /// Waits for the daemon's `listening` log lines (it binds before it
    /// builds the index; reports after).
    fn wait_listening(&mut self, count: usize) -> Result<(), String> {
        let deadline = Instant::now() + self.ready_within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "oapd exited early ({status}):\n{}",
                    self.log_text()
                ));
            }
            let addrs = listening_addresses(&self.log_text());
            if addrs.len() >= count {
                self.addrs = addrs;
                self.addr = self.addrs[0];
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "oapd did not report where it listens:\n{}",
                    self.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `/health` answers 200 (sending `auth` as the bearer
    /// token); fails when the daemon exits or takes too long.
    pub fn wait_ready(&mut self, auth: Option<&str>) {
        self.try_wait_ready(auth)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`Self::wait_ready`], with what went wrong as an error.
    pub fn try_wait_ready(&mut self, auth: Option<&str>) -> Result<(), String> {
        self.try_wait_ready_every(auth, Duration::from_millis(50))
    }

    /// [`Self::try_wait_ready`], polling every `poll`.
    pub fn try_wait_ready_every(
        &mut self,
        auth: Option<&str>,
        poll: Duration,
    ) -> Result<(), String> {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("Authorization", b)])
            .unwrap_or_default();
        let deadline = Instant::now() + self.ready_within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "oapd exited early ({status}):\n{}",
                    self.log_text()
                ));
            }
            // Listening happens before the index is ready; wait for /health.
            if let Ok(response) = self.try_request("GET", "/health", &headers, b"") {
                if response.status == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("oapd not ready:\n{}", self.log_text()));
            }
            std::thread::sleep(poll);
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the daemon has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` over a fresh connection.
    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    /// `POST path` with a JSON body over a fresh connection.
    pub fn post_json(&self, path: &str, body: &str) -> Response {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    /// `POST /v1/discover` for `task`; the answer must be a 200, whose JSON
    /// body is returned.
    pub fn discover(&self, task: &str, top_k: usize) -> serde_json::Value {
        let body = serde_json::json!({"task": task, "top_k": top_k}).to_string();
        let found = self.post_json("/v1/discover", &body);
        assert_eq!(
            found.status,
            200,
            "{}",
            String::from_utf8_lossy(&found.body)
        );
        found.json()
    }

    /// Any request over a fresh connection, with extra headers.
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

    /// A request to [`Daemon::addr`]; a Host given by the caller replaces
    /// the daemon's address.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        self.try_request_to(self.addr, method, path, headers, body)
    }

    /// A request to `addr` (one of [`Daemon::addrs`]), from inside the
    /// daemon's network namespace when it has one.
    pub fn try_request_to(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let raw = request_bytes(method, path, &addr.to_string(), headers, body);
        match &self.netns {
            Some(ns) => crate::netns_inside(ns, move || send_raw(addr, &raw)),
            None => send_raw(addr, &raw),
        }
    }

    /// Sends the signal `name` (`TERM`, `HUP`, ...) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits up to `within` for the daemon to exit: its status and how
    /// long that took.
    pub fn wait_exit(&mut self, within: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, start.elapsed());
            }
            assert!(
                start.elapsed() < within,
                "oapd still running after {within:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_lines_in_text_and_json() {
        let log = "2026-01-01T00:00:00Z  INFO oapd::app: index written\n\
                   2026-01-01T00:00:00Z  INFO oapd::lifecycle: listening address=127.0.0.1:34675\n\
                   {\"level\":\"INFO\",\"fields\":{\"message\":\"listening\",\"address\":\"[::1]:8300\"}}\n";
        assert_eq!(
            listening_addresses(log),
            vec![
                "127.0.0.1:34675".parse::<SocketAddr>().unwrap(),
                "[::1]:8300".parse().unwrap()
            ]
        );
    }
}
