//! A stub name resolver for oap-exec's executor: answers from a fixed
//! table and records every query.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use oap_exec::{BoxFuture, Resolver};

/// A name resolver that answers from a table and records every query, so
/// an SSRF test can prove a refusal happened before any connect.
#[derive(Default)]
pub struct StubResolver {
    /// Host name → the addresses it resolves to.
    pub table: HashMap<String, Vec<IpAddr>>,
    /// Every name looked up, in order.
    pub queries: Mutex<Vec<String>>,
}

impl StubResolver {
    /// `(name, addresses)` entries.
    pub fn new(entries: &[(&str, &[&str])]) -> Arc<Self> {
        let table = entries
            .iter()
            .map(|(h, ips)| {
                (
                    h.to_string(),
                    ips.iter().map(|ip| ip.parse().unwrap()).collect(),
                )
            })
            .collect();
        Arc::new(Self {
            table,
            queries: Mutex::new(Vec::new()),
        })
    }

    /// Every name in `hosts` on 127.0.0.1.
    pub fn loopback(hosts: &[&str]) -> Arc<Self> {
        let entries: Vec<(&str, &[&str])> =
            hosts.iter().map(|h| (*h, &["127.0.0.1"][..])).collect();
        Self::new(&entries)
    }

    /// The names asked for, in order.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }
}

impl Resolver for StubResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        self.queries.lock().unwrap().push(host.to_string());
        let found = self.table.get(host).cloned();
        Box::pin(async move {
            match found {
                Some(ips) => Ok(ips
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect()),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such host (stub)",
                )),
            }
        })
    }
}
