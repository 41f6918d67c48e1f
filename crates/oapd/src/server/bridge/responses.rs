//! `POST /v1/responses`: OpenAI's Responses API over the same discovery and
//! tool loop as `/api/chat`. The wire translation is `oap_wire::responses`;
//! this is the glue: body limits, errors in OpenAI's shape, the kept
//! conversations behind `previous_response_id` (`response_store.rs`), and
//! the stream.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use oap_wire::responses::{self, ResponseHead, ResponseStream};
use serde_json::Value;

use oap_bridge::assembly::Prepared;
use oap_bridge::payload::{Held, Hold};
use oap_bridge::tool_loop as bridge;

use crate::server::bridge::chat::ChatService;
use crate::server::bridge::response_store::{self, ClientKey, Record, Recording};
use crate::server::transport::http::{self, Body};

fn error(status: StatusCode, message: &str) -> Response<Body> {
    http::json(
        status,
        &oap_wire::openai::openai_error(status.as_u16(), message),
    )
}

/// Handles one `/v1/responses` request.
pub async fn handle(chat: &Arc<ChatService>, request: Request<Incoming>) -> Response<Body> {
    // `previous_response_id` continues a response this client got before
    // (`response_store.rs`).
    let peer = request
        .extensions()
        .get::<http::PeerAddr>()
        .map(|p| p.0.ip());
    let client = ClientKey::of(request.headers(), peer);
    let (original, permit) =
        match http::read_json_object(request.into_body(), chat.max_request_bytes, error).await {
            Ok(read) => read,
            Err(answer) => return answer,
        };
    let mut record = match Record::read(&original, client) {
        Ok(record) => record,
        Err(refused) => return *refused,
    };
    let translated = responses::request_to_chat(&original).and_then(|chat_request| {
        oap_wire::openai::chat_request_to_ollama(&chat_request).map(|o| (chat_request, o))
    });
    let (chat_request, ollama) = match translated {
        Ok(pair) => pair,
        Err(err) => return http::json(StatusCode::BAD_REQUEST, &err.to_openai()),
    };
    let Value::Object(mut ollama) = ollama else {
        return error(StatusCode::BAD_REQUEST, "request could not be translated");
    };
    if let Some(object) = chat_request.as_object() {
        for (key, value) in object.iter().filter(|(k, _)| k.starts_with("oap_")) {
            ollama.insert(key.clone(), value.clone());
        }
    }
    drop(chat_request);
    record.continue_in(&original, &mut ollama);
    let mut options = match bridge::take_options(&mut ollama, &chat.settings) {
        Ok(options) => options,
        Err(err) => return error(StatusCode::BAD_REQUEST, &err.0),
    };
    options.conversation = chat.ctx.mixed_turns.enter(&mut ollama, &Default::default());
    let tools = match chat.tools_for(&ollama, &options).await {
        Ok(tools) => tools,
        Err(response) => return response,
    };
    // Budget, meta exposure, forcing and URL hygiene, as on the other
    // chat surfaces.
    let (tools, prepared) = chat.prepare(tools, &mut ollama, &options);
    let held = Held {
        images: Default::default(),
        permit: Some(Hold::new(permit)),
    };
    let tool_tokens = prepared.tool_tokens;
    let mut response = respond(
        chat, original, ollama, tools, options, prepared, held, record,
    )
    .await;
    crate::server::bridge::chat::set_tokens_header(&mut response, tool_tokens);
    response
}

#[allow(
    clippy::too_many_arguments,
    reason = "the request's parts, handed on once"
)]
async fn respond(
    chat: &Arc<ChatService>,
    original: Value,
    ollama: serde_json::Map<String, Value>,
    tools: Vec<bridge::InjectedTool>,
    options: bridge::ChatOptions,
    prepared: Prepared,
    held: Held,
    record: Record,
) -> Response<Body> {
    let created = oap_bridge::state::unix_now();
    let head = ResponseHead::for_request(&original, responses::new_id("resp"), created);
    drop(original);
    let rx = chat.start_loop(ollama, tools, options.clone(), prepared, held);
    if !options.stream {
        return match bridge::collect(rx)
            .await
            .and_then(|chunks| bridge::aggregate(&chunks).map_err(|e| (StatusCode::BAD_GATEWAY, e)))
        {
            Ok(answer) => {
                response_store::keep_answer(record, &head.id, &answer);
                http::json(StatusCode::OK, &responses::chat_to_response(&head, &answer))
            }
            Err((status, message)) => error(status, &message),
        };
    }
    let id = head.id.clone();
    let stream = Recording::new(ResponseStream::new(head), id, record);
    crate::server::bridge::streaming::stream_events(rx, stream, chat.keepalive)
        .await
        .unwrap_or_else(|(status, message)| error(status, &message))
}
