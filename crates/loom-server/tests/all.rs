//! The one integration-test binary of `loom-server`: a real server on loopback, a mock upstream
//! speaking the providers' wire formats, and a real HTTP client. See `suite/`.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod suite;
