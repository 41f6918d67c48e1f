//! The newest glibc a binary needs, and the oldest the supported systems
//! have: what decides where the package's binaries can start at all. The
//! versions come from the binary's version-needs section
//! (`.gnu.version_r`) as binutils' `readelf` prints it, which reads every
//! architecture's ELF.

use std::fmt;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::str::FromStr;

use anyhow::{bail, ensure, Context, Result};

/// A glibc symbol version such as `2.34` or `2.2.5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GlibcVersion {
    major: u32,
    minor: u32,
    patch: u32,
}

impl GlibcVersion {
    pub(crate) const fn new(major: u32, minor: u32) -> Self {
        Self {
            major,
            minor,
            patch: 0,
        }
    }
}

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if self.patch != 0 {
            write!(f, ".{}", self.patch)?;
        }
        Ok(())
    }
}

impl FromStr for GlibcVersion {
    type Err = anyhow::Error;

    /// `2.34`, `2.2.5`; anything else (`PRIVATE`, `2`, `2.x`) is an error
    /// naming the text.
    fn from_str(text: &str) -> Result<Self> {
        let parts: Vec<&str> = text.split('.').collect();
        ensure!(
            (2..=3).contains(&parts.len()),
            "{text:?} is not a glibc version (expected x.y or x.y.z)"
        );
        let mut numbers = [0u32; 3];
        for (slot, part) in numbers.iter_mut().zip(&parts) {
            *slot = part
                .parse()
                .with_context(|| format!("{text:?} is not a glibc version: {part:?}"))?;
        }
        Ok(Self {
            major: numbers[0],
            minor: numbers[1],
            patch: numbers[2],
        })
    }
}

/// A system the package is for, with the glibc it ships.
pub(crate) struct System {
    pub(crate) name: &'static str,
    pub(crate) glibc: GlibcVersion,
}

/// The systems the `.deb` supports. JetPack 5 (Ubuntu 20.04, glibc 2.31) is
/// left out on purpose: see the module docs.
pub(crate) const SUPPORTED: &[System] = &[
    System {
        name: "Ubuntu 22.04 / NVIDIA JetPack 6",
        glibc: GlibcVersion::new(2, 35),
    },
    System {
        name: "Debian 12 bookworm",
        glibc: GlibcVersion::new(2, 36),
    },
    System {
        name: "Raspberry Pi OS on Debian 13 trixie",
        glibc: GlibcVersion::new(2, 41),
    },
];

/// The oldest glibc of [`SUPPORTED`]: no shipped binary may need more.
pub(crate) fn floor() -> GlibcVersion {
    SUPPORTED
        .iter()
        .map(|s| s.glibc)
        .min()
        .unwrap_or(GlibcVersion::new(2, 17))
}

/// The newest glibc version in `readelf --version-info --wide` output's
/// version-needs section (what the binary requires, not what it defines);
/// `None` when it needs none (a static binary). A `GLIBC_PRIVATE` need is
/// an error: such a binary runs only with the exact glibc it was linked to.
pub(crate) fn required_glibc(readelf: &str) -> Result<Option<GlibcVersion>> {
    let mut in_needs = false;
    let mut newest: Option<GlibcVersion> = None;
    for line in readelf.lines() {
        if !line.starts_with(' ') {
            in_needs = line.starts_with("Version needs section");
            continue;
        }
        if !in_needs {
            continue;
        }
        let Some(name) = line
            .split_whitespace()
            .skip_while(|word| *word != "Name:")
            .nth(1)
        else {
            continue;
        };
        let Some(version) = name.strip_prefix("GLIBC_") else {
            continue;
        };
        ensure!(
            version != "PRIVATE",
            "the binary needs GLIBC_PRIVATE: it runs only on the glibc it was linked against"
        );
        let version: GlibcVersion = version.parse()?;
        newest = newest.max(Some(version));
    }
    Ok(newest)
}

/// The systems of [`SUPPORTED`] whose glibc is older than `needed`.
pub(crate) fn unsupported_by(needed: GlibcVersion) -> Vec<&'static str> {
    SUPPORTED
        .iter()
        .filter(|s| s.glibc < needed)
        .map(|s| s.name)
        .collect()
}

/// The Debian architecture of an ELF file, from its `e_machine` field.
fn elf_arch(binary: &Path) -> Result<&'static str> {
    let bytes = fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    ensure!(
        bytes.get(..4) == Some(b"\x7fELF".as_slice()) && bytes.get(4) == Some(&2),
        "{} is not a 64-bit ELF file",
        binary.display()
    );
    // e_machine: a little-endian u16 at offset 18 (both targets are LE).
    match bytes.get(18..20) {
        Some([0x3e, 0]) => Ok("amd64"),
        Some([0xb7, 0]) => Ok("arm64"),
        other => bail!(
            "{}: ELF machine {other:?} is neither x86-64 nor aarch64",
            binary.display()
        ),
    }
}

/// The newest glibc `binary` needs, read with binutils' readelf.
pub(crate) fn binary_glibc(binary: &Path) -> Result<Option<GlibcVersion>> {
    let output = Command::new("readelf")
        .args(["--version-info", "--wide"])
        .arg(binary)
        .output()
        .context("cannot run readelf (apt-get install binutils)")?;
    ensure!(
        output.status.success(),
        "readelf failed on {}: {}",
        binary.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    required_glibc(&String::from_utf8_lossy(&output.stdout))
        .with_context(|| binary.display().to_string())
}

/// Fails when `binary` needs a glibc newer than [`floor`], naming the
/// systems it would not start on; prints what it needs.
pub(crate) fn check_binary_glibc(binary: &Path) -> Result<()> {
    let arch = elf_arch(binary)?;
    let floor = floor();
    let Some(needed) = binary_glibc(binary)? else {
        println!(
            "check-glibc: {arch} {} needs no glibc symbol version",
            binary.display()
        );
        return Ok(());
    };
    let missing = unsupported_by(needed);
    ensure!(
        missing.is_empty(),
        "the {arch} binary {} needs GLIBC_{needed}, newer than the floor {floor}: \
         it does not start on {}",
        binary.display(),
        missing.join(", ")
    );
    println!(
        "check-glibc: {arch} {} needs GLIBC_{needed} (floor {floor}: {})",
        binary.display(),
        SUPPORTED
            .iter()
            .map(|s| format!("{} {}", s.name, s.glibc))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// The Debian architecture name of the machine running this.
pub(crate) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> GlibcVersion {
        text.parse().unwrap()
    }

    #[test]
    fn versions_compare_by_number_not_text() {
        assert!(v("2.9") < v("2.17"));
        assert!(v("2.34") < v("2.35"));
        assert!(v("2.2.5") < v("2.3"));
        assert!(v("2.35") < v("2.35.1"));
        assert_eq!(v("2.35"), GlibcVersion::new(2, 35));
        assert_eq!(v("2.2.5").to_string(), "2.2.5");
        for bad in ["PRIVATE", "2", "2.x", "2.3.4.5", ""] {
            let error = bad.parse::<GlibcVersion>().unwrap_err().to_string();
            assert!(error.contains("not a glibc version"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_floor_is_the_oldest_supported_glibc() {
        assert_eq!(floor(), GlibcVersion::new(2, 35));
        assert!(unsupported_by(v("2.35")).is_empty());
        assert_eq!(
            unsupported_by(v("2.36")),
            vec!["Ubuntu 22.04 / NVIDIA JetPack 6"]
        );
        assert_eq!(unsupported_by(v("2.39")).len(), 2);
    }

    const READELF: &str = "\
Version symbols section '.gnu.version' contains 4 entries:
 Addr: 0x0000000000001234  Offset: 0x001234  Link: 6 (.dynsym)
  000:   0 (*local*)       5 (GLIBC_2.39)    2 (GLIBC_2.2.5)

Version definition section '.gnu.version_d' contains 2 entries:
  000000: Rev: 1  Flags: BASE  Index: 1  Cnt: 1  Name: libx.so
  0x001c: Rev: 1  Flags: none  Index: 2  Cnt: 1  Name: GLIBC_2.40

Version needs section '.gnu.version_r' contains 2 entries:
 Addr: 0x0000000000005678  Offset: 0x005678  Link: 7 (.dynstr)
  000000: Version: 1  File: libgcc_s.so.1  Cnt: 1
  0x0010:   Name: GCC_4.2.0  Flags: none  Version: 4
  0x0020: Version: 1  File: libc.so.6  Cnt: 3
  0x0030:   Name: GLIBC_2.2.5  Flags: none  Version: 2
  0x0040:   Name: GLIBC_2.34  Flags: none  Version: 3
  0x0050:   Name: GLIBC_2.17  Flags: none  Version: 5
";

    #[test]
    fn only_the_version_needs_section_counts() {
        // 2.39 (symbol table) and 2.40 (a definition) are not requirements.
        assert_eq!(required_glibc(READELF).unwrap(), Some(v("2.34")));
        assert_eq!(required_glibc("").unwrap(), None);
        let private = READELF.replace("GLIBC_2.17", "GLIBC_PRIVATE");
        let error = required_glibc(&private).unwrap_err().to_string();
        assert!(error.contains("GLIBC_PRIVATE"), "{error}");
    }

    /// The parser on a real binary: this test binary itself, linked against
    /// the host's glibc like the daemon, needs some glibc version, never a
    /// newer one than the host has.
    #[test]
    fn reads_the_glibc_a_real_binary_needs() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(elf_arch(&me).unwrap(), host_arch());
        let needed = binary_glibc(&me).unwrap().expect("a glibc binary");
        let host = Command::new("ldd").arg("--version").output().unwrap();
        let host = String::from_utf8_lossy(&host.stdout);
        let host: GlibcVersion = host
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().last())
            .unwrap()
            .parse()
            .unwrap();
        assert!(needed >= v("2.2.5") && needed <= host, "{needed} vs {host}");
    }
}
