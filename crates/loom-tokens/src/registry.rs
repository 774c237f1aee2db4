//! The model registry: model name or prefix → tokenizer, window, output cap, cache prices.
//!
//! The built-in table (`models.toml`, shipped inside the binary) covers the current OpenAI,
//! Anthropic, Gemini, Llama, Qwen and Mistral models. A user file in the same format adds
//! models or overrides built-in entries by name, so a new model needs no new release.
//! Lookup is by longest prefix at a name boundary; an unknown model is an error that lists the
//! nearest known names, because silently counting with a wrong tokenizer is how budgets break.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Result, TokenError};
use crate::image::ImageRule;

const BUILT_IN: &str = include_str!("models.toml");
const BUILT_IN_ORIGIN: &str = "built-in";

/// How a model's tokens are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSpec {
    /// An OpenAI BPE encoding, exact.
    Bpe(crate::Encoding),
    /// A local HuggingFace `tokenizer.json`; `None` when no file is configured, in which case
    /// counts fall back to the calibrated estimate.
    File(Option<PathBuf>),
    /// No public tokenizer: the calibrated estimate.
    Estimate,
}

impl TokenizerSpec {
    /// The name used in registry files and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Bpe(e) => e.name(),
            Self::File(_) => "tokenizer.json",
            Self::Estimate => "estimate",
        }
    }
}

/// What the registry knows about one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The registry entry's name (a model name or a prefix of model names).
    pub name: String,
    /// How its tokens are counted.
    pub tokenizer: TokenizerSpec,
    /// Input plus output tokens the model accepts.
    pub context_window: u64,
    /// Most tokens one response may have.
    pub max_output: u64,
    /// Price of a cached input token relative to an uncached one.
    pub cached_read: f64,
    /// Price of writing an input token to the cache relative to an uncached one.
    pub cache_write: f64,
    /// How images are counted.
    pub image: ImageRule,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    model: Vec<RawModel>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: Option<String>,
    #[serde(default)]
    aliases: Vec<String>,
    tokenizer: Option<String>,
    tokenizer_file: Option<PathBuf>,
    context_window: Option<u64>,
    max_output: Option<u64>,
    cached_read: Option<f64>,
    cache_write: Option<f64>,
    image: Option<RawImage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImage {
    rule: String,
    base: Option<u64>,
    per_tile: Option<u64>,
    multiplier: Option<f64>,
}

/// Known models, searchable by name.
#[derive(Debug, Clone)]
pub struct Registry {
    /// Lowercased name or alias → entry index.
    names: BTreeMap<String, usize>,
    models: Vec<ModelInfo>,
}

impl Registry {
    /// The built-in table.
    pub fn built_in() -> Result<Self> {
        let mut r = Self {
            names: BTreeMap::new(),
            models: Vec::new(),
        };
        r.merge_str(BUILT_IN, BUILT_IN_ORIGIN, None)?;
        Ok(r)
    }

    /// The built-in table extended (and overridden by name) by a user file. Relative
    /// `tokenizer_file` paths are resolved against the user file's folder.
    pub fn with_user_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| TokenError::Registry {
            origin: path.display().to_string(),
            reason: format!("cannot read: {e}"),
        })?;
        let mut r = Self::built_in()?;
        r.merge_str(&text, &path.display().to_string(), path.parent())?;
        Ok(r)
    }

    /// Adds the entries of a registry text; an entry whose name is known replaces the old one.
    pub fn merge_str(&mut self, text: &str, origin: &str, base_dir: Option<&Path>) -> Result<()> {
        let err = |reason: String| TokenError::Registry {
            origin: origin.to_owned(),
            reason,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| err(e.message().to_owned()))?;
        let mut seen = BTreeMap::new();
        for (i, m) in raw.model.into_iter().enumerate() {
            let (info, aliases) = resolve(m, i, base_dir).map_err(err)?;
            for key in std::iter::once(&info.name).chain(&aliases) {
                let key = key.to_lowercase();
                if let Some(prev) = seen.insert(key.clone(), i) {
                    return Err(err(format!(
                        "model[{i}]: name `{key}` is already used by model[{prev}]"
                    )));
                }
            }
            let idx = match self.names.get(&info.name.to_lowercase()) {
                Some(&idx) => {
                    self.models[idx] = info;
                    idx
                }
                None => {
                    self.models.push(info);
                    self.models.len() - 1
                }
            };
            for alias in aliases {
                self.names.insert(alias.to_lowercase(), idx);
            }
            self.names.insert(self.models[idx].name.to_lowercase(), idx);
        }
        Ok(())
    }

    /// The entry for `model`: the longest known name that equals it or is a prefix of it at a
    /// boundary; a provider prefix (`openai/gpt-4o`, `models/gemini-2.5-pro`) is tried without
    /// it. An unknown model is an error listing near matches.
    pub fn lookup(&self, model: &str) -> Result<&ModelInfo> {
        let wanted = model.trim().to_lowercase();
        let mut candidates = vec![wanted.as_str()];
        if let Some((_, tail)) = wanted.rsplit_once('/') {
            candidates.push(tail);
        }
        for candidate in candidates {
            if let Some(idx) = self.longest_prefix(candidate) {
                if let Some(info) = self.models.get(idx) {
                    return Ok(info);
                }
            }
        }
        Err(TokenError::UnknownModel {
            model: model.to_owned(),
            near: self.near(&wanted),
        })
    }

    /// The entry for a model the table does not name, by its family: the newest known model
    /// whose name starts with the same words before the first version number (`gpt-6.2-sol` →
    /// the newest `gpt-…`; `claude-fable-5` → the newest `claude-fable-…`, else `claude-…`).
    /// A provider's new model is most like its newest in the family; the caller says it guessed.
    pub fn lookup_family(&self, model: &str) -> Option<&ModelInfo> {
        let wanted = model.trim().to_lowercase();
        let wanted = wanted
            .rsplit_once('/')
            .map_or(wanted.as_str(), |(_, tail)| tail);
        let words = family_words(wanted);
        // The most specific family first: all words, then fewer.
        for n in (1..=words.len()).rev() {
            let newest = self
                .models
                .iter()
                .filter(|m| family_words(&m.name.to_lowercase()).starts_with(&words[..n]))
                .max_by(|a, b| {
                    version_key(&a.name)
                        .cmp(&version_key(&b.name))
                        .then_with(|| b.name.len().cmp(&a.name.len()))
                });
            if let Some(info) = newest {
                return Some(info);
            }
        }
        None
    }

    fn longest_prefix(&self, wanted: &str) -> Option<usize> {
        // Walk back from the whole name to each boundary: the first known prefix is the longest.
        let mut end = wanted.len();
        loop {
            if let Some(&idx) = self.names.get(&wanted[..end]) {
                return Some(idx);
            }
            end = wanted[..end].rfind(['-', ':', '@', '/', '_'])?;
        }
    }

    /// Up to five known names closest to `wanted`: small edit distance or a long shared prefix.
    fn near(&self, wanted: &str) -> Vec<String> {
        let mut scored: Vec<(usize, &String)> = self
            .names
            .keys()
            .filter_map(|name| {
                let distance = edit_distance(wanted, name);
                let shared = wanted
                    .chars()
                    .zip(name.chars())
                    .take_while(|(a, b)| a == b)
                    .count();
                let close = distance <= (name.chars().count() / 3).max(2);
                (close || shared >= 4).then_some((distance, name))
            })
            .collect();
        scored.sort();
        scored.into_iter().take(5).map(|(_, n)| n.clone()).collect()
    }

    /// Every entry, in registry order.
    pub fn models(&self) -> &[ModelInfo] {
        &self.models
    }
}

fn resolve(
    m: RawModel,
    i: usize,
    base_dir: Option<&Path>,
) -> std::result::Result<(ModelInfo, Vec<String>), String> {
    let name = m
        .name
        .filter(|n| !n.trim().is_empty())
        .ok_or(format!("model[{i}]: `name` is missing"))?;
    let at = |field: &str, reason: &str| format!("model `{name}`: field `{field}`: {reason}");
    let has_file = m.tokenizer_file.is_some();
    let tokenizer = match m.tokenizer.as_deref() {
        None => return Err(at("tokenizer", "is missing")),
        Some("tokenizer.json") => {
            let file = m.tokenizer_file.map(|p| match base_dir {
                Some(dir) if p.is_relative() => dir.join(p),
                _ => p,
            });
            TokenizerSpec::File(file)
        }
        Some("estimate") => TokenizerSpec::Estimate,
        Some(other) => match crate::Encoding::from_name(other) {
            Some(e) => TokenizerSpec::Bpe(e),
            None => {
                return Err(at(
                    "tokenizer",
                    &format!(
                        "`{other}` is not one of o200k_base, cl100k_base, tokenizer.json, estimate"
                    ),
                ))
            }
        },
    };
    if has_file && !matches!(tokenizer, TokenizerSpec::File(_)) {
        return Err(at(
            "tokenizer_file",
            "is only valid with tokenizer = \"tokenizer.json\"",
        ));
    }
    let context_window = m
        .context_window
        .filter(|&w| w > 0)
        .ok_or(at("context_window", "must be a positive integer"))?;
    let max_output = m
        .max_output
        .filter(|&o| o > 0 && o <= context_window)
        .ok_or(at(
            "max_output",
            "must be a positive integer no larger than context_window",
        ))?;
    let multiplier = |field: &str, v: Option<f64>| {
        v.filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or(at(field, "must be a non-negative number"))
    };
    let cached_read = multiplier("cached_read", m.cached_read)?;
    let cache_write = multiplier("cache_write", m.cache_write)?;
    let image = match m.image {
        None => ImageRule::default_for(&tokenizer),
        Some(raw) => image_rule(raw).map_err(|reason| at("image", &reason))?,
    };
    if m.aliases.iter().any(|a| a.trim().is_empty()) {
        return Err(at("aliases", "must not contain empty names"));
    }
    let info = ModelInfo {
        name,
        tokenizer,
        context_window,
        max_output,
        cached_read,
        cache_write,
        image,
    };
    Ok((info, m.aliases))
}

fn image_rule(raw: RawImage) -> std::result::Result<ImageRule, String> {
    match raw.rule.as_str() {
        "openai-tile" => match (raw.base, raw.per_tile) {
            (Some(base), Some(per_tile)) => Ok(ImageRule::OpenAiTile { base, per_tile }),
            _ => Err("openai-tile needs `base` and `per_tile`".to_owned()),
        },
        "openai-patch" => match raw.multiplier {
            Some(m) if m.is_finite() && m > 0.0 => Ok(ImageRule::OpenAiPatch { multiplier: m }),
            _ => Err("openai-patch needs a positive `multiplier`".to_owned()),
        },
        "anthropic" => Ok(ImageRule::Anthropic),
        "gemini" => Ok(ImageRule::Gemini),
        other => Err(format!(
            "rule `{other}` is not one of openai-tile, openai-patch, anthropic, gemini"
        )),
    }
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The words of a model name before its first version number: `gpt-6.2-sol` → `[gpt]`,
/// `claude-opus-4-8` → `[claude, opus]`, `o4-mini` → `[o]`.
fn family_words(name: &str) -> Vec<&str> {
    let head = name
        .find(|c: char| c.is_ascii_digit())
        .map_or(name, |i| &name[..i]);
    head.split(['-', '_', '.', ':'])
        .filter(|w| !w.is_empty())
        .collect()
}

/// The version numbers in a model name, for ordering a family's models (`gpt-5.1` after
/// `gpt-5`, `gpt-4.1` before both).
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .take(3)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Encoding;

    fn reg() -> Registry {
        Registry::built_in().unwrap()
    }

    #[test]
    fn a_new_name_of_a_known_family_gets_the_newest_of_that_family() {
        let r = reg();
        assert!(r.lookup("gpt-6.2-sol").is_err());
        assert_eq!(r.lookup_family("gpt-6.2-sol").unwrap().name, "gpt-5.1");
        assert_eq!(r.lookup_family("openai/gpt-7").unwrap().name, "gpt-5.1");
        let opus = r.lookup_family("claude-opus-9").unwrap();
        assert!(opus.name.starts_with("claude-opus"), "{}", opus.name);
        let claude = r.lookup_family("claude-fable-5").unwrap();
        assert!(claude.name.starts_with("claude"), "{}", claude.name);
        assert!(r.lookup_family("zyx-99").is_none());
    }

    #[test]
    fn longest_prefix_at_a_boundary() {
        let r = reg();
        assert_eq!(r.lookup("gpt-4o").unwrap().name, "gpt-4o");
        assert_eq!(r.lookup("gpt-4o-2024-08-06").unwrap().name, "gpt-4o");
        assert_eq!(
            r.lookup("gpt-4o-mini-2024-07-18").unwrap().name,
            "gpt-4o-mini"
        );
        assert_eq!(r.lookup("GPT-4-0613").unwrap().name, "gpt-4");
        assert_eq!(
            r.lookup("gpt-4-turbo-2024-04-09").unwrap().tokenizer,
            TokenizerSpec::Bpe(Encoding::Cl100kBase)
        );
        assert_eq!(
            r.lookup("gpt-4.1-mini-2025-04-14").unwrap().name,
            "gpt-4.1-mini"
        );
        assert_eq!(
            r.lookup("claude-3-5-sonnet-20241022").unwrap().name,
            "claude-3-5-sonnet"
        );
        assert_eq!(
            r.lookup("claude-sonnet-4-5@20250929").unwrap().name,
            "claude-sonnet-4-5"
        );
        assert_eq!(
            r.lookup("claude-sonnet-4-20250514").unwrap().name,
            "claude-sonnet-4"
        );
        assert_eq!(
            r.lookup("anthropic/claude-3.5-sonnet").unwrap().name,
            "claude-3-5-sonnet"
        );
        assert_eq!(
            r.lookup("models/gemini-2.5-pro-preview-05-06")
                .unwrap()
                .name,
            "gemini-2.5-pro"
        );
        assert_eq!(
            r.lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap().name,
            "llama-3.1"
        );
        assert_eq!(
            r.lookup("Qwen/Qwen2.5-7B-Instruct").unwrap().name,
            "qwen2.5"
        );
        assert_eq!(r.lookup("o4-mini-2025-04-16").unwrap().name, "o4-mini");
        // `gpt-4` must not swallow `gpt-4o` (different encodings).
        assert_eq!(
            r.lookup("gpt-4o").unwrap().tokenizer,
            TokenizerSpec::Bpe(Encoding::O200kBase)
        );
    }

    #[test]
    fn every_family_of_the_issue_is_covered() {
        let r = reg();
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1",
            "gpt-4.1-nano",
            "o1",
            "o3",
            "o3-mini",
            "o4-mini",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5-nano",
            "claude-3-5-haiku",
            "claude-3-7-sonnet",
            "claude-opus-4",
            "claude-opus-4-1",
            "claude-haiku-4-5",
            "claude-opus-4-5",
            "gemini-1.5-pro",
            "gemini-1.5-flash",
            "gemini-2.0-flash",
            "gemini-2.5-flash",
            "llama-3.3-70b-instruct",
            "qwen3-8b",
            "mistral-large-latest",
            "mixtral-8x7b-instruct",
        ] {
            let info = r.lookup(m).unwrap();
            assert!(info.max_output <= info.context_window, "{m}");
        }
    }

    #[test]
    fn unknown_model_lists_near_matches() {
        let err = reg().lookup("gpt4o").unwrap_err();
        match &err {
            TokenError::UnknownModel { near, .. } => {
                assert!(near.iter().any(|n| n == "gpt-4o"), "{near:?}")
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("did you mean"), "{err}");
        let far = reg().lookup("zzzzzzzzzzzz").unwrap_err();
        assert!(far.to_string().contains("no known model is close"), "{far}");
    }

    #[test]
    fn user_file_overrides_and_extends() {
        let mut r = reg();
        r.merge_str(
            r#"
            [[model]]
            name = "gpt-4o"
            tokenizer = "o200k_base"
            context_window = 1000
            max_output = 100
            cached_read = 0.5
            cache_write = 1.0

            [[model]]
            name = "my-llama"
            tokenizer = "tokenizer.json"
            tokenizer_file = "tok/tokenizer.json"
            context_window = 4096
            max_output = 512
            cached_read = 1.0
            cache_write = 1.0
            "#,
            "user.toml",
            Some(Path::new("/etc/loom")),
        )
        .unwrap();
        assert_eq!(r.lookup("gpt-4o-2024-11-20").unwrap().context_window, 1000);
        assert_eq!(
            r.lookup("my-llama").unwrap().tokenizer,
            TokenizerSpec::File(Some(PathBuf::from("/etc/loom/tok/tokenizer.json")))
        );
    }

    #[test]
    fn bad_entries_name_model_and_field() {
        let cases = [
            ("name = \"x\"\ntokenizer = \"p50k\"\ncontext_window = 1\nmax_output = 1\ncached_read = 1.0\ncache_write = 1.0", "field `tokenizer`"),
            ("name = \"x\"\ntokenizer = \"estimate\"\ncontext_window = 10\nmax_output = 11\ncached_read = 1.0\ncache_write = 1.0", "field `max_output`"),
            ("name = \"x\"\ntokenizer = \"estimate\"\ncontext_window = 10\nmax_output = 1\ncached_read = -1.0\ncache_write = 1.0", "field `cached_read`"),
            ("name = \"x\"\ntokenizer = \"estimate\"\ncontext_window = 10\nmax_output = 1\ncached_read = 1.0\ncache_write = 1.0\ncolour = 1", "colour"),
        ];
        for (body, want) in cases {
            let err = reg()
                .merge_str(&format!("[[model]]\n{body}\n"), "u.toml", None)
                .unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(want) && msg.contains("u.toml"), "{msg}");
        }
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("gpt4o", "gpt-4o"), 1);
    }
}
