//! The Debian packages the test suite needs (xtask/debian-packages.txt, the
//! one list .ci/run reads too): which are missing here, and installing them
//! through apt-get when this user may (root, or `sudo -n`), else the one
//! command to run.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

use crate::repo_root;

/// The list, relative to the repository root.
const LIST: &str = "xtask/debian-packages.txt";

/// How to tell whether a package is installed.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    /// Every one of these commands is on PATH.
    Commands(Vec<String>),
    /// This file exists.
    File(String),
    /// Needed only when CPython 3.13 is built from source; asked of dpkg.
    HaBuild,
}

/// One line of the list.
#[derive(Debug, PartialEq, Eq)]
struct Needed {
    package: String,
    check: Check,
}

/// The list's entries; a line that is neither blank, a comment nor
/// `PACKAGE CHECK` is an error naming it.
fn parse(text: &str) -> anyhow::Result<Vec<Needed>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [package, check] = fields.as_slice() else {
            bail!("{LIST}:{}: expected `PACKAGE CHECK`, got {line:?}", n + 1);
        };
        let check = if let Some(commands) = check.strip_prefix("cmd:") {
            Check::Commands(commands.split(',').map(str::to_owned).collect())
        } else if let Some(file) = check.strip_prefix("file:") {
            Check::File(file.to_owned())
        } else if *check == "ha-build" {
            Check::HaBuild
        } else {
            bail!(
                "{LIST}:{}: unknown check {check:?} (cmd:A,B, file:/PATH or ha-build)",
                n + 1
            );
        };
        out.push(Needed {
            package: (*package).to_owned(),
            check,
        });
    }
    Ok(out)
}

fn on_path(command: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
        .unwrap_or(false)
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", package])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// The packages of `list` this machine lacks; `needs_build` says whether
/// CPython 3.13 will be built here.
fn missing(list: &[Needed], needs_build: bool) -> Vec<String> {
    list.iter()
        .filter(|n| match &n.check {
            Check::Commands(commands) => !commands.iter().all(|c| on_path(c)),
            Check::File(file) => !Path::new(file).exists(),
            Check::HaBuild => needs_build && !dpkg_installed(&n.package),
        })
        .map(|n| n.package.clone())
        .collect()
}

/// Installs what the test suite lacks, or fails with the command to run.
pub(crate) fn ensure() -> anyhow::Result<()> {
    let path = repo_root().join(LIST);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let list = parse(&text)?;
    let needs_build =
        list.iter().any(|n| n.check == Check::HaBuild) && crate::home_assistant::needs_build();
    let missing = missing(&list, needs_build);
    if missing.is_empty() {
        return Ok(());
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false);
    let sudo = !root
        && Command::new("sudo")
            .args(["-n", "true"])
            .output()
            .map(|out| out.status.success())
            .unwrap_or(false);
    if !root && !sudo {
        bail!(
            "the test suite needs Debian packages this machine lacks; install them with\n  \
             sudo apt-get install --no-install-recommends {}",
            missing.join(" ")
        );
    }
    println!(
        "installing the Debian packages the tests need: {}",
        missing.join(" ")
    );
    let apt = |args: &[&str]| -> anyhow::Result<()> {
        let mut command = if sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "apt-get"]);
            c
        } else {
            Command::new("apt-get")
        };
        let status = command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get")?;
        anyhow::ensure!(
            status.success(),
            "apt-get {} failed: {status}",
            args.join(" ")
        );
        Ok(())
    };
    apt(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(missing.iter().map(String::as_str));
    apt(&install)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_list_parses() {
        let text = std::fs::read_to_string(repo_root().join(LIST)).unwrap();
        let list = parse(&text).unwrap();
        let chromium = list.iter().find(|n| n.package == "chromium").unwrap();
        assert_eq!(chromium.check, Check::File("/usr/bin/chromium".into()));
        assert!(list.iter().any(|n| n.check == Check::HaBuild));
    }

    #[test]
    fn lines_parse_into_checks() {
        let list = parse(
            "# comment\n\npython3-pip cmd:python3,pip # why\nsudo file:/usr/sbin/visudo\n\
             gcc ha-build\n",
        )
        .unwrap();
        assert_eq!(
            list,
            [
                Needed {
                    package: "python3-pip".into(),
                    check: Check::Commands(vec!["python3".into(), "pip".into()]),
                },
                Needed {
                    package: "sudo".into(),
                    check: Check::File("/usr/sbin/visudo".into()),
                },
                Needed {
                    package: "gcc".into(),
                    check: Check::HaBuild,
                },
            ]
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse("jq\n").unwrap_err().to_string();
        assert!(
            err.contains(":1:") && err.contains("PACKAGE CHECK"),
            "{err}"
        );
        let err = parse("\njq which:jq\n").unwrap_err().to_string();
        assert!(
            err.contains(":2:") && err.contains("unknown check"),
            "{err}"
        );
    }

    #[test]
    fn only_what_is_absent_is_missing() {
        let list = parse(
            "present cmd:sh\nabsent cmd:sh,no-such-command-here\nfile file:/no/such/file\n\
             build ha-build\n",
        )
        .unwrap();
        assert_eq!(missing(&list, false), ["absent", "file"]);
        assert_eq!(missing(&list, true), ["absent", "file", "build"]);
    }
}
