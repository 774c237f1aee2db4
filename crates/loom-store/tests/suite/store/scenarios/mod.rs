//! The scenarios, each a function generic over the backend's harness. Every `pub(crate) fn` here
//! is a scenario and must be listed in `with_store_scenarios!`.

pub(crate) mod keys;
pub(crate) mod log;
pub(crate) mod records;
pub(crate) mod turns;
