//! Integration cases, one file per concern.

#[path = "../support/traces.rs"]
mod traces;

mod cache;
mod exact;
mod files;
mod limits;
