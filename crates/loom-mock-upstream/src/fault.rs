//! What can go wrong on purpose: a [`Fault`] describes one misbehaviour of the upstream
//! (an error status, a slow or fragmented body, a dropped connection), applied to one request
//! or to all of them.

use serde::{Deserialize, Serialize};

/// A misbehaviour to inject into a reply, so that tests can see how a client copes with the
/// failures real providers produce. Every field is optional and they combine: a fault with a
/// `status` and a `drop_after_bytes` sends a truncated error body.
///
/// Queued faults ([`crate::MockHandle::push_fault`]) apply to the next request, in order; the
/// default fault ([`crate::MockHandle::set_default_fault`]) applies when the queue is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Answer this HTTP status with an error body in the provider's own shape (429 and 529
    /// are what clients must retry on; 400 is what they must not).
    pub status: Option<u16>,
    /// Write the body in pieces of this many bytes, splitting SSE events anywhere, because
    /// real networks do and a client's parser must reassemble them.
    pub chunk_bytes: Option<usize>,
    /// Sleep this long between pieces, to exercise timeouts and incremental forwarding.
    pub chunk_delay_ms: Option<u64>,
    /// Close the connection after this many body bytes (before the body is complete), as an
    /// upstream that dies mid-stream does. A body shorter than this is sent whole.
    pub drop_after_bytes: Option<usize>,
    /// Wait this long before answering at all (before the status line).
    pub delay_ms: Option<u64>,
    /// With a `status`: send this `retry-after` value (seconds, or an HTTP date) instead of the
    /// short `retry-after-ms` error replies carry otherwise, so a client's honouring of the
    /// provider's wait can be told apart from its own back-off.
    pub retry_after: Option<String>,
    /// Without a `status`: answer 200 with exactly this body instead of the generated reply (a
    /// provider that sends malformed JSON, or vectors of the wrong length).
    pub body: Option<String>,
}

impl Fault {
    /// A fault that answers `status` in the provider's error shape; the most common case
    /// gets a shorthand so tests read as what they check.
    pub fn status(status: u16) -> Self {
        Self {
            status: Some(status),
            ..Self::default()
        }
    }

    /// Whether the body must be reshaped (split, slowed or cut) rather than sent as is.
    pub(crate) fn shapes_body(&self) -> bool {
        self.chunk_bytes.is_some()
            || self.chunk_delay_ms.is_some()
            || self.drop_after_bytes.is_some()
    }
}
