//! The crate's one integration-test binary: fixtures of each API, whole and streamed, and
//! request checks.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod suite;
