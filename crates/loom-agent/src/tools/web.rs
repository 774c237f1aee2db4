//! `web:search` (a pluggable backend) and `browser:navigate` (an HTTP fetch, as text).

use serde_json::Value;

use super::{arg_str, Outcome};

/// A search engine behind `web:search`.
pub trait SearchBackend: Send + Sync {
    /// Results for `query`, as text for the model (titles, URLs, snippets).
    fn search(&self, query: &str) -> Result<String, String>;
}

/// What fetches a page for `browser:navigate`.
pub trait Fetcher: Send + Sync {
    /// The page's body and its content type.
    fn fetch(&self, url: &str) -> Result<(Vec<u8>, String), String>;
}

pub(crate) fn search(backend: Option<&dyn SearchBackend>, args: &Value) -> Outcome {
    let query = match arg_str(args, "query") {
        Ok(q) => q,
        Err(e) => return Outcome::error(e),
    };
    match backend {
        None => Outcome::error(
            "no search backend is configured: set `[tools.web_search] command` in the run's \
             configuration",
        ),
        Some(b) => match b.search(query) {
            Ok(text) => Outcome::ok(text),
            Err(e) => Outcome::error(format!("the search failed: {e}")),
        },
    }
}

pub(crate) fn navigate(fetcher: &dyn Fetcher, args: &Value) -> Outcome {
    let url = match arg_str(args, "url") {
        Ok(u) => u,
        Err(e) => return Outcome::error(e),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Outcome::error(format!(
            "`{url}`: only http:// and https:// URLs are fetched"
        ));
    }
    match fetcher.fetch(url) {
        Ok((body, kind)) => {
            let text = String::from_utf8_lossy(&body);
            if kind.contains("html") || text.trim_start().starts_with('<') {
                Outcome::ok(html_text(&text))
            } else {
                Outcome::ok(text.into_owned())
            }
        }
        Err(e) => Outcome::error(format!("cannot fetch `{url}`: {e}")),
    }
}

/// The readable text of an HTML page: scripts, styles and tags removed, block elements on their
/// own lines, the common entities decoded, blank runs collapsed; links keep their target
/// (`text [href]`) so that the agent can follow them.
pub fn html_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 3);
    let lower = html.to_ascii_lowercase();
    let mut i = 0;
    let bytes = html.as_bytes();
    while i < bytes.len() {
        if bytes[i] == b'<' {
            let end = match html[i..].find('>') {
                Some(e) => i + e + 1,
                None => break,
            };
            let tag = &lower[i + 1..end - 1];
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if (name == "script" || name == "style" || name == "noscript") && !tag.starts_with('/')
            {
                let close = format!("</{name}");
                i = lower[end..].find(&close).map_or(bytes.len(), |c| end + c);
                continue;
            }
            if name == "a" && !tag.starts_with('/') {
                if let Some(href) = attr(&html[i..end], "href") {
                    out.push_str(&format!(" [{href}] "));
                }
            }
            if matches!(
                name.as_str(),
                "p" | "div"
                    | "br"
                    | "li"
                    | "tr"
                    | "h1"
                    | "h2"
                    | "h3"
                    | "h4"
                    | "h5"
                    | "h6"
                    | "section"
                    | "article"
                    | "header"
                    | "footer"
                    | "title"
                    | "pre"
                    | "table"
            ) {
                out.push('\n');
            }
            i = end;
        } else {
            let next = html[i..].find('<').map_or(bytes.len(), |n| i + n);
            out.push_str(&decode(&html[i..next]));
            i = next;
        }
    }
    let mut text = String::with_capacity(out.len());
    let mut blank = 0;
    for line in out.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        text.push_str(&line);
        text.push('\n');
    }
    text.trim().to_owned()
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let at = lower.find(&format!("{name}="))? + name.len() + 1;
    let rest = &tag[at..];
    let (quote, rest) = match rest.chars().next()? {
        q @ ('"' | '\'') => (q, &rest[1..]),
        _ => (' ', rest),
    };
    let end = rest.find([quote, '>']).unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

fn decode(text: &str) -> String {
    text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_as_text_with_its_links() {
        let html = "<html><head><title>T</title><style>p{}</style><script>var x='<p>';</script></head>\
                    <body><h1>Hello &amp; welcome</h1><p>See <a href=\"/docs\">the docs</a>.</p></body></html>";
        let text = html_text(html);
        assert_eq!(text, "T\n\nHello & welcome\n\nSee [/docs] the docs.");
    }

    #[test]
    fn no_backend_is_a_clear_error_result() {
        let out = search(None, &serde_json::json!({"query": "x"}));
        assert!(out.is_error && out.text.contains("no search backend"));
    }
}
