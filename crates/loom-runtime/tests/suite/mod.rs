//! Test modules, one per part of the runtime, and the builders and mock server they share.

mod hooks;
mod http;
mod mock;
mod summary;
mod support;
mod task;
mod worker;
