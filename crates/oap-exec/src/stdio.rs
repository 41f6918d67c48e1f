//! stdio tools: an allow-listed executable, argv without a shell, a cleared
//! environment, resource limits, a kernel sandbox (`oap-sandbox`: Landlock
//! and seccomp, so the model's arguments cannot turn an interpreter such as
//! awk into a shell, read files or reach the network), its own process group
//! that no descendant can leave, bounded output and a deadline after which
//! the whole group is killed. No descriptor the daemon inherited reaches the
//! tool; its scratch directory is capped in total bytes (a tmpfs when the
//! daemon may mount, else watched every 50 ms); and under a root daemon it
//! runs as a per-call uid, so `RLIMIT_NPROC` bounds its processes.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use oap_manifest::Manifest;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::error::{secs, ToolError};
use crate::policy::{StdioLimits, Trust};
use crate::words::split_words;
use crate::{Executor, Reply};

/// After the command exits (or is killed) its pipes normally reach EOF at
/// once; a descendant that escaped the process group may keep them open, so
/// reading stops after this grace period.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// Bound on reaping a child after SIGKILL.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the scratch directory's size is checked when no tmpfs caps
/// it: what a tool can write past the cap is what it writes in this time.
const SCRATCH_POLL: Duration = Duration::from_millis(50);
/// How much stderr an error message quotes.
const STDERR_EXCERPT_CHARS: usize = 2_000;

/// Find the executable for `name` (a bare name looked up in `dirs` in order,
/// or an absolute path). The symlink-resolved target must be a regular,
/// executable file inside an allowed directory, and so must the lexical
/// location. Returns the resolved path.
pub(crate) fn resolve_program(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, ToolError> {
    let refuse = |reason: &str| ToolError::ProgramNotAllowed {
        program: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name.contains('\0') {
        return Err(refuse("empty or invalid command name"));
    }
    let allowed: Vec<PathBuf> = dirs
        .iter()
        .filter(|d| d.is_absolute())
        .filter_map(|d| fs::canonicalize(d).ok())
        .collect();
    let inside = |p: &Path| allowed.iter().any(|d| p.starts_with(d));
    let candidates: Vec<PathBuf> = if name.contains('/') {
        let path = Path::new(name);
        if !path.is_absolute() {
            return Err(refuse("a command must be a bare name or an absolute path"));
        }
        // Checked on the raw text: `Path::components` drops inner `.`s.
        if name.split('/').any(|piece| piece == "." || piece == "..") {
            return Err(refuse("`.` and `..` are not allowed in a command path"));
        }
        vec![path.to_path_buf()]
    } else {
        if name == "." || name == ".." {
            return Err(refuse("not a command name"));
        }
        dirs.iter()
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .collect()
    };
    for candidate in candidates {
        if fs::symlink_metadata(&candidate).is_err() {
            continue;
        }
        // First match decides: a refused match does not fall through to a
        // later directory.
        let parent = candidate
            .parent()
            .and_then(|p| fs::canonicalize(p).ok())
            .ok_or_else(|| refuse("its directory cannot be resolved"))?;
        if !inside(&parent) {
            return Err(refuse("it is not in an allowed directory"));
        }
        let target =
            fs::canonicalize(&candidate).map_err(|e| refuse(&format!("cannot resolve it: {e}")))?;
        if !inside(&target) {
            return Err(refuse(&format!(
                "it resolves to {}, outside the allowed directories",
                target.display()
            )));
        }
        let meta = fs::metadata(&target).map_err(|e| refuse(&e.to_string()))?;
        if !meta.is_file() {
            return Err(refuse("not a regular file"));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(refuse("not executable"));
        }
        return Ok(target);
    }
    Err(refuse("not found in the allowed directories"))
}

/// The tool's argv and stdin from its arguments: `args` (a string split by
/// [`split_words`], or an array of strings) and `stdin` (a string). When
/// `args` is absent, a single other string or array argument is taken as
/// `args` (small models rename keys).
pub(crate) fn argv_and_stdin(arguments: &Map<String, Value>) -> Result<ToolArgs, ToolError> {
    let mut notes = Vec::new();
    let stdin = match arguments.get("stdin") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ToolError::Arguments("`stdin` must be a string".into())),
    };
    let others: Vec<(&String, &Value)> = arguments
        .iter()
        .filter(|(k, v)| *k != "args" && *k != "stdin" && !v.is_null())
        .collect();
    let args =
        match arguments.get("args") {
            Some(v) if !v.is_null() => {
                if !others.is_empty() {
                    notes.push(format!(
                        "ignored arguments: {}",
                        others
                            .iter()
                            .map(|(k, _)| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Some(v)
            }
            _ => {
                match others.as_slice() {
                    [] => None,
                    [(k, v)] if v.is_string() || v.is_array() => {
                        notes.push(format!("argument {k:?} used as `args`"));
                        Some(*v)
                    }
                    _ => {
                        return Err(ToolError::Arguments(format!(
                    "unexpected arguments {}; this tool takes `args` (command-line arguments) \
                     and `stdin` (text on standard input)",
                    others.iter().map(|(k, _)| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                )))
                    }
                }
            }
        };
    let argv = match args {
        None => Vec::new(),
        Some(Value::String(s)) => {
            split_words(s).map_err(|e| ToolError::Arguments(e.to_string()))?
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(ToolError::Arguments(
                    "`args` as an array must hold strings".into(),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ToolError::Arguments(
                "`args` must be a string or an array of strings".into(),
            ))
        }
    };
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ToolError::Arguments(
            "an argument contains a NUL byte".into(),
        ));
    }
    Ok(ToolArgs { argv, stdin, notes })
}

/// A stdio call's command line and input.
#[derive(Debug)]
pub(crate) struct ToolArgs {
    pub(crate) argv: Vec<String>,
    pub(crate) stdin: Option<String>,
    /// For the log: arguments ignored or reinterpreted.
    pub(crate) notes: Vec<String>,
}

/// Apply the rlimits and the parent-death signal. Runs in the forked child
/// before `exec`: only async-signal-safe system calls (getrlimit, setrlimit,
/// prctl), no allocation, no locks.
fn child_setup(limits: &ChildLimits) -> std::io::Result<()> {
    let set = |resource: Resource, soft: u64, hard: u64| -> std::io::Result<()> {
        // Never try to raise a hard limit (EPERM for non-root).
        let (_, current_hard) = getrlimit(resource)?;
        let hard = hard.min(current_hard);
        setrlimit(resource, soft.min(hard), hard)?;
        Ok(())
    };
    set(Resource::RLIMIT_CORE, 0, 0)?;
    set(
        Resource::RLIMIT_CPU,
        limits.cpu_secs,
        limits.cpu_secs.saturating_add(1),
    )?;
    set(
        Resource::RLIMIT_AS,
        limits.memory_bytes,
        limits.memory_bytes,
    )?;
    set(
        Resource::RLIMIT_NPROC,
        limits.max_processes,
        limits.max_processes,
    )?;
    set(
        Resource::RLIMIT_NOFILE,
        limits.max_open_files,
        limits.max_open_files,
    )?;
    set(
        Resource::RLIMIT_FSIZE,
        limits.max_file_bytes,
        limits.max_file_bytes,
    )?;
    Ok(())
}

/// SIGKILL when the daemon dies. Set after any change of user: the kernel
/// clears it when the credentials change.
fn kill_with_parent() -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    Ok(())
}

#[derive(Clone, Copy)]
struct ChildLimits {
    cpu_secs: u64,
    memory_bytes: u64,
    max_processes: u64,
    max_open_files: u64,
    max_file_bytes: u64,
}

impl From<&StdioLimits> for ChildLimits {
    fn from(l: &StdioLimits) -> Self {
        Self {
            cpu_secs: l.cpu_secs,
            memory_bytes: l.memory_bytes,
            max_processes: l.max_processes,
            max_open_files: l.max_open_files,
            // One file can never be larger than the whole scratch cap.
            max_file_bytes: l.max_file_bytes.min(l.max_scratch_bytes),
        }
    }
}

/// Prepare `cmd` for a long-lived local process that is not a tool call
/// (an MCP server the operator configured): its own process group, the
/// stdio tools' resource limits from `limits` (core dumps off, CPU, address
/// space, processes, open files, file size) and SIGKILL when the daemon
/// dies. No kernel confinement: the caller decides that separately.
pub fn limit_command(cmd: &mut tokio::process::Command, limits: &StdioLimits) {
    confine_command(cmd, limits, None);
}

/// [`limit_command`], then `confinement` entered in the child just before
/// exec (after the limits). Descriptors above stderr the daemon inherited
/// are closed at exec.
pub fn confine_command(
    cmd: &mut tokio::process::Command,
    limits: &StdioLimits,
    confinement: Option<oap_sandbox::Confinement>,
) {
    let child_limits = ChildLimits::from(limits);
    let inherited = oap_sandbox::InheritedFds::prepare();
    cmd.process_group(0);
    // SAFETY: the closure runs in the child between fork and exec. It only
    // calls close_range (or fcntl), getrlimit, setrlimit, prctl,
    // landlock_restrict_self and seccomp (async-signal-safe system calls)
    // on data prepared before the fork, and neither allocates nor takes
    // locks.
    #[allow(
        unsafe_code,
        reason = "pre_exec is how a child gets its limits before exec"
    )]
    unsafe {
        cmd.pre_exec(move || {
            inherited.close_on_exec()?;
            child_setup(&child_limits)?;
            kill_with_parent()?;
            match &confinement {
                Some(c) => c.enter(),
                None => Ok(()),
            }
        });
    }
}

/// SIGKILLs the process group when dropped (unless disarmed), so an
/// abandoned call leaves nothing running.
struct GroupKiller {
    pgid: Pid,
    armed: bool,
}

impl GroupKiller {
    fn kill(&self) {
        match killpg(self.pgid, Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => warn!(pgid = self.pgid.as_raw(), error = %e, "killpg failed"),
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// Read up to `cap` bytes. On overflow, kill the group and return
/// `(data, true)`. Stops early when `stop` turns true.
async fn read_capped<R: AsyncRead + Unpin>(
    mut pipe: R,
    cap: usize,
    pgid: Pid,
    mut stop: watch::Receiver<bool>,
) -> (Vec<u8>, bool) {
    let mut buf = Vec::with_capacity(cap.min(8 * 1024));
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = pipe.read(&mut chunk) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = stop.wait_for(|s| *s) => break,
        };
        let room = cap.saturating_sub(buf.len());
        if n > room {
            buf.extend_from_slice(&chunk[..room]);
            let _ = killpg(pgid, Signal::SIGKILL);
            return (buf, true);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    (buf, false)
}

/// What a finished command produced.
struct Finished {
    status: Option<ExitStatus>,
    timed_out: bool,
    stdout: Vec<u8>,
    stdout_capped: bool,
    stderr: Vec<u8>,
    stderr_capped: bool,
    /// The tool reached the scratch cap (writes failed, or it was stopped).
    scratch_capped: bool,
}

/// Whether the files below `dir` take more than `cap` bytes of disk, or
/// there are more of them than a cap of that size allows (each costs an
/// inode the byte count does not show). Symbolic links are not followed.
fn scratch_over(dir: &Path, cap: u64) -> bool {
    let max_entries = (cap / (16 * 1024)).max(1024);
    let mut used: u64 = 0;
    let mut entries: u64 = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(listing) = fs::read_dir(&current) else {
            continue;
        };
        for entry in listing.flatten() {
            entries += 1;
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            // Allocated blocks, so sparse files count what they occupy.
            used = used.saturating_add(meta.blocks().saturating_mul(512));
            if used > cap || entries > max_entries {
                return true;
            }
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    false
}

fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(sig)) => {
                let name = Signal::try_from(sig)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| sig.to_string());
                format!("killed by signal {sig} ({name})")
            }
            _ => "unknown exit status".into(),
        },
        None => "not reaped".into(),
    }
}

fn excerpt(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let count = text.chars().count();
    if count <= max_chars {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max_chars).collect();
        format!("{cut}\n[{} more characters]", count - max_chars)
    }
}

impl Executor {
    /// Run a stdio manifest. Only [`Trust::Local`] manifests get this far.
    pub(crate) async fn run_stdio(
        &self,
        manifest: &Manifest,
        trust: Trust,
        arguments: &Map<String, Value>,
    ) -> Result<Reply, ToolError> {
        // The command alone: validation refuses arguments in invoke.url, and
        // so does this (whitespace never names an allowed file).
        let name = &manifest.invoke.url;
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ToolError::ProgramNotAllowed {
                program: name.clone(),
                reason: "invoke.url must be a bare command name or an absolute path, \
                         without arguments"
                    .into(),
            });
        }
        if trust != Trust::Local {
            warn!(program = %name, %trust, "stdio refused for a non-local manifest");
            return Err(ToolError::StdioNotLocal {
                program: name.clone(),
                trust,
            });
        }
        let program = resolve_program(name, &self.policy.stdio_dirs)?;
        let ToolArgs { argv, stdin, notes } = argv_and_stdin(arguments)?;
        let limits = &self.policy.stdio_limits;
        if let Some(s) = &stdin {
            if s.len() > limits.max_stdin_bytes {
                return Err(ToolError::StdinTooLarge {
                    size: s.len(),
                    limit: limits.max_stdin_bytes,
                });
            }
        }
        let arg0 = Path::new(name)
            .file_name()
            .map(|f| f.to_os_string())
            .unwrap_or_else(|| OsString::from(name));
        let spawn_err = |e: std::io::Error| ToolError::Spawn {
            program: name.clone(),
            error: e.to_string(),
        };
        let workdir = tempfile::Builder::new()
            .prefix("oapd-tool-")
            .tempdir()
            .map_err(spawn_err)?;
        let path_var = std::env::join_paths(
            self.policy
                .stdio_dirs
                .iter()
                .filter(|d| !d.as_os_str().as_bytes().contains(&b':')),
        )
        .map_err(|e| spawn_err(std::io::Error::other(e.to_string())))?;

        let mut cmd = tokio::process::Command::new(&program);
        cmd.arg0(&arg0)
            .args(&argv)
            .env_clear()
            .env("PATH", &path_var)
            .env("LANG", "C.UTF-8")
            .env("HOME", workdir.path())
            .env("TMPDIR", workdir.path())
            .current_dir(workdir.path())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(tz) = std::env::var_os("TZ") {
            cmd.env("TZ", tz);
        }
        let child_limits = ChildLimits::from(limits);
        let inherited = oap_sandbox::InheritedFds::prepare();
        let support = &self.sandbox_support;
        // Root is exempt from RLIMIT_NPROC: the tool runs as a uid of its own.
        let user = if self.policy.sandbox.mode == oap_sandbox::Mode::Off {
            None
        } else {
            oap_sandbox::CallUser::next(support)
        };
        let cap = limits.max_scratch_bytes;
        let scratch = match oap_sandbox::Scratch::prepare(support, workdir.path(), cap, user) {
            Ok(scratch) => scratch,
            Err(e) => {
                // The watched cap still holds.
                warn!(error = %e, "scratch tmpfs unavailable for this call");
                let unmounted = oap_sandbox::Support {
                    scratch_tmpfs: false,
                    ..support.clone()
                };
                oap_sandbox::Scratch::prepare(&unmounted, workdir.path(), cap, user)
                    .map_err(|e| spawn_err(std::io::Error::other(e.to_string())))?
            }
        };
        let scratch = Arc::new(scratch);
        if let (Some(user), false) = (user, scratch.is_mounted()) {
            std::os::unix::fs::chown(workdir.path(), Some(user.uid()), Some(user.uid()))
                .map_err(spawn_err)?;
        }
        let confinement = self.confinement(name, &program, &scratch)?;
        let child_scratch = Arc::clone(&scratch);
        // SAFETY: the closure runs in the child between fork and exec. It
        // only makes async-signal-safe system calls (close_range or fcntl,
        // getrlimit, setrlimit, unshare, mount, move_mount, chdir,
        // setgroups, setresgid, setresuid, prctl, landlock_restrict_self,
        // seccomp) on data prepared before the fork, and neither allocates
        // nor takes locks.
        #[allow(
            unsafe_code,
            reason = "pre_exec is how a child is confined before exec"
        )]
        unsafe {
            cmd.pre_exec(move || {
                // First: the fallback walk reads /proc, which Landlock hides.
                inherited.close_on_exec()?;
                child_setup(&child_limits)?;
                // Mounting needs the daemon's privileges, so before the
                // change of user.
                child_scratch.enter()?;
                if let Some(user) = &user {
                    user.enter()?;
                }
                kill_with_parent()?;
                confinement.enter()
            });
        }
        debug!(program = %program.display(), args = argv.len(), "spawning");
        debug!(target: crate::CONTENT_LOG_TARGET, program = %program.display(),
               argv = %crate::content_excerpt(&format!("{argv:?}")), "spawning");
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
            return Err(spawn_err(std::io::Error::other("child has no pid")));
        };
        let pgid = Pid::from_raw(pid);
        let mut killer = GroupKiller { pgid, armed: true };

        let (stop_tx, stop_rx) = watch::channel(false);
        let cap = limits.max_output_bytes;
        let stdout_task = child
            .stdout
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, pgid, stop_rx.clone())));
        let stderr_task = child
            .stderr
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, pgid, stop_rx.clone())));
        let stdin_task = match (child.stdin.take(), stdin) {
            (Some(mut pipe), Some(text)) => Some(tokio::spawn(async move {
                // EPIPE (the tool did not read it all) is not an error.
                let _ = pipe.write_all(text.as_bytes()).await;
                let _ = pipe.shutdown().await;
            })),
            _ => None,
        };

        // Without a tmpfs the kernel does not cap the scratch directory:
        // its size is watched and the group killed past the cap.
        let scratch_watch = (!scratch.is_mounted()).then(|| {
            let dir = workdir.path().to_path_buf();
            let cap = limits.max_scratch_bytes;
            let tripped = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&tripped);
            let task = tokio::spawn(async move {
                let mut tick = tokio::time::interval(SCRATCH_POLL);
                loop {
                    tick.tick().await;
                    let walk = dir.clone();
                    let over = tokio::task::spawn_blocking(move || scratch_over(&walk, cap))
                        .await
                        .unwrap_or(false);
                    if over {
                        flag.store(true, Ordering::SeqCst);
                        let _ = killpg(pgid, Signal::SIGKILL);
                        break;
                    }
                }
            });
            (task, tripped)
        });

        let timeout = self.policy.stdio_timeout;
        let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(status)) => (Some(status), false),
            Ok(Err(e)) => {
                warn!(error = %e, "waiting for the child failed");
                (None, false)
            }
            Err(_) => (None, true),
        };
        // The command is done (or out of time): nothing it started may
        // outlive the call.
        killer.kill();
        let status = if status.is_none() {
            tokio::time::timeout(REAP_TIMEOUT, child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            status
        };
        // Reaped: the group was killed above; keep the guard only if not.
        killer.armed = status.is_none();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(DRAIN_GRACE).await;
            let _ = stop_tx.send(true);
        });
        let collect = |task: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async move {
            match task {
                Some(t) => t.await.unwrap_or_default(),
                None => (Vec::new(), false),
            }
        };
        let ((stdout, stdout_capped), (stderr, stderr_capped)) =
            tokio::join!(collect(stdout_task), collect(stderr_task));
        stopper.abort();
        if let Some(t) = stdin_task {
            t.abort();
        }
        let scratch_capped = match scratch_watch {
            Some((task, tripped)) => {
                task.abort();
                tripped.load(Ordering::SeqCst)
                    || scratch_over(workdir.path(), limits.max_scratch_bytes)
            }
            None => scratch.is_full(),
        };
        drop(workdir);

        let finished = Finished {
            status: if timed_out { None } else { status },
            timed_out,
            stdout,
            stdout_capped,
            stderr,
            stderr_capped,
            scratch_capped,
        };
        Ok(self.stdio_reply(name, &argv, finished, notes))
    }

    /// The kernel confinement of one call: the policy's read paths plus
    /// the stdio directories, `workdir` writable, process creation only for
    /// the programs the operator listed.
    fn confinement(
        &self,
        name: &str,
        program: &Path,
        scratch: &oap_sandbox::Scratch,
    ) -> Result<oap_sandbox::Confinement, ToolError> {
        let mut policy = self.policy.sandbox.clone();
        policy
            .extra_read_paths
            .extend(self.policy.stdio_dirs.iter().cloned());
        let may_spawn = policy.may_spawn(program) || policy.may_spawn(Path::new(name));
        oap_sandbox::Confinement::prepare_in(&policy, &self.sandbox_support, scratch, may_spawn)
            .map_err(|e| {
                warn!(program = %name, error = %e, "stdio tool not started: sandbox");
                ToolError::Sandbox {
                    program: name.to_string(),
                    error: e.to_string(),
                }
            })
    }

    fn stdio_reply(&self, name: &str, argv: &[String], f: Finished, notes: Vec<String>) -> Reply {
        let scratch_capped = f.scratch_capped;
        let mut detail = format!(
            "{name} {argv:?}: {}{}{}{}",
            if f.timed_out {
                "timed out".to_string()
            } else {
                describe_status(f.status)
            },
            if f.stdout_capped {
                ", stdout capped"
            } else {
                ""
            },
            if f.stderr_capped {
                ", stderr capped"
            } else {
                ""
            },
            if f.scratch_capped {
                ", scratch capped"
            } else {
                ""
            },
        );
        for n in &notes {
            detail.push_str("; ");
            detail.push_str(n);
        }
        let mut reply = self.stdio_reply_text(name, f, detail);
        if scratch_capped {
            reply.content.push_str(&format!(
                "\n[the scratch directory reached its cap of {} bytes: writes past it failed \
                 or the command was stopped]",
                self.policy.stdio_limits.max_scratch_bytes
            ));
        }
        reply
    }

    fn stdio_reply_text(&self, name: &str, f: Finished, detail: String) -> Reply {
        let cap = self.policy.stdio_limits.max_output_bytes;
        let stdout = String::from_utf8_lossy(&f.stdout).into_owned();
        if f.timed_out {
            let mut content = format!(
                "Error: `{name}` timed out after {}; it and everything it started were killed.",
                secs(self.policy.stdio_timeout)
            );
            if !stdout.trim().is_empty() {
                content.push_str("\nPartial output:\n");
                content.push_str(&stdout);
            }
            return Reply {
                ok: false,
                content,
                detail: Some(detail),
            };
        }
        if f.stdout_capped || f.stderr_capped {
            let mut content = stdout;
            if content.trim().is_empty() {
                content = excerpt(&f.stderr, STDERR_EXCERPT_CHARS);
            }
            content.push_str(&format!(
                "\n[output truncated at {cap} bytes; the command was stopped]"
            ));
            return Reply {
                ok: true,
                content,
                detail: Some(detail),
            };
        }
        let code = f.status.and_then(|s| s.code());
        let stderr_empty = f.stderr.iter().all(|b| b.is_ascii_whitespace());
        match code {
            Some(0) => {
                let content = if !stdout.trim().is_empty() {
                    stdout
                } else if !stderr_empty {
                    format!(
                        "(no output on stdout)\nstderr:\n{}",
                        excerpt(&f.stderr, STDERR_EXCERPT_CHARS)
                    )
                } else {
                    "(no output)".to_string()
                };
                Reply {
                    ok: true,
                    content,
                    detail: Some(detail),
                }
            }
            // The grep/diff convention: status 1 without a complaint on
            // stderr means "nothing found", not failure.
            Some(1) if stderr_empty => Reply {
                ok: true,
                content: if stdout.trim().is_empty() {
                    "(no output; exit status 1, e.g. no match)".to_string()
                } else {
                    stdout
                },
                detail: Some(detail),
            },
            _ => {
                let mut content = format!("Error: `{name}` failed ({})", describe_status(f.status));
                if !stderr_empty {
                    content.push_str(":\n");
                    content.push_str(&excerpt(&f.stderr, STDERR_EXCERPT_CHARS));
                }
                if !stdout.trim().is_empty() {
                    content.push_str("\nstdout:\n");
                    content.push_str(&excerpt(&f.stdout, STDERR_EXCERPT_CHARS));
                }
                Reply {
                    ok: false,
                    content,
                    detail: Some(detail),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn a(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn argv_forms() {
        let ToolArgs { argv, stdin, .. } =
            argv_and_stdin(&a(json!({"args": "-c 'a b'", "stdin": "x"}))).unwrap();
        assert_eq!(argv, ["-c", "a b"]);
        assert_eq!(stdin.as_deref(), Some("x"));
        let ToolArgs { argv, stdin, .. } =
            argv_and_stdin(&a(json!({"args": ["-n", "$(id)", 3]}))).unwrap();
        assert_eq!(argv, ["-n", "$(id)", "3"]);
        assert!(stdin.is_none());
        let ToolArgs { argv, notes, .. } =
            argv_and_stdin(&a(json!({"pattern": "foo bar", "stdin": "x"}))).unwrap();
        assert_eq!(argv, ["foo", "bar"]);
        assert_eq!(notes.len(), 1);
        assert!(argv_and_stdin(&a(json!({"a": "1", "b": "2"}))).is_err());
        assert!(argv_and_stdin(&a(json!({"args": {"x": 1}}))).is_err());
        assert!(argv_and_stdin(&a(json!({"args": "'open"}))).is_err());
        assert!(argv_and_stdin(&a(json!({"stdin": 5}))).is_err());
        assert!(argv_and_stdin(&a(json!({"args": ["a\u{0}b"]}))).is_err());
        let ToolArgs { argv, stdin, .. } = argv_and_stdin(&a(json!({}))).unwrap();
        assert!(argv.is_empty() && stdin.is_none());
    }

    #[test]
    fn program_resolution() {
        let dirs = vec![PathBuf::from("/usr/bin"), PathBuf::from("/bin")];
        assert!(resolve_program("echo", &dirs).is_ok());
        assert!(resolve_program("/usr/bin/echo", &dirs).is_ok());
        for bad in [
            "",
            "..",
            "../bin/echo",
            "bin/echo",
            "/usr/bin/../bin/echo",
            "/usr/bin/./echo",
            "/etc/passwd",
            "/usr/sbin/nologin",
            "no-such-command-here",
            "/usr/bin",
        ] {
            assert!(resolve_program(bad, &dirs).is_err(), "{bad}");
        }
    }
}
