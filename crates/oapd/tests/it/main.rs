//! oapd's integration tests, one binary: one module per area. Tests run
//! in parallel threads of one process; a group that must not run beside
//! others takes a lock (none needs one today: every test makes its own
//! state directory, port, namespace and cgroup).

#![allow(dead_code)]

mod support;

mod bridge;
mod config;
mod crawl;
mod daemon;
mod experience;
mod exposure;
mod fitness;
mod host_guard;
mod http_errors;
mod lifecycle;
mod mdns;
mod memory;
mod parallel_tools;
mod responses;
mod sandbox;
mod slow_clients;
mod slow_upstream;
mod validation;
mod watch;
