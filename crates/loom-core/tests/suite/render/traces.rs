//! Snapshots of the final request of four real trajectories in every format, replayed call by
//! call at a budget chosen for what each one exercises:
//!
//! - tau-bench (function tools and a dialogue with the user) fits whole: every format's plain
//!   rendering of calls, results and dialogue;
//! - mini-SWE-agent (one `bash` tool) at 6,000 tokens: compaction points fire, old turns fold
//!   into the compact block, results are stubbed and turns thinned;
//! - BrowserGym (every result a whole page): each answered page is superseded by the next;
//! - FireAct (a HotpotQA search agent, no system prompt): the shape the ReAct prompt was
//!   written for.
//!
//! Every call of every replay passes the checks in `replay.rs`; the assertions here make sure
//! each trajectory still exercises what it was chosen for.

use anyhow::{ensure, Result};
use loom_core::render::{Format, PointReason};
use loom_tokens::{Encoding, Tokenizer};

use super::log::{find, Session};
use super::replay::{replay, Replay};
use super::text::snapshot;

/// A trajectory and the budget it is replayed at.
pub(crate) struct Case {
    /// Trace file.
    pub(crate) file: &'static str,
    /// End of the trajectory's id.
    pub(crate) id: &'static str,
    /// Hard budget, tokens.
    pub(crate) budget: u64,
}

pub(crate) const TAU: Case = Case {
    file: "tau_bench_airline_gpt4o.jsonl",
    id: "task14-trial2",
    budget: 16_000,
};
pub(crate) const MINISWE: Case = Case {
    file: "miniswe_gemini3pro_swebv.jsonl",
    id: "django__django-16493",
    budget: 5_000,
};
pub(crate) const BROWSERGYM: Case = Case {
    file: "browsergym_workarena_gpt4o.jsonl",
    id: "order-ipad-pro_14",
    budget: 16_000,
};
pub(crate) const FIREACT: Case = Case {
    file: "fireact_hotpotqa__gpt35ft_run.jsonl",
    id: "/q6",
    budget: 16_000,
};

/// The exact o200k counter the snapshots' token figures come from.
pub(crate) fn meter() -> Tokenizer {
    Tokenizer::Bpe(Encoding::O200kBase)
}

/// Replays `case` in `format`; returns the session, the replay and its snapshot text.
pub(crate) fn run(case: &Case, format: Format) -> Result<(Session, Replay, String)> {
    let session = find(case.file, case.id)?;
    let r = replay(&session, format, case.budget, &meter())?;
    let text = snapshot(&session.id, format, case.budget, &r)?;
    Ok((session, r, text))
}

fn tau(format: Format) -> Result<String> {
    let (_, r, text) = run(&TAU, format)?;
    let receipt = &r.last.receipt;
    ensure!(
        receipt.points == 0 && receipt.verbatim.len() == 1 && receipt.verbatim[0].from == 1,
        "{format:?}: the tau-bench dialogue no longer fits whole at {}",
        TAU.budget
    );
    Ok(text)
}

fn miniswe(format: Format) -> Result<String> {
    let (_, r, text) = run(&MINISWE, format)?;
    let receipt = &r.last.receipt;
    // Which of stubs and thinned turns the last request still holds depends on where the
    // points fell (a deep point folds what earlier ones stubbed); points and folding it must.
    ensure!(
        receipt.points >= 2 && !receipt.grouped.is_empty(),
        "{format:?}: expected points and a compact block: {receipt:?}"
    );
    let appends = r.calls.iter().skip(1).filter(|c| c.point.is_none()).count();
    ensure!(
        appends > 3 * receipt.points as usize,
        "{format:?}: {appends} appends"
    );
    Ok(text)
}

fn browsergym(format: Format) -> Result<String> {
    let (_, r, text) = run(&BROWSERGYM, format)?;
    let superseded = r
        .calls
        .iter()
        .filter(|c| {
            c.point
                .as_ref()
                .is_some_and(|p| p.reason == PointReason::Oversized)
        })
        .count();
    let count = |list: &[loom_core::render::SeqRange]| -> u64 {
        list.iter().map(|s| s.to - s.from + 1).sum()
    };
    let stubbed = count(&r.last.receipt.stubbed);
    let diffed = count(&r.last.receipt.diffed);
    // One page is sent whole; every other is sent as its diff against it, or stubbed once a
    // page sent whole superseded it (its diff did not pay, or it was over the oversized share).
    ensure!(
        superseded >= 1 && (stubbed + diffed) as usize + 1 == r.calls.len() - 1,
        "{format:?}: {superseded} points, {stubbed} pages stubbed, {diffed} diffed over {} calls",
        r.calls.len()
    );
    Ok(text)
}

fn fireact(format: Format) -> Result<String> {
    let (_, r, text) = run(&FIREACT, format)?;
    ensure!(r.last.receipt.points == 0, "{format:?}: FireAct compacted");
    Ok(text)
}

macro_rules! snapshot {
    ($name:ident, $case:ident, $format:expr) => {
        #[test]
        fn $name() -> Result<()> {
            insta::assert_snapshot!(stringify!($name), $case($format)?);
            Ok(())
        }
    };
}

snapshot!(tau_openai_chat, tau, Format::OPENAI_CHAT);
snapshot!(tau_openai_responses, tau, Format::OPENAI_RESPONSES);
snapshot!(tau_anthropic, tau, Format::ANTHROPIC);
snapshot!(tau_react, tau, Format::React);
snapshot!(miniswe_openai_chat, miniswe, Format::OPENAI_CHAT);
snapshot!(miniswe_openai_responses, miniswe, Format::OPENAI_RESPONSES);
snapshot!(miniswe_anthropic, miniswe, Format::ANTHROPIC);
snapshot!(miniswe_react, miniswe, Format::React);
snapshot!(browsergym_openai_chat, browsergym, Format::OPENAI_CHAT);
snapshot!(
    browsergym_openai_responses,
    browsergym,
    Format::OPENAI_RESPONSES
);
snapshot!(browsergym_anthropic, browsergym, Format::ANTHROPIC);
snapshot!(browsergym_react, browsergym, Format::React);
snapshot!(fireact_openai_chat, fireact, Format::OPENAI_CHAT);
snapshot!(fireact_openai_responses, fireact, Format::OPENAI_RESPONSES);
snapshot!(fireact_anthropic, fireact, Format::ANTHROPIC);
snapshot!(fireact_react, fireact, Format::React);

/// FireAct's assistant texts already begin with `Thought:` (mini-SWE-agent's with `THOUGHT:`);
/// the ReAct format prefixes every assistant text with `Thought: ` regardless, so the prompt
/// reads `Thought: Thought: I need to search…` on every turn.
#[test]
fn react_prompt_labels_each_thought_once() -> Result<()> {
    let (_, r, _) = run(&FIREACT, Format::React)?;
    let body = r.last.body();
    let prompt = body["prompt"].as_str().unwrap_or_default();
    let doubled = prompt.matches("Thought: Thought:").count();
    ensure!(doubled == 0, "{doubled} thoughts labelled twice");
    Ok(())
}
