//! The one integration-test binary of `loom-runtime`: hooks, summaries (deterministic and over
//! HTTP against a local mock server), the background worker, and the TaskContextManager. See
//! `suite/`.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod suite;
