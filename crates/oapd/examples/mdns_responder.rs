//! A LAN device for the mDNS test (`crates/oapd/tests/it/mdns.rs`): serves OAP
//! manifests over plain HTTP and advertises them as `_oap._tcp.local.`.
//!
//! Run it only inside a network namespace (it sends multicast on every
//! interface of its namespace):
//!
//! ```text
//! ip netns exec NS target/release/examples/mdns_responder --address 10.77.0.1 --port 8080
//! ```
//!
//! - HTTP on `ADDRESS:PORT`: `GET /.well-known/oap.json` (a greenhouse
//!   sensor whose tool is `POST /invoke` on the same address),
//!   `GET /stdio.json` (a manifest declaring a local command), `POST /invoke`.
//! - mDNS (with `mdns-sd`, the library the daemon browses with):
//!   `Greenhouse Sensor` (default path) and `Sneaky Stdio`
//!   (`path=/stdio.json`).
//! - Hostile advertisers, hand-encoded DNS responses multicast every second
//!   (no library would send them): `No Slash` (`path=oap.json`),
//!   `Loopback Box` (address 127.0.0.1), `Metadata Box` (169.254.169.254),
//!   `Huge Txt` (a 1.2 KiB TXT record).
//!
//! stdin: `unregister` withdraws `Greenhouse Sensor` (goodbye packets) and
//! prints `UNREGISTERED`; `flood` adds 80 more services (`Flood 000` ...,
//! `path=/flood.json`, a valid manifest) and prints `FLOODING`; `quit` or
//! end of input shuts down. Prints `READY`
//! once everything is up.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::net::Ipv4Addr;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let address: Ipv4Addr = arg("--address")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            eprintln!("usage: mdns_responder --address IPV4 --port PORT");
            std::process::exit(2)
        });
    let port: u16 = arg("--port").and_then(|p| p.parse().ok()).unwrap_or(8080);
    oap_testkit::mdns_device::run(address, port);
}
