//! Hostile tool arguments through the whole bridge: the scripted model calls
//! a local stdio tool with exactly the arguments an attacker would steer it
//! to, the real daemon runs the real program under the kernel sandbox, and
//! the model's next turn echoes what the tool returned.
//!
//! A check that needs a kernel feature the machine lacks prints why and
//! passes without asserting (README, "Security").

use crate::support;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn support_has(feature: &str) -> bool {
    let s = oap_sandbox::Support::probe();
    let ok = match feature {
        "landlock" => s.filesystem(),
        "seccomp" => s.seccomp,
        _ => unreachable!(),
    };
    if !ok {
        eprintln!("SKIPPED: the kernel lacks {feature}: {s:?}");
    }
    ok
}

/// One model turn per attack: call `tool` with `arguments`, then echo the
/// tool's result as the answer.
fn script(calls: &[(&str, Value)]) -> Script {
    let mut script = Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .check_host(true);
    for (tool, arguments) in calls {
        script = script
            .turn(Turn::chunks(vec![Chunk::tool_call(
                tool,
                arguments.clone(),
            )]))
            .turn(Turn::echo(Echo::LastTool));
    }
    script
}

fn daemon(upstream: &Upstream, extra_yaml: &str) -> Daemon {
    support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n{extra_yaml}",
            upstream.fake.url()
        ))
        .start()
}

/// The answer to one chat turn whose model calls a tool (every bundled tool
/// is offered: top_k 20).
fn tool_answer(daemon: &Daemon, task: &str) -> String {
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false, "oap_top_k": 20,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", response.error());
    response.json()["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A task that discovery answers with `tool` among the offered tools.
fn task_for(tool: &str) -> String {
    let program = tool.trim_start_matches("oap_");
    format!("use the {program} command on this input")
}

/// A mode-0600 file outside any scratch directory.
fn secret_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.txt");
    std::fs::write(&path, "token=the-secret-value\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

/// Runs the attacks of the security review through a daemon with `tools:`
/// settings `tools_yaml`; returns each answer and whether sed's `w` wrote
/// outside.
fn attacks(tools_yaml: &str) -> (Vec<String>, bool) {
    let (_secret_dir, secret) = secret_file();
    let outside = tempfile::tempdir().unwrap();
    let written = outside.path().join("written-by-sed");
    let calls = [
        ("oap_awk", json!({"args": "-v c=id 'BEGIN{system(c)}'"})),
        ("oap_sed", json!({"args": "'1e id'", "stdin": "x\n"})),
        (
            "oap_sed",
            json!({"args": format!("'w {}'", written.display()), "stdin": "x\n"}),
        ),
        ("oap_grep", json!({"args": format!("-r token {secret}")})),
        (
            "oap_jq",
            json!({"args": format!("-n --rawfile f {secret} '$f'")}),
        ),
    ];
    let upstream = fake(script(&calls));
    let daemon = daemon(&upstream, tools_yaml);
    let answers = calls
        .iter()
        .map(|(tool, arguments)| {
            let answer = tool_answer(&daemon, &task_for(tool));
            assert!(
                !answer.contains("was not called"),
                "{tool} {arguments}: {answer}"
            );
            answer
        })
        .collect();
    (answers, written.exists())
}

#[test]
fn interpreters_cannot_run_commands_write_or_read_outside() {
    if !support_has("seccomp") || !support_has("landlock") {
        return;
    }
    // Unconfined, every attack works: the checks below can tell.
    let (open, wrote) = attacks("tools:\n  sandbox: off\n");
    assert!(open[0].contains("uid="), "awk: {}", open[0]);
    assert!(open[1].contains("uid="), "sed e: {}", open[1]);
    assert!(wrote, "sed w: {}", open[2]);
    assert!(open[3].contains("the-secret-value"), "grep: {}", open[3]);
    assert!(open[4].contains("the-secret-value"), "jq: {}", open[4]);

    let (answers, wrote) = attacks("");
    for answer in &answers {
        assert!(!answer.contains("uid="), "a command ran: {answer}");
        assert!(
            !answer.contains("the-secret-value"),
            "a file leaked: {answer}"
        );
    }
    assert!(
        !wrote,
        "sed wrote outside its scratch directory: {}",
        answers[2]
    );
}

#[test]
fn the_tools_stay_useful_on_their_input() {
    let calls = [
        (
            "oap_awk",
            json!({"args": "'{print $2}'", "stdin": "a b c\nd e f\n"}),
        ),
        ("oap_sed", json!({"args": "s/cat/dog/", "stdin": "a cat\n"})),
        (
            "oap_jq",
            json!({"args": ".a.b", "stdin": "{\"a\":{\"b\":42}}"}),
        ),
        ("oap_grep", json!({"args": "-c x", "stdin": "x\ny\nx\n"})),
        ("oap_wc", json!({"args": "-w", "stdin": "one two three"})),
    ];
    let upstream = fake(script(
        &calls
            .iter()
            .cloned()
            .chain([("oap_man", json!({"args": "ls"}))])
            .collect::<Vec<_>>(),
    ));
    let daemon = daemon(&upstream, "");
    let expected = ["b\ne", "a dog", "42", "2", "3"];
    for ((tool, _), want) in calls.iter().zip(expected) {
        let answer = tool_answer(&daemon, &task_for(tool));
        assert_eq!(answer.trim(), want, "{tool}");
    }
    // man runs its formatting pipeline (it is in sandbox_spawn by default);
    // skipped where the machine has no manual pages.
    if std::path::Path::new("/usr/share/man/man1/ls.1.gz").exists() {
        let answer = tool_answer(&daemon, "show the manual page of the ls command");
        assert!(answer.contains("list directory contents"), "man: {answer}");
    }
    let health = daemon.get("/health").json();
    let sandbox = &health["tool_sandbox"];
    assert_eq!(sandbox["mode"], "auto", "{health}");
    assert!(
        sandbox["active"].as_array().is_some_and(|a| !a.is_empty()),
        "{health}"
    );
}

/// The answer of a daemon whose model calls the perl tool with `-e code`
/// (`extra_yaml` appended to the config).
fn run_perl(code: &str, extra_yaml: &str) -> String {
    let upstream = fake(script(&[(
        "oap_perl",
        json!({"args": format!("-e '{code}'")}),
    )]));
    let dir = support::perl_manifest_dir();
    let daemon = daemon(
        &upstream,
        &format!("manifests:\n  dirs: [{:?}]\n{extra_yaml}", dir.path()),
    );
    tool_answer(&daemon, "run a perl program")
}

#[test]
fn a_tool_cannot_reach_a_loopback_listener() {
    if !support_has("seccomp") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "use IO::Socket::INET; IO::Socket::INET->new(PeerAddr => q(127.0.0.1:{port})) \
         or die qq(no socket: $!\\n); print qq(connected\\n);"
    );
    let answer = run_perl(&code, "");
    assert!(answer.contains("no socket"), "{answer}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
}

/// Processes whose command line holds `marker` (this test's own).
fn processes_marked(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn a_grandchild_that_calls_setsid_dies_at_the_deadline() {
    if !support_has("seccomp") {
        return;
    }
    let marker = format!("oapd-sandbox-test-{}", std::process::id());
    // Child and grandchild (double fork), the grandchild tries to leave the
    // process group with setsid, ignores SIGTERM and sleeps on; the tool
    // itself outlives the one-second deadline too.
    let code = format!(
        "use POSIX (); $0 = q({marker}); \
         if (fork() == 0) {{ if (fork() == 0) {{ POSIX::setsid(); $SIG{{TERM}} = q(IGNORE); \
         $0 = q({marker}-grandchild); sleep 60; exit 0 }} exit 0 }} sleep 60;"
    );
    let answer = run_perl(
        &code,
        "tool_bridge:\n  stdio_timeout: 1\ntools:\n  sandbox_spawn: [perl]\n",
    );
    assert!(answer.contains("timed out"), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = processes_marked(&marker);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = processes_marked(&marker);
    }
    for pid in &left {
        // Ours, found by the marker: do not leave them behind.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "descendants survived the deadline: {left:?}"
    );
}

#[test]
fn require_mode_is_reported_and_off_mode_is_loud() {
    let upstream = fake(script(&[]));
    let daemon = daemon(&upstream, "tools:\n  sandbox: off\n");
    let health = daemon.get("/health").json();
    assert_eq!(health["tool_sandbox"]["mode"], "off", "{health}");
    assert_eq!(health["tool_sandbox"]["active"], json!([]), "{health}");
    assert!(
        daemon.log_text().contains("stdio tool sandbox incomplete"),
        "{}",
        daemon.log_text()
    );
}

/// A descriptor the daemon inherited without close-on-exec (here a pipe
/// this test holds when it starts the daemon) never reaches a tool.
#[test]
fn inherited_descriptors_stop_at_the_daemon() {
    // pipe(2) without O_CLOEXEC, as a careless parent process leaves it.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // /proc is readable only so that perl can list its own descriptors.
    let answer = run_perl(
        "opendir(my $d, q(/proc/self/fd)) or die; \
         print join(q( ), sort { $a <=> $b } grep { /^\\d+$/ } readdir($d))",
        "tools:\n  sandbox_read_paths: [/proc]\n",
    );
    drop((read_end, write_end));
    // 0-2, and the directory perl opened to list them.
    assert_eq!(answer.trim(), "0 1 2 3", "{answer}");
}

/// `tools.max_scratch_bytes` caps what a tool writes in all, across files
/// each within the per-file limit, and the result says the cap was hit.
#[test]
fn scratch_writes_stop_at_the_configured_cap() {
    let cap = 4 << 20;
    let answer = run_perl(
        "my $s = q(x) x 1048576; \
         for my $i (1..40) { open(my $f, q(>), qq(f$i)) or last; print $f $s; close($f) or last } \
         my $t = 0; $t += -s for glob(q(f*)); print qq(total $t\\n)",
        &format!("tools:\n  max_scratch_bytes: {cap}\n"),
    );
    assert!(
        answer.contains(&format!("reached its cap of {cap} bytes")),
        "{answer}"
    );
    if oap_sandbox::Support::probe().scratch_tmpfs {
        let total: u64 = answer
            .split_whitespace()
            .skip_while(|w| *w != "total")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no total: {answer}"));
        assert!(total <= cap, "{total} bytes written: {answer}");
    }
}
