//! The crate's one integration-test binary: fixtures of each API, whole and streamed.

mod suite;
