//! Putting a reply on the wire: JSON bodies, SSE frames, and the body reshaping that a
//! [`Fault`] asks for (pieces of a fixed size, delays between them, a connection cut short).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use crate::error::MockError;
use crate::fault::Fault;

/// How long a dropping stream waits before failing, so that the bytes before the cut leave
/// the server's write buffer instead of being discarded with the connection.
const FLUSH_BEFORE_DROP: Duration = Duration::from_millis(20);

/// A reply before it is sent: status, headers and the body in its natural pieces (one per SSE
/// event, or a single JSON document), kept apart so a fault can reshape them.
#[derive(Debug)]
pub(crate) struct Outgoing {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    pieces: Vec<Bytes>,
}

impl Outgoing {
    /// A JSON document as the whole body.
    pub(crate) fn json(status: StatusCode, body: &Value) -> Self {
        Self {
            status,
            headers: vec![(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            pieces: vec![Bytes::from(body.to_string())],
        }
    }

    /// `body` as it is, labelled JSON whatever it holds (a fault's malformed reply).
    pub(crate) fn raw(status: StatusCode, body: String) -> Self {
        Self {
            status,
            headers: vec![(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            pieces: vec![Bytes::from(body)],
        }
    }

    /// An SSE stream made of already framed events.
    pub(crate) fn sse(frames: Vec<Bytes>) -> Self {
        Self {
            status: StatusCode::OK,
            headers: vec![
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream; charset=utf-8"),
                ),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            pieces: frames,
        }
    }

    /// Adds a header; a value that is not a valid header value is left out, since every value
    /// the mock sets is its own ASCII.
    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers.push((HeaderName::from_static(name), value));
        }
        self
    }

    /// Removes a header set earlier (a fault replacing the usual one).
    pub(crate) fn without_header(mut self, name: &'static str) -> Self {
        self.headers.retain(|(n, _)| n.as_str() != name);
        self
    }

    /// The response to send, with its body reshaped as `fault` asks.
    pub(crate) fn into_response(self, fault: &Fault) -> Response {
        let body = if fault.shapes_body() {
            shaped_body(self.pieces, fault)
        } else if let [single] = self.pieces.as_slice() {
            Body::from(single.clone())
        } else {
            let pieces = self.pieces.into_iter().map(Ok::<_, Infallible>);
            Body::from_stream(futures_util::stream::iter(pieces))
        };
        let mut response = (self.status, body).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// One SSE event with only a `data:` line (OpenAI Chat Completions).
pub(crate) fn data_frame(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// One SSE event with an `event:` line naming its type (OpenAI Responses, Anthropic).
pub(crate) fn event_frame(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// The sentinel that ends an OpenAI Chat Completions stream.
pub(crate) fn done_frame() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// Splits `text` into pieces of about `words` words each, spaces kept, so streamed deltas
/// concatenate back to exactly `text`.
pub(crate) fn word_pieces(text: &str, words: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for (i, word) in text.split_inclusive(' ').enumerate() {
        current.push_str(word);
        if (i + 1) % words.max(1) == 0 {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || pieces.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Splits `text` into pieces of at most `size` bytes on character boundaries (at least one
/// character each), as providers stream tool-call arguments.
pub(crate) fn byte_pieces(text: &str, size: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if !current.is_empty() && current.len() + c.len_utf8() > size {
            pieces.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() || pieces.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// The body under a fault: cut at `drop_after_bytes`, re-split into `chunk_bytes` pieces (or
/// the natural pieces when no size is given), `chunk_delay_ms` between pieces, and an error at
/// the end when cut, which makes the server close the connection without finishing the body.
fn shaped_body(pieces: Vec<Bytes>, fault: &Fault) -> Body {
    let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
    let cut = match fault.drop_after_bytes {
        Some(n) if n < whole.len() => Some(n),
        _ => None,
    };
    let kept = cut.unwrap_or(whole.len());
    let queue: VecDeque<Bytes> = match fault.chunk_bytes.filter(|n| *n > 0) {
        Some(size) => whole[..kept]
            .chunks(size)
            .map(Bytes::copy_from_slice)
            .collect(),
        None => {
            let mut left = kept;
            let mut queue = VecDeque::new();
            for piece in pieces {
                if left == 0 {
                    break;
                }
                let take = piece.len().min(left);
                left -= take;
                queue.push_back(piece.slice(..take));
            }
            queue
        }
    };
    let delay = fault.chunk_delay_ms.map(Duration::from_millis);
    let state = Shaping {
        queue,
        delay,
        started: false,
        cut,
    };
    Body::from_stream(futures_util::stream::unfold(state, next_piece))
}

/// Where a reshaped body is in its sending.
struct Shaping {
    queue: VecDeque<Bytes>,
    delay: Option<Duration>,
    started: bool,
    cut: Option<usize>,
}

/// Yields the next piece of a reshaped body, sleeping between pieces, and ends with an error
/// when the body was cut.
async fn next_piece(mut state: Shaping) -> Option<(Result<Bytes, MockError>, Shaping)> {
    if let Some(piece) = state.queue.pop_front() {
        if state.started {
            if let Some(delay) = state.delay {
                tokio::time::sleep(delay).await;
            }
        }
        state.started = true;
        return Some((Ok(piece), state));
    }
    let bytes = state.cut.take()?;
    tokio::time::sleep(FLUSH_BEFORE_DROP).await;
    Some((Err(MockError::Dropped { bytes }), state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_pieces_concatenate_back() {
        for text in ["", "one", "one two three four five", "a  b ", "é ü ß"] {
            assert_eq!(word_pieces(text, 2).concat(), text);
        }
        assert_eq!(word_pieces("a b c d e", 2), vec!["a b ", "c d ", "e"]);
    }

    #[test]
    fn byte_pieces_respect_char_boundaries() {
        let text = "{\"query\":\"héllo wörld\"}";
        let pieces = byte_pieces(text, 3);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= 3));
        assert_eq!(byte_pieces("", 3), vec![String::new()]);
    }
}
