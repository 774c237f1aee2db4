//! `loom log`: print a session's events, one line each, or as JSON.

use std::io::Write;

use loom_core::{ContentPart, Event, EventBody, MessageContent, SessionId, ToolOutput};
use loom_store::StoreError;

use super::sessions::open_existing;
use super::Context;
use crate::exit;
use crate::exit::closed_pipe_is_fine;

/// Characters of text shown per event in the human-readable form.
const PREVIEW_CHARS: usize = 100;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session's id.
    session: String,
    /// First seq to print (default: 1).
    #[arg(long, value_name = "N")]
    from: Option<u64>,
    /// Last seq to print (default: the last event).
    #[arg(long, value_name = "M")]
    to: Option<u64>,
    /// Print the events as a JSON list, in the form `docs/formats.md` documents.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let id = SessionId::new(args.session.as_str())
        .map_err(|e| exit::bad_input(anyhow::Error::new(e)))?;
    let from = args.from.unwrap_or(1);
    let to = args.to.unwrap_or(u64::MAX);
    if from == 0 {
        return Err(exit::bad_input(anyhow::anyhow!(
            "--from must be at least 1 (seqs start at 1)"
        )));
    }
    if from > to {
        return Err(exit::bad_input(anyhow::anyhow!(
            "--from {from} is after --to {to}"
        )));
    }
    let ws = open_existing(ctx)?;
    if ws.store.session(&id)?.is_none() {
        return Err(StoreError::SessionNotFound(id).into());
    }
    let events = ws.store.read(&id, from..=to)?;
    closed_pipe_is_fine(print(&events, args.json))
}

fn print(events: &[Event], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &events)?;
        writeln!(out)?;
    } else {
        for e in events {
            writeln!(out, "{}", line(e))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// One event as `seq  kind  preview`.
fn line(e: &Event) -> String {
    format!(
        "{:>5}  {:<14} {}",
        e.seq,
        e.body.kind().as_str(),
        preview(&e.body)
    )
}

fn preview(body: &EventBody) -> String {
    match body {
        EventBody::System { content } => content_preview(content),
        EventBody::User { content, name } => match name {
            Some(n) => format!("{n}: {}", content_preview(content)),
            None => content_preview(content),
        },
        EventBody::Assistant {
            content,
            reasoning,
            tool_calls,
            native,
            ..
        } => {
            let mut parts = Vec::new();
            if let Some(r) = reasoning {
                parts.push(format!("(reasoning, {} chars)", r.chars().count()));
            }
            // The provider's encrypted summary of the conversation before it.
            let compactions = native.iter().flat_map(|n| &n.items).filter(|item| {
                item.get("type").and_then(serde_json::Value::as_str) == Some("compaction")
            });
            for item in compactions {
                let bytes = item
                    .get("encrypted_content")
                    .and_then(serde_json::Value::as_str)
                    .map_or(0, str::len);
                parts.push(format!("(compaction, {})", size(bytes as u64)));
            }
            if let Some(c) = content {
                let text = content_preview(c);
                if !text.is_empty() {
                    parts.push(text);
                }
            }
            for call in tool_calls {
                parts.push(format!(
                    "-> {}({}) [{}]",
                    call.name,
                    clip(&call.arguments, 60),
                    call.id
                ));
            }
            parts.join(" ")
        }
        EventBody::ToolResult {
            call_id,
            tool_name,
            content,
            is_error,
            stats,
        } => {
            let head = format!(
                "{tool_name} [{call_id}]{} {}, {} lines, {}",
                if *is_error { " ERROR" } else { "" },
                size(stats.bytes),
                stats.lines,
                stats.content_type.as_str()
            );
            let tail = match content {
                ToolOutput::Text(t) => clip(t, PREVIEW_CHARS),
                ToolOutput::Parts(p) => content_preview(&MessageContent::Parts(p.clone())),
                ToolOutput::Blob(blob) => format!("in blob {blob}"),
            };
            format!("{head}: {tail}")
        }
        EventBody::DirectMessage {
            source,
            target,
            content,
            priority,
            ..
        } => format!(
            "{source} -> {target} (priority {priority}): {}",
            clip(content, PREVIEW_CHARS)
        ),
        EventBody::Spawn {
            child, agent, goal, ..
        } => format!("{agent} in {child}: {}", clip(goal, PREVIEW_CHARS)),
        EventBody::AgentResult {
            child,
            agent,
            result,
            success,
        } => format!(
            "{agent} in {child} {}: {}",
            if *success { "succeeded" } else { "failed" },
            clip(result, PREVIEW_CHARS)
        ),
        EventBody::Pin { label, content } => match label {
            Some(l) => format!("[{l}] {}", clip(content, PREVIEW_CHARS)),
            None => clip(content, PREVIEW_CHARS),
        },
        EventBody::Rewrite {
            replaced,
            compaction,
        } => {
            let runs: Vec<String> = replaced
                .iter()
                .map(|[from, to]| {
                    if from == to {
                        from.to_string()
                    } else {
                        format!("{from}-{to}")
                    }
                })
                .collect();
            format!(
                "the client {} seqs {}",
                if *compaction { "compacted" } else { "replaced" },
                runs.join(", ")
            )
        }
        EventBody::Repeat { of } => format!("the client sent seq {of} again here"),
        EventBody::Hidden { events: [from, to] } => {
            format!("seqs {from}-{to} were Loom's own recall, not sent to the client")
        }
        // Kinds added later still get a line.
        #[allow(unreachable_patterns)]
        other => other.kind().as_str().to_owned(),
    }
}

fn content_preview(c: &MessageContent) -> String {
    let text = clip(&c.text(), PREVIEW_CHARS);
    let (images, opaque): (usize, Vec<&str>) = match c {
        MessageContent::Parts(parts) => (
            parts
                .iter()
                .filter(|p| matches!(p, ContentPart::Image { .. }))
                .count(),
            parts
                .iter()
                .filter(|p| matches!(p, ContentPart::Opaque { .. }))
                .map(|p| p.opaque_type().unwrap_or("item"))
                .collect(),
        ),
        MessageContent::Text(_) => (0, Vec::new()),
    };
    let mut out = text;
    match images {
        0 => {}
        1 => out.push_str(" [+1 image]"),
        n => out.push_str(&format!(" [+{n} images]")),
    }
    // What Loom keeps as it came, by type (`compaction_trigger`, a built-in tool's call).
    if !opaque.is_empty() {
        out.push_str(&format!(" [{}]", opaque.join(", ")));
    }
    out.trim_start().to_owned()
}

/// The first `max` characters of `s` on one line, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(max.min(s.len()) + 3);
    let mut count = 0;
    let mut last_space = true;
    for c in s.chars() {
        let c = if c.is_whitespace() { ' ' } else { c };
        if c == ' ' && last_space {
            continue;
        }
        if count == max {
            out.push('…');
            return out;
        }
        last_space = c == ' ';
        out.push(c);
        count += 1;
    }
    out.trim_end().to_owned()
}

fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_collapses_whitespace_and_marks_cuts() {
        assert_eq!(clip("a\n\n  b\tc ", 10), "a b c");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("héllo", 5), "héllo");
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KB");
        assert_eq!(size(100 * 1024 * 1024), "100.0 MB");
    }
}
