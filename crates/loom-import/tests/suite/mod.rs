//! Shared helpers; one file per topic.

mod docs;
mod errors;
mod formats;
mod large;
mod native;
mod traces;

use loom_core::{Api, EventBody, NewEvent};
use loom_import::{
    parse_file, parse_reader, parse_slice, ImportError, ParseOptions, ParsedSession,
};
use loom_store::MemoryBlobStore;

/// Where the shared traces live, relative to this crate.
pub(crate) const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

/// Options with a fixed timestamp.
pub(crate) fn opts(format: impl Into<Option<Api>>) -> ParseOptions {
    let mut o = ParseOptions::new(1_700_000_000_000);
    o.format = format.into();
    o
}

/// Parses `text` as the file `name` (stem `conv`), through both readers: the streaming one and
/// the one for documents in memory must agree on every input, sessions and errors alike.
pub(crate) fn parse_as(
    text: &str,
    format: impl Into<Option<Api>>,
    blobs: &MemoryBlobStore,
) -> Result<Vec<ParsedSession>, ImportError> {
    let format = format.into();
    let streamed = parse_reader("conv.json", "conv", text.as_bytes(), &opts(format), blobs);
    let sliced = parse_slice("conv.json", "conv", text.as_bytes(), &opts(format), blobs);
    match (&streamed, &sliced) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the two readers disagree on {text}"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "on {text}"),
        _ => panic!("one reader failed, the other did not, on {text}: {streamed:?} / {sliced:?}"),
    }
    same_as_file(text, format);
    streamed
}

/// Checks that a file holding `text` reads as the streaming reader reads it: `parse_file` parses
/// a file from memory one line at a time and falls back to the streaming reader.
pub(crate) fn same_as_file(text: &str, format: impl Into<Option<Api>>) {
    let format = format.into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conv.json");
    std::fs::write(&path, text).unwrap();
    let name = path.display().to_string();
    let blobs = MemoryBlobStore::new();
    let streamed = parse_reader(&name, "conv", text.as_bytes(), &opts(format), &blobs);
    let filed = parse_file(&path, &opts(format), &blobs);
    match (&streamed, &filed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the file reader disagrees on {text}"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "on {text}"),
        _ => panic!("one reader failed, the other did not, on {text}: {streamed:?} / {filed:?}"),
    }
}

/// Parses `text` with auto-detection; panics on error.
pub(crate) fn parse_ok(text: &str) -> Vec<ParsedSession> {
    let blobs = MemoryBlobStore::new();
    match parse_as(text, None, &blobs) {
        Ok(s) => s,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The bodies of a session's events.
pub(crate) fn bodies(events: &[NewEvent]) -> Vec<EventBody> {
    events.iter().map(|e| e.body.clone()).collect()
}

/// Bodies as JSON values, for compact comparisons.
pub(crate) fn json_bodies(events: &[NewEvent]) -> serde_json::Value {
    serde_json::to_value(bodies(events)).unwrap()
}

/// The error of parsing `text` (auto), as text.
pub(crate) fn parse_err(text: &str) -> String {
    let blobs = MemoryBlobStore::new();
    match parse_as(text, None, &blobs) {
        Ok(s) => panic!("expected an error, got {} sessions", s.len()),
        Err(e) => e.to_string(),
    }
}
