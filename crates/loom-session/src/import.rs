//! Storing what `loom-import` reads: all inputs are read and checked first, then each new
//! session is written with one atomic `create_session` (the reading itself stores nothing but
//! the long outputs it offloads to the blob store).
//!
//! Bad input therefore changes nothing: every file is parsed and every session compared with the
//! store before the first write. A session that is already stored with identical events (ts_ms
//! aside) is left alone; one stored with different events is an error naming the first seq that
//! differs, since the log is never rewritten.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use loom_core::{Event, EventBody, NewEvent, Seq, SessionId};
use loom_store::{BlobStore, NewSession, Store};
use serde::Serialize;

use loom_import::{parse_reader, ImportError, ParseOptions, ParsedSession, Result};

/// Receives progress reports; every method defaults to doing nothing.
pub trait Progress {
    /// Reading starts; the inputs hold `total_bytes` bytes.
    fn reading(&mut self, total_bytes: u64) {
        let _ = total_bytes;
    }
    /// `bytes` more input bytes were read.
    fn read(&mut self, bytes: u64) {
        let _ = bytes;
    }
    /// Writing starts; `sessions` sessions are new.
    fn writing(&mut self, sessions: u64) {
        let _ = sessions;
    }
    /// One more session was written.
    fn written(&mut self, session: &SessionId) {
        let _ = session;
    }
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// What happened to one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Newly stored.
    Imported,
    /// Already stored with identical events; nothing was written.
    Unchanged,
    /// Stored with a log the import extends: the events past it were appended (only from
    /// [`plan_extending`]).
    Extended,
}

/// One session's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionReport {
    /// The session.
    pub id: SessionId,
    /// What happened to it.
    pub outcome: Outcome,
    /// Its number of events.
    pub events: u64,
    /// Its tool outputs that live in the blob store.
    pub blobs: u64,
}

/// The result of an import.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Inputs read.
    pub files: usize,
    /// Sessions newly stored.
    pub imported: usize,
    /// Sessions already stored with identical events.
    pub unchanged: usize,
    /// Sessions stored with a log the import extended (see [`plan_extending`]).
    pub extended: usize,
    /// Events written.
    pub events: u64,
    /// Tool outputs offloaded to the blob store in the sessions written.
    pub blobs: u64,
    /// Every session, in input order.
    pub sessions: Vec<SessionReport>,
}

/// Imports files into a store and its blob store.
#[derive(Debug)]
pub struct Importer<'a> {
    store: &'a dyn Store,
    blobs: &'a dyn BlobStore,
    opts: ParseOptions,
}

impl<'a> Importer<'a> {
    /// An importer writing to `store` and `blobs`.
    pub fn new(store: &'a dyn Store, blobs: &'a dyn BlobStore, opts: ParseOptions) -> Self {
        Self { store, blobs, opts }
    }

    /// Reads, checks and stores `paths`: all or nothing for input errors.
    pub fn run(&self, paths: &[PathBuf], progress: &mut dyn Progress) -> Result<ImportReport> {
        if self.opts.session.is_some() && paths.len() > 1 {
            return Err(ImportError::Options(format!(
                "--session names one conversation, but {} files were given",
                paths.len()
            )));
        }
        let total = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        progress.reading(total);
        let mut parsed = Vec::new();
        for path in paths {
            parsed.extend(self.parse_path(path, progress)?);
        }
        let plan = plan(self.store, parsed)?;
        let mut report = plan.commit(self.store, self.opts.ts_ms, progress)?;
        report.files = paths.len();
        Ok(report)
    }

    fn parse_path(&self, path: &Path, progress: &mut dyn Progress) -> Result<Vec<ParsedSession>> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| ImportError::Io {
            file: name.clone(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| name.clone());
        let reader = Counting {
            inner: file,
            progress,
        };
        parse_reader(&name, &stem, reader, &self.opts, self.blobs)
    }
}

/// Reports bytes as they are read.
struct Counting<'p, R> {
    inner: R,
    progress: &'p mut dyn Progress,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.read(n as u64);
        Ok(n)
    }
}

/// Sessions checked against the store, ready to write.
#[derive(Debug)]
pub struct Plan {
    /// Each session, what will happen to it, and how many of its events are stored already.
    sessions: Vec<(ParsedSession, Outcome, usize)>,
}

/// Compares `sessions` with each other and with the store; writes nothing.
///
/// A session given twice with identical events is kept once; with different events it is an
/// error. A session already stored must have identical events.
pub fn plan(store: &dyn Store, sessions: Vec<ParsedSession>) -> Result<Plan> {
    plan_with(store, sessions, false)
}

/// As [`plan`], except that a session stored with a log that the import extends (the stored
/// events are the import's first events) is not a conflict: the rest is appended
/// ([`Outcome::Extended`]). This is how a growing history is kept in step with its session, as
/// `loom serve` does with a client's next call.
pub fn plan_extending(store: &dyn Store, sessions: Vec<ParsedSession>) -> Result<Plan> {
    plan_with(store, sessions, true)
}

fn plan_with(store: &dyn Store, sessions: Vec<ParsedSession>, extend: bool) -> Result<Plan> {
    let mut seen: BTreeMap<SessionId, usize> = BTreeMap::new();
    let mut kept: Vec<ParsedSession> = Vec::with_capacity(sessions.len());
    for s in sessions {
        if let Some(&i) = seen.get(&s.id) {
            let first = &kept[i];
            if first_difference(first.events.iter().map(|e| &e.body), &s.events).is_some() {
                return Err(ImportError::DuplicateSession {
                    session: s.id,
                    first: Box::new(first.at.clone()),
                    second: Box::new(s.at),
                });
            }
            continue;
        }
        seen.insert(s.id.clone(), kept.len());
        kept.push(s);
    }
    let mut out = Vec::with_capacity(kept.len());
    for s in kept {
        let store_err = |source: loom_store::StoreError| ImportError::Store {
            at: Box::new(s.at.clone()),
            session: s.id.clone(),
            bad_input: source.is_bad_input(),
            source: Box::new(source),
        };
        let (outcome, stored_len) = match store.session(&s.id).map_err(store_err)? {
            None => (Outcome::Imported, 0),
            Some(_) => {
                let stored: Vec<Event> = store.read(&s.id, 1..=Seq::MAX).map_err(store_err)?;
                // Loom's own recall rounds are not in any client's history.
                let stored = without_hidden(stored);
                let prefix = stored.len() < s.events.len()
                    && stored.iter().zip(&s.events).all(|(a, b)| a.body == b.body);
                if extend && prefix {
                    out.push((s, Outcome::Extended, stored.len()));
                    continue;
                }
                if let Some((seq, reason)) =
                    first_difference(stored.iter().map(|e| &e.body), &s.events)
                {
                    return Err(ImportError::Conflict {
                        at: Box::new(s.at.clone()),
                        session: s.id.clone(),
                        seq,
                        reason,
                    });
                }
                (Outcome::Unchanged, stored.len())
            }
        };
        out.push((s, outcome, stored_len));
    }
    Ok(Plan { sessions: out })
}

/// A log without Loom's own exchanges (`hidden` runs and their records), which no client's
/// history holds.
fn without_hidden(events: Vec<Event>) -> Vec<Event> {
    let runs: Vec<[Seq; 2]> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Hidden { events } => Some(*events),
            _ => None,
        })
        .collect();
    if runs.is_empty() {
        return events;
    }
    events
        .into_iter()
        .filter(|e| {
            !matches!(e.body, EventBody::Hidden { .. })
                && !runs.iter().any(|[a, b]| *a <= e.seq && e.seq <= *b)
        })
        .collect()
}

impl Plan {
    /// Sessions that will be written.
    pub fn new_sessions(&self) -> usize {
        self.sessions
            .iter()
            .filter(|(_, o, _)| *o == Outcome::Imported)
            .count()
    }

    /// Writes the new sessions, created at `created_ms`, in batches of whole sessions.
    ///
    /// Each batch is one [`Store::create_sessions`] call, which SQLite commits as one
    /// transaction: one durable sync per batch instead of one per session.
    pub fn commit(
        self,
        store: &dyn Store,
        created_ms: i64,
        progress: &mut dyn Progress,
    ) -> Result<ImportReport> {
        progress.writing(self.new_sessions() as u64);
        let mut report = ImportReport::default();
        let mut batch: Vec<ParsedSession> = Vec::new();
        let mut batch_events = 0usize;
        let mut batch_bytes = 0u64;
        let total = self.sessions.len();
        for (i, (s, outcome, stored)) in self.sessions.into_iter().enumerate() {
            if outcome == Outcome::Extended {
                let new = &s.events[stored..];
                store
                    .append(&s.id, new)
                    .map_err(|source| ImportError::Store {
                        at: Box::new(s.at.clone()),
                        session: s.id.clone(),
                        bad_input: source.is_bad_input(),
                        source: Box::new(source),
                    })?;
                report.sessions.push(SessionReport {
                    id: s.id.clone(),
                    outcome,
                    events: new.len() as u64,
                    blobs: s.offloaded,
                });
                report.extended += 1;
                report.events += new.len() as u64;
            } else {
                let events = s.events.len() as u64;
                report.sessions.push(SessionReport {
                    id: s.id.clone(),
                    outcome,
                    events,
                    blobs: s.offloaded,
                });
                if outcome == Outcome::Imported {
                    report.imported += 1;
                    report.events += events;
                    report.blobs += s.offloaded;
                    batch_events += s.events.len();
                    batch_bytes += inline_bytes(&s.events);
                    batch.push(s);
                } else {
                    report.unchanged += 1;
                }
            }
            let last = i + 1 == total;
            if !batch.is_empty()
                && (last || batch_events >= BATCH_EVENTS || batch_bytes >= BATCH_BYTES)
            {
                write_batch(store, created_ms, std::mem::take(&mut batch), progress)?;
                batch_events = 0;
                batch_bytes = 0;
            }
        }
        Ok(report)
    }
}

/// A batch is written once it holds this many events...
const BATCH_EVENTS: usize = 4096;
/// ...or about this many bytes of inline tool output, so one transaction stays bounded.
const BATCH_BYTES: u64 = 64 << 20;

/// Bytes of inline tool output in `events`, the bulk of what a batch writes.
fn inline_bytes(events: &[NewEvent]) -> u64 {
    events
        .iter()
        .map(|e| match &e.body {
            loom_core::EventBody::ToolResult {
                content: loom_core::ToolOutput::Blob(_),
                ..
            } => 0,
            loom_core::EventBody::ToolResult { stats, .. } => stats.bytes,
            _ => 0,
        })
        .sum()
}

fn write_batch(
    store: &dyn Store,
    created_ms: i64,
    batch: Vec<ParsedSession>,
    progress: &mut dyn Progress,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut sessions = Vec::with_capacity(batch.len());
    let mut origins = Vec::with_capacity(batch.len());
    for s in batch {
        let new = NewSession {
            id: s.id.clone(),
            agent: s.agent,
            parent: None,
            created_ms,
        };
        origins.push((s.id, s.at));
        sessions.push((new, s.events));
    }
    if let Err(source) = store.create_sessions(&sessions) {
        // Name the session the store refused when it says which, else the batch's first.
        let failed = match &source {
            loom_store::StoreError::SessionExists(id)
            | loom_store::StoreError::InvalidEvent { session: id, .. } => {
                origins.iter().find(|(s, _)| s == id)
            }
            _ => None,
        };
        if let Some((session, at)) = failed.or(origins.first()).cloned() {
            return Err(ImportError::Store {
                at: Box::new(at),
                session,
                bad_input: source.is_bad_input(),
                source: Box::new(source),
            });
        }
    }
    for (id, _) in &origins {
        progress.written(id);
    }
    Ok(())
}

/// The first seq where the stored bodies and the new events differ, and how (ts_ms ignored).
fn first_difference<'a>(
    stored: impl ExactSizeIterator<Item = &'a loom_core::EventBody>,
    new: &[NewEvent],
) -> Option<(Seq, String)> {
    let stored_len = stored.len();
    for (i, (a, b)) in stored.zip(new).enumerate() {
        if *a != b.body {
            let reason = if a.kind() == b.body.kind() {
                format!("the {} events differ", a.kind().as_str())
            } else {
                format!(
                    "stored {} event, imported {} event",
                    a.kind().as_str(),
                    b.body.kind().as_str()
                )
            };
            return Some((i as Seq + 1, reason));
        }
    }
    if stored_len != new.len() {
        let seq = stored_len.min(new.len()) as Seq + 1;
        return Some((
            seq,
            format!(
                "the stored log has {stored_len} events, the import has {}",
                new.len()
            ),
        ));
    }
    None
}
