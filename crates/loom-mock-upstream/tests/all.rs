//! The mock's one integration-test binary: every endpoint over a real socket, as clients see it.

// The workspace allows these inside `#[test]` functions only; the shared helpers that read
// replies panic for the same reason the tests do: a panic is a failure with a backtrace.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test by panicking"
)]

mod suite;
