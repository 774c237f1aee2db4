//! The request bodies this server sent for its model calls, exactly as sent, kept in memory so
//! the inspector can show "the request exactly as sent" rather than a rebuild from the log.
//!
//! A proxied call's body is kept at the point it goes upstream (after the render and the splice
//! into the client's request: tool definitions, injections and the client's own fields
//! included), one per upstream request, under the receipt's call number (a hidden recall round
//! is a call of its own). `/loom/v1/sessions/{id}/render` keeps the body it answers, which is
//! what its caller sends. Bodies are not stored: they are a cache, bounded in bytes
//! (`[inspector] keep_requests_bytes`), the oldest dropped first, and gone after a restart, when
//! the inspector falls back to the rebuild.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use axum::body::Bytes;
use loom_core::SessionId;
use loom_store::TenantId;

/// A kept body's key: the tenant (`None` for the local user), the session as stored, and the
/// model call's number.
type Key = (Option<TenantId>, SessionId, u64);

/// A body as it was sent.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// The bytes, exactly.
    pub(crate) body: Bytes,
    /// When they were kept, UTC milliseconds: a body kept before its session was created
    /// belongs to a deleted session whose id was used again.
    pub(crate) kept_ms: i64,
}

/// The bodies kept, the oldest dropped first past a bound on their bytes.
#[derive(Debug)]
pub struct SentRequests {
    limit: usize,
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// Each body with the number it was kept under (a key kept again gets a new one).
    map: HashMap<Key, (u64, Sent)>,
    /// Keys in the order they were kept, with their number then.
    order: VecDeque<(u64, Key)>,
    next: u64,
    /// The sum of the lengths of the bodies in `map`.
    bytes: usize,
}

impl SentRequests {
    /// Keeps at most `limit` bytes of bodies; 0 keeps none.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            inner: Mutex::new(Kept::default()),
        }
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Keeps `body` as the request of call `call` of `session` (stored id) of `tenant`. A body
    /// larger than the whole bound is not kept (the inspector rebuilds that one).
    pub(crate) fn keep(
        &self,
        tenant: Option<&TenantId>,
        session: &SessionId,
        call: u64,
        body: &Bytes,
        now_ms: i64,
    ) {
        if self.limit == 0 || body.len() > self.limit {
            return;
        }
        let key: Key = (tenant.cloned(), session.clone(), call);
        let mut k = self.lock();
        let n = k.next;
        k.next += 1;
        let sent = Sent {
            body: body.clone(),
            kept_ms: now_ms,
        };
        if let Some((_, old)) = k.map.insert(key.clone(), (n, sent)) {
            k.bytes -= old.body.len();
        }
        k.bytes += body.len();
        k.order.push_back((n, key));
        while k.bytes > self.limit {
            let Some((n, key)) = k.order.pop_front() else {
                break;
            };
            // A key kept again since is dropped with its newer body, not here.
            if k.map.get(&key).is_some_and(|(m, _)| *m == n) {
                if let Some((_, old)) = k.map.remove(&key) {
                    k.bytes -= old.body.len();
                }
            }
        }
        // Keys kept again leave stale entries behind; drop them once they outnumber the live.
        if k.order.len() > 2 * k.map.len() + 64 {
            let Kept { map, order, .. } = &mut *k;
            order.retain(|(n, key)| map.get(key).is_some_and(|(m, _)| m == n));
        }
    }

    /// The body kept for call `call` of `session` of `tenant`, if it is still held.
    pub(crate) fn get(
        &self,
        tenant: Option<&TenantId>,
        session: &SessionId,
        call: u64,
    ) -> Option<Sent> {
        let key: Key = (tenant.cloned(), session.clone(), call);
        self.lock().map.get(&key).map(|(_, s)| s.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    #[test]
    fn the_oldest_bodies_go_first_past_the_bound() {
        let kept = SentRequests::new(10);
        let t = Some(TenantId::new("a").unwrap());
        for call in 1..=4 {
            kept.keep(t.as_ref(), &sid("s"), call, &Bytes::from(vec![b'x'; 3]), 0);
        }
        assert_eq!(kept.bytes(), 9);
        assert!(kept.get(t.as_ref(), &sid("s"), 1).is_none());
        assert_eq!(kept.get(t.as_ref(), &sid("s"), 4).unwrap().body.len(), 3);
        // Another tenant's key names another body.
        assert!(kept.get(None, &sid("s"), 4).is_none());
        // Kept again: the newer body, counted once.
        kept.keep(t.as_ref(), &sid("s"), 4, &Bytes::from_static(b"yy"), 1);
        assert_eq!(kept.bytes(), 8);
        assert_eq!(&kept.get(t.as_ref(), &sid("s"), 4).unwrap().body[..], b"yy");
        // Too large for the bound, and a bound of 0: nothing kept.
        kept.keep(t.as_ref(), &sid("s"), 5, &Bytes::from(vec![0; 11]), 2);
        assert!(kept.get(t.as_ref(), &sid("s"), 5).is_none());
        let off = SentRequests::new(0);
        off.keep(None, &sid("s"), 1, &Bytes::from_static(b"{}"), 0);
        assert_eq!(off.bytes(), 0);
        assert!(off.get(None, &sid("s"), 1).is_none());
    }

    #[test]
    fn many_keys_kept_again_leave_a_bounded_order() {
        let kept = SentRequests::new(1 << 20);
        for i in 0..10_000 {
            kept.keep(None, &sid("s"), i % 3, &Bytes::from_static(b"{}"), 0);
        }
        assert_eq!(kept.lock().map.len(), 3);
        assert!(kept.lock().order.len() <= 2 * 3 + 64 + 1);
        assert_eq!(kept.bytes(), 6);
    }
}
