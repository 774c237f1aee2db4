//! Test-only support for Loom's crates (a dev-dependency, never published).
//!
//! [`OpenApi`] validates request bodies against OpenAI's published OpenAPI description, read at
//! test time from `../shared/api/openai-openapi.json` beside the workspace (never copied into the
//! project). It implements the JSON Schema keywords that description uses, with the two readings
//! its README asks for: OpenAPI 3.0's `nullable`, and `oneOf` read as `anyOf` (some of its `oneOf`
//! lists overlap: an input message matches two branches).
//!
//! [`pg`] gives tests a PostgreSQL database of their own: a fresh schema on the cluster named by
//! `LOOM_TEST_PG`, or on one started once per test binary by `scripts/postgres.sh`.
//!
//! [`otlp`] is a trace collector on loopback (OTLP over HTTP) that the tests of Loom's spans read
//! and its benchmarks export to.
//!
//! [`generate`] builds valid requests from the same descriptions (and from
//! [`OpenApi::anthropic`], a description of Anthropic Messages requests written from the
//! Anthropic SDK's types), for the conformance suite that sends them through Loom.
//!
//! Errors are plain strings (a path and a reason each): they are read by people looking at a
//! failed test, never matched on by code.

pub mod generate;
pub mod otlp;
pub mod pg;
mod schema;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The file, relative to the folder that holds the shared material.
const DESCRIPTION: &str = "api/openai-openapi.json";

/// The shared reference folder (`../shared` beside the workspace), searched for from the running
/// crate's manifest folder upwards, then from this crate's. `None` when it is absent, which is
/// the one case in which tests that need it may skip (and must say so).
pub fn shared_dir() -> Option<PathBuf> {
    let runtime = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    runtime
        .into_iter()
        .chain([built])
        .find_map(|start| find_upwards(&start))
}

fn find_upwards(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join("shared"))
        .find(|shared| shared.join(DESCRIPTION).is_file())
}

/// OpenAI's API description, loaded for validation.
#[derive(Debug)]
pub struct OpenApi {
    root: Value,
    patterns: schema::Patterns,
}

impl OpenApi {
    /// Loads the description from the shared folder ([`shared_dir`]); the error says what is
    /// missing or malformed.
    pub fn load() -> Result<Self, String> {
        let shared = shared_dir().ok_or_else(|| {
            format!(
                "no `shared/{DESCRIPTION}` above {} or {}",
                std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default(),
                env!("CARGO_MANIFEST_DIR")
            )
        })?;
        Self::from_file(&shared.join(DESCRIPTION))
    }

    /// Loads a description from `path`.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let root: Value =
            serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
        Self::from_value(root)
    }

    /// A description given as a value (tests of the validator itself use small ones).
    pub fn from_value(root: Value) -> Result<Self, String> {
        if !root
            .pointer("/components/schemas")
            .is_some_and(Value::is_object)
        {
            return Err("the description has no `components.schemas` object".to_owned());
        }
        Ok(Self {
            root,
            patterns: schema::Patterns::default(),
        })
    }

    /// Anthropic Messages requests (`MessageCreateParams`) as a description of the same form,
    /// written for these tests from the Anthropic SDK's request types (Anthropic publishes
    /// none); built into the crate, so it is always there.
    pub fn anthropic() -> Result<Self, String> {
        let root: Value = serde_json::from_str(include_str!("generate/anthropic-messages.json"))
            .map_err(|e| format!("parsing the Anthropic description: {e}"))?;
        Self::from_value(root)
    }

    /// A walk that generates instances of this description's schemas, for `seed`.
    pub fn walker(&self, seed: u64) -> generate::Walker<'_> {
        generate::Walker::new(&self.root, &self.patterns, seed)
    }

    /// The description itself.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// Checks `body` against the component schema named `schema` (`CreateChatCompletionRequest`,
    /// `CreateResponse`, or any other). The errors name the path in the body (`$.input[3].role`)
    /// and the reason; for a value that matches none of several alternatives, the reasons of the
    /// alternative it came closest to.
    pub fn validate(&self, schema: &str, body: &Value) -> Result<(), Vec<String>> {
        let pointer = format!(
            "/components/schemas/{}",
            schema.replace('~', "~0").replace('/', "~1")
        );
        let Some(target) = self.root.pointer(&pointer) else {
            return Err(vec![format!("the description has no schema `{schema}`")]);
        };
        let v = schema::Validator {
            root: &self.root,
            patterns: &self.patterns,
        };
        let mut errors = Vec::new();
        v.check(target, body, "$", None, Some(&mut errors));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests;
