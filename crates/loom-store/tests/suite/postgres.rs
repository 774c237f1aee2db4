//! Checks that only make sense for PostgreSQL: schema versions, several connections (as several
//! servers would have) appending to one session, a damaged row and a damaged blob chunk, and the
//! pool's answer when no connection can be had.

use std::io::{self, Read};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loom_core::Seq;
use loom_store::{BlobStore, NewSummary, PgStore, Store, StoreError, Usage};
use sha2::{Digest, Sha256};

use crate::suite::support::{
    call, fresh_schema, result, sid, user, with_session, BlobHarness, PgBlobHarness, PgHarness,
    StoreHarness,
};

#[test]
fn newer_schema_is_refused() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let newer = PgStore::schema_version() + 1;
    h.schema
        .connect()
        .execute(
            "INSERT INTO loom_migrations (version, name) VALUES ($1, 'from the future')",
            &[&newer],
        )
        .unwrap();
    match PgStore::open(&h.schema.url).unwrap_err() {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!(found, newer);
            assert_eq!(supported, PgStore::schema_version());
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[test]
fn servers_starting_together_migrate_once() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let stores: Vec<PgStore> = std::thread::scope(|scope| {
        let opening: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| PgStore::open(&schema.url)))
            .collect();
        opening
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect()
    });
    for store in &stores {
        assert_eq!(store.database_version(), PgStore::schema_version());
    }
    let applied: i64 = schema
        .connect()
        .query_one("SELECT COUNT(*) FROM loom_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(applied, PgStore::schema_version());
}

/// Two stores are two pools, as two `loom serve` processes would have: their appends to one
/// session interleave, and the ledger, the summaries and the usage reports stay consistent.
#[test]
fn two_connections_share_one_session() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    let stores = [
        PgStore::open(&h.schema.url).unwrap(),
        PgStore::open(&h.schema.url).unwrap(),
    ];
    const ROUNDS: usize = 25;
    let versions: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let threads: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(n, store)| {
                let id = &id;
                scope.spawn(move || {
                    let other = 1 - n;
                    let mut versions = Vec::new();
                    for i in 0..ROUNDS {
                        // A call of this writer, and one it answers for the other writer, which
                        // may or may not have made it yet.
                        let own = format!("w{n}-{i}");
                        store.append(id, &[call(&own, "bash")]).unwrap();
                        let theirs = format!("w{other}-{i}");
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while store.append(id, &[result(&theirs, "bash", false)]).is_err() {
                            assert!(Instant::now() < deadline, "call {theirs} never arrived");
                            std::thread::yield_now();
                        }
                        // The same call id again, from either writer: refused.
                        let err = store.append(id, &[call(&own, "bash")]).unwrap_err();
                        assert!(matches!(err, StoreError::InvalidEvent { .. }), "{err}");
                        let summary = NewSummary {
                            session: id.clone(),
                            from_seq: 1,
                            to_seq: 1,
                            content: format!("{n}/{i}"),
                            producer: "test".into(),
                            created_ms: 0,
                        };
                        versions.push(store.put_summary(&summary).unwrap().version);
                    }
                    versions
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });

    let events = h.store().read(&id, 1..=Seq::MAX).unwrap();
    let seqs: Vec<Seq> = events.iter().map(|e| e.seq).collect();
    let total = (2 * 2 * ROUNDS) as Seq;
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    assert_eq!(h.store().latest_seq(&id).unwrap(), total);
    let calls = h.store().tool_calls(&id).unwrap();
    assert_eq!(calls.len(), 2 * ROUNDS);
    assert!(calls.iter().all(|c| c.result_seq.is_some()), "{calls:?}");

    let mut all: Vec<u32> = versions.concat();
    all.sort_unstable();
    assert_eq!(all, (1..=(2 * ROUNDS) as u32).collect::<Vec<_>>());
    for v in &versions {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
    }
}

/// Appends that name no tool call take the session's lock, its length and their seqs in one
/// statement: racing each other and appends that do name calls, from two pools, every append
/// gets the seqs its events were stored at, and the log stays contiguous.
#[test]
fn racing_plain_appends_get_the_seqs_they_were_stored_at() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    let stores = [
        PgStore::open(&format!("{}&pool_size=4", h.schema.url)).unwrap(),
        PgStore::open(&format!("{}&pool_size=4", h.schema.url)).unwrap(),
    ];
    const ROUNDS: usize = 20;
    let appended: Vec<(Seq, Seq, Vec<String>)> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..6)
            .map(|w| {
                let (store, id) = (&stores[w % 2], &id);
                scope.spawn(move || {
                    let mut appended = Vec::new();
                    for i in 0..ROUNDS {
                        let texts: Vec<String> = (0..1 + (w + i) % 3)
                            .map(|k| format!("<{w}/{i}/{k}>"))
                            .collect();
                        let mut batch: Vec<_> = texts.iter().map(|t| user(t)).collect();
                        // Every third batch of every other writer takes the ledger's way.
                        if w % 2 == 1 && i % 3 == 0 {
                            batch.push(call(&format!("c{w}-{i}"), "bash"));
                        }
                        let seqs = store.append(id, &batch).unwrap();
                        assert_eq!(seqs.clone().count(), batch.len(), "{seqs:?}");
                        appended.push((*seqs.start(), *seqs.end(), texts));
                    }
                    appended
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let events = h.store().read(&id, 1..=Seq::MAX).unwrap();
    let seqs: Vec<Seq> = events.iter().map(|e| e.seq).collect();
    let total: Seq = appended
        .iter()
        .map(|(first, last, _)| last - first + 1)
        .sum();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    assert_eq!(h.store().latest_seq(&id).unwrap(), total);
    for (first, _, texts) in &appended {
        for (k, text) in texts.iter().enumerate() {
            let event = &events[(first - 1) as usize + k];
            assert!(
                serde_json::to_string(&event.body)
                    .unwrap()
                    .contains(text.as_str()),
                "seq {}: expected {text}, got {:?}",
                event.seq,
                event.body
            );
        }
    }
    // A plain batch to a session that does not exist is refused, as on the ledger's way.
    let err = stores[0].append(&sid("nowhere"), &[user("x")]).unwrap_err();
    assert!(matches!(err, StoreError::SessionNotFound(_)), "{err}");
}

#[test]
fn usage_reports_from_two_connections_are_idempotent() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    h.store().append(&id, &[user("hi")]).unwrap();
    let receipt = loom_store::NewModelCall {
        session: id.clone(),
        at_seq: 1,
        created_ms: 0,
        receipt: serde_json::json!({}),
    };
    let call = h.store().record_model_call(&receipt).unwrap().id;
    let stores = [
        PgStore::open(&h.schema.url).unwrap(),
        PgStore::open(&h.schema.url).unwrap(),
    ];
    let usage = |input, at| Usage {
        input_tokens: input,
        cached_input_tokens: None,
        output_tokens: Some(3),
        reported_ms: at,
    };
    // The same figures from both at once: both succeed, the first report's time is kept.
    let got: Vec<_> = std::thread::scope(|scope| {
        let id = &id;
        let threads: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(n, store)| {
                scope.spawn(move || store.report_usage(id, call, &usage(10, n as i64)))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let stored = h.store().model_calls(&id).unwrap()[0].usage.unwrap();
    for r in got {
        assert_eq!(r.unwrap().usage, Some(stored));
    }
    let err = stores[1]
        .report_usage(&id, call, &usage(11, 5))
        .unwrap_err();
    assert!(err.is_bad_input(), "{err}");
    assert_eq!(h.store().model_calls(&id).unwrap()[0].usage, Some(stored));
}

#[test]
fn a_damaged_row_is_reported_not_panicked_on() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    h.store().append(&id, &[user("fine")]).unwrap();
    h.schema
        .connect()
        .execute("UPDATE events SET body = '{\"kind\":\"nonsense\"}'", &[])
        .unwrap();
    let err = h.store().read(&id, 1..=1).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                table: "events",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_bad_input());
}

#[test]
fn a_corrupted_chunk_is_detected_and_nothing_is_written() {
    let Some(h) = PgBlobHarness::try_open() else {
        return;
    };
    // Several chunks, and a last one that is not full.
    let len = 5 * 1024 * 1024 + 123;
    let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let info = h.blobs().put(&bytes).unwrap();
    assert_eq!(h.blobs().get(&info.blob).unwrap(), bytes);
    let changed = h
        .schema
        .connect()
        .execute(
            "UPDATE blob_chunks SET data = overlay(data placing '\\x00'::bytea from 10 for 1)
             WHERE idx = 3",
            &[],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let mut out = Vec::new();
    let err = h.blobs().copy_to(&info.blob, &mut out).unwrap_err();
    assert!(matches!(err, StoreError::BlobCorrupt { .. }), "{err}");
    assert!(out.is_empty(), "corrupt bytes reached the output");
    assert!(!err.is_bad_input());
}

/// A reader that yields `len` pseudo-random bytes, made as they are read.
struct Noise {
    state: u64,
    remaining: u64,
}

impl Read for Noise {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        for b in &mut buf[..n] {
            self.state = self
                .state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            *b = (self.state >> 56) as u8;
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

#[test]
fn a_large_blob_streams_in_chunks_and_is_stored_once() {
    let Some(h) = PgBlobHarness::try_open() else {
        return;
    };
    const LEN: u64 = 20 * 1024 * 1024;
    let noise = || Noise {
        state: 42,
        remaining: LEN,
    };
    let info = h.blobs().put_reader(&mut noise()).unwrap();
    let mut expected = Sha256::new();
    io::copy(&mut noise(), &mut HashWriter(&mut expected)).unwrap();
    assert_eq!(info.blob.hex(), hex::encode(expected.finalize()));
    assert_eq!(info.stats.bytes, LEN);
    // Storing it again stores nothing more.
    assert_eq!(h.blobs().put_reader(&mut noise()).unwrap(), info);
    let mut db = h.schema.connect();
    let row = db
        .query_one(
            "SELECT COUNT(*), COALESCE(SUM(length(data)), 0)::BIGINT, MAX(length(data))
             FROM blob_chunks",
            &[],
        )
        .unwrap();
    let (chunks, bytes, largest): (i64, i64, i32) = (row.get(0), row.get(1), row.get(2));
    assert!(chunks > 1, "one chunk for {LEN} bytes");
    assert_eq!(
        bytes, LEN as i64,
        "the copy stored twice was not rolled back"
    );
    assert!((largest as u64) < LEN);
    let mut read_back = Sha256::new();
    assert_eq!(
        h.blobs()
            .copy_to(&info.blob, &mut HashWriter(&mut read_back))
            .unwrap(),
        LEN
    );
    assert_eq!(hex::encode(read_back.finalize()), info.blob.hex());
}

struct HashWriter<'a>(&'a mut Sha256);

impl io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reader that blocks until told to finish: it holds the connection of the blob being stored.
struct Held(mpsc::Receiver<()>);

impl Read for Held {
    fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        let _ = self.0.recv();
        Ok(0)
    }
}

#[test]
fn an_exhausted_pool_answers_unavailable_in_time() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let url = format!("{}&pool_size=1&checkout_timeout_ms=300", schema.url);
    let store = PgStore::open(&url).unwrap();
    with_session(&store, "s");
    let blobs = store.blobs();
    let (release, held) = mpsc::channel();
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| blobs.put_reader(&mut Held(held)));
        // Wait until the holder has the one connection.
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            let started = Instant::now();
            match store.session(&sid("s")) {
                Ok(_) => {
                    assert!(
                        Instant::now() < deadline,
                        "the holder never took the connection"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => break (e, started.elapsed()),
            }
        };
        let (err, waited) = err;
        assert!(err.is_unavailable(), "{err}");
        assert!(!err.is_bad_input());
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "waited {waited:?}"
        );
        release.send(()).unwrap();
        holder.join().unwrap().unwrap();
    });
    // Once it is free, the connection serves again.
    assert!(store.session(&sid("s")).unwrap().is_some());
}

#[test]
fn an_unreachable_server_is_unavailable_not_a_hang() {
    // A port nothing listens on: bind one, note it, free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let err = PgStore::open(&format!(
        "postgres://loom@127.0.0.1:{port}/postgres?checkout_timeout_ms=500"
    ))
    .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn unknown_url_parameters_and_schemes_are_refused() {
    for bad in [
        "postgres://loom@127.0.0.1:1/postgres?pool_size=none",
        "postgres://loom@127.0.0.1:1/postgres?schema=Robert');DROP",
    ] {
        let err = PgStore::open(bad).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsupportedDatabase { .. }),
            "{bad}: {err}"
        );
        assert!(err.is_bad_input());
    }
}

/// What the calls on a proxied request's path cost the database, in round trips. Statements are
/// prepared once per connection, so the counts are taken once they are.
#[test]
fn the_hot_path_costs_few_round_trips() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let store = h.store();
    let id = with_session(store, "s");
    let cost = |f: &mut dyn FnMut()| {
        let before = store.round_trips();
        f();
        store.round_trips() - before
    };
    let usage = Usage {
        input_tokens: 10,
        cached_input_tokens: None,
        output_tokens: Some(2),
        reported_ms: 0,
    };
    for n in 0..3 {
        let c = format!("c{n}");
        // What is new since a server's cached state: the last seq, then the events.
        let read = cost(&mut || {
            store.latest_seq(&id).unwrap();
            store.read(&id, 1..=Seq::MAX).unwrap();
        });
        // Begin (with the transaction's id), lock the session, read the calls named, write the
        // events, the calls and the new length, commit.
        let append = cost(&mut || {
            store
                .append(
                    &id,
                    &[user("go"), call(&c, "bash"), result(&c, "bash", false)],
                )
                .unwrap();
        });
        let derived = cost(&mut || {
            store.summaries(&id).unwrap();
            store.last_model_call(&id).unwrap();
        });
        let mut receipt = None;
        // Begin, lock the session, number and insert the receipt, commit.
        let record = cost(&mut || {
            receipt = Some(
                store
                    .record_model_call(&loom_store::NewModelCall {
                        session: id.clone(),
                        at_seq: 1,
                        created_ms: 0,
                        receipt: serde_json::json!({}),
                    })
                    .unwrap()
                    .id,
            );
        });
        let call_id = receipt.unwrap();
        // Begin, an append that names no call (the lock, the length and the write in one
        // statement), the usage, commit.
        let reply = cost(&mut || {
            store
                .append_reply(&id, &[user("reply")], Some((call_id, &usage)))
                .unwrap();
        });
        if n > 0 {
            assert_eq!((read, append, derived, record, reply), (2, 5, 2, 4, 4));
        }
    }
}

/// PostgreSQL text holds no NUL character: such a value is refused as the caller's to fix,
/// naming what holds it, and nothing of the call is written.
#[test]
fn text_postgres_cannot_hold_is_bad_input() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    h.store().append(&id, &[user("first")]).unwrap();
    for batch in [
        vec![user("ok"), call("c\0", "bash")],
        vec![call("c1", "ba\0sh")],
    ] {
        let err = h.store().append(&id, &batch).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(err.to_string().contains("NUL"), "{err}");
    }
    let err = h
        .store()
        .create_session(
            &crate::suite::support::new_session("t"),
            &[call("c\0", "bash")],
        )
        .unwrap_err();
    assert!(err.is_bad_input(), "{err}");
    assert!(h.store().session(&sid("t")).unwrap().is_none());
    let summary = NewSummary {
        session: id.clone(),
        from_seq: 1,
        to_seq: 1,
        content: "a\0b".into(),
        producer: "test".into(),
        created_ms: 0,
    };
    let err = h.store().put_summary(&summary).unwrap_err();
    assert!(err.is_bad_input(), "{err}");
    assert!(err.to_string().contains("content"), "{err}");
    assert_eq!(h.store().latest_seq(&id).unwrap(), 1);
    assert!(h.store().summaries(&id).unwrap().is_empty());
    assert!(h.store().tool_calls(&id).unwrap().is_empty());
}

/// Regression: the ledger was once read in the statement that takes the session's lock, and a
/// writer that waited for that lock then checked its calls against what was committed before it
/// waited: two writers racing with the same call id both got it in.
#[test]
fn racing_appends_of_one_call_id_take_it_once() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    let stores = [
        PgStore::open(&h.schema.url).unwrap(),
        PgStore::open(&h.schema.url).unwrap(),
    ];
    const CALLS: usize = 40;
    let accepted: usize = std::thread::scope(|scope| {
        let racers: Vec<_> = stores
            .iter()
            .map(|store| {
                let id = &id;
                scope.spawn(move || {
                    (0..CALLS)
                        .filter(|i| {
                            let c = format!("c{i}");
                            store.append(id, &[user("x"), call(&c, "bash")]).is_ok()
                        })
                        .count()
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).sum()
    });
    assert_eq!(accepted, CALLS);
    assert_eq!(h.store().tool_calls(&id).unwrap().len(), CALLS);
    assert_eq!(h.store().latest_seq(&id).unwrap(), 2 * CALLS as Seq);
}

/// The same race between an expiry and a result: the result is refused when the expiry won.
#[test]
fn a_result_racing_an_expiry_is_applied_or_refused_never_both() {
    let Some(h) = PgHarness::try_open() else {
        return;
    };
    let id = with_session(h.store(), "s");
    const CALLS: usize = 30;
    for i in 0..CALLS {
        h.store()
            .append(&id, &[call(&format!("c{i}"), "bash")])
            .unwrap();
    }
    let other = PgStore::open(&h.schema.url).unwrap();
    let (expired, resolved): (Vec<bool>, Vec<bool>) = std::thread::scope(|scope| {
        let (store, id_ref) = (h.store(), &id);
        let expiring = scope.spawn(move || {
            (0..CALLS)
                .map(|i| store.expire_tool_call(id_ref, &format!("c{i}")).is_ok())
                .collect()
        });
        let (other, id_ref) = (&other, &id);
        let resolving = scope.spawn(move || {
            (0..CALLS)
                .map(|i| {
                    let c = format!("c{i}");
                    other.append(id_ref, &[result(&c, "bash", false)]).is_ok()
                })
                .collect()
        });
        (expiring.join().unwrap(), resolving.join().unwrap())
    });
    for (i, (e, r)) in expired.iter().zip(&resolved).enumerate() {
        assert!(e ^ r, "call c{i}: expired {e}, resolved {r}");
    }
    let calls = h.store().tool_calls(&id).unwrap();
    let results = resolved.iter().filter(|r| **r).count();
    assert_eq!(
        calls.iter().filter(|c| c.result_seq.is_some()).count(),
        results
    );
    assert_eq!(h.store().latest_seq(&id).unwrap(), (CALLS + results) as Seq);
}
