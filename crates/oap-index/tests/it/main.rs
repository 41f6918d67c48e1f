//! Integration tests for oap-index (one binary, several modules, to keep link time low).

mod atomic;
mod common;
mod corruption;
mod dense;
mod lexical;
mod roundtrip;
mod tokenize;
