//! oap-discovery's integration tests, one binary: one module per area.

mod engine;
