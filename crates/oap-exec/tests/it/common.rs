//! Test helpers: a connection log that refuses anything but loopback (so no
//! test can send traffic elsewhere, even through a bug), and the kit's stub
//! resolver and loopback HTTP(S) servers.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use oap_exec::{ConnectObserver, ExecPolicy, Executor};
use oap_manifest::Manifest;
use serde_json::{Map, Value};

pub use oap_testkit::pki::Pki;
pub use oap_testkit::resolver::StubResolver;
pub use oap_testkit::server::{
    redirect, response, serve, serve_flood, serve_silent, serve_tls, Recorded,
};

/// Every connection attempt, in order. The observer refuses any address
/// that is not loopback, so tests cannot reach the network.
#[derive(Clone, Default)]
pub struct Connects(pub Arc<Mutex<Vec<SocketAddr>>>);

impl Connects {
    pub fn observer(&self) -> ConnectObserver {
        let log = Arc::clone(&self.0);
        Arc::new(move |addr: SocketAddr| {
            log.lock().unwrap().push(addr);
            if addr.ip().is_loopback() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "test guard: only loopback connections",
                ))
            }
        })
    }

    pub fn all(&self) -> Vec<SocketAddr> {
        self.0.lock().unwrap().clone()
    }
}

pub fn executor(policy: ExecPolicy, resolver: Arc<StubResolver>) -> (Executor, Connects) {
    let connects = Connects::default();
    let exec = Executor::new(policy)
        .unwrap()
        .with_resolver(resolver)
        .with_connect_observer(connects.observer());
    (exec, connects)
}

pub fn manifest(json: &str) -> Manifest {
    match oap_manifest::parse(json.as_bytes()) {
        Ok(p) => p.manifest,
        Err(e) => panic!("test manifest invalid: {e}\n{json}"),
    }
}

/// A manifest that skips validation (to test what validation would stop).
pub fn raw_manifest(v: Value) -> Manifest {
    serde_json::from_value(v).unwrap()
}

pub fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}
