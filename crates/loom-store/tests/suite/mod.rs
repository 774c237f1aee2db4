//! Test modules: shared builders and harnesses, the store and blob conformance suites (each
//! expanded against every backend by one macro), a property test comparing backends, the crash
//! test, and checks that only make sense for one backend.

mod blob;
mod durability;
mod pg_faults;
mod postgres;
mod props;
mod sqlite;
mod store;
mod support;
