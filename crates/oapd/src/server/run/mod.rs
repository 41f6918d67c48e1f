//! The top of the server: the process lifecycle ([`lifecycle`]: sockets or
//! socket activation, readiness, watchdog, SIGHUP reload, SIGTERM drain)
//! and what each handler generation starts ([`start`]: the chat service,
//! the watch, the crawler).

pub(crate) mod lifecycle;
pub(crate) mod start;
