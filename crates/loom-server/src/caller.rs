//! The tenant a request was made by, for what is said about the request afterwards: an error
//! names the caller's ids as the caller names them, never as they are stored (`TENANT/id`).
//!
//! The `observe` layer opens a slot for each request ([`scope`]); authenticating a key fills it
//! ([`seen`]); once the handler has answered, [`unscoped`] takes the tenant's prefix off the ids
//! an error message names.

use std::cell::RefCell;
use std::future::Future;

use loom_store::TenantId;

tokio::task_local! {
    static CALLER: RefCell<Option<TenantId>>;
}

/// Runs `f` with a slot for its caller's tenant; returns its output and the tenant, when a key
/// named one.
pub(crate) async fn scope<T>(f: impl Future<Output = T>) -> (T, Option<TenantId>) {
    CALLER
        .scope(RefCell::new(None), async {
            let out = f.await;
            let tenant = CALLER.with(|c| c.borrow().clone());
            (out, tenant)
        })
        .await
}

/// Notes `tenant` as the current request's caller (outside a [`scope`], nothing), and hands it
/// back.
pub(crate) fn seen(tenant: TenantId) -> TenantId {
    let _ = CALLER.try_with(|c| *c.borrow_mut() = Some(tenant.clone()));
    tenant
}

/// `text` with every id stored under `tenant` (`TENANT/id`) written as the tenant names it
/// (`id`): the prefix is taken off where an id begins (after a space, a quote, a backtick or a
/// bracket, or at the start), once per id.
pub(crate) fn unscoped(text: &str, tenant: &TenantId) -> String {
    let prefix = format!("{tenant}/");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut before: Option<char> = None;
    while let Some(at) = rest.find(&prefix) {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let boundary = head.chars().next_back().or(before);
        if !boundary.is_none_or(|c| matches!(c, ' ' | '`' | '"' | '\'' | '(' | '[' | '\n')) {
            // Inside a word: not an id's start.
            out.push_str(&prefix);
        }
        rest = &tail[prefix.len()..];
        // What follows a prefix follows a `/`: never an id's start.
        before = Some('/');
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_lose_their_tenant_prefix_where_they_begin() {
        let t = TenantId::new("acme").unwrap();
        assert_eq!(
            unscoped("session `acme/demo`, model call 3: already", &t),
            "session `demo`, model call 3: already"
        );
        assert_eq!(unscoped("acme/x and \"acme/y\"", &t), "x and \"y\"");
        // A client's own id that holds the tenant's name keeps it after the stored prefix.
        assert_eq!(unscoped("session `acme/acme/x`", &t), "session `acme/x`");
        // Not an id: left alone.
        assert_eq!(unscoped("foo-acme/bar", &t), "foo-acme/bar");
    }
}
