//! The connection shell, below every route: listeners, connection and body
//! budgets, deadlines and graceful shutdown ([`http`], [`pending`]), the
//! first request head of each connection ([`head`]), and who may talk to
//! the daemon ([`guard`]: Host and Origin; [`auth`]: tokens and clients).
//! Nothing here knows a route.

pub(crate) mod auth;
pub(crate) mod guard;
pub(crate) mod head;
pub(crate) mod http;
pub(crate) mod pending;
