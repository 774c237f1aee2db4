//! The providers' wire formats (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages).
