//! What a Raspberry Pi's firmware reads from the image's FAT partition,
//! checked when the arm64 image is built (image/README.md, "What the build
//! checks").
//!
//! The emulated boot test starts the image's kernel and initrd directly
//! (qemu has no Pi machine), so it never reads `config.txt`, `cmdline.txt`
//! or a device tree from the partition. A board does: a Pi 5 whose tree is
//! missing, or a `config.txt` whose `kernel=` sits in a section only a Pi 4
//! reads, would only show on the desk. So the build fails, naming the file,
//! unless the partition holds, for each of the Pi 3, 4 and 5:
//!
//! - its device tree(s) (`bcm2837-rpi-3-b*.dtb`, `bcm2711-rpi-4-b.dtb`,
//!   `bcm2712-rpi-5-b.dtb` and the D0 stepping's `bcm2712-d-rpi-5-b.dtb`);
//! - a `config.txt` that, read as that board's firmware reads it (the
//!   `[all]`, `[pi3]`, `[pi4]`, `[pi5]`… sections), names a `kernel=` and an
//!   `initramfs` that are on the partition, and a `device_tree=` that is, if
//!   it names one;
//! - a `cmdline.txt` that finds the root filesystem by its label.

use std::fs;
use std::path::Path;

use anyhow::{bail, Result};

/// The boards the arm64 image is for, with the model filters of
/// `config.txt` that select each (Raspberry Pi's `config.txt`
/// documentation, "Conditional filters") and the device trees its firmware
/// loads with `upstream_kernel=1` (what raspi-firmware writes).
struct Board {
    name: &'static str,
    filters: &'static [&'static str],
    /// File-name prefixes: at least one `<prefix>*.dtb` per entry.
    trees: &'static [&'static str],
    /// Whether the kernel must be started in 64-bit mode by `arm_64bit=1`
    /// (a Pi 5 runs nothing else).
    needs_arm_64bit: bool,
}

const BOARDS: &[Board] = &[
    Board {
        name: "Pi 3",
        filters: &["pi3", "pi3+", "cm3", "cm3+", "pi02"],
        trees: &["bcm2837-rpi-3-b"],
        needs_arm_64bit: true,
    },
    Board {
        name: "Pi 4",
        filters: &["pi4", "pi400", "cm4", "cm4s"],
        trees: &["bcm2711-rpi-4-b.dtb"],
        needs_arm_64bit: true,
    },
    Board {
        name: "Pi 5",
        filters: &["pi5", "pi500", "cm5"],
        trees: &["bcm2712-rpi-5-b.dtb", "bcm2712-d-rpi-5-b.dtb"],
        needs_arm_64bit: false,
    },
];

/// What one board's firmware takes from `config.txt`.
#[derive(Default, Debug, PartialEq, Eq)]
struct Effective {
    kernel: Option<String>,
    initramfs: Option<String>,
    device_tree: Option<String>,
    arm_64bit: bool,
}

/// Reads `config.txt` the way the firmware of a board selected by
/// `filters` does: lines before any section and under `[all]` apply to
/// every board, a model section only to its boards. Any other section
/// (`[none]`, `[tryboot]`, `[HDMI:1]`, `[gpio…]`, …) applies only
/// sometimes, so nothing in it counts as set.
fn effective(config: &str, filters: &[&str]) -> Effective {
    let mut applies = true;
    let mut out = Effective::default();
    for raw in config.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim().to_ascii_lowercase();
            applies = section == "all" || filters.contains(&section.as_str());
            continue;
        }
        if !applies {
            continue;
        }
        // `initramfs FILE [followkernel|ADDRESS]` is the one setting
        // written with a space instead of `=`.
        if let Some(rest) = line.strip_prefix("initramfs ") {
            out.initramfs = rest.split_whitespace().next().map(str::to_owned);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim().to_ascii_lowercase().as_str() {
            "kernel" => out.kernel = Some(value),
            "device_tree" => out.device_tree = Some(value),
            "arm_64bit" => out.arm_64bit = value == "1",
            _ => {}
        }
    }
    out
}

/// Checks the FAT partition's tree at `firmware` (the image's
/// `/boot/firmware`); `root_label` is the root filesystem's label.
/// Every problem is listed, each naming the file at fault.
pub(crate) fn check(firmware: &Path, root_label: &str) -> Result<()> {
    let mut problems = Vec::new();
    let names: Vec<String> = match fs::read_dir(firmware) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => bail!("cannot read the boot partition {}: {e}", firmware.display()),
    };
    let present = |name: &str| names.iter().any(|n| n == name);

    for board in BOARDS {
        for tree in board.trees {
            let found = match tree.strip_suffix(".dtb") {
                Some(_) => present(tree),
                None => names
                    .iter()
                    .any(|n| n.starts_with(tree) && n.ends_with(".dtb")),
            };
            if !found {
                let shown = if tree.ends_with(".dtb") {
                    (*tree).to_owned()
                } else {
                    format!("{tree}*.dtb")
                };
                problems.push(format!(
                    "{shown}: the {}'s device tree is not on the boot partition",
                    board.name
                ));
            }
        }
    }

    let config_path = firmware.join("config.txt");
    match fs::read_to_string(&config_path) {
        Err(e) => problems.push(format!("config.txt: cannot read it: {e}")),
        Ok(config) => {
            for board in BOARDS {
                let seen = effective(&config, board.filters);
                for (setting, value) in [("kernel=", &seen.kernel), ("initramfs", &seen.initramfs)]
                {
                    match value {
                        None => problems.push(format!(
                            "config.txt: no `{setting}` in a section the {} reads ([all] or [{}])",
                            board.name,
                            board.filters[0]
                        )),
                        Some(file) if !present(file) => problems.push(format!(
                            "{file}: named by config.txt's `{setting}` for the {}, not on the boot partition",
                            board.name
                        )),
                        Some(_) => {}
                    }
                }
                if let Some(file) = &seen.device_tree {
                    if !present(file) {
                        problems.push(format!(
                            "{file}: named by config.txt's `device_tree=` for the {}, not on the boot partition",
                            board.name
                        ));
                    }
                }
                if board.needs_arm_64bit && !seen.arm_64bit {
                    problems.push(format!(
                        "config.txt: no `arm_64bit=1` for the {}: its firmware would start the arm64 kernel in 32-bit mode",
                        board.name
                    ));
                }
            }
        }
    }

    let cmdline_path = firmware.join("cmdline.txt");
    let want_root = format!("root=LABEL={root_label}");
    match fs::read_to_string(&cmdline_path) {
        Err(e) => problems.push(format!("cmdline.txt: cannot read it: {e}")),
        Ok(cmdline) => {
            let root = cmdline.split_whitespace().find(|w| w.starts_with("root="));
            if root != Some(want_root.as_str()) {
                problems.push(format!(
                    "cmdline.txt: expected `{want_root}` (the same card boots from SD or USB), found {}",
                    root.map_or_else(|| "no root=".to_owned(), |r| format!("`{r}`"))
                ));
            }
        }
    }

    if problems.is_empty() {
        println!(
            "image: the boot partition has the Pi 3, 4 and 5 device trees, config.txt's kernel and initramfs, and the root by label"
        );
        return Ok(());
    }
    bail!(
        "the boot partition {} would not boot every Raspberry Pi the image is for:\n  {}",
        firmware.display(),
        problems.join("\n  ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What raspi-firmware's hook writes for a 7.x kernel (no sections:
    /// every board reads every line), plus a Pi 4-only section as a site
    /// might add through `/etc/default/raspi-firmware-custom`.
    const CONFIG: &str = "# Do not modify this file!\n\
        arm_64bit=1\nenable_uart=1\nupstream_kernel=1\n\
        kernel=vmlinuz-7.3.4+deb13-arm64\n\
        # For details on the initramfs directive, see\n\
        initramfs initrd.img-7.3.4+deb13-arm64\n\
        [pi4]\n# Enable the audio output\ndtparam=audio=on\n";

    fn partition(config: &str, cmdline: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "bcm2837-rpi-3-b.dtb",
            "bcm2837-rpi-3-b-plus.dtb",
            "bcm2711-rpi-4-b.dtb",
            "bcm2712-rpi-5-b.dtb",
            "bcm2712-d-rpi-5-b.dtb",
            "vmlinuz-7.3.4+deb13-arm64",
            "initrd.img-7.3.4+deb13-arm64",
        ] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        fs::write(dir.path().join("config.txt"), config).unwrap();
        fs::write(dir.path().join("cmdline.txt"), cmdline).unwrap();
        dir
    }

    const CMDLINE: &str = "console=tty0 root=LABEL=RASPIROOT rw fsck.repair=yes rootwait\n";

    fn problems(dir: &Path) -> String {
        check(dir, "RASPIROOT").unwrap_err().to_string()
    }

    #[test]
    fn what_raspi_firmware_writes_boots_every_board() {
        let dir = partition(CONFIG, CMDLINE);
        check(dir.path(), "RASPIROOT").unwrap();
    }

    #[test]
    fn a_missing_pi5_tree_fails_naming_the_file() {
        let dir = partition(CONFIG, CMDLINE);
        fs::remove_file(dir.path().join("bcm2712-rpi-5-b.dtb")).unwrap();
        let err = problems(dir.path());
        assert!(
            err.contains(
                "bcm2712-rpi-5-b.dtb: the Pi 5's device tree is not on the boot partition"
            ),
            "{err}"
        );
        assert!(!err.contains("bcm2712-d-rpi-5-b.dtb"), "{err}");
        assert!(!err.contains("config.txt"), "{err}");

        fs::remove_file(dir.path().join("bcm2837-rpi-3-b.dtb")).unwrap();
        fs::remove_file(dir.path().join("bcm2837-rpi-3-b-plus.dtb")).unwrap();
        let err = problems(dir.path());
        assert!(err.contains("bcm2837-rpi-3-b*.dtb: the Pi 3's"), "{err}");
    }

    #[test]
    fn a_kernel_only_the_pi4_reads_fails_for_the_pi5_and_pi3() {
        let config = "arm_64bit=1\n[pi4]\nkernel=vmlinuz-7.3.4+deb13-arm64\n\
            initramfs initrd.img-7.3.4+deb13-arm64 followkernel\n";
        let err = problems(partition(config, CMDLINE).path());
        assert!(
            err.contains("config.txt: no `kernel=` in a section the Pi 5 reads ([all] or [pi5])"),
            "{err}"
        );
        assert!(
            err.contains("no `initramfs` in a section the Pi 3 reads"),
            "{err}"
        );
        assert!(!err.contains("the Pi 4 reads"), "{err}");

        // the same lines under [pi5] and after [all] cover every board
        let config = "[pi5]\nkernel=vmlinuz-7.3.4+deb13-arm64\n\
            [all]\narm_64bit=1\nkernel=vmlinuz-7.3.4+deb13-arm64\n\
            initramfs initrd.img-7.3.4+deb13-arm64\n";
        check(partition(config, CMDLINE).path(), "RASPIROOT").unwrap();
    }

    #[test]
    fn files_config_txt_names_must_be_on_the_partition() {
        let config = CONFIG.replace("kernel=vmlinuz-7.3.4", "kernel=vmlinuz-7.9.9")
            + "[pi5]\ndevice_tree=bcm2712-rpi-500.dtb\n";
        let err = problems(partition(&config, CMDLINE).path());
        assert!(
            err.contains(
                "vmlinuz-7.9.9+deb13-arm64: named by config.txt's `kernel=` for the Pi 5, not on the boot partition"
            ),
            "{err}"
        );
        assert!(
            err.contains("bcm2712-rpi-500.dtb: named by config.txt's `device_tree=` for the Pi 5"),
            "{err}"
        );
        assert!(!err.contains("device_tree=` for the Pi 4"), "{err}");
    }

    #[test]
    fn the_root_must_be_found_by_label() {
        let err = problems(partition(CONFIG, "console=tty0 root=/dev/mmcblk0p2 rw\n").path());
        assert!(
            err.contains("cmdline.txt: expected `root=LABEL=RASPIROOT`")
                && err.contains("`root=/dev/mmcblk0p2`"),
            "{err}"
        );
        let dir = partition(CONFIG, CMDLINE);
        fs::remove_file(dir.path().join("cmdline.txt")).unwrap();
        assert!(problems(dir.path()).contains("cmdline.txt: cannot read it"));
    }

    #[test]
    fn a_32_bit_start_on_the_pi4_is_refused() {
        let config = CONFIG.replace("arm_64bit=1\n", "");
        let err = problems(partition(&config, CMDLINE).path());
        assert!(err.contains("no `arm_64bit=1` for the Pi 4"), "{err}");
        assert!(!err.contains("for the Pi 5"), "{err}");
    }
}
