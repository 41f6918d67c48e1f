//! oap-embed-candle's integration tests, one binary: one module per area.

mod model;
