//! The HTTP side of the daemon, in four layers, each using only the ones
//! below it (xtask's tidy test checks it at every depth):
//! - [`run`] (top): the process lifecycle that starts, reloads and stops
//!   the server, and what each handler generation starts.
//! - [`routes`]: the router and every endpoint of oapd's own — discovery,
//!   the crawler's, the MCP server at `/mcp`, the operator's status page —
//!   and the state of one handler generation they read.
//! - [`bridge`]: the tool bridge's HTTP side — `/api/chat`,
//!   `/v1/chat/completions`, `/v1/responses`, the pass-through routes —
//!   with the streamed encodings and the experience cache's endpoints.
//! - [`transport`] (bottom): the connection shell (listeners, caps,
//!   deadlines, the first head of every connection, body budgets) and who
//!   may talk to it (Host/Origin guard, tokens).
//!
//! [`observe`] sits below all four: every layer gives a request its id or
//! records what happened to it.

pub(crate) mod bridge;
pub(crate) mod observe;
pub(crate) mod routes;
pub(crate) mod run;
pub(crate) mod transport;
