//! The crate's one integration-test binary: the HTTP client against the mock upstream.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod suite;
