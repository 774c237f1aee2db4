//! Integration tests of the importers: real traces, every format, bad input, large outputs, and
//! the examples of `docs/formats.md`.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod suite;
