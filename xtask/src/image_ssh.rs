//! The boot test's login part: the first-boot settings a person uses to
//! reach the board (user, SSH key, time zone, Wi-Fi), then a real `ssh`
//! into the guest through a forwarded loopback port proving what they did,
//! and that passwords are refused. Also the build's guard that no SSH host
//! key ships in an image (every card would share it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// sshd's port in the guest.
const GUEST_SSH_PORT: u16 = 22;
/// The login the test asks for (not the image's default, oapd-admin).
const USER: &str = "boot-tester";
const TIMEZONE: &str = "Europe/Berlin";
const WIFI_COUNTRY: &str = "DE";
/// Quotes, `$(...)`, `#` and a literal backslash-n: none may reach the
/// wpa_supplicant file as anything but hex.
const WIFI_SSID: &str = r#"Boot "test" net $(x)"#;
const WIFI_PASSPHRASE: &str = r#"pa"ss'word#1 \n}"#;
/// Where the first-boot Wi-Fi settings land in the guest.
const WPA_CONF: &str = "/etc/wpa_supplicant/wpa_supplicant-wlan0.conf";

/// Fails the build when the tree holds SSH host keys: they are made on each
/// board's first start of sshd (image/overlay's ssh.service drop-in).
pub(crate) fn no_host_keys(tree: &Path) -> Result<()> {
    let dir = tree.join("etc/ssh");
    let mut found = Vec::new();
    if let Ok(entries) = fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("ssh_host_") {
                found.push(name);
            }
        }
    }
    found.sort();
    ensure!(
        found.is_empty(),
        "SSH host keys in the image's /etc/ssh (every card would share them; \
         image/guest/configure.sh removes them): {}",
        found.join(", ")
    );
    println!("image: no SSH host keys in the root filesystem");
    Ok(())
}

/// A key pair made for one boot test, and the guest's login settings.
pub(crate) struct Access {
    key: PathBuf,
    public: String,
    known_hosts: PathBuf,
}

impl Access {
    /// A fresh ed25519 key pair in `work` (`ssh-keygen`, openssh-client).
    pub(crate) fn prepare(work: &Path) -> Result<Access> {
        let key = work.join("boot-test-ssh-key");
        for path in [key.clone(), key.with_extension("pub")] {
            let _ = fs::remove_file(path);
        }
        let status = Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "oapd-image-boot-test",
                "-f",
            ])
            .arg(&key)
            .stdin(Stdio::null())
            .status()
            .context("cannot run ssh-keygen (apt: openssh-client)")?;
        ensure!(status.success(), "ssh-keygen failed: {status}");
        let public = fs::read_to_string(key.with_extension("pub"))?
            .trim()
            .to_owned();
        Ok(Access {
            key,
            public,
            known_hosts: work.join("boot-test-known-hosts"),
        })
    }

    /// The `oapd.yaml` lines for the login, time zone and Wi-Fi.
    pub(crate) fn settings(&self) -> String {
        format!(
            "user: {USER}\nssh_authorized_key: {}\ntimezone: {TIMEZONE}\n\
             wifi_country: {WIFI_COUNTRY}\nwifi_ssid: \"{WIFI_SSID}\"\n\
             wifi_passphrase: \"{WIFI_PASSPHRASE}\"\n",
            self.public
        )
    }

    /// The `hostfwd` part of qemu's `-nic user` option for sshd.
    pub(crate) fn hostfwd(port: u16) -> String {
        format!("hostfwd=tcp:127.0.0.1:{port}-:{GUEST_SSH_PORT}")
    }

    /// `ssh` arguments up to the destination: this key only, no user
    /// configuration, the guest's (fresh) host key accepted once.
    fn ssh(&self, port: u16) -> Command {
        let mut command = Command::new("ssh");
        command
            .args([
                "-F",
                "/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
            ])
            .args([
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .args(["-p", &port.to_string()])
            .stdin(Stdio::null());
        command
    }

    fn login(&self, port: u16, remote: &str) -> Result<Output> {
        self.ssh(port)
            .args(["-o", "IdentitiesOnly=yes", "-i"])
            .arg(&self.key)
            .arg(format!("{USER}@127.0.0.1"))
            .arg(remote)
            .output()
            .context("cannot run ssh (apt: openssh-client)")
    }

    /// Logs in through the forwarded `port` and checks what first boot did.
    pub(crate) fn check(&self, port: u16, hostname: &str, deadline: Instant) -> Result<()> {
        let _ = fs::remove_file(&self.known_hosts);
        // sshd starts after first boot, in parallel with oapd: wait for it.
        let started = Instant::now();
        loop {
            let out = self.login(port, "true")?;
            if out.status.success() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "ssh {USER}@ the guest with the first-boot key failed until the deadline: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        println!(
            "image-boot: ssh login as {USER} with the first-boot key ({:.1} s after /health checks)",
            started.elapsed().as_secs_f64()
        );

        let probe = format!(
            "echo \"user=$(id -un)\"; \
             sudo -n true && echo sudo=ok; \
             echo \"hostname=$(hostname)\"; \
             echo \"localtime=$(readlink /etc/localtime)\"; \
             echo \"zone=$(date +%Z)\"; \
             echo \"wifi_unit=$(sudo -n systemctl is-enabled wpa_supplicant@wlan0.service)\"; \
             echo \"ssh_unit=$(sudo -n systemctl is-enabled ssh.service)\"; \
             echo \"wifi_mode=$(sudo -n stat -c %a {WPA_CONF})\"; \
             echo \"ssh_dir=$(stat -c %a:%U ~/.ssh)\"; \
             echo \"ssh_keys=$(stat -c %a:%U ~/.ssh/authorized_keys)\"; \
             echo \"host_keys=$(ls /etc/ssh/ssh_host_*_key.pub | wc -l)\"; \
             echo \"password=$(sudo -n passwd -S {USER} | cut -d' ' -f2)\"; \
             echo \"root_password=$(sudo -n passwd -S root | cut -d' ' -f2)\"; \
             sudo -n sshd -T | grep -E '^(passwordauthentication|kbdinteractiveauthentication|permitrootlogin) ' | tr ' ' '='; \
             sudo -n cat {WPA_CONF} | sed 's/^/wpa:/'; \
             sudo -n cat /etc/oapd/firstboot.yaml | sed 's/^/record:/'"
        );
        let out = self.login(port, &probe)?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or("")
                .to_owned()
        };
        let fail = |what: String| -> anyhow::Error {
            anyhow::anyhow!(
                "ssh check: {what}\nguest said:\n{text}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        };
        let expect = |key: &str, want: &str| -> Result<()> {
            if value(key) == want {
                Ok(())
            } else {
                Err(fail(format!(
                    "{key}: expected {want:?}, got {:?}",
                    value(key)
                )))
            }
        };
        expect("user", USER)?;
        expect("sudo", "ok")?;
        expect("hostname", hostname)?;
        expect("localtime", &format!("/usr/share/zoneinfo/{TIMEZONE}"))?;
        if !["CET", "CEST"].contains(&value("zone").as_str()) {
            return Err(fail(format!(
                "date +%Z: expected CET or CEST, got {:?}",
                value("zone")
            )));
        }
        expect("wifi_unit", "enabled")?;
        expect("ssh_unit", "enabled")?;
        expect("wifi_mode", "600")?;
        expect("ssh_dir", &format!("700:{USER}"))?;
        expect("ssh_keys", &format!("600:{USER}"))?;
        // locked passwords (passwd -S: L), and sshd's effective settings
        expect("password", "L")?;
        expect("root_password", "L")?;
        expect("passwordauthentication", "no")?;
        expect("kbdinteractiveauthentication", "no")?;
        expect("permitrootlogin", "no")?;
        if value("host_keys").parse::<u32>().unwrap_or(0) == 0 {
            return Err(fail("no SSH host keys were made on first boot".into()));
        }

        let wpa: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("wpa:"))
            .collect();
        let wpa_text = wpa.join("\n");
        let psk = expected_psk()?;
        for want in [
            format!("country={WIFI_COUNTRY}"),
            format!("\tssid={}", hex::encode(WIFI_SSID)),
            format!("\tpsk={psk}"),
        ] {
            if !wpa.contains(&want.as_str()) {
                return Err(fail(format!("{WPA_CONF} lacks the line {want:?}")));
            }
        }
        if wpa.iter().filter(|l| l.contains('{')).count() != 1 || wpa_text.contains("#psk") {
            return Err(fail(format!(
                "{WPA_CONF}: expected exactly one network block and no #psk"
            )));
        }
        let record: String = text
            .lines()
            .filter_map(|l| l.strip_prefix("record:"))
            .collect::<Vec<_>>()
            .join("\n");
        if record.is_empty() {
            return Err(fail("/etc/oapd/firstboot.yaml is missing".into()));
        }
        if wpa_text.contains(WIFI_PASSPHRASE) || record.contains(WIFI_PASSPHRASE) {
            return Err(fail(
                "the plain Wi-Fi passphrase is stored on the board".into(),
            ));
        }
        println!(
            "image-boot: as {USER}: sudo -n, passwords locked, sshd keys-only without root, \
             hostname {hostname}, time zone {TIMEZONE} ({}), {WPA_CONF} 0600 with the \
             derived key only, wpa_supplicant@wlan0 enabled",
            value("zone")
        );

        // Passwords: the server must not even offer them.
        let out = self
            .ssh(port)
            .args(["-o", "PubkeyAuthentication=no"])
            .args([
                "-o",
                "PreferredAuthentications=password,keyboard-interactive",
            ])
            .arg(format!("{USER}@127.0.0.1"))
            .arg("true")
            .output()
            .context("cannot run ssh")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && stderr.contains("Permission denied (publickey)"),
            "ssh with a password: expected `Permission denied (publickey)` (no password or \
             keyboard-interactive method offered), got {} {}",
            out.status,
            stderr.trim()
        );
        println!("image-boot: password login refused (the server offers publickey only)");
        Ok(())
    }
}

/// The key wpa_passphrase derives (PBKDF2-HMAC-SHA1, 4096 rounds, the SSID
/// as salt), computed independently on the host.
fn expected_psk() -> Result<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib, sys; print(hashlib.pbkdf2_hmac('sha1', sys.argv[1].encode(), \
             sys.argv[2].encode(), 4096, 32).hex())",
            WIFI_PASSPHRASE,
            WIFI_SSID,
        ])
        .output()
        .context("cannot run python3")?;
    ensure!(out.status.success(), "python3 pbkdf2 failed");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_ssh_host_keys_fails_the_build_naming_them() {
        let tree = tempfile::tempdir().unwrap();
        let ssh = tree.path().join("etc/ssh");
        fs::create_dir_all(ssh.join("sshd_config.d")).unwrap();
        fs::write(ssh.join("sshd_config"), "").unwrap();
        fs::write(ssh.join("moduli"), "").unwrap();
        no_host_keys(tree.path()).unwrap();

        fs::write(ssh.join("ssh_host_ed25519_key"), "private").unwrap();
        fs::write(ssh.join("ssh_host_ed25519_key.pub"), "public").unwrap();
        let err = no_host_keys(tree.path()).unwrap_err().to_string();
        assert!(
            err.contains("ssh_host_ed25519_key, ssh_host_ed25519_key.pub"),
            "{err}"
        );
    }
}
