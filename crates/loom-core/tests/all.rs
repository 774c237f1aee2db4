//! The integration tests of loom-core, in one binary.

mod suite;
