//! The integration tests of loom-tokens (one binary; the cases live in `suite/`).

mod suite;
