//! oap-exec's integration tests, one binary: one module per area.

#![allow(dead_code)]

mod common;

mod credentials;
mod http;
mod stdio;
