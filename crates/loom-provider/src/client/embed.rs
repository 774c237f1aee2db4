//! OpenAI's `/v1/embeddings` (which vLLM, Ollama and TEI serve too): texts in, one vector each
//! out, through the same retries, limits and errors as a generation call.

use reqwest::Url;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::call::{send, Reader};
use super::{CallError, Client};

/// Largest embeddings reply read into memory (a batch of large vectors as JSON text).
const MAX_EMBEDDINGS_BYTES: u64 = 256 << 20;

/// The vectors of one embeddings call, in the order of the inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// One vector per input text, all of one length.
    pub vectors: Vec<Vec<f32>>,
    /// The model the server says it used (it may differ in spelling from the one asked for).
    pub model: Option<String>,
    /// Requests sent, the successful one included.
    pub attempts: u32,
}

/// The embeddings URL for an OpenAI-compatible base URL: `…/v1/embeddings` when the base URL has
/// no path, else the path with `/embeddings` appended (as for chat completions).
pub fn embeddings_endpoint(base_url: &str) -> Result<Url, CallError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = Url::parse(trimmed)
        .map_err(|e| CallError::config("base_url", format!("`{trimmed}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(CallError::config(
            "base_url",
            format!("`{trimmed}` is not an http(s) URL"),
        ));
    }
    let full = if matches!(url.path(), "" | "/") {
        format!("{trimmed}/v1/embeddings")
    } else {
        format!("{trimmed}/embeddings")
    };
    Url::parse(&full)
        .map_err(|e| CallError::config("base_url", format!("`{full}` is not a URL: {e}")))
}

impl Client {
    /// Embeds `input` with the configured model, blocking the calling thread (see
    /// [`Client::complete`] for which threads may call it). `dimensions` is sent when given
    /// (models that can shorten their vectors honour it).
    ///
    /// The reply is checked before it is returned: one vector per input, each a list of finite
    /// numbers, all of one length (and of `dimensions` when given); anything else is
    /// [`CallError::Embeddings`] naming the field.
    pub fn embed(
        &self,
        input: &[String],
        dimensions: Option<usize>,
    ) -> Result<Embeddings, CallError> {
        let Some(runtime) = &self.runtime else {
            return Err(CallError::config("client", "already shut down"));
        };
        let run = move || runtime.block_on(self.embed_on(&self.blocking_http, input, dimensions));
        if tokio::runtime::Handle::try_current().is_err() {
            return run();
        }
        std::thread::scope(|scope| match scope.spawn(run).join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    async fn embed_on(
        &self,
        http: &reqwest::Client,
        input: &[String],
        dimensions: Option<usize>,
    ) -> Result<Embeddings, CallError> {
        let start = Instant::now();
        let config = &self.config;
        let deadline = start + config.timeout;
        let target = embeddings_endpoint(&config.base_url)?;
        let Some(model) = config.model.as_deref() else {
            return Err(CallError::Request {
                reason: "field `model`: missing, and no embedding model is configured".into(),
            });
        };
        let mut body = json!({ "model": model, "input": input, "encoding_format": "float" });
        if let Some(d) = dimensions {
            body["dimensions"] = json!(d);
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| CallError::Request {
            reason: format!("cannot be serialised: {e}"),
        })?;
        let (response, attempts) =
            send(self, http, &target, "application/json", bytes, deadline).await?;
        let url = target.as_str();
        let mut read = Reader {
            response,
            api: config.api,
            url,
            attempts,
            idle: config.idle_timeout,
            deadline,
            received: 0,
            first_byte: None,
            start,
        };
        let body = read.whole(MAX_EMBEDDINGS_BYTES).await?;
        let bad = |field: String, reason: String| CallError::Embeddings {
            url: url.to_owned(),
            attempts,
            field,
            reason,
        };
        let mut out = parse_embeddings(&body, input.len()).map_err(|(f, r)| bad(f, r))?;
        if let (Some(want), Some(first)) = (dimensions, out.vectors.first()) {
            if first.len() != want {
                return Err(bad(
                    "data[0].embedding".into(),
                    format!(
                        "{} numbers, but {want} dimensions were asked for",
                        first.len()
                    ),
                ));
            }
        }
        out.attempts = attempts;
        Ok(out)
    }
}

/// Reads an embeddings reply: `{"data": [{"index", "embedding": [numbers]}], "model"}`, the
/// vectors put in input order. Errors are `(field, reason)`.
fn parse_embeddings(body: &[u8], expected: usize) -> Result<Embeddings, (String, String)> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| (String::new(), format!("not JSON: {e}")))?;
    let data = value
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| ("data".to_owned(), "missing or not an array".to_owned()))?;
    if data.len() != expected {
        return Err((
            "data".into(),
            format!("{} vectors for {expected} inputs", data.len()),
        ));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    let mut dim: Option<usize> = None;
    for (i, entry) in data.iter().enumerate() {
        let index = match entry.get("index") {
            None => i,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n < expected)
                .ok_or_else(|| {
                    (
                        format!("data[{i}].index"),
                        format!("expected an input index below {expected}, got {v}"),
                    )
                })?,
        };
        let field = format!("data[{i}].embedding");
        let numbers = entry
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                (
                    field.clone(),
                    "missing or not an array of numbers".to_owned(),
                )
            })?;
        let mut vector = Vec::with_capacity(numbers.len());
        for (j, n) in numbers.iter().enumerate() {
            let x = n
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| (format!("{field}[{j}]"), format!("not a finite number: {n}")))?;
            vector.push(x as f32);
        }
        if vector.is_empty() {
            return Err((field, "an empty vector".into()));
        }
        match dim {
            None => dim = Some(vector.len()),
            Some(d) if d != vector.len() => {
                return Err((
                    field,
                    format!("{} numbers where the first vector had {d}", vector.len()),
                ))
            }
            Some(_) => {}
        }
        let slot = &mut slots[index];
        if slot.is_some() {
            return Err((
                format!("data[{i}].index"),
                format!("index {index} given twice"),
            ));
        }
        *slot = Some(vector);
    }
    let vectors = slots.into_iter().flatten().collect();
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Embeddings {
        vectors,
        model,
        attempts: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_with_or_without_the_version() {
        let url = |b| embeddings_endpoint(b).unwrap().to_string();
        assert_eq!(
            url("https://api.openai.com"),
            "https://api.openai.com/v1/embeddings"
        );
        assert_eq!(
            url("https://api.openai.com/v1/"),
            "https://api.openai.com/v1/embeddings"
        );
        assert_eq!(
            url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1/embeddings"
        );
        assert!(embeddings_endpoint("ftp://x").is_err());
    }

    #[test]
    fn replies_are_put_in_input_order_and_checked() {
        let body = br#"{"data":[{"index":1,"embedding":[3,4]},{"index":0,"embedding":[1,2]}],"model":"m"}"#;
        let e = parse_embeddings(body, 2).unwrap();
        assert_eq!(e.vectors, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
        assert_eq!(e.model.as_deref(), Some("m"));
        let err = |b: &[u8], n| parse_embeddings(b, n).unwrap_err();
        assert_eq!(err(b"{", 1).0, "");
        assert_eq!(err(br#"{"data":[]}"#, 1).0, "data");
        let ragged = br#"{"data":[{"embedding":[1,2]},{"embedding":[1]}]}"#;
        assert_eq!(err(ragged, 2).0, "data[1].embedding");
        let twice = br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#;
        assert_eq!(err(twice, 2).0, "data[1].index");
        assert_eq!(
            err(br#"{"data":[{"embedding":["x"]}]}"#, 1).0,
            "data[0].embedding[0]"
        );
    }
}
