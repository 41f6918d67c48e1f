//! Network namespaces for tests that need addresses other than loopback
//! (LAN clients, mDNS): every interface is created inside a namespace the
//! test makes, so no packet reaches the host's networks.

use std::path::Path;
use std::process::Command;

/// Runs a set-up command (`ip …`), failing with its stderr.
pub fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether namespaces can be built here, or why not (the test then skips).
pub fn available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("not root".into());
    }
    run(&["ip", "-V"]).map_err(|e| format!("`ip` missing: {e}"))
}

/// Runs `f` on a thread that entered the network namespace `ns` (setns
/// affects only the calling thread).
pub fn inside<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = Path::new("/var/run/netns").join(ns);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("namespace file");
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// `oapd` started inside the namespace `ns`, configured only by what the
/// test passes (as [`super::oapd`]).
pub fn oapd_in(ns: &str) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).args(super::oapd_argv());
    super::scrub_config_env(&mut command);
    command
}
