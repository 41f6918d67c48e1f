//! `cargo xtask image` and `cargo xtask image-boot`: the flashable appliance
//! images (image/README.md) and their boot test.
//!
//! One recipe for both architectures:
//!
//! 1. A base root filesystem, cached in `target/image-cache/` under a key
//!    hashed from everything that goes into it (suite, mirror, package lists,
//!    `image/base/`, this recipe's version). `debootstrap --foreign` unpacks
//!    Debian trixie (minbase + `image/packages-*.txt`); the files in
//!    `image/base/` (initramfs settings) go in before the second stage so the
//!    kernel's initramfs is built once, small (`MODULES=list`). The second
//!    stage runs in a chroot for amd64, and inside `qemu-system-aarch64` for
//!    arm64: this host has no binfmt_misc, so arm64 maintainer scripts cannot
//!    run in a chroot. The guest's initramfs *is* the whole tree; it writes
//!    the finished tree back as a tar stream onto a raw virtio disk.
//! 2. The image: base + `image/overlay/` (network, fstab, first-boot and
//!    boot-check units) + the oapd `.deb`, installed with `dpkg -i` by
//!    `image/guest/configure.sh` (chroot / emulated again), which must find
//!    oapd.service enabled by the package itself.
//! 3. The disk, without loop mounts: `/boot/firmware` becomes a FAT32 image
//!    (`mkfs.vfat` + `mcopy`), the rest an ext4 image (`mkfs.ext4 -d`), both
//!    copied into a file with an MBR written by `sfdisk` — the layout a
//!    Raspberry Pi boots (FAT `RASPIFIRM` + ext4 `RASPIROOT`).
//!
//! The boot test puts a first-boot settings file on a scratch copy's FAT
//! partition (`mcopy`), boots it with the image's own kernel and initrd
//! (direct kernel boot; KVM if it works, else TCG), and checks through the
//! forwarded port (`-nic user,restrict=on`: the guest reaches nothing) that
//! `/health` and `/v1/discover` answer with the token from that file, on
//! the serial console that systemd saw READY and the settings took effect,
//! and over a second forwarded port that the file's SSH key logs in
//! (`image_ssh.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

use crate::image_guest::{http, tail};
use crate::repo_root;
use crate::tasks::run_in_root;

/// Debian release every image is built from (pinned; bump deliberately).
pub(crate) const SUITE: &str = "trixie";
pub(crate) const MIRROR: &str = "http://deb.debian.org/debian";
/// Where the arm64 image's kernel comes from: the first Debian kernels with
/// the Pi 5's device trees and drivers (SD, RP1) are 7.x, in backports.
const ARM64_BACKPORTS: &str = "trixie-backports";
/// Bump when the build steps change in a way the cache key cannot see.
const RECIPE_VERSION: &str = "2";

/// A package the recipe installs at exactly this version and these bytes.
struct Pinned {
    package: &'static str,
    version: &'static str,
    /// Path below the mirror (the `Filename:` of the suite's index).
    pool_path: &'static str,
    sha256: &'static str,
}

/// The arm64 kernel, from trixie-backports. debootstrap takes every package
/// from the first suite that has it (trixie) and cannot pick versions, so
/// the kernel is named by its versioned package (only backports has it) and
/// every pinned .deb debootstrap fetched otherwise is swapped for the
/// pinned one before the second stage: `linux-base` must be 4.17 or later
/// (the 7.x kernel pre-depends on it; only 4.17 copies `vmlinuz` to
/// `/boot`, where raspi-firmware's hook looks), and trixie has 4.12.1.
/// Bump all of them together from the index of the archive:
/// `apt-cache show linux-image-arm64/trixie-backports linux-base/trixie-backports`.
const ARM64_PINNED: &[Pinned] = &[
    Pinned {
        package: ARM64_KERNEL,
        version: ARM64_KERNEL_VERSION,
        pool_path: "pool/main/l/linux-signed-arm64/linux-image-7.3.4+deb13-arm64_7.3.4-1~bpo13+1_arm64.deb",
        sha256: "e1b5ea6481c421f7aa68aa2c162811fc7c06cddac4ca1c1de497b9afe1402e65",
    },
    Pinned {
        package: "linux-binary-7.3.4+deb13-arm64",
        version: ARM64_KERNEL_VERSION,
        pool_path: "pool/main/l/linux-signed-arm64/linux-binary-7.3.4+deb13-arm64_7.3.4-1~bpo13+1_arm64.deb",
        sha256: "0bbfeddbecdea8ab294daf09eb5cc1f4405af5c044b4b7aa57f5d1eaa205530f",
    },
    Pinned {
        package: "linux-modules-7.3.4+deb13-arm64",
        version: ARM64_KERNEL_VERSION,
        pool_path: "pool/main/l/linux/linux-modules-7.3.4+deb13-arm64_7.3.4-1~bpo13+1_arm64.deb",
        sha256: "df2a118b535e735230717512a9fe4d30b0c24a3c6e68470d5d13e9a08ddfd29a",
    },
    Pinned {
        package: "linux-base-7.3.4+deb13-arm64",
        version: ARM64_KERNEL_VERSION,
        pool_path: "pool/main/l/linux/linux-base-7.3.4+deb13-arm64_7.3.4-1~bpo13+1_arm64.deb",
        sha256: "84e0027833982d189bd1b2285511fc2e0c1f785c9adf66acd9d9243026706bb6",
    },
    Pinned {
        package: "linux-base",
        version: "4.17~bpo13+1",
        pool_path: "pool/main/l/linux-base/linux-base_4.17~bpo13+1_all.deb",
        sha256: "9c1a30ccf8d94672d8a89425fe419d954096718527155fd58974bd1a1043c55f",
    },
];
/// Packages debootstrap would add to the arm64 base and must not
/// ([`drop_excluded`] takes them out before the second stage): with
/// `--extra-suites` it resolves dependencies with backports' stanzas too,
/// so the kernel's `dracut | initramfs-tools` brings dracut (which
/// conflicts with the initramfs-tools the image uses) and newer stanzas
/// bring packages only backports has (openssh-common, ngtcp2's OpenSSL
/// glue) beside trixie's openssh and curl that do not use them.
/// `dracut-install` stays: trixie's initramfs-tools-core depends on it
/// (without it the second stage leaves initramfs-tools and the kernel
/// unconfigured). [`unpinned_backports`] fails the build when a new one
/// shows up.
const ARM64_EXCLUDE: &[&str] = &[
    "dracut",
    "dracut-core",
    "openssh-common",
    "libngtcp2-crypto-ossl0",
];
const ARM64_KERNEL: &str = "linux-image-7.3.4+deb13-arm64";
const ARM64_KERNEL_VERSION: &str = "7.3.4-1~bpo13+1";
const ROOT_LABEL: &str = "RASPIROOT";
const FIRMWARE_LABEL: &str = "RASPIFIRM";
/// Fixed identifiers, so two builds of the same inputs give the same bytes.
const ROOT_UUID: &str = "5eed0a9d-0a9d-4a9d-8a9d-0000000a9d01";
const FAT_VOLUME_ID: &str = "5EED0A9D";
const DISK_ID: &str = "0x5eed0a9d";
const FIRMWARE_MIB: u64 = 256;
const MIB: u64 = 1 << 20;
/// A hardware-accelerated guest that has printed nothing by then is stuck.
const KVM_SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// The port oapd listens on inside the guest.
const GUEST_PORT: u16 = 8300;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    fn parse(s: &str) -> Result<Self> {
        match s {
            "amd64" | "x86_64" => Ok(Self::Amd64),
            "arm64" | "aarch64" => Ok(Self::Arm64),
            other => bail!("--arch: expected amd64 or arm64, got {other:?}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Amd64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }

    fn components(self) -> &'static str {
        match self {
            Self::Amd64 => "main",
            // raspi-firmware lives in non-free-firmware
            Self::Arm64 => "main,non-free-firmware",
        }
    }

    /// Suites debootstrap may take packages from after [`SUITE`].
    fn extra_suites(self) -> &'static str {
        match self {
            Self::Amd64 => "",
            Self::Arm64 => ARM64_BACKPORTS,
        }
    }

    /// Packages debootstrap must leave out ([`ARM64_EXCLUDE`]).
    fn excluded(self) -> &'static [&'static str] {
        match self {
            Self::Amd64 => &[],
            Self::Arm64 => ARM64_EXCLUDE,
        }
    }

    /// Packages installed at a pinned version and sha256.
    fn pinned(self) -> &'static [Pinned] {
        match self {
            Self::Amd64 => &[],
            Self::Arm64 => ARM64_PINNED,
        }
    }

    fn qemu(self) -> &'static str {
        match self {
            Self::Amd64 => "qemu-system-x86_64",
            Self::Arm64 => "qemu-system-aarch64",
        }
    }

    fn console(self) -> &'static str {
        match self {
            Self::Amd64 => "ttyS0",
            Self::Arm64 => "ttyAMA0",
        }
    }

    /// Machine, CPU and disk arguments for `qemu` (without accelerator);
    /// `cpu` is the arm64 core ([`ARM64_CPUS`]).
    fn machine_args(self, disk: &Path, cpu: &str) -> Vec<String> {
        let drive = format!("if=none,id=disk0,file={},format=raw", disk.display());
        let mut args: Vec<String> = match self {
            Self::Amd64 => vec!["-M".into(), "pc".into()],
            Self::Arm64 => vec!["-M".into(), "virt".into(), "-cpu".into(), cpu.into()],
        };
        args.extend([
            "-drive".into(),
            drive,
            "-device".into(),
            "virtio-blk-pci,drive=disk0".into(),
        ]);
        args
    }
}

/// The arm64 cores the boot test emulates: the Pi 4's (also the build's:
/// `-cpu max` is ~4x slower under TCG) and the Pi 5's. The Pi 3's
/// cortex-a53 runs the same arm64 code as these, without their extensions.
const ARM64_CPUS: &[&str] = &["cortex-a72", "cortex-a76"];
/// The core the emulated build steps run on.
const ARM64_BUILD_CPU: &str = "cortex-a72";

struct Options {
    arch: Arch,
    /// `--cpu`: the arm64 core the boot test emulates (default the build's).
    cpu: Option<&'static str>,
    /// `--health-only`: the boot test stops once `/health` answers with the
    /// first-boot token (a second core's boot, when the full proof ran on
    /// the first).
    health_only: bool,
    deb: Option<PathBuf>,
    build: bool,
    timeout: Duration,
    /// Only the cached base root filesystem (CI makes it while compiling).
    base_only: bool,
}

impl Options {
    fn cpu(&self) -> &'static str {
        self.cpu.unwrap_or(ARM64_BUILD_CPU)
    }
}

fn parse_options(args: &[String], boot: bool) -> Result<Options> {
    let mut options = Options {
        arch: Arch::Amd64,
        cpu: None,
        health_only: false,
        deb: None,
        build: true,
        timeout: Duration::from_secs(900),
        base_only: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--arch" => options.arch = Arch::parse(&value("--arch")?)?,
            "--deb" => options.deb = Some(PathBuf::from(value("--deb")?)),
            "--no-build" if boot => options.build = false,
            "--health-only" if boot => options.health_only = true,
            "--cpu" if boot => {
                let cpu = value("--cpu")?;
                options.cpu = Some(ARM64_CPUS.iter().find(|c| **c == cpu).with_context(|| {
                    format!(
                        "--cpu: expected one of {}, got {cpu:?}",
                        ARM64_CPUS.join(", ")
                    )
                })?);
            }
            "--base-only" if !boot => options.base_only = true,
            "--timeout" if boot => {
                let secs: u64 = value("--timeout")?
                    .parse()
                    .context("--timeout: expected whole seconds")?;
                options.timeout = Duration::from_secs(secs);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    ensure!(
        options.arch == Arch::Arm64 || options.cpu.is_none(),
        "--cpu picks the core of an arm64 boot; the amd64 boot uses the host's"
    );
    Ok(options)
}

/// Paths of one architecture's build.
struct Layout {
    arch: Arch,
    /// Cached base root filesystems and apt downloads.
    cache: PathBuf,
    /// Scratch trees, rebuilt on every run.
    work: PathBuf,
    /// The results: disk image, kernel, initrd, package list.
    out: PathBuf,
}

impl Layout {
    fn new(arch: Arch) -> Self {
        let target = repo_root().join("target");
        Self {
            arch,
            cache: target.join("image-cache"),
            work: target.join("image-work").join(arch.name()),
            out: target.join("image"),
        }
    }

    fn disk(&self) -> PathBuf {
        self.out.join(format!("oapd-{}.img", self.arch.name()))
    }

    fn kernel(&self) -> PathBuf {
        self.out.join(format!("oapd-{}.vmlinuz", self.arch.name()))
    }

    fn initrd(&self) -> PathBuf {
        self.out.join(format!("oapd-{}.initrd", self.arch.name()))
    }
}

/// `cargo xtask image [--arch amd64|arm64] [--deb FILE] [--base-only]`.
pub fn build(args: &[String]) -> Result<()> {
    let options = parse_options(args, false)?;
    let started = Instant::now();
    if options.base_only {
        preflight(options.arch)?;
        let layout = Layout::new(options.arch);
        for dir in [&layout.cache, &layout.work] {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let base = base_rootfs(&layout)?;
        println!(
            "image: base rootfs {} ready in {:.0} s",
            base.display(),
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    build_image(&options)?;
    println!("image: built in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `cargo xtask image-boot [--arch amd64|arm64] [--deb FILE] [--no-build]
/// [--timeout SECS]`.
pub fn boot(args: &[String]) -> Result<()> {
    let options = parse_options(args, true)?;
    let layout = Layout::new(options.arch);
    let started = Instant::now();
    if options.build {
        build_image(&options)?;
    }
    let built = started.elapsed();
    boot_test(&layout, &options)?;
    println!(
        "image-boot {}{}: image {:.0} s, boot test {:.0} s",
        options.arch.name(),
        match options.arch {
            Arch::Arm64 => format!(" ({})", options.cpu()),
            Arch::Amd64 => String::new(),
        },
        built.as_secs_f64(),
        (started.elapsed() - built).as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------

fn build_image(options: &Options) -> Result<()> {
    let arch = options.arch;
    preflight(arch)?;
    let layout = Layout::new(arch);
    for dir in [&layout.cache, &layout.work, &layout.out] {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let base = base_rootfs(&layout)?;
    let deb = find_deb(arch, options.deb.as_deref())?;
    println!("image: oapd package {}", deb.display());

    let tree = layout.work.join("rootfs");
    reset_dir(&tree)?;
    run_in_root(
        Command::new("tar")
            .args(["--numeric-owner", "-xpf"])
            .arg(&base)
            .arg("-C")
            .arg(&tree),
    )?;
    copy_tree(&repo_root().join("image/overlay"), &tree)?;
    copy_tree(
        &repo_root().join(format!("image/overlay-{}", arch.name())),
        &tree,
    )?;
    let stash = tree.join("tmp/oapd-image");
    fs::create_dir_all(&stash)?;
    fs::copy(&deb, stash.join("oapd.deb")).context("cannot copy the .deb into the image")?;
    // Check the copy, not the original: a .deb being rebuilt meanwhile
    // would otherwise fail half-way through dpkg.
    run_in_root(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(stash.join("oapd.deb"))
            .stdout(Stdio::null()),
    )
    .with_context(|| format!("{} is not a readable .deb", deb.display()))?;
    fs::copy(
        repo_root().join("image/guest/configure.sh"),
        stash.join("configure.sh"),
    )?;
    match arch {
        Arch::Amd64 => in_chroot(&tree, "sh /tmp/oapd-image/configure.sh")?,
        Arch::Arm64 => {
            let kernel = only_match(&tree.join("boot"), "vmlinuz-")?;
            emulate(&layout, &tree, &kernel, "configure")?;
        }
    }

    check_bundled_tools(&tree)?;
    crate::image_ssh::no_host_keys(&tree)?;
    if arch == Arch::Arm64 {
        // What only a board would otherwise find: the emulated boot test
        // starts the kernel directly, never through config.txt.
        crate::image_firmware::check(&tree.join("boot/firmware"), ROOT_LABEL)?;
    }

    let boot = tree.join("boot");
    fs::copy(only_match(&boot, "vmlinuz-")?, layout.kernel())?;
    fs::copy(only_match(&boot, "initrd.img-")?, layout.initrd())?;
    write_package_list(&layout, &tree)?;
    assemble_disk(&layout, &tree)?;
    Ok(())
}

fn preflight(arch: Arch) -> Result<()> {
    if !nix_is_root() {
        bail!("building an image needs root (debootstrap, chroot, device nodes in the tree)");
    }
    let tools = [
        ("debootstrap", "debootstrap"),
        ("mkfs.ext4", "e2fsprogs"),
        ("mkfs.vfat", "dosfstools"),
        ("mcopy", "mtools"),
        ("sfdisk", "fdisk"),
        ("cpio", "cpio"),
        // the pinned .debs debootstrap does not pick itself (ARM64_PINNED)
        ("curl", "curl"),
        ("unshare", "util-linux"),
        (arch.qemu(), "qemu-system-x86 / qemu-system-arm"),
    ];
    let missing: Vec<String> = tools
        .iter()
        .filter(|(bin, _)| !on_path(bin))
        .map(|(bin, pkg)| format!("{bin} (apt: {pkg})"))
        .collect();
    if !missing.is_empty() {
        bail!("missing tools: {}", missing.join(", "));
    }
    Ok(())
}

fn nix_is_root() -> bool {
    // /proc/self/status "Uid:" real uid; avoids a libc dependency in xtask.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
                .any(|dir| dir.join(bin).is_file())
        })
        .unwrap_or(false)
}

/// The `.deb` to install: `--deb FILE`, else a fresh one from `cargo xtask
/// deb` (never a leftover in target/debian: it may hold an old binary).
fn find_deb(arch: Arch, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = given {
        ensure!(path.is_file(), "--deb {}: no such file", path.display());
        return Ok(path.to_path_buf());
    }
    let dir = repo_root().join("target/debian");
    let started = std::time::SystemTime::now();
    run_in_root(crate::tasks::cargo().args(["xtask", "deb", "--arch", arch.name()]))
        .context("building the oapd .deb failed")?;
    let suffix = format!("_{}.deb", arch.name());
    fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("oapd_") && name.ends_with(&suffix)
        })
        .filter_map(|e| {
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            (modified >= started - Duration::from_secs(5)).then(|| (modified, e.path()))
        })
        .max()
        .map(|(_, path)| path)
        .with_context(|| {
            format!(
                "`cargo xtask deb --arch {}` left no new oapd_*{suffix} in {}",
                arch.name(),
                dir.display()
            )
        })
}

fn read_list(path: &Path) -> Result<Vec<String>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

fn packages(arch: Arch) -> Result<Vec<String>> {
    let dir = repo_root().join("image");
    let mut list = read_list(&dir.join("packages-common.txt"))?;
    list.extend(read_list(
        &dir.join(format!("packages-{}.txt", arch.name())),
    )?);
    list.sort();
    list.dedup();
    Ok(list)
}

/// Every regular file below `dir`, sorted, as (relative path, bytes, mode).
fn files_below(dir: &Path) -> Result<BTreeMap<String, (Vec<u8>, u32)>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return Ok(out);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let path = entry.path();
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.insert(rel, (fs::read(&path)?, meta.permissions().mode() & 0o777));
            }
        }
    }
    Ok(out)
}

/// The cache key of an architecture's base root filesystem.
fn recipe_key(arch: Arch) -> Result<String> {
    let image = repo_root().join("image");
    let mut hash = Sha256::new();
    for part in [
        RECIPE_VERSION,
        SUITE,
        MIRROR,
        arch.name(),
        arch.components(),
        arch.extra_suites(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    for excluded in arch.excluded() {
        hash.update(excluded.as_bytes());
        hash.update([1]);
    }
    for pin in arch.pinned() {
        for part in [pin.package, pin.version, pin.pool_path, pin.sha256] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
    }
    for package in packages(arch)? {
        hash.update(package.as_bytes());
        hash.update([0]);
    }
    let mut files = Vec::new();
    for (prefix, dir) in [
        ("base/common/", image.join("base/common")),
        ("base/arch/", image.join("base").join(arch.name())),
    ] {
        for (rel, (bytes, mode)) in files_below(&dir)? {
            files.push((format!("{prefix}{rel}"), bytes, mode));
        }
    }
    if arch == Arch::Arm64 {
        let init = image.join("guest/emulated-init");
        files.push(("guest/emulated-init".into(), fs::read(&init)?, 0o755));
    }
    for (name, bytes, mode) in files {
        hash.update(name.as_bytes());
        hash.update(mode.to_le_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    Ok(hex::encode(&hash.finalize()[..8]))
}

/// `SOURCE_DATE_EPOCH`: the environment's, else the last commit's time.
fn source_date_epoch() -> String {
    if let Ok(v) = std::env::var("SOURCE_DATE_EPOCH") {
        return v;
    }
    Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "1700000000".to_owned())
}

/// The cached base root filesystem (a tar), built if missing.
fn base_rootfs(layout: &Layout) -> Result<PathBuf> {
    let arch = layout.arch;
    let key = recipe_key(arch)?;
    let cached = layout
        .cache
        .join(format!("rootfs-{SUITE}-{}-{key}.tar", arch.name()));
    if cached.is_file() {
        println!("image: base rootfs from cache {}", cached.display());
        return Ok(cached);
    }
    let started = Instant::now();
    let tree = layout.work.join("base");
    reset_dir(&tree)?;
    let apt_cache = layout.cache.join(format!("apt-{SUITE}-{}", arch.name()));
    fs::create_dir_all(&apt_cache)?;
    let mut include = packages(arch)?;
    include.extend(
        arch.pinned()
            .iter()
            .take(1)
            .map(|pin| pin.package.to_owned()),
    );
    let mut debootstrap = Command::new("debootstrap");
    debootstrap
        .env("SOURCE_DATE_EPOCH", source_date_epoch())
        .args(["--foreign", "--variant=minbase"])
        .arg(format!("--arch={}", arch.name()))
        .arg(format!("--components={}", arch.components()))
        .arg(format!("--include={}", include.join(",")))
        .arg(format!("--cache-dir={}", apt_cache.display()));
    if !arch.extra_suites().is_empty() {
        debootstrap.arg(format!("--extra-suites={}", arch.extra_suites()));
    }
    run_in_root(debootstrap.arg(SUITE).arg(&tree).arg(MIRROR))?;
    drop_excluded(arch.excluded(), &tree)?;
    swap_in_pinned_debs(arch.pinned(), &tree, &apt_cache)?;
    let stray = unpinned_backports(arch.pinned(), &tree)?;
    ensure!(
        stray.is_empty(),
        "debootstrap took these from backports, unpinned: {} (exclude them, ARM64_EXCLUDE, \
         or pin them, ARM64_PINNED, in xtask/src/image.rs)",
        stray.join(", ")
    );
    let image = repo_root().join("image");
    copy_tree(&image.join("base/common"), &tree)?;
    copy_tree(&image.join("base").join(arch.name()), &tree)?;
    match arch {
        Arch::Amd64 => in_chroot(&tree, "/debootstrap/debootstrap --second-stage")?,
        Arch::Arm64 => {
            let kernel = kernel_from_cached_deb(layout, &tree)?;
            trim_package_lists(&tree)?;
            emulate(layout, &tree, &kernel, "stage2")?;
        }
    }
    check_installed_pins(arch.pinned(), &tree)?;
    drop_downloaded_debs(&tree)?;
    let partial = cached.with_extension("tar.partial");
    run_in_root(
        Command::new("tar")
            .args(["--numeric-owner", "--sort=name", "-cf"])
            .arg(&partial)
            .arg("-C")
            .arg(&tree)
            .arg("."),
    )?;
    fs::rename(&partial, &cached)?;
    println!(
        "image: base rootfs built in {:.0} s: {}",
        started.elapsed().as_secs_f64(),
        cached.display()
    );
    Ok(cached)
}

/// Makes debootstrap's second stage install every pinned package at its
/// pinned version: each pinned .deb is checked against its sha256 (fetched
/// from the mirror's pool into the apt cache when debootstrap chose another
/// version, or none), and `debootstrap/debpaths`, the list the second stage
/// installs from, is pointed at it. A pinned package debootstrap did not
/// select is an error: nothing would install it.
fn swap_in_pinned_debs(pins: &[Pinned], tree: &Path, apt_cache: &Path) -> Result<()> {
    if pins.is_empty() {
        return Ok(());
    }
    let debpaths_file = tree.join("debootstrap/debpaths");
    let debpaths = fs::read_to_string(&debpaths_file)
        .with_context(|| format!("cannot read {}", debpaths_file.display()))?;
    let archives = tree.join("var/cache/apt/archives");
    let mut lines: Vec<String> = debpaths.lines().map(str::to_owned).collect();
    for pin in pins {
        let file_name = pin
            .pool_path
            .rsplit('/')
            .next()
            .unwrap_or(pin.pool_path)
            .replace(':', "%3a");
        let in_tree = archives.join(&file_name);
        if !in_tree.is_file() || sha256_file(&in_tree)? != pin.sha256 {
            let cached = apt_cache.join(&file_name);
            if !cached.is_file() || sha256_file(&cached)? != pin.sha256 {
                fetch_pinned(pin, &cached)?;
            }
            fs::copy(&cached, &in_tree)
                .with_context(|| format!("cannot copy {} into the tree", cached.display()))?;
        }
        let line = lines
            .iter_mut()
            .find(|l| l.split_whitespace().next() == Some(pin.package))
            .with_context(|| {
                format!(
                    "debootstrap did not select {} (pinned {}): nothing would install it",
                    pin.package, pin.version
                )
            })?;
        let old_path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let new_path = format!("/var/cache/apt/archives/{file_name}");
        if old_path != new_path {
            println!(
                "image: {} pinned at {} instead of debootstrap's {old_path}",
                pin.package, pin.version
            );
            let _ = fs::remove_file(tree.join(old_path.trim_start_matches('/')));
            *line = format!("{} {new_path}", pin.package);
        }
    }
    fs::write(&debpaths_file, lines.join("\n") + "\n")?;
    Ok(())
}

/// Takes `excluded` out of what debootstrap's second stage installs (its
/// `base` list and `debpaths`): `--exclude` does not hold against
/// dependencies, which debootstrap adds back.
fn drop_excluded(excluded: &[&str], tree: &Path) -> Result<()> {
    if excluded.is_empty() {
        return Ok(());
    }
    let dir = tree.join("debootstrap");
    let base_file = dir.join("base");
    let base = fs::read_to_string(&base_file)
        .with_context(|| format!("cannot read {}", base_file.display()))?;
    let kept: Vec<&str> = base
        .split_whitespace()
        .filter(|p| !excluded.contains(p))
        .collect();
    fs::write(&base_file, kept.join(" ") + "\n")?;
    let debpaths_file = dir.join("debpaths");
    let debpaths = fs::read_to_string(&debpaths_file)
        .with_context(|| format!("cannot read {}", debpaths_file.display()))?;
    let mut lines = Vec::new();
    for line in debpaths.lines() {
        match line.split_once(' ') {
            Some((package, path)) if excluded.contains(&package) => {
                let _ = fs::remove_file(tree.join(path.trim_start_matches('/')));
            }
            _ => lines.push(line),
        }
    }
    fs::write(&debpaths_file, lines.join("\n") + "\n")?;
    Ok(())
}

/// Cuts the mirror's package lists in the tree down to the packages the
/// second stage installs (`debootstrap/debpaths`). Between its dpkg runs the
/// second stage resolves each pre-dependency by parsing every `Packages`
/// file with perl (`resolve_deps`); the full lists (main, non-free-firmware,
/// backports: ~70 MB) make each such pass minutes long under emulation,
/// ~20 minutes of the stage in all. A package outside `debpaths` is never
/// installed anyway, so its stanza changes nothing. The lists do not reach
/// the image: `image/guest/configure.sh` deletes them.
fn trim_package_lists(tree: &Path) -> Result<()> {
    let debpaths_file = tree.join("debootstrap/debpaths");
    let debpaths = fs::read_to_string(&debpaths_file)
        .with_context(|| format!("cannot read {}", debpaths_file.display()))?;
    let wanted: std::collections::BTreeSet<&str> = debpaths
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    let lists = tree.join("var/lib/apt/lists");
    for entry in fs::read_dir(&lists).with_context(|| format!("cannot read {}", lists.display()))? {
        let path = entry?.path();
        if !path.to_string_lossy().ends_with("_Packages") {
            continue;
        }
        let full =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let kept = stanzas_of(&full, &wanted);
        println!(
            "image: {} cut from {} to {} bytes for the second stage",
            path.display(),
            full.len(),
            kept.len()
        );
        fs::write(&path, kept)?;
    }
    Ok(())
}

/// The stanzas of a `Packages` file whose `Package:` is in `wanted`.
fn stanzas_of(packages: &str, wanted: &std::collections::BTreeSet<&str>) -> String {
    let mut kept = String::new();
    for stanza in packages.split("\n\n") {
        let name = stanza
            .lines()
            .find_map(|line| line.strip_prefix("Package:"))
            .map(str::trim);
        if name.is_some_and(|name| wanted.contains(name)) {
            kept.push_str(stanza.trim_end_matches('\n'));
            kept.push_str("\n\n");
        }
    }
    kept
}

/// The packages of `debootstrap/debpaths` whose .deb is a backports
/// version (`~bpo`) but not pinned: the base would mix suites unnoticed.
fn unpinned_backports(pins: &[Pinned], tree: &Path) -> Result<Vec<String>> {
    let debpaths_file = tree.join("debootstrap/debpaths");
    let debpaths = match fs::read_to_string(&debpaths_file) {
        Ok(text) => text,
        Err(_) if pins.is_empty() => return Ok(Vec::new()),
        Err(e) => bail!("cannot read {}: {e}", debpaths_file.display()),
    };
    Ok(debpaths
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(package, path)| {
            path.contains("~bpo") && !pins.iter().any(|pin| pin.package == *package)
        })
        .map(|(package, _)| package.to_owned())
        .collect())
}

/// Downloads a pinned .deb from the mirror's pool to `dest`, checking its
/// sha256 before it is used.
fn fetch_pinned(pin: &Pinned, dest: &Path) -> Result<()> {
    let url = format!("{MIRROR}/{}", pin.pool_path);
    let partial = dest.with_extension("deb.partial");
    let status = Command::new("curl")
        .args(["-fsSL", "--retry", "3", "--max-time", "900", "-o"])
        .arg(&partial)
        .arg(&url)
        .status()
        .context("cannot run curl")?;
    ensure!(
        status.success(),
        "cannot download {url} ({status}): the archive no longer has {} {}; \
         pin the version it has now (ARM64_PINNED in xtask/src/image.rs)",
        pin.package,
        pin.version
    );
    let got = sha256_file(&partial)?;
    if got != pin.sha256 {
        let _ = fs::remove_file(&partial);
        bail!(
            "{url}: sha256 {got}, pinned {}: refusing {} {}",
            pin.sha256,
            pin.package,
            pin.version
        );
    }
    fs::rename(&partial, dest)?;
    Ok(())
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash)?;
    Ok(hex::encode(hash.finalize()))
}

/// Fails unless dpkg installed every pinned package at its pinned version.
fn check_installed_pins(pins: &[Pinned], tree: &Path) -> Result<()> {
    for pin in pins {
        let output = Command::new("dpkg-query")
            .arg(format!(
                "--admindir={}",
                tree.join("var/lib/dpkg").display()
            ))
            .args(["-W", "-f", "${Version} ${Status}"])
            .arg(pin.package)
            .output()
            .context("cannot run dpkg-query")?;
        let found = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        ensure!(
            found == format!("{} install ok installed", pin.version),
            "{} is not installed at its pinned version {} (dpkg: {found:?})",
            pin.package,
            pin.version
        );
    }
    Ok(())
}

/// Drops the downloaded .debs from the base tree (they are in the apt cache
/// directory outside it).
fn drop_downloaded_debs(tree: &Path) -> Result<()> {
    let archives = tree.join("var/cache/apt/archives");
    if let Ok(entries) = fs::read_dir(&archives) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "deb") {
                fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

/// Runs `script` (a shell command line) in a chroot of `tree` with /proc
/// mounted in a private mount namespace, so nothing stays mounted after.
fn in_chroot(tree: &Path, script: &str) -> Result<()> {
    run_in_root(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--fork", "sh", "-c"])
            .arg("mount -t proc proc \"$1/proc\" && exec chroot \"$1\" sh -c \"$2\"")
            .arg("oapd-image")
            .arg(tree)
            .arg(script)
            .env("SOURCE_DATE_EPOCH", source_date_epoch())
            .env("LC_ALL", "C"),
    )
}

/// The arm64 kernel for the emulated second stage: from the kernel package
/// debootstrap downloaded (the same version the stage installs, so its
/// modules match). 7.x kernels ship it as `linux-binary-<abi>` with the
/// image in `/usr/lib/modules/<abi>/vmlinuz`.
fn kernel_from_cached_deb(layout: &Layout, tree: &Path) -> Result<PathBuf> {
    let archives = tree.join("var/cache/apt/archives");
    let deb = fs::read_dir(&archives)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("linux-binary-") && n.contains("-arm64_"))
        })
        .with_context(|| format!("no linux-binary-*-arm64 .deb in {}", archives.display()))?;
    let unpacked = layout.work.join("kernel");
    reset_dir(&unpacked)?;
    run_in_root(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let modules = unpacked.join("usr/lib/modules");
    let abi = only_match(&modules, "")?;
    let kernel = abi.join("vmlinuz");
    ensure!(
        kernel.is_file(),
        "{} has no {}",
        deb.display(),
        kernel.display()
    );
    Ok(kernel)
}

/// Runs `image/guest/emulated-init` step `step` in an emulated arm64 guest
/// whose initramfs is `tree`, and replaces `tree` with the result.
fn emulate(layout: &Layout, tree: &Path, kernel: &Path, step: &str) -> Result<()> {
    let started = Instant::now();
    let init = tree.join("oapd-emulated-init");
    fs::copy(repo_root().join("image/guest/emulated-init"), &init)?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    let cpio = layout.work.join("emulated-initramfs.cpio");
    run_in_root(
        Command::new("sh")
            .arg("-c")
            .arg("cd \"$1\" && find . -print0 | LC_ALL=C sort -z | cpio --null --create --format=newc --quiet > \"$2\"")
            .arg("oapd-image")
            .arg(tree)
            .arg(&cpio),
    )?;
    let disk = layout.work.join("emulated-out.tar");
    let file = fs::File::create(&disk)?;
    file.set_len(8 << 30)?;
    drop(file);
    let log = layout.work.join(format!("emulated-{step}.log"));
    let mut command = Command::new(layout.arch.qemu());
    command
        .args(["-accel", "tcg", "-smp", "2", "-m", "4096"])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-nic",
            "none",
        ])
        .args(layout.arch.machine_args(&disk, ARM64_BUILD_CPU))
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(&cpio)
        .arg("-append")
        .arg(format!(
            "console={} rdinit=/oapd-emulated-init rootfstype=ramfs oapd.step={step} panic=-1",
            layout.arch.console()
        ));
    println!("$ {command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start qemu")?;
    let status = wait_with_deadline(&mut child, Duration::from_secs(90 * 60))?;
    let console = fs::read_to_string(&log).unwrap_or_default();
    if !console.contains("OAPD-EMU done") {
        bail!(
            "emulated step {step} failed ({status}); console {}:\n{}",
            log.display(),
            tail(&console, 40)
        );
    }
    reset_dir(tree)?;
    run_in_root(
        Command::new("tar")
            .args(["--numeric-owner", "-xpf"])
            .arg(&disk)
            .arg("-C")
            .arg(tree),
    )?;
    fs::remove_file(&disk)?;
    fs::remove_file(&cpio)?;
    println!(
        "image: emulated {step} took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.to_string());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("qemu did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Where the .deb puts the bundled manifests, inside the root filesystem.
const BUNDLED_IN_TREE: &str = "usr/share/oapd/manifests";
/// Directories a stdio tool's bare program name is looked up in (the
/// daemon's own search path for bundled tools).
const PROGRAM_DIRS: &[&str] = &["usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin"];

/// Fails the build when a bundled manifest's program is not an executable
/// file in the image: the model would be offered a tool that cannot run
/// (the .deb only recommends their packages, and `dpkg -i` skips those).
fn check_bundled_tools(tree: &Path) -> Result<()> {
    let dir = tree.join(BUNDLED_IN_TREE);
    let mut missing = Vec::new();
    let mut checked = 0;
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = fs::read_to_string(&path)?;
        let manifest: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let invoke = &manifest["invoke"];
        if invoke["method"].as_str() != Some("stdio") {
            continue;
        }
        let Some(program) = invoke["url"].as_str() else {
            bail!("{}: a stdio tool without invoke.url", path.display());
        };
        checked += 1;
        if !program_in_tree(tree, program) {
            missing.push(format!(
                "{} (from {})",
                program,
                path.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            ));
        }
    }
    ensure!(
        missing.is_empty(),
        "bundled tools missing from the image (add their packages to image/packages-common.txt): {}",
        missing.join(", ")
    );
    println!("image: the {checked} bundled stdio tools are all in the root filesystem");
    Ok(())
}

/// Whether `program` (a bare name or an absolute path) is an executable
/// regular file in `tree`, following symlinks inside the tree (Debian's
/// alternatives are absolute links such as /usr/bin/awk -> /etc/alternatives/awk).
fn program_in_tree(tree: &Path, program: &str) -> bool {
    let candidates: Vec<PathBuf> = match program.strip_prefix('/') {
        Some(absolute) => vec![tree.join(absolute)],
        None => PROGRAM_DIRS
            .iter()
            .map(|d| tree.join(d).join(program))
            .collect(),
    };
    candidates
        .into_iter()
        .any(|path| executable_in_tree(tree, path))
}

fn executable_in_tree(tree: &Path, mut path: PathBuf) -> bool {
    for _ in 0..16 {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return false;
        };
        if meta.file_type().is_symlink() {
            let Ok(target) = fs::read_link(&path) else {
                return false;
            };
            path = match target.strip_prefix("/") {
                Ok(absolute) => tree.join(absolute),
                Err(_) => match path.parent() {
                    Some(parent) => parent.join(target),
                    None => return false,
                },
            };
            continue;
        }
        return meta.is_file() && meta.permissions().mode() & 0o111 != 0;
    }
    false
}

fn write_package_list(layout: &Layout, tree: &Path) -> Result<()> {
    let output = Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            tree.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f", "${Package} ${Version}\\n"])
        .output()
        .context("cannot run dpkg-query")?;
    ensure!(output.status.success(), "dpkg-query failed");
    let mut lines: Vec<&str> = std::str::from_utf8(&output.stdout)?.lines().collect();
    lines.sort_unstable();
    let path = layout
        .out
        .join(format!("oapd-{}.packages", layout.arch.name()));
    fs::write(&path, lines.join("\n") + "\n")?;
    Ok(())
}

/// FAT32 boot partition from `tree/boot/firmware`, ext4 root from the rest,
/// both in one MBR disk image.
fn assemble_disk(layout: &Layout, tree: &Path) -> Result<()> {
    let epoch = source_date_epoch();
    // Nothing newer than SOURCE_DATE_EPOCH: files written during the build
    // (configure.sh, dpkg) would otherwise carry today's time into ext4.
    run_in_root(
        Command::new("find")
            .arg(tree)
            .arg("-newermt")
            .arg(format!("@{epoch}"))
            .args(["-exec", "touch", "--no-dereference", "--date"])
            .arg(format!("@{epoch}"))
            .args(["{}", "+"]),
    )?;
    let firmware_tree = tree.join("boot/firmware");
    fs::create_dir_all(&firmware_tree)?;
    let firmware_img = layout.work.join("firmware.img");
    let _ = fs::remove_file(&firmware_img);
    run_in_root(
        Command::new("mkfs.vfat")
            .args([
                "-C",
                "-F",
                "32",
                "-n",
                FIRMWARE_LABEL,
                "-i",
                FAT_VOLUME_ID,
                "--invariant",
            ])
            .arg(&firmware_img)
            .arg((FIRMWARE_MIB * 1024).to_string()),
    )?;
    let mut entries: Vec<PathBuf> = fs::read_dir(&firmware_tree)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    if !entries.is_empty() {
        run_in_root(
            Command::new("mcopy")
                .env("MTOOLS_SKIP_CHECK", "1")
                .env("SOURCE_DATE_EPOCH", &epoch)
                .args(["-s", "-p", "-m", "-i"])
                .arg(&firmware_img)
                .args(&entries)
                .arg("::/"),
        )?;
    }
    // The FAT partition is mounted over this directory: keep it empty in ext4.
    for entry in entries {
        if entry.is_dir() {
            fs::remove_dir_all(&entry)?;
        } else {
            fs::remove_file(&entry)?;
        }
    }

    let used = tree_bytes(tree)?;
    // Room for logs, the index and a package upgrade; a Pi's root can be
    // grown to the card's size afterwards (image/README.md).
    let root_mib = (used + used / 4) / MIB + 512;
    let root_img = layout.work.join("root.img");
    let _ = fs::remove_file(&root_img);
    run_in_root(
        Command::new("mkfs.ext4")
            .env("E2FSPROGS_FAKE_TIME", &epoch)
            .args(["-q", "-F", "-L", ROOT_LABEL, "-U", ROOT_UUID, "-E"])
            .arg(format!("root_owner=0:0,hash_seed={ROOT_UUID}"))
            .arg("-d")
            .arg(tree)
            .arg(&root_img)
            .arg(format!("{root_mib}M")),
    )?;

    let firmware_start = MIB;
    let firmware_len = FIRMWARE_MIB * MIB;
    let root_start = firmware_start + firmware_len;
    let root_len = root_mib * MIB;
    let disk = layout.disk();
    let partial = disk.with_extension("img.partial");
    {
        let file = fs::File::create(&partial)?;
        file.set_len(root_start + root_len)?;
    }
    let table = format!(
        "label: dos\nlabel-id: {DISK_ID}\nunit: sectors\n\
         start={}, size={}, type=c, bootable\nstart={}, size={}, type=83\n",
        firmware_start / 512,
        firmware_len / 512,
        root_start / 512,
        root_len / 512
    );
    let mut sfdisk = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(&partial)
        .stdin(Stdio::piped())
        .spawn()
        .context("cannot start sfdisk")?;
    sfdisk
        .stdin
        .take()
        .context("sfdisk stdin")?
        .write_all(table.as_bytes())?;
    ensure!(
        sfdisk.wait()?.success(),
        "sfdisk failed on {}",
        partial.display()
    );
    copy_sparse(&firmware_img, &partial, firmware_start)?;
    copy_sparse(&root_img, &partial, root_start)?;
    fs::rename(&partial, &disk)?;
    fs::remove_file(&firmware_img)?;
    fs::remove_file(&root_img)?;
    println!(
        "image: {} ({} MiB: FAT {FIRMWARE_MIB} MiB + ext4 {root_mib} MiB, {} MiB used in root)",
        disk.display(),
        (root_start + root_len) / MIB,
        used / MIB
    );
    Ok(())
}

/// Apparent size of everything in `tree` (files, plus a block per entry).
fn tree_bytes(tree: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![tree.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.path().symlink_metadata()?;
            total += 4096;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// Copies `src` into `dst` at `offset`, skipping all-zero blocks so the
/// disk image stays sparse.
fn copy_sparse(src: &Path, dst: &Path, offset: u64) -> Result<()> {
    let mut input = fs::File::open(src)?;
    let mut output = fs::OpenOptions::new().write(true).open(dst)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = offset;
    loop {
        let n = read_full(&mut input, &mut buf)?;
        if n == 0 {
            break;
        }
        for (i, block) in buf[..n].chunks(4096).enumerate() {
            if block.iter().any(|&b| b != 0) {
                output.seek(SeekFrom::Start(pos + (i * 4096) as u64))?;
                output.write_all(block)?;
            }
        }
        pos += n as u64;
    }
    output.sync_all()?;
    Ok(())
}

fn read_full(input: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn reset_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir)?;
    Ok(())
}

/// `cp -R` keeping modes (not owners: the tree's files belong to root).
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    if !src.is_dir() {
        return Ok(());
    }
    run_in_root(
        Command::new("cp")
            .args(["-R", "--preserve=mode", "--no-preserve=ownership"])
            .arg(format!("{}/.", src.display()))
            .arg(dst),
    )
}

/// The one file in `dir` whose name starts with `prefix`.
fn only_match(dir: &Path, prefix: &str) -> Result<PathBuf> {
    let found: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no {prefix}* in {}", dir.display()),
        many => bail!("several {prefix}* in {}: {many:?}", dir.display()),
    }
}

// ---------------------------------------------------------------------------
// Boot test
// ---------------------------------------------------------------------------

/// What the test writes to the boot partition, and expects back.
struct FirstBoot {
    hostname: String,
    token: String,
    /// The login, time zone and Wi-Fi part (xtask/src/image_ssh.rs).
    access: crate::image_ssh::Access,
    /// Bytes of the root partition as built; the scratch disk is larger, so
    /// a root filesystem bigger than this proves first boot grew it.
    built_root_bytes: u64,
}

/// Space added to the scratch copy of the disk, as a bigger SD card would.
const BOOT_TEST_EXTRA_BYTES: u64 = 512 * MIB;

fn boot_test(layout: &Layout, options: &Options) -> Result<()> {
    let arch = layout.arch;
    for path in [layout.disk(), layout.kernel(), layout.initrd()] {
        ensure!(
            path.is_file(),
            "{} is missing: build the image first (cargo xtask image --arch {})",
            path.display(),
            arch.name()
        );
    }
    let scratch = layout.work.join("boot-test.img");
    let _ = fs::remove_file(&scratch);
    run_in_root(
        Command::new("cp")
            .arg("--sparse=always")
            .arg(layout.disk())
            .arg(&scratch),
    )?;
    let built_len = fs::metadata(layout.disk())?.len();
    fs::OpenOptions::new()
        .write(true)
        .open(&scratch)?
        .set_len(built_len + BOOT_TEST_EXTRA_BYTES)?;
    let settings = FirstBoot {
        hostname: format!("oapd-boot-test-{}", arch.name()),
        token: random_token()?,
        access: crate::image_ssh::Access::prepare(&layout.work)?,
        built_root_bytes: built_len.saturating_sub(MIB + FIRMWARE_MIB * MIB),
    };
    // The model server, reached through one qemu forwarding rule (the
    // guest still reaches nothing else): Ollama installed on first boot
    // from a stand-in release served on host loopback, built for the
    // guest's architecture (image_ollama.rs).
    let upstream = crate::image_ollama::GuestOllama::start(arch == Arch::Arm64, &layout.work)?;
    let settings_file = layout.work.join("oapd.yaml");
    fs::write(
        &settings_file,
        format!(
            "# written by cargo xtask image-boot\nhostname: {}\nlisten: \"0.0.0.0:{GUEST_PORT}\"\n\
             {}auth_token: {}\n{}",
            settings.hostname,
            upstream.firstboot_lines(),
            settings.token,
            settings.access.settings()
        ),
    )?;
    run_in_root(
        Command::new("mcopy")
            .env("MTOOLS_SKIP_CHECK", "1")
            .args(["-o", "-i"])
            .arg(format!("{}@@{}", scratch.display(), MIB))
            .arg(&settings_file)
            .arg("::/oapd.yaml"),
    )?;

    let accels: &[&str] = match arch {
        Arch::Amd64 if Path::new("/dev/kvm").exists() => &["kvm", "tcg"],
        _ => &["tcg"],
    };
    let mut last_error = None;
    for accel in accels {
        match boot_once(layout, &scratch, accel, &settings, &upstream, options) {
            Ok(()) => {
                let _ = fs::remove_file(&scratch);
                return Ok(());
            }
            Err(BootError::AccelUnavailable(why)) => {
                println!("image-boot: {accel} unavailable ({why}); trying the next accelerator");
                last_error = Some(anyhow::anyhow!(why));
            }
            Err(BootError::Failed(e)) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no accelerator worked")))
}

enum BootError {
    /// qemu could not use this accelerator; another may work.
    AccelUnavailable(String),
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for BootError {
    fn from(e: E) -> Self {
        Self::Failed(e.into())
    }
}

/// Kills qemu when the test ends, however it ends.
struct Guest(Child);

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn boot_once(
    layout: &Layout,
    disk: &Path,
    accel: &str,
    settings: &FirstBoot,
    upstream: &crate::image_ollama::GuestOllama,
    options: &Options,
) -> Result<(), BootError> {
    let arch = layout.arch;
    let timeout = options.timeout;
    let port = crate::net::free_port()?;
    let ssh_port = loop {
        let candidate = crate::net::free_port()?;
        if candidate != port {
            break candidate;
        }
    };
    let log = layout.work.join(format!("boot-test-{accel}.log"));
    let _ = fs::remove_file(&log);
    let mut command = Command::new(arch.qemu());
    command
        .args(["-accel", accel, "-smp", "2", "-m", "2048"])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args(arch.machine_args(disk, options.cpu()))
        // user-mode network with no way out: only the forwarded ports
        // (oapd, sshd), and the model or release server's address
        // forwarded to the host
        .arg("-nic")
        .arg(format!(
            "user,model=virtio-net-pci,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:{GUEST_PORT},{},{}",
            crate::image_ssh::Access::hostfwd(ssh_port),
            upstream.nic_rule()
        ))
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(layout.kernel())
        .arg("-initrd")
        .arg(layout.initrd())
        .arg("-append")
        .arg(format!(
            // no_timer_check: under TCG on a loaded host the kernel's
            // IO-APIC timer check can fail and panic before init
            "root=LABEL={ROOT_LABEL} ro console={} oapd.bootcheck=1 panic=-1 no_timer_check",
            arch.console()
        ));
    if accel == "kvm" {
        command.args(["-cpu", "host"]);
    }
    println!("$ {command:?}");
    let started = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start qemu")?;
    let mut guest = Guest(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let auth = format!("Bearer {}", settings.token);
    let console = || fs::read_to_string(&log).unwrap_or_default();

    // 1. oapd answers /health through the forwarded port.
    let deadline = started + timeout;
    loop {
        if let Some(status) = guest.0.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut e) = guest.0.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            if started.elapsed() < Duration::from_secs(10) && accel != "tcg" {
                return Err(BootError::AccelUnavailable(format!(
                    "qemu exited with {status}: {}",
                    stderr.trim()
                )));
            }
            return Err(BootError::Failed(anyhow::anyhow!(
                "qemu exited with {status} before oapd answered: {}\nconsole:\n{}",
                stderr.trim(),
                tail(&console(), 60)
            )));
        }
        // A KVM that starts but never runs the guest (seen with nested
        // virtualisation) prints nothing: give up on it early.
        if accel != "tcg" && started.elapsed() > KVM_SILENCE_LIMIT && console().trim().is_empty() {
            return Err(BootError::AccelUnavailable(format!(
                "no console output within {} s",
                KVM_SILENCE_LIMIT.as_secs()
            )));
        }
        if Instant::now() > deadline {
            return Err(BootError::Failed(anyhow::anyhow!(
                "oapd did not answer /health within {} s ({accel}); console:\n{}",
                timeout.as_secs(),
                tail(&console(), 60)
            )));
        }
        if let Ok((200, _)) = http(addr, "GET", "/health", Some(&auth), None) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let to_health = started.elapsed();
    println!(
        "image-boot: /health answered {:.1} s after qemu started ({accel})",
        to_health.as_secs_f64()
    );
    if options.health_only {
        let (status, _) = http(addr, "GET", "/health", None, None)?;
        if status != 401 {
            return Err(BootError::Failed(anyhow::anyhow!(
                "/health without the first-boot token: expected 401, got {status} (auth_token not applied)"
            )));
        }
        println!(
            "image-boot {} ({}): OK to /health only ({accel}): /health after {:.1} s",
            arch.name(),
            options.cpu(),
            to_health.as_secs_f64()
        );
        return Ok(());
    }

    upstream.wait_until_reachable(addr, &auth, deadline, &console)?;
    check_guest(addr, &auth, settings, &console, deadline, timeout)?;
    upstream.check_report(&console())?;
    settings
        .access
        .check(ssh_port, &settings.hostname, deadline)?;
    println!(
        "image-boot {}: OK ({accel}): /health after {:.1} s, READY seen, first-boot settings applied; total {:.1} s",
        arch.name(),
        to_health.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Steps 2 and 3 of the boot test, once oapd answers.
fn check_guest(
    addr: SocketAddr,
    auth: &str,
    settings: &FirstBoot,
    console: &dyn Fn() -> String,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    // 2. The API, with and without the token from the boot partition.
    let (status, _) = http(addr, "GET", "/health", None, None)?;
    ensure!(
        status == 401,
        "/health without the first-boot token: expected 401, got {status} (auth_token not applied)"
    );
    let (status, body) = http(
        addr,
        "GET",
        "/health",
        Some("Bearer wrong-token-0000000"),
        None,
    )?;
    ensure!(
        status == 401,
        "/health with a wrong token: expected 401, got {status}: {body}"
    );
    let (status, body) = http(addr, "GET", "/health", Some(auth), None)?;
    ensure!(status == 200, "/health: {status} {body}");
    let health: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("/health is not JSON: {body}"))?;
    ensure!(
        health["status"] == "ok",
        "/health: expected status ok (model loaded), got {body}"
    );
    ensure!(
        health["index"]["manifests"].as_u64().unwrap_or(0) > 0,
        "/health: no manifests indexed: {body}"
    );
    // The hardened unit must leave the tool sandbox its system calls: a
    // filter refusing them shows up as "refused by a system call filter".
    let sandbox = &health["tool_sandbox"];
    ensure!(
        sandbox["seccomp"] == true,
        "/health: the stdio tool sandbox has no seccomp under the unit: {body}"
    );
    ensure!(
        !sandbox["missing"]
            .to_string()
            .contains("system call filter"),
        "/health: the unit's system call filter blocks the tool sandbox: {body}"
    );
    println!(
        "image-boot: tool sandbox under the unit: Landlock ABI {}, missing {}",
        sandbox["landlock_abi"], sandbox["missing"]
    );
    let (status, body) = http(
        addr,
        "POST",
        "/v1/discover",
        Some(auth),
        Some(r#"{"task":"count the words in a text"}"#),
    )?;
    ensure!(status == 200, "/v1/discover: {status} {body}");
    let found: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("/v1/discover is not JSON: {body}"))?;
    ensure!(
        found["match"]["name"] == "wc",
        "/v1/discover \"count the words in a text\": expected the bundled wc manifest, got {body}"
    );
    // A stdio tool runs for real under the hardened unit and its sandbox:
    // the scripted model calls the bundled wc, then echoes its result.
    let (status, body) = http(
        addr,
        "POST",
        "/api/chat",
        Some(auth),
        Some(
            r#"{"model":"qwen3:4b","stream":false,"messages":[{"role":"user","content":"count the words in this text: one two three four five"}]}"#,
        ),
    )?;
    ensure!(
        status == 200,
        "/api/chat with a wc tool round: {status} {body}"
    );
    let answer: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("/api/chat is not JSON: {body}"))?;
    let content = answer["message"]["content"].as_str().unwrap_or_default();
    ensure!(
        content.trim() == "5" && answer["oap_round"] == 2,
        "/api/chat: expected wc's answer 5 after one tool round under the unit, got {body}"
    );
    println!(
        "image-boot: the bundled wc ran under the unit's sandbox through /api/chat: {content:?}"
    );
    let (status, _) = http(addr, "POST", "/v1/discover", Some(auth), Some("{not json"))?;
    ensure!(
        status == 400,
        "/v1/discover with malformed JSON: expected 400, got {status}"
    );

    // 3. The guest's own report on the console: READY, state, first boot.
    let report = loop {
        let text = console();
        if text.contains("OAPD-BOOTCHECK end") {
            break text;
        }
        if Instant::now() > deadline {
            bail!(
                "no boot-check report on the console within {} s; console:\n{}",
                timeout.as_secs(),
                tail(&text, 60)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    check_report(&report, settings)
}
/// Checks the `OAPD-BOOTCHECK` lines `image/overlay/usr/lib/oapd-image/bootcheck`
/// printed.
fn check_report(console: &str, settings: &FirstBoot) -> Result<()> {
    let lines: Vec<&str> = console
        .lines()
        .filter_map(|l| {
            l.split_once("OAPD-BOOTCHECK ")
                .map(|(_, rest)| rest.trim_end())
        })
        .collect();
    let show = |key: &str| {
        lines
            .iter()
            .find_map(|l| {
                l.strip_prefix("show ")?
                    .strip_prefix(key)?
                    .strip_prefix('=')
            })
            .unwrap_or("")
    };
    let fail = |what: String| -> anyhow::Error {
        anyhow::anyhow!("boot check: {what}\nreport:\n{}", lines.join("\n"))
    };
    if show("Type") != "notify" {
        return Err(fail(format!(
            "oapd.service Type={}, expected notify",
            show("Type")
        )));
    }
    if show("ActiveState") != "active" || show("SubState") != "running" {
        return Err(fail("oapd.service is not active/running".into()));
    }
    if show("NRestarts") != "0" {
        return Err(fail(format!(
            "oapd.service restarted {} times",
            show("NRestarts")
        )));
    }
    if show("StatusText").is_empty() {
        return Err(fail("oapd sent no STATUS= text".into()));
    }
    if !lines.iter().any(|l| l.starts_with("started ")) {
        return Err(fail(
            "systemd never logged oapd.service as started (no READY=1 notification)".into(),
        ));
    }
    let want_host = format!("hostname {}", settings.hostname);
    if !lines.contains(&want_host.as_str()) {
        return Err(fail(format!(
            "expected `{want_host}` (first-boot hostname)"
        )));
    }
    if !lines.contains(&"firstboot success active") {
        return Err(fail("oapd-firstboot.service did not succeed".into()));
    }
    if !lines.contains(&"bootfile absent") {
        return Err(fail(
            "the first-boot file is still on the boot partition".into(),
        ));
    }
    if !lines.contains(&"growroot success active") {
        return Err(fail("oapd-growroot.service did not succeed".into()));
    }
    let root_bytes: u64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("rootbytes "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if root_bytes <= settings.built_root_bytes {
        return Err(fail(format!(
            "the root filesystem has {root_bytes} bytes, not more than the {} of the built \
             partition: first boot did not grow it into the {} extra MiB",
            settings.built_root_bytes,
            BOOT_TEST_EXTRA_BYTES / MIB
        )));
    }
    println!(
        "image-boot: root filesystem grew to {} MiB (built partition {} MiB)",
        root_bytes / MIB,
        settings.built_root_bytes / MIB
    );
    if !lines.contains(&"envmode 600") {
        return Err(fail("/etc/oapd/oapd.env is not mode 0600".into()));
    }
    Ok(())
}

fn random_token() -> Result<String> {
    let mut bytes = [0u8; 24];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn executable(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn manifest(tree: &Path, name: &str, method: &str, url: &str) {
        let dir = tree.join(BUNDLED_IN_TREE);
        fs::create_dir_all(&dir).unwrap();
        let text = serde_json::json!({"name": name, "invoke": {"method": method, "url": url}});
        fs::write(dir.join(format!("{name}.json")), text.to_string()).unwrap();
    }

    /// A pin for `bytes`, as `ARM64_PINNED` holds them.
    fn pin_for(package: &'static str, version: &'static str, bytes: &[u8]) -> Pinned {
        let file = format!("pool/main/x/{package}/{package}_{version}_all.deb");
        Pinned {
            package,
            version,
            pool_path: Box::leak(file.into_boxed_str()),
            sha256: Box::leak(hex::encode(Sha256::digest(bytes)).into_boxed_str()),
        }
    }

    /// systemd gives up on a device after 90 s, and on a mount after its
    /// default, unless the fstab line says otherwise; an emulated board under
    /// load (and a slow card) needs longer to show the boot partition's label
    /// and to mount it, and without that mount the first-boot settings are
    /// never read.
    #[test]
    fn the_boot_partition_is_waited_for_longer_than_systemds_default() {
        let fstab = fs::read_to_string(repo_root().join("image/overlay/etc/fstab")).unwrap();
        let line = fstab
            .lines()
            .find(|l| l.starts_with("LABEL=RASPIFIRM"))
            .expect("fstab mounts the boot partition");
        let options = line.split_whitespace().nth(3).unwrap();
        for option in ["x-systemd.device-timeout=", "x-systemd.mount-timeout="] {
            let timeout = options
                .split(',')
                .find_map(|o| o.strip_prefix(option))
                .unwrap_or_else(|| panic!("the boot partition's line sets {option}"));
            let seconds: u64 = match timeout.strip_suffix("min") {
                Some(minutes) => minutes.parse::<u64>().unwrap() * 60,
                None => timeout.trim_end_matches('s').parse().unwrap(),
            };
            assert!(
                seconds >= 300,
                "{option}{timeout} is too short for an emulated boot"
            );
        }
        assert!(
            options.split(',').any(|o| o == "nofail"),
            "a missing card must not stop the boot"
        );
    }

    #[test]
    fn the_second_stage_sees_only_the_stanzas_of_packages_it_installs() {
        let root = tempfile::tempdir().unwrap();
        let tree = root.path();
        fs::create_dir_all(tree.join("debootstrap")).unwrap();
        fs::write(
            tree.join("debootstrap/debpaths"),
            "zstd /var/cache/apt/archives/zstd_1.5_arm64.deb\n\
             libc6 /var/cache/apt/archives/libc6_2.41_arm64.deb\n",
        )
        .unwrap();
        let lists = tree.join("var/lib/apt/lists");
        fs::create_dir_all(&lists).unwrap();
        let main = lists.join("deb.debian.org_debian_dists_trixie_main_binary-arm64_Packages");
        fs::write(
            &main,
            "Package: libc6\nVersion: 2.41\nDepends: libgcc-s1\n\n\
             Package: emacs\nVersion: 30\n\n\
             Package: zstd\nPre-Depends: libc6 (>= 2.34)\n",
        )
        .unwrap();
        let release = lists.join("deb.debian.org_debian_dists_trixie_Release");
        fs::write(&release, "Package: emacs\n").unwrap();

        trim_package_lists(tree).unwrap();

        assert_eq!(
            fs::read_to_string(&main).unwrap(),
            "Package: libc6\nVersion: 2.41\nDepends: libgcc-s1\n\n\
             Package: zstd\nPre-Depends: libc6 (>= 2.34)\n\n"
        );
        // only the Packages lists are cut
        assert_eq!(fs::read_to_string(&release).unwrap(), "Package: emacs\n");
    }

    #[test]
    fn the_second_stage_installs_the_pinned_deb_instead_of_debootstraps_pick() {
        let root = tempfile::tempdir().unwrap();
        let (tree, cache) = (root.path().join("tree"), root.path().join("cache"));
        let archives = tree.join("var/cache/apt/archives");
        fs::create_dir_all(&archives).unwrap();
        fs::create_dir_all(tree.join("debootstrap")).unwrap();
        fs::create_dir_all(&cache).unwrap();
        // debootstrap took linux-base from the first suite (trixie's 4.12.1)
        fs::write(archives.join("linux-base_4.12.1_all.deb"), "old").unwrap();
        fs::write(archives.join("zstd_1.5_arm64.deb"), "zstd").unwrap();
        fs::write(
            tree.join("debootstrap/debpaths"),
            "linux-base /var/cache/apt/archives/linux-base_4.12.1_all.deb\n\
             zstd /var/cache/apt/archives/zstd_1.5_arm64.deb\n",
        )
        .unwrap();
        // the pinned backports one, already in the apt cache (no download)
        let pin = pin_for("linux-base", "4.17~bpo13+1", b"new");
        fs::write(cache.join("linux-base_4.17~bpo13+1_all.deb"), "new").unwrap();

        swap_in_pinned_debs(std::slice::from_ref(&pin), &tree, &cache).unwrap();
        assert_eq!(
            fs::read_to_string(tree.join("debootstrap/debpaths")).unwrap(),
            "linux-base /var/cache/apt/archives/linux-base_4.17~bpo13+1_all.deb\n\
             zstd /var/cache/apt/archives/zstd_1.5_arm64.deb\n"
        );
        assert_eq!(
            fs::read(archives.join("linux-base_4.17~bpo13+1_all.deb")).unwrap(),
            b"new"
        );
        assert!(!archives.join("linux-base_4.12.1_all.deb").exists());
        assert!(unpinned_backports(std::slice::from_ref(&pin), &tree)
            .unwrap()
            .is_empty());

        // excluded packages leave the second stage's lists and the tree
        fs::write(tree.join("debootstrap/base"), "bc dracut zstd\n").unwrap();
        drop_excluded(&["dracut", "zstd"], &tree).unwrap();
        assert_eq!(
            fs::read_to_string(tree.join("debootstrap/base")).unwrap(),
            "bc\n"
        );
        assert_eq!(
            fs::read_to_string(tree.join("debootstrap/debpaths")).unwrap(),
            "linux-base /var/cache/apt/archives/linux-base_4.17~bpo13+1_all.deb\n"
        );
        assert!(!archives.join("zstd_1.5_arm64.deb").exists());

        // a backports package nobody pinned is named
        let mut debpaths = fs::read_to_string(tree.join("debootstrap/debpaths")).unwrap();
        debpaths.push_str("openssh-common /var/cache/apt/archives/openssh-common_1%3a10.6p2-1~bpo13+1_arm64.deb\n");
        fs::write(tree.join("debootstrap/debpaths"), debpaths).unwrap();
        assert_eq!(
            unpinned_backports(std::slice::from_ref(&pin), &tree).unwrap(),
            ["openssh-common"]
        );

        // a pin debootstrap never selected would be silently left out
        let stray = pin_for("zstd-extra", "1.0", b"new");
        fs::write(cache.join("zstd-extra_1.0_all.deb"), "new").unwrap();
        let err = swap_in_pinned_debs(&[stray], &tree, &cache)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("debootstrap did not select zstd-extra (pinned 1.0)"),
            "{err}"
        );
    }

    #[test]
    fn programs_are_found_through_absolute_links_inside_the_tree() {
        let tree = tempfile::tempdir().unwrap();
        let tree = tree.path();
        executable(&tree.join("usr/bin/mawk"));
        fs::create_dir_all(tree.join("etc/alternatives")).unwrap();
        symlink("/usr/bin/mawk", tree.join("etc/alternatives/awk")).unwrap();
        symlink("/etc/alternatives/awk", tree.join("usr/bin/awk")).unwrap();
        fs::write(tree.join("usr/bin/notexec"), "data").unwrap();
        symlink("/nowhere/x", tree.join("usr/bin/dangling")).unwrap();

        assert!(program_in_tree(tree, "awk"));
        assert!(program_in_tree(tree, "/usr/bin/mawk"));
        assert!(!program_in_tree(tree, "column"));
        assert!(!program_in_tree(tree, "notexec"));
        assert!(!program_in_tree(tree, "dangling"));
    }

    #[test]
    fn a_bundled_tool_missing_from_the_tree_fails_the_build_naming_it() {
        let tree = tempfile::tempdir().unwrap();
        let tree = tree.path();
        executable(&tree.join("usr/bin/wc"));
        manifest(tree, "wc", "stdio", "wc");
        manifest(tree, "weather", "GET", "https://example.invalid/w");
        check_bundled_tools(tree).unwrap();

        manifest(tree, "column", "stdio", "column");
        let err = check_bundled_tools(tree).unwrap_err().to_string();
        assert!(err.contains("column (from column.json)"), "{err}");
        assert!(!err.contains("wc"), "{err}");
    }
}
