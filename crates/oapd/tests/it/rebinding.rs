//! DNS rebinding against a daemon listening on every address: a page whose
//! name was pointed at the machine's LAN address reaches oapd with its own
//! name as Host and its own `http://<Host>` as Origin. Neither the bearer
//! token nor a `server.trusted_clients` address may let it in, on any route
//! family, for simple requests (a `text/plain` POST, a GET) and preflights
//! alike; the machine's LAN IP, its `<hostname>.local` name and a name the
//! operator listed in `server.allowed_hosts` are served. The LAN addresses
//! exist only inside a network namespace the test makes.

use crate::support;

use std::net::{IpAddr, SocketAddr};

use oap_testkit::http::{request_bytes, send_raw_from};
use oap_testkit::netns::{self, Netns};

/// The daemon's LAN address inside the namespace.
const LAN_IP: &str = "10.78.9.1";
/// A client address listed in `server.trusted_clients`.
const TRUSTED_IP: &str = "10.78.9.2";
/// A client address that is not.
const STRANGER_IP: &str = "10.78.9.3";
const PORT: u16 = 18379;
const TOKEN: &str = "rebinding-test-token-0123456789abcdef";
/// A name the operator lists in `server.allowed_hosts`.
const OPERATOR_NAME: &str = "oapd.example.org";

/// One request per route family: the method a page would use and a body
/// it may send as `text/plain` without a preflight.
const ROUTES: &[(&str, &str, &str)] = &[
    (
        "POST",
        "/api/chat",
        r#"{"model":"qwen3:4b","stream":false,"messages":[{"role":"user","content":"count the words: one two"}]}"#,
    ),
    (
        "POST",
        "/v1/chat/completions",
        r#"{"model":"qwen3:4b","messages":[{"role":"user","content":"count the words: one two"}]}"#,
    ),
    (
        "POST",
        "/v1/responses",
        r#"{"model":"qwen3:4b","input":"count the words: one two"}"#,
    ),
    (
        "POST",
        "/mcp",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"oap_invoke","arguments":{"tool":"local/wc","arguments":{"args":"-w","stdin":"one two"}}}}"#,
    ),
    ("POST", "/v1/discover", r#"{"task":"count the words"}"#),
    ("GET", "/v1/requests", ""),
    ("GET", "/health", ""),
    ("GET", "/ui", ""),
    ("GET", "/metrics", ""),
    (
        "POST",
        "/v1/manifests/register",
        r#"{"domain":"evil.example"}"#,
    ),
];

fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string()
}

/// What the daemon answered, and to what.
struct Outcome {
    what: String,
    status: u16,
    error: String,
}

impl Outcome {
    /// Refused by the Host rule (not by auth, not by a route).
    fn refused_by_host_rule(&self) -> bool {
        self.status == 403 && self.error.contains("server.allowed_hosts")
    }
}

/// Every route, simple and preflighted, from `client`, with `host` as Host
/// and `http://<host>` as Origin (what a page served under that name
/// sends), with or without the token.
fn try_everything(ns: &Netns, client: &str, host: &str, token: bool) -> Vec<Outcome> {
    let daemon: SocketAddr = format!("{LAN_IP}:{PORT}").parse().unwrap();
    let client: IpAddr = client.parse().unwrap();
    let origin = format!("http://{host}");
    let bearer = format!("Bearer {TOKEN}");
    let mut requests = Vec::new();
    for (method, path, body) in ROUTES {
        let mut simple = vec![
            ("Host", host),
            ("Origin", origin.as_str()),
            ("Content-Type", "text/plain;charset=UTF-8"),
        ];
        let mut preflight = vec![
            ("Host", host),
            ("Origin", origin.as_str()),
            ("Access-Control-Request-Method", *method),
            (
                "Access-Control-Request-Headers",
                "authorization,content-type",
            ),
        ];
        if token {
            simple.push(("Authorization", bearer.as_str()));
            // A preflight carries no credentials; it is asked all the same.
            preflight.push(("Authorization", bearer.as_str()));
        }
        requests.push((
            format!("{method} {path}"),
            request_bytes(method, path, host, &simple, body.as_bytes()),
        ));
        requests.push((
            format!("OPTIONS {path}"),
            request_bytes("OPTIONS", path, host, &preflight, b""),
        ));
    }
    ns.inside(move || {
        requests
            .into_iter()
            .map(|(what, raw)| {
                let response = send_raw_from(client, daemon, &raw)
                    .unwrap_or_else(|err| panic!("{what}: {err}"));
                Outcome {
                    what,
                    status: response.status,
                    error: String::from_utf8_lossy(&response.body).into_owned(),
                }
            })
            .collect()
    })
}

#[test]
fn a_rebound_name_is_refused_on_every_route_and_the_machines_names_are_served() {
    let ns = match Netns::with_lan_address("oapd-rebind", LAN_IP) {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("skipped: cannot build a network namespace here ({why})");
            return;
        }
    };
    for client in [TRUSTED_IP, STRANGER_IP] {
        netns::run(&[
            "ip",
            "-n",
            ns.name(),
            "addr",
            "add",
            &format!("{client}/32"),
            "dev",
            "va",
        ])
        .unwrap();
    }
    let daemon = support::daemon()
        .embedding_disabled()
        .in_netns(ns.name())
        .listen(&[&format!("0.0.0.0:{PORT}")])
        .server("auth_token", &format!("{TOKEN:?}"))
        .server("trusted_clients", &format!("[\"{TRUSTED_IP}/32\"]"))
        .server("allowed_hosts", &format!("[{OPERATOR_NAME:?}]"))
        .start_with_auth(TOKEN);

    let evil = format!("evil.com:{PORT}");
    let lan = format!("{LAN_IP}:{PORT}");
    let dot_local = format!("{}.local:{PORT}", machine_hostname());
    let operator = format!("{OPERATOR_NAME}:{PORT}");
    for client in [TRUSTED_IP, STRANGER_IP] {
        for token in [false, true] {
            let case = format!("from {client}, token: {token}");
            for outcome in try_everything(&ns, client, &evil, token) {
                assert!(
                    outcome.refused_by_host_rule(),
                    "{} Host {evil} {case}: {} {}\n{}",
                    outcome.what,
                    outcome.status,
                    outcome.error,
                    daemon.log_text()
                );
                assert!(outcome.error.contains(&evil), "{}", outcome.error);
            }
            let authorized = token || client == TRUSTED_IP;
            for host in [&lan, &dot_local, &operator] {
                for outcome in try_everything(&ns, client, host, token) {
                    let what = format!(
                        "{} Host {host} {case}: {} {}",
                        outcome.what, outcome.status, outcome.error
                    );
                    assert!(!outcome.refused_by_host_rule(), "{what}");
                    if outcome.what.starts_with("OPTIONS") {
                        assert_eq!(outcome.status, 204, "{what}");
                    } else if !authorized {
                        assert_eq!(outcome.status, 401, "{what}");
                    } else if outcome.what.ends_with("/register") && !token {
                        // Operator actions need the token itself.
                        assert_eq!(outcome.status, 403, "{what}");
                        assert!(outcome.error.contains("registration needs"), "{what}");
                    } else {
                        assert!(![401, 403].contains(&outcome.status), "{what}");
                    }
                }
            }
        }
    }
}
