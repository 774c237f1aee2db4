//! L2, session working memory: notes an agent (or a program) saves during a session, each with
//! its provenance (the session and the seq of the event that saved it) and an optional time to
//! live.
//!
//! A note is an item of tier L2 and kind `note`: it is found by the same full-text search as
//! every other item, but it never merges with the log's L3/L4 items (a note that repeats a turn
//! would otherwise expire with the turn's memory). An expired note is never returned; it is
//! deleted by the next [`save`](crate::Memory::save) into the same memory, or by
//! [`purge_expired`](crate::Memory::purge_expired).

use loom_core::{AgentId, Seq, SessionId};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::item::ItemId;

/// The longest note accepted, in bytes: a note is a fact, not a document (use the knowledge
/// base for those).
pub const MAX_NOTE_BYTES: usize = 16 * 1024;

/// A note to save into L2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNote {
    /// The agent whose memory it is.
    pub agent: AgentId,
    /// The text.
    pub text: String,
    /// The session it was saved in.
    pub session: SessionId,
    /// The seq of the event that saved it (the assistant turn that called `memory:save`, or the
    /// session's last event when a program saves it).
    pub seq: Seq,
    /// When it was saved, UTC milliseconds.
    pub saved_ms: i64,
    /// How long it lives, in milliseconds; `None` keeps it until it is forgotten.
    pub ttl_ms: Option<i64>,
}

impl NewNote {
    /// Checks what the caller has to fix: an empty or oversized text, a seq of 0, a TTL that is
    /// not positive.
    pub fn validate(&self) -> Result<()> {
        if self.text.trim().is_empty() {
            return Err(MemoryError::InvalidInput {
                field: "text",
                reason: "a note must have some text".into(),
            });
        }
        if self.text.len() > MAX_NOTE_BYTES {
            return Err(MemoryError::InvalidInput {
                field: "text",
                reason: format!(
                    "the note is {} bytes; at most {MAX_NOTE_BYTES} are kept (add documents to \
                     the knowledge base instead)",
                    self.text.len()
                ),
            });
        }
        if self.seq == 0 {
            return Err(MemoryError::InvalidInput {
                field: "seq",
                reason: "a note points at the event that saved it: seq starts at 1".into(),
            });
        }
        if let Some(ttl) = self.ttl_ms {
            if ttl <= 0 {
                return Err(MemoryError::InvalidInput {
                    field: "ttl",
                    reason: format!("the time to live must be positive, not {ttl} ms"),
                });
            }
        }
        Ok(())
    }

    /// When it expires, if it does.
    pub fn expires_ms(&self) -> Option<i64> {
        self.ttl_ms.map(|ttl| self.saved_ms.saturating_add(ttl))
    }
}

/// What [`save`](crate::Memory::save) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The note's item.
    pub id: ItemId,
    /// `false` when the same note was already saved in this session (one more provenance, and
    /// the later expiry of the two kept).
    pub created: bool,
    /// When it expires, if it does.
    pub expires_ms: Option<i64>,
}

/// The wall clock in UTC milliseconds: what expiry is judged by.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
