//! OpenAI Chat Completions, `POST /v1/chat/completions`.

use serde_json::Value;

use super::{bearer, openai_url, Dialect, Header, ItemHead, Provider};
use loom_core::Api;

/// OpenAI Chat Completions.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chat;

impl Dialect for Chat {
    fn api(&self) -> Api {
        Api::OpenaiChat
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn route(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn url(&self, base: &str) -> String {
        openai_url(base, self.endpoint())
    }

    fn credential_headers(&self, key: Option<&str>) -> Vec<Header> {
        bearer(key)
    }

    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool {
        matches!(
            last.role,
            Some("user" | "tool" | "function" | "system" | "developer")
        )
    }

    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value {
        crate::error_body::openai(status, message, param)
    }
}
