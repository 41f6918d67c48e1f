//! What the hub is given: its limits and timings ([`HubSettings`]) and what
//! it needs from the daemon ([`HubContext`]: name resolution, the address
//! rule, credentials, TLS, stdio limits).
//!
//! Its own module, below [`crate::hub`], because the hub's parts read it
//! too: the HTTP transport connects with the context, the noise filter
//! counts against the settings. They take these inputs, not the hub.

use std::sync::Arc;
use std::time::Duration;

use oap_exec::{CredentialStore, ExecPolicy, Resolver, StdioLimits};

/// Limits and timings of the hub. `Default` gives the documented values.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// Deadline for connecting and the `initialize` handshake (10 s).
    pub init_timeout: Duration,
    /// Call deadline when neither the call nor the server sets one (60 s).
    pub call_timeout: Duration,
    /// Result text is cut to this many characters (16,000).
    pub max_result_chars: usize,
    /// Tools kept per server (1,000); the rest are dropped with a note.
    pub max_tools_per_server: usize,
    /// Bytes of tool definitions kept per server (4 MiB).
    pub max_tools_bytes: usize,
    /// `tools/list` pages read per listing (100).
    pub max_list_pages: usize,
    /// Longest JSON-RPC message accepted from a server: a stdio line, an
    /// HTTP body or an SSE event (8 MiB). Longer stdio lines are dropped.
    pub max_message_bytes: usize,
    /// First reconnect delay (1 s), doubled per failure up to
    /// [`Self::backoff_max`] (60 s).
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// After SIGTERM, how long a stdio server has to exit before its
    /// process group is SIGKILLed (2 s).
    pub stop_grace: Duration,
    /// How often a ready server is asked `ping` (30 s): one that does not
    /// answer within [`Self::init_timeout`] is taken as lost and restarted,
    /// so a hung process or a dropped HTTP session is noticed before a
    /// call fails on it.
    pub ping_interval: Duration,
    /// Shortest time between two `tools/list` re-listings of one server
    /// (2 s): list changes in between are answered by one re-list at the
    /// end of the interval, so the last change is never lost.
    pub relist_interval: Duration,
    /// Re-listings of one server per minute at most (10); further list
    /// changes wait for the minute to make room.
    pub max_relists_per_minute: usize,
    /// The window a server's unasked messages are counted in (10 s).
    pub noise_window: Duration,
    /// More messages than this (notifications and stderr lines) in one
    /// [`Self::noise_window`] make a server noisy (200, 20 a second).
    pub noisy_messages: u64,
}

impl Default for HubSettings {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            max_result_chars: 16_000,
            max_tools_per_server: 1_000,
            max_tools_bytes: 4 << 20,
            max_list_pages: 100,
            max_message_bytes: 8 << 20,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            stop_grace: Duration::from_secs(2),
            ping_interval: Duration::from_secs(30),
            relist_interval: Duration::from_secs(2),
            max_relists_per_minute: 10,
            noise_window: Duration::from_secs(10),
            noisy_messages: 200,
        }
    }
}

/// What the hub needs from the daemon.
#[derive(Clone)]
pub struct HubContext {
    /// Name resolution for URL servers (resolved once, checked, connected).
    pub resolver: Arc<dyn Resolver>,
    /// The address rule (`check_address`, `allow_private`) and user agent.
    pub policy: ExecPolicy,
    /// Bearer tokens by host, sent to URL servers without an
    /// `Authorization` header of their own.
    pub credentials: Option<CredentialStore>,
    /// TLS for `https` URL servers; `None`: the built-in Mozilla roots.
    /// The daemon passes the HTTP tools' configuration, so one CA file
    /// serves both.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Resource limits of stdio servers. Long-lived servers need more than
    /// a one-shot tool: see [`HubContext::server_limits`].
    pub stdio_limits: StdioLimits,
}

impl HubContext {
    /// Limits fit for a long-lived server such as a Node.js program: no CPU
    /// time limit, 16 GiB of address space (V8 reserves much it never
    /// uses), 1,024 open files, the rest as for stdio tools.
    pub fn server_limits() -> StdioLimits {
        StdioLimits {
            cpu_secs: u64::MAX,
            memory_bytes: 16 << 30,
            max_open_files: 1_024,
            max_processes: 4_096,
            ..StdioLimits::default()
        }
    }
}
