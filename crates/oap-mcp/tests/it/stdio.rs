//! stdio servers: the SDK's echo server, the hostile server and the npm
//! server-everything.

use std::time::Duration;

use oap_mcp::{HubSettings, State};
use serde_json::{json, Map, Value};

use crate::common::*;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn sdk_server_lists_and_calls_with_results_errors_and_images() {
    let Some(python) = sdk_python() else {
        available("the MCP Python SDK (target/pyclients)", false);
        return;
    };
    let hub = hub_with(HubSettings {
        init_timeout: SDK_START,
        ..settings()
    });
    let mut changes = hub.changes();
    hub.apply(vec![spec(
        "echo",
        json!({"command": python, "args": [script("echo_server.py"), "stdio"],
               "disabledTools": ["add"]}),
    )]);
    let s = wait_until_within(&hub, "echo", "ready", SDK_START, |s| {
        s.state == State::Ready
    })
    .await;
    assert_eq!(s.transport, "stdio");
    assert!(s.pid.is_some());
    assert!(changes.has_changed().unwrap());
    changes.borrow_and_update();

    let tools = hub.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"echo") && names.contains(&"fail") && names.contains(&"picture"));
    assert!(
        !names.contains(&"add"),
        "disabledTools hides add: {names:?}"
    );
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.id(), "mcp/echo/echo");
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(echo.input_schema["required"], json!(["text"]));
    assert!(echo.description.contains("Echoes"));
    assert_eq!(echo.content_hash.len(), 64);

    let out = hub
        .call("echo", "echo", args(json!({"text": "hi"})), None)
        .await;
    assert_eq!(out.text, "echo: hi");
    assert!(!out.is_error);

    let out = hub
        .call("echo", "fail", args(json!({"message": "boom"})), None)
        .await;
    assert!(out.is_error, "{out:?}");
    assert!(
        out.text.contains("boom") || out.text.contains("fail"),
        "{out:?}"
    );

    let out = hub.call("echo", "picture", Map::new(), None).await;
    assert!(!out.is_error);
    assert!(
        out.text.contains("a picture") && out.text.contains("[image: image/png, "),
        "{out:?}"
    );

    let out = hub
        .call("echo", "add", args(json!({"a": 1, "b": 2})), None)
        .await;
    assert!(out.is_error && out.text.contains("disabled"), "{out:?}");
    let out = hub.call("echo", "nope", Map::new(), None).await;
    assert!(out.is_error && out.text.contains("no tool"), "{out:?}");
    let out = hub.call("ghost", "echo", Map::new(), None).await;
    assert!(
        out.is_error && out.text.contains("no MCP server"),
        "{out:?}"
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn a_call_past_its_deadline_is_an_error_and_the_server_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("h", "normal", dir.path())]);
    wait_until(&hub, "h", "ready", |s| s.state == State::Ready).await;
    let out = hub
        .call("h", "hang", Map::new(), Some(Duration::from_millis(500)))
        .await;
    assert!(out.is_error);
    assert!(out.text.contains("timed out after 0.5 s"), "{out:?}");
    let cancelled = wait_file(&dir.path().join("cancelled")).await;
    let hanging = wait_file(&dir.path().join("hanging")).await;
    assert_eq!(
        cancelled.trim(),
        hanging.trim(),
        "the hung request was cancelled"
    );
    // The server still serves.
    let out = hub
        .call("h", "echo", args(json!({"text": "x"})), None)
        .await;
    assert_eq!(out.text, "normal:x");
    hub.shutdown().await;
}

#[tokio::test]
async fn dropping_a_call_sends_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("h", "normal", dir.path())]);
    wait_until(&hub, "h", "ready", |s| s.state == State::Ready).await;
    let caller = hub.clone();
    let call = tokio::spawn(async move { caller.call("h", "hang", Map::new(), None).await });
    let hanging = wait_file(&dir.path().join("hanging")).await;
    assert!(!dir.path().join("cancelled").exists());
    call.abort();
    let cancelled = wait_file(&dir.path().join("cancelled")).await;
    assert_eq!(cancelled.trim(), hanging.trim());
    hub.shutdown().await;
}

#[tokio::test]
async fn a_crash_mid_call_fails_that_call_and_the_server_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("h", "normal", dir.path())]);
    let first = wait_until(&hub, "h", "ready", |s| s.state == State::Ready).await;
    let out = hub.call("h", "crash", Map::new(), None).await;
    assert!(out.is_error, "{out:?}");
    assert!(
        out.text.contains("connection to the server was lost"),
        "{out:?}"
    );
    let again = wait_until(&hub, "h", "a restart", |s| {
        s.state == State::Ready && s.restarts >= 1
    })
    .await;
    assert_ne!(again.pid, first.pid);
    assert!(again.last_error.is_none());
    let out = hub
        .call("h", "echo", args(json!({"text": "back"})), None)
        .await;
    assert_eq!(out.text, "normal:back");
    hub.shutdown().await;
}

#[tokio::test]
async fn a_server_that_stops_answering_ping_is_restarted() {
    let dir = tempfile::tempdir().unwrap();
    // The ping's answer may take the init timeout: 2 s restarted the
    // well-behaved server too on a busy machine (an emulator starting
    // another test's server beside it), so "left alone" needs slack.
    let hub = hub_with(HubSettings {
        init_timeout: Duration::from_secs(10),
        ping_interval: Duration::from_millis(500),
        ..settings()
    });
    hub.apply(vec![
        hostile("deaf", "deaf", dir.path()),
        hostile("fine", "normal", dir.path()),
    ]);
    let first = wait_until(&hub, "deaf", "ready", |s| s.state == State::Ready).await;
    wait_until(&hub, "deaf", "a failed health check", |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("health check failed: no answer to ping"))
    })
    .await;
    wait_gone(first.pid.unwrap()).await;
    wait_until(&hub, "deaf", "a restart", |s| {
        s.state == State::Ready && s.restarts >= 1
    })
    .await;
    // A server that answers its pings is left alone.
    std::thread::sleep(Duration::from_secs(2));
    let fine = status(&hub, "fine");
    assert_eq!((fine.state, fine.restarts), (State::Ready, 0), "{fine:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn a_server_silent_at_initialize_does_not_delay_another() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub_with(HubSettings {
        init_timeout: Duration::from_secs(30),
        ..settings()
    });
    hub.apply(vec![
        hostile("mute", "silent", dir.path()),
        hostile("fine", "normal", dir.path()),
    ]);
    wait_until(&hub, "fine", "ready", |s| s.state == State::Ready).await;
    assert_eq!(status(&hub, "mute").state, State::Starting);
    assert_eq!(hub.tools().iter().filter(|t| t.server == "fine").count(), 7);
    hub.shutdown().await;

    // With a short deadline, the silent one goes to backoff and says why.
    let hub = hub_with(HubSettings {
        init_timeout: Duration::from_millis(500),
        ..settings()
    });
    hub.apply(vec![hostile("mute", "silent", dir.path())]);
    let s = wait_until(&hub, "mute", "an initialize timeout", |s| {
        s.last_error.is_some()
    })
    .await;
    assert!(
        s.last_error
            .as_deref()
            .unwrap()
            .contains("no answer to initialize within 0.5 s"),
        "{s:?}"
    );
    assert!(matches!(s.state, State::Backoff | State::Starting), "{s:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn list_changed_makes_the_hub_list_again() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("h", "normal", dir.path())]);
    wait_until(&hub, "h", "ready", |s| s.state == State::Ready).await;
    assert!(!hub.tools().iter().any(|t| t.name == "added"));
    let mut changes = hub.changes();
    changes.borrow_and_update();
    let out = hub.call("h", "bump", Map::new(), None).await;
    assert_eq!(out.text, "bumped");
    tokio::time::timeout(Duration::from_secs(30), changes.changed())
        .await
        .unwrap()
        .unwrap();
    wait_until(&hub, "h", "the new tool", |s| s.tools == 8).await;
    assert!(hub.tools().iter().any(|t| t.name == "added"));
    hub.shutdown().await;
}

#[tokio::test]
async fn apply_adds_restarts_changed_and_kills_removed_process_groups() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    let family = hostile("fam", "family", dir.path());
    hub.apply(vec![family.clone()]);
    wait_until(&hub, "fam", "ready", |s| s.state == State::Ready).await;
    let pids = wait_file(&dir.path().join("pids")).await;
    let pids: Vec<i32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(status(&hub, "fam").pid, Some(pids[0]));

    // Unchanged spec plus a new server: fam keeps running.
    hub.apply(vec![family.clone(), hostile("other", "normal", dir.path())]);
    wait_until(&hub, "other", "ready", |s| s.state == State::Ready).await;
    assert_eq!(status(&hub, "fam").pid, Some(pids[0]));

    // A changed spec restarts only that server.
    let other_pid = status(&hub, "other").pid;
    let mut changed = family.clone();
    changed.disabled_tools = vec!["crash".into()];
    hub.apply(vec![changed, hostile("other", "normal", dir.path())]);
    for pid in &pids {
        wait_gone(*pid).await;
    }
    let s = wait_until(&hub, "fam", "ready again", |s| s.state == State::Ready).await;
    assert_ne!(s.pid, Some(pids[0]));
    assert_eq!(status(&hub, "other").pid, other_pid);
    assert!(!hub
        .tools()
        .iter()
        .any(|t| t.server == "fam" && t.name == "crash"));

    // Removal kills the whole group, grandchild included.
    let text = std::fs::read_to_string(dir.path().join("pids")).unwrap();
    let second: Vec<i32> = text
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    hub.apply(vec![]);
    for pid in second {
        wait_gone(pid).await;
    }
    assert!(hub.status().is_empty());
    assert!(hub.tools().is_empty());
    if let Some(pid) = other_pid {
        wait_gone(pid).await;
    }
}

#[tokio::test]
async fn tool_lists_are_capped_and_odd_schemas_handled() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![
        hostile("huge", "huge", dir.path()),
        hostile("paged", "paged", dir.path()),
        hostile("schemas", "schemas", dir.path()),
    ]);
    let huge = wait_until(&hub, "huge", "ready", |s| s.state == State::Ready).await;
    assert_eq!(huge.tools, HubSettings::default().max_tools_per_server);
    assert!(
        huge.notes.iter().any(|n| n.contains("truncated")),
        "{huge:?}"
    );
    let paged = wait_until(&hub, "paged", "ready", |s| s.state == State::Ready).await;
    assert_eq!(paged.tools, HubSettings::default().max_list_pages);
    assert!(paged.notes.iter().any(|n| n.contains("pages")), "{paged:?}");
    let schemas = wait_until(&hub, "schemas", "ready", |s| s.state == State::Ready).await;
    let tools = hub.tools();
    let looped = tools
        .iter()
        .find(|t| t.server == "schemas" && t.name == "looped")
        .unwrap();
    assert_eq!(
        looped.input_schema["$defs"]["node"]["properties"]["next"]["$ref"],
        "#/$defs/node"
    );
    let stringy = tools.iter().find(|t| t.name == "stringy").unwrap();
    assert_eq!(stringy.input_schema, json!({"type": "object"}));
    assert!(
        schemas.notes.iter().any(|n| n.contains("stringy")),
        "{schemas:?}"
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn a_giant_stdout_line_is_dropped_not_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub_with(HubSettings {
        max_message_bytes: 1 << 20,
        ..settings()
    });
    hub.apply(vec![
        hostile("flood", "flood", dir.path()),
        hostile("noisy", "stderr", dir.path()),
    ]);
    wait_until(&hub, "flood", "ready", |s| s.state == State::Ready).await;
    wait_until(&hub, "noisy", "ready", |s| s.state == State::Ready).await;
    let out = hub
        .call("flood", "echo", args(json!({"text": "ok"})), None)
        .await;
    assert_eq!(out.text, "flood:ok");
    let out = hub
        .call("noisy", "echo", args(json!({"text": "ok"})), None)
        .await;
    assert_eq!(out.text, "stderr:ok");
    hub.shutdown().await;
}

#[tokio::test]
async fn an_answer_over_the_message_cap_fails_its_call_with_the_reason_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("big", "normal", dir.path())]);
    wait_until(&hub, "big", "ready", |s| s.state == State::Ready).await;
    // A deadline far beyond the test's patience: the call must end because
    // its answer was dropped, not because time ran out.
    let out = hub
        .call(
            "big",
            "giant",
            args(json!({})),
            Some(std::time::Duration::from_secs(600)),
        )
        .await;
    assert!(out.is_error, "{out:?}");
    assert!(out.text.contains("over the 8 MiB cap"), "{}", out.text);
    let out = hub
        .call("big", "echo", args(json!({"text": "still here"})), None)
        .await;
    assert_eq!(out.text, "normal:still here");
    assert_eq!(status(&hub, "big").restarts, 0);
    hub.shutdown().await;
}

#[tokio::test]
async fn a_lazy_server_starts_on_its_first_call() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    let mut lazy = hostile("lazy", "normal", dir.path());
    lazy.start = oap_mcp::Start::Lazy;
    hub.apply(vec![lazy]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = status(&hub, "lazy");
    assert_eq!((s.state, s.pid), (State::Starting, None));
    let out = hub
        .call("lazy", "echo", args(json!({"text": "wake"})), None)
        .await;
    assert_eq!(out.text, "normal:wake");
    hub.shutdown().await;
}

#[tokio::test]
async fn a_missing_command_backs_off() {
    let hub = hub();
    hub.apply(vec![spec(
        "ghost",
        json!({"command": "no-such-mcp-server-here"}),
    )]);
    let s = wait_until(&hub, "ghost", "an error", |s| s.last_error.is_some()).await;
    assert!(s.last_error.unwrap().contains("not found"));
    let out = hub.call("ghost", "x", Map::new(), None).await;
    assert!(out.is_error && out.text.contains("not ready"), "{out:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn npm_server_everything_over_stdio() {
    let Some(bin) = everything_bin() else {
        available(
            "@modelcontextprotocol/server-everything (target/mcp-node)",
            false,
        );
        return;
    };
    let hub = hub();
    hub.apply(vec![spec(
        "everything",
        json!({"command": bin, "args": ["stdio"]}),
    )]);
    wait_until(&hub, "everything", "ready", |s| s.state == State::Ready).await;
    let tools = hub.tools();
    let echo = tools
        .iter()
        .find(|t| t.name == "echo")
        .expect("an echo tool");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    let out = hub
        .call(
            "everything",
            "echo",
            args(json!({"message": "hello there"})),
            None,
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert!(out.text.contains("hello there"), "{out:?}");
    hub.shutdown().await;
}

#[tokio::test]
async fn dropping_the_last_hub_stops_its_servers() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    hub.apply(vec![hostile("fam", "family", dir.path())]);
    wait_until(&hub, "fam", "ready", |s| s.state == State::Ready).await;
    let pids = wait_file(&dir.path().join("pids")).await;
    let pids: Vec<i32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    drop(hub);
    for pid in pids {
        wait_gone(pid).await;
    }
}

#[tokio::test]
async fn removal_is_not_held_up_by_a_server_that_never_lists_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub_with(HubSettings {
        init_timeout: Duration::from_secs(300),
        ..settings()
    });
    hub.apply(vec![hostile("mute", "mutelist", dir.path())]);
    let pid: i32 = wait_file(&dir.path().join("listing"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert_eq!(status(&hub, "mute").state, State::Starting);
    hub.apply(vec![]);
    wait_gone(pid).await;
}

#[tokio::test]
async fn a_sandboxed_server_reads_only_its_paths_and_reaches_the_network_only_when_allowed() {
    let support = oap_sandbox::Support::probe();
    if !(support.filesystem() && support.seccomp && support.landlock_network()) {
        assert!(
            std::env::var("OAPD_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "the kernel lacks Landlock (with network rules) or seccomp and \
             OAPD_REQUIRE_SANDBOX=1: {support:?}"
        );
        eprintln!(
            "skipped: the kernel lacks Landlock (with network rules) or seccomp: {support:?}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "hidden").unwrap();
    let python = std::fs::canonicalize(which_python()).unwrap();
    // The interpreter's installation (bin/.., its standard library) and the
    // venv it may run from.
    let install = python.parent().unwrap().parent().unwrap().to_path_buf();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let boxed = |name: &str, network: bool| {
        spec(
            name,
            json!({"command": python3(),
                   "args": [script("hostile_server.py"), "normal"],
                   "sandbox": {"network": network,
                               "paths": [install, repo().join("tests/mcp"), repo().join("target/pyclients")]}}),
        )
    };
    let hub = hub();
    hub.apply(vec![boxed("closed", false), boxed("open", true)]);
    for name in ["closed", "open"] {
        let s = wait_until(&hub, name, "ready", |s| {
            s.state == State::Ready || s.state == State::Failed
        })
        .await;
        assert_eq!(s.state, State::Ready, "{s:?}");
    }
    let out = hub
        .call("closed", "echo", args(json!({"text": "in a box"})), None)
        .await;
    assert_eq!(out.text, "normal:in a box");
    let out = hub
        .call(
            "closed",
            "peek",
            args(json!({"path": secret.display().to_string()})),
            None,
        )
        .await;
    assert!(out.text.starts_with("refused:"), "{out:?}");
    let out = hub
        .call("closed", "connect", args(json!({"port": port})), None)
        .await;
    assert!(out.text.starts_with("refused:"), "{out:?}");
    let out = hub
        .call("open", "connect", args(json!({"port": port})), None)
        .await;
    assert_eq!(out.text, "connected");
    hub.shutdown().await;
}

fn which_python() -> String {
    let p = python3();
    if p.contains('/') {
        return p;
    }
    std::env::var("PATH")
        .unwrap()
        .split(':')
        .map(|d| format!("{d}/{p}"))
        .find(|c| std::path::Path::new(c).exists())
        .unwrap()
}
