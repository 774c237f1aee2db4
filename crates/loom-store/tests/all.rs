//! The one integration-test binary of `loom-store`: the conformance suites every backend must
//! pass, the durability test, and the backend-specific checks. See `suite/`.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod suite;
