//! Where the package runs, checked: `cargo xtask check-glibc` and
//! `cargo xtask check-install`.
//!
//! The release binaries link glibc dynamically, so the newest `GLIBC_x.y`
//! symbol version they need decides which systems can start them at all.
//! [`SUPPORTED`] lists the systems the package is for; the oldest glibc
//! among them is the floor [`floor`], and `check-glibc` fails when a
//! shipped binary of either architecture needs a newer one. The versions
//! come from the binary's version-needs section (`.gnu.version_r`) as
//! binutils' `readelf` prints it, which reads every architecture's ELF.
//!
//! NVIDIA JetPack 5 (Ubuntu 20.04, glibc 2.31) is not in the list: the
//! package's binaries need 2.34, and why they are not built against 2.31
//! is told at `debfile::DEPENDS`. `cargo xtask cross --jetpack5` builds an
//! aarch64 binary against 2.31 with cargo-zigbuild for those who need it.
//!
//! `check-install` proves the `.deb` installs and the daemon starts on each
//! Debian suite of [`SUITES`], for amd64 natively and arm64 under qemu-user
//! (binfmt_misc with qemu-user-static's fix-binary registration, so the
//! emulator need not be inside the tree):
//!
//! 1. a `debootstrap --variant=minbase` tree of the suite, cached as a tar
//!    under `target/debcheck/` keyed by suite and architecture (made once;
//!    every run unpacks a fresh copy, so one run cannot leave state for the
//!    next);
//! 2. `apt-get install ./oapd.deb` inside it, from the Debian mirror: the
//!    package's Depends must resolve on that suite;
//! 3. what the package set up: the system user and group (home
//!    `/var/lib/oapd`, no login shell), the state directory's owner and
//!    mode, `oapd.service` installed and enabled, `oapd.socket` installed
//!    but not enabled; the binary runs (`--version`) and reads the packaged
//!    config (`oapd config`);
//! 4. the daemon started in the tree as the unit starts it (user oapd, the
//!    packaged config, bundled manifests and model), in a network and PID
//!    namespace of its own with only `lo` up, and `/health` asked from
//!    inside that namespace until it answers: the model is loaded and the
//!    bundled manifests are indexed.
//!
//! Under qemu-user (arm64 on an x86 host) the daemon works but slowly: the
//! model loads in about 15 s, while embedding one text takes tens of
//! seconds (every NEON multiply-add is emulated in software), so the
//! hundred-odd texts of the bundled manifests would take longer than any
//! sensible deadline; a run that waited for them looked like a hang. The
//! emulated start therefore sets `index.start_embed_limit` to 0, the
//! documented path for a large catalog: the daemon is ready at once, with
//! the model loaded, serves discovery lexically and embeds in the
//! background. What the arm64 check proves is the package on arm64's
//! Debian (Depends resolve, maintainer scripts, user, units), the aarch64
//! binary and its config, and the daemon loading the model and serving
//! `/health`; that inference gives the right vectors on arm64 is proven in
//! the arm64 guest (`cargo xtask cross --test`, candle on NEON).
//!
//! Every step that fails names the suite, the architecture and the step.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::glibc::{check_binary_glibc, host_arch};
use crate::image::MIRROR;
use crate::repo_root;
use crate::tasks::run_in_root;

/// `cargo xtask check-glibc [BINARY...]`: by default the shipped binaries
/// of both architectures (what `cargo xtask deb` packages).
pub fn check_glibc(args: &[String]) -> Result<()> {
    let binaries: Vec<PathBuf> = if args.is_empty() {
        ["amd64", "arm64"]
            .iter()
            .map(|arch| crate::package::shipped_binary(arch))
            .collect::<Result<_>>()?
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    for binary in &binaries {
        ensure!(
            binary.is_file(),
            "{} is missing: build it with `cargo xtask deb --arch amd64|arm64`",
            binary.display()
        );
        check_binary_glibc(binary)?;
    }
    Ok(())
}

/// The Debian suites the package is installed on by `check-install`.
pub(crate) const SUITES: &[&str] = &["bookworm", "trixie"];

/// How long the daemon may take from start to answering `/health`: it
/// loads the model and indexes the bundled manifests first. Natively that
/// takes seconds; under qemu-user every instruction is translated.
fn start_deadline(arch: &str) -> Duration {
    if arch == host_arch() {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(900)
    }
}

/// `cargo xtask check-install [--base-only] [--suite S]... [--arch A]...`
///
/// `--base-only` makes the cached base systems and stops: CI runs it in
/// the background while the workspace builds, so that the check itself
/// later starts from the cache (debootstrap is minutes of unpacking).
pub fn check_install(args: &[String]) -> Result<()> {
    let mut suites: Vec<String> = Vec::new();
    let mut arches: Vec<String> = Vec::new();
    let mut base_only = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--base-only" => base_only = true,
            "--suite" => {
                let suite = iter.next().context("--suite needs bookworm or trixie")?;
                ensure!(
                    SUITES.contains(&suite.as_str()),
                    "--suite {suite}: expected one of {SUITES:?}"
                );
                suites.push(suite.clone());
            }
            "--arch" => {
                let arch = iter.next().context("--arch needs amd64 or arm64")?;
                ensure!(
                    matches!(arch.as_str(), "amd64" | "arm64"),
                    "--arch {arch}: expected amd64 or arm64"
                );
                arches.push(arch.clone());
            }
            other => bail!(
                "unknown argument {other:?}; usage: check-install [--base-only] \
                 [--suite bookworm|trixie]... [--arch amd64|arm64]..."
            ),
        }
    }
    if suites.is_empty() {
        suites = SUITES.iter().map(|s| (*s).to_owned()).collect();
    }
    if arches.is_empty() {
        arches = vec!["amd64".to_owned(), "arm64".to_owned()];
    }
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .context("cannot run id")?;
    ensure!(
        String::from_utf8_lossy(&uid.stdout).trim() == "0",
        "check-install needs root (debootstrap, chroot, network namespaces)"
    );
    for (tool, package) in [
        ("debootstrap", "debootstrap"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("ip", "iproute2"),
        ("curl", "curl"),
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        ensure!(found, "{tool} is missing: apt-get install {package}");
    }
    if base_only {
        let cache = repo_root().join("target/debcheck");
        fs::create_dir_all(&cache)?;
        for arch in &arches {
            if arch != host_arch() {
                foreign_arch_emulation(arch)?;
            }
            for suite in &suites {
                let tar = base_tree(&cache, suite, arch)
                    .with_context(|| format!("debootstrap of {suite}/{arch}"))?;
                println!(
                    "check-install: {suite}/{arch}: base system at {}",
                    tar.display()
                );
            }
        }
        return Ok(());
    }
    let mut failures = Vec::new();
    for arch in &arches {
        let deb = crate::package::deb_path(arch)?;
        ensure!(
            deb.is_file(),
            "{} is missing: run `cargo xtask deb --arch {arch}` first",
            deb.display()
        );
        if arch != host_arch() {
            foreign_arch_emulation(arch)?;
        }
        for suite in &suites {
            let started = Instant::now();
            match check_one(suite, arch, &deb) {
                Ok(()) => println!(
                    "check-install: {suite}/{arch}: installed, /health answered ({:.0} s)",
                    started.elapsed().as_secs_f64()
                ),
                Err(error) => {
                    eprintln!("check-install: {suite}/{arch}: FAILED: {error:#}");
                    failures.push(format!("{suite}/{arch}: {error:#}"));
                }
            }
        }
    }
    ensure!(
        failures.is_empty(),
        "the package failed on {}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// binfmt_misc runs `arch`'s binaries with qemu-user-static: mounted when
/// it is not, and the handler registered from qemu-user-static's own
/// binfmt.d file when it is missing (its `F` flag opens the emulator now,
/// so chroots need no copy of it).
fn foreign_arch_emulation(arch: &str) -> Result<()> {
    ensure!(arch == "arm64", "no emulation known for {arch}");
    let binfmt = Path::new("/proc/sys/fs/binfmt_misc");
    if !binfmt.join("register").exists() {
        run_in_root(
            Command::new("mount")
                .args(["-t", "binfmt_misc", "binfmt_misc"])
                .arg(binfmt),
        )
        .context("cannot mount binfmt_misc")?;
    }
    let handler = binfmt.join("qemu-aarch64");
    if handler.exists() {
        let state = fs::read_to_string(&handler)?;
        ensure!(
            state.starts_with("enabled"),
            "the qemu-aarch64 binfmt handler is disabled: {state}"
        );
        return Ok(());
    }
    let conf = Path::new("/usr/lib/binfmt.d/qemu-aarch64.conf");
    let line = fs::read_to_string(conf).with_context(|| {
        format!(
            "{} is missing: apt-get install qemu-user-static",
            conf.display()
        )
    })?;
    fs::write(binfmt.join("register"), line.trim())
        .context("cannot register the qemu-aarch64 binfmt handler")?;
    Ok(())
}

/// Install and start on one suite and architecture.
fn check_one(suite: &str, arch: &str, deb: &Path) -> Result<()> {
    let cache = repo_root().join("target/debcheck");
    fs::create_dir_all(&cache)?;
    let base = base_tree(&cache, suite, arch).context("debootstrap of the base system")?;
    let tree = cache.join(format!("work-{suite}-{arch}"));
    if tree.exists() {
        fs::remove_dir_all(&tree).with_context(|| format!("cannot clear {}", tree.display()))?;
    }
    fs::create_dir_all(&tree)?;
    run_in_root(
        Command::new("tar")
            .args(["--numeric-owner", "-xf"])
            .arg(&base)
            .arg("-C")
            .arg(&tree),
    )?;
    fs::copy(deb, tree.join("tmp/oapd.deb"))?;
    fs::copy("/etc/resolv.conf", tree.join("etc/resolv.conf"))
        .context("the tree needs the host's resolver to reach the mirror")?;
    in_tree(
        &tree,
        "apt-get update -q && \
         apt-get install -y -q --no-install-recommends /tmp/oapd.deb && \
         dpkg-query -W -f '${Status} ${Version}\\n' oapd",
    )
    .context("apt-get install ./oapd.deb")?;
    in_tree(&tree, PACKAGE_PARTS).context("what the package set up")?;
    let emulated = arch != host_arch();
    let started = Instant::now();
    let answer = start_and_ask_health(&tree, start_deadline(arch), emulated)?;
    let pending = check_health(&answer, emulated).context("the /health answer")?;
    println!(
        "check-install: {suite}/{arch}: /health after {:.1} s (model loaded, {pending} texts \
         left to embed in the background): {}",
        started.elapsed().as_secs_f64(),
        answer.trim()
    );
    Ok(())
}

/// Run in the tree after installation: the user, the state directory and
/// the units as the package means them, the binary and its config.
const PACKAGE_PARTS: &str = r#"set -e
fail() { echo "check-install: $*" >&2; exit 1; }
entry=$(getent passwd oapd) || fail "no user oapd"
case "$entry" in
  *:/var/lib/oapd:/usr/sbin/nologin) ;;
  *) fail "user oapd is '$entry', expected home /var/lib/oapd and shell /usr/sbin/nologin" ;;
esac
getent group oapd >/dev/null || fail "no group oapd"
state=$(stat -c '%U:%G %a' /var/lib/oapd) || fail "no /var/lib/oapd"
[ "$state" = "oapd:oapd 750" ] || fail "/var/lib/oapd is $state, expected oapd:oapd 750"
[ -f /usr/lib/systemd/system/oapd.service ] || fail "oapd.service is not installed"
[ -L /etc/systemd/system/multi-user.target.wants/oapd.service ] || fail "oapd.service is not enabled"
[ -f /usr/lib/systemd/system/oapd.socket ] || fail "oapd.socket is not installed"
[ ! -e /etc/systemd/system/sockets.target.wants/oapd.socket ] || fail "oapd.socket is enabled; it must stay opt-in"
/usr/bin/oapd --version
/usr/bin/oapd --config /etc/oapd/config.yaml config >/dev/null || fail "oapd config rejects the packaged config"
echo "check-install: user, state directory, units, --version and config as packaged"
"#;

/// The model is loaded and the bundled manifests are indexed; returns how
/// many texts are still to be embedded in the background. Natively there
/// are none and the status is `ok`; emulated, the daemon says `degraded`
/// while it embeds them, and for that reason only.
fn check_health(answer: &str, emulated: bool) -> Result<u64> {
    let health: serde_json::Value =
        serde_json::from_str(answer).context("/health did not answer JSON")?;
    ensure!(
        health["model"]["loaded"] == true,
        "the embedding model is not loaded: {answer}"
    );
    let manifests = health["index"]["manifests"].as_u64().unwrap_or(0);
    ensure!(manifests > 0, "no manifests indexed: {answer}");
    let pending = health["index"]["pending_texts"].as_u64().unwrap_or(0);
    let status = health["status"].as_str().unwrap_or_default();
    if emulated && pending > 0 {
        ensure!(
            matches!(status, "ok" | "degraded"),
            "status {status:?}: {answer}"
        );
        // The daemon says why it is degraded ("; " between reasons);
        // background embedding must be the only reason.
        let other_reasons: Vec<&str> = health["reason"]
            .as_str()
            .unwrap_or_default()
            .split("; ")
            .filter(|r| !r.is_empty() && !r.contains("embedded in the background"))
            .collect();
        ensure!(
            other_reasons.is_empty(),
            "degraded for more than background embedding: {answer}"
        );
    } else {
        ensure!(
            status == "ok" && pending == 0,
            "status {status:?} with {pending} texts left to embed, expected ok and none: {answer}"
        );
    }
    Ok(pending)
}

/// The cached minbase tar of `suite`/`arch`, made with debootstrap when
/// missing.
fn base_tree(cache: &Path, suite: &str, arch: &str) -> Result<PathBuf> {
    let tar = cache.join(format!("rootfs-{suite}-{arch}.tar"));
    if tar.is_file() {
        return Ok(tar);
    }
    let started = Instant::now();
    let tree = cache.join(format!("base-{suite}-{arch}"));
    if tree.exists() {
        fs::remove_dir_all(&tree)?;
    }
    let debs = cache.join(format!("apt-{suite}-{arch}"));
    fs::create_dir_all(&debs)?;
    run_in_root(
        Command::new("debootstrap")
            .arg("--variant=minbase")
            .arg(format!("--arch={arch}"))
            .arg(format!("--cache-dir={}", debs.display()))
            .arg(suite)
            .arg(&tree)
            .arg(MIRROR),
    )?;
    let partial = tar.with_extension("tar.partial");
    run_in_root(
        Command::new("tar")
            .args(["--numeric-owner", "-cf"])
            .arg(&partial)
            .arg("-C")
            .arg(&tree)
            .arg("."),
    )?;
    fs::rename(&partial, &tar)?;
    fs::remove_dir_all(&tree)?;
    println!(
        "check-install: {suite}/{arch}: base system made in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(tar)
}

/// `script` run by sh inside `tree` with /proc mounted (in a mount
/// namespace of its own, so nothing stays mounted).
fn in_tree(tree: &Path, script: &str) -> Result<()> {
    run_in_root(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", TREE_WRAPPER, "oapd-check"])
            .arg(tree)
            .arg(script)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
    )
}

/// `$1` the tree, `$2` the script: /proc mounted, then the script in the
/// chroot.
const TREE_WRAPPER: &str = "mount -t proc proc \"$1/proc\" && exec chroot \"$1\" sh -c \"$2\"";

/// The daemon as the unit starts it, in a network namespace with only `lo`
/// up; `/health` asked from inside that namespace until it answers 200 or
/// the deadline passes. Returns the answer.
fn start_and_ask_health(tree: &Path, deadline: Duration, emulated: bool) -> Result<String> {
    let log_path = tree.join("tmp/oapd.log");
    let log = fs::File::create(&log_path)?;
    // The unit's ExecStart, User, Group and Environment. sh stays as the
    // PID namespace's init (no exec): `--kill-child` kills it when unshare
    // dies, and with it every process of the namespace. The daemon itself
    // would not get that signal: a change of user clears it.
    // Emulated, the texts are embedded after start (see the module docs).
    let start = "ip link set lo up && mount -t proc proc \"$1/proc\" && \
        chroot --userspec=oapd:oapd \"$1\" env MALLOC_ARENA_MAX=2 $2 \
        /usr/bin/oapd --config /etc/oapd/config.yaml serve";
    let extra_env = if emulated {
        "OAP_INDEX_START_EMBED_LIMIT=0"
    } else {
        ""
    };
    let child = Command::new("unshare")
        .args(["--net", "--mount", "--pid", "--propagation", "private"])
        .arg("--fork")
        .args(["--kill-child", "--"])
        .args(["sh", "-c", start, "oapd-start"])
        .arg(tree)
        .arg(extra_env)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start unshare")?;
    let mut daemon = Daemon(child);
    let log_tail = || {
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    let netns = format!("--net=/proc/{}/ns/net", daemon.0.id());
    let started = Instant::now();
    loop {
        if let Some(status) = daemon.0.try_wait()? {
            bail!(
                "the daemon exited before /health answered ({status}); its log:\n{}",
                log_tail()
            );
        }
        let ask = Command::new("nsenter")
            .arg(&netns)
            .args(["curl", "--silent", "--fail", "--max-time", "5"])
            .arg("http://127.0.0.1:8300/health")
            .output()
            .context("cannot run nsenter")?;
        if ask.status.success() {
            return Ok(String::from_utf8_lossy(&ask.stdout).into_owned());
        }
        if started.elapsed() > deadline {
            bail!(
                "/health did not answer within {} s; the daemon's log:\n{}",
                deadline.as_secs(),
                log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The unshare process: killed (and the daemon's PID namespace with it,
/// `--kill-child`) when dropped, on every path out.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOADED: &str = r#""model":{"loaded":true},"index":{"manifests":13"#;

    #[test]
    fn a_native_start_is_ok_with_everything_embedded() {
        let ok = format!(r#"{{"status":"ok",{LOADED},"pending_texts":0}}}}"#);
        assert_eq!(check_health(&ok, false).unwrap(), 0);
        let pending = format!(
            r#"{{"status":"degraded","reason":"103 texts are being embedded in the background: discovery is lexical until then",{LOADED},"pending_texts":103}}}}"#
        );
        assert!(check_health(&pending, false).is_err());
    }

    #[test]
    fn an_emulated_start_may_be_degraded_by_background_embedding_only() {
        let pending = format!(
            r#"{{"status":"degraded","reason":"103 texts are being embedded in the background: discovery is lexical until then",{LOADED},"pending_texts":103}}}}"#
        );
        assert_eq!(check_health(&pending, true).unwrap(), 103);
        let also_behind = format!(
            r#"{{"status":"degraded","reason":"index rebuild failed: denied; 103 texts are being embedded in the background: discovery is lexical until then",{LOADED},"pending_texts":103}}}}"#
        );
        assert!(check_health(&also_behind, true).is_err());
        let no_model = r#"{"status":"degraded","model":{"loaded":false},"index":{"manifests":13,"pending_texts":0}}"#;
        assert!(check_health(no_model, true).is_err());
    }
}
