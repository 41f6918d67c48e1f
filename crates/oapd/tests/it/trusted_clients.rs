//! `server.trusted_clients`: addresses that may call without the bearer
//! token (clients that cannot send one), while every other address still
//! needs it and the Host and Origin checks still apply to all.

use crate::support;

use oap_testkit::http::{request_bytes, send_raw_from};
use std::net::IpAddr;

const TOKEN: &str = "trusted-clients-token-0123456789ab";

fn from(
    ip: &str,
    daemon: &support::Daemon,
    path: &str,
    headers: &[(&str, &str)],
) -> support::Response {
    let raw = request_bytes("GET", path, &daemon.addr.to_string(), headers, b"");
    send_raw_from(ip.parse::<IpAddr>().unwrap(), daemon.addr, &raw).unwrap()
}

#[test]
fn a_trusted_address_needs_no_token_and_others_still_do() {
    let daemon = support::daemon()
        .env("OAP_SERVER_AUTH_TOKEN", TOKEN)
        .env("OAP_SERVER_TRUSTED_CLIENTS", "127.0.0.2/32, 10.0.0.0/8")
        .start_with_auth(TOKEN);
    let trusted = from("127.0.0.2", &daemon, "/v1/manifests", &[]);
    assert_eq!(trusted.status, 200, "{}", trusted.error());
    let stranger = from("127.0.0.3", &daemon, "/v1/manifests", &[]);
    assert_eq!(stranger.status, 401);
    assert!(stranger.error().contains("bearer token"));
    // With the token, any address is in.
    let bearer = format!("Bearer {TOKEN}");
    let with_token = from(
        "127.0.0.3",
        &daemon,
        "/v1/manifests",
        &[("Authorization", &bearer)],
    );
    assert_eq!(with_token.status, 200);
    // A trusted address does not lift the Host and Origin checks.
    let rebinding = from(
        "127.0.0.2",
        &daemon,
        "/v1/manifests",
        &[("Host", "evil.example")],
    );
    assert_eq!(rebinding.status, 403);
    let page = from(
        "127.0.0.2",
        &daemon,
        "/v1/manifests",
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(page.status, 403);
}

#[test]
fn a_bad_trusted_client_range_is_a_config_error_naming_the_key() {
    let err = support::daemon()
        .env("OAP_SERVER_TRUSTED_CLIENTS", "127.0.0.2/33")
        .try_start()
        .err()
        .expect("start-up must fail");
    assert!(err.contains("server.trusted_clients[0]"), "{err}");
    assert!(err.contains("127.0.0.2/33"), "{err}");
}
