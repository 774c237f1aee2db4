//! The TaskContextManager (seed 002) as a thin layer over the render pipeline's pieces: the same
//! neutral messages, provider formats, token metering, observations and injections.
//!
//! `build_context(task, now_ms)`:
//! 1. collects records from the sources (L1 memory, the event bus), once per task id, in time
//!    order, keeping only the current session's;
//! 2. converts them with the [`MessageConverter`] (tool results as observations by default);
//! 3. selects direct messages for this agent ([`direct`] rules: target, session, TTL in UTC,
//!    priority then newest, limit after sorting) and queries the knowledge base;
//! 4. fits everything into `max_tokens` with the exact [`Shares`] ([`budget`]): memory by recency
//!    truncation (the system message and the newest messages stay), direct messages and snippets
//!    best first, minimum counts honoured while the total allows.
//!
//! Layout follows seed 004 rather than seed 002's order: system prompt → memory → current task →
//! per-turn content (direct messages, knowledge) as injections at the very end, so the front of
//! the request stays cacheable.

mod budget;
mod convert;
mod direct;
mod item;
mod source;
mod time;

use std::collections::BTreeSet;
use std::sync::Arc;

use loom_core::render::{Format, Injection, Msg, Request, TokenMeter, ToolSpec};
use loom_core::MessageContent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, RuntimeError};
use crate::hooks::InjectionBudget;

pub use budget::{Allocation, MinItems, Shares};
pub use convert::{ConvertedMsg, MessageConverter, ToolResults};
pub use item::{action, TaskItem};
pub use source::{
    rank, ContextSource, EventBus, KnowledgeBase, KnowledgeHook, KnowledgeQuery, MemorySource,
    Snippet, SourceQuery,
};
pub use time::{parse_utc_ms, utc_ms};

/// Why a record is not in the context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DropReason {
    /// A direct message past its TTL.
    Expired,
    /// A direct message for another agent.
    OtherTarget,
    /// A record of another session.
    OtherSession,
    /// A direct message past `max_direct_messages` (after sorting).
    OverLimit,
    /// It did not fit its category's share (nor the leftover tokens).
    OverShare,
    /// An older memory message cut by recency truncation.
    Truncated,
    /// A tool result left out by the seed's omit rule.
    Omitted,
    /// An action the converter does not know.
    UnknownAction,
    /// No `parameters.content`.
    NoContent,
    /// A second record with the same task id.
    Duplicate,
    /// A malformed field.
    Invalid {
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// A record left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Task id, or `knowledge:<source>` for a snippet.
    pub item: String,
    /// Why.
    pub reason: DropReason,
}

/// Tokens used per category.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Used {
    /// Memory messages.
    pub memory: u64,
    /// Direct messages.
    pub direct_messages: u64,
    /// Knowledge snippets.
    pub knowledge: u64,
}

/// What went into a context and what did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextReport {
    /// How the budget was divided.
    pub allocation: Allocation,
    /// What each category used.
    pub used: Used,
    /// Tokens of the whole request (overhead, system, memory, task, injections).
    pub total_tokens: u64,
    /// Task ids rendered, in order.
    pub kept: Vec<String>,
    /// Everything left out.
    pub dropped: Vec<Dropped>,
}

/// A built context.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContext {
    /// System message, memory, current task.
    pub messages: Vec<Msg>,
    /// Direct messages then knowledge snippets, placed after the task.
    pub injections: Vec<Injection>,
    /// Accounting.
    pub report: ContextReport,
}

/// Configuration of a [`TaskContextManager`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextConfig {
    /// The agent the context is for (direct-message target).
    pub agent: String,
    /// Its node id, when messages may target the node rather than the agent.
    #[serde(default)]
    pub node_id: Option<String>,
    /// The system prompt.
    pub system_prompt: String,
    /// The hard limit of the whole request.
    pub max_tokens: u64,
    /// Tokens set aside for the system message (applied in full). Default: 512.
    #[serde(default = "default_system_reserve")]
    pub system_reserve: u64,
    /// Shares of the rest.
    #[serde(default)]
    pub shares: Shares,
    /// Minimum items per category.
    #[serde(default)]
    pub min_items: MinItems,
    /// Most direct messages, applied after sorting. Default: 5.
    #[serde(default = "default_max_direct")]
    pub max_direct_messages: usize,
    /// Most knowledge snippets. Default: 3.
    #[serde(default = "default_knowledge_limit")]
    pub knowledge_limit: usize,
    /// Tool results as observations (default) or omitted (the seed's rule).
    #[serde(default)]
    pub tool_results: ToolResults,
    /// The provider format tokens are counted for.
    #[serde(default)]
    pub format: Format,
    /// Tools offered (counted in the overhead).
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
}

fn default_system_reserve() -> u64 {
    512
}
fn default_max_direct() -> usize {
    5
}
fn default_knowledge_limit() -> usize {
    3
}

impl ContextConfig {
    /// The defaults for an agent, its system prompt and a limit.
    pub fn new(
        agent: impl Into<String>,
        system_prompt: impl Into<String>,
        max_tokens: u64,
    ) -> Self {
        Self {
            agent: agent.into(),
            node_id: None,
            system_prompt: system_prompt.into(),
            max_tokens,
            system_reserve: default_system_reserve(),
            shares: Shares::default(),
            min_items: MinItems::default(),
            max_direct_messages: default_max_direct(),
            knowledge_limit: default_knowledge_limit(),
            tool_results: ToolResults::default(),
            format: Format::default(),
            tools: Vec::new(),
        }
    }
}

/// See the module documentation.
pub struct TaskContextManager {
    config: ContextConfig,
    converter: MessageConverter,
    sources: Vec<Arc<dyn ContextSource>>,
    knowledge: Option<Arc<dyn KnowledgeBase>>,
    meter: Arc<dyn TokenMeter + Send + Sync>,
}

impl std::fmt::Debug for TaskContextManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContextManager")
            .field("config", &self.config)
            .field(
                "sources",
                &self.sources.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("knowledge", &self.knowledge.as_ref().map(|k| k.name()))
            .field("meter", &self.meter.name())
            .finish()
    }
}

fn text_msg(text: &str) -> Msg {
    Msg::User {
        content: MessageContent::Text(text.to_owned()),
        name: None,
    }
}

impl TaskContextManager {
    /// A manager; the configuration is checked here, naming the field that is wrong.
    pub fn new(config: ContextConfig, meter: Arc<dyn TokenMeter + Send + Sync>) -> Result<Self> {
        budget::validate_shares(&config.shares)?;
        if config.system_reserve >= config.max_tokens {
            return Err(RuntimeError::config(
                "system_reserve",
                format!(
                    "{} leaves nothing of max_tokens {}",
                    config.system_reserve, config.max_tokens
                ),
            ));
        }
        let over = |field: &str, min: usize, max_field: &str, max: usize| {
            (min > max).then(|| {
                RuntimeError::config(
                    format!("min_items.{field}"),
                    format!("{min} is more than {max_field} {max}"),
                )
            })
        };
        if let Some(e) = over(
            "direct_messages",
            config.min_items.direct_messages,
            "max_direct_messages",
            config.max_direct_messages,
        )
        .or_else(|| {
            over(
                "knowledge",
                config.min_items.knowledge,
                "knowledge_limit",
                config.knowledge_limit,
            )
        }) {
            return Err(e);
        }
        let system_tokens = config
            .format
            .msg_tokens(&Msg::System(config.system_prompt.as_str().into()), &*meter);
        if system_tokens > config.system_reserve {
            return Err(RuntimeError::config(
                "system_reserve",
                format!(
                    "the system prompt needs {system_tokens} tokens, over the reserve of {}",
                    config.system_reserve
                ),
            ));
        }
        let converter = MessageConverter {
            tool_results: config.tool_results,
            ..MessageConverter::default()
        };
        Ok(Self {
            config,
            converter,
            sources: Vec::new(),
            knowledge: None,
            meter,
        })
    }

    /// Adds a source (read in the order added).
    pub fn source(mut self, source: Arc<dyn ContextSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Sets the knowledge base.
    pub fn knowledge_base(mut self, kb: Arc<dyn KnowledgeBase>) -> Self {
        self.knowledge = Some(kb);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ContextConfig {
        &self.config
    }

    fn overhead(&self) -> u64 {
        let fmt = self.config.format;
        let stub = Request {
            model: String::new(),
            tools: self.config.tools.clone(),
            messages: Vec::new(),
            stable_len: 0,
            max_output_tokens: 0,
        };
        fmt.overhead_tokens(&fmt.tools(&stub), &*self.meter)
    }

    /// Builds the context for `task` at `now_ms` (UTC milliseconds).
    pub fn build_context(&self, task: &TaskItem, now_ms: i64) -> Result<TaskContext> {
        let cfg = &self.config;
        let fmt = cfg.format;
        let meter: &dyn TokenMeter = &*self.meter;
        let inj = InjectionBudget {
            format: fmt,
            meter,
            reserve: u64::MAX,
        };
        let session = task.session_id.as_deref();
        let query = SourceQuery {
            agent: &cfg.agent,
            session,
            now_ms,
        };

        // 1. Collect, once per id, in time order (ties keep source order).
        let mut dropped = Vec::new();
        let mut seen = BTreeSet::from([task.task_id.clone()]);
        let mut items: Vec<TaskItem> = Vec::new();
        for source in &self.sources {
            let got = source.collect(&query).map_err(|e| RuntimeError::Source {
                name: source.name().to_owned(),
                source: e,
            })?;
            for item in got {
                if seen.insert(item.task_id.clone()) {
                    items.push(item);
                } else {
                    dropped.push(Dropped {
                        item: item.task_id,
                        reason: DropReason::Duplicate,
                    });
                }
            }
        }
        items.sort_by_key(|i| i.created_ms);
        let (messages, memory): (Vec<&TaskItem>, Vec<&TaskItem>) =
            items.iter().partition(|i| i.action == action::MESSAGE);
        let memory: Vec<&TaskItem> = memory
            .into_iter()
            .filter(|i| match session {
                Some(s) if i.session_id.as_deref() != Some(s) => {
                    dropped.push(Dropped {
                        item: i.task_id.clone(),
                        reason: DropReason::OtherSession,
                    });
                    false
                }
                _ => true,
            })
            .collect();

        // 2. Convert.
        let converted = self.converter.convert(&memory, &mut dropped);

        // 3. Direct messages and knowledge, best first.
        let who = direct::Audience {
            agent: &cfg.agent,
            node_id: cfg.node_id.as_deref(),
            session,
            now_ms,
            limit: cfg.max_direct_messages,
        };
        let dms = direct::select(&messages, &who, &mut dropped);
        let task_text = task
            .content()
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                RuntimeError::config("task.parameters.content", "the current task has no content")
            })?;
        let snippets = match &self.knowledge {
            Some(kb) => source::rank(kb.query(task_text, cfg.knowledge_limit).map_err(|e| {
                RuntimeError::Source {
                    name: kb.name().to_owned(),
                    source: e,
                }
            })?),
            None => Vec::new(),
        };

        // 4. Fit.
        let system_msg = Msg::System(cfg.system_prompt.as_str().into());
        let task_msg = text_msg(task_text);
        let system_tokens = fmt.msg_tokens(&system_msg, meter);
        let task_tokens = fmt.msg_tokens(&task_msg, meter);
        let overhead = self.overhead();
        let alloc = budget::allocate(
            &task.task_id,
            cfg.max_tokens,
            cfg.system_reserve,
            &cfg.shares,
            system_tokens,
            overhead,
            task_tokens,
        )?;

        let mem_tokens: Vec<u64> = converted
            .iter()
            .map(|c| fmt.msg_tokens(&c.msg, meter))
            .collect();
        let mut used = Used::default();
        // Recency truncation: the newest messages that fit, contiguous.
        let mut start = converted.len();
        while start > 0 && used.memory + mem_tokens[start - 1] <= alloc.memory {
            start -= 1;
            used.memory += mem_tokens[start];
        }

        let dm_texts: Vec<(String, String)> = dms
            .iter()
            .map(|(item, p)| (item.task_id.clone(), direct::injected_text(item, *p)))
            .collect();
        let kb_texts: Vec<(String, String)> = snippets
            .iter()
            .take(cfg.knowledge_limit)
            .map(|s| (format!("knowledge:{}", s.source), s.injected_text()))
            .collect();
        let fill = |texts: &[(String, String)], share: u64, used: &mut u64| -> Vec<bool> {
            texts
                .iter()
                .map(|(_, t)| {
                    let tokens = inj.tokens(t);
                    let fits = *used + tokens <= share;
                    if fits {
                        *used += tokens;
                    }
                    fits
                })
                .collect()
        };
        let mut dm_kept = fill(&dm_texts, alloc.direct_messages, &mut used.direct_messages);
        let mut kb_kept = fill(&kb_texts, alloc.knowledge, &mut used.knowledge);

        // Minimum counts, from what the shares left unused; the total never passes max_tokens.
        let total_used = |u: &Used| u.memory + u.direct_messages + u.knowledge;
        while converted.len() - start < cfg.min_items.memory
            && start > 0
            && total_used(&used) + mem_tokens[start - 1] <= alloc.base
        {
            start -= 1;
            used.memory += mem_tokens[start];
        }
        let top_up = |texts: &[(String, String)],
                      kept: &mut [bool],
                      min: usize,
                      used: &mut Used,
                      which: fn(&mut Used) -> &mut u64| {
            for (i, (_, t)) in texts.iter().enumerate() {
                if kept.iter().filter(|k| **k).count() >= min {
                    break;
                }
                let tokens = inj.tokens(t);
                if !kept[i] && total_used(used) + tokens <= alloc.base {
                    kept[i] = true;
                    *which(used) += tokens;
                }
            }
        };
        top_up(
            &dm_texts,
            &mut dm_kept,
            cfg.min_items.direct_messages,
            &mut used,
            |u| &mut u.direct_messages,
        );
        top_up(
            &kb_texts,
            &mut kb_kept,
            cfg.min_items.knowledge,
            &mut used,
            |u| &mut u.knowledge,
        );

        // Assemble and account.
        for c in &converted[..start] {
            dropped.extend(c.items.iter().map(|id| Dropped {
                item: id.clone(),
                reason: DropReason::Truncated,
            }));
        }
        let mut kept_ids: Vec<String> = Vec::new();
        let mut out = vec![system_msg];
        for c in &converted[start..] {
            out.push(c.msg.clone());
            kept_ids.extend(c.items.iter().cloned());
        }
        out.push(task_msg);
        kept_ids.push(task.task_id.clone());
        let mut injections = Vec::new();
        for (hook, texts, kept) in [
            ("direct_messages", &dm_texts, &dm_kept),
            ("knowledge", &kb_texts, &kb_kept),
        ] {
            for ((id, text), keep) in texts.iter().zip(kept.iter()) {
                if *keep {
                    kept_ids.push(id.clone());
                    injections.push(Injection {
                        hook: hook.to_owned(),
                        content: text.clone(),
                    });
                } else {
                    dropped.push(Dropped {
                        item: id.clone(),
                        reason: DropReason::OverShare,
                    });
                }
            }
        }
        let total_tokens = overhead + system_tokens + task_tokens + total_used(&used);
        Ok(TaskContext {
            messages: out,
            injections,
            report: ContextReport {
                allocation: alloc,
                used,
                total_tokens,
                kept: kept_ids,
                dropped,
            },
        })
    }

    /// The neutral request for a built context: its messages, then its injections as user
    /// messages at the end; the system message is the stable prefix.
    pub fn request(&self, ctx: &TaskContext, model: &str, max_output_tokens: u64) -> Request {
        let mut messages = ctx.messages.clone();
        messages.extend(ctx.injections.iter().map(|i| text_msg(&i.content)));
        Request {
            model: model.to_owned(),
            tools: self.config.tools.clone(),
            messages,
            stable_len: 1,
            max_output_tokens,
        }
    }

    /// The provider request body for a built context.
    pub fn body(&self, ctx: &TaskContext, model: &str, max_output_tokens: u64) -> Value {
        self.config
            .format
            .body(&self.request(ctx, model, max_output_tokens))
    }
}
