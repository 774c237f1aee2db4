//! The provider-neutral request the layout produces and the formats serialise.

use serde::{Deserialize, Serialize};

use crate::event::{MessageContent, NativeReasoning, ToolCall};

/// A tool the model may call (passed in by the caller; not part of the log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    #[serde(default = "empty_schema")]
    pub parameters: serde_json::Value,
}

fn empty_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl ToolSpec {
    /// Reads a list of tool definitions as any provider writes them: OpenAI Chat Completions
    /// (`{"type": "function", "function": {"name", "description", "parameters"}}`), OpenAI
    /// Responses (`{"type": "function", "name", "description", "parameters"}`), Anthropic
    /// (`{"name", "description", "input_schema"}`) or Loom's own (`{"name", "description",
    /// "parameters"}`), mixed freely. A request body holding a `tools` list is read too.
    ///
    /// Errors name the entry (`tools[2].function.name`) and what was wrong with it.
    pub fn parse_list(value: &serde_json::Value) -> Result<Vec<Self>, crate::error::LogError> {
        use crate::error::LogError;
        let list = match value {
            serde_json::Value::Array(list) => list,
            serde_json::Value::Object(body) => match body.get("tools") {
                Some(serde_json::Value::Array(list)) => list,
                _ => {
                    return Err(LogError::invalid(
                        "tools",
                        "expected a list of tool definitions, or an object with a `tools` list",
                    ))
                }
            },
            _ => {
                return Err(LogError::invalid(
                    "tools",
                    "expected a list of tool definitions",
                ))
            }
        };
        // Gemini groups its definitions: one tool holds `functionDeclarations`.
        let entries: Vec<(String, &serde_json::Value)> = list
            .iter()
            .enumerate()
            .flat_map(|(i, entry)| {
                match entry
                    .get("functionDeclarations")
                    .and_then(serde_json::Value::as_array)
                {
                    Some(declarations) => declarations
                        .iter()
                        .enumerate()
                        .map(|(j, d)| (format!("tools[{i}].functionDeclarations[{j}]"), d))
                        .collect::<Vec<_>>(),
                    None => vec![(format!("tools[{i}]"), entry)],
                }
            })
            .collect();
        let mut names = std::collections::BTreeSet::new();
        entries
            .into_iter()
            .map(|(at, entry)| {
                let tool = Self::parse_one(entry, &at)?;
                if !names.insert(tool.name.clone()) {
                    return Err(LogError::invalid(
                        format!("{at}.name"),
                        format!("`{}` is defined twice", tool.name),
                    ));
                }
                Ok(tool)
            })
            .collect()
    }

    fn parse_one(entry: &serde_json::Value, at: &str) -> Result<Self, crate::error::LogError> {
        use crate::error::LogError;
        let obj = entry
            .as_object()
            .ok_or_else(|| LogError::invalid(at, "expected an object"))?;
        // OpenAI Chat nests the definition under `function`.
        let (def, at) = match obj.get("function") {
            Some(f) => (
                f.as_object().ok_or_else(|| {
                    LogError::invalid(format!("{at}.function"), "expected an object")
                })?,
                format!("{at}.function"),
            ),
            None => (obj, at.to_owned()),
        };
        if let Some(kind) = obj.get("type").and_then(serde_json::Value::as_str) {
            if kind != "function" && kind != "custom" {
                return Err(LogError::invalid(
                    format!("{at}.type"),
                    format!(
                        "`{kind}` is a provider's built-in tool, not a definition Loom can send"
                    ),
                ));
            }
        }
        let name = match def.get("name") {
            Some(serde_json::Value::String(n)) if !n.trim().is_empty() => n.clone(),
            Some(serde_json::Value::String(_)) => {
                return Err(LogError::invalid(format!("{at}.name"), "is empty"))
            }
            Some(_) => return Err(LogError::invalid(format!("{at}.name"), "expected a string")),
            None => return Err(LogError::invalid(format!("{at}.name"), "is missing")),
        };
        let description = match def.get("description") {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(d)) => d.clone(),
            Some(_) => {
                return Err(LogError::invalid(
                    format!("{at}.description"),
                    "expected a string",
                ))
            }
        };
        let (key, schema) = match (
            def.get("parameters"),
            def.get("input_schema")
                .or_else(|| def.get("parametersJsonSchema")),
        ) {
            (Some(p), None) => ("parameters", Some(p)),
            (None, Some(p)) if def.contains_key("parametersJsonSchema") => {
                ("parametersJsonSchema", Some(p))
            }
            (None, Some(p)) => ("input_schema", Some(p)),
            (None, None) => ("parameters", None),
            (Some(_), Some(_)) => {
                return Err(LogError::invalid(
                    format!("{at}.input_schema"),
                    "both `parameters` and `input_schema` are given",
                ))
            }
        };
        let parameters = match schema {
            None | Some(serde_json::Value::Null) => empty_schema(),
            Some(p @ serde_json::Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(LogError::invalid(
                    format!("{at}.{key}"),
                    "expected a JSON Schema object",
                ))
            }
        };
        Ok(Self {
            name,
            description,
            parameters,
        })
    }
}

/// How a result is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultForm {
    /// The original output.
    Verbatim,
    /// The step's observation and the reference to the original.
    Stubbed,
    /// Head and tail of the original with an elision marker and the reference.
    Elided,
    /// A browser page as its line diff against an earlier page sent whole.
    Diff,
    /// The call has no result in the log.
    Missing,
}

/// A call and the result text sent with it.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedCall {
    /// The call as the model made it.
    pub call: ToolCall,
    /// What is sent as its result.
    pub content: MessageContent,
    /// Whether the result was an error.
    pub is_error: bool,
    /// How the result was rendered.
    pub form: ResultForm,
}

/// One message of the neutral request.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// System content.
    System(MessageContent),
    /// User content.
    User {
        /// Content.
        content: MessageContent,
        /// Participant name.
        name: Option<String>,
    },
    /// An assistant turn with its calls and their results.
    Assistant {
        /// Visible text.
        content: Option<MessageContent>,
        /// Reasoning (sent only by formats that accept it back).
        reasoning: Option<String>,
        /// Participant name.
        name: Option<String>,
        /// Reasoning as the provider sent it: sent back only by that provider's format, and only
        /// while the turn is rendered verbatim.
        native: Option<NativeReasoning>,
        /// Calls with results.
        calls: Vec<RenderedCall>,
    },
}

/// A rendered request before serialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Model name.
    pub model: String,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Messages in order.
    pub messages: Vec<Msg>,
    /// `messages[..stable_len]` is the stable prefix (cache breakpoint after it).
    pub stable_len: usize,
    /// Tokens the response may use (`max_tokens` where the format requires it).
    pub max_output_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_lists_are_read_in_every_provider_shape() {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
        let list = json!([
            {"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": schema}},
            {"type": "function", "name": "write", "parameters": schema},
            {"name": "grep", "description": "Search", "input_schema": schema},
            {"name": "noop"},
            {"functionDeclarations": [
                {"name": "search", "description": "Search", "parametersJsonSchema": schema},
                {"name": "list"}
            ]},
        ]);
        let tools = ToolSpec::parse_list(&list).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read", "write", "grep", "noop", "search", "list"]);
        assert_eq!(tools[4].parameters, schema);
        assert_eq!(tools[0].description, "Read a file");
        assert_eq!(tools[2].parameters, schema);
        assert_eq!(tools[3].parameters, empty_schema());
        let body = json!({"model": "gpt-4o", "messages": [], "tools": [list[0].clone()]});
        assert_eq!(ToolSpec::parse_list(&body).unwrap().len(), 1);
    }

    #[test]
    fn a_bad_tool_list_names_the_entry_and_field() {
        let err = |v: serde_json::Value| ToolSpec::parse_list(&v).unwrap_err().to_string();
        assert!(err(
            json!([{"name": "a"}, {"type": "function", "function": {"description": "x"}}])
        )
        .contains("tools[1].function.name"));
        assert!(err(json!([{"name": "a", "parameters": "object"}])).contains("tools[0].parameters"));
        assert!(err(json!([{"name": "a"}, {"name": "a"}])).contains("defined twice"));
        assert!(err(json!([{"type": "web_search"}])).contains("tools[0].type"));
        assert!(err(json!("read")).contains("tools"));
    }
}
