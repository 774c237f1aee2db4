//! The attributes Loom's spans carry: OpenTelemetry's GenAI, HTTP and error conventions, and
//! Loom's own under `loom.*` (docs/serve.md, "Telemetry", lists them).

use opentelemetry::KeyValue;

/// `chat` (the three APIs are chat APIs).
pub const OPERATION: &str = "gen_ai.operation.name";
/// The provider: `openai`, `anthropic`.
pub const SYSTEM: &str = "gen_ai.system";
/// The provider, under the name later versions of the conventions give it.
pub const PROVIDER: &str = "gen_ai.provider.name";
/// The model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// The most output tokens the request asks for, when it says.
pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// The model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// The provider's id of the reply.
pub const RESPONSE_ID: &str = "gen_ai.response.id";
/// Why generation stopped.
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Input tokens the provider reported.
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Of them, read from the provider's prompt cache.
pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Output tokens the provider reported.
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// What failed, in a word or a status code.
pub const ERROR_TYPE: &str = "error.type";
/// The upstream's HTTP status, on an attempt.
pub const HTTP_STATUS: &str = "http.response.status_code";
/// The conversation: as the client named it (`X-Loom-Session`, or its own session header).
pub const SESSION: &str = "session.id";

/// `fit` or `observe`.
pub const MODE: &str = "loom.mode";
/// The session as Loom stores it (derived when the client names none).
pub const LOOM_SESSION: &str = "loom.session";
/// The model call the receipt is stored as (`X-Loom-Call`).
pub const RECEIPT: &str = "loom.receipt.id";
/// The budget the request was fitted to: no request exceeds it (tokens).
pub const BUDGET: &str = "loom.budget";
/// The budget the request asked for (`X-Loom-Budget`, or the server's `budget`), when one did
/// (tokens).
pub const REQUESTED_BUDGET: &str = "loom.budget.requested";
/// What compaction aims under (tokens).
pub const BUDGET_TARGET: &str = "loom.budget.target";
/// Loom's estimate of the request it sent (tokens).
pub const ESTIMATE: &str = "loom.estimate";
/// Whether this render fired a compaction point.
pub const COMPACTION_POINT: &str = "loom.compaction_point";
/// The estimate before the point's cut (tokens), when one fired.
pub const COMPACTION_BEFORE: &str = "loom.compaction.before";
/// The estimate after it (tokens), when one fired.
pub const COMPACTION_AFTER: &str = "loom.compaction.after";
/// Compaction points the session has had so far.
pub const COMPACTION_POINTS: &str = "loom.compaction_points";
/// Hidden `loom_recall` rounds the proxy answered before the reply went to the client.
pub const RECALL_ROUNDS: &str = "loom.recall_rounds";

/// Counts of the log's events by what the render did with them (`loom.events.verbatim`,
/// `.stubbed`, `.elided`, `.thinned`, `.diffed`, `.grouped` — folded into compact lines —,
/// `.summarized`, `.dropped`, `.replaced`), from the receipt's lists.
pub fn receipt(r: &loom_core::render::Receipt) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(16);
    a.push(KeyValue::new(BUDGET, n(r.budget.hard_total)));
    a.push(KeyValue::new(BUDGET_TARGET, n(r.budget.target)));
    a.push(KeyValue::new(ESTIMATE, n(r.estimate)));
    a.push(KeyValue::new(COMPACTION_POINT, r.compaction.is_some()));
    a.push(KeyValue::new(COMPACTION_POINTS, i64::from(r.points)));
    if let Some(p) = &r.compaction {
        a.push(KeyValue::new(COMPACTION_BEFORE, n(p.before)));
        a.push(KeyValue::new(COMPACTION_AFTER, n(p.after)));
    }
    for (fate, runs) in r.lists() {
        let events: u64 = runs
            .iter()
            .map(|run| run.to.saturating_sub(run.from).saturating_add(1))
            .sum();
        a.push(KeyValue::new(format!("loom.events.{fate}"), n(events)));
    }
    a
}

/// A count as an attribute value (OTLP integers are signed).
pub fn n(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
