//! Per-session locks: one conversation's calls (proxied, appended through the API, deleted) run
//! in order, while other conversations run in parallel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use loom_core::SessionId;

/// One lock per conversation (keyed by its base session), so one conversation's calls are
/// synced, rendered and logged in order while other conversations run in parallel.
#[derive(Debug, Default)]
pub struct SessionLocks {
    map: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

/// Locks kept before unused ones are pruned.
const LOCKS_BEFORE_PRUNE: usize = 4096;

impl SessionLocks {
    /// The lock of `session`.
    pub fn get(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() > LOCKS_BEFORE_PRUNE {
            // A lock only the map holds guards nothing.
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        Arc::clone(map.entry(session.clone()).or_default())
    }
}
