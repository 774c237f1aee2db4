//! The one error of a provider call: what failed, at which URL, after how many attempts, and
//! whether trying again later may help.

use std::time::Duration;

use loom_wire::ProviderError;

/// Why a call to a provider (or the client's setup) failed.
///
/// Every variant of a call carries the URL and the attempts made, so a log line says what was
/// done; [`CallError::retryable`] says whether the same call may succeed later. The client has
/// already retried what it may (only before a reply's first byte), so a caller that retries a
/// retryable error does so at its own level: a whole turn, none of which was returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The configuration cannot work: a base URL that is not a URL, a key or header that cannot
    /// be sent, a zero timeout.
    #[error("provider config: field `{field}`: {reason}")]
    Config {
        /// The field at fault, e.g. `base_url` or `provider.headers.x-team`.
        field: String,
        /// What was expected instead.
        reason: String,
    },
    /// The request body given to the client cannot be sent as it is.
    #[error("request body: {reason}")]
    Request {
        /// What is wrong with it.
        reason: String,
    },
    /// No connection, or the connection broke before the reply's headers.
    #[error("{url}: could not get a reply after {attempts} attempt(s): {detail}")]
    Connect {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The transport's own words (`connection refused`, …).
        detail: String,
    },
    /// Nothing came back in time.
    #[error("{url}: timed out after {attempts} attempt(s): no {waiting_for} within {after:?}")]
    Timeout {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What was awaited: `reply headers` (per attempt) or `complete reply` (the whole call).
        waiting_for: &'static str,
        /// The limit that ran out.
        after: Duration,
    },
    /// The provider refused with 429 on every attempt.
    #[error(
        "{url}: rate limited (429) after {attempts} attempt(s){}: {message}",
        wait(retry_after)
    )]
    RateLimited {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// How long the provider asked to wait, when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The provider said it is overloaded (Anthropic's 529) on every attempt.
    #[error(
        "{url}: provider overloaded ({status}) after {attempts} attempt(s){}: {message}",
        wait(retry_after)
    )]
    Overloaded {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The status (529).
        status: u16,
        /// How long the provider asked to wait, when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// Any other error status, with the provider's error body read for its type and message.
    #[error("{url}: status {status} ({kind}) after {attempts} attempt(s): {message}")]
    Status {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The HTTP status.
        status: u16,
        /// The provider's error type or code (`invalid_request_error`, …), or `unknown` when the
        /// body has none.
        kind: String,
        /// The provider's message, or the start of the body when it is not the provider's shape.
        message: String,
    },
    /// A reply that is not the provider's format, or an error the provider reported inside a
    /// successful reply (an `error` event mid-stream).
    #[error("{url}: unreadable reply after {attempts} attempt(s): {source}")]
    Protocol {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What the parser found.
        #[source]
        source: ProviderError,
    },
    /// The reply started and then broke off (the connection dropped, or went silent for longer
    /// than the idle timeout). Never retried by the client: part of the reply was already seen.
    #[error(
        "{url}: the reply broke off after {received} byte(s) ({attempts} attempt(s)): {reason}"
    )]
    StreamCut {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Body bytes received before the cut.
        received: u64,
        /// What happened.
        reason: String,
    },
    /// An embeddings reply that is not what was asked for: not JSON, a vector missing, of
    /// another length than the others or than the dimensions asked for, or not numbers.
    #[error("{url}: unusable embeddings after {attempts} attempt(s): field `{field}`: {reason}")]
    Embeddings {
        /// The endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// JSON path of the field at fault (empty for the whole body).
        field: String,
        /// What was expected instead.
        reason: String,
    },
}

/// ` (retry after 2s)`, or nothing.
fn wait(retry_after: &Option<Duration>) -> String {
    retry_after
        .map(|d| format!(" (retry after {d:?})"))
        .unwrap_or_default()
}

impl CallError {
    /// Whether the same call may succeed if made again later: true for connection failures,
    /// timeouts, rate limits, overload, server-side statuses (408, 409, 5xx), a reply cut short
    /// and an error the provider reported in the middle of a reply (an overloaded stream); false
    /// for the request's or the config's own faults and for a reply Loom cannot read.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::Timeout { .. }
            | Self::RateLimited { .. }
            | Self::Overloaded { .. }
            | Self::StreamCut { .. } => true,
            Self::Status { status, .. } => retryable_status(*status),
            Self::Protocol { source, .. } => matches!(source, ProviderError::Upstream { .. }),
            Self::Config { .. } | Self::Request { .. } | Self::Embeddings { .. } => false,
        }
    }

    /// How many requests were sent (0 when the call never started).
    pub fn attempts(&self) -> u32 {
        match self {
            Self::Connect { attempts, .. }
            | Self::Timeout { attempts, .. }
            | Self::RateLimited { attempts, .. }
            | Self::Overloaded { attempts, .. }
            | Self::Status { attempts, .. }
            | Self::Protocol { attempts, .. }
            | Self::StreamCut { attempts, .. }
            | Self::Embeddings { attempts, .. } => *attempts,
            Self::Config { .. } | Self::Request { .. } => 0,
        }
    }

    pub(crate) fn config(field: &str, reason: impl Into<String>) -> Self {
        Self::Config {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }

    /// A config error's field, prefixed with the config file's table.
    pub(crate) fn in_table(self, table: &str) -> Self {
        match self {
            Self::Config { field, reason } => Self::Config {
                field: format!("{table}.{field}"),
                reason,
            },
            other => other,
        }
    }

    /// The same error with the attempt count it ended on.
    pub(crate) fn with_attempts(mut self, n: u32) -> Self {
        match &mut self {
            Self::Connect { attempts, .. }
            | Self::Timeout { attempts, .. }
            | Self::RateLimited { attempts, .. }
            | Self::Overloaded { attempts, .. }
            | Self::Status { attempts, .. }
            | Self::Protocol { attempts, .. }
            | Self::StreamCut { attempts, .. }
            | Self::Embeddings { attempts, .. } => *attempts = n,
            Self::Config { .. } | Self::Request { .. } => {}
        }
        self
    }
}

/// The statuses a provider uses for "not now": a request timeout, a conflict, rate limits,
/// server errors and Anthropic's overload.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_follows_the_status() {
        let status = |status| CallError::Status {
            url: "u".into(),
            attempts: 1,
            status,
            kind: "k".into(),
            message: "m".into(),
        };
        assert!(status(503).retryable());
        assert!(status(409).retryable());
        assert!(!status(400).retryable());
        assert!(!status(401).retryable());
        assert!(!CallError::config("base_url", "x").retryable());
        let cut = CallError::StreamCut {
            url: "u".into(),
            attempts: 1,
            received: 9,
            reason: "r".into(),
        };
        assert!(cut.retryable());
        assert_eq!(cut.with_attempts(3).attempts(), 3);
        let protocol = |source| CallError::Protocol {
            url: "u".into(),
            attempts: 1,
            source,
        };
        let mid_stream = protocol(ProviderError::Upstream {
            api: loom_core::Api::Anthropic,
            record: "event 4 (error)".into(),
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        });
        assert!(mid_stream.retryable());
        let garbled = protocol(ProviderError::Incomplete {
            api: loom_core::Api::Anthropic,
            reason: "r".into(),
        });
        assert!(!garbled.retryable());
    }
}
