//! Shared helpers: fixtures, and streams fed whole, split at every byte, or one byte at a time.

mod check;
mod replies;
mod streams;

use loom_wire::{AssistantReply, Result, SseEvent, SseParser, StreamAssembler};

use loom_core::Api;

/// A file from `tests/fixtures`.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The SSE events of a stream delivered in `chunks`.
pub(crate) fn sse_events(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(parser.push(chunk));
    }
    events.extend(parser.finish());
    events
}

/// Feeds `events` to an assembler, stopping at the first error.
pub(crate) fn assemble_events(api: Api, events: &[SseEvent]) -> Result<AssistantReply> {
    let mut assembler = StreamAssembler::new(api);
    for event in events {
        assembler.push(event)?;
    }
    assembler.finish()
}

/// Feeds `chunks` through the SSE parser and the assembler.
pub(crate) fn assemble(api: Api, chunks: &[&[u8]]) -> Result<AssistantReply> {
    assemble_events(api, &sse_events(chunks))
}

/// The stream's result, after checking that every two-chunk split and the one-byte-at-a-time
/// feed give exactly the events of the whole stream (the assembler sees nothing else, so the
/// reply, or the error, is the same too).
pub(crate) fn assemble_every_split(api: Api, bytes: &[u8]) -> Result<AssistantReply> {
    let whole = sse_events(&[bytes]);
    for cut in 0..=bytes.len() {
        let split = sse_events(&[&bytes[..cut], &bytes[cut..]]);
        assert_eq!(split, whole, "split at byte {cut}");
    }
    let bytes_one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(sse_events(&bytes_one_by_one), whole, "one byte at a time");
    assemble_events(api, &whole)
}
