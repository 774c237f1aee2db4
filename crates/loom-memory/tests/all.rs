//! The memory crate's one integration-test binary.

mod suite;
