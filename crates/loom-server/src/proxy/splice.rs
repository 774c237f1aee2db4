//! A streamed reply that calls `loom_recall`: the client gets one stream, spliced from the
//! upstream's streams of every round.
//!
//! Loom answers each round's `loom_recall` call and asks the upstream again, streamed; how the
//! rounds' events become one stream (what is held, left out and renumbered) is the API's own
//! business, in [`loom_wire::Splice`].
//!
//! What the client received is assembled again as the client's SDK assembles it, and that is the
//! reply Loom logs (with the last round's usage), before the event that completes the stream.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use loom_core::Api;
use loom_wire::{AssistantReply, Splice, SseEvent, SseParser, StreamAssembler};
use tokio::sync::mpsc::Sender;

use super::recall::{self, Rounds};
use super::upstream::{log_reply, next_chunk, respond, LogTarget};
use crate::state::AppState;

/// An event on the wire.
fn encode(event: &SseEvent) -> Bytes {
    let mut out = String::with_capacity(event.data.len() + 32);
    if let Some(name) = &event.event {
        out.push_str("event: ");
        out.push_str(name);
        out.push('\n');
    }
    for line in event.data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// What goes to the client: the events, the reply they add up to, and whether it is logged.
struct ToClient {
    tx: Sender<Result<Bytes, std::io::Error>>,
    assembler: Option<StreamAssembler>,
    /// The event that completes the reply, held until the reply is logged.
    last: Vec<SseEvent>,
    gone: bool,
}

impl ToClient {
    /// Sends `events`, holding back the one that completes the reply and any after it.
    async fn send(&mut self, events: Vec<SseEvent>) {
        for event in events {
            if self.gone {
                return;
            }
            let completes = match self.assembler.as_mut() {
                Some(asm) => {
                    let _ = asm.push(&event);
                    asm.is_complete()
                }
                None => true,
            };
            if completes {
                self.last.push(event);
                continue;
            }
            if self.tx.send(Ok(encode(&event))).await.is_err() {
                self.gone = true;
            }
        }
    }

    /// The reply as the client assembled it.
    fn reply(&mut self) -> Option<AssistantReply> {
        self.assembler.take().and_then(|a| a.finish().ok())
    }

    async fn flush(&mut self) {
        for event in std::mem::take(&mut self.last) {
            if self.gone || self.tx.send(Ok(encode(&event))).await.is_err() {
                self.gone = true;
                return;
            }
        }
    }

    async fn fail(&mut self, e: std::io::Error) {
        let _ = self.tx.send(Err(e)).await;
    }
}

/// Relays a streamed reply to a request that offered `loom_recall`, answering its calls.
#[expect(clippy::too_many_arguments, reason = "one relay, its parts named")]
pub(crate) fn stream(
    state: Arc<AppState>,
    api: Api,
    model: String,
    upstream: reqwest::Response,
    status: StatusCode,
    headers: HeaderMap,
    target: LogTarget,
    deadline: Instant,
    rounds: Rounds,
) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        let mut client = ToClient {
            tx,
            assembler: Some(StreamAssembler::new(api)),
            last: Vec::new(),
            gone: false,
        };
        relay_rounds(
            &state,
            api,
            &model,
            upstream,
            target,
            deadline,
            rounds,
            &mut client,
        )
        .await;
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    respond(status, headers, Body::from_stream(body))
}

#[expect(clippy::too_many_arguments, reason = "one relay, its parts named")]
async fn relay_rounds(
    state: &Arc<AppState>,
    api: Api,
    model: &str,
    mut upstream: reqwest::Response,
    mut target: LogTarget,
    deadline: Instant,
    rounds: Rounds,
    client: &mut ToClient,
) {
    let session = target.session.clone();
    let mut splice = Splice::new(api);
    let mut done = 0;
    loop {
        // One round's stream.
        let mut parser = SseParser::new();
        let mut assembler = StreamAssembler::new(api);
        let mut chunks = upstream.bytes_stream();
        loop {
            let chunk = match next_chunk(state, api, &mut chunks, deadline).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    target.span.fail(super::upstream::stream_error(&e));
                    client.fail(e).await;
                    return;
                }
            };
            for event in parser.push(&chunk) {
                let _ = assembler.push(&event);
                let out = splice.take(event);
                client.send(out).await;
            }
            if client.gone {
                return;
            }
        }
        let reply = match assembler.finish() {
            Ok(reply) => reply,
            Err(e) => {
                // Relayed as it came; nothing partial is logged.
                tracing::warn!("{session}: a streamed reply was not logged: {e}");
                state.metrics.unlogged_reply();
                let out = splice.settle(false);
                client.send(out).await;
                client.flush().await;
                return;
            }
        };
        let calls = recall::calls_recall(&reply);
        if calls && done < rounds.max_rounds {
            done += 1;
            match recall::ask_again(state, api, &rounds, &mut target, &reply, deadline).await {
                Ok(recall::Round::Sent(next)) => {
                    splice.next_round();
                    upstream = next;
                    continue;
                }
                // No room for the round: the held reply follows without its recall calls.
                Ok(recall::Round::NoRoom) => {}
                Err(e) => {
                    target.span.fail("recall_round");
                    tracing::warn!("{session}: a recall round failed: {}", e.message);
                    let seq = splice.sequence_number();
                    client
                        .send(vec![loom_wire::stream_error(
                            api,
                            e.status.as_u16(),
                            &e.message,
                            seq,
                        )])
                        .await;
                    client.flush().await;
                    return;
                }
            }
        }
        let out = splice.settle(calls);
        client.send(out).await;
        match client.reply() {
            Some(mut seen) => {
                // The usage is the last round's, which the call records.
                seen.usage = reply.usage;
                log_reply(state, api, model, target, seen).await;
            }
            None => {
                state.metrics.unlogged_reply();
                tracing::warn!("{session}: a spliced stream did not complete; not logged");
            }
        }
        client.flush().await;
        return;
    }
}
