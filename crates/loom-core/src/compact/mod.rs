//! Step compaction (seed 003): the newest steps in full, older ones as one-line summaries grouped
//! by category, the oldest dropped and counted, and every failure kept with its error.
//!
//! Two compactors share the grouping and the text formats:
//! - [`compact`] is faithful to the seed: it recomputes the tiers from the whole history on each
//!   call. Its text is the seed's `format_for_prompt`.
//! - [`CompactionState::advance`] / [`StableCompactor`] is cache-stable, the mode the render
//!   pipeline uses: decisions are taken at compaction points and stored, groups are closed when
//!   formed, and between points the rendered history only grows at its end.
//!
//! Neither counts tokens: the token trigger takes the caller's per-step counts, so this crate
//! stays free of tokenizers.

mod config;
mod format;
mod group;
mod seed;
mod spawn;
mod stable;
#[cfg(test)]
pub(crate) mod testing;

pub use config::{
    auto_tune, auto_tune_config, CompactionConfig, LongTask, Preset, StableOptions, Trigger,
};
pub use format::{
    build_react_prompt, build_react_prompt_stable, format_for_prompt, format_full_step,
    ReactPrompt, ReactStep,
};
/// The grouping itself, for the render pipeline's compact block.
pub(crate) use group::blocks as group_blocks;
pub use group::CompactBlock;
pub use seed::{compact, should_compact, CompactedHistory, Omitted, StepTokens, TriggerReason};
pub use spawn::{compact_for_spawn, SpawnContext};
pub use stable::{CompactionPoint, CompactionState, StableCompactor, StableHistory};
