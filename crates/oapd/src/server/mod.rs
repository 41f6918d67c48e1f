//! The HTTP side of the daemon: the router ([`api`]), the connection shell
//! ([`http`], [`head`]), who may talk to it ([`guard`]), and the process
//! lifecycle that starts, reloads and stops it ([`lifecycle`]).

pub mod api;
pub mod guard;
pub mod head;
pub mod http;
pub mod lifecycle;
pub mod render;
