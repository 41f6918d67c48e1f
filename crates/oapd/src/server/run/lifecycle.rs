//! The daemon's life under a service manager: listening sockets (bound, or
//! inherited through socket activation), readiness and status notifications,
//! watchdog pings, SIGHUP reload and SIGTERM/SIGINT graceful stop.
//!
//! Everything systemd-specific is a no-op when the daemon is not started by
//! systemd (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `LISTEN_FDS` unset), so the
//! same code path runs from a terminal, in tests and under systemd.
//!
//! Reload swaps the whole request handler ([`Api`]) behind an `ArcSwap`:
//! requests already running keep the handler they started with, new ones
//! get the new one; a config that does not load, or an index that cannot be
//! built, leaves the running handler in place.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use hyper::body::Incoming;
use hyper::{Request, Response};
use oap_discovery::{BuildReport, Engine, McpTools};
use oap_embed::Embedder;
use sd_notify::NotifyState;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::start;
use crate::app::{self, ModelState};
use crate::config::Config;
use crate::mcp::McpServers;
use crate::rebuild::Rebuilder;
use crate::request_gen::RequestGenerator;
use crate::server::routes::api::{Api, ApiSettings};
use crate::server::transport::http::{self, Body, Handler, Limits};
use crate::tools::ExecRunner;
use crate::watch;

/// How often the upstream Ollama's reachability is probed for STATUS=.
const UPSTREAM_PROBE_INTERVAL: Duration = Duration::from_secs(15);
const UPSTREAM_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The request handler that reload swaps.
pub struct LiveApi {
    current: ArcSwap<Api>,
}

impl LiveApi {
    /// Serves `api` until the first reload.
    pub fn new(api: Api) -> Self {
        LiveApi {
            current: ArcSwap::from_pointee(api),
        }
    }

    /// The handler generation serving now; a request keeps the one it got
    /// until it ends, even across a reload.
    pub fn current(&self) -> Arc<Api> {
        self.current.load_full()
    }

    /// Swaps in a reloaded handler generation for new requests; returns
    /// the one it replaced (requests in flight may still hold it).
    pub fn replace(&self, api: Api) -> Arc<Api> {
        self.current.swap(Arc::new(api))
    }
}

impl Handler for LiveApi {
    fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> impl std::future::Future<Output = Response<Body>> + Send {
        let api = self.current.load_full();
        api.handle(request)
    }

    fn bounded_by_request_timeout(&self, request: &Request<Incoming>) -> bool {
        self.current.load().bounded_by_request_timeout(request)
    }

    fn route_name(&self, request: &Request<Incoming>) -> &'static str {
        self.current.load().route_name(request)
    }
}

/// What STATUS= says; sent again whenever it changes.
#[derive(Debug, Clone, Default, PartialEq)]
struct Status {
    manifests: usize,
    model: Option<String>,
    upstream: Option<bool>,
    reload_problem: Option<String>,
}

impl Status {
    fn line(&self) -> String {
        let model = match &self.model {
            Some(id) => format!("model {}", short_id(id)),
            None => "no model (lexical only)".to_owned(),
        };
        let upstream = match self.upstream {
            Some(true) => "Ollama reachable",
            Some(false) => "Ollama unreachable",
            None => "Ollama not checked yet",
        };
        let mut line = format!("{} manifests indexed, {model}, {upstream}", self.manifests);
        if let Some(problem) = &self.reload_problem {
            line.push_str(&format!("; last reload refused: {problem}"));
        }
        line
    }
}

/// `name@<first 12 hash digits>`: enough to tell two models apart in a
/// status line.
fn short_id(id: &str) -> &str {
    let end = match id.find('@') {
        Some(at) => at + 1 + 12,
        None => 40,
    };
    id.get(..end).unwrap_or(id)
}

/// Sends a notification; failures are logged once per call, never fatal.
fn notify(states: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(error = %err, "cannot notify the service manager");
    }
}

struct StatusBoard {
    status: Mutex<Status>,
}

impl StatusBoard {
    fn update(&self, change: impl FnOnce(&mut Status)) {
        let line = {
            let Ok(mut status) = self.status.lock() else {
                return;
            };
            let before = status.clone();
            change(&mut status);
            if *status == before {
                return;
            }
            status.line()
        };
        tracing::info!(status = %line, "status");
        notify(&[NotifyState::Status(&line)]);
    }

    fn line(&self) -> String {
        self.status
            .lock()
            .map(|s| s.line())
            .unwrap_or_else(|_| "status unavailable".to_owned())
    }
}

/// Sockets handed over by systemd (`LISTEN_FDS`/`LISTEN_PID`), if any.
fn inherited_listeners() -> anyhow::Result<Vec<TcpListener>> {
    let fds: Vec<RawFd> = sd_notify::listen_fds()
        .context("socket activation: bad LISTEN_FDS/LISTEN_PID")?
        .collect();
    let mut listeners = Vec::with_capacity(fds.len());
    for fd in fds {
        // SAFETY: systemd passes these descriptors to this process for it
        // to own; listen_fds() checked LISTEN_PID is ours, and nothing
        // else in the process uses descriptors 3.. at this point.
        #[allow(
            unsafe_code,
            reason = "taking ownership of systemd's descriptors; SAFETY above"
        )]
        let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        listener
            .set_nonblocking(true)
            .with_context(|| format!("socket activation: fd {fd}"))?;
        let listener = TcpListener::from_std(listener)
            .with_context(|| format!("socket activation: fd {fd} is not a TCP listening socket"))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Binds the configured addresses, unless systemd handed sockets over.
async fn listeners(config: &Config) -> anyhow::Result<Vec<TcpListener>> {
    let inherited = inherited_listeners()?;
    if !inherited.is_empty() {
        tracing::info!(
            sockets = inherited.len(),
            "socket activation: serving on the sockets systemd passed; server.listen is ignored"
        );
        return Ok(inherited);
    }
    let addresses: Vec<SocketAddr> = config
        .server
        .listen
        .iter()
        .map(|a| {
            a.parse()
                .with_context(|| format!("server.listen: bad address {a:?}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(http::bind(&addresses).await?)
}

/// The handler for `config` around an opened engine.
fn build_api(
    config: &Config,
    rebuilder: Arc<Rebuilder>,
    model: ModelState,
    crawler: Option<Arc<oap_crawl::Crawler>>,
    runner: ExecRunner,
    lasting: Lasting<'_>,
) -> anyhow::Result<Api> {
    let mcp_servers = lasting.mcp.clone();
    let engine = rebuilder.engine().clone();
    let runner = runner.with_mcp(mcp_servers.hub().clone());
    let chat = Arc::new(start::chat_service(config, engine.clone(), runner)?);
    // One budget for every connection and handler generation; a reload
    // changes its size, bodies in flight keep their shares.
    http::body_budget().set_capacity(config.server.max_inflight_body_bytes);
    crate::server::observe::recent()
        .configure(config.server.recent_requests, config.server.log_content);
    let mcp = config.mcp_server.enabled.then(|| {
        Arc::new(crate::server::routes::mcp::McpServer::new(
            chat.clone(),
            crate::server::routes::mcp::McpSettings {
                max_body_bytes: config.server.max_body_bytes,
                max_task_bytes: config.server.max_task_bytes,
                default_top_k: config.discovery.default_top_k,
            },
        ))
    });
    Ok(Api {
        mcp,
        chat,
        engine,
        settings: ApiSettings {
            max_body_bytes: config.server.max_body_bytes,
            max_task_bytes: config.server.max_task_bytes,
            default_top_k: config.discovery.default_top_k,
            max_top_k: config.discovery.max_top_k,
            auth_token: config.server.auth_token.clone(),
            cors_origins: config.server.cors_origins.clone(),
            allowed_hosts: config.server.allowed_hosts.clone(),
            trusted_clients: config
                .server
                .trusted_clients
                .iter()
                .map(|range| range.parse())
                .collect::<Result<_, _>>()
                .context("server.trusted_clients")?,
            clients: config
                .server
                .clients
                .0
                .iter()
                .map(|client| {
                    // Validation has refused unknown scope names.
                    let scopes = client
                        .scopes
                        .iter()
                        .filter_map(|name| crate::server::transport::auth::Scope::from_name(name))
                        .collect();
                    Arc::new(crate::server::transport::auth::Client::new(
                        &client.name,
                        &client.token,
                        scopes,
                    ))
                })
                .collect(),
        },
        model,
        rebuilder,
        crawler,
        crawler_fetch_timeout: Duration::from_secs(config.crawler.fetch_timeout),
        mcp_servers,
        generator: lasting.generator.clone(),
        snapshots: lasting.snapshots.clone(),
    })
}

/// What outlives handler generations, handed to each new one.
#[derive(Clone, Copy)]
struct Lasting<'a> {
    /// The MCP servers (processes and sessions).
    mcp: &'a Arc<McpServers>,
    /// The generated request rows and their cache.
    generator: &'a Arc<RequestGenerator>,
    /// The installed snapshot's rows and the subscription's status.
    snapshots: &'a Arc<crate::snapshots::Snapshots>,
}

/// An engine with its crawler and directory watch started, and the
/// handler around them; the tasks are aborted if the handler can't be built.
fn start_generation(
    config: &Config,
    engine: Engine,
    model: ModelState,
    report: BuildReport,
    watch_baseline: watch::DirSignature,
    lasting: Lasting<'_>,
    runner: ExecRunner,
) -> anyhow::Result<(Api, Vec<JoinHandle<()>>)> {
    let Lasting {
        mcp,
        generator,
        snapshots,
    } = lasting;
    let rebuilder = Arc::new(Rebuilder::new(Arc::new(engine), &report));
    rebuilder.set_local_schemas(crate::local_schemas::Refresher::new(
        config.manifests.dirs.clone(),
        &config.index.data_dir,
        runner.executor().clone(),
    ));
    let (crawler, mut tasks) = start::start_crawler(config, &rebuilder, watch_baseline)?;
    match crate::snapshots::start(config, &rebuilder, snapshots) {
        Ok(puller) => tasks.extend(puller),
        Err(err) => {
            tasks.iter().for_each(JoinHandle::abort);
            return Err(err.context("snapshots"));
        }
    }
    if rebuilder.engine().pending_texts() > 0 {
        // The index was opened without the vectors it lacked (too many to
        // embed before ready): embed them now, in the background, and swap
        // the complete index in.
        let rebuilder = rebuilder.clone();
        tasks.push(tokio::spawn(async move {
            rebuilder
                .rebuild("vectors still to embed after start")
                .await;
        }));
    }
    {
        // The schemas the stored copies lack (first start, a changed file,
        // an expired record): fetched after start, never delaying ready.
        let rebuilder = rebuilder.clone();
        tasks.push(tokio::spawn(async move {
            if rebuilder.refresh_local_schemas().await {
                rebuilder.request("schemas of local manifests resolved");
            }
        }));
    }
    tasks.push(tokio::spawn(crate::mcp::rebuild_on_change(
        mcp.clone(),
        rebuilder.clone(),
    )));
    tasks.push(tokio::spawn(crate::mcp::watch_servers_file(
        mcp.clone(),
        config.clone(),
    )));
    // Generation runs beside this generation's other tasks (a reload
    // restarts it with the new Ollama settings); it never delays ready.
    if generator.settings().enabled {
        let upstream = start::upstream(config, crate::request_gen::ask::CALL_TIMEOUT)?;
        tasks.push(tokio::spawn(generator.clone().run(upstream)));
    }
    let serving = rebuilder.clone();
    match build_api(config, rebuilder, model, crawler, runner, lasting) {
        Ok(api) => {
            // New rows ask this generation for their rebuild from now on.
            generator.attach(&serving);
            Ok((api, tasks))
        }
        Err(err) => {
            tasks.iter().for_each(JoinHandle::abort);
            Err(err)
        }
    }
}

/// What a running daemon keeps to rebuild its handler on reload.
struct Running {
    config_path: Option<PathBuf>,
    config: Mutex<Config>,
    embedder: Option<Arc<dyn Embedder>>,
    model: ModelState,
    live: Arc<LiveApi>,
    board: Arc<StatusBoard>,
    /// The crawler and directory watch of the live engine.
    crawl_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The MCP servers: one hub for the daemon's life, re-applied on reload.
    mcp: Arc<McpServers>,
    /// The generated request rows: one cache for the daemon's life.
    generator: Arc<RequestGenerator>,
    /// The snapshot subscription's rows and status, for the daemon's life.
    snapshots: Arc<crate::snapshots::Snapshots>,
}

/// Keys a reload cannot change: the sockets, the server shell's limits,
/// the loaded model and logging are set up once at start. Keeps their
/// values from `old` in `new`, so the running daemon stays consistent with
/// what it actually uses, and returns the keys whose value the new file
/// changed (to warn that they wait for a restart). One list for both, so
/// a key can never be reported without being kept, or the reverse.
fn keep_restart_only(old: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut keep = RestartOnly(&mut changed);
    let (o, n) = (&old.server, &mut new.server);
    keep.value("server.listen", &o.listen, &mut n.listen);
    keep.value(
        "server.max_connections",
        &o.max_connections,
        &mut n.max_connections,
    );
    keep.value(
        "server.max_pending_connections",
        &o.max_pending_connections,
        &mut n.max_pending_connections,
    );
    keep.value(
        "server.max_connections_per_client",
        &o.max_connections_per_client,
        &mut n.max_connections_per_client,
    );
    keep.value(
        "server.header_read_timeout",
        &o.header_read_timeout,
        &mut n.header_read_timeout,
    );
    keep.value(
        "server.request_timeout",
        &o.request_timeout,
        &mut n.request_timeout,
    );
    keep.value(
        "server.shutdown_grace",
        &o.shutdown_grace,
        &mut n.shutdown_grace,
    );
    keep.value("embedding", &old.embedding, &mut new.embedding);
    keep.value(
        "index.data_dir",
        &old.index.data_dir,
        &mut new.index.data_dir,
    );
    keep.value("log", &old.log, &mut new.log);
    let (o, n) = (&old.discovery, &mut new.discovery);
    keep.value(
        "discovery.generate_requests",
        &o.generate_requests,
        &mut n.generate_requests,
    );
    keep.value(
        "discovery.generate_model",
        &o.generate_model,
        &mut n.generate_model,
    );
    keep.value(
        "discovery.generate_per_hour",
        &o.generate_per_hour,
        &mut n.generate_per_hour,
    );
    changed
}

/// Collects the restart-only keys a reload changed ([`keep_restart_only`]).
struct RestartOnly<'a>(&'a mut Vec<&'static str>);

impl RestartOnly<'_> {
    /// Puts the running value back into the new configuration, noting
    /// `key` when the new file had changed it.
    fn value<T: PartialEq + Clone>(&mut self, key: &'static str, running: &T, new: &mut T) {
        if running != new {
            self.0.push(key);
            *new = running.clone();
        }
    }
}

impl Running {
    /// SIGHUP: re-read the config file and rebuild the index (incrementally:
    /// unchanged texts keep their vectors). On any failure the running
    /// handler stays.
    async fn reload(self: &Arc<Self>) {
        notify(&[NotifyState::Reloading, monotonic_now()]);
        tracing::info!("SIGHUP: reloading the configuration and manifests");
        match self.try_reload().await {
            Ok(manifests) => {
                tracing::info!(manifests, "reload done");
                self.board.update(|s| {
                    s.manifests = manifests;
                    s.reload_problem = None;
                });
            }
            Err(err) => {
                let problem = format!("{err:#}");
                tracing::error!(error = %problem, "reload refused; the running configuration stays");
                self.board.update(|s| s.reload_problem = Some(problem));
            }
        }
        notify(&[NotifyState::Ready]);
    }

    async fn try_reload(self: &Arc<Self>) -> anyhow::Result<usize> {
        let loaded = Config::load(self.config_path.as_deref(), crate::config::process_env())
            .context("config")?;
        for warning in &loaded.warnings {
            tracing::warn!(warning = %warning, "configuration");
        }
        let mut config = loaded.config;
        let old = self
            .config
            .lock()
            .map_err(|_| anyhow::anyhow!("config lock poisoned"))?
            .clone();
        for key in keep_restart_only(&old, &mut config) {
            tracing::warn!(key, "changed, but takes effect only after a restart");
        }
        let embedder = self.embedder.clone();
        let blocking_config = config.clone();
        let watch_baseline = watch::dir_signature(&watch::watched_dirs(&config));
        // One executor for the new generation: the hub takes its limits and
        // context (CA file, credentials, address rule) from it; then added
        // servers start, changed ones restart, removed ones stop; the new
        // engine reads the tools of those already up.
        let runner = ExecRunner::new(&config).context("tool execution setup")?;
        self.mcp.reconfigure(
            &config,
            runner.hub_context(),
            runner.connection_basis().clone(),
        );
        self.mcp.apply(&config);
        let tools: Arc<dyn McpTools> = self.mcp.clone();
        let generator = self.generator.clone();
        let snapshots = self.snapshots.clone();
        let (engine, report) = tokio::task::spawn_blocking(move || {
            app::open_serving_engine(
                &blocking_config,
                embedder,
                Some(tools),
                &generator,
                &snapshots,
            )
        })
        .await
        .context("reload task failed")??;
        let manifests = report.docs;
        let (api, tasks) = start_generation(
            &config,
            engine,
            self.model.clone(),
            report,
            watch_baseline,
            Lasting {
                mcp: &self.mcp,
                generator: &self.generator,
                snapshots: &self.snapshots,
            },
            runner,
        )?;
        let replaced = self.live.replace(api);
        // Its rebuilds would now only compete with the new engine's for the
        // same file (a background embedding runs for minutes): stop them.
        replaced.engine.retire();
        if let Ok(mut running) = self.crawl_tasks.lock() {
            for old in std::mem::replace(&mut *running, tasks) {
                old.abort();
            }
        }
        if let Ok(mut current) = self.config.lock() {
            *current = config;
        }
        // The old generation (its catalog, snapshot and executor) is freed
        // once the requests still holding it end, within milliseconds; then
        // hand the pages back as a rebuild does. Without this a reload whose
        // index was reused kept the catalog parse's ~10 MB until the next
        // rebuild (seen as RSS steps after each SIGHUP in the soak).
        drop(replaced);
        tokio::spawn(async {
            tokio::time::sleep(RELOAD_TRIM_DELAY).await;
            let _ = tokio::task::spawn_blocking(oap_embed::return_freed_memory).await;
        });
        Ok(manifests)
    }
}

/// How long after a reload the allocator is asked to return freed pages:
/// longer than a request holding the old generation takes.
const RELOAD_TRIM_DELAY: std::time::Duration = std::time::Duration::from_secs(2);

fn monotonic_now() -> NotifyState<'static> {
    match NotifyState::monotonic_usec_now() {
        Ok(state) => state,
        // Without a clock reading, a plain status line is still valid.
        Err(_) => NotifyState::Status("reloading"),
    }
}

/// Runs the daemon until SIGTERM or SIGINT. `config_path` is re-read on
/// SIGHUP.
pub async fn serve(config: Config, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    // Bind first: a port in use should fail fast, before a slow model load.
    let listeners = listeners(&config).await?;

    let blocking_config = config.clone();
    // Taken before the engine reads the directories, so a change made while
    // it loads is still seen as a change.
    let watch_baseline = watch::dir_signature(&watch::watched_dirs(&config));
    // MCP servers connect in the background: a slow or broken one never
    // delays readiness; their tools join the index as they come up.
    // One executor for the first generation, whose context the hub shares.
    let runner = ExecRunner::new(&config).context("tool execution setup")?;
    let mcp = McpServers::start(
        &config,
        runner.hub_context(),
        runner.connection_basis().clone(),
    );
    let tools: Arc<dyn McpTools> = mcp.clone();
    // The cache is read before the engine opens: its rows are in the
    // first index, so a restart embeds and asks nothing again.
    let generator = RequestGenerator::open(&config);
    let opening_generator = generator.clone();
    let snapshots = crate::snapshots::Snapshots::new();
    let opening_snapshots = snapshots.clone();
    let (engine, report, model, embedder) = tokio::task::spawn_blocking(move || {
        let (embedder, model) = app::load_embedder(&blocking_config);
        app::open_serving_engine(
            &blocking_config,
            embedder.clone(),
            Some(tools),
            &opening_generator,
            &opening_snapshots,
        )
        .map(|(engine, report)| (engine, report, model, embedder))
    })
    .await
    .context("start-up task failed")??;

    let board = Arc::new(StatusBoard {
        status: Mutex::new(Status {
            manifests: report.docs,
            model: model.id.clone(),
            upstream: None,
            reload_problem: None,
        }),
    });
    let (api, crawl_tasks) = start_generation(
        &config,
        engine,
        model.clone(),
        report,
        watch_baseline,
        Lasting {
            mcp: &mcp,
            generator: &generator,
            snapshots: &snapshots,
        },
        runner,
    )?;
    let live = Arc::new(LiveApi::new(api));
    let limits = Limits {
        max_connections: config.server.max_connections,
        max_pending_connections: config.server.max_pending_connections,
        max_connections_per_client: config.server.max_connections_per_client,
        header_read_timeout: Duration::from_secs(config.server.header_read_timeout),
        request_timeout: Duration::from_secs(config.server.request_timeout),
    };
    let grace = Duration::from_secs(config.server.shutdown_grace);
    for listener in &listeners {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(%address, "listening");
        }
    }
    let ollama_url = config.ollama.base_url.clone();
    let running = Arc::new(Running {
        config_path,
        config: Mutex::new(config),
        embedder,
        model,
        live: live.clone(),
        board: board.clone(),
        crawl_tasks: Mutex::new(crawl_tasks),
        mcp,
        generator,
        snapshots,
    });

    // The signal handlers exist before READY=1: a manager (or a test) may
    // send SIGHUP or SIGTERM the moment it sees READY, and a signal that
    // arrives before its handler takes the default action (terminate).
    let hangup = install_signal(tokio::signal::unix::SignalKind::hangup(), "SIGHUP");
    let terminate = install_signal(tokio::signal::unix::SignalKind::terminate(), "SIGTERM");

    // Listening and the index is open: ready.
    let status = board.line();
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    tracing::info!(status = %status, "ready");

    let mut background = Vec::new();
    if let Some(interval) = sd_notify::watchdog_enabled() {
        background.push(tokio::spawn(watchdog(interval / 2, live.clone())));
    }
    background.push(tokio::spawn(probe_upstream(ollama_url, board.clone())));
    if let Some(hangup) = hangup {
        background.push(tokio::spawn(reload_on_hangup(running.clone(), hangup)));
    }

    http::serve(
        listeners,
        live.clone(),
        limits,
        shutdown_signal(terminate),
        grace,
    )
    .await;
    // The experience cache batches its writes; what was learnt in the last
    // moments is written before the process exits.
    if let Some(experience) = &live.current().chat.experience {
        experience.persist();
    }
    for task in background {
        task.abort();
    }
    if let Ok(mut tasks) = running.crawl_tasks.lock() {
        tasks.drain(..).for_each(|task| task.abort());
    }
    // MCP servers' process groups are killed, not left to systemd.
    running.mcp.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Pings the watchdog from a task that needs the runtime and the live
/// handler: a wedged runtime or a poisoned handler stops the pings, and
/// systemd restarts the daemon.
async fn watchdog(period: Duration, live: Arc<LiveApi>) {
    let period = period.max(Duration::from_millis(50));
    tracing::info!(?period, "watchdog enabled");
    let mut ticker = tokio::time::interval(period);
    loop {
        ticker.tick().await;
        let api = live.current();
        // Touch the engine's state (no I/O): proves the handler is usable.
        let _ = api.engine.mode();
        notify(&[NotifyState::Watchdog]);
    }
}

/// Whether a TCP connection to the Ollama URL's host and port succeeds;
/// reported in STATUS=. Never sends a request.
async fn probe_upstream(base_url: String, board: Arc<StatusBoard>) {
    let Some(target) = host_and_port(&base_url) else {
        return;
    };
    let mut ticker = tokio::time::interval(UPSTREAM_PROBE_INTERVAL);
    loop {
        ticker.tick().await;
        let reachable = matches!(
            tokio::time::timeout(
                UPSTREAM_PROBE_TIMEOUT,
                tokio::net::TcpStream::connect(target.as_str())
            )
            .await,
            Ok(Ok(_))
        );
        board.update(|s| s.upstream = Some(reachable));
    }
}

/// `host:port` of an `http(s)://` URL (default ports 80/443).
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn host_and_port(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port {
        Some(authority.to_owned())
    } else {
        let port = if scheme.eq_ignore_ascii_case("https") {
            443
        } else {
            80
        };
        Some(format!("{authority}:{port}"))
    }
}

/// A stream of `kind` signals, or `None` (logged) when the handler cannot be
/// installed.
fn install_signal(
    kind: tokio::signal::unix::SignalKind,
    name: &'static str,
) -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(kind) {
        Ok(stream) => Some(stream),
        Err(err) => {
            tracing::error!(error = %err, signal = name, "cannot install signal handler");
            None
        }
    }
}

async fn reload_on_hangup(running: Arc<Running>, mut hangup: tokio::signal::unix::Signal) {
    while hangup.recv().await.is_some() {
        running.reload().await;
    }
}

/// Resolves on SIGTERM (or SIGINT); tells the manager we are stopping.
async fn shutdown_signal(terminate: Option<tokio::signal::unix::Signal>) {
    match terminate {
        Some(mut term) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
            }
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("SIGINT received");
        }
    }
    notify(&[NotifyState::Stopping]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every restart-only key a reload changes is both reported and put
    /// back, and nothing else is touched.
    #[test]
    fn a_reload_reports_and_keeps_every_restart_only_key() {
        let old = Config::default();
        let mut new = old.clone();
        new.server.listen = vec!["127.0.0.1:1".into()];
        new.server.max_connections += 1;
        new.server.max_pending_connections += 1;
        new.server.max_connections_per_client += 1;
        new.server.header_read_timeout += 1;
        new.server.request_timeout += 1;
        new.server.shutdown_grace += 1;
        new.index.data_dir = "/nonexistent/other".into();
        new.discovery.generate_requests = !new.discovery.generate_requests;
        new.discovery.generate_per_hour += 1;
        new.discovery.default_top_k = old.discovery.default_top_k + 1;
        let changed = keep_restart_only(&old, &mut new);
        assert_eq!(
            changed,
            [
                "server.listen",
                "server.max_connections",
                "server.max_pending_connections",
                "server.max_connections_per_client",
                "server.header_read_timeout",
                "server.request_timeout",
                "server.shutdown_grace",
                "index.data_dir",
                "discovery.generate_requests",
                "discovery.generate_per_hour",
            ]
        );
        let mut expected = old.clone();
        expected.discovery.default_top_k = old.discovery.default_top_k + 1;
        assert_eq!(new, expected);
        assert!(keep_restart_only(&old, &mut new).is_empty());
    }

    #[test]
    fn host_and_port_of_urls() {
        assert_eq!(
            host_and_port("http://127.0.0.1:11434").as_deref(),
            Some("127.0.0.1:11434")
        );
        assert_eq!(
            host_and_port("https://ollama.example/prefix").as_deref(),
            Some("ollama.example:443")
        );
        assert_eq!(
            host_and_port("http://[::1]:11434/").as_deref(),
            Some("[::1]:11434")
        );
        assert_eq!(host_and_port("http://[::1]/").as_deref(), Some("[::1]:80"));
        assert_eq!(host_and_port("nonsense"), None);
        assert_eq!(host_and_port("http://"), None);
    }

    #[test]
    fn status_line_names_what_matters() {
        let status = Status {
            manifests: 13,
            model: Some("all-MiniLM-L6-v2@0123456789abcdef0123".into()),
            upstream: Some(false),
            reload_problem: None,
        };
        assert_eq!(
            status.line(),
            "13 manifests indexed, model all-MiniLM-L6-v2@0123456789ab, Ollama unreachable"
        );
    }
}
