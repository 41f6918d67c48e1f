//! The `oapd` daemon as a library, in layers: configuration (`config`),
//! the crawler (`crawl`), the manifest-directory watch (`watch`),
//! opening the engine (`app`), the HTTP server and its lifecycle
//! (`server`), and the command line (`cli`; the binary only calls
//! [`main`]). Each uses only layers before it and the small helpers
//! (`files`, `logging`, `metrics`, `rebuild`, `bundled`, `request_gen`,
//! `local_schemas`),
//! never one that uses it back, at every depth: xtask's tidy test
//! `every_crates_modules_form_no_cycle_at_any_depth` checks it.
//!
//! Every module is private to the crate. The public surface is [`main`]
//! and [`harness`], the few names benchmarks, fuzz targets and the
//! configuration tests use in-process; the daemon's real interface is its
//! HTTP API and command line.
//!
//! # Architecture
//!
//! The daemon is a thin binary over a library crate of directories, each one
//! job:
//! - `config/`: file and environment → one validated `Config`, in the manner
//!   of ripgrep's low and high arguments. `file.rs` reads (capped, regular
//!   files only) and parses YAML with friendly errors; `env.rs` is the key
//!   table that drives `OAP_<SECTION>_<KEY>` overrides, suggestions and the
//!   completeness test; `validate.rs` checks one section per function and
//!   names the key at fault; `error.rs` holds `ConfigError`/`Problem`;
//!   `bridge.rs` and `crawler.rs` wire in the settings types the bridge and
//!   crawler crates own.
//! - `server/`: the HTTP side, in four layers (each uses only those below):
//!   `transport/`, `bridge/`, `routes/`, `run/`, with `observe.rs` under all.
//!   `transport/`: `http.rs` (listeners, connection cap and
//!   per-client cap, body caps, the in-flight body budget, body stall and
//!   request deadlines, graceful shutdown), `head.rs` (the first request head
//!   of each connection, read under the header deadline and replayed to
//!   hyper), `guard.rs` (Host and Origin checks), `auth.rs` (the token as a
//!   bearer token or as a browser's Basic password). `routes/`: `api.rs` (the router and the
//!   discovery API; `Route::of` is the one table of oapd's own paths, used for
//!   routing and for which deadline bounds a request — every other path is
//!   Ollama's), `crawl.rs` (`/v1/crawl/status`, `/v1/manifests/register`),
//!   `ui.rs` (`/ui`, the status page: `ui/index.html`, `app.js`, `app.css`
//!   compiled in with `include_str!`, served with a strict
//!   Content-Security-Policy; the script writes every value with
//!   `textContent`), `status.rs` (`/v1/status`: manifests by source, the
//!   engine's `last_build`, Ollama's `/api/tags` under a 3 s deadline),
//!   `state.rs` (one handler generation's state). `run/`: `start.rs` (what
//!   each handler generation starts: the chat service, the crawler, the
//!   watch), `lifecycle.rs` (sockets or systemd socket
//!   activation, `READY=1`, `STATUS=`, watchdog, SIGTERM drain, SIGHUP reload).
//! - `server/bridge/`: `chat.rs`, `responses.rs`, `streaming.rs`,
//!   `experience.rs`, the bridge's HTTP side — parse `/api/chat`, `/v1/chat/completions` and
//!   `/v1/responses`, pick tools (experience cache or discovery, in one place:
//!   `ChatService::tools_for_task`), build the request's hooks from settings,
//!   run `oap_bridge::run_loop`, and encode its events (one encoder per wire
//!   format, with keep-alives). `tools.rs` configures `oap-exec` from
//!   `tool_bridge:` and `tools:` (the loop's `ToolRunner`).
//! - `server/routes/mcp.rs`: `/mcp`, oapd as an MCP server (rmcp's streamable HTTP
//!   transport, stateless with JSON answers, so there is no session table to
//!   cap). The body is read by `http::read_body` (size cap, in-flight budget)
//!   and unparsable JSON gets JSON-RPC's parse error before rmcp sees it; the
//!   router's Host/Origin and token guards run first. Two meta tools:
//!   `oap_discover` (the engine call and acceptance rule of the bridge,
//!   `ChatService::tools_from_discovery`) and `oap_invoke`, whose every call
//!   goes through `McpTools::invoke_capability`: look the id up in the engine,
//!   check the arguments with `oap_manifest::tool::check_arguments`, run it
//!   through the chat bridge's `ToolRunner`, so an MCP server's tool indexed
//!   by `mcp.rs` is reachable here too.
//! - `mcp.rs`: the MCP servers the operator runs (`mcp:`): entries from
//!   `mcp.servers` and the verbatim servers file (`read_specs`), one
//!   `oap_mcp::Hub` for the daemon's life (a reload or an edit of the servers
//!   file applies the new entries to it: added servers start, changed ones
//!   restart, removed ones stop, unchanged ones keep running; its limits and
//!   context — TLS roots, credentials, address rule — are replaced too, and
//!   URL servers reconnect when those changed), the
//!   `McpTools` source the engine reads (a restarting server keeps its last
//!   listed tools, so a crash neither re-embeds nor makes discovery flicker),
//!   and one task per handler generation that rebuilds the index when the
//!   hub's tool set changes. `tools.rs`' `ExecRunner` sends a record with an
//!   `McpBinding` to the hub (`tools/call`) and every other one to `oap-exec`.
//!   **Architecture Invariant:** one `ExecRunner` per handler generation (start
//!   and each reload build exactly one): the hub's context comes from it, and
//!   whether URL servers reconnect is decided by comparing its
//!   `ConnectionBasis` (address rule, credential secrets, CA certificates, as
//!   that executor read them) with the running one, so the files are read once
//!   and the hub and the chat bridge never see different credentials.
//! - `crawl/`: the crawler's daemon side (building it from config, seeds, the
//!   static host map, `mdns.rs` browsing with `mdns-sd`, `txt_dns.rs` the
//!   hickory TXT resolver); the engine reaches the crawler through
//!   `oap_crawl::sink::EngineSink` (oap-crawl's `engine` feature).
//! - `watch.rs`: the manifest-directory watch (inotify with a 200 ms quiet
//!   period, polling where inotify cannot do the job); `rebuild.rs`: the
//!   background rebuilds of one handler generation, their retry with backoff,
//!   and the log that reports only what changed. **Architecture Invariant:**
//!   the watch never awaits a rebuild: it asks with `Rebuilder::request` (one
//!   runs, what arrives meanwhile makes one more, and the running one is told
//!   a newer catalog follows), so a change made while a rebuild embeds in the
//!   background is seen and served, not held until every vector is made.
//! - `server/observe.rs`: every request's id (the client's `X-Request-Id`
//!   when usable, else a new one) in a tracing span around all the request
//!   logs, in the answer and in every request to Ollama
//!   (`oap_bridge::upstream::REQUEST_ID`); the observation `Hook` each
//!   bridged chat gets last (rounds, calls with outcome and duration, the
//!   status the client saw), which feeds the metrics and the ring of recent
//!   requests behind `GET /v1/requests` (`server.recent_requests`).
//!   `metrics.rs`: the one `prometheus-client` registry behind `GET /metrics`,
//!   fed by the server shell (route and status of every answer), the
//!   observation hook, the upstream client's observer and the rebuilder;
//!   gauges (index size, RSS from `/proc/self/statm`, the in-flight body
//!   budget) are read at scrape time. `prometheus-client` is the Prometheus
//!   project's own Rust client: typed label sets (so a label cannot be
//!   forgotten or misspelt at one call site), no global recorder, and text
//!   encoding without an exporter task or extra HTTP server.
//! - `request_gen/`: request rows written by the co-located Ollama
//!   (`discovery.generate_requests`). `RequestGenerator` is one for the
//!   daemon's life: the engine's `RequestRows` provider (after rows given
//!   elsewhere, which win: a tool with them gets none generated), so every
//!   catalog load attaches the cached rows and tells it which tools lack
//!   some; its background task (one per handler generation) asks Ollama's
//!   `/api/chat` (`format: json`, not streamed, `ask.rs`) for one tool at a
//!   time, only while no model request goes through the router
//!   (`ModelRequest`, held until the response body ends) and nothing is
//!   embedded in the background, paced, capped per hour, with backoff; the
//!   answers go through `oap_discovery::requests::accepted` and into
//!   `cache.rs` (keyed by content hash and `model@digest`, written with
//!   `oap_store::write_atomic`, read before the engine opens), then
//!   `Rebuilder::request` embeds them, several tools per rebuild.
//!   `/v1/generated-requests`, `/health` (`request_generation`) and
//!   `/metrics` show them. **Architecture Invariant:** generated text is a
//!   row, never the tool's description and never part of a tool offered to
//!   a model.
//! - `cli/`: one module per subcommand (and `render.rs`, discovery answers
//!   as a terminal table); `main.rs` only calls `oapd::main`.
//! - `app.rs` (config → embedder and engine), `files.rs` (the regular-file
//!   reader for config, seeds and CA files), `logging.rs`, `bundled.rs` (the
//!   bundled manifests, compiled in).
//!
//! **Start-up sequence** (`server::run::lifecycle::serve`): bind the listeners
//! (a port in use fails before anything slow); start the MCP servers in the
//! background; load the model; `app::open_serving_engine` loads the catalog
//! and maps the index (reused when its fingerprint matches; written
//! lexical-first when more than `index.start_embed_limit` texts lack a vector,
//! as after a damaged or missing index file, a new model or a large catalog
//! change; else built with every vector); `start_generation` starts the
//! watch, the crawler and, when vectors are pending, a background rebuild;
//! `READY=1` and requests are served. The rebuild swaps the complete index
//! in, and discovery turns hybrid without a restart.
//!
//! **Architecture Invariant.** The daemon never waits for embeddings to
//! become ready when a lexical index can serve: what a start embeds before
//! `READY=1` is bounded by `index.start_embed_limit`, everything past it is
//! embedded in the background at idle priority while BM25 answers (and
//! `/health`, `/v1/status`, each `/v1/discover` answer's `meta.mode` and the
//! `oapd_index_pending_texts` gauge say so). A SIGKILL at any moment of that
//! leaves a file that serves lexically at once on the next start.
//!
//! **Architecture Invariant.** The module graph has no cycle (`cargo xtask
//! test` checks it: `oapd_modules_form_no_cycle` in `xtask/src/tidy.rs`):
//! `config` depends on nothing but `files`; `crawl` and `watch` never name
//! `server`; `cli` is on top. Every error response is JSON `{"error": "..."}`
//! (OpenAI's error shape on `/v1/chat/completions`) with a status that says
//! whose fault it is; an upstream error before the first chunk keeps its
//! status, after it becomes an error line in the stream. Request bodies are
//! capped while being read, one by one and all together: every body takes a
//! share of `server.max_inflight_body_bytes` before it is read
//! (`http::read_body` is the only way handlers read bodies) and keeps it as
//! long as what was parsed from it lives; a body with no room is answered 503
//! with `Retry-After`. Pass-through routes stream bodies to Ollama and buffer
//! none. CPU-bound work (embedding) runs on the blocking pool, never on the
//! async workers. A missing or broken model makes the daemon degraded, not
//! dead. Reload never leaves the daemon without a working handler: the new
//! handler is built completely, then swapped in with an `ArcSwap`; any failure
//! keeps the old one and says so. Each handler generation owns its crawler and
//! watch tasks, and a reload aborts the old ones; the MCP hub is the one
//! thing that outlives generations (its servers are processes and sessions,
//! not files), and shutdown stops it, process groups included.
//!
//! Metric labels take values from bounded sets only: a route is the route
//! table's name (`Route::name`; every path passed through is `ollama`), a tool
//! the name of an indexed tool (else `other`), statuses, outcomes and kinds
//! fixed words; a client can add no series. Message content, a model's tool
//! arguments and tool output are never logged at info or warn, and never in
//! `/v1/requests` unless `server.log_content` is on.
//!
//! Deadlines: `server.request_timeout` bounds only the local routes (`/mcp`
//! is bounded by the invoked tool's own timeout instead). Chats are
//! bounded by `ollama.chat_deadline` (the whole loop, every tool round
//! included) and pass-through by `ollama.timeout` (until Ollama's response
//! headers). A streamed chat waits one `tool_bridge.stream_keepalive` interval
//! for its first event (so an early error is still a real HTTP status), then
//! starts and sends a keep-alive whenever the loop is quiet that long: an empty
//! assistant delta for Ollama clients, an SSE comment for OpenAI ones — both
//! what the real `ollama` and `openai` clients ignore (tested with them).

pub(crate) mod app;
pub(crate) mod bundled;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod crawl;
pub(crate) mod files;
pub mod harness;
pub(crate) mod local_schemas;
pub(crate) mod logging;
pub(crate) mod mcp;
pub(crate) mod metrics;
pub(crate) mod rebuild;
pub(crate) mod request_gen;
pub(crate) mod server;
pub(crate) mod snapshots;
pub(crate) mod tools;
pub(crate) mod watch;

/// The `oapd` command line, what the binary runs: parses the arguments,
/// loads the configuration, sets up logging and runs the subcommand.
pub fn main() -> std::process::ExitCode {
    cli::main()
}
