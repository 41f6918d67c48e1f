//! The tool bridge's HTTP side: the Ollama surface and the pass-through
//! routes ([`chat`], whose `ChatService` picks tools and runs
//! `oap_bridge`'s loop), OpenAI's Responses API over the same loop
//! ([`responses`], with the recent responses a client may continue in
//! [`response_store`]), the streamed answer in each wire format with
//! keep-alives ([`streaming`]), and the experience cache's endpoints
//! ([`experience`]). It uses the transport below it and no route.

pub(crate) mod chat;
pub(crate) mod experience;
pub(crate) mod response_store;
pub(crate) mod responses;
pub(crate) mod streaming;
