//! A stdio server's child process: spawned without a shell in its own
//! process group with resource limits, stderr drained line by line (each
//! line counted, capped and logged only as content at debug), and the
//! whole group killed when it goes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use oap_exec::StdioLimits;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tracing::{debug, info, warn};

use crate::noise::{Kind, Noise};
use crate::redact::Redaction;
use crate::servers_file::SandboxSpec;

/// Longest stderr line logged; the rest of the line is dropped.
const STDERR_LINE_CHARS: usize = 2_000;

/// A running server process. Dropping it SIGKILLs the process group.
pub(crate) struct ServerProcess {
    pgid: Pid,
    child: Child,
    killed: bool,
    /// A sandboxed server's private, writable home; removed with it.
    _scratch: Option<tempfile::TempDir>,
}

/// Why a server could not be started, and whether retrying may help.
pub(crate) struct SpawnError {
    pub(crate) message: String,
    pub(crate) fatal: bool,
}

impl From<String> for SpawnError {
    fn from(message: String) -> Self {
        Self {
            message,
            fatal: false,
        }
    }
}

/// What the running kernel offers, asked once.
fn support() -> &'static oap_sandbox::Support {
    static SUPPORT: std::sync::OnceLock<oap_sandbox::Support> = std::sync::OnceLock::new();
    SUPPORT.get_or_init(oap_sandbox::Support::probe)
}

/// The confinement of a sandboxed server: readable system paths, the
/// spec's `paths`, the program's own directory (and its target's) and the
/// working directory; writable only its fresh scratch directory (its
/// `HOME` and `TMPDIR`); network only with `network: true`. Required: a
/// kernel without Landlock or seccomp refuses the server rather than run
/// it unconfined.
fn confinement(
    sandbox: &SandboxSpec,
    program: &Path,
    cwd: Option<&Path>,
) -> Result<(tempfile::TempDir, oap_sandbox::Confinement), SpawnError> {
    let fatal = |message: String| SpawnError {
        message,
        fatal: true,
    };
    let scratch = tempfile::Builder::new()
        .prefix("oapd-mcp-")
        .tempdir()
        .map_err(|e| SpawnError::from(format!("cannot make a scratch directory: {e}")))?;
    let mut read = sandbox.paths.clone();
    for p in [
        Some(program.to_path_buf()),
        std::fs::canonicalize(program).ok(),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(dir) = p.parent() {
            read.push(dir.to_path_buf());
        }
    }
    read.extend(cwd.map(Path::to_path_buf));
    let policy = oap_sandbox::Policy {
        mode: oap_sandbox::Mode::Require,
        extra_read_paths: read,
        spawn_programs: Vec::new(),
    };
    let confinement = oap_sandbox::Confinement::prepare_with_network(
        &policy,
        support(),
        scratch.path(),
        true,
        sandbox.network,
    )
    .map_err(|e| {
        fatal(format!(
            "the sandbox this server asks for is not available: {e}"
        ))
    })?;
    Ok((scratch, confinement))
}

/// A server's name and the counters its stderr lines go to.
pub(crate) struct ServerName {
    pub(crate) name: String,
    pub(crate) noise: Arc<Noise>,
}

/// The pipes rmcp speaks over.
pub(crate) struct Pipes {
    pub(crate) stdout: ChildStdout,
    pub(crate) stdin: ChildStdin,
}

/// Environment every server gets (the spec's `env` overrides it): the
/// daemon's `PATH` and `HOME`, `LANG=C.UTF-8`, and `TMPDIR`/`TZ` when set.
fn base_env() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for key in ["PATH", "HOME", "TMPDIR", "TZ"] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_string(), v);
        }
    }
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env
}

/// Find `command` in the `PATH` the child will get (or take it as a path).
fn find_program(command: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if command.contains('/') {
        return Some(PathBuf::from(command));
    }
    path_var?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| p.is_file())
}

impl ServerProcess {
    /// Spawn `command args` with `env` over the base environment in `cwd`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the spec's parts, each borrowed as the child needs it; the redaction only for the log line"
    )]
    pub(crate) fn spawn(
        server: &ServerName,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&Path>,
        sandbox: Option<&SandboxSpec>,
        limits: &StdioLimits,
        redaction: &Redaction,
    ) -> Result<(Self, Pipes), SpawnError> {
        let mut full = base_env();
        full.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let program = find_program(command, full.get("PATH").map(String::as_str))
            .ok_or_else(|| format!("command {command:?} not found in PATH"))?;
        let (scratch, confinement) = match sandbox {
            None => (None, None),
            Some(sb) => {
                let (dir, c) = confinement(sb, &program, cwd)?;
                for key in ["HOME", "TMPDIR"] {
                    full.insert(key.into(), dir.path().display().to_string());
                }
                (Some(dir), Some(c))
            }
        };
        let mut cmd = Command::new(&program);
        cmd.args(args)
            .env_clear()
            .envs(&full)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        oap_exec::confine_command(&mut cmd, limits, confinement);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| "the child has no process id".to_string())?;
        let (Some(stdout), Some(stdin), Some(stderr)) =
            (child.stdout.take(), child.stdin.take(), child.stderr.take())
        else {
            return Err(SpawnError::from(
                "the child's pipes are missing".to_string(),
            ));
        };
        tokio::spawn(drain_stderr(
            server.name.clone(),
            server.noise.clone(),
            stderr,
        ));
        let server = server.name.as_str();
        // The program may have come from `${env:}`.
        info!(server, pid, program = %redaction.scrub(&program.display().to_string()), "MCP server started");
        Ok((
            Self {
                pgid: Pid::from_raw(pid),
                child,
                killed: false,
                _scratch: scratch,
            },
            Pipes { stdout, stdin },
        ))
    }

    /// The process (and group) id.
    pub(crate) fn pid(&self) -> i32 {
        self.pgid.as_raw()
    }

    /// SIGTERM the group, wait up to `grace` for the server to exit, then
    /// SIGKILL the group (descendants included) and reap.
    pub(crate) async fn stop(mut self, grace: Duration) {
        signal(self.pgid, Signal::SIGTERM);
        let _ = tokio::time::timeout(grace, self.child.wait()).await;
        signal(self.pgid, Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        self.killed = true;
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if !self.killed {
            signal(self.pgid, Signal::SIGKILL);
        }
    }
}

fn signal(pgid: Pid, sig: Signal) {
    match killpg(pgid, sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => warn!(pgid = pgid.as_raw(), error = %e, "killpg failed"),
    }
}

/// Count the server's stderr lines and log them as content (debug only),
/// each line cut to a bounded length, memory bounded whatever the server
/// writes.
async fn drain_stderr(server: String, noise: Arc<Noise>, mut pipe: impl AsyncRead + Unpin) {
    let mut chunk = vec![0u8; 8 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let mut dropped = 0usize;
    let flush = |line: &mut Vec<u8>, dropped: &mut usize| {
        // A server may echo the calls it gets (the model's arguments) or
        // their results on stderr: content, for debug lines only.
        noise.record(Kind::StderrLine);
        let text = String::from_utf8_lossy(line);
        if !text.trim().is_empty() || *dropped > 0 {
            debug!(target: oap_exec::CONTENT_LOG_TARGET, server = %server, dropped = *dropped,
                   "stderr: {}", oap_exec::content_excerpt(text.trim_end()));
        }
        line.clear();
        *dropped = 0;
    };
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in chunk.iter().take(n) {
            if b == b'\n' {
                flush(&mut line, &mut dropped);
            } else if line.len() < STDERR_LINE_CHARS {
                line.push(b);
            } else {
                dropped += 1;
            }
        }
    }
    if !line.is_empty() {
        flush(&mut line, &mut dropped);
    }
}
