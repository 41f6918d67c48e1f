//! Helpers shared by the fuzz targets in `fuzz_targets/`: JSON values built
//! from the fuzzer's bytes (structure-aware inputs that always get past the
//! JSON parser) and a scratch directory for targets that read files.
//!
//! # Architecture
//!
//! **Fuzzing and property tests.** Every parser of outside input has a
//! coverage-guided fuzz target in `fuzz/` (`cargo xtask fuzz TARGET|--all
//! [--seconds N]`): manifests (parse, validate, tool conversion), a model's
//! tool-call arguments, NDJSON framing, the tool-call accumulator and the
//! OpenAI chunk translator, SSE and the Responses stream, OpenAI chat and
//! Responses requests, the index file, crawl envelopes, the crawler's
//! domains, TXT hints, mDNS advertisements and state file, the credentials
//! file and argument splitting, the `mcpServers` file and MCP results, and a
//! client's task cut into retrieval text and asks. Long campaigns run
//! through `fuzz/campaign.py` (idle class, resumable, CPU per target from
//! each process's rusage). The
//! targets assert invariants, not only the absence of a panic: parse →
//! serialise → parse is stable, caps hold for every input, framing does not
//! depend on how bytes are cut, no tool call is lost or sent twice (a model
//! of fragmented calls checked against both sides), an index file opens only
//! if every accessor then stays inside it. The engine is libFuzzer, built by
//! the `libfuzzer-sys` crate from its bundled source, on the stable
//! toolchain: the coverage instrumentation is LLVM's SanitizerCoverage,
//! enabled by stable codegen flags (`-Cpasses=sancov-module`,
//! `-Cllvm-args=-sanitizer-coverage-*`), so there is no nightly, no
//! `RUSTC_BOOTSTRAP` and no tool to install beyond a C++ compiler. It was
//! chosen over AFL++ (`cargo-afl`) for that: in-process runs (no fork per
//! input), structure-aware inputs through `arbitrary`, and one `cargo build`
//! as the whole setup, which keeps the CI smoke run (every target for 6 s,
//! `.ci/run`) within minutes. The package is outside the workspace, so
//! `cargo clippy --workspace` and `cargo xtask test` never build it; it
//! builds into `target/fuzz` with the instrumentation and with debug
//! assertions and overflow checks on. Committed inputs are in
//! `fuzz/seeds/TARGET/` (the reference manifests, recorded-shape Ollama
//! streams, chat and Responses requests), dictionaries in `fuzz/dicts/`.
//! Where a model is easy to state, `proptest` checks it instead: dense and
//! BM25 scores against their formulas and top-k against a full sort
//! (`oap-index/tests/it/props.rs`), the address classes and the trust table
//! on generated addresses (`oap-exec/tests/it/trust_props.rs`), the crawl
//! backoff and jitter bounds (`oap-crawl/tests/it/schedule_props.rs`).

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Number, Value};

/// Keys the structure-aware targets draw from, so generated objects hit the
/// fields the parsers look at instead of random names.
pub const KEYS: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "parameters",
    "index",
    "id",
    "type",
    "tools",
    "tool_choice",
    "stream",
    "done",
    "message",
    "done_reason",
    "input",
    "instructions",
    "text",
    "items",
    "properties",
    "required",
    "enum",
    "description",
    "format",
    "default",
    "additionalProperties",
    "minimum",
    "maximum",
    "images",
    "options",
    "temperature",
    "max_tokens",
    "stream_options",
    "include_usage",
    "output",
    "call_id",
    "function_call",
    "functions",
    "response_format",
    "think",
    "thinking",
    "x",
    "q",
];

/// A JSON value at most `depth` levels deep, keys mostly from [`KEYS`].
pub fn json(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    let max = if depth == 0 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=max)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Number(Number::from(u.arbitrary::<i64>()?)),
        // Binary fractions: serde_json reads them back exactly (arbitrary
        // f64s near the subnormal range need its float_roundtrip feature).
        3 => Number::from_f64(f64::from(u.arbitrary::<i32>()?) / 64.0)
            .map_or(Value::Null, Value::Number),
        4 => Value::String(u.arbitrary()?),
        5 => Value::String(key(u)?),
        6 => {
            let n = u.int_in_range(0..=4)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(json(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => Value::Object(object(u, depth - 1)?),
    })
}

/// A JSON object at most `depth` levels deep below it.
pub fn object(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Map<String, Value>> {
    let n = u.int_in_range(0..=5)?;
    let mut map = Map::new();
    for _ in 0..n {
        let k = key(u)?;
        map.insert(k, json(u, depth)?);
    }
    Ok(map)
}

/// A key: usually a known one, sometimes any string.
pub fn key(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(7, 8)? {
        Ok((*u.choose(KEYS)?).to_string())
    } else {
        u.arbitrary()
    }
}

/// A JSON value from arbitrary bytes, for `fuzz_target!(|v: Json| ..)`.
#[derive(Debug)]
pub struct Json(pub Value);

impl<'a> Arbitrary<'a> for Json {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Json(json(u, 5)?))
    }
}

/// Cut `bytes` at the given points (each taken modulo the length), in order,
/// so a framing decoder sees the same input in arbitrary pieces.
pub fn split<'a>(bytes: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| usize::from(c) % (bytes.len() + 1))
        .collect();
    points.sort_unstable();
    let mut pieces = Vec::with_capacity(points.len() + 1);
    let mut start = 0;
    for p in points {
        pieces.push(&bytes[start..p]);
        start = p;
    }
    pieces.push(&bytes[start..]);
    pieces
}

/// A process-wide scratch directory for targets that must read a file.
pub fn scratch() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    // In memory where there is a tmpfs: the index writer syncs its file.
    DIR.get_or_init(|| {
        tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap_or_else(|e| panic!("scratch dir: {e}"))
    })
    .path()
}

/// Cut points for [`split`]: pieces of a size that starts at `stride + 1`
/// and varies along the input, so one byte of the fuzzer's input picks a
/// whole family of splits.
pub fn cuts(len: usize, stride: u8) -> Vec<u16> {
    let mut cuts = Vec::new();
    let mut at = 0usize;
    let mut step = usize::from(stride) + 1;
    while at < len && cuts.len() < 4096 {
        at += step;
        step = step * 5 % 251 + 1;
        cuts.push(u16::try_from(at.min(len)).unwrap_or(u16::MAX));
    }
    cuts
}
