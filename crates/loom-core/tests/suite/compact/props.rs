//! Properties of both compactors over random histories and random configurations: the tiers
//! account for every step, no failure is ever hidden, and the cache-stable text only grows at
//! its end between compaction points while closed blocks never change.

use std::collections::BTreeMap;

use loom_core::{
    compact, CompactBlock, CompactionConfig, ContentStats, StableCompactor, Step, ToolKind,
};
use proptest::prelude::*;

fn kind(k: u8) -> ToolKind {
    match k % 7 {
        0 => ToolKind::ReadFile,
        1 => ToolKind::WriteFile,
        2 => ToolKind::Shell,
        3 => ToolKind::WebSearch,
        4 => ToolKind::Navigate,
        5 => ToolKind::Custom("lookup".into()),
        _ => ToolKind::Unknown,
    }
}

fn steps(spec: &[(u8, bool, u16)]) -> Vec<Step> {
    spec.iter()
        .enumerate()
        .map(|(i, &(k, ok, bytes))| Step {
            id: format!("step_{:03}", i + 1),
            call_id: format!("c{i}"),
            call_seq: 2 * i as u64 + 2,
            result_seq: 2 * i as u64 + 3,
            tool_name: format!("tool_{}", k % 9),
            kind: kind(k),
            minimal_args: BTreeMap::new(),
            observation: format!("did {i}"),
            outcome_ref: None,
            blob: None,
            success: ok,
            error: (!ok).then(|| format!("error number {i}")),
            timestamp_ms: i as i64,
            stats: ContentStats::of(&vec![b'a'; usize::from(bytes)]),
            results: (k % 2 == 0).then_some(u64::from(bytes % 20)),
            facts: BTreeMap::new(),
        })
        .collect()
}

fn config() -> impl Strategy<Value = CompactionConfig> {
    (
        0usize..8,
        0usize..25,
        any::<bool>(),
        any::<bool>(),
        1usize..8,
        0u8..=100,
    )
        .prop_map(|(recent, max, group, preserve, chunk, drop)| {
            let mut c = CompactionConfig {
                recent_window: recent,
                max_compact_steps: max,
                group_similar: group,
                preserve_failures: preserve,
                ..CompactionConfig::default()
            };
            c.stable.chunk = chunk;
            c.stable.drop_to_percent = drop;
            c.long_task.threshold = 40;
            c
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn seed_compactor_accounts_for_every_step(
        spec in prop::collection::vec((any::<u8>(), prop::bool::weighted(0.8), any::<u16>()), 0..80),
        config in config(),
        max_steps in prop::option::of(0usize..40),
    ) {
        let steps = steps(&spec);
        let h = compact(&steps, &config, max_steps);
        prop_assert_eq!(
            h.omitted.count + h.omitted.failures.len() + h.compacted_steps() + h.recent.len(),
            steps.len()
        );
        let text = h.format_for_prompt();
        if config.preserve_failures {
            for s in steps.iter().filter(|s| !s.success) {
                let shown = format!("[{}] ✗", s.id);
                prop_assert!(text.contains(&shown), "{} hidden:\n{}", s.id, text);
            }
        }
        if steps.iter().all(|s| !s.success) {
            prop_assert_eq!(h.omitted.end, 0);
        }
    }

    #[test]
    fn stable_compactor_appends_between_points(
        spec in prop::collection::vec((any::<u8>(), prop::bool::weighted(0.8), any::<u16>()), 0..80),
        config in config(),
    ) {
        let steps = steps(&spec);
        let preserve = config.preserve_failures;
        let mut c = StableCompactor::new(config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut before = String::new();
        let mut blocks: Vec<CompactBlock> = Vec::new();
        for n in 1..=steps.len() {
            let point = c.update(&steps[..n], None).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let text = c.render(&steps[..n]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            if point.is_none() {
                prop_assert!(text.starts_with(&before), "call {}:\n{}\n---\n{}", n, before, text);
            }
            // A block that is still there is exactly as it was closed.
            for b in &c.state().blocks {
                if let Some(old) = blocks.iter().find(|o| o.start == b.start) {
                    prop_assert_eq!(old, b);
                }
            }
            blocks.clone_from(&c.state().blocks);
            before = text;
        }
        let s = c.state();
        let in_blocks: usize = s.blocks.iter().map(CompactBlock::len).sum();
        prop_assert_eq!(
            s.omitted.count + s.omitted.failures.len() + in_blocks + (steps.len() - s.boundary),
            steps.len()
        );
        if preserve {
            for f in steps.iter().filter(|s| !s.success) {
                let shown = format!("[{}] ✗", f.id);
                prop_assert!(before.contains(&shown), "{} hidden", f.id);
            }
        }
    }
}
