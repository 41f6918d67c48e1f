//! Verified downloads of single Debian packages from the mirror the image
//! recipe uses ([`crate::image::MIRROR`], the guest's [`SUITE`] and
//! [`KERNEL_SUITE`]), without root or an apt configuration:
//!
//! 1. `dists/<suite>/InRelease`, checked with `gpgv` against
//!    `/usr/share/keyrings/debian-archive-keyring.gpg`; only the text gpgv
//!    vouches for (its `--output`) is read further.
//! 2. `main/binary-<arch>/Packages.xz`, whose SHA256 and size come from that
//!    text; cached under its hash.
//! 3. Each `.deb`, whose SHA256 and size come from `Packages`; cached under
//!    its hash.
//!
//! A file in the cache is trusted only under the hash it was checked
//! against, so a stale or tampered cache entry is never used for a newer
//! index.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

use crate::image::MIRROR;

/// The suite the arm64 test guest's userland comes from (busybox, Python
/// 3.11 with its standard library, perl, jq): the one its init and tests
/// were proven on.
pub(crate) const SUITE: &str = "bookworm";
/// The suite of the guest's kernel: trixie's 6.12, as on the images, has
/// Landlock ABI 4 and up (TCP bind and connect rules), which bookworm's 6.1
/// lacks. The guest loads no modules, so the kernel image is all it takes.
pub(crate) const KERNEL_SUITE: &str = "trixie";
use crate::tasks::run_in_root;

/// The keyring every Debian release is signed with (package
/// debian-archive-keyring).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// One package's index stanza: the fields this module uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stanza {
    pub(crate) package: String,
    pub(crate) version: String,
    pub(crate) depends: String,
    pub(crate) filename: String,
    pub(crate) size: u64,
    pub(crate) sha256: String,
}

/// A package index of one architecture (`main` component), verified.
pub(crate) struct Index {
    suite: &'static str,
    cache: PathBuf,
    stanzas: BTreeMap<String, Stanza>,
}

impl Index {
    /// Fetches and checks the index of `suite` (e.g. `bookworm`) for `arch`
    /// (e.g. `arm64`), caching in `cache`.
    pub(crate) fn fetch(cache: &Path, suite: &'static str, arch: &str) -> Result<Self> {
        fs::create_dir_all(cache)?;
        let inrelease = cache.join(format!("InRelease-{suite}"));
        download(&format!("{MIRROR}/dists/{suite}/InRelease"), &inrelease)?;
        let release = cache.join(format!("Release-{suite}.verified"));
        let _ = fs::remove_file(&release);
        run_in_root(
            Command::new("gpgv")
                .arg("--keyring")
                .arg(KEYRING)
                .arg("--output")
                .arg(&release)
                .arg(&inrelease),
        )
        .with_context(|| {
            format!(
                "{MIRROR}/dists/{suite}/InRelease does not verify against {KEYRING} \
                 (apt-get install gpgv debian-archive-keyring)"
            )
        })?;
        let release = fs::read_to_string(&release)?;
        let path = format!("main/binary-{arch}/Packages.xz");
        let (hash, size) = release_sha256(&release, &path)
            .with_context(|| format!("{path} is not listed in {suite}'s InRelease"))?;
        let xz = cache.join(format!("Packages-{hash}.xz"));
        fetch_checked(&format!("{MIRROR}/dists/{suite}/{path}"), &xz, &hash, size)?;
        let output = Command::new("xz")
            .arg("-dc")
            .arg(&xz)
            .output()
            .context("xz is missing: apt-get install xz-utils")?;
        ensure!(
            output.status.success(),
            "cannot decompress {}",
            xz.display()
        );
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(Self {
            suite,
            cache: cache.to_path_buf(),
            stanzas: parse_packages(&text),
        })
    }

    /// The stanza of `package`.
    pub(crate) fn stanza(&self, package: &str) -> Result<&Stanza> {
        self.stanzas
            .get(package)
            .with_context(|| format!("package {package} is not in {}'s index", self.suite))
    }

    /// The package a metapackage such as `linux-image-arm64` points at: the
    /// first name of its Depends.
    pub(crate) fn first_dependency(&self, package: &str) -> Result<&Stanza> {
        let meta = self.stanza(package)?;
        let target = first_dependency(&meta.depends)
            .with_context(|| format!("{package} depends on nothing"))?;
        self.stanza(target)
    }

    /// The `.deb` of `stanza`, downloaded and checked, from the cache when
    /// there.
    pub(crate) fn deb(&self, stanza: &Stanza) -> Result<PathBuf> {
        let path = self.cache.join(format!("{}.deb", stanza.sha256));
        fetch_checked(
            &format!("{MIRROR}/{}", stanza.filename),
            &path,
            &stanza.sha256,
            stanza.size,
        )?;
        Ok(path)
    }
}

/// `url` to `dest` with curl (fails on HTTP errors).
fn download(url: &str, dest: &Path) -> Result<()> {
    let partial = dest.with_extension("partial");
    run_in_root(
        Command::new("curl")
            .args(["--fail", "--silent", "--show-error", "--location"])
            .args(["--retry", "3", "--max-time", "600", "--output"])
            .arg(&partial)
            .arg(url),
    )
    .with_context(|| format!("cannot download {url}"))?;
    fs::rename(&partial, dest)?;
    Ok(())
}

/// `dest` holding exactly the bytes with `sha256` and `size`: the cached
/// file when it checks, else downloaded from `url` and checked.
fn fetch_checked(url: &str, dest: &Path, sha256: &str, size: u64) -> Result<()> {
    if dest.is_file() && file_sha256(dest)? == sha256 {
        return Ok(());
    }
    download(url, dest)?;
    let got = file_sha256(dest)?;
    let len = fs::metadata(dest)?.len();
    if got != sha256 || len != size {
        let _ = fs::remove_file(dest);
        bail!("{url}: sha256 {got} ({len} bytes), the signed index says {sha256} ({size} bytes)");
    }
    Ok(())
}

fn file_sha256(path: &Path) -> Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(hex::encode(hash.finalize()))
}

/// SHA256 and size of `path` in a Release file's `SHA256:` section.
pub(crate) fn release_sha256(release: &str, path: &str) -> Option<(String, u64)> {
    let mut in_section = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_section = line.trim_end() == "SHA256:";
            continue;
        }
        if !in_section {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(hash), Some(size), Some(name), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if name == path && hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some((hash.to_ascii_lowercase(), size.parse().ok()?));
        }
    }
    None
}

/// The stanzas of a Packages file that name a file, a size and a SHA256.
pub(crate) fn parse_packages(text: &str) -> BTreeMap<String, Stanza> {
    let mut out = BTreeMap::new();
    for block in text.split("\n\n") {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for line in block.lines() {
            if line.starts_with(' ') || line.starts_with('\t') {
                continue; // continuation of a multi-line field
            }
            if let Some((key, value)) = line.split_once(':') {
                fields.insert(key, value.trim());
            }
        }
        let field = |key: &str| fields.get(key).map(|v| (*v).to_owned());
        let (Some(package), Some(filename), Some(size), Some(sha256)) = (
            field("Package"),
            field("Filename"),
            field("Size").and_then(|s| s.parse().ok()),
            field("SHA256"),
        ) else {
            continue;
        };
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let stanza = Stanza {
            package: package.clone(),
            version: field("Version").unwrap_or_default(),
            depends: field("Depends").unwrap_or_default(),
            filename,
            size,
            sha256: sha256.to_ascii_lowercase(),
        };
        out.insert(package, stanza);
    }
    out
}

/// The first package name of a Depends field (`a (= 1) | b, c` → `a`).
pub(crate) fn first_dependency(depends: &str) -> Option<&str> {
    let first = depends.split([',', '|']).next()?.trim();
    let name = first.split([' ', '(', ':']).next()?.trim();
    (!name.is_empty()).then_some(name)
}

/// One file of a `.deb`'s data, by its path in the package (`./bin/busybox`),
/// extracted to `dest`.
pub(crate) fn extract_file(deb: &Path, member: &str, dest: &Path) -> Result<()> {
    let partial = dest.with_extension("partial");
    let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -xO \"$2\" > \"$3\"";
    run_in_root(
        Command::new("sh")
            .args(["-c", script, "oapd-extract"])
            .arg(deb)
            .arg(member)
            .arg(&partial),
    )
    .with_context(|| format!("{member} not found in {}", deb.display()))?;
    ensure!(
        fs::metadata(&partial)?.len() > 0,
        "{member} is empty in {}",
        deb.display()
    );
    fs::rename(&partial, dest)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: &str = "Origin: Debian\nSuite: stable\nMD5Sum:\n \
        0123456789abcdef0123456789abcdef 100 main/binary-arm64/Packages.xz\n\
        SHA256:\n \
        1111111111111111111111111111111111111111111111111111111111111111  2000 main/binary-amd64/Packages.xz\n \
        AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA  9321 main/binary-arm64/Packages.xz\n \
        2222222222222222222222222222222222222222222222222222222222222222  5 main/binary-arm64/Packages\n";

    #[test]
    fn release_hash_comes_from_the_sha256_section_only() {
        assert_eq!(
            release_sha256(RELEASE, "main/binary-arm64/Packages.xz"),
            Some(("a".repeat(64), 9321))
        );
        // listed under MD5Sum only: not taken
        let md5_only = "MD5Sum:\n 0123456789abcdef0123456789abcdef 100 x/Packages.xz\n";
        assert_eq!(release_sha256(md5_only, "x/Packages.xz"), None);
        assert_eq!(
            release_sha256(RELEASE, "main/binary-riscv64/Packages.xz"),
            None
        );
    }

    #[test]
    fn packages_stanzas_give_file_size_and_hash() {
        let text = "Package: linux-image-arm64\nVersion: 6.1.1-1\n\
            Depends: linux-image-6.1.0-9-arm64 (= 6.1.1-1)\n\
            Filename: pool/main/l/linux-signed-arm64/linux-image-arm64_6.1.1-1_arm64.deb\n\
            Size: 1500\nSHA256: BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\n\
            Description: Linux for 64-bit ARMv8 machines (meta-package)\n \
            This package depends on the latest Linux kernel.\n\n\
            Package: no-hash\nFilename: pool/x.deb\nSize: 3\n\n\
            Package: busybox-static\nVersion: 1:1.35.0-4+b3\n\
            Filename: pool/main/b/busybox/busybox-static_1.35.0-4+b3_arm64.deb\n\
            Size: 900000\nSHA256: cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\n";
        let stanzas = parse_packages(text);
        assert_eq!(stanzas.len(), 2, "{stanzas:?}");
        let meta = &stanzas["linux-image-arm64"];
        assert_eq!(meta.sha256, "b".repeat(64));
        assert_eq!(meta.size, 1500);
        assert_eq!(
            first_dependency(&meta.depends),
            Some("linux-image-6.1.0-9-arm64")
        );
        assert_eq!(
            stanzas["busybox-static"].filename,
            "pool/main/b/busybox/busybox-static_1.35.0-4+b3_arm64.deb"
        );
    }

    #[test]
    fn first_dependency_takes_the_first_name() {
        assert_eq!(first_dependency("a (>= 1) | b, c"), Some("a"));
        assert_eq!(first_dependency("libc6:arm64, x"), Some("libc6"));
        assert_eq!(first_dependency(""), None);
    }
}
