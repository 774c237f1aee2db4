//! Embedders and hybrid search: the OpenAI-compatible embedder against the mock upstream
//! (errors included), fusion of BM25 and vector rankings with filters on both, model changes
//! and back-filling. The local-model tests are in `local_model`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use loom_core::Api;
use loom_memory::{EmbedError, Embedder, Filters, MemoryError, OpenAiEmbedder, Search, Written};
use loom_mock_upstream::{Fault, Mock, MockHandle};
use loom_provider::client::{Backoff, CallError, ProviderConfig};

use super::support::{agent, conformance, turn, Db};

/// A mock served by its own runtime, so the blocking client runs on the test's thread.
struct Upstream {
    handle: MockHandle,
    _runtime: tokio::runtime::Runtime,
}

fn upstream() -> Upstream {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.block_on(Mock::spawn()).unwrap();
    Upstream {
        handle,
        _runtime: runtime,
    }
}

fn openai(up: &Upstream, dimensions: Option<usize>) -> OpenAiEmbedder {
    let mut c = ProviderConfig::new(Api::OpenaiChat, up.handle.base_url());
    c.api_key = Some("test-key".into());
    c.model = Some("text-embedding-3-small".into());
    c.timeout = Duration::from_secs(20);
    c.max_retries = 2;
    c.backoff = Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
        jitter: 0.0,
    };
    OpenAiEmbedder::new(c, dimensions).unwrap()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[test]
fn openai_embedder_sends_the_wire_format_and_returns_unit_vectors_in_order() {
    let up = upstream();
    let e = openai(&up, Some(32));
    let vs = e.embed(&["the cat sat", "quarterly revenue", ""]).unwrap();
    assert_eq!(vs.len(), 3);
    assert!(vs
        .iter()
        .all(|v| v.len() == 32 && (norm(v) - 1.0).abs() < 1e-4));
    assert_eq!(e.dimensions(), Some(32));
    assert_eq!(e.model_id(), "openai:text-embedding-3-small/32");
    // Deterministic: the same text gets the same vector.
    assert_eq!(e.embed(&["the cat sat"]).unwrap()[0], vs[0]);
    let sent = up.handle.requests();
    assert_eq!(sent[0].path, "/v1/embeddings");
    assert_eq!(sent[0].header("authorization"), Some("Bearer test-key"));
    assert_eq!(sent[0].body["model"], "text-embedding-3-small");
    assert_eq!(sent[0].body["dimensions"], 32);
    // The API refuses empty strings; the embedder sends a space instead.
    assert_eq!(sent[0].body["input"][2], " ");
}

#[test]
fn openai_embedder_errors_are_typed_and_name_what_failed() {
    let up = upstream();
    let e = openai(&up, None);

    // 401: not retried, the status and the model named.
    up.handle.push_fault(Fault::status(401));
    let err = e.embed(&["x"]).unwrap_err();
    let EmbedError::Call { model, source } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(model, "openai:text-embedding-3-small");
    assert!(
        matches!(
            **source,
            CallError::Status {
                status: 401,
                attempts: 1,
                ..
            }
        ),
        "{source:?}"
    );
    assert!(err.to_string().contains("401"), "{err}");

    // 429 then success: retried by the client.
    up.handle.clear();
    up.handle.push_fault(Fault::status(429));
    let vs = e.embed(&["x"]).unwrap();
    assert_eq!(vs[0].len(), 64);
    assert_eq!(up.handle.requests().len(), 2);

    // 429 on every attempt: a rate-limit error after the retries.
    up.handle.set_default_fault(Some(Fault::status(429)));
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(&err, EmbedError::Call { source, .. } if matches!(**source, CallError::RateLimited { attempts: 3, .. })),
        "{err:?}"
    );
    up.handle.set_default_fault(None);

    // A body that is not JSON.
    up.handle.push_fault(Fault {
        body: Some("{\"data\": [".into()),
        ..Fault::default()
    });
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(&err, EmbedError::Call { source, .. } if matches!(**source, CallError::Embeddings { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("not JSON"), "{err}");

    // Vectors of another length than the model's first ones.
    up.handle.push_fault(Fault {
        body: Some(r#"{"data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}]}"#.into()),
        ..Fault::default()
    });
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::Dimensions {
                expected: 64,
                got: 3,
                ..
            }
        ),
        "{err:?}"
    );

    // Fewer vectors than inputs.
    up.handle.push_fault(Fault {
        body: Some(r#"{"data": [{"index": 0, "embedding": [1.0]}]}"#.into()),
        ..Fault::default()
    });
    let err = e.embed(&["x", "y"]).unwrap_err();
    assert!(err.to_string().contains("1 vectors for 2 inputs"), "{err}");
}

/// Concepts by which texts are embedded: words of one group get the same coordinate, so
/// synonyms match that full text cannot.
const CONCEPTS: &[&[&str]] = &[
    &["car", "automobile", "vehicle", "sedan"],
    &["dog", "puppy", "hound"],
    &["doctor", "physician", "clinic"],
    &["pizza", "pasta", "lasagna"],
];

/// A deterministic embedder for tests: one coordinate per concept, plus one for anything else.
#[derive(Debug)]
struct Concepts {
    id: String,
    fail: AtomicBool,
}

impl Concepts {
    fn new(id: &str) -> Arc<Self> {
        Arc::new(Self {
            id: id.into(),
            fail: AtomicBool::new(false),
        })
    }
}

impl Embedder for Concepts {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> Option<usize> {
        Some(CONCEPTS.len() + 1)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(EmbedError::Input {
                model: self.id.clone(),
                index: 0,
                reason: "told to fail".into(),
            });
        }
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; CONCEPTS.len() + 1];
                for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                    match CONCEPTS.iter().position(|g| g.contains(&w)) {
                        Some(i) => v[i] += 1.0,
                        None if !w.is_empty() => v[CONCEPTS.len()] += 0.1,
                        None => {}
                    }
                }
                let n = norm(&v).max(1e-9);
                v.iter_mut().for_each(|x| *x /= n);
                v
            })
            .collect())
    }
}

fn search(query: &str, who: &str) -> Search {
    Search {
        filters: Filters {
            agent: Some(agent(who)),
            ..Filters::default()
        },
        ..Search::new(query, 1000)
    }
}

fn texts(hits: &[loom_memory::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.text.as_str()).collect()
}

fn hybrid_search_finds_synonyms_that_full_text_misses_and_filters_both_lists(db: &Db) {
    let items = [
        turn("a", "s1", 1, "I bought a new sedan yesterday"),
        turn("a", "s2", 1, "The weather was lovely at the beach"),
        turn("a", "s3", 1, "My automobile insurance is due in May"),
        turn("b", "s9", 1, "Agent b also has a vehicle"),
    ];
    let plain = db.open(None);
    plain.write(&items).unwrap();
    let full_text = plain.search(&search("car", "a")).unwrap();
    assert!(full_text.is_empty(), "{full_text:?}");

    // The same items under an embedder: written again they are known, so they get their
    // vectors by back-filling.
    let m = db.open(Some(Concepts::new("concepts-v1")));
    m.write(&items).unwrap();
    assert_eq!(m.embed_missing(None).unwrap(), 4);
    let hits = m.search(&search("car", "a")).unwrap();
    let found = texts(&hits);
    assert!(
        found.contains(&"I bought a new sedan yesterday"),
        "{found:?}"
    );
    assert!(
        found.contains(&"My automobile insurance is due in May"),
        "{found:?}"
    );
    // The agent filter applies to the vector list too.
    assert!(!found.contains(&"Agent b also has a vehicle"), "{found:?}");
    // The synonyms rank above the unrelated item, which only the nearest-vector list brings.
    let weather = found.iter().position(|t| t.contains("weather"));
    assert!(weather.is_none_or(|w| w >= 2), "{found:?}");

    // An item matched by both lists outranks one matched by one only.
    let hits = m.search(&search("automobile", "a")).unwrap();
    assert_eq!(hits[0].text, "My automobile insurance is due in May");
}

fn vectors_of_another_model_are_ignored_until_back_filled_and_forget_removes_them(db: &Db) {
    let items = [
        turn("a", "s1", 1, "The puppy chewed my shoes"),
        turn("a", "s1", 2, "Lunch was a big lasagna"),
    ];
    {
        let m = db.open(Some(Concepts::new("concepts-v1")));
        m.write(&items).unwrap();
        assert_eq!(
            m.embed_missing(None).unwrap(),
            0,
            "written with their vectors"
        );
        let hits = m.search(&search("dog", "a")).unwrap();
        assert_eq!(hits[0].text, "The puppy chewed my shoes");
    }
    // A new model: its vectors are missing, so only full text ranks (nothing matches "dog").
    let m = db.open(Some(Concepts::new("concepts-v2")));
    assert!(m.search(&search("dog", "a")).unwrap().is_empty());
    assert_eq!(m.embed_missing(Some(&agent("a"))).unwrap(), 2);
    assert_eq!(m.embed_missing(None).unwrap(), 0);
    let hits = m.search(&search("dog", "a")).unwrap();
    assert_eq!(hits[0].text, "The puppy chewed my shoes");
    let id = hits[0].id;
    m.forget(id).unwrap();
    let hits = m.search(&search("dog", "a")).unwrap();
    assert!(hits.iter().all(|h| h.id != id), "{hits:?}");
}

fn a_failing_embedder_keeps_the_items_and_back_filling_embeds_them_later(db: &Db) {
    let e = Concepts::new("concepts-v1");
    let m = db.open(Some(e.clone()));
    e.fail.store(true, Ordering::Relaxed);
    let err = m
        .write(&[turn("a", "s1", 1, "I see the physician on Monday")])
        .unwrap_err();
    assert!(
        matches!(err, MemoryError::Embed(EmbedError::Input { .. })),
        "{err:?}"
    );
    // The query cannot be embedded either: the search says so rather than silently degrading.
    assert!(m.search(&search("doctor", "a")).is_err());
    e.fail.store(false, Ordering::Relaxed);
    let again = m
        .write(&[turn("a", "s1", 1, "I see the physician on Monday")])
        .unwrap();
    assert!(
        matches!(again[0], Written::Known(_)),
        "the item was kept: {again:?}"
    );
    assert_eq!(m.embed_missing(None).unwrap(), 1);
    let hits = m.search(&search("doctor", "a")).unwrap();
    assert_eq!(texts(&hits), ["I see the physician on Monday"]);
}

fn vectors_of_another_length_under_the_same_model_are_an_error_naming_it(db: &Db) {
    db.open(Some(Concepts::new("concepts-v1")))
        .write(&[turn("a", "s1", 1, "The puppy chewed my shoes")])
        .unwrap();
    let longer = db.open(Some(Arc::new(Padded(Concepts::new("concepts-v1")))));
    let err = longer.search(&search("dog", "a")).unwrap_err();
    assert!(
        matches!(err, MemoryError::Embed(EmbedError::Dimensions { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("concepts-v1"), "{err}");
}

fn vector_components_whose_product_underflows_a_real_still_rank(db: &Db) {
    // PostgreSQL reports a `real` product below its range as an error, not as zero.
    let m = db.open(Some(Arc::new(Tiny)));
    m.write(&[turn("a", "s1", 1, "The puppy chewed my shoes")])
        .unwrap();
    let hits = m.search(&search("anything at all", "a")).unwrap();
    assert_eq!(texts(&hits), ["The puppy chewed my shoes"]);
}

/// An embedder whose vectors have a component so small that its square is below `f32`'s range.
#[derive(Debug)]
struct Tiny;

impl Embedder for Tiny {
    fn model_id(&self) -> &str {
        "tiny"
    }

    fn dimensions(&self) -> Option<usize> {
        Some(2)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|_| vec![1.0, 1e-30]).collect())
    }
}

fn openai_embedder_end_to_end_through_memory(db: &Db) {
    let up = upstream();
    let m = db.open(Some(Arc::new(openai(&up, None))));
    m.write(&[
        turn("a", "s1", 1, "the launch moved to thursday"),
        turn("a", "s1", 2, "lunch options near the office"),
    ])
    .unwrap();
    let hits = m.search(&search("when is the launch", "a")).unwrap();
    assert_eq!(hits[0].text, "the launch moved to thursday");
    // One call for the two items, one for the query.
    assert_eq!(up.handle.requests().len(), 2);
}

/// An embedder that says it is another but makes longer vectors (a server that changed its
/// model under the same name).
#[derive(Debug)]
struct Padded(Arc<Concepts>);

impl Embedder for Padded {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }

    fn dimensions(&self) -> Option<usize> {
        Some(CONCEPTS.len() + 2)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vs = self.0.embed(texts)?;
        vs.iter_mut().for_each(|v| v.push(0.0));
        Ok(vs)
    }
}

conformance!(
    db: hybrid_search_finds_synonyms_that_full_text_misses_and_filters_both_lists,
    vectors_of_another_model_are_ignored_until_back_filled_and_forget_removes_them,
    a_failing_embedder_keeps_the_items_and_back_filling_embeds_them_later,
    vectors_of_another_length_under_the_same_model_are_an_error_naming_it,
    vector_components_whose_product_underflows_a_real_still_rank,
    openai_embedder_end_to_end_through_memory,
);
