//! oap-crawl's integration tests, one binary: one module per area.

#![allow(dead_code)]

mod common;
mod sink;

mod crawl;
mod lan;
