//! Local tokenizer.json files and the user registry that points at them.

use std::path::PathBuf;

use loom_tokens::{CountTokens, Registry, TokenError, Tokenizer, TokenizerFile, TokenizerSpec};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).join(name)
}

#[test]
fn word_level_file_counts_words() -> anyhow::Result<()> {
    let t = TokenizerFile::open(&fixture("wordlevel.tokenizer.json"))?;
    assert_eq!(t.count("Hello world")?, 2);
    // Unknown words become [UNK], one each; punctuation is its own word.
    assert_eq!(t.count("hello, brave new world")?, 5);
    assert_eq!(t.count("")?, 0);
    Ok(())
}

#[test]
fn byte_level_bpe_file_merges_and_splits_on_its_regex() -> anyhow::Result<()> {
    let t = TokenizerFile::open(&fixture("bytelevel-bpe.tokenizer.json"))?;
    // "ab" | "Ġab" | "Ġc": the merges make the first two one token each.
    assert_eq!(t.count("ab ab c")?, 4);
    // Added special tokens are matched as the model's server would.
    assert_eq!(t.count("ab<|end|>")?, 2);
    Ok(())
}

#[test]
fn missing_or_malformed_files_are_errors() {
    let missing = TokenizerFile::open(&fixture("nope.json")).unwrap_err();
    assert!(
        matches!(missing, TokenError::TokenizerFile { .. }),
        "{missing}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{\"model\": 3}").unwrap();
    let err = TokenizerFile::open(&bad).unwrap_err();
    assert!(err.to_string().contains("not a tokenizer.json"), "{err}");
}

#[test]
fn user_registry_points_a_model_at_a_file() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        fixture("bytelevel-bpe.tokenizer.json"),
        dir.path().join("tok.json"),
    )?;
    let user = dir.path().join("models.toml");
    std::fs::write(
        &user,
        "[[model]]\nname = \"tiny-llama\"\ntokenizer = \"tokenizer.json\"\ntokenizer_file = \"tok.json\"\n\
         context_window = 2048\nmax_output = 256\ncached_read = 1.0\ncache_write = 1.0\n",
    )?;
    let reg = Registry::with_user_file(&user)?;
    let info = reg.lookup("tiny-llama-1b-chat")?;
    assert_eq!(
        info.tokenizer,
        TokenizerSpec::File(Some(dir.path().join("tok.json")))
    );
    let t = Tokenizer::for_model(info)?;
    assert!(t.exact());
    assert_eq!(t.count("ab ab c"), 4);

    // A built-in open model without a configured file falls back to the estimate.
    let llama = Tokenizer::for_model(reg.lookup("llama-3.1-8b-instruct")?)?;
    assert!(!llama.exact());
    assert_eq!(llama.name(), "estimate");
    Ok(())
}
