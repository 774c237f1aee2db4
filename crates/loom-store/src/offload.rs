//! The data offloader (seed 001 §4.1): derives a session's steps from its log, moves large
//! outputs into the blob store under seed-style aliases, and gives the original bytes back.
//!
//! The reducers in `loom-core` decide; this module does the I/O they leave out. A step is
//! derived from a tool call and its result in the log and stored beside them (never instead of
//! them); an offloaded output is stored content-addressed, and its alias (`outputs/shell_003.log`)
//! points at that address, so every `outcome_ref` returns exactly the bytes the tool produced —
//! checked against their SHA-256 on every read. Deriving again gives the same steps and aliases,
//! so running the offloader twice changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use loom_core::{
    joined_text, BlobRef, ContentStats, Event, EventBody, Ingest, ReduceConfig, SessionId, Step,
    ToolOutput,
};

use crate::{parse_blob_ref, BlobAlias, BlobStore, Result, StepRecord, Store, StoreError};

/// Events read from the log per page, so a long session is never loaded whole.
const PAGE: u64 = 512;

/// What one run of the offloader did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffloadReport {
    /// Tool results in the session (each has a step after the run).
    pub results: usize,
    /// Steps derived and stored by this run.
    pub derived: usize,
    /// Of those, how many had their output offloaded.
    pub offloaded: usize,
    /// Bytes of the offloaded outputs.
    pub offloaded_bytes: u64,
}

/// Where a user's reference (`outputs/shell_003.log` or `sha256:…`) leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// One blob.
    Found(BlobRef),
    /// The alias names different blobs in these sessions: a session must be given.
    Ambiguous(Vec<SessionId>),
}

/// The step records and aliases derived from events not yet in the log, for the caller to write
/// with them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StagedWrites {
    /// The steps, as records.
    pub steps: Vec<StepRecord>,
    /// The aliases of the outputs offloaded (the blobs are stored already).
    pub aliases: Vec<(BlobAlias, BlobRef)>,
}

/// Where deriving puts what it makes: stored as it goes (aliases) and at the end (steps),
/// collected for the caller, or nowhere.
enum Sink {
    Store(Vec<StepRecord>),
    Collect(StagedWrites),
    Skip,
}

/// Derives steps and offloads outputs for sessions of one store.
#[derive(Debug, Clone, Copy)]
pub struct Offloader<'a> {
    store: &'a dyn Store,
    blobs: &'a dyn BlobStore,
    config: &'a ReduceConfig,
}

impl<'a> Offloader<'a> {
    /// An offloader over a store and its blob store, reducing with `config`.
    pub fn new(store: &'a dyn Store, blobs: &'a dyn BlobStore, config: &'a ReduceConfig) -> Self {
        Self {
            store,
            blobs,
            config,
        }
    }

    /// Derives and stores the steps of every tool result that has none yet (all of them when
    /// `rebuild`), offloading the outputs the reducers choose to offload.
    ///
    /// Steps are numbered in the order their results appear in the log, so the numbers and the
    /// aliases built from them are the same on every run.
    pub fn run(&self, session: &SessionId, rebuild: bool) -> Result<OffloadReport> {
        let known: BTreeSet<String> = if rebuild {
            BTreeSet::new()
        } else {
            self.store
                .steps(session)?
                .into_iter()
                .map(|s| s.call_id)
                .collect()
        };
        let last = self.store.latest_seq(session)?;
        let mut ingest = Ingest::new();
        let mut report = OffloadReport::default();
        let mut sink = Sink::Store(Vec::new());
        let mut from = 1;
        while from <= last {
            let to = from.saturating_add(PAGE - 1).min(last);
            let page = self.store.read(session, from..=to)?;
            self.reduce_events(
                session,
                &mut ingest,
                &page,
                &known,
                &mut report,
                &mut sink,
                None,
            )?;
            from = to.saturating_add(1);
        }
        let Sink::Store(records) = sink else {
            unreachable!("the sink stays what it was made");
        };
        // Blobs and aliases first, steps last and in one batch: a step never points at an
        // output that is not stored yet.
        if !records.is_empty() {
            self.store.put_steps(session, &records)?;
        }
        Ok(report)
    }

    /// Derives and stores the steps of the results among `events`, the next events of the
    /// session's log after those `ingest` has already seen, and returns them: a live session
    /// (a server's cache) costs O(new events) per call instead of a pass over its whole log.
    /// Deriving is deterministic, so a step another process derived first is stored again as the
    /// same step.
    pub fn derive_next(
        &self,
        session: &SessionId,
        ingest: &mut Ingest,
        events: &[Event],
    ) -> Result<Vec<Step>> {
        let (steps, sink) = self.derive(session, ingest, events, Sink::Store(Vec::new()))?;
        if let Sink::Store(records) = sink {
            if !records.is_empty() {
                self.store.put_steps(session, &records)?;
            }
        }
        Ok(steps)
    }

    /// As [`Self::derive_next`] for events not yet in the log: the offloaded outputs are stored
    /// (content-addressed, so storing one early is harmless), and the step records and aliases
    /// are returned for the caller to write with the events (a [`Turn`](crate::Turn)).
    pub fn derive_staged(
        &self,
        session: &SessionId,
        ingest: &mut Ingest,
        events: &[Event],
    ) -> Result<(Vec<Step>, StagedWrites)> {
        let (steps, sink) = self.derive(
            session,
            ingest,
            events,
            Sink::Collect(StagedWrites::default()),
        )?;
        let Sink::Collect(writes) = sink else {
            unreachable!("the sink stays what it was made");
        };
        Ok((steps, writes))
    }

    /// As [`Self::derive_next`] for events another writer appended, which stored their steps,
    /// outputs and aliases with them: the steps are derived in memory and nothing is written.
    pub fn derive_known(
        &self,
        session: &SessionId,
        ingest: &mut Ingest,
        events: &[Event],
    ) -> Result<Vec<Step>> {
        Ok(self.derive(session, ingest, events, Sink::Skip)?.0)
    }

    /// The steps of the results among `events`, the session's next events, with `sink` holding
    /// what deriving them made.
    fn derive(
        &self,
        session: &SessionId,
        ingest: &mut Ingest,
        events: &[Event],
        mut sink: Sink,
    ) -> Result<(Vec<Step>, Sink)> {
        let mut report = OffloadReport::default();
        let mut steps = Vec::new();
        self.reduce_events(
            session,
            ingest,
            events,
            &BTreeSet::new(),
            &mut report,
            &mut sink,
            Some(&mut steps),
        )?;
        Ok((steps, sink))
    }

    /// Feeds `events` to `ingest`, reducing the results whose call is not in `known`.
    #[expect(clippy::too_many_arguments, reason = "the loop's state, named")]
    fn reduce_events(
        &self,
        session: &SessionId,
        ingest: &mut Ingest,
        events: &[Event],
        known: &BTreeSet<String>,
        report: &mut OffloadReport,
        sink: &mut Sink,
        mut steps: Option<&mut Vec<Step>>,
    ) -> Result<()> {
        for event in events {
            // Every result counts for the numbering, derived before or not.
            let Some(arrived) = ingest.next(event) else {
                continue;
            };
            report.results += 1;
            let EventBody::ToolResult { content, .. } = &event.body else {
                continue;
            };
            if known.contains(arrived.call_id()) {
                continue;
            }
            // Stats of the original bytes, which an offloaded event only refers to.
            let bytes = self.original(content)?;
            let stats = ContentStats::of(&bytes);
            let reduction = arrived.reduce(self.config, &bytes, &stats);
            if let Some(alias) = &reduction.offload {
                self.offload(session, alias, content, &bytes, &stats, sink)?;
                report.offloaded += 1;
                report.offloaded_bytes += stats.bytes;
            }
            match sink {
                Sink::Store(records) => records.push(record(session, &reduction.step)?),
                Sink::Collect(writes) => writes.steps.push(record(session, &reduction.step)?),
                Sink::Skip => {}
            }
            if let Some(steps) = steps.as_deref_mut() {
                steps.push(reduction.step);
            }
            report.derived += 1;
        }
        Ok(())
    }

    /// The session's steps, deriving the missing ones first.
    pub fn steps(&self, session: &SessionId) -> Result<Vec<Step>> {
        self.run(session, false)?;
        self.store
            .steps(session)?
            .into_iter()
            .map(|r| {
                serde_json::from_value(r.body).map_err(|e| StoreError::Corrupt {
                    table: "steps",
                    reason: format!("step {}: {e}", r.id),
                })
            })
            .collect()
    }

    /// Resolves a reference: `sha256:<hex>` (or bare hex) directly, an alias within `session`,
    /// or, without a session, an alias in whichever sessions have it.
    pub fn resolve(&self, session: Option<&SessionId>, reference: &str) -> Result<Resolution> {
        if let Ok(blob) = parse_blob_ref(reference) {
            return Ok(Resolution::Found(blob));
        }
        let alias = BlobAlias::new(reference)?;
        let not_found = || StoreError::BlobNotFound(reference.to_owned());
        if let Some(session) = session {
            if self.store.session(session)?.is_none() {
                return Err(StoreError::SessionNotFound(session.clone()));
            }
            return self
                .store
                .resolve_alias(session, &alias)?
                .map(Resolution::Found)
                .ok_or_else(not_found);
        }
        let mut found: BTreeMap<BlobRef, Vec<SessionId>> = BTreeMap::new();
        for info in self.store.sessions()? {
            if let Some(blob) = self.store.resolve_alias(&info.id, &alias)? {
                found.entry(blob).or_default().push(info.id);
            }
        }
        match found.len() {
            0 => Err(not_found()),
            1 => Ok(Resolution::Found(
                found.into_keys().next().ok_or_else(not_found)?,
            )),
            _ => {
                let mut sessions: Vec<SessionId> = found.into_values().flatten().collect();
                sessions.sort();
                Ok(Resolution::Ambiguous(sessions))
            }
        }
    }

    /// Writes the original bytes of a blob to `out`, after checking their hash.
    pub fn recall(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64> {
        self.blobs.copy_to(blob, out)
    }

    /// The original output of a result, as the bytes its stats describe.
    fn original(&self, content: &ToolOutput) -> Result<Vec<u8>> {
        Ok(match content {
            ToolOutput::Text(s) => s.as_bytes().to_vec(),
            // Text parts joined by newlines, as their stats are computed when imported; images
            // stay in the log as they are.
            ToolOutput::Parts(parts) => joined_text(parts).into_bytes(),
            ToolOutput::Blob(blob) => self.blobs.get(blob)?,
        })
    }

    /// Stores the bytes (unless the log already keeps them in the blob store) and names them.
    fn offload(
        &self,
        session: &SessionId,
        alias: &str,
        content: &ToolOutput,
        bytes: &[u8],
        stats: &ContentStats,
        sink: &mut Sink,
    ) -> Result<()> {
        if let Sink::Skip = sink {
            return Ok(());
        }
        let blob = match content {
            ToolOutput::Blob(blob) if blob.hex() == stats.sha256 => blob.clone(),
            _ => self.blobs.put(bytes)?.blob,
        };
        let alias = BlobAlias::new(alias)?;
        match sink {
            Sink::Collect(writes) => {
                writes.aliases.push((alias, blob));
                Ok(())
            }
            _ => self.store.put_alias(session, &alias, &blob),
        }
    }
}

fn record(session: &SessionId, step: &Step) -> Result<StepRecord> {
    let body = serde_json::to_value(step).map_err(|e| StoreError::InvalidRecord {
        session: session.clone(),
        record: format!("step {}", step.id),
        reason: e.to_string(),
    })?;
    Ok(StepRecord {
        id: step.id.clone(),
        call_id: step.call_id.clone(),
        result_seq: step.result_seq,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryBlobStore, MemoryStore, NewSession};
    use loom_core::{AgentId, NewEvent, ToolCall};

    fn session_with(results: &[(&str, &str, &[u8])]) -> (MemoryStore, MemoryBlobStore, SessionId) {
        let store = MemoryStore::new();
        let blobs = MemoryBlobStore::new();
        let id = SessionId::new("s1").unwrap();
        let mut events = Vec::new();
        for (i, (tool, args, output)) in results.iter().enumerate() {
            let call_id = format!("c{i}");
            events.push(NewEvent::new(
                1,
                EventBody::Assistant {
                    content: None,
                    reasoning: None,
                    tool_calls: vec![ToolCall {
                        id: call_id.clone(),
                        name: (*tool).to_owned(),
                        arguments: (*args).to_owned(),
                    }],
                    name: None,
                    native: None,
                },
            ));
            let content = match std::str::from_utf8(output) {
                Ok(text) => ToolOutput::Text(text.to_owned()),
                Err(_) => ToolOutput::Blob(blobs.put(output).unwrap().blob),
            };
            events.push(NewEvent::new(
                2,
                EventBody::ToolResult {
                    call_id,
                    tool_name: (*tool).to_owned(),
                    content,
                    is_error: false,
                    stats: ContentStats::of(output),
                },
            ));
        }
        let new = NewSession {
            id: id.clone(),
            agent: AgentId::new("a").unwrap(),
            parent: None,
            created_ms: 0,
        };
        store.create_session(&new, &events).unwrap();
        (store, blobs, id)
    }

    #[test]
    fn offloads_large_outputs_under_aliases_that_return_the_original() {
        let big = "x\n".repeat(600);
        let (store, blobs, id) = session_with(&[
            ("bash", r#"{"command":"ls"}"#, b"a\nb\n"),
            ("bash", r#"{"command":"python run.py"}"#, big.as_bytes()),
            (
                "Read",
                r#"{"file_path":"img.png"}"#,
                b"\x89PNG\r\n\x1a\n\xff\x00",
            ),
        ]);
        let config = ReduceConfig::default();
        let off = Offloader::new(&store, &blobs, &config);
        let report = off.run(&id, false).unwrap();
        assert_eq!(
            report,
            OffloadReport {
                results: 3,
                derived: 3,
                offloaded: 2,
                offloaded_bytes: 1210,
            }
        );
        let steps = off.steps(&id).unwrap();
        assert_eq!(
            steps
                .iter()
                .map(|s| s.outcome_ref.as_deref())
                .collect::<Vec<_>>(),
            [
                None,
                Some("outputs/shell_002.log"),
                Some("outputs/file_003.png")
            ]
        );
        for (step, original) in steps[1..]
            .iter()
            .zip([big.as_bytes(), b"\x89PNG\r\n\x1a\n\xff\x00"])
        {
            let alias = step.outcome_ref.as_deref().unwrap();
            let Resolution::Found(blob) = off.resolve(Some(&id), alias).unwrap() else {
                panic!("ambiguous")
            };
            assert_eq!(Some(&blob), step.blob.as_ref());
            let mut out = Vec::new();
            off.recall(&blob, &mut out).unwrap();
            assert_eq!(out, original);
        }
        // A second run derives nothing and changes nothing.
        assert_eq!(off.run(&id, false).unwrap().derived, 0);
        assert_eq!(off.run(&id, true).unwrap().derived, 3);
        assert_eq!(off.steps(&id).unwrap(), steps);
    }

    #[test]
    fn references_resolve_or_say_why_not() {
        let (store, blobs, id) = session_with(&[("bash", "{}", "y\n".repeat(400).as_bytes())]);
        let config = ReduceConfig::default();
        let off = Offloader::new(&store, &blobs, &config);
        off.run(&id, false).unwrap();
        assert!(matches!(
            off.resolve(None, "outputs/shell_001.log"),
            Ok(Resolution::Found(_))
        ));
        assert!(matches!(
            off.resolve(None, "outputs/nope_001.log"),
            Err(StoreError::BlobNotFound(_))
        ));
        assert!(matches!(
            off.resolve(None, "../etc/passwd"),
            Err(StoreError::UnsafeReference { .. })
        ));
        let other = SessionId::new("nope").unwrap();
        assert!(matches!(
            off.resolve(Some(&other), "outputs/shell_001.log"),
            Err(StoreError::SessionNotFound(_))
        ));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use sha2::{Digest, Sha256};

        fn output() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..3000),
                "[ -~\\n]{0,3000}".prop_map(String::into_bytes),
                ("[a-z/._]{1,20}", 0usize..400)
                    .prop_map(|(line, n)| format!("{line}\n").repeat(n).into_bytes()),
            ]
        }

        fn tool() -> impl Strategy<Value = (&'static str, &'static str)> {
            prop::sample::select(vec![
                ("bash", r#"{"command":"cat a.py"}"#),
                ("bash", r#"{"command":"grep -rn x ."}"#),
                ("execute_bash", r#"{"command":"python x.py"}"#),
                ("Read", r#"{"file_path":"a.bin"}"#),
                ("click", r#"{"action":"click('a1')"}"#),
                ("web_search", r#"{"query":"q"}"#),
                ("get_thing", r#"{"id": 1}"#),
                ("bash", r#"{"command": "#),
            ])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Every reference a step carries returns bytes whose SHA-256 is the original's.
            #[test]
            fn every_outcome_ref_returns_the_original_bytes(
                results in proptest::collection::vec((tool(), output()), 1..12),
                offload_everything in any::<bool>(),
            ) {
                let rows: Vec<(&str, &str, &[u8])> =
                    results.iter().map(|((t, a), o)| (*t, *a, o.as_slice())).collect();
                let (store, blobs, id) = session_with(&rows);
                let config = if offload_everything {
                    ReduceConfig::from_toml(
                        "[offload]\nread_file_bytes = 0\nwrite_file_bytes = 0\nlist_dir_entries = 0\n\
                         search_results = 0\nshell_chars = 0\nbrowser_bytes = 0\ndefault_bytes = 0\n",
                    )
                    .unwrap()
                } else {
                    ReduceConfig::default()
                };
                let off = Offloader::new(&store, &blobs, &config);
                let steps = off.steps(&id).unwrap();
                prop_assert_eq!(steps.len(), rows.len());
                for (step, (_, _, original)) in steps.iter().zip(&rows) {
                    prop_assert_eq!(&step.stats, &ContentStats::of(original));
                    let Some(alias) = &step.outcome_ref else {
                        prop_assert!(!offload_everything || original.is_empty());
                        continue;
                    };
                    let Resolution::Found(blob) = off.resolve(Some(&id), alias).unwrap() else {
                        return Err(TestCaseError::fail("an alias within a session is never ambiguous"));
                    };
                    let mut out = Vec::new();
                    off.recall(&blob, &mut out).unwrap();
                    prop_assert_eq!(hex::encode(Sha256::digest(&out)), step.stats.sha256.clone());
                    prop_assert_eq!(&out, original);
                }
            }
        }
    }
}
