//! Integration cases, one file per concern.

#[path = "../support/traces.rs"]
#[allow(
    unreachable_pub,
    dead_code,
    reason = "shared with the bench, which uses other parts"
)]
mod traces;

mod cache;
mod exact;
mod files;
mod limits;
