//! Compaction of real trajectories: snapshots of exactly what the model reads, and the
//! invariants (prefix extension between compaction points, failures kept, steps counted) checked
//! on every trajectory of `../shared/traces`.

use anyhow::{bail, Result};
use loom_core::{
    build_react_prompt, build_react_prompt_stable, compact, CompactBlock, CompactionConfig, Preset,
    ReactPrompt, ReactStep, StableCompactor,
};

use super::trajectory::{load, load_all, Trajectory};

fn react(t: &Trajectory) -> Vec<ReactStep<'_>> {
    t.turns
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

/// The fixed parts of the prompt stand in as placeholders, so snapshots show the history.
const PROMPT: ReactPrompt<'static> = ReactPrompt {
    system: "<system prompt>",
    goal: "<goal>",
    tools: "<tools>",
};

fn find(file: &str, id_suffix: &str) -> Result<Trajectory> {
    match load(file)?.into_iter().find(|t| t.id.ends_with(id_suffix)) {
        Some(t) => Ok(t),
        None => bail!("{file} has no trajectory ending in {id_suffix}"),
    }
}

/// Everything one trajectory's snapshot shows: the seed-faithful listing, the cache-stable
/// listing after the last step, and the compacted ReAct prompt.
fn rendering(t: &Trajectory) -> Result<String> {
    let steps = t.steps();
    let config = CompactionConfig::default();
    let seed = compact(&steps, &config, None).format_for_prompt();
    let mut stable = StableCompactor::new(config)?;
    for n in 1..=steps.len() {
        stable.update(&steps[..n], None)?;
    }
    let stable_text = stable.history(&steps)?.render();
    let research = CompactionConfig::preset(Preset::LongResearch);
    let prompt = build_react_prompt(&PROMPT, &react(t), Some(&research));
    Ok(format!(
        "# {} ({} steps)\n\n## format_for_prompt (seed-faithful, defaults)\n\n{seed}\n## cache-stable, after the last step (defaults)\n\n{stable_text}\n## build_react_prompt (long-research preset)\n\n{prompt}\n",
        t.id,
        steps.len()
    ))
}

macro_rules! snapshot {
    ($name:ident, $file:expr, $id:expr) => {
        #[test]
        fn $name() -> Result<()> {
            let t = find($file, $id)?;
            insta::assert_snapshot!(stringify!($name), rendering(&t)?);
            Ok(())
        }
    };
}

snapshot!(
    miniswe_sympy_17318,
    "miniswe_gemini3pro_swebv.jsonl",
    "sympy__sympy-17318"
);
snapshot!(
    miniswe_django_11138_hundred_steps,
    "miniswe_gemini3pro_swebv.jsonl",
    "django__django-11138"
);
snapshot!(sweagent_katy, "sweagent_traj.jsonl", "ctf/crypto/katy.traj");
snapshot!(
    tau_airline_task2,
    "tau_bench_airline_gpt4o.jsonl",
    "task2-trial1"
);
snapshot!(
    browsergym_standard_laptop,
    "browsergym_workarena_gpt4o.jsonl",
    "order-standard-laptop_33"
);
snapshot!(fireact_q6, "fireact_hotpotqa__gpt35ft_run.jsonl", "/q6");

#[test]
fn every_trajectory_keeps_its_invariants() -> Result<()> {
    let all = load_all()?;
    assert!(
        all.len() > 800,
        "expected the whole trace set, got {}",
        all.len()
    );
    let mut points = 0usize;
    let mut extensions = 0usize;
    for t in &all {
        let steps = t.steps();
        let turns = react(t);
        for config in [
            CompactionConfig::default(),
            CompactionConfig::preset(Preset::LongResearch),
            CompactionConfig::preset(Preset::Debugging),
        ] {
            // Seed-faithful: the tiers add up, failures are all shown.
            let h = compact(&steps, &config, None);
            assert_eq!(
                h.omitted.count + h.omitted.failures.len() + h.compacted_steps() + h.recent.len(),
                steps.len(),
                "{}",
                t.id
            );
            let text = h.format_for_prompt();
            for s in steps.iter().filter(|s| !s.success) {
                assert!(
                    text.contains(&format!("[{}] ✗", s.id)),
                    "{}: {}",
                    t.id,
                    s.id
                );
            }

            // Cache-stable: replay call by call.
            let mut c = StableCompactor::new(config)?;
            let mut before: Option<(String, String)> = None;
            for n in 1..=steps.len() {
                let point = c.update(&steps[..n], None)?.is_some();
                let history = c.history(&steps[..n])?;
                let listing = history.render();
                let prompt = build_react_prompt_stable(&PROMPT, &turns[..n], &history);
                if let Some((l0, p0)) = &before {
                    if point {
                        points += 1;
                    } else {
                        assert!(listing.starts_with(l0.as_str()), "{} call {n}", t.id);
                        assert!(prompt.starts_with(p0.as_str()), "{} call {n}", t.id);
                        extensions += 1;
                    }
                }
                before = Some((listing, prompt));
            }
            let s = c.state();
            let in_blocks: usize = s.blocks.iter().map(CompactBlock::len).sum();
            assert_eq!(
                s.omitted.count + s.omitted.failures.len() + in_blocks + (steps.len() - s.boundary),
                steps.len(),
                "{}",
                t.id
            );
            if let Some((listing, _)) = &before {
                for f in steps.iter().filter(|s| !s.success) {
                    assert!(
                        listing.contains(&format!("[{}] ✗", f.id)),
                        "{}: {}",
                        t.id,
                        f.id
                    );
                }
            }
        }
    }
    // Points are the exception, appends the rule.
    assert!(
        points > 0 && extensions > 10 * points,
        "{points} points, {extensions} appends"
    );
    Ok(())
}
