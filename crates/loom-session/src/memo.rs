//! What a live session remembers of the last client body synced into it, so that the next body
//! is read from where that one ended (the proxy's `ingest`, which fills it in).

use loom_core::Api;
use loom_wire::CallIds;

/// The last client body synced into a session, as far as reading the next one needs.
#[derive(Debug, Clone)]
pub struct BodyMemo {
    /// The API the body was in.
    pub api: Api,
    /// The hash of the top-level fields the importer reads besides the items.
    pub header: u128,
    /// How many items the body had.
    pub items: usize,
    /// Their hash.
    pub digest: u128,
    /// The hash of all of them but the last.
    pub before_last: u128,
    /// The hash of the last item without its cache breakpoints: a client that moves its
    /// breakpoint to the newest message (Claude Code) sends that item again without it.
    pub last_unmarked: Option<u128>,
    /// The log's first `events` events are those items, read.
    pub events: usize,
    /// The call ids the items used (every call answered).
    pub calls: CallIds,
}

impl BodyMemo {
    /// The log events the remembered items account for.
    pub fn events(&self) -> usize {
        self.events
    }
}
