//! Kernel-enforced confinement for local tool processes.
//!
//! A stdio tool is a program such as `awk`, `sed` or `jq` whose arguments a
//! model chose. Several such programs are interpreters or open any file they
//! are given, so no list of forbidden flags can make them safe. This crate
//! has the kernel confine the process instead, between `fork` and `exec`:
//!
//! - **no_new_privs**: no set-uid/set-gid/file-capability gain across exec.
//! - **Landlock** (Linux 5.13+): the filesystem is readable only below the
//!   system directories a program needs (executables, libraries, locale and
//!   time zone data) plus the operator's extra paths, and writable only in
//!   the call's own scratch directory and `/dev/null`. On 6.7+ TCP bind and
//!   connect are refused; on 6.12+ signals and abstract UNIX sockets outside
//!   the tool are out of reach.
//! - **seccomp** (every supported kernel): no sockets at all, no ptrace, no
//!   mount or namespaces, no keyrings, no kernel modules, no BPF, no
//!   io_uring, no `setsid`/`setpgid` (so no descendant can leave the process
//!   group the deadline kill signals), and, unless the program is allowed to
//!   start processes, no `fork`/`clone` of new processes either — which takes
//!   `system()` away from awk and the `e` command away from sed.
//!
//! Beside the confinement, the child gets what bounds it as a process
//! (module `process`): every descriptor above stderr is closed at exec
//! ([`InheritedFds`], `close_range`, else a walk of `/proc/self/fd`, else
//! up to the descriptor limit); the call's scratch directory is a tmpfs of
//! the configured size in a private mount namespace when the daemon may
//! mount ([`Scratch`]: root with `CAP_SYS_ADMIN`; elsewhere the executor
//! watches its size); and a daemon running as root runs each tool as an
//! unprivileged uid of its own ([`CallUser`]), since root is exempt from
//! `RLIMIT_NPROC`. Mounting and the change of user happen before the
//! seccomp filter, which refuses both to the tool.
//!
//! [`Support::probe`] asks the kernel what it offers without changing the
//! calling process; [`Confinement::prepare`] does every allocation and path
//! lookup in the parent; [`Confinement::enter`] runs in the forked child and
//! makes only async-signal-safe system calls.
//!
//! # Architecture
//!
//! Kernel confinement for stdio tool processes, because the model chooses
//! their arguments and several bundled programs are interpreters (awk's
//! `system()`, sed's `e` and `w`) or read any file they are given (grep, jq
//! `--rawfile`). `Support::probe` asks the kernel what it offers without
//! changing the daemon; `Confinement::prepare` builds everything in the parent
//! (a Landlock ruleset file descriptor, two compiled BPF programs);
//! `Confinement::enter` runs in the forked child and only makes system calls.
//!
//! | protection | mechanism | kernel |
//! |---|---|---|
//! | read only below system paths (`/usr`, `/lib*`, loader cache, locale, time zone, man data), `stdio_dirs` and `tools.sandbox_read_paths`; write only in the call's scratch directory and `/dev/null` | Landlock | 5.13 |
//! | no TCP bind/connect | Landlock | 6.7 |
//! | no signals or abstract UNIX sockets outside the tool | Landlock scoping | 6.12 |
//! | no sockets of any family, ptrace, mount, namespaces, keyrings, modules, BPF, perf, io_uring, `setsid`/`setpgid`; x32 numbers and foreign architectures refused | seccomp | any (3.5+) |
//! | no new processes unless the program is in `tools.sandbox_spawn` (default `man`); threads still work (`clone3` answers ENOSYS so libc falls back to `clone`, whose flags the filter reads) | seccomp | any |
//! | no privilege gain across exec | `no_new_privs` | any |
//!
//! Why Landlock and seccomp rather than namespaces (bubblewrap): the
//! appliance unit sets `PrivateUsers=`, `RestrictNamespaces=yes` and runs as an
//! unprivileged user, where unprivileged user namespaces are unavailable;
//! Landlock and seccomp need no privilege and nest inside the unit's own
//! sandbox. No descendant survives the deadline: none can leave the process
//! group (`setsid`/`setpgid` refused), and the group is killed with SIGKILL.
//!
//! **Architecture Invariant.** `enter` allocates nothing and takes no lock (it
//! runs between fork and exec in a multi-threaded daemon). Under
//! `tools.sandbox: auto` a missing protection is logged at start and listed in
//! `/health` (`tool_sandbox.missing`); under `require` the tool does not run.
//! The crate depends on nothing of oapd's.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod process;

#[cfg(target_os = "linux")]
pub use process::{CallUser, InheritedFds, Scratch, ScratchError, CALL_UID_BASE, CALL_UID_COUNT};

/// How strictly stdio tools are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every protection the kernel offers; what it lacks is logged at start
    /// and shown by `/health`, and tools still run.
    #[default]
    Auto,
    /// Like `Auto`, but a tool does not run unless the filesystem and
    /// system-call protections are both active.
    Require,
    /// No confinement beyond resource limits and the process group (the
    /// operator accepts that a steered model can run code as the daemon).
    Off,
}

impl Mode {
    /// The config spelling (`auto`, `require`, `off`), as shown in `/health`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Require => "require",
            Mode::Off => "off",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Mode::Auto),
            "require" => Ok(Mode::Require),
            "off" => Ok(Mode::Off),
            other => Err(format!("expected one of auto, require, off; got {other:?}")),
        }
    }
}

/// Paths every tool may read and execute below (those that exist on the
/// machine): executables, shared libraries and the loader's cache, locale,
/// time zone and manual page data.
pub const SYSTEM_READ_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/manpath.config",
    "/etc/groff",
    "/etc/papersize",
    "/var/cache/man",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
];

/// Devices every tool may also write (output thrown away).
pub const SYSTEM_WRITE_PATHS: &[&str] = &["/dev/null"];

/// What the operator configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `tools.sandbox`: whether a missing protection is tolerated, fatal, or all is off.
    pub mode: Mode,
    /// Extra paths (files or directories) tools may read and execute below,
    /// beside [`SYSTEM_READ_PATHS`].
    pub extra_read_paths: Vec<PathBuf>,
    /// Program names (the file name of the resolved executable, or of the
    /// manifest's command) allowed to start processes. `man` needs this: it
    /// runs a formatting pipeline.
    pub spawn_programs: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            mode: Mode::Auto,
            extra_read_paths: Vec::new(),
            spawn_programs: vec!["man".to_string()],
        }
    }
}

impl Policy {
    /// Whether `program` (a command name or path) may start processes.
    pub fn may_spawn(&self, program: &Path) -> bool {
        let Some(name) = program.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        self.spawn_programs.iter().any(|p| p == name)
    }
}

/// What the running kernel (and the service manager's own system call
/// filter) lets this process use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Landlock ABI version (0: none).
    pub landlock_abi: u32,
    /// Why Landlock is not available, when it is not.
    pub landlock_unavailable: Option<String>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Why seccomp is not available, when it is not.
    pub seccomp_unavailable: Option<String>,
    /// Whether each call's scratch directory can be a size-capped tmpfs
    /// in a private mount namespace (the daemon may mount: root).
    pub scratch_tmpfs: bool,
    /// Why not, when it cannot.
    pub scratch_tmpfs_unavailable: Option<String>,
    /// Whether the daemon runs as root, which `RLIMIT_NPROC` does not bind.
    pub root: bool,
    /// Whether tools run as a per-call unprivileged uid ([`CallUser`]):
    /// the daemon is root and its user namespace maps that range.
    pub call_users: bool,
}

impl Support {
    /// Ask the kernel, without changing this process.
    pub fn probe() -> Support {
        #[cfg(target_os = "linux")]
        {
            linux::probe()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Support {
                landlock_abi: 0,
                landlock_unavailable: Some("not Linux".into()),
                seccomp: false,
                seccomp_unavailable: Some("not Linux".into()),
                scratch_tmpfs: false,
                scratch_tmpfs_unavailable: Some("not Linux".into()),
                root: false,
                call_users: false,
            }
        }
    }

    /// Landlock confines the filesystem.
    pub fn filesystem(&self) -> bool {
        self.landlock_abi >= 1
    }

    /// Landlock also refuses TCP bind/connect (ABI 4, Linux 6.7).
    pub fn landlock_network(&self) -> bool {
        self.landlock_abi >= 4
    }

    /// Landlock keeps signals inside the tool (ABI 6, Linux 6.12).
    pub fn signal_scope(&self) -> bool {
        self.landlock_abi >= 6
    }

    /// The protections missing under `mode`, in words, for logs and `/health`.
    pub fn missing(&self, mode: Mode) -> Vec<String> {
        let mut missing = Vec::new();
        if mode == Mode::Off {
            missing.push("all: tools.sandbox is off".to_string());
            return missing;
        }
        if !self.filesystem() {
            missing.push(format!(
                "filesystem confinement (Landlock, Linux 5.13+): {}",
                self.landlock_unavailable
                    .as_deref()
                    .unwrap_or("unavailable")
            ));
        } else {
            if !self.landlock_network() {
                missing.push(
                    "Landlock TCP rules (Linux 6.7+; seccomp still refuses every socket)".into(),
                );
            }
            if !self.signal_scope() {
                missing.push(
                    "Landlock signal scoping (Linux 6.12+): a tool running as the daemon's user \
                     could signal the daemon"
                        .into(),
                );
            }
        }
        if !self.seccomp {
            missing.push(format!(
                "system call filter (seccomp): {}",
                self.seccomp_unavailable.as_deref().unwrap_or("unavailable")
            ));
        }
        if self.root && !self.call_users {
            missing.push(
                "per-call user: the daemon runs as root in a user namespace that does not map \
                 the per-call uids, so RLIMIT_NPROC does not bound a tool's processes"
                    .into(),
            );
        }
        missing
    }

    /// The protections in force under `mode`, in words.
    pub fn active(&self, mode: Mode) -> Vec<String> {
        let mut active = Vec::new();
        if mode == Mode::Off {
            return active;
        }
        active.push("no_new_privs".to_string());
        if self.filesystem() {
            active.push(format!(
                "Landlock ABI {}: read-only system paths, writes only in the scratch directory",
                self.landlock_abi
            ));
        }
        if self.landlock_network() {
            active.push("Landlock: no TCP bind or connect".into());
        }
        if self.signal_scope() {
            active.push("Landlock: signals and abstract sockets scoped to the tool".into());
        }
        if self.seccomp {
            active.push(
                "seccomp: no sockets, ptrace, mount, namespaces, keyrings, modules, BPF, \
                 io_uring, setsid/setpgid; process creation only for spawn_programs"
                    .into(),
            );
        }
        active.push(if self.scratch_tmpfs {
            "scratch cap: a size-capped tmpfs per call (writes past it fail with ENOSPC)".into()
        } else {
            "scratch cap: watched (the tool is stopped past it; a tmpfs needs the daemon to \
             be root)"
                .into()
        });
        if self.call_users {
            active
                .push("per-call unprivileged uid (the daemon is root): RLIMIT_NPROC binds".into());
        }
        active
    }
}

/// Why a tool could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `require` mode on a kernel without Landlock filesystem rules or seccomp; the
    /// value lists what is missing. The tool does not run.
    #[error("the sandbox is required (tools.sandbox: require) but the kernel lacks: {0}")]
    Required(String),
    /// Building the Landlock ruleset failed (the scratch directory cannot be opened, a
    /// kernel refusal); the value is the underlying error.
    #[error("cannot build the filesystem rules: {0}")]
    Landlock(String),
    /// Compiling the seccomp program failed; the value is the underlying error.
    #[error("cannot build the system call filter: {0}")]
    Seccomp(String),
}

/// Everything the child needs, prepared in the parent.
pub struct Confinement {
    enabled: bool,
    #[cfg(target_os = "linux")]
    inner: linux::Prepared,
}

impl fmt::Debug for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confinement")
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Confinement {
    /// Build the rules for one tool call: `scratch` is its private, writable
    /// working directory, `may_spawn` whether it may start processes.
    pub fn prepare(
        policy: &Policy,
        support: &Support,
        scratch: &Path,
        may_spawn: bool,
    ) -> Result<Confinement, SandboxError> {
        Self::prepare_with_network(policy, support, scratch, may_spawn, false)
    }

    /// Like [`Confinement::prepare`], writable below the call's
    /// [`Scratch`]: the tmpfs root when it has one (a rule on the covered
    /// directory would not reach inside the mount), else its directory.
    #[cfg(target_os = "linux")]
    pub fn prepare_in(
        policy: &Policy,
        support: &Support,
        scratch: &Scratch,
        may_spawn: bool,
    ) -> Result<Confinement, SandboxError> {
        let root = match scratch.mount_fd() {
            Some(fd) => linux::WritableRoot::Mount(fd),
            None => linux::WritableRoot::Path(scratch.dir()),
        };
        Self::prepare_root(policy, support, root, may_spawn, false)
    }

    /// Like [`Confinement::prepare`], for a long-lived local service (an
    /// MCP server the operator configured) rather than a tool call: with
    /// `network`, sockets and TCP bind/connect stay allowed; everything
    /// else (read paths, the writable `scratch`, no privilege gain, the
    /// refused system calls) is the same.
    pub fn prepare_with_network(
        policy: &Policy,
        support: &Support,
        scratch: &Path,
        may_spawn: bool,
        network: bool,
    ) -> Result<Confinement, SandboxError> {
        #[cfg(target_os = "linux")]
        {
            Self::prepare_root(
                policy,
                support,
                linux::WritableRoot::Path(scratch),
                may_spawn,
                network,
            )
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (scratch, may_spawn, network);
            Self::check_mode(policy, support)?;
            Ok(Confinement {
                enabled: policy.mode != Mode::Off,
            })
        }
    }

    fn check_mode(policy: &Policy, support: &Support) -> Result<(), SandboxError> {
        if policy.mode == Mode::Require && (!support.filesystem() || !support.seccomp) {
            return Err(SandboxError::Required(
                support.missing(policy.mode).join("; "),
            ));
        }
        Ok(())
    }

    #[cfg(target_os = "linux")]
    fn prepare_root(
        policy: &Policy,
        support: &Support,
        scratch: linux::WritableRoot<'_>,
        may_spawn: bool,
        network: bool,
    ) -> Result<Confinement, SandboxError> {
        if policy.mode == Mode::Off {
            return Ok(Confinement {
                enabled: false,
                #[cfg(target_os = "linux")]
                inner: linux::Prepared::default(),
            });
        }
        Self::check_mode(policy, support)?;
        let inner = linux::prepare(policy, support, scratch, may_spawn, network)?;
        Ok(Confinement {
            enabled: true,
            inner,
        })
    }

    /// Confine the calling process. Call it in the forked child just before
    /// `exec`: it makes only async-signal-safe system calls (prctl,
    /// landlock_restrict_self, seccomp) and does not allocate.
    pub fn enter(&self) -> std::io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            self.inner.enter()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(())
        }
    }
}
