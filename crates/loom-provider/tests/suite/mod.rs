//! The client against the mock upstream: each API, streamed and not, retries, timeouts, errors.

mod client;
