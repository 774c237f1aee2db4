//! Telling the formats apart from what a record holds.
//!
//! Each format has fields or block types the others never use (its clues). A record with clues of
//! exactly one format is that format; with clues of two it is ambiguous and refused, naming one
//! clue of each; with none it is plain messages (roles and text), which every format reads the
//! same way, so it is read as OpenAI Chat.

use crate::raw::{Content, RawItem, RawRecord};
use loom_core::Api;

/// A field or block type that only one format uses, and where it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clue {
    pub(crate) format: Api,
    pub(crate) what: String,
}

impl std::fmt::Display for Clue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.what, self.format.title())
    }
}

/// The format of `rec`: `Ok(None)` for plain messages, `Err` with one clue per format found
/// when they disagree.
pub(crate) fn detect(rec: &RawRecord) -> Result<Option<Clue>, Vec<Clue>> {
    let mut clues: Vec<Clue> = Vec::new();
    let mut add = |format: Api, what: String| {
        if !clues.iter().any(|c| c.format == format) {
            clues.push(Clue { format, what });
        }
    };
    if rec.system.is_some() {
        add(Api::Anthropic, "top-level `system`".into());
    }
    if rec.instructions.is_some() {
        add(Api::OpenaiResponses, "top-level `instructions`".into());
    }
    if rec.items_key == crate::raw::ItemsKey::Input {
        add(Api::OpenaiResponses, "top-level `input`".into());
    }
    if rec.contents.is_some() {
        add(Api::Gemini, "top-level `contents`".into());
    }
    if rec.system_instruction.is_some() {
        add(Api::Gemini, "top-level `systemInstruction`".into());
    }
    let key = rec.items_key.name();
    for (i, item) in rec.items.iter().flatten().enumerate() {
        for (format, what) in item_clues(item) {
            add(format, format!("`{key}[{i}]` {what}"));
        }
    }
    match clues.len() {
        0 => Ok(None),
        1 => Ok(clues.pop()),
        _ => Err(clues),
    }
}

fn item_clues(item: &RawItem) -> Vec<(Api, String)> {
    let mut out = Vec::new();
    if let Some(role @ ("tool" | "function")) = item.role.as_deref() {
        out.push((Api::OpenaiChat, format!("has role `{role}`")));
    }
    for (present, name) in [
        (item.tool_calls.is_some(), "tool_calls"),
        (item.tool_call_id.is_some(), "tool_call_id"),
        (item.function_call.is_some(), "function_call"),
        (item.reasoning_content.is_some(), "reasoning_content"),
    ] {
        if present {
            out.push((Api::OpenaiChat, format!("has `{name}`")));
        }
    }
    if item.call_id.is_some() {
        out.push((Api::OpenaiResponses, "has `call_id`".into()));
    }
    if let Some(
        kind @ ("function_call"
        | "function_call_output"
        | "reasoning"
        | "custom_tool_call"
        | "custom_tool_call_output"),
    ) = item.kind.as_deref()
    {
        out.push((Api::OpenaiResponses, format!("has type `{kind}`")));
    }
    if let Some(Content::Blocks(blocks)) = &item.content {
        for block in blocks {
            let format = match block.kind.as_deref() {
                Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "image") => {
                    Api::Anthropic
                }
                Some("image_url") => Api::OpenaiChat,
                Some("input_text" | "output_text" | "input_image" | "input_file") => {
                    Api::OpenaiResponses
                }
                _ => continue,
            };
            let kind = block.kind.as_deref().unwrap_or_default();
            out.push((format, format!("has a `{kind}` block")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{RawBlock, RawToolCall};

    fn item(role: &str) -> RawItem {
        RawItem {
            role: Some(role.into()),
            ..RawItem::default()
        }
    }

    fn record(items: Vec<RawItem>) -> RawRecord {
        RawRecord {
            items: Some(items),
            ..RawRecord::default()
        }
    }

    #[test]
    fn plain_messages_have_no_format() {
        assert_eq!(
            detect(&record(vec![item("user"), item("assistant")])),
            Ok(None)
        );
    }

    #[test]
    fn each_format_is_recognised_by_its_clues() {
        let mut tool = item("assistant");
        tool.tool_calls = Some(Vec::<RawToolCall>::new());
        let found = detect(&record(vec![item("user"), tool])).unwrap().unwrap();
        assert_eq!(found.format, Api::OpenaiChat);
        assert_eq!(found.what, "`[1]` has `tool_calls`");

        let mut rec = record(vec![item("user")]);
        rec.system = Some(Content::Null);
        assert_eq!(detect(&rec).unwrap().unwrap().format, Api::Anthropic);

        let call = RawItem {
            kind: Some("function_call".into()),
            ..RawItem::default()
        };
        assert_eq!(
            detect(&record(vec![call])).unwrap().unwrap().format,
            Api::OpenaiResponses
        );
    }

    #[test]
    fn mixed_clues_are_ambiguous() {
        let mut a = item("assistant");
        a.content = Some(Content::Blocks(vec![RawBlock {
            kind: Some("tool_use".into()),
            ..RawBlock::default()
        }]));
        let clues = detect(&record(vec![a, item("tool")])).unwrap_err();
        let formats: Vec<Api> = clues.iter().map(|c| c.format).collect();
        assert_eq!(formats, vec![Api::Anthropic, Api::OpenaiChat]);
    }
}
