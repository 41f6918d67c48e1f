//! Network namespaces for tests that need addresses other than loopback
//! (LAN clients, mDNS): every interface is created inside a namespace the
//! test makes, so no packet reaches the host's networks.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// `argv` run inside the namespace `ns` (`ip netns exec`, which execs it:
/// the child's pid is the program's).
pub fn command_in(ns: &str, argv: &[std::ffi::OsString]) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).args(argv);
    command
}

/// A network namespace this process made; deleted on drop (which deletes
/// the interfaces inside it, and a veth end's peer).
pub struct Netns {
    name: String,
}

impl Netns {
    /// A fresh namespace named `<prefix>-<pid>-<n>` (unique within this
    /// process, so tests running side by side never share one), or why
    /// none can be made here.
    pub fn new(prefix: &str) -> Result<Netns, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        available()?;
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name])?;
        Ok(Netns { name })
    }

    /// A fresh namespace with loopback up and a veth pair `va`/`vb` inside
    /// it, `ip` (a bare address) on `va`: a LAN address nothing outside
    /// the namespace can reach.
    pub fn with_lan_address(prefix: &str, ip: &str) -> Result<Netns, String> {
        let ns = Netns::new(prefix)?;
        let name = ns.name.clone();
        let address = format!("{ip}/32");
        for step in [
            &["ip", "-n", &name, "link", "set", "lo", "up"][..],
            &[
                "ip", "-n", &name, "link", "add", "va", "type", "veth", "peer", "name", "vb",
            ],
            &["ip", "-n", &name, "addr", "add", &address, "dev", "va"],
            &["ip", "-n", &name, "link", "set", "va", "up"],
            &["ip", "-n", &name, "link", "set", "vb", "up"],
        ] {
            run(step)?;
        }
        Ok(ns)
    }

    /// The namespace's name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        inside(&self.name, f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}
