//! The local embedder on a small real model: all-MiniLM-L6-v2 (BERT safetensors and
//! tokenizer.json), fetched by `scripts/fetch-test-model.sh` into `target/models/` and named by
//! `LOOM_TEST_MODEL` (`.ci/run` sets it). Without the variable these tests say so and pass,
//! except under CI, where a missing model is a failure.

use std::path::PathBuf;
use std::sync::Arc;

use loom_memory::{Embedder, Filters, LocalEmbedder, Search};

use super::support::{agent, conformance, turn, Db};

#[expect(clippy::print_stderr, reason = "a skipped test says why")]
fn model_dir() -> Option<PathBuf> {
    match std::env::var_os("LOOM_TEST_MODEL") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "LOOM_TEST_MODEL is not set: run scripts/fetch-test-model.sh (as .ci/run does)"
            );
            eprintln!("LOOM_TEST_MODEL is not set; skipping (scripts/fetch-test-model.sh)");
            None
        }
    }
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn local_model_bert_vectors_are_unit_length_and_rank_paraphrases_first() {
    let Some(dir) = model_dir() else { return };
    let e = LocalEmbedder::load(&dir).unwrap();
    assert_eq!(e.dimensions(), Some(384));
    assert!(e.model_id().starts_with("local:"), "{}", e.model_id());
    let long = "word ".repeat(2000);
    let texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
        "The stock market fell sharply on Monday.",
        "",
        long.as_str(),
    ];
    let vs = e.embed(&texts).unwrap();
    assert_eq!(vs.len(), texts.len());
    for v in &vs[..4] {
        assert_eq!(v.len(), 384);
        assert!((cos(v, v) - 1.0).abs() < 1e-4);
    }
    // The same text alone gets the same vector as in a batch (threads do not change it).
    let alone = e.embed(&[texts[1]]).unwrap();
    assert!(cos(&alone[0], &vs[1]) > 0.9999);
    let (bread, horse, stocks) = (
        cos(&vs[0], &vs[1]),
        cos(&vs[0], &vs[2]),
        cos(&vs[0], &vs[3]),
    );
    assert!(bread > horse && horse > stocks, "{bread} {horse} {stocks}");
    assert!(bread > 0.6 && stocks < 0.3, "{bread} {stocks}");
}

#[test]
fn local_model_static_model2vec_folder_loads_and_averages_token_rows() {
    let Some(dir) = model_dir() else { return };
    // A static model in Model2Vec's layout, made from the BERT model's own token embeddings:
    // an `embeddings` matrix and the same tokenizer.
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let bert = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let words = bert.tensor("embeddings.word_embeddings.weight").unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("static-minilm");
    std::fs::create_dir(&path).unwrap();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        words.shape().to_vec(),
        words.data(),
    )
    .unwrap();
    safetensors::serialize_to_file(
        [("embeddings", view)],
        &None,
        &path.join("model.safetensors"),
    )
    .unwrap();
    std::fs::copy(dir.join("tokenizer.json"), path.join("tokenizer.json")).unwrap();
    let e = LocalEmbedder::load(&path).unwrap();
    assert_eq!(e.dimensions(), Some(384));
    assert_ne!(e.model_id(), LocalEmbedder::load(&dir).unwrap().model_id());
    let vs = e
        .embed(&["cats and dogs", "dogs and cats", "tax return deadline"])
        .unwrap();
    // A bag of tokens: word order does not matter.
    assert!(cos(&vs[0], &vs[1]) > 0.9999);
    assert!(cos(&vs[0], &vs[2]) < 0.9);
}

#[test]
fn local_model_broken_folders_are_clear_errors() {
    let Some(dir) = model_dir() else { return };
    let out = tempfile::tempdir().unwrap();
    let err = LocalEmbedder::load(out.path()).unwrap_err();
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    std::fs::copy(
        dir.join("model.safetensors"),
        out.path().join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(out.path().join("tokenizer.json"), "{").unwrap();
    let err = LocalEmbedder::load(out.path()).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::copy(
        dir.join("tokenizer.json"),
        out.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = LocalEmbedder::load(out.path()).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
}

fn local_model_hybrid_search_finds_the_turn_that_shares_no_word_with_the_question(db: &Db) {
    let Some(dir) = model_dir() else { return };
    let m = db.open(Some(Arc::new(LocalEmbedder::load(&dir).unwrap())));
    m.write(&[
        turn(
            "a",
            "s1",
            1,
            "Ann: I adopted a puppy from the shelter last week",
        ),
        turn("a", "s1", 5, "Ann: my sister is visiting in June"),
        turn(
            "a",
            "s2",
            1,
            "Ann: work has been busy with the quarterly report",
        ),
        turn("a", "s3", 1, "Ann: I finally finished painting the kitchen"),
    ])
    .unwrap();
    let search = Search {
        filters: Filters {
            agent: Some(agent("a")),
            ..Filters::default()
        },
        ..Search::new("Does she have a dog?", 1000)
    };
    let hits = m.search(&search).unwrap();
    assert!(hits[0].text.contains("puppy"), "{hits:?}");
}

conformance!(db: local_model_hybrid_search_finds_the_turn_that_shares_no_word_with_the_question);
