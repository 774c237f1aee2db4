//! Seed 003's savings table, measured on `../shared/traces`: tokens of a step history without
//! and with compaction, at 10, 20, 50 and 100 steps; plus the seed's 20-step research example and
//! how often the cache-stable compactor's prompt extends the previous call's.
//!
//! Run: `cargo run --release -p loom-core --example compact_savings`. Tokens are exact o200k_base
//! counts (`loom-tokens`). The history is the ReAct text of `build_react_prompt` with empty
//! system, goal and tools parts, so only the steps are counted.

use std::collections::BTreeMap;
use std::io::Write as _;

use anyhow::Result;
use loom_core::{
    build_react_prompt, build_react_prompt_stable, compact, CompactionConfig, Preset, ReactPrompt,
    ReactStep, StableCompactor,
};
use loom_tokens::Encoding;

#[path = "../tests/suite/compact/trajectory.rs"]
mod trajectory;

#[path = "../tests/suite/compact/research_fixture.rs"]
mod research_fixture;

use trajectory::{load_all, Trajectory};

fn react(turns: &[trajectory::Turn]) -> Vec<ReactStep<'_>> {
    turns
        .iter()
        .map(|x| ReactStep {
            thought: &x.thought,
            action: &x.action,
            arguments: &x.arguments,
            output: &x.output,
            step: &x.step,
        })
        .collect()
}

fn tokens(text: &str) -> u64 {
    Encoding::O200kBase.count(text) as u64
}

/// Token counts of one trajectory's first `n` steps.
struct Row {
    full: u64,
    seed: u64,
    stable: u64,
}

fn measure(t: &Trajectory, n: usize) -> Result<Row> {
    let prompt = ReactPrompt::default();
    let turns = react(&t.turns[..n]);
    let steps: Vec<_> = t.turns[..n].iter().map(|x| x.step.clone()).collect();
    let full = tokens(&build_react_prompt(&prompt, &turns, None));
    let research = CompactionConfig::preset(Preset::LongResearch);
    let seed = tokens(&build_react_prompt(&prompt, &turns, Some(&research)));
    let mut c = StableCompactor::new(CompactionConfig::default())?;
    for k in 1..=n {
        c.update(&steps[..k], None)?;
    }
    let stable = tokens(&build_react_prompt_stable(
        &prompt,
        &turns,
        &c.history(&steps)?,
    ));
    Ok(Row { full, seed, stable })
}

/// Prefix-cache accounting over a sequence of calls.
#[derive(Debug, Default)]
struct Replay {
    calls: u64,
    extensions: u64,
    uncached: u64,
}

impl Replay {
    fn call(&mut self, prev: &str, text: &str) {
        self.calls += 1;
        let common = prev
            .bytes()
            .zip(text.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        if common == prev.len() {
            self.extensions += 1;
        }
        // Back to a char boundary, then count what a prefix cache cannot serve.
        let cut = (0..=common)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        self.uncached += tokens(&text[cut..]);
    }
}

fn pct(saved: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * (1.0 - saved as f64 / of as f64)
    }
}

fn source(id: &str) -> &str {
    id.split('/').next().unwrap_or(id)
}

fn main() -> Result<()> {
    let all = load_all()?;
    let mut out = std::io::stdout().lock();

    writeln!(
        out,
        "## Savings by history length (mean tokens per trajectory)\n"
    )?;
    writeln!(
        out,
        "| steps | trajectories | sources | no compaction | seed-faithful (long-research) | saved | cache-stable (defaults) | saved |"
    )?;
    writeln!(out, "|---:|---:|---|---:|---:|---:|---:|---:|")?;
    for n in [5usize, 10, 20, 50, 100] {
        let chosen: Vec<&Trajectory> = all.iter().filter(|t| t.turns.len() >= n).collect();
        if chosen.is_empty() {
            continue;
        }
        let mut sources: BTreeMap<&str, usize> = BTreeMap::new();
        let (mut full, mut seed, mut stable) = (0u64, 0u64, 0u64);
        for t in &chosen {
            let r = measure(t, n)?;
            full += r.full;
            seed += r.seed;
            stable += r.stable;
            *sources.entry(source(&t.id)).or_default() += 1;
        }
        let k = chosen.len() as u64;
        let names: Vec<String> = sources.iter().map(|(s, c)| format!("{s} {c}")).collect();
        writeln!(
            out,
            "| {n} | {k} | {} | {} | {} | {:.0}% | {} | {:.0}% |",
            names.join(", "),
            full / k,
            seed / k,
            pct(seed, full),
            stable / k,
            pct(stable, full)
        )?;
    }

    writeln!(
        out,
        "\n## Cache behaviour: every call of every trajectory, history part of the ReAct prompt\n"
    )?;
    writeln!(
        out,
        "Uncached tokens: for each call, the tokens after the first byte that differs from the previous call's prompt (what a prefix cache cannot serve).\n"
    )?;
    writeln!(
        out,
        "| preset | calls | cache-stable: prefix extensions | compaction points | uncached tokens, total | seed-faithful: prefix extensions | uncached tokens, total |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|")?;
    for preset in [
        Preset::InteractiveChat,
        Preset::LongResearch,
        Preset::Debugging,
    ] {
        let config = CompactionConfig::preset(preset);
        let mut stable = Replay::default();
        let mut seed = Replay::default();
        let mut points = 0u64;
        for t in &all {
            let steps: Vec<_> = t.steps();
            let turns = react(&t.turns);
            let mut c = StableCompactor::new(config.clone())?;
            let (mut prev_stable, mut prev_seed) = (String::new(), String::new());
            for k in 1..=steps.len() {
                if c.update(&steps[..k], None)?.is_some() {
                    points += 1;
                }
                let text = build_react_prompt_stable(
                    &ReactPrompt::default(),
                    &turns[..k],
                    &c.history(&steps[..k])?,
                );
                stable.call(&prev_stable, &text);
                prev_stable = text;
                let text = build_react_prompt(&ReactPrompt::default(), &turns[..k], Some(&config));
                seed.call(&prev_seed, &text);
                prev_seed = text;
            }
        }
        writeln!(
            out,
            "| {} | {} | {} | {points} | {} | {} | {} |",
            preset.name(),
            stable.calls,
            stable.extensions,
            stable.uncached,
            seed.extensions,
            seed.uncached
        )?;
    }

    writeln!(
        out,
        "\n## Long histories: every trace's steps concatenated (the bench's histories)\n"
    )?;
    writeln!(
        out,
        "| steps | failed | seed-faithful listing, tokens | cache-stable listing at the last call, tokens | of which preserved failure lines |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|")?;
    let pool: Vec<_> = all.iter().flat_map(Trajectory::steps).collect();
    for n in [100usize, 1_000, 10_000] {
        let steps: Vec<_> = (0..n)
            .map(|i| {
                let mut s = pool[i % pool.len()].clone();
                s.id = format!("step_{:03}", i + 1);
                s
            })
            .collect();
        let failed = steps.iter().filter(|s| !s.success).count();
        let config = CompactionConfig::default();
        let seed = tokens(&compact(&steps, &config, None).format_for_prompt());
        let mut c = StableCompactor::new(config)?;
        for k in 1..=n {
            c.update(&steps[..k], None)?;
        }
        let failure_lines = c.state().omitted.failures.len()
            + c.state()
                .blocks
                .iter()
                .map(|b| b.failures.len())
                .sum::<usize>();
        let stable = tokens(&c.render(&steps)?);
        writeln!(
            out,
            "| {n} | {failed} | {seed} | {stable} | {failure_lines} |"
        )?;
    }

    let r = research_fixture::reduced();
    let turns = research_fixture::react(&r);
    let prompt = ReactPrompt::default();
    let research = CompactionConfig::preset(Preset::LongResearch);
    let full = tokens(&build_react_prompt(&prompt, &turns, None));
    let react_tokens = tokens(&build_react_prompt(&prompt, &turns, Some(&research)));
    let listing = tokens(&compact(&r.steps, &research, None).format_for_prompt());
    writeln!(out, "\n## The seed's 20-step research example\n")?;
    writeln!(out, "| history | tokens |")?;
    writeln!(out, "|---|---:|")?;
    writeln!(out, "| without compaction (seed: ~8,000) | {full} |")?;
    writeln!(
        out,
        "| compacted ReAct prompt, long-research preset (seed: 1,200) | {react_tokens} ({:.0}% saved) |",
        pct(react_tokens, full)
    )?;
    writeln!(out, "| compacted `format_for_prompt` listing | {listing} |")?;
    Ok(())
}
