//! Reducers for web searches, page navigation and page interaction (seed rules `web:search`,
//! `browser:navigate`).
//!
//! A search keeps its query, the number of results and as many titles as fit; a page keeps its
//! url, status, title and size — the page itself is always offloaded. BrowserGym returns the
//! whole page (tabs and accessibility tree) after every action; its observation keeps the action,
//! its outcome and the page the agent ended up on.

use serde_json::Value;

use crate::step::ToolKind;

use super::args::parse_call_text;
use super::text::{self, human_size, plural, Line};
use super::{Input, Outcome};

/// A search tool (`web_search`, `WebSearch`, FireAct `search`/`lookup`).
pub(crate) fn search(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let query = args
        .str(&[
            "query",
            "q",
            "search_query",
            "keyword",
            "search_term",
            "term",
            "question",
        ])
        .or_else(|| args.str(&["queries"]));
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(ToolKind::WebSearch, String::new()).arg("query", query);
    let mut line = Line::new(input.max);
    line.lit("Searched '")
        .text_upto(query.unwrap_or("?"), input.max / 2)
        .lit("'");
    if input.is_error {
        let why = text::error_line(body)
            .or_else(|| text::first_meaningful(body))
            .unwrap_or("failed");
        line.lit(" failed").tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    if let Some((count, titles)) = json_results(body) {
        out.results = Some(count);
        line.lit(" → ").lit(&plural(count, "result", "results"));
        let mut sep = ": ";
        for (i, title) in titles.iter().enumerate() {
            if !line.opt(sep, title) {
                line.opt("; ", &format!("+{} more", titles.len() - i));
                break;
            }
            sep = "; ";
        }
        out.observation = line.finish();
        return out;
    }
    // FireAct's Wikipedia search answers "Could not find X. Similar: [...]" when nothing matched.
    if let Some(similar) = body
        .strip_prefix("Could not find")
        .and_then(|r| r.split_once("Similar: "))
    {
        out.results = Some(0);
        line.lit(" → no page");
        line.tail(
            "; similar: ",
            similar
                .1
                .trim_matches(|c| matches!(c, '[' | ']' | '.' | ' ')),
            10,
        );
        out.observation = line.finish();
        return out;
    }
    match text::first_meaningful(body) {
        None => {
            out.results = Some(0);
            line.lit(" → no results");
        }
        Some(first) => {
            let lines = text::line_count(body);
            if lines > 1 {
                line.lit(&format!(
                    " → {}, {}",
                    plural(lines, "line", "lines"),
                    human_size(body.len() as u64)
                ));
            }
            line.tail(": ", first, 8);
        }
    }
    out.observation = line.finish();
    out
}

/// Result count and titles of a JSON search result: a top-level array, or an array under
/// `results`, `items`, `organic_results`, `web.results`, `data` — or Claude Code's
/// `Links: [...]` line.
fn json_results(body: &str) -> Option<(u64, Vec<String>)> {
    let trimmed = body.trim();
    let value: Value = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        serde_json::from_str(trimmed).ok()?
    } else {
        let at = body.find("Links: [")?;
        let rest = &body[at + "Links: ".len()..];
        let end = rest.find("]\n").map_or(rest.trim_end().len(), |i| i + 1);
        serde_json::from_str(&rest[..end]).ok()?
    };
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(obj) => [
            "results",
            "items",
            "organic_results",
            "organic",
            "data",
            "hits",
            "documents",
        ]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_array))
        .or_else(|| {
            obj.get("web")
                .and_then(|w| w.get("results"))
                .and_then(Value::as_array)
        })?,
        _ => return None,
    };
    let titles = list
        .iter()
        .filter_map(|item| {
            ["title", "name", "filename", "url", "link"]
                .iter()
                .find_map(|k| item.get(*k).and_then(Value::as_str))
                .map(str::to_owned)
        })
        .collect();
    Some((list.len() as u64, titles))
}

/// What a page result says about where the agent is.
#[derive(Debug, Default)]
struct Page<'a> {
    title: Option<&'a str>,
    url: Option<&'a str>,
    /// BrowserGym's `Last action outcome:` text.
    outcome: Option<&'a str>,
    tabs: usize,
}

/// Reads title, url and status from a page result: BrowserGym's tab list, a JSON page, an HTML
/// `<title>`, or `Title:`/`URL:` header lines.
fn page(body: &str) -> Page<'_> {
    let mut p = Page::default();
    let head = &body[..text::floor_char_boundary(body, 16 * 1024)];
    p.outcome = head
        .strip_prefix("Last action outcome: ")
        .map(|r| r.lines().next().unwrap_or("").trim());
    // BrowserGym: `- Tab 1 (active)\n  - Title: Apple\n  - URL: https://www.apple.com/`.
    let mut in_active = false;
    for l in text::lines(head) {
        let t = l.trim();
        if t.starts_with("- Tab ") {
            p.tabs += 1;
            in_active = t.ends_with("(active)");
            continue;
        }
        if in_active {
            if let Some(title) = t.strip_prefix("- Title: ") {
                p.title = Some(title.trim());
            } else if let Some(url) = t.strip_prefix("- URL: ") {
                p.url = Some(url.trim());
            }
        }
        if t.starts_with("#### Current Page") {
            break;
        }
    }
    if p.title.is_none() {
        if let Some(start) = head.find("<title>") {
            let rest = &head[start + 7..];
            p.title = rest.find("</title>").map(|e| rest[..e].trim());
        }
    }
    if p.title.is_none() {
        for l in text::lines(head).take(10) {
            if let Some(t) = l.strip_prefix("Title: ") {
                p.title = Some(t.trim());
            } else if let Some(u) = l
                .strip_prefix("URL: ")
                .or_else(|| l.strip_prefix("URL Source: "))
            {
                p.url = Some(u.trim());
            }
        }
    }
    p
}

/// What a JSON page result (`{"status", "title", "url", "text"}`) says.
#[derive(Debug, Default)]
struct JsonPage {
    status: Option<i64>,
    title: Option<String>,
    url: Option<String>,
}

fn json_page(body: &str) -> Option<JsonPage> {
    if !body.trim_start().starts_with('{') || body.len() > 8 * 1024 * 1024 {
        return None;
    }
    let value: Value = serde_json::from_str(body).ok()?;
    let obj = value.as_object()?;
    let page = JsonPage {
        status: ["status", "status_code", "statusCode"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_i64)),
        title: obj.get("title").and_then(Value::as_str).map(str::to_owned),
        url: obj.get("url").and_then(Value::as_str).map(str::to_owned),
    };
    (page.status.is_some() || page.title.is_some()).then_some(page)
}

/// `https://www.apple.com/shop/buy-watch?x=1` → `www.apple.com/shop/buy-watch`.
fn short_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    rest.trim_end_matches('/').to_owned()
}

/// Navigation (`goto`, `WebFetch`, `browser:navigate`).
pub(crate) fn navigate(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let action = args.str(&["action"]);
    let url = args
        .str(&["url", "uri", "href", "link"])
        .map(str::to_owned)
        .or_else(|| {
            action
                .and_then(parse_call_text)
                .and_then(|(_, a)| a.into_iter().next())
        });
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(ToolKind::Navigate, String::new())
        .arg("url", url.as_deref())
        .arg("action", action);
    let p = page(body);
    let json = json_page(body);
    let status = json.as_ref().and_then(|j| j.status);
    let title = p
        .title
        .map(str::to_owned)
        .or_else(|| json.as_ref().and_then(|j| j.title.clone()));
    let landed = p
        .url
        .map(str::to_owned)
        .or_else(|| json.as_ref().and_then(|j| j.url.clone()));
    let shown = url
        .as_deref()
        .or(landed.as_deref())
        .map_or_else(|| "page".to_owned(), short_url);
    if let Some(s) = status {
        out = out.fact("status", s);
    }
    if let Some(t) = &title {
        out = out.fact("title", text::piece(t, 120));
    }
    let mut line = Line::new(input.max);
    let failed = input.is_error
        || status.is_some_and(|s| s >= 400)
        || p.outcome.is_some_and(|o| o.starts_with("Error"));
    line.lit("Visited ").text_upto(&shown, input.max / 2);
    if failed {
        let why = p
            .outcome
            .or_else(|| text::error_line(body))
            .or_else(|| text::first_meaningful(body))
            .unwrap_or("failed");
        line.lit(" failed");
        if let Some(s) = status {
            line.lit(&format!(" (status {s})"));
        }
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    let mut details = Vec::new();
    if let Some(s) = status {
        details.push(format!("status {s}"));
    }
    details.push(format!("{} page", human_size(body.len() as u64)));
    line.lit(" (").lit(&details.join(", ")).lit(")");
    if let Some(t) = &title {
        line.opt(": ", &format!("'{t}'"));
    }
    if let Some(l) = &landed {
        if url.as_deref().is_some_and(|u| short_url(u) != short_url(l)) {
            line.opt(" at ", &short_url(l));
        }
    }
    out.observation = line.finish();
    out
}

/// A page interaction (BrowserGym `click`, `fill`, `scroll`, …; OpenHands `browser`).
pub(crate) fn browser(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let action = args
        .str(&["action", "code"])
        .map(|a| a.lines().next().unwrap_or(a).trim().to_owned())
        .unwrap_or_else(|| super::generic::call_text(input.tool_name, args, input.max / 3));
    let body = input.env.body.as_ref();
    let p = page(body);
    let mut out = Outcome::new(ToolKind::BrowserAction, String::new()).arg("action", Some(&action));
    if let Some(t) = p.title {
        out = out.fact("title", text::piece(t, 120));
    }
    if let Some(u) = p.url {
        out = out.fact("url", short_url(u));
    }
    let mut line = Line::new(input.max);
    line.text(&text::piece(&action, input.max / 2));
    let error = p
        .outcome
        .filter(|o| o.starts_with("Error"))
        .map(|o| o.trim_start_matches("Error: "));
    // Without a page, an error message is all there is (`… generated an exception: …`).
    let says_error = p.outcome.is_none()
        && text::first_meaningful(body)
            .is_some_and(|l| text::looks_like_error(l) || l.contains("generated an exception"));
    let failed = input.is_error || error.is_some() || says_error;
    if let Some(outcome) = p.outcome {
        match error {
            Some(e) => line.lit(" → error: ").text(e),
            None if outcome == "No errors reported" => line.lit(" → ok"),
            None => line.lit(" → ").text(outcome),
        };
        if let Some(t) = p.title.filter(|t| !t.is_empty()) {
            line.opt("; page ", &format!("'{t}'"));
        }
        if let Some(u) = p.url {
            line.opt(" ", &format!("({})", text::piece(&short_url(u), 48)));
        }
        if p.tabs > 1 {
            line.opt(", ", &format!("{} tabs", p.tabs));
        }
        line.opt(", ", &human_size(body.len() as u64));
    } else if failed {
        let why = text::error_line(body)
            .or_else(|| text::first_meaningful(body))
            .unwrap_or("failed");
        line.lit(" failed").tail(": ", why, 8);
    } else {
        match text::first_meaningful(body) {
            Some(first) => {
                line.lit(&format!(" → {}", human_size(body.len() as u64)));
                line.tail(": ", first, 8);
            }
            None => {
                line.lit(" → no output");
            }
        }
    }
    out.observation = line.finish();
    if failed {
        let why = error
            .map(str::to_owned)
            .or_else(|| text::error_line(body).map(str::to_owned))
            .unwrap_or_else(|| "failed".to_owned());
        return out.failed(why);
    }
    out
}
