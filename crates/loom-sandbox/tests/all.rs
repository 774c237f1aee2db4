//! The one integration-test binary of `loom-sandbox`: each boundary tried from inside the
//! sandbox (filesystem, network, privileges), each limit hit (processes, wall clock, CPU, output,
//! file size, memory), and ordinary work in the workspace. See `suite/`.

// Helpers outside `#[test]` functions unwrap too: in a test, a panic is the failure report.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod suite;
