//! The provider APIs Loom speaks: the one name every layer uses for them.
//!
//! Rendering, importing, counting, checking, calling and mocking all name an API with this enum,
//! so a request's format is never translated from one layer's name to another's, and a new API
//! is added here and then wherever the compiler asks for it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A provider API: its request and reply shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Api {
    /// OpenAI Chat Completions, `POST /v1/chat/completions` (and every compatible server).
    OpenaiChat,
    /// OpenAI Responses, `POST /v1/responses`.
    OpenaiResponses,
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// The Gemini API, `POST /v1beta/models/{model}:generateContent` (and
    /// `:streamGenerateContent`).
    Gemini,
}

impl Api {
    /// Every API.
    pub const ALL: [Api; 4] = [
        Api::OpenaiChat,
        Api::OpenaiResponses,
        Api::Anthropic,
        Api::Gemini,
    ];

    /// The API's name: in JSON, configuration, headers and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenaiChat => "openai-chat",
            Self::OpenaiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
        }
    }

    /// The API's name in messages for people.
    pub fn title(self) -> &'static str {
        match self {
            Self::OpenaiChat => "OpenAI Chat",
            Self::OpenaiResponses => "OpenAI Responses",
            Self::Anthropic => "Anthropic Messages",
            Self::Gemini => "Gemini",
        }
    }

    /// The path a client posts a request to, below the base URL's `/v1` (Gemini's, below
    /// `/v1beta`, names the model and the method after it: `/models/{model}:generateContent`).
    pub fn endpoint(self) -> &'static str {
        match self {
            Self::OpenaiChat => "/chat/completions",
            Self::OpenaiResponses => "/responses",
            Self::Anthropic => "/messages",
            Self::Gemini => "/models",
        }
    }

    /// The request field that holds the conversation.
    pub fn history_field(self) -> &'static str {
        match self {
            Self::OpenaiResponses => "input",
            Self::OpenaiChat | Self::Anthropic => "messages",
            Self::Gemini => "contents",
        }
    }

    /// The API a name means: [`Api::as_str`], or one of the names it has gone by elsewhere — the
    /// endpoint's (`chat_completions`, `responses`, `messages`, as `loom run`'s configuration
    /// writes them), the importer's (`openai`), `anthropic-messages`. Case and `-`/`_` are not
    /// told apart.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase().replace('_', "-");
        match name.as_str() {
            "openai-chat" | "openai" | "chat" | "chat-completions" | "openai-chat-completions" => {
                Some(Self::OpenaiChat)
            }
            "openai-responses" | "responses" => Some(Self::OpenaiResponses),
            "anthropic" | "anthropic-messages" | "messages" => Some(Self::Anthropic),
            "gemini" | "google" | "generate-content" => Some(Self::Gemini),
            _ => None,
        }
    }

    /// The names [`Api::parse`] is documented to take, for error messages.
    pub const NAMES: &'static str =
        "\"openai-chat\", \"openai-responses\", \"anthropic\" or \"gemini\"";
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Api {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| format!("unknown API {s:?}: expected {}", Self::NAMES))
    }
}

impl Serialize for Api {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Api {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown API {name:?}: expected {}", Self::NAMES))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_the_old_names_still_read() {
        for api in Api::ALL {
            assert_eq!(Api::parse(api.as_str()), Some(api));
            let json = serde_json::to_string(&api).unwrap();
            assert_eq!(serde_json::from_str::<Api>(&json).unwrap(), api);
        }
        for (old, api) in [
            ("chat_completions", Api::OpenaiChat),
            ("responses", Api::OpenaiResponses),
            ("messages", Api::Anthropic),
            ("openai", Api::OpenaiChat),
            ("anthropic-messages", Api::Anthropic),
        ] {
            assert_eq!(Api::parse(old), Some(api), "{old}");
        }
        assert_eq!(Api::parse("google"), Some(Api::Gemini));
        assert_eq!(Api::parse("vertex"), None);
        let err = serde_json::from_str::<Api>("\"vertex\"").unwrap_err();
        assert!(err.to_string().contains("unknown API \"vertex\""), "{err}");
    }
}
