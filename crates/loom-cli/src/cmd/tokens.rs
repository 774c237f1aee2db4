//! `loom tokens FILE|-`: count the tokens of a text file, or of each trajectory of a JSONL trace.
//!
//! A plain file is counted as ordinary text (special-token strings count as text; invalid UTF-8
//! is replaced, not refused). A file whose every line is a JSON object with `messages` is a
//! trace: each trajectory is counted as one OpenAI Chat request (messages, tool calls, `tools`
//! if the line has them), one output line per trajectory.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use loom_core::Api;
use loom_tokens::{count_request, CountTokens, Registry, Tokenizer, TokenizerFile};
use serde::Serialize;
use serde_json::{json, Value};

use super::Context;
use crate::exit::bad_input;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The file to count, or `-` for standard input.
    file: PathBuf,
    /// The model whose tokenizer counts (name or dated snapshot; see the model registry).
    #[arg(long, default_value = "gpt-4o")]
    model: String,
    /// Print JSON: `{"tokens", "model", "tokenizer", "exact"}` (plus `id` per trajectory).
    #[arg(long)]
    json: bool,
    /// A user model registry (TOML, same format as the built-in one) that extends or
    /// overrides the built-in models.
    #[arg(long, env = "LOOM_MODELS")]
    models: Option<PathBuf>,
    /// Count with this local HuggingFace tokenizer.json instead of the model's tokenizer.
    #[arg(long)]
    tokenizer_file: Option<PathBuf>,
}

/// One output record; field order as documented (`tokens`, `model`, `tokenizer`, `exact`).
#[derive(Debug, Serialize)]
struct Record<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    tokens: u64,
    model: &'a str,
    tokenizer: &'a str,
    exact: bool,
}

pub(crate) fn run(_ctx: &Context, args: Args) -> anyhow::Result<()> {
    let input = read_input(&args.file)?;
    match count(&args, &input, &mut std::io::stdout().lock()) {
        // `loom tokens trace.jsonl | head` closes the pipe early: not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn count(args: &Args, bytes: &[u8], out: &mut dyn Write) -> anyhow::Result<()> {
    let registry = match &args.models {
        Some(path) => Registry::with_user_file(path).map_err(bad_input)?,
        None => Registry::built_in()?,
    };
    let info = registry.lookup(&args.model).map_err(bad_input)?;
    let tokenizer = match &args.tokenizer_file {
        Some(path) => Tokenizer::File(TokenizerFile::open(path).map_err(bad_input)?),
        None => Tokenizer::for_model(info).map_err(bad_input)?,
    };
    let record = |id: Option<&'_ str>, tokens: u64| -> anyhow::Result<String> {
        let r = Record {
            id,
            tokens,
            model: &args.model,
            tokenizer: tokenizer.name(),
            exact: tokenizer.exact(),
        };
        Ok(serde_json::to_string(&r)?)
    };

    if let Some(trajectories) = as_trace(bytes) {
        for (line, t) in trajectories {
            let mut body = json!({ "messages": t["messages"] });
            if let Some(tools) = t.get("tools").filter(|v| v.is_array()) {
                body["tools"] = tools.clone();
            }
            let count = count_request(Api::OpenaiChat, &body, &tokenizer, &info.image)
                .with_context(|| format!("line {line}"))
                .map_err(bad_input)?;
            let id = t
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("line {line}"), str::to_owned);
            if args.json {
                writeln!(out, "{}", record(Some(&id), count.total())?)?;
            } else {
                writeln!(out, "{id}\t{}", count.total())?;
            }
        }
        return Ok(());
    }

    let text = String::from_utf8_lossy(bytes);
    let tokens = tokenizer.count(&text);
    if args.json {
        writeln!(out, "{}", record(None, tokens)?)?;
    } else {
        writeln!(out, "{tokens}")?;
    }
    Ok(())
}

fn read_input(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        Ok(buf)
    } else {
        std::fs::read(path)
            .with_context(|| format!("reading {}", path.display()))
            .map_err(bad_input)
    }
}

/// The trajectories (with 1-based line numbers) if every non-empty line is a JSON object with a
/// `messages` array; `None` means the input is plain text.
fn as_trace(bytes: &[u8]) -> Option<Vec<(usize, Value)>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).ok()?;
        if !v.get("messages").is_some_and(Value::is_array) {
            return None;
        }
        out.push((i + 1, v));
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(model: &str, json: bool) -> Args {
        Args {
            file: "-".into(),
            model: model.into(),
            json,
            models: None,
            tokenizer_file: None,
        }
    }

    fn run_on(args: &Args, input: &[u8]) -> anyhow::Result<String> {
        let mut out = Vec::new();
        count(args, input, &mut out)?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn plain_text_counts_special_tokens_as_text() -> anyhow::Result<()> {
        let out = run_on(&args("gpt-4o", false), b"hello world <|endoftext|>")?;
        let n: u64 = out.trim().parse()?;
        assert_eq!(
            n,
            loom_tokens::Encoding::O200kBase.count("hello world <|endoftext|>") as u64
        );
        assert!(n > 3, "{n}");
        Ok(())
    }

    #[test]
    fn json_output_names_model_tokenizer_and_exactness() -> anyhow::Result<()> {
        let out = run_on(&args("gpt-4-0613", true), b"hello")?;
        assert_eq!(
            out.trim(),
            r#"{"tokens":1,"model":"gpt-4-0613","tokenizer":"cl100k_base","exact":true}"#
        );
        let est = run_on(&args("claude-sonnet-4-5-20250929", true), b"hello there")?;
        let v: Value = serde_json::from_str(&est)?;
        assert_eq!(v["tokenizer"], "estimate");
        assert_eq!(v["exact"], false);
        Ok(())
    }

    #[test]
    fn a_trace_gives_one_request_count_per_trajectory() -> anyhow::Result<()> {
        let trace = concat!(
            r#"{"id": "a", "messages": [{"role": "user", "content": "hi"}]}"#,
            "\n",
            "\n",
            r#"{"id": "b", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}]}"#,
            "\n",
        );
        let out = run_on(&args("gpt-4o", false), trace.as_bytes())?;
        let lines: Vec<&str> = out.lines().collect();
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let t = Tokenizer::Bpe(loom_tokens::Encoding::O200kBase);
        let rule = loom_tokens::ImageRule::OpenAiTile {
            base: 85,
            per_tile: 170,
        };
        let a = count_request(Api::OpenaiChat, &body, &t, &rule)?.total();
        assert_eq!(lines, [format!("a\t{a}").as_str(), lines[1]]);
        assert!(lines[1].starts_with("b\t"));
        // One line that is not a trajectory makes the file plain text.
        let mixed = format!("{trace}not json\n");
        let plain = run_on(&args("gpt-4o", false), mixed.as_bytes())?;
        assert_eq!(plain.lines().count(), 1);
        Ok(())
    }

    #[test]
    fn bad_input_is_reported_as_such() {
        let err = run_on(&args("gpt4o", false), b"x").unwrap_err();
        assert!(
            format!("{err:#}").contains("did you mean: gpt-4o"),
            "{err:#}"
        );
        assert!(err.chain().any(|c| c.is::<crate::exit::BadInput>()));
        let bad = br#"{"id": "a", "messages": [{"content": "no role"}]}"#;
        let err = run_on(&args("gpt-4o", false), bad).unwrap_err();
        assert!(format!("{err:#}").contains("messages[0].role"), "{err:#}");
    }

    #[test]
    fn invalid_utf8_is_counted() -> anyhow::Result<()> {
        let out = run_on(&args("gpt-4o", false), b"ok \xff\xfe text")?;
        assert!(out.trim().parse::<u64>()? > 0);
        Ok(())
    }
}
