//! Real programs under the real kernel: each test starts a process with the
//! confinement applied between fork and exec, exactly as the stdio executor
//! does, and checks what the kernel let it do. A test that needs a kernel
//! feature the machine lacks says so and passes without asserting.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use oap_sandbox::{Confinement, Mode, Policy, Support};

fn support() -> Support {
    Support::probe()
}

/// Runs `argv` in `scratch` under `policy`, stdin closed.
fn run(policy: &Policy, scratch: &Path, may_spawn: bool, argv: &[&str]) -> Output {
    let confinement =
        Confinement::prepare(policy, &support(), scratch, may_spawn).expect("prepare");
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .current_dir(scratch)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", scratch)
        .stdin(Stdio::null());
    // SAFETY: `enter` makes only async-signal-safe system calls.
    #[allow(
        unsafe_code,
        reason = "pre_exec is how the sandbox is entered, as in oap-exec"
    )]
    unsafe {
        cmd.pre_exec(move || confinement.enter());
    }
    cmd.output().expect("spawn")
}

fn text(out: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn confined() -> Policy {
    Policy {
        mode: Mode::Auto,
        extra_read_paths: Vec::new(),
        spawn_programs: Vec::new(),
    }
}

fn unconfined() -> Policy {
    Policy {
        mode: Mode::Off,
        ..confined()
    }
}

/// Whether the kernel has `what`; without it the test skips itself, or
/// fails where `OAPD_REQUIRE_SANDBOX=1` says every attack must be shown
/// denied (the arm64 guest sets it: a quiet skip would pass there).
fn need(feature: bool, what: &str) -> bool {
    if !feature {
        assert!(
            std::env::var("OAPD_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "the kernel lacks {what} and OAPD_REQUIRE_SANDBOX=1: {:?}",
            support()
        );
        eprintln!("SKIPPED: the kernel lacks {what}: {:?}", support());
    }
    feature
}

/// A mode-0600 file outside the scratch directory.
fn secret() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, "the-secret-value\n").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (dir, path)
}

#[test]
fn awk_system_does_not_start_a_command() {
    if !need(support().seccomp, "seccomp") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let argv = ["awk", "-v", "c=id", "BEGIN{system(c)}"];
    // Without the sandbox the attack works: the test can tell.
    let open = run(&unconfined(), scratch.path(), false, &argv);
    assert!(text(&open).contains("uid="), "{}", text(&open));
    let out = run(&confined(), scratch.path(), false, &argv);
    assert!(!text(&out).contains("uid="), "{}", text(&out));
}

#[test]
fn sed_can_neither_run_a_command_nor_write_outside_its_scratch_dir() {
    if !need(
        support().seccomp && support().filesystem(),
        "seccomp and Landlock",
    ) {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("written-by-sed");
    let input = scratch.path().join("in.txt");
    std::fs::write(&input, "x\n").unwrap();
    let out = run(
        &confined(),
        scratch.path(),
        false,
        &["sed", "1e id", "in.txt"],
    );
    assert!(!text(&out).contains("uid="), "{}", text(&out));
    let w = format!("w {}", target.display());
    let out = run(&confined(), scratch.path(), false, &["sed", &w, "in.txt"]);
    assert!(!target.exists(), "sed wrote outside: {}", text(&out));
    // Inside the scratch directory writing works.
    let out = run(
        &confined(),
        scratch.path(),
        false,
        &["sed", "w inside.txt", "in.txt"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(scratch.path().join("inside.txt")).unwrap(),
        "x\n"
    );
}

#[test]
fn files_outside_the_system_paths_cannot_be_read() {
    if !need(support().filesystem(), "Landlock") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let (_dir, secret) = secret();
    let secret = secret.to_str().unwrap();
    let open = run(
        &unconfined(),
        scratch.path(),
        false,
        &["grep", "-r", "secret", secret],
    );
    assert!(text(&open).contains("the-secret-value"));
    for argv in [
        vec!["grep", "-r", "secret", secret],
        vec!["jq", "-n", "--rawfile", "f", secret, "$f"],
        vec!["cat", secret],
        vec!["grep", "-r", "root", "/etc/shadow", "/root", "/home"],
    ] {
        let out = run(&confined(), scratch.path(), false, &argv);
        let shown = text(&out);
        assert!(out.stdout.is_empty(), "{argv:?}: {shown}");
        assert!(shown.contains("Permission denied"), "{argv:?}: {shown}");
    }
    // What tools need still works: the loader, libraries, locale data.
    let out = run(&confined(), scratch.path(), false, &["jq", "-n", "1+1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2",
        "{}",
        text(&out)
    );
}

#[test]
fn no_socket_reaches_a_loopback_listener() {
    if !need(support().seccomp, "seccomp") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let scratch = tempfile::tempdir().unwrap();
    let script = format!(
        "use IO::Socket::INET; my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:{port}') \
         or die \"no socket: $!\\n\"; print \"connected\\n\";"
    );
    let out = run(&confined(), scratch.path(), false, &["perl", "-e", &script]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("connected\n"), "{}", text(&out));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
    // Control: unconfined, the same script connects.
    let open = run(
        &unconfined(),
        scratch.path(),
        false,
        &["perl", "-e", &script],
    );
    assert!(text(&open).contains("connected"), "{}", text(&open));
}

#[test]
fn processes_are_refused_unless_allowed_and_nothing_leaves_the_group() {
    if !need(support().seccomp, "seccomp") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let fork = "my $p = fork(); if (!defined $p) { print \"fork refused\\n\"; exit 0 } \
                if ($p == 0) { exit 0 } waitpid($p, 0); print \"forked\\n\";";
    let out = run(&confined(), scratch.path(), false, &["perl", "-e", fork]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "fork refused\n",
        "{}",
        text(&out)
    );
    let out = run(&confined(), scratch.path(), true, &["perl", "-e", fork]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "forked\n",
        "{}",
        text(&out)
    );
    // Even a program allowed to start processes cannot leave its group.
    // POSIX::setsid answers -1 on failure, setpgid undef.
    let setsid = "use POSIX (); my $r = POSIX::setsid() // -1; \
                  print $r == -1 ? \"setsid refused\\n\" : \"new session\\n\";";
    let out = run(&confined(), scratch.path(), true, &["perl", "-e", setsid]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "setsid refused\n",
        "{}",
        text(&out)
    );
    let setpgid = "use POSIX (); my $r = POSIX::setpgid(0, 0) // -1; \
                   print $r == -1 ? \"setpgid refused\\n\" : \"new group\\n\";";
    let out = run(&confined(), scratch.path(), true, &["perl", "-e", setpgid]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "setpgid refused\n",
        "{}",
        text(&out)
    );
}

#[test]
fn threads_still_work_without_process_creation() {
    if !need(support().seccomp, "seccomp") {
        return;
    }
    // `sort --parallel` starts threads with clone3 (answered ENOSYS, so the
    // C library falls back to clone with CLONE_THREAD, which is allowed).
    let scratch = tempfile::tempdir().unwrap();
    let input = scratch.path().join("numbers");
    let numbers: String = (0..200_000).rev().map(|n| format!("{n}\n")).collect();
    std::fs::write(&input, numbers).unwrap();
    let out = run(
        &confined(),
        scratch.path(),
        false,
        &["sort", "-n", "--parallel=2", "-S", "1M", "numbers"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let mut first = String::new();
    out.stdout
        .as_slice()
        .take(8)
        .read_to_string(&mut first)
        .unwrap();
    assert!(first.starts_with("0\n1\n2\n"), "{first:?}");
}

#[test]
fn require_mode_refuses_when_a_protection_is_missing() {
    let scratch = tempfile::tempdir().unwrap();
    let lacking = Support {
        landlock_abi: 0,
        landlock_unavailable: Some("test".into()),
        seccomp: true,
        seccomp_unavailable: None,
        ..support()
    };
    let policy = Policy {
        mode: Mode::Require,
        ..confined()
    };
    let err = Confinement::prepare(&policy, &lacking, scratch.path(), false).unwrap_err();
    assert!(err.to_string().contains("Landlock"), "{err}");
    assert!(!lacking.missing(Mode::Auto).is_empty());
    assert!(!support().active(Mode::Auto).is_empty());
}
