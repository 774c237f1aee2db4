//! Reduction settings: observation length, offload thresholds, tool mappings and templates.
//!
//! Parsed raw (every field optional, unknown fields refused), then resolved once into a
//! validated [`ReduceConfig`]. An example, with the defaults:
//!
//! ```toml
//! [observation]
//! max_chars = 200
//!
//! [offload]
//! read_file_bytes = 1024    # file content above 1 KB
//! write_file_bytes = 1024   # what an edit tool printed back
//! list_dir_entries = 10     # listings above 10 entries
//! search_results = 5        # searches (web or grep) above 5 results
//! shell_chars = 500         # command output above 500 characters
//! navigate_bytes = 0        # pages: always
//! browser_bytes = 1024      # page interactions (BrowserGym returns the whole page)
//! default_bytes = 1024      # everything else
//!
//! [[tool]]
//! name = "get_reservation_details"
//! kind = "custom:lookup"
//!
//! [[tool]]
//! pattern = "mcp__fs__read*"
//! kind = "read_file"
//!
//! [[tool]]
//! name = "editor"
//! kind = "write_file"
//! arg = "command"
//! kinds = { view = "read_file" }
//!
//! [templates]
//! shell = "Ran `{command}` (exit {exit_code})"
//!
//! [tool_templates]
//! get_reservation_details = "Looked up reservation {reservation_id}"
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::{LogError, Result};
use crate::step::ToolKind;

use super::kind::{parse_kind, Pattern, Rule, ToolKinds, KIND_NAMES};
use super::template::Templates;

/// When a result's original output is offloaded to the blob store instead of kept inline.
///
/// Sizes are of the original output; counts are of what the reducer found in it. Seeds 000 and
/// 001 give the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thresholds {
    /// File content above this many bytes.
    pub read_file_bytes: u64,
    /// Output of a write or edit tool above this many bytes.
    pub write_file_bytes: u64,
    /// Listings with more entries than this.
    pub list_dir_entries: u64,
    /// Searches (web or content) with more results than this.
    pub search_results: u64,
    /// Shell output above this many characters.
    pub shell_chars: u64,
    /// Navigation results above this many bytes (0: always, as the seeds say).
    pub navigate_bytes: u64,
    /// Page interaction results above this many bytes. Not 0 like navigation: an interaction
    /// that returns a short confirmation or error has nothing worth a reference.
    pub browser_bytes: u64,
    /// Anything else above this many bytes.
    pub default_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            read_file_bytes: 1024,
            write_file_bytes: 1024,
            list_dir_entries: 10,
            search_results: 5,
            shell_chars: 500,
            navigate_bytes: 0,
            browser_bytes: 1024,
            default_bytes: 1024,
        }
    }
}

/// Everything reduction can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReduceConfig {
    /// Longest observation, in characters.
    pub max_chars: usize,
    /// Offload thresholds.
    pub thresholds: Thresholds,
    /// Tool name → kind.
    pub kinds: ToolKinds,
    /// Compact templates.
    pub templates: Templates,
}

impl Default for ReduceConfig {
    fn default() -> Self {
        Self {
            max_chars: 200,
            thresholds: Thresholds::default(),
            kinds: ToolKinds::builtin(),
            templates: Templates::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    observation: Option<RawObservation>,
    offload: Option<RawOffload>,
    #[serde(default)]
    tool: Vec<RawTool>,
    #[serde(default)]
    templates: BTreeMap<String, String>,
    #[serde(default)]
    tool_templates: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawObservation {
    max_chars: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffload {
    read_file_bytes: Option<u64>,
    write_file_bytes: Option<u64>,
    list_dir_entries: Option<u64>,
    search_results: Option<u64>,
    shell_chars: Option<u64>,
    navigate_bytes: Option<u64>,
    browser_bytes: Option<u64>,
    default_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    name: Option<String>,
    pattern: Option<String>,
    kind: String,
    arg: Option<String>,
    #[serde(default)]
    kinds: BTreeMap<String, String>,
}

/// Shortest observation limit accepted: room for a verb, a name and a count.
const MIN_CHARS: usize = 40;

impl ReduceConfig {
    /// Parses and validates a TOML configuration; absent settings keep their defaults.
    pub fn from_toml(text: &str) -> Result<Self> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| LogError::invalid("reduce config", e.message().to_owned()))?;
        Self::resolve(raw)
    }

    fn resolve(raw: RawConfig) -> Result<Self> {
        let mut config = Self::default();
        if let Some(max) = raw.observation.and_then(|o| o.max_chars) {
            if max < MIN_CHARS {
                return Err(LogError::invalid(
                    "observation.max_chars",
                    format!("{max} is too short; at least {MIN_CHARS} characters are needed"),
                ));
            }
            config.max_chars = max;
        }
        if let Some(o) = raw.offload {
            let t = &mut config.thresholds;
            let fields = [
                (o.read_file_bytes, &mut t.read_file_bytes),
                (o.write_file_bytes, &mut t.write_file_bytes),
                (o.list_dir_entries, &mut t.list_dir_entries),
                (o.search_results, &mut t.search_results),
                (o.shell_chars, &mut t.shell_chars),
                (o.navigate_bytes, &mut t.navigate_bytes),
                (o.browser_bytes, &mut t.browser_bytes),
                (o.default_bytes, &mut t.default_bytes),
            ];
            for (value, slot) in fields {
                if let Some(v) = value {
                    *slot = v;
                }
            }
        }
        for (i, tool) in raw.tool.into_iter().enumerate() {
            let field = |f: &str| format!("tool[{i}].{f}");
            let kind = kind_field(&field("kind"), &tool.kind)?;
            let by_arg = match tool.arg {
                Some(arg) => {
                    let mut kinds = BTreeMap::new();
                    for (value, k) in &tool.kinds {
                        kinds.insert(
                            value.clone(),
                            kind_field(&field(&format!("kinds.{value}")), k)?,
                        );
                    }
                    Some((arg, kinds))
                }
                None if !tool.kinds.is_empty() => {
                    return Err(LogError::invalid(
                        field("kinds"),
                        "needs `arg`, the argument whose value picks the kind",
                    ))
                }
                None => None,
            };
            let rule = Rule { kind, by_arg };
            match (tool.name, tool.pattern) {
                (Some(name), None) if !name.is_empty() => config.kinds.add_exact(name, rule),
                (None, Some(pattern)) => config.kinds.add_pattern(
                    Pattern::new(&pattern).map_err(|e| LogError::invalid(field("pattern"), e.to_string()))?,
                    rule,
                ),
                _ => {
                    return Err(LogError::invalid(
                        field("name"),
                        "give exactly one of `name` (a whole tool name) or `pattern` (with `*` and `?`)",
                    ))
                }
            }
        }
        for (kind, template) in raw.templates {
            let parsed = kind_field(&format!("templates.{kind}"), &kind)?;
            config.templates.set_kind(parsed, template);
        }
        for (tool, template) in raw.tool_templates {
            config.templates.set_tool(tool, template);
        }
        Ok(config)
    }
}

fn kind_field(field: &str, text: &str) -> Result<ToolKind> {
    parse_kind(text).ok_or_else(|| {
        LogError::invalid(
            field,
            format!("unknown kind `{text}`; expected one of {KIND_NAMES}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_is_the_default() {
        assert_eq!(
            ReduceConfig::from_toml("").unwrap(),
            ReduceConfig::default()
        );
    }

    #[test]
    fn user_mappings_win_over_builtins() {
        let config = ReduceConfig::from_toml(
            r#"
            [observation]
            max_chars = 120
            [offload]
            shell_chars = 2000
            [[tool]]
            name = "bash"
            kind = "custom:sandbox"
            [[tool]]
            pattern = "mcp__fs__read*"
            kind = "read_file"
            [[tool]]
            name = "editor"
            kind = "write_file"
            arg = "command"
            kinds = { view = "read_file" }
            "#,
        )
        .unwrap();
        assert_eq!(config.max_chars, 120);
        assert_eq!(config.thresholds.shell_chars, 2000);
        assert_eq!(config.thresholds.read_file_bytes, 1024);
        let k = &config.kinds;
        assert_eq!(k.kind_of("bash", "{}"), ToolKind::Custom("sandbox".into()));
        assert_eq!(k.kind_of("mcp__fs__read_file", "{}"), ToolKind::ReadFile);
        assert_eq!(
            k.kind_of("editor", r#"{"command":"view"}"#),
            ToolKind::ReadFile
        );
        assert_eq!(
            k.kind_of("editor", r#"{"command":"create"}"#),
            ToolKind::WriteFile
        );
        assert_eq!(k.kind_of("execute_bash", "{}"), ToolKind::Shell);
    }

    #[test]
    fn bad_configs_name_the_field() {
        let cases = [
            ("[[tool]]\nname = \"x\"\nkind = \"reader\"", "tool[0].kind"),
            ("[[tool]]\nkind = \"shell\"", "tool[0].name"),
            (
                "[[tool]]\nname = \"x\"\npattern = \"y*\"\nkind = \"shell\"",
                "tool[0].name",
            ),
            (
                "[[tool]]\npattern = \"*\"\nkind = \"shell\"",
                "tool[0].pattern",
            ),
            ("[observation]\nmax_chars = 3", "observation.max_chars"),
            ("[templates]\nreader = \"x\"", "templates.reader"),
            ("[offload]\nshell_bytes = 3", "reduce config"),
        ];
        for (text, field) in cases {
            match ReduceConfig::from_toml(text) {
                Err(LogError::InvalidField { field: got, .. }) => assert_eq!(got, field, "{text}"),
                other => panic!("{text}: expected an error naming {field}, got {other:?}"),
            }
        }
    }
}
