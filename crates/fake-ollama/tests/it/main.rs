//! fake-ollama's integration tests, one binary: one module per area.

mod server;
