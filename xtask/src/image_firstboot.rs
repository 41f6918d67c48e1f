//! The image's first-boot script (`image/overlay/usr/lib/oapd-image/firstboot`)
//! run on the build host against a scratch root (`OAPD_FIRSTBOOT_ROOT`):
//! its checks with the real `ssh-keygen`, `wpa_passphrase` and `visudo`, and
//! stubs only for what would change or wait on the running host (useradd,
//! chown, systemctl, hostname, udevadm), which log their calls instead.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::repo_root;

/// A scratch board: `root/` (the system), `boot/` (the FAT partition),
/// `stubs/` and the stubs' `calls.log`.
struct Board {
    dir: tempfile::TempDir,
    key: String,
}

const STUBS: &[&str] = &["useradd", "chown", "systemctl", "hostname", "udevadm"];
/// Host programs the script's checks use for real.
const NEEDED: &[(&str, &str)] = &[
    ("ssh-keygen", "openssh-client"),
    ("wpa_passphrase", "wpasupplicant"),
    ("visudo", "sudo"),
];

fn on_host(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(program).is_file())
}

impl Board {
    fn new() -> Board {
        let missing: Vec<String> = NEEDED
            .iter()
            .filter(|(p, _)| !on_host(p))
            .map(|(p, pkg)| format!("{p} (apt: {pkg})"))
            .collect();
        assert!(
            missing.is_empty(),
            "the first-boot tests need {}",
            missing.join(", ")
        );
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for d in [
            "etc/oapd",
            "etc/sudoers.d",
            "etc/systemd/network",
            "usr/bin",
            "usr/share/zoneinfo/Europe",
            "home",
        ] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::create_dir_all(dir.path().join("boot")).unwrap();
        fs::create_dir_all(dir.path().join("stubs")).unwrap();
        // The script checks a zone file's magic, not its contents.
        fs::write(
            root.join("usr/share/zoneinfo/Europe/Berlin"),
            b"TZif2\0\0\0\0",
        )
        .unwrap();
        fs::write(root.join("usr/share/zoneinfo/UTC"), b"TZif2\0\0\0\0").unwrap();
        fs::write(
            root.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\n\
             oapd:x:999:999::/var/lib/oapd:/usr/sbin/nologin\n\
             svc:x:500:500::/nonexistent:/usr/sbin/nologin\n\
             kept:x:1001:1001::/home/kept:/bin/bash\n",
        )
        .unwrap();
        fs::write(
            root.join("etc/group"),
            "root:x:0:\noapd:x:999:\nplugdev:x:46:\nkept:x:1001:\n",
        )
        .unwrap();
        fs::write(
            root.join("etc/hosts"),
            "127.0.0.1\tlocalhost\n127.0.1.1\toapd\n",
        )
        .unwrap();
        fs::write(root.join("etc/hostname"), "oapd\n").unwrap();
        fs::create_dir_all(root.join("home/kept")).unwrap();
        // oapd's own config check: accepts (the daemon's validation has
        // its own tests).
        script(&root.join("usr/bin/oapd"), "exit 0\n");
        let log = dir.path().join("calls.log");
        for stub in STUBS {
            let mut body = format!("echo \"{stub} $*\" >> '{}'\n", log.display());
            if *stub == "useradd" {
                // what useradd leaves behind: the passwd entry and a home
                body.push_str(&format!(
                    "for name; do :; done\n\
                     echo \"$name:x:1000:1000:oapd administrator:/home/$name:/bin/bash\" >> '{0}/etc/passwd'\n\
                     mkdir -p '{0}/home/'\"$name\"\n",
                    root.display()
                ));
            }
            script(&dir.path().join("stubs").join(stub), &body);
        }
        let key_file = dir.path().join("key");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "me@laptop", "-f"])
            .arg(&key_file)
            .status()
            .unwrap();
        assert!(status.success());
        let key = fs::read_to_string(key_file.with_extension("pub"))
            .unwrap()
            .trim()
            .to_owned();
        fs::remove_file(&key_file).unwrap();
        fs::remove_file(key_file.with_extension("pub")).unwrap();
        Board { dir, key }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn boot(&self) -> PathBuf {
        self.dir.path().join("boot")
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
    }

    /// Writes `oapd.yaml` and runs the script on it.
    fn run(&self, yaml: &str) -> Output {
        fs::write(self.boot().join("oapd.yaml"), yaml).unwrap();
        Command::new("sh")
            .arg(repo_root().join("image/overlay/usr/lib/oapd-image/firstboot"))
            .arg(self.boot().join("oapd.yaml"))
            .env("OAPD_FIRSTBOOT_ROOT", self.root())
            .env(
                "OAPD_FIRSTBOOT_PATH",
                format!(
                    "{}:/usr/sbin:/usr/bin:/sbin:/bin",
                    self.dir.path().join("stubs").display()
                ),
            )
            .output()
            .unwrap()
    }

    /// Every file and link below the root, with its contents and mode.
    fn snapshot(&self) -> BTreeMap<String, (Vec<u8>, u32)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                let rel = path
                    .strip_prefix(self.root())
                    .unwrap()
                    .display()
                    .to_string();
                if meta.is_dir() {
                    out.insert(rel, (Vec::new(), meta.permissions().mode()));
                    stack.push(path);
                } else if meta.file_type().is_symlink() {
                    let target = fs::read_link(&path).unwrap();
                    out.insert(rel, (target.display().to_string().into_bytes(), 0));
                } else {
                    out.insert(rel, (fs::read(&path).unwrap(), meta.permissions().mode()));
                }
            }
        }
        out
    }

    fn mode(&self, rel: &str) -> u32 {
        fs::metadata(self.root().join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }
}

fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

const BASE: &str = "hostname: kitchen-pi\nauth_token: 0123456789abcdef0123\n";

#[test]
fn login_time_zone_and_wifi_are_applied_and_quotes_in_the_wifi_values_cannot_inject() {
    let board = Board::new();
    // the board's radio
    fs::create_dir_all(board.root().join("sys/class/net/wlan0")).unwrap();
    // Quotes of both kinds, `$(...)`, `#`, a brace and a literal
    // backslash-n: the file must stay one network block.
    let ssid = r#"Cafe "5G" $(reboot)"#;
    let passphrase = r#"pa"ss'wo#rd \n}network={"#;
    let yaml = format!(
        "{BASE}user: alice\nssh_authorized_key: {}\ntimezone: Europe/Berlin\n\
         wifi_country: DE\nwifi_ssid: \"{ssid}\"\nwifi_passphrase: \"{passphrase}\"\n\
         ollama_install: true\n",
        board.key
    );
    let out = board.run(&yaml);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("SSH for alice (key SHA256:"), "{stdout}");
    let root = board.root();

    let wpa =
        fs::read_to_string(root.join("etc/wpa_supplicant/wpa_supplicant-wlan0.conf")).unwrap();
    assert_eq!(
        board.mode("etc/wpa_supplicant/wpa_supplicant-wlan0.conf"),
        0o600
    );
    let lines: Vec<&str> = wpa.lines().filter(|l| !l.starts_with('#')).collect();
    let psk_line = lines.iter().find(|l| l.starts_with("\tpsk=")).unwrap();
    let psk = psk_line.trim_start_matches("\tpsk=");
    assert!(
        psk.len() == 64 && psk.bytes().all(|b| b.is_ascii_hexdigit()),
        "{wpa}"
    );
    assert_eq!(
        lines,
        [
            "ctrl_interface=DIR=/run/wpa_supplicant",
            "country=DE",
            "network={",
            &format!("\tssid={}", hex::encode(ssid)),
            "\tscan_ssid=1",
            psk_line,
            "}",
        ],
        "{wpa}"
    );
    assert!(
        !wpa.contains("pa\"ss"),
        "the plain passphrase is in the file: {wpa}"
    );
    let network = fs::read_to_string(root.join("etc/systemd/network/50-wlan0.network")).unwrap();
    assert!(
        network.contains("Name=wlan0") && network.contains("DHCP=yes"),
        "{network}"
    );

    // The record kept in /etc/oapd has no passphrase either.
    let record = fs::read_to_string(root.join("etc/oapd/firstboot.yaml")).unwrap();
    assert!(!record.contains("pa\"ss"), "{record}");
    assert!(record.contains("wifi_ssid:"), "{record}");
    assert_eq!(board.mode("etc/oapd/firstboot.yaml"), 0o600);
    assert!(!board.boot().join("oapd.yaml").exists());

    assert_eq!(
        fs::read_link(root.join("etc/localtime")).unwrap(),
        Path::new("/usr/share/zoneinfo/Europe/Berlin")
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/timezone")).unwrap(),
        "Europe/Berlin\n"
    );

    assert_eq!(
        fs::read_to_string(root.join("home/alice/.ssh/authorized_keys")).unwrap(),
        format!("{}\n", board.key)
    );
    assert_eq!(board.mode("home/alice/.ssh"), 0o700);
    assert_eq!(board.mode("home/alice/.ssh/authorized_keys"), 0o600);
    assert_eq!(
        fs::read_to_string(root.join("etc/sudoers.d/010_alice-nopasswd"))
            .unwrap()
            .lines()
            .last(),
        Some("alice ALL=(ALL) NOPASSWD: ALL")
    );
    assert_eq!(board.mode("etc/sudoers.d/010_alice-nopasswd"), 0o440);
    assert_eq!(
        fs::read_to_string(root.join("etc/oapd/ollama-install.env")).unwrap(),
        "OLLAMA_RELEASE_URL=\nOLLAMA_RELEASE_SHA256=\n"
    );
    assert_eq!(board.mode("etc/oapd/ollama-install.env"), 0o600);

    let calls = board.calls();
    assert!(
        calls.contains("useradd --create-home --user-group"),
        "{calls}"
    );
    assert!(calls.contains(" alice\n"), "{calls}");
    assert!(calls.contains("chown 1000:1000 "), "{calls}");
    assert!(
        calls.contains("systemctl --no-reload enable wpa_supplicant@wlan0.service ssh.service"),
        "{calls}"
    );
    assert!(
        calls.contains("systemctl --no-block start wpa_supplicant@wlan0.service ssh.service"),
        "{calls}"
    );
    // nothing left behind in /etc/oapd but the results
    let mut left: Vec<String> = fs::read_dir(root.join("etc/oapd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["firstboot.yaml", "oapd.env", "ollama-install.env"]);
}

#[test]
fn without_a_user_the_key_goes_to_oapd_admin_and_an_existing_user_is_not_created_again() {
    let board = Board::new();
    let out = board.run(&format!("{BASE}ssh_authorized_key: {}\n", board.key));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(board.calls().contains(" oapd-admin\n"), "{}", board.calls());
    assert!(board
        .root()
        .join("etc/sudoers.d/010_oapd-admin-nopasswd")
        .is_file());
    // no Wi-Fi, no installer settings unless asked for
    assert!(!board.root().join("etc/wpa_supplicant").exists());
    assert!(!board.root().join("etc/oapd/ollama-install.env").exists());
    assert!(
        board.calls().contains("enable ssh.service\n"),
        "{}",
        board.calls()
    );
    assert!(
        board.calls().contains("start ssh.service\n"),
        "{}",
        board.calls()
    );

    let board = Board::new();
    let out = board.run(&format!(
        "{BASE}user: kept\nssh_authorized_key: {}\n",
        board.key
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!board.calls().contains("useradd"), "{}", board.calls());
    assert!(
        board.calls().contains("chown 1001:1001 "),
        "{}",
        board.calls()
    );
    assert!(board
        .root()
        .join("home/kept/.ssh/authorized_keys")
        .is_file());

    // Wi-Fi on a board without a radio (yet): enabled for the next boot,
    // not started now (its start would hold network.target back).
    let board = Board::new();
    let out = board.run(&format!(
        "{BASE}wifi_country: GB\nwifi_ssid: home\nwifi_passphrase: {}\n",
        "AB".repeat(32)
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = board.calls();
    assert!(
        calls.contains("enable wpa_supplicant@wlan0.service\n"),
        "{calls}"
    );
    assert!(!calls.contains("start"), "{calls}");
    let wpa = fs::read_to_string(
        board
            .root()
            .join("etc/wpa_supplicant/wpa_supplicant-wlan0.conf"),
    )
    .unwrap();
    // a 64-hex-digit key is stored as it is (lowercase)
    assert!(
        wpa.contains(&format!("\tpsk={}\n", "ab".repeat(32))),
        "{wpa}"
    );
    assert!(wpa.contains("country=GB\n"), "{wpa}");
}

#[test]
fn each_bad_value_is_refused_naming_its_key_and_nothing_is_written() {
    let probe = Board::new();
    let key = probe.key.clone();
    let body = key.split(' ').nth(1).unwrap().to_owned();
    let sha = "ab".repeat(32);
    let cases: Vec<(String, &str)> = vec![
        // junk glued to the base64 body
        (format!("ssh_authorized_key: ssh-ed25519 {body};reboot"), "ssh_authorized_key"),
        // valid base64 but not a key blob (trailing data): ssh-keygen refuses
        (format!("ssh_authorized_key: ssh-ed25519 {body}AAAA"), "ssh_authorized_key"),
        (format!("ssh_authorized_key: ssh-rsa {body}"), "ssh_authorized_key"),
        (format!("ssh_authorized_key: command=\"reboot\" {key}"), "ssh_authorized_key"),
        (format!("ssh_authorized_key: ssh-dss {body}"), "ssh_authorized_key"),
        (format!("ssh_authorized_key: {key}\u{1b}[2J"), "ssh_authorized_key"),
        (format!("user: root\nssh_authorized_key: {key}"), "user"),
        (format!("user: oapd\nssh_authorized_key: {key}"), "user"),
        (format!("user: svc\nssh_authorized_key: {key}"), "user"),
        (format!("user: plugdev\nssh_authorized_key: {key}"), "user"),
        (format!("user: Alice\nssh_authorized_key: {key}"), "user"),
        (format!("user: al;ice\nssh_authorized_key: {key}"), "user"),
        ("user: alice".into(), "user"),
        ("timezone: ../../../etc/passwd".into(), "timezone"),
        ("timezone: Mars/Olympus_Mons".into(), "timezone"),
        ("timezone: localtime".into(), "timezone"),
        ("wifi_ssid: home\nwifi_country: de".into(), "wifi_country"),
        ("wifi_ssid: home\nwifi_country: DEU".into(), "wifi_country"),
        ("wifi_ssid: home".into(), "wifi_country"),
        ("wifi_country: DE\nwifi_passphrase: 12345678".into(), "wifi_ssid"),
        ("wifi_country: DE\nwifi_ssid: home\u{1b}net".into(), "wifi_ssid"),
        (format!("wifi_country: DE\nwifi_ssid: {}", "x".repeat(33)), "wifi_ssid"),
        ("wifi_country: DE\nwifi_ssid: home\nwifi_passphrase: short".into(), "wifi_passphrase"),
        (
            "wifi_country: DE\nwifi_ssid: home\nwifi_passphrase: tab\tinside-it".into(),
            "wifi_passphrase",
        ),
        (
            format!("wifi_country: DE\nwifi_ssid: home\nwifi_passphrase: {}", "p".repeat(64)),
            "wifi_passphrase",
        ),
        ("ollama_install: yes".into(), "ollama_install"),
        (format!("ollama_release_sha256: {sha}"), "ollama_release_sha256"),
        (
            "ollama_install: true\nollama_release_url: https://example.invalid/o.tgz".into(),
            "ollama_release_sha256",
        ),
        (
            format!("ollama_install: true\nollama_release_url: file:///o.tgz\nollama_release_sha256: {sha}"),
            "ollama_release_url",
        ),
        (
            "ollama_install: true\nollama_release_url: https://example.invalid/o.tgz\n\
             ollama_release_sha256: 1234"
                .into(),
            "ollama_release_sha256",
        ),
    ];
    for (lines, named) in cases {
        let board = Board::new();
        let before = board.snapshot();
        // The bad value comes after valid settings of every kind, so a
        // late refusal still has to undo nothing.
        let yaml = format!("{BASE}{lines}\n");
        let out = board.run(&yaml);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted:\n{yaml}");
        let error = fs::read_to_string(board.boot().join("oapd-error.txt")).unwrap();
        // the key, and its line when the file has it
        let want = match yaml
            .lines()
            .position(|l| l.starts_with(&format!("{named}:")))
        {
            Some(at) => format!(": line {}: {named}: ", at + 1),
            None => format!(": {named}: "),
        };
        assert!(
            error.contains(&want),
            "expected a refusal with {want:?} for\n{yaml}got: {error}"
        );
        assert!(stderr.contains(error.trim()), "{stderr}");
        assert!(board.boot().join("oapd.yaml.invalid").is_file());
        assert!(!board.boot().join("oapd.yaml").exists());
        assert_eq!(board.snapshot(), before, "something changed for\n{yaml}");
        assert_eq!(board.calls(), "", "commands ran for\n{yaml}");
        // a rejected passphrase is not echoed into the error file
        if named == "wifi_passphrase" {
            assert!(
                !error.contains("short") && !error.contains("inside-it"),
                "{error}"
            );
        }
    }
}
