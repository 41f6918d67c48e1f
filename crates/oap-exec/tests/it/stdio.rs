//! stdio execution with real commands.

use crate::common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use oap_exec::{ExecPolicy, Executor, StdioLimits, Trust};
use serde_json::json;

fn tool(cmd: &str) -> oap_manifest::Manifest {
    raw_manifest(json!({
        "oap": "1.0", "name": cmd, "description": "test command",
        "input": {"format": "text/plain", "description": "stdin"},
        "invoke": {"method": "stdio", "url": cmd}
    }))
}

fn exec_with(policy: ExecPolicy) -> Executor {
    Executor::new(policy).unwrap()
}

/// The sandbox as configured by default, except that `sh` may start
/// processes (these tests use it to make descendants).
fn sandbox() -> oap_sandbox::Policy {
    oap_sandbox::Policy {
        spawn_programs: vec!["sh".into()],
        ..oap_sandbox::Policy::default()
    }
}

fn exec() -> Executor {
    exec_with(ExecPolicy {
        stdio_timeout: Duration::from_secs(5),
        sandbox: sandbox(),
        ..ExecPolicy::default()
    })
}

/// Whether a pid is gone (or a zombie nobody has reaped yet: not running).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

async fn wait_gone(pid: u32) -> bool {
    for _ in 0..50 {
        if process_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn echo_cat_wc_grep() {
    let e = exec();
    let out = e
        .execute(
            &tool("echo"),
            Trust::Local,
            &args(json!({"args": "hello   'big world'"})),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.content, "hello big world\n");

    let out = e
        .execute(
            &tool("cat"),
            Trust::Local,
            &args(json!({"stdin": "line 1\nline 2\n"})),
        )
        .await;
    assert_eq!(out.content, "line 1\nline 2\n");

    let out = e
        .execute(
            &tool("wc"),
            Trust::Local,
            &args(json!({"args": "-l", "stdin": "a\nb\nc\n"})),
        )
        .await;
    assert_eq!(out.content.trim(), "3");

    let text = "connection refused\nok\nconnection reset\n";
    let out = e
        .execute(
            &tool("grep"),
            Trust::Local,
            &args(json!({"args": "'connection re'", "stdin": text})),
        )
        .await;
    assert!(out.ok);
    assert_eq!(out.content, "connection refused\nconnection reset\n");

    // No match: exit 1 with empty stderr is a normal, empty result.
    let out = e
        .execute(
            &tool("grep"),
            Trust::Local,
            &args(json!({"args": "nothing-here", "stdin": text})),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.content, "(no output; exit status 1, e.g. no match)");

    // A real error: exit 2 with a message on stderr.
    let out = e
        .execute(
            &tool("grep"),
            Trust::Local,
            &args(json!({"args": "-E '('", "stdin": text})),
        )
        .await;
    assert!(!out.ok);
    assert!(
        out.content
            .starts_with("Error: `grep` failed (exit status 2):"),
        "{}",
        out.content
    );

    // args as a JSON array, passed verbatim.
    let out = e
        .execute(
            &tool("echo"),
            Trust::Local,
            &args(json!({"args": ["-n", "a  b", "$HOME"]})),
        )
        .await;
    assert_eq!(out.content, "a  b $HOME");
}

#[tokio::test]
async fn shell_syntax_is_passed_literally() {
    let e = exec();
    let out = e
        .execute(
            &tool("echo"),
            Trust::Local,
            &args(json!({"args": "$(rm -rf /) ; | `id` && $HOME ~ *.rs > out '$(id)' \"`id`\""})),
        )
        .await;
    assert!(out.ok);
    assert_eq!(
        out.content,
        "$(rm -rf /) ; | `id` && $HOME ~ *.rs > out $(id) `id`\n"
    );
}

#[tokio::test]
async fn environment_is_cleared_and_workdir_is_fresh_and_removed() {
    let e = exec();
    let out = e
        .execute(&tool("env"), Trust::Local, &args(json!({})))
        .await;
    assert!(out.ok);
    let mut keys: Vec<&str> = out
        .content
        .lines()
        .map(|l| l.split('=').next().unwrap())
        .filter(|k| *k != "TZ")
        .collect();
    keys.sort();
    assert_eq!(keys, ["HOME", "LANG", "PATH", "TMPDIR"], "{}", out.content);
    assert!(out.content.contains("PATH=/usr/bin:/bin:/usr/local/bin\n"));
    assert!(out.content.contains("LANG=C.UTF-8\n"));

    let out = e
        .execute(&tool("pwd"), Trust::Local, &args(json!({})))
        .await;
    let dir = PathBuf::from(out.content.trim());
    assert!(dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("oapd-tool-"));
    assert!(!dir.exists(), "work dir {dir:?} was not removed");
}

#[tokio::test]
async fn rlimits_are_applied() {
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            cpu_secs: 7,
            max_open_files: 33,
            max_file_bytes: 1024 * 1024,
            ..StdioLimits::default()
        },
        ..ExecPolicy::default()
    });
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": "-c 'ulimit -t; ulimit -n; ulimit -c; ulimit -f; ulimit -v'"})),
        )
        .await;
    assert!(out.ok, "{out:?}");
    let lines: Vec<&str> = out.content.lines().collect();
    // dash reports -f in 512-byte blocks and -v in KiB.
    assert_eq!(
        lines,
        ["7", "33", "0", "2048", "1048576"],
        "{}",
        out.content
    );
}

#[tokio::test]
async fn sleep_is_killed_at_the_timeout() {
    let e = exec_with(ExecPolicy {
        stdio_timeout: Duration::from_secs(1),
        ..ExecPolicy::default()
    });
    let started = Instant::now();
    let out = e
        .execute(&tool("sleep"), Trust::Local, &args(json!({"args": "100"})))
        .await;
    assert!(!out.ok);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        out.content,
        "Error: `sleep` timed out after 1s; it and everything it started were killed."
    );
}

#[tokio::test]
async fn grandchildren_die_with_the_timeout() {
    let e = exec_with(ExecPolicy {
        stdio_timeout: Duration::from_secs(1),
        sandbox: sandbox(),
        ..ExecPolicy::default()
    });
    // The pid reaches us as the partial output of the timed-out call (the
    // sandbox lets the tool write nowhere but its scratch directory).
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": ["-c", "sleep 100 & echo $!; wait"]})),
        )
        .await;
    assert!(!out.ok);
    assert!(out.content.contains("timed out"), "{}", out.content);
    let pid: u32 = out
        .content
        .rsplit("Partial output:")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid).await, "grandchild {pid} survived");
}

#[tokio::test]
async fn abandoning_the_call_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    // The kill of a dropped call does not depend on the sandbox; without it
    // the tool can leave its pid in a file for the test to read.
    let e = exec_with(ExecPolicy {
        stdio_timeout: Duration::from_secs(5),
        sandbox: oap_sandbox::Policy {
            mode: oap_sandbox::Mode::Off,
            ..sandbox()
        },
        ..ExecPolicy::default()
    });
    let script = format!("sleep 100 & echo $! > {}; wait", pidfile.display());
    let a = args(json!({"args": ["-c", script]}));
    let m = tool("sh");
    let call = e.execute(&m, Trust::Local, &a);
    // The caller gives up (e.g. the client disconnected): the future is dropped.
    assert!(tokio::time::timeout(Duration::from_millis(500), call)
        .await
        .is_err());
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(pid).await,
        "grandchild {pid} survived the dropped call"
    );
}

#[tokio::test]
async fn background_leftovers_die_when_the_command_exits() {
    let e = exec();
    let started = Instant::now();
    // The background sleep keeps stdout open; the call must not wait for it.
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": "-c 'sleep 100 & echo $!'"})),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let pid: u32 = out.content.trim().parse().unwrap();
    assert!(wait_gone(pid).await, "background child {pid} survived");
}

#[tokio::test]
async fn output_flood_is_capped_quickly() {
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            max_output_bytes: 64 * 1024,
            ..StdioLimits::default()
        },
        ..ExecPolicy::default()
    });
    let started = Instant::now();
    let out = e
        .execute(&tool("yes"), Trust::Local, &args(json!({})))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(out.ok, "{}", &out.content[out.content.len() - 100..]);
    assert!(out.content.starts_with("y\ny\ny\n"));
    // 16,000 characters for the model, then the notes.
    assert!(
        out.content.ends_with("more characters]"),
        "{}",
        &out.content[15_900..]
    );
    assert!(out.detail.unwrap().contains("stdout capped"));
}

#[tokio::test]
async fn stdin_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            max_stdin_bytes: 1024,
            ..StdioLimits::default()
        },
        ..ExecPolicy::default()
    });
    let script = format!("touch {}; cat", marker.display());
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": ["-c", script], "stdin": "x".repeat(2048)})),
        )
        .await;
    assert!(!out.ok);
    assert_eq!(out.content, "Error: stdin is 2048 bytes; the limit is 1024");
    assert!(!marker.exists());
    // A tool that never reads its (allowed) stdin does not hang or fail.
    let out = e
        .execute(
            &tool("echo"),
            Trust::Local,
            &args(json!({"args": "done", "stdin": "x".repeat(1000)})),
        )
        .await;
    assert_eq!(out.content, "done\n");
}

#[tokio::test]
async fn remote_manifests_may_not_run_commands() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let e = exec();
    for trust in [Trust::Lan, Trust::Internet] {
        let out = e
            .execute(
                &tool("touch"),
                trust,
                &args(json!({"args": marker.display().to_string()})),
            )
            .await;
        assert!(!out.ok);
        assert_eq!(
            out.content,
            format!(
                "Error: refusing to run \"touch\": command-line tools run only from local \
                 manifests (this one is {trust})"
            )
        );
    }
    assert!(!marker.exists());
}

#[tokio::test]
async fn commands_outside_allowed_dirs_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("allowed");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let write_script = |p: &Path| {
        std::fs::write(p, "#!/bin/sh\necho from-script \"$@\"\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_script(&allowed.join("good"));
    write_script(&outside.join("evil"));
    std::os::unix::fs::symlink(outside.join("evil"), allowed.join("link-out")).unwrap();
    std::fs::write(allowed.join("not-exec"), "#!/bin/sh\n").unwrap();
    std::fs::create_dir(allowed.join("subdir")).unwrap();
    let e = exec_with(ExecPolicy {
        stdio_dirs: vec![allowed.clone()],
        ..ExecPolicy::default()
    });
    let run = |cmd: String| {
        let e = &e;
        async move {
            e.execute(&tool(&cmd), Trust::Local, &args(json!({"args": "x"})))
                .await
        }
    };
    let out = run("good".into()).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.content, "from-script x\n");
    let out = run(allowed.join("good").display().to_string()).await;
    assert_eq!(out.content, "from-script x\n");

    let refusals = [
        ("evil".to_string(), "not found in the allowed directories"),
        (
            outside.join("evil").display().to_string(),
            "not in an allowed directory",
        ),
        ("link-out".to_string(), "outside the allowed directories"),
        ("not-exec".to_string(), "not executable"),
        (
            format!("{}/../outside/evil", allowed.display()),
            "`.` and `..`",
        ),
        (
            "../outside/evil".to_string(),
            "bare name or an absolute path",
        ),
        ("echo".to_string(), "not found in the allowed directories"),
        ("/usr/bin/echo".to_string(), "not in an allowed directory"),
        ("good --help".to_string(), "without arguments"),
        ("subdir".to_string(), "not a regular file"),
        (allowed.display().to_string(), "not in an allowed directory"),
    ];
    for (cmd, why) in refusals {
        let out = run(cmd.clone()).await;
        assert!(!out.ok, "{cmd}");
        assert!(
            out.content
                .starts_with(&format!("Error: refusing to run {cmd:?}"))
                && out.content.contains(why),
            "{cmd}: {}",
            out.content
        );
    }
}

#[tokio::test]
async fn nonzero_exit_reports_stderr() {
    let e = exec();
    let out = e
        .execute(
            &tool("ls"),
            Trust::Local,
            &args(json!({"args": "/nonexistent-oapd-test"})),
        )
        .await;
    assert!(!out.ok);
    assert!(
        out.content
            .starts_with("Error: `ls` failed (exit status 2):"),
        "{}",
        out.content
    );
    assert!(out.content.contains("nonexistent-oapd-test"));
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": "-c 'kill -9 $$'"})),
        )
        .await;
    assert!(!out.ok);
    assert!(
        out.content.contains("killed by signal 9 (SIGKILL)"),
        "{}",
        out.content
    );
    let out = e
        .execute(
            &tool("echo"),
            Trust::Local,
            &args(json!({"args": "'unterminated"})),
        )
        .await;
    assert_eq!(
        out.content,
        "Error: invalid arguments: unterminated ' quote in arguments"
    );
}

/// The daemon may hold descriptors it inherited without close-on-exec (a
/// pipe from whatever started it): none of them reaches a tool.
#[tokio::test]
async fn inherited_descriptors_do_not_reach_the_tool() {
    // pipe(2) without O_CLOEXEC, as a careless parent process leaves it.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    let held = [read_end.as_raw_fd(), write_end.as_raw_fd()];
    let e = exec_with(ExecPolicy {
        sandbox: oap_sandbox::Policy {
            // Only so that `ls` may list its own descriptors.
            extra_read_paths: vec![PathBuf::from("/proc")],
            ..sandbox()
        },
        ..ExecPolicy::default()
    });
    let out = e
        .execute(
            &tool("ls"),
            Trust::Local,
            &args(json!({"args": ["/proc/self/fd"]})),
        )
        .await;
    assert!(out.ok, "{out:?}");
    let fds: Vec<i32> = out.content.lines().map(|l| l.parse().unwrap()).collect();
    // 0-2, and the directory `ls` itself opened to list them.
    assert_eq!(
        fds,
        [0, 1, 2, 3],
        "the daemon held {held:?}; the tool saw {fds:?}"
    );
    drop((read_end, write_end));
}

/// Many files, each within RLIMIT_FSIZE, add up past the scratch cap: the
/// writes stop at the cap and the result says so.
#[tokio::test]
async fn scratch_writes_stop_at_the_cap() {
    let support = oap_sandbox::Support::probe();
    if !support.scratch_tmpfs {
        eprintln!(
            "SKIPPED (the watched cap is tested below): no tmpfs: {:?}",
            support.scratch_tmpfs_unavailable
        );
        return;
    }
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            max_scratch_bytes: 4 << 20,
            ..StdioLimits::default()
        },
        sandbox: sandbox(),
        ..ExecPolicy::default()
    });
    // 40 files of 1 MiB; `du` reports what the scratch directory holds.
    let script = "i=0; while [ $i -lt 40 ]; do head -c 1048576 /dev/zero > f$i 2>/dev/null; \
                  i=$((i+1)); done; du -sk .";
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": ["-c", script]})),
        )
        .await;
    let used_kib: u64 = out
        .content
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no du figure: {out:?}"));
    assert!(used_kib <= 4 * 1024, "{used_kib} KiB written: {out:?}");
    assert!(
        out.content.contains("reached its cap of 4194304 bytes"),
        "{out:?}"
    );
}

/// Where the daemon may not mount (not root), the scratch directory's size
/// is watched: the tool is stopped past the cap and the result says so.
#[tokio::test]
async fn scratch_past_the_cap_is_stopped_without_a_tmpfs() {
    let support = oap_sandbox::Support {
        scratch_tmpfs: false,
        ..oap_sandbox::Support::probe()
    };
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            max_scratch_bytes: 4 << 20,
            ..StdioLimits::default()
        },
        stdio_timeout: Duration::from_secs(5),
        sandbox: sandbox(),
        ..ExecPolicy::default()
    })
    .with_sandbox_support(support);
    // Writes 1 MiB files for as long as it is let: only the cap stops it.
    let script = "i=0; while :; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done";
    let out = e
        .execute(
            &tool("sh"),
            Trust::Local,
            &args(json!({"args": ["-c", script]})),
        )
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(!out.content.contains("timed out"), "{out:?}");
    assert!(
        out.content.contains("reached its cap of 4194304 bytes"),
        "{out:?}"
    );
}

/// Processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
        .filter(|e| {
            let pid: u32 = e.file_name().to_string_lossy().parse().unwrap();
            !process_gone(pid)
        })
        .count()
}

/// Root is exempt from RLIMIT_NPROC; a daemon running as root runs each
/// tool as a uid of its own, so a tool allowed to spawn still stops at
/// `max_processes`, and the kill at the end takes every one of them.
#[tokio::test]
async fn spawning_is_bounded_when_the_daemon_is_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: not root; RLIMIT_NPROC binds the daemon's own user");
        return;
    }
    let limit = 16;
    let e = exec_with(ExecPolicy {
        stdio_limits: StdioLimits {
            max_processes: limit,
            ..StdioLimits::default()
        },
        stdio_timeout: Duration::from_secs(3),
        sandbox: sandbox(),
        ..ExecPolicy::default()
    });
    // A distinctive command line, so that only this test's sleeps count.
    let marker = ["sleep", "4242.5"];
    let script = "id -u; i=0; while [ $i -lt 200 ]; do sleep 4242.5 & i=$((i+1)); done; \
                  echo spawned $i; wait";
    let a = args(json!({"args": ["-c", script]}));
    let m = tool("sh");
    let call = e.execute(&m, Trust::Local, &a);
    tokio::pin!(call);
    let mut most = 0;
    let out = loop {
        tokio::select! {
            out = &mut call => break out,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                most = most.max(processes_running(&marker));
            }
        }
    };
    assert!(!out.content.contains("spawned 200"), "{out:?}");
    // The shell itself counts against the limit too.
    assert!(most < limit as usize, "{most} sleeps at once: {out:?}");
    let uid: u32 = out
        .content
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no uid: {out:?}"));
    assert!(uid >= oap_sandbox::CALL_UID_BASE, "ran as uid {uid}");
    for _ in 0..50 {
        if processes_running(&marker) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} sleeps outlived the call", processes_running(&marker));
}
