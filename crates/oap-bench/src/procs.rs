//! The processes the proxy-shaped benchmarks (`proxy`, `mcp`, `memory`,
//! `fitness`) start and measure: the fake Ollama and the Python peer
//! `ollama-mcp-bridge` as child processes killed on drop, oapd through the
//! kit's launcher (killed when its handle drops). The soak keeps its own,
//! which restart on fixed ports.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use oap_testkit::{Daemon, DaemonBuilder};

/// The binaries a benchmark that starts its own daemons runs, and the model
/// they load: one set of options for every such subcommand.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Binaries {
    /// The `oapd` binary.
    #[arg(long)]
    pub(crate) oapd: PathBuf,
    /// The `fake-ollama` binary.
    #[arg(long)]
    pub(crate) fake_ollama: PathBuf,
    /// The embedding model directory oapd loads.
    #[arg(long)]
    pub(crate) model_dir: PathBuf,
}

/// A child process, killed (SIGKILL) and reaped on drop.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Polls `GET path` until it answers 200; fails early when the process
    /// exits (with its log) or after `limit`.
    fn wait_ready(&mut self, path: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "exited early ({status}):\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            let answer =
                oap_testkit::http::exchange(self.addr, "GET", path, "", Duration::from_secs(30));
            if let Ok((200, _)) = answer {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not ready after {limit:?} (log: {})", self.log.display());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// `VmRSS` and `VmHWM` of a process, in MB (10^6 bytes).
pub(crate) fn rss_of(pid: u32) -> anyhow::Result<(f64, f64)> {
    oap_testkit::rss::rss_hwm_mb(pid).with_context(|| format!("read /proc/{pid}/status"))
}

/// The fake's script: one tools-capable model, every chat answered with 20
/// content chunks and the final chunk, no tool calls.
pub(crate) fn fake_script(model: &str) -> String {
    let chunks: Vec<String> = (0..20)
        .map(|i| format!("{{\"content\": \"word{i} \"}}"))
        .collect();
    format!(
        "{{\"models\": [{{\"name\": \"{model}\", \"capabilities\": [\"completion\", \"tools\"]}}],\n \
         \"check_host\": false,\n \"default_turn\": {{\"chunks\": [{}]}}}}\n",
        chunks.join(", ")
    )
}

/// The fake Ollama on a free loopback port (it prints the address it
/// bound), driven by `script` (JSON); its log in `tmp`.
pub(crate) fn start_fake(bin: &Path, tmp: &Path, script: &str) -> anyhow::Result<Proc> {
    let script_file = tmp.join("fake-script.json");
    std::fs::write(&script_file, script)?;
    let log = tmp.join("fake.log");
    let mut child = Command::new(bin)
        .arg("--script")
        .arg(&script_file)
        .args(["--port", "0", "--no-host-check"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|out| BufReader::new(out).read_line(&mut line));
    let addr = match read {
        Some(Ok(_)) => line.trim().parse::<SocketAddr>().ok(),
        _ => None,
    };
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "fake-ollama printed no address ({line:?}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let mut fake = Proc { child, addr, log };
    fake.wait_ready("/api/version", Duration::from_secs(10))?;
    Ok(fake)
}

/// `oapd serve` in front of `upstream`, logging at warn (so it reports no
/// port: one is picked), with the query cache off: every chat embeds its
/// task, so the figures stay comparable with runs before that cache.
/// `extra_yaml` (whole top-level sections, or empty) ends its config.
pub(crate) fn start_oapd(
    bin: &Path,
    upstream: SocketAddr,
    model_dir: &Path,
    extra_yaml: &str,
) -> anyhow::Result<Daemon> {
    let port = oap_testkit::daemon::try_free_port()?;
    eprintln!(
        "$ RUST_LOG=warn {} --config <state dir>/config.yaml serve (127.0.0.1:{port})",
        bin.display()
    );
    let daemon = DaemonBuilder::new(bin)
        .model_dir(model_dir)
        .listen(&[&format!("127.0.0.1:{port}")])
        .default_header_read_timeout()
        .yaml(&format!(
            "ollama:\n  base_url: \"http://{upstream}\"\nlog:\n  level: warn\n{extra_yaml}"
        ))
        .env_remove("RAYON_NUM_THREADS")
        .env_remove("CANDLE_NUM_THREADS")
        .env("RUST_LOG", "warn")
        .env("OAP_DISCOVERY_QUERY_CACHE", "0")
        .ready_within(Duration::from_secs(300))
        .try_start()
        .map_err(|err| anyhow::anyhow!("oapd: {err}"))?;
    eprintln!("oapd log: {}", daemon.log.display());
    Ok(daemon)
}

/// `ollama-mcp-bridge` at `bin` in front of `upstream`, reading
/// `servers_json` (an `mcpServers` file, `{"mcpServers": {}}` for pure
/// proxying) as its config; its config and logs in `tmp`. Ready once
/// `/health` answers (it connects to its MCP servers before it serves).
pub(crate) fn start_peer(
    bin: &Path,
    tmp: &Path,
    upstream: SocketAddr,
    servers_json: &str,
) -> anyhow::Result<Proc> {
    if !bin.exists() {
        bail!(
            "{} missing (python3 -m venv target/peer-venv && \
             target/peer-venv/bin/pip install ollama-mcp-bridge)",
            bin.display()
        );
    }
    let config = tmp.join("mcp-config.json");
    std::fs::write(&config, servers_json)?;
    let port = oap_testkit::daemon::try_free_port()?;
    let log = tmp.join("peer.err.log");
    let child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .arg("--ollama-url")
        .arg(format!("http://{upstream}"))
        // Its start-up update check asks pypi.org over https: send it to a
        // dead proxy so the run stays on loopback (the check then fails
        // quietly); plain-http loopback requests are not proxied.
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(tmp.join("peer.log"))?)
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("cannot start ollama-mcp-bridge")?;
    let mut peer = Proc {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        log,
    };
    peer.wait_ready("/health", Duration::from_secs(60))
        .context("ollama-mcp-bridge")?;
    Ok(peer)
}
