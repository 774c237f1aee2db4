//! Injection hooks (agentix's hook lifecycle, DESIGN.md: Injection hooks): per-turn content added
//! next to the final user message, and side records produced after the assistant answered.
//!
//! - **Ordered pre-hooks** run one after another on the caller's thread. Each sees the turn and
//!   the injected content so far ([`Draft`]) and may transform it, add to it, or halt the turn
//!   with a reason ([`Flow::Halt`]). A failing ordered hook halts the turn: it may be a guardrail,
//!   and letting the turn through unguarded would be the silent failure.
//! - **Parallel groups** run their hooks on threads at once, each under its own timeout. They may
//!   only append: each returns texts, merged in declaration order whatever order they finish in.
//!   A hook that panics, fails or times out is skipped and reported.
//! - **Post-hooks** run after the assistant message. They get shared references only and return
//!   side records, so they cannot undo or edit the turn.
//!
//! After every hook that injected, the injected size is measured exactly as the render pipeline
//! will send it (one user message per injection, counted by the format) and checked against the
//! policy's injection reserve; an overflow is an error naming the hook. Compaction is never
//! re-entered after hooks: [`render_turn`] renders once, after they ran.

mod knowledge;
mod parallel;
mod post;
mod turn;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use loom_core::render::{Format, Injection, Msg, TokenMeter};
use loom_core::MessageContent;
use serde::{Deserialize, Serialize};

use crate::error::{BoxError, Result, RuntimeError};

pub use knowledge::KnowledgeInjector;
pub use post::{PostHook, PostRun, PostTurn, SideRecord};
pub use turn::{render_turn, run_turn, TurnRender, TurnView, Turned};

/// What an ordered pre-hook decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next hook.
    Continue,
    /// Stop the turn: no render, no model call.
    Halt(String),
}

/// Why a turn was halted, and by which hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Halt {
    /// The hook that halted.
    pub hook: String,
    /// Its reason.
    pub reason: String,
}

/// The turn's injected content while ordered hooks work on it.
///
/// New content is attributed to the hook that adds it, so a receipt always says which hook
/// injected what; a hook can rewrite or remove content but not forge another hook's name.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    items: Vec<Injection>,
    current: String,
}

impl Draft {
    /// Adds content for this turn.
    pub fn push(&mut self, content: impl Into<String>) {
        self.items.push(Injection {
            hook: self.current.clone(),
            content: content.into(),
        });
    }

    /// Adds content under a label of the current hook's own: it is attributed to
    /// `HOOK:label` (a knowledge hook names each snippet's source this way, so that the
    /// receipt says what was injected from where, with its tokens).
    pub fn push_labelled(&mut self, label: &str, content: impl Into<String>) {
        self.items.push(Injection {
            hook: format!("{}:{label}", self.current),
            content: content.into(),
        });
    }

    /// The content so far, in order.
    pub fn items(&self) -> &[Injection] {
        &self.items
    }

    /// Keeps only the injections `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Injection) -> bool) {
        self.items.retain(keep);
    }

    /// Rewrites the text of every injection (redaction, reformatting).
    pub fn rewrite(&mut self, mut f: impl FnMut(&mut String)) {
        for item in &mut self.items {
            f(&mut item.content);
        }
    }
}

/// A hook that runs in order and may transform the turn's injected content or halt the turn.
pub trait PreHook: Send + Sync {
    /// Its name, as reported in outcomes, errors and receipts.
    fn name(&self) -> &str;
    /// Runs the hook.
    fn run(&self, turn: &TurnView, draft: &mut Draft) -> Result<Flow, BoxError>;
}

/// A hook of a parallel group: it may only append texts.
pub trait AppendHook: Send + Sync {
    /// Its name, as reported in outcomes, errors and receipts.
    fn name(&self) -> &str;
    /// Returns the texts to append; `so_far` is what earlier stages injected.
    fn run(&self, turn: &TurnView, so_far: &[Injection]) -> Result<Vec<String>, BoxError>;
}

/// Hooks that run at once, each under its own timeout.
#[derive(Clone, Default)]
pub struct ParallelGroup {
    hooks: Vec<(Arc<dyn AppendHook>, Duration)>,
}

impl std::fmt::Debug for ParallelGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.hooks.iter().map(|(h, t)| (h.name(), t)))
            .finish()
    }
}

impl ParallelGroup {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hook with its timeout.
    pub fn hook(mut self, hook: impl AppendHook + 'static, timeout: Duration) -> Self {
        self.hooks.push((Arc::new(hook), timeout));
        self
    }

    /// Adds a shared hook with its timeout.
    pub fn shared(mut self, hook: Arc<dyn AppendHook>, timeout: Duration) -> Self {
        self.hooks.push((hook, timeout));
        self
    }
}

/// Which surface a hook ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStage {
    /// An ordered pre-hook.
    Ordered,
    /// A hook of a parallel group.
    Parallel,
    /// A post-hook.
    Post,
}

/// What happened to one hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum HookStatus {
    /// It ran; `tokens` is the turn's injected size after it (0 for post-hooks).
    Ran {
        /// Injected tokens after this hook.
        tokens: u64,
    },
    /// It halted the turn.
    Halted {
        /// Its reason.
        reason: String,
    },
    /// It returned an error.
    Failed {
        /// The error.
        error: String,
    },
    /// It panicked (the panic was caught).
    Panicked {
        /// The panic message.
        message: String,
    },
    /// It did not answer within its timeout; its result, if it ever comes, is ignored.
    TimedOut {
        /// The timeout, in milliseconds.
        after_ms: u64,
    },
}

/// One hook's outcome, in the order hooks were declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookOutcome {
    /// The hook.
    pub hook: String,
    /// Where it ran.
    pub stage: HookStage,
    /// What happened.
    pub status: HookStatus,
}

/// Measures injected content the way the render pipeline sends it, against the injection reserve.
#[derive(Clone, Copy)]
pub struct InjectionBudget<'a> {
    /// The request format.
    pub format: Format,
    /// The token counter the render uses.
    pub meter: &'a dyn TokenMeter,
    /// The policy's injection reserve.
    pub reserve: u64,
}

impl std::fmt::Debug for InjectionBudget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InjectionBudget")
            .field("format", &self.format)
            .field("meter", &self.meter.name())
            .field("reserve", &self.reserve)
            .finish()
    }
}

impl InjectionBudget<'_> {
    /// Tokens of one injection: the user message the render pipeline sends for it.
    pub fn tokens(&self, content: &str) -> u64 {
        let msg = Msg::User {
            content: MessageContent::Text(content.to_owned()),
            name: None,
        };
        self.format.msg_tokens(&msg, self.meter)
    }

    /// Tokens of all injections.
    pub fn total(&self, items: &[Injection]) -> u64 {
        items.iter().map(|i| self.tokens(&i.content)).sum()
    }

    /// Checks the injections after `hook` ran; returns their total.
    fn check(&self, hook: &str, items: &[Injection]) -> Result<u64> {
        let mut total = 0;
        let mut own = 0;
        for item in items {
            let t = self.tokens(&item.content);
            total += t;
            let labelled = item
                .hook
                .strip_prefix(hook)
                .is_some_and(|rest| rest.starts_with(':'));
            if item.hook == hook || labelled {
                own += t;
            }
        }
        if total > self.reserve {
            return Err(RuntimeError::InjectionOverflow {
                hook: hook.to_owned(),
                hook_tokens: own,
                tokens: total,
                reserve: self.reserve,
            });
        }
        Ok(total)
    }
}

/// What the pre-hooks decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Render with these injections.
    Proceed(Vec<Injection>),
    /// Do not render: a hook halted the turn.
    Halt(Halt),
}

/// The pre-hooks' decision and every hook's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreRun {
    /// Proceed or halt.
    pub decision: Decision,
    /// One entry per hook that was started, in declaration order.
    pub outcomes: Vec<HookOutcome>,
}

enum Stage {
    Ordered(Arc<dyn PreHook>),
    Parallel(ParallelGroup),
}

/// The hooks of an agent, in declaration order.
#[derive(Default)]
pub struct Hooks {
    stages: Vec<Stage>,
    post: Vec<Arc<dyn PostHook>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|s| match s {
                Stage::Ordered(h) => format!("ordered {}", h.name()),
                Stage::Parallel(g) => format!("parallel {g:?}"),
            })
            .collect();
        let post: Vec<&str> = self.post.iter().map(|h| h.name()).collect();
        f.debug_struct("Hooks")
            .field("stages", &stages)
            .field("post", &post)
            .finish()
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an ordered pre-hook.
    pub fn pre(mut self, hook: impl PreHook + 'static) -> Self {
        self.stages.push(Stage::Ordered(Arc::new(hook)));
        self
    }

    /// Adds a parallel group of append-only pre-hooks.
    pub fn parallel(mut self, group: ParallelGroup) -> Self {
        self.stages.push(Stage::Parallel(group));
        self
    }

    /// Adds a post-hook.
    pub fn post(mut self, hook: impl PostHook + 'static) -> Self {
        self.post.push(Arc::new(hook));
        self
    }

    /// Runs the pre-hooks in declaration order, starting from `initial` injections.
    ///
    /// Returns the decision and every hook's outcome; an injection overflow is an error naming
    /// the hook that crossed the reserve (its content is not silently truncated).
    pub fn run_pre(
        &self,
        turn: &TurnView,
        initial: &[Injection],
        budget: &InjectionBudget<'_>,
    ) -> Result<PreRun> {
        let mut draft = Draft {
            items: initial.to_vec(),
            current: String::new(),
        };
        if let Some(last) = initial.last() {
            budget.check(&last.hook, initial)?;
        }
        let mut outcomes = Vec::new();
        let shared_turn = Arc::new(turn.clone());
        for stage in &self.stages {
            match stage {
                Stage::Ordered(hook) => {
                    let name = hook.name().to_owned();
                    // The hook works on a copy: a failure or panic leaves no partial change.
                    let mut work = Draft {
                        items: draft.items.clone(),
                        current: name.clone(),
                    };
                    let result = catch_unwind(AssertUnwindSafe(|| hook.run(turn, &mut work)));
                    let failure = match result {
                        Ok(Ok(Flow::Continue)) => None,
                        Ok(Ok(Flow::Halt(reason))) => {
                            outcomes.push(HookOutcome {
                                hook: name.clone(),
                                stage: HookStage::Ordered,
                                status: HookStatus::Halted {
                                    reason: reason.clone(),
                                },
                            });
                            return Ok(PreRun {
                                decision: Decision::Halt(Halt { hook: name, reason }),
                                outcomes,
                            });
                        }
                        Ok(Err(e)) => Some(HookStatus::Failed {
                            error: e.to_string(),
                        }),
                        Err(payload) => Some(HookStatus::Panicked {
                            message: panic_message(payload.as_ref()),
                        }),
                    };
                    if let Some(status) = failure {
                        let reason = match &status {
                            HookStatus::Failed { error } => format!("ordered hook failed: {error}"),
                            HookStatus::Panicked { message } => {
                                format!("ordered hook panicked: {message}")
                            }
                            _ => String::new(),
                        };
                        outcomes.push(HookOutcome {
                            hook: name.clone(),
                            stage: HookStage::Ordered,
                            status,
                        });
                        return Ok(PreRun {
                            decision: Decision::Halt(Halt { hook: name, reason }),
                            outcomes,
                        });
                    }
                    let tokens = budget.check(&name, &work.items)?;
                    draft.items = work.items;
                    outcomes.push(HookOutcome {
                        hook: name,
                        stage: HookStage::Ordered,
                        status: HookStatus::Ran { tokens },
                    });
                }
                Stage::Parallel(group) => {
                    let so_far: Arc<[Injection]> = draft.items.clone().into();
                    let results = parallel::run(group, &shared_turn, &so_far);
                    for ((hook, _), result) in group.hooks.iter().zip(results) {
                        let name = hook.name().to_owned();
                        let status = match result {
                            Ok(texts) => {
                                draft
                                    .items
                                    .extend(texts.into_iter().map(|content| Injection {
                                        hook: name.clone(),
                                        content,
                                    }));
                                HookStatus::Ran {
                                    tokens: budget.check(&name, &draft.items)?,
                                }
                            }
                            Err(status) => status,
                        };
                        outcomes.push(HookOutcome {
                            hook: name,
                            stage: HookStage::Parallel,
                            status,
                        });
                    }
                }
            }
        }
        Ok(PreRun {
            decision: Decision::Proceed(draft.items),
            outcomes,
        })
    }

    /// Runs the post-hooks after the assistant message; see [`PostTurn`].
    pub fn run_post(&self, turn: &PostTurn<'_>) -> PostRun {
        post::run(&self.post, turn)
    }
}
