//! The processes the soak runs and restarts: the fake Ollama on a fixed
//! port and the daemon on its state, and what `/health` says of its index.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oap_testkit::http::exchange;
use oap_testkit::{Daemon, DaemonBuilder};
use serde_json::Value;
use std::io::Write;

use super::Result;

/// The fake Ollama as a child process on a fixed port.
pub(super) struct Ollama {
    pub(super) bin: PathBuf,
    pub(super) script: PathBuf,
    pub(super) port: u16,
    pub(super) log: PathBuf,
    pub(super) child: Option<Child>,
}

impl Ollama {
    pub(super) fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut last = String::new();
        for _ in 0..50 {
            let mut child = Command::new(&self.bin)
                .arg("--script")
                .arg(&self.script)
                .args(["--port", &self.port.to_string(), "--no-host-check"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log.try_clone()?)
                .spawn()?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line)?;
            if line.trim().parse::<SocketAddr>().is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            let _ = child.kill();
            let _ = child.wait();
            last = format!("fake-ollama did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.into())
    }

    pub(super) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Restarts the fake if it died on its own (not a daemon fault).
    pub(super) fn ensure_running(&mut self) {
        let dead = match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        };
        if dead {
            self.kill();
            if let Err(err) = self.start() {
                eprintln!("fake-ollama restart failed: {err}");
            }
        }
    }
}

pub(super) fn health(addr: SocketAddr) -> Option<Value> {
    let (status, body) = exchange(addr, "GET", "/health", "", Duration::from_secs(10)).ok()?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

pub(super) fn indexed(addr: SocketAddr) -> Option<u64> {
    health(addr)?["index"]["manifests"].as_u64()
}

/// Polls `/health` until the index holds at least `want` manifests:
/// seconds taken (None: not within `limit`) and the most seen.
pub(super) fn wait_indexed(addr: SocketAddr, want: u64, limit: Duration) -> (Option<f64>, u64) {
    let started = Instant::now();
    let mut most = 0;
    loop {
        if let Some(n) = indexed(addr) {
            most = most.max(n);
            if n >= want {
                return (Some(started.elapsed().as_secs_f64()), most);
            }
        }
        if started.elapsed() > limit {
            return (None, most);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub(super) struct Setup {
    pub(super) oapd: PathBuf,
    pub(super) model: PathBuf,
    pub(super) port: u16,
    pub(super) yaml: String,
    pub(super) log: PathBuf,
}

impl Setup {
    pub(super) fn start(&self, dir: tempfile::TempDir) -> Result<Daemon> {
        let mut last = String::new();
        let mut dir = Some(dir);
        for _ in 0..20 {
            let Some(state) = dir.take() else { break };
            let spawned = DaemonBuilder::new(&self.oapd)
                .model_dir(&self.model)
                .in_dir(state)
                .listen(&[&format!("127.0.0.1:{}", self.port)])
                .yaml(&self.yaml)
                // `OAP_SOAK_DAEMON_LOG` (a filter such as
                // `warn,oap_discovery=info`) to see what a run's daemon did.
                .env(
                    "RUST_LOG",
                    &std::env::var("OAP_SOAK_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .env("MALLOC_ARENA_MAX", "2")
                .ready_within(Duration::from_secs(1800))
                .try_spawn();
            let mut daemon = spawned?;
            match daemon.try_wait_ready(None) {
                Ok(()) => return Ok(daemon),
                Err(err) => {
                    last = err;
                    self.keep_log(&daemon);
                    // The port may still be held by the killed daemon's
                    // sockets: take the directory back and try again.
                    let _ = daemon.child.kill();
                    let _ = daemon.child.wait();
                    dir = Some(std::mem::replace(&mut daemon.dir, tempfile::tempdir()?));
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        Err(format!("oapd did not start: {last}").into())
    }

    /// Appends the daemon's log (rewritten at each start) to the soak's.
    pub(super) fn keep_log(&self, daemon: &Daemon) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let _ = writeln!(file, "---- oapd pid {}", daemon.pid());
            let _ = file.write_all(daemon.log_text().as_bytes());
        }
    }
}
