//! OpenAI Responses, `POST /v1/responses`.

use serde_json::Value;

use super::{bearer, openai_url, Dialect, Header, ItemHead, Provider};
use loom_core::Api;

/// OpenAI Responses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Responses;

impl Dialect for Responses {
    fn api(&self) -> Api {
        Api::OpenaiResponses
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn route(&self) -> &'static str {
        "/v1/responses"
    }

    fn url(&self, base: &str) -> String {
        openai_url(base, self.endpoint())
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        bearer(key)
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        match last.kind {
            // A tool's output, of whatever kind (`function_call_output`, `custom_tool_call_output`).
            Some(kind) if kind.ends_with("_output") => true,
            None | Some("message") => matches!(last.role, Some("user" | "system" | "developer")),
            Some(_) => false,
        }
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::openai(status, message, param)
    }
}
