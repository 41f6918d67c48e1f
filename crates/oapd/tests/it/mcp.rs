//! MCP servers as capability sources, end to end: the real daemon, a real
//! MCP server (the official Python SDK over stdio, `tests/mcp/home_server.py`)
//! and the scripted fake Ollama. The server's tools are indexed beside the
//! bundled manifests, the right one is discovered and injected with its own
//! schema, called, and its result fed back; a server that dies mid-call is
//! a tool error and is restarted; a reload adds and removes servers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{self, fake, Daemon};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv python with the official MCP SDK (`cargo xtask test` installs
/// it); `None` (the test skips) without it, unless the run requires it.
fn sdk_python() -> Option<String> {
    let venv = repo().join("target/pyclients");
    let has_sdk = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("site-packages/mcp").is_dir());
    let python = venv.join("bin/python");
    if python.is_file() && has_sdk {
        return Some(python.display().to_string());
    }
    assert!(
        std::env::var("OAPD_REQUIRE_MCP_SERVERS").as_deref() != Ok("1"),
        "the MCP Python SDK is not installed in target/pyclients; `cargo xtask test` installs it"
    );
    eprintln!("skipped: the MCP Python SDK is not installed (run `cargo xtask test`)");
    None
}

fn home_server() -> String {
    repo()
        .join("tests/mcp/home_server.py")
        .display()
        .to_string()
}

/// The `mcp:` section running the home server as `name`.
fn home_section(name: &str, python: &str, pidfile: &Path) -> String {
    format!(
        "mcp:\n  init_timeout: 60\n  servers:\n    {name}:\n      command: {python:?}\n      \
         args: [{server:?}]\n      env: {{HOME_SERVER_PIDFILE: {pidfile:?}}}\n",
        server = home_server(),
    )
}

fn models() -> Script {
    Script::new().model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
}

/// The daemon with the home server as `home`, its model the fake Ollama
/// playing `script`; the state directory holds the server's pid file.
struct HomeDaemon {
    daemon: Daemon,
    upstream: support::Upstream,
    pidfile: PathBuf,
    _state: tempfile::TempDir,
}

fn home_daemon(python: &str, script: Script) -> HomeDaemon {
    let state = tempfile::tempdir().unwrap();
    let pidfile = state.path().join("home.pids");
    let upstream = fake(script);
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n{}",
            upstream.fake.url(),
            home_section("home", python, &pidfile)
        ))
        .start();
    HomeDaemon {
        daemon,
        upstream,
        pidfile,
        _state: state,
    }
}

/// Polls `probe` until it returns `Some`, or fails with the daemon's log.
fn wait_for<T>(daemon: &Daemon, what: &str, probe: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never happened; /v1/mcp/status: {}\n{}",
            daemon.get("/v1/mcp/status").json(),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The server's status entry once it is ready with its tools indexed.
fn wait_indexed(daemon: &Daemon, server: &str, tool: &str) -> Value {
    let id = format!("/v1/manifests/mcp/{server}/{tool}");
    wait_for(daemon, &format!("{server}/{tool} indexed"), || {
        let status = daemon.get("/v1/mcp/status").json();
        let entry = status["servers"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == server && s["state"] == "ready")?
            .clone();
        (daemon.get(&id).status == 200).then_some(entry)
    })
}

fn ndjson(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn offered(request: &Value) -> Vec<String> {
    oap_bridge::tool_loop::client_tool_names(request.as_object().unwrap())
}

/// The last message of the `n`th chat request the fake Ollama received:
/// after a tool round, the tool's result.
fn last_message_sent(upstream: &support::Upstream, n: usize) -> Value {
    let sent = upstream.fake.chat_requests();
    support::last_message(&sent[n])
}

/// A 200 answer, or the body in the failure.
fn assert_ok(response: &support::Response) {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
}

fn pids(pidfile: &Path) -> Vec<i32> {
    std::fs::read_to_string(pidfile)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie is reaped by the daemon soon.
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !status.is_empty() && !status.contains(") Z ")
}

#[test]
fn the_fitting_mcp_tool_is_injected_with_its_own_schema_called_and_fed_back() {
    let Some(python) = sdk_python() else { return };
    let HomeDaemon {
        daemon,
        upstream,
        pidfile: _,
        _state,
    } = home_daemon(
        &python,
        models()
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_get_forecast",
                json!({"city": "Lisbon", "days": "2"}),
            )]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let status = wait_indexed(&daemon, "home", "get_forecast");
    assert_eq!(status["transport"], "stdio");
    assert_eq!(status["tools"], 4, "{status}");

    // The record keeps the server's schema verbatim and says where it is.
    let record = daemon.get("/v1/manifests/mcp/home/get_forecast").json();
    let schema = record
        .pointer("/mcp/input_schema")
        .cloned()
        .unwrap_or_else(|| panic!("no MCP binding in {record}"));
    assert_eq!(schema["required"], json!(["city"]), "{schema}");
    let listed = daemon.get("/v1/manifests").json();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "mcp/home/get_forecast")
        .unwrap_or_else(|| panic!("not listed: {listed}"));
    assert_eq!(entry["source"], "mcp");
    assert_eq!(entry["domain"], "mcp/home");
    // Apps running their own loop see the source and the same schema.
    let tools = daemon
        .post_json(
            "/v1/tools",
            &json!({"task": "will it rain in Lisbon tomorrow?", "top_k": 3}).to_string(),
        )
        .json();
    let registered = &tools["registry"]["oap_get_forecast"];
    assert_eq!(registered["source"], "mcp", "{tools}");
    assert_eq!(registered["id"], "mcp/home/get_forecast");
    assert_eq!(registered["tool"]["function"]["parameters"], schema);

    let client_tool = json!({"type": "function", "function": {"name": "HassTurnOn",
        "description": "Turns on a device", "parameters": {"type": "object",
        "properties": {"name": {"type": "string"}}, "required": ["name"]}}});
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "tools": [client_tool],
                "messages": [{"role": "user", "content": "Will it rain in Lisbon over the next two days?"}]})
        .to_string(),
    );
    assert_ok(&response);
    let chunks = ndjson(&response.body);
    let done: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i]["done"] == true)
        .collect();
    assert_eq!(done, vec![chunks.len() - 1], "one final done: {chunks:#?}");

    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2, "one tool round, then the answer");
    let names = offered(&sent[0]);
    assert!(names.contains(&"oap_get_forecast".to_string()), "{names:?}");
    assert!(
        names.contains(&"HassTurnOn".to_string()),
        "the client's tool stays: {names:?}"
    );
    assert!(
        !names.contains(&"oap_reboot_hub".to_string()),
        "only what fits is injected: {names:?}"
    );
    // Injected with the server's own schema, untouched.
    let injected = sent[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "oap_get_forecast")
        .unwrap();
    assert_eq!(injected["function"]["parameters"], schema);
    // Called on the server (the string "2" coerced to the schema's integer),
    // and the result fed back as the tool message.
    let tool_message = support::last_message(&sent[1]);
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_name"], "oap_get_forecast");
    assert_eq!(
        tool_message["content"],
        "Forecast for Lisbon, 2 day(s): 14 C, rain 80 percent, wind 20 km/h"
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c.pointer("/message/content").and_then(Value::as_str))
        .collect();
    assert!(content.contains("rain 80 percent"), "{content}");

    // A task nothing fits injects none of the server's tools.
    let found = daemon
        .post_json(
            "/v1/discover",
            &json!({"task": "translate this poem into French"}).to_string(),
        )
        .json();
    assert!(
        found["match"].is_null()
            || !found["match"]["id"]
                .as_str()
                .unwrap_or("")
                .starts_with("mcp/"),
        "{found}"
    );
}

#[test]
fn a_server_that_dies_mid_call_is_a_tool_error_and_comes_back() {
    let Some(python) = sdk_python() else { return };
    let HomeDaemon {
        daemon,
        upstream,
        pidfile,
        _state,
    } = home_daemon(
        &python,
        models()
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_reboot_hub",
                json!({}),
            )]))
            .turn(Turn::echo(Echo::LastTool))
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_start_timer",
                json!({"minutes": 5}),
            )]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    wait_indexed(&daemon, "home", "reboot_hub");
    let first = pids(&pidfile);
    assert_eq!(first.len(), 1);

    let chat = |task: &str| {
        daemon.post_json(
            "/api/chat",
            &json!({"model": "qwen3:4b", "stream": false,
                    "messages": [{"role": "user", "content": task}]})
            .to_string(),
        )
    };
    assert_ok(&chat("Please reboot the home automation hub."));
    let tool_message = last_message_sent(&upstream, 1);
    assert_eq!(tool_message["role"], "tool");
    let text = tool_message["content"].as_str().unwrap();
    assert!(
        text.starts_with("Error"),
        "the crash is a tool error: {text}"
    );
    assert!(daemon.get("/health").status == 200);

    // The tools stay indexed while it restarts (no re-embedding, no
    // flicker); restarted with backoff: a new process, ready, serving.
    assert_eq!(daemon.get("/v1/manifests/mcp/home/start_timer").status, 200);
    wait_for(&daemon, "the server restarted", || {
        let status = daemon.get("/v1/mcp/status").json();
        let home = status["servers"][0].clone();
        (home["state"] == "ready" && home["restarts"].as_u64() >= Some(1)).then_some(())
    });
    let now = pids(&pidfile);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(!alive(first[0]), "the crashed server is gone");
    assert_ok(&chat("Set a kitchen timer for five minutes."));
    assert_eq!(
        last_message_sent(&upstream, 3)["content"],
        "timer set for 5 minutes"
    );
}

#[test]
fn a_servers_file_is_read_verbatim_a_bad_entry_is_reported_and_a_silent_server_delays_nothing() {
    let Some(python) = sdk_python() else { return };
    let state = tempfile::tempdir().unwrap();
    let pidfile = state.path().join("home.pids");
    let file = state.path().join("mcp-config.json");
    // The shape ollama-mcp-bridge and Claude Desktop read, with one broken
    // entry and one server that never answers `initialize`.
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "home": {"command": python, "args": [home_server()],
                     "env": {"HOME_SERVER_PIDFILE": pidfile}, "disabledTools": ["reboot_hub"]},
            "broken": {"args": ["no command"]},
            "silent": {"command": "sleep", "args": ["600"]}
        }})
        .to_string(),
    )
    .unwrap();
    let started = Instant::now();
    let daemon = support::daemon()
        .yaml(&format!(
            "mcp:\n  servers_file: {file:?}\n  init_timeout: 60\n"
        ))
        .start();
    // Ready long before the silent server's 60 s initialize deadline.
    assert!(started.elapsed() < Duration::from_secs(55));
    let home = wait_indexed(&daemon, "home", "get_forecast");
    assert_eq!(home["tools"], 3, "disabledTools hides reboot_hub: {home}");
    assert_eq!(daemon.get("/v1/manifests/mcp/home/reboot_hub").status, 404);
    let status = daemon.get("/v1/mcp/status").json();
    let problems = status["problems"].to_string();
    assert!(problems.contains("mcpServers.broken"), "{status}");
    let silent = status["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "silent")
        .cloned()
        .unwrap_or_default();
    assert_ne!(silent["state"], "ready", "{status}");
    let health = daemon.get("/health").json();
    assert!(
        health["mcp"]["servers"]
            .as_array()
            .is_some_and(|s| s.len() == 2),
        "{health}"
    );
}

#[test]
fn a_reload_removes_and_adds_servers_and_stops_the_removed_ones() {
    let Some(python) = sdk_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("home.pids");
    let section = home_section("home", &python, &pidfile);
    let daemon = support::daemon().in_dir(dir).yaml(&section).start();
    wait_indexed(&daemon, "home", "set_light");
    let first = pids(&pidfile);
    assert_eq!(first.len(), 1);

    let config = daemon.dir.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let base = text.strip_suffix(&section).unwrap().to_string();
    // Removed: its tools leave the index and its process is stopped.
    std::fs::write(&config, &base).unwrap();
    daemon.signal("HUP");
    wait_for(&daemon, "the home server removed", || {
        (daemon.get("/v1/manifests/mcp/home/set_light").status == 404 && !alive(first[0]))
            .then_some(())
    });
    // Added under another name: started, indexed.
    std::fs::write(
        &config,
        format!("{base}{}", home_section("house", &python, &pidfile)),
    )
    .unwrap();
    daemon.signal("HUP");
    wait_indexed(&daemon, "house", "set_light");
    assert_eq!(pids(&pidfile).len(), 2);
}

#[test]
fn an_edit_of_the_servers_file_applies_without_a_restart_or_signal() {
    let Some(python) = sdk_python() else { return };
    let state = tempfile::tempdir().unwrap();
    let pidfile = state.path().join("home.pids");
    let file = state.path().join("mcp-config.json");
    let servers = |names: &[&str]| {
        let entries: serde_json::Map<String, Value> = names
            .iter()
            .map(|name| {
                let entry = json!({"command": python, "args": [home_server()],
                                   "env": {"HOME_SERVER_PIDFILE": pidfile}});
                (name.to_string(), entry)
            })
            .collect();
        json!({"mcpServers": entries}).to_string()
    };
    std::fs::write(&file, servers(&["home"])).unwrap();
    let daemon = support::daemon()
        .yaml(&format!(
            "mcp:\n  servers_file: {file:?}\n  init_timeout: 60\n"
        ))
        .start();
    wait_indexed(&daemon, "home", "set_light");
    // A new version renamed over the old one, as editors and config tools do.
    let next = state.path().join("mcp-config.json.new");
    std::fs::write(&next, servers(&["garden"])).unwrap();
    std::fs::rename(&next, &file).unwrap();
    wait_indexed(&daemon, "garden", "set_light");
    wait_for(&daemon, "the home server removed", || {
        (daemon.get("/v1/manifests/mcp/home/set_light").status == 404).then_some(())
    });
    let pids = pids(&pidfile);
    assert_eq!(pids.len(), 2);
    wait_for(&daemon, "the home server's process stopped", || {
        (!alive(pids[0])).then_some(())
    });
}

#[test]
fn oapd_config_shows_the_servers_read_and_redacts_their_secrets() {
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("mcp-config.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "search": {"url": "https://mcp.search.example/mcp", "trust": "internet"},
            "nameless": {"env": {"A": "b"}}
        }})
        .to_string(),
    )
    .unwrap();
    let servers = json!({"notes": {"url": "http://notes.example/mcp",
        "headers": {"Authorization": "Bearer very-secret-token"}, "env": {"KEY": "hunter2"}}});
    let out = support::oapd()
        .args(["config"])
        .env("OAP_MCP_SERVERS_FILE", &file)
        .env("OAP_MCP_SERVERS", servers.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("# MCP servers read: 3"), "{text}");
    assert!(
        text.contains("#   time (stdio, \"stdio: uvx\", trust local)"),
        "{text}"
    );
    assert!(
        text.contains("#   search (http, \"https://mcp.search.example/mcp\", trust internet)"),
        "{text}"
    );
    assert!(text.contains("#   notes (http"), "{text}");
    assert!(
        text.contains("mcpServers.nameless"),
        "the bad entry is named: {text}"
    );
    assert!(
        !text.contains("very-secret-token") && !text.contains("hunter2"),
        "{text}"
    );

    // Not a JSON object: a config error naming the variable.
    let out = support::oapd()
        .args(["config"])
        .env("OAP_MCP_SERVERS", "[1, 2]")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("OAP_MCP_SERVERS"), "{text}");
}

#[test]
fn an_mcp_servers_tool_is_discovered_and_invoked_through_oapds_own_mcp_endpoint() {
    use crate::mcp_server::{call, post, result, tool_text};
    let Some(python) = sdk_python() else { return };
    let state = tempfile::tempdir().unwrap();
    let pidfile = state.path().join("home.pids");
    let daemon = support::daemon()
        .yaml(&home_section("home", &python, &pidfile))
        .start();
    wait_indexed(&daemon, "home", "get_forecast");
    let found = result(&post(
        &daemon,
        &[],
        &call(
            "oap_discover",
            json!({"task": "what is the weather forecast for Oslo?"}),
        ),
    ));
    let capabilities = found["structuredContent"]["capabilities"].to_string();
    assert!(capabilities.contains("mcp/home/get_forecast"), "{found}");
    // The same checks as a chat's call: the integer arrives coerced.
    let invoked = result(&post(
        &daemon,
        &[],
        &call(
            "oap_invoke",
            json!({"tool": "mcp/home/get_forecast", "arguments": {"city": "Oslo", "days": "3"}}),
        ),
    ));
    assert_eq!(
        tool_text(&invoked),
        (
            "Forecast for Oslo, 3 day(s): 14 C, rain 80 percent, wind 20 km/h".to_string(),
            false
        )
    );
    // A missing argument is a tool error naming it, before the server is asked.
    let invoked = result(&post(
        &daemon,
        &[],
        &call(
            "oap_invoke",
            json!({"tool": "mcp/home/set_light", "arguments": {"room": "hall"}}),
        ),
    ));
    let (text, is_error) = tool_text(&invoked);
    assert!(is_error, "{text}");
    assert!(text.contains("on"), "the missing argument is named: {text}");
}

#[test]
fn an_https_server_signed_by_the_operators_ca_is_indexed() {
    let Some(python) = sdk_python() else { return };
    let state = tempfile::tempdir().unwrap();
    let pki = oap_testkit::pki::Pki::new(&["127.0.0.1"]);
    let server = oap_testkit::script_server::ScriptServer::start_tls(
        &python,
        &repo().join("tests/mcp/echo_server.py"),
        &pki,
    );
    let ca_file = state.path().join("lan-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let daemon = support::daemon()
        .yaml(&format!(
            "tools:\n  ca_file: {ca_file:?}\nmcp:\n  init_timeout: 60\n  servers:\n    secure:\n      \
             url: \"https://127.0.0.1:{}/mcp\"\n      trust: local\n",
            server.port
        ))
        .start();
    let entry = wait_indexed(&daemon, "secure", "echo");
    assert_eq!(entry["transport"], "http", "{entry}");
    // Listed over TLS: its description came through.
    let manifest = daemon.get("/v1/manifests/mcp/secure/echo").json();
    assert!(
        manifest.to_string().contains("Echoes the text back"),
        "{manifest}"
    );
}

#[test]
fn a_reload_that_adds_the_operators_ca_reconnects_the_https_server() {
    let Some(python) = sdk_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pki = oap_testkit::pki::Pki::new(&["127.0.0.1"]);
    let server = oap_testkit::script_server::ScriptServer::start_tls(
        &python,
        &repo().join("tests/mcp/echo_server.py"),
        &pki,
    );
    let ca_file = dir.path().join("lan-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let section = format!(
        "mcp:\n  init_timeout: 60\n  servers:\n    secure:\n      \
         url: \"https://127.0.0.1:{}/mcp\"\n      trust: local\n",
        server.port
    );
    let daemon = support::daemon().in_dir(dir).yaml(&section).start();
    // Without the operator's CA the certificate is unknown: not connected.
    let refused = wait_for(&daemon, "the TLS failure reported", || {
        let status = daemon.get("/v1/mcp/status").json();
        let entry = status["servers"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "secure")?
            .clone();
        (entry["state"] != "ready" && !entry["last_error"].is_null()).then_some(entry)
    });
    assert_ne!(refused["state"], "ready", "{refused}");

    // The CA added to `tools:` and SIGHUP: the running hub reconnects the
    // URL server with the new roots, no restart of the daemon.
    let config = daemon.dir.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("tools:\n  ca_file: {ca_file:?}\n{text}")).unwrap();
    daemon.signal("HUP");
    let entry = wait_indexed(&daemon, "secure", "echo");
    assert_eq!(entry["transport"], "http", "{entry}");
}

#[test]
fn a_ca_file_without_a_certificate_stops_start_up_naming_the_key() {
    let state = tempfile::tempdir().unwrap();
    let ca_file = state.path().join("empty.pem");
    std::fs::write(&ca_file, "not a certificate\n").unwrap();
    let err = support::daemon()
        .yaml(&format!("tools:\n  ca_file: {ca_file:?}\n"))
        .try_start()
        .err()
        .expect("start-up must fail");
    assert!(err.contains("tools.ca_file"), "{err}");
}

#[test]
fn the_index_and_discover_commands_keep_the_mcp_servers_tools() {
    let Some(python) = sdk_python() else { return };
    let state = tempfile::tempdir().unwrap();
    let pidfile = state.path().join("home.pids");
    let config = state.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "embedding:\n  model_dir: {:?}\nindex:\n  data_dir: {:?}\n{}",
            oap_testkit::model::require_model(),
            state.path().join("data"),
            home_section("home", &python, &pidfile)
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = support::oapd()
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "oapd {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let task = "Will it rain in Paris tomorrow? Get me the weather forecast.";
    let found: Value = serde_json::from_str(&run(&["discover", "--json", task])).unwrap();
    assert_eq!(found["match"]["id"], "mcp/home/get_forecast", "{found}");
    // A forced rebuild from the command line keeps them too.
    let line = run(&["index", "--force"]);
    assert!(line.contains("manifests"), "{line}");
    let found: Value = serde_json::from_str(&run(&["discover", "--json", task])).unwrap();
    assert_eq!(found["match"]["id"], "mcp/home/get_forecast", "{found}");
    // The servers ran for the commands' life only.
    for pid in pids(&pidfile) {
        assert!(!alive(pid), "server {pid} outlived the command");
    }
}
